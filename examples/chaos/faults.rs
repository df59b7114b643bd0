//! The scheduled faults: a database server restart (`--db-restart-at`), a broker outage
//! (`--broker-down`, on the private broker) and broker-a's crash or hang in the cluster
//! (`--cluster kill-a|pause-a`, once `--fault-at-percent` of the events were received). Worker
//! kills are the supervisor's; `--cluster namesrv-down` is set up before the relays start.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::broker::{Cluster, PrivateBroker};
use crate::consumer::Received;
use crate::server::Server;
use crate::{log, ClusterFault, Run};

/// Starts the run's faults, each at its time after the run's start (or, in the cluster, once
/// the share of the events was `received`); the task ends when the last fault is over.
pub fn start(
    run: &Run,
    server: Server,
    private: Option<&PrivateBroker>,
    cluster: Option<&Cluster>,
    received: Arc<Mutex<Received>>,
) -> JoinHandle<()> {
    let started = run.started;
    let mut faults = Vec::new();
    if let (Some(fault @ (ClusterFault::KillA | ClusterFault::PauseA)), Some(c)) =
        (run.args.cluster, cluster)
    {
        let dir = c.state_dir.clone();
        let want = run.args.events * run.args.fault_at_percent as usize / 100;
        let (pause_for, write_over) = (run.args.pause_for, run.args.write_over);
        let restarted = run.broker_restarted.clone();
        let script = move |args: &'static [&'static str]| {
            let dir = dir.clone();
            async move {
                tokio::task::spawn_blocking(move || Cluster::script(&dir, args))
                    .await
                    .unwrap_or(false)
            }
        };
        faults.push(tokio::spawn(async move {
            // Until the share was received (or long after the writes: then the run is broken
            // anyway and the fault is skipped).
            let give_up = started + write_over + Duration::from_secs(60);
            loop {
                let n = received
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .per_event
                    .len();
                if n >= want {
                    break;
                }
                if std::time::Instant::now() > give_up {
                    log(format!("only {n} of {want} events received: the cluster fault is skipped"));
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let at = started.elapsed().as_secs_f64();
            match fault {
                ClusterFault::KillA => {
                    let ok = script(&["broker-kill", "a"]).await;
                    log(format!("broker-a SIGKILLed at {at:.1} s (ok={ok}, {want} events received)"));
                    // What broker-a stored before the crash reaches the consumer only once it is
                    // back: restart it after the writes (and at least 10 s after the crash).
                    let back = (started + write_over + Duration::from_secs(2))
                        .max(std::time::Instant::now() + Duration::from_secs(10));
                    tokio::time::sleep_until(back.into()).await;
                    restarted.set(std::time::Instant::now()).ok();
                    let ok = script(&["broker-start", "a"]).await;
                    log(format!(
                        "broker-a started again at {:.1} s (ok={ok})",
                        started.elapsed().as_secs_f64()
                    ));
                }
                _ => {
                    let ok = script(&["broker-pause", "a"]).await;
                    log(format!(
                        "broker-a SIGSTOPped at {at:.1} s for {pause_for:?} (ok={ok}, {want} events received)"
                    ));
                    tokio::time::sleep(pause_for).await;
                    let ok = script(&["broker-resume", "a"]).await;
                    log(format!(
                        "broker-a SIGCONTed at {:.1} s (ok={ok})",
                        started.elapsed().as_secs_f64()
                    ));
                }
            }
        }));
    }
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
