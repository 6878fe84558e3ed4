//! Exhaustive model check of the quorum-lock protocol (the mutex and the read-write lock),
//! with `stateright`.
//!
//! The model is a small state machine of what the library does, explored by breadth-first
//! search over every interleaving within the bounds of each configuration. It mirrors:
//!
//! - **Acquire** (`src/acquire.rs`, `attempt`): note `t0`, send the acquire (`SET NX PX`; in
//!   the `Fencing::InAcquire` negative control, a script that also increments the node's
//!   counter) to every node at once, decide
//!   at quorum or as soon as the quorum became impossible. A guard exists only when the quorum
//!   came while `now < t0 + ttl` (validity `ttl - elapsed - drift`, with drift 0 and
//!   `min_validity` 0); its deadline is `t0 + ttl`. Otherwise the attempt is rolled back on
//!   *every* node (compare-and-delete), behind the attempt's own requests on each connection
//!   (`src/ordering.rs`, invariant 5). The holder value is unique per attempt. (The library
//!   skips the nodes that answered that they refused: a refusing node never took this
//!   attempt's holder value, so its compare-and-delete would find nothing; the model sends it
//!   anyway, which reaches the same node states.)
//! - **The ordered approach** (`src/arbiter.rs`, `approach`; in configurations with
//!   `ordered`): a mutex waiter that lost an earlier attempt (or owes the courtesy after its
//!   own release) sends its acquire first only to the key's arbiter, node `n0` here (`t0`
//!   noted before). A yes: the acquire goes to the other nodes, and the attempt is tallied
//!   over all N with the arbiter's yes counted. A refusal: the attempt ends, nothing sent
//!   elsewhere, nothing to roll back. A failure, a timeout or a request the breaker skipped:
//!   the usual fan-out to every node, the arbiter included with the same holder value
//!   (`SET NX`, so its first request, if it ran first, has it refused by the attempt's own
//!   entry), tallied fresh. Either kind of attempt may start at any moment, so they mix. In
//!   these configurations the rollback goes where the library sends it (`acquire.rs`,
//!   `give_back_to`): to every node but those that refused and those never written to; and,
//!   after a fallback, also to the arbiter when its first request was written (the fix the
//!   model found: the library as first written left it out, the negative control
//!   [`Bug::FallbackRollbackSkipsArbiter`]).
//! - **Fencing** (`acquire.rs`, `fence_token`): once the acquire reached its quorum, a second
//!   fan-out increments the counters, and the token is the largest answer from a quorum (in
//!   the `Fencing::InAcquire` negative control, the largest counter among the confirming
//!   nodes); it is written back (`counter = max(counter, token)`) to a quorum before the guard
//!   exists.
//! - **Extend and renewal** (`src/lease.rs`, `renew` and `confirm`): compare-and-PEXPIRE on
//!   every node. If `start + ttl` is earlier than the current deadline, the deadline is cut to
//!   it *before* the request is sent; it becomes `start + ttl` when a quorum confirms before
//!   the current deadline; when so many nodes refused that no quorum can hold the entry, the
//!   lock is lost; a plain failure keeps the (possibly cut) deadline; the deadline passing
//!   first loses it.
//! - **Watchdog renewal with repair** (`src/watchdog.rs`; `lease.rs`, `repair`): after a
//!   confirmed renewal, the other nodes' answers are collected until the next renewal is due;
//!   then the nodes that answered "not held" get `SET NX PX remaining-validity`, and only
//!   while the validity lasts. Renewals happen at any moment (the lease/3 schedule is not
//!   modelled) and renew for the whole lease; the renewal that `max_hold` shortens is covered
//!   by the shorter extend (without its repair).
//! - **Release** (`lease.rs`, `release_on_nodes`): compare-and-delete on every node, after the
//!   lease's earlier requests on each connection; the client stops believing it holds when
//!   the release starts.
//! - **The read-write lock** (`src/family/rw.rs`, `Shape::Read` and `Shape::Write`; the
//!   scripts in `src/family/lua/`): the same client machinery, with each call replaced by the script the
//!   shape sends (see [`Role`]). On a node, a reader acquire (READ_ACQUIRE) is refused by a
//!   writer's entry or a pending-writer mark and adds the reader's member with its own expiry;
//!   a writer acquire (WRITE_ACQUIRE) is refused by a writer's entry or a live reader, and a
//!   waiting writer refused by readers marks the key (unless another request's mark is live);
//!   a reader's extend (PERMIT_EXTEND) moves only a live member's expiry (`ZADD XX`), the
//!   writer's is EXTEND; a reader's repair (READ_REPAIR) adds the member back only where no
//!   writer's entry is, a writer's (WRITE_REPAIR) only where no reader is live and no entry
//!   exists; a reader's release and rollback (READ_RELEASE) remove its member, a writer's
//!   (WRITE_RELEASE) its entry, and a waiting writer's release also its own mark; a waiting
//!   writer whose last attempt failed withdraws its mark (WRITE_WITHDRAW) behind the rollback.
//!   Readers and writers share the key's fencing counter.
//!
//! The environment: `N` nodes, each with the key's entry (holder value and expiry on the
//! node's clock), the readers' set (each reader's expiry), the pending-writer mark (waiting
//! request and expiry) and a fencing counter; global time in ticks (node clocks run at the true rate: the
//! drift allowance covers rate differences, and the model uses drift 0, which is then exact;
//! an entry has expired when `now >= expiry`); one FIFO request queue per (client, node)
//! connection, whose head a node may run at any moment (requests are delayed arbitrarily, and
//! reordered across nodes, never within one connection); requests that may be lost
//! (unavailability); in configurations with `skips`, a client's circuit breaker for a node
//! (`src/node/backlog.rs`), which takes the fan-out's request to it back before it is written
//! and counts it as failed at once; a client's node timeout at any moment, which fails every node of the
//! current fan-out that has not answered (they all started together, with the same timeout);
//! replies that arrive as the node answers, or (one configuration) travel separately and late;
//! and forgetful faults, bounded per run: a restart empty (everything lost; requests still
//! queued run on the restarted node, as if re-sent) and a clock jump past a time (everything
//! that would expire by then expires early).
//!
//! Properties: (a) `exclusion`: a writer (or mutex client) inside its validity is the only
//! client inside its validity (readers may overlap each other); (a') `support`: while a client
//! is inside its validity, at least `q - f` nodes hold its entry or member (`f` = forgetful
//! faults so far), which implies (a) by quorum counting whenever `f <= 2q - N - 1`, and needs
//! no second client, so single-client configurations can go deeper; (a'') `node exclusion`:
//! no node has a writer's entry and a live reader at once, the per-node fact (a) rests on;
//! (b) `tokens increase`: a writer's token exceeds every earlier holder's, a reader's every
//! earlier writer's; (c) liveness sanity; (d) `full rollback`: once an attempt's rollback (or
//! release) ran on every node it was sent to, no node keeps the attempt's entry or member; (e)
//! `repair within validity`.
//!
//! Property (b) failed for the library's first fencing scheme (increments with the acquire):
//! `negative_fencing_incremented_during_the_acquire_can_repeat_tokens` keeps the
//! counterexample; the library now increments after the quorum (`Fencing::AfterQuorum`), which
//! passes.
//!
//! Not modelled (docs/SAFETY.md, "Model check", lists every simplification): clock rates that
//! differ, the wait loop's timing and wake-ups (a client may start its next attempt at any
//! moment), connecting, NOSCRIPT fallbacks and re-sends after a reset (every request is on its
//! connection from the moment the fan-out starts; a lost one is gone), reentrant owners, the
//! answers of releases, rollbacks and repairs (nothing depends on them), the release notices,
//! a waiting writer that gives up before its last attempt (its mark then stays until it
//! expires), the readers' set's own expiry (every script that changes the set keeps it at the
//! latest member's, so it removes nothing a member's expiry does not), a mutex and a
//! read-write lock on one key, and anything beyond the bounds of each configuration (nodes,
//! clients, attempts, extends, renewals, ticks, losses, faults).
//!
//! Run: `cargo test --all-features --test model -- --nocapture` prints the state counts and
//! the counterexample traces of the negative controls; the larger configurations are
//! `#[ignore]`d: `cargo test --release --all-features --test model -- --ignored --nocapture`.

use std::collections::BTreeSet;
use std::time::Instant;

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path, Property};

/// Fixed capacities, so that a state is a plain `Copy` value.
const MAX_N: usize = 5;
const MAX_C: usize = 3;
const MAX_ATTEMPTS: usize = 2;
/// Requests one connection can hold at once (every request a client makes in a run fits).
const QUEUE: usize = 8;

fn bit(n: usize) -> u8 {
    1 << n
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// What a client takes on the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The key's entry: the mutex, or the writer of a read-write lock taking it in a single
    /// attempt (which sets no pending mark). Where no reader is live, the writer's scripts
    /// act as the mutex's: WRITE_ACQUIRE as `SET NX PX`, WRITE_RELEASE as RELEASE, WRITE_REPAIR
    /// as `SET NX PX`; EXTEND is the mutex's own. So a configuration without readers is the
    /// mutex's, and its writers are two mutex clients.
    Writer,
    /// A writer that waits (`write_lock` with a wait): the one request's id, shared by its
    /// attempts, is its pending-writer mark, which an attempt refused because of live readers
    /// sets (WRITE_ACQUIRE), its release deletes (WRITE_RELEASE), and the failure of its last
    /// attempt withdraws (WRITE_WITHDRAW).
    WaitingWriter,
    /// A reader of the read-write lock: a member of the readers' set with its own expiry
    /// (READ_ACQUIRE, PERMIT_EXTEND, READ_REPAIR, READ_RELEASE).
    Reader,
}

/// What one client does, bounded so that the search terminates.
#[derive(Clone, Copy, Debug)]
struct Plan {
    role: Role,
    /// Acquire attempts, each with a fresh holder value.
    attempts: u8,
    /// The TTL of the acquire, and the watchdog's lease.
    ttl: u8,
    /// TTLs a user extend may ask for (shorter and longer than the current one).
    extend_to: &'static [u8],
    /// How many user extends.
    extends: u8,
    /// How many watchdog renewals (with repair).
    renewals: u8,
    /// Whether the client releases (from a held, expired or lost guard).
    release: bool,
}

/// Acquire attempts only, each released when held: a mutex client, or a writer.
const fn acquirer(attempts: u8, ttl: u8) -> Plan {
    Plan {
        role: Role::Writer,
        attempts,
        ttl,
        extend_to: &[],
        extends: 0,
        renewals: 0,
        release: true,
    }
}

/// A reader's acquire attempts only, each released when held.
const fn reader(attempts: u8, ttl: u8) -> Plan {
    Plan {
        role: Role::Reader,
        ..acquirer(attempts, ttl)
    }
}

/// A waiting writer's acquire attempts only, each released when held.
const fn waiting_writer(attempts: u8, ttl: u8) -> Plan {
    Plan {
        role: Role::WaitingWriter,
        ..acquirer(attempts, ttl)
    }
}

/// How the fencing token is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fencing {
    /// The library's scheme before the model check (a negative control now): the acquire
    /// script incremented the counter where it took the lock; the token was the largest
    /// counter among the confirming nodes, written back to a quorum.
    InAcquire,
    /// The library's scheme, which the model proposed: once the acquire reached its quorum, a
    /// second fan-out increments the counters (the token is the largest answer from a quorum),
    /// then the token is written back to a quorum. One round trip more than `InAcquire`.
    AfterQuorum,
}

/// A defect of an earlier (or imagined) version of the library, for the negative controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// A shorter extend that does not cut the deadline before its request is sent, and keeps
    /// the old deadline when the quorum is not confirmed (an earlier version's).
    NoCutBeforeShorterExtend,
    /// Repair with the whole lease as TTL, and without checking that the validity lasts.
    RepairBeyondValidity,
    /// The rollback of a failed attempt goes only to the nodes that said yes.
    RollbackOnlyWhereYes,
    /// A reader's extend is a plain `ZADD` instead of PERMIT_EXTEND's check and `ZADD XX`: it
    /// adds the member back where it expired or was never added, whatever else the node has.
    ReaderExtendReAdds,
    /// A reader's repair puts the member back also where a writer holds the key (READ_REPAIR
    /// without its check of the writer's entry).
    ReadRepairIgnoresWriter,
    /// A reader's release deletes the readers' set where it is a member (a compare-and-delete
    /// as the mutex's), instead of removing only its own member.
    ReadReleaseDeletesTheSet,
    /// A fan-out counts its quorum over the nodes it asked, leaving out the nodes its circuit
    /// breaker skipped (a majority of the rest), instead of over all N.
    QuorumOverNodesAsked,
    /// The ordered approach taking the arbiter's yes for the lock: the client holds at once
    /// (deadline `t0 + ttl`), without asking the other nodes.
    ArbiterYesHolds,
    /// The ordered approach's fallback leaving the arbiter out: after the arbiter failed or
    /// timed out, the acquire goes only to the other nodes (the arbiter counted as failed),
    /// and the rollback leaves it out too, though its first request may still run.
    FallbackForgetsArbiter,
    /// The library as first written (`src/arbiter.rs`, `approach`, and `src/acquire.rs`,
    /// `give_back_to`, at the commit that added the ordered approach; fixed since, see
    /// `Approached::Fan::also_undo`): after a fallback, the rollback leaves out the arbiter when the fallback's request to it was refused or never
    /// written, as for any node. But the arbiter's first request may have been written and
    /// taken the key: the fallback's plain `SET NX` (not the re-send form that recognises
    /// the holder's own entry, ordering invariant 6) is then refused by the attempt's own
    /// entry, and the rollback misses it.
    FallbackRollbackSkipsArbiter,
    /// A cluster node that follows a `MOVED` answer as a cluster client does: the request is
    /// sent again to the slot's new primary, behind what was sent there meanwhile (the
    /// library answers the call with a failure instead, `src/node/cluster.rs`).
    FollowRedirect,
}

#[derive(Clone, Debug)]
struct Config {
    nodes: usize,
    quorum: u8,
    plans: Vec<Plan>,
    /// Global time runs from 0 to this many ticks.
    max_time: u8,
    /// Forgetful faults (restart empty, clock jump) allowed in one run.
    forgetful: u8,
    /// Requests that may be lost in one run (`None`: any number).
    losses: Option<u8>,
    /// The clients that may time out (a bit per client): a node that does not answer (down,
    /// paused, slow, partitioned).
    timeouts: u8,
    /// Replies travel separately (and may arrive late, or not at all) instead of arriving as
    /// the node answers.
    reply_delay: bool,
    /// For the liveness check: time advances only when every message was delivered and no
    /// client has something to do first (a network never slower than a tick).
    timely: bool,
    fencing: Option<Fencing>,
    bug: Option<Bug>,
    /// Adds the `eventually` property "c0 eventually holds".
    liveness: bool,
    /// Circuit breakers (`src/node/backlog.rs`): a client may skip a node in a fan-out, not
    /// writing its request and counting it as failed at once.
    skips: bool,
    /// `SEEN_*` paths the search must reach (`sometimes` properties, as coverage).
    cover: u16,
    /// Initial fencing counters range over `0..=counters` on every node (an earlier history).
    counters: u8,
    /// Or exactly these initial counters.
    start_counters: Option<[u8; MAX_N]>,
    /// Node symmetry reduction: each state is replaced by the representative of its class
    /// under renaming the nodes (traces are translated back to the nodes' real names).
    symmetry: bool,
    /// The ordered approach: a client may start an attempt by asking the arbiter (node 0)
    /// first, beside the attempts to every node at once. Node 0 is then special, so the
    /// symmetry reduction renames only the other nodes (see [`Protocol::canonicalize`]).
    ordered: bool,
    /// Cluster nodes (`src/node/cluster.rs`): the head request of a connection may be answered
    /// `MOVED` (its slot moved to another primary: not run); it counts as a lost request.
    redirects: bool,
}

impl Config {
    /// `nodes` nodes, quorum `quorum`, the given clients: no faults, no lost requests;
    /// timeouts, arbitrary delays and node symmetry on.
    fn new(nodes: usize, quorum: u8, plans: &[Plan], max_time: u8) -> Config {
        assert!(nodes <= MAX_N && plans.len() <= MAX_C);
        assert!(plans
            .iter()
            .all(|p| usize::from(p.attempts) <= MAX_ATTEMPTS));
        Config {
            nodes,
            quorum,
            plans: plans.to_vec(),
            max_time,
            forgetful: 0,
            losses: Some(0),
            timeouts: ((1 << MAX_C) - 1) as u8,
            reply_delay: false,
            timely: false,
            fencing: None,
            bug: None,
            liveness: false,
            skips: false,
            cover: 0,
            counters: 0,
            start_counters: None,
            symmetry: true,
            ordered: false,
            redirects: false,
        }
    }

    /// The ordered approach (`src/arbiter.rs`): mutex clients only, on 3 nodes or more (the
    /// library uses it for no other shape, and with fewer nodes never).
    fn ordered(mut self) -> Config {
        assert!(self.nodes >= 3);
        assert!(self.plans.iter().all(|p| p.role == Role::Writer));
        self.ordered = true;
        self
    }

    fn forgetful(mut self, f: u8) -> Config {
        self.forgetful = f;
        self
    }

    fn losses(mut self, losses: Option<u8>) -> Config {
        self.losses = losses;
        self
    }

    fn fencing(mut self, fencing: Fencing, counters: u8) -> Config {
        self.fencing = Some(fencing);
        self.counters = counters;
        self
    }

    fn cover(mut self, seen: u16) -> Config {
        self.cover = seen;
        self
    }

    /// A negative control: the defect.
    fn bug(mut self, bug: Bug) -> Config {
        self.bug = Some(bug);
        self
    }

    fn has(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }

    fn reads(&self, c: usize) -> bool {
        self.plans[c].role == Role::Reader
    }
}

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

/// One acquisition's holder value: unique per attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Holder {
    client: u8,
    attempt: u8,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}#{}", self.client, self.attempt + 1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    holder: Holder,
    /// On the node's clock (global time: drift 0); expired when `now >= expiry`.
    expiry: u8,
}

/// A waiting writer's pending mark (`quorum-lock:writer-waiting:{<h>}:K`): the request's id, which
/// the model names by its client (one waiting request per client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mark {
    waiter: u8,
    expiry: u8,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct NodeState {
    /// The key `K`: the mutex's entry, or a read-write lock's writer.
    entry: Option<Entry>,
    /// The readers' sorted set (`quorum-lock:readers:{<h>}:K`): member the holder value, score its
    /// expiry; here each holder's expiry, 0 for "not a member" (see [`slot`]).
    readers: [u8; MAX_C * MAX_ATTEMPTS],
    mark: Option<Mark>,
    /// The fencing counter (`quorum-lock:fence:{<h>}:K`): no TTL, lost only on a restart.
    counter: u8,
}

/// A holder's place in a node's readers.
fn slot(holder: Holder) -> usize {
    usize::from(holder.client) * MAX_ATTEMPTS + usize::from(holder.attempt)
}

impl NodeState {
    /// A live reader: every script purges the expired members first, and the model's ticks
    /// remove them as they expire.
    fn has_readers(&self) -> bool {
        self.readers != [0; MAX_C * MAX_ATTEMPTS]
    }

    fn member(&self, holder: Holder) -> bool {
        self.readers[slot(holder)] != 0
    }

    /// Whether the node has this holder's entry or member.
    fn keeps(&self, holder: Holder) -> bool {
        self.entry.is_some_and(|e| e.holder == holder) || self.member(holder)
    }

    /// The expiries of everything on the node with a TTL (entry, members, mark).
    fn expiries(&self) -> impl Iterator<Item = u8> + '_ {
        let entry = self.entry.map(|e| e.expiry);
        let mark = self.mark.map(|m| m.expiry);
        let members = self.readers.iter().copied().filter(|&e| e != 0);
        entry.into_iter().chain(mark).chain(members)
    }

    /// Removes everything that expires at or before `time`; says whether anything did.
    fn expire(&mut self, time: u8) -> bool {
        let mut any = false;
        if self.entry.is_some_and(|e| e.expiry <= time) {
            self.entry = None;
            any = true;
        }
        if self.mark.is_some_and(|m| m.expiry <= time) {
            self.mark = None;
            any = true;
        }
        for e in &mut self.readers {
            if *e != 0 && *e <= time {
                *e = 0;
                any = true;
            }
        }
        any
    }
}

/// A request's kind; what it does on a node depends on the client's [`Role`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `SET K h NX PX ttl` (with `Fencing::InAcquire`, also the counter's increment);
    /// WRITE_ACQUIRE for a writer, READ_ACQUIRE for a reader.
    Acquire = 0,
    /// The fencing write-back: `counter = max(counter, token)`.
    FenceMax = 1,
    /// Compare-and-PEXPIRE (the EXTEND script); a reader's PERMIT_EXTEND (`ZADD XX`).
    Extend = 2,
    /// `SET K h NX PX remaining` (the watchdog's repair); WRITE_REPAIR, READ_REPAIR.
    Repair = 3,
    /// Compare-and-delete (the RELEASE script): release and rollback; WRITE_RELEASE (`arg` 1
    /// for a waiting writer's release, which also deletes its mark), READ_RELEASE.
    Release = 4,
    /// `INCR` of the counter, answering its new value (`Fencing::AfterQuorum` only).
    Incr = 5,
    /// WRITE_WITHDRAW: a waiting writer that gave up deletes its pending mark.
    Withdraw = 6,
}

/// A request on its connection, packed into 16 bits to keep states small: hashing and copying
/// states is most of the search's work. The holder's client is the connection's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Req(u16);

impl Req {
    /// `arg` is the TTL (acquire, extend, repair) or the token (write-back); `wait` says that
    /// the client still waits for the answer: only then does a reply travel back (a reply
    /// nobody waits for is ignored by the library, so the model does not carry it).
    fn new(kind: Kind, attempt: u8, arg: u8, wait: bool) -> Req {
        Req(kind as u16 | u16::from(attempt) << 3 | u16::from(wait) << 4 | u16::from(arg) << 8)
    }

    fn kind(self) -> Kind {
        match self.0 & 7 {
            0 => Kind::Acquire,
            1 => Kind::FenceMax,
            2 => Kind::Extend,
            3 => Kind::Repair,
            4 => Kind::Release,
            5 => Kind::Incr,
            _ => Kind::Withdraw,
        }
    }

    fn attempt(self) -> u8 {
        (self.0 >> 3 & 1) as u8
    }

    fn wait(self) -> bool {
        self.0 & 1 << 4 != 0
    }

    fn arg(self) -> u8 {
        (self.0 >> 8) as u8
    }

    fn unwaited(self) -> Req {
        Req(self.0 & !(1 << 4))
    }

    fn holder(self, c: usize) -> Holder {
        Holder {
            client: c as u8,
            attempt: self.attempt(),
        }
    }

    /// A reader's calls are named `read-...`, the others as the mutex's.
    fn describe(self, c: usize, reads: bool) -> String {
        let (holder, arg) = (self.holder(c), self.arg());
        let read = if reads { "read-" } else { "" };
        match self.kind() {
            Kind::Acquire => format!("{read}acquire {holder} ttl {arg}"),
            Kind::FenceMax => format!("fence-max {holder} token {arg}"),
            Kind::Extend => format!("{read}extend {holder} ttl {arg}"),
            Kind::Repair => format!("{read}repair {holder} ttl {arg}"),
            Kind::Release => format!("{read}release {holder}"),
            Kind::Incr => format!("incr {holder}"),
            Kind::Withdraw => format!("withdraw c{c}'s mark"),
        }
    }
}

/// A FIFO request queue: one connection. Unused slots stay `Default`, so that equal queues
/// are equal values.
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

    /// The newest request, if any.
    fn last(&self) -> Option<Req> {
        (self.len > 0).then(|| self.items[usize::from(self.len) - 1])
    }

    /// Takes the newest request back (it was never written).
    fn pop_back(&mut self) {
        self.len -= 1;
        self.items[usize::from(self.len)] = Req::default();
    }

    /// Nobody waits for these requests' answers any more.
    fn unwait(&mut self) {
        for req in &mut self.items[..usize::from(self.len)] {
            *req = req.unwaited();
        }
    }
}

/// A node's answer as the client reads it (a failure is counted without a vote).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Vote {
    /// Yes, with the counter for a fenced acquire or an increment (0 otherwise).
    Yes(u8),
    Refused,
}

/// The client's view of one node in the current fan-out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Slot {
    /// Not waited for (not part of the current fan-out, or already counted).
    #[default]
    Idle,
    /// Request sent, no answer yet.
    Waiting,
    /// The node answered; the reply is on its way back (only with `reply_delay`).
    Replied(Vote),
}

/// The tally of the current fan-out (`quorum::Tally` and what `fanout::Outcome` keeps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Fan {
    slots: [Slot; MAX_N],
    yes: u8,
    refused: u8,
    failed: u8,
    /// Of `failed`, the nodes whose circuit breaker kept the request from being written.
    skipped: u8,
    /// The same nodes, as a mask: kept only in `ordered` configurations, where the rollback
    /// leaves them out as the library does (elsewhere the model rolls back on every node,
    /// which reaches the same node states, and the mask stays 0 so as not to split states).
    skipped_mask: u8,
    max_yes: u8,
    yes_mask: u8,
    refused_mask: u8,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// No guard: may start an attempt, if any is left.
    #[default]
    Idle,
    /// The ordered approach: only the arbiter (node 0) was sent the acquire.
    Arbitrating,
    /// The acquire fan-out is running.
    Acquiring,
    /// The acquire reached its quorum; the counters are being incremented
    /// (`Fencing::AfterQuorum`).
    Incrementing,
    /// The fencing write-back is running.
    Fencing,
    /// A guard, held while `now < deadline`.
    Holding,
    /// An extend (user) or renewal (watchdog: `repair`) is running; the guard is held
    /// meanwhile.
    Renewing {
        next: u8,
        repair: bool,
        /// `next` was earlier than the deadline before it was cut.
        shortens: bool,
    },
    /// A renewal was confirmed; the other nodes' answers are collected for the repair.
    Collecting,
    /// The guard was lost (renewal past the deadline, or too many nodes refused).
    Lost,
}

/// How the current attempt was sent, past its arbiter (the ordered approach).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Approach {
    /// To every node at once (or no attempt being decided).
    #[default]
    All,
    /// The arbiter said yes; the other nodes were sent the acquire.
    ArbiterYes,
    /// The arbiter failed, timed out or was skipped: the acquire went to every node.
    /// `written`: the arbiter's first request was written (not skipped), and may have run.
    FellBack { written: bool },
}

/// The arbiter of the ordered approach: the first node in the key's order, here node 0.
const ARBITER: usize = 0;

/// For property (d): the nodes a rollback or release of one attempt was sent to, and those
/// that ran it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Cleanup {
    ended: bool,
    sent: u8,
    done: u8,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Client {
    phase: Phase,
    /// Attempts started; the current holder value is that of attempt `attempts - 1`.
    attempts: u8,
    extends: u8,
    renewals: u8,
    t0: u8,
    deadline: u8,
    token: u8,
    /// The nodes that said yes to the acquire before it was decided.
    acquire_yes: u8,
    /// How the current attempt was sent (the ordered approach); `All` once decided.
    approach: Approach,
    /// The nodes a rollback of the current attempt goes to, fixed when its acquire is decided
    /// (`ordered` configurations only: 0 otherwise, the rollback going to every node).
    give_back: u8,
    fan: Fan,
    cleanup: [Cleanup; MAX_ATTEMPTS],
}

impl Client {
    fn holder(&self, c: usize) -> Holder {
        Holder {
            client: c as u8,
            attempt: self.attempts - 1,
        }
    }

    /// Inside its validity: a guard (held, or being extended) before its deadline.
    fn holds(&self, now: u8) -> bool {
        matches!(
            self.phase,
            Phase::Holding | Phase::Renewing { .. } | Phase::Collecting
        ) && now < self.deadline
    }

    /// Waits for answers.
    fn busy(&self) -> bool {
        self.fan.slots.iter().any(|s| *s != Slot::Idle)
    }
}

/// Paths worth confirming that the search reaches (the coverage properties). Marks in the
/// state's `seen`, but for `SEEN_SHARED` and `SEEN_UNDER_MARK`, read off the state itself.
const SEEN_ROLLBACK: u16 = 1;
const SEEN_RENEWED: u16 = 2;
const SEEN_SHORTENED: u16 = 4;
const SEEN_REPAIRED: u16 = 8;
const SEEN_LOST: u16 = 16;
const SEEN_FORGOTTEN: u16 = 32;
/// A reader refused because of a pending-writer mark.
const SEEN_MARK_REFUSED: u16 = 64;
/// A waiting writer's mark withdrawn (or deleted by its release).
const SEEN_UNMARKED: u16 = 128;
/// Two readers inside their validity at once.
const SEEN_SHARED: u16 = 256;
/// A writer inside its validity while another writer's mark is on a node.
const SEEN_UNDER_MARK: u16 = 512;
/// An ordered attempt refused by the arbiter (ended, nothing sent elsewhere).
const SEEN_ARBITER_REFUSED: u16 = 1024;
/// An ordered attempt whose arbiter said yes, then reached the quorum over all N.
const SEEN_ARBITER_QUORUM: u16 = 2048;
/// A request answered `MOVED` (cluster nodes).
const SEEN_REDIRECTED: u16 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    now: u8,
    /// Requests lost so far (counted only when the configuration bounds them).
    lost: u8,
    /// Forgetful faults so far.
    forgotten: u8,
    /// The largest fencing token any holder had so far.
    max_token: u8,
    /// The largest fencing token any writer had so far.
    max_writer_token: u8,
    /// Property (b) broke: a holder's token was not larger than every earlier holder's.
    token_regressed: bool,
    /// Property (e) broke: a repair was sent outside the validity, or for longer than it.
    repair_overrun: bool,
    seen: u16,
    nodes: [NodeState; MAX_N],
    clients: [Client; MAX_C],
    /// Request queues, index `client * MAX_N + node`.
    conns: [Fifo; MAX_C * MAX_N],
}

impl State {
    fn conn(&mut self, c: usize, n: usize) -> &mut Fifo {
        &mut self.conns[c * MAX_N + n]
    }

    fn see(&mut self, path: u16) {
        self.seen |= path;
    }

    fn saw(&self, path: u16) -> bool {
        self.seen & path != 0
    }
}

/// A byte encoding of (part of) a state. Hashing one byte string is much faster than the
/// derived `Hash`'s hundreds of small writes (the tests run unoptimised), and comparing the
/// encodings of two nodes orders them for the symmetry reduction.
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
        match (node.entry, node.mark, node.has_readers()) {
            // The mutex's nodes, in one write.
            (None, None, false) => self.put(&[0, node.counter]),
            (Some(e), None, false) => {
                self.put(&[1, e.holder.client, e.holder.attempt, e.expiry, node.counter])
            }
            (entry, mark, _) => {
                let e = entry.map_or([0; 3], |e| [e.holder.client, e.holder.attempt, e.expiry]);
                let m = mark.map_or([0; 2], |m| [1 + m.waiter, m.expiry]);
                self.put(&[2, e[0], e[1], e[2], m[0], m[1], node.counter]);
                self.put(&node.readers);
            }
        }
    }

    fn fifo(&mut self, fifo: &Fifo) {
        self.put(&[fifo.len]);
        for req in &fifo.items[..usize::from(fifo.len)] {
            self.put(&req.0.to_le_bytes());
        }
    }

    fn slot(&mut self, slot: Slot) {
        match slot {
            Slot::Idle => self.put(&[0]),
            Slot::Waiting => self.put(&[1]),
            Slot::Replied(Vote::Refused) => self.put(&[2]),
            Slot::Replied(Vote::Yes(v)) => self.put(&[3, v]),
        }
    }
}

impl std::hash::Hash for State {
    fn hash<H: std::hash::Hasher>(&self, hasher: &mut H) {
        let mut e = Enc::<512>::new();
        e.put(&[
            self.now,
            self.lost,
            self.forgotten,
            self.max_token,
            self.max_writer_token,
            u8::from(self.token_regressed) | u8::from(self.repair_overrun) << 1,
            self.seen as u8,
            (self.seen >> 8) as u8,
        ]);
        for node in &self.nodes {
            e.node(node);
        }
        for (c, cl) in self.clients.iter().enumerate() {
            // A client that has not started is all defaults, its connections empty, as is
            // every client a configuration does not use.
            if cl.attempts == 0 {
                e.put(&[8]);
                continue;
            }
            match cl.phase {
                Phase::Renewing {
                    next,
                    repair,
                    shortens,
                } => e.put(&[4, next, u8::from(repair) | u8::from(shortens) << 1]),
                Phase::Idle => e.put(&[0]),
                Phase::Acquiring => e.put(&[1]),
                Phase::Incrementing => e.put(&[2]),
                Phase::Fencing => e.put(&[3]),
                Phase::Holding => e.put(&[5]),
                Phase::Collecting => e.put(&[6]),
                Phase::Lost => e.put(&[7]),
                Phase::Arbitrating => e.put(&[9]),
            }
            e.put(&[
                cl.attempts,
                cl.extends,
                cl.renewals,
                cl.t0,
                cl.deadline,
                cl.token,
                cl.acquire_yes,
                match cl.approach {
                    Approach::All => 0,
                    Approach::ArbiterYes => 1,
                    Approach::FellBack { written } => 2 + u8::from(written),
                },
                cl.give_back,
                cl.fan.yes,
                cl.fan.refused,
                cl.fan.failed,
                cl.fan.skipped,
                cl.fan.skipped_mask,
                cl.fan.max_yes,
                cl.fan.yes_mask,
                cl.fan.refused_mask,
            ]);
            for slot in cl.fan.slots {
                e.slot(slot);
            }
            for cleanup in &cl.cleanup {
                e.put(&[u8::from(cleanup.ended), cleanup.sent, cleanup.done]);
            }
            for fifo in &self.conns[c * MAX_N..(c + 1) * MAX_N] {
                e.fifo(fifo);
            }
        }
        hasher.write(e.bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Actions and their narration
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Global time advances by one tick; entries expire.
    Tick,
    /// Client `c` starts an acquire attempt, to every node at once.
    Start(u8),
    /// Client `c` starts an acquire attempt by the ordered approach: to the arbiter first.
    StartOrdered(u8),
    /// Node `n` runs the oldest request on client `c`'s connection.
    Process(u8, u8),
    /// The oldest request on client `c`'s connection to node `n` is lost.
    Lose(u8, u8),
    /// The head request of client `c`'s connection to node `n` is answered `MOVED`.
    Redirect(u8, u8),
    /// Node `n`'s reply reaches client `c` (only with `reply_delay`).
    Answer(u8, u8),
    /// Client `c`'s node timeout: it stops waiting for every node that has not answered (the
    /// requests may still run later). All calls of a fan-out start together with the same
    /// timeout, so they time out together. For a renewal collecting answers for the repair,
    /// this is the next renewal coming due.
    GiveUp(u8),
    /// Client `c`'s circuit breaker for node `n` is open: the current fan-out's request to `n`
    /// is not written (taken back from the connection) and counts as failed at once.
    Skip(u8, u8),
    /// Client `c` extends to the given TTL.
    Extend(u8, u8),
    /// Client `c`'s watchdog renews.
    Renew(u8),
    /// Client `c` releases (or drops) its guard.
    Release(u8),
    /// Node `n` restarts empty (amnesia: entry, readers, mark and counter lost).
    Restart(u8),
    /// Node `n`'s clock jumps forward past time `t`: everything on it that would have expired
    /// by `t` expires now (entry, readers, mark).
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

/// What a node has with a TTL (entry, readers, mark): names and expiries.
fn leases(node: &NodeState) -> Vec<(String, u8)> {
    let mut leases = Vec::new();
    if let Some(e) = node.entry {
        leases.push((e.holder.to_string(), e.expiry));
    }
    for (i, &expiry) in node.readers.iter().enumerate() {
        if expiry != 0 {
            let holder = Holder {
                client: (i / MAX_ATTEMPTS) as u8,
                attempt: (i % MAX_ATTEMPTS) as u8,
            };
            leases.push((format!("reader {holder}"), expiry));
        }
    }
    if let Some(m) = node.mark {
        leases.push((format!("mark c{}", m.waiter), m.expiry));
    }
    leases
}

/// What `before` had and `after` has not, as "x expires" or "x, y expire".
fn gone(before: &NodeState, after: &NodeState) -> String {
    let after = leases(after);
    let gone: Vec<String> = leases(before)
        .into_iter()
        .filter(|l| !after.contains(l))
        .map(|(name, _)| name)
        .collect();
    match gone.len() {
        1 => format!("{} expires", gone[0]),
        _ => format!("{} expire", gone.join(", ")),
    }
}

fn nodes_of(mask: u8) -> String {
    let names: Vec<String> = (0..MAX_N)
        .filter(|n| mask & bit(*n) != 0)
        .map(|n| format!("n{n}"))
        .collect();
    format!("{{{}}}", names.join(","))
}

/// What a request did on its node, for the narration.
enum Effect {
    /// The entry was taken until the expiry (with the counter for a fenced acquire).
    Taken(u8, Option<u8>),
    /// A reader became a member until the expiry (with the counter for a fenced acquire).
    Joined(u8, Option<u8>),
    /// A repair put the entry (or member) back until the expiry.
    Recreated(u8),
    /// Set if absent: refused, the key held by this entry.
    Refused(Option<Entry>),
    /// A writer refused because readers are live; the node's mark afterwards.
    RefusedByReaders(Option<Mark>),
    /// A reader refused because of a waiting writer's mark.
    RefusedByMark(Mark),
    /// Compare-and-something: this holder does not hold the key (it is absent or this entry).
    NotHeld(Option<Entry>),
    /// A reader's extend or release: the reader is not a member.
    NotMember,
    /// The entry (or member) now expires at this time.
    Expires(u8),
    /// Deleted (and the writer's mark with it).
    Deleted(bool),
    /// A reader's member removed (and, with `ReadReleaseDeletesTheSet`, every other member).
    Removed(bool),
    /// A withdrawal deleted the writer's mark, or found none of its own.
    Withdrawn(bool),
    /// The fencing counter is now this.
    Counter(u8),
}

impl std::fmt::Display for Effect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = |e: &Option<Entry>| match e {
            Some(e) => format!("held by {}", e.holder),
            None => "absent".to_string(),
        };
        match self {
            Effect::Taken(expiry, None) => write!(f, "taken until {expiry}"),
            Effect::Taken(expiry, Some(counter)) => {
                write!(f, "taken until {expiry}, counter {counter}")
            }
            Effect::Joined(expiry, None) => write!(f, "reader until {expiry}"),
            Effect::Joined(expiry, Some(counter)) => {
                write!(f, "reader until {expiry}, counter {counter}")
            }
            Effect::Recreated(expiry) => write!(f, "re-created until {expiry}"),
            Effect::Refused(entry) => write!(f, "refused ({})", held(entry)),
            Effect::RefusedByReaders(None) => write!(f, "refused (readers live)"),
            Effect::RefusedByReaders(Some(m)) => write!(
                f,
                "refused (readers live), mark c{} until {}",
                m.waiter, m.expiry
            ),
            Effect::RefusedByMark(m) => {
                write!(f, "refused (mark c{} until {})", m.waiter, m.expiry)
            }
            Effect::NotHeld(entry) => write!(f, "not held ({})", held(entry)),
            Effect::NotMember => write!(f, "not a reader"),
            Effect::Expires(expiry) => write!(f, "expires at {expiry} now"),
            Effect::Deleted(false) => write!(f, "deleted"),
            Effect::Deleted(true) => write!(f, "deleted, and its mark"),
            Effect::Removed(false) => write!(f, "removed"),
            Effect::Removed(true) => write!(f, "the readers' set deleted"),
            Effect::Withdrawn(true) => write!(f, "mark deleted"),
            Effect::Withdrawn(false) => write!(f, "no mark of its own"),
            Effect::Counter(counter) => write!(f, "counter now {counter}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

struct Protocol {
    cfg: Config,
}

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

    fn clients(&self) -> usize {
        self.cfg.plans.len()
    }

    fn all(&self) -> u8 {
        ((1u16 << self.n()) - 1) as u8
    }

    /// `quorum::Tally::decision`.
    fn decision(&self, fan: &Fan) -> Decision {
        let (n, quorum, failed) = if self.cfg.has(Bug::QuorumOverNodesAsked) {
            let asked = self.n() as u8 - fan.skipped;
            (asked, asked / 2 + 1, fan.failed - fan.skipped)
        } else {
            (self.n() as u8, self.cfg.quorum, fan.failed)
        };
        if fan.yes >= quorum {
            Decision::Reached
        } else if n - fan.refused - failed < quorum {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }

    fn tick_enabled(&self, s: &State) -> bool {
        if s.now >= self.cfg.max_time {
            return false;
        }
        if !self.cfg.timely {
            return true;
        }
        let quiet = s.conns.iter().all(Fifo::is_empty);
        let settled = (0..self.clients()).all(|c| {
            let cl = &s.clients[c];
            let wants = cl.phase == Phase::Idle && cl.attempts < self.cfg.plans[c].attempts;
            !cl.busy() && !wants && cl.phase != Phase::Collecting
        });
        quiet && settled
    }

    /// Sends `req` to the nodes of `mask`, behind everything already on those connections.
    fn send(&self, s: &mut State, c: usize, mask: u8, req: Req) {
        for n in 0..self.n() {
            if mask & bit(n) != 0 {
                s.conn(c, n).push(req);
            }
        }
    }

    /// A new fan-out of `kind` to every node, waiting for every answer.
    fn fan_out(&self, s: &mut State, c: usize, kind: Kind, arg: u8) {
        let holder = s.clients[c].holder(c);
        let mut fan = Fan::default();
        for slot in fan.slots.iter_mut().take(self.n()) {
            *slot = Slot::Waiting;
        }
        s.clients[c].fan = fan;
        self.send(s, c, self.all(), Req::new(kind, holder.attempt, arg, true));
    }

    /// The fan-out is decided or abandoned: its requests still queued run without anyone
    /// waiting for their answers (the library's stragglers), and replies on their way are
    /// ignored.
    fn stop_waiting(&self, s: &mut State, c: usize) {
        s.clients[c].fan.slots = [Slot::Idle; MAX_N];
        for n in 0..self.n() {
            s.conn(c, n).unwait();
        }
    }

    /// `acquire.rs`, `attempt`: `t0` is noted before the first request, to the arbiter alone
    /// in the ordered approach (`arbiter.rs`, `approach`).
    fn start(&self, s: &mut State, c: usize, ordered: bool, log: &mut Log) {
        let ttl = self.cfg.plans[c].ttl;
        let now = s.now;
        let cl = &mut s.clients[c];
        cl.attempts += 1;
        cl.t0 = now;
        cl.approach = Approach::All;
        let holder = cl.holder(c);
        if !ordered {
            cl.phase = Phase::Acquiring;
            log.note(|| format!("t={now} c{c} starts {holder}: acquire ttl {ttl} to all nodes"));
            self.fan_out(s, c, Kind::Acquire, ttl);
            return;
        }
        cl.phase = Phase::Arbitrating;
        let mut fan = Fan::default();
        fan.slots[ARBITER] = Slot::Waiting;
        cl.fan = fan;
        log.note(|| {
            let to = format!("acquire ttl {ttl} to the arbiter n{ARBITER} first");
            format!("t={now} c{c} starts {holder} (ordered): {to}")
        });
        let req = Req::new(Kind::Acquire, holder.attempt, ttl, true);
        self.send(s, c, bit(ARBITER), req);
    }

    /// `arbiter.rs`, `approach`: the arbiter's answer (counted in the fan: yes, refused, or
    /// failed for a timeout or a request the breaker skipped) decides where the attempt goes.
    fn arbitrated(&self, s: &mut State, c: usize, log: &mut Log) {
        let now = s.now;
        let ttl = self.cfg.plans[c].ttl;
        let fan = s.clients[c].fan;
        let others = self.all() & !bit(ARBITER);
        let holder = s.clients[c].holder(c);
        let a = ARBITER;
        if fan.yes == 1 && self.cfg.has(Bug::ArbiterYesHolds) {
            let cl = &mut s.clients[c];
            cl.acquire_yes = fan.yes_mask;
            cl.give_back = self.all();
            log.note(|| format!("t={now} c{c}'s arbiter n{a} says yes: taken for the lock"));
            self.try_hold(s, c, log);
        } else if fan.yes == 1 {
            // The fan keeps the arbiter's yes: the attempt is tallied over all N.
            let cl = &mut s.clients[c];
            cl.phase = Phase::Acquiring;
            cl.approach = Approach::ArbiterYes;
            for n in 0..self.n() {
                if others & bit(n) != 0 {
                    cl.fan.slots[n] = Slot::Waiting;
                }
            }
            log.note(|| {
                let to = nodes_of(others);
                format!("t={now} c{c}'s arbiter n{a} says yes: acquire ttl {ttl} to {to}")
            });
            let req = Req::new(Kind::Acquire, holder.attempt, ttl, true);
            self.send(s, c, others, req);
        } else if fan.refused == 1 {
            // A refusal took nothing: the attempt ends with nothing to roll back.
            let cl = &mut s.clients[c];
            cl.cleanup[usize::from(holder.attempt)] = Cleanup {
                ended: true,
                sent: 0,
                done: 0,
            };
            cl.phase = Phase::Idle;
            s.see(SEEN_ARBITER_REFUSED);
            log.note(|| {
                format!("t={now} c{c}'s arbiter n{a} refuses: {holder} ends, nothing else sent")
            });
        } else {
            // Failed, timed out or skipped: the first request, if written, stays queued ahead
            // of the fallback's on the arbiter's connection.
            let written = fan.skipped_mask & bit(ARBITER) == 0;
            let cl = &mut s.clients[c];
            cl.phase = Phase::Acquiring;
            cl.approach = Approach::FellBack { written };
            if self.cfg.has(Bug::FallbackForgetsArbiter) {
                let mut fan = Fan {
                    failed: 1,
                    ..Fan::default()
                };
                for n in 0..self.n() {
                    if others & bit(n) != 0 {
                        fan.slots[n] = Slot::Waiting;
                    }
                }
                cl.fan = fan;
                log.note(|| {
                    let to = nodes_of(others);
                    format!("t={now} c{c}'s arbiter n{a} failed: acquire ttl {ttl} to {to} only")
                });
                let req = Req::new(Kind::Acquire, holder.attempt, ttl, true);
                self.send(s, c, others, req);
            } else {
                log.note(|| {
                    format!("t={now} c{c}'s arbiter n{a} failed: acquire ttl {ttl} to all nodes")
                });
                self.fan_out(s, c, Kind::Acquire, ttl);
            }
        }
    }

    /// `acquire.rs`, `give_back_to`, when the acquire is decided (`ordered` configurations):
    /// every node but those that refused and those the request was never written to; after a
    /// fallback, also the arbiter if its first request was written (the fix: the library as
    /// first written left it out when its second request was refused or skipped).
    fn give_back(&self, cl: &Client) -> u8 {
        if !self.cfg.ordered {
            return 0;
        }
        let mut mask = self.all() & !cl.fan.refused_mask & !cl.fan.skipped_mask;
        if let Approach::FellBack { written } = cl.approach {
            if self.cfg.has(Bug::FallbackForgetsArbiter) {
                mask &= !bit(ARBITER);
            } else if written && !self.cfg.has(Bug::FallbackRollbackSkipsArbiter) {
                mask |= bit(ARBITER);
            }
        }
        mask
    }

    /// Node `n` runs the oldest request on client `c`'s connection.
    fn process(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let req = s.conn(c, n).pop();
        let now = s.now;
        let reads = self.cfg.reads(c);
        let (vote, effect) = if reads {
            self.run_reader(&mut s.nodes[n], c, req, now)
        } else {
            self.run_writer(&mut s.nodes[n], c, req, now)
        };
        match effect {
            Effect::Recreated(_) => s.see(SEEN_REPAIRED),
            Effect::RefusedByMark(_) => s.see(SEEN_MARK_REFUSED),
            Effect::Deleted(true) | Effect::Withdrawn(true) => s.see(SEEN_UNMARKED),
            _ => {}
        }
        if req.kind() == Kind::Release {
            s.clients[c].cleanup[usize::from(req.attempt())].done |= bit(n);
        }
        log.note(|| {
            let req = req.describe(c, reads);
            format!("t={now} n{n} runs c{c}'s {req}: {effect}")
        });
        if req.wait() {
            if self.cfg.reply_delay {
                s.clients[c].fan.slots[n] = Slot::Replied(vote);
            } else {
                s.clients[c].fan.slots[n] = Slot::Idle;
                self.count(s, c, n, Some(vote));
                self.react(s, c, log);
            }
        }
    }

    /// A mutex client's or a writer's request on a node: the mutex's calls, and the writer's
    /// scripts (which also look at the readers and the pending mark).
    fn run_writer(&self, node: &mut NodeState, c: usize, req: Req, now: u8) -> (Vote, Effect) {
        let holder = req.holder(c);
        let before = node.entry;
        let expiry = now + req.arg();
        let waits = self.cfg.plans[c].role == Role::WaitingWriter;
        match req.kind() {
            Kind::Acquire | Kind::Repair if node.entry.is_some() => {
                (Vote::Refused, Effect::Refused(before))
            }
            // WRITE_ACQUIRE: refused because of live readers, a waiting writer marks the key
            // for its TTL, unless another request's mark is live. WRITE_REPAIR: refused.
            Kind::Acquire | Kind::Repair if node.has_readers() => {
                let ours = node.mark.is_none_or(|m| m.waiter == c as u8);
                if req.kind() == Kind::Acquire && waits && ours {
                    node.mark = Some(Mark {
                        waiter: c as u8,
                        expiry,
                    });
                }
                (Vote::Refused, Effect::RefusedByReaders(node.mark))
            }
            Kind::Acquire | Kind::Repair => {
                node.entry = Some(Entry { holder, expiry });
                if req.kind() == Kind::Repair {
                    (Vote::Yes(0), Effect::Recreated(expiry))
                } else if self.cfg.fencing == Some(Fencing::InAcquire) {
                    node.counter += 1;
                    (
                        Vote::Yes(node.counter),
                        Effect::Taken(expiry, Some(node.counter)),
                    )
                } else {
                    (Vote::Yes(0), Effect::Taken(expiry, None))
                }
            }
            Kind::Incr => {
                node.counter += 1;
                (Vote::Yes(node.counter), Effect::Counter(node.counter))
            }
            Kind::FenceMax => {
                node.counter = node.counter.max(req.arg());
                (Vote::Yes(0), Effect::Counter(node.counter))
            }
            Kind::Extend => match &mut node.entry {
                Some(e) if e.holder == holder => {
                    e.expiry = expiry;
                    (Vote::Yes(0), Effect::Expires(e.expiry))
                }
                _ => (Vote::Refused, Effect::NotHeld(before)),
            },
            Kind::Release => {
                // WRITE_RELEASE: a release (not a rollback) also deletes the request's mark.
                let unmark = req.arg() == 1 && node.mark.is_some_and(|m| m.waiter == c as u8);
                if unmark {
                    node.mark = None;
                }
                match node.entry {
                    Some(e) if e.holder == holder => {
                        node.entry = None;
                        (Vote::Yes(0), Effect::Deleted(unmark))
                    }
                    _ => (Vote::Refused, Effect::NotHeld(before)),
                }
            }
            Kind::Withdraw => {
                let ours = node.mark.is_some_and(|m| m.waiter == c as u8);
                if ours {
                    node.mark = None;
                }
                (Vote::Yes(0), Effect::Withdrawn(ours))
            }
        }
    }

    /// A reader's request on a node: READ_ACQUIRE, PERMIT_EXTEND, READ_REPAIR, READ_RELEASE.
    fn run_reader(&self, node: &mut NodeState, c: usize, req: Req, now: u8) -> (Vote, Effect) {
        let holder = req.holder(c);
        let expiry = now + req.arg();
        let member = &mut node.readers[slot(holder)];
        match req.kind() {
            // The scripts' first check, for a re-sent acquire (yes, the expiry kept) and a
            // repair that finds the member (no). Neither happens here: each request runs
            // once, and a repair follows the renewal that found the member missing.
            Kind::Acquire if *member != 0 => (Vote::Yes(0), Effect::Expires(*member)),
            Kind::Repair if *member != 0 => (Vote::Refused, Effect::Expires(*member)),
            Kind::Acquire | Kind::Repair if node.entry.is_some() => {
                if req.kind() == Kind::Repair && self.cfg.has(Bug::ReadRepairIgnoresWriter) {
                    *member = expiry;
                    return (Vote::Yes(0), Effect::Recreated(expiry));
                }
                (Vote::Refused, Effect::Refused(node.entry))
            }
            // The mark keeps new readers out; a repair is for a reader that holds already.
            Kind::Acquire if node.mark.is_some() => {
                (Vote::Refused, Effect::RefusedByMark(node.mark.unwrap()))
            }
            Kind::Acquire => {
                *member = expiry;
                if self.cfg.fencing == Some(Fencing::InAcquire) {
                    node.counter += 1;
                    (
                        Vote::Yes(node.counter),
                        Effect::Joined(expiry, Some(node.counter)),
                    )
                } else {
                    (Vote::Yes(0), Effect::Joined(expiry, None))
                }
            }
            Kind::Repair => {
                *member = expiry;
                (Vote::Yes(0), Effect::Recreated(expiry))
            }
            Kind::Incr => {
                node.counter += 1;
                (Vote::Yes(node.counter), Effect::Counter(node.counter))
            }
            Kind::FenceMax => {
                node.counter = node.counter.max(req.arg());
                (Vote::Yes(0), Effect::Counter(node.counter))
            }
            // PERMIT_EXTEND: `ZADD XX`, only for a live member (the bug: a plain `ZADD`).
            Kind::Extend if *member != 0 => {
                *member = expiry;
                (Vote::Yes(0), Effect::Expires(expiry))
            }
            Kind::Extend if self.cfg.has(Bug::ReaderExtendReAdds) => {
                *member = expiry;
                (Vote::Yes(0), Effect::Recreated(expiry))
            }
            Kind::Extend => (Vote::Refused, Effect::NotMember),
            Kind::Release if *member != 0 => {
                *member = 0;
                let whole = self.cfg.has(Bug::ReadReleaseDeletesTheSet);
                if whole {
                    node.readers = [0; MAX_C * MAX_ATTEMPTS];
                }
                (Vote::Yes(0), Effect::Removed(whole))
            }
            Kind::Release => (Vote::Refused, Effect::NotMember),
            Kind::Withdraw => unreachable!("a reader has no mark"),
        }
    }

    /// Client `c` counts node `n`'s answer (`None`: failed or timed out).
    fn count(&self, s: &mut State, c: usize, n: usize, vote: Option<Vote>) {
        let fan = &mut s.clients[c].fan;
        match vote {
            Some(Vote::Yes(v)) => {
                fan.yes += 1;
                fan.max_yes = fan.max_yes.max(v);
                fan.yes_mask |= bit(n);
            }
            Some(Vote::Refused) => {
                fan.refused += 1;
                fan.refused_mask |= bit(n);
            }
            None => fan.failed += 1,
        }
    }

    /// Client `c` acts on the answers counted so far.
    fn react(&self, s: &mut State, c: usize, log: &mut Log) {
        // The arbiter's one answer: with its yes alone the decision would still be pending.
        if s.clients[c].phase == Phase::Arbitrating {
            self.arbitrated(s, c, log);
            return;
        }
        let now = s.now;
        let fan = s.clients[c].fan;
        let decision = self.decision(&fan);
        let tally = move || {
            format!(
                "yes {}, refused {}, failed {}",
                fan.yes, fan.refused, fan.failed
            )
        };
        match (s.clients[c].phase, decision) {
            (_, Decision::Pending) => {}
            (Phase::Acquiring, Decision::Reached) => {
                self.stop_waiting(s, c);
                if s.clients[c].approach == Approach::ArbiterYes {
                    s.see(SEEN_ARBITER_QUORUM);
                }
                let give_back = self.give_back(&s.clients[c]);
                let cl = &mut s.clients[c];
                cl.acquire_yes = fan.yes_mask;
                cl.give_back = give_back;
                let quorum = || nodes_of(fan.yes_mask);
                match self.cfg.fencing {
                    None => {
                        log.note(|| format!("t={now} c{c} acquire reaches quorum {}", quorum()));
                        self.try_hold(s, c, log);
                    }
                    Some(Fencing::InAcquire) => {
                        let token = fan.max_yes;
                        cl.token = token;
                        cl.phase = Phase::Fencing;
                        log.note(|| {
                            let then = format!("token {token}, written back");
                            format!("t={now} c{c} acquire reaches quorum {}: {then}", quorum())
                        });
                        self.fan_out(s, c, Kind::FenceMax, token);
                    }
                    Some(Fencing::AfterQuorum) => {
                        cl.phase = Phase::Incrementing;
                        log.note(|| {
                            let quorum = quorum();
                            format!("t={now} c{c} acquire reaches quorum {quorum}: increments")
                        });
                        self.fan_out(s, c, Kind::Incr, 0);
                    }
                }
            }
            (Phase::Incrementing, Decision::Reached) => {
                self.stop_waiting(s, c);
                let token = fan.max_yes;
                s.clients[c].token = token;
                s.clients[c].phase = Phase::Fencing;
                log.note(|| {
                    format!("t={now} c{c} increments confirmed: token {token}, written back")
                });
                self.fan_out(s, c, Kind::FenceMax, token);
            }
            (Phase::Fencing, Decision::Reached) => {
                self.stop_waiting(s, c);
                log.note(|| format!("t={now} c{c} write-back confirmed by a quorum"));
                self.try_hold(s, c, log);
            }
            (Phase::Acquiring | Phase::Incrementing | Phase::Fencing, Decision::Impossible) => {
                self.stop_waiting(s, c);
                if s.clients[c].phase == Phase::Acquiring {
                    s.clients[c].acquire_yes = fan.yes_mask;
                    s.clients[c].give_back = self.give_back(&s.clients[c]);
                }
                log.note(|| format!("t={now} c{c} attempt fails ({})", tally()));
                self.rollback(s, c, log);
            }
            (
                Phase::Renewing {
                    next,
                    repair,
                    shortens,
                },
                Decision::Reached,
            ) => {
                // In time: `tick` turned a renewal still running at the deadline into a loss.
                // So `quorum::validity(ttl, now - start, 0)` holds: `now < deadline <= next`
                // when the deadline was cut, and `now < deadline < next` when it was not.
                if shortens {
                    s.see(SEEN_SHORTENED);
                }
                s.see(SEEN_RENEWED);
                let cl = &mut s.clients[c];
                cl.deadline = next;
                log.note(|| format!("t={now} c{c} extend confirmed: deadline {next}"));
                if repair {
                    cl.phase = Phase::Collecting;
                    if !cl.busy() {
                        self.finish_collect(s, c, log);
                    }
                } else {
                    self.stop_waiting(s, c);
                    s.clients[c].phase = Phase::Holding;
                }
            }
            (Phase::Renewing { .. }, Decision::Impossible) => {
                self.stop_waiting(s, c);
                let n = self.n() as u8;
                let cl = &mut s.clients[c];
                if n - fan.refused < self.cfg.quorum {
                    cl.phase = Phase::Lost;
                    s.see(SEEN_LOST);
                    log.note(|| format!("t={now} c{c} extend refused ({}): lock lost", tally()));
                } else {
                    cl.phase = Phase::Holding;
                    let deadline = cl.deadline;
                    log.note(|| {
                        format!(
                            "t={now} c{c} extend fails ({}): deadline stays {deadline}",
                            tally()
                        )
                    });
                }
            }
            (Phase::Collecting, _) => {
                if !s.clients[c].busy() {
                    self.finish_collect(s, c, log);
                }
            }
            (phase, _) => unreachable!("c{c} counts an answer in {phase:?}"),
        }
    }

    /// The acquire (and its fencing) succeeded: a guard if validity is left.
    fn try_hold(&self, s: &mut State, c: usize, log: &mut Log) {
        let now = s.now;
        let ttl = self.cfg.plans[c].ttl;
        let cl = &mut s.clients[c];
        let deadline = cl.t0 + ttl;
        if now >= deadline {
            log.note(|| format!("t={now} c{c} validity exhausted (deadline {deadline})"));
            self.rollback(s, c, log);
            return;
        }
        cl.phase = Phase::Holding;
        cl.deadline = deadline;
        cl.approach = Approach::All;
        cl.give_back = 0;
        let holder = cl.holder(c);
        let token = cl.token;
        if self.cfg.fencing.is_some() {
            // A writer's token exceeds every earlier holder's, a reader's every earlier
            // writer's: readers that overlap may share a token.
            let writes = !self.cfg.reads(c);
            let above = if writes {
                s.max_token
            } else {
                s.max_writer_token
            };
            if token <= above {
                s.token_regressed = true;
            }
            s.max_token = s.max_token.max(token);
            if writes {
                s.max_writer_token = s.max_writer_token.max(token);
            }
            log.note(|| format!("t={now} c{c} HOLDS {holder} until {deadline}, token {token}"));
        } else {
            log.note(|| format!("t={now} c{c} HOLDS {holder} until {deadline}"));
        }
    }

    /// `acquire.rs`, `rollback`: compare-and-delete on every node (the bug: only where yes;
    /// the library leaves out only the nodes that answered "refused", where it is a no-op, and
    /// those never written to; `ordered` configurations leave them out too, see `give_back`).
    /// A waiting writer whose last attempt failed then withdraws its mark from every node
    /// (`acquire.rs`, `Withdraw`), behind the rollback on each connection.
    fn rollback(&self, s: &mut State, c: usize, log: &mut Log) {
        let now = s.now;
        let cl = &mut s.clients[c];
        let holder = cl.holder(c);
        let mask = if self.cfg.has(Bug::RollbackOnlyWhereYes) {
            cl.acquire_yes
        } else if self.cfg.ordered {
            cl.give_back
        } else {
            self.all()
        };
        cl.approach = Approach::All;
        cl.give_back = 0;
        cl.cleanup[usize::from(holder.attempt)] = Cleanup {
            ended: true,
            sent: mask,
            done: 0,
        };
        cl.phase = Phase::Idle;
        s.see(SEEN_ROLLBACK);
        log.note(|| format!("t={now} c{c} rolls back {holder} on {}", nodes_of(mask)));
        let req = Req::new(Kind::Release, holder.attempt, 0, false);
        self.send(s, c, mask, req);
        let plan = &self.cfg.plans[c];
        if plan.role == Role::WaitingWriter && s.clients[c].attempts == plan.attempts {
            log.note(|| format!("t={now} c{c} gives up: withdraws its mark on all nodes"));
            let req = Req::new(Kind::Withdraw, holder.attempt, 0, false);
            self.send(s, c, self.all(), req);
        }
    }

    /// `lease.rs`, `renew`: the deadline is cut before a shortening request is sent.
    fn renew(&self, s: &mut State, c: usize, ttl: u8, repair: bool, log: &mut Log) {
        let now = s.now;
        let next = now + ttl;
        let cut = !self.cfg.has(Bug::NoCutBeforeShorterExtend);
        let cl = &mut s.clients[c];
        if repair {
            cl.renewals += 1;
        } else {
            cl.extends += 1;
        }
        let what = if repair { "renews" } else { "extends" };
        let holder = cl.holder(c);
        let shortens = next < cl.deadline;
        if cut && shortens {
            cl.deadline = next;
            log.note(|| {
                let cut = format!("deadline cut to {next} before sending");
                format!("t={now} c{c} {what} {holder} to ttl {ttl}: {cut}")
            });
        } else {
            let deadline = cl.deadline;
            log.note(|| {
                format!("t={now} c{c} {what} {holder} to ttl {ttl} (deadline stays {deadline})")
            });
        }
        cl.phase = Phase::Renewing {
            next,
            repair,
            shortens,
        };
        self.fan_out(s, c, Kind::Extend, ttl);
    }

    /// The renewal stops waiting for answers and repairs the nodes that said "not held".
    fn finish_collect(&self, s: &mut State, c: usize, log: &mut Log) {
        self.stop_waiting(s, c);
        let now = s.now;
        let lease = self.cfg.plans[c].ttl;
        let cl = &mut s.clients[c];
        cl.phase = Phase::Holding;
        let refused = cl.fan.refused_mask;
        if refused == 0 {
            return;
        }
        let deadline = cl.deadline;
        let ttl = if self.cfg.has(Bug::RepairBeyondValidity) {
            lease
        } else if now < deadline {
            deadline - now
        } else {
            log.note(|| format!("t={now} c{c} does not repair: the validity is over"));
            return;
        };
        if now >= deadline || now + ttl > deadline {
            s.repair_overrun = true;
        }
        let holder = cl.holder(c);
        log.note(|| {
            let nodes = nodes_of(refused);
            format!("t={now} c{c} repairs {holder} on {nodes} with ttl {ttl} (deadline {deadline})")
        });
        let req = Req::new(Kind::Repair, holder.attempt, ttl, false);
        self.send(s, c, refused, req);
    }

    fn release(&self, s: &mut State, c: usize, log: &mut Log) {
        let now = s.now;
        let cl = &mut s.clients[c];
        let holder = cl.holder(c);
        cl.cleanup[usize::from(holder.attempt)] = Cleanup {
            ended: true,
            sent: self.all(),
            done: 0,
        };
        cl.phase = Phase::Idle;
        log.note(|| format!("t={now} c{c} releases {holder} on all nodes"));
        // A release differs from a rollback on a node only for a waiting writer's mark; the
        // others' releases keep `arg` 0, so that the model does not tell apart states that are
        // the same.
        let mode = u8::from(self.cfg.plans[c].role == Role::WaitingWriter);
        let req = Req::new(Kind::Release, holder.attempt, mode, false);
        self.send(s, c, self.all(), req);
    }

    fn tick(&self, s: &mut State, log: &mut Log) {
        s.now += 1;
        let now = s.now;
        log.note(|| format!("t={now} tick"));
        for n in 0..self.n() {
            let before = s.nodes[n];
            if s.nodes[n].expire(now) {
                let after = s.nodes[n];
                log.note(|| format!("t={now} n{n}: {}", gone(&before, &after)));
            }
        }
        for c in 0..self.clients() {
            let cl = &s.clients[c];
            // `renew` waits for the quorum only until the current deadline.
            if matches!(cl.phase, Phase::Renewing { .. }) && now >= cl.deadline {
                self.stop_waiting(s, c);
                s.clients[c].phase = Phase::Lost;
                s.see(SEEN_LOST);
                log.note(|| {
                    format!("t={now} c{c} extend not confirmed by the deadline: lock lost")
                });
            }
        }
    }

    fn give_up(&self, s: &mut State, c: usize, log: &mut Log) {
        let now = s.now;
        if s.clients[c].phase == Phase::Collecting {
            log.note(|| format!("t={now} c{c} stops collecting answers (next renewal due)"));
            self.finish_collect(s, c, log);
            return;
        }
        let fan = &mut s.clients[c].fan;
        let mut late = 0;
        for (n, slot) in fan.slots.iter_mut().enumerate() {
            if *slot != Slot::Idle {
                *slot = Slot::Idle;
                fan.failed += 1;
                late |= bit(n);
            }
        }
        log.note(|| format!("t={now} c{c} times out on {}", nodes_of(late)));
        self.stop_waiting(s, c);
        self.react(s, c, log);
    }

    /// The head request of `c`'s connection to `n` is answered `MOVED`: it was not run. The
    /// library counts it as a failure of the node for its call, and sends nothing again (the
    /// next call goes to the new primary), unless it is a compare-and-delete (a release,
    /// rollback or withdrawal), which follows the redirect; under [`Bug::FollowRedirect`]
    /// every request is sent again,
    /// behind the requests already on the way to the new primary (in the model, the same
    /// connection: the node's state is the slot's, wherever it is served).
    fn redirect(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let now = s.now;
        let req = s.conn(c, n).pop();
        s.lost += 1;
        s.see(SEEN_REDIRECTED);
        // A compare-and-delete follows the redirect once (src/node/redirect.rs); the model
        // lets it follow every time, which covers once.
        let follows = matches!(req.kind(), Kind::Release | Kind::Withdraw);
        if follows && !self.cfg.has(Bug::FollowRedirect) {
            s.conn(c, n).push(req);
            log.note(|| {
                let req = req.describe(c, self.cfg.reads(c));
                format!("t={now} n{n} answers MOVED to c{c}'s {req}: followed to the new primary")
            });
            return;
        }
        if self.cfg.has(Bug::FollowRedirect) {
            s.conn(c, n).push(req);
            log.note(|| {
                let req = req.describe(c, self.cfg.reads(c));
                format!("t={now} n{n} answers MOVED to c{c}'s {req}: re-sent to the new primary")
            });
            return;
        }
        log.note(|| {
            let req = req.describe(c, self.cfg.reads(c));
            format!("t={now} n{n} answers MOVED to c{c}'s {req}: not run, not re-sent")
        });
        if req.wait() && s.clients[c].fan.slots[n] == Slot::Waiting {
            s.clients[c].fan.slots[n] = Slot::Idle;
            self.count(s, c, n, None);
            self.react(s, c, log);
        }
    }

    /// Applies `action` to `s`; the narration goes to `log`.
    fn step(&self, s: &mut State, action: Action, log: &mut Log) {
        let now = s.now;
        match action {
            Action::Tick => self.tick(s, log),
            Action::Start(c) => self.start(s, usize::from(c), false, log),
            Action::StartOrdered(c) => self.start(s, usize::from(c), true, log),
            Action::Process(c, n) => self.process(s, usize::from(c), usize::from(n), log),
            Action::Lose(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                let req = s.conn(c, n).pop();
                if self.cfg.losses.is_some() {
                    s.lost += 1;
                }
                log.note(|| {
                    let req = req.describe(c, self.cfg.reads(c));
                    format!("t={now} c{c}'s {req} to n{n} is lost")
                });
            }
            Action::Redirect(c, n) => self.redirect(s, usize::from(c), usize::from(n), log),
            Action::Answer(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                let Slot::Replied(vote) = s.clients[c].fan.slots[n] else {
                    unreachable!("no reply from n{n} to c{c}")
                };
                s.clients[c].fan.slots[n] = Slot::Idle;
                log.note(|| format!("t={now} c{c} gets n{n}'s answer: {vote:?}"));
                self.count(s, c, n, Some(vote));
                self.react(s, c, log);
            }
            Action::GiveUp(c) => self.give_up(s, usize::from(c), log),
            Action::Skip(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                let req = s.conn(c, n).last().expect("a request to skip");
                s.conn(c, n).pop_back();
                let fan = &mut s.clients[c].fan;
                fan.slots[n] = Slot::Idle;
                fan.skipped += 1;
                if self.cfg.ordered {
                    fan.skipped_mask |= bit(n);
                }
                log.note(|| {
                    let req = req.describe(c, self.cfg.reads(c));
                    format!("t={now} c{c}'s breaker for n{n} is open: its {req} is not sent")
                });
                self.count(s, c, n, None);
                self.react(s, c, log);
            }
            Action::Extend(c, ttl) => self.renew(s, usize::from(c), ttl, false, log),
            Action::Renew(c) => {
                let c = usize::from(c);
                self.renew(s, c, self.cfg.plans[c].ttl, true, log);
            }
            Action::Release(c) => self.release(s, usize::from(c), log),
            Action::Restart(n) => {
                let n = usize::from(n);
                s.forgotten += 1;
                s.see(SEEN_FORGOTTEN);
                let node = s.nodes[n];
                log.note(|| {
                    let had: Vec<String> =
                        leases(&node).into_iter().map(|(name, _)| name).collect();
                    let had = if had.is_empty() {
                        "nothing".to_string()
                    } else {
                        had.join(", ")
                    };
                    format!(
                        "t={now} n{n} RESTARTS EMPTY (had {had}, counter {})",
                        node.counter
                    )
                });
                s.nodes[n] = NodeState::default();
            }
            Action::ClockJump(n, to) => {
                let n = usize::from(n);
                s.forgotten += 1;
                s.see(SEEN_FORGOTTEN);
                let before = s.nodes[n];
                s.nodes[n].expire(to);
                let after = s.nodes[n];
                log.note(|| {
                    let what = gone(&before, &after);
                    format!("t={now} n{n} CLOCK JUMPS past {to}: {what} early")
                });
            }
        }
    }

    /// Renames the nodes so that equivalent states become one: nodes sorted by everything the
    /// state says about them. Ties are nodes the state cannot tell apart, so any order among
    /// them gives the same state. Returns the renaming: new node `i` is old node `order[i]`.
    ///
    /// In `ordered` configurations node 0 is the arbiter, which the protocol treats unlike
    /// the others: renaming it would merge states that behave differently (a state where n1
    /// has c0's entry and one where the arbiter has it). Node 0 then keeps its name, and only
    /// the other nodes, which the protocol treats alike, are sorted: still exact.
    fn canonicalize(&self, s: &mut State) -> [usize; MAX_N] {
        let (n, clients) = (self.n(), self.clients());
        let key = |s: &State, i: usize| {
            let mut e = Enc::<96>::new();
            e.node(&s.nodes[i]);
            for c in 0..clients {
                let cl = &s.clients[c];
                e.fifo(&s.conns[c * MAX_N + i]);
                e.slot(cl.fan.slots[i]);
                let masks = cl.acquire_yes >> i & 1
                    | (cl.fan.yes_mask >> i & 1) << 1
                    | (cl.fan.refused_mask >> i & 1) << 2
                    | (cl.cleanup[0].sent >> i & 1) << 3
                    | (cl.cleanup[0].done >> i & 1) << 4
                    | (cl.cleanup[1].sent >> i & 1) << 5
                    | (cl.cleanup[1].done >> i & 1) << 6
                    | (cl.give_back >> i & 1) << 7;
                e.put(&[masks, cl.fan.skipped_mask >> i & 1]);
            }
            e
        };
        let keys: [Enc<96>; MAX_N] = [
            key(s, 0),
            key(s, 1),
            key(s, 2),
            if n > 3 { key(s, 3) } else { Enc::new() },
            if n > 4 { key(s, 4) } else { Enc::new() },
        ];
        let mut order = [0, 1, 2, 3, 4];
        let fixed = if self.cfg.ordered { ARBITER + 1 } else { 0 };
        order[fixed..n].sort_by(|&a, &b| keys[a].bytes().cmp(keys[b].bytes()));
        if order[..n].iter().enumerate().all(|(i, &o)| i == o) {
            return order;
        }
        let old = *s;
        let remap = |m: u8| (0..n).fold(0u8, |acc, i| acc | (m >> order[i] & 1) << i);
        for (i, &o) in order[..n].iter().enumerate() {
            s.nodes[i] = old.nodes[o];
            for c in 0..clients {
                s.conns[c * MAX_N + i] = old.conns[c * MAX_N + o];
                s.clients[c].fan.slots[i] = old.clients[c].fan.slots[o];
            }
        }
        for cl in &mut s.clients[..clients] {
            cl.acquire_yes = remap(cl.acquire_yes);
            cl.give_back = remap(cl.give_back);
            cl.fan.yes_mask = remap(cl.fan.yes_mask);
            cl.fan.refused_mask = remap(cl.fan.refused_mask);
            cl.fan.skipped_mask = remap(cl.fan.skipped_mask);
            for cleanup in &mut cl.cleanup {
                cleanup.sent = remap(cleanup.sent);
                cleanup.done = remap(cleanup.done);
            }
        }
        order
    }

    /// Exclusion: a writer (a mutex client) inside its validity is the only client inside
    /// its validity; readers may overlap each other.
    fn excluded(&self, s: &State) -> bool {
        let holding = || (0..self.clients()).filter(|&c| s.clients[c].holds(s.now));
        holding().count() <= 1 || holding().all(|c| self.cfg.reads(c))
    }

    /// Readers inside their validity.
    fn readers_holding(&self, s: &State) -> usize {
        (0..self.clients())
            .filter(|&c| self.cfg.reads(c) && s.clients[c].holds(s.now))
            .count()
    }

    /// A writer inside its validity while a node has another writer's mark.
    fn under_mark(&self, s: &State) -> bool {
        (0..self.clients()).any(|c| {
            !self.cfg.reads(c)
                && s.clients[c].holds(s.now)
                && s.nodes[..self.n()]
                    .iter()
                    .any(|node| node.mark.is_some_and(|m| usize::from(m.waiter) != c))
        })
    }

    /// Invariant 2 per client: while a client is inside its validity, at least `q - f` nodes
    /// hold its entry or member (`f`: forgetful faults so far). A writer and another client
    /// inside their validity at once would need `2q - f` of them on `N` nodes with no node
    /// holding both (see `node_excluded`), impossible when `f <= 2q - N - 1`.
    fn supported(&self, s: &State) -> bool {
        (0..self.clients()).all(|c| {
            let cl = &s.clients[c];
            if !cl.holds(s.now) {
                return true;
            }
            let holder = cl.holder(c);
            let entries = s.nodes[..self.n()]
                .iter()
                .filter(|node| node.keeps(holder))
                .count() as u8;
            entries + s.forgotten >= self.cfg.quorum
        })
    }

    /// What each node's scripts keep, atomically: never a writer's entry and a live reader
    /// on one node at once.
    fn node_excluded(&self, s: &State) -> bool {
        s.nodes[..self.n()]
            .iter()
            .all(|node| node.entry.is_none() || !node.has_readers())
    }

    /// Invariant 4: once an attempt's rollback (or release) ran on every node it was sent to,
    /// no node keeps the attempt's entry (the attempt's own requests ran before it).
    fn rolled_back(&self, s: &State) -> bool {
        (0..self.clients()).all(|c| {
            s.clients[c]
                .cleanup
                .iter()
                .enumerate()
                .all(|(attempt, cleanup)| {
                    let holder = Holder {
                        client: c as u8,
                        attempt: attempt as u8,
                    };
                    !(cleanup.ended && cleanup.done == cleanup.sent)
                        || s.nodes[..self.n()].iter().all(|node| !node.keeps(holder))
                })
        })
    }
}

/// A property's condition.
type Condition = fn(&Protocol, &State) -> bool;

/// The `sometimes` properties: each client holds at some point.
const HOLDS: [(&str, Condition); MAX_C] = [
    ("c0 holds", |_, s| s.clients[0].holds(s.now)),
    ("c1 holds", |_, s| s.clients[1].holds(s.now)),
    ("c2 holds", |_, s| s.clients[2].holds(s.now)),
];

/// The coverage properties: paths a configuration must reach.
const COVERAGE: [(u16, &str, Condition); 13] = [
    (SEEN_ROLLBACK, "reaches a rollback", |_, s| {
        s.saw(SEEN_ROLLBACK)
    }),
    (SEEN_RENEWED, "reaches a confirmed extend", |_, s| {
        s.saw(SEEN_RENEWED)
    }),
    (
        SEEN_SHORTENED,
        "reaches a confirmed shorter extend",
        |_, s| s.saw(SEEN_SHORTENED),
    ),
    (SEEN_REPAIRED, "reaches a repaired entry", |_, s| {
        s.saw(SEEN_REPAIRED)
    }),
    (SEEN_LOST, "reaches a lost lock", |_, s| s.saw(SEEN_LOST)),
    (SEEN_FORGOTTEN, "reaches a forgotten entry", |_, s| {
        s.saw(SEEN_FORGOTTEN)
    }),
    (
        SEEN_MARK_REFUSED,
        "reaches a reader refused by a pending mark",
        |_, s| s.saw(SEEN_MARK_REFUSED),
    ),
    (SEEN_UNMARKED, "reaches a mark taken back", |_, s| {
        s.saw(SEEN_UNMARKED)
    }),
    (
        SEEN_SHARED,
        "reaches two readers holding at once",
        |m, s| m.readers_holding(s) >= 2,
    ),
    (
        SEEN_UNDER_MARK,
        "reaches a writer holding under another's mark",
        |m, s| m.under_mark(s),
    ),
    (
        SEEN_ARBITER_REFUSED,
        "reaches an ordered attempt refused by the arbiter",
        |_, s| s.saw(SEEN_ARBITER_REFUSED),
    ),
    (
        SEEN_ARBITER_QUORUM,
        "reaches an arbiter's yes and then the quorum",
        |_, s| s.saw(SEEN_ARBITER_QUORUM),
    ),
    (
        SEEN_REDIRECTED,
        "reaches a request answered MOVED",
        |_, s| s.saw(SEEN_REDIRECTED),
    ),
];

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let empty = State {
            now: 0,
            lost: 0,
            forgotten: 0,
            max_token: 0,
            max_writer_token: 0,
            token_regressed: false,
            repair_overrun: false,
            seen: 0,
            nodes: [NodeState::default(); MAX_N],
            clients: [Client::default(); MAX_C],
            conns: [Fifo::default(); MAX_C * MAX_N],
        };
        // Fencing counters left by an earlier history: every vector of values up to
        // `counters`. The largest token handed out before is at most the q-th largest
        // counter, as its write-back reached a quorum.
        let mut states: Vec<State> = Vec::new();
        let values = usize::from(self.cfg.counters) + 1;
        for code in 0..values.pow(self.n() as u32) {
            let mut s = empty;
            let mut rest = code;
            for (i, node) in s.nodes[..self.n()].iter_mut().enumerate() {
                node.counter = match self.cfg.start_counters {
                    Some(counters) => counters[i],
                    None => (rest % values) as u8,
                };
                rest /= values;
            }
            let mut counters: Vec<u8> = s.nodes[..self.n()].iter().map(|n| n.counter).collect();
            counters.sort_unstable_by(|a, b| b.cmp(a));
            // Taken as a writer's, which every later holder's token must exceed.
            s.max_token = counters[usize::from(self.cfg.quorum) - 1];
            s.max_writer_token = s.max_token;
            if self.cfg.symmetry {
                self.canonicalize(&mut s);
            }
            if !states.contains(&s) {
                states.push(s);
            }
        }
        states
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let cfg = &self.cfg;
        if self.tick_enabled(s) {
            actions.push(Action::Tick);
        }
        let may_lose = cfg.losses.is_none_or(|max| s.lost < max);
        for (c, plan) in cfg.plans.iter().enumerate() {
            let cl = &s.clients[c];
            let c8 = c as u8;
            match cl.phase {
                Phase::Idle if cl.attempts < plan.attempts => {
                    actions.push(Action::Start(c8));
                    if cfg.ordered {
                        actions.push(Action::StartOrdered(c8));
                    }
                }
                Phase::Holding => {
                    if s.now < cl.deadline {
                        if cl.extends < plan.extends {
                            for &ttl in plan.extend_to {
                                actions.push(Action::Extend(c8, ttl));
                            }
                        }
                        if cl.renewals < plan.renewals {
                            actions.push(Action::Renew(c8));
                        }
                    }
                    if plan.release {
                        actions.push(Action::Release(c8));
                    }
                }
                Phase::Lost if plan.release => actions.push(Action::Release(c8)),
                _ => {}
            }
            if cfg.timeouts & bit(c) != 0 && cl.busy() {
                actions.push(Action::GiveUp(c8));
            }
            for n in 0..self.n() {
                let n8 = n as u8;
                let conn = &s.conns[c * MAX_N + n];
                if cfg.skips
                    && cl.fan.slots[n] == Slot::Waiting
                    && conn.last().is_some_and(Req::wait)
                {
                    actions.push(Action::Skip(c8, n8));
                }
                if !conn.is_empty() {
                    actions.push(Action::Process(c8, n8));
                    if may_lose {
                        actions.push(Action::Lose(c8, n8));
                        if cfg.redirects {
                            actions.push(Action::Redirect(c8, n8));
                        }
                    }
                }
                if let Slot::Replied(_) = cl.fan.slots[n] {
                    actions.push(Action::Answer(c8, n8));
                }
            }
        }
        if s.forgotten < cfg.forgetful {
            for n in 0..self.n() {
                let node = &s.nodes[n];
                // Only faults that change something: a restart of a node that has something,
                // a jump past each expiry on the node (a jump past none changes nothing, and
                // jumps between two expiries do the same as a jump past the earlier one).
                if node.expiries().next().is_some() || node.counter > 0 {
                    actions.push(Action::Restart(n as u8));
                }
                let mut past = 0u32;
                for expiry in node.expiries() {
                    if past & 1 << expiry == 0 {
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
            Property::<Self>::always("node exclusion", |m, s| m.node_excluded(s)),
            Property::<Self>::always("tokens increase", |_, s| !s.token_regressed),
            Property::<Self>::always("full rollback", |m, s| m.rolled_back(s)),
            Property::<Self>::always("repair within validity", |_, s| !s.repair_overrun),
        ];
        for (name, holds) in &HOLDS[..self.clients()] {
            p.push(Property::sometimes(name, *holds));
        }
        for (flag, name, reached) in COVERAGE {
            if self.cfg.cover & flag != 0 {
                p.push(Property::sometimes(name, reached));
            }
        }
        if self.cfg.liveness {
            p.push(Property::<Self>::eventually(
                "c0 eventually holds",
                |_, s| s.clients[0].holds(s.now),
            ));
        }
        p
    }
}

// ---------------------------------------------------------------------------------------------
// Running the checker
// ---------------------------------------------------------------------------------------------

/// Explores every reachable state and asserts every property: no counterexample to an
/// `always` or `eventually` property, an example for every `sometimes` one.
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
    // An `always` property's trace ends where it first fails; an `eventually` one's runs to
    // the end of the path, where nothing more can happen.
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

/// The path as readable lines: the initial counters (if any), what each step did, and the
/// key facts of the first state where `holds` is false.
///
/// With the symmetry reduction, the path's states are representatives whose nodes were
/// renamed at every step; the path is replayed on real states, with each action's node
/// translated through the renamings so far, so that `n1` is the same node throughout.
fn narrate(model: &Protocol, path: Path<State, Action>, holds: Option<Condition>) -> Vec<String> {
    let mut lines = Vec::new();
    let steps = path.into_vec();
    let mut real = steps[0].0;
    if real.nodes.iter().any(|n| n.counter > 0) {
        let counters: Vec<String> = (0..model.n())
            .map(|n| format!("n{n}={}", real.nodes[n].counter))
            .collect();
        lines.push(format!(
            "start: counters {} (largest token so far {})",
            counters.join(" "),
            real.max_token
        ));
    }
    // `to_real[i]`: the real name of the representative's node `i`.
    let mut to_real = [0, 1, 2, 3, 4];
    for (state, action) in steps {
        if holds.is_some_and(|holds| !holds(model, &real)) {
            break;
        }
        let Some(action) = action else { break };
        let r = |n: u8| to_real[usize::from(n)] as u8;
        let real_action = match action {
            Action::Process(c, n) => Action::Process(c, r(n)),
            Action::Lose(c, n) => Action::Lose(c, r(n)),
            Action::Redirect(c, n) => Action::Redirect(c, r(n)),
            Action::Skip(c, n) => Action::Skip(c, r(n)),
            Action::Answer(c, n) => Action::Answer(c, r(n)),
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
    for c in 0..model.clients() {
        let cl = &s.clients[c];
        if cl.holds(s.now) {
            let (holder, deadline) = (cl.holder(c), cl.deadline);
            let reads = if model.cfg.reads(c) { " (read)" } else { "" };
            facts.push(format!("c{c} holds {holder}{reads} until {deadline}"));
        }
    }
    for n in 0..model.n() {
        let node = &s.nodes[n];
        let leases: Vec<String> = leases(node)
            .into_iter()
            .map(|(name, expiry)| format!("{name} until {expiry}"))
            .collect();
        let entry = if leases.is_empty() {
            "-".to_string()
        } else {
            leases.join(", ")
        };
        if model.cfg.fencing.is_some() {
            facts.push(format!("n{n}: {entry}, counter {}", node.counter));
        } else {
            facts.push(format!("n{n}: {entry}"));
        }
    }
    format!("=> t={}: {}", s.now, facts.join("; "))
}

// ---------------------------------------------------------------------------------------------
// Positive configurations: no counterexample
// ---------------------------------------------------------------------------------------------

/// A holder that extends twice, to a shorter or a longer TTL than its acquire's.
const EXTENDER: Plan = Plan {
    role: Role::Writer,
    attempts: 1,
    ttl: 3,
    extend_to: &[1, 4],
    extends: 2,
    renewals: 0,
    release: true,
};

/// A holder kept by the watchdog: renewals with repair.
const WATCHED: Plan = Plan {
    role: Role::Writer,
    attempts: 1,
    ttl: 3,
    extend_to: &[],
    extends: 0,
    renewals: 2,
    release: true,
};

/// One of everything: an extend (shorter or longer), a renewal with repair, the release.
const EVERYTHING: Plan = Plan {
    role: Role::Writer,
    attempts: 1,
    ttl: 3,
    extend_to: &[1, 4],
    extends: 1,
    renewals: 1,
    release: true,
};

/// Two clients, one attempt each, with a tick of time: expiry at the deadline.
#[test]
fn two_clients_majority_of_3() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1).cover(SEEN_ROLLBACK);
    assert_safe("two clients, Majority of 3", cfg);
}

/// Circuit breakers: either client may skip any node in any fan-out (its request not written,
/// counted as failed at once), beside losses and timeouts; the quorum is counted over all N.
#[test]
fn two_clients_majority_of_3_breakers() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1).cover(SEEN_ROLLBACK);
    cfg.skips = true;
    assert_safe("two clients, Majority of 3, circuit breakers", cfg);
}

/// Any number of lost requests.
#[test]
fn two_clients_majority_of_3_lossy() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .losses(None)
        .cover(SEEN_ROLLBACK);
    assert_safe("two clients, Majority of 3, any losses", cfg);
}

/// A second attempt queued behind the first one's rollback.
#[test]
fn two_clients_majority_of_3_retry() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(2, 2)], 0).cover(SEEN_ROLLBACK);
    assert_safe("two clients, Majority of 3, a retry", cfg);
}

/// MultiLock tolerates N - 1 forgetful nodes: here 2 of 3.
#[test]
fn two_clients_all_of_3_two_forgetful() {
    let cfg = Config::new(3, 3, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .forgetful(2)
        .cover(SEEN_FORGOTTEN);
    assert_safe("two clients, All of 3, 2 forgetful", cfg);
}

/// The holder shortens its lock while the other client tries to take it.
#[test]
fn two_clients_shorter_extend() {
    let extender = Plan {
        extend_to: &[1],
        extends: 1,
        release: false,
        ..EXTENDER
    };
    let contender = Plan {
        release: false,
        ..acquirer(1, 2)
    };
    let cfg = Config::new(3, 2, &[extender, contender], 1).cover(SEEN_SHORTENED);
    assert_safe("two clients, Majority of 3, shorter extend", cfg);
}

#[test]
fn one_client_extend() {
    let cfg = Config::new(3, 2, &[EXTENDER], 3).cover(SEEN_SHORTENED | SEEN_RENEWED | SEEN_LOST);
    assert_safe("one client, Majority of 3, extends", cfg);
}

#[test]
fn one_client_watchdog() {
    let cfg = Config::new(3, 2, &[WATCHED], 3)
        .losses(Some(1))
        .cover(SEEN_REPAIRED | SEEN_RENEWED | SEEN_LOST);
    assert_safe("one client, Majority of 3, watchdog", cfg);
}

#[test]
fn one_client_retry() {
    let cfg = Config::new(3, 2, &[acquirer(2, 2)], 2)
        .losses(None)
        .cover(SEEN_ROLLBACK);
    assert_safe("one client, Majority of 3, retries", cfg);
}

#[test]
fn one_client_all_of_3_two_forgetful() {
    let cfg = Config::new(3, 3, &[EVERYTHING], 2)
        .forgetful(2)
        .losses(Some(1))
        // No repair under `All`: a renewal is confirmed only where every node has the entry.
        .cover(SEEN_FORGOTTEN | SEEN_SHORTENED | SEEN_LOST);
    assert_safe("one client, All of 3, 2 forgetful", cfg);
}

#[test]
fn one_client_at_least_4_of_5_two_forgetful() {
    let watched = Plan {
        renewals: 1,
        ..WATCHED
    };
    let cfg = Config::new(5, 4, &[watched], 2)
        .forgetful(2)
        .cover(SEEN_FORGOTTEN | SEEN_REPAIRED);
    assert_safe("one client, AtLeast(4) of 5, 2 forgetful", cfg);
}

#[test]
fn one_client_majority_of_5() {
    let watched = Plan {
        renewals: 1,
        ..WATCHED
    };
    let cfg = Config::new(5, 3, &[watched], 2)
        .losses(Some(1))
        .cover(SEEN_REPAIRED);
    assert_safe("one client, Majority of 5", cfg);
}

/// Replies travel on their own and may come late or not at all.
#[test]
fn one_client_replies_delayed() {
    let mut cfg = Config::new(3, 2, &[EVERYTHING], 2).cover(SEEN_REPAIRED | SEEN_SHORTENED);
    cfg.reply_delay = true;
    assert_safe("one client, Majority of 3, replies delayed", cfg);
}

#[test]
fn liveness_one_client() {
    let mut cfg = Config::new(3, 2, &[acquirer(2, 2)], 2);
    cfg.timely = true;
    cfg.timeouts = 0;
    cfg.liveness = true;
    assert_safe("liveness: one client, no faults, timely network", cfg);
}

/// Two clients, fencing: the counters an earlier history left (n0=0, n1=1, n2=1), one lost
/// request, no timeouts (see `negative_fencing_incremented_during_the_acquire_can_repeat_tokens`).
fn fencing_config(fencing: Fencing) -> Config {
    let second = Plan {
        release: false,
        ..acquirer(1, 2)
    };
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), second], 0)
        .fencing(fencing, 0)
        .losses(Some(1));
    cfg.start_counters = Some([0, 1, 1, 0, 0]);
    cfg.timeouts = 0;
    cfg
}

/// The library's fencing scheme (incremented after the quorum): no counterexample.
#[test]
fn fencing_incremented_after_quorum() {
    let cfg = fencing_config(Fencing::AfterQuorum);
    assert_safe("fencing incremented after the quorum (the library's)", cfg);
}

// ---------------------------------------------------------------------------------------------
// The ordered approach (`src/arbiter.rs`): every attempt of every client may ask the arbiter n0
// first, or every node at once. The rollback goes where the library sends it, with the fix
// (after a fallback, the arbiter too when its first request was written); without the fix,
// see `negative_a_fallback_rollback_that_skips_the_arbiter`.
// ---------------------------------------------------------------------------------------------

/// Both kinds of attempt mixed, timeouts, a tick: reaches an arbiter's refusal and an
/// arbiter's yes completed to a quorum. (No forgetful fault: under Majority of 3 one breaks
/// exclusion whatever the approach, `negative_bare_majority_with_a_forgetful_node`.)
#[test]
fn two_clients_majority_of_3_ordered() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1)
        .ordered()
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    assert_safe("two clients, Majority of 3, ordered approach", cfg);
}

/// Circuit breakers beside the ordered approach: the arbiter's request skipped (a fallback),
/// the fallback's request to it skipped after the first was written, any node of the second
/// fan-out skipped.
#[test]
fn two_clients_majority_of_3_ordered_breakers() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .ordered()
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    cfg.skips = true;
    assert_safe(
        "two clients, Majority of 3, ordered approach, circuit breakers",
        cfg,
    );
}

/// The ordered approach under All of 3 with two forgetful faults (the arbiter's among them).
#[test]
fn two_clients_all_of_3_ordered_two_forgetful() {
    let cfg = Config::new(3, 3, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .ordered()
        .forgetful(2)
        .cover(SEEN_FORGOTTEN | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    assert_safe("two clients, All of 3, ordered approach, 2 forgetful", cfg);
}

/// One client, two attempts, replies that arrive late (or never), one lost request, the
/// breakers, two ticks: the validity runs from before the arbiter was asked. A `t0` taken when
/// the arbiter's yes arrives fails `support` here (tried while building the model).
#[test]
fn one_client_ordered_replies_delayed() {
    let mut cfg = Config::new(3, 2, &[acquirer(2, 2)], 2)
        .ordered()
        .losses(Some(1))
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    cfg.skips = true;
    cfg.reply_delay = true;
    assert_safe(
        "one client, Majority of 3, ordered approach, replies delayed",
        cfg,
    );
}

// ---------------------------------------------------------------------------------------------
// The read-write lock. One reader and one writer exclude each other as two mutex clients do,
// so the configurations that matter most have two readers; they do without timeouts (with
// three clients, timeouts multiply the states by thirty: the `#[ignore]`d set has them).
// ---------------------------------------------------------------------------------------------

/// A client that takes the lock once and keeps it until it expires.
const fn keeps(plan: Plan) -> Plan {
    Plan {
        release: false,
        ..plan
    }
}

/// No client times out: a fan-out is decided by the nodes' answers only.
fn without_timeouts(mut cfg: Config) -> Config {
    cfg.timeouts = 0;
    cfg
}

#[test]
fn two_readers_share_the_lock_and_a_writer_excludes_them() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).cover(SEEN_SHARED | SEEN_ROLLBACK);
    assert_safe("two readers and a writer, Majority of 3", cfg);
}

#[test]
fn a_waiting_writers_mark_keeps_new_readers_out_until_taken_back() {
    let plans = [
        keeps(reader(1, 2)),
        keeps(reader(1, 2)),
        waiting_writer(1, 2),
    ];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0))
        .cover(SEEN_SHARED | SEEN_MARK_REFUSED | SEEN_UNMARKED);
    assert_safe("two readers and a waiting writer, Majority of 3", cfg);
}

/// Another writer's mark does not stop a writer.
#[test]
fn two_writers_exclude_each_other_and_a_reader_under_a_mark() {
    let plans = [
        keeps(reader(1, 2)),
        keeps(waiting_writer(1, 2)),
        keeps(acquirer(1, 2)),
    ];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).cover(SEEN_UNDER_MARK);
    assert_safe("a reader and two writers, Majority of 3", cfg);
}

/// The reader extends (shorter or longer) while a writer tries to take the key.
#[test]
fn a_reader_extend_never_brings_its_member_back() {
    let extender = Plan {
        role: Role::Reader,
        ttl: 2,
        extend_to: &[1, 3],
        extends: 1,
        release: false,
        ..EXTENDER
    };
    let cfg = without_timeouts(Config::new(3, 2, &[extender, keeps(acquirer(1, 3))], 2))
        .cover(SEEN_RENEWED | SEEN_SHORTENED);
    assert_safe("a reader that extends and a writer, Majority of 3", cfg);
}

/// The reader's watchdog renews twice and repairs, while a writer tries to take the key.
#[test]
fn a_renewed_reader_is_repaired_only_where_no_writer_holds() {
    let watched = Plan {
        role: Role::Reader,
        ttl: 2,
        release: false,
        ..WATCHED
    };
    let cfg = without_timeouts(Config::new(3, 2, &[watched, keeps(acquirer(1, 3))], 2))
        .cover(SEEN_REPAIRED | SEEN_RENEWED);
    assert_safe("a watched reader and a writer, Majority of 3", cfg);
}

/// The writer's watchdog renews twice and repairs, while a reader tries to take the key.
#[test]
fn a_renewed_writer_is_repaired_only_where_no_reader_is_live() {
    let watched = Plan {
        ttl: 2,
        release: false,
        ..WATCHED
    };
    let cfg = without_timeouts(Config::new(3, 2, &[watched, keeps(reader(1, 3))], 2))
        .cover(SEEN_REPAIRED | SEEN_RENEWED);
    assert_safe("a watched writer and a reader, Majority of 3", cfg);
}

/// Readers and writers share the key's counter.
#[test]
fn fencing_orders_a_reader_and_a_writer() {
    let cfg = without_timeouts(Config::new(3, 2, &[reader(1, 2), acquirer(1, 2)], 0))
        .fencing(Fencing::AfterQuorum, 0)
        .losses(Some(1));
    assert_safe("fencing, a reader and a writer, 1 lost request", cfg);
}

/// Clock jumps that expire some of a node's leases and not others.
#[test]
fn a_reader_and_a_writer_under_all_of_3_survive_two_forgetful_nodes() {
    let plans = [keeps(reader(1, 2)), keeps(acquirer(1, 2))];
    let cfg = without_timeouts(Config::new(3, 3, &plans, 1))
        .forgetful(2)
        .cover(SEEN_FORGOTTEN);
    assert_safe("a reader and a writer, All of 3, 2 forgetful", cfg);
}

// ---------------------------------------------------------------------------------------------
// Negative controls: the checker must find the counterexample
// ---------------------------------------------------------------------------------------------

/// The liveness property is not vacuous: with nodes that lose requests, a client may never
/// hold.
#[test]
fn negative_liveness_with_unavailable_nodes() {
    let mut cfg = Config::new(3, 2, &[acquirer(2, 2)], 2).losses(None);
    cfg.timely = true;
    cfg.liveness = true;
    assert_finds("liveness, nodes unavailable", cfg, "c0 eventually holds");
}

/// A lock on a bare majority does not survive one forgetful node.
#[test]
fn negative_bare_majority_with_a_forgetful_node() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0).forgetful(1);
    assert_finds("bare majority, one forgetful node", cfg, "exclusion");
}

/// The shorter-extend bug of an earlier version.
#[test]
fn negative_shorter_extend_without_cut() {
    let extender = Plan {
        extend_to: &[1],
        extends: 1,
        ..EXTENDER
    };
    let cfg = Config::new(3, 2, &[extender, acquirer(1, 2)], 1).bug(Bug::NoCutBeforeShorterExtend);
    assert_finds("shorter extend without the cut", cfg, "exclusion");
}

/// A repair for the whole lease, or after the validity.
#[test]
fn negative_repair_beyond_validity() {
    let watched = Plan {
        renewals: 1,
        ..WATCHED
    };
    let cfg = Config::new(3, 2, &[watched], 2)
        .losses(Some(1))
        .bug(Bug::RepairBeyondValidity);
    assert_finds("repair beyond the validity", cfg, "repair within validity");
}

/// A fan-out that counts its quorum over the nodes it asked, leaving out those its circuit
/// breaker skipped, lets two clients hold at once: one skips two nodes of three and holds with
/// the third, the other holds the two.
#[test]
fn negative_quorum_over_the_nodes_asked() {
    let mut cfg =
        Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0).bug(Bug::QuorumOverNodesAsked);
    cfg.skips = true;
    assert_finds("quorum over the nodes asked", cfg, "exclusion");
}

/// The arbiter's yes is one vote: a client that takes it for the lock holds while another
/// client holds the two other nodes.
#[test]
fn negative_the_arbiters_yes_alone_is_not_a_lock() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .ordered()
        .bug(Bug::ArbiterYesHolds);
    assert_finds("the arbiter's yes taken for the lock", cfg, "exclusion");
}

/// A fallback that leaves the arbiter out of its fan-out and its rollback: the arbiter's first
/// request, timed out but written, takes the key after the rollback was sent elsewhere.
#[test]
fn negative_a_fallback_that_forgets_the_arbiter() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2)], 0)
        .ordered()
        .bug(Bug::FallbackForgetsArbiter);
    assert_finds("a fallback that forgets the arbiter", cfg, "full rollback");
}

/// The library as written: the fallback's `SET NX` to the arbiter is refused by the entry its
/// own first request took, and the rollback, which skips the nodes that refused, leaves that
/// entry in place (until it expires, every ordered waiter is refused by the arbiter).
#[test]
fn negative_a_fallback_rollback_that_skips_the_arbiter() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2)], 0)
        .ordered()
        .bug(Bug::FallbackRollbackSkipsArbiter);
    assert_finds(
        "a fallback rollback that skips the arbiter (the library as written)",
        cfg,
        "full rollback",
    );
}

/// Cluster nodes (`src/node/cluster.rs`): any request may be answered `MOVED` (one per run),
/// which the library counts as the node's failure for the call and never re-sends.
#[test]
fn two_clients_majority_of_3_cluster_redirects() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .losses(Some(1))
        .cover(SEEN_REDIRECTED | SEEN_ROLLBACK);
    cfg.redirects = true;
    assert_safe("two clients, Majority of 3, cluster redirects", cfg);
}

/// The same with a second attempt queued behind the first one's rollback (`--ignored`).
#[test]
#[ignore = "large: run with --release --ignored"]
fn large_two_clients_majority_of_3_cluster_redirects_retry() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(2, 2)], 0)
        .losses(Some(1))
        .cover(SEEN_REDIRECTED | SEEN_ROLLBACK);
    cfg.redirects = true;
    assert_safe(
        "two clients, Majority of 3, cluster redirects, a retry",
        cfg,
    );
}

/// Following a `MOVED` as a cluster client does: the acquire, sent again to the new primary,
/// runs there after the rollback the client sent meanwhile, and its entry stays.
#[test]
fn negative_following_a_redirect_lets_an_acquire_overtake_its_rollback() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2)], 0)
        .losses(Some(1))
        .bug(Bug::FollowRedirect);
    cfg.redirects = true;
    assert_finds("following a MOVED", cfg, "full rollback");
}

/// A rollback sent only to the nodes that said yes misses the late ones.
#[test]
fn negative_rollback_only_where_yes() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2)], 0).bug(Bug::RollbackOnlyWhereYes);
    assert_finds("rollback only where yes", cfg, "full rollback");
}

/// The defect of the library's first fencing scheme that the model found (docs/SAFETY.md,
/// "Model check"): a successor's acquire may read a node's counter before its predecessor's
/// write-back reached that node, and read another node whose write-back was lost; its token
/// then does not exceed the predecessor's. The library now increments after the quorum
/// (`fencing_incremented_after_quorum`).
#[test]
fn negative_fencing_incremented_during_the_acquire_can_repeat_tokens() {
    let cfg = fencing_config(Fencing::InAcquire);
    assert_finds(
        "fencing incremented during the acquire",
        cfg,
        "tokens increase",
    );
}

/// A reader's extend that is a plain `ZADD` puts its member back beside a writer's entry; the
/// renewal that node confirms keeps the reader inside its validity after a quorum of its
/// members is gone.
#[test]
fn negative_a_reader_extend_that_re_adds_its_member_lets_a_writer_in() {
    let extender = Plan {
        role: Role::Reader,
        ttl: 2,
        extend_to: &[2],
        extends: 1,
        release: false,
        ..EXTENDER
    };
    let cfg = without_timeouts(Config::new(3, 2, &[extender, keeps(acquirer(1, 3))], 2))
        .bug(Bug::ReaderExtendReAdds);
    assert_finds(
        "a reader's extend that re-adds its member",
        cfg,
        "exclusion",
    );
}

/// A reader's release that deletes the readers' set takes the other readers' members with it.
#[test]
fn negative_a_reader_release_that_deletes_the_set_lets_a_writer_in() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).bug(Bug::ReadReleaseDeletesTheSet);
    assert_finds("a reader's release that deletes the set", cfg, "exclusion");
}

/// A reader's repair beside a writer's entry: the next renewal, confirmed there, outlives the
/// reader's members on a quorum.
#[test]
fn negative_a_read_repair_that_ignores_the_writer_lets_a_writer_in() {
    let watched = Plan {
        role: Role::Reader,
        ttl: 2,
        release: false,
        ..WATCHED
    };
    let cfg = without_timeouts(Config::new(3, 2, &[watched, keeps(acquirer(1, 3))], 2))
        .bug(Bug::ReadRepairIgnoresWriter);
    assert_finds("a read repair that ignores the writer", cfg, "exclusion");
}

// ---------------------------------------------------------------------------------------------
// Larger configurations, too slow for CI in the debug profile. Run them with:
// cargo test --release --all-features --test model -- --ignored --nocapture
// ---------------------------------------------------------------------------------------------

/// Two clients on five nodes.
#[test]
#[ignore]
fn large_two_clients_majority_of_5() {
    let cfg = Config::new(5, 3, &[acquirer(1, 2), acquirer(1, 2)], 0);
    assert_safe("two clients, Majority of 5", cfg);
}

/// Two clients on five nodes, one forgetful node.
#[test]
#[ignore]
fn large_two_clients_at_least_4_of_5_one_forgetful() {
    let once = Plan {
        release: false,
        ..acquirer(1, 2)
    };
    let cfg = Config::new(5, 4, &[once, once], 0).forgetful(1);
    assert_safe("two clients, AtLeast(4) of 5, 1 forgetful", cfg);
}

/// The library's fencing scheme with timeouts and every initial counter vector up to 1.
#[test]
#[ignore]
fn large_fencing_incremented_after_quorum() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .fencing(Fencing::AfterQuorum, 1)
        .losses(Some(1));
    assert_safe("fencing incremented after the quorum, with timeouts", cfg);
}

/// Two readers and a writer with timeouts.
#[test]
#[ignore]
fn large_two_readers_and_a_writer_with_timeouts() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = Config::new(3, 2, &plans, 0).cover(SEEN_SHARED | SEEN_ROLLBACK);
    assert_safe("two readers and a writer, with timeouts", cfg);
}

/// Two readers and a writer over a tick: readers expire and a writer comes in.
#[test]
#[ignore]
fn large_two_readers_and_a_writer_over_a_tick() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 1)).cover(SEEN_SHARED);
    assert_safe("two readers and a writer, 1 tick", cfg);
}

/// A waiting writer's two attempts: its mark outlives the first one's rollback.
#[test]
#[ignore]
fn large_two_readers_and_a_waiting_writer_that_retries() {
    let plans = [reader(1, 2), reader(1, 2), waiting_writer(2, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0))
        .cover(SEEN_SHARED | SEEN_MARK_REFUSED | SEEN_UNMARKED);
    assert_safe("two readers and a waiting writer with 2 attempts", cfg);
}

/// A reader and two writers, every one releasing.
#[test]
#[ignore]
fn large_a_reader_and_two_writers() {
    let plans = [reader(1, 2), waiting_writer(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).cover(SEEN_UNDER_MARK);
    assert_safe("a reader and two writers, releasing", cfg);
}

/// Two readers and a writer, one forgetful node under `All`.
#[test]
#[ignore]
fn large_two_readers_and_a_writer_all_of_3_one_forgetful() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 3, &plans, 0))
        .forgetful(1)
        .cover(SEEN_FORGOTTEN | SEEN_SHARED);
    assert_safe("two readers and a writer, All of 3, 1 forgetful", cfg);
}

/// Fencing with two readers and a writer: the writer's token exceeds both readers'.
#[test]
#[ignore]
fn large_fencing_two_readers_and_a_writer() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).fencing(Fencing::AfterQuorum, 0);
    assert_safe("fencing, two readers and a writer", cfg);
}

/// The reader's extends against a writer, with timeouts.
#[test]
#[ignore]
fn large_a_reader_that_extends_and_a_writer_with_timeouts() {
    let extender = Plan {
        role: Role::Reader,
        ttl: 2,
        extend_to: &[1, 3],
        extends: 1,
        release: false,
        ..EXTENDER
    };
    let cfg = Config::new(3, 2, &[extender, keeps(acquirer(1, 3))], 2)
        .cover(SEEN_RENEWED | SEEN_SHORTENED);
    assert_safe("a reader that extends and a writer, with timeouts", cfg);
}

/// The ordered approach with a second attempt for c1 (behind its first one's rollback).
#[test]
#[ignore]
fn large_two_clients_majority_of_3_ordered_retry() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(2, 2)], 0)
        .ordered()
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    assert_safe("two clients, Majority of 3, ordered approach, a retry", cfg);
}

/// The ordered approach with circuit breakers and a tick.
#[test]
#[ignore]
fn large_two_clients_majority_of_3_ordered_breakers_over_a_tick() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1)
        .ordered()
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    cfg.skips = true;
    assert_safe(
        "two clients, Majority of 3, ordered approach, circuit breakers, 1 tick",
        cfg,
    );
}
