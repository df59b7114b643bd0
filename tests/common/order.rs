//! A business table for the tests: `orders`.
use sea_orm::entity::prelude::*;
use sea_orm::{ActiveValue::Set, NotSet};
use sea_orm_outbox::{NewEvent, OutboxError};

/// An order.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "orders")]
pub struct Model {
    /// Surrogate key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The business key.
    pub order_no: String,
    /// The amount.
    pub amount: i64,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// A new order `order_no` of `amount`, its id left to the database.
pub fn new(order_no: &str, amount: i64) -> ActiveModel {
    ActiveModel {
        id: NotSet,
        order_no: Set(order_no.to_owned()),
        amount: Set(amount),
    }
}

/// The saved order's `ORDER_CREATED` event, keyed by its number, with payload
/// `{"amount":…,"orderId":…}` (for `transactional_publish`).
pub fn created_event(o: &Model) -> Result<NewEvent, OutboxError> {
    Ok(NewEvent::json(
        &o.order_no,
        "ORDER_CREATED",
        &serde_json::json!({"orderId": o.id, "amount": o.amount}),
    )?)
}
