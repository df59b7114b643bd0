//! The ceiling, `db_limit_eps`: WAIT→SENDING→SUCCESS as bare batched SQL on one connection.
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait, Value};

use crate::cpu::{CpuMark, CpuUse};
use crate::figures::{f1, Figures};
use crate::scratch::{BoxError, ScratchDb};
use crate::setup::{fill, now_sql, reset};
use crate::Args;

/// `n` placeholders of `backend`, numbered from `first` where the backend numbers them.
fn placeholders(backend: DbBackend, first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| match backend {
            DbBackend::Postgres => format!("${i}"),
            _ => "?".to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The claimed rows' publish fields, read as a relay would.
struct Row {
    id: i64,
    _biz_no: String,
    _event_type: String,
    _payload: String,
    _retry_count: i32,
}

/// [`Row`]s of a result whose columns are [`FIELDS`].
fn read_rows(rows: &[sea_orm::QueryResult]) -> Result<Vec<Row>, BoxError> {
    rows.iter()
        .map(|r| {
            Ok(Row {
                id: r.try_get_by_index(0)?,
                _biz_no: r.try_get_by_index(1)?,
                _event_type: r.try_get_by_index(2)?,
                _payload: r.try_get_by_index(3)?,
                _retry_count: r.try_get_by_index(4)?,
            })
        })
        .collect()
}

/// The columns a relay publishes from.
const FIELDS: &str = "id, biz_no, event_type, payload, retry_count";

/// Claims up to `batch` due events for `owner` with the backend's best single round trip (a
/// short transaction on MySQL), returning their publish fields.
async fn bare_claim(
    db: &DatabaseConnection,
    owner: &str,
    batch: u64,
) -> Result<Vec<Row>, BoxError> {
    let backend = db.get_database_backend();
    let now = now_sql(backend, None);
    let sql = match backend {
        DbBackend::Postgres => format!(
            "UPDATE t_event_record SET status = 'SENDING', claim_owner = $1, claimed_at = {now}, \
             update_time = {now} WHERE status = 'WAIT' AND id = ANY(ARRAY(SELECT id FROM \
             t_event_record WHERE status = 'WAIT' AND next_retry_time <= {now} ORDER BY \
             next_retry_time LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING {FIELDS}"
        ),
        DbBackend::MySql => {
            let txn = db.begin().await?;
            let sql = format!(
                "SELECT {FIELDS} FROM t_event_record WHERE status = 'WAIT' AND next_retry_time <= \
                 {now} ORDER BY next_retry_time LIMIT ? FOR UPDATE SKIP LOCKED"
            );
            let rows = read_rows(
                &txn.query_all_raw(Statement::from_sql_and_values(
                    backend,
                    sql,
                    [(batch as i64).into()],
                ))
                .await?,
            )?;
            if !rows.is_empty() {
                let sql = format!(
                    "UPDATE t_event_record SET status = 'SENDING', claim_owner = ?, claimed_at = {now}, \
                     update_time = {now} WHERE status = 'WAIT' AND id IN ({})",
                    placeholders(backend, 1, rows.len())
                );
                let mut values: Vec<Value> = vec![owner.into()];
                values.extend(rows.iter().map(|r| Value::from(r.id)));
                txn.execute_raw(Statement::from_sql_and_values(backend, sql, values))
                    .await?;
            }
            txn.commit().await?;
            return Ok(rows);
        }
        _ => format!(
            "UPDATE t_event_record SET status = 'SENDING', claim_owner = ?, claimed_at = {now}, \
             update_time = {now} WHERE status = 'WAIT' AND id IN (SELECT id FROM t_event_record \
             WHERE status = 'WAIT' AND next_retry_time <= {now} ORDER BY next_retry_time LIMIT ?) \
             RETURNING {FIELDS}"
        ),
    };
    // Postgres and SQLite: one UPDATE ... RETURNING.
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            sql,
            [owner.into(), (batch as i64).into()],
        ))
        .await?;
    read_rows(&rows)
}

/// Marks `ids` SUCCESS in one owner-guarded UPDATE.
async fn bare_mark(db: &DatabaseConnection, owner: &str, ids: &[i64]) -> Result<u64, BoxError> {
    let backend = db.get_database_backend();
    let now = now_sql(backend, None);
    let sql = format!(
        "UPDATE t_event_record SET status = 'SUCCESS', update_time = {now} WHERE status = 'SENDING' \
         AND claim_owner = {} AND id IN ({})",
        placeholders(backend, 1, 1),
        placeholders(backend, 2, ids.len())
    );
    let mut values: Vec<Value> = vec![owner.into()];
    values.extend(ids.iter().map(|id| Value::from(*id)));
    Ok(db
        .execute_raw(Statement::from_sql_and_values(backend, sql, values))
        .await?
        .rows_affected())
}

/// What the bare-SQL drain measured.
struct LimitResult {
    eps: f64,
    secs: f64,
    claim_ms: f64,
    mark_ms: f64,
    cpu: CpuUse,
}

/// Drains `--events` WAIT rows with [`bare_claim`] and [`bare_mark`] on one connection.
async fn db_limit(
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<LimitResult, BoxError> {
    reset(setup).await?;
    fill(setup, args.events, "WAIT").await?;
    let db = bench.pool(1).await?;
    let owner = "bench-bare-sql";
    let (mut claim, mut mark, mut done) = (Duration::ZERO, Duration::ZERO, 0u64);
    let cpu = CpuMark::now(bench.backend);
    let start = Instant::now();
    loop {
        let t = Instant::now();
        let rows = bare_claim(&db, owner, args.batch).await?;
        claim += t.elapsed();
        if rows.is_empty() {
            break;
        }
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let t = Instant::now();
        done += bare_mark(&db, owner, &ids).await?;
        mark += t.elapsed();
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu.since(bench.backend);
    db.close().await?;
    if done != args.events {
        return Err(format!("bare SQL marked {done} of {} events", args.events).into());
    }
    Ok(LimitResult {
        eps: done as f64 / secs,
        secs,
        claim_ms: claim.as_secs_f64() * 1000.0,
        mark_ms: mark.as_secs_f64() * 1000.0,
        cpu,
    })
}

/// `db_limit_eps` (or skipped with `--skip-db-limit`); returns it.
pub async fn figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<Option<f64>, BoxError> {
    if args.skip_db_limit {
        figs.skip("db_limit_eps", "--skip-db-limit");
        return Ok(None);
    }
    let r = db_limit(bench, setup, args).await?;
    figs.add(
        "db_limit_eps",
        f1(r.eps),
        format!(
            "bare SQL, 1 connection, batch {}: {:.2} s; claim {:.0} ms, mark {:.0} ms; {}; µs/event: bench {:.1}, db server {:.1}",
            args.batch,
            r.secs,
            r.claim_ms,
            r.mark_ms,
            r.cpu,
            r.cpu.us_per_event(r.secs, args.events).0,
            r.cpu.us_per_event(r.secs, args.events).1
        ),
    );
    Ok(Some(r.eps))
}

/// The in-database drain of Postgres: the same claim (`FOR UPDATE SKIP LOCKED`, the publish
/// columns returned) and owner-guarded `SUCCESS` mark as the relay, looped by a PL/pgSQL
/// procedure that commits after every batch; each claim has an owner of its own
/// (`<owner>#<k>`, like the relay's fencing token). Returns the rows marked.
const PG_DRAIN: &str = r#"CREATE OR REPLACE PROCEDURE outbox_bench_drain(
    p_owner text, p_batch integer, INOUT p_done bigint DEFAULT 0)
LANGUAGE plpgsql AS $proc$
DECLARE
    v_ids bigint[];
    v_bytes bigint;
    v_n bigint;
    v_k bigint := 0;
    v_owner text;
BEGIN
    p_done := 0;
    LOOP
        v_k := v_k + 1;
        v_owner := p_owner || '#' || v_k;
        WITH claimed AS (
            UPDATE t_event_record SET status = 'SENDING', claim_owner = v_owner,
                claimed_at = CURRENT_TIMESTAMP, update_time = CURRENT_TIMESTAMP
            WHERE status = 'WAIT' AND id = ANY(ARRAY(
                SELECT id FROM t_event_record
                WHERE status = 'WAIT' AND next_retry_time <= CURRENT_TIMESTAMP
                ORDER BY next_retry_time LIMIT p_batch FOR UPDATE SKIP LOCKED))
            RETURNING id, biz_no, event_type, payload, retry_count)
        SELECT array_agg(id), sum(length(biz_no) + length(event_type) + length(payload) + retry_count)
            INTO v_ids, v_bytes FROM claimed;
        EXIT WHEN v_ids IS NULL;
        UPDATE t_event_record SET status = 'SUCCESS', update_time = CURRENT_TIMESTAMP
            WHERE status = 'SENDING' AND claim_owner = v_owner AND id = ANY(v_ids);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        p_done := p_done + v_n;
        COMMIT;
    END LOOP;
END
$proc$"#;

/// The in-database drain of MariaDB/MySQL: a stored procedure doing what the relay's
/// statements do (a `READ COMMITTED` `SELECT ... FOR UPDATE SKIP LOCKED` of due ids, the claim
/// `UPDATE` of those ids, the owner-guarded `SUCCESS` mark), committing after every batch. The
/// locked ids go through a session-local MEMORY table (no arrays); the publish columns are not
/// read back (the relay's `SELECT *` reads them from the same rows it locks).
const MYSQL_DRAIN: [&str; 2] = [
    "DROP PROCEDURE IF EXISTS outbox_bench_drain",
    r#"CREATE PROCEDURE outbox_bench_drain(IN p_owner VARCHAR(128), IN p_batch INT, OUT p_done BIGINT)
BEGIN
    DECLARE v_k BIGINT DEFAULT 0;
    DECLARE v_owner VARCHAR(160);
    DECLARE v_now DATETIME(6);
    CREATE TEMPORARY TABLE IF NOT EXISTS outbox_bench_ids (id BIGINT PRIMARY KEY) ENGINE = MEMORY;
    SET p_done = 0;
    drain: LOOP
        DELETE FROM outbox_bench_ids;
        SET v_k = v_k + 1;
        SET v_owner = CONCAT(p_owner, '#', v_k);
        START TRANSACTION;
        INSERT INTO outbox_bench_ids (id)
            SELECT id FROM t_event_record
            WHERE status = 'WAIT' AND next_retry_time <= UTC_TIMESTAMP(6)
            ORDER BY next_retry_time LIMIT p_batch FOR UPDATE SKIP LOCKED;
        IF ROW_COUNT() = 0 THEN
            COMMIT;
            LEAVE drain;
        END IF;
        SET v_now = UTC_TIMESTAMP(6);
        UPDATE t_event_record t JOIN outbox_bench_ids i ON t.id = i.id
            SET t.status = 'SENDING', t.claim_owner = v_owner, t.claimed_at = v_now,
                t.update_time = v_now
            WHERE t.status = 'WAIT';
        UPDATE t_event_record t JOIN outbox_bench_ids i ON t.id = i.id
            SET t.status = 'SUCCESS', t.update_time = UTC_TIMESTAMP(6)
            WHERE t.status = 'SENDING' AND t.claim_owner = v_owner;
        SET p_done = p_done + ROW_COUNT();
        COMMIT;
    END LOOP;
    DROP TEMPORARY TABLE outbox_bench_ids;
END"#,
];

/// Creates the drain procedure of `backend`; `None` when it has none (SQLite: no stored
/// procedures), with the reason.
async fn create_drain(db: &DatabaseConnection) -> Result<Option<&'static str>, BoxError> {
    match db.get_database_backend() {
        DbBackend::Postgres => {
            db.execute_unprepared(PG_DRAIN).await?;
        }
        DbBackend::MySql => {
            for sql in MYSQL_DRAIN {
                db.execute_unprepared(sql).await?;
            }
        }
        _ => return Ok(Some("SQLite has no stored procedures")),
    }
    Ok(None)
}

/// One connection's `CALL` of the drain procedure as `owner`; the rows it marked.
async fn call_drain(db: &DatabaseConnection, owner: &str, batch: u64) -> Result<u64, BoxError> {
    // The owner is the bench's own ASCII label: inlined, so that the CALL is one simple query.
    match db.get_database_backend() {
        DbBackend::Postgres => {
            let row = db
                .query_one_raw(Statement::from_string(
                    DbBackend::Postgres,
                    format!("CALL outbox_bench_drain('{owner}', {batch}, 0)"),
                ))
                .await?
                .ok_or("CALL returned no row")?;
            Ok(row.try_get_by_index::<i64>(0)? as u64)
        }
        _ => {
            db.execute_unprepared("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                .await?;
            db.execute_unprepared(&format!(
                "CALL outbox_bench_drain('{owner}', {batch}, @done)"
            ))
            .await?;
            let row = db
                .query_one_raw(Statement::from_string(
                    DbBackend::MySql,
                    "SELECT CAST(@done AS SIGNED)",
                ))
                .await?
                .ok_or("SELECT @done returned no row")?;
            Ok(row.try_get_by_index::<i64>(0)? as u64)
        }
    }
}

/// What one in-database drain measured.
struct InprocResult {
    eps: f64,
    secs: f64,
    per_conn: Vec<u64>,
    cpu: CpuUse,
}

/// Drains `--events` WAIT rows with the drain procedure `CALL`ed on `conns` connections at
/// once (each its own pool of one connection, opened before the clock starts).
async fn db_limit_inproc(
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
    conns: usize,
) -> Result<InprocResult, BoxError> {
    reset(setup).await?;
    fill(setup, args.events, "WAIT").await?;
    let mut pools = Vec::new();
    for _ in 0..conns {
        let db = bench.pool(1).await?;
        db.ping().await?;
        pools.push(db);
    }
    let cpu = CpuMark::now(bench.backend);
    let start = Instant::now();
    let calls = pools.iter().enumerate().map(|(i, db)| {
        let owner = format!("bench-inproc-{i}");
        async move { call_drain(db, &owner, args.batch).await }
    });
    let per_conn = futures::future::try_join_all(calls).await?;
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu.since(bench.backend);
    for db in pools {
        db.close().await?;
    }
    let done: u64 = per_conn.iter().sum();
    if done != args.events {
        return Err(format!(
            "the in-database drain marked {done} of {} events",
            args.events
        )
        .into());
    }
    Ok(InprocResult {
        eps: done as f64 / secs,
        secs,
        per_conn,
        cpu,
    })
}

/// `db_limit_inproc_eps_c1` .. `_c4` and `db_limit_best_eps`, their best (or skipped with
/// `--skip-db-limit`, and on SQLite); returns the best.
pub async fn inproc_figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<Option<f64>, BoxError> {
    let skip = |figs: &mut Figures, why: &str| {
        for c in 1..=MAX_INPROC_CONNS {
            figs.skip(&format!("db_limit_inproc_eps_c{c}"), why);
        }
        figs.skip("db_limit_best_eps", why);
    };
    if args.skip_db_limit {
        skip(figs, "--skip-db-limit");
        return Ok(None);
    }
    if let Some(why) = create_drain(setup).await? {
        skip(figs, why);
        return Ok(None);
    }
    let mut best: Option<(usize, f64)> = None;
    for c in 1..=MAX_INPROC_CONNS {
        let r = db_limit_inproc(bench, setup, args, c).await?;
        figs.add(
            &format!("db_limit_inproc_eps_c{c}"),
            f1(r.eps),
            format!(
                "in-database drain (procedure: claim {} + guarded SUCCESS mark, COMMIT per batch), \
                 {c} connection(s) at once: {:.2} s, per connection {:?}; {}; db server {:.1} µs/event",
                args.batch,
                r.secs,
                r.per_conn,
                r.cpu,
                r.cpu.us_per_event(r.secs, args.events).1
            ),
        );
        if best.is_none_or(|(_, e)| r.eps > e) {
            best = Some((c, r.eps));
        }
    }
    let (c, eps) = best.expect("at least one connection count");
    figs.add(
        "db_limit_best_eps",
        f1(eps),
        format!("best of db_limit_inproc_eps_c1..c{MAX_INPROC_CONNS} (at {c} connection(s))"),
    );
    Ok(Some(eps))
}

/// The most connections the in-database drain is measured on.
const MAX_INPROC_CONNS: usize = 4;
