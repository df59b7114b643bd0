//! `outbox console`: the web console (crate `sea-orm-outbox-console`) served alone until
//! Ctrl-C or SIGTERM.
use sea_orm::DatabaseConnection;
use sea_orm_outbox::{ops, CancellationToken, Outbox};
use sea_orm_outbox_console::Console;

use crate::args::ConsoleArgs;
use crate::failure::Failure;
use crate::relay::shutdown_signal;

/// Checks the table, listens on `--addr` and serves the console with its sampler until a
/// signal. A non-loopback address is served with a warning: the console is then reachable
/// from other hosts.
pub(crate) async fn console(
    outbox: &Outbox,
    db: &DatabaseConnection,
    args: ConsoleArgs,
) -> Result<(), Failure> {
    ops::check_table(outbox, db).await?;
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| Failure::Listen(args.addr, e))?;
    let addr = listener.local_addr().unwrap_or(args.addr);
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "the console listens on a non-loopback address: it is reachable from other hosts; \
             put authentication in front of it or listen on 127.0.0.1"
        );
    }
    let mut console = Console::new(db.clone(), *outbox).lease(args.lease);
    if let Some(token) = args.token.filter(|t| !t.is_empty()) {
        console = console.token(token.expose());
    } else {
        tracing::info!(
            "no console token (--token, OUTBOX_CONSOLE_TOKEN): the console is read-only"
        );
    }
    tracing::info!(%addr, table = outbox.table_name(), "console serving on http://{addr}/");
    let cancel = CancellationToken::new();
    let signal = shutdown_signal();
    let stop = cancel.clone();
    tokio::spawn(async move {
        signal.await;
        tracing::info!("stopping the console");
        stop.cancel();
    });
    console
        .serve(listener, cancel)
        .await
        .map_err(|e| Failure::Listen(addr, e))
}
