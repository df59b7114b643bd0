//! Events for the suites: written, read, counted and aged by hand.
use std::collections::HashMap;
use std::time::Duration;

use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, PaginatorTrait,
    QueryFilter, TransactionTrait,
};
use sea_orm_outbox::event_record::{self, Column, Entity as Events};
use sea_orm_outbox::{EventStatus, NewEvent, Outbox, OutboxExt};

use super::completion::{delivered_by_delete, delivered_row};

/// Writes one `ORDER_CREATED` event `biz_no` with payload `{}` (its own autocommit); returns
/// its id.
pub async fn new_event(db: &impl ConnectionTrait, biz_no: &str) -> i64 {
    db.with_event(NewEvent::raw(biz_no, "ORDER_CREATED", "{}"))
        .await
        .expect("insert")
}

/// Writes `n` `ORDER_CREATED` events `<prefix>-<i>` with payload `{"n":<i>}` in one
/// transaction; returns their ids in order.
pub async fn insert_many(db: &DatabaseConnection, prefix: &str, n: usize) -> Vec<i64> {
    let txn = db.begin().await.expect("begin");
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(
            txn.with_event(NewEvent::raw(
                format!("{prefix}-{i}"),
                "ORDER_CREATED",
                format!(r#"{{"n":{i}}}"#),
            ))
            .await
            .expect("insert"),
        );
    }
    txn.commit().await.expect("commit");
    ids
}

/// Rows of `t_event_record` in `status`; for `SUCCESS`, with the events delivered by delete
/// ([`super::completion`]).
pub async fn count(db: &impl ConnectionTrait, status: EventStatus) -> u64 {
    let rows = Events::find()
        .filter(Column::Status.eq(status.as_str()))
        .count(db)
        .await
        .expect("count");
    match status {
        EventStatus::Success => rows + delivered_by_delete(db, &Outbox::default()).await,
        _ => rows,
    }
}

/// Rows of `t_event_record`, with the events delivered by delete ([`super::completion`]): the
/// events written, as long as nothing else deleted one.
pub async fn count_written(db: &impl ConnectionTrait) -> u64 {
    let rows = Events::find().count(db).await.expect("count");
    rows + delivered_by_delete(db, &Outbox::default()).await
}

/// Whether `n` events are `SUCCESS` within `deadline` (checked every 50 ms).
pub async fn wait_for_success(db: &impl ConnectionTrait, n: u64, deadline: Duration) -> bool {
    super::wait_until(deadline, Duration::from_millis(50), || async {
        count(db, EventStatus::Success).await == n
    })
    .await
}

/// The event `id`, which must exist: its row, or when the relay deleted it on delivery its
/// last state as `SUCCESS` ([`super::completion`]).
pub async fn event(db: &impl ConnectionTrait, id: i64) -> event_record::Model {
    let row = Events::find_by_id(id).one(db).await.expect("read");
    match row {
        Some(e) => e,
        None => delivered_row(db, &Outbox::default(), Column::Id, id.into())
            .await
            .expect("event exists"),
    }
}

/// The event whose `biz_no` is `biz_no`, which must exist (read as [`event`] reads one).
pub async fn event_by_biz_no(db: &impl ConnectionTrait, biz_no: &str) -> event_record::Model {
    let row = Events::find()
        .filter(Column::BizNo.eq(biz_no))
        .one(db)
        .await
        .expect("read");
    match row {
        Some(e) => e,
        None => delivered_row(db, &Outbox::default(), Column::BizNo, biz_no.into())
            .await
            .unwrap_or_else(|| panic!("event {biz_no} exists")),
    }
}

/// Moves a timestamp column of event `id` to the database's now − `ago`.
pub async fn age(db: &impl ConnectionTrait, id: i64, col: Column, ago: Duration) {
    age_many(db, &[id], col, ago).await
}

/// Moves a timestamp column of the events `ids` to the database's now − `ago`.
pub async fn age_many(db: &impl ConnectionTrait, ids: &[i64], col: Column, ago: Duration) {
    let backend = db.get_database_backend();
    Events::update_many()
        .col_expr(col, db_now(backend, Some(('-', ago))))
        .filter(Column::Id.is_in(ids.to_vec()))
        .exec(db)
        .await
        .expect("age");
}

/// Makes the events `ids` dead letters that failed with `error`: `status = 'FAIL'`,
/// `last_error = error`, `update_time` the database's now.
pub async fn dead_letter(db: &impl ConnectionTrait, ids: &[i64], error: Option<&str>) {
    let backend = db.get_database_backend();
    Events::update_many()
        .col_expr(Column::Status, Expr::val(EventStatus::Fail.as_str()))
        .col_expr(Column::LastError, Expr::val(error.map(str::to_owned)))
        .col_expr(Column::UpdateTime, db_now(backend, None))
        .filter(Column::Id.is_in(ids.to_vec()))
        .exec(db)
        .await
        .expect("dead-letter");
}

/// Writes `per_key` events for each of `keys`, round robin (so the keys' ids interleave), in
/// transactions of 500; returns each key's ids, ascending.
pub async fn insert_keys(
    db: &DatabaseConnection,
    keys: &[String],
    per_key: usize,
) -> HashMap<String, Vec<i64>> {
    let mut ids: HashMap<String, Vec<i64>> = HashMap::new();
    let mut pending: Vec<(String, usize)> = (0..per_key)
        .flat_map(|seq| keys.iter().map(move |k| (k.clone(), seq)))
        .collect();
    while !pending.is_empty() {
        let chunk: Vec<(String, usize)> = pending.drain(..pending.len().min(500)).collect();
        let txn = db.begin().await.expect("begin");
        for (key, seq) in chunk {
            let id = txn
                .with_event(NewEvent::raw(
                    key.clone(),
                    "ORDER_STEP",
                    format!(r#"{{"seq":{seq}}}"#),
                ))
                .await
                .expect("insert");
            ids.entry(key).or_default().push(id);
        }
        txn.commit().await.expect("commit");
    }
    ids
}

/// The database clock's now, or now ± `d` for `Some((sign, d))`, in the form the outbox writes
/// it on `backend` (SQLite: fixed-width RFC 3339 text).
pub fn db_now(backend: DbBackend, offset: Option<(char, Duration)>) -> Expr {
    Expr::cust(db_now_sql(backend, offset))
}

/// The SQL text of [`db_now`].
pub fn db_now_sql(backend: DbBackend, offset: Option<(char, Duration)>) -> String {
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

/// Leases the `WAIT` events `ids` to `owner` now (database clock), as a relay's claim leaves
/// them: the suites' stand-in for an instance that claimed them and died. Panics unless every
/// one was waiting.
pub async fn claim_by_hand(db: &impl ConnectionTrait, ids: &[i64], owner: &str) {
    let now = db_now(db.get_database_backend(), None);
    let r = Events::update_many()
        .col_expr(Column::Status, Expr::val(EventStatus::Sending.as_str()))
        .col_expr(Column::ClaimOwner, Expr::val(owner))
        .col_expr(Column::ClaimedAt, now.clone())
        .col_expr(Column::UpdateTime, now)
        .filter(Column::Id.is_in(ids.to_vec()))
        .filter(Column::Status.eq(EventStatus::Wait.as_str()))
        .exec(db)
        .await
        .expect("claim by hand");
    assert_eq!(r.rows_affected, ids.len() as u64, "claim of {ids:?}");
}
