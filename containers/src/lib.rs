//! Redis fleets in Docker containers for quorum-lock's tests, with network partitions, through
//! the [testcontainers](https://docs.rs/testcontainers) crate.
//!
//! A crate of its own beside `quorum-lock` (whose test kit, `quorum_lock::testkit`, runs fleets
//! of local `redis-server` processes): testcontainers brings an HTTP stack and Docker's API
//! types with it (67 crates that neither the library nor its tests use), which the library's
//! own test command should not pay for.
//!
//! A [`ContainerFleet`] runs N durable Redis masters (AOF with `appendfsync always`,
//! `noeviction`), each attached to two bridge networks of its own, one per [`Side`]. A side
//! is one client's view of the fleet: [`urls(Side::A)`](ContainerFleet::urls) name the nodes
//! by their addresses on network A, [`urls(Side::B)`](ContainerFleet::urls) by their
//! addresses on network B. Cutting a node from one network partitions it from the clients of
//! that side only, while the other side still reaches it: the split views that loopback
//! processes cannot give. Every address is pinned, so a node keeps it across restarts and
//! partitions, and clients reconnect to the same URL.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use quorum_lock_containers::{ContainerFleet, Side};
//! use quorum_lock::QuorumLock;
//!
//! let fleet = ContainerFleet::start(5).await?;
//! let a = QuorumLock::builder().nodes(fleet.urls(Side::A)).build().await.unwrap();
//! let b = QuorumLock::builder().nodes(fleet.urls(Side::B)).build().await.unwrap();
//! // Nodes 0, 1 and 2 no longer answer A's client; B's still reaches all five.
//! fleet.isolate(Side::A, [0, 1, 2]).await?;
//! # drop((a, b));
//! fleet.heal_all().await?;
//! fleet.kill(3).await?; // SIGKILL
//! fleet.restart(3).await?; // the same container again: its AOF kept every lock
//! fleet.restart_empty(4).await?; // a new container on the same addresses: it forgot them
//! # Ok(()) }
//! ```
//!
//! Per node: [`kill`](ContainerFleet::kill), [`pause`](ContainerFleet::pause) /
//! [`resume`](ContainerFleet::resume) (the container is frozen: it accepts connections and
//! answers nothing), [`restart`](ContainerFleet::restart) (with its data),
//! [`restart_empty`](ContainerFleet::restart_empty) (without), and
//! [`partition`](ContainerFleet::partition) / [`heal`](ContainerFleet::heal) from one side;
//! [`isolate`](ContainerFleet::isolate) cuts a side from several nodes at once. A partitioned
//! address behaves like a cut cable: connects hang, open connections stall without a reset,
//! and both resume when the link heals.
//!
//! **Requirements.** A local Docker engine whose bridge networks this machine routes to (Linux;
//! the fleet checks that every address answers and says so if not; tried on Docker Engine
//! 20.10, API 1.41), reached where `DOCKER_HOST` says (the local socket by default), and the
//! image `$QUORUM_LOCK_REDIS_IMAGE`, by default [`DEFAULT_IMAGE`], which
//! `docker/build-image.sh` builds from the machine's own `redis-server`. Images are never
//! pulled: a missing one is an error naming the script. Without Docker,
//! [`ContainerFleet::start`] fails with the reason; it never passes silently.
//!
//! **How.** testcontainers creates and starts each node's container, pauses and resumes it,
//! starts it again, and removes it. The bollard client it
//! re-exports does what it has no call for: bridge networks with a fixed subnet, an address
//! pinned on each network (a container first gets one the engine hands out, from the upper
//! half of the /24, and then takes its own), a cut link and a link made again, a SIGKILL, and
//! the log read for readiness (the ready line, counted per start; a server that stops first
//! fails the start with its log). No port is published on the host: the nodes are reached at
//! their networks' addresses only.
//!
//! **Cleanup.** Containers and networks are removed when the fleet is dropped, also when a
//! test panics. Should the process die first (killed, aborted, or a fleet kept in a static,
//! which is never dropped), a small reaper process that holds the fleet's ids removes them as
//! soon as the process is gone (testcontainers has no reaper of its own; this one runs the
//! `docker` command). A start whose future is dropped completes on a thread of its own and
//! removes what it made. Everything a fleet creates carries the label
//! `quorum-lock.testkit=<fleet id>`; after a machine crash,
//! `docker rm -f $(docker ps -aq --filter label=quorum-lock.testkit)` and
//! `docker network prune --filter label=quorum-lock.testkit` remove what is left.
//!
//! **Cost.** Docker operations take a tenth of a second to a second each, so every operation
//! is `async`. They run on a small runtime of the fleet's own, so any executor will do, and
//! the fleet is not tied to the runtime that started it (a shared fleet may live in a
//! static). A fleet of five starts in about two seconds. Subnets are /24s drawn at random
//! from 172.28.0.0/14, skipping this machine's routes and retrying when another fleet, in this
//! process or another, holds the one drawn: fleets may start in parallel.
//!
//! # Layout
//!
//! - `fleet`: [`ContainerFleet`], the handle tests hold, and [`ContainerFleetBuilder`], which
//!   creates the networks and starts the nodes.
//! - `nodes`: what every node is made from, each node's container, and the operations on a
//!   node: kill, pause, restart, and its links to the two sides' networks (partitions).
//! - `engine`: the fleet's runtime and the engine's client: images, bridge networks on free
//!   subnets, links at fixed addresses, kills, a container's readiness and logs, and the
//!   removal of a fleet.
//! - `cleanup`: the reaper process, for a fleet its process never dropped.
//! - here: [`Side`] and the constants.

mod cleanup;
mod engine;
mod fleet;
mod nodes;

pub use fleet::{ContainerFleet, ContainerFleetBuilder};

/// The image used unless `QUORUM_LOCK_REDIS_IMAGE` or [`ContainerFleetBuilder::image`] names
/// another: the one `docker/build-image.sh` builds.
pub const DEFAULT_IMAGE: &str = "quorum-lock-redis:local";

/// The environment variable naming the image.
pub const IMAGE_VAR: &str = "QUORUM_LOCK_REDIS_IMAGE";

/// The port every node listens on, at each of its addresses.
pub const PORT: u16 = 6379;

/// Node `i` has the address `.{FIRST_HOST + i}` on each side's /24 (`.1` is the gateway).
const FIRST_HOST: usize = 10;

/// How many more times a pause the runtime could not complete ("unable to freeze") is asked
/// for.
const PAUSE_TRIES: u32 = 5;

/// The most nodes a fleet may have (the fixed addresses below the engine's own range in a
/// /24: `.10` to `.127`).
pub const MAX_NODES: usize = 118;

/// The settings that make a node durable: every acknowledged write is on disk before the
/// answer, and a full node refuses writes instead of evicting locks.
const DURABLE: [&str; 14] = [
    "--port",
    "6379",
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--maxmemory-policy",
    "noeviction",
    "--save",
    "",
    "--protected-mode",
    "no",
    "--dir",
    "/data",
];

/// One client's view of the fleet: the network its addresses are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Side {
    /// The first network.
    A,
    /// The second network.
    B,
}

impl Side {
    /// Every side, in order.
    pub const ALL: [Side; 2] = [Side::A, Side::B];

    fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }

    fn letter(self) -> char {
        match self {
            Side::A => 'a',
            Side::B => 'b',
        }
    }
}
