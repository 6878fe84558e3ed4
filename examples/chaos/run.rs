//! One chaos run: the fleet, the register's server, the clients, the nemesis, the quiet
//! period and the leak scan, then the check (see `main` for the options).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use quorum_lock::testkit::{ClusterFleet, Fleet, Persistence};
use quorum_lock::Quorum;
use serde_json::json;

use crate::check::{self, Report};
use crate::history::{self, Recorder};
use crate::nemesis::{self, Nodes};
use crate::workload::{self, Control, Settings};

/// How long a quorum must have been free of faults before a `NoQuorum` counts as spurious: a
/// restarted node's connection is re-made in the background, a silent node's breaker probes
/// once per node timeout, and a black hole's held data is delivered at the heal.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(3);

/// The clients' node timeout: long enough that a loaded 2-core machine running the fleet, the
/// proxies and the clients does not stall a healthy node's answer past it (a liveness check
/// on a starved machine would judge the machine), short enough that faults matter.
const NODE_TIMEOUT: Duration = Duration::from_millis(400);

/// How long the nodes may take, after the clients went idle, to drop every key of the run but
/// the fencing counters: the longest lease of the workload, with room to spare.
const QUIET_LIMIT: Duration = Duration::from_secs(20);

/// What a run does.
#[derive(Debug, Clone)]
pub struct Options {
    pub seconds: u64,
    pub seed: u64,
    pub history: Option<std::path::PathBuf>,
    pub clients: usize,
    /// `Quorum::AtLeast(4)` of 5, with one node that may forget (no AOF, clock jumps).
    pub quorum4: bool,
    /// An existing fleet (no node faults).
    pub nodes: Option<Vec<String>>,
    /// Cluster nodes: five clusters of two primaries, each with a replica.
    pub clusters: bool,
    /// Every link's latency outside faults (none: loopback).
    pub base_latency: Option<Duration>,
    /// Print the schedule and a progress line.
    pub verbose: bool,
    /// Only these faults of the seed's schedule, by number (`None`: all; a shrunk program's).
    pub faults: Option<Vec<u64>>,
    /// Only these kinds (`None`: all; a shrunk program's).
    pub kinds: Option<Vec<String>>,
    /// Durable votes (`DurableVotes::Local`) on every client; the nemesis adds machine
    /// crashes on any node.
    pub durable: bool,
}

/// Runs the workload and the nemesis for `options.seconds`, then checks the history.
pub async fn run(args: Options) -> Report {
    let count = 5;
    let forgetful = args.quorum4.then_some(count - 1);
    let prefix = format!("{{chaos-{}}}:", args.seed);
    let nodes = match (&args.nodes, args.clusters) {
        (Some(_), _) => Nodes::External,
        (None, false) => {
            let mut builder = Fleet::builder()
                .nodes(count)
                .proxied(true)
                .persistence(Persistence::AofAlways);
            if let Some(node) = forgetful {
                builder = builder.node_persistence(node, Persistence::None);
            }
            Nodes::Standalone(Arc::new(builder.start().expect("start the fleet")))
        }
        // Two primaries: one to migrate the run's slot to, and too few to count a silent
        // one failed (the nemesis's pauses and kills never fail over on their own).
        (None, true) => Nodes::Clusters {
            fleet: Arc::new(
                ClusterFleet::builder()
                    .clusters(count)
                    .primaries(2)
                    .replicas(1)
                    // Longer than any pause of the schedule: a member paused for 3 s must
                    // not come back to a cluster that counted it unreachable.
                    .node_timeout(Duration::from_secs(5))
                    .start()
                    .expect("start the cluster fleet"),
            ),
            slot: quorum_lock::names::hash_slot(prefix.as_bytes()),
        },
    };
    let (urls, direct): (Vec<String>, Vec<String>) = match (&nodes, &args.nodes) {
        (Nodes::Standalone(f), _) => (f.urls(), (0..f.len()).map(|i| f.direct_url(i)).collect()),
        (Nodes::Clusters { fleet, .. }, _) => (
            fleet.urls(),
            (0..fleet.len())
                .flat_map(|c| (0..fleet.members()).map(move |m| (c, m)))
                .map(|(c, m)| fleet.member_url(c, m))
                .collect(),
        ),
        (Nodes::External, Some(urls)) => (urls.clone(), urls.clone()),
        (Nodes::External, None) => unreachable!(),
    };
    let register = Fleet::start(1).expect("start the register's server");
    let quorum = if args.quorum4 {
        Quorum::AtLeast(4)
    } else {
        Quorum::Majority
    };
    let quorum_size = if args.quorum4 { 4 } else { urls.len() / 2 + 1 };
    let settings = Settings {
        nodes: urls.clone(),
        quorum,
        register: register.url(0),
        prefix,
        node_timeout: NODE_TIMEOUT,
        kinds: args.kinds.clone(),
        durable: args.durable,
    };
    let run_for = Duration::from_secs(args.seconds);
    let mut plan = nemesis::schedule(
        args.seed,
        run_for,
        nemesis::Scope {
            nodes: urls.len(),
            clients: args.clients,
            max_nodes: urls.len() - quorum_size,
            forgetful,
            node_faults: !matches!(nodes, Nodes::External),
            clusters: args.clusters,
            crashes: args.durable,
        },
    );
    if let Some(keep) = &args.faults {
        plan.retain(|p| keep.contains(&p.id));
    }
    let planned: Vec<u64> = plan.iter().map(|p| p.id).collect();
    println!(
        "chaos: seed {} | {} s | {} clients | {} {}, quorum {} | {} faults planned",
        args.seed,
        args.seconds,
        args.clients,
        urls.len(),
        match (args.clusters, args.durable) {
            (true, _) => "cluster nodes",
            (false, true) => "nodes, durable votes",
            (false, false) => "nodes",
        },
        quorum_size,
        plan.len()
    );
    if args.verbose {
        for p in &plan {
            println!("  fault {p}");
        }
    }
    let recorder = Recorder::default();
    recorder.record(
        "info",
        "start",
        None,
        json!({"seed": args.seed, "nodes": urls.len(), "quorum": quorum_size,
               "clients": args.clients, "seconds": args.seconds, "clusters": args.clusters,
               "durable": args.durable,
               "scanned": direct.len()}),
    );
    let control = Arc::new(Control::new(args.clients));
    let clients: Vec<_> = (0..args.clients as u64)
        .map(|i| {
            workload::spawn(
                i,
                args.seed,
                settings.clone(),
                recorder.clone(),
                control.clone(),
            )
        })
        .collect();
    let nemesis = tokio::spawn(nemesis::run(
        plan,
        args.base_latency,
        nodes.clone(),
        control.clone(),
        recorder.clone(),
    ));
    let started = tokio::time::Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_secs(5));
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick(), if args.verbose => {
                println!(
                    "chaos: {:>4} s | {} history lines",
                    started.elapsed().as_secs(),
                    recorder.len()
                );
            }
            () = tokio::time::sleep_until(started + run_for) => break,
        }
    }
    control.stop.store(true, Ordering::Relaxed);
    let _ = nemesis.await;
    // Every client ends its hold in progress and goes idle (its subscriptions must go with
    // its waiters); they stay alive until the scan.
    // (A client thread that ended otherwise panicked: its join below says so.)
    while control.idle.load(Ordering::Relaxed) < args.clients
        && !clients.iter().any(|c| c.is_finished())
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let quiet = tokio::time::Instant::now();
    scan_for_leaks(&direct, &settings.prefix, &recorder).await;
    if args.verbose {
        println!(
            "chaos: the nodes were quiet {} ms after the clients went idle",
            quiet.elapsed().as_millis()
        );
    }
    control.release.store(true, Ordering::Relaxed);
    let mut tally = workload::Tally::default();
    for c in clients {
        let t = c.join().expect("a client thread panicked");
        tally.calls += t.calls;
        tally.holds += t.holds;
        tally.failed += t.failed;
        tally.noticed += t.noticed;
    }
    recorder.record("info", "stop", None, json!({}));
    println!(
        "chaos: {} calls, {} holds ({} fair locks held from grant notices), {} calls failed or unknown",
        tally.calls, tally.holds, tally.noticed, tally.failed
    );
    let ops = match &args.history {
        Some(path) => {
            recorder.write_to(path).expect("write the history");
            // The checker reads the file, as an outside checker would.
            let (ops, _) = history::read(path).expect("read the history back");
            println!("chaos: history in {}", path.display());
            ops
        }
        None => recorder.ops(),
    };
    let mut report = check::check(ops, LIVENESS_BOUND.as_nanos() as u64);
    report.planned = planned;
    report
}

/// Waits (up to [`QUIET_LIMIT`]) until the nodes keep nothing of the run but its fencing
/// counters and no subscription, then records what each node still has.
async fn scan_for_leaks(urls: &[String], prefix: &str, recorder: &Recorder) {
    let deadline = tokio::time::Instant::now() + QUIET_LIMIT;
    loop {
        let mut left = Vec::new();
        for url in urls {
            left.push(leftovers(url, prefix).await);
        }
        let clean = left.iter().all(|(k, c)| k.is_empty() && c.is_empty());
        if clean || tokio::time::Instant::now() >= deadline {
            for (i, (keys, channels)) in left.into_iter().enumerate() {
                recorder.record(
                    "ok",
                    "leak-scan",
                    None,
                    json!({"node": i, "keys": keys, "channels": channels}),
                );
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The run's keys on a node other than its fencing counters, and its channels.
async fn leftovers(url: &str, prefix: &str) -> (Vec<String>, Vec<String>) {
    let Ok(client) = redis::Client::open(url) else {
        return (vec![format!("{url}: not a URL")], Vec::new());
    };
    let conn = tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await;
    let Ok(Ok(mut conn)) = conn else {
        return (
            vec!["(the node did not answer the scan: nothing could be checked)".into()],
            Vec::new(),
        );
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    // Fencing counters have no TTL, by design: their names up to the key's hash tag.
    let fence = String::from_utf8_lossy(&quorum_lock::names::fencing_counter(b"k")).into_owned();
    let fence_head = fence.split('{').next().unwrap_or(&fence).to_string();
    let keys = keys
        .into_iter()
        .filter(|k| !k.starts_with(&fence_head))
        .collect();
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("*{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    (keys, channels)
}
