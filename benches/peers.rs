//! quorum-lock against the network floor and against rslock, on local redis-server fleets,
//! printing one table of percentiles and ratios per section (the machine is noisy: compare
//! within a run), and drawing PNG plots of the scaling, contention and hand-off sections.
//!
//! `cargo bench --bench peers` (about 5 minutes); `QUORUM_LOCK_BENCH_ITERS=N` changes the
//! iterations per measurement (default 2000); `QUORUM_LOCK_BENCH_SECTIONS=family,handoff`
//! runs only the sections named (uncontended, scaling, slow, contention, throughput, family,
//! handoff); `QUORUM_LOCK_BENCH_PLOTS=DIR` is where the plots go (default `docs/bench` in
//! the crate): `latency-vs-nodes.png` (scaling), `contention-waits.png` and
//! `handoff-waits.png` (the distributions of the waits), each when its section runs. The plots
//! need a TrueType font (DejaVu Sans or the like, read at run time); without one they are
//! skipped, with a line saying so.
//!
//! Workloads:
//! - uncontended acquire+release, one client, sequential, 5 nodes: quorum-lock, the floor
//!   (`SET NX PX` to all nodes at once, then a compare-and-delete script to all nodes at once,
//!   each step returning as soon as a majority answered, the rest finishing in the
//!   background), the all-nodes floor (each step waits for every node), and rslock;
//! - node scaling: the same for N = 1, 3, 5, 7, 9 (p50 and p99);
//! - a slow node: acquire latency with one of five nodes behind 200 ms of added latency;
//! - contention: 8 tasks on one key, 100 lock/unlock each: throughput and wait percentiles;
//! - throughput: 64 distinct keys in flight from one client;
//! - the lock family: uncontended acquire+release of each primitive beside the mutex's;
//! - hand-off: 8 tasks on one key, the fair lock beside the mutex, within one client (a
//!   release hands the fair lock over on the nodes, and the waiter holds from the release's
//!   answers) and across 8 clients (the waiter claims its grant with one attempt), measured
//!   against the hand-off floor (tasks queued in the process, each hand-off one fan-out of a
//!   compare-and-set script returning at a majority: one quorum round trip per hand-off).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorum_lock::testkit::Fleet;
use quorum_lock::QuorumLock;
use tokio::time::Instant;

mod common;
use common::plot::{self, Plots, Scaling};
use common::{Counting, Floor, HandOffFloor, ALLOCATIONS, TTL};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Whether to run the section `name` (`QUORUM_LOCK_BENCH_SECTIONS`, comma-separated names:
/// uncontended, scaling, slow, contention, throughput, family, handoff; all when unset).
fn wanted(name: &str) -> bool {
    std::env::var("QUORUM_LOCK_BENCH_SECTIONS")
        .map_or(true, |v| v.split(',').any(|s| s.trim() == name))
}

fn iterations() -> usize {
    std::env::var("QUORUM_LOCK_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// Latency percentiles of one measurement.
#[derive(Debug, Clone, Copy)]
struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn stats(samples: &[Duration]) -> Stats {
    let mut samples = samples.to_vec();
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    let total: Duration = samples.iter().sum();
    Stats {
        p50: at(0.50),
        p99: at(0.99),
        mean: total / samples.len() as u32,
    }
}

/// Times `op` sequentially after a warm-up.
async fn measure<F, Fut>(iters: usize, mut op: F) -> Stats
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    for i in 0..iters / 10 {
        op(i).await;
    }
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters {
        let t = Instant::now();
        op(i).await;
        samples.push(t.elapsed());
    }
    stats(&samples)
}

/// The ratio of two durations.
fn r(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn us(d: Duration) -> String {
    format!("{:.0} us", d.as_secs_f64() * 1e6)
}

async fn ours(fleet: &Fleet) -> QuorumLock {
    QuorumLock::builder()
        .nodes(fleet.urls())
        .build()
        .await
        .unwrap()
}

fn rslock(fleet: &Fleet) -> rslock::LockManager {
    rslock::LockManager::new(fleet.urls())
}

/// Uncontended acquire+release on `n` nodes: (ours, floor at quorum, floor all, rslock).
async fn uncontended(n: usize, iters: usize) -> [Stats; 4] {
    let fleet = Fleet::start(n).unwrap();
    let q = n / 2 + 1;
    let locks = ours(&fleet).await;
    let floor = Floor::connect(&fleet).await;
    let peer = rslock(&fleet);
    let key = format!("bench:uncontended:{n}");
    let a = measure(iters, |_| async {
        let g = locks.try_acquire(&key, TTL).await.unwrap().unwrap();
        g.release().await.unwrap();
    })
    .await;
    let b = measure(iters, |_| floor.lock_unlock(&key, q)).await;
    let c = measure(iters, |_| floor.lock_unlock(&key, n)).await;
    let d = measure(iters, |_| async {
        let l = peer.lock(key.as_str(), TTL).await.unwrap();
        peer.unlock(&l).await;
    })
    .await;
    [a, b, c, d]
}

/// Allocations per uncontended acquire+release (5 nodes, averaged).
async fn allocations(iters: usize) -> f64 {
    let fleet = Fleet::start(5).unwrap();
    let locks = ours(&fleet).await;
    let cycle = || async {
        let g = locks
            .try_acquire("bench:alloc", TTL)
            .await
            .unwrap()
            .unwrap();
        g.release().await.unwrap();
    };
    for _ in 0..100 {
        cycle().await;
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..iters {
        cycle().await;
    }
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / iters as f64
}

/// Acquire latency (acquire only) with and without one node behind 200 ms of latency.
async fn slow_node(iters: usize) -> (Stats, Stats) {
    let fleet = Fleet::builder().nodes(5).proxied(true).start().unwrap();
    let locks = ours(&fleet).await;
    let run = |tag: &'static str| {
        let locks = locks.clone();
        async move {
            let mut samples = Vec::with_capacity(iters);
            for i in 0..iters {
                let key = format!("bench:slow:{tag}:{i}");
                let t = Instant::now();
                let g = locks.try_acquire(&key, TTL).await.unwrap().unwrap();
                samples.push(t.elapsed());
                drop(g); // released in the background, off the clock
            }
            stats(&samples)
        }
    };
    let healthy = run("healthy").await;
    fleet.proxy(4).latency(Duration::from_millis(200));
    let slow = run("slow").await;
    fleet.proxy(4).heal();
    (healthy, slow)
}

/// Issue 37's durable votes beside plain ones: an uncontended acquire+release on 5 nodes
/// with AOF, `appendfsync always` and `everysec`, each with and without
/// `durable_votes(Local)`. `None` where the server has no `WAITAOF` (before 7.2: run with
/// `QUORUM_LOCK_REDIS_SERVER` naming a Valkey 8.1 or Redis 7.2+ server).
async fn durable_votes(iters: usize) -> Option<Vec<(String, Stats)>> {
    let mut rows = Vec::new();
    for fsync in ["always", "everysec"] {
        let fleet = Fleet::builder()
            .nodes(5)
            .server_args(["--appendonly", "yes", "--appendfsync", fsync])
            .start()
            .unwrap();
        for durable in [false, true] {
            let mut builder = QuorumLock::builder()
                .nodes(fleet.urls())
                .node_timeout(Duration::from_millis(1500));
            if durable {
                builder = builder.durable_votes(quorum_lock::DurableVotes::Local);
            }
            let locks = match builder.build().await {
                Ok(locks) => locks,
                // A server that answers WAITAOF before its fsync under `everysec` (Valkey
                // 8.1) is refused: no durable row for it.
                Err(e) if durable && fsync == "everysec" => {
                    println!("durable votes under appendfsync everysec refused: {e}");
                    continue;
                }
                Err(e) if durable => {
                    println!("durable votes skipped: {e}");
                    return None;
                }
                Err(e) => panic!("{e}"),
            };
            let key = format!("bench:durable:{fsync}:{durable}");
            let stats = measure(iters, |_| cycle(locks.lock(&key))).await;
            let name = match durable {
                true => format!("durable votes (Local), appendfsync {fsync}"),
                false => format!("plain votes, appendfsync {fsync}"),
            };
            rows.push((name, stats));
        }
    }
    Some(rows)
}

/// A permit of the semaphore `key` of 3, counted (`all`) or as slots.
fn permit<'a>(locks: &'a QuorumLock, all: bool, key: &str) -> quorum_lock::LockRequest<'a> {
    match all {
        true => locks.semaphore(key, 3).counted(),
        false => locks.semaphore(key, 3),
    }
}

/// Issue 37's semaphore of 3 permits, slots under the majority beside counted under every
/// node: a permit's acquire+release latency on a healthy fleet and with one node behind
/// 50 ms of latency; then 8 separate clients (one `QuorumLock` each, as 8 services) taking
/// and releasing permits, 25 each: permits per second. Rows: (form, healthy, slow (none when
/// every cycle failed), cycles failed with the slow node, cycles tried, per s).
#[allow(clippy::type_complexity)]
async fn semaphores(iters: usize) -> Vec<(&'static str, Stats, Option<Stats>, usize, usize, f64)> {
    let fleet = Fleet::builder().nodes(5).proxied(true).start().unwrap();
    let client = |all: bool| {
        let urls = fleet.urls();
        async move {
            let quorum = match all {
                true => quorum_lock::Quorum::All,
                false => quorum_lock::Quorum::Majority,
            };
            QuorumLock::builder()
                .nodes(urls)
                .quorum(quorum)
                .build()
                .await
                .unwrap()
        }
    };
    let mut rows = Vec::new();
    for (form, all) in [("slots (majority)", false), ("counted (Quorum::All)", true)] {
        let locks = client(all).await;
        let key = format!("bench:sem:{all}");
        // The successful cycles' latencies, and how many failed (the counted form needs
        // every node within its node timeout, the default 50 ms).
        let latency = |iters: usize| {
            let (locks, key) = (&locks, &key);
            async move {
                let mut samples = Vec::with_capacity(iters);
                let mut failed = 0;
                for _ in 0..iters {
                    let t = Instant::now();
                    match permit(locks, all, key).ttl(TTL).try_acquire().await {
                        Ok(Some(p)) => {
                            let _ = p.release().await;
                            samples.push(t.elapsed());
                        }
                        _ => failed += 1,
                    }
                }
                (samples, failed)
            }
        };
        let (healthy, _) = latency(iters).await;
        fleet.proxy(4).latency(Duration::from_millis(50));
        let (slow, failed) = latency(iters / 10).await;
        fleet.proxy(4).heal();
        let tried = iters / 10;
        let mut services = Vec::new();
        for _ in 0..8 {
            services.push(client(all).await);
        }
        let started = Instant::now();
        let tasks: Vec<_> = services
            .into_iter()
            .map(|locks| {
                let key = format!("bench:sem:contended:{all}");
                tokio::spawn(async move {
                    for _ in 0..25 {
                        let permit = permit(&locks, all, &key).ttl(TTL).acquire().await.unwrap();
                        permit.release().await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let per_second = 200.0 / started.elapsed().as_secs_f64();
        let slow = (!slow.is_empty()).then(|| stats(&slow));
        rows.push((form, stats(&healthy), slow, failed, tried, per_second));
    }
    rows
}

/// 8 tasks, 100 lock/unlock each on one key: (ops per second, every wait).
async fn contention<L, F, Fut>(make: L) -> (f64, Vec<Duration>)
where
    L: Fn() -> F,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Vec<Duration>> + Send + 'static,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..8).map(|_| tokio::spawn((make())())).collect();
    let mut waits = Vec::new();
    for t in tasks {
        waits.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed();
    (waits.len() as f64 / elapsed.as_secs_f64(), waits)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let iters = iterations();
    println!(
        "quorum-lock peer benchmark: {iters} iterations per measurement, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let plots = Plots::open(plot::dir())
        .inspect_err(|why| println!("plots skipped: {why}"))
        .ok();
    println!();

    if wanted("uncontended") {
        println!("## Uncontended acquire+release, 5 nodes");
        let [ours5, floor5, all5, rs5] = uncontended(5, iters).await;
        println!("| client | p50 | p99 | mean |");
        println!("|---|---|---|---|");
        for (name, s) in [
            ("quorum-lock", ours5),
            ("floor (return at 3 of 5)", floor5),
            ("floor (all 5)", all5),
            ("rslock", rs5),
        ] {
            println!(
                "| {name} | {} | {} | {} |",
                us(s.p50),
                us(s.p99),
                us(s.mean)
            );
        }
        println!(
        "ratios: ours/floor p50 {:.2} (target <= 1.15), ours/rslock p50 {:.2}, p99 {:.2} (target < 1)",
        r(ours5.p50, floor5.p50),
        r(ours5.p50, rs5.p50),
        r(ours5.p99, rs5.p99)
    );
        println!(
            "allocations per acquire+release: {:.1}",
            allocations(iters).await
        );
        println!();
    }
    if wanted("scaling") {
        println!("## Node scaling (p50 / p99)");
        println!("| N | quorum-lock | floor | rslock | ours/floor p50 | ours/rslock p50 |");
        println!("|---|---|---|---|---|---|");
        let mut clients = ["quorum-lock", "floor", "rslock"].map(|client| Scaling {
            client,
            points: Vec::new(),
        });
        for n in [1usize, 3, 5, 7, 9] {
            let [o, f, _, p] = uncontended(n, iters / 2).await;
            println!(
                "| {n} | {} / {} | {} / {} | {} / {} | {:.2} | {:.2} |",
                us(o.p50),
                us(o.p99),
                us(f.p50),
                us(f.p99),
                us(p.p50),
                us(p.p99),
                r(o.p50, f.p50),
                r(o.p50, p.p50)
            );
            for (client, s) in clients.iter_mut().zip([o, f, p]) {
                client.points.push((n, s.p50, s.p99));
            }
        }
        if let Some(plots) = &plots {
            plots.latency_vs_nodes(&clients);
        }
        println!();
    }
    if wanted("slow") {
        println!("## One slow node (200 ms added latency on 1 of 5), acquire only");
        let (healthy, slow) = slow_node(iters / 2).await;
        println!("| fleet | p50 | p99 |");
        println!("|---|---|---|");
        println!("| healthy | {} | {} |", us(healthy.p50), us(healthy.p99));
        println!("| one slow node | {} | {} |", us(slow.p50), us(slow.p99));
        println!(
            "ratio slow/healthy p99 {:.2} (target <= 2)",
            r(slow.p99, healthy.p99)
        );
        println!();
    }
    if wanted("durable") {
        println!("## Durable votes beside plain ones, 5 nodes with AOF, acquire+release");
        if let Some(rows) = durable_votes(iters / 4).await {
            println!("| votes | p50 | p99 |");
            println!("|---|---|---|");
            for (name, s) in rows {
                println!("| {name} | {} | {} |", us(s.p50), us(s.p99));
            }
        }
        println!();
    }
    if wanted("semaphore") {
        println!("## Semaphore of 3 permits: slots (majority) and counted (Quorum::All), 5 nodes");
        println!("| form | p50 | p99 | 1 node +50 ms: p50, p99 of the cycles that succeeded | failed | 8 services, permits/s |");
        println!("|---|---|---|---|---|---|");
        for (form, healthy, slow, failed, tried, per_second) in semaphores(iters / 2).await {
            let slow = slow.map_or("-".into(), |s| format!("{}, {}", us(s.p50), us(s.p99)));
            println!(
                "| {form} | {} | {} | {slow} | {failed} of {tried} | {per_second:.0} |",
                us(healthy.p50),
                us(healthy.p99),
            );
        }
        println!();
    }
    // The fleet of the contention, throughput and hand-off sections.
    let fleet = Fleet::start(5).unwrap();
    let pubsub = ours(&fleet).await;
    if wanted("contention") {
        println!("## Contention: 8 tasks x 100 lock/unlock on one key, 5 nodes");
        let retry_only = QuorumLock::builder()
            .nodes(fleet.urls())
            .pubsub(false)
            .build()
            .await
            .unwrap();
        let mut rs_default = rslock(&fleet);
        rs_default.set_retry(u32::MAX, Duration::from_millis(200));
        let mut rs_tuned = rslock(&fleet);
        rs_tuned.set_retry(u32::MAX, Duration::from_millis(10));
        let ours_run = |locks: QuorumLock, key: &'static str| {
            move || {
                let locks = locks.clone();
                move || turns(locks, key, |l, k| l.lock(k))
            }
        };
        let rs_run = |peer: rslock::LockManager, key: &'static str| {
            move || {
                let peer = peer.clone();
                move || async move {
                    let mut waits = Vec::with_capacity(100);
                    for _ in 0..100 {
                        let t = Instant::now();
                        let g = peer.acquire(key, TTL).await.unwrap();
                        waits.push(t.elapsed());
                        g.release().await;
                    }
                    waits
                }
            }
        };
        let results = [
            (
                "quorum-lock (pub/sub)",
                contention(ours_run(pubsub.clone(), "bench:c:ours")).await,
            ),
            (
                "quorum-lock (retry only)",
                contention(ours_run(retry_only, "bench:c:retry")).await,
            ),
            (
                "rslock (200 ms retry delay)",
                contention(rs_run(rs_default, "bench:c:rs")).await,
            ),
            (
                "rslock (10 ms retry delay)",
                contention(rs_run(rs_tuned, "bench:c:rs10")).await,
            ),
        ];
        println!("| client | ops/s | mean wait | p99 wait |");
        println!("|---|---|---|---|");
        for (name, (ops, waits)) in &results {
            let s = stats(waits);
            println!("| {name} | {ops:.0} | {} | {} |", us(s.mean), us(s.p99));
        }
        let (ours_ops, ours_s) = (results[0].1 .0, stats(&results[0].1 .1));
        let (rs_ops, rs_s) = (results[3].1 .0, stats(&results[3].1 .1));
        println!(
        "ratios vs rslock tuned: p99 wait {:.3} (target <= 0.1), throughput {:.1}x (target >= 2)",
        r(ours_s.p99, rs_s.p99),
        ours_ops / rs_ops
    );
        if let Some(plots) = &plots {
            plots.wait_cdf(
                "contention-waits.png",
                "Contention: waits of 8 tasks x 100 lock/unlock on one key, 5 nodes",
                &distributions(&results),
            );
        }
        println!();
    }
    if wanted("throughput") {
        println!("## Throughput: 64 distinct keys in flight, 5 nodes, 5 s");
        let floor = Arc::new(Floor::connect(&fleet).await);
        let ours = in_flight(&fleet, 64, {
            let locks = pubsub.clone();
            move |i| {
                let locks = locks.clone();
                async move {
                    let key = format!("bench:t:{i}");
                    let g = locks.try_acquire(&key, TTL).await.unwrap().unwrap();
                    g.release().await.unwrap();
                }
            }
        })
        .await;
        let floor_run = in_flight(&fleet, 64, {
            let floor = floor.clone();
            move |i| {
                let floor = floor.clone();
                async move { floor.lock_unlock(&format!("bench:tf:{i}"), 3).await }
            }
        })
        .await;
        println!(
            "| client | acquire+release per second | client CPU per op | servers' CPU per op |"
        );
        println!("|---|---|---|---|");
        for (name, t) in [("quorum-lock", &ours), ("floor", &floor_run)] {
            println!(
                "| {name} | {:.0} | {} | {} |",
                t.ops_per_s,
                us(t.client_cpu),
                us(t.servers_cpu)
            );
        }
        println!(
            "ratio ours/floor {:.2} (target >= 1.0)",
            ours.ops_per_s / floor_run.ops_per_s
        );
        println!();
    }
    if wanted("family") {
        println!("## Lock family: uncontended acquire+release, 5 nodes");
        let rows = family(iters / 2).await;
        let mutex = rows[0].1;
        println!("| primitive | p50 | p99 | p50 / mutex |");
        println!("|---|---|---|---|");
        for (name, s) in &rows {
            println!(
                "| {name} | {} | {} | {:.2} |",
                us(s.p50),
                us(s.p99),
                r(s.p50, mutex.p50)
            );
        }
        println!();
    }
    if wanted("handoff") {
        println!("## Hand-off: 8 tasks x 100 lock/unlock on one key, 5 nodes");
        let rows = [
            (
                "floor (hand-off in one fan-out, 1 client)",
                hand_off_floor(&fleet, "bench:h:floor").await,
            ),
            (
                "mutex, 1 client",
                hand_off(&fleet, 1, "bench:h:m1", |l, k| l.lock(k)).await,
            ),
            (
                "fair lock, 1 client",
                hand_off(&fleet, 1, "bench:h:f1", |l, k| l.fair_lock(k)).await,
            ),
            (
                "mutex, 8 clients",
                hand_off(&fleet, 8, "bench:h:m8", |l, k| l.lock(k)).await,
            ),
            (
                "fair lock, 8 clients",
                hand_off(&fleet, 8, "bench:h:f8", |l, k| l.fair_lock(k)).await,
            ),
        ];
        println!("| lock | ops/s | time per hand-off | mean wait | p99 wait |");
        println!("|---|---|---|---|---|");
        for (name, (ops, waits)) in &rows {
            let s = stats(waits);
            println!(
                "| {name} | {ops:.0} | {} | {} | {} |",
                us(Duration::from_secs_f64(1.0 / ops)),
                us(s.mean),
                us(s.p99)
            );
        }
        // Time per hand-off is the inverse of ops/s: its ratio is the floor's ops over the row's.
        let floor_ops = rows[0].1 .0;
        println!(
            "time per hand-off vs the floor: mutex, 1 client {:.2}, fair lock, 1 client {:.2} (target <= 1.1)",
            floor_ops / rows[1].1 .0,
            floor_ops / rows[2].1 .0
        );
        if let Some(plots) = &plots {
            plots.wait_cdf(
                "handoff-waits.png",
                "Hand-off: waits of 8 tasks x 100 lock/unlock on one key, 5 nodes",
                &distributions(&rows),
            );
        }
    }
}

/// The waits of each row of a section, for a plot of their distributions.
fn distributions<'a>(
    rows: &'a [(&'a str, (f64, Vec<Duration>))],
) -> Vec<(&'a str, &'a [Duration])> {
    rows.iter()
        .map(|(name, (_, waits))| (*name, waits.as_slice()))
        .collect()
}

/// One uncontended acquire+release of `request`.
async fn cycle(request: quorum_lock::LockRequest<'_>) {
    let g = request.ttl(TTL).try_acquire().await.unwrap().unwrap();
    g.release().await.unwrap();
}

/// Uncontended acquire+release of each primitive of the lock family, 5 nodes, one client.
async fn family(iters: usize) -> Vec<(&'static str, Stats)> {
    let fleet = Fleet::start(5).unwrap();
    let locks = ours(&fleet).await;
    let all = QuorumLock::builder()
        .nodes(fleet.urls())
        .quorum(quorum_lock::Quorum::All)
        .build()
        .await
        .unwrap();
    vec![
        (
            "mutex (lock)",
            measure(iters, |_| cycle(locks.lock("bench:f:mutex"))).await,
        ),
        (
            "multi-key, 2 keys (lock_all)",
            measure(iters, |_| cycle(locks.lock_all(["bench:f:a", "bench:f:b"]))).await,
        ),
        (
            "semaphore, 1 permit",
            measure(iters, |_| cycle(locks.semaphore("bench:f:sem1", 1))).await,
        ),
        (
            "semaphore, 3 permits, counted (Quorum::All)",
            measure(iters, |_| cycle(all.semaphore("bench:f:sem3", 3).counted())).await,
        ),
        (
            "semaphore, 3 permits, slots (majority)",
            measure(iters, |_| cycle(locks.semaphore("bench:f:slots3", 3))).await,
        ),
        (
            "read lock",
            measure(iters, |_| cycle(locks.read_lock("bench:f:rw"))).await,
        ),
        (
            "write lock",
            measure(iters, |_| cycle(locks.write_lock("bench:f:rw"))).await,
        ),
        (
            "fair lock",
            measure(iters, |_| cycle(locks.fair_lock("bench:f:fair"))).await,
        ),
    ]
}

/// 8 tasks x 100 lock/unlock on one key with `clients` clients (tasks spread over them),
/// each task asking through `request`: (ops per second, every wait).
async fn hand_off<R>(
    fleet: &Fleet,
    clients: usize,
    key: &'static str,
    request: R,
) -> (f64, Vec<Duration>)
where
    R: for<'a> Fn(&'a QuorumLock, &'static str) -> quorum_lock::LockRequest<'a>
        + Copy
        + Send
        + Sync
        + 'static,
{
    let mut pool = Vec::new();
    for _ in 0..clients {
        pool.push(ours(fleet).await);
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    contention(|| {
        let locks = pool[next.fetch_add(1, Ordering::Relaxed) % clients].clone();
        move || turns(locks, key, request)
    })
    .await
}

/// One task's part of a contention run: 100 lock/unlock on `key` through `request` (each
/// `acquire` with a 120 s wait, then `release`); every wait, from asking to holding.
async fn turns<R>(locks: QuorumLock, key: &'static str, request: R) -> Vec<Duration>
where
    R: for<'a> Fn(&'a QuorumLock, &'static str) -> quorum_lock::LockRequest<'a>,
{
    let mut waits = Vec::with_capacity(100);
    for _ in 0..100 {
        let t = Instant::now();
        let g = request(&locks, key)
            .ttl(TTL)
            .wait(Duration::from_secs(120))
            .acquire()
            .await
            .unwrap();
        waits.push(t.elapsed());
        g.release().await.unwrap();
    }
    waits
}

/// 8 tasks x 100 lock/unlock on one key through the hand-off floor: (ops per second, every
/// wait).
async fn hand_off_floor(fleet: &Fleet, key: &str) -> (f64, Vec<Duration>) {
    let floor = Arc::new(HandOffFloor::connect(fleet, key).await);
    contention(|| {
        let floor = floor.clone();
        move || async move {
            let mut waits = Vec::with_capacity(100);
            for _ in 0..100 {
                let t = Instant::now();
                let value = floor.acquire().await;
                waits.push(t.elapsed());
                floor.release(value).await;
            }
            waits
        }
    })
    .await
}

/// What one throughput run measured.
struct Throughput {
    ops_per_s: f64,
    /// This process's CPU time (user + system) per operation.
    client_cpu: Duration,
    /// The nodes' CPU time (`INFO cpu`, user + system, summed over the nodes) per operation.
    servers_cpu: Duration,
}

/// This process's CPU time so far (user + system, from /proc/self/stat, in clock ticks of
/// `getconf CLK_TCK`); zero where that cannot be read.
fn process_cpu() -> Duration {
    let tick = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // The fields after the command name, which is in parentheses.
            let fields: Vec<String> = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            let user: f64 = fields.get(11)?.parse().ok()?;
            let system: f64 = fields.get(12)?.parse().ok()?;
            Some(user + system)
        })
        .unwrap_or(0.0);
    Duration::from_secs_f64(ticks / tick)
}

/// The CPU time the fleet's servers used so far (`INFO cpu`, summed over the nodes).
async fn servers_cpu(fleet: &Fleet) -> Duration {
    let mut seconds = 0.0;
    for i in 0..fleet.len() {
        let mut conn = fleet
            .client(i)
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut conn)
            .await
            .unwrap();
        seconds += info
            .lines()
            .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
            .filter_map(|l| l.split_once(':')?.1.trim().parse::<f64>().ok())
            .sum::<f64>();
    }
    Duration::from_secs_f64(seconds)
}

/// Runs `op(slot)` in `slots` loops for 5 s: completed ops per second, and the client's and
/// the servers' CPU time per op (counted until the stragglers of the last ops finished).
async fn in_flight<F, Fut>(fleet: &Fleet, slots: usize, op: F) -> Throughput
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (client_before, servers_before) = (process_cpu(), servers_cpu(fleet).await);
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(5);
    let started = Instant::now();
    let tasks: Vec<_> = (0..slots)
        .map(|slot| {
            let (op, done) = (op.clone(), done.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    op(slot).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    // The last ops' slower nodes answer within the node timeout.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let ops = done.load(Ordering::Relaxed);
    let per_op = |d: Duration| d / u32::try_from(ops.max(1)).unwrap_or(u32::MAX);
    Throughput {
        ops_per_s: ops as f64 / elapsed.as_secs_f64(),
        client_cpu: per_op(process_cpu().saturating_sub(client_before)),
        servers_cpu: per_op(servers_cpu(fleet).await.saturating_sub(servers_before)),
    }
}
