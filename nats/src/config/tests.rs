use std::collections::HashMap;

use super::*;

fn from(vars: &[(&str, &str)]) -> Result<NatsConfig, OutboxError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    NatsConfig::from_lookup(|name| vars.get(name).cloned())
}

#[test]
fn defaults_without_variables() {
    let c = from(&[]).expect("defaults");
    assert_eq!(c, NatsConfig::default());
    assert_eq!(c.url, DEFAULT_URL);
    assert_eq!(c.subject_prefix, "outbox");
    assert_eq!(c.send_timeout, Duration::from_secs(3));
    assert_eq!(c.credentials, None);
    assert_eq!(c.subject_of("OrderPaid"), "outbox.OrderPaid");
}

#[test]
fn reads_every_variable() {
    let c = from(&[
        (ENV_URL, " nats://a:4222,nats://b:4222 "),
        (ENV_SUBJECT_PREFIX, "svc.order"),
        (ENV_SEND_TIMEOUT_MS, "1500"),
        (ENV_MSG_ID_PREFIX, "order-"),
        (ENV_USER, "outbox"),
        (ENV_PASSWORD, "pw-123"),
    ])
    .expect("config");
    assert_eq!(c.server_addrs().expect("addrs").len(), 2);
    assert_eq!(c.subject_prefix, "svc.order");
    assert_eq!(c.send_timeout, Duration::from_millis(1500));
    assert_eq!(c.msg_id_prefix, "order-");
    assert_eq!(
        c.credentials,
        Some(Credentials::user_password("outbox", "pw-123"))
    );
    let c = from(&[(ENV_TOKEN, "tok")]).expect("token");
    assert_eq!(c.credentials.map(|c| c.setting()), Some(ENV_TOKEN));
    let c = from(&[(ENV_SUBJECT_PREFIX, "  ")]).expect("blank is unset");
    assert_eq!(c.subject_prefix, DEFAULT_SUBJECT_PREFIX);
}

#[test]
fn invalid_values_name_their_variable() {
    for (vars, name) in [
        (vec![(ENV_SUBJECT_PREFIX, "a.*")], ENV_SUBJECT_PREFIX),
        (vec![(ENV_SUBJECT_PREFIX, "a..b")], ENV_SUBJECT_PREFIX),
        (
            vec![(ENV_SUBJECT_PREFIX, "order events")],
            ENV_SUBJECT_PREFIX,
        ),
        (vec![(ENV_SEND_TIMEOUT_MS, "3s")], ENV_SEND_TIMEOUT_MS),
        (vec![(ENV_SEND_TIMEOUT_MS, "0")], ENV_SEND_TIMEOUT_MS),
        (vec![(ENV_URL, "nats://a:4222,,")], ENV_URL),
        (vec![(ENV_URL, "nats://host:notaport")], ENV_URL),
        (vec![(ENV_MSG_ID_PREFIX, "a b")], ENV_MSG_ID_PREFIX),
        (vec![(ENV_USER, "outbox")], ENV_PASSWORD),
        (vec![(ENV_TOKEN, "t"), (ENV_NKEY_SEED, "s")], ENV_NKEY_SEED),
    ] {
        let err = from(&vars).expect_err(name);
        assert!(matches!(err, OutboxError::InvalidConfig(_)), "{err}");
        assert!(err.to_string().contains(name), "{name}: {err}");
    }
}

#[test]
fn urls_are_shown_without_their_login() {
    let c = NatsConfig::new("nats://outbox:pw-secret@127.0.0.1:4222, tls://tok@h:4443");
    assert_eq!(
        c.redacted_url(),
        "nats://<redacted>@127.0.0.1:4222,tls://<redacted>@h:4443"
    );
    assert!(c.url_has_login());
    assert!(!format!("{c:?}").contains("pw-secret"), "{c:?}");
    assert!(!NatsConfig::default().url_has_login());
    let err = NatsConfig::new("nats://u:pw-secret@h:bad")
        .validate()
        .expect_err("bad port");
    assert!(!err.to_string().contains("pw-secret"), "{err}");
}

#[test]
fn a_password_with_a_slash_stays_out_of_errors_and_debug() {
    for url in [
        "nats://u:pw/secret@h:4222",
        "nats://u:pw#secret@h",
        "tls://pw/secret@h:4443",
    ] {
        let config = NatsConfig::new(url);
        assert!(config.url_has_login(), "{url}");
        let err = config
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        for text in [err, format!("{config:?}"), config.redacted_url()] {
            assert!(!text.contains("secret"), "{text}");
        }
    }
}
