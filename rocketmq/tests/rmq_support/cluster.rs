//! A private RocketMQ name server and broker for one test binary, started with
//! `scripts/rocketmq.sh` on ports of its own, so that stopping its broker never disturbs the
//! suites that share the default broker.
use std::collections::HashSet;
use std::process::Command;
use std::sync::Mutex;

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

/// First port of the blocks [`Ports::free_block`] hands out: above the fixed ports of the other
/// suites (19876-26997), below Linux's ephemeral range.
const BLOCKS_FROM: u16 = 27_000;
/// Ports per block of [`Ports::free_block`].
const BLOCK_LEN: u16 = 20;
/// Blocks of [`Ports::free_block`]: 27000-31319, below the 31337 some tools use.
const BLOCKS: u16 = 216;

/// The first ports of the blocks this process handed out.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

impl Ports {
    /// Every port a cluster on these ports listens on: the name server, the broker (and
    /// `broker - 2`, HA `broker + 1`), the health port, and the settle pass's (each + 7).
    pub fn all(&self) -> Vec<u16> {
        let (n, b, h) = (self.namesrv, self.broker, self.health);
        vec![n, n + 7, h, h + 7, b - 2, b, b + 1, b + 5, b + 7, b + 8]
    }

    /// Ports for a private cluster named `broker_name`, from a block of 20 in 27000-31319 whose
    /// ports are all free now and that this process has not handed out before (so that
    /// clusters of cases that run at the same time never share one): name server `P`, health
    /// `P + 1`, broker `P + 11`.
    ///
    /// # Panics
    /// When no block is free.
    pub fn free_block(broker_name: &'static str) -> Ports {
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        let handed_out = handed_out.get_or_insert_with(HashSet::new);
        let start = (uuid::Uuid::new_v4().as_u128() % u128::from(BLOCKS)) as u16;
        for i in 0..BLOCKS {
            let base = BLOCKS_FROM + (start + i) % BLOCKS * BLOCK_LEN;
            let ports = Ports {
                namesrv: base,
                broker: base + 11,
                health: base + 1,
                broker_name,
            };
            let free = ports
                .all()
                .iter()
                .all(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
            if free && handed_out.insert(base) {
                return ports;
            }
        }
        panic!("no block of {BLOCK_LEN} free ports in {BLOCKS_FROM}-31319 for a private RocketMQ");
    }
}

/// A private name server + broker, stopped (and its state removed) on drop.
pub struct PrivateCluster {
    state_dir: std::path::PathBuf,
    ports: Ports,
    /// `user:secret` of a broker with authentication (`ROCKETMQ_AUTH_USER`).
    auth_user: Option<String>,
}

impl PrivateCluster {
    /// Runs `scripts/rocketmq.sh cmd` on this cluster; whether it succeeded.
    pub fn script(&self, cmd: &str) -> bool {
        let mut command = Command::new("bash");
        if let Some(user) = &self.auth_user {
            command.env("ROCKETMQ_AUTH_USER", user);
        }
        let status = command
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
        Self::start_with_auth(label, ports, None)
    }

    /// [`PrivateCluster::start`] with a broker that requires authentication when `auth_user`
    /// (`user:secret`, see `ROCKETMQ_AUTH_USER` in the script) is given: it refuses every
    /// request not signed by that user. The script never prints the secret.
    pub fn start_with_auth(label: &str, ports: Ports, auth_user: Option<String>) -> Option<Self> {
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
            auth_user,
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
