//! Which claimed events this worker holds, from claim until the outcome is recorded: what the
//! lease renewer renews and what a lost lease stops from being recorded.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The events a worker holds a lease on, by claim (`claim_owner` value): an event claimed again
/// after its lease lapsed is another entry, so each attempt is recorded under its own claim.
#[derive(Clone, Default)]
pub(crate) struct Inflight(Arc<Mutex<HashMap<String, HashMap<i64, Phase>>>>);

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

impl Phase {
    fn claimed_at(self) -> Instant {
        match self {
            Phase::Queued(c) | Phase::Sending(c, _) | Phase::Sent(c) | Phase::Lost(c) => c,
        }
    }
}

/// The `claim_owner` value a claimed event was claimed under (set by every claim).
pub(crate) fn owner_of(event: &sea_orm_outbox_entity::event_record::Model) -> &str {
    event.claim_owner.as_deref().unwrap_or_default()
}

impl Inflight {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, HashMap<i64, Phase>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts holding `ids`, claimed now under `owner` (the claim's `claim_owner` value).
    pub(crate) fn claimed(&self, owner: &str, ids: impl IntoIterator<Item = i64>) {
        let now = Instant::now();
        self.lock()
            .entry(owner.to_owned())
            .or_default()
            .extend(ids.into_iter().map(|id| (id, Phase::Queued(now))));
    }

    /// Marks the send of `id` (claimed under `owner`) started; false when its lease is already
    /// lost: such an event is left to its new owner rather than sent twice.
    pub(crate) fn start(&self, owner: &str, id: i64) -> bool {
        self.with(owner, id, |p| match *p {
            Phase::Queued(claimed) => {
                *p = Phase::Sending(claimed, Instant::now());
                true
            }
            _ => false,
        })
        .unwrap_or(false)
    }

    /// Applies `f` to the phase of `id` under `owner`, if held.
    fn with<R>(&self, owner: &str, id: i64, f: impl FnOnce(&mut Phase) -> R) -> Option<R> {
        self.lock()
            .get_mut(owner)
            .and_then(|c| c.get_mut(&id))
            .map(f)
    }

    /// Marks the send of `id` returned; the lease stays renewed until [`Inflight::finish`].
    pub(crate) fn sent(&self, owner: &str, id: i64) {
        self.with(owner, id, |p| {
            if let Phase::Sending(claimed, _) = *p {
                *p = Phase::Sent(claimed);
            }
        });
    }

    /// Whether the lease of `id` under `owner` was found lost (or is not held at all).
    pub(crate) fn is_lost(&self, owner: &str, id: i64) -> bool {
        matches!(self.with(owner, id, |p| *p), None | Some(Phase::Lost(_)))
    }

    /// Stops holding `ids` of `owner`'s claim (their outcome is recorded, or dropped) and
    /// returns each one's claim-to-now time.
    pub(crate) fn finish(&self, owner: &str, ids: &[i64]) -> Vec<Duration> {
        let mut map = self.lock();
        let Some(claim) = map.get_mut(owner) else {
            return Vec::new();
        };
        let took = ids
            .iter()
            .filter_map(|id| claim.remove(id))
            .map(|phase| phase.claimed_at().elapsed())
            .collect();
        if claim.is_empty() {
            map.remove(owner);
        }
        took
    }

    /// The leases to renew now, by claim (its `claim_owner` value, its ids ascending): queued,
    /// sent and awaiting their record, or sending for less than `hung_after` (a send running
    /// longer is hung: its lease must expire so that another instance can take over).
    pub(crate) fn renewable(&self, hung_after: Duration) -> Vec<(String, Vec<i64>)> {
        let mut out: Vec<(String, Vec<i64>)> = self
            .lock()
            .iter()
            .map(|(owner, claim)| {
                let mut ids: Vec<i64> = claim
                    .iter()
                    .filter_map(|(id, phase)| match phase {
                        Phase::Queued(_) | Phase::Sent(_) => Some(*id),
                        Phase::Sending(_, started) if started.elapsed() < hung_after => Some(*id),
                        _ => None,
                    })
                    .collect();
                ids.sort_unstable();
                (owner.clone(), ids)
            })
            .filter(|(_, ids)| !ids.is_empty())
            .collect();
        out.sort_by_key(|(_, ids)| ids[0]);
        out
    }

    /// Marks `ids` of `owner`'s claim lost: they are neither sent nor recorded. Returns the
    /// ones still held (an id whose outcome was recorded while the renewal ran is not lost: its
    /// row left `SENDING` by this worker's own mark).
    pub(crate) fn lose(&self, owner: &str, ids: &[i64]) -> Vec<i64> {
        let mut map = self.lock();
        let Some(claim) = map.get_mut(owner) else {
            return Vec::new();
        };
        let mut lost = Vec::new();
        for id in ids {
            if let Some(phase) = claim.get_mut(id) {
                *phase = Phase::Lost(phase.claimed_at());
                lost.push(*id);
            }
        }
        lost
    }

    /// Events held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_renewed_from_claim_until_its_record() {
        let f = Inflight::default();
        f.claimed("me#1", [1, 2, 3]);
        assert!(f.start("me#1", 1));
        assert!(f.start("me#1", 2));
        f.sent("me#1", 2);
        assert_eq!(
            f.renewable(Duration::from_secs(60)),
            vec![("me#1".to_owned(), vec![1, 2, 3])]
        );
        // A send running past `hung_after` is no longer renewed; a sent one still is.
        assert_eq!(
            f.renewable(Duration::ZERO),
            vec![("me#1".to_owned(), vec![2, 3])]
        );
        f.lose("me#1", &[3]);
        assert!(f.is_lost("me#1", 3) && !f.start("me#1", 3));
        assert_eq!(f.finish("me#1", &[1, 2, 3]).len(), 3);
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn a_second_claim_of_one_event_is_held_apart_from_the_first() {
        let f = Inflight::default();
        f.claimed("me#1", [7]);
        assert!(f.start("me#1", 7));
        // The lease lapsed, the event was reclaimed and claimed again by the same instance.
        f.claimed("me#2", [7]);
        assert!(!f.is_lost("me#2", 7) && !f.is_lost("me#1", 7));
        assert_eq!(f.finish("me#1", &[7]).len(), 1);
        assert!(f.is_lost("me#1", 7), "the first claim is no longer held");
        assert!(f.start("me#2", 7), "the second claim is untouched");
        assert!(f.is_lost("other#9", 7));
    }
}
