//! Which claimed events this worker holds, from claim until the outcome is recorded: what the
//! lease renewer renews and what a lost lease stops from being recorded.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The events a worker holds a lease on, shared by the send slots and the lease renewer.
#[derive(Clone, Default)]
pub(crate) struct Inflight(Arc<Mutex<HashMap<i64, Phase>>>);

#[derive(Clone, Copy)]
enum Phase {
    /// Claimed at this instant, send not started.
    Queued(Instant),
    /// Claimed, send started at the second instant.
    Sending(Instant, Instant),
    /// The send returned; its outcome is not recorded yet (a SUCCESS may wait for its group).
    Sent(Instant),
    /// The lease was found reclaimed: do not send, do not record.
    Lost(Instant),
}

impl Inflight {
    fn lock(&self) -> MutexGuard<'_, HashMap<i64, Phase>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts holding `ids`, claimed now.
    pub(crate) fn claimed(&self, ids: impl IntoIterator<Item = i64>) {
        let now = Instant::now();
        self.lock()
            .extend(ids.into_iter().map(|id| (id, Phase::Queued(now))));
    }

    /// Marks the send of `id` started; false when its lease is already lost, or when (with
    /// `deadline`, i.e. without lease renewal) the claim is so old that the send could outlive
    /// the lease: such an event is handed back unsent rather than sent twice.
    pub(crate) fn start(&self, id: i64, deadline: Option<Duration>) -> bool {
        let mut map = self.lock();
        match map.get(&id).copied() {
            Some(Phase::Queued(claimed)) if deadline.is_some_and(|d| claimed.elapsed() > d) => {
                false
            }
            Some(Phase::Queued(claimed)) => {
                map.insert(id, Phase::Sending(claimed, Instant::now()));
                true
            }
            _ => false,
        }
    }

    /// Marks the send of `id` returned; the lease stays renewed until [`Inflight::finish`].
    pub(crate) fn sent(&self, id: i64) {
        let mut map = self.lock();
        if let Some(Phase::Sending(claimed, _)) = map.get(&id).copied() {
            map.insert(id, Phase::Sent(claimed));
        }
    }

    /// Whether the lease of `id` was found lost.
    pub(crate) fn is_lost(&self, id: i64) -> bool {
        matches!(self.lock().get(&id), Some(Phase::Lost(_)))
    }

    /// Stops holding `ids` (their outcome is recorded, or dropped) and returns each one's
    /// claim-to-now time.
    pub(crate) fn finish(&self, ids: &[i64]) -> Vec<Duration> {
        let mut map = self.lock();
        ids.iter()
            .filter_map(|id| map.remove(id))
            .map(|phase| match phase {
                Phase::Queued(c) | Phase::Sending(c, _) | Phase::Sent(c) | Phase::Lost(c) => {
                    c.elapsed()
                }
            })
            .collect()
    }

    /// Ids whose lease should be renewed now: queued, sent and awaiting their record, or
    /// sending for less than `hung_after` (a send running longer is hung: its lease must
    /// expire so that another instance can take over).
    pub(crate) fn renewable(&self, hung_after: Duration) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .lock()
            .iter()
            .filter_map(|(id, phase)| match phase {
                Phase::Queued(_) | Phase::Sent(_) => Some(*id),
                Phase::Sending(_, started) if started.elapsed() < hung_after => Some(*id),
                _ => None,
            })
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Marks `ids` lost: they are neither sent nor recorded.
    pub(crate) fn lose(&self, ids: &[i64]) {
        let mut map = self.lock();
        for id in ids {
            if let Some(Phase::Queued(c) | Phase::Sending(c, _) | Phase::Sent(c)) =
                map.get(id).copied()
            {
                map.insert(*id, Phase::Lost(c));
            }
        }
    }

    /// Events held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_renewed_from_claim_until_its_record() {
        let f = Inflight::default();
        f.claimed([1, 2, 3]);
        assert!(f.start(1, None));
        assert!(f.start(2, None));
        f.sent(2);
        assert_eq!(f.renewable(Duration::from_secs(60)), vec![1, 2, 3]);
        // A send running past `hung_after` is no longer renewed; a sent one still is.
        assert_eq!(f.renewable(Duration::ZERO), vec![2, 3]);
        f.lose(&[3]);
        assert!(f.is_lost(3) && !f.start(3, None));
        assert_eq!(f.finish(&[1, 2, 3]).len(), 3);
        assert_eq!(f.len(), 0);
    }
}
