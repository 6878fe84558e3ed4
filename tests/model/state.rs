//! The model's state: the nodes' entries, the clients and their requests, and its encoding.

use super::*;

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

/// One acquisition's holder value: unique per attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Holder {
    pub(super) client: u8,
    pub(super) attempt: u8,
}

/// A break's tombstone stands for the holder it replaced at `client + TOMBSTONE`.
pub(super) const TOMBSTONE: u8 = 4;

impl Holder {
    /// The tombstone a break leaves in place of this holder's entry.
    pub(super) fn tombstone(self) -> Holder {
        Holder {
            client: self.client + TOMBSTONE,
            attempt: self.attempt,
        }
    }

    pub(super) fn is_tombstone(self) -> bool {
        self.client >= TOMBSTONE
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.is_tombstone() {
            true => write!(
                f,
                "tombstone of c{}#{}",
                self.client - TOMBSTONE,
                self.attempt + 1
            ),
            false => write!(f, "c{}#{}", self.client, self.attempt + 1),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) holder: Holder,
    /// On the node's clock (global time: drift 0); expired when `now >= expiry`.
    pub(super) expiry: u8,
}

/// A waiting writer's pending mark (`quorum-lock:writer-waiting:{<h>}:K`): the request's id, which
/// the model names by its client (one waiting request per client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mark {
    pub(super) waiter: u8,
    pub(super) expiry: u8,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct NodeState {
    /// The key `K`: the mutex's entry, or a read-write lock's writer.
    pub(super) entry: Option<Entry>,
    /// The readers' sorted set (`quorum-lock:readers:{<h>}:K`): member the holder value, score its
    /// expiry; here each holder's expiry, 0 for "not a member" (see [`slot`]).
    pub(super) readers: [u8; MAX_C * MAX_ATTEMPTS],
    pub(super) mark: Option<Mark>,
    /// The fencing counter (`quorum-lock:fence:{<h>}:K`): no TTL, lost only on a restart.
    pub(super) counter: u8,
    /// The holder record (`quorum-lock:holder:{<h>}:K`), by the holder it names; kept only
    /// while it names the entry's holder (a record naming another is never shown, so the
    /// model drops it: see [`Protocol::settle_records`]).
    pub(super) record: Option<Holder>,
    /// Durable configurations: what the node's disk has (its last fsync).
    pub(super) disk: Disk,
}

/// A node's fsynced state: the mutex's entry and the fencing counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Disk {
    pub(super) entry: Option<Entry>,
    pub(super) counter: u8,
}

/// A holder's place in a node's readers.
pub(super) fn slot(holder: Holder) -> usize {
    usize::from(holder.client) * MAX_ATTEMPTS + usize::from(holder.attempt)
}

impl NodeState {
    /// A live reader: every script purges the expired members first, and the model's ticks
    /// remove them as they expire.
    pub(super) fn has_readers(&self) -> bool {
        self.readers != [0; MAX_C * MAX_ATTEMPTS]
    }

    pub(super) fn member(&self, holder: Holder) -> bool {
        self.readers[slot(holder)] != 0
    }

    /// Whether the node has this holder's entry or member.
    pub(super) fn keeps(&self, holder: Holder) -> bool {
        self.entry.is_some_and(|e| e.holder == holder) || self.member(holder)
    }

    /// The expiries of everything on the node with a TTL (entry, members, mark).
    pub(super) fn expiries(&self) -> impl Iterator<Item = u8> + '_ {
        let entry = self.entry.map(|e| e.expiry);
        let mark = self.mark.map(|m| m.expiry);
        let members = self.readers.iter().copied().filter(|&e| e != 0);
        entry.into_iter().chain(mark).chain(members)
    }

    /// Whether everything the node has is on its disk (durable configurations).
    pub(super) fn synced(&self) -> bool {
        self.disk.entry == self.entry && self.disk.counter == self.counter
    }

    /// The node's fsync: every write so far reaches its disk.
    pub(super) fn sync(&mut self) {
        self.disk = Disk {
            entry: self.entry,
            counter: self.counter,
        };
    }

    /// Removes everything that expires at or before `time`; says whether anything did.
    pub(super) fn expire(&mut self, time: u8) -> bool {
        // What expired on the node would not be loaded from its disk either.
        if self.disk.entry.is_some_and(|e| e.expiry <= time) {
            self.disk.entry = None;
        }
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
pub(super) enum Kind {
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
    /// PUBLISH: the holder record, written where the entry is this holder's.
    Publish = 7,
}

/// A request on its connection, packed into 16 bits to keep states small: hashing and copying
/// states is most of the search's work. The holder's client is the connection's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Req(u16);

impl Req {
    /// `arg` is the TTL (acquire, extend, repair) or the token (write-back); `wait` says that
    /// the client still waits for the answer: only then does a reply travel back (a reply
    /// nobody waits for is ignored by the library, so the model does not carry it).
    pub(super) fn new(kind: Kind, attempt: u8, arg: u8, wait: bool) -> Req {
        Req(kind as u16 | u16::from(attempt) << 3 | u16::from(wait) << 4 | u16::from(arg) << 8)
    }

    pub(super) fn kind(self) -> Kind {
        match self.0 & 7 {
            0 => Kind::Acquire,
            1 => Kind::FenceMax,
            2 => Kind::Extend,
            3 => Kind::Repair,
            4 => Kind::Release,
            5 => Kind::Incr,
            6 => Kind::Withdraw,
            _ => Kind::Publish,
        }
    }

    pub(super) fn attempt(self) -> u8 {
        (self.0 >> 3 & 1) as u8
    }

    pub(super) fn wait(self) -> bool {
        self.0 & 1 << 4 != 0
    }

    pub(super) fn arg(self) -> u8 {
        (self.0 >> 8) as u8
    }

    pub(super) fn unwaited(self) -> Req {
        Req(self.0 & !(1 << 4))
    }

    pub(super) fn holder(self, c: usize) -> Holder {
        Holder {
            client: c as u8,
            attempt: self.attempt(),
        }
    }

    /// A reader's calls are named `read-...`, the others as the mutex's.
    pub(super) fn describe(self, c: usize, reads: bool) -> String {
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
            Kind::Publish => format!("publish {holder}'s record"),
        }
    }
}

/// A FIFO request queue: one connection. Unused slots stay `Default`, so that equal queues
/// are equal values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Fifo {
    pub(super) len: u8,
    pub(super) items: [Req; QUEUE],
}

impl Fifo {
    pub(super) fn push(&mut self, req: Req) {
        assert!(usize::from(self.len) < QUEUE, "connection queue overflow");
        self.items[usize::from(self.len)] = req;
        self.len += 1;
    }

    pub(super) fn pop(&mut self) -> Req {
        let head = self.items[0];
        self.items.copy_within(1.., 0);
        self.len -= 1;
        self.items[usize::from(self.len)] = Req::default();
        head
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The newest request, if any.
    pub(super) fn last(&self) -> Option<Req> {
        (self.len > 0).then(|| self.items[usize::from(self.len) - 1])
    }

    /// Takes the newest request back (it was never written).
    pub(super) fn pop_back(&mut self) {
        self.len -= 1;
        self.items[usize::from(self.len)] = Req::default();
    }

    /// Nobody waits for these requests' answers any more.
    pub(super) fn unwait(&mut self) {
        for req in &mut self.items[..usize::from(self.len)] {
            *req = req.unwaited();
        }
    }
}

/// A node's answer as the client reads it (a failure is counted without a vote).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Vote {
    /// Yes, with the counter for a fenced acquire or an increment (0 otherwise).
    Yes(u8),
    Refused,
}

/// The client's view of one node in the current fan-out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Slot {
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
pub(super) struct Fan {
    pub(super) slots: [Slot; MAX_N],
    pub(super) yes: u8,
    pub(super) refused: u8,
    pub(super) failed: u8,
    /// Of `failed`, the nodes whose circuit breaker kept the request from being written.
    pub(super) skipped: u8,
    /// The same nodes, as a mask: kept only in `ordered` configurations, where the rollback
    /// leaves them out as the library does (elsewhere the model rolls back on every node,
    /// which reaches the same node states, and the mask stays 0 so as not to split states).
    pub(super) skipped_mask: u8,
    pub(super) max_yes: u8,
    pub(super) yes_mask: u8,
    pub(super) refused_mask: u8,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Phase {
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
pub(super) enum Approach {
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
pub(super) const ARBITER: usize = 0;

/// For property (d): the nodes a rollback or release of one attempt was sent to, and those
/// that ran it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cleanup {
    pub(super) ended: bool,
    pub(super) sent: u8,
    pub(super) done: u8,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Client {
    pub(super) phase: Phase,
    /// Attempts started; the current holder value is that of attempt `attempts - 1`.
    pub(super) attempts: u8,
    pub(super) extends: u8,
    pub(super) renewals: u8,
    pub(super) t0: u8,
    pub(super) deadline: u8,
    pub(super) token: u8,
    /// The nodes that said yes to the acquire before it was decided.
    pub(super) acquire_yes: u8,
    /// How the current attempt was sent (the ordered approach); `All` once decided.
    pub(super) approach: Approach,
    /// The nodes a rollback of the current attempt goes to, fixed when its acquire is decided
    /// (`ordered` configurations only: 0 otherwise, the rollback going to every node).
    pub(super) give_back: u8,
    pub(super) fan: Fan,
    pub(super) cleanup: [Cleanup; MAX_ATTEMPTS],
    /// The current hold's record was published (elections).
    pub(super) published: bool,
}

impl Client {
    pub(super) fn holder(&self, c: usize) -> Holder {
        Holder {
            client: c as u8,
            attempt: self.attempts - 1,
        }
    }

    /// Inside its validity: a guard (held, or being extended) before its deadline.
    pub(super) fn holds(&self, now: u8) -> bool {
        matches!(
            self.phase,
            Phase::Holding | Phase::Renewing { .. } | Phase::Collecting
        ) && now < self.deadline
    }

    /// Waits for answers.
    pub(super) fn busy(&self) -> bool {
        self.fan.slots.iter().any(|s| *s != Slot::Idle)
    }
}

/// Paths worth confirming that the search reaches (the coverage properties). Marks in the
/// state's `seen`, but for `SEEN_SHARED` and `SEEN_UNDER_MARK`, read off the state itself.
pub(super) const SEEN_ROLLBACK: u16 = 1;
pub(super) const SEEN_RENEWED: u16 = 2;
pub(super) const SEEN_SHORTENED: u16 = 4;
pub(super) const SEEN_REPAIRED: u16 = 8;
pub(super) const SEEN_LOST: u16 = 16;
pub(super) const SEEN_FORGOTTEN: u16 = 32;
/// A reader refused because of a pending-writer mark.
pub(super) const SEEN_MARK_REFUSED: u16 = 64;
/// A waiting writer's mark withdrawn (or deleted by its release).
pub(super) const SEEN_UNMARKED: u16 = 128;
/// Two readers inside their validity at once.
pub(super) const SEEN_SHARED: u16 = 256;
/// A writer inside its validity while another writer's mark is on a node.
pub(super) const SEEN_UNDER_MARK: u16 = 512;
/// An ordered attempt refused by the arbiter (ended, nothing sent elsewhere).
pub(super) const SEEN_ARBITER_REFUSED: u16 = 1024;
/// An ordered attempt whose arbiter said yes, then reached the quorum over all N.
pub(super) const SEEN_ARBITER_QUORUM: u16 = 2048;
/// A request answered `MOVED` (cluster nodes).
pub(super) const SEEN_REDIRECTED: u16 = 4096;
/// A leader read that named a leader.
pub(super) const SEEN_LEADER_READ: u16 = 8192;
/// A break replaced the entry of a client inside its validity.
pub(super) const SEEN_BROKEN_HOLDER: u16 = 16384;
/// A machine crash lost a write not yet fsynced (durable configurations).
pub(super) const SEEN_CRASH_LOST: u16 = 32768;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct State {
    pub(super) now: u8,
    /// Requests lost so far (counted only when the configuration bounds them).
    pub(super) lost: u8,
    /// Forgetful faults so far.
    pub(super) forgotten: u8,
    /// Machine crashes so far (durable configurations).
    pub(super) crashes: u8,
    /// The largest fencing token any holder had so far.
    pub(super) max_token: u8,
    /// The largest fencing token any writer had so far.
    pub(super) max_writer_token: u8,
    /// Property (b) broke: a holder's token was not larger than every earlier holder's.
    pub(super) token_regressed: bool,
    /// Property (e) broke: a repair was sent outside the validity, or for longer than it.
    pub(super) repair_overrun: bool,
    pub(super) seen: u16,
    pub(super) nodes: [NodeState; MAX_N],
    pub(super) clients: [Client; MAX_C],
    /// Request queues, index `client * MAX_N + node`.
    pub(super) conns: [Fifo; MAX_C * MAX_N],
    /// The leader read (elections), per node: 0 not read yet, 1 read and naming nobody,
    /// `2 + slot(h)` naming `h` (its entry with its record).
    pub(super) read: [u8; MAX_N],
    /// Holders that held a guard at some point (a bit per [`slot`]).
    pub(super) guarded: u8,
    /// The property "a leader read names a holder that held" broke.
    pub(super) read_wrong: bool,
    /// Nodes the break reached (a bit per node).
    pub(super) broke: u8,
}

impl State {
    pub(super) fn conn(&mut self, c: usize, n: usize) -> &mut Fifo {
        &mut self.conns[c * MAX_N + n]
    }

    pub(super) fn see(&mut self, path: u16) {
        self.seen |= path;
    }

    pub(super) fn saw(&self, path: u16) -> bool {
        self.seen & path != 0
    }
}

/// A byte encoding of (part of) a state. Hashing one byte string is much faster than the
/// derived `Hash`'s hundreds of small writes (the tests run unoptimised), and comparing the
/// encodings of two nodes orders them for the symmetry reduction.
pub(super) struct Enc<const N: usize> {
    pub(super) buf: [u8; N],
    pub(super) len: usize,
}

impl<const N: usize> Enc<N> {
    pub(super) fn new() -> Self {
        Enc {
            buf: [0; N],
            len: 0,
        }
    }

    pub(super) fn put(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub(super) fn node(&mut self, node: &NodeState) {
        if node.disk != Disk::default() {
            let e = node.disk.entry.map_or([0; 3], |e| {
                [1 + e.holder.client, e.holder.attempt, e.expiry]
            });
            self.put(&[9, e[0], e[1], e[2], node.disk.counter]);
        }
        match (node.entry, node.mark, node.has_readers()) {
            // The mutex's nodes, in one write.
            (None, None, false) => self.put(&[0, node.counter]),
            (Some(e), None, false) if node.record.is_some() => {
                self.put(&[3, e.holder.client, e.holder.attempt, e.expiry, node.counter])
            }
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

    pub(super) fn fifo(&mut self, fifo: &Fifo) {
        self.put(&[fifo.len]);
        for req in &fifo.items[..usize::from(fifo.len)] {
            self.put(&req.0.to_le_bytes());
        }
    }

    pub(super) fn slot(&mut self, slot: Slot) {
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
            self.crashes,
            self.max_token,
            self.max_writer_token,
            u8::from(self.token_regressed)
                | u8::from(self.repair_overrun) << 1
                | u8::from(self.read_wrong) << 2,
            self.seen as u8,
            (self.seen >> 8) as u8,
            self.guarded,
            self.broke,
        ]);
        e.put(&self.read);
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
                u8::from(cl.published),
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
