//! Writing events in the business transaction.
use async_trait::async_trait;
use sea_orm::{
    ActiveModelBehavior, ActiveModelTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    SqliteTransactionMode, TransactionOptions, TransactionSession, TransactionTrait, TryIntoModel,
};

use crate::driver;
use crate::error::OutboxError;
use crate::event::NewEvent;
use crate::outbox::Outbox;

/// Adds outbox writes to any SeaORM connection: a `DatabaseTransaction` (the normal case), a
/// `DatabaseConnection`, or the `db` an `ActiveModelBehavior` hook receives.
///
/// ```no_run
/// # async fn demo(db: &sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
/// use sea_orm::TransactionTrait;
/// use sea_orm_outbox::{NewEvent, OutboxExt};
///
/// let txn = db.begin().await?;
/// // ... insert the order with `txn` ...
/// let event_id = txn
///     .with_event(NewEvent::json("ORD-1001", "ORDER_CREATED", &serde_json::json!({"amount": 42}))?)
///     .await?;
/// txn.commit().await?; // the order and its event commit together
/// # let _ = event_id; Ok(()) }
/// ```
#[async_trait]
pub trait OutboxExt: ConnectionTrait + Sized {
    /// Inserts `event` into the default [`Outbox`] (`t_event_record`) as a `WAIT` row due now
    /// (database clock) and returns its id. Nothing is sent here: the relay publishes it after
    /// the transaction commits; if the transaction rolls back, so does the event.
    ///
    /// Runs `INSERT INTO t_event_record (...) VALUES (..., 'WAIT', 0, now, now, now)` with
    /// `RETURNING id` on Postgres and SQLite, `LAST_INSERT_ID()` on MySQL. With the feature
    /// `opentelemetry`, the current trace context is recorded as the event's headers first
    /// (module `sea_orm_outbox::otel`).
    ///
    /// # Errors
    /// [`OutboxError::InvalidEvent`] before anything is written when the event breaks
    /// [`crate::EventLimits::default`] (empty or over-long fields, payload over 4 MiB);
    /// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
    async fn with_event(&self, event: NewEvent) -> Result<i64, OutboxError> {
        Outbox::default().with_event(self, event).await
    }
}

/// The model an active model `A` saves.
type ModelOf<A> = <<A as ActiveModelTrait>::Entity as EntityTrait>::Model;

impl Outbox {
    /// [`OutboxExt::with_event`] into this outbox's table in `db` (the business transaction).
    ///
    /// # Errors
    /// As [`OutboxExt::with_event`], checking this outbox's limits.
    pub async fn with_event<C: ConnectionTrait>(
        &self,
        db: &C,
        event: NewEvent,
    ) -> Result<i64, OutboxError> {
        let (id, wake) = self.insert(db, event).await?;
        if wake {
            crate::local_wake::signal(&self.table_ref().label());
        }
        Ok(id)
    }

    /// Validates and inserts `event`; returns its id and whether the workers of this process
    /// are to be woken locally: when the event wakes relays
    /// ([`NewEvent::notify_relays`], not delayed) and the insert queued no `NOTIFY`, which
    /// wakes every listening relay at commit (Postgres).
    async fn insert<C: ConnectionTrait>(
        &self,
        db: &C,
        event: NewEvent,
    ) -> Result<(i64, bool), OutboxError> {
        #[cfg(feature = "opentelemetry")]
        let event = crate::otel::record_trace_context(event);
        event.validate(&self.event_limits())?;
        let id = driver::insert_event(db, self.table_ref(), &event).await?;
        let notified = driver::Driver::of(db.get_database_backend()).is_some_and(|d| d.listens());
        Ok((id, event.wakeup().is_some() && !notified))
    }

    /// [`transactional_publish`] into this outbox's table, checking its limits.
    ///
    /// # Errors
    /// As [`transactional_publish`], checking this outbox's limits.
    pub async fn transactional_publish<C, A, F>(
        &self,
        db: &C,
        model: A,
        make_event: F,
    ) -> Result<(ModelOf<A>, i64), OutboxError>
    where
        C: TransactionTrait,
        A: ActiveModelTrait + ActiveModelBehavior + TryIntoModel<ModelOf<A>> + Send,
        ModelOf<A>: IntoActiveModel<A>,
        F: FnOnce(&ModelOf<A>) -> Result<NewEvent, OutboxError> + Send,
    {
        let txn = begin_write(db).await?;
        // On any early return `txn` is dropped, which rolls the transaction back.
        let saved = model
            .save(&txn)
            .await
            .map_err(inside_transaction)?
            .try_into_model()?;
        let event = make_event(&saved)?;
        let (event_id, wake) = self.insert(&txn, event).await?;
        txn.commit().await?;
        if wake {
            crate::local_wake::signal(&self.table_ref().label());
        }
        Ok((saved, event_id))
    }
}

impl<C: ConnectionTrait> OutboxExt for C {}

/// Begins a transaction that will write: `BEGIN IMMEDIATE` on SQLite, the same `BEGIN` as
/// `db.begin()` on Postgres and MySQL/MariaDB, and a `SAVEPOINT` when `db` is itself a
/// transaction (on every backend). Use it for business transactions that read before they
/// write (select, insert the order, [`OutboxExt::with_event`], commit), in place of
/// `db.begin()`.
///
/// On SQLite a `DEFERRED` transaction asks for the single write lock only at its first write,
/// and fails at once with `database is locked` (`SQLITE_BUSY`) when another connection (a relay)
/// holds it or committed since the transaction's snapshot, whatever the busy timeout.
/// `BEGIN IMMEDIATE` takes the lock at the start, waiting up to the busy timeout (sqlx's
/// default: 5 s). docs/configuration.md has the recommended connect options.
///
/// ```no_run
/// # async fn demo(db: &sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
/// use sea_orm_outbox::{begin_write, NewEvent, OutboxExt};
///
/// let txn = begin_write(db).await?; // BEGIN IMMEDIATE on SQLite
/// // ... read the customer, insert the order with `txn` ...
/// txn.with_event(NewEvent::raw("ORD-1001", "ORDER_CREATED", r#"{"amount":42}"#))
///     .await?;
/// txn.commit().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// The database's error for `BEGIN`; on SQLite `database is locked` (`SQLITE_BUSY`) only when
/// the write lock stayed taken for the whole busy timeout.
pub async fn begin_write<C: TransactionTrait>(db: &C) -> Result<C::Transaction, DbErr> {
    // Only a top-level SQLite `BEGIN` takes the mode; other backends and savepoints ignore it.
    db.begin_with_options(TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..TransactionOptions::default()
    })
    .await
}

/// Saves `model` and the event `make_event` derives from the saved row in ONE transaction:
/// either both rows exist afterwards or neither does.
///
/// Opens a transaction on `db` with [`begin_write`], calls `ActiveModelTrait::save` (insert or
/// update, running the model's `ActiveModelBehavior` hooks), builds the event from the saved
/// model, inserts it with [`OutboxExt::with_event`] and commits. Returns the saved model and the
/// event id. For another table or limits, [`Outbox::transactional_publish`].
///
/// ```no_run
/// # mod order { use sea_orm::entity::prelude::*;
/// #   #[derive(Clone, Debug, PartialEq, DeriveEntityModel)] #[sea_orm(table_name = "orders")]
/// #   pub struct Model { #[sea_orm(primary_key)] pub id: i64, pub order_no: String, pub amount: i64 }
/// #   #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)] pub enum Relation {}
/// #   impl ActiveModelBehavior for ActiveModel {} }
/// # async fn demo(db: &sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
/// use sea_orm::{ActiveValue::Set, NotSet};
/// use sea_orm_outbox::{transactional_publish, NewEvent};
///
/// let order = order::ActiveModel { id: NotSet, order_no: Set("ORD-1".into()), amount: Set(42) };
/// let (saved, event_id) = transactional_publish(db, order, |o: &order::Model| {
///     Ok(NewEvent::json(&o.order_no, "ORDER_CREATED", &serde_json::json!({"orderId": o.id, "amount": o.amount}))?)
/// })
/// .await?;
/// # let _ = (saved, event_id); Ok(()) }
/// ```
///
/// # Errors
/// The error of `make_event` or of the event's validation ([`OutboxError::InvalidEvent`]);
/// [`OutboxError::PoolUsedInsideTransaction`] when a query inside it (a hook) timed out waiting
/// for a pool connection; or a database error. Nothing is written then (the transaction rolls
/// back).
pub async fn transactional_publish<C, A, F>(
    db: &C,
    model: A,
    make_event: F,
) -> Result<(ModelOf<A>, i64), OutboxError>
where
    C: TransactionTrait,
    A: ActiveModelTrait + ActiveModelBehavior + TryIntoModel<ModelOf<A>> + Send,
    ModelOf<A>: IntoActiveModel<A>,
    F: FnOnce(&ModelOf<A>) -> Result<NewEvent, OutboxError> + Send,
{
    Outbox::default()
        .transactional_publish(db, model, make_event)
        .await
}

/// The error of the save inside [`transactional_publish`]: the save runs on the transaction,
/// so a pool timeout comes from a hook that used the pool.
fn inside_transaction(e: DbErr) -> OutboxError {
    if matches!(
        e,
        DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout)
    ) {
        OutboxError::PoolUsedInsideTransaction(e)
    } else {
        e.into()
    }
}
