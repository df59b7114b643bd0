//! CPU accounting from /proc: this process, the database server's processes and the whole
//! machine; this process' peak memory; the WAL Postgres wrote, and the end of InnoDB's purge.
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

/// Clock ticks per second of /proc's CPU times.
const CLK_TCK: f64 = 100.0;

/// (comm, utime + stime + cutime + cstime ticks) of /proc/<pid>/stat: the children's part
/// keeps the CPU of server processes that exited during a phase (reaped by their parent, the
/// postmaster or mariadbd), which would otherwise drop out of the sum.
fn proc_ticks(pid: &str) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_owned();
    let rest: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    let cutime: u64 = rest.get(13)?.parse().ok()?;
    let cstime: u64 = rest.get(14)?.parse().ok()?;
    Some((comm, utime + stime + cutime + cstime))
}

/// CPU ticks of the database server's processes (none for SQLite: it runs in this process).
/// A server process reaped while /proc is scanned can be counted twice or missed (its own stat
/// and its parent's cutime are read at different moments); in the bench only autovacuum
/// workers can exit inside a phase (the pools outlive the phases), so this stays small.
fn server_ticks(backend: DbBackend) -> u64 {
    let names: &[&str] = match backend {
        DbBackend::Postgres => &["postgres"],
        DbBackend::MySql => &["mariadbd", "mysqld"],
        _ => return 0,
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|pid| proc_ticks(&pid))
        .filter(|(comm, _)| names.iter().any(|n| comm.starts_with(n)))
        .map(|(_, t)| t)
        .sum()
}

/// Busy and total ticks of all CPUs (/proc/stat), to see how loaded the machine was.
fn machine_ticks() -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = stat.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The CPU counters at the start of a phase.
pub struct CpuMark {
    at: Instant,
    me: u64,
    server: u64,
    machine: (u64, u64),
}

/// The CPU a phase used, in cores on average over its wall time.
pub struct CpuUse {
    /// Cores used by this process (client: sea-orm, sqlx, the relay) on average.
    client_cores: f64,
    /// Cores used by the database server's processes.
    server_cores: f64,
    /// Cores busy machine-wide (includes other users' work).
    machine_cores: f64,
    /// CPU seconds of the database server's processes between the two marks.
    server_secs: f64,
}

impl CpuMark {
    /// The counters now (the server's: those of `backend`'s processes).
    pub fn now(backend: DbBackend) -> Self {
        CpuMark {
            at: Instant::now(),
            me: proc_ticks("self").map_or(0, |t| t.1),
            server: server_ticks(backend),
            machine: machine_ticks(),
        }
    }

    /// What was used since this mark.
    pub fn since(&self, backend: DbBackend) -> CpuUse {
        let end = CpuMark::now(backend);
        let wall = end.at.duration_since(self.at).as_secs_f64().max(1e-9);
        let cores = |a: u64, b: u64| b.saturating_sub(a) as f64 / CLK_TCK / wall;
        let (busy, total) = (
            end.machine.0.saturating_sub(self.machine.0) as f64,
            end.machine.1.saturating_sub(self.machine.1) as f64,
        );
        let ncpu = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
        CpuUse {
            client_cores: cores(self.me, end.me),
            server_cores: cores(self.server, end.server),
            server_secs: end.server.saturating_sub(self.server) as f64 / CLK_TCK,
            machine_cores: if total > 0.0 {
                busy / total * ncpu
            } else {
                0.0
            },
        }
    }
}

impl CpuUse {
    /// CPU microseconds per event of the bench process and of the database server, for
    /// `events` done in `secs` (what a phase costs whatever else the machine runs).
    pub fn us_per_event(&self, secs: f64, events: u64) -> (f64, f64) {
        let per = |cores: f64| cores * secs * 1e6 / events.max(1) as f64;
        (per(self.client_cores), per(self.server_cores))
    }

    /// The database server's CPU microseconds per event for `events` done between the two
    /// marks (from the CPU ticks alone, no wall time involved).
    pub fn server_us_per_event(&self, events: u64) -> f64 {
        self.server_secs * 1e6 / events.max(1) as f64
    }
}

impl std::fmt::Display for CpuUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cpu cores: bench process {:.2}, db server {:.2}, machine {:.2}",
            self.client_cores, self.server_cores, self.machine_cores
        )
    }
}

/// This process' peak resident memory (VmHWM), MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Postgres: bytes of WAL written so far (`pg_stat_wal.wal_bytes`, the whole cluster); `None`
/// elsewhere.
pub async fn wal_bytes(db: &DatabaseConnection) -> Option<u64> {
    if db.get_database_backend() != DbBackend::Postgres {
        return None;
    }
    let sql = "SELECT wal_bytes::bigint FROM pg_stat_wal";
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .ok()??;
    row.try_get_by_index::<i64>(0).ok().map(|b| b as u64)
}

/// MySQL/MariaDB: waits (at most 60 s) until InnoDB's purge has caught up
/// (`Innodb_history_list_length` under 100), so that the server CPU of a phase includes the
/// removal of the row versions and index entries it left behind; returns how long it waited.
/// Elsewhere returns at once.
pub async fn settle_purge(db: &DatabaseConnection) -> Duration {
    let start = Instant::now();
    if db.get_database_backend() != DbBackend::MySql {
        return Duration::ZERO;
    }
    let sql = "SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'";
    while start.elapsed() < Duration::from_secs(60) {
        let len = match db
            .query_one_raw(Statement::from_string(DbBackend::MySql, sql))
            .await
        {
            Ok(Some(row)) => row
                .try_get_by_index::<String>(1)
                .ok()
                .and_then(|v| v.parse::<u64>().ok()),
            _ => None,
        };
        if len.is_none_or(|l| l < 100) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}
