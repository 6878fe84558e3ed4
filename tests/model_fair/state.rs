//! The model's state: the nodes' fair-lock entries, lines and counters, the clients and their
//! requests, and its encoding.

use super::*;

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

/// The key's entry: the holder value and its expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) holder: Val,
    pub(super) expiry: u8,
}

/// One node's keys for the fair lock's key `K`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct NodeState {
    /// `K`.
    pub(super) key: Option<Entry>,
    /// The line (`quorum-lock:queue:{<h>}:K`): each waiter id's ticket (a slot per identity of each
    /// request, see `waiter`), 0 when not in line. A waiter in line also has its queue lease
    /// and its hash entry.
    pub(super) line: [u8; SLOTS],
    /// The queue leases (`quorum-lock:queue-expiry:{<h>}:K`): expiry, for the waiters in line.
    pub(super) lease: [u8; SLOTS],
    /// The attempt whose holder value the waiter's hash entry stores (only with
    /// `Bug::GrantSetsAttemptValue`; otherwise it stores the base, and this stays 0).
    pub(super) entry: [u8; SLOTS],
    /// The ticket counter (`quorum-lock:ticket:{<h>}:K`), with its expiry; 0 and 0 when absent.
    pub(super) counter: u8,
    pub(super) counter_exp: u8,
    /// The round of the attempt that last wrote each waiter's hash entry, and the node's time
    /// then (0 and 0 when not in line).
    pub(super) round: [u8; SLOTS],
    pub(super) at: [u8; SLOTS],
    /// The latest short grant's notice this node published for each waiter id: the round it
    /// carries (0: none), the node's time since that round's attempt ran, and the grant's
    /// length. Messages on their way: a restart keeps them.
    pub(super) nr: [u8; SLOTS],
    pub(super) nd: [u8; SLOTS],
    pub(super) nms: [u8; SLOTS],
}

impl NodeState {
    pub(super) fn in_line(&self, w: usize) -> bool {
        self.line[w] != 0
    }

    /// `leave(w)`: out of the line, its lease and hash entry with it.
    pub(super) fn leave(&mut self, w: usize) {
        self.line[w] = 0;
        self.lease[w] = 0;
        self.entry[w] = 0;
        self.round[w] = 0;
        self.at[w] = 0;
    }

    /// Everything forgotten but the notices already published (a restart).
    pub(super) fn restarted(&self) -> NodeState {
        NodeState {
            nr: self.nr,
            nd: self.nd,
            nms: self.nms,
            ..NodeState::default()
        }
    }

    /// Whether the key holds one of the values of base `w` (`belongs` in the scripts).
    pub(super) fn key_of(&self, w: usize) -> bool {
        self.key.is_some_and(|e| e.holder.base() == w)
    }

    /// `first_live()`: the lowest ticket in line, ties broken by waiter id.
    pub(super) fn first_live(&self) -> Option<usize> {
        (0..SLOTS)
            .filter(|&w| self.in_line(w))
            .min_by_key(|&w| (self.line[w], w))
    }

    /// `keep_line()`: the line's keys and the counter live until the latest queue lease; with
    /// nobody in line, they are deleted (the counter too).
    pub(super) fn keep_line(&mut self) {
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
    pub(super) fn draw(&mut self, now: u8, queue_lease: u8) -> u8 {
        self.counter += 1;
        if self.counter_exp == 0 || self.counter_exp - now < queue_lease {
            self.counter_exp = now + queue_lease;
        }
        self.counter
    }

    /// The expiries of everything on the node with a TTL.
    pub(super) fn expiries(&self) -> impl Iterator<Item = u8> + '_ {
        let key = self.key.map(|e| e.expiry);
        let counter = (self.counter_exp != 0).then_some(self.counter_exp);
        let leases = (0..SLOTS)
            .filter(|&w| self.in_line(w))
            .map(|w| self.lease[w]);
        key.into_iter().chain(counter).chain(leases)
    }

    /// Removes everything that expires at or before `time`; says whether anything did.
    pub(super) fn expire(&mut self, time: u8) -> bool {
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
pub(super) enum Kind {
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
pub(super) struct Req(u32);

impl Req {
    pub(super) fn new(kind: Kind, r: usize, val: Val, arg: u16, wait: bool) -> Req {
        Req(kind as u32
            | (r as u32) << 3
            | u32::from(wait) << 5
            | u32::from(val.0) << 8
            | u32::from(arg) << 16)
    }

    pub(super) fn kind(self) -> Kind {
        match self.0 & 7 {
            0 => Kind::Acquire,
            1 => Kind::Release,
            2 => Kind::Rollback,
            3 => Kind::Withdraw,
            _ => Kind::Draw,
        }
    }

    pub(super) fn r(self) -> usize {
        (self.0 >> 3 & 3) as usize
    }

    pub(super) fn wait(self) -> bool {
        self.0 & 1 << 5 != 0
    }

    pub(super) fn val(self) -> Val {
        Val((self.0 >> 8) as u8)
    }

    pub(super) fn arg(self) -> u16 {
        (self.0 >> 16) as u16
    }

    pub(super) fn unwaited(self) -> Req {
        Req(self.0 & !(1 << 5))
    }

    pub(super) fn describe(self) -> String {
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

    /// Nobody waits for request `r`'s answers on this connection any more.
    pub(super) fn unwait(&mut self, r: usize) {
        for req in &mut self.items[..usize::from(self.len)] {
            if req.r() == r {
                *req = req.unwaited();
            }
        }
    }
}

/// The current fan-out (or waited-for broadcast) of a request, as `fanout::Outcome` keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Fan {
    /// Nodes whose answer is still awaited.
    pub(super) pending: u8,
    pub(super) yes: u8,
    pub(super) refused: u8,
    pub(super) failed: u8,
    /// The largest ticket drawn by a refusal (`?` acquire), or counter (draw round).
    pub(super) max: u8,
    /// A release's grants, per node: `(waiter id + 1) | ms << 4`, 0 for none.
    pub(super) grant: [u8; MAX_N],
    /// The expiry of each such grant on its node.
    pub(super) gexp: [u8; MAX_N],
}

/// What a node answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Answer {
    pub(super) yes: bool,
    /// A ticket drawn by a refused `?` acquire, or the counter of a draw round.
    pub(super) value: u8,
    /// A grant made by a release: waiter id, ms, expiry.
    pub(super) grant: Option<(usize, u8, u8)>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Phase {
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
pub(super) enum Miss {
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
pub(super) struct Request {
    pub(super) phase: Phase,
    /// Its identity: 0, and one more after each cut-off (its waiter id is `waiter(r, gen)`).
    pub(super) gen: u8,
    /// Attempts made with this identity (attempt `k`'s holder value is `Val::attempt(.., k)`).
    pub(super) nonce: u8,
    /// The round of its last attempt: the request's attempt counter, which goes on counting
    /// across a new identity (a start in line or holding counts as round 1). Recorded with its
    /// `Waiting` state, sent with a release's `sure` set, fences its hand-off value.
    pub(super) round: u8,
    /// The holder value of its current attempt, or of its guard (the grant value after a
    /// hand-off), or of what it rolls back.
    pub(super) holder: Val,
    /// Its slot among its client's waiters is `Waiting { since }` (a hand-off may come).
    pub(super) waiting: bool,
    /// `Granted`: a release of its client handed it the lock until this deadline (0: not).
    pub(super) granted: u8,
    /// Its latest try was an attempt (of round `round`, sent at `t0`): short grants answering
    /// it may be held from their notices (`Line::last_attempt` in `take/fair.rs`).
    pub(super) noticeable: bool,
    pub(super) attempts: u8,
    /// Its ticket, 0 for none.
    pub(super) ticket: u8,
    pub(super) t0: u8,
    pub(super) deadline: u8,
    pub(super) miss: Miss,
    /// A ticket drawn by a quorum of its refused `?` attempt's refusals (0: none).
    pub(super) drawn: u8,
    /// A release: the `sure` set sent to the nodes (waiter ids).
    pub(super) sure: u16,
    /// A release: the round sent with each waiter of the `sure` set, 4 bits per request.
    pub(super) sure_rounds: u16,
    /// A release: the waiters of its client waiting since before its stamp that still are.
    pub(super) eligible: u8,
    /// A release: the instant taken with the stamp, before anything was sent.
    pub(super) sent: u8,
    pub(super) fan: Fan,
}

impl Request {
    /// Inside the validity of a guard.
    pub(super) fn holds(&self, now: u8) -> bool {
        self.phase == Phase::Holding && now < self.deadline
    }
}

/// Paths worth confirming that the search reaches (recorded only when a configuration asks).
pub(super) const SEEN_HANDOFF: u16 = 1;
/// An attempt answered yes by a node where it found its request's grant value (a claim).
pub(super) const SEEN_CLAIMED: u16 = 2;
pub(super) const SEEN_SHORT_GRANT: u16 = 4;
/// A short grant expired with its waiter's place, unclaimed.
pub(super) const SEEN_LAPSED: u16 = 8;
/// A rollback re-granted the key to its own request.
pub(super) const SEEN_SELF_REGRANT: u16 = 16;
pub(super) const SEEN_CUT_OFF: u16 = 32;
pub(super) const SEEN_DRAW_ROUND: u16 = 64;
pub(super) const SEEN_GAVE_UP: u16 = 128;
pub(super) const SEEN_FORGOTTEN: u16 = 256;
/// A rollback or withdrawal written to a connection that failed ran on its node afterwards.
pub(super) const SEEN_LATE: u16 = 512;
/// A request held from the notices of a quorum's short grants.
pub(super) const SEEN_NOTICED: u16 = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct State {
    pub(super) now: u8,
    pub(super) lost: u8,
    pub(super) forgotten: u8,
    /// Property (b) broke: a hand-off's deadline was later than a grant it counted.
    pub(super) overrun: bool,
    pub(super) seen: u16,
    pub(super) nodes: [NodeState; MAX_N],
    pub(super) reqs: [Request; MAX_R],
    /// Request queues, index `client * MAX_N + node`.
    pub(super) conns: [Fifo; MAX_R * MAX_N],
    /// What was written to a connection that failed and was replaced, and may still land on
    /// its node, in its own order but in any order with the new connection's (only with
    /// `Config::reconnects`).
    pub(super) stale: [Fifo; MAX_R * MAX_N],
    /// Connections replaced so far.
    pub(super) reconnected: u8,
}

/// A byte encoding of (part of) a state, for hashing and for ordering the nodes.
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
        let key = node.key.map_or([0, 0], |e| [e.holder.0 + 1, e.expiry]);
        self.put(&key);
        // The line's members only: most of its slots are empty.
        for w in (0..SLOTS).filter(|&w| node.in_line(w)) {
            self.put(&[
                w as u8,
                node.line[w],
                node.lease[w],
                node.entry[w],
                node.round[w],
                node.at[w],
            ]);
        }
        self.put(&[u8::MAX, node.counter, node.counter_exp]);
        for w in (0..SLOTS).filter(|&w| node.nr[w] != 0) {
            self.put(&[w as u8, node.nr[w], node.nd[w], node.nms[w]]);
        }
    }

    pub(super) fn fifo(&mut self, fifo: &Fifo) {
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
                u8::from(r.waiting) | miss << 1 | u8::from(r.noticeable) << 4,
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
