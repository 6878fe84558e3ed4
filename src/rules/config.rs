//! A client's validated settings ([`Config`]) and the checks every duration and TTL goes
//! through: pure, no I/O.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::human::Human;
use crate::rules::quorum::{self, Quorum};

/// The longest TTL accepted (365 days): far beyond any sane lease, and well inside what
/// Redis' `PEXPIRE` accepts.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest duration accepted for any setting (365 days, the same as [`MAX_TTL`]): longer
/// ones are surely a mistake, and every instant computed from a setting stays representable.
pub const MAX_DURATION: Duration = MAX_TTL;

/// Checks a duration setting against [`MAX_DURATION`], naming the setting when it is longer.
pub(crate) fn check_duration(field: &'static str, value: Duration) -> Result<()> {
    if value > MAX_DURATION {
        return Err(Error::InvalidConfig {
            field,
            reason: format!(
                "{} is longer than the most accepted, {}",
                Human(value),
                Human(MAX_DURATION)
            ),
        });
    }
    Ok(())
}

/// The durations derived from the node timeout, named in one place (and listed on
/// [`Builder::node_timeout`](crate::Builder::node_timeout)). A node timeout `t` sets:
pub(crate) mod from_node_timeout {
    use std::time::Duration;

    /// A fair lock's queue lease unless set (see [`Builder::queue_lease`](crate::Builder::queue_lease)):
    /// 5 s, or `3 t` when that is longer.
    pub(crate) fn queue_lease_default(t: Duration) -> Duration {
        QUEUE_LEASE_DEFAULT.max(t.saturating_mul(3))
    }

    /// The queue lease must exceed `2 t`: a waiter renews its place in line with requests
    /// bounded by `t`.
    pub(crate) fn queue_lease_floor(t: Duration) -> Duration {
        t.saturating_mul(2)
    }

    /// The fixed part of [`queue_lease_default`].
    const QUEUE_LEASE_DEFAULT: Duration = Duration::from_secs(5);

    /// The circuit breaker: a node that left a request unanswered for longer than `t` takes
    /// no further requests but one probe per `t` (`node/backlog.rs`), and is passed over as
    /// an arbiter meanwhile.
    pub(crate) fn breaker_silence(t: Duration) -> Duration {
        t
    }

    /// How long a probe, or the breaker's follow-up `PING`, waits for its answer: `20 t`
    /// within [1 s, 30 s], long enough for a node that resumes to answer its backlog first,
    /// bounded so that a node frozen for minutes does not collect waiting tasks.
    pub(crate) fn probe_wait(t: Duration) -> Duration {
        t.saturating_mul(20)
            .clamp(Duration::from_secs(1), Duration::from_secs(30))
    }

    /// The slowest node still asked as a key's arbiter answers within 4x the fastest plus
    /// 1 ms, and never less than `t / 4` (`take/arbiter.rs`): a loaded machine's jitter must
    /// not move the arbiter from one attempt to the next.
    pub(crate) fn arbiter_floor(t: Duration) -> Duration {
        t / 4
    }

    /// Once a quorum of nodes passed `build()`'s checks, the others get `t` more before
    /// `build()` returns (`client/startup.rs`); they are checked in the background after.
    pub(crate) fn build_grace(t: Duration) -> Duration {
        t
    }
}

/// The validated settings of a client.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) quorum: Quorum,
    pub(crate) required: usize,
    pub(crate) node_timeout: Duration,
    /// How long a connection may take to be made (TCP, TLS, handshake, script loads): the
    /// lock connections' and the pub/sub connections' alike.
    pub(crate) connect_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) max_retries: Option<u32>,
    pub(crate) wait_timeout: Duration,
    pub(crate) min_validity: Duration,
    pub(crate) watchdog_lease: Duration,
    pub(crate) queue_lease: Duration,
    /// How much longer than a guard's TTL its entries live on the nodes (see
    /// [`Builder::lock_delay`](crate::Builder::lock_delay)).
    pub(crate) lock_delay: Duration,
    pub(crate) pubsub: bool,
    /// See [`Builder::durable_votes`](crate::Builder::durable_votes).
    pub(crate) durable: Option<crate::rules::durable::DurableVotes>,
}

impl Config {
    /// The deadline of entries set for `ttl` by a request first sent at `start` (an acquire,
    /// an extend, a release that hands the key on): `start + ttl - drift` (invariant 2: the
    /// nodes that apply it expire the entry no earlier).
    pub(crate) fn trusted_until(&self, start: Instant, ttl: Duration) -> Instant {
        start + quorum::trusted_for(ttl, quorum::drift(ttl, self.drift_factor))
    }

    /// The one validity rule (docs/DESIGN.md, invariants 2 and 3): what is left at `now` of a
    /// deadline (from [`trusted_until`](Self::trusted_until)), when it leaves more than
    /// `min_validity`; `None` when it does not (the quorum came too late, or the time ran out).
    /// Every new hold goes through it: an attempt's quorum, a grant claimed or handed over, an
    /// extend by holder value.
    pub(crate) fn validity(&self, deadline: Instant, now: Instant) -> Option<Duration> {
        let left = deadline.checked_duration_since(now)?;
        (left > self.min_validity && !left.is_zero()).then_some(left)
    }

    /// The TTL, in ms as the nodes take it, of an entry that a guard counts on for `ttl`:
    /// `ttl` plus the lock delay. The deadline is still computed from `ttl`, so it never
    /// outlives the entries (invariant 2); they outlive it by the delay.
    pub(crate) fn node_ttl_ms(&self, ttl: Duration) -> String {
        (ttl + self.lock_delay).as_millis().to_string()
    }

    /// How long a fair lock's short grant to a waiter of this client lasts (the claim window) (see
    /// `family/lua/fair_acquire.lua`): time for a live waiter to claim it with one attempt, whether
    /// its grant's notices wake it or, lost, its own timer does: four node timeouts, or its
    /// longest pause between attempts (the retry delay and jitter, at most a third of the
    /// queue lease) plus two node timeouts when that is longer. The nodes cap it by the
    /// waiter's TTL and by what is left of its place in line.
    pub(crate) fn claim_window(&self) -> Duration {
        let pause = (self.retry_delay + self.retry_jitter).min(self.queue_lease / 3);
        self.node_timeout
            .saturating_mul(4)
            .max(pause + self.node_timeout.saturating_mul(2))
    }

    /// Checks a TTL against this configuration: it must leave room for at least one node
    /// round trip and the drift allowance, or no acquire could ever succeed.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<Duration> {
        let invalid = |reason: String| Err(Error::InvalidTtl { ttl, reason });
        // Redis keeps whole milliseconds; rounding down keeps the validity conservative.
        let ttl_ms = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        if ttl_ms.is_zero() {
            return invalid("must be at least 1 ms".into());
        }
        if ttl_ms > MAX_TTL {
            return invalid(format!("must be at most {}", Human(MAX_TTL)));
        }
        if ttl_ms + self.lock_delay > MAX_TTL {
            return invalid(format!(
                "with the lock delay ({}), must be at most {}",
                Human(self.lock_delay),
                Human(MAX_TTL - self.lock_delay.min(MAX_TTL))
            ));
        }
        // One node round trip must fit, and the least validity asked for must be reachable.
        let floor =
            self.node_timeout.max(self.min_validity) + quorum::drift(ttl_ms, self.drift_factor);
        if ttl_ms <= floor {
            return invalid(format!(
                "must be larger than max(node_timeout, min_validity) + clock drift ({})",
                Human(floor)
            ));
        }
        Ok(ttl_ms)
    }
}
