//! Wake-on-commit, the writers' side: the event insert queues `pg_notify` on
//! [`WAKE_CHANNEL`], delivered at commit and dropped on rollback (identical notifications of
//! one transaction are delivered once); relays `LISTEN` on it (`listen.rs`).
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sea_orm::sea_query::{Expr, InsertStatement, ReturningClause};
use sea_orm::{DbBackend, Statement};
use sea_orm_outbox_entity::event_record::Column;

/// The Postgres `LISTEN`/`NOTIFY` channel on which event inserts wake relays.
pub const WAKE_CHANNEL: &str = "sea_orm_outbox";

/// The first key of the advisory locks that share the wake-up notification among concurrent
/// writers (`pg_try_advisory_xact_lock(NOTIFY_SLOT_LOCK_CLASS, slot)`): 1329745752, `"OBOX"`
/// in ASCII. See [`crate::NewEvent::notify_interval`].
pub const NOTIFY_SLOT_LOCK_CLASS: i32 = 0x4F42_4F58;

/// The event insert (`INSERT ... RETURNING id`) made so that the same round trip queues
/// `pg_notify('sea_orm_outbox', '')` in its `RETURNING` list (a data-modifying `WITH` would slow
/// every write). `notify` ([`crate::NewEvent::notify_interval`]): `None` leaves `insert`
/// unchanged; `Some(Duration::ZERO)` notifies on every event; `Some(interval)` notifies only
/// when the insert gets the advisory lock of the current slot ([`slot_key`],
/// [`NOTIFY_SLOT_LOCK_CLASS`]), so that one open transaction per slot notifies: `CASE WHEN
/// pg_try_advisory_xact_lock(1329745752, $n::int) THEN pg_notify(...) IS NOT NULL ELSE false
/// END AS notified`. The lock never waits and is released at the transaction's end.
pub(crate) fn with_wakeup(
    mut insert: InsertStatement,
    notify: Option<Duration>,
) -> InsertStatement {
    let Some(interval) = notify else {
        return insert;
    };
    let notified = match slot_key(interval, SystemTime::now()) {
        _ if interval.is_zero() => Expr::cust(format!(
            "pg_notify('{WAKE_CHANNEL}', '') IS NOT NULL AS notified"
        )),
        Some(key) => Expr::cust_with_values(
            format!(
                "CASE WHEN pg_try_advisory_xact_lock({NOTIFY_SLOT_LOCK_CLASS}, $1::int) \
                 THEN pg_notify('{WAKE_CHANNEL}', '') IS NOT NULL ELSE false END AS notified"
            ),
            [key],
        ),
        // A clock before 1970 would give every slot one key: notify on its own instead.
        None => return with_wakeup(insert, Some(Duration::ZERO)),
    };
    insert.returning(ReturningClause::Exprs(vec![
        Expr::col(Column::Id),
        notified,
    ]));
    insert
}

/// `SELECT pg_notify('sea_orm_outbox', '')`: the wake-up on its own (see
/// [`crate::driver::Driver::wakeup_alone`]).
pub(crate) fn wakeup_alone() -> Statement {
    Statement::from_string(
        DbBackend::Postgres,
        format!("SELECT pg_notify('{WAKE_CHANNEL}', '')"),
    )
}

/// The advisory lock key (second half) of the slot of `interval` that `now` falls in: the
/// number of whole `interval`s (in milliseconds, rounded up, at least 1) since the Unix epoch,
/// modulo 2^31 − 1; `None` for a clock before 1970 (the insert then notifies on its own).
/// The writer's clock is enough: the key only picks which lock concurrent inserts compete for,
/// and nothing compares it with a stored time.
pub(crate) fn slot_key(interval: Duration, now: SystemTime) -> Option<i32> {
    let since = now.duration_since(UNIX_EPOCH).ok()?.as_millis();
    // The remainder is below 2^31 - 1: the conversion cannot fail.
    i32::try_from((since / slot_millis(interval)) % 2_147_483_647).ok()
}

/// `interval` in whole milliseconds, rounded up, at least 1 (the slot length).
fn slot_millis(interval: Duration) -> u128 {
    interval.as_nanos().div_ceil(1_000_000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::sea_query::{Alias, Query};
    use sea_orm::Value;

    #[test]
    fn slot_keys_count_whole_intervals_since_the_epoch() {
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        let ten = Duration::from_millis(10);
        assert_eq!(slot_key(ten, at(0)), Some(0));
        assert_eq!(slot_key(ten, at(9)), Some(0));
        assert_eq!(slot_key(ten, at(10)), Some(1));
        // 176,400,000,012 slots, modulo 2^31 - 1.
        assert_eq!(slot_key(ten, at(1_764_000_000_123)), Some(306_340_958));
        // A fraction of a millisecond rounds up; zero counts as 1 ms.
        assert_eq!(slot_key(Duration::from_micros(1_500), at(4)), Some(2));
        assert_eq!(slot_key(Duration::ZERO, at(7)), Some(7));
        // The longest interval: one key for as long as `SystemTime` lasts.
        assert_eq!(slot_key(Duration::MAX, SystemTime::now()), Some(0));
        // 1 ms slots a thousand years from now wrap around and stay in range.
        let later = UNIX_EPOCH + Duration::from_secs(1_000 * 365 * 24 * 3600);
        let ms = 1_000_u128 * 365 * 24 * 3600 * 1000;
        let expected = i32::try_from(ms % 2_147_483_647).expect("in range");
        assert_eq!(slot_key(Duration::from_millis(1), later), Some(expected));
        // Before 1970: no key.
        assert_eq!(slot_key(ten, UNIX_EPOCH - Duration::from_secs(5)), None);
    }

    #[test]
    fn the_slot_rule_binds_its_key() {
        let insert = || {
            Query::insert()
                .into_table(Alias::new("t"))
                .columns([Alias::new("a")])
                .values_panic([1.into()])
                .returning_col(Column::Id)
                .to_owned()
        };
        let stmt =
            DbBackend::Postgres.build(&with_wakeup(insert(), Some(Duration::from_millis(10))));
        assert_eq!(
            stmt.sql,
            r#"INSERT INTO "t" ("a") VALUES ($1) RETURNING "id", CASE WHEN pg_try_advisory_xact_lock(1329745752, $2::int) THEN pg_notify('sea_orm_outbox', '') IS NOT NULL ELSE false END AS notified"#
        );
        let values = stmt.values.expect("values").0;
        assert_eq!(values.len(), 2);
        assert!(matches!(values[1], Value::Int(Some(k)) if k >= 0));
        // Slots as long as they come: one key, 0.
        let stmt = DbBackend::Postgres.build(&with_wakeup(insert(), Some(Duration::MAX)));
        assert_eq!(stmt.values.expect("values").0[1], Value::Int(Some(0)));
        // Every event notifies; no notification leaves the insert as it is.
        let stmt = DbBackend::Postgres.build(&with_wakeup(insert(), Some(Duration::ZERO)));
        assert_eq!(
            stmt.sql,
            r#"INSERT INTO "t" ("a") VALUES ($1) RETURNING "id", pg_notify('sea_orm_outbox', '') IS NOT NULL AS notified"#
        );
        let stmt = DbBackend::Postgres.build(&with_wakeup(insert(), None));
        assert_eq!(
            stmt.sql,
            r#"INSERT INTO "t" ("a") VALUES ($1) RETURNING "id""#
        );
    }
}
