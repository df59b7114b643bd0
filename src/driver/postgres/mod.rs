//! PostgreSQL: `CURRENT_TIMESTAMP`, `RETURNING`, `FOR UPDATE SKIP LOCKED`, `LISTEN`/`NOTIFY`,
//! the simple protocol for transaction-mode poolers.
//!
//! The statements are SQL of Postgres' alone and compile in every build; what needs sqlx's
//! Postgres driver (the `LISTEN` connection, the guarded pool, the simple protocol's reads)
//! is built with the `postgres` feature only.
pub(super) mod claim;
pub(super) mod error;
#[cfg(feature = "postgres")]
pub(super) mod listen;
pub(super) mod notify;
pub(super) mod ordered;
#[cfg(feature = "postgres")]
mod pool;
pub(super) mod simple;

use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::DatabaseConnection;

pub use notify::WAKE_CHANNEL;

/// The crate feature serving Postgres, and whether this build has it.
pub(super) const FEATURE: (&str, bool) = ("postgres", cfg!(feature = "postgres"));
/// `INSERT`/`UPDATE ... RETURNING` exist.
pub(super) const RETURNING: bool = true;

/// `CURRENT_TIMESTAMP` (`timestamptz`, microseconds), or `(CURRENT_TIMESTAMP ± INTERVAL 'n
/// microseconds')`. `CURRENT_TIMESTAMP` is the start of the transaction; the relay's
/// statements run alone (autocommit), where it equals the statement's time.
pub(super) fn now_sql(offset: Option<(char, Duration)>) -> String {
    match offset {
        None => "CURRENT_TIMESTAMP".to_owned(),
        Some((sign, d)) => format!(
            "(CURRENT_TIMESTAMP {sign} INTERVAL '{} microseconds')",
            d.as_micros()
        ),
    }
}

/// `guard` (a status comparison) written `(<guard>) IS TRUE`, so that only the ids of the
/// statement can choose its index: the status guard of every statement that names its rows by
/// id ([`super::Driver::status_guard`]) and the outer guard of the batch and ordered claims
/// (whose ids come from `id = ANY(ARRAY(..))`).
///
/// Why: every index of the table but the primary key starts with `status`, and the statistics
/// usually see few `SENDING` (or, just after a quiet period, few `WAIT`) rows, so for `WHERE id
/// IN (<100 ids>) AND status = 'SENDING' AND claim_owner = $1` the planner prefers
/// `idx_t_event_record_status_claimed_at` and reads every event in flight, filtering on the
/// ids: slower than the primary key, and more so the more events are in flight. A boolean test
/// over the comparison is the same condition for a `NOT NULL` column but no index can serve it
/// (Postgres has no index hints; MySQL's counterpart is `FORCE INDEX (PRIMARY)`). An `UPDATE`
/// never waits on a row invisible to it, so nothing else changes.
pub(super) fn primary_key_only(guard: Expr) -> Expr {
    guard.is(Expr::Constant(true.into()))
}

/// See [`super::Driver::guarded_pool`].
pub(super) fn guarded_pool(
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))] db: &DatabaseConnection,
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))] max: u32,
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))] name: Option<&str>,
) -> Option<DatabaseConnection> {
    #[cfg(feature = "postgres")]
    {
        Some(pool::pool(db, max, name))
    }
    #[cfg(not(feature = "postgres"))]
    {
        None
    }
}

/// See [`super::Driver::pool_size`]: `None` for a mock connection (no pool) or a build
/// without the `postgres` feature.
pub(super) fn pool_size(
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))] db: &DatabaseConnection,
) -> Option<u32> {
    #[cfg(feature = "postgres")]
    {
        pool::size(db)
    }
    #[cfg(not(feature = "postgres"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::sea_query::PostgresQueryBuilder;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryTrait};
    use sea_orm_outbox_entity::event_record::{Column, Entity};

    #[test]
    fn renders_the_clock() {
        let d = Duration::from_millis(1500);
        assert_eq!(now_sql(None), "CURRENT_TIMESTAMP");
        assert_eq!(
            now_sql(Some(('+', d))),
            "(CURRENT_TIMESTAMP + INTERVAL '1500000 microseconds')"
        );
    }

    #[test]
    fn status_guards_are_kept_off_the_indexes() {
        let guard = primary_key_only(Column::Status.eq("SENDING"));
        let sql = Entity::delete_many()
            .filter(Column::Id.is_in([1_i64, 2]))
            .filter(guard)
            .filter(Column::ClaimOwner.eq("o"))
            .into_query()
            .to_string(PostgresQueryBuilder);
        assert_eq!(
            sql,
            r#"DELETE FROM "t_event_record" WHERE "t_event_record"."id" IN (1, 2) AND ("t_event_record"."status" = 'SENDING') IS TRUE AND "t_event_record"."claim_owner" = 'o'"#
        );
    }
}
