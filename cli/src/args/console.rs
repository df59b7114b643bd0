//! `outbox console`'s flags.
use std::time::Duration;

use clap::Args;
use sea_orm_outbox::Secret;

use super::secret;

/// `outbox console` settings.
#[derive(Args, Debug)]
pub(crate) struct ConsoleArgs {
    /// Address to listen on. Loopback by default; any other address makes the console
    /// reachable from other hosts (put authentication in front of it).
    #[arg(long, env = "OUTBOX_CONSOLE_ADDR", default_value = "127.0.0.1:8080")]
    pub(crate) addr: std::net::SocketAddr,
    /// The token that allows retry and discard (typed into each action's form); without one
    /// the console is read-only. Prefer the environment variable (a flag shows in the process
    /// list); never printed.
    #[arg(long, env = "OUTBOX_CONSOLE_TOKEN", hide_env_values = true, value_parser = secret)]
    pub(crate) token: Option<Secret>,
    /// The workers' lease: SENDING rows claimed longer ago than this are shown as past it.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
    pub(crate) lease: Duration,
}
