//! How `statements` renders a statement of the driver: per backend, its SQL and its values,
//! after checking that the statement names the driver's table and no other.
use sea_orm::{DbBackend, Statement};

use crate::driver::{self, Driver};

/// The drivers of the three backends.
pub(super) fn drivers() -> [Driver; 3] {
    [DbBackend::Postgres, DbBackend::MySql, DbBackend::Sqlite]
        .map(|b| Driver::of(b).expect("a known backend"))
}

/// The Postgres driver.
pub(super) fn postgres() -> Driver {
    drivers()[0]
}

/// `stmt` for each backend: its SQL, then its values. Each statement is also built on a table
/// of another name, alone and in a schema: the same statement, naming that table wherever it
/// named `t_event_record`.
pub(super) fn render(stmt: impl Fn(Driver) -> Statement) -> String {
    let named = driver::Table::new(None, "outbox_events").expect("a valid name");
    let in_schema = driver::Table::new(Some("app"), "outbox_events").expect("a valid name");
    let mut out = String::new();
    for driver in drivers() {
        let backend = driver.backend();
        let s = stmt(driver);
        let q = if backend == DbBackend::MySql {
            '`'
        } else {
            '"'
        };
        let default = driver::Table::DEFAULT.quoted(q);
        let other = stmt(driver.with_table(named));
        assert_eq!(
            (other.sql, other.values),
            (s.sql.replace(&default, &named.quoted(q)), s.values.clone()),
            "{backend:?}: the statement names the driver's table"
        );
        let other = stmt(driver.with_table(in_schema)).sql;
        assert!(
            !other.contains("t_event_record")
                && (other.contains(&in_schema.quoted(q)) || !s.sql.contains(&default)),
            "{backend:?}: the statement names the table in its schema: {other}"
        );
        out.push_str(&format!(
            "-- {backend:?}\n{}\n-- values: [{}]\n\n",
            s.sql,
            values(&s)
        ));
    }
    out
}

/// The values bound to `s`, as `Debug` text joined by commas.
pub(super) fn values(s: &Statement) -> String {
    s.values
        .as_ref()
        .map(|v| {
            v.0.iter()
                .map(|v| format!("{v:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// `stmt` for each backend that has it, SQL and values, without the check of the outbox
/// table's name: for the statements on other tables (`t_outbox_relay`, the server's views).
pub(super) fn render_each(stmt: impl Fn(Driver) -> Option<Statement>) -> String {
    let mut out = String::new();
    for driver in drivers() {
        let Some(s) = stmt(driver) else { continue };
        out.push_str(&format!(
            "-- {:?}\n{}\n-- values: [{}]\n\n",
            driver.backend(),
            s.sql,
            values(&s)
        ));
    }
    out
}
