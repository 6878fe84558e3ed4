//! The container fleet as tests see it: [`ContainerFleet`], its operations (all `async`, each
//! on the fleet's own runtime), and [`ContainerFleetBuilder`], which makes one.

use std::io;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use super::cleanup::{stand_down, watch, Reaper};
use super::engine::{self, Engine};
use testcontainers::bollard::Docker;

use super::nodes::{remove, Action, Inner, Network, Node, Spec, View};
use super::{Side, DEFAULT_IMAGE, DURABLE, IMAGE_VAR, MAX_NODES, PORT};

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
    /// Dropping the future does not stop the start: it completes on a thread of its own,
    /// and the fleet it made is then removed.
    pub async fn start(self) -> io::Result<ContainerFleet> {
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
        if image.trim().is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the image name is empty",
            ));
        }
        let fleet = uuid::Uuid::new_v4().simple().to_string();
        let engine = Engine::new()?;
        let reaper = Arc::new(Mutex::new(Reaper::spawn(&fleet)?));
        let mut args: Vec<String> = DURABLE.iter().map(|s| (*s).to_string()).collect();
        args.extend(self.args);
        let making = make(
            engine.docker.clone(),
            reaper.clone(),
            fleet,
            image,
            args,
            self.nodes,
        );
        // The start runs to its end on a thread of its own, which owns the fleet's runtime
        // until the fleet is handed over: a caller that gives up (its future dropped) must
        // not shut the runtime down under a half-made fleet (testcontainers' bookkeeping
        // would wait for it for good). Whoever finds the made fleet not taken, the thread or
        // the dropped caller's handover, removes it on a thread.
        let handover = Handover {
            slot: Arc::new(Mutex::new(None)),
            reaper: reaper.clone(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (slot, reaper_left) = (handover.slot.clone(), reaper.clone());
        std::thread::Builder::new()
            .name("quorum-lock-containers-start".into())
            .spawn(move || {
                let made = engine.block_on(making);
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((engine, made));
                if tx.send(()).is_err() {
                    let left = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                    if let Some(started) = left {
                        discard(started, &reaper_left);
                    }
                }
            })?;
        let _ = rx.await;
        let (engine, made) = handover
            .take()
            .ok_or_else(|| io::Error::other("starting the container fleet panicked"))?;
        let (spec, nodes) = match made {
            Ok(made) => made,
            Err(Failed { error, removed }) => {
                if removed {
                    stand_down(&reaper);
                }
                return Err(error);
            }
        };
        let views = nodes
            .iter()
            .map(|node| {
                Arc::new(Mutex::new(View {
                    container: node.id.clone(),
                    connected: node.connected,
                    earlier_logs: String::new(),
                }))
            })
            .collect();
        Ok(ContainerFleet {
            inner: Arc::new(Inner {
                engine,
                spec,
                nodes: nodes
                    .into_iter()
                    .map(|n| Arc::new(tokio::sync::Mutex::new(n)))
                    .collect(),
                views,
                reaper,
            }),
        })
    }
}

/// What a start made, on the way from its thread to its caller.
type Started = (Engine, Result<(Arc<Spec>, Vec<Node>), Failed>);

/// The caller's end of a start: the made fleet, once there. Dropped with the fleet still in
/// it (the caller's future dropped after the start ended), it removes the fleet.
struct Handover {
    slot: Arc<Mutex<Option<Started>>>,
    reaper: Arc<Mutex<Reaper>>,
}

impl Handover {
    fn take(&self) -> Option<Started> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl Drop for Handover {
    fn drop(&mut self) {
        if let Some(started) = self.take() {
            let reaper = self.reaper.clone();
            // On a thread: the caller may be inside a runtime, or outside any.
            let _ = std::thread::Builder::new()
                .name("quorum-lock-containers-discard".into())
                .spawn(move || discard(started, &reaper));
        }
    }
}

/// Removes a fleet nobody took, from a thread outside any runtime.
fn discard((engine, made): Started, reaper: &Mutex<Reaper>) {
    if let Ok((spec, mut nodes)) = made {
        let networks = spec.network_ids();
        let removed = engine.block_on(remove(
            &engine.docker,
            &spec.fleet,
            nodes.iter_mut(),
            &networks,
        ));
        if removed {
            stand_down(reaper);
        }
    }
}

/// A start that failed: why, and whether what it made was all removed again.
struct Failed {
    error: io::Error,
    removed: bool,
}

/// Makes a fleet: the image checked, the networks, the nodes (in parallel), every address
/// answering. Until the fleet exists, a failure removes what was made (its label names it
/// all).
async fn make(
    docker: Docker,
    reaper: Arc<Mutex<Reaper>>,
    fleet: String,
    image: String,
    args: Vec<String>,
    count: usize,
) -> Result<(Arc<Spec>, Vec<Node>), Failed> {
    let mut made = Made {
        networks: Vec::new(),
        nodes: Vec::new(),
    };
    let result = async {
        engine::check_image(&docker, &image).await?;
        let mut networks = Vec::with_capacity(Side::ALL.len());
        for side in Side::ALL {
            let name = format!("quorum-lock-{}-{}", &fleet[..12], side.letter());
            let (id, subnet) = engine::create_network(&docker, &name, &fleet).await?;
            watch(&reaper, "network", &id)?;
            made.networks.push(id.clone());
            networks.push(Network { id, name, subnet });
        }
        let spec = Arc::new(Spec {
            fleet: fleet.clone(),
            image,
            args,
            networks,
        });
        // The nodes start in parallel: most of a start is the engine's work.
        let starting = (0..count).map(|i| {
            let (spec, docker, reaper) = (spec.clone(), docker.clone(), reaper.clone());
            tokio::spawn(async move { spec.create_node(docker, &reaper, i, [true; 2]).await })
        });
        let mut first_error = None;
        for started in futures::future::join_all(starting).await {
            match started.map_err(|e| io::Error::other(format!("starting a node panicked: {e}"))) {
                Ok(Ok(node)) => made.nodes.push(node),
                Ok(Err(e)) | Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Inner::check_reachable(&spec, count).await?;
        Ok(spec)
    }
    .await;
    match result {
        Ok(spec) => Ok((spec, made.nodes)),
        Err(error) => {
            let removed = remove(&docker, &fleet, made.nodes.iter_mut(), &made.networks).await;
            Err(Failed { error, removed })
        }
    }
}

/// What a start made so far (removed if it fails).
struct Made {
    networks: Vec<String>,
    nodes: Vec<Node>,
}

/// A fleet of Redis masters in Docker containers, reachable from two sides.
#[derive(Debug)]
pub struct ContainerFleet {
    inner: Arc<Inner>,
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
        self.inner.view(i).container
    }

    /// Whether node `i` is on `side`'s network (not [`partition`](Self::partition)ed from it).
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn is_connected(&self, i: usize, side: Side) -> bool {
        self.check(i);
        self.inner.view(i).connected[side.index()]
    }

    /// Kills node `i` (SIGKILL, also when paused) and waits until its container has stopped.
    /// Its data and addresses stay for [`restart`](Self::restart). A node already down is
    /// left as it is.
    ///
    /// # Errors
    /// The engine refused.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on the fleet's runtime.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn kill(&self, i: usize) -> io::Result<()> {
        self.run(i, Action::Kill).await
    }

    /// Freezes node `i` (`docker pause`): it keeps its connections and accepts new ones, but
    /// answers nothing until [`resume`](Self::resume).
    ///
    /// # Errors
    /// The node is not running, or the engine refused (a freeze the runtime could not
    /// complete is asked for again a few times first).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on the fleet's runtime.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn pause(&self, i: usize) -> io::Result<()> {
        self.run(i, Action::Pause).await
    }

    /// Thaws node `i`; the requests it held are answered. A node not paused is left as it is.
    ///
    /// # Errors
    /// The node is not running, or the engine refused.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on the fleet's runtime.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn resume(&self, i: usize) -> io::Result<()> {
        self.run(i, Action::Resume).await
    }

    /// Kills node `i` if it runs, starts the same container again and waits until it serves
    /// clients: it keeps every acknowledged write (its AOF), its addresses and its partitions.
    ///
    /// # Errors
    /// The node did not start again (the message holds its log).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on the fleet's runtime.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn restart(&self, i: usize) -> io::Result<()> {
        self.run(i, Action::Restart).await
    }

    /// Replaces node `i` by a new container on the same addresses and partitions, with no
    /// data: a node that forgot every lock (a disk lost, or a restart without persistence).
    ///
    /// # Errors
    /// The new node did not start (the message holds its log).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on the fleet's runtime.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn restart_empty(&self, i: usize) -> io::Result<()> {
        self.run(i, Action::RestartEmpty).await
    }

    /// Cuts node `i` from `side`'s network: that side's clients can no longer reach it (their
    /// connects hang and their open connections stall, without a reset), the other side's
    /// still can. A node already cut is left as it is.
    ///
    /// # Errors
    /// The engine refused.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on the fleet's runtime.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn partition(&self, i: usize, side: Side) -> io::Result<()> {
        self.run(i, Action::Partition(side)).await
    }

    /// Reconnects node `i` to `side`'s network at its address; stalled connections resume.
    /// A node not cut is left as it is.
    ///
    /// # Errors
    /// The engine refused.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on the fleet's runtime.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub async fn heal(&self, i: usize, side: Side) -> io::Result<()> {
        self.run(i, Action::Heal(side)).await
    }

    /// Cuts `side` from every node in `nodes` at once (in parallel; it returns when all are
    /// cut). Isolating a side from a majority leaves its clients without a quorum.
    ///
    /// # Errors
    /// The engine refused one of the cuts (the others are made).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on the fleet's runtime.
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
        let links = nodes
            .into_iter()
            .map(|i| (i, Action::Partition(side)))
            .collect();
        self.run_all(links).await
    }

    /// Reconnects every cut link, in parallel.
    ///
    /// # Errors
    /// The engine refused one of them (the others are made).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the operation: it completes on the fleet's runtime.
    pub async fn heal_all(&self) -> io::Result<()> {
        let links = (0..self.len())
            .flat_map(|i| Side::ALL.into_iter().map(move |side| (i, side)))
            .filter(|&(i, side)| !self.is_connected(i, side))
            .map(|(i, side)| (i, Action::Heal(side)))
            .collect();
        self.run_all(links).await
    }

    /// Node `i`'s log: all its containers, all their runs. Blocks for a `docker logs`.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn logs(&self, i: usize) -> String {
        self.check(i);
        let view = self.inner.view(i);
        let docker = self.inner.engine.docker.clone();
        let log = self
            .inner
            .engine
            .block(async move { engine::logs(&docker, &view.container).await });
        format!("{}{log}", self.inner.view(i).earlier_logs)
    }

    /// All nodes' logs, headed by node index, container and addresses: for failing tests to
    /// print.
    pub fn all_logs(&self) -> String {
        let mut out = String::new();
        for i in 0..self.len() {
            out.push_str(&format!(
                "--- node {i} (container {}, A {}, B {}) ---\n{}",
                engine::short(&self.container_id(i)),
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

    async fn run(&self, i: usize, action: Action) -> io::Result<()> {
        self.check(i);
        let op = self.inner.op(i);
        self.inner.engine.run(op.act(action)).await
    }

    /// The actions at once; the first error, after all have run.
    async fn run_all(&self, actions: Vec<(usize, Action)>) -> io::Result<()> {
        let ops: Vec<_> = actions
            .into_iter()
            .map(|(i, action)| self.inner.op(i).act(action))
            .collect();
        self.inner
            .engine
            .run(async move {
                futures::future::join_all(ops.into_iter().map(tokio::spawn))
                    .await
                    .into_iter()
                    .map(|joined| joined.unwrap_or_else(|e| Err(io::Error::other(e.to_string()))))
                    .collect::<Vec<_>>()
                    .into_iter()
                    .collect()
            })
            .await
    }
}
