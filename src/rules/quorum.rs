//! Pure quorum arithmetic: quorum sizes, clock-drift allowance, validity and the tally of
//! per-node outcomes. No I/O and no clock: every time is passed in, so all of it is unit- and
//! property-tested without a runtime.
//!
//! Public, and stable as the algorithm is: the quorum rule ([`Quorum`]), the drift allowance
//! ([`drift`]) and the validity rule ([`validity`]), for callers who reason about a lock's
//! validity themselves. The tally of node answers is the library's own.

use std::time::Duration;

/// How many nodes must confirm an operation.
///
/// Every accepted rule requires a *strict majority* of the N nodes, so any two quorums share at
/// least one node: two clients can never both reach a quorum for the same key at the same time
/// (RedLock's safety argument). A rule that would allow a minority is rejected when the client is
/// built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Quorum {
    /// `N / 2 + 1` nodes: the RedLock rule. Survives the failure of a minority of nodes.
    #[default]
    Majority,
    /// Every node (MultiLock). Survives no node failure, but stays exclusive even when a node
    /// forgets its locks (restart without persistence).
    All,
    /// At least `k` nodes, with `N / 2 < k <= N`.
    AtLeast(usize),
}

impl Quorum {
    /// The number of confirmations required among `nodes` nodes, or a reason why this rule is
    /// not safe (or not possible) for that many nodes.
    pub fn required(self, nodes: usize) -> Result<usize, String> {
        if nodes == 0 {
            return Err("no nodes configured".into());
        }
        let majority = nodes / 2 + 1;
        match self {
            Quorum::Majority => Ok(majority),
            Quorum::All => Ok(nodes),
            Quorum::AtLeast(k) if k > nodes => Err(format!(
                "AtLeast({k}) needs more nodes than the {nodes} configured"
            )),
            Quorum::AtLeast(k) if k < majority => Err(format!(
                "AtLeast({k}) is not a majority of {nodes} nodes (need at least {majority}): two \
                 holders could both reach it"
            )),
            Quorum::AtLeast(k) => Ok(k),
        }
    }
}

/// The clock-drift allowance for a lock of `ttl`: `ttl * drift_factor + 2 ms` (RedLock step 4).
///
/// The 2 ms cover the granularity of Redis' own expiry clock.
/// Never panics: a negative factor counts as zero; a factor that is not a number, or a
/// product too large for a `Duration`, saturates (the most conservative answer).
pub fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    let scaled = if drift_factor <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(ttl.as_secs_f64() * drift_factor).unwrap_or(Duration::MAX)
    };
    scaled.saturating_add(Duration::from_millis(2))
}

/// How long after the start of a request its entries may be trusted: `ttl - drift`, zero
/// when the drift is larger. A deadline is the request's start plus this.
pub(crate) fn trusted_for(ttl: Duration, drift: Duration) -> Duration {
    ttl.saturating_sub(drift)
}

/// The time a lock may still be trusted, measured from the instant *before the first request was
/// sent*: `ttl - elapsed - drift`, or `None` when nothing is left.
///
/// It never exceeds `ttl` and never grows with `elapsed`.
pub fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

/// What one node said about one step of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Vote {
    /// The node confirmed (acquired, extended, released).
    Yes,
    /// The node answered, but refused: the key is held by someone else (or, for extend and
    /// release, not held by us).
    Refused,
    /// The node did not answer in time, or failed.
    Failed,
}

/// The running count of node votes for one operation, deciding as early as possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    nodes: usize,
    required: usize,
    yes: usize,
    refused: usize,
    failed: usize,
}

/// The outcome a [`Tally`] has reached so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Decision {
    /// Not decided yet: more answers are needed.
    Pending,
    /// The quorum confirmed.
    Reached,
    /// The quorum can no longer be reached, whatever the remaining nodes answer.
    Impossible,
}

impl Tally {
    /// A new tally over `nodes` nodes of which `required` must say yes.
    pub(crate) fn new(nodes: usize, required: usize) -> Self {
        Tally {
            nodes,
            required,
            yes: 0,
            refused: 0,
            failed: 0,
        }
    }

    /// Counts one vote and returns the decision so far.
    pub(crate) fn add(&mut self, vote: Vote) -> Decision {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::Refused => self.refused += 1,
            Vote::Failed => self.failed += 1,
        }
        self.decision()
    }

    /// The decision the votes counted so far allow.
    pub(crate) fn decision(&self) -> Decision {
        if self.yes >= self.required {
            Decision::Reached
        } else if self
            .nodes
            .saturating_sub(self.refused)
            .saturating_sub(self.failed)
            < self.required
        {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }

    /// Whether the failed nodes alone leave room for a quorum: when an attempt missed it,
    /// refusals (other holders) made the difference, not failures (contention, not an outage).
    pub(crate) fn failures_leave_room(&self) -> bool {
        self.nodes.saturating_sub(self.failed) >= self.required
    }

    /// Whether so many nodes refused that no quorum can hold the entry any more (for extend:
    /// the lock is gone).
    pub(crate) fn refusals_rule_out_quorum(&self) -> bool {
        self.nodes.saturating_sub(self.refused) < self.required
    }

    /// Nodes that confirmed.
    pub(crate) fn yes(&self) -> usize {
        self.yes
    }

    /// Nodes that answered with a refusal.
    pub(crate) fn refused(&self) -> usize {
        self.refused
    }

    /// Nodes that failed or timed out.
    pub(crate) fn failed(&self) -> usize {
        self.failed
    }

    /// Confirmations required.
    pub(crate) fn required(&self) -> usize {
        self.required
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn no_input_panics() {
        // More votes than nodes (a caller's mistake) still answers.
        let mut t = Tally::new(1, 1);
        t.add(Vote::Failed);
        assert_eq!(t.add(Vote::Refused), Decision::Impossible);
        assert!(drift(Duration::MAX, 0.4) > Duration::MAX / 3);
        assert_eq!(drift(Duration::MAX, 2.0), Duration::MAX);
        assert_eq!(drift(Duration::from_secs(1), f64::INFINITY), Duration::MAX);
        assert_eq!(drift(Duration::from_secs(1), f64::NAN), Duration::MAX);
        assert_eq!(
            drift(Duration::from_secs(1), f64::NEG_INFINITY),
            Duration::from_millis(2)
        );
        assert_eq!(
            validity(Duration::MAX, Duration::ZERO, Duration::ZERO),
            Some(Duration::MAX)
        );
        assert_eq!(
            trusted_for(Duration::from_millis(1), Duration::MAX),
            Duration::ZERO
        );
    }

    #[test]
    fn majority_sizes() {
        let sizes: Vec<usize> = (1..=9)
            .map(|n| Quorum::Majority.required(n).unwrap())
            .collect();
        assert_eq!(sizes, vec![1, 2, 2, 3, 3, 4, 4, 5, 5]);
        assert_eq!(Quorum::All.required(5).unwrap(), 5);
        assert_eq!(Quorum::AtLeast(4).required(5).unwrap(), 4);
    }

    #[test]
    fn unsafe_or_impossible_rules_are_rejected() {
        assert!(Quorum::AtLeast(2)
            .required(5)
            .unwrap_err()
            .contains("not a majority"));
        assert!(
            Quorum::AtLeast(2).required(4).is_err(),
            "2 of 4 is not a majority"
        );
        assert!(Quorum::AtLeast(6)
            .required(5)
            .unwrap_err()
            .contains("more nodes"));
        assert!(Quorum::AtLeast(0).required(1).is_err());
        assert!(Quorum::Majority.required(0).is_err());
    }

    #[test]
    fn drift_matches_the_redlock_formula() {
        assert_eq!(
            drift(Duration::from_secs(10), 0.01),
            Duration::from_millis(102)
        );
        assert_eq!(drift(Duration::from_secs(1), 0.0), Duration::from_millis(2));
    }

    #[test]
    fn validity_runs_out() {
        let ttl = Duration::from_millis(100);
        let d = drift(ttl, 0.01);
        assert_eq!(
            validity(ttl, Duration::from_millis(10), d),
            Some(Duration::from_millis(87))
        );
        assert_eq!(validity(ttl, Duration::from_millis(97), d), None);
        assert_eq!(validity(ttl, Duration::from_millis(200), d), None);
    }

    #[test]
    fn tally_decides_early() {
        let mut t = Tally::new(5, 3);
        assert_eq!(t.add(Vote::Yes), Decision::Pending);
        assert_eq!(t.add(Vote::Failed), Decision::Pending);
        assert_eq!(t.add(Vote::Yes), Decision::Pending);
        assert_eq!(t.add(Vote::Yes), Decision::Reached);

        let mut t = Tally::new(5, 3);
        assert_eq!(t.add(Vote::Refused), Decision::Pending);
        assert_eq!(t.add(Vote::Failed), Decision::Pending);
        assert_eq!(t.add(Vote::Failed), Decision::Impossible, "3 of 5 out");
    }

    proptest! {
        /// Any two accepted quorums over the same nodes intersect: q1 + q2 > n.
        #[test]
        fn any_two_quorums_intersect(n in 1usize..64, k1 in 0usize..70, k2 in 0usize..70) {
            let rules = [Quorum::Majority, Quorum::All, Quorum::AtLeast(k1), Quorum::AtLeast(k2)];
            for a in rules {
                for b in rules {
                    if let (Ok(qa), Ok(qb)) = (a.required(n), b.required(n)) {
                        prop_assert!(qa + qb > n, "{a:?}={qa} and {b:?}={qb} of {n} may not intersect");
                        prop_assert!(qa <= n && qb <= n);
                    }
                }
            }
        }

        /// Validity never exceeds the TTL and never grows as more time elapses.
        #[test]
        fn validity_is_conservative(ttl_ms in 0u64..100_000, e1 in 0u64..200_000, extra in 0u64..50_000, f in 0.0f64..0.5) {
            let ttl = Duration::from_millis(ttl_ms);
            let d = drift(ttl, f);
            let v1 = validity(ttl, Duration::from_millis(e1), d);
            let v2 = validity(ttl, Duration::from_millis(e1 + extra), d);
            if let Some(v) = v1 {
                prop_assert!(v < ttl);
            }
            prop_assert!(v2 <= v1, "{v1:?} then {v2:?}");
        }

        /// The tally never claims a quorum without enough yes votes, and never gives up while
        /// the remaining nodes could still make it.
        #[test]
        fn tally_is_sound(n in 1usize..12, votes in proptest::collection::vec(0u8..3, 0..12)) {
            let q = Quorum::Majority.required(n).unwrap();
            let mut t = Tally::new(n, q);
            for v in votes.into_iter().take(n) {
                let vote = match v { 0 => Vote::Yes, 1 => Vote::Refused, _ => Vote::Failed };
                match t.add(vote) {
                    Decision::Reached => prop_assert!(t.yes() >= q),
                    Decision::Impossible => prop_assert!(n - t.refused() - t.failed() < q),
                    Decision::Pending => {
                        prop_assert!(t.yes() < q);
                        prop_assert!(n - t.refused() - t.failed() >= q);
                    }
                }
            }
        }
    }
}
