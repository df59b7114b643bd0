//! The relays' heartbeat table `t_outbox_relay`: one row per running relay instance of an
//! outbox table, written by the instance itself every heartbeat interval.
//!
//! Every timestamp is written by the database clock. A row whose `expires_at` has passed
//! belongs to an instance that stopped without saying so (killed, hung, cut off from the
//! database); a clean shutdown deletes the instance's row, and the live relays delete rows
//! expired for more than a day.
use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// One relay instance's heartbeat (a row of `t_outbox_relay`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "t_outbox_relay")]
pub struct Model {
    /// The outbox table the instance relays: `schema.table`, or `table` without a schema. At
    /// most [`OUTBOX_TABLE_MAX_LEN`] characters.
    #[sea_orm(primary_key, auto_increment = false)]
    pub outbox_table: String,
    /// The instance id (the worker's, as in `claim_owner` before the `#`). At most
    /// [`INSTANCE_ID_MAX_LEN`] characters.
    #[sea_orm(primary_key, auto_increment = false)]
    pub instance_id: String,
    /// The sea-orm-outbox version the instance runs. At most [`VERSION_MAX_LEN`] characters.
    pub version: String,
    /// When the instance started relaying (its first heartbeat; database clock, UTC).
    pub started_at: DateTimeUtc,
    /// The instance's latest heartbeat (database clock, UTC).
    pub heartbeat_at: DateTimeUtc,
    /// `heartbeat_at` plus three heartbeat intervals: past it the instance counts as stopped,
    /// which a reader can judge without knowing the instance's configuration.
    pub expires_at: DateTimeUtc,
    /// The heartbeat after the instance's latest completed claim round; `None` before its
    /// first.
    pub last_round_at: Option<DateTimeUtc>,
    /// The heartbeat after the instance's latest publish that succeeded; `None` before its
    /// first.
    pub last_success_at: Option<DateTimeUtc>,
}

/// `t_outbox_relay` has no relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// Longest `outbox_table` the column holds (`varchar(128)`): a schema and a table of 40
/// characters each fit.
pub const OUTBOX_TABLE_MAX_LEN: usize = 128;
/// Longest `instance_id` the column holds (`varchar(128)`, like `claim_owner`).
pub const INSTANCE_ID_MAX_LEN: usize = 128;
/// Longest `version` the column holds (`varchar(64)`).
pub const VERSION_MAX_LEN: usize = 64;
