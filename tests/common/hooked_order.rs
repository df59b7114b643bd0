//! A business entity whose `after_save` hook writes the outbox event in the same transaction.
use sea_orm::entity::prelude::*;
use sea_orm_outbox::{NewEvent, OutboxExt};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "hooked_orders")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub order_no: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

/// A new hooked order `order_no`, its id left to the database.
pub fn new(order_no: &str) -> ActiveModel {
    ActiveModel {
        id: sea_orm::NotSet,
        order_no: sea_orm::ActiveValue::Set(order_no.to_owned()),
    }
}

#[async_trait::async_trait]
impl ActiveModelBehavior for ActiveModel {
    async fn after_save<C: ConnectionTrait>(
        model: Model,
        db: &C,
        insert: bool,
    ) -> Result<Model, DbErr> {
        if insert {
            let event = NewEvent::raw(
                &model.order_no,
                "ORDER_CREATED",
                format!(r#"{{"orderId":{}}}"#, model.id),
            );
            db.with_event(event)
                .await
                .map_err(|e| DbErr::Custom(e.to_string()))?;
        }
        Ok(model)
    }
}
