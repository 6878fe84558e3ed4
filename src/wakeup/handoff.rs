//! The fair lock's waiters within a client (docs/DESIGN.md, "Fair lock"), and the hand-off of
//! a release to one of them, which then holds without a round trip of its own. (Tickets are
//! drawn in `take::fair`, with the other rounds of a request.)
//!
//! # Hand-off within a client
//!
//! A fair release hands the free key to the first waiter in line on each node (the release
//! script's `grant`). The release names the waiters of this client it may hand the lock to
//! itself ([`FairWaiters::waiting_before`]); a node grants one of those the key for its whole
//! TTL (`SET key waiter-holder PX waiter-ttl`), any other waiter only for its claim window
//! (a short grant, which a waiter that does not claim it in time loses, with its place). When a
//! quorum of nodes answers that it granted the same waiter the whole TTL, and that waiter
//! still waits in this client, the releasing task gives it the lock directly: its entries were
//! set by the release's own requests, so they expire no earlier than the release's first send
//! plus the waiter's TTL, and its deadline is measured from that send (invariant 2), as an
//! acquire's is from its own.
//!
//! Only a waiter with no attempt of its own in flight may be handed the lock: an attempt
//! that meets the key the release just granted claims it (sets its own attempt's value), and
//! if the attempt then fails, its rollback deletes it. So a waiter marks itself attempting
//! before each attempt, and waiting (with a stamp from [`FairWaiters::stamp`]) only after its rollback was
//! written onto every connection (ordering invariant 5). A release takes a stamp before it
//! sends anything; it hands off only to a waiter whose waiting stamp is older, whose rollback
//! therefore runs on every node before the release's grant. A waiter handed the lock makes no
//! further attempt, and its guard holds the grant's value (`<base>:g`, see `family::Fair`),
//! which no rollback of the request matches. Any other waiter claims its grant with an
//! attempt of its own, which finds a value of its base on the key and sets its own from the
//! attempt's start.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::family::Shape;
use crate::fanout::ordering::Stragglers;
use crate::fanout::Outcome;
use crate::rules::config::Config;
use crate::wakeup::Noticed;

/// A release of a kind that hands the lock to waiters (see [`FairWaiters::before_release`]),
/// from before it is sent until its quorum's answers were read.
pub(crate) struct HandingOff {
    /// Marks the release in flight.
    releasing: Releasing,
    /// Taken before anything was sent.
    stamp: u64,
    /// This client's waiters the release may hand the lock to itself.
    sure: Vec<(Arc<str>, u64)>,
    /// When the release was about to be sent.
    sent: Instant,
}

impl HandingOff {
    /// The waiters of this client that the release may hand the lock to itself, with the
    /// round each waits after (for the release script).
    pub(crate) fn sure(&self) -> &[(Arc<str>, u64)] {
        &self.sure
    }

    /// After a quorum confirmed the release: hands the lock to a waiter of this client if a
    /// quorum granted it the whole TTL (see [`FairWaiters::hand_off`]); `in_flight` goes
    /// with it.
    pub(crate) fn confirmed(
        self,
        config: &Config,
        outcome: &Outcome,
        in_flight: &mut Option<Stragglers>,
    ) {
        tracing::trace!(
            granted = ?outcome
                .granted
                .iter()
                .map(|(w, ms)| (String::from_utf8_lossy(w), ms))
                .collect::<Vec<_>>(),
            "fair release confirmed"
        );
        let waiters = self.releasing.waiters.clone();
        waiters.hand_off(config, self.stamp, self.sent, outcome, in_flight);
        drop(self.releasing);
    }
}

/// The fair waiters of one client, by waiter id.
#[derive(Default)]
pub(crate) struct FairWaiters {
    /// Orders waiters' "waiting since" against releases' starts (see the module docs).
    epoch: AtomicU64,
    slots: Mutex<HashMap<Arc<str>, Arc<Slot>>>,
    /// Keys with fair releases of this client in flight, and how many.
    releasing: Mutex<HashMap<Vec<u8>, usize>>,
    /// Told whenever such a release ends.
    released: Notify,
}

/// One waiting fair request, as a release of the same client sees it.
pub(crate) struct Slot {
    state: Mutex<SlotState>,
    /// The key it waits for.
    key: Vec<u8>,
    /// Wakes the waiter: a hand-off, or a quorum of nodes announcing a grant to it.
    pub(crate) notify: Arc<Notify>,
    /// Wakes the waiter at the end of the claim window of a short grant to the waiter before
    /// it, which it takes over if the grant lapsed (see `wakeup`).
    pub(crate) lapse: Arc<Notify>,
    /// The short grants to it that their notices told of (see [`Noticed`]).
    pub(crate) noticed: Arc<Noticed>,
    /// The TTL of its guard (its deadline is measured with it).
    ttl: Duration,
    /// The TTL in ms the nodes set its entry with when they grant it the whole TTL.
    grant_ms: i64,
}

enum SlotState {
    /// An attempt of its own is in flight (or about to be): no hand-off.
    Attempting,
    /// Its last rollback was written before the stamp was taken; `round` is its last
    /// attempt's (a hand-off to it sets a value only its later attempts may claim).
    Waiting { since: u64, round: u64 },
    /// A release handed it the lock.
    Granted(Grant),
}

/// The lock handed to a waiter by a release of its own client.
pub(crate) struct Grant {
    /// When the release was first sent: the grant's validity runs from there.
    pub(crate) sent: Instant,
    /// The release's first send plus the waiter's TTL, less the drift allowance.
    pub(crate) deadline: Instant,
    /// The release's requests still running on the slower nodes.
    pub(crate) in_flight: Option<Stragglers>,
    /// The waiter's last attempt before it: the nodes set the key to the request's hand-off
    /// value for that round (see `family::Fair::handed_holder`).
    pub(crate) round: u64,
}

impl FairWaiters {
    fn slots(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn releasing_keys(&self) -> MutexGuard<'_, HashMap<Vec<u8>, usize>> {
        self.releasing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before a release of `shape` is sent: for a kind that hands off to waiters (see
    /// `Kind::hands_off`), marks the release in flight, and takes the stamp, the waiters it
    /// may hand the lock to and the instant, before anything is sent; `None` for the others.
    pub(crate) fn before_release(self: &Arc<Self>, shape: &Shape) -> Option<HandingOff> {
        if !shape.kind().hands_off() {
            return None;
        }
        let key = shape.primary().bytes();
        let releasing = self.releasing(key);
        let stamp = self.stamp();
        let sure = self.waiting_before(key, stamp);
        Some(HandingOff {
            releasing,
            stamp,
            sure,
            sent: Instant::now(),
        })
    }

    /// Marks a fair release of `key` in flight until the returned mark is dropped (after its
    /// hand-off, if any).
    fn releasing(self: &Arc<Self>, key: &[u8]) -> Releasing {
        *self.releasing_keys().entry(key.to_vec()).or_default() += 1;
        Releasing {
            waiters: self.clone(),
            key: key.to_vec(),
        }
    }

    /// Waits until no fair release of `key` by this client is in flight. A waiter woken by
    /// the notices of a grant to it must not claim it with an attempt of its own while this
    /// client's release that made the grant may still hand it over (the notices and the
    /// release's answers arrive in either order): its attempt would only cost a round trip,
    /// and rule the hand-off out.
    pub(crate) async fn after_local_releases(&self, key: &[u8]) {
        loop {
            let ended = self.released.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !self.releasing_keys().contains_key(key) {
                return;
            }
            ended.await;
        }
    }

    /// A stamp later than every stamp taken before it.
    pub(crate) fn stamp(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::SeqCst)
    }

    /// Registers a waiting request for `key` whose guard would have `ttl` and whose entries
    /// the nodes set for `grant_ms`; it leaves when the returned registration is dropped.
    pub(crate) fn register(
        self: &Arc<Self>,
        key: &[u8],
        waiter: &Arc<str>,
        ttl: Duration,
        grant_ms: i64,
    ) -> Registration {
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Attempting),
            key: key.to_vec(),
            notify: Arc::new(Notify::new()),
            lapse: Arc::new(Notify::new()),
            noticed: Arc::default(),
            ttl,
            grant_ms,
        });
        self.slots().insert(waiter.clone(), slot.clone());
        Registration {
            waiters: self.clone(),
            waiter: waiter.clone(),
            slot,
        }
    }

    /// The waiters of `key` in this client that wait since before `stamp`: those a release
    /// that took `stamp` may hand the lock to, and so asks the nodes to grant the whole TTL.
    /// (A waiter that starts waiting while this runs may be missed: it is then granted a
    /// short grant, and [`hand_off`](Self::hand_off) sees that from the answers.)
    fn waiting_before(&self, key: &[u8], stamp: u64) -> Vec<(Arc<str>, u64)> {
        self.slots()
            .iter()
            .filter(|(_, slot)| slot.key == key)
            .filter_map(|(waiter, slot)| {
                match *slot.state.lock().unwrap_or_else(|p| p.into_inner()) {
                    SlotState::Waiting { since, round } if since < stamp => {
                        Some((waiter.clone(), round))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// After a release that a quorum confirmed: if a quorum of nodes granted one waiter of this
    /// client the whole TTL, and it was waiting since before `stamp` (taken before the release
    /// was sent at `sent`), gives it the lock; `in_flight` goes with it.
    fn hand_off(
        &self,
        config: &Config,
        stamp: u64,
        sent: Instant,
        outcome: &Outcome,
        in_flight: &mut Option<Stragglers>,
    ) {
        let required = config.required;
        let Some((waiter, ms)) = quorum_granted(&outcome.granted, required) else {
            return;
        };
        let Ok(waiter) = std::str::from_utf8(waiter) else {
            return;
        };
        let Some(slot) = self.slots().get(waiter).cloned() else {
            return;
        };
        // Only a grant of the whole TTL on a quorum carries the deadline computed below; a
        // short grant is claimed by the waiter's own attempt.
        if ms != slot.grant_ms {
            return;
        }
        let mut state = slot.state.lock().unwrap_or_else(|p| p.into_inner());
        let round = match *state {
            SlotState::Waiting { since, round } if since < stamp => round,
            _ => return,
        };
        let deadline = config.trusted_until(sent, slot.ttl);
        if config.validity(deadline, Instant::now()).is_none() {
            return;
        }
        *state = SlotState::Granted(Grant {
            sent,
            deadline,
            in_flight: in_flight.take(),
            round,
        });
        drop(state);
        slot.notify.notify_one();
    }
}

/// A fair release in flight (see [`FairWaiters::releasing`]).
pub(crate) struct Releasing {
    waiters: Arc<FairWaiters>,
    key: Vec<u8>,
}

impl Drop for Releasing {
    fn drop(&mut self) {
        let mut keys = self.waiters.releasing_keys();
        if let Some(n) = keys.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&self.key);
            }
        }
        drop(keys);
        self.waiters.released.notify_waiters();
    }
}

/// The waiter that at least `required` nodes granted the key to for the same TTL, if any.
fn quorum_granted(granted: &[(Vec<u8>, i64)], required: usize) -> Option<(&[u8], i64)> {
    granted
        .iter()
        .find(|w| granted.iter().filter(|o| o == w).count() >= required)
        .map(|(w, ms)| (w.as_slice(), *ms))
}

/// A waiting request's place among its client's fair waiters.
pub(crate) struct Registration {
    waiters: Arc<FairWaiters>,
    waiter: Arc<str>,
    pub(crate) slot: Arc<Slot>,
}

impl Registration {
    fn state(&self) -> MutexGuard<'_, SlotState> {
        self.slot.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before an attempt: the lock, if a release handed it over; otherwise the waiter is
    /// marked attempting, so that no release hands it over until it waits again.
    pub(crate) fn take_grant_or_attempt(&self) -> Option<Grant> {
        let mut state = self.state();
        match std::mem::replace(&mut *state, SlotState::Attempting) {
            SlotState::Granted(grant) => Some(grant),
            _ => None,
        }
    }

    /// After failed attempt `round`, whose rollback is written: waiting, from a fresh stamp.
    pub(crate) fn waiting(&self, round: u64) {
        let mut state = self.state();
        *state = SlotState::Waiting {
            since: self.waiters.stamp(),
            round,
        };
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.waiters.slots().remove(&self.waiter);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_off_needs_a_quorum_of_grants_to_one_waiter_for_one_ttl() {
        let g = |w: &str, ms: i64| (w.as_bytes().to_vec(), ms);
        assert_eq!(quorum_granted(&[g("a", 9), g("b", 9), g("a", 9)], 3), None);
        assert_eq!(
            quorum_granted(&[g("a", 9), g("b", 9), g("a", 9), g("a", 9)], 3),
            Some((&b"a"[..], 9))
        );
        // Short grants (cut by each node's queue lease) do not add up with whole ones.
        assert_eq!(
            quorum_granted(&[g("a", 9), g("a", 3), g("a", 9), g("a", 2)], 3),
            None
        );
        assert_eq!(quorum_granted(&[], 1), None);
    }
}
