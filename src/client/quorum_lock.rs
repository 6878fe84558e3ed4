//! The client handle, [`QuorumLock`]: cheap to clone, the entry point to every lock.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::builder::Builder;
use crate::client::owner::Owner;
use crate::client::request::{LockRequest, Scoped};
use crate::error::Result;
use crate::hold::guard::LockGuard;
use crate::hold::lost_signal::LostSignal;
use crate::state::{ClientState, Stats};
use crate::take::plan::Target;

/// A client for locks held across N independent Redis masters (RedLock, or MultiLock with
/// [`Quorum::All`](crate::Quorum::All)).
///
/// Cheap to clone (an `Arc`); clones share connections and counters. The connections close
/// when the last clone and the last guard are dropped.
///
/// # Examples
///
/// ```no_run
/// # use std::time::Duration;
/// # use quorum_lock::QuorumLock;
/// # async fn example() -> Result<(), quorum_lock::Error> {
/// let locks = QuorumLock::builder()
///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .build()
///     .await?;
/// let guard = locks.acquire("stock:mooncake", Duration::from_secs(10)).await?;
/// // ... the critical section ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct QuorumLock {
    pub(crate) state: Arc<ClientState>,
}

impl std::fmt::Debug for QuorumLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumLock")
            .field("nodes", &self.nodes())
            .field("quorum", &self.state.config.quorum)
            .field("required", &self.state.config.required)
            .finish()
    }
}

impl QuorumLock {
    /// Starts configuring a client.
    pub fn builder() -> Builder {
        Builder::default()
    }

    pub(crate) fn from_state(state: ClientState) -> QuorumLock {
        QuorumLock {
            state: Arc::new(state),
        }
    }

    /// The configured nodes, passwords redacted.
    pub fn nodes(&self) -> Vec<String> {
        self.state
            .nodes
            .iter()
            .map(|n| n.name().to_string())
            .collect()
    }

    /// How many nodes must confirm an operation.
    pub fn quorum_size(&self) -> usize {
        self.state.config.required
    }

    /// Waits until this client's background work has ended: the slower nodes' answers to
    /// calls that returned at quorum (acquire, extend, release), the rollbacks of failed
    /// attempts, and the releases of dropped guards, each bounded by the node timeout (the
    /// watchdogs of held locks are not waited for). Call it before a short-lived process
    /// exits: a runtime that shuts down drops that work, and a release that reached only a
    /// quorum then leaves its entry on the other nodes until it expires.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn finish_background(&self) {
        self.state.background.idle().await;
    }

    /// A snapshot of this client's counters (shared by its clones).
    pub fn stats(&self) -> Stats {
        self.state.snapshot()
    }

    /// Starts a request for `key` with per-request settings. Without [`ttl`](LockRequest::ttl)
    /// the lock is kept alive by the watchdog (a lease of the client's
    /// [`watchdog_lease`](Builder::watchdog_lease), renewed every third of it) until released.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// // The watchdog keeps the lock until release; wait up to 30 s for it.
    /// let guard = locks.lock("job:nightly").wait(Duration::from_secs(30)).acquire().await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, key: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest::new(&self.state, key.as_ref())
    }

    /// Starts a request for several keys taken as one (a multi-key lock, Redisson's
    /// `MultiLock` over one set of nodes): all or none, with one validity, one guard and one
    /// fencing token for the set. The same settings as [`lock`](Self::lock) (without
    /// [`ttl`](LockRequest::ttl), the watchdog keeps the set).
    ///
    /// Each node decides the whole set in one script: it says yes only if every key is free
    /// (and then takes them all), so two requests naming overlapping sets in any order (`{a,
    /// b}` and `{b, a}`) cannot deadlock, and a set that meets a held key is refused and
    /// rolled back on every node, leaving no entry of its other keys. Keys are deduplicated and
    /// sorted; one distinct key is the plain lock. A set's holder excludes every other holder
    /// of any of its keys, alone or in another set, under the same quorum rules as one key.
    /// Waiters listen to the release notices of every key of the set.
    ///
    /// Checked when the request is made to act: each key as for [`lock`](Self::lock)
    /// ([`Error::InvalidKey`](crate::Error::InvalidKey)), at least one and at most
    /// [`MAX_SET_KEYS`](crate::MAX_SET_KEYS) distinct keys.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// // Both accounts or neither; the keys share a hash tag (one slot on cluster nodes).
    /// let both = locks.lock_all(["{bank}:account:1", "{bank}:account:2"]).acquire().await?;
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_all<I, K>(&self, keys: I) -> LockRequest<'_>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<[u8]>,
    {
        let keys = keys.into_iter().map(|k| k.as_ref().to_vec()).collect();
        LockRequest::of(&self.state, Target::Keys(keys))
    }

    /// Starts a request for one permit of the semaphore `key` of `permits` permits (Redisson's
    /// `RPermitExpirableSemaphore`): at most `permits` holders at once, each with a guard that
    /// behaves as a lock's (validity, extend, watchdog, loss signal, release, fencing token on
    /// request). A crashed holder's permit frees itself at its TTL.
    ///
    /// **More than one permit: slots.** The semaphore is `permits` slots, the keys
    /// `key#0` .. `key#P-1` ([`names::semaphore_slot`](crate::names::semaphore_slot)), each a
    /// mutex under the client's quorum; a permit is one slot held, and its guard is that
    /// slot's lock ([`LockGuard::key`](crate::LockGuard::key) names the slot, the fencing
    /// token is the slot's). So it works under a majority with nodes down or frozen, and at
    /// most `permits` hold at once whatever the quorum. A request tries every slot once per
    /// round, from a random one; a waiting request sleeps between rounds until any slot's
    /// release notice. Every client of a semaphore must give it the same `permits`.
    ///
    /// [`counted`](LockRequest::counted) asks for the counted form instead: a sorted set of
    /// permits at `key` on each node, which needs [`Quorum::All`](crate::Quorum::All) (under a
    /// quorum of q of N nodes up to N x permits / q clients could hold a permit at once, so
    /// any other quorum is [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming
    /// `permits`). One permit is that form too, a mutex under any quorum. `permits == 0`, or
    /// more than [`MAX_SLOTS`](crate::MAX_SLOTS), is `InvalidConfig` before any node is asked.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// // At most 3 holders, under the client's quorum.
    /// let permit = locks.semaphore("pool:gpu", 3).ttl(Duration::from_secs(60)).acquire().await?;
    /// // pool:gpu#0, #1 or #2
    /// println!("slot {}", String::from_utf8_lossy(permit.key()));
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, key: impl AsRef<[u8]>, permits: u32) -> LockRequest<'_> {
        let key = key.as_ref().to_vec();
        let target = match permits {
            0 | 1 => Target::Permit {
                key,
                permits,
                checked: true,
            },
            _ => Target::Slots { key, permits },
        };
        LockRequest::of(&self.state, target)
    }

    /// Starts a request for a read lock of the read-write lock `key`: any number of readers
    /// hold at once, and none while a writer holds ([`write_lock`](Self::write_lock)). The
    /// same settings and guard as [`lock`](Self::lock) (without [`ttl`](LockRequest::ttl),
    /// the watchdog keeps it); each reader has its own lease, so a crashed reader's hold
    /// frees itself at its TTL without touching the others.
    ///
    /// **Writers are preferred**: a writer waiting behind readers leaves a pending mark that
    /// stops new readers (those already holding keep their hold), so a stream of readers
    /// cannot starve it. A reader waiting on a writer, or on a writer's mark, is woken by its
    /// release. A reader that asks for another read lock on the same key while a writer
    /// waits therefore waits behind that writer, which waits for the first read lock: take
    /// one read lock per key and task.
    ///
    /// Not reentrant, and there is no upgrade: a reader asking for the write lock of the same
    /// key contends like any writer and waits for its own read lock, until its wait ends
    /// (two readers upgrading at once would each wait for the other for ever). Nor is there a
    /// downgrade: release the write lock, then take a read lock; another writer may come in
    /// between.
    ///
    /// On each node the readers are a sorted set at `quorum-lock:readers:{<h>}:K` (members the
    /// holder values, scores their expiry on the node's clock), the writer is the holder
    /// value at `K` itself and the pending mark is at `quorum-lock:writer-waiting:{<h>}:K`: use a
    /// key that no mutex, multi-key lock or semaphore uses. Readers and writers share the
    /// key's fencing counter ([`fencing`](LockRequest::fencing)): a writer's token exceeds
    /// every earlier holder's, reader or writer. Works under any quorum: any read quorum and
    /// any write quorum share a node, where a reader and a writer never coexist.
    ///
    /// The key is checked as for [`lock`](Self::lock) when the request is made to act.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// let reader = locks.read_lock("catalog").acquire().await?; // alongside other readers
    /// reader.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_lock(&self, key: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest::of(&self.state, Target::Read(key.as_ref().to_vec()))
    }

    /// Starts a request for the write lock of the read-write lock `key`: one writer at a
    /// time, and only while no reader holds. See [`read_lock`](Self::read_lock) for the
    /// layout on the nodes, writer preference, fencing and what is not offered (reentrancy,
    /// upgrade, downgrade).
    ///
    /// A waiting request ([`acquire`](LockRequest::acquire)) refused because of readers sets
    /// the pending mark (for its TTL, refreshed by each attempt) that stops new readers; the
    /// mark goes with the write lock's release, or when the request gives up (its wait ends
    /// or it fails); a cancelled request's mark expires at its TTL. A single attempt
    /// ([`try_acquire`](LockRequest::try_acquire)) sets no mark.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// // Alone, once the readers have left; new readers wait for it.
    /// let writer = locks.write_lock("catalog").wait(Duration::from_secs(30)).acquire().await?;
    /// writer.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_lock(&self, key: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest::of(&self.state, Target::Write(key.as_ref().to_vec()))
    }

    /// Starts a request for the fair lock `key`: one holder at a time, as [`lock`](Self::lock),
    /// given to waiting requests in the order they started to wait, across every client.
    ///
    /// A request first tries once as the mutex does, and succeeds when the key is free and
    /// nobody waits. Refused, it draws a ticket (an `INCR` of `quorum-lock:ticket:{<h>}:K` on every
    /// node, the largest answer of a quorum) and joins the line at its ticket on every node
    /// (`quorum-lock:queue:{<h>}:K` and two companion keys). A node gives the key only to its first
    /// live waiter; every node orders its line by the same tickets, so the first waiter of
    /// one is the first of all, and no two waiters split the nodes between them (there is no
    /// deadlock between any number of waiters). A ticket drawn after another request joined
    /// the line on a quorum is larger, so a request is never overtaken by one that started
    /// waiting after it. A release hands the key to the first waiter on each node itself: a
    /// waiter of the same client holds from the release's answers, without a round trip of
    /// its own; a waiter of another client is woken by a notice naming it and claims the key
    /// with one attempt.
    ///
    /// A waiter keeps its place by renewing it with each attempt, at least every third of the
    /// client's [`queue_lease`](crate::Builder::queue_lease). A waiter that dies leaves the
    /// line when its place expires, so the waiters behind it stall at most one queue lease
    /// (or, if the key had just been handed to it, one TTL, as behind a holder that dies). A
    /// request that gives up (its wait ends, it fails, its future is dropped) leaves at once.
    /// The lock is released, extended and fenced as the mutex, and its entry is the holder
    /// value at `K`: use a key that no other kind of lock uses. Not reentrant. A single
    /// attempt ([`try_acquire`](LockRequest::try_acquire)) never joins the line: it succeeds
    /// only when nobody waits.
    ///
    /// The key is checked as for [`lock`](Self::lock) when the request is made to act.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// // Served in the order the waiters started waiting, across all clients.
    /// let turn = locks.fair_lock("payouts").wait(Duration::from_secs(30)).acquire().await?;
    /// turn.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_lock(&self, key: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest::of(&self.state, Target::Fair(key.as_ref().to_vec()))
    }

    /// The semaphore request without its quorum check: the test kit's negative control.
    #[cfg(feature = "testkit")]
    pub(crate) fn unchecked_semaphore(&self, key: &[u8], permits: u32) -> LockRequest<'_> {
        LockRequest::of(
            &self.state,
            Target::Permit {
                key: key.to_vec(),
                permits,
                checked: false,
            },
        )
    }

    /// A new reentrant owner (see [`Owner`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// let owner = locks.owner();
    /// let outer = owner.acquire("account:7", Duration::from_secs(10)).await?;
    /// let inner = owner.acquire("account:7", Duration::from_secs(10)).await?; // reentered
    /// inner.release().await?;
    /// outer.release().await?; // released on the nodes at count zero
    /// # Ok(())
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        Owner::new(self.state.clone())
    }

    /// Acquires `key` for a fixed `ttl` (no watchdog), waiting up to the configured wait time
    /// (default 10 s) while others hold it: woken by the holder's release notice, or retrying
    /// after a jittered delay.
    ///
    /// # Errors
    /// [`Error::InvalidKey`](crate::Error::InvalidKey), [`Error::InvalidTtl`](crate::Error::InvalidTtl); [`Error::WaitTimeout`](crate::Error::WaitTimeout) when the lock stayed
    /// held by others; [`Error::NoQuorum`](crate::Error::NoQuorum) or [`Error::ValidityExhausted`](crate::Error::ValidityExhausted) when the last
    /// attempt failed for lack of nodes or time.
    ///
    /// # Cancel safety
    /// Cancel safe in effect: an attempt interrupted by cancellation leaves at most entries
    /// that expire with their TTL (no guard exists, so none is released); it never leaves a
    /// lock that is reported as held.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// let guard = locks.acquire("stock:mooncake", Duration::from_secs(10)).await?;
    /// if guard.is_held() {
    ///     // ... the critical section ...
    /// }
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.lock(key).ttl(ttl).acquire().await
    }

    /// One attempt to acquire `key` for a fixed `ttl`: `Ok(None)` when another holder has it.
    ///
    /// # Errors
    /// [`Error::InvalidKey`](crate::Error::InvalidKey), [`Error::InvalidTtl`](crate::Error::InvalidTtl); [`Error::NoQuorum`](crate::Error::NoQuorum) when too many nodes
    /// failed to tell; [`Error::ValidityExhausted`](crate::Error::ValidityExhausted) when the quorum came too late.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// match locks.try_acquire("job:once", Duration::from_secs(60)).await? {
    ///     Some(guard) => guard.release().await?,
    ///     None => println!("someone else runs it"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        self.lock(key).ttl(ttl).try_acquire().await
    }

    /// Extends the lock on `key` held with the holder value `holder` to `ttl` from now, without
    /// its guard, and returns the new validity: for a process that was handed the holder value (what
    /// [`LockGuard::holder`] returned where the lock was taken), like redsync's `WithValue`.
    ///
    /// The same rules as [`LockGuard::extend`]: compare-and-PEXPIRE on every node, acting only
    /// where the stored holder value is `holder`, never re-creating an entry (an expired or
    /// released lock stays gone, and another holder's entry is never touched); a quorum must
    /// confirm, and the validity is measured from the start of this call: `ttl` minus the time
    /// taken, minus the drift allowance (`ttl` x drift factor + 2 ms). With no guard, no earlier
    /// deadline is known, so the quorum must come while the new validity lasts. Returns at
    /// quorum; the slower nodes' requests finish in the background (see
    /// [`finish_background`](Self::finish_background)), and a request to a node whose
    /// connection is being re-made at that moment is not sent: it could land after this
    /// client's next call.
    ///
    /// Made through the client whose live guard holds the lock with that holder value, it acts
    /// through the guard: the guard's deadline moves (a shorter `ttl` cuts it before anything
    /// is sent), as for [`LockGuard::extend`]. A guard in another process does not learn of it.
    /// Any key of a multi-key guard names the whole acquisition: every key is extended.
    ///
    /// # Errors
    /// [`Error::InvalidKey`](crate::Error::InvalidKey),
    /// [`Error::InvalidHolder`](crate::Error::InvalidHolder) (never showing it) and
    /// [`Error::InvalidTtl`](crate::Error::InvalidTtl), before any node is contacted;
    /// [`Error::LockLost`](crate::Error::LockLost) when enough nodes do not hold `key` for
    /// `holder` that no quorum can (it expired, was released, or another holder has it), or the
    /// quorum came too late to leave any validity; [`Error::NoQuorum`](crate::Error::NoQuorum)
    /// when too many nodes failed to answer. After an error the nodes that applied the extend
    /// keep the entry `ttl` from when they did: trust the lock no longer than the earlier of
    /// its previous validity and `ttl` from this call's start.
    ///
    /// # Cancel safety
    /// Cancel safe in effect: a cancelled extend may have been applied by some nodes, as after
    /// an error (above); its requests not yet sent are never sent.
    pub async fn extend_by_holder(
        &self,
        key: impl AsRef<[u8]>,
        holder: &str,
        ttl: Duration,
    ) -> Result<Duration> {
        crate::hold::by_holder::extend(&self.state, key.as_ref(), holder, ttl).await
    }

    /// Releases the lock on `key` held with the holder value `holder`, without its guard: for a
    /// process that was handed the holder value (see [`extend_by_holder`](Self::extend_by_holder)).
    ///
    /// The same as [`LockGuard::release`]: compare-and-delete on every node, acting only where
    /// the stored holder value is `holder` (another holder's entry is never deleted), with the
    /// release notice that wakes this key's waiters in every client. `Ok` when a quorum
    /// confirmed that `holder` held the key; returns at quorum, and otherwise waits for every
    /// node's answer (each within the node timeout), so that the count in the error is exact.
    /// A fair lock's holder value leaves the line and hands the key on, as its guard's release
    /// does. Made through the client whose live guard holds the lock with that holder value,
    /// it ends the guard first (its loss signals fire) and then releases; the guard's own
    /// release then reports [`Error::NotHeld`](crate::Error::NotHeld) without sending
    /// anything. A guard in another process does not learn of it. Through the guard's client,
    /// any key of a multi-key guard names the whole acquisition: every key is released.
    ///
    /// # Errors
    /// [`Error::InvalidKey`](crate::Error::InvalidKey) and
    /// [`Error::InvalidHolder`](crate::Error::InvalidHolder), before any node is contacted;
    /// [`Error::NotHeld`](crate::Error::NotHeld) when so many nodes refused that no quorum can
    /// hold `holder`'s entry (it expired, was released or is another holder's): the critical
    /// section may have overlapped another holder's;
    /// [`Error::ReleaseUnconfirmed`](crate::Error::ReleaseUnconfirmed) when fewer than a quorum
    /// confirmed only because nodes were slow or unreachable, with how many did and the nodes
    /// that failed.
    ///
    /// # Cancel safety
    /// Not cancel safe in its report: if cancelled, the release may or may not have reached
    /// the nodes (its requests not yet sent are never sent); the entries expire with their TTL
    /// in any case.
    pub async fn release_by_holder(&self, key: impl AsRef<[u8]>, holder: &str) -> Result<()> {
        crate::hold::by_holder::release(&self.state, key.as_ref(), holder).await
    }

    /// Runs `work` while holding `key` under the watchdog, and releases at the end.
    ///
    /// `work` gets the lock's [`LostSignal`] (for tasks it spawns); the future itself is
    /// dropped (cancelled) the moment the lock is lost. The result says whether the work
    /// completed within the lock or was cut off. See [`LockRequest::run`] for per-request
    /// settings.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), for taking the lock.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases the lock in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// // The work is cancelled the moment the lock is lost, and the lock released at the end.
    /// let outcome = locks.with_lock("job:report", |_lost| async { 6 * 7 }).await?;
    /// assert_eq!(outcome.completed(), Some(42));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, key: impl AsRef<[u8]>, work: F) -> Result<Scoped<T>>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock(key).run(work).await
    }

    /// A leader election named `name` among the clients that campaign under it (etcd's
    /// `Election`, Curator's `LeaderLatch`): leading is holding the key `name` as a lock with
    /// a fencing token, which is the leader's term. See [`Election`](crate::Election).
    ///
    /// ```no_run
    /// # use quorum_lock::QuorumLock;
    /// # async fn example(locks: QuorumLock) -> Result<(), quorum_lock::Error> {
    /// let election = locks.election("leader:billing");
    /// let leading = election.campaign("10.0.0.7:8080").await?; // waits until elected
    /// let term = leading.term(); // carry it with the leader's writes
    /// # let _ = term;
    /// leading.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: impl AsRef<[u8]>) -> crate::Election {
        crate::Election::new(self.state.clone(), name.as_ref())
    }
}
