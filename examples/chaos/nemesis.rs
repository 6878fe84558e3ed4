//! The nemesis: a seeded schedule of faults, printed with the seed, that come and go while the
//! clients run. Node faults: pause (SIGSTOP), kill and restart (from its AOF, or empty where
//! the run's quorum tolerates a forgetful node), a slow link and a black hole through the test
//! kit's proxy, and, where a forgetful node is tolerated, a clock jump (every key expired
//! early). On cluster nodes (`--clusters`: every key of the run in one slot) the node faults
//! are on the member serving that slot: a pause, a slot migration (keys and all, with a
//! stretch in the migrating state where the source answers `ASK`), a failover to its replica,
//! and where the quorum tolerates a forgetful node, a kill and restart (empty) and a forced
//! failover (`TAKEOVER`: what the replica had not yet copied is lost). In durable runs, a
//! machine crash on any node: its AOF is switched off for the fault's length (its disk takes
//! no more writes, so its `WAITAOF` confirms none), then it is killed and restarted from its
//! AOF, losing every write of that stretch; not a forgetful fault for durable votes, which
//! never count an unsynced write; one at a time, on top of the other node faults (its node
//! gives no durable vote meanwhile), and at a quorum's edge: for its second half, other nodes
//! are down (killed) up to the limit, so that the votes given then are a bare quorum that
//! counts the crashing node, and as they come back the rest are paused a while, so that the
//! nodes back are the next quorum. Client faults: a
//! client's thread frozen past its leases. At most `max_nodes` nodes are faulty at once, at
//! most one of them forgetful. Every 12 s ends with 4 s without any fault.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use quorum_lock::testkit::{ClusterFleet, Fault, Fleet};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::history::Recorder;
use crate::workload::Control;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum What {
    Pause,
    /// Killed, then restarted (from its AOF, or empty when `forgets`).
    Kill {
        forgets: bool,
    },
    Slow(Duration),
    BlackHole,
    /// Every key of the node expired at once (its clock jumped forward).
    ClockJump,
    /// Every node's link slowed by less than the node timeout (a slower network, not a
    /// fault: the fleet must stay as available as before).
    SlowAll(Duration),
    Freeze,
    /// The run's slot moves to another primary of the cluster.
    Migrate,
    /// The slot's primary hands over to its replica (`force`: without its agreement, and
    /// what the replica had not copied yet is lost).
    Failover {
        force: bool,
    },
    /// A machine crash (durable runs): the node's disk takes no writes from the fault's start
    /// (AOF off), and at its end the node restarts from what the disk has.
    Crash,
}

impl What {
    fn name(self) -> String {
        match self {
            What::Pause => "pause".into(),
            What::Kill { forgets: false } => "kill+restart".into(),
            What::Kill { forgets: true } => "kill+restart-empty".into(),
            What::Slow(d) => format!("slow-{}ms", d.as_millis()),
            What::BlackHole => "black-hole".into(),
            What::ClockJump => "clock-jump".into(),
            What::SlowAll(d) => format!("all-links-slow-{}ms", d.as_millis()),
            What::Freeze => "freeze".into(),
            What::Migrate => "slot-migration".into(),
            What::Failover { force: false } => "failover".into(),
            What::Failover { force: true } => "failover-takeover".into(),
            What::Crash => "machine-crash".into(),
        }
    }

    fn forgets(self) -> bool {
        matches!(
            self,
            What::Kill { forgets: true } | What::ClockJump | What::Failover { force: true }
        )
    }

    /// Whether it sets a node's proxy (one setting per proxy at a time).
    fn uses_proxy(self) -> bool {
        matches!(self, What::Slow(_) | What::BlackHole | What::SlowAll(_))
    }

    /// Whether it makes its node faulty (the others: a client's freeze, a network slower
    /// within the node timeout).
    fn on_one_node(self) -> bool {
        !matches!(self, What::Freeze | What::SlowAll(_))
    }
}

/// One fault of the schedule: on node `target` (or client, for a freeze) from `at` for `lasts`.
#[derive(Debug, Clone, Copy)]
pub struct Planned {
    pub id: u64,
    pub at: Duration,
    pub lasts: Duration,
    pub target: usize,
    pub what: What,
}

impl std::fmt::Display for Planned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = match self.what {
            What::Freeze => format!("client {}", self.target),
            What::SlowAll(_) => "every node".to_string(),
            _ => format!("node {}", self.target),
        };
        write!(
            f,
            "#{} at {:.1}s for {:.1}s: {} on {on}",
            self.id,
            self.at.as_secs_f64(),
            self.lasts.as_secs_f64(),
            self.what.name()
        )
    }
}

/// The schedule's cycle: faults come and go for `CYCLE - QUIET`, then none for `QUIET`, when
/// the fleet must work as a healthy one (a fair line's order, no spurious failure).
const CYCLE: Duration = Duration::from_secs(12);
const QUIET: Duration = Duration::from_secs(4);
/// How long into a quiet stretch the clients are asked to line up.
const LINE_AFTER: Duration = Duration::from_millis(300);

/// The least gap between two faults on one node or proxy.
const GAP: Duration = Duration::from_millis(300);

/// How far apart two forgetful faults are kept (longer than any lease of the workload).
const FORGET_GAP: Duration = Duration::from_secs(5);

/// What the schedule may do.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    pub nodes: usize,
    pub clients: usize,
    /// Node faults at once.
    pub max_nodes: usize,
    /// The one node that may forget (restart empty, clock jump), if the quorum tolerates it.
    pub forgetful: Option<usize>,
    /// Whether node faults can be made (not on an external fleet).
    pub node_faults: bool,
    /// Cluster nodes: their own faults (no proxies).
    pub clusters: bool,
    /// Machine crashes on any node (durable votes).
    pub crashes: bool,
}

/// The seeded schedule for a run of `run`.
pub fn schedule(seed: u64, run: Duration, scope: Scope) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(0x006e_656d_6573_6973));
    let mut plan: Vec<Planned> = Vec::new();
    let mut at = Duration::from_millis(rng.random_range(300..1500));
    let mut id = 0;
    while at < run {
        // Each cycle ends with a quiet stretch: no fault starts or lasts into it.
        let cycle = at.as_millis() as u64 / CYCLE.as_millis() as u64;
        let quiet_at = CYCLE * (cycle as u32 + 1) - QUIET;
        if at >= quiet_at {
            at = CYCLE * (cycle as u32 + 1) + Duration::from_millis(rng.random_range(0..300));
            continue;
        }
        id += 1;
        let lasts = Duration::from_millis(rng.random_range(300..3000));
        let end = (at + lasts).min(run).min(quiet_at);
        let roll = rng.random_range(0..100);
        let planned = if roll < 15 || !scope.node_faults {
            let lasts = Duration::from_millis(rng.random_range(500..2500));
            Some(Planned {
                id,
                at,
                lasts: lasts.min(quiet_at - at),
                // One draw whatever the client count: a program shrunk to fewer clients
                // keeps the rest of its schedule.
                target: rng.random::<u32>() as usize % scope.clients,
                what: What::Freeze,
            })
        } else {
            let forgetful = scope.forgetful.is_some();
            let what = if scope.clusters {
                match roll {
                    15..=34 => What::Pause,
                    35..=54 => What::Migrate,
                    55..=74 => What::Failover { force: false },
                    75..=89 if forgetful => What::Kill { forgets: true },
                    75..=89 => What::Pause,
                    _ if forgetful => What::Failover { force: true },
                    _ => What::Migrate,
                }
            } else {
                match roll {
                    // (The draw for a crash only in runs that have them: other runs keep
                    // their schedules.)
                    15..=48 if scope.crashes && rng.random_bool(0.6) => What::Crash,
                    15..=31 => What::Pause,
                    32..=48 => What::Kill {
                        forgets: scope.forgetful.is_some() && rng.random_bool(0.3),
                    },
                    49..=62 => What::Slow(Duration::from_millis(rng.random_range(20..400))),
                    63..=77 => What::BlackHole,
                    78..=89 => What::SlowAll(Duration::from_millis(rng.random_range(5..60))),
                    _ if scope.forgetful.is_some() => What::ClockJump,
                    _ => What::Pause,
                }
            };
            let target = match (what.forgets(), scope.forgetful) {
                (true, Some(node)) => node,
                _ => rng.random_range(0..scope.nodes),
            };
            // The forgetful node has no AOF: a restart there always forgets.
            let what = match what {
                What::Kill { .. } if scope.forgetful == Some(target) => {
                    What::Kill { forgets: true }
                }
                other => other,
            };
            // At most `max_nodes` nodes faulty at any moment of this fault, this node not
            // already, and at most one forgetful fault at a time.
            // Faults of one node (or proxy) keep a gap: a restart takes a moment after its
            // planned end.
            let during = |p: &&Planned| p.at < end + GAP && p.at + p.lasts + GAP > at;
            let overlapping: Vec<&Planned> = plan
                .iter()
                .filter(|p| p.what.on_one_node())
                .filter(during)
                .collect();
            // One setting per proxy: a slower network and a node's own link fault do not
            // overlap.
            let proxies_taken = what.uses_proxy()
                && plan
                    .iter()
                    .filter(during)
                    .any(|p| p.what.uses_proxy() && (p.what.on_one_node() != what.on_one_node()));
            // A forgotten entry stays forgotten while its lock is held (until its lease ends
            // or a renewal repairs it): forgetful faults keep FORGET_GAP apart.
            let forgets_near = plan.iter().any(|p| {
                p.what.forgets() && p.at < end + FORGET_GAP && p.at + p.lasts + FORGET_GAP > at
            });
            // A machine crash's stretch (durable runs) is not counted among the faulty nodes:
            // it may come on top of them, one at a time, so that a holder's votes can be a bare
            // quorum that counts the crashing node.
            let counted = overlapping.iter().filter(|p| p.what != What::Crash).count();
            let crashing = overlapping.iter().any(|p| p.what == What::Crash);
            let busy = match what {
                What::SlowAll(_) => proxies_taken,
                What::Crash => overlapping.iter().any(|p| p.target == target) || crashing,
                _ => {
                    overlapping.iter().any(|p| p.target == target)
                        || counted >= scope.max_nodes
                        || (what.forgets() && forgets_near)
                        || proxies_taken
                }
            };
            (!busy).then_some(Planned {
                id,
                at,
                lasts: end - at,
                target,
                what,
            })
        };
        if let Some(p) = planned {
            if p.at + p.lasts <= run {
                plan.push(p);
                if p.what == What::Crash {
                    id = at_the_edge(&p, id, scope, run, &mut rng, &mut plan);
                }
            }
        }
        at += Duration::from_millis(rng.random_range(200..1500));
    }
    plan
}

/// A machine crash at a quorum's edge: for the second half of `crash`'s stretch, where no
/// other node fault meets it, as many other nodes as the schedule allows are down (killed,
/// restarted from their AOF as the crash ends), so that the votes given meanwhile are a bare
/// quorum that counts the crashing node; then the rest are paused for [`AFTER_THE_EDGE`].
/// Returns the last id used.
fn at_the_edge(
    crash: &Planned,
    mut id: u64,
    scope: Scope,
    run: Duration,
    rng: &mut StdRng,
    plan: &mut Vec<Planned>,
) -> u64 {
    let (from, end) = (crash.at + crash.lasts / 2, crash.at + crash.lasts);
    let during =
        |p: &&Planned| p.what.on_one_node() && p.at < end + GAP && p.at + p.lasts + GAP > from;
    let faulty: Vec<usize> = plan.iter().filter(during).map(|p| p.target).collect();
    let counted = plan
        .iter()
        .filter(during)
        .filter(|p| p.what != What::Crash)
        .count();
    // Only where no other node fault meets that half: one ending earlier would leave a
    // quorum without the crashing node.
    if counted > 0 {
        return id;
    }
    let mut free: Vec<usize> = (0..scope.nodes).filter(|n| !faulty.contains(n)).collect();
    for _ in 0..scope.max_nodes {
        if free.is_empty() {
            break;
        }
        let target = free.remove(rng.random_range(0..free.len()));
        id += 1;
        plan.push(Planned {
            id,
            at: from,
            lasts: end - from,
            target,
            // Killed rather than paused: a paused node (or a black hole) still runs the
            // requests it was sent once it is back, and would hold the entries of the votes
            // given meanwhile; a killed one never got them.
            what: What::Kill { forgets: false },
        });
    }
    // Then, as the crashed node and those restart, the rest are paused a while: a holder of
    // the bare quorum can neither renew nor repair its entries, and the restarted nodes alone
    // are a quorum for the next client. (Not into a quiet stretch, nor past the run.)
    let cycle = end.as_millis() as u64 / CYCLE.as_millis() as u64;
    let quiet_at = CYCLE * (cycle as u32 + 1) - QUIET;
    if end + AFTER_THE_EDGE <= quiet_at.min(run) {
        for target in free {
            id += 1;
            plan.push(Planned {
                id,
                at: end,
                lasts: AFTER_THE_EDGE,
                target,
                what: What::Pause,
            });
        }
    }
    id
}

/// How long the nodes that were not down at a crash's edge are paused after it.
const AFTER_THE_EDGE: Duration = Duration::from_millis(1500);

/// The nodes a run's faults are made on.
#[derive(Clone)]
pub enum Nodes {
    /// An existing fleet: client faults only.
    External,
    Standalone(Arc<Fleet>),
    /// Cluster nodes; every key of the run is in `slot`.
    Clusters {
        fleet: Arc<ClusterFleet>,
        slot: u16,
    },
}

impl Nodes {
    fn len(&self) -> usize {
        match self {
            Nodes::External => 0,
            Nodes::Standalone(f) => f.len(),
            Nodes::Clusters { fleet, .. } => fleet.len(),
        }
    }

    /// Sets every standalone node's link to `fault`.
    fn set_links(&self, fault: Fault) {
        if let Nodes::Standalone(f) = self {
            (0..f.len()).for_each(|i| f.proxy(i).set(fault));
        }
    }

    /// Starts `p` on its node; returns the cluster member it touched (0 on standalone nodes).
    fn begin(&self, p: &Planned) -> std::io::Result<usize> {
        let node = p.target;
        match self {
            Nodes::External => Ok(0),
            Nodes::Standalone(f) => match p.what {
                What::Pause => f.pause(node).map(|()| 0),
                What::Kill { .. } => f.kill(node).map(|()| 0),
                What::Slow(d) => {
                    f.proxy(node).set(Fault::Latency(d));
                    Ok(0)
                }
                What::BlackHole => {
                    f.proxy(node).set(Fault::BlackHole);
                    Ok(0)
                }
                What::ClockJump => f.expire_early(node, "*").map(|_| 0),
                What::Crash => {
                    let mut conn = f
                        .client(node)
                        .get_connection_with_timeout(Duration::from_secs(2))
                        .map_err(std::io::Error::other)?;
                    redis::cmd("CONFIG")
                        .arg("SET")
                        .arg("appendonly")
                        .arg("no")
                        .query::<()>(&mut conn)
                        .map_err(std::io::Error::other)?;
                    Ok(0)
                }
                What::SlowAll(d) => {
                    self.set_links(Fault::Latency(d));
                    Ok(0)
                }
                What::Freeze | What::Migrate | What::Failover { .. } => Ok(0),
            },
            Nodes::Clusters { fleet, slot } => {
                // The cluster settled from its last fault first (a member back from a pause
                // rejoins, a failover's map spreads): a fault on a cluster in flux is not the
                // one planned.
                fleet.wait_ok(node)?;
                let primary = settled(|| fleet.primary_of_slot(node, *slot))?;
                match p.what {
                    What::Pause => fleet.pause(node, primary)?,
                    What::Kill { .. } => fleet.kill(node, primary)?,
                    What::Migrate => {
                        let others: Vec<usize> = fleet
                            .primaries(node)?
                            .into_iter()
                            .filter(|&m| m != primary)
                            .collect();
                        let to = *others.first().ok_or_else(|| {
                            std::io::Error::other("no other primary to migrate to")
                        })?;
                        // Half the fault in the migrating state (ASK), then moved (MOVED).
                        fleet.migrate_slot(node, *slot, to, p.lasts / 2)?;
                    }
                    What::Failover { force } => {
                        let replica = fleet.replica_of(node, primary)?.ok_or_else(|| {
                            std::io::Error::other("the slot's primary has no replica")
                        })?;
                        fleet.failover(node, replica, force)?;
                    }
                    _ => {}
                }
                Ok(primary)
            }
        }
    }

    /// Ends `p`, begun on cluster member `member`; a healed link goes back to `healthy`.
    fn end(&self, p: &Planned, member: usize, healthy: Fault) -> std::io::Result<()> {
        let node = p.target;
        match self {
            Nodes::External => Ok(()),
            Nodes::Standalone(f) => match p.what {
                What::Pause => f.resume(node),
                What::Kill { .. } | What::Crash => f.restart(node),
                What::Slow(_) | What::BlackHole => {
                    f.proxy(node).set(healthy);
                    Ok(())
                }
                What::SlowAll(_) => {
                    self.set_links(healthy);
                    Ok(())
                }
                _ => Ok(()),
            },
            Nodes::Clusters { fleet, .. } => match p.what {
                What::Pause => fleet.resume(node, member),
                What::Kill { .. } => fleet.restart(node, member),
                _ => Ok(()),
            },
        }
    }
}

/// `f` until it succeeds, for up to 5 s (a cluster's map right after a failover may not
/// name the slot's new primary yet).
fn settled<T>(f: impl Fn() -> std::io::Result<T>) -> std::io::Result<T> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match f() {
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            done => return done,
        }
    }
}

/// Runs the schedule against `nodes`, from now.
pub async fn run(
    plan: Vec<Planned>,
    base_latency: Option<Duration>,
    nodes: Nodes,
    control: Arc<Control>,
    recorder: Recorder,
) {
    // A healed link goes back to the run's base latency.
    let healthy = base_latency.map_or(Fault::None, Fault::Latency);
    nodes.set_links(healthy);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    // One fault at a time per node, from its start to the end of its end (a restart that
    // takes longer than planned delays the node's next fault instead of racing it).
    let turns: Arc<Vec<tokio::sync::Mutex<()>>> = Arc::new(
        (0..nodes.len())
            .map(|_| tokio::sync::Mutex::new(()))
            .collect(),
    );
    for p in plan {
        let (nodes, control, recorder) = (nodes.clone(), control.clone(), recorder.clone());
        let turns = turns.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start + p.at).await;
            let _turn = match (p.what.on_one_node(), turns.get(p.target)) {
                (true, Some(turn)) => Some(turn.lock().await),
                _ => None,
            };
            if control.stop.load(Ordering::Relaxed) {
                return;
            }
            // A fault that waited for its node's turn still ends when planned: the schedule's
            // limits (faulty nodes at once, the quiet stretches) hold.
            let planned_end = start + p.at + p.lasts;
            let Some(lasts) = planned_end.checked_duration_since(tokio::time::Instant::now())
            else {
                return;
            };
            let p = Planned { lasts, ..p };
            if p.what == What::Freeze {
                // The client records its own freeze, when it actually stops.
                control.freeze[p.target].store(p.lasts.as_millis() as u64, Ordering::Relaxed);
                return;
            }
            if matches!(nodes, Nodes::External) {
                return;
            }
            // A slower network is recorded without a node: it makes none faulty.
            let line = |phase: &str| match p.what {
                What::SlowAll(_) => json!({"id": p.id, "phase": phase, "what": p.what.name()}),
                _ => json!({"id": p.id, "phase": phase, "node": p.target, "what": p.what.name()}),
            };
            recorder.record("info", "fault", None, line("start"));
            let began_at = tokio::time::Instant::now();
            let n = nodes.clone();
            let began = tokio::task::spawn_blocking(move || n.begin(&p)).await;
            let member = match began {
                Ok(Ok(member)) => member,
                other => {
                    let error = format!("fault {p} could not start: {other:?}");
                    eprintln!("nemesis: {error}");
                    recorder.record("fail", "fault", None, json!({"id": p.id, "error": error}));
                    0
                }
            };
            // A fault that takes its time to make (a migration) lasts no longer for it.
            tokio::time::sleep_until(began_at + p.lasts).await;
            let n = nodes.clone();
            let ended = tokio::task::spawn_blocking(move || n.end(&p, member, healthy)).await;
            if !matches!(ended, Ok(Ok(()))) {
                let error = format!("fault {p} could not end: {ended:?}");
                eprintln!("nemesis: {error}");
                recorder.record("fail", "fault", None, json!({"id": p.id, "error": error}));
            }
            recorder.record("info", "fault", None, line("end"));
        }));
    }
    // Each quiet stretch starts with a line at the fair lock (until the clients stop; the
    // task is not waited for).
    {
        let control = control.clone();
        tokio::spawn(async move {
            for cycle in 1.. {
                // Twice: each client's hold in progress ends at its own time, and those served
                // first join again behind the rest.
                for after in [LINE_AFTER, LINE_AFTER * 5] {
                    tokio::time::sleep_until(start + CYCLE * cycle - QUIET + after).await;
                    if control.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    control.line.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    for t in tasks {
        let _ = t.await;
    }
}
