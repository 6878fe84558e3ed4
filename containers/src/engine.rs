//! The Docker engine as the fleets use it: a runtime of the fleet's own that every operation
//! runs on, the engine's client (bollard, as the testcontainers crate re-exports it), images,
//! bridge networks on free subnets, links made and cut at fixed addresses, kills, and a
//! container's readiness and logs.
//!
//! Containers are created, started, paused and removed through testcontainers; what the crate
//! has no call for (a network with a fixed subnet, an address pinned on a network, a SIGKILL)
//! goes to the same engine through bollard. bollard builds each request's path without an API
//! version prefix, so the engine answers at its own version: tried on Docker Engine 20.10 (API
//! 1.41), which refuses a client that names a later version in the path. That is how these
//! crates work today, not a promise: the smoke test in tests/containers.rs says so loudly
//! should a later bollard name a version this engine refuses.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use testcontainers::bollard::models::{
    EndpointIpamConfig, EndpointSettings, Ipam, IpamConfig, NetworkConnectRequest,
    NetworkCreateRequest, NetworkDisconnectRequest,
};
use testcontainers::bollard::query_parameters::{
    InspectContainerOptions, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use testcontainers::bollard::Docker;

/// The label on every container and network a fleet creates; its value is the fleet's id.
pub(crate) const LABEL: &str = "quorum-lock.testkit";

/// What redis-server logs once it serves clients (after loading its AOF).
pub(crate) const READY_LINE: &str = "Ready to accept connections";

/// The engine's client and the runtime every operation of one fleet runs on. A runtime of the
/// fleet's own: the caller's executor may be any (or a test's runtime that ends before a
/// fleet kept in a static), and testcontainers removes a container it drops through the
/// runtime it is dropped in.
#[derive(Debug)]
pub(crate) struct Engine {
    runtime: Option<tokio::runtime::Runtime>,
    pub(crate) docker: Docker,
}

/// An engine error as an `io::Error`, with what was being done.
pub(crate) fn failed(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

impl Engine {
    /// A client for the engine `DOCKER_HOST` names (the local socket by default) and the
    /// fleet's runtime.
    pub(crate) fn new() -> io::Result<Engine> {
        let docker = Docker::connect_with_defaults()
            .map_err(|e| failed("connecting to the Docker engine", e))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("quorum-lock-containers")
            .enable_all()
            .build()?;
        Ok(Engine {
            runtime: Some(runtime),
            docker,
        })
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime lives until the fleet is dropped")
    }

    /// Runs `op` on the fleet's runtime and waits for it from any executor. If the waiting
    /// future is dropped, `op` still runs to the end.
    pub(crate) async fn run<T, F>(&self, op: F) -> io::Result<T>
    where
        F: Future<Output = io::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.runtime()
            .spawn(op)
            .await
            .map_err(|e| io::Error::other(format!("a container operation panicked: {e}")))?
    }

    /// Runs `op` on the fleet's runtime from this thread, which must be outside any runtime
    /// (the thread that starts a fleet).
    pub(crate) fn block_on<T, F>(&self, op: F) -> T
    where
        F: Future<Output = T>,
    {
        self.runtime().block_on(op)
    }

    /// Runs `op` on the fleet's runtime and blocks this thread until it ends (from a thread of
    /// its own: the caller may be inside a runtime, where blocking on another is refused).
    pub(crate) fn block<T, F>(&self, op: F) -> T
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let handle = self.runtime().handle().clone();
        std::thread::spawn(move || handle.block_on(op))
            .join()
            .expect("a blocking container operation panicked")
    }

    /// Runs `op` on the fleet's runtime and blocks this thread until it ends: for `Drop`, from
    /// a thread of its own (the caller may be inside a runtime, where blocking on another one
    /// is refused), and then shuts the runtime down.
    pub(crate) fn finish<F>(&mut self, op: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if let Some(runtime) = self.runtime.take() {
            let ended = std::thread::spawn(move || {
                let _ = runtime.block_on(runtime.spawn(op));
                drop(runtime);
            })
            .join();
            if ended.is_err() {
                eprintln!(
                    "quorum-lock-containers: removing a fleet panicked; its reaper removes it"
                );
            }
        }
    }
}

impl Drop for Engine {
    /// A runtime not shut down by [`Engine::finish`] (a start that failed) stops in the
    /// background: dropping it here could block inside the caller's runtime, which panics.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Checks that the engine answers and has `image`, without ever pulling it.
pub(crate) async fn check_image(docker: &Docker, image: &str) -> io::Result<()> {
    match docker.inspect_image(image).await {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("No such image") || e.to_string().contains("404") => {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "the image {image} is not on this machine, and the test kit never pulls one: \
                     build it with docker/build-image.sh (it packs the machine's redis-server), \
                     or set QUORUM_LOCK_REDIS_IMAGE to a Redis image that is present"
                ),
            ))
        }
        Err(e) if e.to_string().contains("invalid reference format") => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{image:?} is not a valid image name: {e}"),
        )),
        Err(e) => Err(io::Error::other(format!(
            "the Docker engine did not answer (is it running, and may this user use it?): {e}"
        ))),
    }
}

/// A /24 subnet `a.b.c.0/24`, by its first three octets.
pub(crate) type Subnet = [u8; 3];

/// The address of host `host` in `subnet`.
pub(crate) fn address(subnet: Subnet, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(subnet[0], subnet[1], subnet[2], host)
}

/// Creates a bridge network on a /24 that no other network or route of this machine uses, and
/// returns its id and subnet. Subnets are drawn at random from 172.28.0.0/14 (1,024 of them);
/// one that a route of this machine covers is skipped, and one that Docker refuses because
/// another network has it (another fleet, maybe in another process, drew it first) is
/// retried with another draw. Addresses the engine hands out itself (a container's first
/// address, before it is pinned) come from the upper half, [`DYNAMIC_RANGE`]; pinned ones
/// are below it.
pub(crate) async fn create_network(
    docker: &Docker,
    name: &str,
    fleet: &str,
) -> io::Result<(String, Subnet)> {
    let routes = host_routes();
    let mut last = None;
    for _ in 0..64 {
        let subnet: Subnet = [172, 28 + rand::random_range(0..4u8), rand::random::<u8>()];
        if routes
            .iter()
            .any(|&(dest, mask)| overlaps(subnet, dest, mask))
        {
            continue;
        }
        let request = NetworkCreateRequest {
            name: name.to_string(),
            driver: Some("bridge".into()),
            ipam: Some(Ipam {
                config: Some(vec![IpamConfig {
                    subnet: Some(format!("{}/24", address(subnet, 0))),
                    ip_range: Some(format!("{}/25", address(subnet, DYNAMIC_RANGE))),
                    gateway: Some(address(subnet, 1).to_string()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            labels: Some(HashMap::from([(LABEL.to_string(), fleet.to_string())])),
            ..Default::default()
        };
        match docker.create_network(request).await {
            Ok(created) => return Ok((created.id, subnet)),
            Err(e) if e.to_string().contains("overlaps") => last = Some(e.to_string()),
            Err(e) => return Err(failed("creating a network", e)),
        }
    }
    Err(io::Error::other(last.unwrap_or_else(|| {
        "no free /24 in 172.28.0.0/14: this machine's routes cover them all".into()
    })))
}

/// The first host number of the addresses the engine hands out itself (x.x.x.128/25).
pub(crate) const DYNAMIC_RANGE: u8 = 128;

/// Joins `container` to `network` at `ip`.
pub(crate) async fn connect(
    docker: &Docker,
    network: &str,
    container: &str,
    ip: Ipv4Addr,
) -> io::Result<()> {
    let request = NetworkConnectRequest {
        container: container.to_string(),
        endpoint_config: Some(EndpointSettings {
            ipam_config: Some(EndpointIpamConfig {
                ipv4_address: Some(ip.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    docker.connect_network(network, request).await.map_err(|e| {
        failed(
            &format!("joining {} to its network at {ip}", short(container)),
            e,
        )
    })
}

/// Takes `container` off `network`.
pub(crate) async fn disconnect(docker: &Docker, network: &str, container: &str) -> io::Result<()> {
    let request = NetworkDisconnectRequest {
        container: container.to_string(),
        force: Some(true),
    };
    docker
        .disconnect_network(network, request)
        .await
        .map_err(|e| failed(&format!("cutting {} from a network", short(container)), e))
}

/// SIGKILLs `container` (also when paused) and waits until the engine says it has stopped.
pub(crate) async fn kill(docker: &Docker, container: &str) -> io::Result<()> {
    let options = KillContainerOptionsBuilder::new().signal("KILL").build();
    docker
        .kill_container(container, Some(options))
        .await
        .map_err(|e| failed(&format!("killing {}", short(container)), e))?;
    let started = Instant::now();
    loop {
        let state = docker
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .map_err(|e| failed(&format!("inspecting {}", short(container)), e))?
            .state;
        if !state.and_then(|s| s.running).unwrap_or(false) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(io::Error::other(format!(
                "container {} still runs 30 s after SIGKILL",
                short(container)
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Removes the containers and the networks of the fleet whose label value is `fleet` (the
/// containers first: a network with containers on it cannot be removed). Whether all went.
pub(crate) async fn remove_fleet(docker: &Docker, fleet: &str, networks: &[String]) -> bool {
    let filters = HashMap::from([("label", vec![format!("{LABEL}={fleet}")])]);
    let listed = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await;
    let mut removed = listed.is_ok();
    for container in listed.unwrap_or_default() {
        let Some(id) = container.id else { continue };
        let options = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        removed &= docker.remove_container(&id, Some(options)).await.is_ok();
    }
    for network in networks {
        removed &= docker.remove_network(network).await.is_ok();
    }
    removed
}

/// The destinations and masks of this machine's routes other than the default one (none
/// where /proc/net/route is missing).
fn host_routes() -> Vec<(u32, u32)> {
    std::fs::read_to_string("/proc/net/route")
        .map(|table| parse_routes(&table))
        .unwrap_or_default()
}

fn parse_routes(table: &str) -> Vec<(u32, u32)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // The kernel prints each address as a native integer whose bytes in memory are
            // the address in network order.
            let parse = |s: &str| {
                let native = u32::from_str_radix(s, 16).ok()?;
                Some(u32::from_be_bytes(native.to_ne_bytes()))
            };
            Some((parse(fields.get(1)?)?, parse(fields.get(7)?)?))
        })
        .filter(|&(_, mask)| mask != 0)
        .collect()
}

/// Whether `subnet`/24 and `dest`/`mask` share an address: they agree on the shorter prefix.
fn overlaps(subnet: Subnet, dest: u32, mask: u32) -> bool {
    let net = u32::from(address(subnet, 0));
    let shorter = mask & 0xffff_ff00;
    net & shorter == dest & shorter
}

/// Waits until `container` has logged the ready line `starts` times in all (once per run),
/// i.e. its latest start serves clients.
///
/// # Errors
/// The container stopped first, or `limit` passed; the message holds its log.
pub(crate) async fn wait_ready(
    docker: &Docker,
    container: &str,
    starts: usize,
    limit: Duration,
) -> io::Result<()> {
    let options = LogsOptionsBuilder::new()
        .follow(true)
        .stdout(true)
        .stderr(true)
        .build();
    let mut log = docker.logs(container, Some(options));
    let started = Instant::now();
    let mut text = String::new();
    let ready = tokio::time::timeout(limit, async {
        while let Some(Ok(chunk)) = log.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            if text.matches(READY_LINE).count() >= starts {
                return true;
            }
        }
        // End of the log: the container stopped.
        false
    })
    .await;
    match ready {
        Ok(true) => Ok(()),
        outcome => {
            let why = match outcome {
                Ok(_) => "stopped before it was ready",
                Err(_) => "was not ready in time",
            };
            Err(io::Error::other(format!(
                "container {} {why} ({:?}); its log:\n{}",
                short(container),
                started.elapsed(),
                logs(docker, container).await
            )))
        }
    }
}

/// `container`'s log (standard output and error), or why it could not be read.
pub(crate) async fn logs(docker: &Docker, container: &str) -> String {
    let options = LogsOptionsBuilder::new().stdout(true).stderr(true).build();
    let mut log = docker.logs(container, Some(options));
    let mut text = String::new();
    while let Some(chunk) = log.next().await {
        match chunk {
            Ok(chunk) => text.push_str(&String::from_utf8_lossy(&chunk.into_bytes())),
            Err(e) => {
                text.push_str(&format!("(reading the log failed: {e})\n"));
                break;
            }
        }
    }
    text
}

/// The first 12 characters of an id, as `docker ps` shows it.
pub(crate) fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_endian = "little")]
    fn routes_are_read_in_network_order_and_the_default_route_is_skipped() {
        let table =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
            docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        assert_eq!(
            parse_routes(table),
            [(
                u32::from(Ipv4Addr::new(172, 17, 0, 0)),
                u32::from(Ipv4Addr::new(255, 255, 0, 0))
            )]
        );
    }

    #[test]
    fn a_subnet_overlaps_routes_that_share_its_prefix() {
        let net = |a: u8, b: u8, c: u8| u32::from(Ipv4Addr::new(a, b, c, 0));
        let mask = |bits: u32| u32::MAX << (32 - bits);
        // A /16 route covers the /24.
        assert!(overlaps([172, 28, 5], net(172, 28, 0), mask(16)));
        // A /28 inside the /24.
        assert!(overlaps([172, 28, 5], net(172, 28, 5) | 0x10, mask(28)));
        // Disjoint.
        assert!(!overlaps([172, 28, 5], net(172, 28, 6), mask(24)));
        assert!(!overlaps([172, 28, 5], net(172, 17, 0), mask(16)));
        assert!(!overlaps([172, 29, 5], net(172, 28, 0), mask(16)));
    }
}
