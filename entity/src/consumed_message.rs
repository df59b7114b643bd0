//! The idempotent consumer's table `t_consumed_message`: one row per message a consumer group
//! has processed.
use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// One processed message (a row of `t_consumed_message`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "t_consumed_message")]
pub struct Model {
    /// The consumer group that processed the message. At most [`CONSUMER_GROUP_MAX_LEN`]
    /// characters.
    #[sea_orm(primary_key, auto_increment = false)]
    pub consumer_group: String,
    /// The outbox event id (the message's `eventId` property), not the broker's message id. At
    /// most [`MSG_ID_MAX_LEN`] characters.
    #[sea_orm(primary_key, auto_increment = false)]
    pub msg_id: String,
    /// When the processing committed (database clock, UTC).
    pub consumed_at: DateTimeUtc,
}

/// `t_consumed_message` has no relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// Longest `consumer_group` the column holds (`varchar(64)`).
pub const CONSUMER_GROUP_MAX_LEN: usize = 64;
/// Longest `msg_id` the column holds (`varchar(64)`).
pub const MSG_ID_MAX_LEN: usize = 64;
