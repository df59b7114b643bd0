//! The outbox table between phases: emptied, filled by bulk SQL, counted by status.
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

use crate::scratch::BoxError;

/// Empties the outbox table; on Postgres then takes a [`checkpoint`]. Every phase starts with
/// it, outside its timed part.
pub async fn reset(db: &DatabaseConnection) -> Result<(), BoxError> {
    let sql = match db.get_database_backend() {
        DbBackend::Postgres => "TRUNCATE t_event_record RESTART IDENTITY",
        DbBackend::MySql => "TRUNCATE TABLE t_event_record",
        _ => "DELETE FROM t_event_record",
    };
    db.execute_unprepared(sql).await?;
    if db.get_database_backend() == DbBackend::Postgres {
        checkpoint(db).await;
    }
    Ok(())
}

/// Postgres: `CHECKPOINT` after emptying the table and before the phase's fill (see
/// [`reset`]), so that every phase starts close to the last checkpoint. Without it the WAL of
/// the phases before (about 90 MB per 50,000-event phase, fill included) set off a checkpoint (`max_wal_size`)
/// inside whichever phase came next, in the acceptance runs the relay's, last in its run: from
/// then on the first change of each page wrote a full-page image. Taken before the fill, the
/// table's new pages are younger than the checkpoint and need no full-page images when the
/// phase changes them. Needs a superuser or (Postgres 15 and later) the `pg_checkpoint` role;
/// without them the phases run as before (said on stderr).
async fn checkpoint(db: &DatabaseConnection) {
    if let Err(e) = db.execute_unprepared("CHECKPOINT").await {
        eprintln!("note: CHECKPOINT before the phase failed ({e}); phases may meet a checkpoint");
    }
}

/// Inserts `n` events with `status` by bulk SQL, due an hour ago (Postgres and MariaDB: one
/// microsecond apart, in id order), each with a key of its own (`BENCH-<g>`), then refreshes
/// the planner statistics.
pub async fn fill(db: &DatabaseConnection, n: u64, status: &str) -> Result<(), BoxError> {
    fill_keyed(db, n, status, None).await
}

/// [`fill`] with the events spread round robin over `keys` keys (`BENCH-<g % keys>`: one key's
/// ids interleave with the others'), or a key per event (`None`).
pub async fn fill_keyed(
    db: &DatabaseConnection,
    n: u64,
    status: &str,
    keys: Option<u64>,
) -> Result<(), BoxError> {
    let backend = db.get_database_backend();
    let (pg_key, my_key) = match keys {
        Some(k) => (format!("(g % {k})"), format!("(seq % {k})")),
        None => ("g".to_owned(), "seq".to_owned()),
    };
    let cols = "biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time";
    match backend {
        DbBackend::Postgres => {
            db.execute_unprepared(&format!(
                "INSERT INTO t_event_record ({cols}) SELECT 'BENCH-' || {pg_key}, 'ORDER_CREATED', \
                 '{{\"orderId\":' || g || ',\"amountCents\":1234}}', '{status}', 0, \
                 CURRENT_TIMESTAMP - INTERVAL '1 hour' + g * INTERVAL '1 microsecond', \
                 CURRENT_TIMESTAMP, CURRENT_TIMESTAMP FROM generate_series(1, {n}) g"
            ))
            .await?;
            db.execute_unprepared("VACUUM ANALYZE t_event_record")
                .await?;
            return Ok(());
        }
        DbBackend::MySql => {
            // MariaDB's sequence engine; MySQL lacks it and takes the generic path below.
            let seq = db
                .execute_unprepared(&format!(
                    "INSERT INTO t_event_record ({cols}) SELECT CONCAT('BENCH-', {my_key}), \
                     'ORDER_CREATED', CONCAT('{{\"orderId\":', seq, ',\"amountCents\":1234}}'), \
                     '{status}', 0, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL seq MICROSECOND, \
                     UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM seq_1_to_{n}"
                ))
                .await;
            if seq.is_ok() {
                db.execute_unprepared("ANALYZE TABLE t_event_record")
                    .await?;
                return Ok(());
            }
        }
        _ => {}
    }
    let due = now_sql(backend, Some(('-', Duration::from_secs(3600))));
    let now = now_sql(backend, None);
    let mut i = 1;
    while i <= n {
        let end = (i + 999).min(n);
        let mut sql = format!("INSERT INTO t_event_record ({cols}) VALUES ");
        for g in i..=end {
            if g > i {
                sql.push(',');
            }
            let key = keys.map_or(g, |k| g % k);
            let _ = write!(
                sql,
                "('BENCH-{key}', 'ORDER_CREATED', '{{\"orderId\":{g},\"amountCents\":1234}}', \
                 '{status}', 0, {due}, {now}, {now})"
            );
        }
        db.execute_unprepared(&sql).await?;
        i = end + 1;
    }
    db.execute_unprepared(if backend == DbBackend::MySql {
        "ANALYZE TABLE t_event_record"
    } else {
        "ANALYZE"
    })
    .await?;
    Ok(())
}

/// Rows of the outbox table per status.
pub async fn status_counts(db: &DatabaseConnection) -> Result<HashMap<String, i64>, BoxError> {
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT status, COUNT(*) FROM t_event_record GROUP BY status",
        ))
        .await?;
    let mut out = HashMap::new();
    for r in rows {
        out.insert(
            r.try_get_by_index::<String>(0)?,
            r.try_get_by_index::<i64>(1)?,
        );
    }
    Ok(out)
}

/// The SQL text of the database clock's now, or now ± `d` for `Some((sign, d))`, in the form
/// the outbox writes it on `backend` (SQLite: fixed-width RFC 3339 text, which sorts as time).
pub fn now_sql(backend: DbBackend, offset: Option<(char, Duration)>) -> String {
    match (backend, offset) {
        (DbBackend::Postgres, None) => "CURRENT_TIMESTAMP".to_owned(),
        (DbBackend::Postgres, Some((sign, d))) => format!(
            "(CURRENT_TIMESTAMP {sign} INTERVAL '{} microseconds')",
            d.as_micros()
        ),
        (DbBackend::MySql, None) => "UTC_TIMESTAMP(6)".to_owned(),
        (DbBackend::MySql, Some((sign, d))) => format!(
            "(UTC_TIMESTAMP(6) {sign} INTERVAL {} MICROSECOND)",
            d.as_micros()
        ),
        (_, None) => "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')".to_owned(),
        (_, Some((sign, d))) => format!(
            "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now', '{sign}{}.{:06} seconds')",
            d.as_secs(),
            d.subsec_micros()
        ),
    }
}

/// The relay's scan for due events as SQL text: the `WAIT` events due now, oldest due first,
/// at most `n`; with `locking` (Postgres, MySQL/MariaDB) it skips and locks rows as a batch
/// claim's scan does. The same shape as the statements the outbox sends, which are its own.
pub fn candidates_sql(backend: DbBackend, n: u64, locking: bool) -> String {
    let now = now_sql(backend, None);
    let lock = if locking {
        " FOR UPDATE SKIP LOCKED"
    } else {
        ""
    };
    format!(
        "SELECT * FROM t_event_record WHERE status = 'WAIT' AND next_retry_time <= {now} \
         ORDER BY next_retry_time ASC LIMIT {n}{lock}"
    )
}

/// The Postgres batch claim of up to `n` due events for `owner` as SQL text, in the form the
/// outbox sends it: one `UPDATE ... RETURNING` of the ids its locking scan (`LIMIT` the next
/// power of two) picks, guarded by `(status = 'WAIT') IS TRUE`.
pub fn pg_batch_claim_sql(owner: &str, n: u64) -> String {
    let bucket = n.next_power_of_two();
    format!(
        "UPDATE t_event_record SET status = 'SENDING', claim_owner = '{owner}', \
         claimed_at = CURRENT_TIMESTAMP, update_time = CURRENT_TIMESTAMP \
         WHERE (status = 'WAIT') IS TRUE AND id = ANY(ARRAY(SELECT id FROM (SELECT id FROM \
         t_event_record WHERE status = 'WAIT' AND next_retry_time <= CURRENT_TIMESTAMP \
         ORDER BY next_retry_time ASC LIMIT {bucket} FOR UPDATE SKIP LOCKED) AS due LIMIT {n})) \
         RETURNING id, biz_no, event_type, payload, retry_count, next_retry_time, claimed_at, \
         last_error, create_time, headers"
    )
}
