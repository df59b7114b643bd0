//! Events to be written into the outbox.
use std::collections::BTreeMap;
use std::time::Duration;

use sea_orm_outbox_entity::event_record::{BIZ_NO_MAX_LEN, EVENT_TYPE_MAX_LEN};
use serde::Serialize;

use crate::error::EventError;

mod due;
mod limits;
pub(crate) use due::Due;
pub use limits::EventLimits;

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
    due: Due,
}

impl NewEvent {
    /// Longest header name, in characters.
    pub const HEADER_NAME_MAX_LEN: usize = 64;

    /// Default notify interval ([`NewEvent::notify_interval`]): 10 milliseconds.
    pub const DEFAULT_NOTIFY_INTERVAL: Duration = Duration::from_millis(10);

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
            notify_interval: Self::DEFAULT_NOTIFY_INTERVAL,
            due: Due::Now,
        }
    }

    /// Adds the message header `name` = `value` (replacing an earlier value of that name); the
    /// publisher sends each as a message property or header of its broker.
    ///
    /// Checked when the event is written ([`NewEvent::validate`]): the name has 1 to
    /// [`NewEvent::HEADER_NAME_MAX_LEN`] ASCII letters, digits, `_`, `-` and `.`, and is not
    /// reserved ([`EventLimits::is_reserved`]); the value has no control character; all headers
    /// together take at most [`EventLimits::max_headers_bytes`] as JSON.
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

    /// The headers as stored in `t_event_record.headers`: a JSON object of strings, or `None`
    /// when there are none.
    pub(crate) fn headers_json(&self) -> Option<String> {
        if self.headers.is_empty() {
            return None;
        }
        // A map of strings always serializes.
        serde_json::to_string(&self.headers).ok()
    }

    /// Whether writing this event wakes relays at once (default `true`; a delayed event wakes
    /// none). On Postgres the insert also queues `pg_notify('sea_orm_outbox', '')`, delivered
    /// at commit to every listening relay (shared by concurrent writers:
    /// [`NewEvent::notify_interval`]). On MySQL/MariaDB and SQLite the write wakes the workers
    /// of the same process and table, which claim at once and then again after 20, 40, 80 ms
    /// and so on (doubling up to the poll delay), so that the commit following the write is
    /// found within milliseconds; relays in other processes poll.
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
    /// [`NewEvent::DEFAULT_NOTIFY_INTERVAL`]; whole milliseconds, a fraction rounds up): per
    /// slot of `interval` by the writer's clock, only the insert that gets the slot's advisory
    /// lock without waiting (`pg_try_advisory_xact_lock(1329745752, slot)`) queues the
    /// `NOTIFY`. [`Duration::ZERO`] makes every event notify on its own (use it if the
    /// application takes two-key advisory locks with first key 1329745752).
    #[must_use]
    pub fn notify_interval(mut self, interval: Duration) -> Self {
        self.notify_interval = interval;
        self
    }

    /// How concurrent writers share the wake-up notification ([`NewEvent::notify_interval`]).
    pub fn notification_interval(&self) -> Duration {
        self.notify_interval
    }

    /// The wake-up of the insert: `None` none (off, or the event is delayed), else its
    /// [`NewEvent::notify_interval`].
    pub(crate) fn wakeup(&self) -> Option<Duration> {
        (self.notify && !self.is_delayed()).then_some(self.notify_interval)
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

    /// Checks the event against the columns and `limits` (the write paths do, before anything
    /// reaches the database).
    ///
    /// # Errors
    /// [`EventError::Empty`] for an empty or blank `biz_no`/`event_type`,
    /// [`EventError::TooLong`] past 64 characters, [`EventError::NulByte`] for a NUL character
    /// in any field (Postgres text cannot store it), [`EventError::PayloadTooLarge`] past
    /// `limits.max_payload_bytes`, [`EventError::InvalidHeader`] for a header name or value
    /// [`NewEvent::header`] does not allow, [`EventError::HeadersTooLarge`] past
    /// `limits.max_headers_bytes`, [`EventError::DelayTooLong`] for a due time past
    /// [`NewEvent::MAX_DELAY`].
    pub fn validate(&self, limits: &EventLimits) -> Result<(), EventError> {
        check_text("biz_no", &self.biz_no, BIZ_NO_MAX_LEN)?;
        check_text("event_type", &self.event_type, EVENT_TYPE_MAX_LEN)?;
        if self.payload.contains('\0') {
            return Err(EventError::NulByte { field: "payload" });
        }
        if self.payload.len() > limits.max_payload_bytes {
            return Err(EventError::PayloadTooLarge {
                size: self.payload.len(),
                max: limits.max_payload_bytes,
            });
        }
        for (name, value) in &self.headers {
            check_header(name, value, limits)?;
        }
        let size = self.headers_json().map_or(0, |json| json.len());
        if size > limits.max_headers_bytes {
            return Err(EventError::HeadersTooLarge {
                size,
                max: limits.max_headers_bytes,
            });
        }
        self.check_due()
    }
}

/// The rules of [`NewEvent::header`] for one header under `limits`.
pub(crate) fn check_header(
    name: &str,
    value: &str,
    limits: &EventLimits,
) -> Result<(), EventError> {
    let refuse = |reason: String| {
        Err(EventError::InvalidHeader {
            name: name.chars().take(NewEvent::HEADER_NAME_MAX_LEN).collect(),
            reason,
        })
    };
    let len = name.chars().count();
    if len == 0 || len > NewEvent::HEADER_NAME_MAX_LEN {
        return refuse(format!(
            "the name must have 1 to {} characters (it has {len})",
            NewEvent::HEADER_NAME_MAX_LEN
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return refuse("the name may hold only ASCII letters, digits, `_`, `-` and `.`".into());
    }
    if limits.is_reserved(name) {
        return refuse(
            "the name is reserved for the broker's or the outbox's own properties".into(),
        );
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return refuse(format!(
            "the value holds the control character U+{:04X}, which brokers' property \
             encodings cannot carry",
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
mod tests;
