//! MySQL/MariaDB errors by error number (MariaDB's and MySQL's server error reference).
use crate::error::DbErrorKind;

/// The kind of MySQL/MariaDB error `number`. Judged by number, not SQLSTATE: MySQL's class
/// `08` also holds failures that never heal (1043 bad handshake, 1251 unsupported
/// authentication protocol), and a deadlock (1213) carries SQLSTATE `40001`.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn kind(number: u16) -> DbErrorKind {
    match number {
        1213 => DbErrorKind::Deadlock,
        1205 => DbErrorKind::LockTimeout,
        1146 => DbErrorKind::MissingTable,
        1054 => DbErrorKind::MissingColumn,
        1040 | 1053 | 1152 | 1158..=1161 | 1184 | 1203 | 1226 | 1927 | 3032 => {
            DbErrorKind::ConnectionLost
        }
        _ => DbErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_map_to_kinds() {
        assert_eq!(kind(1054), DbErrorKind::MissingColumn);
        assert_eq!(kind(1213), DbErrorKind::Deadlock);
        assert_eq!(kind(1205), DbErrorKind::LockTimeout);
        assert_eq!(kind(1146), DbErrorKind::MissingTable);
        assert_eq!(kind(1927), DbErrorKind::ConnectionLost);
        assert_eq!(kind(1043), DbErrorKind::Other);
        assert_eq!(kind(1062), DbErrorKind::Other);
    }
}
