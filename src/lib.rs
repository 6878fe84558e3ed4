#![doc = include_str!(concat!(env!("OUT_DIR"), "/README.md"))]
//!
//! ---
//!
//! # Cancellation
//!
//! Every future may be dropped. A dropped acquire leaves at most entries that expire with
//! their TTL; a dropped [`LockGuard`] is released in the background (never blocking the
//! dropping thread); without a tokio runtime its entries expire with their TTL. Each public
//! async function documents its own cancel safety.
//!
//! # Feature flags
//!
//! - `tls`: `rediss://` nodes, through rustls (ring's crypto provider, unless the application
//!   installed another), with `Builder::tls_root_certificate` and
//!   `Builder::tls_client_certificate` for a private CA and client certificates (see
//!   [TLS](#tls)); in the test kit, TLS fleets (`testkit::FleetTls`).
//! - `testkit`: [`testkit`], real `redis-server` fleets with failure injection (kill, pause,
//!   restart, fault proxy, clock jumps), and history recording and checking, for your own
//!   tests too.
//! - `metrics`: metrics through the [`metrics`](https://docs.rs/metrics) facade (names and
//!   labels in the README's "Metrics" table; no exporter is chosen for you).
//! - `cli`: the `quorum-lock` command (a binary; it turns on `tls` and `metrics`).
//!
//! # Where things are
//!
//! A folder per layer, listed bottom up: each imports only from those above it (the files at
//! the root serve every layer). Each folder's `mod.rs` lists its files.
//!
//! - `rules/`: pure rules, no I/O: quorum sizes and the tally, validated settings and the one
//!   deadline rule (`Config::validity`), keys and their derived names ([`names`]), the retry
//!   pause, the stop-or-wait handshake (also checked by loom), the node checks ([`safety`]).
//! - `family/`: what runs on the nodes, one file per lock kind (calls, reply readers, key
//!   layout; the Lua in `family/lua/`), and the seam (`Kind`) through which every layer
//!   above reaches a kind.
//! - `node/`: one node, a master or a whole cluster: its address and TLS, connection and
//!   reconnect, one request, the circuit breaker and backlog, the cluster's slot map, the
//!   probe, [`NodeClient`].
//! - `fanout/`: one call to every node, decided at quorum (RedLock steps 2 and 4), and the
//!   ordering invariants that keep a lease's later calls behind its earlier ones.
//! - `wakeup/`: pub/sub release notices and the waiters they wake, the fair lock's hand-off
//!   to a waiter of the same client, and the courtesy of a client that just released.
//! - `take/`: taking a lock: a request's plan, one attempt (RedLock steps 1 to 5), the fair
//!   request's place, tickets and claim, the ordered approach, the waiting loop.
//! - `hold/`: holding a lock: the lease (deadline, loss, renew, repair, release), the guard,
//!   the watchdog, the loss signal, reentry, the calls by holder value.
//! - `client/`: the public handles: [`QuorumLock`], [`Builder`] with `build()`'s probes,
//!   [`LockRequest`], [`Owner`].
//! - At the root: `error`, `human` (durations as messages show them), `scripts` (a script
//!   call shared by all nodes, EVALSHA or EVAL), `telemetry` (metrics through the `metrics`
//!   facade), `state` (a client's shared state and its stats), `failpoints`.
//!
// The feature-gated modules, linked to docs.rs where this build does not have them (the
// default features' docs build without broken links).
#![cfg_attr(
    not(feature = "testkit"),
    doc = "[`testkit`]: https://docs.rs/quorum-lock/latest/quorum_lock/testkit/index.html"
)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_code)]

mod client;
mod error;
#[cfg(feature = "failpoints")]
pub mod failpoints;
#[cfg(not(feature = "failpoints"))]
mod failpoints;
mod family;
mod fanout;
mod fnv;
mod hold;
mod human;
mod node;
mod rules;
mod scripts;
mod state;
mod take;
mod telemetry;
mod wakeup;

pub use rules::{quorum, safety};

#[cfg(feature = "testkit")]
#[allow(unsafe_code)]
pub mod testkit;

/// The keys the library keeps on the nodes for a lock key, beside the key itself: for
/// diagnostics (`quorum-lock status` reads them) and ACL rules. Part of the stable interface:
/// a change of these names is a breaking change, said so in the release notes.
pub mod names {
    use crate::rules::key::{derived, kept};

    /// The fencing counter (every kind of lock on the key shares it; no TTL).
    pub fn fencing_counter(key: &[u8]) -> Vec<u8> {
        derived(kept::FENCE, key)
    }

    /// The pub/sub channel on which releases of the key are announced.
    pub fn release_channel(key: &[u8]) -> Vec<u8> {
        derived(kept::RELEASED, key)
    }

    /// A read-write lock's readers (a sorted set: holder value -> expiry in the node's ms).
    pub fn readers(key: &[u8]) -> Vec<u8> {
        derived(kept::READERS, key)
    }

    /// A read-write lock's waiting writer's pending mark (the request's id).
    pub fn writer_mark(key: &[u8]) -> Vec<u8> {
        derived(kept::WRITER_MARK, key)
    }

    /// A fair lock's line: waiter ids by ticket.
    pub fn line(key: &[u8]) -> Vec<u8> {
        derived(kept::LINE, key)
    }

    /// A fair lock's waiters' queue leases (waiter id -> expiry in the node's ms).
    pub fn line_leases(key: &[u8]) -> Vec<u8> {
        derived(kept::LINE_LEASES, key)
    }

    /// What a fair lock's release needs to hand the key to each waiter.
    pub fn line_entries(key: &[u8]) -> Vec<u8> {
        derived(kept::LINE_ENTRIES, key)
    }

    /// A fair lock's ticket counter.
    pub fn tickets(key: &[u8]) -> Vec<u8> {
        derived(kept::TICKETS, key)
    }

    /// The holder record (a hash): what the holder of a mutex, fair or write lock published
    /// about itself (a label, since when; an election's leader value and term), beside the
    /// SHA1 of its holder value (never the value). Expires with the entry; shown only while
    /// it names the entry's holder.
    pub fn holder_record(key: &[u8]) -> Vec<u8> {
        derived(kept::HOLDER, key)
    }

    /// Slot `i` (from 0) of the semaphore `key` of more than one permit
    /// ([`QuorumLock::semaphore`](crate::QuorumLock::semaphore)): `key#i`, a mutex's key.
    pub fn semaphore_slot(key: &[u8], i: u32) -> Vec<u8> {
        crate::take::slots::slot_key(key, i)
    }

    /// The pub/sub channel of notices to holders, one for every key: `break <digest> <key>`
    /// and `ask <digest> <key>`, the digest the SHA1 hex of the holder value
    /// ([`QuorumLock::break_lock`](crate::QuorumLock::break_lock),
    /// [`QuorumLock::request_release`](crate::QuorumLock::request_release)).
    pub fn holder_notices() -> &'static str {
        crate::rules::key::HOLDER_NOTICES
    }

    /// The pub/sub channel on which a new holder record of the key is announced (for an
    /// election's observers).
    pub fn holder_channel(key: &[u8]) -> Vec<u8> {
        derived(kept::HOLDER_CHANNEL, key)
    }

    /// Whether `key` can be locked on a client with a cluster node: the check every lock
    /// call makes there before anything is sent (`quorum-lock status` makes it too). A key
    /// whose hashed part holds a `}` is refused: its own names could not share its slot.
    ///
    /// # Errors
    /// [`Error::InvalidKey`](crate::Error::InvalidKey), saying why and what to do.
    pub fn check_cluster_key(key: &[u8]) -> crate::Result<()> {
        crate::take::plan::one_slot_key(key)
    }

    /// The Redis Cluster hash slot of `key` (`CLUSTER KEYSLOT`): on a cluster node, every
    /// name above for `key` is in this slot too.
    pub fn hash_slot(key: &[u8]) -> u16 {
        crate::rules::key::slot(key)
    }
}

/// The redis crate (1.x), re-exported on purpose: [`NodeClient::client`] hands out its
/// `Client` for connections of one's own, and [`NodeClient::failure`] reads its errors. Use
/// this path rather than a dependency of your own, so that the versions agree.
pub use redis;

/// The project's notes, as the repository keeps them in `docs/` and at its root.
pub mod docs {
    /// What must hold, how the algorithms keep it, and where each rule lives
    /// (docs/DESIGN.md).
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/DESIGN.md"))]
    pub mod design {}

    /// The safety argument, the tolerance table, the model check and how it is all tested
    /// (docs/SAFETY.md).
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/SAFETY.md"))]
    pub mod safety {}

    /// The benchmarks: figures, the commands that produced them, and what is left
    /// (BENCHMARKS.md).
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/BENCHMARKS.md"))]
    pub mod benchmarks {}
}

pub use client::{
    check_public_text, Builder, Election, HeldAs, Holding, Labelled, Leader, Leadership,
    LockRequest, Observer, Owner, QuorumLock, Scoped, MAX_LABEL_LEN, MAX_LEADER_VALUE_LEN,
};
pub use error::{Error, FailureKind, NodeFailure, Op, Result, Unsent};
pub use family::MAX_SET_KEYS;
pub use hold::{LockGuard, LostSignal};
pub use node::NodeClient;
pub use rules::config::{MAX_DURATION, MAX_TTL};
pub use rules::durable::DurableVotes;
pub use rules::holder::{Holder, HolderForm, MAX_HOLDER_LEN};
pub use rules::key::{MAX_KEY_LEN, RESERVED_PREFIX};
pub use rules::quorum::Quorum;
pub use state::Stats;
pub use take::slots::MAX_SLOTS;
#[cfg(feature = "metrics")]
pub use telemetry::describe_metrics;
