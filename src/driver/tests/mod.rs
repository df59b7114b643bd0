//! The driver's own suites: its statements rendered per backend (`statements`), and the
//! transitions, claims and plans of those statements run against Postgres, MariaDB and SQLite
//! (the integration suites' `tests/common` picks and prepares the databases).
mod admin_statements;
mod completion;
mod indexes;
mod leases;
mod listen;
mod ordered;
mod ordered_plans;
mod outbox;
mod plans;
mod render;
mod resume;
mod statements;

/// `db` as the relay's connection, prepared statements, on the default table.
fn relay(db: &sea_orm::DatabaseConnection) -> crate::driver::RelayDb {
    crate::driver::RelayDb::extended(db.clone())
}
