//! A permit of a semaphore of P permits as P slots (docs/DESIGN.md, "Semaphores"): the keys
//! `K#0` .. `K#P-1`, each a mutex over the nodes. A permit is one slot held, so a permit has
//! every property of a lock (its quorum, watchdog, fencing token per slot, loss signal,
//! lock delay, fast failure with a frozen node) under any quorum, and at most P clients hold
//! one at once: a slot's holders are a mutex's. A request tries each slot once, starting at a
//! random one (the clients spread over the slots), and a waiting one sleeps between rounds
//! until any slot's release notice or its pause.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::OwnedNotified;
use tokio::time::Instant;

use super::attempt::once;
use super::plan::{Spec, Target};
use crate::error::{Error, Result};
use crate::hold::guard::LockGuard;
use crate::rules::backoff::Backoff;
use crate::rules::config::check_duration;
use crate::rules::key::Key;
use crate::state::ClientState;
use crate::wakeup::Waiter;

/// The most permits a semaphore of slots may have (each round tries every slot).
#[allow(unreachable_pub)] // re-exported at the crate root
pub const MAX_SLOTS: u32 = 1024;

/// The key of slot `i` of the semaphore `key`: `key#i` (a hash tag in `key` is kept, so that
/// on a cluster node every slot shares the key's slot when the key has a tag).
pub(crate) fn slot_key(key: &[u8], i: u32) -> Vec<u8> {
    let mut slot = key.to_vec();
    slot.extend_from_slice(format!("#{i}").as_bytes());
    slot
}

/// Checks a semaphore of slots: its key, and 1 to [`MAX_SLOTS`] permits.
pub(crate) fn check(key: &[u8], permits: u32) -> Result<()> {
    Key::new(key)?;
    if permits == 0 || permits > MAX_SLOTS {
        return Err(Error::InvalidConfig {
            field: "permits",
            reason: format!("{permits}: a semaphore has 1 to {MAX_SLOTS} permits"),
        });
    }
    // The longest slot's name must be a key too: every slot, whichever a round starts at.
    Key::new(&slot_key(key, permits - 1)).map_err(|e| match e {
        Error::InvalidKey { reason } => Error::InvalidKey {
            reason: format!(
                "its slot {} (the key with #{}): {reason}",
                permits - 1,
                permits - 1
            ),
        },
        e => e,
    })?;
    Ok(())
}

/// The request for slot `i`: the caller's settings, for one key's mutex.
fn slot_spec<'a>(spec: &Spec<'a>, key: &[u8], i: u32) -> Spec<'a> {
    Spec {
        target: Target::Key(slot_key(key, i)),
        lease: spec.lease,
        max_hold: spec.max_hold,
        wait: None,
        fencing: spec.fencing,
        owner: None,
        label: None,
    }
}

/// A failure of the nodes (rather than of the request itself, which every slot would repeat
/// at once): the other slots are still tried, and a waiting request tries again after its
/// pause.
fn of_the_nodes(e: &Error) -> bool {
    matches!(e, Error::NoQuorum { .. } | Error::Unreachable { .. })
}

/// How a request for a slot ended, short of an error.
enum Taken {
    Held(LockGuard),
    /// Every slot held until the wait ended (a single round: at once).
    Full {
        waited: Duration,
        attempts: u32,
    },
}

/// Waits for a slot of the semaphore of `spec` ([`Target::Slots`]) until the request's wait
/// ends ([`Error::WaitTimeout`]) or the client's retries run out.
///
/// Cancel safe: a slot taken by a round that is dropped is released in the background, as
/// a dropped acquire's lock is.
pub(crate) async fn acquire(state: &Arc<ClientState>, spec: Spec<'_>) -> Result<LockGuard> {
    let key = slots_key(&spec);
    match take(state, spec, true).await? {
        Taken::Held(guard) => Ok(guard),
        Taken::Full { waited, attempts } => Err(Error::WaitTimeout {
            key,
            waited,
            attempts,
        }),
    }
}

/// One round over the slots of `spec`'s semaphore: `Ok(None)` when every slot is held.
///
/// Cancel safe, as [`acquire`].
pub(crate) async fn try_acquire(
    state: &Arc<ClientState>,
    spec: Spec<'_>,
) -> Result<Option<LockGuard>> {
    match take(state, spec, false).await? {
        Taken::Held(guard) => Ok(Some(guard)),
        Taken::Full { .. } => Ok(None),
    }
}

/// The semaphore's key, as errors name it.
fn slots_key(spec: &Spec<'_>) -> String {
    match &spec.target {
        Target::Slots { key, .. } => String::from_utf8_lossy(key).into_owned(),
        other => format!("{other:?}"),
    }
}

async fn take(state: &Arc<ClientState>, spec: Spec<'_>, waiting: bool) -> Result<Taken> {
    let Target::Slots { key, permits } = &spec.target else {
        return Err(Error::InvalidConfig {
            field: "permits",
            reason: format!("{:?} is not a semaphore of slots", spec.target),
        });
    };
    let (key, permits) = (key.as_slice(), *permits);
    check(key, permits)?;
    let wait = match (waiting, spec.wait) {
        (false, _) => Duration::ZERO,
        (true, Some(wait)) => {
            check_duration("wait", wait)?;
            wait
        }
        (true, None) => state.config.wait_timeout,
    };
    let start = Instant::now();
    let deadline = start + wait;
    // The slots a round tries (one more under the fail point SlotBeyondPermits).
    let beyond = crate::failpoints::on(crate::failpoints::FailPoint::SlotBeyondPermits);
    let permits = permits + u32::from(beyond);
    let first = rand::random_range(0..permits);
    // Only a waiting request listens for releases (a single round needs no channel).
    let mut waiters = Vec::with_capacity(permits as usize);
    for i in (0..permits).filter(|_| waiting) {
        let slot = Key::new(&slot_key(key, i))?;
        let mut waiter = Waiter::new(state.wakeups.as_ref(), slot.release_channel());
        // Each round tries every slot: no turn among this client's waiters of one slot.
        waiter.take_turn_first();
        waiters.push(waiter);
    }
    let mut backoff = Backoff::new(state.config.retry_delay, state.config.retry_jitter);
    let mut attempts: u32 = 0;
    loop {
        // Enabled before the round: a release while it runs is not missed.
        let mut notices: Vec<Pin<Box<OwnedNotified>>> = waiters
            .iter()
            .filter_map(Waiter::channel)
            .map(|c| {
                let mut n = Box::pin(c.notify().clone().notified_owned());
                n.as_mut().enable();
                n
            })
            .collect();
        let mut failure = None;
        for j in 0..permits {
            // A waiting round stops at the wait's end (a single round tries every slot).
            if waiting && j > 0 && Instant::now() >= deadline {
                break;
            }
            let i = (first + j) % permits;
            attempts = attempts.saturating_add(1);
            match once(state, slot_spec(&spec, key, i)).await {
                Ok(Some(guard)) => return Ok(Taken::Held(guard)),
                Ok(None) => {}
                Err(e) if of_the_nodes(&e) => failure = failure.or(Some(e)),
                Err(e) => return Err(e),
            }
        }
        let rounds_left = state
            .config
            .max_retries
            .is_none_or(|max| attempts / permits <= max);
        let full = || Taken::Full {
            waited: start.elapsed(),
            attempts,
        };
        if Instant::now() >= deadline || !rounds_left {
            return match failure {
                Some(e) => Err(e),
                None => Ok(full()),
            };
        }
        let contended = failure.is_none();
        if contended {
            // Every slot's channel (each subscription waits at most the node timeout), then
            // a round at once where one was just made: a release before it went unheard.
            let subscribing = futures::future::join_all(waiters.iter_mut().map(|w| w.subscribe()));
            match tokio::time::timeout_at(deadline, subscribing).await {
                Ok(subscribed) if subscribed.contains(&true) => continue,
                Ok(_) => {}
                Err(_) => return Ok(full()),
            }
        }
        let pause = backoff.pause(contended, None, rand::random());
        let sleep = tokio::time::sleep_until((Instant::now() + pause).min(deadline));
        let counters = &state.counters;
        if notices.is_empty() {
            sleep.await;
            counters.wakeup(false);
            continue;
        }
        let notice = futures::future::select_all(notices.iter_mut().map(|n| n.as_mut()));
        tokio::select! {
            _ = notice => {
                tracing::trace!("a slot's release notice");
                counters.wakeup(true);
                backoff.woken();
            }
            () = sleep => counters.wakeup(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_numbered_after_the_key_and_bounded() {
        assert_eq!(slot_key(b"{pool}:gpu", 2), b"{pool}:gpu#2".to_vec());
        assert!(check(b"pool", 3).is_ok());
        for bad in [0, MAX_SLOTS + 1] {
            assert!(matches!(
                check(b"pool", bad),
                Err(Error::InvalidConfig {
                    field: "permits",
                    ..
                })
            ));
        }
        assert!(matches!(check(b"", 2), Err(Error::InvalidKey { .. })));
    }
}
