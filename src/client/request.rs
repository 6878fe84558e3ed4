//! A lock request with its per-request settings ([`LockRequest`]), and what a scoped run
//! reports ([`Scoped`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::hold::guard::LockGuard;
use crate::hold::lost_signal::LostSignal;
use crate::hold::reentry::HoldTable;
use crate::state::ClientState;
use crate::take::plan::{LeaseMode, Spec, Target};

/// What [`QuorumLock::with_lock`](crate::QuorumLock::with_lock) and [`LockRequest::run`] report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scoped<T> {
    /// The work completed while the lock was held.
    Completed(T),
    /// The lock was lost; the work was cut off (dropped) at that moment.
    Lost,
}

impl<T> Scoped<T> {
    /// The work's result, if it completed.
    pub fn completed(self) -> Option<T> {
        match self {
            Scoped::Completed(v) => Some(v),
            Scoped::Lost => None,
        }
    }
}

/// A request for a lock (one key, a set of keys with [`QuorumLock::lock_all`], a semaphore
/// permit with [`QuorumLock::semaphore`], or a read or write lock with
/// [`QuorumLock::read_lock`] and [`QuorumLock::write_lock`]), with settings that override the
/// client's defaults.
///
/// [`QuorumLock::lock_all`]: crate::QuorumLock::lock_all
/// [`QuorumLock::semaphore`]: crate::QuorumLock::semaphore
/// [`QuorumLock::read_lock`]: crate::QuorumLock::read_lock
/// [`QuorumLock::write_lock`]: crate::QuorumLock::write_lock
///
/// # Examples
///
/// ```no_run
/// # use std::time::Duration;
/// # use quorum_lock::QuorumLock;
/// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
/// let guard = locks
///     .lock("stock:mooncake")
///     .ttl(Duration::from_secs(10)) // a fixed TTL instead of the watchdog
///     .fencing(true)                // a fencing token for the storage
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// let token = guard.fencing_token();
/// guard.release().await?;
/// # let _ = token;
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct LockRequest<'a> {
    state: &'a Arc<ClientState>,
    spec: Spec<'a>,
}

impl std::fmt::Debug for LockRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let spec = &self.spec;
        f.debug_struct("LockRequest")
            .field("key", &spec.target)
            .field("lease", &spec.lease)
            .field("max_hold", &spec.max_hold)
            .field("wait", &spec.wait)
            .field("fencing", &spec.fencing)
            .field("owned", &spec.owner.is_some())
            .field("label", &spec.label)
            .finish()
    }
}

impl<'a> LockRequest<'a> {
    pub(crate) fn new(state: &'a Arc<ClientState>, key: &[u8]) -> LockRequest<'a> {
        LockRequest::of(state, Target::Key(key.to_vec()))
    }

    /// A request for `target` with the client's defaults.
    pub(crate) fn of(state: &'a Arc<ClientState>, target: Target) -> LockRequest<'a> {
        LockRequest {
            state,
            spec: Spec {
                target,
                lease: LeaseMode::Watchdog(None),
                max_hold: None,
                wait: None,
                fencing: false,
                owner: None,
                label: None,
            },
        }
    }

    /// A fixed TTL: the lock expires after it unless extended or released; no watchdog.
    /// Defaults to none (the watchdog keeps the lock).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.spec.lease = LeaseMode::Fixed(ttl);
        self
    }

    /// Keeps the lock with the watchdog, renewing a lease of `lease` every third of it.
    /// Defaults to the client's [`watchdog_lease`](crate::Builder::watchdog_lease) (30 s).
    pub fn watchdog(mut self, lease: Duration) -> Self {
        self.spec.lease = LeaseMode::Watchdog(Some(lease));
        self
    }

    /// Ends the lock after it has been held this long: the watchdog's last renewal is
    /// shortened to end then, and no renewal follows. When `max` is within the first lease
    /// (or the fixed [`ttl`](Self::ttl)), the lock is taken for `max` only, with nothing to
    /// renew. A zero or too short `max` (no room for one node round trip and the drift
    /// allowance) is [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming
    /// `max_hold`. Defaults to none (renewed until released).
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.spec.max_hold = Some(max);
        self
    }

    /// How long [`acquire`](Self::acquire) keeps trying. Defaults to the client's
    /// [`wait_timeout`](crate::Builder::wait_timeout) (10 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.spec.wait = Some(wait);
        self
    }

    /// Hands out a fencing token with the lock ([`LockGuard::fencing_token`]): strictly
    /// increasing across successive holders of the key, for storage that rejects writes
    /// carrying an older token. Costs one more round trip (the token is written back to a
    /// quorum before the guard is returned). Defaults to `false`.
    pub fn fencing(mut self, enabled: bool) -> Self {
        self.spec.fencing = enabled;
        self
    }

    /// For a semaphore of more than one permit
    /// ([`QuorumLock::semaphore`](crate::QuorumLock::semaphore)): its counted form, one
    /// sorted set of permits at the key on each node, which needs
    /// [`Quorum::All`](crate::Quorum::All) (any other quorum is
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming `permits`), rather than
    /// the default of one slot per permit. Every client of a semaphore must take it in the
    /// same form: the two forms do not see each other's holders. Ignored by the other kinds.
    pub fn counted(mut self) -> Self {
        if let Target::Slots { key, permits } = &mut self.spec.target {
            self.spec.target = Target::Permit {
                key: std::mem::take(key),
                permits: *permits,
                checked: true,
            };
        }
        self
    }

    /// A public label for whoever holds the lock, published beside its entry once it is
    /// held and shown by [`QuorumLock::holder_of`](crate::QuorumLock::holder_of) and
    /// `quorum-lock status` with the time it was taken: who holds it, for the operator
    /// (`"host-7/job-42"`). Public: never a holder value or a secret. 1 to
    /// [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes without control characters or
    /// invisible formatting characters; else
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming `label`, before anything
    /// is sent. Every kind: a multi-key lock's label shows on each of its keys, and each
    /// permit's or reader's label in [`Holding::labels`](crate::Holding::labels). Costs one
    /// more round trip after the acquire. Defaults to none.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.spec.label = Some(label.into());
        self
    }

    /// Checks the label before anything is sent.
    fn check_label(&self) -> Result<()> {
        let Some(label) = &self.spec.label else {
            return Ok(());
        };
        crate::client::who::check_public_text("label", label, crate::MAX_LABEL_LEN)
    }

    /// Publishes the label (if any) of a lock just taken. A guard whose label did not reach a
    /// quorum is still held (the label is for operators); one found lost is an error.
    async fn labelled(label: Option<String>, guard: LockGuard) -> Result<LockGuard> {
        let Some(label) = label else {
            return Ok(guard);
        };
        let since = crate::client::who::unix_ms_now();
        let fields = [("label", label.as_str()), ("since", since.as_str())];
        match guard.lease().publish(&fields, true).await {
            Ok(()) => Ok(guard),
            Err(e @ crate::Error::LockLost { .. }) => Err(e),
            Err(e) => {
                tracing::warn!(error = %e, key = %String::from_utf8_lossy(guard.key()), "the lock's label reached no quorum");
                Ok(guard)
            }
        }
    }

    pub(crate) fn owner(mut self, owner: &'a Arc<HoldTable>) -> Self {
        self.spec.owner = Some(owner);
        self
    }

    /// Acquires the lock, waiting while others hold it. See [`QuorumLock::acquire`](crate::QuorumLock::acquire).
    ///
    /// # Errors
    /// As [`QuorumLock::acquire`](crate::QuorumLock::acquire).
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`](crate::QuorumLock::acquire).
    pub async fn acquire(mut self) -> Result<LockGuard> {
        self.check_label()?;
        let label = self.spec.label.take();
        let guard = match &self.spec.target {
            Target::Slots { .. } => crate::take::slots::acquire(self.state, self.spec).await?,
            _ => crate::take::waiting::waiting(self.state, self.spec).await?,
        };
        Self::labelled(label, guard).await
    }

    /// One attempt; `Ok(None)` when another holder has the lock. See
    /// [`QuorumLock::try_acquire`](crate::QuorumLock::try_acquire).
    ///
    /// # Errors
    /// As [`QuorumLock::try_acquire`](crate::QuorumLock::try_acquire).
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`](crate::QuorumLock::acquire).
    pub async fn try_acquire(mut self) -> Result<Option<LockGuard>> {
        self.check_label()?;
        let label = self.spec.label.take();
        let taken = match &self.spec.target {
            Target::Slots { .. } => crate::take::slots::try_acquire(self.state, self.spec).await?,
            _ => crate::take::attempt::once(self.state, self.spec).await?,
        };
        match taken {
            Some(guard) => Self::labelled(label, guard).await.map(Some),
            None => Ok(None),
        }
    }

    /// Acquires the lock (waiting), runs `work` while holding it, and releases it. See
    /// [`QuorumLock::with_lock`](crate::QuorumLock::with_lock).
    ///
    /// # Errors
    /// As [`QuorumLock::acquire`](crate::QuorumLock::acquire), for taking the lock.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases the lock in the background.
    pub async fn run<F, Fut, T>(self, work: F) -> Result<Scoped<T>>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire().await?;
        let signal = guard.lost_signal();
        let work = work(signal.clone());
        let outcome = tokio::select! {
            // Loss first: work that finishes in the same instant the lock is lost is reported
            // as cut off.
            biased;
            () = signal.wait() => Scoped::Lost,
            value = work => Scoped::Completed(value),
        };
        if let Err(e) = guard.release().await {
            tracing::warn!(error = %e, "release after scoped work was not confirmed");
        }
        Ok(outcome)
    }
}
