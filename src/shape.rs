//! What one acquisition holds on the nodes (docs/DESIGN.md, "Lock family"): one key (the
//! mutex), a set of keys taken as one (multi-key lock), a permit of a semaphore, or a read or
//! write hold of a read-write lock; and for
//! each, the calls that acquire, extend, release, repair and fence it, and how to read their
//! answers. The acquire path, the lease, the watchdog and the waiters are written once
//! against it, so every primitive keeps the same ordering rules and guard semantics.

use std::fmt;
use std::sync::Arc;

use redis::Value;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::fanout::{read_acquire, read_counter, read_drawn, read_flag, read_grant, Answer};
use crate::key::Key;
use crate::scripts::{
    Call, EXTEND, FAIR_ACQUIRE, FAIR_RELEASE, FAIR_WITHDRAW, FENCE_MAX, PERMIT_ACQUIRE,
    PERMIT_EXTEND, PERMIT_RELEASE, PERMIT_REPAIR, READ_ACQUIRE, READ_RELEASE, READ_REPAIR, RELEASE,
    SET_ACQUIRE, SET_EXTEND, SET_FENCE_INCR, SET_FENCE_MAX, SET_RELEASE, SET_REPAIR, WRITE_ACQUIRE,
    WRITE_RELEASE, WRITE_REPAIR, WRITE_WITHDRAW,
};

/// The most keys a multi-key lock may take at once (every key travels in each request).
pub const MAX_SET_KEYS: usize = 64;

/// How a node's answer to an acquire is read.
pub(crate) type Reader = fn(&Value) -> Option<Answer>;

/// What one acquisition holds.
#[derive(Clone)]
pub(crate) enum Shape {
    /// One key: the mutex. Its calls are the native `SET NX PX` and the original scripts.
    Single(Key),
    /// Several keys taken as one (sorted, distinct, at least two): one script per node for
    /// the whole set.
    Set(Arc<[Key]>),
    /// One permit of a semaphore of `permits` on `key` (a sorted set on each node).
    Permit { key: Key, permits: u32 },
    /// A reader of the read-write lock on `key`: a member of the readers' sorted set
    /// (`quorum-lock:readers:K`) on each node.
    Read(Key),
    /// The writer of the read-write lock on `key`: the holder value at `key` itself. `waiter`
    /// is the id of a waiting request, the value of its pending-writer mark
    /// (`quorum-lock:writer-waiting:K`); `None` for a single attempt, which sets no mark.
    /// `mark_ms` is the mark's lease (the client's queue lease), in ms.
    Write {
        key: Key,
        waiter: Option<Arc<str>>,
        mark_ms: Arc<str>,
    },
    /// A fair lock on `key`: the holder value at `key`, as the mutex's, given in the order of
    /// tickets (see [`Fair`]).
    Fair(Fair),
}

/// A request for a fair lock: what its attempts, its place in line and a release's hand-off
/// to it share.
#[derive(Clone)]
pub(crate) struct Fair {
    pub(crate) key: Key,
    /// The request's id: its member in the line, named by the grant notices (not a secret).
    pub(crate) waiter: Arc<str>,
    /// The request's holder value, one for all its attempts: a release that hands the key to
    /// the request sets this value, which the request's next attempt then recognises as its
    /// own. Attempts are still told apart where it matters: a rollback is written before the
    /// next attempt on every connection (ordering invariant 5).
    pub(crate) holder: Arc<str>,
    /// Its place in line, once drawn (after a first attempt without one was refused).
    pub(crate) ticket: Option<u64>,
    /// Whether the request will wait, and so draws a ticket when its first attempt is
    /// refused (a single attempt does not).
    pub(crate) draws: bool,
    /// The queue lease, in ms, as the scripts take it.
    pub(crate) queue_lease_ms: Arc<str>,
    /// The claim window, in ms: how long a short grant to this request lasts (see
    /// `scripts::FAIR_ACQUIRE`).
    pub(crate) claim_ms: Arc<str>,
}

impl Fair {
    /// How a fair request's holder value starts: `fair:<waiter id>:<128 random bits>`.
    pub(crate) const HOLDER_PREFIX: &'static str = "fair:";

    /// The waiter id in a fair request's holder value, if `holder` is one.
    pub(crate) fn waiter_of(holder: &str) -> Option<&str> {
        let rest = holder.strip_prefix(Self::HOLDER_PREFIX)?;
        let (waiter, secret) = rest.split_once(':')?;
        (!waiter.is_empty() && !secret.is_empty()).then_some(waiter)
    }
}

/// Who a release's notices are for (see the release scripts).
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

impl Shape {
    /// A set of keys taken as one: checked one by one ([`Key::new`]), deduplicated and
    /// sorted (the order a caller names them in does not matter); a set of one key is the
    /// mutex itself.
    pub(crate) fn set(keys: &[Vec<u8>]) -> Result<Shape> {
        let invalid = |reason: String| Err(Error::InvalidKey { reason });
        if keys.is_empty() {
            return invalid("a multi-key lock needs at least one key".into());
        }
        let mut checked = keys
            .iter()
            .map(|k| Key::new(k))
            .collect::<Result<Vec<Key>>>()?;
        checked.sort_by(|a, b| a.bytes().cmp(b.bytes()));
        checked.dedup();
        if checked.len() > MAX_SET_KEYS {
            return invalid(format!(
                "{} distinct keys, more than the {MAX_SET_KEYS} a multi-key lock may take",
                checked.len()
            ));
        }
        if checked.len() == 1 {
            return Ok(Shape::Single(checked.remove(0)));
        }
        Ok(Shape::Set(checked.into()))
    }

    /// A permit of a semaphore of `permits`. More than one permit needs [`Quorum::All`]
    /// (docs/DESIGN.md, "Lock family"), unless `checked` is false (the test kit's negative
    /// control).
    ///
    /// [`Quorum::All`]: crate::Quorum::All
    pub(crate) fn permit(
        key: &[u8],
        permits: u32,
        config: &Config,
        nodes: usize,
        checked: bool,
    ) -> Result<Shape> {
        let key = Key::new(key)?;
        if permits == 0 {
            return Err(Error::InvalidConfig {
                field: "permits",
                reason: "a semaphore needs at least one permit".into(),
            });
        }
        let q = config.required;
        if checked && permits > 1 && q < nodes {
            let most = (nodes as u64 * u64::from(permits)) / q as u64;
            return Err(Error::InvalidConfig {
                field: "permits",
                reason: format!(
                    "a semaphore of {permits} permits needs Quorum::All: with a quorum of {q} \
                     of {nodes} nodes, each node admits {permits} holders and each holder \
                     needs {q} nodes, so up to {nodes} x {permits} / {q} = {most} clients can \
                     hold a permit at once (the quorums of different holders need not \
                     intersect in a node that counts them all); one permit is a mutex and \
                     works under any quorum"
                ),
            });
        }
        Ok(Shape::Permit { key, permits })
    }

    /// The first key (the semaphore's key; the smallest key of a set): what logs, reentrant
    /// owners and [`LockGuard::key`](crate::LockGuard::key) name.
    pub(crate) fn primary(&self) -> &Key {
        match self {
            Shape::Single(key)
            | Shape::Permit { key, .. }
            | Shape::Read(key)
            | Shape::Write { key, .. }
            | Shape::Fair(Fair { key, .. }) => key,
            Shape::Set(keys) => &keys[0],
        }
    }

    /// Every key held, in order.
    pub(crate) fn keys(&self) -> &[Key] {
        match self {
            Shape::Single(key)
            | Shape::Permit { key, .. }
            | Shape::Read(key)
            | Shape::Write { key, .. }
            | Shape::Fair(Fair { key, .. }) => std::slice::from_ref(key),
            Shape::Set(keys) => keys,
        }
    }

    fn key_bytes(&self) -> Vec<&[u8]> {
        self.keys().iter().map(Key::bytes).collect()
    }

    fn counters(&self) -> Vec<Vec<u8>> {
        self.keys().iter().map(Key::fence_key).collect()
    }

    /// The acquire of one attempt, and how to read its answers.
    pub(crate) fn acquire(&self, holder: &str, ttl_ms: &str) -> (Call, Reader) {
        let (h, ttl) = (holder.as_bytes(), ttl_ms.as_bytes());
        match self {
            Shape::Single(key) => (
                Call::set_if_absent("acquire", key.bytes(), h, ttl),
                read_acquire,
            ),
            Shape::Set(_) => (
                Call::with_keys(&SET_ACQUIRE, &self.key_bytes(), &[h, ttl]),
                read_flag,
            ),
            Shape::Permit { key, permits } => {
                let p = permits.to_string();
                (
                    Call::new(&PERMIT_ACQUIRE, key.bytes(), &[h, ttl, p.as_bytes()]),
                    read_flag,
                )
            }
            Shape::Read(key) => (
                Call::with_keys(&READ_ACQUIRE, &rw_keys(key).refs(), &[h, ttl]),
                read_flag,
            ),
            Shape::Write {
                key,
                waiter,
                mark_ms,
            } => {
                let w = waiter.as_deref().unwrap_or("").as_bytes();
                (
                    Call::with_keys(
                        &WRITE_ACQUIRE,
                        &rw_keys(key).refs(),
                        &[h, ttl, w, mark_ms.as_bytes()],
                    ),
                    read_flag,
                )
            }
            Shape::Fair(fair) => {
                let ticket = match (fair.ticket, fair.draws) {
                    (Some(t), _) => t.to_string(),
                    (None, true) => "?".to_string(),
                    (None, false) => String::new(),
                };
                let keys = fair_keys(&fair.key);
                let argv: [&[u8]; 7] = [
                    h,
                    ttl,
                    fair.waiter.as_bytes(),
                    ticket.as_bytes(),
                    fair.queue_lease_ms.as_bytes(),
                    fair.claim_ms.as_bytes(),
                    fair.key.release_channel(),
                ];
                (
                    Call::with_keys(&FAIR_ACQUIRE, &refs(&keys), &argv),
                    read_drawn,
                )
            }
        }
    }

    /// The holder value every attempt of the request uses, when it has one (a fair lock);
    /// otherwise each attempt draws its own.
    pub(crate) fn request_holder(&self) -> Option<&str> {
        match self {
            Shape::Fair(fair) => Some(&fair.holder),
            _ => None,
        }
    }

    /// Whether a waiting request keeps something on the nodes that lasts a queue lease and
    /// that it renews with each attempt: a fair waiter's place in line, a waiting writer's
    /// pending mark.
    pub(crate) fn keeps_a_place(&self) -> bool {
        matches!(
            self,
            Shape::Fair(_)
                | Shape::Write {
                    waiter: Some(_),
                    ..
                }
        )
    }

    /// A waiting writer's withdrawal of its pending mark, when its request gives up; `None`
    /// for every other shape.
    pub(crate) fn withdraw(&self) -> Option<Call> {
        match self {
            Shape::Write {
                key,
                waiter: Some(waiter),
                ..
            } => Some(Call::with_keys(
                &WRITE_WITHDRAW,
                &rw_keys(key).refs(),
                &[waiter.as_bytes(), key.release_channel()],
            )),
            Shape::Fair(fair) => Some(Call::with_keys(
                &FAIR_WITHDRAW,
                &refs(&fair_keys(&fair.key)),
                &[
                    fair.waiter.as_bytes(),
                    fair.holder.as_bytes(),
                    fair.key.release_channel(),
                ],
            )),
            _ => None,
        }
    }

    /// Compare-and-extend: acts only where this holder holds everything; answers 1 / 0.
    pub(crate) fn extend(&self, holder: &str, ttl_ms: &str) -> Call {
        let argv: [&[u8]; 2] = [holder.as_bytes(), ttl_ms.as_bytes()];
        match self {
            Shape::Single(key) => Call::new(&EXTEND, key.bytes(), &argv),
            Shape::Set(_) => Call::with_keys(&SET_EXTEND, &self.key_bytes(), &argv),
            Shape::Permit { key, .. } => Call::new(&PERMIT_EXTEND, key.bytes(), &argv),
            // A reader's member is extended as a permit is (`ZADD XX`, never re-added); the
            // writer's entry as the mutex's.
            Shape::Read(key) => Call::new(&PERMIT_EXTEND, &key.readers_key(), &argv),
            Shape::Write { key, .. } | Shape::Fair(Fair { key, .. }) => {
                Call::new(&EXTEND, key.bytes(), &argv)
            }
        }
    }

    /// Compare-and-delete with release notices; answers 1 / 0.
    pub(crate) fn release(&self, holder: &str, notice: Notice) -> Call {
        self.release_handing_off(holder, notice, &[])
    }

    /// [`release`](Self::release), for a fair lock naming the waiters of the releasing client
    /// that it may hand the lock to itself (`sure`, see `fair`): the nodes grant them the
    /// whole TTL, every other waiter a short grant. Ignored by every other shape.
    pub(crate) fn release_handing_off(
        &self,
        holder: &str,
        notice: Notice,
        sure: &[Arc<str>],
    ) -> Call {
        let h = holder.as_bytes();
        match self {
            Shape::Single(key) => Call::new(
                &RELEASE,
                key.bytes(),
                &[h, key.release_channel(), notice.arg()],
            ),
            Shape::Set(keys) => {
                let mut argv = vec![h, notice.arg()];
                argv.extend(keys.iter().map(Key::release_channel));
                Call::with_keys(&SET_RELEASE, &self.key_bytes(), &argv)
            }
            Shape::Permit { key, permits } => {
                let p = permits.to_string();
                Call::new(
                    &PERMIT_RELEASE,
                    key.bytes(),
                    &[h, key.release_channel(), notice.arg(), p.as_bytes()],
                )
            }
            Shape::Read(key) => Call::with_keys(
                &READ_RELEASE,
                &rw_keys(key).refs(),
                &[h, key.release_channel(), notice.arg()],
            ),
            Shape::Write { key, waiter, .. } => {
                let w = waiter.as_deref().unwrap_or("").as_bytes();
                Call::with_keys(
                    &WRITE_RELEASE,
                    &rw_keys(key).refs(),
                    &[h, key.release_channel(), notice.arg(), w],
                )
            }
            Shape::Fair(fair) => {
                let mut argv = vec![
                    h,
                    fair.key.release_channel(),
                    notice.arg(),
                    fair.waiter.as_bytes(),
                ];
                argv.extend(sure.iter().map(|w| w.as_bytes()));
                Call::with_keys(&FAIR_RELEASE, &refs(&fair_keys(&fair.key)), &argv)
            }
        }
    }

    /// How a release's answers are read: a fair lock's may name the waiter it handed the key
    /// to.
    pub(crate) fn release_reader(&self) -> Reader {
        match self {
            Shape::Fair(_) => read_grant,
            _ => read_flag,
        }
    }

    /// Puts back what a node lacks, set-if-absent, for `ms` (the remaining validity).
    pub(crate) fn repair(&self, holder: &str, ms: &str) -> Call {
        let (h, ms) = (holder.as_bytes(), ms.as_bytes());
        match self {
            Shape::Single(key) | Shape::Fair(Fair { key, .. }) => {
                Call::set_if_absent("repair", key.bytes(), h, ms)
            }
            Shape::Set(_) => Call::with_keys(&SET_REPAIR, &self.key_bytes(), &[h, ms]),
            Shape::Permit { key, permits } => {
                let p = permits.to_string();
                Call::new(&PERMIT_REPAIR, key.bytes(), &[h, ms, p.as_bytes()])
            }
            Shape::Read(key) => Call::with_keys(&READ_REPAIR, &rw_keys(key).refs(), &[h, ms]),
            Shape::Write { key, .. } => {
                Call::with_keys(&WRITE_REPAIR, &rw_keys(key).refs(), &[h, ms])
            }
        }
    }

    /// Whether a repair's answer says it put an entry back.
    pub(crate) fn repaired(&self, answer: &Value) -> bool {
        match self {
            Shape::Single(_) | Shape::Fair(_) => matches!(answer, Value::Okay),
            _ => matches!(answer, Value::Int(1)),
        }
    }

    /// The fencing increment (after the quorum), read with [`read_counter`]: one counter's
    /// `INCR`, or a set's counters all incremented, answering the largest. Readers and the
    /// writer of a read-write lock use the key's own counter, the mutex's.
    pub(crate) fn fence_increment(&self) -> (Call, Reader) {
        let call = match self {
            Shape::Set(_) => {
                let counters = self.counters();
                let refs: Vec<&[u8]> = counters.iter().map(Vec::as_slice).collect();
                Call::with_keys(&SET_FENCE_INCR, &refs, &[])
            }
            _ => Call::increment("fence-incr", &self.primary().fence_key()),
        };
        (call, read_counter)
    }

    /// The fencing write-back: every counter raised to `token` (never lowered).
    pub(crate) fn fence_write(&self, token: &str) -> Call {
        let counters = self.counters();
        let refs: Vec<&[u8]> = counters.iter().map(Vec::as_slice).collect();
        match self {
            Shape::Set(_) => Call::with_keys(&SET_FENCE_MAX, &refs, &[token.as_bytes()]),
            _ => Call::new(&FENCE_MAX, refs[0], &[token.as_bytes()]),
        }
    }
}

/// The keys of a read-write lock's scripts: the writer's entry, the readers' sorted set, the
/// pending-writer mark.
struct RwKeys([Vec<u8>; 3]);

impl RwKeys {
    fn refs(&self) -> [&[u8]; 3] {
        [&self.0[0], &self.0[1], &self.0[2]]
    }
}

fn rw_keys(key: &Key) -> RwKeys {
    RwKeys([
        key.bytes().to_vec(),
        key.readers_key(),
        key.writer_waiting_key(),
    ])
}

/// The keys of a fair lock's scripts: the key, its line and its ticket counter (see
/// `scripts::FAIR_ACQUIRE`).
fn fair_keys(key: &Key) -> Vec<Vec<u8>> {
    let mut keys = Vec::with_capacity(5);
    keys.push(key.bytes().to_vec());
    keys.extend(key.queue_keys());
    keys.push(key.ticket_key());
    keys
}

fn refs(keys: &[Vec<u8>]) -> Vec<&[u8]> {
    keys.iter().map(Vec::as_slice).collect()
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Single(key) => write!(f, "{key}"),
            // The first key and how many more: a set may hold 64 keys of 64 KiB each, too much
            // for every log line and error.
            Shape::Set(keys) => match keys.split_first() {
                Some((first, [])) => write!(f, "{{{first}}}"),
                Some((first, rest)) => write!(f, "{{{first} and {} more}}", rest.len()),
                None => f.write_str("{}"),
            },
            Shape::Permit { key, permits } => write!(f, "{key} (1 of {permits} permits)"),
            Shape::Read(key) => write!(f, "{key} (read)"),
            Shape::Write { key, .. } => write!(f, "{key} (write)"),
            Shape::Fair(Fair { key, .. }) => write!(f, "{key} (fair)"),
        }
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_sorted_deduplicated_and_checked() {
        let set = Shape::set(&[b"b".to_vec(), b"a".to_vec(), b"b".to_vec()]).unwrap();
        assert_eq!(set.to_string(), "{a and 1 more}");
        assert!(matches!(set, Shape::Set(_)));
        assert!(matches!(
            Shape::set(&[b"a".to_vec(), b"a".to_vec()]).unwrap(),
            Shape::Single(_)
        ));
        assert!(Shape::set(&[]).is_err());
        assert!(Shape::set(&[b"a".to_vec(), b"quorum-lock:x".to_vec()]).is_err());
        let many: Vec<Vec<u8>> = (0..=MAX_SET_KEYS).map(|i| i.to_string().into()).collect();
        assert!(matches!(Shape::set(&many), Err(Error::InvalidKey { .. })));
        assert!(Shape::set(&many[..MAX_SET_KEYS]).is_ok());
    }
}
