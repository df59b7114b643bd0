//! `outbox relay --publisher rocketmq` (the default): the producer's settings from the tool's
//! RocketMQ flags.
use sea_orm_outbox::Secret;
use sea_orm_outbox::{OutboxError, WorkerConfig};
use sea_orm_outbox_rocketmq::{Credentials, RocketMqConfig};

use crate::args::RelayArgs;

/// Why `outbox relay` refuses to start without a broker.
const NO_BROKER: &str = "no broker to publish to: give the RocketMQ name server \
    (--rocketmq-namesrv or ROCKETMQ_NAMESRV_ADDR, host:port), another broker with --publisher \
    nats|rabbitmq|redis (OUTBOX_PUBLISHER), or --dry-run to see what would be sent without \
    sending, claiming or marking anything";

/// The producer's configuration, checked: the name server, topic and group when given, send
/// timeout fitted to the worker; `None` without a name server in a dry run.
pub(super) fn settings(
    args: &RelayArgs,
    worker: &WorkerConfig,
) -> Result<Option<RocketMqConfig>, OutboxError> {
    match args.rocketmq_namesrv.as_deref().map(str::trim) {
        None if args.dry_run => Ok(None),
        // A relay that marked events delivered without sending them would lose every one: no
        // broker is a mistake (a variable missing from a deployment), never a default.
        None => Err(OutboxError::InvalidConfig(NO_BROKER.into())),
        Some("") => Err(OutboxError::InvalidConfig(format!(
            "--rocketmq-namesrv / ROCKETMQ_NAMESRV_ADDR is set but empty; {NO_BROKER}"
        ))),
        Some(addr) => config(addr, args, worker).map(Some),
    }
}

/// The producer's configuration, checked: name server `addr`, topic and group when given,
/// send timeout fitted to the worker (at most its send timeout and a third of its lease).
fn config(
    addr: &str,
    args: &RelayArgs,
    worker: &WorkerConfig,
) -> Result<RocketMqConfig, OutboxError> {
    let timeout = worker.publisher_send_timeout_limit();
    let mut config = RocketMqConfig::new(addr).send_timeout(timeout);
    let given = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    if let Some(t) = given(&args.topic) {
        config = config.topic(t);
    }
    if let Some(g) = given(&args.producer_group) {
        config = config.producer_group(g);
    }
    if let Some(spec) = given(&args.topic_map) {
        config = config.topics_from_spec(&spec)?;
    }
    let secret = args
        .rocketmq_secret_key
        .as_ref()
        .map(|s| Secret::new(s.expose().trim()))
        .filter(|s| !s.is_empty());
    config.credentials = Credentials::from_parts(given(&args.rocketmq_access_key), secret)?;
    if let Some(verify) = args.rocketmq_verify_credentials {
        config = config.verify_credentials(verify);
    }
    if let Some(f) = given(&args.rocketmq_failover) {
        config = config.failover(f.parse()?);
    }
    if let Some(n) = args.rocketmq_max_message_bytes {
        config = config.max_message_bytes(n);
    }
    if let Some(n) = args.rocketmq_max_batch_bytes {
        config = config.max_batch_bytes(n);
    }
    config.validate_for(worker)?;
    Ok(config)
}

/// The name server, topics and access key (never the secret key), for the log.
pub(super) fn target(config: &RocketMqConfig) -> String {
    let access_key = config.credentials.as_ref().map(|c| c.access_key());
    let mut target = format!(
        "rocketmq {} topic {} access key {}",
        config.namesrv_addr,
        config.topic,
        access_key.unwrap_or("-")
    );
    for (event_type, topic) in &config.topics {
        target.push_str(&format!(", {event_type} to {topic}"));
    }
    target
}

/// The RocketMQ-only settings given (flag or variable), as `--flag (VARIABLE)`.
pub(super) fn flags_given(args: &RelayArgs) -> Vec<&'static str> {
    [
        (
            args.rocketmq_namesrv.is_some(),
            "--rocketmq-namesrv (ROCKETMQ_NAMESRV_ADDR)",
        ),
        (args.topic.is_some(), "--topic (OUTBOX_TOPIC)"),
        (args.topic_map.is_some(), "--topic-map (OUTBOX_TOPICS)"),
        (
            args.producer_group.is_some(),
            "--producer-group (ROCKETMQ_PRODUCER_GROUP)",
        ),
        (
            args.rocketmq_access_key.is_some(),
            "--rocketmq-access-key (ROCKETMQ_ACCESS_KEY)",
        ),
        (
            args.rocketmq_secret_key.is_some(),
            "--rocketmq-secret-key (ROCKETMQ_SECRET_KEY)",
        ),
        (
            args.rocketmq_verify_credentials.is_some(),
            "--rocketmq-verify-credentials (ROCKETMQ_VERIFY_CREDENTIALS)",
        ),
        (
            args.rocketmq_failover.is_some(),
            "--rocketmq-failover (ROCKETMQ_FAILOVER)",
        ),
        (
            args.rocketmq_max_batch_bytes.is_some(),
            "--rocketmq-max-batch-bytes (ROCKETMQ_MAX_BATCH_BYTES)",
        ),
        (
            args.rocketmq_max_message_bytes.is_some(),
            "--rocketmq-max-message-bytes (ROCKETMQ_MAX_MESSAGE_BYTES)",
        ),
    ]
    .into_iter()
    .filter_map(|(given, name)| given.then_some(name))
    .collect()
}
