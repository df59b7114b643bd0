//! A private RocketMQ name server and broker for one test binary, started with
//! `scripts/rocketmq.sh` on ports of its own, so that stopping its broker never disturbs the
//! suites that share the default broker.
use std::process::Command;

use super::{in_ci, script, unique};

/// The ports and name of a private cluster: the name server's, the broker's (it also uses
/// `broker - 2`, `broker + 1` for HA, and each port + 7 in the script's settle pass) and its
/// health port.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub namesrv: u16,
    pub broker: u16,
    pub health: u16,
    pub broker_name: &'static str,
}

/// A private name server + broker, stopped (and its state removed) on drop.
pub struct PrivateCluster {
    state_dir: std::path::PathBuf,
    ports: Ports,
}

impl PrivateCluster {
    /// Runs `scripts/rocketmq.sh cmd` on this cluster; whether it succeeded.
    pub fn script(&self, cmd: &str) -> bool {
        let status = Command::new("bash")
            .arg(script())
            .arg(cmd)
            .env("ROCKETMQ_STATE_DIR", &self.state_dir)
            .env("ROCKETMQ_NAMESRV_PORT", self.ports.namesrv.to_string())
            .env("ROCKETMQ_BROKER_PORT", self.ports.broker.to_string())
            .env("ROCKETMQ_HEALTH_PORT", self.ports.health.to_string())
            .env("ROCKETMQ_BROKER_NAME", self.ports.broker_name)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script().display()));
        status.success()
    }

    /// Starts a cluster on `ports` (its state in a fresh temp dir named after `label`). Without
    /// the `rocketmq-namesrv-rust` and `rocketmq-broker-rust` binaries: `None` (skipped), or a
    /// failure under `CI=true`.
    pub fn start(label: &str, ports: Ports) -> Option<Self> {
        let have_bins = ["rocketmq-namesrv-rust", "rocketmq-broker-rust"]
            .iter()
            .all(|b| {
                Command::new("bash")
                    .args([
                        "-c",
                        &format!("PATH=\"$HOME/.cargo/bin:$PATH\" command -v {b}"),
                    ])
                    .output()
                    .is_ok_and(|o| o.status.success())
            });
        if !have_bins && !in_ci() {
            eprintln!("SKIPPED {label}: rocketmq-namesrv-rust / rocketmq-broker-rust not installed (scripts/rocketmq.sh start installs them)");
            return None;
        }
        let cluster = PrivateCluster {
            state_dir: std::env::temp_dir().join(unique(label)),
            ports,
        };
        // A leftover instance from an aborted run would hold the ports.
        cluster.script("stop");
        assert!(
            cluster.script("start"),
            "private RocketMQ did not start (logs in {})",
            cluster.state_dir.display()
        );
        Some(cluster)
    }

    /// The name server's address.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.ports.namesrv)
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        self.script("stop");
        if !std::thread::panicking() {
            std::fs::remove_dir_all(&self.state_dir).ok();
        }
    }
}
