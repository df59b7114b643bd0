//! The ceiling, `db_limit_eps`: WAIT→SENDING→SUCCESS as bare batched SQL on one connection.
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait, Value};
use sea_orm_outbox::store;

use crate::cpu::{CpuMark, CpuUse};
use crate::figures::{f1, Figures};
use crate::scratch::{BoxError, ScratchDb};
use crate::setup::{fill, reset};
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
    let now = store::dialect::now_sql(backend, None);
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
    let now = store::dialect::now_sql(backend, None);
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
            "bare SQL, 1 connection, batch {}: {:.2} s; claim {:.0} ms, mark {:.0} ms; {}",
            args.batch, r.secs, r.claim_ms, r.mark_ms, r.cpu
        ),
    );
    Ok(Some(r.eps))
}
