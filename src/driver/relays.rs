//! The statements on `t_outbox_relay`, the relays' heartbeat table: one row per running relay
//! instance of an outbox table, keyed by the table's label ([`super::Table::label`]) and the
//! instance id. The table is one per database, named without a schema (the connection's
//! default, where the migration creates it); every timestamp is the database clock's.
use std::time::Duration;

use sea_orm::sea_query::{
    DeleteStatement, Expr, ExprTrait, InsertStatement, OnConflict, Order, Query, SelectStatement,
};
use sea_orm::{ConnectionTrait, DbErr, FromQueryResult, Iterable};
use sea_orm_outbox_entity::outbox_relay::{Column, Entity, Model};

use super::Driver;

type DateTimeUtc = sea_orm::prelude::DateTimeUtc;

/// How long the live relays keep the row of an instance that stopped without deleting it,
/// counted from its `expires_at`: a day, so that `outbox relays` can say which instance
/// stopped and when.
pub const EXPIRED_RELAYS_KEPT: Duration = Duration::from_secs(24 * 3600);

/// One heartbeat of a relay instance ([`Driver::heartbeat`]).
#[derive(Debug, Clone, Copy)]
pub struct Beat<'a> {
    /// The instance's id.
    pub instance_id: &'a str,
    /// The crate version it runs.
    pub version: &'a str,
    /// From the heartbeat to `expires_at`.
    pub timeout: Duration,
    /// The instance's first heartbeat of this run: every column is written, `started_at` too.
    pub first: bool,
    /// A claim round completed since the previous heartbeat: `last_round_at` is set.
    pub round: bool,
    /// A publish succeeded since the previous heartbeat: `last_success_at` is set.
    pub success: bool,
}

impl Driver {
    /// `INSERT INTO t_outbox_relay (outbox_table, instance_id, version, started_at,
    /// heartbeat_at, expires_at, last_round_at, last_success_at) VALUES (:table, :instance,
    /// :version, now, now, now + :timeout, now | NULL, now | NULL) ON CONFLICT (outbox_table,
    /// instance_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, expires_at =
    /// excluded.expires_at[, last_round_at = ...][, last_success_at = ...]` (MySQL/MariaDB:
    /// `ON DUPLICATE KEY UPDATE heartbeat_at = VALUES(heartbeat_at), ...`): the instance's row,
    /// created or refreshed. `last_round_at` is `now` and updated only for `beat.round`,
    /// `last_success_at` only for `beat.success`; the first beat of a run updates every column.
    pub fn heartbeat(self, beat: &Beat<'_>) -> InsertStatement {
        let now_or_null = |set: bool| if set { self.now() } else { Expr::cust("NULL") };
        let mut update = vec![Column::HeartbeatAt, Column::ExpiresAt];
        if beat.first {
            update.extend([Column::Version, Column::StartedAt]);
        }
        if beat.first || beat.round {
            update.push(Column::LastRoundAt);
        }
        if beat.first || beat.success {
            update.push(Column::LastSuccessAt);
        }
        Query::insert()
            .into_table(Entity)
            .columns(Column::iter())
            .values_panic([
                Expr::val(self.table().label()),
                Expr::val(beat.instance_id),
                Expr::val(beat.version),
                self.now(),
                self.now(),
                self.now_plus(beat.timeout),
                now_or_null(beat.round),
                now_or_null(beat.success),
            ])
            .on_conflict(
                OnConflict::columns([Column::OutboxTable, Column::InstanceId])
                    .update_columns(update)
                    .to_owned(),
            )
            .to_owned()
    }

    /// `SELECT outbox_table, instance_id, version, started_at, heartbeat_at, expires_at,
    /// last_round_at, last_success_at, now AS now FROM t_outbox_relay WHERE outbox_table =
    /// :table ORDER BY heartbeat_at DESC`: this table's relays, newest heartbeat first, with
    /// the database clock.
    pub fn relays(self) -> SelectStatement {
        Query::select()
            .columns(Column::iter())
            .expr_as(self.now(), "now")
            .from(Entity)
            .and_where(Expr::col(Column::OutboxTable).eq(self.table().label()))
            .order_by(Column::HeartbeatAt, Order::Desc)
            .order_by(Column::InstanceId, Order::Asc)
            .to_owned()
    }

    /// `DELETE FROM t_outbox_relay WHERE outbox_table = :table AND instance_id = :instance`:
    /// the row of an instance that stops cleanly.
    pub fn delete_relay(self, instance_id: &str) -> DeleteStatement {
        Query::delete()
            .from_table(Entity)
            .and_where(Expr::col(Column::OutboxTable).eq(self.table().label()))
            .and_where(Expr::col(Column::InstanceId).eq(instance_id))
            .to_owned()
    }

    /// `DELETE FROM t_outbox_relay WHERE outbox_table = :table AND expires_at < now - :kept`:
    /// the rows of this table's instances that stopped more than `kept` ago.
    pub fn delete_expired_relays(self, kept: Duration) -> DeleteStatement {
        Query::delete()
            .from_table(Entity)
            .and_where(Expr::col(Column::OutboxTable).eq(self.table().label()))
            .and_where(Expr::col(Column::ExpiresAt).lt(self.now_minus(kept)))
            .to_owned()
    }

    /// `SELECT instance_id FROM t_outbox_relay WHERE 1 = 0`: reads no row, and fails when the
    /// heartbeat table (migration `m20261206_000005_create_t_outbox_relay`) is missing.
    pub fn relay_table_probe(self) -> SelectStatement {
        Query::select()
            .column(Column::InstanceId)
            .from(Entity)
            .and_where(Expr::val(1).eq(0))
            .to_owned()
    }
}

/// The rows of [`Driver::relays`] and the database's now (`None` without rows).
pub async fn relays<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
) -> Result<(Vec<Model>, Option<DateTimeUtc>), DbErr> {
    let rows = db.query_all(&driver.relays()).await?;
    let now = match rows.first() {
        Some(r) => Some(r.try_get("", "now")?),
        None => None,
    };
    let relays = rows
        .iter()
        .map(|r| Model::from_query_result(r, ""))
        .collect::<Result<_, _>>()?;
    Ok((relays, now))
}
