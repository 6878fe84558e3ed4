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
//! - `containers` (alias `testcontainers`): [`testkit::containers`], fleets in Docker
//!   containers (driven through the `docker` command) with network
//!   partitions between two client sides (needs Docker and a local Redis image).
//! - `metrics`: metrics through the [`metrics`](https://docs.rs/metrics) facade (names and
//!   labels in the README's "Metrics" table; no exporter is chosen for you).
//! - `cli`: the `quorum-lock` command (a binary; it turns on `tls` and `metrics`).
//!
//! # Layout
//!
//! One file per concept, listed so that each module imports only from those above it (the one
//! exception: `builder` and `client` name each other, as a builder and what it builds do):
//!
//! - `quorum`: pure arithmetic: quorum sizes, drift, validity, the tally of node answers.
//! - `error`: the error enum and the per-node failure.
//! - `progress`: the stop-or-wait handshake of in-flight requests (also checked by loom).
//! - `backoff`: retry timing of a waiting acquire (pure).
//! - `key`: the key check, the names derived from a key, the reserved namespace.
//! - `config`: validated settings and the checks of durations and TTLs.
//! - `scripts`: the commands and Lua scripts run on the nodes, one call shared by all nodes.
//! - `shape`: what an acquisition holds (one key, a set of keys, a semaphore permit, a read
//!   or write hold, a fair lock) and the calls that acquire, extend, release, repair and
//!   fence it.
//! - `telemetry`: metrics through the `metrics` facade (empty without the feature).
//! - `address`: node URLs, and keeping their passwords out of everything shown.
//! - `tls` (feature): the TLS settings, checked at build, and TLS errors in plain words.
//! - `node`: one master: its connection, background reconnect, per-call timeout, errors;
//!   [`NodeClient`], a node for connections of one's own.
//! - `ordering`: the rules that keep a lease's later call behind its earlier ones.
//! - `fanout`: one call to every node, decided at quorum.
//! - `fair`: the fair lock's waiters within a client, and a release's hand-off to one.
//! - `wakeup`: pub/sub release notices and the waiters they wake.
//! - `state`: a client's shared state and counters.
//! - `lease`: one acquisition: deadline, loss, renew, repair, release, the loss signal.
//! - `watchdog`: renewals of a lock kept without a fixed TTL.
//! - `reentry`: an owner's table of held leases.
//! - `guard`: the caller's handle on a held lock.
//! - `token`: extend and release by holder value, without a guard.
//! - `acquire`: one attempt, the waiting loop, fencing tokens and a fair request's ticket.
//! - `request`: a lock request and its per-request settings.
//! - `owner`: reentrant owners.
//! - `client`: the client handle.
//! - `builder`: configuration and the build-time checks on the nodes.
//! - `testkit` (feature): real redis-server fleets with failure injection.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_code)]

mod acquire;
mod address;
mod backoff;
mod builder;
mod client;
mod config;
mod error;
mod fair;
mod fanout;
mod guard;
mod key;
mod lease;
mod node;
mod ordering;
mod owner;
mod reentry;
mod request;
/// The handshake of ordering invariant 4 (see `ordering`). Its code is in `progress.rs`,
/// included here with the standard atomics and, by the loom test (tests/loom_progress.rs),
/// with loom's, so that the code checked is the code that runs.
mod progress {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    include!("progress.rs");
}
pub mod quorum;
mod scripts;
mod shape;
mod state;
mod telemetry;
#[cfg(feature = "tls")]
mod tls;
mod token;
mod wakeup;
mod watchdog;

#[cfg(feature = "testkit")]
#[allow(unsafe_code)]
pub mod testkit;

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
pub use error::{Error, FailureKind, NodeFailure, Op, Result};
pub use guard::LockGuard;
pub use key::{MAX_KEY_LEN, RESERVED_PREFIX};
pub use lease::LostSignal;
pub use node::NodeClient;
pub use owner::Owner;
pub use quorum::Quorum;
pub use request::{LockRequest, Scoped};
pub use shape::MAX_SET_KEYS;
pub use state::Stats;
#[cfg(feature = "metrics")]
pub use telemetry::describe_metrics;
pub use token::MAX_TOKEN_LEN;
