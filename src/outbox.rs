use sea_orm::{ConnectionTrait, DbErr};

use crate::driver::{Driver, Table};
use crate::error::OutboxError;
use crate::event::EventLimits;

/// One outbox: the table its events live in (`t_event_record` by default; on Postgres
/// optionally in a schema) and the limits every event written to it must keep. Writers, the
/// [`crate::Worker`] and [`crate::ops`] of one table share one `Outbox` (it is `Copy`).
///
/// ```no_run
/// # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
/// use std::sync::Arc;
/// use sea_orm_outbox::{InMemoryPublisher, NewEvent, Outbox, WorkerConfig};
///
/// let outbox = Outbox::new().table("outbox_events")?;
/// let id = outbox
///     .with_event(&db, NewEvent::raw("ORD-1", "ORDER_CREATED", r#"{"a":1}"#))
///     .await?;
/// let worker = outbox.worker(db.clone(), Arc::new(InMemoryPublisher::new()), WorkerConfig::default())?;
/// let stats = sea_orm_outbox::ops::stats(&outbox, &db, std::time::Duration::from_secs(600)).await?;
/// # let _ = (id, worker, stats); Ok(()) }
/// ```
///
/// The table must exist with the outbox's schema: `t_event_record` by this crate's migrations,
/// any other name by [`crate::migration::create_outbox_table`] in a migration of your own. Each
/// distinct table or schema name is kept for the life of the process (so that the handle stays
/// `Copy`): an application uses one or two, never names made up per request.
///
/// On Postgres the relays of every table are woken by one `NOTIFY` channel
/// (`sea_orm_outbox`): a commit to one table also wakes the relays of the others, which then
/// make one claim that finds nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outbox {
    table: Table,
    limits: EventLimits,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox::new()
    }
}

impl Outbox {
    /// The outbox of `t_event_record` (no schema) with [`EventLimits::default`].
    pub fn new() -> Self {
        Outbox {
            table: Table::DEFAULT,
            limits: EventLimits::default(),
        }
    }

    /// This outbox on the table `name` (in the schema set by [`Outbox::schema`], if any).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming the rule when `name` is not 1 to 40 ASCII
    /// letters, digits and underscores, not starting with a digit.
    pub fn table(self, name: &str) -> Result<Outbox, OutboxError> {
        self.on(self.table.schema(), name)
    }

    /// This outbox on its table in the schema `name`: on Postgres a schema
    /// (`"name"."table"`), on MySQL/MariaDB the database of that name. SQLite has no schemas
    /// (an attached database's name would serve).
    ///
    /// # Errors
    /// As [`Outbox::table`].
    pub fn schema(self, name: &str) -> Result<Outbox, OutboxError> {
        self.on(Some(name), self.table.name())
    }

    /// This outbox with `limits` checked on every event written to it (for example the
    /// broker's message size, from the broker crate).
    pub fn limits(self, limits: EventLimits) -> Outbox {
        Outbox { limits, ..self }
    }

    /// The table's name (without its schema).
    pub fn table_name(&self) -> &'static str {
        self.table.name()
    }

    /// The schema set by [`Outbox::schema`], if any.
    pub fn schema_name(&self) -> Option<&'static str> {
        self.table.schema()
    }

    /// The limits checked on every event written.
    pub fn event_limits(&self) -> EventLimits {
        self.limits
    }

    /// The table the outbox's statements name.
    pub(crate) fn table_ref(&self) -> Table {
        self.table
    }

    /// The outbox of `table` with the default limits (the relay's maintenance services).
    pub(crate) fn of_table(table: Table) -> Outbox {
        Outbox {
            table,
            limits: EventLimits::default(),
        }
    }

    /// The driver of `db`'s backend on this outbox's table.
    ///
    /// # Errors
    /// [`DbErr::Custom`] for a backend this crate does not know.
    pub(crate) fn driver<C: ConnectionTrait>(&self, db: &C) -> Result<Driver, DbErr> {
        Ok(Driver::of_db(db)?.with_table(self.table))
    }

    fn on(self, schema: Option<&str>, name: &str) -> Result<Outbox, OutboxError> {
        let table = Table::new(schema, name).map_err(|e| match e {
            DbErr::Custom(rule) => OutboxError::InvalidConfig(rule),
            other => OutboxError::InvalidConfig(other.to_string()),
        })?;
        Ok(Outbox { table, ..self })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        let o = Outbox::new();
        assert_eq!(o.table_name(), "t_event_record");
        assert!(matches!(
            o.table("bad-name"),
            Err(OutboxError::InvalidConfig(_))
        ));
        assert!(matches!(o.schema("9x"), Err(OutboxError::InvalidConfig(_))));
        let o = o
            .table("outbox_events")
            .and_then(|o| o.schema("app"))
            .expect("valid");
        assert_eq!(
            (o.schema_name(), o.table_name()),
            (Some("app"), "outbox_events")
        );
    }
}
