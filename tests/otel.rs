//! The feature `opentelemetry`: `with_event` records the caller's W3C trace context as the
//! event's `traceparent` header, the relay hands it to the publisher, and the event's send span
//! (`outbox_event`) links to the caller's span. SQLite and an in-memory publisher: the
//! RocketMQ side (the headers arriving as message properties) is in tests/rocketmq.rs.
mod common;

use std::sync::Arc;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use sea_orm::TransactionTrait;
use sea_orm_outbox::otel::TRACEPARENT;
use sea_orm_outbox::{
    CancellationToken, InMemoryPublisher, NewEvent, OutboxExt, Worker, WorkerConfig,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use common::{event, Backend, TestContext};

#[tokio::test]
async fn trace_context_is_recorded_and_the_send_span_links_to_it() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-test")));
    // A current-thread runtime: the relay's tasks run on this thread and see this subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);

    let ctx = TestContext::new(Backend::Sqlite, "otel").await;
    let db = &ctx.db;

    // 1. Inside a span: the event carries its trace context (and the caller's own header).
    let checkout = tracing::info_span!("checkout");
    let checkout_cx = checkout.context().span().span_context().clone();
    assert!(
        checkout_cx.is_valid(),
        "the test's tracer makes valid spans"
    );
    let traced = {
        let _entered = checkout.enter();
        let txn = db.begin().await.expect("begin");
        let id = txn
            .with_event(NewEvent::raw("ORD-1", "ORDER_CREATED", "{}").header("tenant", "acme"))
            .await
            .expect("with_event");
        txn.commit().await.expect("commit");
        id
    };
    let expected = format!("00-{}-{}-01", checkout_cx.trace_id(), checkout_cx.span_id());
    let row = event(db, traced).await;
    let headers = row.header_pairs().expect("headers are JSON");
    assert_eq!(
        headers,
        vec![
            ("tenant".to_owned(), "acme".to_owned()),
            (TRACEPARENT.to_owned(), expected.clone())
        ]
    );

    // 2. A traceparent set on purpose is kept; 3. outside any span nothing is recorded.
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let kept = {
        let _entered = checkout.enter();
        db.with_event(NewEvent::raw("ORD-2", "ORDER_CREATED", "{}").header(TRACEPARENT, own))
            .await
            .expect("with_event")
    };
    let plain = db
        .with_event(NewEvent::raw("ORD-3", "ORDER_CREATED", "{}"))
        .await
        .expect("with_event");
    assert_eq!(
        event(db, kept).await.header_pairs().expect("json"),
        vec![(TRACEPARENT.to_owned(), own.to_owned())]
    );
    assert_eq!(event(db, plain).await.headers, None);
    drop(checkout);

    // The relay sends the headers and links each send span to the recorded context.
    let publisher = Arc::new(InMemoryPublisher::new());
    let worker = Worker::new(
        db.clone(),
        publisher.clone(),
        WorkerConfig::default()
            .completion(common::completion())
            .instance_id("otel-relay"),
    )
    .expect("worker");
    worker
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    let sent = publisher.messages();
    assert_eq!(sent.len(), 3);
    let by_id = |id: i64| sent.iter().find(|m| m.event_id == id).expect("sent");
    assert_eq!(by_id(traced).header(TRACEPARENT), Some(expected.as_str()));
    assert_eq!(by_id(traced).header("tenant"), Some("acme"));
    assert_eq!(by_id(kept).header(TRACEPARENT), Some(own));
    assert!(by_id(plain).headers.is_empty());

    provider.force_flush().expect("flush");
    let spans = exporter.get_finished_spans().expect("spans");
    let send_spans: Vec<_> = spans.iter().filter(|s| s.name == "outbox_event").collect();
    assert!(!send_spans.is_empty(), "no outbox_event span was exported");
    let linked_to = |trace: &str| {
        send_spans.iter().any(|s| {
            s.links
                .iter()
                .any(|l| l.span_context.trace_id().to_string() == trace)
        })
    };
    assert!(
        linked_to(&checkout_cx.trace_id().to_string()),
        "no send span links to the checkout span"
    );
    assert!(
        linked_to("0af7651916cd43dd8448eb211c80319c"),
        "no send span links to the caller's own traceparent"
    );
    ctx.cleanup().await;
}
