//! PostgreSQL: `CURRENT_TIMESTAMP`, `RETURNING`, `FOR UPDATE SKIP LOCKED`, `LISTEN`/`NOTIFY`,
//! the simple protocol for transaction-mode poolers.
//! The statements compile in every build; what needs sqlx's Postgres driver is built with the
//! `postgres` feature only.
pub(super) mod claim;
pub(super) mod error;
pub(super) mod health;
#[cfg(feature = "postgres")]
pub(super) mod listen;
pub(super) mod notify;
pub(super) mod ordered;
#[cfg(feature = "postgres")]
pub(super) mod pool;
pub(super) mod simple;

use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait};

pub use notify::WAKE_CHANNEL;

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
/// statement can choose its index ([`super::Driver::status_guard`], and the outer guard of the
/// claims by `id = ANY(ARRAY(..))`). Every other index starts with `status`, and with few
/// `SENDING` rows in the statistics the planner would read every event in flight through one;
/// no index serves the boolean test (Postgres has no index hints).
pub(super) fn primary_key_only(guard: Expr) -> Expr {
    guard.is(Expr::Constant(true.into()))
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
