//! One acquisition's shared state (key, holder value, deadline, loss) and the operations on it
//! that talk to the nodes: renew (extend), repair and release. Guards, the watchdog and loss
//! signals all share one `Lease`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{key_display, Error, Op, Result};
use crate::fanout::{broadcast, fan_out, read_flag, Background, Outcome, Stragglers};
use crate::lock::Shared;
use crate::node::Form;
use crate::quorum::{self, Decision};
use crate::scripts::{release_channel, Call, EXTEND, RELEASE};

pub(crate) struct Lease {
    pub(crate) key: Arc<[u8]>,
    pub(crate) holder: String,
    state: Mutex<State>,
    /// Cancelled once the lease can no longer be trusted: lost, or ended by release or drop.
    signal: CancellationToken,
    /// Serialises the operations that write to the nodes (renew, repair, release), so that a
    /// repair can never land after the release of the same holder.
    ops: tokio::sync::Mutex<()>,
    /// Guards sharing this lease (more than one only for a reentrant owner).
    pub(crate) holds: AtomicUsize,
    /// The fencing token, when asked for.
    pub(crate) token: Option<u64>,
    /// The acquire's calls still in flight to slower nodes when the quorum was reached; the
    /// release settles them first, so that it reaches each node after the acquire.
    stragglers: Mutex<Option<Background>>,
}

struct State {
    ttl: Duration,
    deadline: Instant,
    lost: bool,
    ended: bool,
}

impl Lease {
    pub(crate) fn new(
        key: Arc<[u8]>,
        holder: String,
        ttl: Duration,
        deadline: Instant,
        token: Option<u64>,
    ) -> Lease {
        Lease {
            key,
            holder,
            state: Mutex::new(State {
                ttl,
                deadline,
                lost: false,
                ended: false,
            }),
            signal: CancellationToken::new(),
            ops: tokio::sync::Mutex::new(()),
            holds: AtomicUsize::new(1),
            token,
            stragglers: Mutex::new(None),
        }
    }

    pub(crate) fn set_stragglers(&self, background: Option<Background>) {
        *self.stragglers.lock().unwrap_or_else(|p| p.into_inner()) = background;
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.state().ttl
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.state().deadline
    }

    /// The deadline while the lease may be trusted: not lost, not ended, not past it.
    pub(crate) fn live_deadline(&self) -> Option<Instant> {
        let s = self.state();
        (!s.lost && !s.ended && Instant::now() < s.deadline).then_some(s.deadline)
    }

    /// Fires when the lease can no longer be trusted (see [`LostSignal`]).
    pub(crate) fn signal(&self) -> &CancellationToken {
        &self.signal
    }

    pub(crate) fn mark_lost(&self, shared: &Shared) {
        let first = {
            let mut s = self.state();
            let first = !s.lost && !s.ended;
            s.lost = true;
            first
        };
        if first {
            shared.counters.lost.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key = %key_display(&self.key), "lock lost");
        }
        self.signal.cancel();
    }

    /// Ends the lease (release or drop): stops its watchdog and fires its signal. Returns
    /// whether it had been lost before.
    pub(crate) fn end(&self) -> bool {
        let was_lost = {
            let mut s = self.state();
            s.ended = true;
            s.lost
        };
        self.signal.cancel();
        was_lost
    }

    pub(crate) fn lost_error(&self) -> Error {
        Error::LockLost {
            key: key_display(&self.key),
        }
    }

    /// Extends the lease to `ttl` from now where this holder still holds it (DESIGN 3,
    /// "Extend"). A quorum must confirm before the current deadline; the new deadline runs from
    /// this call's start. With `repair`, nodes missing the entry get it back afterwards.
    pub(crate) async fn renew(&self, shared: &Shared, ttl: Duration, repair: bool) -> Result<()> {
        let span = tracing::debug_span!("extend", key = %key_display(&self.key), ?ttl);
        async {
            let Some(current) = self.live_deadline() else {
                self.mark_lost(shared);
                return Err(self.lost_error());
            };
            // A quorum confirmed after the current deadline proves nothing: the entries may
            // have expired in between. So the whole step, waiting for a release or repair in
            // flight included, must end before it.
            let step = async {
                let _ops = self.ops.lock().await;
                self.live_deadline()?;
                Some(self.renew_on_nodes(shared, ttl, repair).await)
            };
            match tokio::time::timeout_at(current, step).await {
                Ok(Some(result)) => result,
                Ok(None) | Err(_) => {
                    if !self.state().ended {
                        self.mark_lost(shared);
                    }
                    Err(self.lost_error())
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn renew_on_nodes(&self, shared: &Shared, ttl: Duration, repair: bool) -> Result<()> {
        let config = &shared.config;
        let ttl_ms = ttl.as_millis().to_string();
        let call = Call::new(
            &EXTEND,
            &self.key,
            &[self.holder.as_bytes(), ttl_ms.as_bytes()],
        );
        let start = Instant::now();
        let nodes = &shared.nodes;
        // A user's extend returns at quorum; the watchdog's renewal waits for every node (each
        // bounded by its timeout), to learn which ones lack the entry and repair only those.
        let mode = if repair {
            Stragglers::Wait
        } else {
            Stragglers::Finish
        };
        let outcome = fan_out(nodes, config.required, call, read_flag, mode).await;
        let drift = quorum::drift(ttl, config.drift_factor);
        tracing::debug!(yes = outcome.tally.yes(), refused = outcome.tally.refused(), failed = outcome.tally.failed(), failures = ?outcome.failures, "extend tallied");
        match outcome.decision {
            Decision::Reached if quorum::validity(ttl, start.elapsed(), drift).is_some() => {
                {
                    let mut s = self.state();
                    s.ttl = ttl;
                    s.deadline = start + ttl - drift;
                }
                shared.counters.extended.fetch_add(1, Ordering::Relaxed);
                if repair && !outcome.refused.is_empty() {
                    self.repair(shared, &outcome.refused).await;
                }
                Ok(())
            }
            // Enough nodes said the entry is gone that no quorum can hold it any more.
            _ if nodes.len() - outcome.tally.refused() < config.required => {
                self.mark_lost(shared);
                Err(self.lost_error())
            }
            _ => Err(Error::NoQuorum {
                op: Op::Extend,
                key: key_display(&self.key),
                confirmed: outcome.tally.yes(),
                required: config.required,
                refused: outcome.tally.refused(),
                failures: outcome.failures,
            }),
        }
    }

    /// Puts the entry back on `nodes` where the key is absent, for the remaining validity
    /// (DESIGN 3, "Repair"). Only called right after a quorum confirmed a renewal, for the
    /// nodes that answered that they lack the entry.
    async fn repair(&self, shared: &Shared, nodes: &[usize]) {
        let Some(remaining) = self.live_deadline().map(|d| d - Instant::now()) else {
            return;
        };
        let ms = remaining.as_millis();
        if ms == 0 {
            return;
        }
        let ms = ms.to_string();
        let call = Call::set_if_absent("repair", &self.key, self.holder.as_bytes(), ms.as_bytes());
        let answers = broadcast(&shared.nodes, nodes.iter().copied(), call, Form::Sha).await;
        let repaired = answers
            .iter()
            .filter(|a| matches!(a, Ok(redis::Value::Okay)))
            .count();
        if repaired > 0 {
            shared
                .counters
                .repaired
                .fetch_add(repaired as u64, Ordering::Relaxed);
            tracing::info!(key = %key_display(&self.key), repaired, "lock entry restored on nodes that had lost it");
        }
    }

    /// Releases on every node (compare-and-delete, publishing the release notice).
    pub(crate) async fn release_on_nodes(&self, shared: &Shared) -> Outcome {
        let span = tracing::debug_span!("release", key = %key_display(&self.key));
        async {
            let _ops = self.ops.lock().await;
            let stragglers = self
                .stragglers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(background) = stragglers {
                // Usually immediate; at worst bounded by the node timeout.
                background.settle().await;
            }
            let channel = release_channel(&self.key);
            let call = Call::new(&RELEASE, &self.key, &[self.holder.as_bytes(), &channel, b"1"]);
            let outcome =
                fan_out(&shared.nodes, shared.config.required, call, read_flag, Stragglers::Finish).await;
            tracing::debug!(yes = outcome.tally.yes(), refused = outcome.tally.refused(), failed = outcome.tally.failed(), failures = ?outcome.failures, "release tallied");
            outcome
        }
        .instrument(span)
        .await
    }
}

/// Completes when a lock can no longer be trusted: lost (a renewal or extend could not confirm
/// a quorum in time, or its validity ran out) or ended (released or dropped). It fires no later
/// than the lock's validity deadline, even when nothing else is running.
///
/// Cheap to clone, `Send + Sync + 'static`: hand it to the tasks doing the guarded work.
#[derive(Clone)]
pub struct LostSignal {
    shared: Arc<Shared>,
    lease: Arc<Lease>,
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal")
            .field("key", &key_display(&self.lease.key))
            .field("fired", &self.is_fired())
            .finish()
    }
}

impl LostSignal {
    pub(crate) fn new(shared: Arc<Shared>, lease: Arc<Lease>) -> LostSignal {
        LostSignal { shared, lease }
    }

    /// Whether the lock can no longer be trusted (lost, expired, released or dropped).
    pub fn is_fired(&self) -> bool {
        self.lease.live_deadline().is_none()
    }

    /// Waits until the lock can no longer be trusted.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn wait(&self) {
        loop {
            let deadline = self.lease.deadline();
            tokio::select! {
                () = self.lease.signal().cancelled() => return,
                () = tokio::time::sleep_until(deadline) => {
                    // The deadline may have moved (renewed) while we slept.
                    if self.lease.live_deadline().is_none() {
                        self.lease.mark_lost(&self.shared);
                        return;
                    }
                }
            }
        }
    }
}
