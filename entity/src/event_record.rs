//! The outbox table `t_event_record`.
//!
//! Every timestamp in this table is written by the database clock (see the `sea_orm_outbox`
//! store module), never by the application, so that instances with skewed clocks agree on
//! leases and back-off.
use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// Lifecycle of an outbox event.
///
/// ```text
/// WAIT --claim--> SENDING --mark_success--> SUCCESS
///  ^                |  |
///  +--release/reclaim-+  +--mark_fail--> FAIL (dead letter)
/// ```
/// Stored as the strings `WAIT`, `SENDING`, `SUCCESS`, `FAIL` in a `varchar(16)` column.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize,
)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
pub enum EventStatus {
    /// Waiting to be (re)sent once `next_retry_time` has passed.
    #[sea_orm(string_value = "WAIT")]
    Wait,
    /// Claimed by the instance named in `claim_owner` since `claimed_at` (a lease).
    #[sea_orm(string_value = "SENDING")]
    Sending,
    /// Accepted by the broker. Final.
    #[sea_orm(string_value = "SUCCESS")]
    Success,
    /// Dead letter: retries exhausted or a permanent error. Final until a person retries it.
    #[sea_orm(string_value = "FAIL")]
    Fail,
}

impl EventStatus {
    /// The string stored in the `status` column (`WAIT`, `SENDING`, `SUCCESS`, `FAIL`).
    pub fn as_str(&self) -> &'static str {
        match self {
            EventStatus::Wait => "WAIT",
            EventStatus::Sending => "SENDING",
            EventStatus::Success => "SUCCESS",
            EventStatus::Fail => "FAIL",
        }
    }
}

/// One outbox event (a row of `t_event_record`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "t_event_record")]
pub struct Model {
    /// Auto-increment primary key; sent to the broker as the `eventId` property and the key an
    /// idempotent consumer deduplicates on.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Business key (for example the order number); the message `keys` and `bizNo` property.
    /// At most [`BIZ_NO_MAX_LEN`] characters.
    pub biz_no: String,
    /// Event type such as `ORDER_CREATED`; the message tag and `eventType` property.
    /// At most [`EVENT_TYPE_MAX_LEN`] characters.
    pub event_type: String,
    /// Message body, normally JSON text.
    #[sea_orm(column_type = "Text")]
    pub payload: String,
    /// Where the event is in its lifecycle.
    pub status: EventStatus,
    /// Failed attempts so far (sends that failed, and for the lease work, reclaims).
    pub retry_count: i32,
    /// The event may not be claimed before this instant (database clock, UTC).
    pub next_retry_time: DateTimeUtc,
    /// Instance id holding the lease while `SENDING`; `None` when free.
    pub claim_owner: Option<String>,
    /// When the lease was taken (database clock, UTC); `None` when free.
    pub claimed_at: Option<DateTimeUtc>,
    /// The reason of the last failed attempt, kept for dead-letter handling.
    #[sea_orm(column_type = "Text", nullable)]
    pub last_error: Option<String>,
    /// Insert time (database clock, UTC).
    pub create_time: DateTimeUtc,
    /// Time of the last state change (database clock, UTC).
    pub update_time: DateTimeUtc,
    /// Message headers as a JSON object of strings (`{"tenant":"acme"}`), sent as RocketMQ user
    /// properties; `None` when the event has none. Added by the migration
    /// `m20261201_000003_add_event_headers`; read them with [`Model::header_pairs`].
    #[sea_orm(column_type = "Text", nullable)]
    pub headers: Option<String>,
}

/// `t_event_record` has no relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

impl Model {
    /// The event's headers as (name, value) pairs in name order; empty when `headers` is `NULL`.
    ///
    /// # Errors
    /// The JSON error when the column holds something other than a JSON object of strings
    /// (the library writes only such objects; a row edited by hand may hold anything).
    pub fn header_pairs(&self) -> Result<Vec<(String, String)>, serde_json::Error> {
        match &self.headers {
            None => Ok(Vec::new()),
            Some(text) => {
                let map: std::collections::BTreeMap<String, String> = serde_json::from_str(text)?;
                Ok(map.into_iter().collect())
            }
        }
    }
}

/// Longest `biz_no` the column holds (`varchar(64)`).
pub const BIZ_NO_MAX_LEN: usize = 64;
/// Longest `event_type` the column holds (`varchar(64)`).
pub const EVENT_TYPE_MAX_LEN: usize = 64;
/// Longest `claim_owner` (instance id) the column holds (`varchar(128)`).
pub const CLAIM_OWNER_MAX_LEN: usize = 128;
