//! Chaos harness: real `outbox relay` worker PROCESSES relay events to a real RocketMQ broker
//! while faults are injected under them; a real consumer counts what arrived.
//!
//! ```text
//! cargo build --release -p sea-orm-outbox-cli --features chaos-testing --bin outbox
//! cargo build --release --example chaos
//! cargo run --release --example chaos -- --backend postgres --kill-every 2s
//! cargo run --release --example chaos -- --backend mysql --events 5000 --db-restart-at 10s
//! cargo run --release --example chaos -- --broker-down 10s..25s --slow-send
//! ```
//! Each run gets a fresh database (`outbox_chaos_<random>`, dropped at the end unless
//! something was lost or `--keep-db`) and a fresh topic. N events (default 20,000) are written
//! through `with_event`, one business transaction per order (an order row and its event),
//! spread evenly over `--write-over`. W worker processes (default 3) run
//! `outbox relay` with short leases and time-outs and a retry policy whose budget outlasts the
//! broker outage plus the client's 30 s circuit breaker. A lite-pull consumer records every
//! `eventId` received.
//!
//! Faults (combinable):
//! - `--kill-every 2s`: SIGKILL a random worker, start a new one in its place.
//! - `--db-restart-at 10s [--db-down-for 2s]`: stop the database server, start it again
//!   (Postgres: `pg_ctlcluster`, MariaDB: `mysqladmin shutdown` + `start-stop-daemon`). This
//!   restarts the machine's SHARED server: do not run it next to other tests.
//! - `--broker-down 10s..25s`: stop the broker (`scripts/rocketmq.sh stop-broker`) and start it
//!   again. Uses a private name server and broker (ports 29876/30911) so that other suites
//!   sharing the default broker are not disturbed.
//! - `--cluster kill-a|pause-a|namesrv-down [--failover outbox|client|off]`: a two-broker
//!   cluster of the run's own (`scripts/rocketmq.sh cluster-start`: name servers 21876 and
//!   21877, `broker-a` 22911, `broker-b` 22931; the topic on both brokers; the relays and the
//!   consumer get both name servers). `kill-a`: broker-a is SIGKILLed once `--fault-at-percent`
//!   (30) of the events were received, and started again after the writes so that what it
//!   stored reaches the consumer. `pause-a`: broker-a is SIGSTOPped at that point for
//!   `--pause-for` (20 s), then SIGCONTed. `namesrv-down`: name server 1, the first address
//!   every client is given, is stopped before the consumer and the relays start. `--failover`
//!   sets the relays' `ROCKETMQ_FAILOVER` (to compare the client's own failover with ours).
//! - `--ordered block|skip [--events-per-key N]`: the relays run in ordered mode
//!   (`--ordered`, 16 keys in flight each); the writers write N events per business key (the
//!   keys interleaved, one writer per key, its events in order, one transaction each); the
//!   consumer is an orderly one (`MessageListenerOrderly`) and the summary gains
//!   ` order_violations=K`: first receptions of an event before an earlier event of its key
//!   had been received. The run exits 1 when K > 0.
//! - `--slow-send`: the first send of every `--slow-send-every`-th event stalls its worker for
//!   twice the lease after the broker accepted it (`OUTBOX_CHAOS_SEND_STALL`): the lease expires,
//!   another worker sends it again, the stalled worker's late acknowledgement is refused.
//!
//! `--completion delete` (or `OUTBOX_TEST_COMPLETION=delete`) runs the relays with
//! `--completion delete`: a delivered event's row is deleted, and the harness counts it from
//! a log of the deleted rows that a trigger keeps (module `events`).
//!
//! The last line is the summary:
//! `summary: events=20000 success=20000 fail=0 lost=0 duplicates=37 kills=9 reclaimed=41 elapsed_s=58 max_gap_ms=212 redelivered=0`
//! - lost: written but never received by the consumer and not `FAIL`;
//! - duplicates: receptions beyond the first per `eventId`;
//! - redelivered: of those, receptions of a message already received from the same queue
//!   and offset (the consumer read it again, e.g. its offsets went back when a broker crashed;
//!   the rest were stored twice);
//! - max_gap_ms: the longest time in milliseconds between two consecutive deliveries (the
//!   consumer's receive times), from the first delivery until every event was received once
//!   (with `--cluster kill-a`: at most until broker-a was started again);
//! - reclaimed: expired leases taken back by the workers' reclaim passes (from their logs);
//! - with `--dead-retry`, ` dead_retried=K` is appended: K dead letters were sent again by
//!   `outbox dead retry --all` once the faults were over.
//!
//! Exits 1 when lost > 0 (the database is then kept for inspection) or, in ordered runs, when
//! order_violations > 0, 2 on a harness error.
//!
//! Modules: `broker` (the private RocketMQ), `server` (the database server's stop and start),
//! `fleet` (the worker processes and their logs), `writers`, `consumer`, `faults`, `supervise`
//! (until everything settled) and `report` (the counts and the diagnosis of lost events).
mod broker;
mod consumer;
mod events;
mod faults;
mod fleet;
mod report;
mod server;
mod supervise;
mod writers;

#[path = "../common/order.rs"]
mod order;
#[path = "../common/pool.rs"]
mod pool;
#[path = "../common/scratch.rs"]
mod scratch;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use sea_orm::{ConnectionTrait, Schema};
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox::{Migrator, RetryPolicy};

use broker::{Cluster, PrivateBroker};
use fleet::Fleet;
use scratch::{BoxError, ScratchDb};
use server::Server;

/// How long the harness waits for a database connection (also while the server restarts).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The database server of the run.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BackendArg {
    Postgres,
    #[value(alias = "mariadb")]
    Mysql,
}

/// `--ordered`: the relays' ordered mode.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OrderedArg {
    /// A key waits behind its dead letter.
    Block,
    /// A key goes on past its dead letter.
    Skip,
}

impl OrderedArg {
    /// The value of `outbox relay --ordered`.
    fn as_str(self) -> &'static str {
        match self {
            OrderedArg::Block => "block",
            OrderedArg::Skip => "skip",
        }
    }
}

/// `--completion`: what the relays do with a delivered row.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum CompletionArg {
    /// Mark it `SUCCESS`.
    Update,
    /// Delete it.
    Delete,
}

impl CompletionArg {
    /// The value of `outbox relay --completion`.
    fn as_str(self) -> &'static str {
        match self {
            CompletionArg::Update => "update",
            CompletionArg::Delete => "delete",
        }
    }
}

/// The fault of `--cluster`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ClusterFault {
    /// No fault: the cluster only.
    None,
    /// SIGKILL broker-a once `--fault-at-percent` of the events were received.
    KillA,
    /// SIGSTOP broker-a then for `--pause-for`, then SIGCONT.
    PauseA,
    /// Name server 1 (the first address) down for the whole run.
    NamesrvDown,
}

#[derive(Parser, Debug)]
#[command(about = "Relay events with worker processes under injected faults and count them")]
struct Args {
    /// Events to write (one business transaction each).
    #[arg(long, default_value_t = 20_000)]
    events: usize,
    /// Worker processes (`outbox relay`).
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Database server.
    #[arg(long, value_enum, default_value = "postgres")]
    backend: BackendArg,
    /// Admin URL of the server (a fresh database is created next to it) [default:
    /// OUTBOX_TEST_POSTGRES_URL / OUTBOX_TEST_MYSQL_URL or the local servers].
    #[arg(long)]
    admin_url: Option<String>,
    /// Spread the writes over this long.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    write_over: Duration,
    /// Concurrent writer tasks.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// SIGKILL a random worker this often and start a new one.
    #[arg(long, value_parser = humantime::parse_duration)]
    kill_every: Option<Duration>,
    /// Restart the database server this long after the start.
    #[arg(long, value_parser = humantime::parse_duration)]
    db_restart_at: Option<Duration>,
    /// How long the database server stays down in a restart.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    db_down_for: Duration,
    /// Broker outage window `FROM..TO` after the start, e.g. `10s..25s` (private broker).
    #[arg(long, value_parser = parse_window)]
    broker_down: Option<(Duration, Duration)>,
    /// Some first sends stall their worker for twice the lease (see the module docs).
    #[arg(long)]
    slow_send: bool,
    /// With `--slow-send`: every N-th event id stalls.
    #[arg(long, default_value_t = 500)]
    slow_send_every: i64,
    /// The `outbox` binary [default: next to this example's executable].
    #[arg(long)]
    relay_bin: Option<PathBuf>,
    /// Use a private name server and broker even without `--broker-down`.
    #[arg(long)]
    private_broker: bool,
    /// Run on a two-broker cluster of the run's own with this fault (see the module docs).
    #[arg(long, value_enum, conflicts_with_all = ["broker_down", "private_broker"])]
    cluster: Option<ClusterFault>,
    /// With `--cluster kill-a|pause-a`: the fault starts once this share of the events (in %)
    /// was received.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(0..=100))]
    fault_at_percent: u32,
    /// With `--cluster pause-a`: how long broker-a stays stopped.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s")]
    pause_for: Duration,
    /// The relays' `ROCKETMQ_FAILOVER`: outbox, client or off [default: the relay's, outbox].
    #[arg(long)]
    failover: Option<String>,
    /// Name server of the shared broker (without a private one).
    #[arg(long, env = "ROCKETMQ_NAMESRV_ADDR", default_value = "127.0.0.1:9876")]
    namesrv: String,
    /// Workers' lease (they reclaim expired leases every tenth of it).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    lease: Duration,
    /// Workers' send timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    send_timeout: Duration,
    /// Workers' poll delay.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "200ms")]
    poll_delay: Duration,
    /// Workers' batch size.
    #[arg(long, default_value_t = 20)]
    batch: u64,
    /// Workers' back-off unit (n-th failure waits n² × this, at most --retry-max-backoff).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "100ms")]
    retry_backoff: Duration,
    /// Workers' longest back-off.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    retry_max_backoff: Duration,
    /// Workers' retry limit [default: scaled so that the retry budget outlasts the broker
    /// outage + 30 s circuit breaker + 30 s margin, and at least 10].
    #[arg(long)]
    max_retries: Option<u32>,
    /// Once the faults are over and the outbox is drained, send the dead letters again with
    /// `outbox dead retry --all` and wait until they are delivered.
    #[arg(long)]
    dead_retry: bool,
    /// Give up waiting for the outbox to drain this long after the writes and faults ended.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "180s")]
    drain_timeout: Duration,
    /// Keep the database at the end.
    #[arg(long)]
    keep_db: bool,
    /// Run the relays in ordered mode (`outbox relay --ordered`, with `--send-concurrency
    /// 16`), consume with an orderly consumer and count per-key order violations.
    #[arg(long, value_enum)]
    ordered: Option<OrderedArg>,
    /// Events per business key: the events are spread over `events / N` keys (interleaved),
    /// one writer task per key writing its events in order, each in its own transaction.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    events_per_key: u64,
    /// What the relays do with a delivered row (`outbox relay --completion`).
    #[arg(
        long,
        value_enum,
        env = "OUTBOX_TEST_COMPLETION",
        default_value = "update"
    )]
    completion: CompletionArg,
}

/// `FROM..TO` of `--broker-down`.
fn parse_window(s: &str) -> Result<(Duration, Duration), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| "expected FROM..TO, e.g. 10s..25s".to_owned())?;
    let a = humantime::parse_duration(a.trim()).map_err(|e| e.to_string())?;
    let b = humantime::parse_duration(b.trim()).map_err(|e| e.to_string())?;
    if b <= a {
        return Err("TO must be after FROM".into());
    }
    Ok((a, b))
}

/// A line of the harness's own on stderr.
fn log(msg: impl AsRef<str>) {
    eprintln!("chaos: {}", msg.as_ref());
}

/// The smallest retry limit whose total back-off reaches `budget`.
fn retries_for(policy: &RetryPolicy, budget: Duration) -> u32 {
    let mut sum = Duration::ZERO;
    let mut n = 0;
    while sum < budget {
        n += 1;
        sum += policy.backoff(n);
    }
    n
}

/// What every part of one run shares.
struct Run {
    args: Args,
    /// The run's start: writes, faults and kills are scheduled from it.
    started: Instant,
    /// The random id in the run's database, topic, groups and work directory.
    id: String,
    /// The workers' logs.
    log_dir: PathBuf,
    /// The `outbox` binary.
    relay_bin: PathBuf,
    /// The run's database.
    url: String,
    /// The name server the workers and the consumers use.
    namesrv: String,
    /// The run's topic.
    topic: String,
    /// When a killed cluster broker was started again (`--cluster kill-a`).
    broker_restarted: std::sync::Arc<std::sync::OnceLock<Instant>>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(0) => std::process::ExitCode::SUCCESS,
        Ok(_) => std::process::ExitCode::from(1),
        Err(e) => {
            log(format!("error: {e}"));
            std::process::ExitCode::from(2)
        }
    }
}

/// One run; returns how many events were lost plus, in ordered runs, how many were received
/// out of their key's order (non-zero: exit 1).
async fn run(args: Args) -> Result<u64, BoxError> {
    let started = Instant::now();
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let work_dir = std::env::temp_dir().join(format!("outbox-chaos-{run_id}"));
    let log_dir = work_dir.join("workers");
    std::fs::create_dir_all(&log_dir)?;
    let relay_bin = fleet::relay_bin(args.relay_bin.as_deref())?;

    // Broker: private when it is going to be stopped.
    let private = if args.broker_down.is_some() || args.private_broker {
        log("starting a private RocketMQ name server and broker");
        Some(PrivateBroker::start(work_dir.join("rocketmq"))?)
    } else {
        None
    };
    let cluster = match args.cluster {
        Some(_) => {
            log("starting a two-broker RocketMQ cluster (two name servers, broker-a, broker-b)");
            Some(Cluster::start(work_dir.join("cluster"))?)
        }
        None => None,
    };
    let namesrv = match (&private, &cluster) {
        (Some(_), _) => PrivateBroker::addr(),
        (_, Some(_)) => Cluster::addr(),
        _ => args.namesrv.clone(),
    };
    if let (Some(ClusterFault::NamesrvDown), Some(c)) = (args.cluster, &cluster) {
        if !c.run(&["namesrv-stop", "1"]) {
            return Err("could not stop name server 1 of the cluster".into());
        }
        log("name server 1 (the first address of both) is down for the whole run");
    }

    // A fresh database.
    let (server, admin) = Server::of(args.backend, args.admin_url.as_deref());
    let scratch = ScratchDb::create(
        Some(&admin),
        format!("outbox_chaos_{run_id}"),
        CONNECT_TIMEOUT,
    )
    .await?;
    let db = scratch.pool((args.writers + 4) as u32).await?;
    Migrator::up(&db, None).await?;
    events::create(&db, args.completion == CompletionArg::Delete).await?;
    let schema = Schema::new(db.get_database_backend());
    db.execute(&schema.create_table_from_entity(order::Entity))
        .await?;

    // Retry policy scaled to the run.
    let mut policy = RetryPolicy::new(3, args.retry_backoff, args.retry_max_backoff);
    policy.max_retries = args.max_retries.unwrap_or_else(|| {
        let outage = args.broker_down.map_or(Duration::ZERO, |(a, b)| b - a);
        retries_for(&policy, outage + Duration::from_secs(60)).max(10)
    });

    let run = Run {
        started,
        topic: format!("CHAOS_{run_id}"),
        id: run_id,
        log_dir,
        relay_bin,
        url: scratch.url.clone(),
        namesrv,
        args,
        broker_restarted: Default::default(),
    };
    // The consumer first, so the topic exists before the workers send.
    let consumer = consumer::Consumer::start(&run).await?;
    let mut fleet = Fleet::start(&run, &policy)?;
    log(format!(
        "run {}: {:?} database {}, topic {} on {}, {} events over {:?}, \
         {} workers (lease {:?}, send timeout {:?}, batch {}, max_retries {} = {:.0} s of back-off, \
         completion {}), logs in {}",
        run.id,
        db.get_database_backend(),
        scratch.name,
        run.topic,
        run.namesrv,
        run.args.events,
        run.args.write_over,
        run.args.workers,
        run.args.lease,
        run.args.send_timeout,
        run.args.batch,
        policy.max_retries,
        (1..=policy.max_retries)
            .map(|n| policy.backoff(n))
            .sum::<Duration>()
            .as_secs_f64(),
        run.args.completion.as_str(),
        work_dir.display()
    ));
    let writers = writers::Writers::start(&run, &db);
    let faults = faults::start(
        &run,
        server,
        private.as_ref(),
        cluster.as_ref(),
        consumer.shared(),
    );

    // Supervise until everything written is settled and received (or the drain deadline).
    let settled =
        supervise::until_settled(&run, &mut fleet, &db, &consumer, &writers, &faults).await?;
    let elapsed = run.started.elapsed();
    // Late duplicates, then a graceful stop.
    tokio::time::sleep(Duration::from_secs(3)).await;
    fleet.stop_all();
    let received = consumer.stop().await;
    writers.abort();
    faults.abort();
    // Whatever happened, leave the database server running.
    if run.args.db_restart_at.is_some()
        && !tokio::task::spawn_blocking(move || server.ensure_up()).await?
    {
        log("WARNING: the database server is not answering; start it by hand");
    }

    let tally =
        report::Tally::count(&run, &db, &received, &fleet, &writers, settled.drained).await?;
    if tally.lost > 0 {
        log(format!(
            "LOST {} events, e.g. {:?}; database {} kept, worker logs in {}",
            tally.lost_ids.len(),
            &tally.lost_ids[..tally.lost_ids.len().min(10)],
            scratch.name,
            run.log_dir.display()
        ));
        report::diagnose_lost(&run, &tally.lost_ids, &received).await;
    }
    let keep = run.args.keep_db || tally.lost > 0 || !settled.drained;
    db.close().await.ok();
    // Stop the private broker (or cluster) while its state (pid files) is still there.
    drop(private);
    drop(cluster);
    if !keep {
        scratch.drop_db().await.ok();
        std::fs::remove_dir_all(&work_dir).ok();
    }
    let mut line = format!(
        "summary: events={} success={} fail={} lost={} duplicates={} kills={} reclaimed={} elapsed_s={} max_gap_ms={} redelivered={}",
        tally.events,
        tally.success,
        tally.fail,
        tally.lost,
        tally.duplicates,
        fleet.kills,
        tally.reclaimed,
        elapsed.as_secs(),
        tally.max_gap.as_millis(),
        tally.redelivered
    );
    if run.args.dead_retry {
        line.push_str(&format!(
            " dead_retried={}",
            settled.dead_retried.unwrap_or(0)
        ));
    }
    if let Some(v) = tally.order_violations {
        line.push_str(&format!(" order_violations={v}"));
    }
    println!("{line}");
    std::io::stdout().flush().ok();
    Ok(tally.lost + tally.order_violations.unwrap_or(0))
}
