//! The lock family: what one acquisition holds on the nodes, one file per kind (docs/DESIGN.md,
//! "Lock family"). Each kind's file holds its calls (which script, which keys and arguments),
//! the readers of their replies, its key layout and its Lua (in `lua/`, one file per script,
//! headed by its KEYS, ARGV and reply). All pure: nothing here sends a request or reads a clock.
//! The acquire path, the lease, the watchdog and the waiters are written once against
//! [`Shape`], which hands each operation to its kind in one place ([`Shape::kind`]).
//!
//! - [`mutex`]: one key, `SET NX PX`, and the calls the other kinds share with it (extend of
//!   a string entry, fencing).
//! - [`set`]: several keys taken as one, all or none.
//! - [`permit`]: a permit of a semaphore (a sorted set of leases).
//! - [`rw`]: a read or write hold of a read-write lock.
//! - [`fair`]: a fair lock (tickets, a line, grants).
//! - [`who`]: who holds a key: the holder record a holder publishes, and its read.

pub(crate) mod fair;
pub(crate) mod mutex;
pub(crate) mod permit;
pub(crate) mod rw;
pub(crate) mod set;
pub(crate) mod who;

use std::fmt;
use std::sync::Arc;

use redis::Value;

use crate::rules::holder::Holder;
use crate::rules::key::Key;
use crate::scripts::{Call, LockScript};

pub(crate) use fair::{granted_to, Fair};
pub(crate) use mutex::Mutex;
pub(crate) use permit::Permit;
pub(crate) use rw::{Read, Write};
pub(crate) use set::Set;
pub use set::MAX_SET_KEYS;

/// A script made of Lua files from `lua/` (shared fragments first, the script's own last).
macro_rules! script {
    ($name:literal: $($file:literal),+ $(,)?) => {
        $crate::scripts::LockScript::new(
            $name,
            concat!($(include_str!(concat!("lua/", $file))),+),
        )
    };
    ($name:literal: $prefix:literal + $($file:literal),+ $(,)?) => {
        $crate::scripts::LockScript::new(
            $name,
            concat!($prefix, $(include_str!(concat!("lua/", $file))),+),
        )
    };
}
pub(crate) use script;

/// Every script of the family, for loading on each connection.
pub(crate) fn scripts() -> impl Iterator<Item = &'static LockScript> {
    [
        mutex::SCRIPTS,
        set::SCRIPTS,
        permit::SCRIPTS,
        rw::SCRIPTS,
        fair::SCRIPTS,
        who::SCRIPTS,
    ]
    .into_iter()
    .flatten()
    .copied()
}

/// What a node's reply to a call means for the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Counts toward the quorum, with the reply's value (a counter's new value; otherwise
    /// not meaningful).
    Yes(i64),
    /// Refused; with the holder's remaining TTL as a wake-up hint, when known.
    Refused(Option<std::time::Duration>),
    /// Refused, with the node's next ticket number (a fair lock's first attempt).
    Drawn(i64),
}

/// How a node's reply to a call is read.
pub(crate) type Reader = fn(&Value) -> Option<Answer>;

/// An integer reply.
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// A 1 / 0 script reply: 1 yes (released, extended, written), 0 refused (this holder does not
/// hold the key there).
pub(crate) fn read_flag(v: &Value) -> Option<Answer> {
    match int(v)? {
        1 => Some(Answer::Yes(1)),
        0 => Some(Answer::Refused(None)),
        _ => None,
    }
}

/// A counter's new value (`INCR`, or a script answering the largest of several).
pub(crate) fn read_counter(v: &Value) -> Option<Answer> {
    int(v).map(Answer::Yes)
}

/// Who a release's notices are for (see `lua/notice.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Notice {
    /// A release: announce wherever the key (or a permit) is now free.
    Release,
    /// A failed attempt's rollback: announce only where it gave something back.
    Rollback,
}

impl Notice {
    fn arg(self) -> &'static [u8] {
        match self {
            Notice::Release => b"1",
            Notice::Rollback => b"2",
        }
    }
}

/// The operations of one kind of lock, as calls to send and readers of their replies.
pub(crate) trait Kind: fmt::Display {
    /// Every key held, in order (one, or a set's).
    fn keys(&self) -> &[Key];

    /// The acquire of one attempt with `holder` for `ttl_ms` (the TTL as the nodes take it),
    /// by a request that stands where `standing` says (read by the kinds that keep a line).
    fn acquire(&self, holder: &str, ttl_ms: &str, standing: &Standing) -> (Call, Reader);

    /// Compare-and-extend: acts only where this holder holds everything; answers 1 / 0.
    fn extend(&self, holder: &str, ttl_ms: &str) -> Call;

    /// The extend of a holder that published a holder record ([`who`]): the record's expiry
    /// moves with the entry's. By default an exclusive holder's entry at the first key.
    fn extend_recorded(&self, holder: &str, ttl_ms: &str) -> Call {
        mutex::extend_recorded(&self.keys()[0], holder, ttl_ms)
    }

    /// Publishes `fields` in the holder record ([`who`]) where this holder holds, as version
    /// `version`; answers 1 / 0. By default an exclusive holder's, on each of its keys'
    /// entries.
    fn publish(&self, holder: &str, version: u64, fields: &[(&str, &str)]) -> Call {
        who::publish(self.keys(), holder, version, fields)
    }

    /// Compare-and-delete with release notices. `sure`: a fair release's waiters of this
    /// client, which it hands the lock to itself (ignored by the other kinds).
    fn release(&self, holder: &str, notice: Notice, sure: &[(Arc<str>, u64)]) -> (Call, Reader);

    /// Puts back what a node lacks, set-if-absent, for `ms` (the remaining validity); and
    /// whether a reply says it put something back.
    fn repair(&self, holder: &str, ms: &str) -> (Call, fn(&Value) -> bool);

    /// The fencing increment after the quorum, answering the token's candidate: the
    /// counter of the first key (a set increments all of its keys').
    fn fence_increment(&self) -> (Call, Reader) {
        mutex::fence_increment(&self.keys()[0])
    }

    /// The fencing write-back: every counter raised to `token`, never lowered.
    fn fence_write(&self, token: &str) -> Call {
        mutex::fence_write(&self.keys()[0], token)
    }

    /// A waiting request's withdrawal when it gives up (a writer's pending mark, a fair
    /// waiter's place in line); `None` for the kinds that keep nothing while they wait.
    fn withdraw(&self) -> Option<Call> {
        None
    }

    /// The holder value of one attempt, for a kind that shapes it (a fair lock's: its
    /// request's base and a nonce); otherwise the attempt draws its own.
    fn attempt_holder(&self) -> Option<Holder> {
        None
    }

    /// Whether a waiting request keeps something on the nodes that lasts a queue lease and
    /// that it renews with each attempt (a fair waiter's place, a waiting writer's mark).
    fn keeps_a_place(&self) -> bool {
        false
    }

    /// Whether a waiter that lost may ask the key's arbiter first (see `take::arbiter`): the
    /// kinds without an order of their own among waiters.
    fn ordered_approach(&self) -> bool {
        false
    }

    /// Whether a client that just released the lock while others waited lets them go first
    /// (see `wakeup::courtesy`), reading the release's count of listeners.
    fn courteous(&self) -> bool {
        false
    }

    /// Which side of a read-write lock this is (`"read"`, `"write"`), for the report of a
    /// request that waited for its own task; `None` for the other kinds.
    fn rw_side(&self) -> Option<&'static str> {
        None
    }

    /// Whether the calls by holder value act on this kind's entry (one key's string entry).
    fn by_holder(&self) -> bool {
        false
    }

    /// Whether a release may hand the lock to a waiter of the releasing client itself (see
    /// `wakeup::handoff`).
    fn hands_off(&self) -> bool {
        false
    }

    /// Whether a failed attempt waits for its rollback's answers (see `take::attempt`'s
    /// `give_back`) rather than leaving them to finish in the background.
    fn waits_for_rollback(&self) -> bool {
        false
    }

    /// Whether a rollback's answer on one node says it gave the key straight back to the
    /// request, first in line (a fair request).
    fn given_back(&self, _answer: &Value) -> bool {
        false
    }
}

/// Where a waiting request stands, for the kinds that keep their waiters in a line (a fair
/// lock's ticket and round): the request's progress, kept by the waiting loop, never part of
/// what a lease holds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Standing {
    /// Its place in line, once drawn.
    pub(crate) ticket: Option<u64>,
    /// Its round: raised before each attempt and each hand-off taken (0 before the first).
    pub(crate) round: u64,
    /// Whether it will wait, and so draws a ticket when its first attempt is refused (a
    /// single attempt does not).
    pub(crate) draws: bool,
}

/// What one acquisition holds: one of the kinds.
#[derive(Clone)]
pub(crate) enum Shape {
    /// One key: the mutex.
    Mutex(Mutex),
    /// Several keys taken as one.
    Set(Set),
    /// A permit of a semaphore.
    Permit(Permit),
    /// A reader of a read-write lock.
    Read(Read),
    /// The writer of a read-write lock.
    Write(Write),
    /// A fair lock.
    Fair(Fair),
}

impl Shape {
    /// The kind: every operation below goes to it from here.
    pub(crate) fn kind(&self) -> &dyn Kind {
        match self {
            Shape::Mutex(k) => k,
            Shape::Set(k) => k,
            Shape::Permit(k) => k,
            Shape::Read(k) => k,
            Shape::Write(k) => k,
            Shape::Fair(k) => k,
        }
    }

    /// A mutex on `key`.
    pub(crate) fn mutex(key: Key) -> Shape {
        Shape::Mutex(Mutex { key })
    }

    /// The first key (the semaphore's key; the smallest key of a set): what logs, reentrant
    /// owners and [`LockGuard::key`](crate::LockGuard::key) name.
    pub(crate) fn primary(&self) -> &Key {
        &self.kind().keys()[0]
    }

    /// Every key held, in order.
    pub(crate) fn keys(&self) -> &[Key] {
        self.kind().keys()
    }

    /// See [`Kind::acquire`].
    pub(crate) fn acquire(
        &self,
        holder: &str,
        ttl_ms: &str,
        standing: &Standing,
    ) -> (Call, Reader) {
        self.kind().acquire(holder, ttl_ms, standing)
    }

    /// The shape of a single attempt, which does not wait: it leaves no pending-writer mark
    /// behind to keep readers out.
    pub(crate) fn single_attempt(&mut self) {
        if let Shape::Write(w) = self {
            w.waiter = None;
        }
    }

    /// An extend ([`Kind::extend`]), which also moves the holder record with `recorded` (the
    /// holder published one).
    pub(crate) fn extend_with_record(&self, holder: &str, ttl_ms: &str, recorded: bool) -> Call {
        match recorded {
            true => self.kind().extend_recorded(holder, ttl_ms),
            false => self.kind().extend(holder, ttl_ms),
        }
    }

    /// See [`Kind::publish`].
    pub(crate) fn publish(&self, holder: &str, version: u64, fields: &[(&str, &str)]) -> Call {
        self.kind().publish(holder, version, fields)
    }

    /// A release, or a rollback, with no waiter to hand the lock to (see [`Kind::release`]).
    pub(crate) fn release(&self, holder: &str, notice: Notice) -> Call {
        self.kind().release(holder, notice, &[]).0
    }

    /// See [`Kind::release`].
    pub(crate) fn release_handing_off(
        &self,
        holder: &str,
        notice: Notice,
        sure: &[(Arc<str>, u64)],
    ) -> (Call, Reader) {
        self.kind().release(holder, notice, sure)
    }

    /// See [`Kind::repair`].
    pub(crate) fn repair(&self, holder: &str, ms: &str) -> (Call, fn(&Value) -> bool) {
        self.kind().repair(holder, ms)
    }

    /// See [`Kind::fence_increment`].
    pub(crate) fn fence_increment(&self) -> (Call, Reader) {
        self.kind().fence_increment()
    }

    /// See [`Kind::fence_write`].
    pub(crate) fn fence_write(&self, token: &str) -> Call {
        self.kind().fence_write(token)
    }

    /// See [`Kind::withdraw`].
    pub(crate) fn withdraw(&self) -> Option<Call> {
        self.kind().withdraw()
    }

    /// See [`Kind::attempt_holder`].
    pub(crate) fn attempt_holder(&self) -> Option<Holder> {
        self.kind().attempt_holder()
    }

    /// See [`Kind::keeps_a_place`].
    pub(crate) fn keeps_a_place(&self) -> bool {
        self.kind().keeps_a_place()
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kind().fmt(f)
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// Byte slices of owned keys, for a call's KEYS.
pub(crate) fn refs(keys: &[Vec<u8>]) -> Vec<&[u8]> {
    keys.iter().map(Vec::as_slice).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_listed_once_and_has_no_comment_left_on_the_wire() {
        let all: Vec<&LockScript> = scripts().collect();
        let mut hashes: Vec<&str> = all.iter().map(|s| s.hash()).collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), all.len(), "a script listed twice");
        for s in &all {
            assert!(
                !s.source().contains("\n--"),
                "{}: a comment is sent",
                s.name()
            );
            assert!(s.source().trim_start().len() > 10, "{}: empty", s.name());
        }
    }
}
