//! What a service running the defaults rides out:
//!
//! - a broker outage of 30 minutes (time scaled down 1,000 times, the same number of attempts):
//!   no event becomes a dead letter, every one is delivered once the broker is back;
//! - two sends that hang for 30 s with a 60 s send timeout: the other events of both workers
//!   are published meanwhile (Postgres, MariaDB; a publisher that sends one message per call:
//!   with one that batches, a hung call holds its claim's events too);
//! - a hook that queries the pool inside `transactional_publish` on a pool of one connection:
//!   after the acquire timeout, an error that names the cause; nothing is written.
//!
//! A missing database fails the tests (see `tests/common`).
mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::wait_until;
use common::{count, new_event, TestContext};
use sea_orm::{ConnectOptions, Database, DatabaseConnection, EntityTrait, PaginatorTrait};
use sea_orm_outbox::{
    transactional_publish, CancellationToken, EventStatus, InMemoryPublisher, NewEvent,
    OutboxError, OutboxMessage, PublishError, Publisher, RetryPolicy, Worker, WorkerConfig,
};
use tokio::sync::Notify;

backend_tests!(
    a_30_minute_outage_leaves_no_dead_letter,
    a_hook_that_queries_the_pool_is_named
);

backend_test!(
    postgres_hung_sends_stop_no_worker: Postgres, "hung_sends" => hung_sends_stop_no_worker;
    mariadb_hung_sends_stop_no_worker: MySql, "hung_sends" => hung_sends_stop_no_worker;
);

/// Time in these tests runs this many times faster than in production.
const SCALE: u32 = 1000;

/// Refuses every send (retryably, as a broker that is down or busy does) until `up_at`, then
/// publishes.
struct Outage {
    inner: InMemoryPublisher,
    up_at: Instant,
}

#[async_trait]
impl Publisher for Outage {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if Instant::now() < self.up_at {
            return Err(PublishError::retryable("broker down"));
        }
        self.inner.publish(m).await
    }
}

/// The default retry policy with its times divided by [`SCALE`]: the same attempts.
fn scaled(p: RetryPolicy) -> RetryPolicy {
    RetryPolicy::new(p.max_retries, p.backoff_base / SCALE, p.max_backoff / SCALE)
}

/// Runs two workers with `policy` while the broker is down for `outage` from the first
/// attempt; returns the dead letters once nothing is left to send.
async fn dead_letters_after(ctx: &TestContext, policy: RetryPolicy, outage: Duration) -> u64 {
    const N: usize = 40;
    for i in 0..N {
        new_event(&ctx.db, &format!("ORD-OUT-{i}")).await;
    }
    let publisher = Arc::new(Outage {
        inner: InMemoryPublisher::new(),
        up_at: Instant::now() + outage,
    });
    let cancel = CancellationToken::new();
    let mut runs = Vec::new();
    for w in 0..2 {
        let worker = Worker::new(
            ctx.pool(5).await,
            publisher.clone(),
            common::test_config(&format!("outage-{w}")).retry(policy),
        )
        .expect("worker");
        let c = cancel.clone();
        runs.push(tokio::spawn(async move { worker.run(c).await }));
    }
    let settled = wait_until(
        outage + policy.budget() + Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            count(&ctx.db, EventStatus::Wait).await == 0
                && count(&ctx.db, EventStatus::Sending).await == 0
        },
    )
    .await;
    cancel.cancel();
    for r in runs {
        r.await.expect("worker task");
    }
    assert!(settled, "events still waiting or in flight");
    let delivered = publisher.inner.messages().len() as u64;
    let fail = count(&ctx.db, EventStatus::Fail).await;
    assert_eq!(delivered + fail, N as u64, "every event delivered or dead");
    assert_eq!(publisher.inner.duplicates(), 0);
    fail
}

/// The default retry budget outlasts a 30-minute broker outage: scaled down 1,000 times (the
/// back-offs in milliseconds, the outage 1.8 s, the same 12 retries), no event becomes a dead
/// letter and each is delivered once. The seed's 3 retries, scaled alike, do leave dead letters
/// after the same outage: the test tells the two apart.
async fn a_30_minute_outage_leaves_no_dead_letter(ctx: &TestContext) {
    let outage = Duration::from_secs(30 * 60) / SCALE;
    let defaults = RetryPolicy::default();
    assert!(defaults.budget() >= Duration::from_secs(30 * 60));
    assert_eq!(
        dead_letters_after(ctx, scaled(defaults), outage).await,
        0,
        "dead letters after a 30-minute outage with the default retry policy"
    );
    let seed = RetryPolicy::new(3, defaults.backoff_base, defaults.max_backoff);
    let ctx_seed = TestContext::new(ctx.backend, "outage_seed").await;
    let dead = dead_letters_after(&ctx_seed, scaled(seed), outage).await;
    ctx_seed.cleanup().await;
    assert!(dead > 0, "the seed's 3 retries outlast the outage too?");
}

/// Hangs the sends of the chosen keys until released (at most 30 s), publishes the rest.
struct Hanging {
    inner: InMemoryPublisher,
    hang: HashSet<String>,
    hung: Mutex<usize>,
    release: Notify,
}

#[async_trait]
impl Publisher for Hanging {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if self.hang.contains(&m.biz_no) {
            *self.hung.lock().expect("lock") += 1;
            let _ = tokio::time::timeout(Duration::from_secs(30), self.release.notified()).await;
        }
        self.inner.publish(m).await
    }
}

/// 500 events, two workers with the default settings and a 60 s send timeout, and two sends
/// that hang for 30 s: the 498 others are all published well before the hung sends end.
async fn hung_sends_stop_no_worker(ctx: &TestContext) {
    const N: usize = 500;
    let mut keys = Vec::new();
    for i in 0..N {
        let key = format!("ORD-HUNG-{i}");
        new_event(&ctx.db, &key).await;
        keys.push(key);
    }
    // Two of the first events: each worker's first claim holds one of them, or one holds both.
    let hang: HashSet<String> = [keys[3].clone(), keys[7].clone()].into();
    let publisher = Arc::new(Hanging {
        inner: InMemoryPublisher::new(),
        hang: hang.clone(),
        hung: Mutex::new(0),
        release: Notify::new(),
    });
    let cancel = CancellationToken::new();
    let mut runs = Vec::new();
    for w in 0..2 {
        let config = WorkerConfig::default()
            .completion(common::completion())
            .send_timeout(Duration::from_secs(60))
            .instance_id(format!("hung-{w}"));
        let worker = Worker::new(ctx.db.clone(), publisher.clone(), config).expect("worker");
        let c = cancel.clone();
        runs.push(tokio::spawn(async move { worker.run(c).await }));
    }
    let started = Instant::now();
    let others = wait_until(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async { publisher.inner.messages().len() == N - hang.len() },
    )
    .await;
    let took = started.elapsed();
    let hung = *publisher.hung.lock().expect("lock");
    // Let the hung sends finish, so that the workers can stop.
    publisher.release.notify_waiters();
    cancel.cancel();
    for r in runs {
        r.await.expect("worker task");
    }
    assert!(
        others,
        "{} of {} other events published after {took:?} while {hung} send(s) hung",
        publisher.inner.messages().len(),
        N - hang.len()
    );
    assert_eq!(hung, 2, "both hung sends were under way");
    println!(
        "figure: hung_sends backend={:?} others_published_in={took:?}",
        ctx.backend
    );
}

/// `orders` with an `after_save` hook that reads through [`APP_POOL`] (the application's pool)
/// instead of the connection the hook is handed.
mod pool_order {
    use sea_orm::entity::prelude::*;

    tokio::task_local! {
        /// The application's pool, as a hook might reach a global one.
        pub static APP_POOL: DatabaseConnection;
    }

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "orders")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub order_no: String,
        pub amount: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    #[async_trait::async_trait]
    impl ActiveModelBehavior for ActiveModel {
        async fn after_save<C: ConnectionTrait>(
            model: Model,
            _db: &C,
            _insert: bool,
        ) -> Result<Model, DbErr> {
            // The mistake: the pool, not `_db` (the transaction).
            let pool = APP_POOL.with(DatabaseConnection::clone);
            Entity::find().count(&pool).await?;
            Ok(model)
        }
    }
}

/// A hook that queries the pool, inside `transactional_publish` on a pool of one connection,
/// waits for the acquire timeout (1 s here) and gets
/// [`OutboxError::PoolUsedInsideTransaction`], whose message says what happened and how to fix
/// it; the transaction is rolled back.
async fn a_hook_that_queries_the_pool_is_named(ctx: &TestContext) {
    let mut options = ConnectOptions::new(ctx.url.clone());
    options
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(1))
        .sqlx_logging(false);
    let db: DatabaseConnection = Database::connect(options).await.expect("pool of one");
    let order = pool_order::ActiveModel {
        id: sea_orm::NotSet,
        order_no: sea_orm::ActiveValue::Set("ORD-HOOK-1".into()),
        amount: sea_orm::ActiveValue::Set(42),
    };
    let started = Instant::now();
    let result = pool_order::APP_POOL
        .scope(
            db.clone(),
            transactional_publish(&db, order, |o: &pool_order::Model| {
                Ok(NewEvent::raw(&o.order_no, "ORDER_CREATED", "{}"))
            }),
        )
        .await;
    let took = started.elapsed();
    let err = result.expect_err("the hook cannot get a connection");
    let text = err.to_string();
    assert!(
        matches!(err, OutboxError::PoolUsedInsideTransaction(_)),
        "{err:?}"
    );
    assert!(
        text.contains("inside transactional_publish (most likely an ActiveModelBehavior hook)")
            && text.contains("Run it on the hook's `db`")
            && text.contains("SQLite with SeaORM's default options"),
        "{text}"
    );
    assert!(
        took >= Duration::from_secs(1),
        "after the acquire timeout: {took:?}"
    );
    db.close().await.ok();
    assert_eq!(
        common::order::Entity::find()
            .count(&ctx.db)
            .await
            .expect("orders"),
        0,
        "the order was rolled back"
    );
    assert_eq!(
        count(&ctx.db, EventStatus::Wait).await,
        0,
        "no event written"
    );
}
