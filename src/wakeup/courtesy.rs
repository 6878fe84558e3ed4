//! The courtesy of a client that just released a key others wait for: its next wait for the
//! key lets them go first (docs/DESIGN.md, "Waiting").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::Wakeups;
use crate::family::Shape;

/// How long a client that just released a key, with other clients' waiters listening, lets
/// them go first when it asks for the key again (see [`Courtesy`]).
pub(crate) const COURTESY: Duration = Duration::from_millis(2);
/// A release counts as "just" for this long.
const COURTESY_WINDOW: Duration = Duration::from_millis(10);
/// Releases remembered at most (older ones are dropped first).
const COURTESY_KEYS: usize = 1024;

/// The mutex keys this client released while other clients waited for them, and when.
///
/// A client that releases a key and asks for it again at once would otherwise win it back
/// nearly every time: its attempt reaches the nodes before the release notice has woken
/// anyone else (the "barging" of an unfair lock), and with the ordered approach the woken
/// waiters then only ask the arbiter and go back to sleep. So when the release's notice was
/// heard by subscribers other than this client's own, a new wait for the key within
/// [`COURTESY_WINDOW`] of the release starts as a waiter that lost: it pauses [`COURTESY`]
/// (never past its wait), then asks the arbiter. By then a woken waiter of another client has
/// usually been given the key, and this client waits behind it like everybody else. (Waiting
/// for the next release notice instead, as a refused waiter does, took notices meant for the
/// client's own waiters.) This bounds how unevenly the key goes round
/// without a queue; the fair lock is the one with an order.
#[derive(Default)]
pub(crate) struct Courtesy {
    released: Mutex<HashMap<Vec<u8>, Instant>>,
}

impl Courtesy {
    /// A release of `shape` that a quorum confirmed, whose largest answer was `answered`:
    /// for a courteous kind (see `Kind::courteous`; the mutex release answers 1 + the
    /// subscribers that heard its notice), remembers the key when subscribers other than this
    /// client's own heard it.
    pub(crate) fn after_release(
        &self,
        shape: &Shape,
        answered: Option<i64>,
        wakeups: Option<&Wakeups>,
    ) {
        if !shape.kind().courteous() {
            return;
        }
        let key = shape.primary();
        let own = wakeups.is_some_and(|w| w.listens(key.release_channel()));
        let heard = answered.unwrap_or(1) - 1;
        self.released(key.bytes(), heard - i64::from(own));
    }

    /// This client released `key` and `others` subscribers of other clients heard it.
    fn released(&self, key: &[u8], others: i64) {
        if others <= 0 {
            return;
        }
        let now = Instant::now();
        let mut released = self.released.lock().unwrap_or_else(|p| p.into_inner());
        if released.len() >= COURTESY_KEYS {
            released.retain(|_, at| now.duration_since(*at) < COURTESY_WINDOW);
        }
        if released.len() < COURTESY_KEYS {
            released.insert(key.to_vec(), now);
        }
    }

    /// Whether a new wait for `key` owes others the courtesy (taken once).
    pub(crate) fn owed(&self, key: &[u8]) -> bool {
        let mut released = self.released.lock().unwrap_or_else(|p| p.into_inner());
        if released.is_empty() {
            return false;
        }
        released
            .remove(key)
            .is_some_and(|at| at.elapsed() < COURTESY_WINDOW)
    }
}
