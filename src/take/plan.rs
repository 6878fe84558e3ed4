//! A request as the caller gave it ([`Spec`]), and the checks that turn it into the plan of
//! its attempts ([`Plan`]): its shape, TTL, wait and holder values.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::family::{Fair, Permit, Read, Set, Shape, Write};
use crate::hold::reentry::HoldTable;
use crate::node::Node;
use crate::rules::config::check_duration;
use crate::rules::key::{self, Key};
use crate::state::ClientState;

/// How a request's lock is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseMode {
    /// A fixed TTL; it expires unless extended.
    Fixed(Duration),
    /// Renewed by the watchdog; the lease length, or the client's default.
    Watchdog(Option<Duration>),
}

/// What a request asks for, as the caller named it (checked into a [`Shape`]).
#[derive(Clone)]
pub(crate) enum Target {
    /// One key (the mutex).
    Key(Vec<u8>),
    /// Several keys taken as one.
    Keys(Vec<Vec<u8>>),
    /// A permit of a semaphore; `checked: false` skips the quorum check (test kit only).
    Permit {
        key: Vec<u8>,
        permits: u32,
        checked: bool,
    },
    /// A permit of a semaphore of `permits` slots, each a mutex (`take::slots`).
    Slots { key: Vec<u8>, permits: u32 },
    /// A read lock of the read-write lock on a key.
    Read(Vec<u8>),
    /// The write lock of the read-write lock on a key.
    Write(Vec<u8>),
    /// The fair lock on a key.
    Fair(Vec<u8>),
}

// Keys shown as lossy UTF-8, as a lock request always showed its key.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lossy = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
        match self {
            Target::Key(key) => write!(f, "{:?}", lossy(key)),
            Target::Keys(keys) => f
                .debug_list()
                .entries(keys.iter().map(|k| lossy(k)))
                .finish(),
            Target::Permit { key, permits, .. } => f
                .debug_struct("Permit")
                .field("key", &lossy(key))
                .field("permits", permits)
                .finish(),
            Target::Slots { key, permits } => f
                .debug_struct("Slots")
                .field("key", &lossy(key))
                .field("permits", permits)
                .finish(),
            Target::Read(key) => f.debug_tuple("Read").field(&lossy(key)).finish(),
            Target::Write(key) => f.debug_tuple("Write").field(&lossy(key)).finish(),
            Target::Fair(key) => f.debug_tuple("Fair").field(&lossy(key)).finish(),
        }
    }
}

/// A request's settings as the caller gave them (see [`LockRequest`](crate::LockRequest)).
pub(crate) struct Spec<'a> {
    pub(crate) target: Target,
    pub(crate) lease: LeaseMode,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) wait: Option<Duration>,
    pub(crate) fencing: bool,
    pub(crate) owner: Option<&'a Arc<HoldTable>>,
    /// The public label to publish once held (see `client::who`).
    pub(crate) label: Option<String>,
}

/// A checked request.
pub(crate) struct Plan<'a> {
    pub(crate) shape: Shape,
    pub(crate) ttl: Duration,
    /// The TTL as the nodes take it (ms, with the lock delay), encoded once for every attempt.
    pub(crate) ttl_ms: String,
    pub(crate) watchdog: bool,
    pub(crate) fencing: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) wait: Duration,
    pub(crate) owner: Option<&'a Arc<HoldTable>>,
}

/// Checks a request's key and durations against the client's settings.
pub(crate) fn plan<'a>(state: &ClientState, spec: Spec<'a>) -> Result<Plan<'a>> {
    let config = &state.config;
    let shape = match &spec.target {
        Target::Key(key) => Shape::mutex(Key::new(key)?),
        Target::Keys(keys) => Set::shape(keys)?,
        Target::Permit {
            key,
            permits,
            checked,
        } => Permit::shape(key, *permits, config, state.nodes.len(), *checked)?,
        // Taken slot by slot, each as a mutex (`take::slots`), never as one plan.
        Target::Slots { .. } => {
            return Err(Error::InvalidConfig {
                field: "permits",
                reason: "a semaphore of slots is taken one slot at a time".into(),
            })
        }
        Target::Read(key) => Shape::Read(Read {
            key: Key::new(key)?,
        }),
        // The request's id, the value of its pending-writer mark: one for all its attempts
        // (each attempt has its own holder value), so that the mark outlives the rollback of
        // a refused attempt and stops new readers until the writer gets in or gives up.
        Target::Write(key) => Shape::Write(Write {
            key: Key::new(key)?,
            waiter: Some(uuid::Uuid::new_v4().simple().to_string().into()),
            mark_ms: config.queue_lease.as_millis().to_string().into(),
        }),
        // The request's id and base, one each for all its attempts (see `Fair`).
        Target::Fair(key) => Shape::Fair(Fair::new(Key::new(key)?, state.client_tag(), config)),
    };
    if state.nodes.iter().any(Node::is_cluster) {
        one_slot(shape.keys())?;
    }

    // Read-write guards are not reentrant: only an `Owner` sets one, and its requests are
    // for one key's mutex. A nested read or write would share a lease of the wrong kind.
    debug_assert!(
        spec.owner.is_none() || matches!(shape, Shape::Mutex(_)),
        "an owner's request is for one key's mutex"
    );
    let (mut ttl, mut watchdog) = match spec.lease {
        LeaseMode::Fixed(ttl) => (ttl, false),
        LeaseMode::Watchdog(lease) => (lease.unwrap_or(config.watchdog_lease), true),
    };
    // A maximum hold within the first lease (or the fixed TTL) is that lease: the lock must
    // not outlive it, and nothing is left for the watchdog to renew.
    let mut cut_by_max_hold = false;
    if let Some(max_hold) = spec.max_hold {
        check_duration("max_hold", max_hold)?;
        if max_hold.is_zero() {
            return Err(Error::InvalidConfig {
                field: "max_hold",
                reason: "must be positive".into(),
            });
        }
        if max_hold <= ttl {
            (ttl, watchdog, cut_by_max_hold) = (max_hold, false, true);
        }
    }
    let ttl = config.check_ttl(ttl).map_err(|e| match e {
        Error::InvalidTtl { reason, .. } if cut_by_max_hold => Error::InvalidConfig {
            field: "max_hold",
            reason: format!("the lock's first and only lease: {reason}"),
        },
        e => e,
    })?;
    if let Some(wait) = spec.wait {
        check_duration("wait", wait)?;
    }
    Ok(Plan {
        shape,
        ttl_ms: config.node_ttl_ms(ttl),
        ttl,
        watchdog,
        fencing: spec.fencing,
        max_hold: spec.max_hold,
        wait: spec.wait.unwrap_or(config.wait_timeout),
        owner: spec.owner,
    })
}

/// One key as a call that reads or administers it takes it: checked as a lock's key, and on a
/// client with a cluster node as one whose names share its slot.
pub(crate) fn lock_key(state: &ClientState, key: &[u8]) -> Result<Key> {
    let key = Key::new(key)?;
    if state.nodes.iter().any(Node::is_cluster) {
        one_slot(std::slice::from_ref(&key))?;
    }
    Ok(key)
}

/// [`one_slot`] for one key given as bytes (`names::check_cluster_key`).
pub(crate) fn one_slot_key(key: &[u8]) -> Result<()> {
    one_slot(&[Key::new(key)?])
}

/// On a cluster node every key one lock's scripts touch must be in one hash slot: a
/// multi-key lock's keys share a hash tag, and a key's own names (fencing counter, line,
/// readers, channel) carry its hashed part as theirs ([`key::taggable`]).
fn one_slot(keys: &[Key]) -> Result<()> {
    let invalid = |reason: String| Err(Error::InvalidKey { reason });
    if let Some(key) = keys.iter().find(|k| !key::taggable(k.bytes())) {
        return invalid(format!(
            "{key:?} has a '}}' outside a hash tag: on a cluster node its lock's own keys could \
             not share its slot; rename it, or give it a hash tag (the text between its first \
             '{{' and the next '}}' is what a cluster hashes)"
        ));
    }
    let slot = key::slot(keys[0].bytes());
    if let Some(other) = keys.iter().find(|k| key::slot(k.bytes()) != slot) {
        return invalid(format!(
            "keys {:?} and {other:?} are in different hash slots: on a cluster node a \
             multi-key lock's keys must share a hash tag (e.g. {{order:1}}:a and {{order:1}}:b)",
            keys[0]
        ));
    }
    Ok(())
}
