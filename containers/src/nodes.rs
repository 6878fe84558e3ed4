//! A container fleet's nodes: what every node is made from ([`Spec`]), each node's container
//! and what was done to it ([`Node`]), and the operations on them ([`Inner`]): start, kill,
//! pause, restart, and cutting a node from a side's network or joining it again.

use std::io;
use std::net::Ipv4Addr;
use std::ops::DerefMut;
use std::sync::Arc;
use std::time::Duration;

use quorum_lock::testkit::START_TIMEOUT;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::cleanup::{stand_down, watch, Reaper};
use super::engine::{self, Engine, Subnet, LABEL};
use super::{Side, FIRST_HOST, PAUSE_TRIES, PORT};

/// What every node is made from.
#[derive(Debug)]
pub(super) struct Spec {
    pub(super) fleet: String,
    pub(super) image: String,
    pub(super) args: Vec<String>,
    /// One per side, in [`Side::ALL`] order.
    pub(super) networks: Vec<Network>,
}

#[derive(Debug)]
pub(super) struct Network {
    pub(super) id: String,
    /// The name testcontainers is given: it finds a network of that name, so it neither
    /// creates one nor removes it with its last container (given an id, which it does not
    /// look up, it would create a network named after it and remove "that" one later).
    pub(super) name: String,
    pub(super) subnet: Subnet,
}

/// The fleet: its engine, its nodes, and the reaper that removes it should the process die
/// without dropping it.
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) engine: Engine,
    pub(super) spec: Arc<Spec>,
    /// Each node's container, locked for the length of an operation on it.
    pub(super) nodes: Vec<Arc<tokio::sync::Mutex<Node>>>,
    /// What the fleet's synchronous getters read: updated as each operation ends.
    pub(super) views: Vec<Arc<std::sync::Mutex<View>>>,
    pub(super) reaper: Arc<std::sync::Mutex<Reaper>>,
}

/// One node: its current container and what was done to it.
#[derive(Debug)]
pub(super) struct Node {
    /// `None` only while a `restart_empty` replaces it.
    container: Option<ContainerAsync<GenericImage>>,
    pub(super) id: String,
    /// How many times this container has started (each start logs one ready line).
    starts: usize,
    running: bool,
    paused: bool,
    /// Whether the container is on each side's network.
    pub(super) connected: [bool; 2],
}

/// A node as the getters see it.
#[derive(Debug, Clone, Default)]
pub(super) struct View {
    pub(super) container: String,
    pub(super) connected: [bool; 2],
    /// The logs of the containers this node had before (see `restart_empty`).
    pub(super) earlier_logs: String,
}

impl Spec {
    /// The ids of the fleet's networks, in [`Side::ALL`] order.
    pub(super) fn network_ids(&self) -> Vec<String> {
        self.networks.iter().map(|n| n.id.clone()).collect()
    }

    pub(super) fn address(&self, i: usize, side: Side) -> Ipv4Addr {
        let host = u8::try_from(FIRST_HOST + i).expect("at most MAX_NODES nodes");
        engine::address(self.networks[side.index()].subnet, host)
    }

    /// The image as testcontainers names it: a name and a tag. No readiness condition: the
    /// fleet waits for the ready line itself (see `create_node`).
    fn image(&self) -> GenericImage {
        // A tag follows the last ':' unless a '/' comes after it (a registry's port).
        let (name, tag) = match self.image.rsplit_once(':') {
            Some((name, tag)) if !tag.contains('/') => (name, tag),
            _ => (self.image.as_str(), "latest"),
        };
        GenericImage::new(name, tag)
    }

    /// Starts node `i`'s container on the networks of the sides in `connected` at its fixed
    /// addresses, and waits until it serves clients. Its id goes to the reaper before
    /// anything else is done with it.
    pub(super) async fn create_node(
        self: Arc<Self>,
        docker: testcontainers::bollard::Docker,
        reaper: &std::sync::Mutex<Reaper>,
        i: usize,
        connected: [bool; 2],
    ) -> io::Result<Node> {
        // testcontainers starts the container on network A at an address the engine hands
        // out (from the upper half of the /24); once its ready line is logged it takes its
        // fixed address on A, joins B at its fixed address, and leaves the networks of the
        // sides it is cut from. Each fixed address is kept across restarts. Its ports are
        // published nowhere (testcontainers would publish them on every interface of the
        // host): the fleet is reached at its networks' addresses only.
        let container = self
            .image()
            .with_cmd(self.args.clone())
            .with_network(self.networks[0].name.clone())
            .with_label(LABEL, self.fleet.clone())
            .with_host_config_modifier(|host| {
                host.publish_all_ports = Some(false);
                host.port_bindings = None;
            })
            .start()
            .await
            .map_err(|e| engine::failed(&format!("starting node {i} ({})", self.image), e))?;
        let id = container.id().to_string();
        watch(reaper, "container", &id)?;
        // Readiness from the log, as for a restart; a server that stops (a bad argument)
        // fails here with its log, and its container goes.
        if let Err(e) = engine::wait_ready(&docker, &id, 1, START_TIMEOUT).await {
            let _ = container.rm().await;
            return Err(io::Error::new(e.kind(), format!("node {i}: {e}")));
        }
        engine::disconnect(&docker, &self.networks[0].id, &id).await?;
        let mut node = Node {
            container: Some(container),
            id,
            starts: 1,
            running: true,
            paused: false,
            connected: [false, false],
        };
        for side in Side::ALL {
            if connected[side.index()] {
                self.connect(&docker, &mut node, i, side).await?;
            }
        }
        Ok(node)
    }

    async fn connect(
        &self,
        docker: &testcontainers::bollard::Docker,
        node: &mut Node,
        i: usize,
        side: Side,
    ) -> io::Result<()> {
        if !node.connected[side.index()] {
            let network = &self.networks[side.index()].id;
            engine::connect(docker, network, &node.id, self.address(i, side)).await?;
            node.connected[side.index()] = true;
        }
        Ok(())
    }

    async fn disconnect(
        &self,
        docker: &testcontainers::bollard::Docker,
        node: &mut Node,
        side: Side,
    ) -> io::Result<()> {
        if node.connected[side.index()] {
            let network = &self.networks[side.index()].id;
            engine::disconnect(docker, network, &node.id).await?;
            node.connected[side.index()] = false;
        }
        Ok(())
    }
}

/// What can be done to a node.
#[derive(Debug, Clone, Copy)]
pub(super) enum Action {
    Kill,
    Pause,
    Resume,
    Restart,
    RestartEmpty,
    Partition(Side),
    Heal(Side),
}

/// One node and what an operation on it acts with. It holds no handle on the fleet itself:
/// an operation left running by a dropped future must not keep the fleet (and its runtime)
/// alive from inside that runtime.
pub(super) struct Op {
    pub(super) spec: Arc<Spec>,
    pub(super) docker: testcontainers::bollard::Docker,
    pub(super) node: Arc<tokio::sync::Mutex<Node>>,
    pub(super) view: Arc<std::sync::Mutex<View>>,
    pub(super) reaper: Arc<std::sync::Mutex<Reaper>>,
    pub(super) i: usize,
}

impl Op {
    /// Does `action`, then publishes where the node is now for the getters.
    pub(super) async fn act(self, action: Action) -> io::Result<()> {
        let mut node = self.node.lock().await;
        let result = match action {
            Action::Kill => kill(&self.docker, &mut node).await,
            Action::Pause => self.pause(&mut node).await,
            Action::Resume => self.resume(&mut node).await,
            Action::Restart => self.restart(&mut node).await,
            Action::RestartEmpty => self.restart_empty(&mut node).await,
            Action::Partition(side) => self.spec.disconnect(&self.docker, &mut node, side).await,
            Action::Heal(side) => {
                self.spec
                    .connect(&self.docker, &mut node, self.i, side)
                    .await
            }
        };
        let mut view = self.view.lock().unwrap_or_else(|p| p.into_inner());
        view.container = node.id.clone();
        view.connected = node.connected;
        result
    }

    async fn pause(&self, node: &mut Node) -> io::Result<()> {
        let i = self.i;
        let container = running(node, i)?;
        if !node.paused {
            // The runtime freezes the container's cgroup and, when that does not settle in
            // its own time limit (a loaded host), thaws it again and reports "unable to
            // freeze": nothing was paused, so the pause is asked for again, a few times.
            let mut tries = 0;
            loop {
                match container.pause().await {
                    Err(e) if tries < PAUSE_TRIES && e.to_string().contains("unable to freeze") => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    result => {
                        result.map_err(|e| engine::failed(&format!("pausing node {i}"), e))?;
                        break;
                    }
                }
            }
            node.paused = true;
        }
        Ok(())
    }

    async fn resume(&self, node: &mut Node) -> io::Result<()> {
        let i = self.i;
        let container = running(node, i)?;
        if node.paused {
            container
                .unpause()
                .await
                .map_err(|e| engine::failed(&format!("resuming node {i}"), e))?;
            node.paused = false;
        }
        Ok(())
    }

    async fn restart(&self, node: &mut Node) -> io::Result<()> {
        kill(&self.docker, node).await?;
        let i = self.i;
        let container = node
            .container
            .as_ref()
            .ok_or_else(|| io::Error::other(format!("node {i} has no container")))?;
        container
            .start()
            .await
            .map_err(|e| engine::failed(&format!("starting node {i} again"), e))?;
        node.running = true;
        node.starts += 1;
        engine::wait_ready(&self.docker, &node.id, node.starts, START_TIMEOUT).await
    }

    /// Replaces the node's container by a new one on the same addresses and links; the old
    /// container's log goes to the node's earlier logs.
    async fn restart_empty(&self, node: &mut Node) -> io::Result<()> {
        let old = node.id.clone();
        let log = format!(
            "--- (container {}, removed: the node restarted empty) ---\n{}",
            engine::short(&old),
            engine::logs(&self.docker, &old).await
        );
        self.view
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .earlier_logs
            .push_str(&log);
        if let Some(container) = node.container.take() {
            container
                .rm()
                .await
                .map_err(|e| engine::failed(&format!("removing node {}", self.i), e))?;
        }
        node.running = false;
        let fresh = self
            .spec
            .clone()
            .create_node(self.docker.clone(), &self.reaper, self.i, node.connected)
            .await?;
        *node = fresh;
        Ok(())
    }
}

async fn kill(docker: &testcontainers::bollard::Docker, node: &mut Node) -> io::Result<()> {
    if node.running {
        engine::kill(docker, &node.id).await?;
        node.running = false;
        node.paused = false;
    }
    Ok(())
}

fn running(node: &Node, i: usize) -> io::Result<&ContainerAsync<GenericImage>> {
    match &node.container {
        Some(container) if node.running => Ok(container),
        _ => Err(io::Error::other(format!("node {i} is not running"))),
    }
}

/// Removes a fleet: its nodes' containers (now, as testcontainers would on drop, through the
/// runtime they are dropped in), anything else of the fleet's (by its label), then its
/// networks. Whether all went.
pub(super) async fn remove(
    docker: &testcontainers::bollard::Docker,
    fleet: &str,
    nodes: impl IntoIterator<Item = impl DerefMut<Target = Node>>,
    networks: &[String],
) -> bool {
    for mut node in nodes {
        if let Some(container) = node.container.take() {
            let _ = container.rm().await;
        }
    }
    engine::remove_fleet(docker, fleet, networks).await
}

impl Inner {
    /// An operation on node `i`.
    pub(super) fn op(&self, i: usize) -> Op {
        Op {
            spec: self.spec.clone(),
            docker: self.engine.docker.clone(),
            node: self.nodes[i].clone(),
            view: self.views[i].clone(),
            reaper: self.reaper.clone(),
            i,
        }
    }

    /// Node `i` as the getters see it.
    pub(super) fn view(&self, i: usize) -> View {
        self.views[i]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every node answers PING at each of its addresses: the engine's bridge networks are
    /// routed from here (not so under Docker Desktop's virtual machine, or a remote engine).
    pub(super) async fn check_reachable(spec: &Spec, nodes: usize) -> io::Result<()> {
        for i in 0..nodes {
            for side in Side::ALL {
                let ip = spec.address(i, side);
                let url = format!("redis://{ip}:{PORT}");
                let answered = tokio::time::timeout(Duration::from_secs(5), async {
                    let client = redis::Client::open(url.as_str())?;
                    let mut conn = client.get_multiplexed_async_connection().await?;
                    redis::cmd("PING").query_async::<String>(&mut conn).await
                })
                .await;
                let why = match answered {
                    Ok(Ok(_)) => continue,
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "no answer in 5 s".to_string(),
                };
                return Err(io::Error::other(format!(
                    "node {i} is ready but does not answer at {ip}:{PORT} ({why}): server \
                     arguments that move its port, bind it elsewhere or ask for a password \
                     keep the fleet out; otherwise, container fleets need a local Docker \
                     engine whose bridge networks this machine routes to (Linux; not Docker \
                     Desktop's virtual machine or a remote engine)"
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Inner {
    /// Removes the containers, then anything else of the fleet's (by its label), then the
    /// networks; the reaper stands down once all went (otherwise it tries again as its pipe
    /// closes).
    fn drop(&mut self) {
        let nodes = self.nodes.clone();
        let docker = self.engine.docker.clone();
        let fleet = self.spec.fleet.clone();
        let networks = self.spec.network_ids();
        let reaper = self.reaper.clone();
        self.engine.finish(async move {
            let mut locked = Vec::with_capacity(nodes.len());
            for node in nodes {
                locked.push(node.lock_owned().await);
            }
            if remove(&docker, &fleet, locked, &networks).await {
                stand_down(&reaper);
            }
        });
    }
}
