use super::*;
use sea_orm_outbox::WorkerConfig;

#[test]
fn config_validation() {
    let ok = RocketMqConfig::new("127.0.0.1:9876;10.0.0.2:9876");
    assert!(ok.validate().is_ok());
    assert_eq!(ok.namesrv_addrs(), vec!["127.0.0.1:9876", "10.0.0.2:9876"]);
    for addr in [
        "namesrv.example:9876",
        "nonexistent.invalid:9876",
        "rocketmq-namesrv_0:9876; [::1]:9876",
    ] {
        assert!(RocketMqConfig::new(addr).validate().is_ok(), "{addr}");
    }
    assert_eq!(ok.topic, "OUTBOX_EVENT_TOPIC");
    assert_eq!(ok.send_timeout, Duration::from_secs(3));
    for bad in [
        RocketMqConfig::new(" ; "),
        RocketMqConfig::new("host"),
        RocketMqConfig::new("host:0"),
        RocketMqConfig::new(":9876"),
        RocketMqConfig::new(""),
        RocketMqConfig::new("host:"),
        RocketMqConfig::new("host:65536"),
        RocketMqConfig::new("host:9876/x"),
        RocketMqConfig::new("http://host:9876"),
        RocketMqConfig::new("name server:9876"),
        RocketMqConfig::new("::1:9876"),
        RocketMqConfig::new("[not-v6]:9876"),
        RocketMqConfig::new("127.0.0.1:9876;nohost"),
        RocketMqConfig::default().topic(""),
        RocketMqConfig::default().topic("a.b"),
        RocketMqConfig::default().topic("t".repeat(128)),
        RocketMqConfig::default().producer_group("g g"),
        RocketMqConfig::default().topic_for("ORDER_PAID", "bad topic"),
        RocketMqConfig::default().topic("TBW102"),
        RocketMqConfig::default().topic_for("ORDER_PAID", "SCHEDULE_TOPIC_XXXX"),
        RocketMqConfig::default().send_timeout(Duration::ZERO),
        RocketMqConfig::default().broker_avoidance(Duration::ZERO),
    ] {
        assert!(
            matches!(bad.validate(), Err(OutboxError::InvalidConfig(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn config_from_env() {
    // The only test that touches these variables.
    std::env::remove_var(ENV_NAMESRV_ADDR);
    let err = RocketMqConfig::from_env().expect_err("address required");
    assert!(err.to_string().contains(ENV_NAMESRV_ADDR), "{err}");
    for garbage in ["   ", "localhost", "localhost:", "http://namesrv:9876"] {
        std::env::set_var(ENV_NAMESRV_ADDR, garbage);
        let err = RocketMqConfig::from_env().expect_err(garbage);
        assert!(
            matches!(err, OutboxError::InvalidConfig(_)),
            "{garbage}: {err}"
        );
    }
    std::env::set_var(ENV_NAMESRV_ADDR, "127.0.0.1:19876");
    std::env::set_var(ENV_PRODUCER_GROUP, "order_service");
    std::env::set_var(ENV_TOPIC, "");
    let c = RocketMqConfig::from_env().expect("valid");
    assert_eq!(
        (
            c.namesrv_addr.as_str(),
            c.producer_group.as_str(),
            c.topic.as_str()
        ),
        ("127.0.0.1:19876", "order_service", DEFAULT_TOPIC)
    );
    std::env::set_var(ENV_TOPICS, "ORDER_PAID=PAY_T");
    let c = RocketMqConfig::from_env().expect("valid");
    assert_eq!(c.topic_of("ORDER_PAID"), "PAY_T");
    std::env::set_var(ENV_TOPICS, "ORDER_PAID");
    let err = RocketMqConfig::from_env().expect_err("no =");
    assert!(err.to_string().contains(ENV_TOPICS), "{err}");
    std::env::set_var(ENV_TOPICS, "ORDER_PAID=bad.topic");
    assert!(RocketMqConfig::from_env().is_err());
    std::env::remove_var(ENV_TOPICS);
    std::env::set_var(ENV_TOPIC, "bad topic");
    assert!(RocketMqConfig::from_env().is_err());
    std::env::remove_var(ENV_TOPIC);
    assert_eq!(RocketMqConfig::from_env().expect("valid").credentials, None);
    // Credentials: both or neither; the secret is never in an error or in Debug.
    std::env::set_var(ENV_SECRET_KEY, "env-secret-4711");
    let err = RocketMqConfig::from_env().expect_err("secret alone");
    assert!(
        err.to_string().contains(ENV_ACCESS_KEY) && !err.to_string().contains("4711"),
        "{err}"
    );
    std::env::set_var(ENV_ACCESS_KEY, " order-svc ");
    let c = RocketMqConfig::from_env().expect("both");
    let creds = c.credentials.as_ref().expect("credentials");
    assert_eq!(
        (creds.access_key(), creds.secret_key().expose()),
        ("order-svc", "env-secret-4711")
    );
    assert!(!format!("{c:?}").contains("4711"), "{c:?}");
    std::env::remove_var(ENV_SECRET_KEY);
    let err = RocketMqConfig::from_env().expect_err("access key alone");
    assert!(err.to_string().contains(ENV_SECRET_KEY), "{err}");
    std::env::remove_var(ENV_ACCESS_KEY);
    assert_eq!(c.failover, Failover::Outbox);
    std::env::set_var(ENV_FAILOVER, " Client ");
    assert_eq!(
        RocketMqConfig::from_env().expect("valid").failover,
        Failover::Client
    );
    std::env::set_var(ENV_FAILOVER, "sometimes");
    let err = RocketMqConfig::from_env().expect_err("unknown failover");
    assert!(err.to_string().contains("outbox, client or off"), "{err}");
    std::env::remove_var(ENV_FAILOVER);
    std::env::set_var(ENV_TOPIC, "bad topic");
    assert!(RocketMqConfig::from_env().is_err());
    for v in [
        ENV_NAMESRV_ADDR,
        ENV_PRODUCER_GROUP,
        ENV_TOPIC,
        ENV_TOPICS,
        ENV_ACCESS_KEY,
        ENV_SECRET_KEY,
        ENV_FAILOVER,
    ] {
        std::env::remove_var(v);
    }
}

#[test]
fn topic_map() {
    let c = RocketMqConfig::default()
        .topics_from_spec(" ORDER_PAID = PAY_T , ORDER_SHIPPED=SHIP_T,")
        .expect("spec");
    assert_eq!(c.topic_of("ORDER_PAID"), "PAY_T");
    assert_eq!(c.topic_of("ORDER_SHIPPED"), "SHIP_T");
    assert_eq!(c.topic_of("ORDER_CREATED"), DEFAULT_TOPIC);
    assert_eq!(c.all_topics(), vec![DEFAULT_TOPIC, "PAY_T", "SHIP_T"]);
    assert!(c.validate().is_ok());
    for bad in ["ORDER_PAID", "=T", "ORDER_PAID=", "A=T,A=U"] {
        let err = RocketMqConfig::default()
            .topics_from_spec(bad)
            .expect_err(bad);
        assert!(matches!(err, OutboxError::InvalidConfig(_)), "{bad}: {err}");
    }
    assert!(RocketMqConfig::default().topics_from_spec("").is_ok());
}

#[test]
fn failover_names() {
    for f in [Failover::Outbox, Failover::Client, Failover::Off] {
        assert_eq!(f.as_str().parse::<Failover>().expect("own name"), f);
        assert_eq!(f.to_string(), f.as_str());
    }
    assert_eq!(Failover::default(), Failover::Outbox);
    assert!("".parse::<Failover>().is_err());
}

#[test]
fn send_timeout_must_fit_the_worker() {
    let worker = WorkerConfig::default(); // send timeout 3 s, lease 10 min
    assert!(RocketMqConfig::default().validate_for(&worker).is_ok());
    let slow = RocketMqConfig::default().send_timeout(Duration::from_secs(4));
    assert!(matches!(
        slow.validate_for(&worker),
        Err(OutboxError::InvalidConfig(_))
    ));
    let short_lease = WorkerConfig::default()
        .lease(Duration::from_secs(6))
        .send_timeout(Duration::from_secs(3));
    let err = RocketMqConfig::default()
        .validate_for(&short_lease)
        .expect_err("3 s is more than a third of a 6 s lease");
    assert!(err.to_string().contains("RocketMQ send_timeout"), "{err}");
    // Invalid on its own: `validate` runs first.
    assert!(RocketMqConfig::new("").validate_for(&worker).is_err());
}
