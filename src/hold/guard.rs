//! The held lock as the caller sees it: validity, extend, release, the loss signal, and what
//! happens on drop.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::hold::lease::Lease;
use crate::hold::lost_signal::LostSignal;
use crate::hold::reentry::HoldTable;
use crate::rules::quorum::Decision;
use crate::telemetry::ReleasedBy;

/// A held lock. Dropping it releases the lock in the background (best effort: after a renewal
/// in flight, if any, and within about twice the node timeout after that); call
/// [`release`](Self::release) to learn whether a quorum confirmed.
///
/// `Send + Sync + 'static`: it can move into spawned tasks.
///
/// # Examples
///
/// ```no_run
/// # use std::time::Duration;
/// # use quorum_lock::QuorumLock;
/// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
/// let guard = locks.acquire("stock:mooncake", Duration::from_secs(10)).await?;
/// // Check before an irreversible side effect: the lock may have been lost.
/// if guard.is_held() {
///     guard.extend(Duration::from_secs(10)).await?; // never revives an expired lock
/// }
/// match guard.release().await {
///     Ok(()) => {}
///     // The section may have overlapped another holder's.
///     Err(e) => eprintln!("release: {e}"),
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping a guard releases the lock at once"]
pub struct LockGuard {
    lease: Arc<Lease>,
    /// The reentrant owner's table, for an owner's guard.
    owner: Option<Arc<HoldTable>>,
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.lease.shape)
            .field("validity", &self.validity())
            .field("held", &self.is_held())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(lease: Arc<Lease>, owner: Option<Arc<HoldTable>>) -> LockGuard {
        LockGuard {
            lease,
            owner,
            released: false,
        }
    }

    /// Completes when someone asked the holder to release
    /// ([`QuorumLock::request_release`](crate::QuorumLock::request_release)); at once when
    /// that happened already. Cooperative: the lock stays held until released (or lost).
    pub async fn release_requested(&self) {
        self.lease.asked.wait().await
    }

    /// Whether someone asked the holder to release.
    pub fn is_release_requested(&self) -> bool {
        self.lease.asked.is_asked()
    }

    /// The lease this guard shares.
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The lock key; for a multi-key lock ([`QuorumLock::lock_all`](crate::QuorumLock::lock_all))
    /// the smallest of its keys (see [`keys`](Self::keys)), for a semaphore permit
    /// ([`QuorumLock::semaphore`](crate::QuorumLock::semaphore)) the semaphore's key.
    pub fn key(&self) -> &[u8] {
        self.lease.key.bytes()
    }

    /// Every key this guard holds: one for a lock or a semaphore permit; for a multi-key
    /// lock, its distinct keys in byte order.
    pub fn keys(&self) -> Vec<&[u8]> {
        self.lease.shape.keys().iter().map(|k| k.bytes()).collect()
    }

    /// The random value that proves ownership on the nodes (fresh for every acquisition).
    /// Anyone who knows it can extend or release the lock
    /// ([`QuorumLock::extend_by_holder`](crate::QuorumLock::extend_by_holder),
    /// [`release_by_holder`](crate::QuorumLock::release_by_holder)): hand it only to whom should, and
    /// do not publish it. The calls by holder value act on a mutex or a fair lock, not on a multi-key
    /// lock, a semaphore permit or a read-write lock (see [`into_holder`](Self::into_holder)).
    /// Made from this client while this guard lives, they act through the guard: an extend
    /// moves (or cuts) its deadline, a release ends it and fires its loss signals.
    pub fn holder(&self) -> &str {
        self.lease.holder.as_str()
    }

    /// The fencing token, if the lock was requested with
    /// [`fencing(true)`](crate::LockRequest::fencing): larger than every token handed out for
    /// this key before (under the safety assumptions). Pass it to storage that rejects writes
    /// with a token lower than one it has seen.
    pub fn fencing_token(&self) -> Option<u64> {
        match self.lease.token {
            Some(t)
                if t % 3 == 0
                    && crate::failpoints::on(crate::failpoints::FailPoint::TokenGoesBack) =>
            {
                Some(t.saturating_sub(2))
            }
            token => token,
        }
    }

    /// The TTL of the latest acquire, extend or renewal.
    pub fn ttl(&self) -> Duration {
        self.lease.ttl()
    }

    /// The instant until which the lock may be trusted: the start of the latest acquire,
    /// extend or renewal, plus its TTL, minus the drift allowance; once the lock was lost or
    /// let go (released, also by holder value through this client, or handed off), the
    /// moment that happened, if earlier.
    pub fn deadline(&self) -> Instant {
        self.lease.trusted_until()
    }

    /// The time the lock may still be trusted (it shrinks, and grows again on renewal); zero
    /// once lost, released or expired.
    pub fn validity(&self) -> Duration {
        if self.released {
            return Duration::ZERO;
        }
        self.lease.live_deadline().map_or(Duration::ZERO, |d| {
            d.saturating_duration_since(Instant::now())
        })
    }

    /// Whether the lock may still be trusted: not lost, not released and before its deadline.
    /// Check it before an irreversible side effect.
    pub fn is_held(&self) -> bool {
        !self.released && self.lease.live_deadline().is_some()
    }

    /// Waits until the lock can no longer be trusted: lost (a renewal could not confirm a
    /// quorum before the validity ended), expired, or released. Never later than the validity
    /// deadline.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) {
        self.lost_signal().wait().await;
    }

    /// A `'static` handle on the loss signal, for tasks that do the guarded work.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::new(self.lease.clone())
    }

    /// Extends the lock to `ttl` from now on every node that still holds it for this holder.
    ///
    /// Succeeds only when a quorum confirms before the current validity ends; the new deadline
    /// is measured from the start of this call and takes effect when the quorum confirms. A
    /// `ttl` that ends before the current deadline (a shortening) cuts the deadline *before*
    /// the request is sent, whatever the outcome: the nodes that apply it may let the entry
    /// expire that early, so the guard never claims more than they guarantee. Never re-creates
    /// an expired entry, so an expired lock stays lost. Nested guards of a reentrant owner
    /// share one lease: extending one extends all.
    ///
    /// On a guard kept by the watchdog (taken without a TTL), each renewal sets the lease to
    /// the watchdog lease again, from its own start: an `extend` lasts until the next renewal
    /// (at most a third of the watchdog lease away), whether it was shorter or longer. For a
    /// longer lease use [`Builder::watchdog_lease`](crate::Builder::watchdog_lease); to set
    /// the TTL by hand, take the lock with one. [`extend_by_holder`](crate::QuorumLock::extend_by_holder)
    /// acts through the guard's lease and is undone by its renewals the same way.
    ///
    /// # Errors
    /// [`Error::LockLost`] (and the guard is lost from then on) when the validity ran out or
    /// too many nodes no longer hold the lock; [`Error::NoQuorum`] when nodes failed to answer
    /// but the current validity still stands (the guard stays held until its deadline);
    /// [`Error::InvalidTtl`].
    ///
    /// # Cancel safety
    /// Cancel safe: a cancelled extend leaves the deadline as it was before the call, or the
    /// shortened one if `ttl` shortens the lock (some nodes may have applied it). Its requests
    /// still on their way are ordered before the guard's next extend or release on each node.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        let ttl = self.lease.config().check_ttl(ttl)?;
        if self.released {
            return Err(self.lease.lost_error());
        }
        self.lease.renew(ttl, None).await
    }

    /// Starts the first renewal of a guard held from a quorum's short grants (see
    /// `take::fair`), whose entries last only the claim window: at once, in a task of its own,
    /// for what is left of the TTL since the guard was made (`Lease::renew_first`), unless an
    /// extend starts first. A guard with a `watchdog` leaves it to the watchdog's, due at
    /// once. A renewal that fails leaves the short deadline (or reports the loss). Until one
    /// starts, [`into_holder`](Self::into_holder) sends it by holder value.
    pub(crate) fn renew_first_in_background(&self, watchdog: bool) {
        self.lease.await_first_renewal(Instant::now());
        if watchdog {
            return;
        }
        let lease = self.lease.clone();
        tokio::spawn(async move {
            if let Err(e) = lease.renew_first().await {
                tracing::debug!(key = %lease.key, error = %e, "first renewal failed");
            }
        });
    }

    /// Gives up this guard's hold; true when it was the last one on the lease.
    fn let_go(&mut self) -> bool {
        self.released = true;
        match &self.owner {
            Some(owner) => owner.drop_hold(&self.lease),
            None => self.lease.holds.fetch_sub(1, Ordering::AcqRel) == 1,
        }
    }

    /// Lets go of the guard **without releasing the lock**, and returns its holder value: for
    /// another process to [`extend_by_holder`](crate::QuorumLock::extend_by_holder) or
    /// [`release_by_holder`](crate::QuorumLock::release_by_holder) it. The lock stays on the nodes
    /// until its TTL runs out or it is released by holder value; nothing renews it any more (the
    /// watchdog stops) and its loss signals fire, since this process no longer tracks it.
    /// Unlike `std::mem::forget`, this frees the guard's state and ends its hold in the
    /// metrics. A nested guard of a reentrant owner only gives up its hold; the lock is let go
    /// with the last one.
    ///
    /// # Errors
    /// The guard itself, unchanged, for a multi-key lock, a semaphore permit or a read-write
    /// lock: the calls by holder value act on one key's entry (a mutex's or a fair lock's), so a
    /// set's holder value would extend or release one of its keys only, and a permit's or a reader's
    /// none.
    pub fn into_holder(mut self) -> std::result::Result<String, LockGuard> {
        if !self.lease.shape.kind().by_holder() {
            return Err(self);
        }
        let holder = self.lease.holder.as_str().to_string();
        if self.let_go() {
            // A guard held from short grants whose first renewal has not started: its entries
            // last the claim window only. That renewal goes out now, by holder value, for what
            // is left of the TTL, so that the value given up holds what the guard did.
            if let Some(made) = self.lease.first_renewal_due() {
                let (lease, value) = (self.lease.clone(), holder.clone());
                let ttl = self.lease.ttl().saturating_sub(made.elapsed());
                crate::fanout::ordering::write_now_finish_later(
                    self.lease.background(),
                    async move {
                        let key = lease.key.bytes();
                        let _ =
                            crate::hold::by_holder::extend(lease.client(), key, &value, ttl).await;
                    },
                );
            }
            self.lease.end();
        }
        Ok(holder)
    }

    /// The report of a nested guard whose shared lease is no longer live.
    fn not_held(&self) -> Error {
        Error::NotHeld {
            key: self.lease.shape.to_string(),
            confirmed: 0,
            required: self.lease.config().required,
            failures: Vec::new(),
        }
    }

    /// Releases the lock on every node (compare-and-delete) and reports whether a quorum
    /// confirmed that this holder still held it. A nested guard of a reentrant owner only
    /// gives up its hold; the last one releases on the nodes.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lock was already lost, or so many nodes refused that no
    /// quorum can still have held it: the critical section may have overlapped with another
    /// holder's. [`Error::ReleaseUnconfirmed`] when fewer than a quorum confirmed only because
    /// nodes were slow or unreachable: the lock was held to the end; its entries on those
    /// nodes expire with their TTL.
    ///
    /// # Cancel safety
    /// Not cancel safe in its report: if cancelled, the release may or may not have reached
    /// the nodes; the entries expire with their TTL in any case.
    pub async fn release(mut self) -> Result<()> {
        if !self.let_go() {
            return match self.lease.live_deadline() {
                Some(_) => Ok(()),
                None => Err(self.not_held()),
            };
        }
        // Released by holder value from this client already (see `token`): its report was that
        // call's, and nothing is left to send.
        if self.lease.released_by_holder_value() {
            self.lease.end();
            return Err(self.not_held());
        }
        let was_lost = self.lease.end();
        let outcome = self.lease.release_on_nodes().await;
        self.lease.release_result(&outcome, was_lost)
    }
}

impl Drop for LockGuard {
    /// Never blocks: with a tokio runtime at hand, the release runs as a background task (it
    /// waits for a renewal in flight, settles the lease's earlier calls, at most the node
    /// timeout, then releases, at most the node timeout); without one, the entries simply
    /// expire with their TTL. Either way the watchdog stops at once.
    fn drop(&mut self) {
        if self.released || !self.let_go() || self.lease.released_by_holder_value() {
            return;
        }
        let was_lost = self.lease.end();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let lease = self.lease.clone();
            let release = async move {
                let outcome = lease.release_on_nodes().await;
                let confirmed = outcome.decision == Decision::Reached && !was_lost;
                lease.client().counters.release(ReleasedBy::Drop, confirmed);
            };
            handle.spawn(self.lease.background().track(release));
        }
    }
}
