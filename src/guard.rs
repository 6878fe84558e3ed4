//! The held lock: its validity, extend, release, loss, and what happens on drop.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{key_display, Error, Op, Result};
use crate::fanout::{fan_out, read_extend, read_release, Stragglers};
use crate::lock::Shared;
use crate::quorum::{self, Decision};
use crate::scripts::{release_channel, Call, EXTEND, RELEASE};

/// One acquisition: key, holder value and the deadline until which it may be trusted.
pub(crate) struct Lease {
    pub(crate) key: Arc<[u8]>,
    pub(crate) holder: String,
    state: Mutex<LeaseState>,
}

struct LeaseState {
    ttl: Duration,
    deadline: Instant,
    lost: bool,
}

impl Lease {
    pub(crate) fn new(key: Arc<[u8]>, holder: String, ttl: Duration, deadline: Instant) -> Lease {
        Lease {
            key,
            holder,
            state: Mutex::new(LeaseState {
                ttl,
                deadline,
                lost: false,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The deadline, or `None` once the lease is lost or past it.
    fn live_deadline(&self) -> Option<Instant> {
        let s = self.state();
        (!s.lost && Instant::now() < s.deadline).then_some(s.deadline)
    }
}

/// A held lock. Dropping it releases the lock in the background (best effort, bounded by the
/// node timeout); call [`release`](Self::release) to learn whether a quorum confirmed.
///
/// `Send + Sync + 'static`: it can move into spawned tasks.
#[must_use = "dropping a guard releases the lock at once"]
pub struct LockGuard {
    shared: Arc<Shared>,
    lease: Arc<Lease>,
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &key_display(&self.lease.key))
            .field("validity", &self.validity())
            .field("held", &self.is_held())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(shared: Arc<Shared>, lease: Lease) -> LockGuard {
        LockGuard {
            shared,
            lease: Arc::new(lease),
            released: false,
        }
    }

    /// The lock key.
    pub fn key(&self) -> &[u8] {
        &self.lease.key
    }

    /// The random value that proves ownership on the nodes. Anyone who knows it can release
    /// the lock: do not publish it.
    pub fn holder(&self) -> &str {
        &self.lease.holder
    }

    /// The TTL of the latest acquire or extend.
    pub fn ttl(&self) -> Duration {
        self.lease.state().ttl
    }

    /// The instant until which the lock may be trusted: the start of the latest acquire or
    /// extend, plus its TTL, minus the drift allowance.
    pub fn deadline(&self) -> Instant {
        self.lease.state().deadline
    }

    /// The time the lock may still be trusted (it shrinks); zero once lost or expired.
    pub fn validity(&self) -> Duration {
        self.lease.live_deadline().map_or(Duration::ZERO, |d| {
            d.saturating_duration_since(Instant::now())
        })
    }

    /// Whether the lock may still be trusted: not lost, not released and before its deadline.
    pub fn is_held(&self) -> bool {
        !self.released && self.lease.live_deadline().is_some()
    }

    fn mark_lost(&self) {
        let mut s = self.lease.state();
        if !s.lost {
            s.lost = true;
            self.shared.counters.lost.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key = %key_display(&self.lease.key), "lock lost");
        }
    }

    fn lost_error(&self) -> Error {
        Error::LockLost {
            key: key_display(&self.lease.key),
        }
    }

    /// Extends the lock to `ttl` from now on every node that still holds it for this holder.
    ///
    /// Succeeds only when a quorum confirms before the current validity ends; the new deadline
    /// is measured from the start of this call. Never re-creates an expired entry, so an
    /// expired lock stays lost.
    ///
    /// # Errors
    /// [`Error::LockLost`] (and the guard is lost from then on) when the validity ran out or
    /// too many nodes no longer hold the lock; [`Error::NoQuorum`] when nodes failed to answer
    /// but the current validity still stands (the guard stays held until its deadline);
    /// [`Error::InvalidTtl`].
    ///
    /// # Cancel safety
    /// Cancel safe: a cancelled extend leaves the current deadline in force (some nodes may
    /// have extended, which only keeps the lock longer on them).
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        let config = &self.shared.config;
        let ttl = config.check_ttl(ttl)?;
        let Some(current) = (!self.released)
            .then(|| self.lease.live_deadline())
            .flatten()
        else {
            self.mark_lost();
            return Err(self.lost_error());
        };
        let ttl_ms = ttl.as_millis().to_string();
        let call = Call::new(
            &EXTEND,
            &self.lease.key,
            &[self.lease.holder.as_bytes(), ttl_ms.as_bytes()],
        );
        let start = Instant::now();
        let nodes = &self.shared.nodes;
        // A quorum confirmed after the current deadline proves nothing: the lock may have
        // expired in between.
        let fan = fan_out(
            nodes,
            config.required,
            call,
            read_extend,
            Stragglers::Finish,
        );
        let Ok(outcome) = tokio::time::timeout_at(current, fan).await else {
            self.mark_lost();
            return Err(self.lost_error());
        };
        let drift = quorum::drift(ttl, config.drift_factor);
        match outcome.decision {
            Decision::Reached if quorum::validity(ttl, start.elapsed(), drift).is_some() => {
                let mut s = self.lease.state();
                s.ttl = ttl;
                s.deadline = start + ttl - drift;
                self.shared
                    .counters
                    .extended
                    .fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            // Enough nodes said the entry is gone that no quorum can hold it any more.
            _ if nodes.len() - outcome.tally.refused() < config.required => {
                self.mark_lost();
                Err(self.lost_error())
            }
            _ => Err(Error::NoQuorum {
                op: Op::Extend,
                key: key_display(&self.lease.key),
                confirmed: outcome.tally.yes(),
                required: config.required,
                refused: outcome.tally.refused(),
                failures: outcome.failures,
            }),
        }
    }

    /// Releases the lock on every node (compare-and-delete) and reports whether a quorum
    /// confirmed that this holder still held it.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when fewer than a quorum confirmed, or the guard was already lost:
    /// the critical section may have overlapped with another holder's.
    ///
    /// # Cancel safety
    /// Not cancel safe in its report: if cancelled, the release may or may not have reached
    /// the nodes; the entries expire with their TTL in any case.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let was_lost = self.lease.state().lost;
        let outcome = release_on_nodes(&self.shared, &self.lease).await;
        let confirmed = outcome.tally.yes();
        if outcome.decision == Decision::Reached && !was_lost {
            self.shared
                .counters
                .released
                .fetch_add(1, Ordering::Relaxed);
            Ok(())
        } else {
            self.shared
                .counters
                .release_failed
                .fetch_add(1, Ordering::Relaxed);
            Err(Error::NotHeld {
                key: key_display(&self.lease.key),
                confirmed,
                required: self.shared.config.required,
                failures: outcome.failures,
            })
        }
    }
}

async fn release_on_nodes(shared: &Shared, lease: &Lease) -> crate::fanout::Outcome {
    let channel = release_channel(&lease.key);
    let call = Call::new(
        &RELEASE,
        &lease.key,
        &[lease.holder.as_bytes(), &channel, b"0"],
    );
    fan_out(
        &shared.nodes,
        shared.config.required,
        call,
        read_release,
        Stragglers::Finish,
    )
    .await
}

impl Drop for LockGuard {
    /// Never blocks: with a tokio runtime at hand, the release runs as a background task
    /// bounded by the node timeout; without one, the entries simply expire with their TTL.
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let shared = self.shared.clone();
            let lease = self.lease.clone();
            handle.spawn(async move {
                release_on_nodes(&shared, &lease).await;
            });
        }
    }
}
