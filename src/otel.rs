//! W3C trace context across the outbox (feature `opentelemetry`): [`OutboxExt::with_event`]
//! records the caller's trace context as the event's `traceparent` / `tracestate` headers, and
//! the relay links each event's send span (`outbox_event`) to it, so a trace shows the business
//! request and the later publish as related.
//!
//! The current context is the current `tracing` span's OpenTelemetry context (with
//! `tracing-opentelemetry`'s layer installed), else OpenTelemetry's own current context, written
//! by OpenTelemetry's `TraceContextPropagator` (<https://www.w3.org/TR/trace-context/>). Nothing
//! is recorded when there is no valid span context, and a `traceparent` the caller set with
//! [`NewEvent::header`] is kept (with the caller's `tracestate`, if any).
//!
//! Versions: this feature builds on `opentelemetry` / `opentelemetry_sdk` 0.33 and
//! `tracing-opentelemetry` 0.34. The application must use the same minor versions (one copy of
//! each crate in `cargo tree -d`), or its spans' context is not seen and nothing is recorded.
//!
//! [`OutboxExt::with_event`]: crate::OutboxExt::with_event
//! [`NewEvent::header`]: crate::NewEvent::header
use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::event::NewEvent;
use crate::publisher::OutboxMessage;

/// The W3C `traceparent` header name.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C `tracestate` header name.
pub const TRACESTATE: &str = "tracestate";

/// `event` with the current trace context recorded as its headers (rules: the module docs).
pub(crate) fn record_trace_context(mut event: NewEvent) -> NewEvent {
    if event.headers().contains_key(TRACEPARENT) {
        return event;
    }
    let mut cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        cx = opentelemetry::Context::current();
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    }
    for name in [TRACEPARENT, TRACESTATE] {
        let value = carrier.remove(name).filter(|v| !v.is_empty());
        if let Some(value) = value.filter(|_| !event.headers().contains_key(name)) {
            event = event.header(name, value);
        }
    }
    event
}

/// Links `span` (an event's send span) to the trace context recorded in `message`'s headers,
/// if it has a valid one.
pub(crate) fn link_send_span(span: &tracing::Span, message: &OutboxMessage) {
    let Some(parent) = message.header(TRACEPARENT) else {
        return;
    };
    let mut carrier: HashMap<String, String> = HashMap::new();
    carrier.insert(TRACEPARENT.to_owned(), parent.to_owned());
    if let Some(state) = message.header(TRACESTATE) {
        carrier.insert(TRACESTATE.to_owned(), state.to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    let linked = cx.span().span_context().clone();
    if linked.is_valid() {
        span.add_link(linked);
    }
}
