//! Exhaustive model check of the fair lock (`QuorumLock::fair_lock`), with `stateright`.
//!
//! The mutex and the read-write lock are checked in `tests/model/`; this file checks what the
//! fair lock adds: the line, tickets, grants (whole and short), claims and the same-client
//! hand-off, with holder values that tell a request's attempts and its grants apart. It
//! borrows that file's approach (a `Copy` state, packed requests, a byte encoding for hashing,
//! node symmetry, narrated counterexamples) and mirrors:
//!
//! - **Holder values and rounds** (variant "F" of the library). A fair request has an
//!   identity: a waiter id and a base `B = fair:<waiter id>:<secret>`. Attempt `k` holds
//!   `B:<nonce_k>`, a value of its own; a short grant sets the request's grant value `B:g`; a
//!   hand-off by its own client's release sets its hand-off value `B:h<r>`, `r` being the
//!   round of the waiter's last attempt. Rounds: a request counts its attempts (1, 2, ...,
//!   across identities); an attempt of round `k` carries `k`, a waiter is marked waiting with
//!   the round of its last attempt, and a release's `sure` set carries each waiter's round.
//!   The model names a value by its request, its identity and its attempt or round ([`Val`]:
//!   `r1:a2`, `r1:g`, `r1:h1`; `r1'` is r1's second identity; `a<k>` counts attempts within
//!   the identity, the round within the request).
//! - **The node scripts** (`src/family/lua/`: `fair_line.lua`, the prelude; `fair_acquire.lua`,
//!   `fair_release.lua`, `fair_withdraw.lua`, `ticket_draw.lua`), step for step, on a node
//!   holding the key's entry (holder value, expiry), the line (waiter id -> ticket), the queue
//!   leases (waiter id -> expiry), the ticket counter (value, expiry). The per-waiter hash
//!   entry (`ttl claim base`) is written and deleted with the line's member and lease (`leave`),
//!   and its contents are the identity's own: the model keeps it implicit, a waiter id being
//!   in line exactly when it has all three. The line is kept per waiter id, so an identity a
//!   request left may still be in line on a node where its withdrawal has not run (or where a
//!   late attempt of it joined again). The prelude's purge is the tick's (and the clock
//!   jump's) expiry. `grant` checks that the key is free, takes the first live waiter (lowest
//!   ticket, ties broken by waiter id): a waiter in the release's `sure` set gets its hand-off
//!   value `B:h<r>` (the round sent with it) for its whole TTL; any other its grant value
//!   `B:g` for `max(1, min(ttl, claim window, what is left of its queue lease))`, its queue
//!   lease cut to the same instant (a short grant). `keep_line` moves the ticket counter's
//!   expiry to the latest queue lease, or deletes the counter with an empty line.
//!   FAIR_ACQUIRE of attempt `A_k` (round `k`): the key's value is *claimable* if it is `A_k`
//!   itself (a re-sent attempt), the request's `G`, or its `H_r` with `r < k` (the hand-off
//!   did not happen, since the waiter attempts again); a claimable value is replaced (`SET key
//!   A_k PX ttl`) and the answer is yes. Any other value (another attempt's, `H_r` with
//!   `r >= k`, another request's) holds the key. Otherwise as before: yes only for a free key
//!   with nobody in line (no ticket, `?`) or for the first live waiter (with a ticket, joining
//!   the line), `SET` to the attempt's value; a refusal draws a ticket (`?`) and grants a free
//!   key to the first live waiter. FAIR_RELEASE mode 1 (a release) deletes any value of the
//!   guard's base, leaves the line and grants; mode 2 (a rollback, or the give-back of a
//!   hand-off claimed too late) deletes only the value it carries, exactly, and grants only
//!   where it deleted (possibly to the request itself: `G`, short, unless in `sure`).
//!   FAIR_WITHDRAW leaves the line, deletes any value of its base and grants.
//! - **A fair request** (`src/waiting.rs`, `Waiting`: the wait loop, the cut-off,
//!   `draw_ticket`; `src/acquire.rs`: `attempt`, `give_back`, `claim`; `src/fair.rs`): a
//!   ticket once drawn. Before each attempt it takes a hand-off grant if a release gave it one
//!   (then holds, with the grant's deadline and its hand-off value `H_r`, if the deadline is
//!   still ahead; otherwise it gives `H_r` back, FAIR_RELEASE mode 2) or marks itself
//!   attempting (its next attempt has round `r + 1`; a waiter handed the lock makes no further
//!   attempt). An attempt notes `t0` and sends FAIR_ACQUIRE with a fresh value to every node
//!   (ticket `?` before it has one, so that refusals draw); at quorum it holds with deadline
//!   `t0 + ttl` if `now < t0 + ttl`; otherwise (too late, or the quorum impossible) it rolls
//!   back (FAIR_RELEASE mode 2) on every node that did not answer "refused", and *waits* for
//!   that rollback (every part answered or timed out). An attempt with a ticket whose nodes
//!   failed so that no quorum was possible (`NoQuorum`) is cut off: it withdraws
//!   (FAIR_WITHDRAW, waited for as well), drops its ticket and takes a new identity (it
//!   registers with its client's waiters under the new waiter id). Only then is it marked
//!   waiting (with a fresh stamp). A refused attempt without a ticket takes the largest ticket
//!   drawn if a quorum of refusals drew one, and otherwise draws one in a round of its own
//!   (TICKET_DRAW; the request is already marked waiting meanwhile, as in the library). A
//!   claim of a short grant is an ordinary attempt. A request whose attempts are used up
//!   either gives up (FAIR_WITHDRAW to every node, not waited for: the `Withdraw` drop guard;
//!   it leaves its client's waiters, dropping a hand-off that came after its last miss) or, as
//!   the configuration says, goes on waiting past the run's horizon (it takes a hand-off if
//!   one comes; claims are not attempts).
//! - **The release** (`src/lease.rs`, `release_round`; `src/fair.rs`, `hand_off`): the holder
//!   stops trusting the guard; takes a stamp, the instant `sent` and the waiter ids of its
//!   client's waiters waiting since before the stamp (`waiting_before`: the `sure` set); then
//!   (a separate step, so that waiters may change state in between) sends FAIR_RELEASE mode 1
//!   naming them, each with its round, to every node. At quorum, if a quorum of the answers
//!   granted one waiter id of this client the same TTL, equal to its whole TTL, and that
//!   waiter is still registered under that id and waiting since before the stamp (the model:
//!   it has not left the waiting state since the release's first step, so its round is the
//!   one sent), the waiter is handed the lock with deadline `sent + ttl` and value `H_r`.
//!
//! Requests belong to clients (library clients: one `FairWaiters` and one connection per node
//! each). A client's requests share its connection to each node: one FIFO queue per
//! (client, node), whose head a node may run at any moment. Requests may be lost; a request's
//! node timeout may fire at any moment and fails every node of its current fan-out that has
//! not answered (a waited-for broadcast, the rollback or the withdrawal, then stops waiting for
//! them; they may still run later). Global time in ticks; node clocks at the true rate, drift
//! 0, `min_validity` 0, lock delay 0; an entry, queue lease or counter has expired when
//! `now >= expiry`. Forgetful faults, bounded per run: a restart empty (the key, the line, the
//! leases and the counter lost; requests still queued run on the restarted node) and a clock
//! jump past a time (everything that would expire by then expires at once).
//!
//! A connection may also fail and be replaced while what was written to it may still land,
//! after what is written to the new connection ([`Action::Reconnect`]): ordering invariants 1
//! and 2 (a request written to a connection runs on its node before anything its client
//! writes there later) then no longer hold. With one holder value per request, a rollback or
//! withdrawal waited for until it timed out could land after the request's next attempt, or
//! after its client's hand-off, and delete the entry that attempt or hand-off counted on. The
//! holder values above make safety independent of that ordering: a late rollback deletes only
//! its own attempt's value, a late withdrawal only the values of the identity the request
//! left, and a late acquire takes over no value a guard counts on (another attempt's value is
//! held; a hand-off value is claimable only by an attempt of a later round than the one the
//! hand-off was made for, and a waiter handed the lock makes no further attempt). The
//! configurations with reconnects check this. One ordering still matters: a hand-off needs
//! its waiter waiting since before the release's stamp (an attempt made after the stamp, of a
//! later round, may claim the hand-off value and roll it back).
//!
//! Properties: (a) `exclusion`: no two requests are inside the validity of a guard at once
//! (within the tolerance of forgetful faults, `f <= 2q - N - 1`); (a') `support`: while a
//! request is inside its validity, at least `q - f` nodes hold its guard's value exactly
//! (`A_k`, or `H_r` after a hand-off: nothing of the request replaces either) with an expiry
//! no earlier than its deadline (invariant 2); (b) `hand-off within its grants`: a hand-off's
//! deadline is never later than the expiry of any grant the hand-off counted (so no short
//! grant is taken for a whole one); (c) `sometimes` each request holds, and the coverage
//! properties a configuration asks for (a hand-off, a claimed grant, a short grant, a grant
//! that lapsed unclaimed, a rollback that re-granted the key to its own request, a cut-off
//! withdrawal, a draw round, a request that gave up, a forgotten node, a rollback or
//! withdrawal that landed late).
//!
//! Negative controls ([`Bug`], the tests named `negative_*`): the hand-off counting short
//! grants (with a release that names no waiter, so that every grant is short), a waiter marked
//! waiting before its cut-off withdrawal ran (the defect fixed in round 3, in the version it
//! was found in: one identity per request), a grant that does not check that the key is free,
//! a claim that does not extend the granted entry, a hand-off deadline measured from the
//! decision instead of the release's first send, a plain majority with a forgetful node; and,
//! with a reconnect, an acquire that takes over any value of its request's base (as first
//! proposed), a rollback that deletes by base, a cut-off request that keeps its identity, a
//! grant that sets the waiter's last attempt's value, a hand-off value without the round
//! fence (claimable by any attempt), and a hand-off without its stamp check. The hand-off's
//! check of the grant's TTL is *implied* by its check of the stamp (a waiter waiting since
//! before the stamp is in the `sure` set, which every node grants the whole TTL): dropping it
//! finds no counterexample. The stamp check itself is caught only with a reconnect.
//!
//! Variant "H" (an acquire that finds `G` or its own value extends it with `PEXPIRE` and keeps
//! the value; a hand-off sets `G` for the whole TTL) was checked safe by the previous version
//! of this file, but has a liveness defect: a claim whose attempt then fails leaves `G`
//! extended to the whole TTL, and with grants split between waiters the line stalls until it
//! expires (`tests/fair.rs`,
//! `a_grant_split_between_waiters_is_mended_without_waiting_the_grants_out`, fails under it).
//! The library and this model use F.
//!
//! Not modelled (docs/SAFETY.md, "Model check", "The fair lock", lists every simplification
//! and why): extend, watchdog, repair and fencing of a fair guard (the mutex's own calls,
//! checked in `tests/model/`); release by token; `try_acquire` (a single attempt without a
//! ticket); the notices, wake-ups, lapse timers, backoff and `after_local_releases` (a request
//! may take its next step at any moment, which includes every order those allow); the wait's
//! deadline (a request gives up only when its attempts are used up); eviction of one of the
//! line's keys alone; a key holder or waiter of another primitive; connecting, NOSCRIPT and
//! re-sends after a reset (every request is on its connection when its fan-out starts; a lost
//! one is gone; a replaced connection's requests are not sent again); replies travelling
//! separately (a node's answer arrives as it runs); and anything beyond each configuration's
//! bounds (nodes, requests, attempts, ticks, losses, reconnects, faults).
//!
//! Run: `cargo test --all-features --test model_fair -- --nocapture` prints the state counts
//! and the counterexample traces; the larger configurations are `#[ignore]`d:
//! `cargo test --release --all-features --test model_fair -- --ignored --nocapture`.

use std::collections::BTreeSet;
use std::time::Instant;

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path, Property};

/// Fixed capacities, so that a state is a plain `Copy` value.
const MAX_N: usize = 5;
/// Requests (and so at most as many clients).
const MAX_R: usize = 3;
/// Requests one connection can hold at once.
const QUEUE: usize = 10;
/// Identities one request may take: a cut-off request takes a new one, and a request makes at
/// most three attempts.
const GENS: usize = 4;
/// Waiter ids: one per identity of each request (`waiter`).
const SLOTS: usize = MAX_R * GENS;

fn bit(i: usize) -> u8 {
    1 << i
}

/// A waiter slot's bit, in a set of waiter ids (the release's `sure` set).
fn slot_bit(w: usize) -> u16 {
    1 << w
}

/// The waiter id of request `r`'s identity `gen`: its slot in the line, and the base of its
/// holder values.
fn waiter(r: usize, gen: u8) -> usize {
    r * GENS + usize::from(gen)
}

/// A waiter id's name: the request, and a prime for each identity it took after its first
/// (`r1`, then `r1'` after a cut-off).
fn waiter_name(w: usize) -> String {
    format!("r{}{}", w / GENS, "'".repeat(w % GENS))
}

/// A holder value: the base `fair:<waiter id>:<secret>` of one identity of a request (its
/// waiter slot, low 4 bits) and what follows it (high 4 bits): 0 for the grant value `B:g`,
/// `1..=7` for attempt `k`'s `B:<nonce_k>` (`k` counted within the identity), `8 + r` for the
/// hand-off value `B:h<r>` of round `r`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Val(u8);

impl Val {
    /// Attempt `k` (from 1) of request `r`'s identity `gen`.
    fn attempt(r: usize, gen: u8, k: u8) -> Val {
        assert!((1..8).contains(&k) && usize::from(gen) < GENS);
        Val(waiter(r, gen) as u8 | k << 4)
    }

    /// The grant value of request `r`'s identity `gen`.
    fn grant(r: usize, gen: u8) -> Val {
        Val(waiter(r, gen) as u8)
    }

    /// The grant value of waiter `w`.
    fn granted_to(w: usize) -> Val {
        Val(w as u8)
    }

    /// The hand-off value of waiter `w` for round `round` (its last attempt's).
    fn handed(w: usize, round: u8) -> Val {
        assert!(round < 8);
        Val(w as u8 | (8 + round) << 4)
    }

    /// Its base: the waiter id it belongs to.
    fn base(self) -> usize {
        usize::from(self.0 & 15)
    }

    /// The attempt (within its identity) for an attempt's value, 0 otherwise.
    fn k(self) -> u8 {
        match self.0 >> 4 {
            k @ 1..8 => k,
            _ => 0,
        }
    }

    /// The round of a hand-off value `B:h<r>`.
    fn round(self) -> Option<u8> {
        (self.0 >> 4 >= 8).then(|| (self.0 >> 4) - 8)
    }

    fn describe(self) -> String {
        let name = waiter_name(self.base());
        match (self.k(), self.round()) {
            (_, Some(r)) => format!("{name}:h{r}"),
            (0, None) => format!("{name}:g"),
            (k, None) => format!("{name}:a{k}"),
        }
    }
}

fn ones(mask: u8) -> u8 {
    mask.count_ones() as u8
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// Where a request starts. The later starts are states the protocol reaches (at time 0), so
/// that the configurations with three requests can spend their bounds on what follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
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
struct Plan {
    /// The library client it belongs to: its connections and its `FairWaiters`.
    client: u8,
    /// The guard's TTL; the nodes set its entries for as long.
    ttl: u8,
    /// Attempts it may make (claims of a hand-off do not count).
    attempts: u8,
    /// With its attempts used up, it gives up (and withdraws); otherwise it goes on waiting
    /// past the run's horizon, and takes a hand-off if one comes.
    gives_up: bool,
    /// Whether it releases once it holds (at any moment, also after its deadline).
    release: bool,
    start: Start,
}

/// A fair request of `client` with `attempts` attempts, releasing when it holds.
const fn request(client: u8, ttl: u8, attempts: u8) -> Plan {
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
const fn giving_up(plan: Plan) -> Plan {
    Plan {
        gives_up: true,
        ..plan
    }
}

/// The request, already in line with `ticket`.
const fn in_line(plan: Plan, ticket: u8) -> Plan {
    Plan {
        start: Start::InLine(ticket),
        ..plan
    }
}

/// The request, already holding.
const fn holding(plan: Plan) -> Plan {
    Plan {
        start: Start::Holding,
        ..plan
    }
}

/// A defect of an earlier (or imagined) version of the library, for the negative controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
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
}

#[derive(Clone, Debug)]
struct Config {
    nodes: usize,
    quorum: u8,
    plans: Vec<Plan>,
    /// Global time runs from 0 to this many ticks.
    max_time: u8,
    /// The claim window (a short grant's longest life), in ticks.
    claim: u8,
    /// The queue lease, in ticks.
    queue_lease: u8,
    /// Forgetful faults (restart empty, clock jump) allowed in one run.
    forgetful: u8,
    /// Requests that may be lost in one run (`None`: any number).
    losses: Option<u8>,
    /// The requests whose node timeout may fire (a bit per request).
    timeouts: u8,
    /// The defects this configuration has (a bit per `Bug`).
    bugs: u16,
    /// `SEEN_*` paths the search must reach (coverage); only these are recorded in states.
    cover: u16,
    /// Node symmetry reduction (traces are translated back to the nodes' real names).
    symmetry: bool,
    /// Connections that may fail and be replaced in one run, the requests written to the
    /// failed one still landing later (see [`Action::Reconnect`]).
    reconnects: u8,
}

impl Config {
    /// `nodes` nodes, quorum `quorum`, the given requests, claim window 1 and queue lease 4
    /// ticks; no faults, no lost requests, every request's timeout on.
    fn new(nodes: usize, quorum: u8, plans: &[Plan], max_time: u8) -> Config {
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

    fn forgetful(mut self, f: u8) -> Config {
        self.forgetful = f;
        self
    }

    fn losses(mut self, losses: Option<u8>) -> Config {
        self.losses = losses;
        self
    }

    /// Only these requests' timeouts fire.
    fn timeouts(mut self, mask: u8) -> Config {
        self.timeouts = mask;
        self
    }

    fn reconnects(mut self, reconnects: u8) -> Config {
        self.reconnects = reconnects;
        self
    }

    fn cover(mut self, seen: u16) -> Config {
        self.cover = seen;
        self
    }

    fn bug(mut self, bug: Bug) -> Config {
        self.bugs |= 1 << bug as u16;
        self
    }

    fn has(&self, bug: Bug) -> bool {
        self.bugs & 1 << bug as u16 != 0
    }

    fn clients(&self) -> usize {
        self.plans
            .iter()
            .map(|p| usize::from(p.client) + 1)
            .max()
            .unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

/// The key's entry: the holder value and its expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    holder: Val,
    expiry: u8,
}

/// One node's keys for the fair lock's key `K`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct NodeState {
    /// `K`.
    key: Option<Entry>,
    /// The line (`quorum-lock:queue:{<h>}:K`): each waiter id's ticket (a slot per identity of each
    /// request, see `waiter`), 0 when not in line. A waiter in line also has its queue lease
    /// and its hash entry.
    line: [u8; SLOTS],
    /// The queue leases (`quorum-lock:queue-expiry:{<h>}:K`): expiry, for the waiters in line.
    lease: [u8; SLOTS],
    /// The attempt whose holder value the waiter's hash entry stores (only with
    /// `Bug::GrantSetsAttemptValue`; otherwise it stores the base, and this stays 0).
    entry: [u8; SLOTS],
    /// The ticket counter (`quorum-lock:ticket:{<h>}:K`), with its expiry; 0 and 0 when absent.
    counter: u8,
    counter_exp: u8,
}

impl NodeState {
    fn in_line(&self, w: usize) -> bool {
        self.line[w] != 0
    }

    /// `leave(w)`: out of the line, its lease and hash entry with it.
    fn leave(&mut self, w: usize) {
        self.line[w] = 0;
        self.lease[w] = 0;
        self.entry[w] = 0;
    }

    /// Whether the key holds one of the values of base `w` (`belongs` in the scripts).
    fn key_of(&self, w: usize) -> bool {
        self.key.is_some_and(|e| e.holder.base() == w)
    }

    /// `first_live()`: the lowest ticket in line, ties broken by waiter id.
    fn first_live(&self) -> Option<usize> {
        (0..SLOTS)
            .filter(|&w| self.in_line(w))
            .min_by_key(|&w| (self.line[w], w))
    }

    /// `keep_line()`: the line's keys and the counter live until the latest queue lease; with
    /// nobody in line, they are deleted (the counter too).
    fn keep_line(&mut self) {
        let last = (0..SLOTS)
            .filter(|&w| self.in_line(w))
            .map(|w| self.lease[w])
            .max();
        match last {
            Some(last) if self.counter_exp != 0 => self.counter_exp = last,
            Some(_) => {}
            None => {
                self.counter = 0;
                self.counter_exp = 0;
            }
        }
    }

    /// `INCR` of the ticket counter, which then lives at least a queue lease.
    fn draw(&mut self, now: u8, queue_lease: u8) -> u8 {
        self.counter += 1;
        if self.counter_exp == 0 || self.counter_exp - now < queue_lease {
            self.counter_exp = now + queue_lease;
        }
        self.counter
    }

    /// The expiries of everything on the node with a TTL.
    fn expiries(&self) -> impl Iterator<Item = u8> + '_ {
        let key = self.key.map(|e| e.expiry);
        let counter = (self.counter_exp != 0).then_some(self.counter_exp);
        let leases = (0..SLOTS)
            .filter(|&w| self.in_line(w))
            .map(|w| self.lease[w]);
        key.into_iter().chain(counter).chain(leases)
    }

    /// Removes everything that expires at or before `time`; says whether anything did.
    fn expire(&mut self, time: u8) -> bool {
        let mut any = false;
        if self.key.is_some_and(|e| e.expiry <= time) {
            self.key = None;
            any = true;
        }
        for w in 0..SLOTS {
            if self.in_line(w) && self.lease[w] <= time {
                self.leave(w);
                any = true;
            }
        }
        if self.counter_exp != 0 && self.counter_exp <= time {
            self.counter = 0;
            self.counter_exp = 0;
            any = true;
        }
        any
    }
}

/// A request's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// FAIR_ACQUIRE of an attempt's holder value; `arg` the ticket (low byte, 0 for `?`: none
    /// yet, drawn where refused) and the attempt's round (high byte).
    Acquire = 0,
    /// FAIR_RELEASE mode 1 (a release) of the guard's holder value (an attempt's, or the
    /// grant value after a hand-off); `arg` the `sure` set, a bit per waiter id.
    Release = 1,
    /// FAIR_RELEASE mode 2 (a failed attempt's rollback, or a hand-off claimed too late) of
    /// that attempt's holder value (the grant value after a hand-off).
    Rollback = 2,
    /// FAIR_WITHDRAW of a waiter id (the value carries its base).
    Withdraw = 3,
    /// TICKET_DRAW.
    Draw = 4,
}

/// A request on its connection, packed into 32 bits: kind, request, whether its answer is
/// waited for, the holder value it carries, argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Req(u32);

impl Req {
    fn new(kind: Kind, r: usize, val: Val, arg: u16, wait: bool) -> Req {
        Req(kind as u32
            | (r as u32) << 3
            | u32::from(wait) << 5
            | u32::from(val.0) << 8
            | u32::from(arg) << 16)
    }

    fn kind(self) -> Kind {
        match self.0 & 7 {
            0 => Kind::Acquire,
            1 => Kind::Release,
            2 => Kind::Rollback,
            3 => Kind::Withdraw,
            _ => Kind::Draw,
        }
    }

    fn r(self) -> usize {
        (self.0 >> 3 & 3) as usize
    }

    fn wait(self) -> bool {
        self.0 & 1 << 5 != 0
    }

    fn val(self) -> Val {
        Val((self.0 >> 8) as u8)
    }

    fn arg(self) -> u16 {
        (self.0 >> 16) as u16
    }

    fn unwaited(self) -> Req {
        Req(self.0 & !(1 << 5))
    }

    fn describe(self) -> String {
        let (val, arg) = (self.val().describe(), self.arg());
        match self.kind() {
            Kind::Acquire if arg & 0xff == 0 => {
                format!("acquire {val} (round {}) ticket ?", arg >> 8)
            }
            Kind::Acquire => format!("acquire {val} (round {}) ticket {}", arg >> 8, arg & 0xff),
            Kind::Release if arg == 0 => format!("release {val}"),
            Kind::Release => format!("release {val} sure {}", waiters_of(arg)),
            Kind::Rollback => format!("rollback {val}"),
            Kind::Withdraw => format!("withdraw {}", waiter_name(self.val().base())),
            Kind::Draw => format!("ticket-draw r{}", self.r()),
        }
    }
}

/// A FIFO request queue: one connection. Unused slots stay `Default`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Fifo {
    len: u8,
    items: [Req; QUEUE],
}

impl Fifo {
    fn push(&mut self, req: Req) {
        assert!(usize::from(self.len) < QUEUE, "connection queue overflow");
        self.items[usize::from(self.len)] = req;
        self.len += 1;
    }

    fn pop(&mut self) -> Req {
        let head = self.items[0];
        self.items.copy_within(1.., 0);
        self.len -= 1;
        self.items[usize::from(self.len)] = Req::default();
        head
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Nobody waits for request `r`'s answers on this connection any more.
    fn unwait(&mut self, r: usize) {
        for req in &mut self.items[..usize::from(self.len)] {
            if req.r() == r {
                *req = req.unwaited();
            }
        }
    }
}

/// The current fan-out (or waited-for broadcast) of a request, as `fanout::Outcome` keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Fan {
    /// Nodes whose answer is still awaited.
    pending: u8,
    yes: u8,
    refused: u8,
    failed: u8,
    /// The largest ticket drawn by a refusal (`?` acquire), or counter (draw round).
    max: u8,
    /// A release's grants, per node: `(waiter id + 1) | ms << 4`, 0 for none.
    grant: [u8; MAX_N],
    /// The expiry of each such grant on its node.
    gexp: [u8; MAX_N],
}

/// What a node answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Answer {
    yes: bool,
    /// A ticket drawn by a refused `?` acquire, or the counter of a draw round.
    value: u8,
    /// A grant made by a release: waiter id, ms, expiry.
    grant: Option<(usize, u8, u8)>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// At the top of the wait loop: its next step takes a hand-off, attempts, or gives up.
    #[default]
    Pause,
    /// An attempt's fan-out is running.
    Attempt,
    /// Its rollback is running (waited for).
    Rollback,
    /// Its cut-off withdrawal (waited for); `sent: false` only with
    /// `Bug::WaitingBeforeWithdrawal`, marked waiting before the withdrawal is written.
    Withdraw { sent: bool },
    /// A draw round is running (the request is marked waiting meanwhile).
    Draw,
    /// A guard, valid while `now < deadline`.
    Holding,
    /// Its release: the stamp taken; `sent` once the requests are written.
    Release { sent: bool },
    /// Released, or gave up.
    Done,
}

/// What the attempt being rolled back ended with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Miss {
    #[default]
    None,
    /// Refusals made the difference.
    Contended,
    /// Failures ruled the quorum out (`NoQuorum`).
    NoQuorum,
    /// The quorum came too late, or a hand-off was claimed after its deadline.
    Exhausted,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Request {
    phase: Phase,
    /// Its identity: 0, and one more after each cut-off (its waiter id is `waiter(r, gen)`).
    gen: u8,
    /// Attempts made with this identity (attempt `k`'s holder value is `Val::attempt(.., k)`).
    nonce: u8,
    /// The round of its last attempt: the request's attempt counter, which goes on counting
    /// across a new identity (a start in line or holding counts as round 1). Recorded with its
    /// `Waiting` state, sent with a release's `sure` set, fences its hand-off value.
    round: u8,
    /// The holder value of its current attempt, or of its guard (the grant value after a
    /// hand-off), or of what it rolls back.
    holder: Val,
    /// Its slot among its client's waiters is `Waiting { since }` (a hand-off may come).
    waiting: bool,
    /// `Granted`: a release of its client handed it the lock until this deadline (0: not).
    granted: u8,
    attempts: u8,
    /// Its ticket, 0 for none.
    ticket: u8,
    t0: u8,
    deadline: u8,
    miss: Miss,
    /// A ticket drawn by a quorum of its refused `?` attempt's refusals (0: none).
    drawn: u8,
    /// A release: the `sure` set sent to the nodes (waiter ids).
    sure: u16,
    /// A release: the round sent with each waiter of the `sure` set, 4 bits per request.
    sure_rounds: u16,
    /// A release: the waiters of its client waiting since before its stamp that still are.
    eligible: u8,
    /// A release: the instant taken with the stamp, before anything was sent.
    sent: u8,
    fan: Fan,
}

impl Request {
    /// Inside the validity of a guard.
    fn holds(&self, now: u8) -> bool {
        self.phase == Phase::Holding && now < self.deadline
    }
}

/// Paths worth confirming that the search reaches (recorded only when a configuration asks).
const SEEN_HANDOFF: u16 = 1;
/// An attempt answered yes by a node where it found its request's grant value (a claim).
const SEEN_CLAIMED: u16 = 2;
const SEEN_SHORT_GRANT: u16 = 4;
/// A short grant expired with its waiter's place, unclaimed.
const SEEN_LAPSED: u16 = 8;
/// A rollback re-granted the key to its own request.
const SEEN_SELF_REGRANT: u16 = 16;
const SEEN_CUT_OFF: u16 = 32;
const SEEN_DRAW_ROUND: u16 = 64;
const SEEN_GAVE_UP: u16 = 128;
const SEEN_FORGOTTEN: u16 = 256;
/// A rollback or withdrawal written to a connection that failed ran on its node afterwards.
const SEEN_LATE: u16 = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    now: u8,
    lost: u8,
    forgotten: u8,
    /// Property (b) broke: a hand-off's deadline was later than a grant it counted.
    overrun: bool,
    seen: u16,
    nodes: [NodeState; MAX_N],
    reqs: [Request; MAX_R],
    /// Request queues, index `client * MAX_N + node`.
    conns: [Fifo; MAX_R * MAX_N],
    /// What was written to a connection that failed and was replaced, and may still land on
    /// its node, in its own order but in any order with the new connection's (only with
    /// `Config::reconnects`).
    stale: [Fifo; MAX_R * MAX_N],
    /// Connections replaced so far.
    reconnected: u8,
}

/// A byte encoding of (part of) a state, for hashing and for ordering the nodes.
struct Enc<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Enc<N> {
    fn new() -> Self {
        Enc {
            buf: [0; N],
            len: 0,
        }
    }

    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn node(&mut self, node: &NodeState) {
        let key = node.key.map_or([0, 0], |e| [e.holder.0 + 1, e.expiry]);
        self.put(&key);
        // The line's members only: most of its slots are empty.
        for w in (0..SLOTS).filter(|&w| node.in_line(w)) {
            self.put(&[w as u8, node.line[w], node.lease[w], node.entry[w]]);
        }
        self.put(&[u8::MAX, node.counter, node.counter_exp]);
    }

    fn fifo(&mut self, fifo: &Fifo) {
        self.put(&[fifo.len]);
        for req in &fifo.items[..usize::from(fifo.len)] {
            self.put(&req.0.to_le_bytes());
        }
    }
}

impl std::hash::Hash for State {
    fn hash<H: std::hash::Hasher>(&self, hasher: &mut H) {
        let mut e = Enc::<2048>::new();
        e.put(&[
            self.now,
            self.lost,
            self.forgotten,
            u8::from(self.overrun),
            self.reconnected,
        ]);
        e.put(&self.seen.to_le_bytes());
        for node in &self.nodes {
            e.node(node);
        }
        for r in &self.reqs {
            let phase = match r.phase {
                Phase::Pause => 0,
                Phase::Attempt => 1,
                Phase::Rollback => 2,
                Phase::Withdraw { sent } => 3 + u8::from(sent),
                Phase::Draw => 5,
                Phase::Holding => 6,
                Phase::Release { sent } => 7 + u8::from(sent),
                Phase::Done => 9,
            };
            let miss = r.miss as u8;
            e.put(&[
                phase,
                u8::from(r.waiting) | miss << 1,
                r.gen,
                r.nonce,
                r.round,
                r.holder.0,
                r.granted,
                r.attempts,
                r.ticket,
                r.t0,
                r.deadline,
                r.drawn,
                r.eligible,
                r.sent,
            ]);
            e.put(&r.sure.to_le_bytes());
            e.put(&r.sure_rounds.to_le_bytes());
            let f = &r.fan;
            e.put(&[f.pending, f.yes, f.refused, f.failed, f.max]);
            if f.grant != [0; MAX_N] {
                e.put(&f.grant);
                e.put(&f.gexp);
            }
        }
        for fifo in self.conns.iter().chain(&self.stale) {
            e.fifo(fifo);
        }
        hasher.write(e.bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Actions and their narration
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Global time advances by one tick; entries, queue leases and counters expire.
    Tick,
    /// Request `r`, at the top of its wait loop: takes its hand-off, attempts, or gives up.
    Step(u8),
    /// Request `r` releases its guard: the stamp, `sent` and the `sure` set.
    Release(u8),
    /// Request `r`'s release is written to every node.
    SendRelease(u8),
    /// Request `r`'s cut-off withdrawal is written (`Bug::WaitingBeforeWithdrawal` only).
    SendWithdraw(u8),
    /// Node `n` runs the oldest request on client `c`'s connection.
    Process(u8, u8),
    /// The oldest request on client `c`'s connection to node `n` is lost.
    Lose(u8, u8),
    /// Request `r`'s node timeout: it stops waiting for every node that has not answered.
    TimeOut(u8),
    /// Node `n` runs the oldest request written to client `c`'s failed connection to it.
    ProcessStale(u8, u8),
    /// Client `c`'s connection to node `n` fails and is replaced (`Config::reconnects`). The
    /// requests awaited on it fail (their re-sends are not modelled); those written to it may
    /// still run on the node later (e.g. buffered by a proxy in front of a paused node), in
    /// any order with what is written to the new connection. Ordering invariants 1 and 2
    /// assume they do not; the holder values make safety independent of them.
    Reconnect(u8, u8),
    /// Node `n` restarts empty.
    Restart(u8),
    /// Node `n`'s clock jumps past time `t`: what would have expired by then expires now.
    ClockJump(u8, u8),
}

/// Collects the narration of a step, only when asked (never during the search).
struct Log {
    on: bool,
    lines: Vec<String>,
}

impl Log {
    fn off() -> Log {
        Log {
            on: false,
            lines: Vec::new(),
        }
    }

    fn on() -> Log {
        Log {
            on: true,
            lines: Vec::new(),
        }
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if self.on {
            self.lines.push(line());
        }
    }
}

fn nodes_of(mask: u8) -> String {
    let names: Vec<String> = (0..MAX_N)
        .filter(|n| mask & bit(*n) != 0)
        .map(|n| format!("n{n}"))
        .collect();
    format!("{{{}}}", names.join(","))
}

fn waiters_of(mask: u16) -> String {
    let names: Vec<String> = (0..SLOTS)
        .filter(|&w| mask & slot_bit(w) != 0)
        .map(waiter_name)
        .collect();
    format!("{{{}}}", names.join(","))
}

/// A node's state in a few words.
fn describe_node(node: &NodeState) -> String {
    let mut parts = Vec::new();
    match node.key {
        Some(e) => parts.push(format!("key {} until {}", e.holder.describe(), e.expiry)),
        None => parts.push("key free".to_string()),
    }
    let mut line: Vec<usize> = (0..SLOTS).filter(|&w| node.in_line(w)).collect();
    line.sort_by_key(|&w| (node.line[w], w));
    if !line.is_empty() {
        let members: Vec<String> = line
            .iter()
            .map(|&w| {
                let name = waiter_name(w);
                format!("{name}#{} until {}", node.line[w], node.lease[w])
            })
            .collect();
        parts.push(format!("line [{}]", members.join(", ")));
    }
    if node.counter_exp != 0 {
        parts.push(format!(
            "counter {} until {}",
            node.counter, node.counter_exp
        ));
    }
    parts.join(", ")
}

/// What a grant did, for the narration.
fn describe_grant(grant: Option<(usize, u8, u8)>, whole: impl Fn(usize, u8) -> bool) -> String {
    match grant {
        Some((w, ms, expiry)) if whole(w, ms) => {
            format!("granted {} (whole, {ms}) until {expiry}", waiter_name(w))
        }
        Some((w, ms, expiry)) => {
            format!("granted {} SHORT ({ms}) until {expiry}", waiter_name(w))
        }
        None => "no grant".to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

struct Protocol {
    cfg: Config,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Pending,
    Reached,
    Impossible,
}

impl Protocol {
    fn new(cfg: Config) -> Protocol {
        Protocol { cfg }
    }

    fn n(&self) -> usize {
        self.cfg.nodes
    }

    fn requests(&self) -> usize {
        self.cfg.plans.len()
    }

    fn all(&self) -> u8 {
        ((1u16 << self.n()) - 1) as u8
    }

    fn client(&self, r: usize) -> usize {
        usize::from(self.cfg.plans[r].client)
    }

    fn ttl(&self, r: usize) -> u8 {
        self.cfg.plans[r].ttl
    }

    fn see(&self, s: &mut State, path: u16) {
        s.seen |= path & self.cfg.cover;
    }

    /// `quorum::Tally::decision`.
    fn decision(&self, fan: &Fan) -> Decision {
        let n = self.n() as u8;
        if ones(fan.yes) >= self.cfg.quorum {
            Decision::Reached
        } else if n - ones(fan.refused) - fan.failed < self.cfg.quorum {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }

    fn conn<'a>(&self, s: &'a mut State, r: usize, n: usize) -> &'a mut Fifo {
        &mut s.conns[self.client(r) * MAX_N + n]
    }

    /// Writes `req` of request `r` onto its client's connections to the nodes of `mask`.
    fn send(&self, s: &mut State, r: usize, mask: u8, req: Req) {
        for n in 0..self.n() {
            if mask & bit(n) != 0 {
                self.conn(s, r, n).push(req);
            }
        }
    }

    /// A new fan-out (or waited-for broadcast) of request `r` to `mask`.
    fn fan_out(&self, s: &mut State, r: usize, mask: u8, kind: Kind, val: Val, arg: u16) {
        s.reqs[r].fan = Fan {
            pending: mask,
            ..Fan::default()
        };
        self.send(s, r, mask, Req::new(kind, r, val, arg, true));
    }

    /// Request `r`'s grant value, which also names its current identity (its base).
    fn base(&self, s: &State, r: usize) -> Val {
        Val::grant(r, s.reqs[r].gen)
    }

    /// Request `r` stops waiting: its requests still queued run unanswered.
    fn stop_waiting(&self, s: &mut State, r: usize) {
        s.reqs[r].fan.pending = 0;
        for n in 0..self.n() {
            self.conn(s, r, n).unwait(r);
        }
    }

    /// Request `r`'s slot leaves `Waiting` (it attempts, claims, holds or gives up): no
    /// release in flight may hand it the lock any more (its next `Waiting` has a later stamp).
    fn leave_waiting(&self, s: &mut State, r: usize) {
        s.reqs[r].waiting = false;
        for q in &mut s.reqs {
            q.eligible &= !bit(r);
        }
    }

    // --- The node scripts --------------------------------------------------------------------

    /// The prelude's `grant(channel, by, sure)`: the key, if free, to the first live waiter:
    /// a waiter in `sure` gets its hand-off value `B:h<r>` (the round `r` sent with it, 4 bits
    /// per request in `rounds`) for its whole TTL; any other its grant value `B:g`, short.
    fn grant(
        &self,
        node: &mut NodeState,
        sure: u16,
        rounds: u16,
        now: u8,
    ) -> Option<(usize, u8, u8)> {
        if node.key.is_some() && !self.cfg.has(Bug::GrantIgnoresKey) {
            return None;
        }
        let w = node.first_live()?;
        let ttl = self.ttl(w / GENS);
        let attempt_value = self.cfg.has(Bug::GrantSetsAttemptValue);
        let holder = if attempt_value {
            Val::attempt(w / GENS, (w % GENS) as u8, node.entry[w])
        } else {
            Val::granted_to(w)
        };
        if sure & slot_bit(w) != 0 {
            let round = (rounds >> (4 * (w / GENS)) & 15) as u8;
            let holder = if attempt_value {
                holder
            } else {
                Val::handed(w, round)
            };
            node.key = Some(Entry {
                holder,
                expiry: now + ttl,
            });
            return Some((w, ttl, now + ttl));
        }
        let left = node.lease[w] - now;
        let ms = ttl.min(self.cfg.claim).min(left).max(1);
        node.key = Some(Entry {
            holder,
            expiry: now + ms,
        });
        node.lease[w] = now + ms;
        Some((w, ms, now + ms))
    }

    /// Runs `req` on node `n`: its answer, and what it did (for the narration).
    fn run(&self, s: &mut State, n: usize, req: Req) -> (Answer, String) {
        let now = s.now;
        let ql = self.cfg.queue_lease;
        let (r, val) = (req.r(), req.val());
        // The request's waiter id, of the identity the request was written with.
        let w = val.base();
        let ttl = self.ttl(r);
        let whole = |w: usize, ms: u8| ms == self.cfg.plans[w / GENS].ttl;
        let no = Answer {
            yes: false,
            value: 0,
            grant: None,
        };
        let yes = Answer { yes: true, ..no };
        let mut seen = 0;
        // A release's `sure` set goes with the round of each of its waiters.
        let rounds = s.reqs[r].sure_rounds;
        let node = &mut s.nodes[n];
        let (answer, effect) = match req.kind() {
            Kind::Acquire => {
                let (ticket, round) = ((req.arg() & 0xff) as u8, (req.arg() >> 8) as u8);
                let taken = Some(Entry {
                    holder: val,
                    expiry: now + ttl,
                });
                // Claimable: this attempt's own value (a re-sent attempt), the request's grant
                // value, or its hand-off value of an earlier round than this attempt's (the
                // hand-off did not happen, since it attempts again): set to this attempt's
                // value for its TTL. Anything else counts as held: another attempt's value
                // (its rollback may still land and delete whatever has its value), a hand-off
                // value of this round or a later one (a late attempt must not take over the
                // value a handed-over guard counts on, which its late rollback would delete).
                let overwrite = self.cfg.has(Bug::AcquireOverwritesOwnValues);
                let unfenced = self.cfg.has(Bug::HandOffWithoutRoundFence);
                let claimable = node.key.is_some_and(|e| {
                    let h = e.holder;
                    h == val
                        || h == Val::granted_to(w)
                        || h.base() == w && h.round().is_some_and(|hr| unfenced || hr < round)
                        || overwrite && h.base() == w
                });
                if claimable {
                    let found = node.key.unwrap();
                    if found.holder != val {
                        seen |= SEEN_CLAIMED;
                    }
                    let what = found.holder.describe();
                    if self.cfg.has(Bug::ClaimWithoutExtend) {
                        let expiry = found.expiry;
                        (yes, format!("{what} claimed, yes (left until {expiry})"))
                    } else {
                        node.key = taken;
                        (yes, format!("{what} claimed: SET until {}", now + ttl))
                    }
                } else if ticket == 0 {
                    if node.key.is_some() || node.first_live().is_some() {
                        let drawn = node.draw(now, ql);
                        let why = match node.key {
                            Some(e) => format!("key {}", e.holder.describe()),
                            None => "line not empty".to_string(),
                        };
                        // A refusal that finds the key free grants it (FAIR_ACQUIRE's
                        // `refuse`).
                        let grant = node
                            .key
                            .is_none()
                            .then(|| self.grant(node, 0, 0, now))
                            .flatten();
                        if grant.is_some() {
                            seen |= SEEN_SHORT_GRANT;
                        }
                        let granted = match grant {
                            Some(_) => format!(", {}", describe_grant(grant, whole)),
                            None => String::new(),
                        };
                        let answer = Answer { value: drawn, ..no };
                        let effect = format!("refused ({why}), draws ticket {drawn}{granted}");
                        (answer, effect)
                    } else {
                        node.key = taken;
                        (yes, format!("taken until {}", now + ttl))
                    }
                } else {
                    if node.counter_exp == 0 || node.counter < ticket {
                        node.counter = ticket;
                        node.counter_exp = u8::MAX;
                    }
                    if !node.in_line(w) {
                        node.line[w] = ticket;
                    }
                    node.lease[w] = now + ql;
                    if self.cfg.has(Bug::GrantSetsAttemptValue) {
                        node.entry[w] = val.k();
                    }
                    node.keep_line();
                    let place = node.line[w];
                    if let Some(e) = node.key {
                        let why = format!("key {} until {}", e.holder.describe(), e.expiry);
                        (no, format!("in line #{place}, refused ({why})"))
                    } else if node.first_live() != Some(w) {
                        let first = waiter_name(node.first_live().unwrap());
                        let grant = self.grant(node, 0, 0, now);
                        if grant.is_some() {
                            seen |= SEEN_SHORT_GRANT;
                        }
                        let granted = describe_grant(grant, whole);
                        let effect =
                            format!("in line #{place}, refused ({first} first), {granted}");
                        (no, effect)
                    } else {
                        node.key = taken;
                        (
                            yes,
                            format!("in line #{place}, first: taken until {}", now + ttl),
                        )
                    }
                }
            }
            Kind::Release | Kind::Rollback => {
                let release = req.kind() == Kind::Release;
                // A release deletes any of the request's values; a rollback only the value it
                // was given, exactly (its attempt's, or the hand-off value a claim gives back;
                // never the grant value, nor another attempt's).
                let held = if release || self.cfg.has(Bug::RollbackByBase) {
                    node.key_of(w)
                } else {
                    node.key.is_some_and(|e| e.holder == val)
                };
                if held {
                    node.key = None;
                }
                if release {
                    node.leave(w);
                }
                let sure = if release { req.arg() } else { 0 };
                let grant = if held || release {
                    self.grant(node, sure, rounds, now)
                } else {
                    None
                };
                node.keep_line();
                if let Some((g, ms, _)) = grant {
                    if !whole(g, ms) {
                        seen |= SEEN_SHORT_GRANT;
                    }
                    if !release && g == w {
                        seen |= SEEN_SELF_REGRANT;
                    }
                }
                let deleted = if held { "deleted" } else { "not held" };
                let answer = Answer {
                    yes: held,
                    value: 0,
                    grant: grant.filter(|_| release),
                };
                (
                    answer,
                    format!("{deleted}, {}", describe_grant(grant, whole)),
                )
            }
            Kind::Withdraw => {
                node.leave(w);
                let held = node.key_of(w);
                if held {
                    node.key = None;
                }
                let grant = self.grant(node, 0, 0, now);
                node.keep_line();
                if grant.is_some_and(|(g, ms, _)| !whole(g, ms)) {
                    seen |= SEEN_SHORT_GRANT;
                }
                let deleted = if held {
                    "its key deleted"
                } else {
                    "left the line"
                };
                (yes, format!("{deleted}, {}", describe_grant(grant, whole)))
            }
            Kind::Draw => {
                let drawn = node.draw(now, ql);
                let answer = Answer {
                    value: drawn,
                    ..yes
                };
                (answer, format!("counter now {drawn}"))
            }
        };
        self.see(s, seen);
        (answer, effect)
    }

    // --- The clients -------------------------------------------------------------------------

    /// Node `n` runs the oldest request on client `c`'s connection.
    fn process(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let req = s.conns[c * MAX_N + n].pop();
        let now = s.now;
        let (answer, effect) = self.run(s, n, req);
        log.note(|| format!("t={now} n{n} runs {}: {effect}", req.describe()));
        let r = req.r();
        if req.wait() && s.reqs[r].fan.pending & bit(n) != 0 {
            self.count(s, r, n, Some(answer));
            self.react(s, r, log);
        }
    }

    /// Node `n` runs the oldest request written to client `c`'s failed connection: nobody
    /// reads its answer.
    fn process_stale(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let req = s.stale[c * MAX_N + n].pop();
        let now = s.now;
        if matches!(req.kind(), Kind::Rollback | Kind::Withdraw) {
            self.see(s, SEEN_LATE);
        }
        let (_, effect) = self.run(s, n, req);
        log.note(|| format!("t={now} n{n} runs LATE {}: {effect}", req.describe()));
    }

    /// Client `c`'s connection to node `n` fails and is replaced.
    fn reconnect(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let now = s.now;
        s.reconnected += 1;
        let mut old = s.conns[c * MAX_N + n];
        s.conns[c * MAX_N + n] = Fifo::default();
        log.note(|| format!("t={now} c{c}'s connection to n{n} FAILS and is replaced"));
        let mut failed = 0u8;
        for req in &mut old.items[..usize::from(old.len)] {
            if req.wait() {
                failed |= bit(req.r());
                *req = req.unwaited();
            }
        }
        s.stale[c * MAX_N + n] = old;
        for r in 0..self.requests() {
            if failed & bit(r) != 0 && s.reqs[r].fan.pending & bit(n) != 0 {
                log.note(|| format!("t={now} r{r}'s request to n{n} fails"));
                self.count(s, r, n, None);
                self.react(s, r, log);
            }
        }
    }

    /// Request `r` counts node `n`'s answer (`None`: failed or timed out).
    fn count(&self, s: &mut State, r: usize, n: usize, answer: Option<Answer>) {
        let fan = &mut s.reqs[r].fan;
        fan.pending &= !bit(n);
        match answer {
            Some(a) => {
                if a.yes {
                    fan.yes |= bit(n);
                } else {
                    fan.refused |= bit(n);
                }
                fan.max = fan.max.max(a.value);
                if let Some((w, ms, expiry)) = a.grant {
                    fan.grant[n] = (w as u8 + 1) | ms << 4;
                    fan.gexp[n] = expiry;
                }
            }
            None => fan.failed += 1,
        }
    }

    /// Request `r` acts on the answers counted so far.
    fn react(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let fan = s.reqs[r].fan;
        let tally = move || {
            format!(
                "yes {}, refused {}, failed {}",
                ones(fan.yes),
                ones(fan.refused),
                fan.failed
            )
        };
        match s.reqs[r].phase {
            Phase::Attempt => match self.decision(&fan) {
                Decision::Pending => {}
                Decision::Reached => {
                    self.stop_waiting(s, r);
                    let deadline = s.reqs[r].t0 + self.ttl(r);
                    if now < deadline {
                        let q = &mut s.reqs[r];
                        q.phase = Phase::Holding;
                        q.deadline = deadline;
                        q.granted = 0;
                        log.note(|| {
                            let quorum = nodes_of(fan.yes);
                            format!("t={now} r{r} attempt reaches {quorum}: HOLDS until {deadline}")
                        });
                    } else {
                        s.reqs[r].miss = Miss::Exhausted;
                        log.note(|| format!("t={now} r{r} quorum too late (deadline {deadline})"));
                        self.rollback(s, r, self.all() & !fan.refused, log);
                    }
                }
                Decision::Impossible => {
                    self.stop_waiting(s, r);
                    let q = &mut s.reqs[r];
                    let room = self.n() as u8 - fan.failed >= self.cfg.quorum;
                    q.drawn = 0;
                    if room {
                        q.miss = Miss::Contended;
                        if q.ticket == 0 && ones(fan.refused) >= self.cfg.quorum {
                            q.drawn = fan.max;
                        }
                    } else {
                        q.miss = Miss::NoQuorum;
                    }
                    let miss = q.miss;
                    log.note(|| format!("t={now} r{r} attempt fails ({}): {miss:?}", tally()));
                    self.rollback(s, r, self.all() & !fan.refused, log);
                }
            },
            Phase::Rollback if fan.pending == 0 => self.after_rollback(s, r, log),
            Phase::Withdraw { sent: true } if fan.pending == 0 => self.after_withdrawal(s, r, log),
            Phase::Draw => match self.decision(&fan) {
                Decision::Pending => {}
                Decision::Reached => {
                    self.stop_waiting(s, r);
                    s.reqs[r].ticket = fan.max;
                    s.reqs[r].phase = Phase::Pause;
                    log.note(|| format!("t={now} r{r} draws ticket {}", fan.max));
                }
                Decision::Impossible => {
                    self.stop_waiting(s, r);
                    s.reqs[r].phase = Phase::Pause;
                    log.note(|| format!("t={now} r{r} draw fails ({})", tally()));
                }
            },
            Phase::Release { sent: true } => match self.decision(&fan) {
                Decision::Pending => {}
                Decision::Reached => {
                    self.stop_waiting(s, r);
                    s.reqs[r].phase = Phase::Done;
                    log.note(|| format!("t={now} r{r} release confirmed ({})", tally()));
                    self.hand_off(s, r, log);
                }
                Decision::Impossible => {
                    self.stop_waiting(s, r);
                    s.reqs[r].phase = Phase::Done;
                    log.note(|| format!("t={now} r{r} release not confirmed ({})", tally()));
                }
            },
            _ => {}
        }
    }

    /// `give_back`: FAIR_RELEASE mode 2 on `mask`, waited for.
    fn rollback(&self, s: &mut State, r: usize, mask: u8, log: &mut Log) {
        let now = s.now;
        s.reqs[r].phase = Phase::Rollback;
        let holder = s.reqs[r].holder;
        log.note(|| {
            let on = nodes_of(mask);
            format!(
                "t={now} r{r} rolls back {} on {on} (waits)",
                holder.describe()
            )
        });
        self.fan_out(s, r, mask, Kind::Rollback, holder, 0);
        if mask == 0 {
            self.after_rollback(s, r, log);
        }
    }

    /// The rollback finished: the cut-off withdrawal, or waiting (and a ticket).
    fn after_rollback(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let q = s.reqs[r];
        if q.miss == Miss::NoQuorum && q.ticket != 0 {
            self.see(s, SEEN_CUT_OFF);
            if self.cfg.has(Bug::WaitingBeforeWithdrawal) {
                s.reqs[r].phase = Phase::Withdraw { sent: false };
                s.reqs[r].waiting = true;
                log.note(|| format!("t={now} r{r} cut off: WAITING, withdrawal not yet sent"));
            } else {
                s.reqs[r].phase = Phase::Withdraw { sent: true };
                let w = waiter_name(waiter(r, q.gen));
                log.note(|| format!("t={now} r{r} cut off: withdraws {w} on all nodes (waits)"));
                self.fan_out(s, r, self.all(), Kind::Withdraw, self.base(s, r), 0);
            }
            return;
        }
        s.reqs[r].waiting = true;
        self.draw_or_pause(s, r, log);
    }

    /// The cut-off withdrawal finished: the ticket is dropped, the request takes a new
    /// identity (waiter id and base; it registers with its client's waiters under the new id)
    /// and waits (with `Bug::WaitingBeforeWithdrawal` it was marked waiting already, and may
    /// have been handed the lock since).
    fn after_withdrawal(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let q = &mut s.reqs[r];
        q.ticket = 0;
        // The version with the round-3 defect had one identity per request.
        if !self.cfg.has(Bug::CutOffKeepsIdentity) && !self.cfg.has(Bug::WaitingBeforeWithdrawal) {
            q.gen += 1;
            q.nonce = 0;
        }
        if !self.cfg.has(Bug::WaitingBeforeWithdrawal) {
            q.waiting = true;
        }
        q.phase = Phase::Pause;
        let w = waiter_name(waiter(r, q.gen));
        log.note(|| format!("t={now} r{r} withdrawn, ticket dropped: waiting as {w}"));
    }

    /// Marked waiting: a refused request without a ticket takes the one its refusals drew, or
    /// draws one in a round of its own.
    fn draw_or_pause(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let q = s.reqs[r];
        if q.miss != Miss::Contended || q.ticket != 0 {
            s.reqs[r].phase = Phase::Pause;
            log.note(|| format!("t={now} r{r} waiting"));
        } else if q.drawn != 0 {
            s.reqs[r].ticket = q.drawn;
            s.reqs[r].phase = Phase::Pause;
            log.note(|| format!("t={now} r{r} waiting with ticket {}", q.drawn));
        } else {
            self.see(s, SEEN_DRAW_ROUND);
            s.reqs[r].phase = Phase::Draw;
            log.note(|| format!("t={now} r{r} waiting, draws a ticket on all nodes"));
            self.fan_out(s, r, self.all(), Kind::Draw, self.base(s, r), 0);
        }
    }

    /// Whether request `r`, at the top of its wait loop, has a step to take.
    fn can_step(&self, s: &State, r: usize) -> bool {
        let (plan, q) = (&self.cfg.plans[r], &s.reqs[r]);
        q.phase == Phase::Pause && (q.granted != 0 || q.attempts < plan.attempts || plan.gives_up)
    }

    /// The top of the wait loop: the hand-off if any, else an attempt, or giving up.
    fn step_request(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let plan = self.cfg.plans[r];
        let q = s.reqs[r];
        let out = q.attempts >= plan.attempts;
        if out && plan.gives_up {
            // Out of attempts: the wait (`Waiting`) ends (its check comes before it takes a
            // hand-off), its registration is dropped, and the `Withdraw` guard sends the
            // withdrawal of its current identity without waiting for it.
            self.leave_waiting(s, r);
            s.reqs[r].granted = 0;
            s.reqs[r].phase = Phase::Done;
            self.see(s, SEEN_GAVE_UP);
            let dropped = if q.granted != 0 {
                " (drops its hand-off)"
            } else {
                ""
            };
            log.note(|| format!("t={now} r{r} gives up{dropped}: withdraws on all nodes"));
            let withdraw = Req::new(Kind::Withdraw, r, self.base(s, r), 0, false);
            self.send(s, r, self.all(), withdraw);
        } else if q.granted != 0 {
            // `take_grant_or_attempt`, then `claim`.
            // The release set the key to the hand-off value on the nodes it counted: the
            // guard's value (`hand_off` put it in `holder`).
            let deadline = q.granted;
            s.reqs[r].granted = 0;
            self.leave_waiting(s, r);
            if now < deadline {
                s.reqs[r].phase = Phase::Holding;
                s.reqs[r].deadline = deadline;
                log.note(|| format!("t={now} r{r} takes its hand-off: HOLDS until {deadline}"));
            } else {
                s.reqs[r].miss = Miss::Exhausted;
                log.note(|| format!("t={now} r{r} hand-off too late (deadline {deadline})"));
                self.rollback(s, r, self.all(), log);
            }
        } else {
            self.leave_waiting(s, r);
            let q = &mut s.reqs[r];
            q.attempts += 1;
            q.nonce += 1;
            q.round += 1;
            q.holder = Val::attempt(r, q.gen, q.nonce);
            q.t0 = now;
            q.phase = Phase::Attempt;
            let (ticket, holder, round) = (q.ticket, q.holder, q.round);
            log.note(|| {
                let with = if ticket == 0 {
                    "?".to_string()
                } else {
                    ticket.to_string()
                };
                let holder = holder.describe();
                format!(
                    "t={now} r{r} attempts {holder}, round {round} (ticket {with}) on all nodes"
                )
            });
            let arg = u16::from(ticket) | u16::from(round) << 8;
            self.fan_out(s, r, self.all(), Kind::Acquire, holder, arg);
        }
    }

    /// The release's first step: the guard ends, the stamp, the instant and `waiting_before`.
    fn release(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let client = self.client(r);
        let (mut eligible, mut sure, mut rounds) = (0, 0, 0);
        for w in 0..self.requests() {
            let q = &s.reqs[w];
            if w != r && self.client(w) == client && q.waiting && q.granted == 0 {
                eligible |= bit(w);
                sure |= slot_bit(waiter(w, q.gen));
                rounds |= u16::from(q.round) << (4 * w);
            }
        }
        let q = &mut s.reqs[r];
        q.phase = Phase::Release { sent: false };
        q.eligible = eligible;
        q.sure_rounds = rounds;
        q.sure = if self.cfg.has(Bug::HandOffOnShortGrants) {
            0
        } else {
            sure
        };
        q.sent = now;
        log.note(|| {
            let waiting = waiters_of(sure);
            format!("t={now} r{r} releases: stamp taken, its client's waiters {waiting}")
        });
    }

    fn send_release(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let (sure, holder) = (s.reqs[r].sure, s.reqs[r].holder);
        s.reqs[r].phase = Phase::Release { sent: true };
        log.note(|| format!("t={now} r{r} sends its release to all nodes"));
        self.fan_out(s, r, self.all(), Kind::Release, holder, sure);
    }

    /// `FairWaiters::hand_off`, after release `h` reached its quorum.
    fn hand_off(&self, s: &mut State, h: usize, log: &mut Log) {
        let now = s.now;
        let cfg = &self.cfg;
        let q = s.reqs[h];
        let fan = q.fan;
        let by_waiter_only =
            cfg.has(Bug::HandOffOnShortGrants) || cfg.has(Bug::HandOffIgnoresGrantTtl);
        // `quorum_granted`: a (waiter, ms) answered by at least a quorum (by waiter alone in
        // the controls that ignore the TTL).
        let mut found = None;
        for n in 0..self.n() {
            let g = fan.grant[n];
            if g == 0 {
                continue;
            }
            let same = |o: u8| {
                o != 0
                    && if by_waiter_only {
                        o & 15 == g & 15
                    } else {
                        o == g
                    }
            };
            let nodes = (0..self.n())
                .filter(|&m| same(fan.grant[m]))
                .fold(0u8, |acc, m| acc | bit(m));
            if ones(nodes) >= cfg.quorum {
                found = Some((usize::from(g & 15) - 1, g >> 4, nodes));
                break;
            }
        }
        let Some((id, ms, nodes)) = found else {
            return;
        };
        // The waiter id must be one of this client's (its slot), still registered: a request
        // registers again under its new id after a cut-off.
        let w = id / GENS;
        let registered = s.reqs[w].phase != Phase::Done && waiter(w, s.reqs[w].gen) == id;
        if self.client(w) != self.client(h) || !registered {
            return;
        }
        if ms != self.ttl(w) && !by_waiter_only {
            return;
        }
        let waits = if cfg.has(Bug::HandOffIgnoresStamp) {
            s.reqs[w].waiting
        } else {
            q.eligible & bit(w) != 0
        };
        if !waits {
            log.note(|| format!("t={now} r{h}: r{w} no longer waits since the stamp: no hand-off"));
            return;
        }
        let deadline = if cfg.has(Bug::HandOffFromDecision) {
            now + self.ttl(w)
        } else {
            q.sent + self.ttl(w)
        };
        if deadline <= now {
            return;
        }
        // Property (b): the deadline is no later than any grant the hand-off counted.
        let earliest = (0..self.n())
            .filter(|&m| nodes & bit(m) != 0)
            .map(|m| fan.gexp[m])
            .min()
            .unwrap();
        if deadline > earliest {
            s.overrun = true;
        }
        // The guard's value: what the nodes set for the round sent with the `sure` set (the
        // waiter's round, unchanged while it waits since the stamp).
        let round = (q.sure_rounds >> (4 * w) & 15) as u8;
        let holder = if cfg.has(Bug::HandOffOnShortGrants) {
            Val::granted_to(id)
        } else if cfg.has(Bug::GrantSetsAttemptValue) {
            Val::attempt(w, s.reqs[w].gen, s.reqs[w].nonce.max(1))
        } else {
            Val::handed(id, round)
        };
        self.leave_waiting(s, w);
        s.reqs[w].granted = deadline;
        s.reqs[w].holder = holder;
        self.see(s, SEEN_HANDOFF);
        log.note(|| {
            format!(
                "t={now} r{h} HANDS OFF to r{w} until {deadline}, value {} (grants on {}, earliest expiry {earliest})",
                holder.describe(),
                nodes_of(nodes)
            )
        });
    }

    fn tick(&self, s: &mut State, log: &mut Log) {
        s.now += 1;
        let now = s.now;
        log.note(|| format!("t={now} tick"));
        for n in 0..self.n() {
            let before = s.nodes[n];
            if s.nodes[n].expire(now) {
                // A short grant lapsing: the key and its holder's place expire together.
                if let Some(e) = before.key {
                    let w = e.holder.base();
                    if e.expiry <= now && before.in_line(w) && before.lease[w] == e.expiry {
                        self.see(s, SEEN_LAPSED);
                    }
                }
                let after = s.nodes[n];
                log.note(|| format!("t={now} n{n} expires: now {}", describe_node(&after)));
            }
        }
    }

    fn time_out(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let pending = s.reqs[r].fan.pending;
        log.note(|| format!("t={now} r{r} times out on {}", nodes_of(pending)));
        for n in 0..self.n() {
            if pending & bit(n) != 0 {
                self.count(s, r, n, None);
            }
        }
        self.stop_waiting(s, r);
        self.react(s, r, log);
    }

    /// Applies `action` to `s`; the narration goes to `log`.
    fn step(&self, s: &mut State, action: Action, log: &mut Log) {
        let now = s.now;
        match action {
            Action::Tick => self.tick(s, log),
            Action::Step(r) => self.step_request(s, usize::from(r), log),
            Action::Release(r) => self.release(s, usize::from(r), log),
            Action::SendRelease(r) => self.send_release(s, usize::from(r), log),
            Action::SendWithdraw(r) => {
                let r = usize::from(r);
                s.reqs[r].phase = Phase::Withdraw { sent: true };
                log.note(|| format!("t={now} r{r} withdraws on all nodes (waits)"));
                self.fan_out(s, r, self.all(), Kind::Withdraw, self.base(s, r), 0);
            }
            Action::Process(c, n) => self.process(s, usize::from(c), usize::from(n), log),
            Action::ProcessStale(c, n) => {
                self.process_stale(s, usize::from(c), usize::from(n), log)
            }
            Action::Reconnect(c, n) => self.reconnect(s, usize::from(c), usize::from(n), log),
            Action::Lose(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                let req = s.conns[c * MAX_N + n].pop();
                if self.cfg.losses.is_some() {
                    s.lost += 1;
                }
                log.note(|| format!("t={now} {} to n{n} is lost", req.describe()));
            }
            Action::TimeOut(r) => self.time_out(s, usize::from(r), log),
            Action::Restart(n) => {
                let n = usize::from(n);
                s.forgotten += 1;
                self.see(s, SEEN_FORGOTTEN);
                let had = describe_node(&s.nodes[n]);
                log.note(|| format!("t={now} n{n} RESTARTS EMPTY (had {had})"));
                s.nodes[n] = NodeState::default();
            }
            Action::ClockJump(n, to) => {
                let n = usize::from(n);
                s.forgotten += 1;
                self.see(s, SEEN_FORGOTTEN);
                s.nodes[n].expire(to);
                let after = describe_node(&s.nodes[n]);
                log.note(|| format!("t={now} n{n} CLOCK JUMPS past {to}: now {after}"));
            }
        }
    }

    /// Renames the nodes so that equivalent states become one (see `tests/model/`).
    /// Returns the renaming: new node `i` is old node `order[i]`.
    fn canonicalize(&self, s: &mut State) -> [usize; MAX_N] {
        let (n, clients, requests) = (self.n(), self.cfg.clients(), self.requests());
        let key = |s: &State, i: usize| {
            let mut e = Enc::<512>::new();
            e.node(&s.nodes[i]);
            for c in 0..clients {
                e.fifo(&s.conns[c * MAX_N + i]);
                e.fifo(&s.stale[c * MAX_N + i]);
            }
            for q in &s.reqs[..requests] {
                let f = &q.fan;
                let masks = f.pending >> i & 1 | (f.yes >> i & 1) << 1 | (f.refused >> i & 1) << 2;
                e.put(&[masks, f.grant[i], f.gexp[i]]);
            }
            e
        };
        let keys: [Enc<512>; MAX_N] = [
            key(s, 0),
            key(s, 1),
            key(s, 2),
            if n > 3 { key(s, 3) } else { Enc::new() },
            if n > 4 { key(s, 4) } else { Enc::new() },
        ];
        let mut order = [0, 1, 2, 3, 4];
        order[..n].sort_by(|&a, &b| keys[a].bytes().cmp(keys[b].bytes()));
        if order[..n].iter().enumerate().all(|(i, &o)| i == o) {
            return order;
        }
        let old = *s;
        let remap = |m: u8| (0..n).fold(0u8, |acc, i| acc | (m >> order[i] & 1) << i);
        for (i, &o) in order[..n].iter().enumerate() {
            s.nodes[i] = old.nodes[o];
            for c in 0..clients {
                s.conns[c * MAX_N + i] = old.conns[c * MAX_N + o];
                s.stale[c * MAX_N + i] = old.stale[c * MAX_N + o];
            }
            for (q, oq) in s.reqs[..requests].iter_mut().zip(&old.reqs) {
                q.fan.grant[i] = oq.fan.grant[o];
                q.fan.gexp[i] = oq.fan.gexp[o];
            }
        }
        for q in &mut s.reqs[..requests] {
            q.fan.pending = remap(q.fan.pending);
            q.fan.yes = remap(q.fan.yes);
            q.fan.refused = remap(q.fan.refused);
        }
        order
    }

    /// (a) No two requests inside the validity of a guard at once.
    fn excluded(&self, s: &State) -> bool {
        s.reqs[..self.requests()]
            .iter()
            .filter(|q| q.holds(s.now))
            .count()
            <= 1
    }

    /// (a') Invariant 2: while a request is inside its validity, at least `q - f` nodes hold
    /// its guard's value exactly (the attempt's `A_k`, or the hand-off value `H_r`: nothing of
    /// the request replaces either) with an expiry no earlier than its deadline.
    fn supported(&self, s: &State) -> bool {
        (0..self.requests()).all(|r| {
            let q = &s.reqs[r];
            if !q.holds(s.now) {
                return true;
            }
            let entries = s.nodes[..self.n()]
                .iter()
                .filter(|node| {
                    node.key
                        .is_some_and(|e| e.holder == q.holder && e.expiry >= q.deadline)
                })
                .count() as u8;
            entries + s.forgotten >= self.cfg.quorum
        })
    }

    fn initial(&self) -> State {
        let mut s = State {
            now: 0,
            lost: 0,
            forgotten: 0,
            overrun: false,
            seen: 0,
            nodes: [NodeState::default(); MAX_N],
            reqs: [Request::default(); MAX_R],
            conns: [Fifo::default(); MAX_R * MAX_N],
            stale: [Fifo::default(); MAX_R * MAX_N],
            reconnected: 0,
        };
        let ql = self.cfg.queue_lease;
        for (r, plan) in self.cfg.plans.iter().enumerate() {
            match plan.start {
                Start::Fresh => {}
                Start::Holding => {
                    let q = &mut s.reqs[r];
                    q.phase = Phase::Holding;
                    q.deadline = plan.ttl;
                    q.nonce = 1;
                    q.round = 1;
                    q.holder = Val::attempt(r, 0, 1);
                    for node in &mut s.nodes[..self.n()] {
                        node.key = Some(Entry {
                            holder: q.holder,
                            expiry: plan.ttl,
                        });
                    }
                }
                Start::InLine(ticket) => {
                    let q = &mut s.reqs[r];
                    q.waiting = true;
                    q.ticket = ticket;
                    q.nonce = 1;
                    q.round = 1;
                    q.holder = Val::attempt(r, 0, 1);
                    let entry = if self.cfg.has(Bug::GrantSetsAttemptValue) {
                        1
                    } else {
                        0
                    };
                    for node in &mut s.nodes[..self.n()] {
                        let w = waiter(r, 0);
                        node.line[w] = ticket;
                        node.lease[w] = ql;
                        node.entry[w] = entry;
                        node.counter = node.counter.max(ticket);
                        node.counter_exp = ql;
                    }
                }
            }
        }
        s
    }
}

/// A property's condition.
type Condition = fn(&Protocol, &State) -> bool;

const HOLDS: [(&str, Condition); MAX_R] = [
    ("r0 holds", |_, s| s.reqs[0].holds(s.now)),
    ("r1 holds", |_, s| s.reqs[1].holds(s.now)),
    ("r2 holds", |_, s| s.reqs[2].holds(s.now)),
];

const COVERAGE: [(u16, &str); 10] = [
    (SEEN_HANDOFF, "reaches a hand-off"),
    (SEEN_CLAIMED, "reaches a claim of its own entry"),
    (SEEN_SHORT_GRANT, "reaches a short grant"),
    (SEEN_LAPSED, "reaches a short grant that lapsed"),
    (
        SEEN_SELF_REGRANT,
        "reaches a rollback re-granting its own request",
    ),
    (SEEN_CUT_OFF, "reaches a cut-off withdrawal"),
    (SEEN_DRAW_ROUND, "reaches a draw round"),
    (SEEN_GAVE_UP, "reaches a request that gave up"),
    (SEEN_FORGOTTEN, "reaches a forgotten node"),
    (SEEN_LATE, "reaches a late rollback or withdrawal"),
];

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut s = self.initial();
        if self.cfg.symmetry {
            self.canonicalize(&mut s);
        }
        vec![s]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let cfg = &self.cfg;
        if s.now < cfg.max_time {
            actions.push(Action::Tick);
        }
        for (r, plan) in cfg.plans.iter().enumerate() {
            let q = &s.reqs[r];
            let r8 = r as u8;
            match q.phase {
                Phase::Pause if self.can_step(s, r) => actions.push(Action::Step(r8)),
                Phase::Holding if plan.release => actions.push(Action::Release(r8)),
                Phase::Release { sent: false } => actions.push(Action::SendRelease(r8)),
                Phase::Withdraw { sent: false } => actions.push(Action::SendWithdraw(r8)),
                _ => {}
            }
            if cfg.timeouts & bit(r) != 0 && q.fan.pending != 0 {
                actions.push(Action::TimeOut(r8));
            }
        }
        let may_lose = cfg.losses.is_none_or(|max| s.lost < max);
        let may_reconnect = s.reconnected < cfg.reconnects;
        for c in 0..cfg.clients() {
            for n in 0..self.n() {
                let (c8, n8) = (c as u8, n as u8);
                let stale = s.stale[c * MAX_N + n].is_empty();
                if !s.conns[c * MAX_N + n].is_empty() {
                    actions.push(Action::Process(c8, n8));
                    if may_lose {
                        actions.push(Action::Lose(c8, n8));
                    }
                    if may_reconnect && stale {
                        actions.push(Action::Reconnect(c8, n8));
                    }
                }
                if !stale {
                    actions.push(Action::ProcessStale(c8, n8));
                }
            }
        }
        if s.forgotten < cfg.forgetful {
            for n in 0..self.n() {
                let node = &s.nodes[n];
                if node.expiries().next().is_some() {
                    actions.push(Action::Restart(n as u8));
                }
                let mut past = 0u64;
                for expiry in node.expiries() {
                    if expiry < 64 && past & 1 << expiry == 0 {
                        past |= 1 << expiry;
                        actions.push(Action::ClockJump(n as u8, expiry));
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = *last;
        self.step(&mut s, action, &mut Log::off());
        if self.cfg.symmetry {
            self.canonicalize(&mut s);
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::<Self>::always("exclusion", |m, s| m.excluded(s)),
            Property::<Self>::always("support", |m, s| m.supported(s)),
            Property::<Self>::always("hand-off within its grants", |_, s| !s.overrun),
        ];
        // Each request that can take the lock (an attempt, or a start holding) sometimes holds.
        for (r, (name, holds)) in HOLDS[..self.requests()].iter().enumerate() {
            let plan = &self.cfg.plans[r];
            if plan.attempts > 0 || plan.start == Start::Holding {
                p.push(Property::sometimes(name, *holds));
            }
        }
        for (flag, name) in COVERAGE {
            if self.cfg.cover & flag != 0 {
                let reached: Condition = match flag {
                    SEEN_HANDOFF => |_, s| s.seen & SEEN_HANDOFF != 0,
                    SEEN_CLAIMED => |_, s| s.seen & SEEN_CLAIMED != 0,
                    SEEN_SHORT_GRANT => |_, s| s.seen & SEEN_SHORT_GRANT != 0,
                    SEEN_LAPSED => |_, s| s.seen & SEEN_LAPSED != 0,
                    SEEN_SELF_REGRANT => |_, s| s.seen & SEEN_SELF_REGRANT != 0,
                    SEEN_CUT_OFF => |_, s| s.seen & SEEN_CUT_OFF != 0,
                    SEEN_DRAW_ROUND => |_, s| s.seen & SEEN_DRAW_ROUND != 0,
                    SEEN_GAVE_UP => |_, s| s.seen & SEEN_GAVE_UP != 0,
                    SEEN_FORGOTTEN => |_, s| s.seen & SEEN_FORGOTTEN != 0,
                    _ => |_, s| s.seen & SEEN_LATE != 0,
                };
                p.push(Property::sometimes(name, reached));
            }
        }
        p
    }
}

// ---------------------------------------------------------------------------------------------
// Running the checker
// ---------------------------------------------------------------------------------------------

/// Explores every reachable state and asserts every property.
fn assert_safe(name: &str, cfg: Config) {
    let started = Instant::now();
    let checker = Protocol::new(cfg).checker().spawn_bfs().join();
    println!(
        "{name}: {} states, {} transitions, depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    let model = checker.model();
    for (property, path) in checker.discoveries() {
        let p = model.property(property);
        if p.expectation.discovery_is_failure() {
            println!("COUNTEREXAMPLE to \"{property}\" in {name}:");
            let violated = (p.expectation == Expectation::Always).then_some(p.condition);
            for line in narrate(model, path, violated) {
                println!("  {line}");
            }
        }
    }
    checker.assert_properties();
}

/// A negative control: the search must find a counterexample to `property`; prints it.
fn assert_finds(name: &str, cfg: Config, property: &'static str) {
    let started = Instant::now();
    let checker = Protocol::new(cfg)
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{name}: no counterexample to \"{property}\""));
    let model = checker.model();
    let p = model.property(property);
    let violated = (p.expectation == Expectation::Always).then_some(p.condition);
    let lines = narrate(model, path, violated);
    println!(
        "{name}: counterexample to \"{property}\" after {} states, {:.1?}:",
        checker.unique_state_count(),
        started.elapsed(),
    );
    for line in &lines {
        println!("  {line}");
    }
}

/// The path as readable lines, replayed on real states with each action's node translated
/// through the symmetry renamings so far (as `tests/model/` does), up to the first state
/// where `holds` is false, then that state's facts.
fn narrate(model: &Protocol, path: Path<State, Action>, holds: Option<Condition>) -> Vec<String> {
    let mut lines = Vec::new();
    let clients: Vec<String> = (0..model.requests())
        .map(|r| {
            let plan = model.cfg.plans[r];
            let start = match plan.start {
                Start::Fresh => String::new(),
                Start::InLine(t) => format!(", in line with ticket {t}"),
                Start::Holding => format!(", holding until {}", plan.ttl),
            };
            format!("r{r}: client c{}, ttl {}{start}", plan.client, plan.ttl)
        })
        .collect();
    lines.push(format!(
        "requests: {}; claim window {}, queue lease {}",
        clients.join("; "),
        model.cfg.claim,
        model.cfg.queue_lease
    ));
    let steps = path.into_vec();
    // Every node starts alike, so the canonical initial state is the initial state.
    let mut real = steps[0].0;
    let mut to_real = [0, 1, 2, 3, 4];
    for (state, action) in steps {
        if holds.is_some_and(|holds| !holds(model, &real)) {
            break;
        }
        let Some(action) = action else { break };
        let r = |n: u8| to_real[usize::from(n)] as u8;
        let real_action = match action {
            Action::Process(c, n) => Action::Process(c, r(n)),
            Action::ProcessStale(c, n) => Action::ProcessStale(c, r(n)),
            Action::Reconnect(c, n) => Action::Reconnect(c, r(n)),
            Action::Lose(c, n) => Action::Lose(c, r(n)),
            Action::Restart(n) => Action::Restart(r(n)),
            Action::ClockJump(n, to) => Action::ClockJump(r(n), to),
            other => other,
        };
        let mut log = Log::on();
        model.step(&mut real, real_action, &mut log);
        lines.extend(log.lines);
        if model.cfg.symmetry {
            let mut next = state;
            model.step(&mut next, action, &mut Log::off());
            let order = model.canonicalize(&mut next);
            to_real = std::array::from_fn(|i| if i < model.n() { to_real[order[i]] } else { i });
        }
    }
    lines.push(summary(model, &real));
    lines
}

/// Who holds, and what every node has.
fn summary(model: &Protocol, s: &State) -> String {
    let mut facts = Vec::new();
    for r in 0..model.requests() {
        let q = &s.reqs[r];
        if q.holds(s.now) {
            facts.push(format!("r{r} holds until {}", q.deadline));
        }
    }
    for n in 0..model.n() {
        facts.push(format!("n{n}: {}", describe_node(&s.nodes[n])));
    }
    format!("=> t={}: {}", s.now, facts.join("; "))
}

// ---------------------------------------------------------------------------------------------
// Positive configurations: no counterexample
// ---------------------------------------------------------------------------------------------

/// A fair request of client `client`, TTL 2, with `attempts` attempts.
const fn fair(client: u8, attempts: u8) -> Plan {
    request(client, 2, attempts)
}

/// The hand-off's cast: r0 holds; r1, of the same client, waits in line first; r2, of
/// another client, waits behind it. One attempt each.
fn hand_off_cast() -> [Plan; 3] {
    [
        holding(fair(0, 1)),
        in_line(fair(0, 1), 1),
        in_line(fair(1, 1), 2),
    ]
}

/// Two clients from their first attempts: a refused first attempt draws its ticket (with
/// its refusals, or in a round of its own when a node failed), the next joins the line, and
/// the release grants the key (short: another client's waiter) to the request in line. The
/// second request's node timeout may fire: an attempt that took the free key as first in line
/// and failed rolls back, and the rollback grants the key back to its own request.
#[test]
fn two_clients_draw_tickets_and_take_turns() {
    let cfg = Config::new(3, 2, &[fair(0, 1), fair(1, 2)], 0)
        .timeouts(0b10)
        .cover(SEEN_SHORT_GRANT | SEEN_DRAW_ROUND | SEEN_SELF_REGRANT);
    assert_safe("two clients from their first attempts, Majority of 3", cfg);
}

/// The same with more attempts and no timeouts: the second request claims its short grant
/// with its third attempt, and the first one, refused once, gets back in line.
#[test]
fn a_waiter_of_another_client_claims_its_grant() {
    let cfg = Config::new(3, 2, &[fair(0, 2), fair(1, 3)], 0)
        .timeouts(0)
        .cover(SEEN_SHORT_GRANT | SEEN_CLAIMED);
    assert_safe("two clients, more attempts, Majority of 3", cfg);
}

/// Two requests of one client from their first attempts: the first to hold hands the lock
/// to the other on its release, when it waits in line since before the release.
#[test]
fn two_requests_of_one_client_hand_off_from_their_first_attempts() {
    let cfg = Config::new(3, 2, &[fair(0, 1), fair(0, 2)], 0)
        .timeouts(0b11)
        .cover(SEEN_HANDOFF);
    assert_safe("two requests of one client, Majority of 3", cfg);
}

/// The same-client hand-off: r0's release names r1 (waiting since before its stamp), the nodes
/// grant it the whole TTL and r0 hands it the lock; or r1 attempts meanwhile (and may be cut
/// off: its node timeout fires), and gets short grants or none; r2 claims short grants.
#[test]
fn a_release_hands_the_lock_to_a_waiter_of_its_own_client() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .cover(SEEN_HANDOFF | SEEN_CLAIMED | SEEN_SHORT_GRANT | SEEN_SELF_REGRANT | SEEN_CUT_OFF);
    assert_safe("hand-off, Majority of 3", cfg);
}

/// Waiters of another client, over two ticks: short grants are claimed by an attempt, or
/// lapse with the waiter's place and pass to the next waiter (r1 never attempts).
#[test]
fn short_grants_are_claimed_or_lapse_to_the_next_waiter() {
    let plans = [
        holding(fair(0, 1)),
        in_line(fair(1, 0), 1),
        in_line(fair(1, 2), 2),
    ];
    let cfg = Config::new(3, 2, &plans, 2)
        .timeouts(0)
        .cover(SEEN_SHORT_GRANT | SEEN_LAPSED | SEEN_CLAIMED);
    assert_safe("short grants over two ticks, Majority of 3", cfg);
}

/// Waiters that give up withdraw (not waited for): a grant to them is deleted and passed on.
#[test]
fn waiters_that_give_up_pass_the_key_on() {
    let plans = [
        holding(fair(0, 1)),
        giving_up(in_line(fair(0, 0), 1)),
        in_line(fair(1, 1), 2),
    ];
    let cfg = Config::new(3, 2, &plans, 0)
        .timeouts(0)
        .cover(SEEN_GAVE_UP | SEEN_HANDOFF);
    assert_safe("waiters giving up, Majority of 3", cfg);
}

/// A lost request, with the first waiter's node timeout.
#[test]
fn hand_off_with_a_lost_request() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .losses(Some(1))
        .cover(SEEN_HANDOFF);
    assert_safe("hand-off, Majority of 3, 1 lost request", cfg);
}

#[test]
fn hand_off_majority_of_5() {
    let cfg = Config::new(5, 3, &hand_off_cast(), 0)
        .timeouts(0)
        .cover(SEEN_HANDOFF | SEEN_CLAIMED);
    assert_safe("hand-off, Majority of 5", cfg);
}

/// `All` tolerates N - 1 forgetful nodes: here 2 of 3 (restarts, clock jumps).
#[test]
fn hand_off_all_of_3_two_forgetful() {
    let plans = [holding(fair(0, 1)), in_line(fair(0, 1), 1)];
    let cfg = Config::new(3, 3, &plans, 0)
        .timeouts(0)
        .forgetful(2)
        .cover(SEEN_HANDOFF | SEEN_FORGOTTEN);
    assert_safe("hand-off, All of 3, 2 forgetful", cfg);
}

/// The hand-off's check of the grant's TTL is implied by its check of the stamp: a waiter
/// waiting since before the stamp is in the release's `sure` set, which every node grants the
/// whole TTL. Dropped, nothing breaks (compare `negative_hand_off_on_short_grants`).
#[test]
fn the_grant_ttl_check_is_implied_by_the_stamp_check() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .bug(Bug::HandOffIgnoresGrantTtl)
        .cover(SEEN_HANDOFF);
    assert_safe("hand-off without the grant TTL check", cfg);
}

/// Without a reconnect, the hand-off without its stamp check finds no counterexample: on one
/// connection the release runs before any attempt the waiter made after the stamp, so where
/// such an attempt claims the hand-off value, it runs there after the release's grant on every
/// node, and it fails only if it was cut off (a new identity, which the hand-off does not
/// name). With a reconnect it is load-bearing: `negative_hand_off_without_the_stamp_check`.
#[test]
fn the_stamp_check_without_a_reconnect() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .bug(Bug::HandOffIgnoresStamp)
        .cover(SEEN_HANDOFF);
    assert_safe("hand-off without the stamp check, no reconnect", cfg);
}

// ---------------------------------------------------------------------------------------------
// Negative controls: the checker must find the counterexample
// ---------------------------------------------------------------------------------------------

/// The first short grants without `sure`: every grant is short, and the hand-off counts them
/// as whole; the waiter's deadline outlives its entries, which lapse at the end of the claim
/// window, and another request takes the key.
#[test]
fn negative_hand_off_on_short_grants() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 1)
        .timeouts(0)
        .bug(Bug::HandOffOnShortGrants);
    assert_finds("hand-off on short grants", cfg, "exclusion");
}

/// The defect fixed in round 3: a cut-off waiter marked waiting before its withdrawal ran.
#[test]
fn negative_waiting_before_the_withdrawal() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .bug(Bug::WaitingBeforeWithdrawal);
    assert_finds("waiting before the withdrawal", cfg, "exclusion");
}

/// `grant` without its `exists` check sets the key over the holder's entry.
#[test]
fn negative_grant_without_the_free_key_check() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .bug(Bug::GrantIgnoresKey);
    assert_finds("a grant over a held key", cfg, "exclusion");
}

/// A claim that does not extend the short grant it finds.
#[test]
fn negative_claim_without_extend() {
    let plans = [
        holding(fair(0, 1)),
        in_line(fair(1, 1), 1),
        in_line(fair(1, 1), 2),
    ];
    let cfg = Config::new(3, 2, &plans, 1)
        .timeouts(0)
        .bug(Bug::ClaimWithoutExtend);
    assert_finds("a claim without extend", cfg, "exclusion");
}

/// The hand-off's deadline measured from the release's decision.
#[test]
fn negative_hand_off_deadline_from_the_decision() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 1)
        .timeouts(0)
        .bug(Bug::HandOffFromDecision);
    assert_finds(
        "a hand-off deadline from the decision",
        cfg,
        "hand-off within its grants",
    );
}

/// A fair lock on a bare majority does not survive one forgetful node either.
#[test]
fn negative_bare_majority_with_a_forgetful_node() {
    let cfg = Config::new(3, 2, &[fair(0, 1), fair(1, 1)], 0)
        .timeouts(0)
        .forgetful(1);
    assert_finds("bare majority, one forgetful node", cfg, "exclusion");
}

// ---------------------------------------------------------------------------------------------
// Connections that fail and are replaced while what was written to them may still land
// ([`Action::Reconnect`]): ordering invariants 1 and 2 no longer hold, and safety must not
// rest on them.
// ---------------------------------------------------------------------------------------------

/// A request retries after its attempt and its rollback timed out on a connection that was
/// then replaced: the first attempt's acquire and rollback land after the next attempts. The
/// acquire finds a later attempt's value and counts it as held, and the rollback deletes only
/// its own attempt's value, so no later attempt's entry is lost (support checks each).
#[test]
fn a_rollback_landing_after_a_reconnect_never_deletes_the_next_attempts_entry() {
    let cfg = Config::new(3, 2, &[fair(0, 3)], 0)
        .timeouts(0b1)
        .reconnects(1)
        .cover(SEEN_LATE);
    assert_safe("a late rollback after a reconnect", cfg);
}

/// r0 holds, r1 (same client) waits in line; r1's node timeouts may fire and one of its
/// client's connections may fail. A cut-off withdrawal landing late withdraws the identity r1
/// left; a refused attempt and its rollback landing after the release extend the grant value
/// the hand-off counted and delete nothing of it.
#[test]
fn a_withdrawal_landing_after_a_reconnect_never_deletes_a_hand_offs_grants() {
    let plans = [holding(fair(0, 1)), in_line(fair(0, 1), 1)];
    let cfg = Config::new(3, 2, &plans, 0)
        .timeouts(0b10)
        .reconnects(1)
        .cover(SEEN_HANDOFF | SEEN_CUT_OFF | SEEN_LATE);
    assert_safe("a late withdrawal after a reconnect", cfg);
}

/// The acquire as first proposed, which takes over any value of its request's base with its
/// own: the first attempt's acquire, landing late, takes over the second attempt's entry, and
/// its late rollback deletes it; another request takes the key.
#[test]
fn negative_an_acquire_taking_over_its_requests_other_values() {
    let cfg = Config::new(3, 2, &[fair(0, 2), fair(1, 1)], 0)
        .timeouts(0b01)
        .reconnects(1)
        .bug(Bug::AcquireOverwritesOwnValues);
    assert_finds(
        "an acquire taking over its request's values",
        cfg,
        "exclusion",
    );
}

/// The same acquire, for the hand-off: r1's attempt, refused where r0's release had not yet
/// landed, times out on a connection that is then replaced; its acquire and rollback land
/// after the release, take over the grant the hand-off counted and delete it (support fails).
#[test]
fn negative_an_acquire_taking_over_a_hand_offs_grant() {
    let plans = [holding(fair(0, 1)), in_line(fair(0, 1), 1)];
    let cfg = Config::new(3, 2, &plans, 0)
        .timeouts(0b10)
        .reconnects(1)
        .bug(Bug::AcquireOverwritesOwnValues);
    assert_finds("an acquire taking over a hand-off's grant", cfg, "support");
}

/// A rollback that deletes any of its request's values instead of its attempt's own: the
/// first attempt's rollback, landing late, deletes the second attempt's entry.
#[test]
fn negative_a_rollback_deleting_by_base() {
    let cfg = Config::new(3, 2, &[fair(0, 2), fair(1, 1)], 0)
        .timeouts(0b01)
        .reconnects(1)
        .bug(Bug::RollbackByBase);
    assert_finds("a rollback deleting by base", cfg, "exclusion");
}

/// A cut-off request that keeps its identity: its withdrawal, landing late, deletes the grants
/// its client's release handed it (support fails; two holders take a larger search, in
/// `large_negative_a_cut_off_request_keeping_its_identity`).
#[test]
fn negative_a_cut_off_request_keeping_its_identity() {
    let plans = [holding(fair(0, 1)), in_line(fair(0, 1), 1)];
    let cfg = Config::new(3, 2, &plans, 0)
        .timeouts(0b10)
        .reconnects(1)
        .losses(Some(1))
        .bug(Bug::CutOffKeepsIdentity);
    assert_finds("a cut-off request keeping its identity", cfg, "support");
}

/// The hand-off without its stamp check (it hands the lock to a waiter that is waiting, since
/// whenever): r1, named in the release's `sure` set with round 1, attempts (round 2) after the
/// stamp; the attempt claims the hand-off value `r1:h1` on nodes where the release ran first
/// (round 1 < 2), fails elsewhere (refused where it overtook the release on a replaced
/// connection), and its rollback deletes its own value there. r1 waits again (round 2), and
/// the hand-off gives it `r1:h1`, which those nodes no longer hold (support fails).
#[test]
fn negative_hand_off_without_the_stamp_check() {
    let plans = [holding(fair(0, 1)), in_line(fair(0, 1), 1)];
    let cfg = Config::new(3, 2, &plans, 0)
        .timeouts(0b10)
        .reconnects(1)
        .bug(Bug::HandOffIgnoresStamp);
    assert_finds("a hand-off without the stamp check", cfg, "support");
}

/// A hand-off value that any attempt of the request may claim (the round fence dropped, as if
/// the hand-off set the grant value): an attempt of the waiter's last round, landing late on a
/// replaced connection after the release, claims the hand-off value with its own, and its
/// late rollback deletes that (support fails).
#[test]
fn negative_a_hand_off_value_without_the_round_fence() {
    let plans = [holding(fair(0, 1)), in_line(fair(0, 1), 1)];
    let cfg = Config::new(3, 2, &plans, 0)
        .timeouts(0b10)
        .reconnects(1)
        .bug(Bug::HandOffWithoutRoundFence);
    assert_finds("a hand-off value without the round fence", cfg, "support");
}

/// A grant that sets the key to the value of the waiter's last attempt (its line entry holding
/// that instead of the base): that attempt's rollback, landing after the release, deletes the
/// grant the hand-off counted (support fails; no two holders were found within the bounds
/// tried, see docs/SAFETY.md).
#[test]
fn negative_a_grant_setting_an_attempts_value() {
    let plans = [holding(fair(0, 1)), in_line(fair(0, 1), 1)];
    let cfg = Config::new(3, 2, &plans, 0)
        .timeouts(0b10)
        .reconnects(1)
        .bug(Bug::GrantSetsAttemptValue);
    assert_finds("a grant setting an attempt's value", cfg, "support");
}

// ---------------------------------------------------------------------------------------------
// Larger configurations, too slow for the debug profile. Run them with:
// cargo test --release --all-features --test model_fair -- --ignored --nocapture
// ---------------------------------------------------------------------------------------------

/// The hand-off with every request's node timeouts (the holder's release as well).
#[test]
#[ignore]
fn large_hand_off_with_every_timeout() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b111)
        .cover(SEEN_HANDOFF | SEEN_CUT_OFF | SEEN_SELF_REGRANT);
    assert_safe("hand-off, every timeout", cfg);
}

/// The hand-off over a tick: grants and entries expire, the holder's deadline passes.
#[test]
#[ignore]
fn large_hand_off_over_a_tick() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 1)
        .timeouts(0b010)
        .cover(SEEN_HANDOFF | SEEN_LAPSED);
    assert_safe("hand-off over a tick", cfg);
}

/// The first waiter with a second attempt, over a tick.
#[test]
#[ignore]
fn large_hand_off_with_a_second_attempt_over_a_tick() {
    let plans = [
        holding(fair(0, 1)),
        in_line(fair(0, 2), 1),
        in_line(fair(1, 1), 2),
    ];
    let cfg = Config::new(3, 2, &plans, 1)
        .timeouts(0b010)
        .cover(SEEN_HANDOFF | SEEN_CUT_OFF | SEEN_LAPSED);
    assert_safe("hand-off, a second attempt, over a tick", cfg);
}

/// A claim window of two ticks, as long as the waiters' TTL (a short grant then has the
/// whole TTL's length), and a holder with TTL 3, over two ticks.
#[test]
#[ignore]
fn large_hand_off_with_a_claim_window_as_long_as_the_ttl() {
    let plans = [
        holding(request(0, 3, 1)),
        in_line(fair(0, 1), 1),
        in_line(fair(1, 1), 2),
    ];
    let mut cfg = Config::new(3, 2, &plans, 2)
        .timeouts(0b010)
        .cover(SEEN_HANDOFF | SEEN_SHORT_GRANT | SEEN_LAPSED);
    cfg.claim = 2;
    assert_safe("hand-off, claim window 2, over two ticks", cfg);
}

/// The implied TTL check, over a tick.
#[test]
#[ignore]
fn large_the_grant_ttl_check_is_implied_over_a_tick() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 1)
        .timeouts(0b010)
        .bug(Bug::HandOffIgnoresGrantTtl);
    assert_safe("hand-off without the grant TTL check, 1 tick", cfg);
}

/// The hand-off's cast over a tick, with r1's node timeouts and one reconnect.
#[test]
#[ignore]
fn large_hand_off_over_a_tick_with_a_reconnect() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 1)
        .timeouts(0b010)
        .reconnects(1)
        .cover(SEEN_HANDOFF | SEEN_LATE);
    assert_safe("hand-off over a tick, a reconnect", cfg);
}

/// Short grants to another client's waiters over two ticks, claimed or lapsing, with one
/// reconnect (and no node timeouts: with r2's, 50 million states and 17 GB).
#[test]
#[ignore]
fn large_short_grants_over_two_ticks_with_a_reconnect() {
    let plans = [
        holding(fair(0, 1)),
        in_line(fair(1, 0), 1),
        in_line(fair(1, 2), 2),
    ];
    let cfg = Config::new(3, 2, &plans, 2)
        .timeouts(0)
        .reconnects(1)
        .cover(SEEN_SHORT_GRANT | SEEN_LAPSED | SEEN_CLAIMED | SEEN_LATE);
    assert_safe("short grants over two ticks, a reconnect", cfg);
}

/// Any number of lost requests, with the first waiter's node timeouts.
#[test]
#[ignore]
fn large_hand_off_with_any_lost_requests() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .losses(None)
        .cover(SEEN_HANDOFF);
    assert_safe("hand-off, any losses", cfg);
}

/// The hand-off's cast under `All` of 3, two forgetful faults, the first waiter's timeouts.
#[test]
#[ignore]
fn large_hand_off_all_of_3_two_forgetful() {
    let cfg = Config::new(3, 3, &hand_off_cast(), 0)
        .timeouts(0b010)
        .forgetful(2)
        .cover(SEEN_HANDOFF | SEEN_FORGOTTEN);
    assert_safe("hand-off, All of 3, 2 forgetful, 3 requests", cfg);
}

/// The hand-off on five nodes with the first waiter's node timeouts.
#[test]
#[ignore]
fn large_hand_off_majority_of_5_with_timeouts() {
    let cfg = Config::new(5, 3, &hand_off_cast(), 0)
        .timeouts(0b010)
        .cover(SEEN_HANDOFF | SEEN_CUT_OFF);
    assert_safe("hand-off, Majority of 5, timeouts", cfg);
}

/// Two clients from their first attempts, two attempts each, the second one's node timeouts.
#[test]
#[ignore]
fn large_two_clients_two_attempts_each() {
    let cfg = Config::new(3, 2, &[fair(0, 2), fair(1, 2)], 0)
        .timeouts(0b10)
        .cover(SEEN_SHORT_GRANT | SEEN_DRAW_ROUND);
    assert_safe("two clients, two attempts each, timeouts", cfg);
}

/// Two clients from their first attempts, both requests' node timeouts.
#[test]
#[ignore]
fn large_two_clients_with_timeouts() {
    let cfg = Config::new(3, 2, &[fair(0, 1), fair(1, 2)], 0)
        .timeouts(0b11)
        .cover(SEEN_DRAW_ROUND | SEEN_SHORT_GRANT);
    assert_safe("two clients from their first attempts, every timeout", cfg);
}

/// Three requests from their first attempts, two of them of one client.
#[test]
#[ignore]
fn large_three_requests_from_their_first_attempts() {
    let cfg = Config::new(3, 2, &[fair(0, 1), fair(0, 2), fair(1, 2)], 0)
        .timeouts(0)
        .cover(SEEN_HANDOFF | SEEN_SHORT_GRANT);
    assert_safe("three requests from their first attempts", cfg);
}

/// The hand-off with both waiters' node timeouts, over a tick (about 3 GB).
#[test]
#[ignore]
fn large_hand_off_with_both_waiters_timeouts_over_a_tick() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 1).timeouts(0b110);
    assert_safe("hand-off, both waiters' timeouts, over a tick", cfg);
}

/// The hand-off's cast under `AtLeast(4)` of 5 with two forgetful faults (about 3 GB).
#[test]
#[ignore]
fn large_hand_off_at_least_4_of_5_two_forgetful() {
    let cfg = Config::new(5, 4, &hand_off_cast(), 0)
        .timeouts(0)
        .forgetful(2);
    assert_safe("hand-off, AtLeast(4) of 5, 2 forgetful", cfg);
}

/// The same with a lost request as well: the configuration in which a cut-off request that
/// keeps its identity loses a hand-off's grant (`negative_a_cut_off_request_keeping_its_identity`).
#[test]
#[ignore]
fn large_a_withdrawal_landing_after_a_reconnect_and_a_loss_never_deletes_a_hand_offs_grants() {
    let plans = [holding(fair(0, 1)), in_line(fair(0, 1), 1)];
    let cfg = Config::new(3, 2, &plans, 0)
        .timeouts(0b10)
        .reconnects(1)
        .losses(Some(1))
        .cover(SEEN_HANDOFF | SEEN_CUT_OFF | SEEN_LATE);
    assert_safe("a late withdrawal after a reconnect and a loss", cfg);
}

/// The hand-off's cast with r1's node timeouts and two of its client's connections replaced:
/// a cut-off withdrawal landing late on both nodes that granted the hand-off deletes nothing
/// of the new identity's grants.
#[test]
#[ignore]
fn large_a_withdrawal_landing_after_reconnects_never_deletes_a_hand_offs_grants() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .reconnects(2)
        .cover(SEEN_HANDOFF | SEEN_CUT_OFF | SEEN_LATE);
    assert_safe("a late withdrawal after reconnects, 3 requests", cfg);
}

/// A request that retries, against another client's request, with one reconnect.
#[test]
#[ignore]
fn large_a_rollback_landing_after_a_reconnect_never_deletes_the_next_attempts_entry() {
    let cfg = Config::new(3, 2, &[fair(0, 2), fair(1, 1)], 0)
        .timeouts(0b01)
        .reconnects(1)
        .cover(SEEN_LATE);
    assert_safe("a late rollback after a reconnect, 2 clients", cfg);
}

/// A request with three attempts and two reconnects.
#[test]
#[ignore]
fn large_three_attempts_with_two_reconnects() {
    let cfg = Config::new(3, 2, &[fair(0, 3)], 0)
        .timeouts(0b1)
        .reconnects(2)
        .cover(SEEN_LATE);
    assert_safe("three attempts, two reconnects", cfg);
}

/// The hand-off's cast with r1's node timeouts and one reconnect.
#[test]
#[ignore]
fn large_hand_off_with_a_reconnect() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .reconnects(1)
        .cover(SEEN_HANDOFF | SEEN_CUT_OFF | SEEN_LATE);
    assert_safe("hand-off, a reconnect", cfg);
}

/// Two requests of one client from their first attempts, with one reconnect.
#[test]
#[ignore]
fn large_two_requests_of_one_client_with_a_reconnect() {
    let cfg = Config::new(3, 2, &[fair(0, 1), fair(0, 2)], 0)
        .timeouts(0b10)
        .reconnects(1)
        .cover(SEEN_HANDOFF | SEEN_LATE);
    assert_safe("two requests of one client, a reconnect", cfg);
}

/// A cut-off request that keeps its identity, to two holders: its withdrawal lands after its
/// client's release on a node whose connection was replaced (and was lost on another), deletes
/// the grant the hand-off counted and grants the key to r2, which claims it.
#[test]
#[ignore]
fn large_negative_a_cut_off_request_keeping_its_identity() {
    let cfg = Config::new(3, 2, &hand_off_cast(), 0)
        .timeouts(0b010)
        .reconnects(1)
        .losses(Some(1))
        .bug(Bug::CutOffKeepsIdentity);
    assert_finds(
        "a cut-off request keeping its identity, 3 requests",
        cfg,
        "exclusion",
    );
}
