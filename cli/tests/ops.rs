//! Operations: the `outbox` command-line tool run against real databases, and that it never
//! prints a password. Runs on Postgres, MariaDB and SQLite (see the core's `tests/common`).
#[path = "../../tests/common/mod.rs"]
mod common;

use common::wait_until;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{age, instance_of, new_event, Backend, TestContext};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter};
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox::consumer::consume_once;
use sea_orm_outbox::event_record::{self, Column, Entity as Events};
use sea_orm_outbox::{
    ops, CancellationToken, EventStatus, InMemoryPublisher, Migrator, NewEvent, OutboxError,
    OutboxExt, Publisher, Worker, WorkerConfig,
};

backend_tests!(
    cli_migrate_up_down_status,
    cli_stats_counts_statuses_ages_and_stuck_leases,
    cli_dead_list,
    cli_dead_list_groups_by_fingerprint,
    cli_dead_retry_makes_the_event_deliverable_again,
    cli_dead_retry_all_touches_only_dead_letters,
    cli_dead_discard_deletes_only_dead_letters,
    cli_purge_deletes_only_old_delivered_events,
    cli_relay_without_a_broker_sends_nothing,
    cli_missing_table_fails_every_command,
    cli_never_prints_the_password,
    cli_table_flag_names_the_table_of_every_command,
);

// ---------------------------------------------------------------------------------------------
// Helpers

/// A secret that must never show up in any output.
const SECRET: &str = "Pw-S3cret-42";

/// Runs the `outbox` binary with `args` against `url`, killing it after `timeout`.
fn outbox_with(url: &str, args: &[&str], envs: &[(&str, &str)], timeout: Duration) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
    cmd.env("OUTBOX_COMPLETION", common::completion().as_str());
    cmd.args(args)
        .env("DATABASE_URL", url)
        .env_remove("RUST_LOG")
        // No broker, even where CI points at one: `relay` runs here only as a dry run or to be
        // refused.
        .env_remove("ROCKETMQ_NAMESRV_ADDR")
        .env_remove("OUTBOX_CONNECT_TIMEOUT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn outbox");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > timeout {
            child.kill().ok();
            let out = child.wait_with_output().expect("output");
            panic!(
                "outbox {args:?} still running after {timeout:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `outbox args` against the test database (30 s limit).
fn outbox(ctx: &TestContext, args: &[&str]) -> Output {
    outbox_with(&ctx.url, args, &[], Duration::from_secs(30))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `outbox args` and asserts it succeeded; returns stdout.
fn outbox_ok(ctx: &TestContext, args: &[&str]) -> String {
    let o = outbox(ctx, args);
    assert!(
        o.status.success(),
        "outbox {args:?} failed: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Puts event `id` into `status` directly (the state a relay would have left).
async fn set_status(db: &impl ConnectionTrait, id: i64, status: EventStatus) {
    let backend = db.get_database_backend();
    let mut update = Events::update_many()
        .col_expr(Column::Status, status.as_str().into())
        .filter(Column::Id.eq(id));
    update = match status {
        EventStatus::Sending => update
            .col_expr(Column::ClaimOwner, "gone-owner".into())
            .col_expr(Column::ClaimedAt, common::db_now(backend, None)),
        EventStatus::Fail => update
            .col_expr(Column::RetryCount, 4.into())
            .col_expr(Column::LastError, "scripted broker outage".into()),
        _ => update,
    };
    update.exec(db).await.expect("set status");
}

/// The event `id`, if it is there.
async fn event(db: &impl ConnectionTrait, id: i64) -> Option<event_record::Model> {
    Events::find_by_id(id).one(db).await.expect("read")
}

fn fast_config(owner: &str) -> WorkerConfig {
    common::test_config(owner)
}

const DAY: Duration = Duration::from_secs(86_400);

// ---------------------------------------------------------------------------------------------
// migrate

async fn cli_migrate_up_down_status(ctx: &TestContext) {
    let out = outbox_ok(ctx, &["migrate", "status"]);
    assert!(
        out.contains("Applied  m20261130_000001_create_t_event_record")
            && out.contains("Applied  m20261130_000002_create_t_consumed_message")
            && out.contains("Applied  m20261201_000003_add_event_headers")
            && out.contains("Applied  m20261202_000004_add_biz_no_status_index")
            && out.contains("Applied  m20261206_000005_create_t_outbox_relay")
            && !out.contains("pending"),
        "{out}"
    );
    // down rolls back one migration, the newest: the heartbeat table goes, and `health` and
    // `relays` name the migration to apply (exit status 3).
    let out = outbox_ok(ctx, &["migrate", "down"]);
    assert!(
        out.contains("Pending  m20261206_000005_create_t_outbox_relay")
            && out.contains("1 pending"),
        "{out}"
    );
    for args in [&["health"][..], &["relays"]] {
        let o = outbox(ctx, args);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("CreateOutboxRelay"), "{}", stderr(&o));
    }
    // Then the biz_no index.
    let out = outbox_ok(ctx, &["migrate", "down"]);
    assert!(
        out.contains("Pending  m20261202_000004_add_biz_no_status_index")
            && out.contains("2 pending"),
        "{out}"
    );
    // Then the headers column.
    let out = outbox_ok(ctx, &["migrate", "down"]);
    assert!(
        out.contains("Pending  m20261201_000003_add_event_headers") && out.contains("3 pending"),
        "{out}"
    );
    // This version on a table without it: a clear error naming the migration, exit status 3.
    let err = ctx
        .db
        .with_event(NewEvent::raw("ORD-OLD", "T", "{}"))
        .await
        .expect_err("no headers column");
    assert!(matches!(err, OutboxError::SchemaOutdated(_)), "{err}");
    let o = outbox(ctx, &["dead", "list"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("lack a part") && stderr(&o).contains("AddEventHeaders"),
        "{}",
        stderr(&o)
    );
    // down again: the consumer table goes, the outbox stays.
    let out = outbox_ok(ctx, &["migrate", "down"]);
    assert!(
        out.contains("Pending  m20261130_000002_create_t_consumed_message")
            && out.contains("4 pending"),
        "{out}"
    );
    let err = consume_once(&ctx.db, "g", "1", async |_| Ok::<_, OutboxError>(()))
        .await
        .expect_err("no consumer table");
    assert!(matches!(err, OutboxError::TableMissing(_)), "{err}");
    // The outbox table is still there (without the newer column: not "missing").
    assert!(matches!(
        ops::stats(&sea_orm_outbox::Outbox::default(), &ctx.db, DAY).await,
        Err(OutboxError::SchemaOutdated(_))
    ));
    outbox_ok(ctx, &["migrate", "down"]);
    assert!(matches!(
        ops::stats(&sea_orm_outbox::Outbox::default(), &ctx.db, DAY).await,
        Err(OutboxError::TableMissing(_))
    ));
    let o = outbox(ctx, &["stats"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    // up applies both again.
    let out = outbox_ok(ctx, &["migrate", "up"]);
    assert!(!out.contains("Pending"), "{out}");
    new_event(&ctx.db, "ORD-M").await;
    let s = json(&outbox_ok(ctx, &["stats", "--json"]));
    assert_eq!(s["wait"], 1, "{s}");
    // `up -n 1` applies one at a time.
    outbox_ok(ctx, &["migrate", "down", "-n", "2"]);
    let out = outbox_ok(ctx, &["migrate", "up", "-n", "1"]);
    assert!(out.contains("1 pending"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// stats

async fn cli_stats_counts_statuses_ages_and_stuck_leases(ctx: &TestContext) {
    let db = &ctx.db;
    let empty = json(&outbox_ok(ctx, &["stats", "--json"]));
    assert_eq!(empty["wait"], 0);
    assert!(empty["oldest_wait_age_seconds"].is_null(), "{empty}");

    let w1 = new_event(db, "W1").await;
    let _w2 = new_event(db, "W2").await;
    let stuck = new_event(db, "S-stuck").await;
    let fresh = new_event(db, "S-fresh").await;
    let ok = new_event(db, "OK").await;
    let dead = new_event(db, "DEAD").await;
    set_status(db, stuck, EventStatus::Sending).await;
    set_status(db, fresh, EventStatus::Sending).await;
    set_status(db, ok, EventStatus::Success).await;
    set_status(db, dead, EventStatus::Fail).await;
    age(db, stuck, Column::ClaimedAt, Duration::from_secs(20 * 60)).await;
    age(db, w1, Column::CreateTime, Duration::from_secs(90)).await;

    let s = json(&outbox_ok(ctx, &["stats", "--json"]));
    assert_eq!(
        (
            &s["wait"],
            &s["sending"],
            &s["success"],
            &s["fail"],
            &s["dead_letters"]
        ),
        (&2.into(), &2.into(), &1.into(), &1.into(), &1.into()),
        "{s}"
    );
    assert_eq!(s["sending_over_lease"], 1, "default lease 10m: {s}");
    assert_eq!(s["lease_seconds"], 600.0, "{s}");
    let age_s = s["oldest_wait_age_seconds"].as_f64().expect("age");
    assert!((90.0..150.0).contains(&age_s), "oldest WAIT age {age_s}");

    let s = json(&outbox_ok(ctx, &["stats", "--lease", "30m", "--json"]));
    assert_eq!(s["sending_over_lease"], 0, "{s}");

    let text = outbox_ok(ctx, &["stats"]);
    for line in [
        "WAIT     2",
        "SENDING  2",
        "SUCCESS  1",
        "FAIL     1 (dead letters)",
        "SENDING older than the lease (10m): 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(text.contains("oldest WAIT age: "), "{text}");

    // The library function says the same.
    let lib = ops::stats(
        &sea_orm_outbox::Outbox::default(),
        db,
        Duration::from_secs(600),
    )
    .await
    .expect("stats");
    assert_eq!(
        (
            lib.wait,
            lib.sending,
            lib.success,
            lib.fail,
            lib.sending_over_lease
        ),
        (2, 2, 1, 1, 1)
    );
}

// ---------------------------------------------------------------------------------------------
// dead letters

async fn cli_dead_list(ctx: &TestContext) {
    let db = &ctx.db;
    let mut dead = Vec::new();
    for i in 0..3 {
        let id = new_event(db, &format!("DEAD-{i}")).await;
        set_status(db, id, EventStatus::Fail).await;
        dead.push(id);
    }
    new_event(db, "ALIVE").await;

    let rows = json(&outbox_ok(ctx, &["dead", "list", "--json"]));
    let ids: Vec<i64> = rows
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, dead);
    assert_eq!(rows[0]["status"], "FAIL");
    assert_eq!(rows[0]["last_error"], "scripted broker outage");
    assert_eq!(rows[0]["retry_count"], 4);

    let rows = json(&outbox_ok(ctx, &["dead", "list", "--limit", "2", "--json"]));
    assert_eq!(rows.as_array().expect("array").len(), 2);

    let text = outbox_ok(ctx, &["dead", "list"]);
    assert!(
        text.contains("DEAD-0") && text.contains("scripted broker outage"),
        "{text}"
    );
    assert!(!text.contains("ALIVE"), "{text}");
    assert!(text.contains("3 dead letter(s)"), "{text}");

    assert_eq!(
        ops::dead_letters(&sea_orm_outbox::Outbox::default(), db, 10)
            .await
            .expect("list")
            .len(),
        3
    );
}

/// `outbox dead list --group`: one line per error fingerprint with its count, largest first,
/// whatever ids and addresses the errors name; `--json` gives the groups of
/// `ops::dead_letter_groups`.
async fn cli_dead_list_groups_by_fingerprint(ctx: &TestContext) {
    let db = &ctx.db;
    for i in 0..5 {
        let id = new_event(db, &format!("OUTAGE-{i}")).await;
        set_status(db, id, EventStatus::Fail).await;
        let error = format!("retryable: broker 10.0.0.{i}:10911 busy, event {id}");
        Events::update_many()
            .col_expr(Column::LastError, error.into())
            .filter(Column::Id.eq(id))
            .exec(db)
            .await
            .expect("error");
    }
    for i in 0..2 {
        let id = new_event(db, &format!("LARGE-{i}")).await;
        set_status(db, id, EventStatus::Fail).await;
        let error = format!("permanent: body is {} bytes", 5_000_000 + i);
        Events::update_many()
            .col_expr(Column::LastError, error.into())
            .filter(Column::Id.eq(id))
            .exec(db)
            .await
            .expect("error");
    }
    new_event(db, "ALIVE").await;

    let text = outbox_ok(ctx, &["dead", "list", "--group"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "a header, two groups, a total: {text}");
    assert!(
        lines[0].contains("count") && lines[0].contains("fingerprint"),
        "{text}"
    );
    let outage: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(outage[0], "5", "{text}");
    assert!(
        lines[1].ends_with("retryable: broker <n>.<n>.<n>.<n>:<n> busy, event <n>"),
        "{text}"
    );
    assert_eq!(lines[2].split_whitespace().next(), Some("2"), "{text}");
    assert!(lines[2].ends_with("permanent: body is <n> bytes"), "{text}");
    assert_eq!(lines[3], "7 dead letter(s) in 2 group(s)");

    let groups = json(&outbox_ok(ctx, &["dead", "list", "--group", "--json"]));
    let groups = groups.as_array().expect("array");
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["count"], 5);
    assert_eq!(groups[0]["errors"], 5);
    assert_eq!(groups[0]["kind"], "retryable");
    assert_eq!(groups[1]["kind"], "permanent");

    let text = outbox_ok(ctx, &["dead", "list", "--group", "--limit", "1"]);
    assert!(
        text.contains("7 dead letter(s) in 2 group(s), the 1 largest shown"),
        "{text}"
    );
    assert!(!text.contains("permanent"), "{text}");
}

async fn cli_dead_retry_makes_the_event_deliverable_again(ctx: &TestContext) {
    let db = &ctx.db;
    let id = new_event(db, "ORD-DEAD").await;
    // Left as a dead letter by a relay that held it: FAIL, retries spent, lease columns set.
    set_status(db, id, EventStatus::Sending).await;
    set_status(db, id, EventStatus::Fail).await;
    let publisher = Arc::new(InMemoryPublisher::new());
    let worker = Worker::new(
        ctx.pool(2).await,
        publisher.clone() as Arc<dyn Publisher>,
        fast_config("after-retry"),
    )
    .expect("worker");
    let round = worker
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert_eq!(round.candidates, 0, "a dead letter is never picked up");

    let out = outbox_ok(ctx, &["dead", "retry", &id.to_string()]);
    assert!(
        out.contains(&format!("event {id} will be sent again")),
        "{out}"
    );
    let e = event(db, id).await.expect("row");
    assert_eq!(
        (e.status, e.retry_count, e.claim_owner, e.claimed_at),
        (EventStatus::Wait, 0, None, None)
    );
    assert!(e.next_retry_time <= e.update_time, "due now");

    // The next round publishes it, with the full retry budget.
    let round = worker
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert_eq!(round.published, 1, "{round:?}");
    assert_eq!(
        publisher.distinct_ids().into_iter().collect::<Vec<_>>(),
        vec![id]
    );
    let e = event(db, id).await.expect("row");
    assert_eq!(
        (e.status, e.claim_owner.as_deref().map(instance_of)),
        (EventStatus::Success, Some("after-retry"))
    );

    // A row that is not a dead letter is refused and left alone.
    let o = outbox(ctx, &["dead", "retry", &id.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is not a dead letter"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        event(db, id).await.expect("row").status,
        EventStatus::Success
    );
    let o = outbox(ctx, &["dead", "retry", "999999"]);
    assert_eq!(o.status.code(), Some(1));
}

async fn cli_dead_retry_all_touches_only_dead_letters(ctx: &TestContext) {
    let db = &ctx.db;
    let d1 = new_event(db, "D1").await;
    let d2 = new_event(db, "D2").await;
    let sending = new_event(db, "S").await;
    let delivered = new_event(db, "OK").await;
    set_status(db, d1, EventStatus::Fail).await;
    set_status(db, d2, EventStatus::Fail).await;
    set_status(db, sending, EventStatus::Sending).await;
    set_status(db, delivered, EventStatus::Success).await;
    let before_sending = event(db, sending).await;
    let before_delivered = event(db, delivered).await;

    let out = outbox_ok(ctx, &["dead", "retry", "--all"]);
    assert!(out.contains("2 dead letter(s) will be sent again"), "{out}");
    for id in [d1, d2] {
        let e = event(db, id).await.expect("row");
        assert_eq!((e.status, e.retry_count), (EventStatus::Wait, 0));
    }
    assert_eq!(event(db, sending).await, before_sending);
    assert_eq!(event(db, delivered).await, before_delivered);
    assert_eq!(
        ops::retry_all_dead(&sea_orm_outbox::Outbox::default(), db)
            .await
            .expect("again"),
        0
    );
}

async fn cli_dead_discard_deletes_only_dead_letters(ctx: &TestContext) {
    let db = &ctx.db;
    let dead = new_event(db, "DEAD").await;
    let waiting = new_event(db, "WAIT").await;
    set_status(db, dead, EventStatus::Fail).await;

    let out = outbox_ok(ctx, &["dead", "discard", &dead.to_string()]);
    assert!(out.contains(&format!("event {dead} discarded")), "{out}");
    assert!(event(db, dead).await.is_none());

    let o = outbox(ctx, &["dead", "discard", &waiting.to_string()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is not a dead letter"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        event(db, waiting).await.expect("kept").status,
        EventStatus::Wait
    );
}

// ---------------------------------------------------------------------------------------------
// purge

async fn cli_purge_deletes_only_old_delivered_events(ctx: &TestContext) {
    let db = &ctx.db;
    let mut old_success = Vec::new();
    for i in 0..5 {
        let id = new_event(db, &format!("OLD-OK-{i}")).await;
        set_status(db, id, EventStatus::Success).await;
        age(db, id, Column::UpdateTime, 8 * DAY).await;
        old_success.push(id);
    }
    let recent = new_event(db, "NEW-OK").await;
    set_status(db, recent, EventStatus::Success).await;
    age(db, recent, Column::UpdateTime, 6 * DAY).await;
    // Old rows in every other status: never purged however old.
    let mut kept = vec![recent];
    for (biz, status) in [
        ("OLD-WAIT", EventStatus::Wait),
        ("OLD-SENDING", EventStatus::Sending),
        ("OLD-FAIL", EventStatus::Fail),
    ] {
        let id = new_event(db, biz).await;
        set_status(db, id, status).await;
        for col in [
            Column::UpdateTime,
            Column::CreateTime,
            Column::NextRetryTime,
        ] {
            age(db, id, col, 30 * DAY).await;
        }
        if status == EventStatus::Sending {
            age(db, id, Column::ClaimedAt, 30 * DAY).await;
        }
        kept.push(id);
    }
    let mut before = Vec::new();
    for id in &kept {
        before.push(event(db, *id).await.expect("row"));
    }

    // Batches of 2: three transactions (2, 2, 1).
    let out = outbox_ok(ctx, &["purge", "--older-than", "7d", "--batch", "2"]);
    assert!(out.contains("purged 5 delivered events"), "{out}");
    for id in &old_success {
        assert!(event(db, *id).await.is_none(), "old SUCCESS {id} purged");
    }
    let mut after = Vec::new();
    for id in &kept {
        after.push(event(db, *id).await.expect("row kept"));
    }
    assert_eq!(
        after, before,
        "WAIT, SENDING, FAIL and recent SUCCESS untouched"
    );

    let out = outbox_ok(ctx, &["purge", "--older-than", "7d"]);
    assert!(out.contains("purged 0 delivered events"), "{out}");
    // Durations in seconds and minutes, and the library's own checks.
    assert_eq!(
        ops::purge_delivered(
            &sea_orm_outbox::Outbox::default(),
            db,
            Duration::from_secs(5 * 86_400),
            1000
        )
        .await
        .expect("purge"),
        1
    );
    outbox_ok(ctx, &["purge", "--older-than", "30s"]);
    outbox_ok(ctx, &["purge", "--older-than", "15m"]);
    assert!(matches!(
        ops::purge_delivered(&sea_orm_outbox::Outbox::default(), db, DAY, 0).await,
        Err(OutboxError::InvalidArgument(_))
    ));
    let o = outbox(ctx, &["purge", "--older-than", "soon"]);
    assert_eq!(o.status.code(), Some(2), "usage error");
    assert_eq!(Events::find().count(db).await.expect("count"), 3);
}

// ---------------------------------------------------------------------------------------------
// relay

/// Without a broker `outbox relay` refuses to start (exit 1, before it waits for the
/// database) rather than mark events delivered that it never sent; `--dry-run` runs, counts
/// what waits, leaves every event `WAIT` and unclaimed, and stops on SIGTERM with exit 0.
async fn cli_relay_without_a_broker_sends_nothing(ctx: &TestContext) {
    let db = &ctx.db;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(new_event(db, &format!("ORD-R{i}")).await);
    }
    let refused = outbox(ctx, &["relay", "--poll-delay", "100ms"]);
    let err = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no broker to publish to")
            && err.contains("ROCKETMQ_NAMESRV_ADDR")
            && err.contains("--dry-run"),
        "{err}"
    );
    let relay = RelayProcess::spawn(&ctx.url, &["--poll-delay", "100ms"]);
    // Two dry-run rounds logged.
    let counted = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async { relay.stderr().matches("3 event(s) waiting").count() >= 2 },
    )
    .await;
    let (status, so, se) = relay.terminate().await;
    assert!(counted, "no dry-run round logged: {se}");
    assert!(status.success(), "relay exit {status:?}: {se}");
    for id in &ids {
        let e = event(db, *id).await.expect("row");
        assert_eq!(
            (e.status, e.claim_owner, e.retry_count),
            (EventStatus::Wait, None, 0),
            "a dry run touches no event"
        );
    }
    assert!(so.contains("relay stopped (dry run)"), "{so}");
    assert!(
        se.contains("relay started (dry run)") && se.contains("shutdown requested"),
        "{se}"
    );

    // Flags that cannot work are refused up front.
    let o = outbox(ctx, &["relay", "--dry-run", "--batch", "0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("invalid configuration"),
        "{}",
        stderr(&o)
    );
}

// ---------------------------------------------------------------------------------------------
// missing table

async fn cli_missing_table_fails_every_command(ctx: &TestContext) {
    common::unobserve_deletions(&ctx.db, &Default::default()).await;
    Migrator::down(&ctx.db, None).await.expect("down");
    let commands: &[&[&str]] = &[
        &["stats"],
        &["stats", "--json"],
        &["dead", "list"],
        &["dead", "list", "--json"],
        &["dead", "retry", "1"],
        &["dead", "retry", "--all"],
        &["dead", "discard", "1"],
        &["purge", "--older-than", "7d"],
        &["relay", "--dry-run", "--poll-delay", "100ms"],
        &["health"],
    ];
    for args in commands {
        let o = outbox_with(&ctx.url, args, &[], Duration::from_secs(20));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "outbox {args:?}: {err}");
        assert!(
            err.contains("the migration must be run first") && err.contains("outbox migrate up"),
            "outbox {args:?}: {err}"
        );
        assert!(stdout(&o).is_empty(), "outbox {args:?}: {}", stdout(&o));
    }
    // `migrate status` is how to find out; it succeeds and lists what is pending.
    let out = outbox_ok(ctx, &["migrate", "status"]);
    assert!(out.contains("5 pending"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// relay start-up: waiting for the database

/// A loopback port where nothing listens (the OS picks a free one; it is released at once).
/// `url` pointing at `127.0.0.1:port` instead of its own host and port; also returns the
/// original `host:port`.
fn via_port(url: &str, port: u16) -> (String, String) {
    let (head, rest) = url.rsplit_once('@').expect("user@host");
    let (host_port, tail) = rest.split_once('/').expect("host/database");
    (
        format!("{head}@127.0.0.1:{port}/{tail}"),
        host_port.to_owned(),
    )
}

/// An `outbox relay` process whose stderr is collected while it runs. Killed when dropped.
struct RelayProcess {
    child: std::process::Child,
    stderr: Arc<std::sync::Mutex<String>>,
}

impl RelayProcess {
    /// Starts `outbox relay --dry-run args` against `url` (no broker: it sends nothing).
    fn spawn(url: &str, args: &[&str]) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_outbox"))
            .env("OUTBOX_COMPLETION", common::completion().as_str())
            .args(["relay", "--dry-run"])
            .args(args)
            .env("DATABASE_URL", url)
            .env_remove("RUST_LOG")
            .env_remove("ROCKETMQ_NAMESRV_ADDR")
            .env_remove("OUTBOX_CONNECT_TIMEOUT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn relay");
        let stderr = Arc::new(std::sync::Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().expect("stderr lock");
                s.push_str(&line);
                s.push('\n');
            }
        });
        RelayProcess { child, stderr }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// Waits up to `deadline` for `needle` to appear on stderr.
    async fn wait_for_stderr(&self, needle: &str, deadline: Duration) -> bool {
        wait_until(deadline, Duration::from_millis(50), || async {
            self.stderr().contains(needle)
        })
        .await
    }

    /// Sends SIGTERM and waits (at most 30 s) for the exit; returns the status, stdout, stderr.
    async fn terminate(mut self) -> (std::process::ExitStatus, String, String) {
        let term = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(term.success());
        let exited = wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
            let done = self.child.try_wait().expect("wait").is_some();
            async move { done }
        })
        .await;
        assert!(
            exited,
            "relay still running 30 s after SIGTERM: {}",
            self.stderr()
        );
        let status = self.child.wait().expect("status");
        let mut out = String::new();
        if let Some(mut pipe) = self.child.stdout.take() {
            std::io::Read::read_to_string(&mut pipe, &mut out).expect("stdout");
        }
        // The reader thread ends with the pipe; give it a moment to take the last lines.
        wait_until(
            Duration::from_secs(2),
            Duration::from_millis(20),
            || async { Arc::strong_count(&self.stderr) == 1 },
        )
        .await;
        (status, out, self.stderr())
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }
}

/// Accepts connections on `listener` and forwards each to `target`.
async fn forward(listener: tokio::net::TcpListener, target: String) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        let target = target.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                tokio::io::copy_bidirectional(&mut inbound, &mut outbound)
                    .await
                    .ok();
            }
        });
    }
}

const RETRYING: &str = "cannot connect to the database yet; retrying";

/// Nothing listens at the URL: with `--connect-timeout` the relay gives up and exits 1 with a
/// clear error; `0s` tries once. The password never shows.
#[tokio::test]
async fn relay_gives_up_after_the_connect_timeout() {
    let port = common::free_port();
    let refused = format!("postgres://app:{SECRET}@127.0.0.1:{port}/x");
    let started = Instant::now();
    let o = outbox_with(
        &refused,
        &["relay", "--dry-run", "--connect-timeout", "1s"],
        &[],
        Duration::from_secs(20),
    );
    let (took, err) = (started.elapsed(), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        took >= Duration::from_secs(1),
        "gave up after {took:?}: {err}"
    );
    assert!(
        err.contains(&format!(
            "cannot connect to the database postgres://app:***@127.0.0.1:{port}/x within 1s"
        )),
        "{err}"
    );
    assert_no_secret("connect timeout", &o);
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));

    // A host name that resolves nowhere fails each attempt at once: several attempts, a WARN
    // for each, and the last error in the final message.
    for url in [
        format!("postgres://app:{SECRET}@nonexistent.invalid:5432/x"),
        format!("mysql://app:{SECRET}@nonexistent.invalid:3306/x"),
    ] {
        let o = outbox_with(
            &url,
            &["relay", "--dry-run", "--connect-timeout", "5s"],
            &[],
            Duration::from_secs(30),
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.matches(RETRYING).count() >= 1, "{err}");
        assert!(
            err.contains("app:***@nonexistent.invalid")
                && err.contains("within 5s")
                && err.contains("attempt(s)): Connection Error: error communicating"),
            "{err}"
        );
        assert_no_secret("name that resolves nowhere", &o);
        // `0s`: one attempt, its error as is.
        let o = outbox_with(
            &url,
            &["relay", "--dry-run", "--connect-timeout", "0s"],
            &[],
            Duration::from_secs(20),
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot connect to the database: ") && !err.contains(RETRYING),
            "{err}"
        );
        assert_no_secret("0s", &o);
    }
}

/// Errors that waiting cannot fix fail at once even with no connect timeout (the default): a
/// malformed or unsupported URL, and (where the servers are in the run) a missing database and a
/// refused login. The missing table is `cli_missing_table_fails_every_command`.
#[tokio::test]
async fn relay_fails_at_once_when_waiting_cannot_help() {
    let mut urls = vec![
        format!("foo://app:{SECRET}@db.example/x"),
        format!("postgres://app:{SECRET}@127.0.0.1:notaport/x"),
        format!("mysql://app:{SECRET}@127.0.0.1:99999/x"),
        format!("postgres://app:{SECRET}@127.0.0.1:5432/x?sslmode=sometimes"),
    ];
    if Backend::Postgres.enabled() {
        let admin = with_password(&common::admin_url(Backend::Postgres));
        urls.push(common::with_database(&admin, "ot_no_such_database"));
    }
    if Backend::MySql.enabled() {
        // The test user has no password: a wrong one is refused.
        urls.push(with_password(&common::admin_url(Backend::MySql)));
    }
    for url in urls {
        // A relay still running after 15 s would be retrying: outbox_with fails the test then.
        let o = outbox_with(&url, &["relay", "--dry-run"], &[], Duration::from_secs(15));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{url}: {err}");
        assert!(
            err.contains("cannot connect to the database") && !err.contains(RETRYING),
            "{url}: {err}"
        );
        assert_no_secret("malformed URL", &o);
    }
    // Settings that cannot work are refused before waiting for an unreachable database.
    let unreachable = format!(
        "postgres://app:{SECRET}@127.0.0.1:{}/x",
        common::free_port()
    );
    for args in [
        &["relay", "--rocketmq-namesrv", "localhost"][..],
        &["relay", "--rocketmq-namesrv", " "],
        // A send timeout that reaches the lease: the RocketMQ client's timeout is the same.
        &["relay", "--lease", "3s", "--send-timeout", "3s"],
        &["relay", "--lease", "3s", "--send-timeout", "1m"],
        &["relay", "--batch", "0"],
    ] {
        let o = outbox_with(&unreachable, args, &[], Duration::from_secs(5));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("invalid configuration") && !err.contains(RETRYING),
            "{args:?}: {err}"
        );
    }
}

/// SIGTERM while the relay waits for the database: a clean exit 0.
#[tokio::test]
async fn relay_stops_cleanly_while_waiting_for_the_database() {
    let url = format!("postgres://app:{SECRET}@nonexistent.invalid:5432/x");
    let relay = RelayProcess::spawn(&url, &[]);
    let waiting = relay
        .wait_for_stderr(RETRYING, Duration::from_secs(20))
        .await;
    let stderr_so_far = relay.stderr();
    let (status, out, err) = relay.terminate().await;
    assert!(waiting, "no retry logged: {stderr_so_far}");
    assert!(status.success(), "{status:?}: {err}");
    assert!(
        out.contains("relay stopped before the database could be reached"),
        "{out}"
    );
    assert!(err.contains("shutdown requested"), "{err}");
    assert!(!out.contains(SECRET) && !err.contains(SECRET), "{err}");
}

backend_test!(
    relay_connects_once_postgres_appears:
        Postgres, "relay_connects_once_the_database_appears" => relay_connects_once_the_database_appears;
    relay_connects_once_mariadb_appears:
        MySql, "relay_connects_once_the_database_appears" => relay_connects_once_the_database_appears;
);

/// The relay (a dry run) starts while nothing answers at its URL's port, logs retries, and runs
/// once a forwarder to the real server starts listening there; SIGTERM then stops it with
/// exit 0.
async fn relay_connects_once_the_database_appears(ctx: &TestContext) {
    let id = new_event(&ctx.db, "ORD-LATE-DB").await;
    let port = common::free_port();
    // Postgres trusts local logins, so a password can ride along (and must never show);
    // MariaDB's root has none.
    let url = match ctx.backend {
        Backend::Postgres => with_password(&ctx.url),
        _ => ctx.url.clone(),
    };
    let (url, server) = via_port(&url, port);
    let relay = RelayProcess::spawn(&url, &["--poll-delay", "100ms"]);
    // The driver retries a refused connection for up to 10 s within one attempt.
    let retried = relay
        .wait_for_stderr(RETRYING, Duration::from_secs(40))
        .await;
    assert!(retried, "no retry logged: {}", relay.stderr());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind the forwarder");
    let forwarder = tokio::spawn(forward(listener, server));
    let counted = relay
        .wait_for_stderr("1 event(s) waiting", Duration::from_secs(30))
        .await;
    let (status, out, err) = relay.terminate().await;
    forwarder.abort();
    assert!(
        counted,
        "the backlog was not read\nstdout: {out}\nstderr: {err}"
    );
    assert!(status.success(), "{status:?}: {err}");
    assert!(out.contains("relay stopped (dry run)"), "{out}");
    assert_eq!(
        event(&ctx.db, id).await.expect("row").status,
        EventStatus::Wait
    );
    assert!(
        err.contains("the database is reachable") && err.contains("relay started"),
        "{err}"
    );
    assert!(!out.contains(SECRET) && !err.contains(SECRET), "{err}");
    if ctx.backend == Backend::Postgres {
        assert!(err.contains("postgres:***@127.0.0.1"), "{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// redaction

/// `url` with `SECRET` as the user's password.
fn with_password(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let (user, host) = rest.split_once('@').expect("user@host");
    format!("{scheme}://{user}:{SECRET}@{host}")
}

fn assert_no_secret(what: &str, o: &Output) {
    let (so, se) = (stdout(o), stderr(o));
    assert!(
        !so.contains(SECRET) && !se.contains(SECRET),
        "{what} printed the password\nstdout: {so}\nstderr: {se}"
    );
}

async fn cli_never_prints_the_password(ctx: &TestContext) {
    let limit = Duration::from_secs(30);
    // A URL no driver supports: SeaORM's error quotes the whole connection string.
    let bad_scheme = format!("foo://app:{SECRET}@db.example/x");
    let o = outbox_with(&bad_scheme, &["stats"], &[], limit);
    assert_eq!(o.status.code(), Some(1));
    assert_no_secret("unsupported scheme", &o);
    assert!(
        stderr(&o).contains("foo://app:***@db.example/x"),
        "{}",
        stderr(&o)
    );
    // Nothing listens on port 1.
    let refused = format!("postgres://app:{SECRET}@127.0.0.1:1/x");
    let o = outbox_with(
        &refused,
        &["stats", "--json"],
        &[("RUST_LOG", "trace")],
        limit,
    );
    assert_ne!(o.status.code(), Some(0));
    assert_no_secret("connection refused", &o);
    // --help shows the environment, but not the URL's value.
    let o = outbox_with(&refused, &["--help"], &[], limit);
    assert!(o.status.success());
    assert_no_secret("--help", &o);
    // The password as a flag, and a password query parameter.
    let o = outbox_with(
        "",
        &[
            "--database-url",
            &format!("nope://u@h/x?password={SECRET}"),
            "stats",
        ],
        &[],
        limit,
    );
    assert_no_secret("query parameter", &o);

    match ctx.backend {
        // Trust authentication ignores the password: the commands run, with every log on.
        Backend::Postgres => {
            let url = with_password(&ctx.url);
            let trace = [("RUST_LOG", "trace")];
            for args in [
                &["stats"][..],
                &["dead", "list", "--json"],
                &["migrate", "status"],
            ] {
                let o = outbox_with(&url, args, &trace, limit);
                assert!(o.status.success(), "{args:?}: {}", stderr(&o));
                assert_no_secret("postgres command", &o);
            }
            let child = Command::new(env!("CARGO_BIN_EXE_outbox"))
                .env("OUTBOX_COMPLETION", common::completion().as_str())
                .args(["relay", "--dry-run", "--poll-delay", "50ms"])
                .env("DATABASE_URL", &url)
                .env_remove("ROCKETMQ_NAMESRV_ADDR")
                .env("RUST_LOG", "trace")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("relay");
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .expect("kill");
            let out = tokio::task::spawn_blocking(move || child.wait_with_output())
                .await
                .expect("join")
                .expect("output");
            assert!(out.status.success(), "{}", stderr(&out));
            assert_no_secret("relay at trace level", &out);
            assert!(
                stderr(&out).contains("postgres:***@127.0.0.1"),
                "the redacted URL is logged"
            );
        }
        // root has no password: a wrong one is refused, and the error must not repeat it.
        Backend::MySql => {
            let o = outbox_with(
                &with_password(&ctx.url),
                &["stats"],
                &[("RUST_LOG", "trace")],
                limit,
            );
            assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
            assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));
            assert_no_secret("mysql access denied", &o);
            // SeaORM's connect span logged the URL at DEBUG: it went out redacted.
            assert!(stderr(&o).contains("root:***@127.0.0.1"), "{}", stderr(&o));
        }
        Backend::Sqlite => {}
    }
}

/// `--table` (and `OUTBOX_TABLE`) names the table every command works on; a bad name is a
/// usage error (exit status 2) before anything is read, and `migrate` refuses any table but
/// `t_event_record` the same way.
async fn cli_table_flag_names_the_table_of_every_command(ctx: &TestContext) {
    let manager = sea_orm_migration::SchemaManager::new(&ctx.db);
    sea_orm_outbox::migration::create_outbox_table(&manager, "outbox_events")
        .await
        .expect("create outbox_events");
    let named = sea_orm_outbox::Outbox::new()
        .table("outbox_events")
        .expect("a valid name");
    for k in 0..2 {
        named
            .with_event(&ctx.db, NewEvent::raw(format!("T-{k}"), "T", "{}"))
            .await
            .expect("write");
    }
    let stats = json(&outbox_ok(
        ctx,
        &["--table", "outbox_events", "stats", "--json"],
    ));
    assert_eq!(stats["wait"], 2, "{stats}");
    let default = json(&outbox_ok(ctx, &["stats", "--json"]));
    assert_eq!(default["wait"], 0, "{default}");
    let by_env = outbox_with(
        &ctx.url,
        &["stats", "--json"],
        &[("OUTBOX_TABLE", "outbox_events")],
        Duration::from_secs(30),
    );
    assert_eq!(json(&stdout(&by_env))["wait"], 2, "{}", stderr(&by_env));
    let bad = outbox(ctx, &["--table", "outbox-events", "stats"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("outbox table name"),
        "{}",
        stderr(&bad)
    );
    let migrate = outbox(ctx, &["--table", "outbox_events", "migrate", "status"]);
    assert_eq!(migrate.status.code(), Some(2), "{}", stderr(&migrate));
    assert!(
        stderr(&migrate).contains("create_outbox_table"),
        "{}",
        stderr(&migrate)
    );
}
