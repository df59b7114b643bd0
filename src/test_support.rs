//! Helpers for the crate's own tests, examples and benchmarks (feature `test-support`); not
//! an API.
use std::time::Duration;

/// Polls `check` every `every` until it returns true or `deadline` passes; returns whether it
/// did. Handy in tests and demos that wait for the outbox to drain.
pub async fn wait_until<F, Fut>(deadline: Duration, every: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}
