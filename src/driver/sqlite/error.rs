//! SQLite errors by (extended) result code (SQLite's "Result and Error Codes"); SQLite has no
//! code of its own for a missing table or column, so those are read from the message of
//! `SQLITE_ERROR`.
use crate::error::DbErrorKind;

/// The kind of SQLite (extended) result `code` with `message`.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn kind(code: i32, message: &str) -> DbErrorKind {
    match code & 0xff {
        5 | 6 => DbErrorKind::LockTimeout,
        1 if message.starts_with("no such table") => DbErrorKind::MissingTable,
        1 if message.starts_with("no such column") || message.contains("has no column named") => {
            DbErrorKind::MissingColumn
        }
        _ => DbErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        assert_eq!(
            kind(1, "table t_event_record has no column named headers"),
            DbErrorKind::MissingColumn
        );
        assert_eq!(
            kind(1, "no such column: headers"),
            DbErrorKind::MissingColumn
        );
        assert_eq!(kind(5, "database is locked"), DbErrorKind::LockTimeout);
        assert_eq!(kind(517, "database is locked"), DbErrorKind::LockTimeout);
        assert_eq!(
            kind(6, "database table is locked"),
            DbErrorKind::LockTimeout
        );
        assert_eq!(
            kind(1, "no such table: t_event_record"),
            DbErrorKind::MissingTable
        );
        assert_eq!(kind(1, "near \"x\": syntax error"), DbErrorKind::Other);
        assert_eq!(kind(2067, "UNIQUE constraint failed"), DbErrorKind::Other);
    }
}
