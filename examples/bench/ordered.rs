//! Ordered mode (`WorkerConfig::ordered`): W workers with the no-op publisher drain
//! N `WAIT` events spread round robin over `--ordered-keys` keys, first unordered and then
//! ordered (`Block`) over the same fill, in one run: `unordered_keys_eps`, `ordered_eps`,
//! `ordered_over_unordered`; then every event on one key: `ordered_hot_key_eps`. The no-op
//! publisher checks per-key order in every phase of this module (`ordered_order_violations`
//! must be 0; the run fails otherwise).
use std::time::Duration;

use sea_orm::DatabaseConnection;
use sea_orm_outbox::{ClaimStrategy, OrderedPolicy};

use crate::figures::{f1, f3, Figures};
use crate::relay::{relay, worker_config, RelayResult};
use crate::scratch::{BoxError, ScratchDb};
use crate::Args;

/// One phase's detail line.
fn detail(args: &Args, r: &RelayResult, events: u64, what: &str) -> String {
    let (bench_us, db_us) = r.cpu().us_per_event(r.secs(), events);
    format!(
        "{} workers, {what}, batch {}, {} events: {:.2} s, {} rounds; {}; µs/event: bench {bench_us:.1}, db server {db_us:.1}",
        args.workers,
        args.batch,
        events,
        r.secs(),
        r.total().rounds,
        r.cpu(),
    )
}

/// The ordered-mode figures, or skipped with `--skip-ordered`. Returns the per-key order
/// violations seen (0 unless ordered mode is broken).
pub async fn figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<u64, BoxError> {
    if args.skip_ordered {
        for name in ["ordered_over_unordered", "ordered_hot_key_eps"] {
            figs.skip(name, "--skip-ordered");
        }
        return Ok(0);
    }
    let poll = Duration::from_millis(args.poll_delay_ms);
    let keys = args.ordered_keys;
    let slots = args.ordered_concurrency;
    // Unordered over the keyed fill: the batch relay as the batch phase runs it.
    let unordered = worker_config(
        ClaimStrategy::Batch,
        args.batch,
        args.concurrency,
        poll,
        false,
    );
    let u = relay(
        bench,
        setup,
        args,
        unordered,
        "unordered-keys",
        args.events,
        Some(keys),
    )
    .await?;
    figs.add(
        "unordered_keys_eps",
        f1(u.eps()),
        detail(
            args,
            &u,
            args.events,
            &format!("unordered, {keys} keys, concurrency {}", args.concurrency),
        ),
    );
    let ordered = worker_config(ClaimStrategy::Batch, args.batch, slots, poll, false)
        .ordered(Some(OrderedPolicy::Block));
    let o = relay(
        bench,
        setup,
        args,
        ordered.clone(),
        "ordered",
        args.events,
        Some(keys),
    )
    .await?;
    figs.add(
        "ordered_eps",
        f1(o.eps()),
        detail(
            args,
            &o,
            args.events,
            &format!("ordered (block), {keys} keys, {slots} keys in flight per worker"),
        ),
    );
    figs.add(
        "ordered_over_unordered",
        f3(o.eps() / u.eps()),
        format!("ordered_eps / unordered_keys_eps, {keys} keys, one run (goal >= 0.5)"),
    );
    // Every event on one key: one relay at a time holds it, a run per claim.
    let hot_events = args.hot_key_events;
    let h = relay(
        bench,
        setup,
        args,
        ordered,
        "ordered-hot",
        hot_events,
        Some(1),
    )
    .await?;
    figs.add(
        "ordered_hot_key_eps",
        f1(h.eps()),
        detail(
            args,
            &h,
            hot_events,
            &format!("ordered (block), one key, {slots} slots per worker (goal >= 1,000)"),
        ),
    );
    let violations = u.order_violations + o.order_violations + h.order_violations;
    figs.add(
        "ordered_order_violations",
        o.order_violations + h.order_violations,
        format!(
            "ordered phases: first publications after a larger id of their key (must be 0); \
             unordered over the same keys: {}",
            u.order_violations
        ),
    );
    Ok(violations - u.order_violations)
}
