//! The fair lock's model check configuration: the clients' plans, the faults, and the bugs
//! put back for the negative controls.

use super::*;

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// Where a request starts. The later starts are states the protocol reaches (at time 0), so
/// that the configurations with three requests can spend their bounds on what follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Start {
    /// Registered, before its first attempt.
    Fresh,
    /// Drew this ticket and joined the line on every node with an attempt refused on every
    /// node (so nothing to roll back): waiting, its queue lease running from time 0.
    InLine(u8),
    /// Its first attempt took the key on every node at time 0: holds until its TTL.
    Holding,
}

/// One fair request, bounded so that the search terminates.
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    /// The library client it belongs to: its connections and its `FairWaiters`.
    pub(super) client: u8,
    /// The guard's TTL; the nodes set its entries for as long.
    pub(super) ttl: u8,
    /// Attempts it may make (claims of a hand-off do not count).
    pub(super) attempts: u8,
    /// With its attempts used up, it gives up (and withdraws); otherwise it goes on waiting
    /// past the run's horizon, and takes a hand-off if one comes.
    pub(super) gives_up: bool,
    /// Whether it releases once it holds (at any moment, also after its deadline).
    pub(super) release: bool,
    pub(super) start: Start,
}

/// A fair request of `client` with `attempts` attempts, releasing when it holds.
pub(super) const fn request(client: u8, ttl: u8, attempts: u8) -> Plan {
    Plan {
        client,
        ttl,
        attempts,
        gives_up: false,
        release: true,
        start: Start::Fresh,
    }
}

/// The request gives up once its attempts are used up.
pub(super) const fn giving_up(plan: Plan) -> Plan {
    Plan {
        gives_up: true,
        ..plan
    }
}

/// The request, already in line with `ticket`.
pub(super) const fn in_line(plan: Plan, ticket: u8) -> Plan {
    Plan {
        start: Start::InLine(ticket),
        ..plan
    }
}

/// The request, already holding.
pub(super) const fn holding(plan: Plan) -> Plan {
    Plan {
        start: Start::Holding,
        ..plan
    }
}

/// A defect of an earlier (or imagined) version of the library, for the negative controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bug {
    /// The first short grants: a release names no waiter (every grant is short), and the
    /// hand-off counts a quorum of grants to a waiter whatever their TTL.
    HandOffOnShortGrants,
    /// Only the hand-off's check of the grant's TTL dropped (grants grouped by waiter alone).
    /// Not a counterexample: the stamp check implies it.
    HandOffIgnoresGrantTtl,
    /// The hand-off checks that the waiter is waiting, not that it waits since before the
    /// release's stamp (it may have attempted, and rolled back, since).
    HandOffIgnoresStamp,
    /// A cut-off waiter is marked waiting before its withdrawal is written and has run (the
    /// defect fixed in round 3, now in `src/waiting.rs`), in the version it was found in: the
    /// request keeps its identity after the cut-off.
    WaitingBeforeWithdrawal,
    /// `grant` without its `exists` check: it sets the key over another holder's entry.
    GrantIgnoresKey,
    /// An attempt that finds a value it may claim (its request's grant value) answers yes
    /// without setting its own value for its TTL (a claim that trusts a short grant's expiry to
    /// be whole).
    ClaimWithoutExtend,
    /// The hand-off's deadline measured from the release's decision instead of its first send.
    HandOffFromDecision,
    /// A rollback deletes the key when it holds any of the request's values (its base), not
    /// only the rolled-back attempt's own.
    RollbackByBase,
    /// A cut-off request keeps its waiter id and base after its withdrawal.
    CutOffKeepsIdentity,
    /// The line's entry stores the holder value of the attempt that last wrote it (joined the
    /// line, or renewed its place) instead of the base, and a grant sets the key to that
    /// attempt's value instead of the grant value.
    GrantSetsAttemptValue,
    /// FAIR_ACQUIRE takes over any value of the request's base (the grant value, a hand-off
    /// value of any round, or another attempt's) by setting the key to its own attempt's value,
    /// as first proposed: a late attempt then takes over the entry of a later attempt (or a
    /// hand-off's grant), and its late rollback deletes it.
    AcquireOverwritesOwnValues,
    /// The round fence dropped: FAIR_ACQUIRE claims a hand-off value of any round, its own
    /// attempt's round and later ones included (as if the hand-off set the grant value, which
    /// any attempt claims).
    HandOffWithoutRoundFence,
    /// A hold from grant notices counts each grant from when the notice is read (now) rather
    /// than from the attempt's send plus the node's gap: a notice read late is over-trusted.
    NoticeFromReading,
    /// Short grants set the grant value `B:g` (which any attempt of the request claims)
    /// rather than the hand-off value of the entry's round, and a hold from their notices
    /// holds `B:g`: a late attempt of the request takes it over.
    NoticedGrantClaimable,
    /// Not a defect, a check of the argument: a failed attempt's rollback is written and not
    /// waited for on any node (the library waits on the nodes that answered the attempt yes,
    /// to learn whether a rollback gave the key straight back to the request).
    RollbackUnwaited,
}

#[derive(Clone, Debug)]
pub(super) struct Config {
    pub(super) nodes: usize,
    pub(super) quorum: u8,
    pub(super) plans: Vec<Plan>,
    /// Global time runs from 0 to this many ticks.
    pub(super) max_time: u8,
    /// The claim window (a short grant's longest life), in ticks.
    pub(super) claim: u8,
    /// The queue lease, in ticks.
    pub(super) queue_lease: u8,
    /// Forgetful faults (restart empty, clock jump) allowed in one run.
    pub(super) forgetful: u8,
    /// Requests that may be lost in one run (`None`: any number).
    pub(super) losses: Option<u8>,
    /// The requests whose node timeout may fire (a bit per request).
    pub(super) timeouts: u8,
    /// The defects this configuration has (a bit per `Bug`).
    pub(super) bugs: u16,
    /// `SEEN_*` paths the search must reach (coverage); only these are recorded in states.
    pub(super) cover: u16,
    /// Node symmetry reduction (traces are translated back to the nodes' real names).
    pub(super) symmetry: bool,
    /// Connections that may fail and be replaced in one run, the requests written to the
    /// failed one still landing later (see [`Action::Reconnect`]).
    pub(super) reconnects: u8,
}

impl Config {
    /// `nodes` nodes, quorum `quorum`, the given requests, claim window 1 and queue lease 4
    /// ticks; no faults, no lost requests, every request's timeout on.
    pub(super) fn new(nodes: usize, quorum: u8, plans: &[Plan], max_time: u8) -> Config {
        assert!(nodes <= MAX_N && plans.len() <= MAX_R);
        assert!(
            plans.iter().filter(|p| p.start == Start::Holding).count() <= 1,
            "one holder at a time"
        );
        Config {
            nodes,
            quorum,
            plans: plans.to_vec(),
            max_time,
            claim: 1,
            queue_lease: 4,
            forgetful: 0,
            losses: Some(0),
            timeouts: ((1 << MAX_R) - 1) as u8,
            bugs: 0,
            cover: 0,
            symmetry: true,
            reconnects: 0,
        }
    }

    pub(super) fn forgetful(mut self, f: u8) -> Config {
        self.forgetful = f;
        self
    }

    pub(super) fn losses(mut self, losses: Option<u8>) -> Config {
        self.losses = losses;
        self
    }

    /// Only these requests' timeouts fire.
    pub(super) fn timeouts(mut self, mask: u8) -> Config {
        self.timeouts = mask;
        self
    }

    /// The claim window, in ticks.
    pub(super) fn claim(mut self, claim: u8) -> Config {
        self.claim = claim;
        self
    }

    pub(super) fn reconnects(mut self, reconnects: u8) -> Config {
        self.reconnects = reconnects;
        self
    }

    pub(super) fn cover(mut self, seen: u16) -> Config {
        self.cover = seen;
        self
    }

    pub(super) fn bug(mut self, bug: Bug) -> Config {
        self.bugs |= 1 << bug as u16;
        self
    }

    pub(super) fn has(&self, bug: Bug) -> bool {
        self.bugs & 1 << bug as u16 != 0
    }

    pub(super) fn clients(&self) -> usize {
        self.plans
            .iter()
            .map(|p| usize::from(p.client) + 1)
            .max()
            .unwrap_or(0)
    }
}
