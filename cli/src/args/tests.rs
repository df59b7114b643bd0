use super::*;
use clap::CommandFactory;
use sea_orm_outbox::WorkerConfig;

/// clap's own consistency checks of the command line.
#[test]
fn cli_is_well_formed() {
    Cli::command().debug_assert();
}

/// The relay's settings, with no flag given, are `WorkerConfig::default()`.
#[test]
fn relay_defaults_are_the_librarys() {
    let cli = Cli::try_parse_from(["outbox", "relay"]).expect("parse");
    let Command::Relay(args) = cli.command else {
        panic!("relay")
    };
    let c = args.config();
    let d = WorkerConfig::default();
    assert_eq!(
        (c.poll_delay, c.batch_size, c.lease, c.send_timeout, c.retry),
        (d.poll_delay, d.batch_size, d.lease, d.send_timeout, d.retry)
    );
    assert_eq!(
        (c.send_concurrency, c.wake_on_commit),
        (d.send_concurrency, d.wake_on_commit)
    );
}

/// The wake-up flag reaches the worker's configuration.
#[test]
fn wake_flag_parses() {
    let cli = Cli::try_parse_from(["outbox", "relay", "--wake-on-commit", "false"]).expect("parse");
    let Command::Relay(args) = cli.command else {
        panic!("relay")
    };
    let c = args.config();
    assert!(!c.wake_on_commit);
}

/// `--statement-protocol simple` reaches the worker's configuration.
#[test]
fn statement_protocol_parses() {
    let cli =
        Cli::try_parse_from(["outbox", "relay", "--statement-protocol", "simple"]).expect("parse");
    let Command::Relay(args) = cli.command else {
        panic!("relay")
    };
    assert_eq!(
        args.config().statement_protocol,
        sea_orm_outbox::StatementProtocol::Simple
    );
    assert!(Cli::try_parse_from(["outbox", "relay", "--statement-protocol", "x"]).is_err());
}

/// `--ordered block|skip|off` reaches the worker's configuration; unset stays unordered.
#[test]
fn ordered_parses() {
    let ordered = |v: &str| {
        let cli = Cli::try_parse_from(["outbox", "relay", "--ordered", v]).expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        args.config().ordered
    };
    use sea_orm_outbox::OrderedPolicy;
    assert_eq!(ordered("block"), Some(OrderedPolicy::Block));
    assert_eq!(ordered("skip"), Some(OrderedPolicy::Skip));
    assert_eq!(ordered("off"), None);
    let cli = Cli::try_parse_from(["outbox", "relay"]).expect("parse");
    let Command::Relay(args) = cli.command else {
        panic!("relay")
    };
    assert_eq!(args.config().ordered, None);
    assert!(Cli::try_parse_from(["outbox", "relay", "--ordered", "x"]).is_err());
}

/// `--heal-dead-letters true` turns healing on with the library's default policy, each of
/// `--heal-quiet` and `--heal-rounds` changes its part; they need the switch, and healing is
/// off without it.
#[test]
fn heal_flags_parse() {
    use sea_orm_outbox::HealPolicy;
    let heal = |flags: &[&str]| {
        let cli = Cli::try_parse_from([&["outbox", "relay"], flags].concat()).expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        args.config().heal_dead_letters
    };
    assert_eq!(heal(&[]), None);
    assert_eq!(heal(&["--heal-dead-letters", "false"]), None);
    assert_eq!(
        heal(&["--heal-dead-letters", "true"]),
        Some(HealPolicy::default())
    );
    let tuned = heal(&[
        "--heal-dead-letters",
        "true",
        "--heal-quiet",
        "90s",
        "--heal-rounds",
        "5",
    ]);
    assert_eq!(
        tuned,
        Some(HealPolicy::new(std::time::Duration::from_secs(90), 5))
    );
    assert!(Cli::try_parse_from(["outbox", "relay", "--heal-quiet", "1m"]).is_err());
    let cli = Cli::try_parse_from([
        "outbox",
        "relay",
        "--heal-dead-letters",
        "true",
        "--heal-rounds",
        "0",
    ])
    .expect("parse");
    let Command::Relay(args) = cli.command else {
        panic!("relay")
    };
    assert!(args.config().validate().is_err(), "0 rounds is refused");
}

/// Durations take humantime units; `dead retry` wants an id or `--all`, not both.
#[test]
fn durations_parse() {
    let cli = Cli::try_parse_from(["outbox", "purge", "--older-than", "7d"]).expect("parse");
    let Command::Purge { older_than, batch } = cli.command else {
        panic!("purge")
    };
    assert_eq!(older_than, Duration::from_secs(7 * 86_400));
    assert_eq!(batch, 1000);
    assert!(Cli::try_parse_from(["outbox", "dead", "retry"]).is_err());
    assert!(Cli::try_parse_from(["outbox", "dead", "retry", "3", "--all"]).is_err());
}

/// `--connect-timeout`: unset waits for ever, `0s` is one attempt, garbage is refused.
#[test]
fn connect_timeout_parses() {
    let cli = Cli::try_parse_from(["outbox", "relay"]).expect("parse");
    let Command::Relay(args) = cli.command else {
        panic!("relay")
    };
    assert_eq!(
        args.connect_timeout, None,
        "waits for the database by default"
    );
    let cli = Cli::try_parse_from(["outbox", "relay", "--connect-timeout", "0s"]).expect("parse");
    let Command::Relay(args) = cli.command else {
        panic!("relay")
    };
    assert_eq!(args.connect_timeout, Some(Duration::ZERO));
    assert!(Cli::try_parse_from(["outbox", "relay", "--connect-timeout", "soon"]).is_err());
}

/// The retry flags reach the worker's retry policy.
#[test]
fn relay_retry_flags() {
    let cli = Cli::try_parse_from([
        "outbox",
        "relay",
        "--retry-backoff",
        "100ms",
        "--retry-max-backoff",
        "2s",
        "--max-retries",
        "40",
    ])
    .expect("parse");
    let Command::Relay(args) = cli.command else {
        panic!("relay")
    };
    let r = args.config().retry;
    assert_eq!(
        (r.max_retries, r.backoff_base, r.max_backoff),
        (40, Duration::from_millis(100), Duration::from_secs(2))
    );
}

/// The secret key never shows: not in `--help` (even when set in the environment), not
/// in the parsed arguments' `Debug`.
#[test]
fn secret_key_stays_hidden() {
    let cli = Cli::try_parse_from([
        "outbox",
        "relay",
        "--rocketmq-access-key",
        "svc",
        "--rocketmq-secret-key",
        "flag-secret-981",
    ])
    .expect("parse");
    assert!(!format!("{cli:?}").contains("flag-secret-981"), "{cli:?}");
    let Command::Relay(args) = cli.command else {
        panic!("relay")
    };
    assert_eq!(
        args.rocketmq_secret_key.as_ref().map(Secret::expose),
        Some("flag-secret-981")
    );
    let mut help = Vec::new();
    let mut cmd = Cli::command();
    let relay = cmd.find_subcommand_mut("relay").expect("relay");
    relay.write_long_help(&mut help).expect("help");
    let help = String::from_utf8_lossy(&help);
    assert!(help.contains("ROCKETMQ_SECRET_KEY"), "{help}");
}

/// A production build has no fault injection: the flag is an unknown argument.
#[cfg(not(feature = "chaos-testing"))]
#[test]
fn no_chaos_flag_without_the_feature() {
    let e = Cli::try_parse_from(["outbox", "relay", "--chaos-send-stall", "500:6s"])
        .expect_err("no such flag");
    assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
}

/// `--heartbeat-interval` reaches the worker's configuration; unset keeps the library's 10 s.
#[test]
fn heartbeat_interval_parses() {
    let config = |args: &[&str]| {
        let cli = Cli::try_parse_from(args).expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        args.config().heartbeat_interval
    };
    assert_eq!(
        config(&["outbox", "relay", "--heartbeat-interval", "1s"]),
        Duration::from_secs(1)
    );
    assert_eq!(
        config(&["outbox", "relay"]),
        WorkerConfig::default().heartbeat_interval
    );
}

/// `outbox health` takes its thresholds as durations, with the library's defaults.
#[test]
fn health_thresholds_parse() {
    let cli = Cli::try_parse_from(["outbox", "health", "--undelivered-age", "3s", "--json"])
        .expect("parse");
    let Command::Health {
        undelivered_age,
        transaction_age,
        dead_letter_window,
        json,
    } = cli.command
    else {
        panic!("health")
    };
    let d = sea_orm_outbox::ops::HealthThresholds::default();
    assert_eq!(
        (undelivered_age, transaction_age, dead_letter_window, json),
        (
            Duration::from_secs(3),
            d.transaction_age,
            d.dead_letter_window,
            true
        )
    );
}

/// `--retention` takes a duration or `off`; without it, the library's default.
#[test]
fn retention_parses() {
    let config = |args: &[&str]| {
        let cli = Cli::try_parse_from(args).expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        args.config().retention
    };
    assert_eq!(
        config(&["outbox", "relay", "--retention", "30d"]),
        Some(Duration::from_secs(30 * 24 * 60 * 60))
    );
    assert_eq!(config(&["outbox", "relay", "--retention", "off"]), None);
    assert_eq!(
        config(&["outbox", "relay"]),
        WorkerConfig::default().retention
    );
    assert!(Cli::try_parse_from(["outbox", "relay", "--retention", "soon"]).is_err());
}

/// `--completion` chooses what a delivered row becomes; without it, the library's default.
#[test]
fn completion_parses() {
    let config = |args: &[&str]| {
        let cli = Cli::try_parse_from(args).expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        args.config().completion
    };
    assert_eq!(
        config(&["outbox", "relay", "--completion", "delete"]),
        sea_orm_outbox::Completion::Delete
    );
    assert_eq!(
        config(&["outbox", "relay"]),
        WorkerConfig::default().completion
    );
    assert!(Cli::try_parse_from(["outbox", "relay", "--completion", "archive"]).is_err());
}

/// `--publisher` takes the four brokers, RocketMQ by default; any other name is refused with
/// the list of those it takes.
#[test]
fn publisher_parses() {
    let publisher = |extra: &[&str]| {
        let cli = Cli::try_parse_from([&["outbox", "relay"], extra].concat()).expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        args.publisher
    };
    assert_eq!(publisher(&[]), PublisherKind::RocketMq);
    for kind in [
        PublisherKind::RocketMq,
        PublisherKind::Kafka,
        PublisherKind::Nats,
        PublisherKind::RabbitMq,
        PublisherKind::Redis,
    ] {
        assert_eq!(publisher(&["--publisher", kind.name()]), kind);
    }
    assert_eq!(publisher(&["--publisher", "NATS"]), PublisherKind::Nats);
    let err = Cli::try_parse_from(["outbox", "relay", "--publisher", "pulsar"])
        .expect_err("pulsar is refused")
        .to_string();
    assert!(
        err.contains("invalid value 'pulsar' for '--publisher <PUBLISHER>'")
            && err.contains("[possible values: rocketmq, kafka, nats, rabbitmq, redis]"),
        "{err}"
    );
}
