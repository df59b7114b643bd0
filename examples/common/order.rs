//! The examples' business table, `demo_orders`: one order per business transaction, written
//! with its `ORDER_CREATED` event (examples/order_service.rs, the bench's `with_event` overhead,
//! the chaos harness's writers).
//!
//! An example includes it with `#[path = "common/order.rs"] mod order;` (`../common/order.rs`
//! from an example of its own folder).
use sea_orm::entity::prelude::*;

/// An order. Its number is unique, so a writer whose commit answer was lost can tell whether
/// the order (and so its event) went in.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "demo_orders")]
pub struct Model {
    /// Surrogate key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The business key, also the event's `biz_no`.
    #[sea_orm(unique)]
    pub order_no: String,
    /// The order's amount in cents.
    pub amount_cents: i64,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
