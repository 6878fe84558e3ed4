//! The client handle: acquire (one attempt and the waiting loop), the rollback of failed
//! attempts, and the counters behind [`Stats`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::builder::{Builder, Config};
use crate::error::{key_display, Error, Op, Result};
use crate::fanout::{broadcast_eval, fan_out, read_acquire, read_release, Stragglers};
use crate::guard::{Lease, LockGuard};
use crate::node::Nodes;
use crate::quorum::{self, Decision};
use crate::scripts::{release_channel, Call, ACQUIRE, RELEASE};

/// The longest key accepted (64 KiB). Redis allows more, but a lock key is a name, and it is
/// copied into every request and release channel.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// State shared by a client's clones and its guards.
pub(crate) struct Shared {
    pub(crate) nodes: Nodes,
    pub(crate) config: Config,
    pub(crate) counters: Counters,
}

impl Shared {
    pub(crate) fn new(nodes: Nodes, config: Config) -> Shared {
        Shared {
            nodes,
            config,
            counters: Counters::default(),
        }
    }
}

/// A client for locks held across N independent Redis masters (RedLock, or MultiLock with
/// [`Quorum::All`](crate::Quorum::All)).
///
/// Cheap to clone (an `Arc`); clones share connections and counters. The connections close
/// when the last clone and the last guard are dropped.
#[derive(Clone)]
pub struct QuorumLock {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for QuorumLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumLock")
            .field("nodes", &self.nodes())
            .field("quorum", &self.shared.config.quorum)
            .field("required", &self.shared.config.required)
            .finish()
    }
}

/// What one attempt ended with, short of a guard.
enum Miss {
    /// Other holders refused enough nodes; the smallest PTTL they reported.
    Contended(Option<Duration>),
    /// Nodes failed, or the quorum came too late.
    Failed(Error),
}

impl QuorumLock {
    /// Starts configuring a client.
    pub fn builder() -> Builder {
        Builder::default()
    }

    pub(crate) fn from_shared(shared: Shared) -> QuorumLock {
        QuorumLock {
            shared: Arc::new(shared),
        }
    }

    /// The configured nodes, passwords redacted.
    pub fn nodes(&self) -> Vec<String> {
        self.shared
            .nodes
            .iter()
            .map(|n| n.name().to_string())
            .collect()
    }

    /// How many nodes must confirm an operation.
    pub fn quorum_size(&self) -> usize {
        self.shared.config.required
    }

    /// A snapshot of this client's counters (shared by its clones).
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Starts a request for `key` with per-request settings (TTL, wait time).
    pub fn lock(&self, key: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest {
            client: self,
            key: key.as_ref().to_vec(),
            ttl: None,
            wait: None,
        }
    }

    /// Acquires `key` for `ttl`, waiting up to the configured wait time (default 10 s) while
    /// others hold it, retrying with jitter.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::InvalidTtl`]; [`Error::WaitTimeout`] when the lock stayed
    /// held by others; [`Error::NoQuorum`] or [`Error::ValidityExhausted`] when the last
    /// attempt failed for lack of nodes or time.
    ///
    /// # Cancel safety
    /// Cancel safe in effect: an attempt interrupted by cancellation leaves at most entries
    /// that expire with their TTL (no guard exists, so none is released); it never leaves a
    /// lock that is reported as held.
    pub async fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.lock(key).ttl(ttl).acquire().await
    }

    /// One attempt to acquire `key` for `ttl`: `Ok(None)` when another holder has it.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::InvalidTtl`]; [`Error::NoQuorum`] when too many nodes
    /// failed to tell; [`Error::ValidityExhausted`] when the quorum came too late.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        self.lock(key).ttl(ttl).try_acquire().await
    }

    fn check_key(key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::InvalidKey {
                reason: "must not be empty".into(),
            });
        }
        if key.len() > MAX_KEY_LEN {
            return Err(Error::InvalidKey {
                reason: format!("{} bytes, longer than {MAX_KEY_LEN}", key.len()),
            });
        }
        Ok(())
    }

    /// One attempt (DESIGN 3, "Acquire"): fan out, tally, compute the validity, and roll back
    /// on every node when it is not a success.
    async fn attempt(
        &self,
        key: &Arc<[u8]>,
        ttl: Duration,
    ) -> std::result::Result<LockGuard, Miss> {
        let shared = &self.shared;
        let config = &shared.config;
        let holder = holder_value();
        let ttl_ms = ttl.as_millis().to_string();
        let call = Call::new(&ACQUIRE, key, &[holder.as_bytes(), ttl_ms.as_bytes(), b"0"]);
        shared.counters.attempts.fetch_add(1, Ordering::Relaxed);

        // Step 1: the validity is measured from before the first request is sent.
        let t0 = Instant::now();
        let outcome = fan_out(
            &shared.nodes,
            config.required,
            call,
            read_acquire,
            Stragglers::Drop,
        )
        .await;
        let elapsed = t0.elapsed();
        let drift = quorum::drift(ttl, config.drift_factor);

        let miss = match outcome.decision {
            Decision::Reached => match quorum::validity(ttl, elapsed, drift) {
                Some(v) if v > config.min_validity => {
                    shared.counters.acquired.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(key = %key_display(key), confirmed = outcome.tally.yes(), ?elapsed, validity = ?v, "acquired");
                    let lease = Lease::new(key.clone(), holder, ttl, t0 + ttl - drift);
                    return Ok(LockGuard::new(self.shared.clone(), lease));
                }
                _ => Miss::Failed(Error::ValidityExhausted {
                    key: key_display(key),
                    elapsed,
                    ttl,
                }),
            },
            // Contention: with every refusal turned into a yes, the failed nodes alone would
            // not have prevented the quorum.
            _ if shared.nodes.len() - outcome.tally.failed() >= config.required => {
                Miss::Contended(outcome.hint)
            }
            _ => Miss::Failed(Error::NoQuorum {
                op: Op::Acquire,
                key: key_display(key),
                confirmed: outcome.tally.yes(),
                required: config.required,
                refused: outcome.tally.refused(),
                failures: outcome.failures,
            }),
        };
        match &miss {
            Miss::Contended(_) => shared.counters.contended.fetch_add(1, Ordering::Relaxed),
            Miss::Failed(_) => shared.counters.failed.fetch_add(1, Ordering::Relaxed),
        };
        tracing::debug!(key = %key_display(key), yes = outcome.tally.yes(), refused = outcome.tally.refused(), failed = outcome.tally.failed(), "attempt failed, rolling back");
        // Step 5: roll back on every node, also those that failed or timed out: they may have
        // applied the acquire. The holder value is unique to this attempt, so a late rollback
        // can never delete a later attempt's entry.
        let mut rollback = Box::pin(rollback(self.shared.clone(), key.clone(), holder));
        // One poll writes the rollback onto every live connection, so a retry sent next cannot
        // overtake it (its entry would refuse the retry); the answers are awaited elsewhere.
        if futures::poll!(rollback.as_mut()).is_pending() {
            tokio::spawn(rollback);
        }
        Err(miss)
    }

    /// Checks a request's key and TTL.
    fn prepare(&self, req: LockRequest<'_>) -> Result<(Arc<[u8]>, Duration)> {
        let config = &self.shared.config;
        Self::check_key(&req.key)?;
        let ttl = config.check_ttl(req.ttl.unwrap_or(config.default_ttl))?;
        Ok((req.key.into(), ttl))
    }

    async fn run_once(&self, req: LockRequest<'_>) -> Result<Option<LockGuard>> {
        let (key, ttl) = self.prepare(req)?;
        match self.attempt(&key, ttl).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Miss::Contended(_)) => Ok(None),
            Err(Miss::Failed(e)) => Err(e),
        }
    }

    async fn run_waiting(&self, req: LockRequest<'_>) -> Result<LockGuard> {
        let config = &self.shared.config;
        let wait = req.wait.unwrap_or(config.wait_timeout);
        let (key, ttl) = self.prepare(req)?;
        let start = Instant::now();
        let deadline = start + wait;
        let mut attempts: u32 = 0;
        loop {
            attempts += 1;
            let (error, hint) = match self.attempt(&key, ttl).await {
                Ok(guard) => return Ok(guard),
                Err(Miss::Contended(hint)) => (None, hint),
                Err(Miss::Failed(e)) => (Some(e), None),
            };
            let now = Instant::now();
            let retries_left = config.max_retries.is_none_or(|max| attempts <= max);
            if now >= deadline || !retries_left {
                return Err(error.unwrap_or_else(|| Error::WaitTimeout {
                    key: key_display(&key),
                    waited: now - start,
                    attempts,
                }));
            }
            let mut delay = config.retry_delay + jitter(config.retry_jitter);
            if let Some(hint) = hint {
                // The holder's key expires by then: no point sleeping past it.
                delay = delay.min(hint);
            }
            tokio::time::sleep_until((now + delay).min(deadline)).await;
        }
    }
}

/// Releases an attempt's entries on every node, by plain EVAL (DESIGN 3, "ordering trap").
async fn rollback(shared: Arc<Shared>, key: Arc<[u8]>, holder: String) {
    let channel = release_channel(&key);
    let call = Call::new(&RELEASE, &key, &[holder.as_bytes(), &channel, b"0"]);
    broadcast_eval(&shared.nodes, call, read_release).await;
}

fn holder_value() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn jitter(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

/// A request for one lock, with settings that override the client's defaults.
#[must_use]
pub struct LockRequest<'a> {
    client: &'a QuorumLock,
    key: Vec<u8>,
    ttl: Option<Duration>,
    wait: Option<Duration>,
}

impl LockRequest<'_> {
    /// The lock's TTL: how long the nodes keep it if it is neither extended nor released.
    /// Defaults to the client's [`default_ttl`](Builder::default_ttl) (30 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long [`acquire`](Self::acquire) keeps trying. Defaults to the client's
    /// [`wait_timeout`](Builder::wait_timeout) (10 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Acquires the lock, waiting while others hold it. See [`QuorumLock::acquire`].
    ///
    /// # Errors
    /// As [`QuorumLock::acquire`].
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`].
    pub async fn acquire(self) -> Result<LockGuard> {
        self.client.run_waiting(self).await
    }

    /// One attempt; `Ok(None)` when another holder has the lock. See
    /// [`QuorumLock::try_acquire`].
    ///
    /// # Errors
    /// As [`QuorumLock::try_acquire`].
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`].
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        self.client.run_once(self).await
    }
}

/// Counters of one client, shared by its clones.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) attempts: AtomicU64,
    pub(crate) acquired: AtomicU64,
    pub(crate) contended: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) release_failed: AtomicU64,
    pub(crate) extended: AtomicU64,
    pub(crate) lost: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            attempts: get(&self.attempts),
            acquired: get(&self.acquired),
            contended: get(&self.contended),
            failed: get(&self.failed),
            released: get(&self.released),
            release_failed: get(&self.release_failed),
            extended: get(&self.extended),
            lost: get(&self.lost),
        }
    }
}

/// A snapshot of a client's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquire attempts (each a fan-out to all nodes).
    pub attempts: u64,
    /// Attempts that returned a guard.
    pub acquired: u64,
    /// Attempts refused because others held the lock.
    pub contended: u64,
    /// Attempts that failed for lack of nodes or validity.
    pub failed: u64,
    /// Releases a quorum confirmed.
    pub released: u64,
    /// Releases a quorum did not confirm (the lock was lost or nodes failed).
    pub release_failed: u64,
    /// Extensions a quorum confirmed.
    pub extended: u64,
    /// Guards that became lost.
    pub lost: u64,
}
