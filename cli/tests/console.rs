//! `outbox console` against a real Postgres database: it serves the overview with the table's
//! counts, runs an action given the token and logs it without the token, refuses a wrong token,
//! warns when it listens beyond loopback, is read-only without a token, and stops on SIGTERM.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::http::http;
use common::{count, dead_letter, insert_many, TestContext};
use sea_orm_outbox::{ops, EventStatus, Outbox};

backend_test! {
    /// The console of the tool: overview, an action with the token, refusals, SIGTERM.
    postgres_cli_console_serves_the_overview_and_actions: Postgres, "cli_console" => serves;
}

/// The console's token in these tests; it must never show in the tool's output.
const TOKEN: &str = "Console-T0ken-Secret-91";

/// A running `outbox console` and the lines of its log (stderr), read by a thread.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Running {
    /// Starts `outbox console --addr <addr>` on `url`, with `token` in OUTBOX_CONSOLE_TOKEN.
    fn start(url: &str, addr: &str, token: Option<&str>) -> Running {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
        cmd.env("OUTBOX_COMPLETION", common::completion().as_str());
        cmd.args(["console", "--addr", addr])
            .env("DATABASE_URL", url)
            .env_remove("RUST_LOG")
            .env_remove("OUTBOX_CONSOLE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(token) = token {
            cmd.env("OUTBOX_CONSOLE_TOKEN", token);
        }
        let mut child = cmd.spawn().expect("spawn outbox console");
        let stderr = child.stderr.take().expect("stderr");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Waits (30 s at most) for the log line that says where it serves; its address.
    fn address(&mut self) -> SocketAddr {
        let end = Instant::now() + Duration::from_secs(30);
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            let Ok(line) = self.lines.recv_timeout(left) else {
                break;
            };
            self.log.push(line.clone());
            if let Some((_, rest)) = line.split_once("console serving on http://") {
                let addr = rest.split('/').next().expect("address");
                return addr.parse().expect("a socket address");
            }
        }
        panic!(
            "outbox console does not say where it serves: {:#?}",
            self.log
        );
    }

    /// Sends SIGTERM and waits (15 s at most) for a clean exit; returns the whole log.
    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let end = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > end {
                self.child.kill().ok();
                panic!(
                    "outbox console still runs 15 s after SIGTERM: {:#?}",
                    self.log
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader thread ends with the process's stderr.
        self.log.extend(self.lines.iter());
        let log = self.log.join("\n");
        assert!(status.success(), "exit {status:?}: {log}");
        log
    }
}

/// The number in `data-n` of the element whose `id` is `id` in `html`.
fn shown(html: &str, id: &str) -> u64 {
    let at = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page"));
    let rest = &html[at..];
    let n = rest.find("data-n=\"").expect("data-n") + "data-n=\"".len();
    let end = rest[n..].find('"').expect("end of data-n");
    rest[n..n + end].parse().expect("a number")
}

async fn serves(ctx: &TestContext) {
    let db = &ctx.db;
    insert_many(db, "ORD-W", 2).await;
    let dead = insert_many(db, "ORD-F", 3).await;
    dead_letter(db, &dead, Some("broker unavailable")).await;

    let mut console = Running::start(&ctx.url, "127.0.0.1:0", Some(TOKEN));
    let addr = console.address();
    assert!(addr.ip().is_loopback());
    let page = http(addr, "GET", "/", "").await;
    assert_eq!(page.status, 200);
    let stats = ops::stats(&Outbox::default(), db, Duration::from_secs(600))
        .await
        .expect("stats");
    let counts =
        ["WAIT", "SENDING", "SUCCESS", "FAIL"].map(|s| shown(&page.body, &format!("count-{s}")));
    assert_eq!(
        counts,
        [stats.wait, stats.sending, stats.success, stats.fail]
    );
    assert_eq!(counts, [2, 0, 0, 3]);

    let wrong = http(addr, "POST", "/discard", "scope=all&token=not-the-token").await;
    assert_eq!(wrong.status, 403);
    let form = format!("scope=all&token={TOKEN}");
    let retried = http(addr, "POST", "/retry", &form).await;
    assert_eq!(retried.status, 200, "{}", retried.body);
    assert_eq!(shown(&retried.body, "outcome"), 3);
    assert_eq!(count(db, EventStatus::Fail).await, 0);
    assert_eq!(count(db, EventStatus::Wait).await, 5);
    let log = console.stop();
    assert!(log.contains("action refused: wrong token"), "{log}");
    assert!(
        log.contains("console: dead letters retried") && log.contains("count=3"),
        "{log}"
    );
    assert!(!log.contains(TOKEN), "the token is never logged: {log}");
    assert!(!log.contains("reachable from other hosts"), "{log}");

    // Every interface, no token: a warning, and read-only.
    let mut open = Running::start(&ctx.url, "0.0.0.0:0", None);
    let port = open.address().port();
    let local = SocketAddr::from(([127, 0, 0, 1], port));
    let refused = http(local, "POST", "/retry", &form).await;
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("read-only"), "{}", refused.body);
    let log = open.stop();
    assert!(log.contains("reachable from other hosts"), "{log}");
    assert!(log.contains("the console is read-only"), "{log}");
    assert_eq!(count(db, EventStatus::Wait).await, 5, "nothing changed");
}
