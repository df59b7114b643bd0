//! Postgres errors by SQLSTATE (the PostgreSQL manual's "PostgreSQL Error Codes" appendix).
use crate::error::DbErrorKind;

/// The kind of Postgres SQLSTATE `code`.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) fn kind(code: &str) -> DbErrorKind {
    match code {
        "40P01" => DbErrorKind::Deadlock,
        "55P03" => DbErrorKind::LockTimeout,
        "40001" => DbErrorKind::SerializationFailure,
        "42P01" => DbErrorKind::MissingTable,
        "42703" => DbErrorKind::MissingColumn,
        // 08P01 (protocol violation) is class 08 but waiting does not heal it.
        "08P01" => DbErrorKind::Other,
        "57P01" | "57P02" | "57P03" | "53300" => DbErrorKind::ConnectionLost,
        c if c.starts_with("08") => DbErrorKind::ConnectionLost,
        _ => DbErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        assert_eq!(kind("40P01"), DbErrorKind::Deadlock);
        assert_eq!(kind("40001"), DbErrorKind::SerializationFailure);
        assert_eq!(kind("55P03"), DbErrorKind::LockTimeout);
        assert_eq!(kind("42P01"), DbErrorKind::MissingTable);
        assert_eq!(kind("42703"), DbErrorKind::MissingColumn);
        assert_eq!(kind("08006"), DbErrorKind::ConnectionLost);
        assert_eq!(kind("57P01"), DbErrorKind::ConnectionLost);
        assert_eq!(kind("08P01"), DbErrorKind::Other);
        assert_eq!(kind("23505"), DbErrorKind::Other);
    }
}
