//! The safety torture suite: several client tasks in several processes contend for a few
//! keys through every path of the library (fenced and native acquires, fixed TTLs and
//! watchdog leases held up to several leases, extends longer and shorter, reentrant owners,
//! cancelled acquires and extends, dropped guards) and through every primitive of the lock
//! family (multi-key sets that share keys with each other and with single locks, a
//! read-write lock, a semaphore of one permit under the run's quorum and one of two permits
//! under `Quorum::All`, a fair lock), while a seeded fault schedule kills, restarts, pauses,
//! partitions, slows and resets a minority of the nodes and makes one node's clock jump
//! (early expiry of every key of the run: locks, sets, writers, readers, pending-writer
//! marks, permits, the fair lock's line).
//! Every client records when it believed it held a lock (until the guard's deadline, as it
//! stood at the end), and how: alone (a lock, each key of a set, a writer, the fair lock), as a reader, or
//! as one of a semaphore's permits. The checker verifies per key that a hold held alone
//! overlaps no other hold, that readers overlap only readers, that no more holders of a
//! semaphore overlap than it has permits, and that fencing tokens increase wherever the
//! intervals order two holds (around every hold held alone, a semaphore's single permit
//! included: readers, and permits of a larger semaphore, that overlap take their tokens in
//! no order the intervals show); and that no lock key is left without a TTL. A coverage table counts how often each path ran during each kind of
//! fault, and how often readers and permits actually shared their key. Negative controls
//! prove that the checker fails when the assumptions are broken.
//!
//! Short mode (the README's test command, and CI): 20 s per run. Long mode: `QUORUM_LOCK_TORTURE_SECS=600 cargo test
//! --all-features --test torture torture_ -- --nocapture --test-threads=1`. Re-run a schedule
//! with `QUORUM_LOCK_TORTURE_SEED` (the fault schedule and the clients' choices are seeded;
//! timing is not, so a re-run replays the same plan, not the same interleaving).

/// The torture clients (also run in the worker processes, which re-enter this binary).
#[path = "torture/clients.rs"]
mod clients;
mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use clients::{ClientPlan, Keys, PathEvent, PATHS};
use common::*;
use quorum_lock::testkit::history::{check, Hold, Interval};
use quorum_lock::testkit::{monotonic_nanos, Fleet, Persistence};
use quorum_lock::{Quorum, QuorumLock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

const INTERVAL_PREFIX: &str = "TORTURE-INTERVAL ";
const EVENT_PREFIX: &str = "TORTURE-EVENT ";
const WORKER_PROCESSES: usize = 2;
const TASKS_PER_PROCESS: usize = 4;
/// The node whose clock jumps (early expiry); the other faults hit nodes 0..SKEWED, one at a
/// time, so at most two of five nodes are faulty at once.
const SKEWED: usize = 4;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[derive(Debug, Clone, Copy)]
enum Outage {
    Killed,
    Paused,
    Partitioned,
    Slowed,
}

/// The faults of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schedule {
    /// The seeded random schedule (see [`inject_faults`]), and whether node SKEWED's clock
    /// jumps.
    Random { clock_jumps: bool },
    /// Node FROZEN stopped (SIGSTOP) for the whole run.
    Frozen,
    /// Node FROZEN stopped for 1 s of every 3.
    Flapping,
}

/// The node a frozen or flapping run stops.
const FROZEN: usize = 1;

/// One torture run: `at_least` confirmations (`None`: majority), under `schedule`. `test` is
/// the name of the calling test, which its worker processes re-enter.
async fn torture(test: &str, at_least: Option<usize>, schedule: Schedule) {
    // A worker process started by the run below: run the clients, print the history.
    if let Some(plan) = ClientPlan::from_env() {
        let report = plan.run().await.expect("worker clients");
        for i in &report.intervals {
            println!("{INTERVAL_PREFIX}{}", i.to_line());
        }
        for e in &report.events {
            println!("{EVENT_PREFIX}{}", e.to_line());
        }
        assert!(
            !report.intervals.is_empty(),
            "worker {} never held a lock",
            plan.name
        );
        return;
    }

    let secs = env_u64("QUORUM_LOCK_TORTURE_SECS").unwrap_or(20);
    let seed = env_u64("QUORUM_LOCK_TORTURE_SEED").unwrap_or_else(rand::random);
    println!("{test}: {secs} s, seed {seed} (re-run with QUORUM_LOCK_TORTURE_SEED={seed})");
    let fleet = Fleet::builder()
        .nodes(5)
        .persistence(Persistence::AofAlways)
        .proxied(true)
        .start()
        .expect("fleet");
    let run = uuid::Uuid::new_v4().simple().to_string();
    let keys = Keys::new(format!("torture:{run}"));
    let plan = |name: String, seed: u64| ClientPlan {
        urls: fleet.urls(),
        keys: keys.clone(),
        seed,
        duration: Duration::from_secs(secs),
        tasks: TASKS_PER_PROCESS,
        name,
        at_least,
    };

    let exe = std::env::current_exe().expect("test binary");
    let workers: Vec<_> = (0..WORKER_PROCESSES)
        .map(|w| {
            let (var, value) = plan(format!("w{w}"), seed + 1 + w as u64).to_env();
            Command::new(&exe)
                .args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(var, value)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawning a worker process")
        })
        .collect();
    let local = tokio::spawn({
        let plan = plan("p".into(), seed);
        async move { plan.run().await }
    });

    let faults = match schedule {
        Schedule::Random { clock_jumps } => {
            let jumps = clock_jumps.then(|| keys.pattern());
            inject_faults(&fleet, seed, Duration::from_secs(secs), jumps.as_deref()).await
        }
        Schedule::Frozen | Schedule::Flapping => {
            stop_one_node(&fleet, schedule, Duration::from_secs(secs)).await
        }
    };

    let local = local.await.unwrap().expect("local clients");
    let mut history = local.intervals;
    let mut events = local.events;
    let local_intervals = history.len();
    for (w, worker) in workers.into_iter().enumerate() {
        let out = tokio::task::spawn_blocking(move || worker.wait_with_output())
            .await
            .unwrap()
            .expect("worker output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "worker {w} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        history.extend(
            stdout
                .lines()
                .filter_map(|l| l.strip_prefix(INTERVAL_PREFIX))
                .filter_map(Interval::from_line),
        );
        events.extend(
            stdout
                .lines()
                .filter_map(|l| l.strip_prefix(EVENT_PREFIX))
                .filter_map(PathEvent::from_line),
        );
    }
    let report = check(&history);
    events.extend(clients::shared_holds(&history));
    let nodes = (0..fleet.len()).map(|i| fleet.client(i));
    let untimed = clients::keys_without_ttl(nodes, &keys.with_ttl()).await;
    println!("{test}: coverage (runs of each path, and during each fault kind)");
    print!("{}", coverage_table(&events, &faults.spans));
    let processes = history
        .iter()
        .map(|i| i.client.split('-').next().unwrap_or_default().to_string())
        .collect::<std::collections::BTreeSet<_>>();
    let acquisitions = clients::acquisitions(&history);
    println!(
        "{test}: {acquisitions} acquisitions, {} intervals ({} in this process, {} processes, {} tasks), faults {:?}, violations {}",
        history.len(),
        local_intervals,
        processes.len(),
        (WORKER_PROCESSES + 1) * TASKS_PER_PROCESS,
        faults.counts,
        report.violations()
    );
    assert!(
        report.is_safe(),
        "seed {seed}: {report}\n{}",
        fleet.all_logs()
    );
    assert!(
        untimed.is_empty(),
        "seed {seed}: lock keys left without a TTL: {untimed:?}"
    );
    assert_eq!(
        processes.len(),
        WORKER_PROCESSES + 1,
        "every process held locks"
    );
    // Holds last up to three leases, and the two configurations run at once on two cores:
    // a loaded machine gets fewer acquisitions, but never this few unless something is wrong.
    assert!(
        acquisitions >= 25,
        "too few acquisitions to mean anything: {acquisitions}"
    );
    let at_least_faults = match schedule {
        Schedule::Random { .. } => 10,
        Schedule::Frozen => 1,
        Schedule::Flapping => (secs / 3).max(1) as u32,
    };
    assert!(
        faults.counts.values().sum::<u32>() >= at_least_faults,
        "too few faults: {:?}",
        faults.counts
    );
    // The main paths ran (each is expected dozens of times in 20 s, so missing one means
    // the plan is broken, not bad luck); the table above shows the rest.
    let ran: std::collections::BTreeSet<&str> = events.iter().map(|e| e.path).collect();
    // A semaphore under `Quorum::All` cannot be taken while a node is stopped: with one
    // frozen throughout it never is, and with one flapping only in the windows between.
    let needs_every_node = |p: &&str| *p == "acquire permit (1 of 2, Quorum::All)";
    let missing: Vec<&str> = MAIN_PATHS
        .iter()
        .copied()
        .filter(|p| !ran.contains(p))
        .filter(|p| matches!(schedule, Schedule::Random { .. }) || !needs_every_node(p))
        .collect();
    assert!(missing.is_empty(), "paths that never ran: {missing:?}");
}

/// Paths that every run takes dozens of times (the others are rarer: they need a fault to
/// meet a particular moment of a hold, or two holders to meet, and are reported, not
/// required).
const MAIN_PATHS: [&str; 13] = [
    "acquire native (unfenced)",
    "acquire fenced",
    "acquire multi-key set (keys of sets only)",
    "acquire multi-key set (with keys locked alone)",
    "acquire read lock",
    "acquire write lock",
    "acquire permit (1 of 1)",
    "acquire permit (1 of 2, Quorum::All)",
    "acquire fair lock",
    "renewal confirmed",
    "extend longer ok",
    "hold outlived a fixed ttl",
    "release confirmed",
];

/// How long after a reset or a clock jump (instants) a path counts as running "during" it:
/// connections are re-made and lost entries repaired within it.
const AFTERMATH: u64 = 1_000_000_000;

/// Runs of each path in total and during each kind of fault (a path's span overlapping the
/// fault's span; for resets and clock jumps, the second after them).
fn coverage_table(events: &[PathEvent], spans: &[FaultSpan]) -> String {
    let kinds: Vec<&str> = FAULT_KINDS.to_vec();
    let mut out = format!("| path | total | {} |\n", kinds.join(" | "));
    out.push_str(&format!("|---|---|{}\n", "---|".repeat(kinds.len())));
    for path in PATHS {
        let mine: Vec<&PathEvent> = events.iter().filter(|e| e.path == path).collect();
        let total: u64 = mine.iter().map(|e| e.count).sum();
        let per_kind: Vec<String> = kinds
            .iter()
            .map(|kind| {
                mine.iter()
                    .filter(|e| {
                        spans
                            .iter()
                            .any(|f| f.kind == *kind && e.start <= f.end && f.start <= e.end)
                    })
                    .map(|e| e.count)
                    .sum::<u64>()
                    .to_string()
            })
            .collect();
        out.push_str(&format!(
            "| {path} | {total} | {} |\n",
            per_kind.join(" | ")
        ));
    }
    out
}

/// RedLock as configured by default: kills (with AOF restarts), pauses, partitions, slow
/// links and resets on one node at a time. No node forgets a lock, so a majority is safe
/// however the outages move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torture_majority_under_outages() {
    let schedule = Schedule::Random { clock_jumps: false };
    torture("torture_majority_under_outages", None, schedule).await;
}

/// Separate clients (processes) contend while one node of five is frozen (SIGSTOP) for the
/// whole run: the circuit breaker, the arbiter passed over, the quorum of the four others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torture_majority_with_a_node_frozen_throughout() {
    let test = "torture_majority_with_a_node_frozen_throughout";
    torture(test, None, Schedule::Frozen).await;
}

/// Separate clients (processes) contend while one node of five is stopped 1 s of every 3:
/// breakers opening and closing, arbiters changing, backlogs answered late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torture_majority_with_a_flapping_node() {
    torture(
        "torture_majority_with_a_flapping_node",
        None,
        Schedule::Flapping,
    )
    .await;
}

/// Majority plus one (4 of 5) with the same outages and, on top, one node whose clock keeps
/// jumping (it drops every lock entry early). One forgetful node needs one confirmation more
/// than a majority: see `one_jumping_clock_breaks_a_bare_majority` for why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torture_majority_plus_one_with_a_jumping_clock() {
    torture(
        "torture_majority_plus_one_with_a_jumping_clock",
        Some(4),
        Schedule::Random { clock_jumps: true },
    )
    .await;
}

/// The kinds of fault, as the coverage table names them.
const FAULT_KINDS: [&str; 6] = [
    "kill+restart",
    "pause",
    "partition",
    "slow",
    "reset",
    "clock-jump",
];

/// One fault, in monotonic nanoseconds (an instant for resets and clock jumps).
#[derive(Debug, Clone)]
struct FaultSpan {
    kind: &'static str,
    start: u64,
    end: u64,
}

/// What the fault schedule did.
#[derive(Debug, Default)]
struct Faults {
    counts: BTreeMap<&'static str, u32>,
    spans: Vec<FaultSpan>,
}

impl Faults {
    fn instant(&mut self, kind: &'static str) {
        let now = monotonic_nanos();
        *self.counts.entry(kind).or_default() += 1;
        self.spans.push(FaultSpan {
            kind,
            start: now,
            end: now + AFTERMATH,
        });
    }
}

impl Outage {
    fn name(self) -> &'static str {
        match self {
            Outage::Killed => "kill+restart",
            Outage::Paused => "pause",
            Outage::Partitioned => "partition",
            Outage::Slowed => "slow",
        }
    }
}

/// The seeded fault schedule: at most one outage at a time on nodes 0..SKEWED, and, with
/// `clock_jumps` (the pattern of the keys that jump), early expiry on node SKEWED. Returns
/// the faults injected, per kind and as spans of time.
async fn inject_faults(
    fleet: &Fleet,
    seed: u64,
    duration: Duration,
    clock_jumps: Option<&str>,
) -> Faults {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut faults = Faults::default();
    let mut outage: Option<(usize, Outage, Instant, u64)> = None;
    let end = Instant::now() + duration;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..250))).await;
        if let Some((node, kind, until, began)) = outage {
            if Instant::now() >= until {
                end_outage(fleet, node, kind);
                faults.spans.push(FaultSpan {
                    kind: kind.name(),
                    start: began,
                    end: monotonic_nanos(),
                });
                outage = None;
            }
        }
        if outage.is_none() && rng.random_bool(0.6) {
            let node = rng.random_range(0..SKEWED);
            let until = Instant::now() + Duration::from_millis(rng.random_range(100..1200));
            let kind = match rng.random_range(0..5) {
                0 => {
                    tokio::task::block_in_place(|| fleet.kill(node)).expect("kill");
                    Some(Outage::Killed)
                }
                1 => {
                    fleet.pause(node).expect("pause");
                    Some(Outage::Paused)
                }
                2 => {
                    fleet.proxy(node).black_hole();
                    Some(Outage::Partitioned)
                }
                3 => {
                    fleet
                        .proxy(node)
                        .latency(Duration::from_millis(rng.random_range(20..300)));
                    Some(Outage::Slowed)
                }
                _ => {
                    fleet.proxy(node).reset();
                    faults.instant("reset");
                    None
                }
            };
            if let Some(kind) = kind {
                *faults.counts.entry(kind.name()).or_default() += 1;
                outage = Some((node, kind, until, monotonic_nanos()));
            }
        }
        if let Some(pattern) = clock_jumps.filter(|_| rng.random_bool(0.3)) {
            tokio::task::block_in_place(|| fleet.expire_early(SKEWED, pattern)).expect("skew");
            faults.instant("clock-jump");
        }
    }
    if let Some((node, kind, _, began)) = outage {
        end_outage(fleet, node, kind);
        faults.spans.push(FaultSpan {
            kind: kind.name(),
            start: began,
            end: monotonic_nanos(),
        });
    }
    faults
}

/// Node FROZEN stopped for the whole run ([`Schedule::Frozen`]) or for 1 s of every 3
/// ([`Schedule::Flapping`]), resumed at the end.
async fn stop_one_node(fleet: &Fleet, schedule: Schedule, duration: Duration) -> Faults {
    let mut faults = Faults::default();
    let end = Instant::now() + duration;
    let (stopped, running) = match schedule {
        Schedule::Flapping => (Duration::from_secs(1), Duration::from_secs(2)),
        _ => (duration, Duration::ZERO),
    };
    while Instant::now() < end {
        let began = monotonic_nanos();
        fleet.pause(FROZEN).expect("pause");
        *faults.counts.entry(Outage::Paused.name()).or_default() += 1;
        tokio::time::sleep_until((Instant::now() + stopped).min(end)).await;
        fleet.resume(FROZEN).expect("resume");
        faults.spans.push(FaultSpan {
            kind: Outage::Paused.name(),
            start: began,
            end: monotonic_nanos(),
        });
        tokio::time::sleep_until((Instant::now() + running).min(end)).await;
    }
    faults
}

fn end_outage(fleet: &Fleet, node: usize, kind: Outage) {
    match kind {
        Outage::Killed => tokio::task::block_in_place(|| fleet.restart(node)).expect("restart"),
        Outage::Paused => fleet.resume(node).expect("resume"),
        Outage::Partitioned | Outage::Slowed => fleet.proxy(node).heal(),
    }
}

// ---- controls: the checker must see these ------------------------------------------------

async fn hold(locks: &QuorumLock, key: &str, who: &str) -> (Interval, quorum_lock::LockGuard) {
    let guard = locks
        .lock(key)
        .ttl(Duration::from_secs(10))
        .fencing(true)
        .try_acquire()
        .await
        .expect("acquire")
        .expect("the key looked free");
    (Interval::begin(&guard, who), guard)
}

/// Takes `key` as a second holder while `first` (with its guard) still believes it holds it,
/// and checks that the checker reports exactly that overlap.
async fn assert_second_holder_is_caught(
    b: &QuorumLock,
    key: &str,
    first: Interval,
    guard_a: &quorum_lock::LockGuard,
) -> quorum_lock::testkit::history::Report {
    let (second, guard_b) = hold(b, key, "b").await;
    let report = check(&[first.finish(guard_a), second.finish(&guard_b)]);
    assert_eq!(
        report.overlaps.len(),
        1,
        "the checker missed the overlap: {report}"
    );
    report
}

/// Waits until the acquire's calls to every node have landed (they finish in the background).
async fn on_all_nodes(fleet: &Fleet, key: &str, holder: &str) {
    eventually(
        fleet,
        Duration::from_secs(5),
        "entry on every node",
        || async { nodes_holding(fleet, key, holder).await == fleet.len() },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_majority_restarted_without_persistence_admits_a_second_holder() {
    let fleet = own_fleet(5);
    let a = client(&fleet, Quorum::Majority).await;
    let b = client(&fleet, Quorum::Majority).await;
    let key = unique_key("control-restart");
    let (first, guard_a) = hold(&a, &key, "a").await;
    on_all_nodes(&fleet, &key, guard_a.holder()).await;
    // The fencing calls' stragglers too: nothing of `a` may reach a restarted node.
    a.finish_background().await;
    for i in 0..3 {
        fleet.restart(i).unwrap();
    }
    // The two nodes that kept the lock and the counters go down, so that B's lock and its
    // fencing increments can only reach the three that forgot both.
    for i in 3..5 {
        fleet.kill(i).unwrap();
    }
    let report = assert_second_holder_is_caught(&b, &key, first, &guard_a).await;
    assert_eq!(
        report.token_regressions.len(),
        1,
        "lost counters repeat tokens: {report}"
    );
}

/// A client that confirms with 2 of the 5 nodes (the quorum check bypassed).
async fn minority(fleet: &Fleet) -> QuorumLock {
    quorum_lock::testkit::unchecked_quorum(builder(fleet, Quorum::Majority), 2)
        .lazy(true)
        .build()
        .await
        .unwrap()
}

/// Runs `first` while nodes 2..5 are down, so that what it takes lives on nodes 0 and 1
/// only, then brings them back empty: a minority client's next acquisition finds them free.
async fn on_nodes_0_and_1<T>(fleet: &Fleet, first: impl std::future::Future<Output = T>) -> T {
    for i in 2..5 {
        fleet.kill(i).unwrap();
    }
    let taken = first.await;
    for i in 2..5 {
        fleet.restart(i).unwrap();
    }
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_minority_quorum_admits_a_second_holder() {
    let fleet = own_fleet(5);
    let key = unique_key("control-minority");
    let a = minority(&fleet).await;
    let (first, guard_a) = on_nodes_0_and_1(&fleet, hold(&a, &key, "a")).await;
    let b = minority(&fleet).await;
    assert_second_holder_is_caught(&b, &key, first, &guard_a).await;
}

/// A multi-key lock under a minority quorum takes its set on nodes 2..5 while a single lock
/// of one of its keys sits on nodes 0 and 1: the set's interval on that key overlaps the
/// single holder's, and its other key's does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_set_under_a_minority_quorum_overlaps_a_single_holder_of_one_key() {
    let fleet = own_fleet(5);
    let (a, b) = (unique_key("control-set-a"), unique_key("control-set-b"));
    let single = minority(&fleet).await;
    let (first, guard_b) = on_nodes_0_and_1(&fleet, hold(&single, &b, "single")).await;
    let sets = minority(&fleet).await;
    let set = sets
        .lock_all([&a, &b])
        .ttl(Duration::from_secs(10))
        .try_acquire()
        .await
        .expect("acquire")
        .expect("nodes 2..5 had the set free");
    let mut history: Vec<Interval> = Interval::begin_each_key(&set, "set")
        .into_iter()
        .map(|i| i.finish(&set))
        .collect();
    history.push(first.finish(&guard_b));
    let report = check(&history);
    assert_eq!(report.keys, 2, "{report}");
    assert_eq!(report.overlaps.len(), 1, "{report}");
    assert!(
        report.overlaps[0].starts_with(&format!("{b}: set")),
        "the overlap is on the shared key, by the set: {report}"
    );
}

/// A writer under a minority quorum holds on nodes 0 and 1; two readers under a minority
/// quorum then hold on nodes 2..5. The checker reports each reader inside the writer's
/// interval, and not the readers beside each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_readers_under_a_minority_quorum_are_caught_inside_a_writers_interval() {
    let fleet = own_fleet(5);
    let key = unique_key("control-rw");
    let take = |locks: QuorumLock, write: bool| {
        let key = key.clone();
        async move {
            let request = match write {
                true => locks.write_lock(&key),
                false => locks.read_lock(&key),
            };
            let guard = request
                .ttl(Duration::from_secs(10))
                .try_acquire()
                .await
                .expect("acquire")
                .expect("the nodes it reaches had it free");
            let interval = Interval::begin(&guard, if write { "writer" } else { "reader" });
            match write {
                true => (interval, guard),
                false => (interval.holding(Hold::Read), guard),
            }
        }
    };
    let (writer, writer_guard) = on_nodes_0_and_1(&fleet, take(minority(&fleet).await, true)).await;
    let mut readers = Vec::new();
    for _ in 0..2 {
        readers.push(take(minority(&fleet).await, false).await);
    }
    let readers: Vec<Interval> = readers
        .iter()
        .map(|(i, guard)| i.clone().finish(guard))
        .collect();
    let alone = check(&readers);
    assert!(alone.is_safe(), "readers share: {alone}");
    let mut history = readers;
    history.push(writer.finish(&writer_guard));
    let report = check(&history);
    assert_eq!(report.overlaps.len(), 2, "{report}");
    assert!(
        report
            .overlaps
            .iter()
            .all(|o| o.contains("(reader)") && o.contains("writer (exclusive)")),
        "{report}"
    );
}

/// A semaphore of 2 permits under a majority of 5 (its check bypassed through the test kit)
/// admits 3 holders: each client reaches only its own 3 nodes ({0,1,2}, {2,3,4}, {0,1,3};
/// the others are closed ports), no node is asked for more than 2 permits, and each client
/// has its majority. The checker sees the third holder beyond the permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_majority_semaphore_of_two_permits_admits_a_third_holder() {
    let fleet = own_fleet(5);
    let key = unique_key("control-semaphore");
    let mut held = Vec::new();
    for (c, reach) in [[0, 1, 2], [2, 3, 4], [0, 1, 3]].into_iter().enumerate() {
        let mut closed = closed_ports(5 - reach.len()).into_iter();
        let urls: Vec<String> = (0..5)
            .map(|i| match reach.contains(&i) {
                true => fleet.url(i),
                false => format!("redis://127.0.0.1:{}", closed.next().unwrap()),
            })
            .collect();
        let locks = QuorumLock::builder()
            .nodes(urls)
            .quorum(Quorum::Majority)
            .node_timeout(Duration::from_millis(250))
            .lazy(true)
            .build()
            .await
            .unwrap();
        let checked = locks.semaphore(&key, 2).counted().try_acquire().await;
        assert!(
            matches!(checked, Err(quorum_lock::Error::InvalidConfig { .. })),
            "{checked:?}"
        );
        let permit = quorum_lock::testkit::unchecked_semaphore(&locks, &key, 2)
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .expect("acquire")
            .unwrap_or_else(|| panic!("client {c} was refused"));
        let interval = Interval::begin(&permit, format!("c{c}")).holding(Hold::Permit(2));
        held.push((interval, permit, locks));
    }
    let history: Vec<Interval> = held
        .iter()
        .map(|(i, permit, _)| i.clone().finish(permit))
        .collect();
    let report = check(&history);
    assert_eq!(report.over_permits.len(), 1, "{report}");
    assert_eq!(report.violations(), 1, "{report}");
    assert!(
        report.over_permits[0].contains("c2 (1 of 2 permits)"),
        "the third holder is the one reported: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_majority_of_jumping_clocks_admits_a_second_holder() {
    let fleet = own_fleet(5);
    let a = client(&fleet, Quorum::Majority).await;
    let b = client(&fleet, Quorum::Majority).await;
    let key = unique_key("control-clocks");
    let (first, guard_a) = hold(&a, &key, "a").await;
    on_all_nodes(&fleet, &key, guard_a.holder()).await;
    for i in 0..3 {
        assert_eq!(fleet.expire_early(i, &key).unwrap(), 1);
    }
    assert_second_holder_is_caught(&b, &key, first, &guard_a).await;
}

/// Takes `key` on exactly nodes 0..3 (nodes 3 and 4 are down meanwhile), then brings
/// nodes 3 and 4 back empty: the lock sits on a bare majority.
async fn hold_on_a_bare_majority(
    fleet: &Fleet,
    locks: &QuorumLock,
    key: &str,
) -> (Interval, quorum_lock::LockGuard) {
    fleet.kill(3).unwrap();
    fleet.kill(4).unwrap();
    let held = hold(locks, key, "a").await;
    fleet.restart(3).unwrap();
    fleet.restart(4).unwrap();
    held
}

/// RedLock's known limit, shown: with a plain majority, a lock held on a bare majority is
/// broken by ONE node whose clock jumps (or that restarts empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_jumping_clock_breaks_a_bare_majority() {
    let fleet = own_fleet(5);
    let a = builder(&fleet, Quorum::Majority)
        .lazy(true)
        .build()
        .await
        .unwrap();
    let b = client(&fleet, Quorum::Majority).await;
    let key = unique_key("bare-majority");
    let (first, guard_a) = hold_on_a_bare_majority(&fleet, &a, &key).await;
    assert_eq!(fleet.expire_early(0, &key).unwrap(), 1);
    assert_second_holder_is_caught(&b, &key, first, &guard_a).await;
}

/// One confirmation more than a majority (4 of 5) tolerates one node that forgets: the lock
/// keeps 3 entries, and a second holder would need 4 free nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_plus_one_survives_one_jumping_clock() {
    let fleet = own_fleet(5);
    let plus_one = |f: &Fleet| builder(f, Quorum::AtLeast(4)).lazy(true).build();
    let a = plus_one(&fleet).await.unwrap();
    let b = plus_one(&fleet).await.unwrap();
    let key = unique_key("plus-one");
    fleet.kill(4).unwrap();
    let (_, guard_a) = hold(&a, &key, "a").await; // on exactly nodes 0..4
    fleet.restart(4).unwrap();
    assert_eq!(fleet.expire_early(0, &key).unwrap(), 1);
    assert!(b
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .is_none());
    assert!(guard_a.is_held());
    // The release finds 3 entries, fewer than the 4 this quorum needs, and says so: a
    // conservative report (nobody else could have held 4 nodes meanwhile).
    let err = guard_a.release().await.unwrap_err();
    assert!(
        matches!(
            err,
            quorum_lock::Error::NotHeld {
                confirmed: 3,
                required: 4,
                ..
            }
        ),
        "{err}"
    );
}
