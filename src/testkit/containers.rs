//! Redis fleets in Docker containers, with network partitions (feature `containers`, alias
//! `testcontainers`).
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
//! use quorum_lock::testkit::containers::{ContainerFleet, Side};
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
//! the fleet checks that every address answers and says so if not), the `docker` command on
//! `PATH`, and the image `$QUORUM_LOCK_REDIS_IMAGE`, by default [`DEFAULT_IMAGE`], which
//! `docker/build-image.sh` builds from the machine's own `redis-server`. Images are never
//! pulled: a missing one is an error naming the script. Without Docker, [`ContainerFleet::start`]
//! fails with the reason; it never passes silently.
//!
//! **Cleanup.** Containers and networks are removed by id when the fleet is dropped, also
//! when a test panics. Should the process die first (killed, aborted, or a fleet kept in a
//! static, which is never dropped), a small reaper process that holds the fleet's ids
//! removes them as soon as the process is gone. Everything a fleet creates carries the label
//! `quorum-lock.testkit=<fleet id>`; after a machine crash,
//! `docker rm -f $(docker ps -aq --filter label=quorum-lock.testkit)` and
//! `docker network prune --filter label=quorum-lock.testkit` remove what is left.
//!
//! **Cost.** Docker operations take a tenth of a second to a second each, so every operation
//! is `async` and runs the `docker` command on a thread of its own (any executor will do; the
//! fleet is not tied to the runtime that started it, so a shared fleet may live in a static).
//! A fleet of five starts in about two seconds. Subnets are /24s drawn at random from
//! 172.28.0.0/14, skipping this machine's routes and retrying when another fleet, in this
//! process or another, holds the one drawn: fleets may start in parallel.

use std::io;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::docker::{self, docker, Reaper, Subnet};
use super::START_TIMEOUT;

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

/// The most nodes a fleet may have (the addresses left in a /24).
pub const MAX_NODES: usize = 240;

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

/// Options for a container fleet.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ContainerFleetBuilder {
    nodes: usize,
    image: Option<String>,
    args: Vec<String>,
}

impl ContainerFleetBuilder {
    /// How many nodes, at most [`MAX_NODES`]. Defaults to 0 (set it).
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// The image. Defaults to `$QUORUM_LOCK_REDIS_IMAGE`, else [`DEFAULT_IMAGE`].
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = Some(image.into());
        self
    }

    /// Extra `redis-server` arguments for every node, after the durable settings (a later
    /// option overrides an earlier one). Defaults to none.
    pub fn server_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Creates the networks and the containers, and waits until every node serves clients
    /// and answers at each of its addresses.
    ///
    /// # Errors
    /// Docker is not there or does not answer, the image is missing (the message says how to
    /// build it), a node did not start (the message holds its log), or this machine cannot
    /// reach the containers' addresses. Whatever was created is removed.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the start: it completes on its own thread, and the
    /// fleet it made is then removed.
    pub async fn start(self) -> io::Result<ContainerFleet> {
        let inner = docker::off_thread(move || self.start_blocking()).await?;
        Ok(ContainerFleet {
            inner: Arc::new(inner),
        })
    }

    fn start_blocking(self) -> io::Result<Inner> {
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a container fleet has 1 to {MAX_NODES} nodes, not {}",
                    self.nodes
                ),
            ));
        }
        let image = self
            .image
            .or_else(|| std::env::var(IMAGE_VAR).ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| DEFAULT_IMAGE.to_string());
        docker::check_image(&image)?;
        let fleet = uuid::Uuid::new_v4().simple().to_string();
        let resources = Resources::new(&fleet)?;
        let mut networks = Vec::with_capacity(Side::ALL.len());
        for side in Side::ALL {
            let name = format!("quorum-lock-{}-{}", &fleet[..12], side.letter());
            let (id, subnet) = docker::create_network(&name, &fleet)?;
            resources.created("network", &id)?;
            networks.push(Network { id, subnet });
        }
        let mut args: Vec<String> = DURABLE.iter().map(|s| (*s).to_string()).collect();
        args.extend(self.args);
        let spec = Spec {
            fleet,
            image,
            args,
            networks,
        };
        // The nodes start in parallel: most of a start is the engine's work, not ours.
        let nodes = std::thread::scope(|scope| {
            let starting: Vec<_> = (0..self.nodes)
                .map(|i| {
                    let (spec, resources) = (&spec, &resources);
                    scope.spawn(move || spec.create_node(resources, i, [true; 2]))
                })
                .collect();
            starting
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("starting a node panicked")))
                })
                .collect::<io::Result<Vec<Node>>>()
        })?;
        let inner = Inner {
            spec,
            nodes: nodes.into_iter().map(Mutex::new).collect(),
            resources,
        };
        inner.check_reachable()?;
        Ok(inner)
    }
}

/// A fleet of Redis masters in Docker containers, reachable from two sides.
#[derive(Debug)]
pub struct ContainerFleet {
    inner: Arc<Inner>,
}

/// What every node is made from.
#[derive(Debug)]
struct Spec {
    fleet: String,
    image: String,
    args: Vec<String>,
    /// One per side, in [`Side::ALL`] order.
    networks: Vec<Network>,
}

#[derive(Debug)]
struct Network {
    id: String,
    subnet: Subnet,
}

#[derive(Debug)]
struct Inner {
    spec: Spec,
    nodes: Vec<Mutex<Node>>,
    resources: Resources,
}

/// One node: its current container and what was done to it.
#[derive(Debug)]
struct Node {
    container: String,
    /// How many times this container has started (each start logs one ready line).
    starts: usize,
    running: bool,
    paused: bool,
    /// Whether the container is on each side's network.
    connected: [bool; 2],
    /// The logs of the containers this node had before (see `restart_empty`).
    earlier_logs: String,
}

impl ContainerFleet {
    /// Starts `n` nodes from the default image.
    ///
    /// # Errors
    /// As [`ContainerFleetBuilder::start`].
    ///
    /// # Cancel safety
    /// As [`ContainerFleetBuilder::start`].
    pub async fn start(n: usize) -> io::Result<ContainerFleet> {
        ContainerFleet::builder().nodes(n).start().await
    }

    /// Options for a fleet.
    pub fn builder() -> ContainerFleetBuilder {
        ContainerFleetBuilder::default()
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Whether the fleet has no nodes (never: a fleet has at least one).
    pub fn is_empty(&self) -> bool {
        self.inner.nodes.is_empty()
    }

    /// The image the nodes run.
    pub fn image(&self) -> &str {
        &self.inner.spec.image
    }

    /// Node `i`'s address on `side`'s network (the same across restarts).
    ///
    /// # Panics
    /// If `i` is out of range (a test bug).
    pub fn address(&self, i: usize, side: Side) -> Ipv4Addr {
        self.check(i);
        self.inner.spec.address(i, side)
    }

    /// Node `i`'s URL as `side` sees it.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn url(&self, i: usize, side: Side) -> String {
        format!("redis://{}:{PORT}", self.address(i, side))
    }

    /// Every node's URL as `side` sees it, in node order: the nodes of one lock client.
    pub fn urls(&self, side: Side) -> Vec<String> {
        (0..self.len()).map(|i| self.url(i, side)).collect()
    }

    /// A plain redis client for node `i` through `side`, for checks and setup.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn client(&self, i: usize, side: Side) -> redis::Client {
        redis::Client::open(self.url(i, side)).expect("fleet URLs are valid")
    }

    /// The id of node `i`'s current container (a new one after
    /// [`restart_empty`](Self::restart_empty)).
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn container_id(&self, i: usize) -> String {
        self.check(i);
        self.inner.node(i).container.clone()
    }

    /// Whether node `i` is on `side`'s network (not [`partition`](Self::partition)ed from it).
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn is_connected(&self, i: usize, side: Side) -> bool {
        self.check(i);
        self.inner.node(i).connected[side.index()]
    }

    /// Kills node `i` (SIGKILL, also when paused) and waits until its container has stopped.
    /// Its data and addresses stay for [`restart`](Self::restart). A node already down is
    /// left as it is.
    ///
    /// # Errors
    /// The engine refused.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on its own thread.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn kill(&self, i: usize) -> io::Result<()> {
        self.run(i, move |inner| inner.kill(i)).await
    }

    /// Freezes node `i` (`docker pause`): it keeps its connections and accepts new ones, but
    /// answers nothing until [`resume`](Self::resume).
    ///
    /// # Errors
    /// The node is not running, or the engine refused (a freeze the runtime could not
    /// complete is asked for again a few times first).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on its own thread.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn pause(&self, i: usize) -> io::Result<()> {
        self.run(i, move |inner| inner.pause(i)).await
    }

    /// Thaws node `i`; the requests it held are answered. A node not paused is left as it is.
    ///
    /// # Errors
    /// The node is not running, or the engine refused.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on its own thread.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn resume(&self, i: usize) -> io::Result<()> {
        self.run(i, move |inner| inner.resume(i)).await
    }

    /// Kills node `i` if it runs, starts the same container again and waits until it serves
    /// clients: it keeps every acknowledged write (its AOF), its addresses and its partitions.
    ///
    /// # Errors
    /// The node did not start again (the message holds its log).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on its own thread.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn restart(&self, i: usize) -> io::Result<()> {
        self.run(i, move |inner| inner.restart(i)).await
    }

    /// Replaces node `i` by a new container on the same addresses and partitions, with no
    /// data: a node that forgot every lock (a disk lost, or a restart without persistence).
    ///
    /// # Errors
    /// The new node did not start (the message holds its log).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on its own thread.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn restart_empty(&self, i: usize) -> io::Result<()> {
        self.run(i, move |inner| inner.restart_empty(i)).await
    }

    /// Cuts node `i` from `side`'s network: that side's clients can no longer reach it (their
    /// connects hang and their open connections stall, without a reset), the other side's
    /// still can. A node already cut is left as it is.
    ///
    /// # Errors
    /// The engine refused.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on its own thread.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn partition(&self, i: usize, side: Side) -> io::Result<()> {
        self.run(i, move |inner| inner.partition(i, side)).await
    }

    /// Reconnects node `i` to `side`'s network at its address; stalled connections resume.
    /// A node not cut is left as it is.
    ///
    /// # Errors
    /// The engine refused.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on its own thread.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn heal(&self, i: usize, side: Side) -> io::Result<()> {
        self.run(i, move |inner| inner.heal(i, side)).await
    }

    /// Cuts `side` from every node in `nodes` at once (in parallel; it returns when all are
    /// cut). Isolating a side from a majority leaves its clients without a quorum.
    ///
    /// # Errors
    /// The engine refused one of the cuts (the others are made).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on its own thread.
    ///
    /// # Panics
    /// If a node is out of range.
    pub async fn isolate(
        &self,
        side: Side,
        nodes: impl IntoIterator<Item = usize>,
    ) -> io::Result<()> {
        let nodes: Vec<usize> = nodes.into_iter().collect();
        nodes.iter().for_each(|&i| self.check(i));
        let inner = self.inner.clone();
        docker::off_thread(move || {
            let links: Vec<(usize, Side)> = nodes.into_iter().map(|i| (i, side)).collect();
            inner.in_parallel(&links, |inner, i, side| inner.partition(i, side))
        })
        .await
    }

    /// Reconnects every cut link, in parallel.
    ///
    /// # Errors
    /// The engine refused one of them (the others are made).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on its own thread.
    pub async fn heal_all(&self) -> io::Result<()> {
        let inner = self.inner.clone();
        docker::off_thread(move || {
            let links: Vec<(usize, Side)> = (0..inner.nodes.len())
                .flat_map(|i| Side::ALL.into_iter().map(move |side| (i, side)))
                .filter(|&(i, side)| !inner.node(i).connected[side.index()])
                .collect();
            inner.in_parallel(&links, |inner, i, side| inner.heal(i, side))
        })
        .await
    }

    /// Node `i`'s log: all its containers, all their runs. Blocks for a `docker logs`.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn logs(&self, i: usize) -> String {
        self.check(i);
        let node = self.inner.node(i);
        format!("{}{}", node.earlier_logs, docker::logs(&node.container))
    }

    /// All nodes' logs, headed by node index, container and addresses: for failing tests to
    /// print.
    pub fn all_logs(&self) -> String {
        let mut out = String::new();
        for i in 0..self.len() {
            out.push_str(&format!(
                "--- node {i} (container {}, A {}, B {}) ---\n{}",
                docker::short(&self.container_id(i)),
                self.address(i, Side::A),
                self.address(i, Side::B),
                self.logs(i)
            ));
        }
        out
    }

    fn check(&self, i: usize) {
        assert!(
            i < self.len(),
            "node {i} of a fleet of {} (a test bug)",
            self.len()
        );
    }

    async fn run<F>(&self, i: usize, op: F) -> io::Result<()>
    where
        F: FnOnce(&Inner) -> io::Result<()> + Send + 'static,
    {
        self.check(i);
        let inner = self.inner.clone();
        docker::off_thread(move || op(&inner)).await
    }
}

impl Spec {
    fn address(&self, i: usize, side: Side) -> Ipv4Addr {
        let host = u8::try_from(FIRST_HOST + i).expect("at most MAX_NODES nodes");
        docker::address(self.networks[side.index()].subnet, host)
    }

    /// Runs node `i`'s container on the networks of the sides in `connected`, and waits
    /// until it serves clients.
    fn create_node(
        &self,
        resources: &Resources,
        i: usize,
        connected: [bool; 2],
    ) -> io::Result<Node> {
        // The container is created on network A (an address can only be pinned on a network
        // named at creation or connected later), joins B, then leaves the networks of the
        // sides it is cut from.
        let label = format!("{}={}", docker::LABEL, self.fleet);
        let ip_a = self.address(i, Side::A).to_string();
        let mut args: Vec<&str> = vec![
            "run",
            "--detach",
            "--pull",
            "never",
            "--label",
            &label,
            "--network",
            &self.networks[0].id,
            "--ip",
            &ip_a,
            &self.image,
        ];
        args.extend(self.args.iter().map(String::as_str));
        let container = docker(&args)?;
        resources.created("container", &container)?;
        let mut node = Node {
            container,
            starts: 1,
            running: true,
            paused: false,
            connected: [true, false],
            earlier_logs: String::new(),
        };
        for side in Side::ALL {
            if connected[side.index()] {
                self.connect(&mut node, i, side)?;
            }
        }
        for side in Side::ALL {
            if !connected[side.index()] {
                self.disconnect(&mut node, side)?;
            }
        }
        docker::wait_ready(&node.container, node.starts, START_TIMEOUT)?;
        Ok(node)
    }

    fn connect(&self, node: &mut Node, i: usize, side: Side) -> io::Result<()> {
        if !node.connected[side.index()] {
            let ip = self.address(i, side).to_string();
            let network = &self.networks[side.index()].id;
            docker(&["network", "connect", "--ip", &ip, network, &node.container])?;
            node.connected[side.index()] = true;
        }
        Ok(())
    }

    fn disconnect(&self, node: &mut Node, side: Side) -> io::Result<()> {
        if node.connected[side.index()] {
            let network = &self.networks[side.index()].id;
            docker(&["network", "disconnect", network, &node.container])?;
            node.connected[side.index()] = false;
        }
        Ok(())
    }
}

impl Inner {
    fn node(&self, i: usize) -> MutexGuard<'_, Node> {
        self.nodes[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn kill(&self, i: usize) -> io::Result<()> {
        let mut node = self.node(i);
        if node.running {
            docker(&["kill", &node.container])?;
            docker(&["wait", &node.container])?;
            node.running = false;
            node.paused = false;
        }
        Ok(())
    }

    fn running(&self, i: usize) -> io::Result<MutexGuard<'_, Node>> {
        let node = self.node(i);
        if node.running {
            Ok(node)
        } else {
            Err(io::Error::other(format!("node {i} is not running")))
        }
    }

    fn pause(&self, i: usize) -> io::Result<()> {
        let mut node = self.running(i)?;
        if !node.paused {
            // The runtime freezes the container's cgroup and, when that does not settle in
            // its own time limit (a loaded host), thaws it again and reports "unable to
            // freeze": nothing was paused, so the pause is asked for again, a few times.
            let mut tries = 0;
            loop {
                match docker(&["pause", &node.container]) {
                    Err(e) if tries < PAUSE_TRIES && e.to_string().contains("unable to freeze") => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    result => {
                        result?;
                        break;
                    }
                }
            }
            node.paused = true;
        }
        Ok(())
    }

    fn resume(&self, i: usize) -> io::Result<()> {
        let mut node = self.running(i)?;
        if node.paused {
            docker(&["unpause", &node.container])?;
            node.paused = false;
        }
        Ok(())
    }

    fn restart(&self, i: usize) -> io::Result<()> {
        self.kill(i)?;
        let mut node = self.node(i);
        docker(&["start", &node.container])?;
        node.running = true;
        node.starts += 1;
        docker::wait_ready(&node.container, node.starts, START_TIMEOUT)
    }

    fn restart_empty(&self, i: usize) -> io::Result<()> {
        let mut node = self.node(i);
        let old = node.container.clone();
        let mut earlier = std::mem::take(&mut node.earlier_logs);
        earlier.push_str(&format!(
            "--- (container {}, removed: the node restarted empty) ---\n{}",
            docker::short(&old),
            docker::logs(&old)
        ));
        docker(&["rm", "--force", "--volumes", &old])?;
        self.resources.removed(&old);
        node.running = false;
        node.earlier_logs = earlier;
        let fresh = self.spec.create_node(&self.resources, i, node.connected)?;
        *node = Node {
            earlier_logs: std::mem::take(&mut node.earlier_logs),
            ..fresh
        };
        Ok(())
    }

    fn partition(&self, i: usize, side: Side) -> io::Result<()> {
        let mut node = self.node(i);
        self.spec.disconnect(&mut node, side)
    }

    fn heal(&self, i: usize, side: Side) -> io::Result<()> {
        let mut node = self.node(i);
        self.spec.connect(&mut node, i, side)
    }

    /// Runs `op` on every link at once; the first error, after all have run.
    fn in_parallel<F>(&self, links: &[(usize, Side)], op: F) -> io::Result<()>
    where
        F: Fn(&Inner, usize, Side) -> io::Result<()> + Sync,
    {
        std::thread::scope(|scope| {
            let running: Vec<_> = links
                .iter()
                .map(|&(i, side)| {
                    let op = &op;
                    scope.spawn(move || op(self, i, side))
                })
                .collect();
            running
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("panicked")))
                })
                .collect::<Vec<_>>()
                .into_iter()
                .collect()
        })
    }

    /// Every node answers PING at each of its addresses: the engine's bridge networks are
    /// routed from here (not so under Docker Desktop's virtual machine, or a remote engine).
    fn check_reachable(&self) -> io::Result<()> {
        for i in 0..self.nodes.len() {
            for side in Side::ALL {
                let ip = self.spec.address(i, side);
                let url = format!("redis://{ip}:{PORT}");
                let answered = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
                    .and_then(|mut c| {
                        c.set_read_timeout(Some(Duration::from_secs(5)))?;
                        redis::cmd("PING").query::<String>(&mut c)
                    });
                if let Err(e) = answered {
                    return Err(io::Error::other(format!(
                        "node {i} is ready but does not answer at {ip}:{PORT} ({e}): container \
                         fleets need a local Docker engine whose bridge networks this machine \
                         routes to (Linux; not Docker Desktop's virtual machine or a remote \
                         engine)"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Everything a fleet created, removed by id when it is dropped; the reaper holds the same
/// ids in case the process dies first.
#[derive(Debug)]
struct Resources {
    /// Containers, then networks, in creation order.
    created: Mutex<Vec<(&'static str, String)>>,
    reaper: Mutex<Reaper>,
    /// The fleet's label (`quorum-lock.testkit=<fleet id>`), on every container it runs.
    label: String,
}

impl Resources {
    fn new(fleet: &str) -> io::Result<Resources> {
        Ok(Resources {
            created: Mutex::new(Vec::new()),
            reaper: Mutex::new(Reaper::spawn(fleet)?),
            label: format!("{}={fleet}", docker::LABEL),
        })
    }

    fn created(&self, kind: &'static str, id: &str) -> io::Result<()> {
        self.list().push((kind, id.to_string()));
        self.reaper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .watch(kind, id)
    }

    fn removed(&self, id: &str) {
        self.list().retain(|(_, known)| known != id);
    }

    fn list(&self) -> MutexGuard<'_, Vec<(&'static str, String)>> {
        self.created.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Resources {
    fn drop(&mut self) {
        let created = std::mem::take(&mut *self.list());
        let ids = |kind: &str| -> Vec<String> {
            created
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, id)| id.clone())
                .collect()
        };
        let (mut containers, networks) = (ids("container"), ids("network"));
        // Also any container of this fleet whose id was never learnt: `docker run` creates
        // it before starting it, and a start that fails prints no id. The label is this
        // fleet's own (a fresh id), so nothing else matches.
        if let Ok(listed) = docker(&[
            "ps",
            "--all",
            "--quiet",
            "--filter",
            &format!("label={}", self.label),
        ]) {
            for id in listed.split_whitespace() {
                if !containers.iter().any(|known| known.starts_with(id)) {
                    containers.push(id.to_string());
                }
            }
        }
        // Containers first: a network with containers on it cannot be removed.
        let mut removed = true;
        if !containers.is_empty() {
            let mut args = vec!["rm".to_string(), "--force".into(), "--volumes".into()];
            args.extend(containers);
            removed &= docker(&args).is_ok();
        }
        if !networks.is_empty() {
            let mut args = vec!["network".to_string(), "rm".into()];
            args.extend(networks);
            removed &= docker(&args).is_ok();
        }
        let reaper = self.reaper.get_mut().unwrap_or_else(|p| p.into_inner());
        if removed {
            reaper.stand_down();
        }
        // Otherwise the reaper, whose pipe closes as it is dropped here, tries once more.
    }
}
