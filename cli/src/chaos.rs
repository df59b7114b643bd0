//! Fault injection for the chaos harness (`examples/chaos/`, `.ci/chaos-smoke`); only in a
//! build with the `chaos-testing` feature, never in production.
//!
//! `outbox relay --chaos-send-stall N:DURATION` (or `OUTBOX_CHAOS_SEND_STALL`) wraps the
//! relay's publisher in [`StallingPublisher`].
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use sea_orm_outbox::{OutboxMessage, PublishError, Publisher};

/// The relay's fault-injection flags.
#[derive(Args, Debug)]
pub(crate) struct ChaosArgs {
    /// Fault injection for chaos tests, `N:DURATION`: after the broker accepted the FIRST
    /// attempt of an event whose id is a multiple of N, the sending thread stalls (blocks) for
    /// DURATION before the outcome is recorded, as a process frozen mid-send would. With a
    /// DURATION longer than the lease the event is reclaimed and sent again (a duplicate) and
    /// the stalled sender's late acknowledgement is refused. Never use it in production.
    #[arg(long, env = "OUTBOX_CHAOS_SEND_STALL", hide = true, value_parser = parse_stall)]
    pub(crate) chaos_send_stall: Option<(i64, Duration)>,
}

/// `N:DURATION` for `--chaos-send-stall`.
fn parse_stall(s: &str) -> Result<(i64, Duration), String> {
    let (n, d) = s
        .split_once(':')
        .ok_or_else(|| "expected N:DURATION, e.g. 500:6s".to_owned())?;
    let n: i64 = n.trim().parse().map_err(|e| format!("N: {e}"))?;
    if n < 1 {
        return Err("N must be at least 1".into());
    }
    let d = humantime::parse_duration(d.trim()).map_err(|e| format!("DURATION: {e}"))?;
    Ok((n, d))
}

/// `publisher`, wrapped in a [`StallingPublisher`] when `--chaos-send-stall` is given.
pub(crate) fn inject(args: &ChaosArgs, publisher: Arc<dyn Publisher>) -> Arc<dyn Publisher> {
    let Some((every, stall)) = args.chaos_send_stall else {
        return publisher;
    };
    tracing::warn!(every, stall_ms = stall.as_millis() as u64, "FAULT INJECTION: first sends of every {every}th event stall after the broker accepted them");
    Arc::new(StallingPublisher {
        inner: publisher,
        every,
        stall,
    })
}

/// `--chaos-send-stall`: a publisher whose sending thread freezes after some first sends.
struct StallingPublisher {
    /// The publisher that really sends.
    inner: Arc<dyn Publisher>,
    /// Events whose id is a multiple of this stall.
    every: i64,
    /// How long the sending thread is blocked.
    stall: Duration,
}

#[async_trait::async_trait]
impl Publisher for StallingPublisher {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        self.inner.publish(m).await?;
        if m.retry_count == 0 && m.event_id % self.every == 0 {
            tracing::warn!(
                event_id = m.event_id,
                "FAULT INJECTION: stalling the sending thread"
            );
            // Blocks the thread on purpose: the whole send path freezes, timers included.
            std::thread::sleep(self.stall);
        }
        Ok(())
    }

    /// Batches as the inner publisher does (the relay's default path), each message of a
    /// batch judged like a single send: the thread stalls after the batch was accepted.
    async fn publish_batch(&self, messages: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        let results = self.inner.publish_batch(messages).await;
        let stall = messages
            .iter()
            .zip(&results)
            .find(|(m, r)| r.is_ok() && m.retry_count == 0 && m.event_id % self.every == 0);
        if let Some((m, _)) = stall {
            tracing::warn!(
                event_id = m.event_id,
                "FAULT INJECTION: stalling the sending thread"
            );
            std::thread::sleep(self.stall);
        }
        results
    }

    fn batches(&self) -> bool {
        self.inner.batches()
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};

    /// `--chaos-send-stall N:DURATION` parses; a zero, non-numeric or missing N and a bad
    /// duration are refused.
    #[test]
    fn send_stall_flag_parses() {
        let cli = Cli::try_parse_from(["outbox", "relay", "--chaos-send-stall", "500:6s"])
            .expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        assert_eq!(
            args.chaos.chaos_send_stall,
            Some((500, Duration::from_secs(6)))
        );
        for bad in ["0:1s", "x:1s", "5", "5:soon"] {
            assert!(parse_stall(bad).is_err(), "{bad}");
        }
    }
}
