//! [`Failover`]: how the publisher moves sends off a broker that fails.
use sea_orm_outbox::OutboxError;

/// How [`RocketMqPublisher`](crate::RocketMqPublisher) moves sends off a broker that fails, in
/// a cluster of several broker masters (one broker: all three behave alike).
///
/// What the rocketmq-rust 1.0 client does by itself (observed: RELIABILITY.md): it sends round
/// robin over every queue of its cached route (refreshed from the name server every 30 s). A
/// killed broker is handled: the name server drops it at once and a send that cannot connect is
/// sent again to another broker within the call. A hung broker (SIGSTOP, a frozen host) stays
/// listed for 120 s, and every send that picks one of its queues waits the whole send timeout;
/// the client's latency fault tolerance (off by default) isolates it, but only after some kinds
/// of failure.
///
/// Parsed from `outbox`, `client` or `off` ([`ENV_FAILOVER`](crate::ENV_FAILOVER)).
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox_rocketmq::Failover;
/// use sea_orm_outbox_rocketmq::RocketMqConfig;
/// let config = RocketMqConfig::new("10.0.0.1:9876;10.0.0.2:9876")
///     .failover(Failover::Outbox) // the default
///     .broker_avoidance(Duration::from_secs(30));
/// config.validate()?;
/// assert_eq!("client".parse::<Failover>()?, Failover::Client);
/// # Ok::<(), sea_orm_outbox::OutboxError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Failover {
    /// The publisher chooses each send's queue from the client's route itself, round robin
    /// over the brokers that have not failed lately: a broker whose send failed (refused,
    /// timed out, closed, an error response) is avoided for
    /// [`RocketMqConfig::broker_avoidance`](crate::RocketMqConfig::broker_avoidance); then one
    /// send tries it again (the others still avoid it) and a success brings it back. When every
    /// broker is avoided, sends go to the one whose avoidance ends first. The client's latency
    /// fault tolerance is on as well. The default.
    #[default]
    Outbox,
    /// The client chooses the queue with its latency fault tolerance and fault detector on
    /// (`set_send_latency_fault_enable`, `set_start_detector_enable`).
    Client,
    /// The client as it comes (round robin, no fault tolerance): for comparison only.
    Off,
}

impl Failover {
    /// The mode's name as [`Failover::from_str`](std::str::FromStr) reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            Failover::Outbox => "outbox",
            Failover::Client => "client",
            Failover::Off => "off",
        }
    }
}

impl std::fmt::Display for Failover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Failover {
    type Err = OutboxError;

    /// `outbox`, `client` or `off` (ASCII case and surrounding spaces ignored).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming the three values for anything else.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "outbox" => Ok(Failover::Outbox),
            "client" => Ok(Failover::Client),
            "off" => Ok(Failover::Off),
            other => Err(OutboxError::InvalidConfig(format!(
                "RocketMQ failover `{other}` is unknown: give outbox, client or off"
            ))),
        }
    }
}
