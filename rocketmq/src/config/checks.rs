//! The checks on a [`RocketMqConfig`]: addresses, topic and group names, the send timeout and
//! the size limits.
use std::time::Duration;

use sea_orm_outbox::OutboxError;
use sea_orm_outbox::WorkerConfig;

use super::RocketMqConfig;

/// Longest topic name RocketMQ accepts.
const TOPIC_MAX_LEN: usize = 127;
/// Longest group name RocketMQ accepts.
pub(crate) const GROUP_MAX_LEN: usize = 255;

impl RocketMqConfig {
    /// Checks that the configuration can work.
    ///
    /// Only the form of the addresses is checked here; whether a name resolves is found out by
    /// [`RocketMqPublisher::start`](crate::RocketMqPublisher::start), which fails with
    /// [`OutboxError::Broker`] when none answers.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when there is no name server address or one is not
    /// `host:port` (host: a name or IPv4 address of letters, digits, `.`, `-`, `_`, or an IPv6
    /// address in brackets; port: 1 to 65535; no scheme, path or spaces), the group or topic is
    /// empty, too long or has characters RocketMQ refuses (allowed: letters, digits, `%`, `|`,
    /// `_`, `-`; the default topic and every topic of the map; no RocketMQ system topic such as
    /// `TBW102` or `rmq_sys_*`), the send timeout is zero or longer than `u32::MAX`
    /// milliseconds, the broker avoidance is shorter than 1 ms,
    /// `max_message_bytes` or `max_batch_bytes` is zero or `max_batch_bytes` exceeds
    /// `max_message_bytes`, or the credentials fail [`Credentials::validate`](crate::Credentials::validate).
    pub fn validate(&self) -> Result<(), OutboxError> {
        let bad = |m: String| Err(OutboxError::InvalidConfig(m));
        let addrs = self.namesrv_addrs();
        if addrs.is_empty() {
            return bad("RocketMQ namesrv_addr is empty".into());
        }
        for addr in addrs {
            let ok = addr.rsplit_once(':').is_some_and(|(host, port)| {
                is_host(host) && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !ok {
                return bad(format!(
                    "RocketMQ name server address `{addr}` is not host:port \
                     (e.g. 127.0.0.1:9876, namesrv.example:9876 or [::1]:9876)"
                ));
            }
        }
        check_name("producer_group", &self.producer_group, GROUP_MAX_LEN)?;
        check_topic("topic", &self.topic)?;
        for (event_type, topic) in &self.topics {
            check_topic(&format!("topic of `{event_type}`"), topic)?;
        }
        if self.send_timeout.is_zero() || u32::try_from(self.send_timeout.as_millis()).is_err() {
            return bad(format!(
                "RocketMQ send_timeout must be between 1 ms and {} ms",
                u32::MAX
            ));
        }
        if let Some(c) = &self.credentials {
            c.validate()?;
        }
        if self.broker_avoidance < Duration::from_millis(1) {
            return bad("RocketMQ broker_avoidance must be at least 1 ms".into());
        }
        if self.max_message_bytes == 0 || self.max_batch_bytes == 0 {
            return bad("RocketMQ max_message_bytes and max_batch_bytes must be at least 1".into());
        }
        if self.max_batch_bytes > self.max_message_bytes {
            return bad(format!(
                "RocketMQ max_batch_bytes ({}) must be at most max_message_bytes ({}): a batch is \
                 one message to the broker",
                self.max_batch_bytes, self.max_message_bytes
            ));
        }
        Ok(())
    }

    /// [`RocketMqConfig::validate`], and checks that the send timeout fits the worker that will
    /// call this publisher, by the one send-timeout rule
    /// ([`WorkerConfig::check_publisher_send_timeout`]): at most a third of its lease (a send
    /// still running when the lease ends would be sent again by another instance) and at most
    /// its `send_timeout` (else the worker gives up before the client does and a late success
    /// is recorded as a failure).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when either check fails.
    pub fn validate_for(&self, worker: &WorkerConfig) -> Result<(), OutboxError> {
        self.validate()?;
        worker.check_publisher_send_timeout("RocketMQ send_timeout", self.send_timeout)
    }
}

/// A host name or IPv4 address (letters, digits, `.`, `-`, `_`) or an IPv6 address in brackets.
fn is_host(host: &str) -> bool {
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    }
}

/// A topic events may be sent to: a valid name ([`check_name`]) that is not one of RocketMQ's
/// system topics (`TBW102`, `SCHEDULE_TOPIC_XXXX`, `rmq_sys_*`, ...) nor one the broker refuses
/// sends to (`%RETRY%`/`%DLQ%` topics): the client's `TopicValidator` rules, which would refuse
/// every send for good and make every event of the topic a dead letter.
fn check_topic(what: &str, topic: &str) -> Result<(), OutboxError> {
    use rocketmq_model::common::topic::TopicValidator;
    check_name(what, topic, TOPIC_MAX_LEN)?;
    if TopicValidator::is_system_topic(topic) || TopicValidator::is_not_allowed_send_topic(topic) {
        return Err(OutboxError::InvalidConfig(format!(
            "RocketMQ {what} `{topic}` is a system topic of RocketMQ, which takes no events"
        )));
    }
    Ok(())
}

/// Topic and group names: 1..=max characters out of `[%|a-zA-Z0-9_-]`.
pub(crate) fn check_name(what: &str, value: &str, max: usize) -> Result<(), OutboxError> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(OutboxError::InvalidConfig(format!(
            "RocketMQ {what} `{value}` is invalid: 1 to {max} characters out of letters, digits, \
             `%`, `|`, `_` and `-`"
        )))
    }
}
