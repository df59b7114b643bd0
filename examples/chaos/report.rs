//! The counts at the end of a run (the `workers:` line, the diagnostics line and the figures of
//! the summary), and the diagnosis of lost events.
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;
use sea_orm_outbox_rocketmq::RocketMqConsumer;

use crate::consumer::Received;
use crate::fleet::{count_in_logs, grep_logs, sum_from_logs, Fleet};
use crate::scratch::BoxError;
use crate::supervise::rows;
use crate::writers::Writers;
use crate::{log, Run};

/// The figures of the summary line.
pub struct Tally {
    /// Events written (rows, with those deleted on delivery: [`crate::events`]).
    pub events: usize,
    /// Events `SUCCESS` (with `--completion delete`: deleted on delivery).
    pub success: usize,
    /// Rows `FAIL` (dead letters).
    pub fail: usize,
    /// Rows not `FAIL` that the consumer never received.
    pub lost_ids: Vec<i64>,
    /// `lost_ids.len()`.
    pub lost: u64,
    /// Receptions beyond the first per event id.
    pub duplicates: u64,
    /// Of the duplicates, receptions of a message already received from the same place (queue,
    /// queue offset, commit-log offset): the consumer read it again (its committed offset went
    /// back, e.g. when a broker crashed), the broker did not store it twice.
    pub redelivered: u64,
    /// Expired leases taken back by the workers' reclaim passes (from their logs).
    pub reclaimed: u64,
    /// The longest time between two consecutive deliveries while the events were written.
    pub max_gap: Duration,
    /// Ordered runs: first receptions of an event before an earlier event (smaller id) of its
    /// key had been received ([`order_violations`]).
    pub order_violations: Option<u64>,
}

/// How many of the first receptions `firsts` (key, event id, in the order received) came
/// before an earlier event of their key had been received, given the events written
/// (`rows`: id, key); the first ten are logged. An event not (yet) received counts once for
/// each later event of its key received.
pub fn order_violations(rows: &[(i64, String)], firsts: &[(String, i64)]) -> u64 {
    let mut ids: HashMap<&str, Vec<i64>> = HashMap::new();
    for (id, key) in rows {
        ids.entry(key.as_str()).or_default().push(*id);
    }
    for v in ids.values_mut() {
        v.sort_unstable();
    }
    let mut seen: HashMap<&str, HashSet<i64>> = HashMap::new();
    let mut violations = 0u64;
    for (key, id) in firsts {
        let got = seen.entry(key.as_str()).or_default();
        got.insert(*id);
        let missing = ids.get(key.as_str()).and_then(|all| {
            all.iter()
                .take_while(|e| *e < id)
                .find(|e| !got.contains(e))
                .copied()
        });
        if let Some(earlier) = missing {
            violations += 1;
            if violations <= 10 {
                log(format!(
                    "ORDER VIOLATION: event {id} of key {key} received before event {earlier}"
                ));
            }
        }
    }
    violations
}

/// The longest time between two consecutive `arrivals` that both came by `until` (all of them
/// without `until`), and when that gap began; zero with fewer than two arrivals.
pub fn longest_gap(
    arrivals: &[(Instant, usize)],
    until: Option<Instant>,
) -> (Duration, Option<Instant>) {
    arrivals
        .windows(2)
        .filter(|w| until.is_none_or(|u| w[1].0 <= u))
        .map(|w| (w[1].0.duration_since(w[0].0), Some(w[0].0)))
        .max_by_key(|(gap, _)| *gap)
        .unwrap_or((Duration::ZERO, None))
}

impl Tally {
    /// Counts the rows against what was `received`, logs the diagnostics line (with whether
    /// the outbox `drained`) and prints the `workers:` line.
    pub async fn count(
        run: &Run,
        db: &DatabaseConnection,
        received: &Received,
        fleet: &Fleet,
        writers: &Writers,
        drained: bool,
    ) -> Result<Self, BoxError> {
        let (r, log_dir) = (received, &run.log_dir);
        let all = rows(db).await?;
        let success = all.iter().filter(|(_, s)| s == "SUCCESS").count();
        let fail = all.iter().filter(|(_, s)| s == "FAIL").count();
        let other = all.len() - success - fail;
        let lost_ids: Vec<i64> = all
            .iter()
            .filter(|(id, s)| s != "FAIL" && !r.per_event.contains_key(id))
            .map(|(id, _)| *id)
            .collect();
        let distinct = r.per_event.len() as u64;
        let duplicates = r.per_event.values().map(|n| u64::from(n - 1)).sum::<u64>();
        let redelivered = r
            .places
            .values()
            .map(|p| (p.len() - p.iter().collect::<HashSet<_>>().len()) as u64)
            .sum::<u64>();
        let written: HashSet<i64> = all.iter().map(|(id, _)| *id).collect();
        let foreign = r
            .per_event
            .keys()
            .filter(|id| !written.contains(id))
            .count();
        let reclaimed = sum_from_logs(log_dir, "reclaimed events whose sender", "reclaimed");
        let late_acks = count_in_logs(log_dir, "late ack");
        let retried = count_in_logs(log_dir, "send failed; will retry");
        let db_errors = count_in_logs(log_dir, "outbox round failed")
            + count_in_logs(log_dir, "outbox reclaim failed");
        let max_retry = crate::events::max_retry_count(db).await.ok().flatten();
        log(format!(
            "drained={drained} rows={} other_status={other} received={} distinct={distinct} \
             without_event_id={} foreign={foreign} write_retries={} workers_started={} \
             unexpected_exits={} late_acks={late_acks} send_retries={retried} db_errors_logged={db_errors} \
             max_retry_count={}",
            all.len(),
            r.total,
            r.without_id,
            writers.errors(),
            fleet.spawned,
            fleet.unexpected_exits,
            max_retry.unwrap_or(0),
        ));
        // Deliveries are expected until every event was received once, except across the restart
        // of a killed broker (what it stored before the crash waits for the restart).
        let all_received = r
            .arrivals
            .iter()
            .find(|(_, distinct)| *distinct >= all.len())
            .map(|(at, _)| *at);
        let until = [all_received, run.broker_restarted.get().copied()]
            .into_iter()
            .flatten()
            .min();
        let (max_gap, gap_from) = longest_gap(&r.arrivals, until);
        let since = |t: Option<Instant>| {
            t.map_or("-".to_owned(), |t| {
                format!("{:.1} s", t.duration_since(run.started).as_secs_f64())
            })
        };
        log(format!(
            "longest gap between deliveries (consumer receive times) until every event was \
             received or a killed broker restarted ({}): {} ms, from {} after the start; {} \
             deliveries, the writes ended at {}",
            since(until),
            max_gap.as_millis(),
            since(gap_from),
            r.arrivals.len(),
            since(writers.finished_at()),
        ));
        let order_violations = match run.args.ordered {
            Some(_) => {
                let keyed = crate::events::pairs(db, "biz_no").await?;
                Some(order_violations(&keyed, &r.firsts))
            }
            None => None,
        };
        println!(
            "workers: started={} killed={} unexpected_exits={} duplicate_bound={} (kills x batch x send slots)",
            fleet.spawned,
            fleet.kills,
            fleet.unexpected_exits,
            fleet.kills * run.args.batch * sea_orm_outbox::WorkerConfig::default().send_concurrency as u64
        );
        Ok(Tally {
            events: all.len(),
            success,
            fail,
            lost: lost_ids.len() as u64,
            lost_ids,
            duplicates,
            redelivered,
            reclaimed,
            max_gap,
            order_violations,
        })
    }
}

/// Where the broker said it stored the lost events and where the duplicates came from (the
/// relays log every SEND_OK with its queue and offset at DEBUG); then whether the lost events
/// are in the broker after all: a fresh consumer group reads the whole topic again.
pub async fn diagnose_lost(run: &Run, lost_ids: &[i64], r: &Received) {
    let log_dir = &run.log_dir;
    for id in lost_ids.iter().take(10) {
        for line in grep_logs(log_dir, &format!("RocketMQ send ok event_id={id} ")) {
            log(format!("lost event {id}: {line}"));
        }
    }
    for (id, places) in r.places.iter().filter(|(_, p)| p.len() > 1).take(10) {
        log(format!(
            "event {id} received {} times at (queue, queue offset, commit-log offset) {places:?}",
            places.len()
        ));
        for line in grep_logs(log_dir, &format!("RocketMQ send ok event_id={id} ")) {
            log(format!("duplicated event {id}: {line}"));
        }
    }
    // Lost by the broker, or missed by the consumer? Read the whole topic again from its
    // first offset in a fresh consumer group.
    let group = format!("chaos_reread_{}", run.id);
    match RocketMqConsumer::start(&run.namesrv, &group, &run.topic).await {
        Ok(again) => {
            let wanted: HashSet<i64> = lost_ids.iter().copied().collect();
            let got = again
                .collect_until(Duration::from_secs(60), |got| {
                    let ids: HashSet<i64> = got.iter().filter_map(|m| m.event_id).collect();
                    wanted.is_subset(&ids)
                })
                .await;
            let ids: HashSet<i64> = got.iter().filter_map(|m| m.event_id).collect();
            let in_broker = lost_ids.iter().filter(|id| ids.contains(id)).count();
            log(format!(
                "re-read of the topic by a fresh consumer group: {} messages; {in_broker} of the {} lost events ARE in the broker (missed by the first consumer), {} are not",
                got.len(),
                lost_ids.len(),
                lost_ids.len() - in_broker
            ));
            again.shutdown().await;
        }
        Err(e) => log(format!("re-read consumer did not start: {e}")),
    }
}
