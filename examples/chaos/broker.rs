//! A name server + broker of the run's own (`--broker-down`, `--private-broker`), on ports of
//! its own so that other suites sharing the default broker are not disturbed; and the
//! two-broker cluster of `--cluster` (ports 21876/21877, 22911/22931).
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::scratch::BoxError;

/// Private RocketMQ ports (the outage test uses 19876/20911; the shared one 9876/10911).
const PRIVATE_NAMESRV_PORT: u16 = 29876;
/// The private broker's port.
const PRIVATE_BROKER_PORT: u16 = 30911;
/// The private broker's health port.
const PRIVATE_HEALTH_PORT: u16 = 30990;

/// `scripts/rocketmq.sh` in this repository.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/rocketmq.sh")
}

/// A name server + broker owned by this run, stopped and removed on drop.
pub struct PrivateBroker {
    /// Its state (pid files, logs, store).
    pub state_dir: PathBuf,
}

impl PrivateBroker {
    /// Runs `scripts/rocketmq.sh <cmd>` on the private instance in `state_dir`; whether it
    /// succeeded.
    pub fn script(state_dir: &Path, cmd: &str) -> bool {
        Command::new("bash")
            .arg(script())
            .arg(cmd)
            .env("ROCKETMQ_STATE_DIR", state_dir)
            .env("ROCKETMQ_NAMESRV_PORT", PRIVATE_NAMESRV_PORT.to_string())
            .env("ROCKETMQ_BROKER_PORT", PRIVATE_BROKER_PORT.to_string())
            .env("ROCKETMQ_HEALTH_PORT", PRIVATE_HEALTH_PORT.to_string())
            .env("ROCKETMQ_BROKER_NAME", "outbox-chaos-broker")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts a private name server and broker with their state in `state_dir`; refuses
    /// when its ports are taken.
    pub fn start(state_dir: PathBuf) -> Result<Self, BoxError> {
        // Never adopt a leftover instance (its state directory is not ours to stop).
        for port in [PRIVATE_NAMESRV_PORT, PRIVATE_BROKER_PORT] {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Err(format!(
                    "port {port} is in use: a leftover private RocketMQ from an earlier chaos run? \
                     (stop it: ss -ltnp | grep {port})"
                )
                .into());
            }
        }
        if !Self::script(&state_dir, "start") {
            return Err(format!(
                "private RocketMQ did not start (logs in {})",
                state_dir.display()
            )
            .into());
        }
        Ok(PrivateBroker { state_dir })
    }

    /// The private name server's address.
    pub fn addr() -> String {
        format!("127.0.0.1:{PRIVATE_NAMESRV_PORT}")
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        Self::script(&self.state_dir, "stop");
    }
}

/// The cluster's first name server (`--cluster`; the script's defaults, spelled out here).
const CLUSTER_NAMESRV_PORTS: [u16; 2] = [21876, 21877];
/// The cluster's brokers: (part, port, health port).
const CLUSTER_BROKERS: [(&str, u16, u16); 2] = [("a", 22911, 22990), ("b", 22931, 22991)];

/// The two-broker cluster of `--cluster` (`scripts/rocketmq.sh cluster-*`): two name servers
/// and two broker masters `broker-a`, `broker-b`; stopped and removed on drop.
pub struct Cluster {
    /// Its state (one directory per part: pid files, logs, stores).
    pub state_dir: PathBuf,
}

impl Cluster {
    /// Runs `scripts/rocketmq.sh <args>` on the cluster in `state_dir`; whether it succeeded.
    pub fn script(state_dir: &Path, args: &[&str]) -> bool {
        let [ns1, ns2] = CLUSTER_NAMESRV_PORTS;
        let [(_, a, health_a), (_, b, health_b)] = CLUSTER_BROKERS;
        Command::new("bash")
            .arg(script())
            .args(args)
            .env("ROCKETMQ_CLUSTER_DIR", state_dir)
            .env("ROCKETMQ_CLUSTER_NAMESRV_PORT_1", ns1.to_string())
            .env("ROCKETMQ_CLUSTER_NAMESRV_PORT_2", ns2.to_string())
            .env("ROCKETMQ_CLUSTER_BROKER_PORT_A", a.to_string())
            .env("ROCKETMQ_CLUSTER_BROKER_PORT_B", b.to_string())
            .env("ROCKETMQ_CLUSTER_HEALTH_PORT_A", health_a.to_string())
            .env("ROCKETMQ_CLUSTER_HEALTH_PORT_B", health_b.to_string())
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts both name servers and both brokers with their state in `state_dir`; refuses when
    /// a port of the cluster is taken.
    pub fn start(state_dir: PathBuf) -> Result<Self, BoxError> {
        let ports = CLUSTER_NAMESRV_PORTS
            .into_iter()
            .chain(CLUSTER_BROKERS.iter().map(|(_, p, _)| *p));
        for port in ports {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Err(format!(
                    "port {port} is in use: a leftover cluster from an earlier chaos run? \
                     (stop it: ss -ltnp | grep {port})"
                )
                .into());
            }
        }
        let cluster = Cluster { state_dir };
        if !Self::script(&cluster.state_dir, &["cluster-start"]) {
            return Err(format!(
                "the RocketMQ cluster did not start (logs in {})",
                cluster.state_dir.display()
            )
            .into());
        }
        Ok(cluster)
    }

    /// Both name servers, as clients are given them.
    pub fn addr() -> String {
        let [ns1, ns2] = CLUSTER_NAMESRV_PORTS;
        format!("127.0.0.1:{ns1};127.0.0.1:{ns2}")
    }

    /// Runs `scripts/rocketmq.sh <args>` on this cluster; whether it succeeded.
    pub fn run(&self, args: &[&str]) -> bool {
        Self::script(&self.state_dir, args)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        Self::script(&self.state_dir, &["cluster-stop"]);
    }
}
