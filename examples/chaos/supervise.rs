//! The supervisor: replaces workers that died, kills one every `--kill-every`, and once the
//! writes and faults are over waits until every event is settled and received (sending the
//! dead letters again first with `--dead-retry`), or the drain deadline.
use std::process::Command;
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;
use tokio::task::JoinHandle;

use crate::consumer::Consumer;
use crate::fleet::Fleet;
use crate::scratch::BoxError;
use crate::writers::Writers;
use crate::{log, Run};

/// Small xorshift for picking the worker to kill.
struct Rng(u64);

impl Rng {
    /// A pseudo-random number below `n`.
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// `(id, status)` of every event written (see [`crate::events`]: with `--completion delete` a
/// row the relays deleted on delivery is `SUCCESS`).
pub async fn rows(db: &DatabaseConnection) -> Result<Vec<(i64, String)>, sea_orm::DbErr> {
    crate::events::pairs(db, "status").await
}

/// How the supervision ended.
pub struct Settled {
    /// Every event settled (`SUCCESS` or `FAIL`) and every `SUCCESS` received.
    pub drained: bool,
    /// Dead letters sent again with `outbox dead retry --all` (`--dead-retry`).
    pub dead_retried: Option<u64>,
}

/// Supervises until everything written is settled and received (or the drain deadline).
pub async fn until_settled(
    run: &Run,
    fleet: &mut Fleet,
    db: &DatabaseConnection,
    consumer: &Consumer,
    writers: &Writers,
    faults: &JoinHandle<()>,
) -> Result<Settled, BoxError> {
    let args = &run.args;
    let mut rng = Rng(u64::from(std::process::id())
        ^ run.started.elapsed().as_nanos() as u64
        ^ 0x9E37_79B9_7F4A_7C15);
    let mut next_kill = args.kill_every.map(|d| run.started + d);
    let mut quiet_since: Option<Instant> = None;
    let mut next_check = Instant::now();
    let mut dead_retried: Option<u64> = None;
    let mut dead_retry_runs = 0;
    let mut drained = false;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        fleet.reap()?;
        let now = Instant::now();
        if let (Some(at), Some(every)) = (next_kill, args.kill_every) {
            if now >= at {
                let slot = rng.next(args.workers);
                fleet.kill_one(slot)?;
                next_kill = Some(at + every);
            }
        }
        if !(writers.finished() && faults.is_finished()) {
            continue;
        }
        let quiet = *quiet_since.get_or_insert(now);
        if now.duration_since(quiet) > args.drain_timeout {
            log("the outbox did not drain in time");
            break;
        }
        if now < next_check {
            continue;
        }
        next_check = now + Duration::from_millis(500);
        let Ok(all) = rows(db).await else { continue };
        let unsettled = all
            .iter()
            .filter(|(_, s)| s != "SUCCESS" && s != "FAIL")
            .count();
        if all.len() < args.events || unsettled > 0 {
            continue;
        }
        let fails = all.iter().filter(|(_, s)| s == "FAIL").count() as u64;
        // The dead letters go back once the client's 30 s circuit breaker has surely closed
        // again (a producer that saw the broker die refuses it for up to 30 s after its return).
        if args.dead_retry && fails > 0 && dead_retry_runs < 3 {
            if now.duration_since(quiet) < Duration::from_secs(35) {
                continue;
            }
            dead_retry_runs += 1;
            log(format!(
                "{fails} dead letters after the faults: `outbox dead retry --all`"
            ));
            let out = Command::new(&run.relay_bin)
                .args(["dead", "retry", "--all"])
                .env("DATABASE_URL", &run.url)
                .output()?;
            log(format!(
                "outbox dead retry --all: {}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            dead_retried = Some(dead_retried.unwrap_or(0) + fails);
            continue;
        }
        let r = consumer.received();
        let missing = all
            .iter()
            .filter(|(id, s)| s == "SUCCESS" && !r.per_event.contains_key(id))
            .count();
        if missing == 0 {
            drained = true;
            break;
        }
    }
    Ok(Settled {
        drained,
        dead_retried,
    })
}
