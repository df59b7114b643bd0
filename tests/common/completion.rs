//! What the suites' workers do with a delivered row, and how the suites see it either way.
//!
//! `OUTBOX_TEST_COMPLETION` picks [`Completion`]: unset or `update` marks delivered rows
//! `SUCCESS`, `delete` deletes them. With `delete`, [`observe_deletions`] gives an outbox table
//! an `AFTER DELETE` trigger that copies every deleted row (its last state, `OLD`) into a log
//! table of the same columns (`t_test_deleted` for `t_event_record`, `<table>_test_deleted`
//! for another). The relay's statements stay exactly the library's; the trigger only records
//! what they deleted. A row deleted while `SENDING` is an event delivered by delete (the relay
//! deletes nothing else; a purge or a discard deletes `SUCCESS` or `FAIL` rows): the readers of
//! `events.rs` count it and return it as `SUCCESS`.
use sea_orm::{
    ConnectionTrait, DbBackend, FromQueryResult, IdenStatic, Iterable, Statement, Value,
};
use sea_orm_outbox::event_record::{self, Column};
use sea_orm_outbox::{Completion, EventStatus, Outbox};

/// The completion the suites' workers use: `OUTBOX_TEST_COMPLETION` (`update`, the default,
/// or `delete`); panics on another value.
pub fn completion() -> Completion {
    match std::env::var("OUTBOX_TEST_COMPLETION").as_deref() {
        Err(_) | Ok("") | Ok("update") => Completion::Update,
        Ok("delete") => Completion::Delete,
        Ok(other) => panic!("OUTBOX_TEST_COMPLETION={other}: want `update` or `delete`"),
    }
}

/// Whether this run completes delivered rows by deleting them.
pub fn deleting() -> bool {
    completion() == Completion::Delete
}

/// Prints that the test `name` does not run in this run's completion mode, and why.
pub fn skip_in_this_mode(name: &str, why: &str) {
    eprintln!(
        "{name}: skipped with OUTBOX_TEST_COMPLETION={}: {why}",
        completion().as_str()
    );
}

/// The log table of rows deleted from `table`.
pub fn deleted_table(table: &str) -> String {
    if table == "t_event_record" {
        "t_test_deleted".to_owned()
    } else {
        format!("{table}_test_deleted")
    }
}

/// `name` quoted for `backend`, behind `schema` when there is one.
fn quoted(backend: DbBackend, schema: Option<&str>, name: &str) -> String {
    let q = |s: &str| match backend {
        DbBackend::MySql => format!("`{s}`"),
        _ => format!("\"{s}\""),
    };
    match schema {
        Some(schema) => format!("{}.{}", q(schema), q(name)),
        None => q(name),
    }
}

/// The outbox columns, quoted and comma separated, each behind `prefix` (`OLD.` or nothing).
fn columns(backend: DbBackend, prefix: &str) -> String {
    Column::iter()
        .map(|c| format!("{prefix}{}", quoted(backend, None, c.as_str())))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The log table of `outbox`'s deletions, quoted.
fn log_of(backend: DbBackend, outbox: &Outbox) -> String {
    quoted(
        backend,
        outbox.schema_name(),
        &deleted_table(outbox.table_name()),
    )
}

/// When delivered rows are deleted ([`deleting`]): creates the log of `outbox`'s table
/// ([`deleted_table`], the same columns, no keys) and the `AFTER DELETE` trigger that copies
/// each deleted row into it. Nothing otherwise.
pub async fn observe_deletions(db: &impl ConnectionTrait, outbox: &Outbox) {
    if !deleting() {
        return;
    }
    let backend = db.get_database_backend();
    let schema = outbox.schema_name();
    let table = quoted(backend, schema, outbox.table_name());
    let log_name = deleted_table(outbox.table_name());
    let log = log_of(backend, outbox);
    let (cols, old) = (columns(backend, ""), columns(backend, "OLD."));
    let insert = format!("INSERT INTO {log} ({cols}) VALUES ({old})");
    let mut stmts = vec![format!(
        "CREATE TABLE {log} AS SELECT {cols} FROM {table} WHERE 1 = 0"
    )];
    match backend {
        DbBackend::Postgres => {
            let function = quoted(backend, schema, &format!("{log_name}_row"));
            stmts.push(format!(
                "CREATE FUNCTION {function}() RETURNS trigger AS $$ BEGIN {insert}; \
                 RETURN OLD; END $$ LANGUAGE plpgsql"
            ));
            stmts.push(format!(
                "CREATE TRIGGER {} AFTER DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION \
                 {function}()",
                quoted(backend, None, &log_name)
            ));
        }
        DbBackend::MySql => stmts.push(format!(
            "CREATE TRIGGER {} AFTER DELETE ON {table} FOR EACH ROW {insert}",
            quoted(backend, None, &log_name)
        )),
        _ => stmts.push(format!(
            "CREATE TRIGGER {} AFTER DELETE ON {table} FOR EACH ROW BEGIN {insert}; END",
            quoted(backend, None, &log_name)
        )),
    }
    for sql in stmts {
        db.execute_unprepared(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// Drops the trigger of [`observe_deletions`] from `outbox`'s table (the log stays), before a
/// test migrates the table down: SQLite refuses to drop a column that a trigger names, and
/// elsewhere the trigger would fail once the column is gone. Nothing when delivered rows are
/// not deleted.
pub async fn unobserve_deletions(db: &impl ConnectionTrait, outbox: &Outbox) {
    if !deleting() {
        return;
    }
    let backend = db.get_database_backend();
    let trigger = quoted(backend, None, &deleted_table(outbox.table_name()));
    let sql = match backend {
        DbBackend::Postgres => format!(
            "DROP TRIGGER IF EXISTS {trigger} ON {}",
            quoted(backend, outbox.schema_name(), outbox.table_name())
        ),
        _ => format!("DROP TRIGGER IF EXISTS {trigger}"),
    };
    db.execute_unprepared(&sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The events of `outbox`'s table delivered by delete: rows its log holds that were deleted
/// while `SENDING`. 0 when delivered rows are not deleted.
pub async fn delivered_by_delete(db: &impl ConnectionTrait, outbox: &Outbox) -> u64 {
    if !deleting() {
        return 0;
    }
    let backend = db.get_database_backend();
    let sql = format!(
        "SELECT COUNT(*) AS n FROM {} WHERE {} = '{}'",
        log_of(backend, outbox),
        quoted(backend, None, Column::Status.as_str()),
        EventStatus::Sending.as_str()
    );
    let row = db
        .query_one_raw(Statement::from_string(backend, sql.clone()))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .expect("a count");
    let n: i64 = row.try_get("", "n").expect("n");
    u64::try_from(n).expect("a count")
}

/// The event of `outbox`'s table that the relay delivered by delete, as `SUCCESS`: the last
/// state of the row deleted while `SENDING` whose column `col` is `value`; `None` when there is
/// none (or delivered rows are not deleted).
pub async fn delivered_row(
    db: &impl ConnectionTrait,
    outbox: &Outbox,
    col: Column,
    value: Value,
) -> Option<event_record::Model> {
    if !deleting() {
        return None;
    }
    let backend = db.get_database_backend();
    let param = match backend {
        DbBackend::Postgres => "$1",
        _ => "?",
    };
    let sql = format!(
        "SELECT {} FROM {} WHERE {} = '{}' AND {} = {param}",
        columns(backend, ""),
        log_of(backend, outbox),
        quoted(backend, None, Column::Status.as_str()),
        EventStatus::Sending.as_str(),
        quoted(backend, None, col.as_str()),
    );
    let stmt = Statement::from_sql_and_values(backend, sql, [value]);
    let found = event_record::Model::find_by_statement(stmt)
        .one(db)
        .await
        .expect("read the deleted rows");
    found.map(|e| event_record::Model {
        status: EventStatus::Success,
        ..e
    })
}
