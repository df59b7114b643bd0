//! The statements on `t_outbox_counter`, the relays' count of delivered events: one row per
//! outbox table, keyed by the table's label ([`super::Table::label`]), named without a schema
//! like `t_outbox_relay`.
use sea_orm::sea_query::{Expr, ExprTrait, InsertStatement, OnConflict, Query, SelectStatement};
use sea_orm::{ConnectionTrait, DbErr};
use sea_orm_outbox_entity::outbox_counter::{Column, Entity};

use super::{Backend, Driver};

impl Driver {
    /// `INSERT INTO t_outbox_counter (outbox_table, delivered, updated_at) VALUES (:table, :n,
    /// now) ON CONFLICT (outbox_table) DO UPDATE SET delivered = t_outbox_counter.delivered +
    /// excluded.delivered, updated_at = excluded.updated_at` (MySQL/MariaDB: `ON DUPLICATE KEY
    /// UPDATE delivered = delivered + VALUES(delivered), ...`): adds `n` delivered events to
    /// this table's count, creating its row at the first addition. One row write, whatever `n`.
    pub fn add_delivered(self, n: u64) -> InsertStatement {
        let sum = match self.backend {
            Backend::MySql => "`delivered` + VALUES(`delivered`)",
            Backend::Postgres | Backend::Sqlite => {
                r#""t_outbox_counter"."delivered" + "excluded"."delivered""#
            }
        };
        Query::insert()
            .into_table(Entity)
            .columns([Column::OutboxTable, Column::Delivered, Column::UpdatedAt])
            .values_panic([
                Expr::val(self.table().label()),
                Expr::val(i64::try_from(n).unwrap_or(i64::MAX)),
                self.now(),
            ])
            .on_conflict(
                OnConflict::column(Column::OutboxTable)
                    .value(Column::Delivered, Expr::cust(sum))
                    .update_column(Column::UpdatedAt)
                    .to_owned(),
            )
            .to_owned()
    }

    /// `SELECT delivered FROM t_outbox_counter WHERE outbox_table = :table`: this table's
    /// count (no row before the first delivery).
    pub fn delivered(self) -> SelectStatement {
        Query::select()
            .column(Column::Delivered)
            .from(Entity)
            .and_where(Expr::col(Column::OutboxTable).eq(self.table().label()))
            .to_owned()
    }

    /// `SELECT delivered FROM t_outbox_counter WHERE 1 = 0`: reads no row, and fails when the
    /// counter table (migration `m20261206_000005_create_t_outbox_relay`) is missing.
    pub fn counter_probe(self) -> SelectStatement {
        Query::select()
            .column(Column::Delivered)
            .from(Entity)
            .and_where(Expr::val(1).eq(0))
            .to_owned()
    }
}

/// This table's count of delivered events ([`Driver::delivered`]); 0 before the first.
pub async fn delivered<C: ConnectionTrait>(db: &C, driver: Driver) -> Result<u64, DbErr> {
    let row = db.query_one(&driver.delivered()).await?;
    let n: i64 = match row {
        Some(r) => r.try_get("", "delivered")?,
        None => 0,
    };
    Ok(u64::try_from(n).unwrap_or(0))
}
