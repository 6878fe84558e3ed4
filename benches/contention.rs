//! Contention across separate clients: one key, 5 local nodes, each client its own
//! `QuorumLock` (or rslock `LockManager`) with its own connections, standing for one service
//! instance; tasks within a client share it. Every mix of clients and tasks, healthy and under
//! each fault of one node of five, quorum-lock's mutex and fair lock beside rslock 0.10 in the
//! same run, medians of several rounds.
//!
//! `cargo bench --bench contention` (about 10 minutes). Settings, by environment:
//! - `QUORUM_LOCK_BENCH_ROUNDS=N`: rounds per cell, the median reported (default 5);
//! - `QUORUM_LOCK_BENCH_FAULTS=healthy,frozen,slow,flapping`: the faults to run (all when
//!   unset): `frozen` is node 2 stopped (SIGSTOP) for the whole run, `slow` node 2 behind 50 ms
//!   of added latency (the test kit's fault proxy), `flapping` node 2 stopped 1 s of every 3
//!   (from 200 ms into each run);
//! - `QUORUM_LOCK_BENCH_MIXES=8x1,4x2,2x4,32x1`: clients x tasks per client (these four when
//!   unset, any `CxT` when set; 100 turns per task, 25 beyond 8 tasks in all);
//! - `QUORUM_LOCK_BENCH_LOCKS=mutex,fair,rslock`;
//! - `QUORUM_LOCK_BENCH_PLOTS=DIR`: where `contention-clients.png` goes (default `docs/bench`).
//!
//! Each turn is acquire (wait up to 120 s), note who holds, release; the critical section is
//! empty. A run stops after 20 s (reported as `cut`, its figures over the turns done). Per run:
//! throughput, p50/p99/max of the waits (asking to holding), hand-offs (consecutive holds by
//! different clients) and the spread: each client's acquisitions while every client still had
//! turns left (until the first client finished), the largest over the mean (1.0 is perfectly
//! even; the target is at most 2). Also: uncontended acquire+release and `build()`, healthy
//! and with node 2 frozen.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorum_lock::testkit::Fleet;
use quorum_lock::QuorumLock;
use tokio::time::Instant;

mod common;
use common::plot::{self, Plots, Series};
use common::TTL;

/// How long one run may take before it is cut.
const RUN_LIMIT: Duration = Duration::from_secs(20);
/// The node that a fault hits.
const VICTIM: usize = 2;

fn env_list(name: &str, all: &[&'static str]) -> Vec<&'static str> {
    match std::env::var(name) {
        Ok(v) => all
            .iter()
            .copied()
            .filter(|a| v.split(',').any(|s| s.trim() == *a))
            .collect(),
        Err(_) => all.to_vec(),
    }
}

fn rounds() -> usize {
    std::env::var("QUORUM_LOCK_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    Healthy,
    Frozen,
    Slow,
    Flapping,
}

impl Fault {
    fn parse(s: &str) -> Fault {
        match s {
            "frozen" => Fault::Frozen,
            "slow" => Fault::Slow,
            "flapping" => Fault::Flapping,
            _ => Fault::Healthy,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lock {
    Mutex,
    Fair,
    Rslock,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
struct Run {
    ops: f64,
    waits: Vec<Duration>,
    hand_offs: usize,
    spread: f64,
    /// Releases that reported an error (quorum-lock) and acquisitions that failed.
    errors: usize,
    /// The errors by kind (the variant's name) and call.
    kinds: std::collections::BTreeMap<String, usize>,
    cut: bool,
}

/// Who held, in order.
type Order = Arc<Mutex<Vec<usize>>>;

/// The client URLs: every node direct, but the victim through its proxy when it is slow.
fn urls(fleet: &Fleet, fault: Fault) -> Vec<String> {
    (0..fleet.len())
        .map(|i| {
            if fault == Fault::Slow && i == VICTIM {
                fleet.url(i)
            } else {
                fleet.direct_url(i)
            }
        })
        .collect()
}

async fn ours(urls: &[String]) -> QuorumLock {
    QuorumLock::builder()
        .nodes(urls.to_vec())
        .build()
        .await
        .unwrap()
}

/// One task's part of a run: its key, turns and client, where it notes who held, and the
/// flag that cuts the run.
struct Task {
    key: String,
    turns: usize,
    who: usize,
    order: Order,
    stop: Arc<AtomicBool>,
}

/// One task's turns through quorum-lock.
async fn our_turns(locks: QuorumLock, lock: Lock, task: Task) -> (Vec<Duration>, Vec<String>) {
    let mut waits = Vec::with_capacity(task.turns);
    let mut errors = Vec::new();
    for _ in 0..task.turns {
        if task.stop.load(Ordering::Relaxed) {
            break;
        }
        let t = Instant::now();
        let request = match lock {
            Lock::Fair => locks.fair_lock(&task.key),
            _ => locks.lock(&task.key),
        };
        let guard = match request
            .ttl(TTL)
            .wait(Duration::from_secs(120))
            .acquire()
            .await
        {
            Ok(g) => g,
            Err(e) => {
                errors.push(format!("acquire: {}", kind(&e)));
                continue;
            }
        };
        waits.push(t.elapsed());
        task.order.lock().unwrap().push(task.who);
        if let Err(e) = guard.release().await {
            errors.push(format!("release: {}", kind(&e)));
        }
    }
    (waits, errors)
}

/// An error's variant name, from its `Debug` form.
fn kind(e: &quorum_lock::Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

/// One task's turns through rslock (retry 3 x 10 ms, asked again until it holds).
async fn rslock_turns(locks: Arc<rslock::LockManager>, task: Task) -> (Vec<Duration>, Vec<String>) {
    let mut waits = Vec::with_capacity(task.turns);
    for _ in 0..task.turns {
        let t = Instant::now();
        let held = loop {
            if task.stop.load(Ordering::Relaxed) {
                return (waits, Vec::new());
            }
            if let Ok(l) = locks.lock(task.key.as_bytes(), TTL).await {
                break l;
            }
        };
        waits.push(t.elapsed());
        task.order.lock().unwrap().push(task.who);
        locks.unlock(&held).await;
    }
    (waits, Vec::new())
}

/// Stops node `VICTIM` 1 s of every 3 until `stop`, the first time 200 ms into the run (a
/// run of a healthy mix takes about a second).
fn flap(fleet: Arc<Fleet>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut pause_in = Duration::from_millis(200);
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(pause_in);
            if stop.load(Ordering::Relaxed) {
                break;
            }
            fleet.pause(VICTIM).unwrap();
            std::thread::sleep(Duration::from_secs(1));
            fleet.resume(VICTIM).unwrap();
            pause_in = Duration::from_secs(2);
        }
    })
}

/// One run: `clients` clients of `tasks` tasks each, `turns` turns per task on `key`.
async fn run_once(
    fleet: &Arc<Fleet>,
    fault: Fault,
    lock: Lock,
    (clients, tasks): (usize, usize),
    turns: usize,
    key: String,
) -> Run {
    let urls = urls(fleet, fault);
    let order: Order = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    // Clients are built before a freeze (start-up is measured on its own).
    let mut ours_pool = Vec::new();
    let mut theirs_pool = Vec::new();
    for _ in 0..clients {
        match lock {
            Lock::Rslock => {
                let mut m = rslock::LockManager::new(urls.clone());
                m.set_retry(3, Duration::from_millis(10));
                theirs_pool.push(Arc::new(m));
            }
            _ => ours_pool.push(ours(&urls).await),
        }
    }
    if fault == Fault::Frozen {
        fleet.pause(VICTIM).unwrap();
    }
    let flapper = (fault == Fault::Flapping).then(|| flap(fleet.clone(), stop.clone()));
    let started = Instant::now();
    for c in 0..clients {
        for _ in 0..tasks {
            let task = Task {
                key: key.clone(),
                turns,
                who: c,
                order: order.clone(),
                stop: stop.clone(),
            };
            handles.push(match lock {
                Lock::Rslock => tokio::spawn(rslock_turns(theirs_pool[c].clone(), task)),
                _ => tokio::spawn(our_turns(ours_pool[c].clone(), lock, task)),
            });
        }
    }
    let all = futures::future::join_all(handles);
    tokio::pin!(all);
    let (results, cut) = match tokio::time::timeout(RUN_LIMIT, &mut all).await {
        Ok(r) => (r, false),
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            // An rslock call to a frozen node has no timeout of its own: give the tasks a
            // moment, then count what was done.
            match tokio::time::timeout(Duration::from_secs(5), &mut all).await {
                Ok(r) => (r, true),
                Err(_) => (Vec::new(), true),
            }
        }
    };
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    if let Some(f) = flapper {
        f.join().unwrap();
    }
    if fault == Fault::Frozen || fault == Fault::Flapping {
        let _ = fleet.resume(VICTIM);
    }
    let mut run = Run {
        cut,
        ..Run::default()
    };
    for r in results {
        let (waits, errors) = r.unwrap();
        run.waits.extend(waits);
        run.errors += errors.len();
        for e in errors {
            *run.kinds.entry(e).or_default() += 1;
        }
    }
    let order = order.lock().unwrap().clone();
    run.ops = order.len() as f64 / elapsed.as_secs_f64();
    run.hand_offs = order.windows(2).filter(|w| w[0] != w[1]).count();
    run.spread = spread(&order, clients, tasks * turns);
    run
}

/// Each client's acquisitions while every client still had turns left, the largest over the
/// mean.
fn spread(order: &[usize], clients: usize, per_client: usize) -> f64 {
    let mut counts = vec![0usize; clients];
    for &c in order {
        counts[c] += 1;
        if counts[c] == per_client {
            break;
        }
    }
    let total: usize = counts.iter().sum();
    if total == 0 {
        return f64::NAN;
    }
    let mean = total as f64 / clients as f64;
    *counts.iter().max().unwrap() as f64 / mean
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn at(waits: &[Duration], q: f64) -> Duration {
    let mut w = waits.to_vec();
    w.sort();
    w.get(((w.len() as f64 * q) as usize).min(w.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The median over rounds of each figure of a cell.
struct Cell {
    ops: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
    hand_offs: f64,
    spread: f64,
    errors: usize,
    kinds: std::collections::BTreeMap<String, usize>,
    cut: usize,
}

fn cell(runs: &[Run]) -> Cell {
    let med = |f: &dyn Fn(&Run) -> f64| median(runs.iter().map(f).collect());
    Cell {
        ops: med(&|r| r.ops),
        p50: Duration::from_secs_f64(med(&|r| at(&r.waits, 0.5).as_secs_f64())),
        p99: Duration::from_secs_f64(med(&|r| at(&r.waits, 0.99).as_secs_f64())),
        max: runs
            .iter()
            .map(|r| at(&r.waits, 1.0))
            .max()
            .unwrap_or_default(),
        hand_offs: med(&|r| r.hand_offs as f64),
        spread: med(&|r| r.spread),
        errors: runs.iter().map(|r| r.errors).sum(),
        kinds: runs.iter().flat_map(|r| r.kinds.iter()).fold(
            Default::default(),
            |mut all, (k, n)| {
                *all.entry(k.clone()).or_default() += n;
                all
            },
        ),
        cut: runs.iter().filter(|r| r.cut).count(),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let faults = env_list(
        "QUORUM_LOCK_BENCH_FAULTS",
        &["healthy", "frozen", "slow", "flapping"],
    );
    // Any clients x tasks: the plot against client count wants several one-task mixes.
    let mixes: Vec<String> = match std::env::var("QUORUM_LOCK_BENCH_MIXES") {
        Ok(v) => v.split(',').map(|m| m.trim().to_string()).collect(),
        Err(_) => ["8x1", "4x2", "2x4", "32x1"].map(String::from).to_vec(),
    };
    let locks: Vec<Lock> = env_list("QUORUM_LOCK_BENCH_LOCKS", &["mutex", "fair", "rslock"])
        .into_iter()
        .map(|l| match l {
            "fair" => Lock::Fair,
            "rslock" => Lock::Rslock,
            _ => Lock::Mutex,
        })
        .collect();
    let rounds = rounds();
    let plots = Plots::open(plot::dir())
        .map_err(|e| println!("no plots: {e}"))
        .ok();
    println!(
        "# Contention across separate clients: one key, 5 nodes, medians of {rounds} rounds\n"
    );
    startup_and_uncontended(rounds).await;
    let mut series: Vec<Series> = Vec::new();
    let mut n = 0;
    for fault in faults.iter().map(|f| Fault::parse(f)) {
        println!("## {fault:?} (node {VICTIM} of 5)\n");
        println!("| lock | clients x tasks | ops/s | p50 wait | p99 wait | max wait | hand-offs | spread | errors | cut runs |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        let mut errors = Vec::new();
        for mix in &mixes {
            let parsed = mix
                .split_once('x')
                .and_then(|(c, t)| Some((c.parse::<usize>().ok()?, t.parse::<usize>().ok()?)))
                .filter(|&(c, t)| c > 0 && t > 0);
            let Some((clients, tasks)) = parsed else {
                panic!("QUORUM_LOCK_BENCH_MIXES: {mix:?} is not clients x tasks, e.g. 8x1");
            };
            let turns = if clients * tasks > 8 { 25 } else { 100 };
            for &lock in &locks {
                let mut runs = Vec::new();
                for _ in 0..rounds {
                    // A fresh fleet per run: a frozen or flapping node leaves nothing behind.
                    let fleet = Arc::new(
                        Fleet::builder()
                            .nodes(5)
                            .proxied(fault == Fault::Slow)
                            .start()
                            .unwrap(),
                    );
                    if fault == Fault::Slow {
                        fleet.proxy(VICTIM).latency(Duration::from_millis(50));
                    }
                    n += 1;
                    let key = format!("bench:contention:{n}");
                    runs.push(run_once(&fleet, fault, lock, (clients, tasks), turns, key).await);
                }
                let c = cell(&runs);
                println!(
                    "| {lock:?} | {mix} | {:.0} | {} | {} | {} | {:.0} | {:.2} | {} | {} |",
                    c.ops,
                    ms(c.p50),
                    ms(c.p99),
                    ms(c.max),
                    c.hand_offs,
                    c.spread,
                    c.errors,
                    c.cut
                );
                if !c.kinds.is_empty() {
                    errors.push(format!("{lock:?} {mix}: {:?}", c.kinds));
                }
                // The plot: one task per client, every fault run.
                if tasks == 1 {
                    let name = format!("{lock:?}, {fault:?}");
                    match series.iter_mut().find(|s| s.name == name) {
                        Some(s) => s.points.push((clients as f64, c.ops, c.p99)),
                        None => series.push(Series {
                            name,
                            points: vec![(clients as f64, c.ops, c.p99)],
                        }),
                    }
                }
            }
        }
        for e in errors {
            println!("\nerrors, {e}");
        }
        println!();
    }
    if let Some(plots) = &plots {
        plots.contention_vs_clients(
            "contention-clients.png",
            "Separate clients, one task each, one key, 5 nodes",
            &series,
        );
    }
}

/// `build()` and uncontended acquire+release (one client, 1,000 cycles), healthy and with node
/// 2 frozen: p50 and p99 of each.
async fn startup_and_uncontended(rounds: usize) {
    println!("## Start-up and uncontended, healthy vs node {VICTIM} frozen\n");
    println!("| state | build() p50 | build() max | acquire+release p50 | acquire+release p99 |");
    println!("|---|---|---|---|---|");
    for frozen in [false, true] {
        let fleet = Fleet::start(5).unwrap();
        let urls = fleet.urls();
        let warm = ours(&urls).await;
        if frozen {
            fleet.pause(VICTIM).unwrap();
        }
        let mut builds = Vec::new();
        for _ in 0..rounds {
            let t = Instant::now();
            drop(ours(&urls).await);
            builds.push(t.elapsed());
        }
        let mut cycles = Vec::new();
        for i in 0..1100 {
            let t = Instant::now();
            let g = warm
                .lock("bench:uncontended")
                .ttl(TTL)
                .try_acquire()
                .await
                .unwrap()
                .unwrap();
            g.release().await.ok();
            if i >= 100 {
                cycles.push(t.elapsed());
            }
        }
        if frozen {
            fleet.resume(VICTIM).unwrap();
        }
        println!(
            "| {} | {} | {} | {} | {} |",
            if frozen { "node frozen" } else { "healthy" },
            ms(at(&builds, 0.5)),
            ms(at(&builds, 1.0)),
            ms(at(&cycles, 0.5)),
            ms(at(&cycles, 0.99)),
        );
    }
    println!();
}
