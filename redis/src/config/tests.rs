use super::*;

fn message(e: OutboxError) -> String {
    match e {
        OutboxError::InvalidConfig(m) => m,
        other => panic!("not InvalidConfig: {other}"),
    }
}

#[test]
fn config_validation() {
    RedisConfig::default()
        .validate()
        .expect("defaults are valid");
    RedisConfig::new("redis://app:pw-4711@cache:6380/2")
        .validate()
        .expect("user and password in the URL");
    RedisConfig::new("redis://cache")
        .username("app")
        .password("pw-4711")
        .max_len(1)
        .validate()
        .expect("user and password set");
    for (config, names) in [
        (RedisConfig::new("http//nope"), ENV_URL),
        (
            RedisConfig::new("redis://cache").username("app"),
            ENV_PASSWORD,
        ),
        (RedisConfig::new("redis://app@cache"), ENV_PASSWORD),
        (RedisConfig::default().password(""), ENV_PASSWORD),
        (RedisConfig::default().stream_prefix(""), ENV_STREAM_PREFIX),
        (
            RedisConfig::default().stream_prefix("a b"),
            ENV_STREAM_PREFIX,
        ),
        (RedisConfig::default().max_len(0), ENV_MAX_LEN),
        (
            RedisConfig::default().max_message_bytes(0),
            ENV_MAX_MESSAGE_BYTES,
        ),
        (
            RedisConfig::default().max_message_bytes(MAX_MESSAGE_BYTES_LIMIT + 1),
            ENV_MAX_MESSAGE_BYTES,
        ),
        (
            RedisConfig::default().send_timeout(Duration::ZERO),
            "send_timeout",
        ),
        (
            RedisConfig::default().send_timeout(MAX_SEND_TIMEOUT * 2),
            "send_timeout",
        ),
    ] {
        let m = message(config.validate().expect_err(names));
        assert!(m.contains(names), "{m}");
    }
    // A bad URL with a password is shown without it.
    let m = message(
        RedisConfig::new("redis://u:pw-4711@cache/notanumber")
            .validate()
            .expect_err("bad db"),
    );
    assert!(m.contains(ENV_URL) && !m.contains("pw-4711"), "{m}");
    #[cfg(not(feature = "tls"))]
    {
        let m = message(
            RedisConfig::new("rediss://cache")
                .validate()
                .expect_err("tls"),
        );
        assert!(m.contains("`tls` feature"), "{m}");
    }
}

#[test]
fn debug_hides_passwords() {
    let c = RedisConfig::new("redis://u:url-secret-1@cache").password("cfg-secret-2");
    let text = format!("{c:?}");
    assert!(
        !text.contains("url-secret-1") && !text.contains("cfg-secret-2"),
        "{text}"
    );
    assert!(text.contains("redis://u:redacted@cache"), "{text}");
}

#[test]
fn settings_override_the_url() {
    let info = RedisConfig::new("redis://a:b@cache")
        .username("app")
        .password("pw")
        .connection_info()
        .expect("valid");
    assert_eq!(info.redis_settings().username(), Some("app"));
    assert_eq!(info.redis_settings().password(), Some("pw"));
    assert_eq!(
        RedisConfig::default().stream_of("OrderPaid"),
        "outbox:OrderPaid"
    );
    assert_eq!(
        RedisConfig::default().event_limits().max_payload_bytes,
        DEFAULT_MAX_MESSAGE_BYTES
    );
}

/// The only test that touches the environment.
#[test]
fn config_from_env() {
    for name in [
        ENV_URL,
        ENV_USERNAME,
        ENV_PASSWORD,
        ENV_STREAM_PREFIX,
        ENV_MAX_LEN,
        ENV_MAX_MESSAGE_BYTES,
        ENV_SEND_TIMEOUT_MS,
    ] {
        std::env::remove_var(name);
    }
    let c = RedisConfig::from_env().expect("all defaults");
    assert_eq!(c, RedisConfig::default());
    std::env::set_var(ENV_URL, " redis://cache:6380/1 ");
    std::env::set_var(ENV_STREAM_PREFIX, "orders");
    std::env::set_var(ENV_MAX_LEN, "1000");
    std::env::set_var(ENV_MAX_MESSAGE_BYTES, "65536");
    std::env::set_var(ENV_SEND_TIMEOUT_MS, "1500");
    std::env::set_var(ENV_USERNAME, "app");
    std::env::set_var(ENV_PASSWORD, " env-secret-4711");
    let c = RedisConfig::from_env().expect("valid");
    assert_eq!(c.url, "redis://cache:6380/1");
    assert_eq!(c.stream_prefix, "orders");
    assert_eq!(c.max_len, Some(1000));
    assert_eq!(c.max_message_bytes, 65536);
    assert_eq!(c.send_timeout, std::time::Duration::from_millis(1500));
    std::env::set_var(ENV_SEND_TIMEOUT_MS, "soon");
    let m = message(RedisConfig::from_env().expect_err("not a number"));
    assert!(m.contains(ENV_SEND_TIMEOUT_MS), "{m}");
    std::env::set_var(ENV_SEND_TIMEOUT_MS, "0");
    assert!(RedisConfig::from_env().is_err(), "a zero send timeout");
    std::env::remove_var(ENV_SEND_TIMEOUT_MS);
    assert_eq!(c.username.as_deref(), Some("app"));
    assert_eq!(
        c.password.as_ref().map(Secret::expose),
        Some(" env-secret-4711"),
        "a password is taken as is"
    );
    std::env::remove_var(ENV_PASSWORD);
    let m = message(RedisConfig::from_env().expect_err("user without password"));
    assert!(m.contains(ENV_PASSWORD), "{m}");
    std::env::remove_var(ENV_USERNAME);
    std::env::set_var(ENV_MAX_LEN, "lots");
    let m = message(RedisConfig::from_env().expect_err("not a number"));
    assert!(m.contains(ENV_MAX_LEN), "{m}");
    std::env::set_var(ENV_MAX_LEN, "0");
    assert!(RedisConfig::from_env().is_err());
    std::env::remove_var(ENV_MAX_LEN);
    std::env::set_var(ENV_MAX_MESSAGE_BYTES, "-1");
    let m = message(RedisConfig::from_env().expect_err("negative"));
    assert!(m.contains(ENV_MAX_MESSAGE_BYTES), "{m}");
    for name in [ENV_URL, ENV_STREAM_PREFIX, ENV_MAX_MESSAGE_BYTES] {
        std::env::remove_var(name);
    }
}
