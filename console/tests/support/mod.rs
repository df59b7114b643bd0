//! What the browser suite needs: chromedriver with a headless Chromium, the console served on a
//! loopback port under the prefix `/outbox`, and an outbox table with events in every status.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::Router;
use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::{CancellationToken, EventStatus, NewEvent, OutboxExt};
use sea_orm_outbox_console::Console;
use tokio::task::JoinHandle;

use crate::common::{dead_letter, insert_many, wait_until, TestContext};

/// The error of the larger dead-letter group: two lines, as an error with its cause reads.
pub const BROKER: &str =
    "broker unavailable: send timed out after 3s\ncaused by: connection refused (os error 111)";
/// The error of the smaller group.
pub const TOO_LARGE: &str = "permanent: message body of 5242880 bytes is over 4194304 bytes";

/// The path of an executable: `var` from the environment, else `default`.
fn executable(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// Whether this run must have every service (CI=true).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A loopback port below 32768 that nothing listens on now (bound and released).
fn low_port() -> u16 {
    let start = 20_000 + (std::process::id() % 10_000) as u16;
    (start..32_000)
        .chain(20_000..start)
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .expect("a free port below 32768")
}

/// chromedriver and the headless Chromium it drives.
pub struct Browser {
    driver: Child,
    pub client: Client,
}

impl Browser {
    /// Starts chromedriver (`CHROMEDRIVER`, default `/usr/bin/chromedriver`) on a free port
    /// below 32768 and a headless Chromium (`CHROMIUM`, default `/usr/bin/chromium`) at
    /// 1280×900. `None` outside CI when either is missing; under CI=true that fails the test.
    pub async fn start() -> Option<Browser> {
        let driver_path = executable("CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromium = executable("CHROMIUM", "/usr/bin/chromium");
        if !driver_path.exists() || !chromium.exists() {
            let missing = format!(
                "{} or {} is missing (Debian: apt-get install chromium chromium-driver)",
                driver_path.display(),
                chromium.display()
            );
            assert!(!in_ci(), "the browser tests need a browser: {missing}");
            eprintln!("skipped: {missing}");
            return None;
        }
        let port = low_port();
        let driver = Command::new(&driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut guard = DriverGuard(Some(driver));
        let up = wait_until(
            Duration::from_secs(20),
            Duration::from_millis(50),
            || async {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
        assert!(up, "chromedriver does not listen on port {port}");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--window-size=1280,900", "--hide-scrollbars"],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("Chromium through chromedriver");
        let driver = guard.0.take().expect("the driver");
        Some(Browser { driver, client })
    }

    /// Runs `f` with the browser's client, then closes Chromium and chromedriver, also
    /// when `f` panics (the panic is the test's failure). Does nothing outside CI when no
    /// browser is installed.
    pub async fn with<F>(f: F)
    where
        F: AsyncFnOnce(&Client),
    {
        let Some(browser) = Browser::start().await else {
            return;
        };
        let outcome = std::panic::AssertUnwindSafe(f(&browser.client))
            .catch_unwind()
            .await;
        browser.stop().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    /// Closes Chromium, then ends chromedriver.
    async fn stop(self) {
        let Browser { driver, client } = self;
        let _ = tokio::time::timeout(Duration::from_secs(10), client.close()).await;
        drop(DriverGuard(Some(driver)));
    }
}

/// Ends chromedriver when dropped.
struct DriverGuard(Option<Child>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The console served on `127.0.0.1:<any port>` under `/outbox`, with its sampler.
pub struct Served {
    pub addr: SocketAddr,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Served {
    /// Serves `console` nested at `/outbox` in an app router, as a service mounts it.
    pub async fn start(console: Console) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let cancel = CancellationToken::new();
        let app = Router::new().nest("/outbox", console.router());
        let stop = cancel.clone();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
                .expect("serve");
        });
        let sampler = tokio::spawn(console.sampler(cancel.clone()));
        Served {
            addr,
            cancel,
            tasks: vec![server, sampler],
        }
    }

    /// The URL of `path` under the console's prefix (`""` is its root, `/outbox`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/outbox{path}", self.addr)
    }

    /// Stops the server and the sampler.
    pub async fn stop(self) {
        self.cancel.cancel();
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// The ids of the events [`seed`] writes, by what became of them.
pub struct Seeded {
    pub wait: Vec<i64>,
    pub broker: Vec<i64>,
    pub too_large: Vec<i64>,
    /// A waiting event whose payload holds HTML.
    pub html: i64,
}

/// A payload that must show as text.
pub const HTML_PAYLOAD: &str = r#"{"note":"<b>bold</b> & <script>alert(1)</script>"}"#;

/// Writes 4 waiting events, 6 delivered ones, 3 dead letters of [`BROKER`] and its like with
/// other time-outs (`ORD-B-*`, one fingerprint), 2 of
/// [`TOO_LARGE`] (`ORD-L-*`) and a waiting event `ORD-HTML` with [`HTML_PAYLOAD`].
pub async fn seed(ctx: &TestContext) -> Seeded {
    let db = &ctx.db;
    let wait = insert_many(db, "ORD-W", 4).await;
    let delivered = insert_many(db, "ORD-D", 6).await;
    deliver(ctx, &delivered).await;
    let broker = insert_many(db, "ORD-B", 3).await;
    // One group by fingerprint, three errors: the time-outs differ (the first is BROKER).
    for (i, &id) in broker.iter().enumerate() {
        let error = BROKER.replace("3s", &format!("{}s", 3 + i));
        dead_letter(db, &[id], Some(&error)).await;
    }
    let too_large = insert_many(db, "ORD-L", 2).await;
    dead_letter(db, &too_large, Some(TOO_LARGE)).await;
    let html = db
        .with_event(NewEvent::raw("ORD-HTML", "ORDER_NOTE", HTML_PAYLOAD).header("tenant", "acme"))
        .await
        .expect("insert");
    Seeded {
        wait,
        broker,
        too_large,
        html,
    }
}

/// Marks the events `ids` delivered (`SUCCESS`), as a relay would.
pub async fn deliver(ctx: &TestContext, ids: &[i64]) {
    Events::update_many()
        .col_expr(Column::Status, Expr::val(EventStatus::Success.as_str()))
        .filter(Column::Id.is_in(ids.to_vec()))
        .exec(&ctx.db)
        .await
        .expect("deliver");
}

/// Traffic for the trend, one step every `pause`: a backlog builds up (more events written than
/// delivered), then drains. Returns how many of its events still wait.
pub async fn traffic(ctx: &TestContext, pause: Duration) -> usize {
    const WRITTEN: [usize; 14] = [6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 2, 2, 2, 2];
    const DELIVERED: [usize; 14] = [0, 2, 2, 3, 3, 4, 4, 6, 6, 6, 6, 5, 4, 3];
    let mut waiting: std::collections::VecDeque<i64> = Default::default();
    for (step, (written, delivered)) in WRITTEN.into_iter().zip(DELIVERED).enumerate() {
        waiting.extend(insert_many(&ctx.db, &format!("ORD-T{step}"), written).await);
        let done: Vec<i64> = (0..delivered).filter_map(|_| waiting.pop_front()).collect();
        deliver(ctx, &done).await;
        tokio::time::sleep(pause).await;
    }
    waiting.len()
}

/// Waits (10 s at most) for the page that has an element `css`: after a click that navigates,
/// so that no element of the page before is read.
pub async fn arrive(client: &Client, css: &str) {
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no page with {css}: {e}"));
}

/// The `data-n` number of the element `css`.
pub async fn number(client: &Client, css: &str) -> u64 {
    let element = client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    let n = element.attr("data-n").await.expect("attribute");
    n.unwrap_or_else(|| panic!("{css} has no data-n"))
        .parse()
        .expect("a number")
}

/// The text of the element `css`.
pub async fn text(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .expect("text")
}

/// The status of the events `ids`, in order.
pub async fn statuses(ctx: &TestContext, ids: &[i64]) -> Vec<EventStatus> {
    let mut out = Vec::new();
    for &id in ids {
        out.push(crate::common::event(&ctx.db, id).await.status);
    }
    out
}
