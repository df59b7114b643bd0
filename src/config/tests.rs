use super::*;

#[test]
fn defaults_are_the_seeds_and_valid() {
    let c = WorkerConfig::default();
    assert_eq!(c.poll_delay, Duration::from_secs(5));
    assert_eq!(c.batch_size, 20);
    assert_eq!(c.lease, Duration::from_secs(600));
    assert_eq!(c.send_timeout, Duration::from_secs(3));
    assert_eq!(c.retry.max_retries, 12);
    assert_eq!(c.heartbeat_interval, Duration::from_secs(10));
    assert!(c.validate().is_ok());
}

#[test]
fn heartbeat_interval_is_bounded() {
    for (ms, ok) in [(99, false), (100, true), (600_000, true), (600_001, false)] {
        let c = WorkerConfig::default().heartbeat_interval(Duration::from_millis(ms));
        assert_eq!(c.validate().is_ok(), ok, "{ms} ms");
    }
}

#[test]
fn rejects_bad_settings() {
    // The lease follows a long send: it is renewed.
    let c = WorkerConfig::default()
        .lease(Duration::from_secs(3))
        .send_timeout(Duration::from_secs(3));
    assert!(c.validate().is_ok());
    let c = WorkerConfig::default().batch_size(0);
    assert!(c.validate().is_err());
    let c = WorkerConfig::default().instance_id("");
    assert!(c.validate().is_err());
}

#[test]
fn validate_covers_what_the_worker_builds() {
    // Refused here, not first by `Worker::new`.
    let tiny_lease = WorkerConfig::default()
        .lease(Duration::from_nanos(2))
        .send_timeout(Duration::from_nanos(1));
    assert!(tiny_lease.validate().is_err());
    let huge_backoff = WorkerConfig::default().retry(RetryPolicy::new(
        3,
        Duration::from_secs(u64::MAX / 4),
        Duration::MAX,
    ));
    assert!(huge_backoff.validate().is_err());
}

#[test]
fn ordered_needs_batch_claims() {
    assert_eq!(WorkerConfig::default().ordered, None);
    let c = WorkerConfig::default().ordered(Some(OrderedPolicy::Block));
    assert!(c.validate().is_ok());
    assert!(c.claim_strategy(ClaimStrategy::PerRow).validate().is_err());
    assert_eq!(OrderedPolicy::Skip.blocking_statuses().len(), 2);
}
