/// Header names no event may use, whatever the publisher: the outbox's own message properties
/// ([`crate::OutboxMessage::properties`]).
const OUTBOX_PROPERTY_NAMES: &[&str] = &["eventId", "eventType", "bizNo"];

/// Limits checked before an event is written ([`crate::NewEvent::validate`]).
///
/// The default is broker-neutral. A publisher crate supplies the limits of its broker (its
/// message size, the property names it keeps for itself); give them to the [`crate::Outbox`]
/// that writes the events ([`crate::Outbox::limits`]) so that an event the broker can never
/// take is refused at write time.
///
/// ```
/// use sea_orm_outbox::{EventLimits, NewEvent};
/// const LIMITS: EventLimits = EventLimits::new(1024 * 1024)
///     .with_max_headers_bytes(4096)
///     .with_reserved_header_names(&["priority"])
///     .with_reserved_header_prefixes(&["x-broker-"]);
/// let event = NewEvent::raw("ORD-1", "ORDER_CREATED", "{}").header("priority", "high");
/// assert!(event.validate(&LIMITS).is_err());
/// assert!(event.validate(&EventLimits::default()).is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventLimits {
    /// Largest payload in bytes (default [`EventLimits::DEFAULT_MAX_PAYLOAD_BYTES`]).
    pub max_payload_bytes: usize,
    /// Largest size of an event's headers together, in bytes of their JSON form (default
    /// [`EventLimits::DEFAULT_MAX_HEADERS_BYTES`]).
    pub max_headers_bytes: usize,
    /// Header names the broker keeps for itself, refused besides the outbox's own (default none).
    pub reserved_header_names: &'static [&'static str],
    /// Prefixes of header names the broker keeps for itself (default none).
    pub reserved_header_prefixes: &'static [&'static str],
}

impl EventLimits {
    /// Default largest payload: 4 MiB (4,194,304 bytes).
    pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;

    /// Default largest size of an event's headers together: 16 KiB of their JSON form.
    pub const DEFAULT_MAX_HEADERS_BYTES: usize = 16 * 1024;

    /// The default limits with the largest payload `max_payload_bytes` bytes.
    pub const fn new(max_payload_bytes: usize) -> Self {
        EventLimits {
            max_payload_bytes,
            max_headers_bytes: Self::DEFAULT_MAX_HEADERS_BYTES,
            reserved_header_names: &[],
            reserved_header_prefixes: &[],
        }
    }

    /// The limits with the headers' largest size `max_headers_bytes` bytes (of their JSON form).
    #[must_use]
    pub const fn with_max_headers_bytes(mut self, max_headers_bytes: usize) -> Self {
        self.max_headers_bytes = max_headers_bytes;
        self
    }

    /// The limits with `names` as the reserved header names (in place of the earlier ones).
    #[must_use]
    pub const fn with_reserved_header_names(mut self, names: &'static [&'static str]) -> Self {
        self.reserved_header_names = names;
        self
    }

    /// The limits with `prefixes` as the reserved prefixes of header names (in place of the
    /// earlier ones).
    #[must_use]
    pub const fn with_reserved_header_prefixes(
        mut self,
        prefixes: &'static [&'static str],
    ) -> Self {
        self.reserved_header_prefixes = prefixes;
        self
    }

    /// Whether `name` is one of the outbox's own property names or reserved by these limits.
    pub fn is_reserved(&self, name: &str) -> bool {
        OUTBOX_PROPERTY_NAMES.contains(&name)
            || self.reserved_header_names.contains(&name)
            || self
                .reserved_header_prefixes
                .iter()
                .any(|p| name.starts_with(p))
    }
}

impl Default for EventLimits {
    fn default() -> Self {
        EventLimits::new(Self::DEFAULT_MAX_PAYLOAD_BYTES)
    }
}
