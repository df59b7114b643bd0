//! The hosting every rocketmq-rust client needs: [`ClientHost`] (a runtime owner, a telemetry
//! guard and a client runtime), and the name server probe run before a client starts.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rocketmq_client_rust::{ClientRuntime, ClientRuntimeConfig};
use rocketmq_observability::TelemetryRuntimeGuard;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

use super::config::{RocketMqConfig, ENV_NAMESRV_ADDR};
use super::errors::client_error_text;
use sea_orm_outbox::OutboxError;

/// How long [`probe_namesrv`] waits for a name server to accept a connection.
const NAMESRV_PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// The parallelism each client's own runtime is planned for (`RuntimeConfig::for_parallelism`).
const RUNTIME_PARALLELISM: usize = 2;
/// How long the client runtime may take to stop its tasks.
const CLIENT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// A boxed future that is `Send`.
///
/// The producer and consumer sit behind trait objects whose methods return these: the client's
/// types are so deeply nested that proving `Send`/`Sync` for a struct holding them overflows the
/// compiler's recursion limit in every crate that spawns a task with the publisher; the `dyn`
/// stops that.
pub(super) type SendFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The runtime pieces every rocketmq-rust client needs: a runtime owner (its own Tokio runtime),
/// a no-op telemetry guard (the library installs no global subscriber) and a client runtime.
pub(super) struct ClientHost {
    owner: RuntimeOwner,
    telemetry: TelemetryRuntimeGuard,
    /// The runtime a producer or consumer is built on.
    pub(super) runtime: Arc<ClientRuntime>,
}

impl ClientHost {
    /// Starts the pieces; `scope` names the runtime's threads (`outbox-rmq-{scope}`).
    ///
    /// # Errors
    /// [`OutboxError::Broker`] when the runtime owner or the client runtime cannot be built.
    pub(super) fn new(scope: &str) -> Result<Self, OutboxError> {
        let err =
            |what: &str, e: String| OutboxError::Broker(format!("RocketMQ client {what}: {e}"));
        let config =
            RuntimeConfig::for_parallelism(format!("outbox-rmq-{scope}"), RUNTIME_PARALLELISM);
        let owner = RuntimeOwner::plan(config)
            .map_err(|e| err("runtime configuration", format!("{e:?}")))?
            .build()
            .map_err(|e| {
                err(
                    "runtime",
                    format!(
                        "{} ({})",
                        e.code().as_str(),
                        e.descriptor().public_message()
                    ),
                )
            })?;
        let telemetry = TelemetryRuntimeGuard::noop();
        let runtime = ClientRuntime::try_new(
            owner.root_context().component("client"),
            ClientRuntimeConfig {
                shutdown_timeout: CLIENT_SHUTDOWN_TIMEOUT,
                ..ClientRuntimeConfig::default()
            },
            telemetry.handle(),
        )
        .map_err(|e| err("runtime", client_error_text(&e)))?;
        Ok(ClientHost {
            owner,
            telemetry,
            runtime,
        })
    }

    /// Stops the client runtime, then the owner's tasks and Tokio runtime, then telemetry.
    /// Shut the client built on [`ClientHost::runtime`] down first.
    pub(super) async fn shutdown(self) {
        let report = self.runtime.shutdown().await;
        if !report.is_healthy() {
            tracing::warn!(report = %report.to_json(), "RocketMQ client runtime did not shut down cleanly");
        }
        let report = self.owner.shutdown_tasks().await;
        if !report.is_healthy() {
            tracing::warn!(report = %report.to_json(), "RocketMQ runtime tasks did not shut down cleanly");
        }
        let report = self.owner.shutdown_background();
        if !report.is_healthy() {
            tracing::warn!(report = %report.to_json(), "RocketMQ runtime did not shut down cleanly");
        }
        let report = self.telemetry.shutdown();
        if !report.is_healthy() {
            tracing::debug!(report = %report.to_json(), "RocketMQ telemetry did not shut down cleanly");
        }
    }
}

/// Waits until at least one name server in `config` accepts a TCP connection (each within 3 s).
///
/// # Errors
/// [`OutboxError::Broker`] listing each address and why it did not answer.
pub(super) async fn probe_namesrv(config: &RocketMqConfig) -> Result<(), OutboxError> {
    let mut failures = Vec::new();
    for addr in config.namesrv_addrs() {
        match tokio::time::timeout(NAMESRV_PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr))
            .await
        {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => failures.push(format!("{addr}: {e}")),
            Err(_) => failures.push(format!(
                "{addr}: no answer within {} ms",
                NAMESRV_PROBE_TIMEOUT.as_millis()
            )),
        }
    }
    Err(OutboxError::Broker(format!(
        "no RocketMQ name server reachable ({}); start one (scripts/rocketmq.sh start) or set {ENV_NAMESRV_ADDR}",
        failures.join("; ")
    )))
}
