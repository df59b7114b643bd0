//! Events for the suites: written, read, counted and aged by hand.
use std::collections::HashMap;
use std::time::Duration;

use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter,
    TransactionTrait,
};
use sea_orm_outbox::driver;
use sea_orm_outbox::event_record::{self, Column, Entity as Events};
use sea_orm_outbox::{EventStatus, NewEvent, OutboxExt};

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

/// Rows of `t_event_record` in `status`.
pub async fn count(db: &impl ConnectionTrait, status: EventStatus) -> u64 {
    Events::find()
        .filter(Column::Status.eq(status.as_str()))
        .count(db)
        .await
        .expect("count")
}

/// Whether `n` events are `SUCCESS` within `deadline` (checked every 50 ms).
pub async fn wait_for_success(db: &impl ConnectionTrait, n: u64, deadline: Duration) -> bool {
    sea_orm_outbox::test_support::wait_until(deadline, Duration::from_millis(50), || async {
        count(db, EventStatus::Success).await == n
    })
    .await
}

/// The event `id`, which must exist.
pub async fn event(db: &impl ConnectionTrait, id: i64) -> event_record::Model {
    sea_orm_outbox::driver::find_event(db, id)
        .await
        .expect("read")
        .expect("event exists")
}

/// The event whose `biz_no` is `biz_no`, which must exist.
pub async fn event_by_biz_no(db: &impl ConnectionTrait, biz_no: &str) -> event_record::Model {
    Events::find()
        .filter(Column::BizNo.eq(biz_no))
        .one(db)
        .await
        .expect("read")
        .unwrap_or_else(|| panic!("event {biz_no} exists"))
}

/// Moves a timestamp column of event `id` to the database's now − `ago`.
pub async fn age(db: &impl ConnectionTrait, id: i64, col: Column, ago: Duration) {
    age_many(db, &[id], col, ago).await
}

/// Moves a timestamp column of the events `ids` to the database's now − `ago`.
pub async fn age_many(db: &impl ConnectionTrait, ids: &[i64], col: Column, ago: Duration) {
    let backend = db.get_database_backend();
    Events::update_many()
        .col_expr(
            col,
            driver::Driver::of(backend)
                .expect("a known backend")
                .now_minus(ago),
        )
        .filter(Column::Id.is_in(ids.to_vec()))
        .exec(db)
        .await
        .expect("age");
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
