//! A container fleet's nodes: what every node is made from ([`Spec`]), each node's container
//! and what was done to it ([`Node`]), and the operations on them ([`Inner`]): start, kill,
//! pause, restart, and cutting a node from a side's network or joining it again.

use std::io;
use std::net::Ipv4Addr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::cleanup::Resources;
use super::docker::{self, docker, Subnet};
use super::{Side, FIRST_HOST, PAUSE_TRIES, PORT};
use crate::testkit::START_TIMEOUT;

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
    pub(super) subnet: Subnet,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) spec: Spec,
    pub(super) nodes: Vec<Mutex<Node>>,
    pub(super) resources: Resources,
}

/// One node: its current container and what was done to it.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) container: String,
    /// How many times this container has started (each start logs one ready line).
    starts: usize,
    running: bool,
    paused: bool,
    /// Whether the container is on each side's network.
    pub(super) connected: [bool; 2],
    /// The logs of the containers this node had before (see `restart_empty`).
    pub(super) earlier_logs: String,
}

impl Spec {
    pub(super) fn address(&self, i: usize, side: Side) -> Ipv4Addr {
        let host = u8::try_from(FIRST_HOST + i).expect("at most MAX_NODES nodes");
        docker::address(self.networks[side.index()].subnet, host)
    }

    /// Runs node `i`'s container on the networks of the sides in `connected`, and waits
    /// until it serves clients.
    pub(super) fn create_node(
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
    pub(super) fn node(&self, i: usize) -> MutexGuard<'_, Node> {
        self.nodes[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn kill(&self, i: usize) -> io::Result<()> {
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

    pub(super) fn pause(&self, i: usize) -> io::Result<()> {
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

    pub(super) fn resume(&self, i: usize) -> io::Result<()> {
        let mut node = self.running(i)?;
        if node.paused {
            docker(&["unpause", &node.container])?;
            node.paused = false;
        }
        Ok(())
    }

    pub(super) fn restart(&self, i: usize) -> io::Result<()> {
        self.kill(i)?;
        let mut node = self.node(i);
        docker(&["start", &node.container])?;
        node.running = true;
        node.starts += 1;
        docker::wait_ready(&node.container, node.starts, START_TIMEOUT)
    }

    pub(super) fn restart_empty(&self, i: usize) -> io::Result<()> {
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

    pub(super) fn partition(&self, i: usize, side: Side) -> io::Result<()> {
        let mut node = self.node(i);
        self.spec.disconnect(&mut node, side)
    }

    pub(super) fn heal(&self, i: usize, side: Side) -> io::Result<()> {
        let mut node = self.node(i);
        self.spec.connect(&mut node, i, side)
    }

    /// Runs `op` on every link at once; the first error, after all have run.
    pub(super) fn in_parallel<F>(&self, links: &[(usize, Side)], op: F) -> io::Result<()>
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
    pub(super) fn check_reachable(&self) -> io::Result<()> {
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
