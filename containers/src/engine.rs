//! The `docker` command for container fleets: running it, bridge networks on free subnets, and
//! readiness from a container's log.
//!
//! The command, not an API client: it negotiates the API version with the engine (a client
//! library pins one, and engines older than that version refuse every call), and it needs no
//! async runtime, so fleets work from any test's runtime, from statics and from `Drop`.

use std::io::{self, BufRead, BufReader};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The label on every container and network a fleet creates; its value is the fleet's id.
pub(crate) const LABEL: &str = "quorum-lock.testkit";

/// What redis-server logs once it serves clients (after loading its AOF).
const READY_LINE: &str = "Ready to accept connections";

/// Runs `docker` with `args` and returns its standard output, trimmed.
///
/// # Errors
/// The command is missing (the message says so), or it failed (the message holds its
/// standard error).
pub(crate) fn docker<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> io::Result<String> {
    let out = command()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "the docker command is not on PATH: container fleets drive Docker through it",
                )
            } else {
                e
            }
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        let shown: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .take(4)
            .collect();
        Err(io::Error::other(format!(
            "docker {} failed ({}): {}",
            shown.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The `docker` command, in a process group of its own: a Ctrl-C meant for the tests must
/// not interrupt an operation half-way in the engine (a container created but never
/// reported); the operation completes, and the fleet's reaper removes what it made.
fn command() -> Command {
    let mut cmd = Command::new("docker");
    cmd.process_group(0);
    cmd
}

/// Runs `f` on a thread of its own and waits for it without blocking the caller's executor
/// (any executor: the answer comes through a channel). If the waiting future is dropped, `f`
/// still runs to the end.
pub(crate) async fn off_thread<T, F>(f: F) -> io::Result<T>
where
    F: FnOnce() -> io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("quorum-lock-docker".into())
        .spawn(move || {
            let _ = tx.send(f());
        })?;
    rx.await
        .map_err(|_| io::Error::other("a docker command's thread panicked"))?
}

/// Checks that the engine answers and has `image`, without ever pulling it.
pub(crate) fn check_image(image: &str) -> io::Result<()> {
    match docker(&["image", "inspect", "--format", "{{.Id}}", image]) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(e),
        Err(e) if e.to_string().contains("No such image") => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "the image {image} is not on this machine, and the test kit never pulls one: \
                 build it with docker/build-image.sh (it packs the machine's redis-server), or \
                 set QUORUM_LOCK_REDIS_IMAGE to a Redis image that is present"
            ),
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
/// retried with another draw.
pub(crate) fn create_network(name: &str, fleet: &str) -> io::Result<(String, Subnet)> {
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
        let cidr = format!("{}/24", address(subnet, 0));
        let gateway = address(subnet, 1).to_string();
        let label = format!("{LABEL}={fleet}");
        match docker(&[
            "network",
            "create",
            "--driver",
            "bridge",
            "--subnet",
            &cidr,
            "--gateway",
            &gateway,
            "--label",
            &label,
            name,
        ]) {
            Ok(id) => return Ok((id, subnet)),
            Err(e) if e.to_string().contains("overlaps") => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::other("no free /24 in 172.28.0.0/14: this machine's routes cover them all")
    }))
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

/// Waits until container `id` has logged the ready line `starts` times in all (once per run),
/// i.e. its latest start serves clients.
///
/// # Errors
/// The container stopped first, or `limit` passed; the message holds its log.
pub(crate) fn wait_ready(id: &str, starts: usize, limit: Duration) -> io::Result<()> {
    let mut follower = command()
        .args(["logs", "--follow", id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let (tx, rx) = mpsc::channel();
    let stdout = follower.stdout.take().expect("piped");
    std::thread::spawn(move || {
        let mut seen = 0;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains(READY_LINE) {
                seen += 1;
                if seen == starts {
                    let _ = tx.send(true);
                }
            }
        }
        // End of the log: the container stopped (or the follower was killed).
        let _ = tx.send(false);
    });
    let started = Instant::now();
    let outcome = rx.recv_timeout(limit);
    let _ = follower.kill();
    let _ = follower.wait();
    match outcome {
        Ok(true) => Ok(()),
        Ok(false) | Err(_) => {
            let why = match outcome {
                Ok(_) => "stopped before it was ready",
                Err(_) => "was not ready in time",
            };
            Err(io::Error::other(format!(
                "container {} {why} ({:?}); its log:\n{}",
                short(id),
                started.elapsed(),
                logs(id)
            )))
        }
    }
}

/// Container `id`'s log (standard output and error), or why it could not be read.
pub(crate) fn logs(id: &str) -> String {
    match command().args(["logs", id]).stdin(Stdio::null()).output() {
        Ok(out) => format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => format!("(docker logs failed: {e})\n"),
    }
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
