//! Events to be written into the outbox.
use sea_orm_outbox_entity::event_record::{BIZ_NO_MAX_LEN, EVENT_TYPE_MAX_LEN};
use serde::Serialize;

use crate::error::EventError;

/// Default largest payload: 4 MiB (4,194,304 bytes), RocketMQ's default `maxMessageSize`.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;

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
    notify: bool,
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
            notify: true,
        }
    }

    /// Whether writing this event wakes listening relays at once (default `true`).
    ///
    /// On Postgres the insert then also queues `pg_notify('sea_orm_outbox', '')`, delivered
    /// when the transaction commits (never on rollback), and idle relays run a round at once
    /// instead of after their poll delay. Turn it off for writers whose commit rate matters
    /// more than the relay's latency: Postgres serializes the commits of notifying
    /// transactions on one cluster-wide lock (BENCHMARKS.md measured 0.48–0.94 of the commits
    /// per second with 8 writers), and relays then find the event by polling. Other backends
    /// have no notification and always poll; there this setting changes nothing.
    #[must_use]
    pub fn notify_relays(mut self, on: bool) -> Self {
        self.notify = on;
        self
    }

    /// Whether writing this event wakes listening relays (see [`NewEvent::notify_relays`]).
    pub fn notifies_relays(&self) -> bool {
        self.notify
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
    /// `limits.max_payload_bytes`.
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
        Ok(())
    }
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
}
