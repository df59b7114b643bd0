//! Fencing and marking faults, on Postgres, MariaDB and SQLite (see `tests/common`):
//! two workers with the same instance id whose sends sometimes outlive their lease (every late
//! acknowledgement changes nothing), and one row whose `SUCCESS` mark always fails (only that
//! row is affected, and it records the database's error).
//!
//! Every transition is recorded by an `AFTER UPDATE` trigger into `outbox_audit` (old and new
//! status and `claim_owner`), so the tests assert on what the database did, not on what the
//! relay says it did. With completion by delete (`OUTBOX_TEST_COMPLETION=delete`) an `AFTER
//! DELETE` trigger records a delivery (a row deleted while `SENDING`) as a transition to
//! `SUCCESS`, and the unmarkable row is one that cannot be deleted.
mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::wait_until;
use common::{age, count, event, insert_many, Fleet, TestContext};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use sea_orm_outbox::event_record::Column;
use sea_orm_outbox::{
    ClaimStrategy, EventStatus, InMemoryPublisher, OutboxMessage, PublishError, Publisher,
    RetryPolicy,
};

backend_tests!(
    twins_with_one_instance_id_never_touch_each_others_claims,
    one_unmarkable_row_spoils_only_itself,
);

/// Creates `outbox_audit` and the trigger that writes one row into it per updated event row.
async fn audit(ctx: &TestContext) {
    let stmts: &[&str] = match ctx.db_backend() {
        DbBackend::Postgres => &[
            "CREATE TABLE outbox_audit (seq BIGSERIAL PRIMARY KEY, event_id BIGINT NOT NULL, \
             old_status TEXT, new_status TEXT, old_owner TEXT, new_owner TEXT)",
            "CREATE FUNCTION outbox_audit_row() RETURNS trigger AS $$ BEGIN \
             INSERT INTO outbox_audit (event_id, old_status, new_status, old_owner, new_owner) \
             VALUES (OLD.id, OLD.status, NEW.status, OLD.claim_owner, NEW.claim_owner); \
             RETURN NEW; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER outbox_audit AFTER UPDATE ON t_event_record FOR EACH ROW \
             EXECUTE FUNCTION outbox_audit_row()",
        ],
        DbBackend::MySql => &[
            "CREATE TABLE outbox_audit (seq BIGINT AUTO_INCREMENT PRIMARY KEY, event_id BIGINT \
             NOT NULL, old_status VARCHAR(16), new_status VARCHAR(16), old_owner VARCHAR(128), \
             new_owner VARCHAR(128))",
            "CREATE TRIGGER outbox_audit AFTER UPDATE ON t_event_record FOR EACH ROW \
             INSERT INTO outbox_audit (event_id, old_status, new_status, old_owner, new_owner) \
             VALUES (OLD.id, OLD.status, NEW.status, OLD.claim_owner, NEW.claim_owner)",
        ],
        _ => &[
            "CREATE TABLE outbox_audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id INTEGER \
             NOT NULL, old_status TEXT, new_status TEXT, old_owner TEXT, new_owner TEXT)",
            "CREATE TRIGGER outbox_audit AFTER UPDATE ON t_event_record FOR EACH ROW BEGIN \
             INSERT INTO outbox_audit (event_id, old_status, new_status, old_owner, new_owner) \
             VALUES (OLD.id, OLD.status, NEW.status, OLD.claim_owner, NEW.claim_owner); END",
        ],
    };
    for sql in stmts {
        ctx.db.execute_unprepared(sql).await.expect(sql);
    }
    if common::deleting() {
        audit_deletions(ctx).await;
    }
}

/// With completion by delete: the trigger that records each deleted event row in
/// `outbox_audit` as a transition to `SUCCESS` when it was deleted `SENDING` (a delivery),
/// to `DELETED` otherwise, `claim_owner` unchanged.
async fn audit_deletions(ctx: &TestContext) {
    const INSERT: &str = "INSERT INTO outbox_audit (event_id, old_status, new_status, old_owner, \
         new_owner) VALUES (OLD.id, OLD.status, CASE WHEN OLD.status = 'SENDING' THEN 'SUCCESS' \
         ELSE 'DELETED' END, OLD.claim_owner, OLD.claim_owner)";
    let stmts = match ctx.db_backend() {
        DbBackend::Postgres => vec![
            format!(
                "CREATE FUNCTION outbox_audit_deleted() RETURNS trigger AS $$ BEGIN {INSERT}; \
                 RETURN OLD; END $$ LANGUAGE plpgsql"
            ),
            "CREATE TRIGGER outbox_audit_deleted AFTER DELETE ON t_event_record FOR EACH ROW \
             EXECUTE FUNCTION outbox_audit_deleted()"
                .to_owned(),
        ],
        DbBackend::MySql => vec![format!(
            "CREATE TRIGGER outbox_audit_deleted AFTER DELETE ON t_event_record FOR EACH ROW \
             {INSERT}"
        )],
        _ => vec![format!(
            "CREATE TRIGGER outbox_audit_deleted AFTER DELETE ON t_event_record FOR EACH ROW \
             BEGIN {INSERT}; END"
        )],
    };
    for sql in stmts {
        ctx.db.execute_unprepared(&sql).await.expect(&sql);
    }
}

/// One recorded transition.
#[derive(Debug, Clone)]
struct Audited {
    event_id: i64,
    old_status: String,
    new_status: String,
    old_owner: Option<String>,
    new_owner: Option<String>,
}

/// Every recorded transition, in the order the database made them (per row).
async fn audited(ctx: &TestContext) -> Vec<Audited> {
    let backend = ctx.db_backend();
    let rows = ctx
        .db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT event_id, old_status, new_status, old_owner, new_owner FROM outbox_audit \
             ORDER BY seq",
        ))
        .await
        .expect("audit");
    rows.iter()
        .map(|r| Audited {
            event_id: r.try_get("", "event_id").expect("event_id"),
            old_status: r.try_get("", "old_status").expect("old_status"),
            new_status: r.try_get("", "new_status").expect("new_status"),
            old_owner: r.try_get("", "old_owner").expect("old_owner"),
            new_owner: r.try_get("", "new_owner").expect("new_owner"),
        })
        .collect()
}

/// Makes every tenth event's first send outlive its lease: before answering, it reads the
/// claim it was sent under, ages that lease past expiry, and waits until the event was
/// reclaimed (and perhaps claimed again, by either twin). Then half of those sends answer Ok, half a
/// retryable error: both are late acknowledgements of a claim that no longer holds the row.
struct Stalling {
    db: sea_orm::DatabaseConnection,
    inner: InMemoryPublisher,
    /// `(event id, claim_owner of the stale attempt)` for every send that became stale.
    stale: Mutex<Vec<(i64, String)>>,
    tried: Mutex<HashSet<i64>>,
}

impl Stalling {
    async fn claim_owner(&self, id: i64) -> Option<String> {
        event(&self.db, id).await.claim_owner
    }
}

#[async_trait]
impl Publisher for Stalling {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        let first = self.tried.lock().expect("tried").insert(m.event_id);
        if !(first && m.event_id % 10 == 0) {
            return self.inner.publish(m).await;
        }
        let Some(mine) = self.claim_owner(m.event_id).await else {
            return self.inner.publish(m).await;
        };
        age(
            &self.db,
            m.event_id,
            Column::ClaimedAt,
            Duration::from_secs(600),
        )
        .await;
        let taken = wait_until(
            Duration::from_millis(700),
            Duration::from_millis(10),
            || async { self.claim_owner(m.event_id).await.as_deref() != Some(mine.as_str()) },
        )
        .await;
        if taken {
            self.stale.lock().expect("stale").push((m.event_id, mine));
        }
        let answer = if m.event_id % 20 == 0 {
            self.inner.publish(m).await
        } else {
            Err(PublishError::retryable("stalled send gave up"))
        };
        answer
    }
}

/// Two workers run with the same explicit instance id over 2,000
/// events while some sends outlive their lease. Every late acknowledgement (a mark, a release)
/// changes no row, retry counts move with the row, and each event ends `SUCCESS` exactly once.
async fn twins_with_one_instance_id_never_touch_each_others_claims(ctx: &TestContext) {
    const N: usize = 2000;
    audit(ctx).await;
    let ids = insert_many(&ctx.db, "TWIN", N).await;
    let publisher = Arc::new(Stalling {
        db: ctx.pool(2).await,
        inner: InMemoryPublisher::new(),
        stale: Mutex::default(),
        tried: Mutex::default(),
    });
    // Lease 3 s: the reclaim runs every 300 ms, before the renewal (every 1 s) undoes an aging.
    let configs = (0..2).map(|_| {
        common::test_config("twin")
            .lease(Duration::from_secs(3))
            .send_timeout(Duration::from_secs(1))
            .claim_strategy(ClaimStrategy::Batch)
            .batch_size(50)
            .send_concurrency(8)
            .retry(RetryPolicy::new(
                5,
                Duration::from_millis(50),
                Duration::from_secs(1),
            ))
    });
    let fleet = Fleet::start(ctx, 2, publisher.clone(), configs).await;
    let done = common::wait_for_success(&ctx.db, N as u64, Duration::from_secs(240)).await;
    let summaries = fleet.stop().await;
    assert!(done, "not all SUCCESS: {summaries:?}");

    let stale = publisher.stale.lock().expect("stale").clone();
    assert!(
        stale.len() >= 20,
        "too few stale sends to prove anything: {}",
        stale.len()
    );
    let late: u64 = summaries.iter().map(|s| s.late_acks).sum();
    let published: u64 = summaries.iter().map(|s| s.published).sum();
    println!(
        "figure: twins_stale_sends={} late_acks={late} published={published}",
        stale.len()
    );
    // Each stale answer was a late ack; a send whose reclaim came after the publisher stopped
    // watching is one more (the audit below is what proves that none changed a row).
    assert!(
        late >= stale.len() as u64,
        "each stale answer was a late ack: {summaries:?}"
    );
    assert_eq!(published, N as u64, "{summaries:?}");

    let audit = audited(ctx).await;
    // A stale claim's lease left it once (the reclaim) and nothing it did afterwards
    // reached a row.
    for (id, owner) in &stale {
        let by: Vec<&Audited> = audit
            .iter()
            .filter(|a| a.event_id == *id && a.old_owner.as_deref() == Some(owner.as_str()))
            .filter(|a| a.old_status != a.new_status)
            .collect();
        assert_eq!(by.len(), 1, "event {id}: transitions under {owner}: {by:?}");
        assert_eq!(
            (
                by[0].event_id,
                by[0].new_status.as_str(),
                by[0].new_owner.as_deref()
            ),
            (*id, "WAIT", None),
            "the reclaim"
        );
    }
    let mut successes: HashMap<i64, u32> = HashMap::new();
    for a in audit
        .iter()
        .filter(|a| a.new_status == "SUCCESS" && a.old_status != "SUCCESS")
    {
        *successes.entry(a.event_id).or_default() += 1;
        let owner = a.old_owner.as_deref().unwrap_or_default();
        assert!(
            !stale.contains(&(a.event_id, owner.to_owned())),
            "a stale claim marked {a:?}"
        );
        assert!(
            owner.starts_with("twin#"),
            "claim_owner names the instance: {owner}"
        );
    }
    assert_eq!(successes.len(), N, "every event reached SUCCESS");
    assert!(successes.values().all(|n| *n == 1), "once each");
    assert!(
        audit
            .iter()
            .all(|a| a.old_status != "SUCCESS" || a.new_status == "SUCCESS"),
        "nothing left SUCCESS"
    );
    // Counts moved with the row: a stale event's reclaim is its only attempt counted.
    let stale_ids: HashSet<i64> = stale.iter().map(|(id, _)| *id).collect();
    for id in ids.iter().filter(|id| stale_ids.contains(id)) {
        assert_eq!(event(&ctx.db, *id).await.retry_count, 1, "event {id}");
    }
    assert_eq!(count(&ctx.db, EventStatus::Sending).await, 0);
}

/// Refuses `SUCCESS` for the event `BAD-ROW` (a `BEFORE UPDATE` trigger; with completion by
/// delete, a `BEFORE DELETE` trigger refusing to delete it while `SENDING`) with the message
/// `no SUCCESS for BAD-ROW`.
async fn refuse_success_for_bad_row(ctx: &TestContext) {
    if common::deleting() {
        return refuse_delivery_by_delete_for_bad_row(ctx).await;
    }
    let stmts: &[&str] = match ctx.db_backend() {
        DbBackend::Postgres => &[
            "CREATE FUNCTION refuse_bad_row() RETURNS trigger AS $$ BEGIN \
             IF NEW.status = 'SUCCESS' AND NEW.biz_no = 'BAD-ROW' THEN \
             RAISE EXCEPTION 'no SUCCESS for BAD-ROW'; END IF; RETURN NEW; END $$ \
             LANGUAGE plpgsql",
            "CREATE TRIGGER refuse_bad_row BEFORE UPDATE ON t_event_record FOR EACH ROW \
             EXECUTE FUNCTION refuse_bad_row()",
        ],
        DbBackend::MySql => &[
            "CREATE TRIGGER refuse_bad_row BEFORE UPDATE ON t_event_record FOR EACH ROW \
             BEGIN IF NEW.status = 'SUCCESS' AND NEW.biz_no = 'BAD-ROW' THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no SUCCESS for BAD-ROW'; END IF; END",
        ],
        _ => &[
            "CREATE TRIGGER refuse_bad_row BEFORE UPDATE ON t_event_record FOR EACH ROW \
             WHEN NEW.status = 'SUCCESS' AND NEW.biz_no = 'BAD-ROW' \
             BEGIN SELECT RAISE(ABORT, 'no SUCCESS for BAD-ROW'); END",
        ],
    };
    for sql in stmts {
        ctx.db.execute_unprepared(sql).await.expect(sql);
    }
}

/// [`refuse_success_for_bad_row`] with completion by delete.
async fn refuse_delivery_by_delete_for_bad_row(ctx: &TestContext) {
    let stmts: &[&str] = match ctx.db_backend() {
        DbBackend::Postgres => &[
            "CREATE FUNCTION refuse_bad_row() RETURNS trigger AS $$ BEGIN \
             IF OLD.status = 'SENDING' AND OLD.biz_no = 'BAD-ROW' THEN \
             RAISE EXCEPTION 'no SUCCESS for BAD-ROW'; END IF; RETURN OLD; END $$ \
             LANGUAGE plpgsql",
            "CREATE TRIGGER refuse_bad_row BEFORE DELETE ON t_event_record FOR EACH ROW \
             EXECUTE FUNCTION refuse_bad_row()",
        ],
        DbBackend::MySql => &[
            "CREATE TRIGGER refuse_bad_row BEFORE DELETE ON t_event_record FOR EACH ROW \
             BEGIN IF OLD.status = 'SENDING' AND OLD.biz_no = 'BAD-ROW' THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no SUCCESS for BAD-ROW'; END IF; END",
        ],
        _ => &[
            "CREATE TRIGGER refuse_bad_row BEFORE DELETE ON t_event_record FOR EACH ROW \
             WHEN OLD.status = 'SENDING' AND OLD.biz_no = 'BAD-ROW' \
             BEGIN SELECT RAISE(ABORT, 'no SUCCESS for BAD-ROW'); END",
        ],
    };
    for sql in stmts {
        ctx.db.execute_unprepared(sql).await.expect(sql);
    }
}

/// One row of a group of 20 deliveries cannot be marked
/// `SUCCESS`. The other 19 end `SUCCESS`, each sent once; the bad row is retried like a failed
/// send and ends a dead letter whose `last_error` is the database's error.
async fn one_unmarkable_row_spoils_only_itself(ctx: &TestContext) {
    audit(ctx).await;
    refuse_success_for_bad_row(ctx).await;
    let txn = sea_orm::TransactionTrait::begin(&ctx.db)
        .await
        .expect("begin");
    for i in 0..20 {
        let biz_no = if i == 7 {
            "BAD-ROW".to_owned()
        } else {
            format!("GOOD-{i}")
        };
        sea_orm_outbox::OutboxExt::with_event(
            &txn,
            sea_orm_outbox::NewEvent::raw(biz_no, "ORDER_CREATED", "{}"),
        )
        .await
        .expect("insert");
    }
    txn.commit().await.expect("commit");
    let publisher = Arc::new(InMemoryPublisher::new());
    let config = common::test_config("marker")
        .batch_size(20)
        .send_concurrency(20)
        .retry(RetryPolicy::new(
            2,
            Duration::from_millis(50),
            Duration::from_secs(1),
        ));
    let fleet = Fleet::start(ctx, 2, publisher.clone(), [config]).await;
    let settled = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async {
            count(&ctx.db, EventStatus::Success).await == 19
                && count(&ctx.db, EventStatus::Fail).await == 1
        },
    )
    .await;
    let summaries = fleet.stop().await;
    assert!(settled, "{summaries:?}");
    let bad = common::event_by_biz_no(&ctx.db, "BAD-ROW").await;
    let error = bad.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("no SUCCESS for BAD-ROW"),
        "the database's error: {error}"
    );
    assert_eq!(bad.retry_count, 3, "attempts counted: {bad:?}");
    let sent = publisher.messages();
    for i in (0..20).filter(|i| *i != 7) {
        let n = sent
            .iter()
            .filter(|m| m.biz_no == format!("GOOD-{i}"))
            .count();
        assert_eq!(n, 1, "GOOD-{i} sent once");
    }
    assert_eq!(sent.iter().filter(|m| m.biz_no == "BAD-ROW").count(), 3);
    // No good row was ever put back: its only transitions are the claim and the mark.
    let audit = audited(ctx).await;
    let backs = audit
        .iter()
        .filter(|a| a.event_id != bad.id && a.old_status == "SENDING" && a.new_status != "SUCCESS")
        .count();
    assert_eq!(backs, 0, "{audit:?}");
}
