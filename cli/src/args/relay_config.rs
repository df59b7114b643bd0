//! The worker's configuration from `outbox relay`'s arguments, and the value of `--retention`.
use std::time::Duration;

use sea_orm_outbox::WorkerConfig;

use super::{CompletionArg, Ordered, Protocol, RelayArgs, Strategy};

impl RelayArgs {
    /// The worker's configuration: the library's defaults, overridden by each flag given.
    pub(crate) fn config(&self) -> WorkerConfig {
        let mut c = WorkerConfig::default();
        if let Some(s) = self.claim_strategy {
            c = c.claim_strategy(match s {
                Strategy::PerRow => sea_orm_outbox::ClaimStrategy::PerRow,
                Strategy::Batch => sea_orm_outbox::ClaimStrategy::Batch,
            });
        }
        if let Some(p) = self.statement_protocol {
            c = c.statement_protocol(match p {
                Protocol::Extended => sea_orm_outbox::StatementProtocol::Extended,
                Protocol::Simple => sea_orm_outbox::StatementProtocol::Simple,
            });
        }
        if let Some(o) = self.ordered {
            c = c.ordered(match o {
                Ordered::Off => None,
                Ordered::Block => Some(sea_orm_outbox::OrderedPolicy::Block),
                Ordered::Skip => Some(sea_orm_outbox::OrderedPolicy::Skip),
            });
        }
        if let Some(n) = self.send_concurrency {
            c = c.send_concurrency(n);
        }
        if let Some(on) = self.wake_on_commit {
            c = c.wake_on_commit(on);
        }
        if let Some(d) = self.poll_delay {
            c = c.poll_delay(d);
        }
        if let Some(n) = self.batch {
            c = c.batch_size(n);
        }
        if let Some(d) = self.lease {
            c = c.lease(d);
        }
        if let Some(d) = self.send_timeout {
            c = c.send_timeout(d);
        }
        if let Some(d) = self.heartbeat_interval {
            c = c.heartbeat_interval(d);
        }
        if let Some(completion) = self.completion {
            c = c.completion(match completion {
                CompletionArg::Update => sea_orm_outbox::Completion::Update,
                CompletionArg::Delete => sea_orm_outbox::Completion::Delete,
            });
        }
        if let Some(Keep(keep)) = self.retention {
            c = c.retention(keep);
        }
        let mut retry = c.retry;
        if let Some(n) = self.max_retries {
            retry.max_retries = n;
        }
        if let Some(d) = self.retry_backoff {
            retry.backoff_base = d;
        }
        if let Some(d) = self.retry_max_backoff {
            retry.max_backoff = d;
        }
        c = self.heal.apply(c.retry(retry));
        // An instance id given outright wins over one generated from the service name.
        if let Some(name) = &self.service_name {
            c = c.service_name(name);
        }
        if let Some(id) = &self.instance_id {
            c = c.instance_id(id.clone());
        }
        c
    }
}

/// The value of `--retention`: a period, or `None` for `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keep(pub(crate) Option<Duration>);

/// Parses `--retention`: `off`, or a duration such as `7d`.
pub(crate) fn retention(s: &str) -> Result<Keep, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(Keep(None));
    }
    humantime::parse_duration(s.trim())
        .map(|d| Keep(Some(d)))
        .map_err(|e| format!("{e} (a duration such as 7d, or off)"))
}
