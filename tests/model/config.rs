//! The model check's configuration: who does what, under which faults, and the bugs put back
//! for the negative controls.

use super::*;

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// What a client takes on the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
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
pub(super) struct Plan {
    pub(super) role: Role,
    /// Acquire attempts, each with a fresh holder value.
    pub(super) attempts: u8,
    /// The TTL of the acquire, and the watchdog's lease.
    pub(super) ttl: u8,
    /// TTLs a user extend may ask for (shorter and longer than the current one).
    pub(super) extend_to: &'static [u8],
    /// How many user extends.
    pub(super) extends: u8,
    /// How many watchdog renewals (with repair).
    pub(super) renewals: u8,
    /// Whether the client releases (from a held, expired or lost guard).
    pub(super) release: bool,
}

/// Acquire attempts only, each released when held: a mutex client, or a writer.
pub(super) const fn acquirer(attempts: u8, ttl: u8) -> Plan {
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
pub(super) const fn reader(attempts: u8, ttl: u8) -> Plan {
    Plan {
        role: Role::Reader,
        ..acquirer(attempts, ttl)
    }
}

/// A waiting writer's acquire attempts only, each released when held.
pub(super) const fn waiting_writer(attempts: u8, ttl: u8) -> Plan {
    Plan {
        role: Role::WaitingWriter,
        ..acquirer(attempts, ttl)
    }
}

/// How the fencing token is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fencing {
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
pub(super) enum Bug {
    /// The holder record (an election's leader value and term) written by the acquire itself
    /// where it takes the key, instead of published once the guard exists (`Lease::publish`):
    /// an attempt that never wins shows as the leader on the nodes it took.
    RecordInAcquire,
    /// A break that deletes the entries (a forced release) instead of replacing them with
    /// tombstones that keep the key until they would have expired.
    BreakDeletes,
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
    /// An acquire whose future is dropped (a timeout around it) leaves what it wrote: no
    /// rollback, its entries go with their TTL (the library before the cancelled attempt's
    /// rollback, `src/take/attempt.rs`, `Undo`).
    CancelLeavesEntries,
    /// Durable votes counted as written, before the node's fsync (plain votes, or a
    /// `WAITAOF` that answers before the fsync: `appendfsync everysec` on a server with the
    /// defect `rules::durable::local_fsync` refuses, or a re-sent vote's `WAITAOF` on a new
    /// connection, which waits for nothing).
    VoteBeforeFsync,
    /// Durable votes for the lock, but the fencing increments and write-back counted without
    /// their fsync (the library before `fence_token` made them durable calls).
    FenceNotDurable,
}

#[derive(Clone, Debug)]
pub(super) struct Config {
    pub(super) nodes: usize,
    pub(super) quorum: u8,
    pub(super) plans: Vec<Plan>,
    /// Global time runs from 0 to this many ticks.
    pub(super) max_time: u8,
    /// Forgetful faults (restart empty, clock jump) allowed in one run.
    pub(super) forgetful: u8,
    /// Requests that may be lost in one run (`None`: any number).
    pub(super) losses: Option<u8>,
    /// The clients that may time out (a bit per client): a node that does not answer (down,
    /// paused, slow, partitioned).
    pub(super) timeouts: u8,
    /// Replies travel separately (and may arrive late, or not at all) instead of arriving as
    /// the node answers.
    pub(super) reply_delay: bool,
    /// For the liveness check: time advances only when every message was delivered and no
    /// client has something to do first (a network never slower than a tick).
    pub(super) timely: bool,
    pub(super) fencing: Option<Fencing>,
    pub(super) bug: Option<Bug>,
    /// Adds the `eventually` property "c0 eventually holds".
    pub(super) liveness: bool,
    /// Circuit breakers (`src/node/backlog.rs`): a client may skip a node in a fan-out, not
    /// writing its request and counting it as failed at once.
    pub(super) skips: bool,
    /// `SEEN_*` paths the search must reach (`sometimes` properties, as coverage).
    pub(super) cover: u16,
    /// Initial fencing counters range over `0..=counters` on every node (an earlier history).
    pub(super) counters: u8,
    /// Or exactly these initial counters.
    pub(super) start_counters: Option<[u8; MAX_N]>,
    /// Node symmetry reduction: each state is replaced by the representative of its class
    /// under renaming the nodes (traces are translated back to the nodes' real names).
    pub(super) symmetry: bool,
    /// The ordered approach: a client may start an attempt by asking the arbiter (node 0)
    /// first, beside the attempts to every node at once. Node 0 is then special, so the
    /// symmetry reduction renames only the other nodes (see [`Protocol::canonicalize`]).
    pub(super) ordered: bool,
    /// Cluster nodes (`src/node/cluster.rs`): the head request of a connection may be answered
    /// `MOVED` (its slot moved to another primary: not run); it counts as a lost request.
    pub(super) redirects: bool,
    /// Callers that drop an acquire in progress (a timeout around it): a client's attempt may
    /// be cancelled at any point before it holds.
    pub(super) cancels: bool,
    /// Leader election (`src/client/election.rs`): a holder publishes its holder record
    /// (PUBLISH, `lua/publish.lua`) once it holds, and a reader reads each node once
    /// (`lua/holder_read.lua`), naming the leader a quorum shows with its record.
    pub(super) elections: bool,
    /// An operator's break (`QuorumLock::break_lock`, `lua/break.lua`) reaches each node at
    /// any moment, once per node: the entry replaced by a tombstone with its expiry (lock delay
    /// 0), which the holder's calls do not recognise as its own.
    pub(super) breaks: bool,
    /// Durable votes (`src/rules/durable.rs`): a node's yes to an acquire, an extend, a
    /// fencing increment or write-back counts only once the node fsynced it (`WAITAOF` on the
    /// connection that wrote it, which waits for every earlier write on the node): the model
    /// fsyncs the node as it answers such a yes. Other writes (repairs, releases, rollbacks,
    /// refusals) reach the disk at the node's own fsyncs ([`Action::Sync`]), at any moment.
    pub(super) durable: bool,
    /// Machine crashes allowed in one run (durable configurations): a node loses every write
    /// not yet fsynced, on any node, and they are not counted as forgetful faults.
    pub(super) crashes: u8,
}

impl Config {
    /// `nodes` nodes, quorum `quorum`, the given clients: no faults, no lost requests;
    /// timeouts, arbitrary delays and node symmetry on.
    pub(super) fn new(nodes: usize, quorum: u8, plans: &[Plan], max_time: u8) -> Config {
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
            cancels: false,
            elections: false,
            breaks: false,
            durable: false,
            crashes: 0,
        }
    }

    /// The ordered approach (`src/arbiter.rs`): mutex clients only, on 3 nodes or more (the
    /// library uses it for no other shape, and with fewer nodes never).
    pub(super) fn ordered(mut self) -> Config {
        assert!(self.nodes >= 3);
        assert!(self.plans.iter().all(|p| p.role == Role::Writer));
        self.ordered = true;
        self
    }

    pub(super) fn forgetful(mut self, f: u8) -> Config {
        self.forgetful = f;
        self
    }

    /// Durable votes, with up to `crashes` machine crashes on any nodes (mutex clients only).
    pub(super) fn durable(mut self, crashes: u8) -> Config {
        assert!(self.plans.iter().all(|p| p.role == Role::Writer));
        self.durable = true;
        self.crashes = crashes;
        self
    }

    pub(super) fn losses(mut self, losses: Option<u8>) -> Config {
        self.losses = losses;
        self
    }

    pub(super) fn fencing(mut self, fencing: Fencing, counters: u8) -> Config {
        self.fencing = Some(fencing);
        self.counters = counters;
        self
    }

    pub(super) fn cover(mut self, seen: u16) -> Config {
        self.cover = seen;
        self
    }

    /// A negative control: the defect.
    pub(super) fn bug(mut self, bug: Bug) -> Config {
        self.bug = Some(bug);
        self
    }

    pub(super) fn has(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }

    pub(super) fn reads(&self, c: usize) -> bool {
        self.plans[c].role == Role::Reader
    }
}
