//! `outbox relay`'s flags of the healing of dead letters.
use std::time::Duration;

use clap::Args;
use sea_orm_outbox::{HealPolicy, WorkerConfig};

/// Healing of dead letters (`WorkerConfig::heal_dead_letters`).
#[derive(Args, Debug)]
pub(crate) struct HealArgs {
    /// Put dead letters of transient failures (outage, busy broker, timeout; `last_error`
    /// starting `retryable: `) back to WAIT after a quiet period, for a few rounds; permanent
    /// failures and expired leases stay for a person [default: false].
    #[arg(long, env = "OUTBOX_HEAL_DEAD_LETTERS")]
    pub(crate) heal_dead_letters: Option<bool>,
    /// How long a dead letter stays FAIL before it is healed; round k waits this × 2^k after
    /// its last failure [default: 5m]. Needs --heal-dead-letters.
    #[arg(long, env = "OUTBOX_HEAL_QUIET", value_parser = humantime::parse_duration, requires = "heal_dead_letters")]
    pub(crate) heal_quiet: Option<Duration>,
    /// Most healings of one event, 1 to 20 [default: 3]. Needs --heal-dead-letters.
    #[arg(long, env = "OUTBOX_HEAL_ROUNDS", requires = "heal_dead_letters")]
    pub(crate) heal_rounds: Option<u32>,
}

impl HealArgs {
    /// `c` with the healing policy the flags ask for: none unless `--heal-dead-letters true`,
    /// else `HealPolicy::default()` with each flag given.
    pub(crate) fn apply(&self, c: WorkerConfig) -> WorkerConfig {
        if self.heal_dead_letters != Some(true) {
            return c.heal_dead_letters(None);
        }
        let mut policy = HealPolicy::default();
        if let Some(quiet) = self.heal_quiet {
            policy.quiet = quiet;
        }
        if let Some(rounds) = self.heal_rounds {
            policy.rounds = rounds;
        }
        c.heal_dead_letters(Some(policy))
    }
}
