//! Which queue of the route a send goes to: [`BrokerAvoidance`] under
//! [`Failover::Outbox`](super::Failover::Outbox), keeping away from brokers that failed lately,
//! and [`queue_of_key`] for the messages of an ordered relay, one queue per business key.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A small memory of "broker X failed at T": round robin over the queues of the brokers that
/// have not failed within the avoidance window.
///
/// Rules (a circuit breaker per broker, with one probe):
/// - a failed send avoids its broker until `now + window` (a later failure extends it);
/// - once that time has passed, the next send goes to it as a probe, and the broker stays
///   avoided for another window for every other send: one hung broker costs one send timeout
///   per window and producer, not one per send;
/// - a success forgets the broker's failures at once (the probe's success brings it back);
/// - when every broker of the route is avoided and none is due for a probe, sends go to the
///   broker whose avoidance ends first (sending somewhere beats not sending; with one broker
///   this is the client's plain behaviour).
///
/// Times are passed in (`now`), so the rules are tested without clocks or sleeps.
#[derive(Debug)]
pub(super) struct BrokerAvoidance {
    window: Duration,
    state: Mutex<State>,
}

/// The mutable part of [`BrokerAvoidance`].
#[derive(Debug, Default)]
struct State {
    /// Round-robin position (wraps).
    next: usize,
    /// Broker name -> until when it is avoided.
    avoided: HashMap<String, Instant>,
}

/// What [`BrokerAvoidance::failed`] changed, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failed {
    /// The broker was not avoided before: it is now.
    NewlyAvoided,
    /// It was already avoided (or probed): its window starts again.
    StillAvoided,
}

impl BrokerAvoidance {
    /// A memory that avoids a failed broker for `window`.
    pub(super) fn new(window: Duration) -> Self {
        BrokerAvoidance {
            window,
            state: Mutex::new(State::default()),
        }
    }

    /// The avoidance window.
    pub(super) fn window(&self) -> Duration {
        self.window
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The index of the queue the next send goes to, given the broker of each queue of the
    /// route (`brokers[i]` is queue `i`'s broker); `None` only when there is no queue.
    pub(super) fn choose(&self, brokers: &[&str], now: Instant) -> Option<usize> {
        if brokers.is_empty() {
            return None;
        }
        let mut s = self.lock();
        let turn = s.next;
        s.next = s.next.wrapping_add(1);
        // A broker whose window has run out gets this send as a probe; the others keep away
        // from it for another window.
        let due: Vec<usize> = (0..brokers.len())
            .filter(|&i| s.avoided.get(brokers[i]).is_some_and(|until| now >= *until))
            .collect();
        if !due.is_empty() {
            let i = due[turn % due.len()];
            let until = now + self.window;
            s.avoided.insert(brokers[i].to_owned(), until);
            return Some(i);
        }
        let healthy: Vec<usize> = (0..brokers.len())
            .filter(|&i| !s.avoided.contains_key(brokers[i]))
            .collect();
        if !healthy.is_empty() {
            return Some(healthy[turn % healthy.len()]);
        }
        // Every broker avoided, none due: the one whose avoidance ends first.
        (0..brokers.len()).min_by_key(|&i| (s.avoided.get(brokers[i]).copied(), i))
    }

    /// A send to `broker` failed at `now`: avoid it until `now + window`.
    pub(super) fn failed(&self, broker: &str, now: Instant) -> Failed {
        let until = now + self.window;
        match self.lock().avoided.insert(broker.to_owned(), until) {
            None => Failed::NewlyAvoided,
            Some(_) => Failed::StillAvoided,
        }
    }

    /// A send to `broker` succeeded: forget its failures. Whether it was avoided until now.
    pub(super) fn succeeded(&self, broker: &str) -> bool {
        let mut s = self.lock();
        if s.avoided.is_empty() {
            return false; // the common case: nothing to look up
        }
        s.avoided.remove(broker).is_some()
    }

    /// Whether `broker` is avoided at `now` (its window has not run out).
    #[cfg(test)]
    fn is_avoided(&self, broker: &str, now: Instant) -> bool {
        self.lock()
            .avoided
            .get(broker)
            .is_some_and(|until| now < *until)
    }
}

/// Java's `String.hashCode()` of `s`: `h = 31 * h + c` over its UTF-16 code units, wrapping
/// in 32 bits (so that a Java producer of the same keys hashes them alike).
pub(super) fn java_string_hash_code(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The index of the queue, among `queues` queues of a topic's route, that business key
/// `biz_no` goes to in ordered mode: the rule of the Java client's `SelectMessageQueueByHash`
/// (`value = key.hashCode() % queues; if (value < 0) value = Math.abs(value)`), which the
/// rocketmq-rust client's `SelectMessageQueueByHash` applies too. `None` when there is no
/// queue.
///
/// The index is into the client's list of the route's writable queues, which both clients
/// build alike from the name server's route: the route's queue data sorted by broker name,
/// and for each broker with a master its queue ids `0..writeQueueNums` (rocketmq-client-rust
/// 1.0 `topic_route_data2topic_publish_info`, Java `MQClientInstance.
/// topicRouteData2TopicPublishInfo`). So every producer that sees the same route sends a key
/// to the same queue, whichever relay sends it.
pub(super) fn queue_of_key(biz_no: &str, queues: usize) -> Option<usize> {
    if queues == 0 {
        return None;
    }
    // In 64 bits: `% queues` of an `i32` is within ±queues, so the absolute value fits.
    let value = i64::from(java_string_hash_code(biz_no)) % queues as i64;
    Some(value.unsigned_abs() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_javas_string_hash_code() {
        // Values of `String.hashCode()` as a JVM prints them.
        assert_eq!(java_string_hash_code(""), 0);
        assert_eq!(java_string_hash_code("a"), 97);
        assert_eq!(java_string_hash_code("ORD-1"), 75_467_813);
        assert_eq!(java_string_hash_code("hello"), 99_162_322);
        assert_eq!(java_string_hash_code("Hello, World!"), 1_498_789_909);
        // Overflowing and negative.
        assert_eq!(
            java_string_hash_code("The quick brown fox jumps over the lazy dog"),
            -609_428_141
        );
        assert_eq!(java_string_hash_code("polygenelubricants"), i32::MIN);
        // Outside the BMP a character is two UTF-16 units (a surrogate pair), as in Java.
        assert_eq!(java_string_hash_code("\u{1F600}"), 1_772_899);
        assert_eq!(java_string_hash_code("é"), 233);
    }

    #[test]
    fn a_key_goes_to_the_queue_of_javas_hash_rule() {
        assert_eq!(queue_of_key("ORD-1", 0), None);
        assert_eq!(queue_of_key("anything", 1), Some(0));
        // 75467813 % 4 = 1, % 8 = 5, % 3 = 2.
        assert_eq!(queue_of_key("ORD-1", 4), Some(1));
        assert_eq!(queue_of_key("ORD-1", 8), Some(5));
        assert_eq!(queue_of_key("ORD-1", 3), Some(2));
        // A negative hash: -609428141 % 4 = -1 in Java, made positive: 1; % 8 = -5 → 5;
        // % 3 = -2 → 2.
        let fox = "The quick brown fox jumps over the lazy dog";
        assert_eq!(queue_of_key(fox, 4), Some(1));
        assert_eq!(queue_of_key(fox, 8), Some(5));
        assert_eq!(queue_of_key(fox, 3), Some(2));
        // i32::MIN % 3 = -2 → 2; % 8 = 0.
        assert_eq!(queue_of_key("polygenelubricants", 3), Some(2));
        assert_eq!(queue_of_key("polygenelubricants", 8), Some(0));
        // Always within the route, the same for a key on every call.
        for k in 0..1_000 {
            let key = format!("K{k:03}");
            for n in 1..17 {
                let q = queue_of_key(&key, n).expect("a queue");
                assert!(q < n);
                assert_eq!(queue_of_key(&key, n), Some(q));
            }
        }
    }

    /// Route of 4 queues on broker-a and 4 on broker-b.
    const ROUTE: [&str; 8] = ["a", "a", "a", "a", "b", "b", "b", "b"];

    fn brokers_chosen(m: &BrokerAvoidance, n: usize, now: Instant) -> Vec<&'static str> {
        (0..n)
            .map(|_| ROUTE[m.choose(&ROUTE, now).expect("a queue")])
            .collect()
    }

    #[test]
    fn round_robin_over_every_queue_when_all_is_well() {
        let m = BrokerAvoidance::new(Duration::from_secs(30));
        let now = Instant::now();
        let picks: Vec<usize> = (0..16).map(|_| m.choose(&ROUTE, now).expect("q")).collect();
        assert_eq!(picks, [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(m.choose(&[], now), None);
    }

    #[test]
    fn a_failed_broker_is_avoided_for_the_window_then_probed_once() {
        let window = Duration::from_secs(30);
        let m = BrokerAvoidance::new(window);
        let t0 = Instant::now();
        assert_eq!(m.failed("a", t0), Failed::NewlyAvoided);
        assert!(m.is_avoided("a", t0));
        // Within the window: only b, over all of b's queues.
        let picks: Vec<usize> = (0..8).map(|_| m.choose(&ROUTE, t0).expect("q")).collect();
        assert!(picks.iter().all(|&i| ROUTE[i] == "b"), "{picks:?}");
        assert_eq!(
            picks
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            4
        );
        let late = t0 + window - Duration::from_millis(1);
        assert!(brokers_chosen(&m, 20, late).iter().all(|b| *b == "b"));
        // When the window has run out, exactly one send probes a; every other send keeps
        // away from it for another window.
        let after = t0 + window;
        assert!(!m.is_avoided("a", after));
        assert_eq!(brokers_chosen(&m, 1, after), ["a"]);
        assert!(m.is_avoided("a", after));
        assert!(brokers_chosen(&m, 20, after).iter().all(|b| *b == "b"));
        // The probe failed: another window, with one probe at its end.
        assert_eq!(m.failed("a", after), Failed::StillAvoided);
        let later = after + window;
        assert!(brokers_chosen(&m, 20, later - Duration::from_millis(1))
            .iter()
            .all(|b| *b == "b"));
        assert_eq!(brokers_chosen(&m, 2, later), ["a", "b"]);
        // The probe succeeded: a is back at once, on every one of its queues.
        assert!(m.succeeded("a"));
        assert!(!m.succeeded("a"));
        let both = brokers_chosen(&m, 8, later);
        assert_eq!(both.iter().filter(|b| **b == "a").count(), 4, "{both:?}");
    }

    #[test]
    fn when_every_broker_failed_one_probe_per_window_goes_to_each() {
        let window = Duration::from_secs(10);
        let m = BrokerAvoidance::new(window);
        let t0 = Instant::now();
        m.failed("a", t0);
        m.failed("b", t0 + Duration::from_secs(1));
        // None due yet: the one whose avoidance ends first (a), every time.
        assert!(brokers_chosen(&m, 5, t0 + Duration::from_secs(2))
            .iter()
            .all(|b| *b == "a"));
        // a is due at t0 + 10 s: exactly one send probes it, then it is avoided again for a
        // window and sends go to b (the one ending first now).
        let t1 = t0 + window;
        assert_eq!(brokers_chosen(&m, 1, t1), ["a"]);
        assert!(m.is_avoided("a", t1));
        assert!(brokers_chosen(&m, 5, t1).iter().all(|b| *b == "b"));
        // b becomes due at t0 + 11 s: one probe to b, then a (ending first again) takes the
        // sends.
        let t2 = t0 + Duration::from_secs(11);
        assert_eq!(brokers_chosen(&m, 1, t2), ["b"]);
        assert_eq!(brokers_chosen(&m, 2, t2), ["a", "a"]);
        // The probe of b failed: still avoided, window restarted.
        assert_eq!(m.failed("b", t2), Failed::StillAvoided);
        // The probe of a succeeded: a takes every send; b waits for its window.
        assert!(m.succeeded("a"));
        assert!(brokers_chosen(&m, 8, t2).iter().all(|b| *b == "a"));
    }

    #[test]
    fn one_broker_is_always_chosen_even_when_it_failed() {
        let m = BrokerAvoidance::new(Duration::from_secs(30));
        let t0 = Instant::now();
        m.failed("only", t0);
        let route = ["only"; 4];
        for _ in 0..8 {
            assert!(m.choose(&route, t0).is_some());
        }
    }
}
