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
//! One file per concept (a folder where a concept has parts). Listed bottom up: each module
//! imports only from those above it, with one exception, `builder` and `client`, which name
//! each other as a builder and what it builds do.
//!
//! Pure rules, no I/O:
//! - `quorum`: quorum sizes, drift, validity arithmetic, the tally of node answers.
//! - `human`: durations as messages show them.
//! - `error`: the error enum and the per-node failure.
//! - `key`: the key check, the names derived from a key ([`names`]), the reserved namespace.
//! - `config`: validated settings; `Config::validity`, the one deadline
//!   rule (TTL less elapsed time and drift, against the minimum validity).
//! - `backoff`: the retry pause, of a waiting acquire and of the watchdog.
//! - `progress`: the stop-or-wait handshake of in-flight requests (also checked by loom).
//!
//! What runs on the nodes:
//! - `scripts`: the plumbing: a script, one call shared by all nodes, EVALSHA or EVAL.
//! - `family/`: one file per lock kind, each with its calls, reply readers and key layout:
//!   `mutex.rs`, `set.rs` (multi-key), `permit.rs` (semaphore), `rw.rs` (read-write),
//!   `fair.rs`; their Lua in `family/lua/` (one file per script, named after it, shared
//!   fragments included); `family/mod.rs` dispatches a request's shape to its kind once.
//!
//! Talking to the nodes:
//! - `address`, `tls` (feature): node URLs, passwords kept out of sight, TLS settings.
//! - `safety`: the node checks shared by `build()` and `quorum-lock check`.
//! - `startup`: `build()`'s probes of the nodes, returning at a quorum; the late ones checked
//!   in the background.
//! - `telemetry`: metrics through the `metrics` facade (empty without the feature).
//! - `node/`: one node, a master or a whole cluster: a server's connection and reconnect
//!   (`shard.rs`, `connection.rs`), a cluster's slot map and its primaries (`cluster.rs`),
//!   one request (`send.rs`), the circuit breaker and the bound on what a silent server is
//!   sent (`backlog.rs`), [`NodeClient`].
//! - `ordering`: the rules that keep a lease's later call behind its earlier ones.
//! - `fanout`: one call to every node, decided at quorum (RedLock steps 2 and 4).
//!
//! A client:
//! - `arbiter`: the ordered approach of a waiter that lost (the key's arbiter first), and the
//!   courtesy of a client that just released a key others wait for.
//! - `fair`: the fair lock's line within a client, and a release's hand-off to a waiter.
//! - `wakeup/`: pub/sub release notices (`channel.rs` counts them per release and node, and
//!   grants per waiter; its unit tests are `channel_tests.rs`; `subscriber.rs` keeps one
//!   connection per node) and the waiters they wake.
//! - `state`: a client's shared state, and one record per outcome (stats and metrics).
//!
//! Holding a lock:
//! - `lease`: one acquisition: deadline, loss, renew, repair, release; `lost_signal`: the
//!   loss signal the guarded work waits on.
//! - `watchdog`: renewals of a lock kept without a fixed TTL.
//! - `reentry`, `guard`, `holder`: an owner's held leases; the caller's guard; calls by
//!   holder value, without a guard.
//!
//! Taking a lock:
//! - `plan`: a request checked into the plan of its attempts.
//! - `acquire`: one attempt (RedLock steps 1 to 5: start time, fan-out, validity, quorum,
//!   rollback), fencing tokens, a fair request's claim of a key handed to it.
//! - `waiting`: the waiting loop: attempts, pauses, wake-ups, a fair request's place and
//!   ticket.
//!
//! The public API: `request` ([`LockRequest`]), `owner`, `client` ([`QuorumLock`]),
//! `builder` ([`Builder`]), [`names`], [`safety`], [`quorum`], [`testkit`] (feature).
//!
// The feature-gated modules, linked to docs.rs where this build does not have them (the
// default features' docs build without broken links).
#![cfg_attr(
    not(feature = "testkit"),
    doc = "[`testkit`]: https://docs.rs/quorum-lock/latest/quorum_lock/testkit/index.html"
)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_code)]

mod acquire;
mod address;
mod arbiter;
mod backoff;
mod builder;
mod client;
mod config;
mod error;
mod fair;
mod family;
mod fanout;
mod guard;
mod key;
mod lease;
mod lost_signal;
mod node;
mod ordering;
mod owner;
mod plan;
mod reentry;
mod request;
pub mod safety;
/// The handshake of ordering invariant 4 (see `ordering`). Its code is in `progress.rs`,
/// included here with the standard atomics and, by the loom test (tests/loom_progress.rs),
/// with loom's, so that the code checked is the code that runs.
mod progress {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    include!("progress.rs");
}
#[cfg(feature = "failpoints")]
pub mod failpoints;
#[cfg(not(feature = "failpoints"))]
mod failpoints;
mod holder;
mod human;
pub mod quorum;
mod scripts;
mod startup;
mod state;
mod telemetry;
#[cfg(feature = "tls")]
mod tls;
mod waiting;
mod wakeup;
mod watchdog;

#[cfg(feature = "testkit")]
#[allow(unsafe_code)]
pub mod testkit;

/// The keys the library keeps on the nodes for a lock key, beside the key itself: for
/// diagnostics (`quorum-lock status` reads them) and ACL rules. Part of the stable interface:
/// a change of these names is a breaking change, said so in the release notes.
pub mod names {
    use crate::key::{derived, kept};

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

    /// Whether `key` can be locked on a client with a cluster node: the check every lock
    /// call makes there before anything is sent (`quorum-lock status` makes it too). A key
    /// whose hashed part holds a `}` is refused: its own names could not share its slot.
    ///
    /// # Errors
    /// [`Error::InvalidKey`](crate::Error::InvalidKey), saying why and what to do.
    pub fn check_cluster_key(key: &[u8]) -> crate::Result<()> {
        crate::plan::one_slot_key(key)
    }

    /// The Redis Cluster hash slot of `key` (`CLUSTER KEYSLOT`): on a cluster node, every
    /// name above for `key` is in this slot too.
    pub fn hash_slot(key: &[u8]) -> u16 {
        crate::key::slot(key)
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

pub use builder::Builder;
pub use client::QuorumLock;
pub use config::{MAX_DURATION, MAX_TTL};
pub use error::{Error, FailureKind, NodeFailure, Op, Result, Unsent};
pub use family::MAX_SET_KEYS;
pub use guard::LockGuard;
pub use holder::MAX_HOLDER_LEN;
pub use key::{MAX_KEY_LEN, RESERVED_PREFIX};
pub use lost_signal::LostSignal;
pub use node::NodeClient;
pub use owner::Owner;
pub use quorum::Quorum;
pub use request::{LockRequest, Scoped};
pub use state::Stats;
#[cfg(feature = "metrics")]
pub use telemetry::describe_metrics;
