//! Distributed mutual exclusion across N independent Redis masters, for tokio: the RedLock
//! algorithm ([`Quorum::Majority`]), its all-nodes variant MultiLock ([`Quorum::All`]), and
//! [`Quorum::AtLeast`] in between.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use quorum_lock::{QuorumLock, Quorum};
//!
//! # async fn run() -> Result<(), quorum_lock::Error> {
//! let locks = QuorumLock::builder()
//!     .nodes([
//!         "redis://127.0.0.1:7001",
//!         "redis://127.0.0.1:7002",
//!         "redis://127.0.0.1:7003",
//!         "redis://127.0.0.1:7004",
//!         "redis://127.0.0.1:7005",
//!     ])
//!     .quorum(Quorum::Majority)
//!     .node_timeout(Duration::from_millis(50))
//!     .build()
//!     .await?;
//!
//! let guard = locks.acquire("stock:mooncake", Duration::from_secs(10)).await?;
//! // ... the critical section, finished well within guard.validity() ...
//! guard.release().await?; // Err(NotHeld) would mean the section may have overlapped another
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! An acquire sends `SET key holder NX PX ttl` with a fresh 128-bit holder value to all N
//! nodes at once, each call bounded by the node timeout, and counts confirmations against the
//! quorum, returning as soon as the outcome is decided. The lock's validity is
//! `ttl - elapsed - (ttl * drift_factor + 2 ms)`, measured from before the first request was
//! sent; without a quorum, or without validity left, the attempt is rolled back on **every**
//! node (also those that timed out: they may still apply it). A waiter then sleeps until the
//! key's release notice (pub/sub, one connection per node shared by the client's waiters, one
//! waiter woken per release) or a jittered fallback delay. Release and extend act only where
//! the stored holder value matches; extend never re-creates an expired entry.
//!
//! A lock taken without a fixed TTL ([`QuorumLock::lock`]) is kept by a watchdog that renews
//! its lease every third of it, needs a quorum each time, repairs nodes that lost the entry,
//! and marks the lock lost ([`LockGuard::lost`], [`LostSignal`]) once the validity runs out
//! without a confirmed renewal. [`QuorumLock::with_lock`] runs work under such a lock and
//! cancels it on loss. Reentrancy is an explicit [`Owner`].
//!
//! # Guarantees and limits
//!
//! - A guard is returned only if a quorum confirmed within the validity window; while
//!   [`LockGuard::validity`] is positive no other guard for the key exists, under the
//!   assumptions below.
//! - Node clocks run at about the same rate (the drift factor covers rate differences, not
//!   jumps); the client does not stall past its validity (check [`LockGuard::is_held`] before
//!   side effects, or use fencing tokens, [`LockRequest::fencing`]).
//! - Unavailable nodes never break exclusion; nodes that *forget* a held lock (restart without
//!   persistence, clock jump, eviction) do, beyond `2q - N - 1` of them (a lock confirmed by
//!   exactly q nodes must keep fewer than q nodes free). A plain [`Quorum::Majority`]
//!   tolerates none; [`Quorum::AtLeast`]`(4)` of 5 tolerates two; [`Quorum::All`] (MultiLock)
//!   tolerates N - 1 but refuses service while any node is down. See docs/SAFETY.md.
//! - A guard's deadline is never later than the earliest expiry a quorum of its entries could
//!   have: an extend or renewal to a shorter TTL cuts the deadline before it is sent.
//! - One node (N = 1) is allowed and has no fault tolerance.
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
//! - `tls`: `rediss://` nodes, through rustls.
//! - `testkit`: [`testkit`], real `redis-server` fleets with failure injection (kill, pause,
//!   restart, fault proxy, clock jumps), and history recording and checking, for your own
//!   tests too.
//!
//! # Not built yet
//!
//! Metrics (the `metrics` facade), tests against TLS nodes with a custom CA, Docker fleets
//! (docker-compose, testcontainers) and the lock family (read-write, fair, multi-key,
//! semaphore). The `quorum-lock` command is built (feature `cli`, see the README).
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
//! - `address`: node URLs, and keeping their passwords out of everything shown.
//! - `node`: one master: its connection, background reconnect, per-call timeout, errors.
//! - `ordering`: the rules that keep a lease's later call behind its earlier ones.
//! - `fanout`: one call to every node, decided at quorum.
//! - `wakeup`: pub/sub release notices and the waiters they wake.
//! - `state`: a client's shared state and counters.
//! - `lease`: one acquisition: deadline, loss, renew, repair, release, the loss signal.
//! - `watchdog`: renewals of a lock kept without a fixed TTL.
//! - `reentry`: an owner's table of held leases.
//! - `guard`: the caller's handle on a held lock.
//! - `acquire`: one attempt and the waiting loop.
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
mod state;
mod wakeup;
mod watchdog;

#[cfg(feature = "testkit")]
#[allow(unsafe_code)]
pub mod testkit;

/// The README's usage example runs as a doc test (it starts its own fleet).
#[cfg(all(doctest, feature = "testkit"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use builder::Builder;
pub use client::QuorumLock;
pub use config::{MAX_DURATION, MAX_TTL};
pub use error::{Error, FailureKind, NodeFailure, Op, Result};
pub use guard::LockGuard;
pub use key::{MAX_KEY_LEN, RESERVED_PREFIX};
pub use lease::LostSignal;
pub use owner::Owner;
pub use quorum::Quorum;
pub use request::{LockRequest, Scoped};
pub use state::Stats;
