//! Outbox tables of the application's naming, on Postgres, MariaDB and SQLite (see
//! `tests/common`): `t_event_record` and `outbox_events` (and on Postgres `app.outbox_events`)
//! in one database, each with its own `Outbox`, writers and worker; every worker sends its own
//! table's events and no other's, and `ops` counts each table on its own.
mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::{test_config, Backend, TestContext};
use sea_orm::{ConnectionTrait, TransactionTrait};
use sea_orm_migration::SchemaManager;
use sea_orm_outbox::{
    ops, CancellationToken, InMemoryPublisher, NewEvent, Outbox, OutboxError, OutboxExt, Publisher,
};

backend_tests!(
    each_worker_sends_its_own_tables_events,
    a_bad_table_name_writes_nothing
);

/// Events written to each outbox.
const EVENTS: usize = 6;

/// The outboxes of the test, their tables created: the default one, `outbox_events`, and on
/// Postgres `app.outbox_events`.
async fn outboxes(ctx: &TestContext) -> Vec<Outbox> {
    let manager = SchemaManager::new(&ctx.db);
    sea_orm_outbox::migration::create_outbox_table(&manager, "outbox_events")
        .await
        .expect("create outbox_events");
    let named = Outbox::new().table("outbox_events").expect("a valid name");
    let mut all = vec![Outbox::default(), named];
    if ctx.backend == Backend::Postgres {
        for sql in [
            "CREATE SCHEMA app",
            "CREATE TABLE app.outbox_events (LIKE public.outbox_events INCLUDING ALL)",
        ] {
            ctx.db.execute_unprepared(sql).await.expect(sql);
        }
        all.push(named.schema("app").expect("a valid schema"));
    }
    for outbox in &all[1..] {
        common::observe_deletions(&ctx.db, outbox).await;
    }
    all
}

/// The key of the `k`-th event written to outbox `i`.
fn key(i: usize, k: usize) -> String {
    format!("T{i}-{k:03}")
}

async fn each_worker_sends_its_own_tables_events(ctx: &TestContext) {
    let outboxes = outboxes(ctx).await;
    // Through the handle, in one transaction per outbox; the default outbox's odd events
    // through the connection's extension trait.
    for (i, outbox) in outboxes.iter().enumerate() {
        let txn = ctx.db.begin().await.expect("begin");
        for k in 0..EVENTS {
            let event = NewEvent::raw(key(i, k), "ORDER_CREATED", r#"{"n":1}"#);
            if k % 2 == 1 && *outbox == Outbox::default() {
                txn.with_event(event).await.expect("write");
            } else {
                outbox.with_event(&txn, event).await.expect("write");
            }
        }
        txn.commit().await.expect("commit");
    }
    let cancel = CancellationToken::new();
    let mut publishers = Vec::new();
    let mut runs = Vec::new();
    for (i, outbox) in outboxes.iter().enumerate() {
        let publisher = Arc::new(InMemoryPublisher::new());
        let worker = outbox
            .worker(
                ctx.pool(4).await,
                publisher.clone() as Arc<dyn Publisher>,
                test_config(&format!("tables-{i}")),
            )
            .expect("worker");
        let cancel = cancel.clone();
        runs.push(tokio::spawn(async move { worker.run(cancel).await }));
        publishers.push(publisher);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let done = publishers.iter().all(|p| {
            let ids: HashSet<i64> = p.messages().iter().map(|m| m.event_id).collect();
            ids.len() >= EVENTS
        });
        if done || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    for run in runs {
        run.await.expect("worker task");
    }
    for (i, publisher) in publishers.iter().enumerate() {
        let keys: HashSet<String> = publisher.messages().into_iter().map(|m| m.biz_no).collect();
        let want: HashSet<String> = (0..EVENTS).map(|k| key(i, k)).collect();
        assert_eq!(keys, want, "outbox {i}: its own events, every one");
    }
    for (i, outbox) in outboxes.iter().enumerate() {
        let stats = ops::stats(outbox, &ctx.db, Duration::from_secs(600))
            .await
            .expect("stats");
        // With completion by delete the delivered rows are gone: the log of deletions has them.
        let delivered =
            stats.success + common::completion::delivered_by_delete(&ctx.db, outbox).await;
        assert_eq!(
            (stats.wait, stats.sending, delivered, stats.fail),
            (0, 0, EVENTS as u64, 0),
            "outbox {i} ({:?}.{})",
            outbox.schema_name(),
            outbox.table_name()
        );
    }
}

async fn a_bad_table_name_writes_nothing(ctx: &TestContext) {
    for bad in ["", "outbox-events", "9events", "t e", &"x".repeat(41)] {
        assert!(
            matches!(Outbox::new().table(bad), Err(OutboxError::InvalidConfig(_))),
            "{bad:?}"
        );
        assert!(
            matches!(
                Outbox::new().schema(bad),
                Err(OutboxError::InvalidConfig(_))
            ),
            "{bad:?}"
        );
    }
    // A name that would be SQL if it reached a statement is refused before any statement.
    for injected in [
        r#"x"; DROP TABLE t_event_record; --"#,
        "t_event_record;DELETE",
    ] {
        assert!(
            matches!(
                Outbox::new().table(injected),
                Err(OutboxError::InvalidConfig(_))
            ),
            "{injected:?}"
        );
    }
    // A valid name whose table does not exist: a clear error naming it, nothing written.
    let missing = Outbox::new().table("no_such_outbox").expect("a valid name");
    let err = missing
        .with_event(&ctx.db, NewEvent::raw("K", "T", "{}"))
        .await
        .expect_err("no table");
    assert!(matches!(err, OutboxError::TableMissing(_)), "{err:?}");
    assert!(err.to_string().contains("no_such_outbox"), "{err}");
    let stats = ops::stats(&Outbox::default(), &ctx.db, Duration::from_secs(600))
        .await
        .expect("stats");
    assert_eq!((stats.wait, stats.success), (0, 0), "nothing written");
}
