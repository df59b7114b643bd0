//! Reaching the database: one connection for the commands, waiting with back-off for the relay,
//! and the log writer that keeps the URL's secrets out of stderr.
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use crate::redact::{redact_secrets, redact_url};
use sea_orm::{ConnectOptions, Database, DatabaseConnection};
use sea_orm_outbox::ops;
use sea_orm_outbox::{CancellationToken, Outbox};

use crate::failure::Failure;

/// One log line on its way to stderr, with the database URL's secrets redacted.
///
/// Needed even though this tool never logs the URL itself: SeaORM's `Database::connect` span
/// records the whole `ConnectOptions`, URL and password included, and prints it with any DEBUG
/// event inside (e.g. sqlx's TLS notice on MySQL). The fmt layer writes each event through one
/// writer, which redacts and prints it when dropped.
pub(crate) struct RedactingLine {
    /// The database URL whose secrets are redacted.
    url: Arc<str>,
    /// The line so far.
    buf: Vec<u8>,
}

impl RedactingLine {
    /// An empty line that will redact the secrets of `url`.
    pub(crate) fn new(url: Arc<str>) -> Self {
        RedactingLine {
            url,
            buf: Vec::new(),
        }
    }
}

impl std::io::Write for RedactingLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactingLine {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.buf);
        let _ = std::io::stderr().write_all(redact_secrets(&text, &self.url).as_bytes());
    }
}

/// Longest one connection attempt may take (the pool's acquire timeout). Within it the driver
/// itself retries a refused connection, so a server that is starting up is caught quickly.
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// `relay`'s first pause after a failed connection attempt at start; it doubles per attempt.
const CONNECT_RETRY_FIRST: Duration = Duration::from_millis(200);
/// `relay`'s longest pause between connection attempts at start.
const CONNECT_RETRY_MAX: Duration = Duration::from_secs(5);

/// Opens a small pool (at most 4 connections, SQL logging off): one attempt.
pub(crate) async fn connect(url: &str) -> Result<DatabaseConnection, Failure> {
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(4)
        .min_connections(0)
        .connect_timeout(CONNECT_ATTEMPT_TIMEOUT)
        .sqlx_logging(false);
    Database::connect(opt).await.map_err(Failure::Connect)
}

/// The pause after the `attempt`-th failed connection attempt: 200 ms doubling per attempt,
/// spread by ±10% at random (so that relays started together do not retry in lockstep), at
/// most 5 s.
fn connect_retry_delay(attempt: u32) -> Duration {
    let doubling = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    let delay = CONNECT_RETRY_FIRST
        .saturating_mul(doubling)
        .min(CONNECT_RETRY_MAX);
    // ±10%: a random number from the standard library's randomly seeded hasher.
    let r = RandomState::new().build_hasher().finish() % 2001;
    delay
        .mul_f64(0.9 + r as f64 / 10_000.0)
        .min(CONNECT_RETRY_MAX)
}

/// One attempt at `relay` start: open the pool and check that the outbox table is there.
async fn connect_and_check(url: &str, outbox: &Outbox) -> Result<DatabaseConnection, Failure> {
    let db = connect(url).await?;
    if let Err(e) = ops::check_table(outbox, &db).await {
        db.close().await.ok();
        return Err(e.into());
    }
    Ok(db)
}

/// [`connect_and_check`] until it succeeds, retrying connection failures with back-off and a
/// WARN per failed attempt, for at most `limit` (`None`: no limit; zero: one attempt, its error
/// returned as is). Any other failure returns at once. `Ok(None)` when `cancel` fires first.
pub(crate) async fn wait_for_database(
    url: &str,
    outbox: &Outbox,
    limit: Option<Duration>,
    cancel: &CancellationToken,
) -> Result<Option<DatabaseConnection>, Failure> {
    let once = limit.is_some_and(|d| d.is_zero());
    let deadline = limit
        .filter(|d| !d.is_zero())
        .map(|d| tokio::time::Instant::now() + d);
    let database = redact_url(url);
    let gave_up = |attempts, last| Failure::ConnectGaveUp {
        database: database.clone(),
        waited: limit.unwrap_or_default(),
        attempts,
        last,
    };
    let mut last = None;
    let mut attempts = 0;
    loop {
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            return Err(gave_up(attempts, last));
        }
        attempts += 1;
        let attempt = async {
            match deadline {
                Some(d) => tokio::time::timeout_at(d, connect_and_check(url, outbox))
                    .await
                    .ok(),
                None => Some(connect_and_check(url, outbox).await),
            }
        };
        let failure = tokio::select! {
            () = cancel.cancelled() => return Ok(None),
            outcome = attempt => match outcome {
                Some(Ok(db)) => {
                    if attempts > 1 {
                        tracing::info!(%database, attempts, "the database is reachable");
                    }
                    return Ok(Some(db));
                }
                Some(Err(f)) if once || !f.is_connection_failure() => return Err(f),
                Some(Err(f)) => f,
                None => return Err(gave_up(attempts, last)),
            },
        };
        let cause = redact_secrets(&failure.cause(), url);
        let delay = connect_retry_delay(attempts);
        let resume = tokio::time::Instant::now() + delay;
        let resume = deadline.map_or(resume, |d| resume.min(d));
        tracing::warn!(%database, attempt = attempts, error = %cause,
            retry_in = %humantime::format_duration(Duration::from_millis(delay.as_millis() as u64)),
            "cannot connect to the database yet; retrying");
        last = Some(cause);
        tokio::select! {
            () = cancel.cancelled() => return Ok(None),
            () = tokio::time::sleep_until(resume) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 200 ms doubling per attempt, ±10%, never above 5 s, whatever the attempt number.
    #[test]
    fn connect_retry_delay_doubles_up_to_five_seconds() {
        let within = |attempt: u32, low: u64, high: u64| {
            for _ in 0..50 {
                let ms = connect_retry_delay(attempt).as_millis() as u64;
                assert!((low..=high).contains(&ms), "attempt {attempt}: {ms} ms");
            }
        };
        within(1, 180, 220);
        within(2, 360, 440);
        within(3, 720, 880);
        within(5, 2880, 3520);
        within(6, 4500, 5000);
        within(40, 4500, 5000);
        within(u32::MAX, 4500, 5000);
    }
}
