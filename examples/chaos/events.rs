//! The harness's view of the events written, `chaos_events` (`id`, `biz_no`, `status`,
//! `retry_count`): the rows of `t_event_record`, and with `--completion delete` also the rows
//! the relays deleted. There an `AFTER DELETE` trigger copies each deleted row into
//! `t_test_deleted`; a row deleted while `SENDING` was delivered (the relays delete nothing
//! else), and the view shows it `SUCCESS`. The relays' statements are the library's own; the
//! trigger only records what they deleted.
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};

/// The columns the harness reads.
const COLUMNS: &str = "id, biz_no, status, retry_count";

/// Creates `chaos_events` (and with `deleting` the log of deleted rows and its trigger).
pub async fn create(db: &DatabaseConnection, deleting: bool) -> Result<(), DbErr> {
    let insert = format!(
        "INSERT INTO t_test_deleted ({COLUMNS}) VALUES (OLD.id, OLD.biz_no, OLD.status, \
         OLD.retry_count)"
    );
    let mut stmts = Vec::new();
    let mut view = format!("CREATE VIEW chaos_events AS SELECT {COLUMNS} FROM t_event_record");
    if deleting {
        stmts.push(format!(
            "CREATE TABLE t_test_deleted AS SELECT {COLUMNS} FROM t_event_record WHERE 1 = 0"
        ));
        match db.get_database_backend() {
            DbBackend::Postgres => {
                stmts.push(format!(
                    "CREATE FUNCTION t_test_deleted_row() RETURNS trigger AS $$ BEGIN {insert}; \
                     RETURN OLD; END $$ LANGUAGE plpgsql"
                ));
                stmts.push(
                    "CREATE TRIGGER t_test_deleted AFTER DELETE ON t_event_record FOR EACH ROW \
                     EXECUTE FUNCTION t_test_deleted_row()"
                        .to_owned(),
                );
            }
            _ => stmts.push(format!(
                "CREATE TRIGGER t_test_deleted AFTER DELETE ON t_event_record FOR EACH ROW {insert}"
            )),
        }
        view.push_str(
            " UNION ALL SELECT id, biz_no, CASE WHEN status = 'SENDING' THEN 'SUCCESS' ELSE \
             status END, retry_count FROM t_test_deleted",
        );
    }
    stmts.push(view);
    for sql in stmts {
        db.execute_unprepared(&sql).await?;
    }
    Ok(())
}

/// `(id, <column>)` of every event written, `column` being `status` or `biz_no`.
pub async fn pairs(db: &DatabaseConnection, column: &str) -> Result<Vec<(i64, String)>, DbErr> {
    let sql = format!("SELECT id, {column} AS v FROM chaos_events");
    let rows = db
        .query_all_raw(Statement::from_string(db.get_database_backend(), sql))
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("", "id")?, r.try_get("", "v")?)))
        .collect()
}

/// The highest `retry_count` of the events written.
pub async fn max_retry_count(db: &DatabaseConnection) -> Result<Option<i32>, DbErr> {
    let sql = "SELECT MAX(retry_count) AS m FROM chaos_events";
    let row = db
        .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await?;
    match row {
        Some(r) => r.try_get("", "m"),
        None => Ok(None),
    }
}
