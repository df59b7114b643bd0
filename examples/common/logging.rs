//! The examples' log output.
//!
//! An example includes it with `#[path = "common/logging.rs"] mod logging;` (`../common/logging.rs`
//! from an example of its own folder).

/// Logs to stderr at the level `RUST_LOG` asks for, `warn` when it is unset or malformed;
/// coloured only on a terminal.
pub fn init() {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
