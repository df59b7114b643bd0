//! The database server's stop and start (`--db-restart-at`), on the machine's shared server.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{log, BackendArg};

/// Start/stop of the database server.
#[derive(Clone, Copy)]
pub enum Server {
    Postgres,
    MariaDb,
}

impl Server {
    /// The server of `backend` and its admin URL: `admin_url`, else `OUTBOX_TEST_POSTGRES_URL` /
    /// `OUTBOX_TEST_MYSQL_URL`, else the local server.
    pub fn of(backend: BackendArg, admin_url: Option<&str>) -> (Self, String) {
        let (server, var, local) = match backend {
            BackendArg::Postgres => (
                Server::Postgres,
                "OUTBOX_TEST_POSTGRES_URL",
                "postgres://postgres@127.0.0.1:5432/postgres",
            ),
            BackendArg::Mysql => (
                Server::MariaDb,
                "OUTBOX_TEST_MYSQL_URL",
                "mysql://root@127.0.0.1:3306/test",
            ),
        };
        let admin = admin_url.map_or_else(
            || std::env::var(var).unwrap_or_else(|_| local.into()),
            str::to_owned,
        );
        (server, admin)
    }

    /// Runs `cmd` quietly; whether it succeeded.
    fn run(cmd: &mut Command) -> bool {
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Whether the server answers.
    fn up(self) -> bool {
        match self {
            Server::Postgres => Self::run(Command::new("pg_isready").args(["-h", "127.0.0.1"])),
            Server::MariaDb => {
                Self::run(Command::new("mysqladmin").args(["-h127.0.0.1", "-uroot", "ping"]))
            }
        }
    }

    /// `pg_ctlcluster <newest installed version> main <action...>`.
    fn pg_ctlcluster(action: &[&str]) -> bool {
        let version = std::fs::read_dir("/etc/postgresql")
            .ok()
            .and_then(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .max()
            })
            .unwrap_or_else(|| "15".to_owned());
        Self::run(
            Command::new("pg_ctlcluster")
                .args(["--skip-systemctl-redirect", &version, "main"])
                .args(action),
        )
    }

    /// Stops the server (Postgres: fast shutdown).
    fn stop(self) -> bool {
        match self {
            Server::Postgres => Self::pg_ctlcluster(&["stop", "-m", "fast"]),
            Server::MariaDb => {
                Self::run(Command::new("mysqladmin").args(["-h127.0.0.1", "-uroot", "shutdown"]))
            }
        }
    }

    /// Starts the server.
    fn start(self) -> bool {
        match self {
            Server::Postgres => Self::pg_ctlcluster(&["start"]),
            Server::MariaDb => Self::run(Command::new("start-stop-daemon").args([
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                "/usr/sbin/mariadbd",
            ])),
        }
    }

    /// Stops the server, waits `down_for`, starts it and waits until it answers (60 s).
    pub fn restart(self, down_for: Duration) -> bool {
        let stopped = self.stop();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.up() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        log(format!("database server stopped (ok={stopped})"));
        std::thread::sleep(down_for);
        self.ensure_up()
    }

    /// Starts the server unless it answers, and waits until it does (60 s); whether it does.
    pub fn ensure_up(self) -> bool {
        if self.up() {
            return true;
        }
        self.start();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.up() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }
}
