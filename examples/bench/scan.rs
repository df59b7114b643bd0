//! The idle candidate scan over many delivered rows (`idle_poll_rows_examined`, and
//! `idle_poll_rows_examined_batch` for the batch claim's scan): rows examined per statement,
//! from Postgres' `EXPLAIN (ANALYZE, BUFFERS)` or MariaDB/MySQL's `Handler_read%` counters.
use std::collections::HashMap;
use std::time::Instant;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait};

use crate::figures::{percentile, Figures};
use crate::scratch::BoxError;
use crate::setup::{candidates_sql, fill, pg_batch_claim_sql, reset};
use crate::Args;

/// What one statement's scan cost.
pub struct ScanResult {
    /// Rows the scan touched (Postgres: rows out of scan nodes plus rows removed by filters;
    /// MySQL: Handler_read% delta).
    rows_examined: i64,
    /// Postgres: shared buffers hit + read.
    pub buffers: Option<i64>,
    /// Plan summary (Postgres: scan nodes; MySQL: non-zero handler counters).
    pub plan: String,
    /// Median wall time of the statement, ms.
    pub median_ms: f64,
}

/// Sums rows examined and lists scan nodes of a Postgres JSON plan node.
fn walk_pg_plan(node: &serde_json::Value, rows: &mut i64, plan: &mut Vec<String>) {
    let get = |k: &str| node.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
    let kind = node
        .get("Node Type")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    if kind.contains("Scan") {
        let out = get("Actual Rows") * get("Actual Loops").max(1.0);
        let removed = get("Rows Removed by Filter") + get("Rows Removed by Index Recheck");
        *rows += (out + removed) as i64;
        let index = node
            .get("Index Name")
            .and_then(|v| v.as_str())
            .unwrap_or("-");
        plan.push(format!("{kind} on {index}: {out} rows, {removed} removed"));
    }
    if let Some(children) = node.get("Plans").and_then(|v| v.as_array()) {
        for c in children {
            walk_pg_plan(c, rows, plan);
        }
    }
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of `sql` on Postgres, then its median time over 20 runs, all
/// in one transaction rolled back at the end.
pub async fn pg_explain(db: &DatabaseConnection, sql: &str) -> Result<ScanResult, BoxError> {
    let txn = db.begin().await?; // EXPLAIN ANALYZE of an UPDATE runs it: roll back afterwards.
    let row = txn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"),
        ))
        .await?
        .ok_or("EXPLAIN returned nothing")?;
    let json: serde_json::Value = row.try_get_by_index(0)?;
    let top = &json[0];
    let (mut rows, mut plan) = (0, Vec::new());
    walk_pg_plan(&top["Plan"], &mut rows, &mut plan);
    let p = &top["Plan"];
    let buffers = p["Shared Hit Blocks"].as_i64().unwrap_or(0)
        + p["Shared Read Blocks"].as_i64().unwrap_or(0);
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        txn.execute_unprepared(sql).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    txn.rollback().await?;
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(ScanResult {
        rows_examined: rows,
        buffers: Some(buffers),
        plan: plan.join("; "),
        median_ms: percentile(&times, 50.0),
    })
}

/// The session's `Handler_read%` counters.
async fn mysql_handler_reads(
    txn: &sea_orm::DatabaseTransaction,
) -> Result<HashMap<String, i64>, BoxError> {
    let rows = txn
        .query_all_raw(Statement::from_string(
            DbBackend::MySql,
            "SHOW SESSION STATUS LIKE 'Handler_read%'",
        ))
        .await?;
    let mut out = HashMap::new();
    for r in rows {
        let name: String = r.try_get_by_index(0)?;
        let value: String = r.try_get_by_index(1)?;
        out.insert(name, value.parse().unwrap_or(0));
    }
    Ok(out)
}

/// `b - a` per counter.
fn delta(a: &HashMap<String, i64>, b: &HashMap<String, i64>) -> HashMap<String, i64> {
    b.iter()
        .map(|(k, v)| (k.clone(), v - a.get(k).copied().unwrap_or(0)))
        .collect()
}

/// The handler reads of `sql` on MariaDB/MySQL, then its median time over 20 runs.
async fn mysql_scan(db: &DatabaseConnection, sql: &str) -> Result<ScanResult, BoxError> {
    // One transaction = one connection, so the session counters are this statement's.
    let txn = db.begin().await?;
    let s0 = mysql_handler_reads(&txn).await?;
    let s1 = mysql_handler_reads(&txn).await?; // what SHOW STATUS itself adds
    txn.query_all_raw(Statement::from_string(DbBackend::MySql, sql.to_owned()))
        .await?;
    let s2 = mysql_handler_reads(&txn).await?;
    let (noise, scan) = (delta(&s0, &s1), delta(&s1, &s2));
    let mut parts: Vec<(String, i64)> = scan
        .iter()
        .map(|(k, v)| (k.clone(), v - noise.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v != 0)
        .collect();
    parts.sort();
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        txn.query_all_raw(Statement::from_string(DbBackend::MySql, sql.to_owned()))
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    txn.rollback().await?;
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(ScanResult {
        rows_examined: parts.iter().map(|p| p.1).sum(),
        buffers: None,
        plan: if parts.is_empty() {
            "no handler reads".into()
        } else {
            parts
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
        median_ms: percentile(&times, 50.0),
    })
}

/// `idle_poll_rows_examined` (and `idle_poll_rows_examined_batch`) over `--poll-rows` SUCCESS
/// rows, skipped with `--skip-poll-rows` or on SQLite.
pub async fn figures(
    figs: &mut Figures,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<(), BoxError> {
    if args.skip_poll_rows {
        figs.skip("idle_poll_rows_examined", "--skip-poll-rows");
        return Ok(());
    }
    let backend = setup.get_database_backend();
    reset(setup).await?;
    let t = Instant::now();
    fill(setup, args.poll_rows, "SUCCESS").await?;
    let fill_s = t.elapsed().as_secs_f64();
    let candidates = candidates_sql(backend, args.per_row_batch, false);
    let scans = match backend {
        DbBackend::Postgres => Some((
            pg_explain(setup, &candidates).await?,
            Some(pg_explain(setup, &pg_batch_claim_sql("bench-idle", args.batch)).await?),
        )),
        DbBackend::MySql => {
            let locking = candidates_sql(backend, args.batch, true);
            Some((
                mysql_scan(setup, &candidates).await?,
                Some(mysql_scan(setup, &locking).await?),
            ))
        }
        _ => None,
    };
    let Some((c, b)) = scans else {
        figs.skip("idle_poll_rows_examined", "no row counters on SQLite");
        return Ok(());
    };
    let buf = |s: &ScanResult| {
        s.buffers
            .map_or(String::new(), |b| format!(", {b} buffers"))
    };
    figs.add(
        "idle_poll_rows_examined",
        c.rows_examined,
        format!(
            "per-row candidate SELECT over {} SUCCESS rows (bulk insert {:.1} s): {}{}, median {:.3} ms",
            args.poll_rows, fill_s, c.plan, buf(&c), c.median_ms
        ),
    );
    if let Some(b) = b {
        figs.add(
            "idle_poll_rows_examined_batch",
            b.rows_examined,
            format!(
                "batch claim's scan: {}{}, median {:.3} ms",
                b.plan,
                buf(&b),
                b.median_ms
            ),
        );
    }
    Ok(())
}
