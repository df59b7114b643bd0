//! Events to be written into the outbox.
use std::collections::BTreeMap;
use std::time::Duration;

use sea_orm_outbox_entity::event_record::{BIZ_NO_MAX_LEN, EVENT_TYPE_MAX_LEN};
use serde::Serialize;

use crate::error::EventError;

/// Default largest payload: 4 MiB (4,194,304 bytes), RocketMQ's default `maxMessageSize`.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;

/// Largest size of an event's headers together: 16 KiB (16,384 bytes of their JSON form).
///
/// RocketMQ stores a message's properties (the broker's own and the user's) in at most
/// 32,767 bytes (`MAX_PROPERTIES_SIZE`, rocketmq-rust 1.0 broker and Apache RocketMQ alike);
/// half of that is left to the broker's and the outbox's own properties.
pub const MAX_HEADERS_BYTES: usize = 16 * 1024;

/// Longest header name, in characters.
pub const HEADER_NAME_MAX_LEN: usize = 64;

/// Header names an event may not use: the outbox's own properties (`eventId`, `eventType`,
/// `bizNo`) and every system property name of RocketMQ (`MessageConst` of rocketmq-rust 1.0,
/// `rocketmq-model` `common/message.rs`, the same names as Apache RocketMQ's Java client). Names
/// starting with `__` are refused as well (RocketMQ's internal prefix, e.g.
/// `__RMQ.TRANSIENT.`). A reserved name set as a header would change how the broker treats the
/// message (delay, transaction, keys) or what consumers read as the event's id.
pub const RESERVED_HEADER_NAMES: &[&str] = &[
    // The outbox's own.
    "eventId",
    "eventType",
    "bizNo",
    // RocketMQ's system properties.
    "TRACE_ON",
    "MSG_REGION",
    "KEYS",
    "TAGS",
    "WAIT",
    "DELAY",
    "RETRY_TOPIC",
    "ORIGIN_GROUP",
    "REAL_TOPIC",
    "REAL_QID",
    "TRAN_MSG",
    "PGROUP",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "BUYER_ID",
    "ORIGIN_MESSAGE_ID",
    "TRANSFER_FLAG",
    "CORRECTION_FLAG",
    "MQ2_FLAG",
    "RECONSUME_TIME",
    "UNIQ_KEY",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "POP_CK",
    "POP_CK_OFFSET",
    "1ST_POP_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "DUP_INFO",
    "EXTEND_UNIQ_INFO",
    "INSTANCE_ID",
    "CORRELATION_ID",
    "REPLY_TO_CLIENT",
    "TTL",
    "ARRIVE_TIME",
    "PUSH_REPLY_TIME",
    "CLUSTER",
    "MSG_TYPE",
    "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES",
    "TIMER_OUT_MS",
    "TIMER_DEL_UNIQKEY",
    "TIMER_ORIGINAL_DELIVER_MS",
    "TIMER_DELIVERY_TOKEN",
    "TIMER_ID",
    "TIMER_OWNER_EPOCH",
    "TIMER_LANE",
    "TIMER_GENERATION",
    "E_T",
    "TIMER_FORMAT_VERSION",
    "TIMER_POLICY_FINGERPRINT",
    "TIMER_DELAY_LEVEL",
    "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID",
    "_SYS_MSG_PRIORITY_",
    "TRACE_CONTEXT",
    "TRANSACTION_CHECK_TIMES",
    "TRANS_OFFSET",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "INNER_BASE",
    "INNER_NUM",
    "INNER_MULTI_DISPATCH",
    "PROPERTY_FORWARD_QUEUE_ID",
    "REDIRECT",
    "TIMER_ROLL_LABEL",
];

/// Default notify interval of an event ([`NewEvent::notify_interval`]): 10 milliseconds.
///
/// On Postgres an event's insert queues the wake-up `NOTIFY` unless another transaction that
/// queued one during the same 10 ms slot is still open; see [`NewEvent::notify_interval`].
/// Long enough that a burst of concurrent writers sends about one notifying transaction at a
/// time, short enough that a long transaction holding a slot keeps the others from notifying
/// for at most 10 ms; the relays' follow-up round
/// ([`crate::config::WAKE_FOLLOW_UP`]) is longer.
pub const DEFAULT_NOTIFY_INTERVAL: Duration = Duration::from_millis(10);

/// Limits checked before an event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventLimits {
    /// Largest payload in bytes (default [`DEFAULT_MAX_PAYLOAD_BYTES`], 4 MiB). Set it to the
    /// broker's message size limit so an event that can never be sent is refused at write time.
    pub max_payload_bytes: usize,
}

impl EventLimits {
    /// Limits with the largest payload `max_payload_bytes` bytes.
    pub const fn new(max_payload_bytes: usize) -> Self {
        EventLimits { max_payload_bytes }
    }
}

impl Default for EventLimits {
    fn default() -> Self {
        EventLimits {
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }
}

/// An event to write into `t_event_record` in the business transaction.
///
/// ```
/// use sea_orm_outbox::NewEvent;
/// let event = NewEvent::json("ORD-1001", "ORDER_CREATED", &serde_json::json!({"amount": 42}))?;
/// assert_eq!(event.payload(), r#"{"amount":42}"#);
/// # Ok::<(), sea_orm_outbox::EventError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    biz_no: String,
    event_type: String,
    payload: String,
    headers: BTreeMap<String, String>,
    notify: bool,
    notify_interval: Duration,
}

impl NewEvent {
    /// An event whose payload is `value` serialized as JSON text.
    ///
    /// # Errors
    /// [`EventError::Serialize`] when `value` cannot be serialized. Field checks happen when the
    /// event is written (see [`NewEvent::validate`]).
    pub fn json<T: Serialize + ?Sized>(
        biz_no: impl Into<String>,
        event_type: impl Into<String>,
        value: &T,
    ) -> Result<Self, EventError> {
        let payload =
            serde_json::to_string(value).map_err(|e| EventError::Serialize(e.to_string()))?;
        Ok(Self::raw(biz_no, event_type, payload))
    }

    /// An event whose payload is `payload` as given (normally JSON text; not parsed).
    pub fn raw(
        biz_no: impl Into<String>,
        event_type: impl Into<String>,
        payload: impl Into<String>,
    ) -> Self {
        NewEvent {
            biz_no: biz_no.into(),
            event_type: event_type.into(),
            payload: payload.into(),
            headers: BTreeMap::new(),
            notify: true,
            notify_interval: DEFAULT_NOTIFY_INTERVAL,
        }
    }

    /// Adds the message header `name` = `value` (replacing an earlier value of that name).
    /// The relay sends each header as a RocketMQ user property; a consumer reads it with
    /// `MessageExt::property(name)` (Java: `getUserProperty`).
    ///
    /// Checked when the event is written ([`NewEvent::validate`]): the name has 1 to
    /// [`HEADER_NAME_MAX_LEN`] characters out of ASCII letters, digits, `_`, `-` and `.`, and is
    /// not one of [`RESERVED_HEADER_NAMES`] nor starts with `__`; the value has no control
    /// character (RocketMQ separates properties with U+0001 and U+0002 and does not escape them);
    /// all headers together take at most [`MAX_HEADERS_BYTES`] as JSON.
    ///
    /// ```
    /// use sea_orm_outbox::NewEvent;
    /// let event = NewEvent::raw("ORD-1", "ORDER_CREATED", "{}").header("tenant", "acme");
    /// assert_eq!(event.headers().get("tenant").map(String::as_str), Some("acme"));
    /// ```
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Adds every (name, value) of `headers` as by [`NewEvent::header`].
    #[must_use]
    pub fn headers_from<I, K, V>(mut self, headers: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.headers
            .extend(headers.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// The headers so far, by name.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }

    /// Adds `name` = `value` unless a header of that name is set already (the recorded trace
    /// context must not override what the caller set on purpose).
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    pub(crate) fn header_if_absent(&mut self, name: &str, value: String) {
        self.headers.entry(name.to_owned()).or_insert(value);
    }

    /// The headers as stored in `t_event_record.headers`: a JSON object of strings, or `None`
    /// when there are none.
    pub(crate) fn headers_json(&self) -> Option<String> {
        if self.headers.is_empty() {
            None
        } else {
            // A map of strings always serializes.
            serde_json::to_string(&self.headers).ok()
        }
    }

    /// Whether writing this event wakes listening relays at once (default `true`).
    ///
    /// On Postgres the insert then also queues `pg_notify('sea_orm_outbox', '')`, delivered
    /// when the transaction commits (never on rollback), and idle relays run a round at once
    /// instead of after their poll delay. Concurrent writers share the notifications: see
    /// [`NewEvent::notify_interval`] (by default a burst of writers sends about one notifying
    /// transaction at a time). Turn it off for an event that need not be published soon:
    /// relays then find it by polling (or by the next round another event's notification
    /// starts). Other backends have no notification and always poll; there this setting
    /// changes nothing.
    #[must_use]
    pub fn notify_relays(mut self, on: bool) -> Self {
        self.notify = on;
        self
    }

    /// Whether writing this event wakes listening relays (see [`NewEvent::notify_relays`]).
    pub fn notifies_relays(&self) -> bool {
        self.notify
    }

    /// Sets how concurrent writers share the wake-up notification (Postgres; default
    /// [`DEFAULT_NOTIFY_INTERVAL`]; counted in whole milliseconds, a fraction rounds up).
    /// [`Duration::ZERO`] makes every event queue its own `NOTIFY`.
    ///
    /// **The rule.** Time is cut into slots of `interval` by the writing process's clock. The
    /// insert queues the `NOTIFY` only when it gets the slot's transaction-level advisory lock
    /// without waiting (`pg_try_advisory_xact_lock(1329745752, slot)`, the slot bound as a
    /// parameter; the first key is `"OBOX"` in ASCII), that is, unless another open transaction
    /// of the same database queued the slot's notification: its commit then wakes the relays
    /// for both. The first event after a quiet moment always notifies. Postgres commits
    /// notifying transactions one at a time (`PreCommit_Notify` in `async.c`), so sharing keeps
    /// a burst of writers from queueing on that lock: commit rate close to the plain one with
    /// the default, far below it when every writer notifies (BENCHMARKS.md). Advisory locks are
    /// per database and across processes: every writer of a database shares the slot, and
    /// databases never silence each other. Writers whose clocks disagree share keys less. A
    /// long transaction silences the others for at most `interval`; an insert that took
    /// `interval` or longer and skipped notifies on its own afterwards (`SELECT
    /// pg_notify(...)`), as does a writer whose clock reads before 1970.
    ///
    /// **What can still wait for the poll delay.** An event that skipped the notify relies on
    /// the slot holder's commit, on the relays' follow-up rounds after a wake-up
    /// ([`crate::config::WAKE_FOLLOW_UP`]), or on any later notification. It waits for
    /// the poll delay (never longer; nothing is lost) only when no notification reaches a
    /// relay after it committed: the slot holder rolled back or stays open, and no other event
    /// notified since.
    ///
    /// An application that takes advisory locks with the two-key form and the first key
    /// 1329745752 shares the slots' keys; use `Duration::ZERO` then (or other keys).
    #[must_use]
    pub fn notify_interval(mut self, interval: Duration) -> Self {
        self.notify_interval = interval;
        self
    }

    /// How concurrent writers share the wake-up notification (see
    /// [`NewEvent::notify_interval`]; [`Duration::ZERO`]: every event notifies).
    pub fn notification_interval(&self) -> Duration {
        self.notify_interval
    }

    /// What the insert does about the wake-up: `None` no notification, `Some(ZERO)` a
    /// notification of its own, `Some(interval)` shared by slots of `interval`.
    pub(crate) fn wakeup(&self) -> Option<Duration> {
        self.notify.then_some(self.notify_interval)
    }

    /// An event whose payload arrives as bytes, for example from a queue or a file.
    ///
    /// # Errors
    /// [`EventError::InvalidUtf8`] when the bytes are not UTF-8 text.
    pub fn from_bytes(
        biz_no: impl Into<String>,
        event_type: impl Into<String>,
        payload: Vec<u8>,
    ) -> Result<Self, EventError> {
        let payload =
            String::from_utf8(payload).map_err(|e| EventError::InvalidUtf8(e.to_string()))?;
        Ok(Self::raw(biz_no, event_type, payload))
    }

    /// The business key (message `keys`).
    pub fn biz_no(&self) -> &str {
        &self.biz_no
    }

    /// The event type (message tag).
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The payload text (message body).
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// Checks the event against the columns and `limits`; the write paths call it before
    /// anything reaches the database.
    ///
    /// # Errors
    /// [`EventError::Empty`] for an empty or blank `biz_no`/`event_type`,
    /// [`EventError::TooLong`] past 64 characters, [`EventError::NulByte`] for a NUL character
    /// in any field (Postgres text cannot store it), [`EventError::PayloadTooLarge`] past
    /// `limits.max_payload_bytes`, [`EventError::InvalidHeader`] for a header name or value
    /// [`NewEvent::header`] does not allow, [`EventError::HeadersTooLarge`] past
    /// [`MAX_HEADERS_BYTES`].
    pub fn validate(&self, limits: &EventLimits) -> Result<(), EventError> {
        check_text("biz_no", &self.biz_no, BIZ_NO_MAX_LEN)?;
        check_text("event_type", &self.event_type, EVENT_TYPE_MAX_LEN)?;
        if self.payload.contains('\0') {
            // Postgres text cannot hold NUL; refuse it everywhere so no backend differs.
            return Err(EventError::NulByte { field: "payload" });
        }
        if self.payload.len() > limits.max_payload_bytes {
            return Err(EventError::PayloadTooLarge {
                size: self.payload.len(),
                max: limits.max_payload_bytes,
            });
        }
        for (name, value) in &self.headers {
            check_header(name, value)?;
        }
        if let Some(json) = self.headers_json() {
            if json.len() > MAX_HEADERS_BYTES {
                return Err(EventError::HeadersTooLarge {
                    size: json.len(),
                    max: MAX_HEADERS_BYTES,
                });
            }
        }
        Ok(())
    }
}

/// The rules of [`NewEvent::header`] for one header.
pub(crate) fn check_header(name: &str, value: &str) -> Result<(), EventError> {
    let refuse = |reason: String| {
        Err(EventError::InvalidHeader {
            name: name.chars().take(HEADER_NAME_MAX_LEN).collect(),
            reason,
        })
    };
    let len = name.chars().count();
    if len == 0 || len > HEADER_NAME_MAX_LEN {
        return refuse(format!(
            "the name must have 1 to {HEADER_NAME_MAX_LEN} characters (it has {len})"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return refuse("the name may hold only ASCII letters, digits, `_`, `-` and `.`".into());
    }
    if name.starts_with("__") || RESERVED_HEADER_NAMES.contains(&name) {
        return refuse("the name is reserved for RocketMQ's or the outbox's own properties".into());
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return refuse(format!(
            "the value holds the control character U+{:04X}, which RocketMQ's property \
             encoding cannot carry",
            u32::from(c)
        ));
    }
    Ok(())
}

fn check_text(field: &'static str, value: &str, max: usize) -> Result<(), EventError> {
    if value.trim().is_empty() {
        return Err(EventError::Empty { field });
    }
    if value.contains('\0') {
        return Err(EventError::NulByte { field });
    }
    let len = value.chars().count();
    if len > max {
        return Err(EventError::TooLong { field, len, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_fields() {
        let limits = EventLimits::default();
        assert!(NewEvent::raw("A", "T", "{}").validate(&limits).is_ok());
        assert_eq!(
            NewEvent::raw(" ", "T", "{}").validate(&limits),
            Err(EventError::Empty { field: "biz_no" })
        );
        assert_eq!(
            NewEvent::raw("A", "", "{}").validate(&limits),
            Err(EventError::Empty {
                field: "event_type"
            })
        );
        assert!(matches!(
            NewEvent::raw("x".repeat(65), "T", "{}").validate(&limits),
            Err(EventError::TooLong {
                field: "biz_no",
                len: 65,
                max: 64
            })
        ));
        // 64 multi-byte characters fit a varchar(64).
        assert!(NewEvent::raw("é".repeat(64), "T", "{}")
            .validate(&limits)
            .is_ok());
        let small = EventLimits {
            max_payload_bytes: 3,
        };
        assert!(matches!(
            NewEvent::raw("A", "T", "1234").validate(&small),
            Err(EventError::PayloadTooLarge { size: 4, max: 3 })
        ));
        assert_eq!(
            NewEvent::raw("A\0B", "T", "{}").validate(&limits),
            Err(EventError::NulByte { field: "biz_no" })
        );
        assert_eq!(
            NewEvent::raw("A", "T", "{\0}").validate(&limits),
            Err(EventError::NulByte { field: "payload" })
        );
        assert!(matches!(
            NewEvent::from_bytes("A", "T", vec![0xff, 0xfe]),
            Err(EventError::InvalidUtf8(_))
        ));
    }

    #[test]
    fn validates_headers() {
        let limits = EventLimits::default();
        let ok = NewEvent::raw("A", "T", "{}")
            .header("tenant", "acme")
            .header(
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            )
            .header("x.y-z_1", "ünïcödé and spaces");
        assert!(ok.validate(&limits).is_ok());
        assert_eq!(
            ok.headers_json().as_deref(),
            Some(
                r#"{"tenant":"acme","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","x.y-z_1":"ünïcödé and spaces"}"#
            )
        );
        assert_eq!(NewEvent::raw("A", "T", "{}").headers_json(), None);
        let refused = |e: NewEvent| match e.validate(&limits) {
            Err(EventError::InvalidHeader { name, reason }) => (name, reason),
            other => panic!("expected InvalidHeader, got {other:?}"),
        };
        for name in [
            "",
            "a b",
            "é",
            "a:b",
            "__RMQ.TRANSIENT.x",
            "KEYS",
            "UNIQ_KEY",
            "DELAY",
            "eventId",
            "bizNo",
        ] {
            let (n, reason) = refused(NewEvent::raw("A", "T", "{}").header(name, "v"));
            assert_eq!(n, name, "{reason}");
        }
        let (n, _) = refused(NewEvent::raw("A", "T", "{}").header("n".repeat(65), "v"));
        assert_eq!(n.len(), 64);
        for value in ["a\u{1}b", "a\u{2}", "line\nbreak", "nul\0"] {
            let (_, reason) = refused(NewEvent::raw("A", "T", "{}").header("h", value));
            assert!(reason.contains("control character"), "{reason}");
        }
        let big = NewEvent::raw("A", "T", "{}")
            .headers_from((0..20).map(|i| (format!("h{i}"), "v".repeat(1000))));
        assert!(matches!(
            big.validate(&limits),
            Err(EventError::HeadersTooLarge {
                max: MAX_HEADERS_BYTES,
                ..
            })
        ));
    }
}
