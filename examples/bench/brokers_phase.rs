//! Through Kafka, NATS JetStream, RabbitMQ and Redis Streams, each broker `--brokers` names (its
//! crate's variables configure it, as the demo's `OUTBOX_PUBLISHER` does; a destination of the
//! run's own):
//! - `<broker>_raw_eps`: the crate's publisher alone (no database) sending the relay's messages
//!   (same body, key, type) one per `publish`, one at a time (2,000 of them): the baseline of
//!   `<broker>_relay_over_raw`;
//! - `<broker>_raw_parallel_eps`: the same with workers × `--concurrency` sends in flight (many
//!   tasks each sending one message: the most a sender without batches gets from the client);
//! - `<broker>_relay_eps`: `--workers` relays with batch sends (the default) draining
//!   `--rocketmq-events` `WAIT` events through the same publisher, until every one is
//!   delivered;
//! - `<broker>_relay_over_raw`: the relay's rate over the one-at-a-time one (the relay
//!   batches, so it can pass one-at-a-time sends).
use std::sync::Arc;
use std::time::Duration;

use sea_orm::DatabaseConnection;
use sea_orm_outbox::Publisher;

use crate::brokers::{Kind, Link};
use crate::figures::{f1, f3, Figures};
use crate::rocketmq::{message, raw, relay, Sends};
use crate::scratch::{BoxError, ScratchDb};
use crate::Args;

/// Sends of the one-at-a-time baseline (at most; fewer with fewer `--rocketmq-events`).
const SERIAL_SENDS: u64 = 2_000;

/// The phase's figures for every broker of `--brokers`.
///
/// # Errors
/// A database, broker or client error, or events that never got delivered.
pub async fn figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<(), BoxError> {
    for name in args.brokers.iter().filter(|b| !b.trim().is_empty()) {
        let kind = Kind::parse(name.trim())?;
        let dest = format!(
            "outbox_bench_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let link = Link::start(kind, Duration::from_secs(3), Some(&dest), "ORDER_CREATED").await?;
        let p = link.publisher();
        let n = args.rocketmq_events;
        let in_flight = args.workers * args.concurrency;
        // A first send creates what the broker creates on first use; not timed.
        p.publish(&message(0)).await?;
        // One at a time is latency-bound: 2,000 sends give its rate.
        let serial = n.min(SERIAL_SENDS);
        let raw_eps = raw(&p, serial, 1, 1).await?;
        let parallel_eps = raw(&p, n, in_flight, 1).await?;
        let b = kind.name();
        figs.add(
            &format!("{b}_raw_eps"),
            f1(raw_eps),
            format!("{serial} sends of one message, one at a time, no database"),
        );
        figs.add(
            &format!("{b}_raw_parallel_eps"),
            f1(parallel_eps),
            format!("{n} sends of one message, {in_flight} in flight, no database"),
        );
        let r = relay(
            bench,
            setup,
            args,
            args.workers,
            Sends::Batches,
            (p.clone() as Arc<dyn Publisher>, None),
            n,
        )
        .await?;
        figs.add(
            &format!("{b}_relay_eps"),
            f1(r.eps),
            format!(
                "{} workers, batch sends of up to {}, {} batches in flight per worker: {n} events \
                 in {:.2} s; {}",
                args.workers,
                args.batch,
                args.rocketmq_batch_concurrency,
                r.secs,
                r.profile()
            ),
        );
        figs.add(
            &format!("{b}_relay_over_raw"),
            f3(r.eps / raw_eps),
            format!("{b}_relay_eps / {b}_raw_eps (goal >= 1)"),
        );
        drop(p);
        link.shutdown().await;
    }
    Ok(())
}
