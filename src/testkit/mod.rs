//! Real `redis-server` fleets for tests, examples and benchmarks (feature `testkit`).
//!
//! A [`Fleet`] starts N `redis-server` processes on free loopback ports, each in its own
//! temporary directory, and kills and reaps them (by pid) when dropped, also when a test
//! panics. Should the whole test process die without unwinding, the servers die with it: they
//! are started from one long-lived thread with `PR_SET_PDEATHSIG` (Linux).
//!
//! Per node: [`kill`](Fleet::kill), [`pause`](Fleet::pause) / [`resume`](Fleet::resume)
//! (SIGSTOP / SIGCONT), [`restart`](Fleet::restart) (with or without persistence, see
//! [`Persistence`]), a [`FaultProxy`] in front of each node when asked for (added latency,
//! black hole, connection reset, heal), and [`expire_early`](Fleet::expire_early), the
//! emulation of a node clock jumping forward (libfaketime cannot run Debian's redis-server).
//! [`history`] records who believed it held which lock when, and how (alone, as a reader,
//! as one of a semaphore's permits), and checks that no two such intervals overlap where they
//! may not, that no semaphore had more holders than permits, and that fencing tokens increase
//! (for your own tests too: record an interval around each critical section, then check them
//! all).
//!
//! With the `tls` feature, [`FleetBuilder::tls`] starts nodes that speak TLS only, with the
//! certificates a test gives them ([`FleetTls`]), optionally requiring client certificates.
//!
//! The server binary is `$QUORUM_LOCK_REDIS_SERVER` if set, else `redis-server` on `PATH`. If
//! it is missing, [`Fleet::start`] fails with a message saying how to install it.
//!
//! An **external fleet** ([`Fleet::external`], [`Fleet::from_env`]) is a set of nodes someone
//! else runs, e.g. the repository's `docker-compose.yml`: the same URLs, clients and
//! [`expire_early`](Fleet::expire_early), but no process control (kill, pause, restart and
//! logs say so; fault them with `docker kill` / `docker pause` instead). The integration
//! tests that share one fleet and inject no faults run against it when
//! `QUORUM_LOCK_NODES` is set.
//!
//! Fleets in Docker containers, seen from two sides (two networks) so that one client can be
//! cut off from nodes that another still reaches, are the companion crate
//! `quorum-lock-containers` (containers/ in the repository, through testcontainers).
//!
//! # Layout
//!
//! - `fleet`: [`Fleet`] and [`FleetBuilder`] (loopback fleets, and external ones run by
//!   someone else), [`Persistence`], [`NODES_ENV`] and [`START_TIMEOUT`].
//! - `tls` (feature `tls`): `FleetTls`, the certificates of a TLS fleet.
//! - `process`: one `redis-server` child process ([`RedisProcess`]), and finding the binary.
//! - `cluster`: [`ClusterFleet`], N independent Redis Clusters (3 primaries each by default,
//!   replicas optional), each one lock node, with kill, pause, restart and failover per member.
//! - `proxy`: the [`FaultProxy`] in front of a node, and its [`Fault`]s.
//! - `scripts`: the library's own node scripts run on one node, for tests of the scripts
//!   ([`fair_attempt_on_node`] and the like).
//! - [`history`]: lock histories and their checker.
//! - `fenced_store`: [`FencedStore`], a store that honours fencing tokens.
//! - here: the helpers for negative tests ([`unchecked_quorum`], [`unchecked_semaphore`])
//!   and [`monotonic_nanos`].

mod cluster;
mod fenced_store;
mod fleet;
pub mod history;
mod process;
mod proxy;
mod scripts;
#[cfg(feature = "tls")]
mod tls;

pub use cluster::{ClusterFleet, ClusterFleetBuilder};
pub use fenced_store::FencedStore;
pub use fleet::{Fleet, FleetBuilder, Persistence, NODES_ENV, START_TIMEOUT};
pub use process::RedisProcess;
pub use proxy::{Fault, FaultProxy};
pub use scripts::{
    fair_attempt_in_round_on_node, fair_attempt_on_node, fair_draw_on_node,
    fair_first_attempt_on_node, fair_rollback_on_node, fair_withdraw_on_node, read_release_on_node,
    FairAttempt,
};
#[cfg(feature = "tls")]
pub use tls::FleetTls;

/// **Unsafe, for negative tests only**: `builder` requiring exactly `k` confirmations
/// without checking that `k` is a majority. With `k <= N/2` two holders can both reach
/// "quorum"; the torture suite uses this to prove that its checker catches it. Not a builder
/// method, so that production code cannot reach it by autocompletion.
pub fn unchecked_quorum(builder: crate::Builder, k: usize) -> crate::Builder {
    builder.unchecked_quorum(k)
}

/// **Unsafe, for negative tests only**: a semaphore request of `permits` permits without
/// the check that more than one permit needs [`Quorum::All`](crate::Quorum::All). Under a
/// majority of five nodes, up to 5 x `permits` / 3 clients can then hold a permit at once;
/// the lock family's tests use it to show that. Not a client method, so that production code
/// cannot reach it by autocompletion.
pub fn unchecked_semaphore(
    locks: &crate::QuorumLock,
    key: impl AsRef<[u8]>,
    permits: u32,
) -> crate::LockRequest<'_> {
    locks.unchecked_semaphore(key.as_ref(), permits)
}

/// Nanoseconds on the machine's monotonic clock (`CLOCK_MONOTONIC`): comparable across the
/// processes of one machine, unlike `Instant`. For histories recorded by several processes.
pub fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}
