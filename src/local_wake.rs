//! The process-local wake-up: the write path tells the workers of the same process and table
//! that an event was written, on every backend. Each table has one `watch` channel in a
//! process-wide map; a worker holds a receiver, so a signal sent while it is busy is seen at
//! its next wait, not lost. A table is named by its label (`schema.table`, or `table`): two
//! databases with tables of one name in one process share a channel, which costs a spare
//! round, never an event.
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tokio::sync::watch;

/// The channel of each table that a worker subscribed to.
fn channels() -> &'static Mutex<HashMap<String, watch::Sender<()>>> {
    static CHANNELS: OnceLock<Mutex<HashMap<String, watch::Sender<()>>>> = OnceLock::new();
    CHANNELS.get_or_init(Default::default)
}

/// A receiver of the signals for `table`; it has seen every signal sent before.
pub(crate) fn subscribe(table: &str) -> watch::Receiver<()> {
    let mut channels = channels().lock().unwrap_or_else(|e| e.into_inner());
    channels
        .entry(table.to_owned())
        .or_insert_with(|| watch::channel(()).0)
        .subscribe()
}

/// Signals the workers of `table` in this process, if any subscribed.
pub(crate) fn signal(table: &str) {
    let channels = channels().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = channels.get(table) {
        tx.send_replace(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_sent_before_the_wait_is_seen() {
        let mut rx = subscribe("local_wake_test");
        assert!(!rx.has_changed().expect("open"));
        signal("local_wake_test");
        signal("local_wake_test");
        assert!(rx.has_changed().expect("open"));
        rx.mark_unchanged();
        assert!(!rx.has_changed().expect("open"));
        signal("another_table");
        assert!(!rx.has_changed().expect("open"));
    }
}
