//! Review probes for the fair lock's holds from grant notices (a waiter of another client
//! holds from the notices of a quorum's short grants, without a claim attempt). They attack
//! exclusion, the deadline against the nodes' entries, cancellation, fixed-TTL and watchdog
//! guards, holder values, lock delay, fencing, and faults during hand-offs, through the
//! public API against real servers.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::combinations::another_client_gets_it_soon;
use super::{any_line_keys, queued_everywhere};
use crate::common::*;
use quorum_lock::testkit::history::{self, Interval};
use quorum_lock::testkit::Fleet;
use quorum_lock::{LockGuard, Quorum, QuorumLock};
use tokio::time::Instant;

pub(super) const LONG: Duration = Duration::from_secs(30);

/// Whether a holder value is a hand-off value `<base>:h<round>`.
pub(super) fn is_handoff_value(holder: &str) -> bool {
    let suffix = holder.rsplit(':').next().unwrap_or("");
    suffix.starts_with('h') && suffix.len() > 1 && suffix[1..].parse::<u64>().is_ok()
}

/// Persistent connections to each node, for cheap reads during critical sections.
pub(super) struct Probe {
    conns: Mutex<Vec<redis::aio::MultiplexedConnection>>,
    clients: Vec<redis::Client>,
}

impl Probe {
    pub(super) async fn new(fleet: &Fleet) -> Probe {
        let mut conns = Vec::new();
        for i in 0..fleet.len() {
            conns.push(conn(fleet, i).await);
        }
        Probe {
            conns: Mutex::new(conns),
            clients: (0..fleet.len()).map(|i| fleet.client(i)).collect(),
        }
    }

    /// GET and PTTL of `key` on node `i`, or None when the node does not answer in 150 ms.
    pub(super) async fn read(&self, i: usize, key: &str) -> Option<(Option<String>, i64)> {
        let mut c = self.conns.lock().unwrap()[i].clone();
        let fut = async move {
            redis::pipe()
                .cmd("GET")
                .arg(key)
                .cmd("PTTL")
                .arg(key)
                .query_async::<(Option<String>, i64)>(&mut c)
                .await
        };
        match tokio::time::timeout(Duration::from_millis(150), fut).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(_)) => {
                // The node restarted: a fresh connection, once.
                let fresh = tokio::time::timeout(
                    Duration::from_millis(150),
                    self.clients[i].get_multiplexed_async_connection(),
                )
                .await;
                let Ok(Ok(mut fresh)) = fresh else {
                    return None;
                };
                self.conns.lock().unwrap()[i] = fresh.clone();
                let mut pipe = redis::pipe();
                pipe.cmd("GET").arg(key).cmd("PTTL").arg(key);
                let again = pipe.query_async::<(Option<String>, i64)>(&mut fresh);
                match tokio::time::timeout(Duration::from_millis(150), again).await {
                    Ok(Ok(v)) => Some(v),
                    _ => None,
                }
            }
            Err(_) => None,
        }
    }

    /// How many nodes hold the guard's value with a PTTL covering its deadline (plus
    /// `delay`), with the deadline read before any node. Returns (covering, detail).
    pub(super) async fn covering(
        &self,
        guard: &LockGuard,
        delay: Duration,
    ) -> (usize, String, bool) {
        let key = String::from_utf8_lossy(guard.key()).to_string();
        let deadline = guard.deadline();
        let held_before = guard.is_held();
        let mut n = 0;
        let mut detail = String::new();
        for i in 0..self.clients.len() {
            let got = self.read(i, &key).await;
            let now = Instant::now();
            let need = deadline.saturating_duration_since(now) + delay;
            let need_ms = need.as_millis() as i64;
            match got {
                Some((Some(v), pttl)) if v == guard.holder() => {
                    if pttl + 2 >= need_ms {
                        n += 1;
                    }
                    detail.push_str(&format!(" n{i}:own pttl={pttl} need={need_ms};"));
                }
                Some((v, pttl)) => {
                    detail.push_str(&format!(" n{i}:{:?} pttl={pttl} need={need_ms};", v))
                }
                None => detail.push_str(&format!(" n{i}:silent;")),
            }
        }
        (n, detail, held_before)
    }
}

#[derive(Default)]
struct Tally {
    acquired: AtomicUsize,
    from_handoff_values: AtomicUsize,
    node_checks: AtomicUsize,
    problems: Mutex<Vec<String>>,
}

impl Tally {
    fn problem(&self, p: String) {
        eprintln!("PROBLEM: {p}");
        self.problems.lock().unwrap().push(p);
    }
}

#[derive(Clone, Copy)]
struct Plan {
    /// Acquisitions per task.
    rounds: usize,
    tasks_per_client: usize,
    /// Read the nodes during critical sections.
    node_checks: bool,
    /// Lock delay of the clients (for the node check).
    lock_delay: Duration,
    /// Whether a failing release counts as a problem (a healthy fleet).
    healthy: bool,
}

/// Fair lock contention by separate clients with every kind of guard and ending, checking
/// exclusion with a shared flag and a history, and the nodes during critical sections.
async fn contend(
    fleet: &Fleet,
    key: &str,
    clients: &[QuorumLock],
    plan: Plan,
    tally: Arc<Tally>,
) -> Vec<Interval> {
    let history = Arc::new(Mutex::new(Vec::<Interval>::new()));
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let probe = Arc::new(Probe::new(fleet).await);
    let mut tasks = Vec::new();
    for (c, locks) in clients.iter().enumerate() {
        for t in 0..plan.tasks_per_client {
            let (locks, key, history, inside, counter, probe, tally) = (
                locks.clone(),
                key.to_string(),
                history.clone(),
                inside.clone(),
                counter.clone(),
                probe.clone(),
                tally.clone(),
            );
            // A client of another service to release by holder value.
            let other = clients[(c + 1) % clients.len()].clone();
            tasks.push(tokio::spawn(async move {
                for r in 0..plan.rounds {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let mode = (n * 7 + c as u64 * 3 + t as u64) % 7;
                    let request = locks.fair_lock(&key).wait(Duration::from_secs(60));
                    let request = match mode {
                        0 => request.ttl(Duration::from_millis(1500)),
                        1 => request.watchdog(Duration::from_millis(1200)),
                        2 => request.ttl(Duration::from_millis(1500)).fencing(true),
                        3 => request.watchdog(Duration::from_millis(900)).fencing(true),
                        4 => request.ttl(Duration::from_millis(400)),
                        5 => request.ttl(Duration::from_secs(3)),
                        _ => request,
                    };
                    let got = tokio::time::timeout(Duration::from_secs(90), request.acquire()).await;
                    let guard = match got {
                        Err(_) => {
                            tally.problem(format!("c{c}t{t} r{r}: acquire hung 90 s"));
                            continue;
                        }
                        Ok(Err(e)) => {
                            if plan.healthy {
                                tally.problem(format!("c{c}t{t} r{r} mode {mode}: acquire error {e}"));
                            }
                            continue;
                        }
                        Ok(Ok(g)) => g,
                    };
                    let interval = Interval::begin(&guard, format!("c{c}t{t}r{r}m{mode}"));
                    tally.acquired.fetch_add(1, Ordering::Relaxed);
                    let handed = is_handoff_value(guard.holder());
                    if handed {
                        tally.from_handoff_values.fetch_add(1, Ordering::Relaxed);
                    }
                    let held_at_start = guard.is_held();
                    let v0 = guard.validity();
                    if !held_at_start {
                        tally.problem(format!(
                            "c{c}t{t} r{r} mode {mode}: guard not held when returned (handed {handed})"
                        ));
                    }
                    let was_inside = inside.swap(true, Ordering::SeqCst);
                    if was_inside && held_at_start {
                        tally.problem(format!(
                            "c{c}t{t} r{r} mode {mode}: OVERLAP: entered while another was inside (validity {v0:?}, handed {handed})"
                        ));
                    }
                    if plan.node_checks && held_at_start {
                        let (cover, detail, held) = probe.covering(&guard, plan.lock_delay).await;
                        tally.node_checks.fetch_add(1, Ordering::Relaxed);
                        if held && guard.is_held() && cover < locks.quorum_size() {
                            tally.problem(format!(
                                "c{c}t{t} r{r} mode {mode} handed {handed}: deadline outlives entries: {cover} cover;{detail} validity {:?} ttl {:?}",
                                guard.validity(),
                                guard.ttl()
                            ));
                        }
                    }
                    // Critical section: mostly short, sometimes past a third of the claim
                    // window (the first renewal falls inside), for long TTLs only.
                    let hold_ms = match (n % 10, mode) {
                        (0, 0..=3) | (0, 5) => 450,
                        (1, 0..=3) | (1, 5) => 120,
                        (2, _) => 20,
                        _ => n % 3,
                    };
                    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                    if plan.node_checks && guard.is_held() && hold_ms >= 120 {
                        let (cover, detail, held) = probe.covering(&guard, plan.lock_delay).await;
                        if held && guard.is_held() && cover < locks.quorum_size() {
                            tally.problem(format!(
                                "c{c}t{t} r{r} mode {mode} handed {handed}: after {hold_ms} ms, deadline outlives entries: {cover} cover;{detail}"
                            ));
                        }
                    }
                    let held_at_end = guard.is_held();
                    let interval = interval.finish(&guard);
                    inside.store(false, Ordering::SeqCst);
                    if !held_at_end && plan.healthy {
                        tally.problem(format!(
                            "c{c}t{t} r{r} mode {mode}: lost during a {hold_ms} ms section on a healthy fleet (start validity {v0:?}, handed {handed}, ttl {:?})",
                            guard.ttl()
                        ));
                    }
                    history.lock().unwrap().push(interval);
                    // Every way to end it.
                    let ending = n % 5;
                    let result = match ending {
                        0 | 1 => guard.release().await,
                        2 => {
                            // extend then release
                            match guard.extend(Duration::from_secs(2)).await {
                                Ok(()) => guard.release().await,
                                Err(e) => Err(e),
                            }
                        }
                        3 => match guard.into_holder() {
                            Ok(h) => other.release_by_holder(&key, &h).await,
                            Err(g) => g.release().await,
                        },
                        _ => {
                            drop(guard);
                            Ok(())
                        }
                    };
                    if let Err(e) = result {
                        if plan.healthy {
                            tally.problem(format!(
                                "c{c}t{t} r{r} mode {mode} ending {ending}: release error {e}"
                            ));
                        }
                    }
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(600), t)
            .await
            .expect("a contending task hung")
            .expect("a contending task panicked");
    }
    let h = history.lock().unwrap().clone();
    h
}

pub(super) async fn fair_client(
    fleet: &Fleet,
    retry: Duration,
    lock_delay: Duration,
) -> QuorumLock {
    builder(fleet, Quorum::Majority)
        .retry_delay(retry)
        .retry_jitter(retry / 2)
        .queue_lease(Duration::from_secs(20))
        .lock_delay(lock_delay)
        .build()
        .await
        .expect("client")
}

fn report(name: &str, tally: &Tally, history: &[Interval]) {
    let check = history::check(history);
    eprintln!(
        "{name}: acquired {}, hand-off values {}, node checks {}, history safe {} ({} violations), problems {}",
        tally.acquired.load(Ordering::Relaxed),
        tally.from_handoff_values.load(Ordering::Relaxed),
        tally.node_checks.load(Ordering::Relaxed),
        check.is_safe(),
        check.violations(),
        tally.problems.lock().unwrap().len()
    );
    assert!(check.is_safe(), "{name}: {check:?}");
    let problems = tally.problems.lock().unwrap();
    assert!(problems.is_empty(), "{name}: {:#?}", &*problems);
}

pub(super) async fn leaves_nothing(fleet: &Fleet, key: &str, clients: &[QuorumLock]) {
    finish_background(clients).await;
    eventually(
        fleet,
        Duration::from_secs(20),
        "no line keys and no entry",
        || async {
            if any_line_keys(fleet, key).await {
                return false;
            }
            for i in 0..fleet.len() {
                if entry(fleet, i, key).await.is_some() {
                    return false;
                }
            }
            true
        },
    )
    .await;
    for c in clients {
        assert_eq!(c.stats().waiting, 0, "{:?}", c.stats());
    }
}

// ---------------------------------------------------------------------------------------
// 1. Many separate clients on a healthy fleet.

/// Separate clients with the given retry delays (ms) contend for one fair key: each
/// holder checks exclusion and the nodes' cover of its guard; nothing is left behind.
async fn contend_with(
    name: &str,
    retries: &[u64],
    tasks_per_client: usize,
    rounds: usize,
    lock_delay: Duration,
) {
    let fleet = shared_fleet();
    let key = unique_key(&format!("rn-{name}"));
    let mut clients = Vec::new();
    for &retry in retries {
        clients.push(fair_client(fleet, Duration::from_millis(retry), lock_delay).await);
    }
    let tally = Arc::new(Tally::default());
    let plan = Plan {
        rounds,
        tasks_per_client,
        node_checks: true,
        lock_delay,
        healthy: true,
    };
    let h = contend(fleet, &key, &clients, plan, tally.clone()).await;
    report(name, &tally, &h);
    leaves_nothing(fleet, &key, &clients).await;
}

/// Six clients, one task each, with different timers: some waiters wake on notices only,
/// others also on a short timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_many_clients_exclusion_healthy() {
    contend_with(
        "many-clients",
        &[5, 40, 2000, 10, 300, 60_000],
        1,
        8,
        Duration::ZERO,
    )
    .await;
}

/// Two tasks per client: waiters of the releasing client (whole-TTL hand-offs) beside
/// waiters of others (holds from notices).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_mixed_same_and_other_clients() {
    contend_with("mixed", &[5, 60_000, 50, 500], 3, 6, Duration::ZERO).await;
}

/// With a lock delay on every client: the entries must outlive each deadline by the delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_with_lock_delay() {
    contend_with(
        "lock-delay",
        &[5, 60_000, 50, 500],
        1,
        6,
        Duration::from_millis(300),
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// 2. Faults during hand-offs: one fault at a time, forgetful ones (clock jump, restart)
// spaced by more than any TTL so that no hold sees two.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_faults_during_handoffs() {
    let fleet: &'static Fleet = Box::leak(Box::new(own_fleet(5)));
    let key = unique_key("rn-faults");
    let mut clients = Vec::new();
    for i in 0..5 {
        let retry = [5, 60_000, 50, 500, 20][i];
        clients.push(fair_client(fleet, Duration::from_millis(retry), Duration::ZERO).await);
    }
    let tally = Arc::new(Tally::default());
    let plan = Plan {
        rounds: 12,
        tasks_per_client: 1,
        node_checks: true,
        lock_delay: Duration::ZERO,
        healthy: false,
    };
    let done = Arc::new(AtomicBool::new(false));
    let faults = {
        let done = done.clone();
        let f = fleet;
        tokio::spawn(async move {
            let mut log = Vec::new();
            let mut step = 0usize;
            while !done.load(Ordering::Relaxed) {
                let node = 1 + step % 4;
                match step % 4 {
                    0 => {
                        f.pause(node).unwrap();
                        tokio::time::sleep(Duration::from_millis(200 + (step as u64 * 97) % 600))
                            .await;
                        f.resume(node).unwrap();
                        log.push(format!("pause {node}"));
                        tokio::time::sleep(Duration::from_millis(400)).await;
                    }
                    1 => {
                        let n = f.expire_early(node, "test:*").unwrap_or(0);
                        log.push(format!("expire_early {node} ({n} keys)"));
                        tokio::time::sleep(Duration::from_millis(1600)).await;
                    }
                    2 => {
                        f.kill(node).unwrap();
                        tokio::time::sleep(Duration::from_millis(300 + (step as u64 * 53) % 500))
                            .await;
                        f.restart(node).unwrap();
                        log.push(format!("kill+restart {node}"));
                        tokio::time::sleep(Duration::from_millis(1600)).await;
                    }
                    _ => {
                        f.restart(node).unwrap();
                        log.push(format!("restart {node}"));
                        tokio::time::sleep(Duration::from_millis(1600)).await;
                    }
                }
                step += 1;
            }
            log
        })
    };
    let h = contend(fleet, &key, &clients, plan, tally.clone()).await;
    done.store(true, Ordering::Relaxed);
    let log = faults.await.unwrap();
    eprintln!("faults: {log:?}");
    report("faults", &tally, &h);
}

/// A proxied fleet: notices from two nodes come late (latency), one node partitioned for a
/// while, connections reset, during hand-offs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_proxy_latency_and_partitions() {
    let fleet: &'static Fleet = Box::leak(Box::new(
        Fleet::builder().nodes(5).proxied(true).start().unwrap(),
    ));
    let key = unique_key("rn-proxy");
    let mut clients = Vec::new();
    for i in 0..4 {
        let retry = [5, 60_000, 50, 500][i];
        clients.push(fair_client(fleet, Duration::from_millis(retry), Duration::ZERO).await);
    }
    let tally = Arc::new(Tally::default());
    let plan = Plan {
        rounds: 8,
        tasks_per_client: 1,
        node_checks: false,
        lock_delay: Duration::ZERO,
        healthy: false,
    };
    let done = Arc::new(AtomicBool::new(false));
    let faults = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut step = 0u64;
            while !done.load(Ordering::Relaxed) {
                match step % 4 {
                    0 => {
                        fleet.proxy(1).latency(Duration::from_millis(120));
                        fleet.proxy(2).latency(Duration::from_millis(60));
                        tokio::time::sleep(Duration::from_millis(1500)).await;
                        fleet.proxy(1).heal();
                        fleet.proxy(2).heal();
                    }
                    1 => {
                        fleet.proxy(3).black_hole();
                        tokio::time::sleep(Duration::from_millis(700)).await;
                        fleet.proxy(3).heal();
                    }
                    2 => {
                        fleet.proxy(4).reset();
                        fleet.proxy(0).latency(Duration::from_millis(200));
                        tokio::time::sleep(Duration::from_millis(800)).await;
                        fleet.proxy(0).heal();
                    }
                    _ => tokio::time::sleep(Duration::from_millis(500)).await,
                }
                step += 1;
            }
        })
    };
    let h = contend(fleet, &key, &clients, plan, tally.clone()).await;
    done.store(true, Ordering::Relaxed);
    faults.await.unwrap();
    for i in 0..5 {
        fleet.proxy(i).heal();
    }
    report("proxy", &tally, &h);
}

// ---------------------------------------------------------------------------------------
// 3. Waiters of other clients cancelled right around the release.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_cancel_around_release() {
    let fleet = shared_fleet();
    let key = unique_key("rn-cancel");
    let holder = fair_client(fleet, Duration::from_millis(5), Duration::ZERO).await;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        // Notices only (a minute between attempts).
        waiters.push(fair_client(fleet, Duration::from_secs(60), Duration::ZERO).await);
    }
    let probe_client = fair_client(fleet, Duration::from_millis(5), Duration::ZERO).await;
    let mut got_count = 0;
    for round in 0..12u64 {
        let held = holder
            .fair_lock(&key)
            .ttl(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for (w, c) in waiters.iter().enumerate() {
            let (c, k) = (c.clone(), key.clone());
            let watchdog = (round + w as u64).is_multiple_of(2);
            tasks.push(tokio::spawn(async move {
                let r = c.fair_lock(&k).wait(Duration::from_secs(30));
                let r = if watchdog {
                    r.watchdog(Duration::from_secs(3))
                } else {
                    r.ttl(Duration::from_secs(3))
                };
                r.acquire().await
            }));
            eventually(fleet, LONG, "waiter in line", || async {
                queued_everywhere(fleet, &key).await == w + 1 && c_waiting(&waiters[w])
            })
            .await;
        }
        // Release, and abort the first waiter (the one granted) some µs after the release
        // returns, or before, or exactly at it.
        let delay_us = (round * 173) % 2500;
        let release = tokio::spawn(held.release());
        if round % 3 == 0 {
            tokio::time::sleep(Duration::from_micros(delay_us)).await;
        } else {
            release.is_finished();
        }
        if round % 3 != 2 {
            while !release.is_finished() {
                tokio::task::yield_now().await;
            }
            if round % 2 == 0 {
                tokio::time::sleep(Duration::from_micros(delay_us)).await;
            }
        }
        tasks[0].abort();
        let first = tasks.remove(0).await;
        release.await.unwrap().unwrap();
        let kept = matches!(first, Ok(Ok(_)));
        if let Ok(Ok(g)) = first {
            got_count += 1;
            g.release().await.unwrap();
        }
        // The others get it in order, promptly.
        for (i, t) in tasks.into_iter().enumerate() {
            let t0 = Instant::now();
            let g = tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "round {round} waiter {}: hung (first kept {kept}); lines {:?}",
                        i + 1,
                        "?"
                    )
                })
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round} waiter {}: {e}", i + 1));
            assert!(
                t0.elapsed() < Duration::from_millis(2500),
                "round {round} waiter {}: took {:?} (first kept {kept})",
                i + 1,
                t0.elapsed()
            );
            assert!(g.is_held());
            g.release().await.unwrap();
        }
        // A fresh client gets it at once.
        another_client_gets_it_soon(&probe_client, &key, &format!("round {round}")).await;
    }
    eprintln!("cancel-around-release: the aborted first waiter kept a guard {got_count}/12 times");
    let mut all = waiters.clone();
    all.push(holder.clone());
    all.push(probe_client.clone());
    leaves_nothing(fleet, &key, &all).await;
}

fn c_waiting(c: &QuorumLock) -> bool {
    c.stats().waiting == 1
}

/// Tiny timeouts around acquire with many clients, releases at random moments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_tiny_timeouts_storm() {
    let fleet = shared_fleet();
    let key = unique_key("rn-storm");
    let mut clients = Vec::new();
    for i in 0..5 {
        let retry = [5, 60_000, 30, 400, 60_000][i];
        clients.push(fair_client(fleet, Duration::from_millis(retry), Duration::ZERO).await);
    }
    let inside = Arc::new(AtomicBool::new(false));
    let problems = Arc::new(Mutex::new(Vec::<String>::new()));
    let history = Arc::new(Mutex::new(Vec::<Interval>::new()));
    let mut tasks = Vec::new();
    for (c, locks) in clients.iter().enumerate() {
        for t in 0..2 {
            let (locks, key, inside, problems, history) = (
                locks.clone(),
                key.clone(),
                inside.clone(),
                problems.clone(),
                history.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for r in 0..15u64 {
                    let ms = 1 + (r * 31 + c as u64 * 17 + t * 7) % 60;
                    let req = locks.fair_lock(&key);
                    let req = if r % 2 == 0 {
                        req.ttl(Duration::from_secs(2))
                    } else {
                        req.watchdog(Duration::from_secs(2))
                    };
                    match tokio::time::timeout(Duration::from_millis(ms), req.acquire()).await {
                        Err(_) => {}
                        Ok(Err(e)) => problems
                            .lock()
                            .unwrap()
                            .push(format!("c{c}t{t} r{r}: acquire error {e}")),
                        Ok(Ok(g)) => {
                            let iv = Interval::begin(&g, format!("c{c}t{t}r{r}"));
                            if inside.swap(true, Ordering::SeqCst) && g.is_held() {
                                problems
                                    .lock()
                                    .unwrap()
                                    .push(format!("c{c}t{t} r{r}: OVERLAP"));
                            }
                            tokio::time::sleep(Duration::from_millis(r % 4)).await;
                            if !g.is_held() {
                                problems
                                    .lock()
                                    .unwrap()
                                    .push(format!("c{c}t{t} r{r}: lost in a {} ms section", r % 4));
                            }
                            let iv = iv.finish(&g);
                            inside.store(false, Ordering::SeqCst);
                            history.lock().unwrap().push(iv);
                            if r % 3 == 0 {
                                drop(g);
                            } else if let Err(e) = g.release().await {
                                problems
                                    .lock()
                                    .unwrap()
                                    .push(format!("c{c}t{t} r{r}: release {e}"));
                            }
                        }
                    }
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("hung")
            .unwrap();
    }
    let h = history.lock().unwrap().clone();
    let check = history::check(&h);
    eprintln!("storm: {} holds, safe {}", h.len(), check.is_safe());
    assert!(check.is_safe(), "{check:?}");
    let p = problems.lock().unwrap().clone();
    assert!(p.is_empty(), "{p:#?}");
    // Afterwards each client takes it promptly and nothing is left.
    for (i, c) in clients.iter().enumerate() {
        let t0 = Instant::now();
        let g = c
            .fair_lock(&key)
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("client {i} after the storm: {e}"));
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "client {i}: {:?}",
            t0.elapsed()
        );
        g.release().await.unwrap();
    }
    leaves_nothing(fleet, &key, &clients).await;
}

// ---------------------------------------------------------------------------------------
// 4. One hand-off from notices, looked at closely: fixed TTL semantics after the hold.
