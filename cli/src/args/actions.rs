//! The actions of `outbox migrate` and `outbox dead`.
use clap::Subcommand;

/// `outbox migrate` actions.
#[derive(Subcommand, Debug)]
pub(crate) enum MigrateAction {
    /// Apply the pending migrations (all, or the first N).
    Up {
        /// Number of pending migrations to apply.
        #[arg(short, long)]
        num: Option<u32>,
    },
    /// Roll back the last N applied migrations (default 1).
    Down {
        /// Number of applied migrations to roll back.
        #[arg(short, long, default_value_t = 1)]
        num: u32,
    },
    /// List the migrations, applied or pending.
    Status,
}

/// `outbox dead` actions.
#[derive(Subcommand, Debug)]
pub(crate) enum DeadAction {
    /// List the dead letters, oldest first; with --group one line per error fingerprint.
    List {
        /// At most this many (events, or groups with --group).
        #[arg(long, default_value_t = 100)]
        limit: u64,
        /// One line per group of dead letters whose errors share a fingerprint (the error with
        /// ids, numbers and quoted values replaced), largest first, with its count.
        #[arg(long)]
        group: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Send a dead letter again (FAIL -> WAIT, retry_count 0, due now).
    Retry {
        /// The event id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<i64>,
        /// Every dead letter.
        #[arg(long)]
        all: bool,
    },
    /// Delete a dead letter for good.
    Discard {
        /// The event id.
        id: i64,
    },
}
