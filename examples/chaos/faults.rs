//! The scheduled faults: a database server restart (`--db-restart-at`) and a broker outage
//! (`--broker-down`, on the private broker). Worker kills are the supervisor's.
use tokio::task::JoinHandle;

use crate::broker::PrivateBroker;
use crate::server::Server;
use crate::{log, Run};

/// Starts the run's faults, each at its time after the run's start; the task ends when the
/// last fault is over.
pub fn start(run: &Run, server: Server, private: Option<&PrivateBroker>) -> JoinHandle<()> {
    let started = run.started;
    let mut faults = Vec::new();
    if let Some(at) = run.args.db_restart_at {
        let down_for = run.args.db_down_for;
        faults.push(tokio::spawn(async move {
            tokio::time::sleep_until((started + at).into()).await;
            log(format!("restarting the database server at {at:?}"));
            let ok = tokio::task::spawn_blocking(move || server.restart(down_for))
                .await
                .unwrap_or(false);
            log(format!(
                "database server back (ok={ok}) at {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }));
    }
    if let (Some((from, to)), Some(p)) = (run.args.broker_down, private) {
        let dir = p.state_dir.clone();
        faults.push(tokio::spawn(async move {
            tokio::time::sleep_until((started + from).into()).await;
            log(format!("stopping the broker at {from:?}"));
            let d = dir.clone();
            tokio::task::spawn_blocking(move || PrivateBroker::script(&d, "stop-broker"))
                .await
                .ok();
            tokio::time::sleep_until((started + to).into()).await;
            log(format!("starting the broker at {to:?}"));
            let ok = tokio::task::spawn_blocking(move || PrivateBroker::script(&dir, "start"))
                .await
                .unwrap_or(false);
            log(format!(
                "broker back (ok={ok}) at {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }));
    }
    tokio::spawn(async move {
        for f in faults {
            f.await.ok();
        }
    })
}
