//! The delivered-event counter `t_outbox_counter`: one row per outbox table, the number of
//! events its relays have delivered. Each relay instance adds what it delivered since its last
//! addition at every heartbeat and when it stops cleanly, so the count outlives the rows
//! (deleted on delivery with `Completion::Delete`, or by the retention). An instance killed
//! between two heartbeats loses at most one heartbeat interval of its count; an addition that
//! committed but whose reply was lost is added again with the next.
use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// The count of one outbox table (a row of `t_outbox_counter`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "t_outbox_counter")]
pub struct Model {
    /// The outbox table: `schema.table`, or `table` without a schema (as in `t_outbox_relay`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub outbox_table: String,
    /// Events delivered since the row was created.
    pub delivered: i64,
    /// When a relay last added to `delivered` (database clock, UTC).
    pub updated_at: DateTimeUtc,
}

/// `t_outbox_counter` has no relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
