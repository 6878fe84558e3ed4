//! Fleets in Docker containers (this crate, on testcontainers), where two clients can see the
//! nodes differently: each side reaches the nodes over a network of its own, and a node cut
//! from one network is still reached from the other. Exclusion under kills, pauses and
//! split-view partitions of a minority; a holder cut off from a majority loses its lock
//! before the other side takes it; a client cut off from a majority fails fast; restarts
//! with and without data; a short torture run with container faults.
//!
//! Ignored by default: they need Docker and the image `docker/build-image.sh` builds. Run
//! them with `cargo test -p quorum-lock-containers -- --ignored`; without Docker they fail,
//! saying why.

/// The torture suite's clients (the library's tests/torture/clients.rs).
#[allow(dead_code)]
#[path = "../../tests/torture/clients.rs"]
mod clients;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clients::{ClientPlan, Keys};
use quorum_lock::testkit::history::{check, Interval};
use quorum_lock::testkit::monotonic_nanos;
use quorum_lock::{Builder, Error, Quorum, QuorumLock};
use quorum_lock_containers::{ContainerFleet, Side};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// A key no other test uses.
fn unique_key(name: &str) -> String {
    format!("test:{name}:{}", uuid::Uuid::new_v4().simple())
}

/// A five-node fleet shared by the tests of this binary that inject no faults (unique
/// keys). Kept in a static, it is never dropped: the test kit's reaper removes it when the
/// process ends.
async fn shared_fleet() -> &'static ContainerFleet {
    static FLEET: tokio::sync::OnceCell<ContainerFleet> = tokio::sync::OnceCell::const_new();
    FLEET.get_or_init(|| async { own_fleet().await }).await
}

/// A fresh five-node fleet for a test that injects faults.
async fn own_fleet() -> ContainerFleet {
    match ContainerFleet::start(5).await {
        Ok(fleet) => fleet,
        Err(e) => panic!("starting a container fleet: {e}"),
    }
}

/// Test settings (as in tests/common): timeouts generous enough for a loaded 2-core machine.
fn builder(fleet: &ContainerFleet, side: Side) -> Builder {
    QuorumLock::builder()
        .nodes(fleet.urls(side))
        .quorum(Quorum::Majority)
        .node_timeout(Duration::from_millis(250))
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::from_millis(10))
}

async fn client(fleet: &ContainerFleet, side: Side) -> QuorumLock {
    builder(fleet, side)
        .build()
        .await
        .expect("building a client")
}

/// The holder value node `i` stores for `key`, read through `side`.
async fn entry(fleet: &ContainerFleet, i: usize, side: Side, key: &str) -> Option<String> {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    let mut conn = fleet
        .client(i, side)
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("a check connection");
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("GET")
}

async fn nodes_holding(fleet: &ContainerFleet, side: Side, key: &str, holder: &str) -> usize {
    let mut n = 0;
    for i in 0..fleet.len() {
        n += usize::from(entry(fleet, i, side, key).await.as_deref() == Some(holder));
    }
    n
}

/// Waits (polling, bounded) until `check` holds; panics with `what` and the fleet's logs if
/// it does not within `limit`.
async fn eventually<F, Fut>(fleet: &ContainerFleet, limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        if Instant::now() > deadline {
            panic!("not within {limit:?}: {what}\n{}", fleet.all_logs());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Milliseconds from `from` to `to`, negative when `to` came first.
fn signed_ms(from: Instant, to: Instant) -> i128 {
    if to >= from {
        (to - from).as_millis() as i128
    } else {
        -((from - to).as_millis() as i128)
    }
}

// ---- exclusion with clients on both sides ------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Node 0 killed (SIGKILL), then restarted with its data.
    Kill,
    /// Node 0 frozen, then thawed.
    Pause,
    /// A split view: side A cut from node 0, side B from node 1.
    Partition,
}

impl Fault {
    async fn inject(self, fleet: &ContainerFleet) {
        match self {
            Fault::Kill => fleet.kill(0).await.expect("kill"),
            Fault::Pause => fleet.pause(0).await.expect("pause"),
            Fault::Partition => {
                let (a, b) = tokio::join!(fleet.partition(0, Side::A), fleet.partition(1, Side::B));
                a.and(b).expect("partition");
            }
        }
    }

    async fn repair(self, fleet: &ContainerFleet) {
        match self {
            Fault::Kill => fleet.restart(0).await.expect("restart"),
            Fault::Pause => fleet.resume(0).await.expect("resume"),
            Fault::Partition => fleet.heal_all().await.expect("heal"),
        }
    }
}

/// Sixteen tasks, half on a client of side A and half on a client of side B, take four keys
/// (each round a key at random: four tasks, two per side, per key) and record when they
/// believed they held them, through three phases: healthy, `fault`, repaired. A phase lasts
/// at least 1.5 s and a number of acquisitions.
///
/// Four keys rather than one: while a node never answers, attempts that split the other
/// nodes between them each wait a node timeout for it before rolling back, and eight or more
/// contenders on one key then get a few acquisitions a second, sometimes none for seconds.
/// That is liveness; this test is about exclusion and needs progress in bounded time.
async fn sixteen_tasks_on_two_sides_never_overlap(fault: Fault) {
    const TASKS: usize = 16;
    const KEYS: usize = 4;
    const DURING_FAULT: u64 = 20;
    let fleet = own_fleet().await;
    let keys: Vec<String> = (0..KEYS).map(|_| unique_key("two-sides")).collect();
    let mut clients = Vec::new();
    for side in Side::ALL {
        clients.push(
            builder(&fleet, side)
                .node_timeout(Duration::from_millis(100))
                .build()
                .await
                .expect("building a client"),
        );
    }
    let history = Arc::new(Mutex::new(Vec::<Interval>::new()));
    let acquired = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let locks = clients[t % 2].clone();
        let name = format!("{}{t}", ["a", "b"][t % 2]);
        let (keys, history, acquired, failed) = (
            keys.clone(),
            history.clone(),
            acquired.clone(),
            failed.clone(),
        );
        let stopped = stopped.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(t as u64);
            while !*stopped.borrow() {
                let key = &keys[rng.random_range(0..KEYS)];
                let guard = match locks
                    .lock(key)
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                {
                    Ok(guard) => guard,
                    Err(_) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                };
                let interval = Interval::begin(&guard, &name);
                tokio::time::sleep(Duration::from_micros(rng.random_range(0..3000))).await;
                history.lock().unwrap().push(interval.finish(&guard));
                acquired.fetch_add(1, Ordering::SeqCst);
                let _ = guard.release().await;
            }
        }));
    }

    // A phase: at least `wanted` acquisitions and 1.5 s (bounded: 60 s).
    let phase = |what: &'static str, wanted: u64| {
        let (fleet, acquired, failed) = (&fleet, acquired.clone(), failed.clone());
        async move {
            let (from, began) = (acquired.load(Ordering::SeqCst), Instant::now());
            let failed_before = failed.load(Ordering::SeqCst);
            loop {
                let n = acquired.load(Ordering::SeqCst) - from;
                if n >= wanted && began.elapsed() >= Duration::from_millis(1500) {
                    return (n, began.elapsed());
                }
                if began.elapsed() > Duration::from_secs(60) {
                    panic!(
                        "{what}: {n} in 60 s, {} failed acquires\n{}",
                        failed.load(Ordering::SeqCst) - failed_before,
                        fleet.all_logs()
                    );
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let healthy = phase("acquisitions while healthy", 40).await;
    let fault_began = monotonic_nanos();
    fault.inject(&fleet).await;
    let during = phase("acquisitions during the fault", DURING_FAULT).await;
    let fault_ended = monotonic_nanos();
    fault.repair(&fleet).await;
    let after = phase("acquisitions after the repair", 40).await;
    stop.send(true).unwrap();
    for t in tasks {
        t.await.expect("a task panicked");
    }

    let history = history.lock().unwrap().clone();
    let report = check(&history);
    let inside_fault = history
        .iter()
        .filter(|i| i.start >= fault_began && i.start <= fault_ended)
        .count();
    let by_side = |prefix: &str| {
        history
            .iter()
            .filter(|i| i.client.starts_with(prefix))
            .count()
    };
    println!(
        "{fault:?}: {} acquisitions on {KEYS} keys ({} in {} ms healthy, {} in {} ms during the \
         fault, {} in {} ms after; side A {}, side B {}), {} failed acquires, {} violations",
        history.len(),
        healthy.0,
        ms(healthy.1),
        during.0,
        ms(during.1),
        after.0,
        ms(after.1),
        by_side("a"),
        by_side("b"),
        failed.load(Ordering::SeqCst),
        report.violations()
    );
    assert!(report.is_safe(), "{report}\n{}", fleet.all_logs());
    assert!(
        inside_fault as u64 >= DURING_FAULT,
        "no progress during the fault: {inside_fault} acquisitions began in it"
    );
    assert!(
        by_side("a") > 0 && by_side("b") > 0,
        "both sides must have held locks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn sixteen_tasks_on_two_sides_never_overlap_while_a_minority_is_killed() {
    sixteen_tasks_on_two_sides_never_overlap(Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn sixteen_tasks_on_two_sides_never_overlap_while_a_minority_is_paused() {
    sixteen_tasks_on_two_sides_never_overlap(Fault::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn sixteen_tasks_on_two_sides_never_overlap_while_each_side_is_cut_from_a_different_minority()
{
    sixteen_tasks_on_two_sides_never_overlap(Fault::Partition).await;
}

// ---- a holder cut off from a majority ----------------------------------------------------

/// A holds a watchdog lock through side A; side A is then cut from nodes 0, 1 and 2, so A's
/// renewals reach two nodes only. A's loss signal must fire by its deadline, and B (side B
/// reaches all five) must get the key only after that: after A's deadline, with A's signal
/// already fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn a_holder_cut_off_from_a_majority_loses_its_lock_before_the_other_side_takes_it() {
    const LEASE: Duration = Duration::from_secs(3);
    let fleet = own_fleet().await;
    let a = builder(&fleet, Side::A)
        .watchdog_lease(LEASE)
        .build()
        .await
        .unwrap();
    let b = client(&fleet, Side::B).await;
    let key = unique_key("cut-off-holder");

    let guard = a.lock(&key).acquire().await.expect("a free key");
    let holder = guard.holder().to_string();
    eventually(
        &fleet,
        Duration::from_secs(5),
        "A's entry on every node",
        || async { nodes_holding(&fleet, Side::B, &key, &holder).await == 5 },
    )
    .await;
    assert!(
        b.try_acquire(&key, Duration::from_secs(10))
            .await
            .unwrap()
            .is_none(),
        "B took a held key"
    );
    eventually(
        &fleet,
        Duration::from_secs(10),
        "two confirmed renewals",
        || async { a.stats().extended >= 2 },
    )
    .await;
    let a_interval = Interval::begin(&guard, "a");

    // A's loss, as its signal reports it.
    let lost = guard.lost_signal();
    let loss = tokio::spawn({
        let lost = lost.clone();
        async move {
            lost.wait().await;
            Instant::now()
        }
    });
    // B waits for the key, and notes at once whether A's signal had fired by then.
    let taking = tokio::spawn({
        let (b, key, lost) = (b.clone(), key.clone(), lost.clone());
        async move {
            let guard = b
                .lock(&key)
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("B gets the key once A's entries expire");
            let at = Instant::now();
            let a_fired = lost.is_fired();
            (guard, at, a_fired)
        }
    });

    let renewals_before_cut = a.stats().extended;
    let cut_began = Instant::now();
    fleet
        .isolate(Side::A, [0, 1, 2])
        .await
        .expect("cutting side A from nodes 0, 1, 2");
    let cut = Instant::now();

    let lost_at = tokio::time::timeout(LEASE * 3, loss)
        .await
        .expect("A's loss signal never fired")
        .unwrap();
    let held_after_loss = guard.is_held();
    let deadline = guard.deadline();
    let (b_guard, b_at, a_fired_when_b_took) = tokio::time::timeout(LEASE * 5, taking)
        .await
        .expect("B never got the key")
        .unwrap();
    let a_interval = a_interval.finish(&guard);
    let b_interval = Interval::begin(&b_guard, "b");

    println!(
        "side A cut from nodes 0-2, times from the start of the cut: cut complete +{} ms; A's \
         deadline (its last confirmed renewal + {} ms lease - drift) +{} ms; A's loss signal +{} \
         ms ({} ms after its deadline); side B acquired +{} ms ({} ms after A's loss signal, {} ms \
         after A's deadline); A's confirmed renewals: {renewals_before_cut} before the cut, {} \
         after; the lock went to side B",
        ms(cut - cut_began),
        ms(LEASE),
        signed_ms(cut_began, deadline),
        signed_ms(cut_began, lost_at),
        signed_ms(deadline, lost_at),
        signed_ms(cut_began, b_at),
        signed_ms(lost_at, b_at),
        signed_ms(deadline, b_at),
        a.stats().extended - renewals_before_cut,
    );
    assert!(
        !held_after_loss,
        "A still claimed the lock after its loss signal"
    );
    assert!(
        lost_at <= deadline + Duration::from_millis(250),
        "A's loss signal fired {} ms after its deadline",
        signed_ms(deadline, lost_at)
    );
    assert!(
        deadline <= cut + LEASE,
        "A's deadline moved past one lease after the cut: a renewal without a quorum"
    );
    assert!(
        a_fired_when_b_took,
        "B got the key before A's loss signal fired"
    );
    assert!(b_at > deadline, "B got the key before A's deadline");
    let report = check(&[a_interval, b_interval.finish(&b_guard)]);
    assert!(report.is_safe(), "{report}");
    assert!(a.stats().lost >= 1);

    fleet.heal_all().await.unwrap();
    b_guard.release().await.expect("B's release");
    assert!(
        matches!(guard.release().await, Err(Error::NotHeld { .. })),
        "A's release must report that it no longer held the lock"
    );
}

// ---- a client cut off from a majority ----------------------------------------------------

/// A client whose side is cut from three of five nodes gets `NoQuorum` within about one node
/// timeout, a waiting acquire gives up within its wait time, and a new client cannot be
/// built; none of them hangs. The other side is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn a_client_cut_off_from_a_majority_fails_fast_instead_of_hanging() {
    let fleet = own_fleet().await;
    let a = client(&fleet, Side::A).await;
    let key = unique_key("cut-off-client");
    fleet
        .isolate(Side::A, [0, 1, 2])
        .await
        .expect("cutting side A from nodes 0, 1, 2");

    let began = Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        a.try_acquire(&key, Duration::from_secs(10)),
    )
    .await
    .expect("try_acquire hung")
    .expect_err("a quorum without three nodes");
    let try_took = began.elapsed();
    match &err {
        Error::NoQuorum {
            confirmed,
            required: 3,
            failures,
            ..
        } => {
            assert_eq!(*confirmed, 2, "{err}");
            assert_eq!(failures.len(), 3, "{err}");
            assert!(failures.iter().all(|f| f.is_timeout()), "{err}");
        }
        other => panic!("expected NoQuorum, got {other}"),
    }
    assert!(
        try_took < Duration::from_secs(2),
        "try_acquire took {try_took:?}"
    );

    let wait = Duration::from_secs(1);
    let began = Instant::now();
    let waited = tokio::time::timeout(
        Duration::from_secs(10),
        a.lock(&key)
            .ttl(Duration::from_secs(10))
            .wait(wait)
            .acquire(),
    )
    .await
    .expect("a waiting acquire hung")
    .expect_err("no quorum while cut off");
    let wait_took = began.elapsed();
    assert!(
        wait_took < wait + Duration::from_secs(2),
        "a waiting acquire took {wait_took:?}: {waited}"
    );

    let began = Instant::now();
    let built = tokio::time::timeout(
        Duration::from_secs(10),
        builder(&fleet, Side::A)
            .connect_timeout(Duration::from_secs(1))
            .build(),
    )
    .await
    .expect("build hung");
    let build_took = began.elapsed();
    assert!(
        matches!(
            built,
            Err(Error::Unreachable {
                reachable: 2,
                required: 3,
                ..
            })
        ),
        "{built:?}"
    );
    assert!(
        build_took < Duration::from_secs(4),
        "build took {build_took:?}"
    );

    let b = client(&fleet, Side::B).await;
    let guard = b
        .lock(&key)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .expect("side B still reaches every node");
    println!(
        "side A cut from nodes 0-2: try_acquire failed in {} ms ({err}); a 1 s wait gave up in \
         {} ms ({waited}); a new client failed to build in {} ms; side B acquired",
        ms(try_took),
        ms(wait_took),
        ms(build_took)
    );
    guard.release().await.unwrap();
    fleet.heal_all().await.unwrap();
}

// ---- restarts ----------------------------------------------------------------------------

/// `restart` keeps a node's locks (durable AOF) and its addresses; `restart_empty` replaces
/// the node by one that forgot them. A lock survives one forgetful node; a majority of
/// forgetful nodes lets a second holder in, and the checker sees it (the limit in
/// docs/SAFETY.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn restart_keeps_locks_and_restart_empty_forgets_them() {
    let fleet = own_fleet().await;
    let a = client(&fleet, Side::A).await;
    let b = client(&fleet, Side::B).await;
    let key = unique_key("restarts");
    let guard = a
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("a free key");
    let holder = guard.holder().to_string();
    eventually(
        &fleet,
        Duration::from_secs(5),
        "the entry on every node",
        || async { nodes_holding(&fleet, Side::A, &key, &holder).await == 5 },
    )
    .await;
    let first = Interval::begin(&guard, "a");

    fleet.restart(0).await.expect("restart");
    fleet.kill(1).await.expect("kill");
    assert!(
        b.try_acquire(&key, Duration::from_secs(10))
            .await
            .unwrap()
            .is_none(),
        "B took the key while four nodes held it"
    );
    fleet.restart(1).await.expect("restart after kill");
    for i in [0, 1] {
        for side in Side::ALL {
            assert_eq!(
                entry(&fleet, i, side, &key).await.as_deref(),
                Some(holder.as_str()),
                "node {i} lost the lock across a restart (seen from side {side:?})"
            );
        }
    }

    let before = fleet.container_id(2);
    fleet.restart_empty(2).await.expect("restart empty");
    assert_ne!(fleet.container_id(2), before, "a new container");
    for side in Side::ALL {
        assert_eq!(entry(&fleet, 2, side, &key).await, None, "node 2 forgot");
    }
    // Four entries are left: the lock still holds, and A's clients reconnected.
    guard
        .extend(Duration::from_secs(60))
        .await
        .expect("an extend confirmed by the four nodes that remember");
    assert!(
        b.try_acquire(&key, Duration::from_secs(10))
            .await
            .unwrap()
            .is_none(),
        "B took the key while four nodes held it"
    );

    // Two more forget: the three empty nodes are a majority, and B gets in while A's guard
    // still believes it holds the lock. The checker must see the overlap.
    let (x, y) = tokio::join!(fleet.restart_empty(3), fleet.restart_empty(4));
    x.and(y).expect("restart empty");
    assert!(
        guard.is_held(),
        "A's guard cannot know that the nodes forgot"
    );
    let second = b
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("three empty nodes admit a second holder");
    let second_interval = Interval::begin(&second, "b");
    let report = check(&[first.finish(&guard), second_interval.finish(&second)]);
    assert_eq!(report.overlaps.len(), 1, "the checker missed it: {report}");
    second.release().await.unwrap();
}

// ---- a short torture run -----------------------------------------------------------------

/// The torture clients (tests/torture/clients.rs: fenced and native acquires, fixed TTLs
/// and watchdog leases, extends, reentrant owners, cancellations, drops, over single locks,
/// multi-key sets, a read-write lock and two semaphores), three tasks on
/// each side, while a seeded schedule kills and restarts, pauses, and cuts from one side or
/// both, up to two nodes at a time. `QUORUM_LOCK_CONTAINER_TORTURE_SECS` (default 20) and
/// `QUORUM_LOCK_TORTURE_SEED` as in tests/torture.rs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn torture_with_container_faults_on_two_sides() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let secs = env("QUORUM_LOCK_CONTAINER_TORTURE_SECS").unwrap_or(20);
    let seed = env("QUORUM_LOCK_TORTURE_SEED").unwrap_or_else(rand::random);
    println!("container torture: {secs} s, seed {seed} (QUORUM_LOCK_TORTURE_SEED={seed})");
    let fleet = own_fleet().await;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let keys = Keys::new(format!("torture:{run}"));
    let plan = |side: Side, name: &str, seed: u64| ClientPlan {
        urls: fleet.urls(side),
        keys: keys.clone(),
        seed,
        duration: Duration::from_secs(secs),
        tasks: 3,
        name: name.to_string(),
        at_least: None,
    };
    let sides = [plan(Side::A, "a", seed), plan(Side::B, "b", seed + 1)]
        .map(|plan| tokio::spawn(async move { plan.run().await.expect("torture clients") }));

    let faults = container_faults(&fleet, seed, Duration::from_secs(secs)).await;

    let mut history = Vec::new();
    let mut failed_acquires = 0;
    for side in sides {
        let report = side.await.expect("a torture side panicked");
        history.extend(report.intervals);
        failed_acquires += report.failed_acquires;
    }
    let report = check(&history);
    let nodes = (0..fleet.len()).map(|i| fleet.client(i, Side::A));
    let untimed = clients::keys_without_ttl(nodes, &keys.with_ttl()).await;
    let by_side = |prefix: &str| {
        clients::acquisitions(history.iter().filter(|i| i.client.starts_with(prefix)))
    };
    let acquisitions = clients::acquisitions(&history);
    println!(
        "container torture: {acquisitions} acquisitions (side A {}, side B {}), \
         {failed_acquires} failed acquires, faults {faults:?}, violations {}",
        by_side("a-"),
        by_side("b-"),
        report.violations()
    );
    assert!(
        report.is_safe(),
        "seed {seed}: {report}\n{}",
        fleet.all_logs()
    );
    assert!(
        untimed.is_empty(),
        "seed {seed}: keys without a TTL: {untimed:?}"
    );
    assert!(
        by_side("a-") > 0 && by_side("b-") > 0,
        "both sides must have held locks"
    );
    assert!(
        acquisitions >= 20,
        "too few acquisitions to mean anything: {acquisitions}"
    );
    assert!(
        faults.values().sum::<u32>() >= 8,
        "too few faults: {faults:?}"
    );
}

#[derive(Debug, Clone, Copy)]
enum Outage {
    Killed,
    Paused,
    Cut(Option<Side>),
}

impl Outage {
    fn name(self) -> &'static str {
        match self {
            Outage::Killed => "kill+restart",
            Outage::Paused => "pause",
            Outage::Cut(Some(Side::A)) => "cut from A",
            Outage::Cut(Some(_)) => "cut from B",
            Outage::Cut(None) => "cut from both",
        }
    }

    async fn end(self, fleet: &ContainerFleet, node: usize) {
        match self {
            Outage::Killed => fleet.restart(node).await.expect("restart"),
            Outage::Paused => fleet.resume(node).await.expect("resume"),
            Outage::Cut(_) => {
                for side in Side::ALL {
                    fleet.heal(node, side).await.expect("heal");
                }
            }
        }
    }
}

/// The seeded schedule: at most two nodes out at once (a minority of five), each for 0.3 to
/// 2 s. Returns how many faults of each kind it injected.
async fn container_faults(
    fleet: &ContainerFleet,
    seed: u64,
    duration: Duration,
) -> std::collections::BTreeMap<&'static str, u32> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x00c0_17a1);
    let mut counts = std::collections::BTreeMap::new();
    let mut out: Vec<(usize, Outage, Instant)> = Vec::new();
    let end = Instant::now() + duration;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..300))).await;
        let now = Instant::now();
        for (node, outage, _) in out.iter().filter(|(_, _, until)| *until <= now) {
            outage.end(fleet, *node).await;
        }
        out.retain(|(_, _, until)| *until > now);
        if out.len() < 2 && rng.random_bool(0.7) {
            let healthy: Vec<usize> = (0..fleet.len())
                .filter(|n| out.iter().all(|(o, _, _)| o != n))
                .collect();
            let node = healthy[rng.random_range(0..healthy.len())];
            let outage = match rng.random_range(0..5) {
                0 => {
                    fleet.kill(node).await.expect("kill");
                    Outage::Killed
                }
                1 => {
                    fleet.pause(node).await.expect("pause");
                    Outage::Paused
                }
                2 => {
                    fleet.partition(node, Side::A).await.expect("cut");
                    Outage::Cut(Some(Side::A))
                }
                3 => {
                    fleet.partition(node, Side::B).await.expect("cut");
                    Outage::Cut(Some(Side::B))
                }
                _ => {
                    let (x, y) = tokio::join!(
                        fleet.partition(node, Side::A),
                        fleet.partition(node, Side::B)
                    );
                    x.and(y).expect("cut");
                    Outage::Cut(None)
                }
            };
            *counts.entry(outage.name()).or_default() += 1;
            let until = Instant::now() + Duration::from_millis(rng.random_range(300..2000));
            out.push((node, outage, until));
        }
    }
    for (node, outage, _) in out {
        outage.end(fleet, node).await;
    }
    counts
}

// ---- the shared fleet: no faults ---------------------------------------------------------

/// Both sides reach the same five servers: the same run ids, and a client given one node
/// through both sides is refused as a duplicate. A lock taken through one side is seen from
/// the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn both_sides_reach_the_same_servers() {
    let fleet = shared_fleet().await;
    for i in 0..fleet.len() {
        let mut ids = Vec::new();
        for side in Side::ALL {
            let mut conn = fleet
                .client(i, side)
                .get_multiplexed_async_connection()
                .await
                .expect("a check connection");
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut conn)
                .await
                .expect("INFO");
            ids.push(
                info.lines()
                    .find_map(|l| l.strip_prefix("run_id:"))
                    .expect("a run id")
                    .trim()
                    .to_string(),
            );
        }
        assert_eq!(ids[0], ids[1], "node {i} differs between the sides");
    }
    let twice = QuorumLock::builder()
        .nodes([
            fleet.url(0, Side::A),
            fleet.url(0, Side::B),
            fleet.url(1, Side::A),
        ])
        .build()
        .await;
    assert!(
        matches!(twice, Err(Error::DuplicateNode { .. })),
        "{twice:?}"
    );

    let a = client(fleet, Side::A).await;
    let b = client(fleet, Side::B).await;
    let key = unique_key("both-sides");
    let guard = a
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a free key");
    assert!(b
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .is_none());
    guard.release().await.unwrap();
    let again = b
        .lock(&key)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("free after the release");
    again.release().await.unwrap();
}

/// The nodes are durable as configured: AOF with fsync on every write, no eviction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn nodes_are_durable() {
    let fleet = shared_fleet().await;
    for i in 0..fleet.len() {
        let mut conn = fleet
            .client(i, Side::B)
            .get_multiplexed_async_connection()
            .await
            .expect("a check connection");
        for (name, want) in [
            ("appendonly", "yes"),
            ("appendfsync", "always"),
            ("maxmemory-policy", "noeviction"),
        ] {
            let got: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut conn)
                .await
                .expect("CONFIG GET");
            assert_eq!(
                got.get(1).map(String::as_str),
                Some(want),
                "node {i}: {name}"
            );
        }
    }
}

/// A missing image is an error that names the script building it; nothing is pulled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn a_missing_image_is_an_error_naming_the_build_script() {
    let err = ContainerFleet::builder()
        .nodes(1)
        .image("quorum-lock-redis:no-such-tag")
        .start()
        .await
        .expect_err("no such image");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains("docker/build-image.sh"), "{err}");
}

/// The smoke test of the crates between the fleet and the engine: testcontainers' bollard
/// client asks this engine for its version, and a one-node fleet starts, answers, is paused
/// (no answer) and resumed, is cut from side A (no answer there, an answer from B) and joined
/// again, and is killed and restarted with its data. bollard names a later API version than
/// Docker 20.10 speaks (1.41) but builds each path without it, so the engine answers at its
/// own: should a later bollard send a version this engine refuses, this fails first, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn smoke_testcontainers_drives_this_engine() {
    let docker = testcontainers::bollard::Docker::connect_with_defaults().expect("a client");
    let version = docker.version().await.unwrap_or_else(|e| {
        panic!(
            "the engine refused testcontainers' client ({e}): a bollard that names an API \
             version this engine does not speak? (tried: Docker 20.10, API 1.41)"
        )
    });
    println!(
        "engine {} (API {}, oldest {})",
        version.version.unwrap_or_default(),
        version.api_version.unwrap_or_default(),
        version.min_api_version.unwrap_or_default()
    );
    let fleet = ContainerFleet::start(1).await.expect("a one-node fleet");
    let key = unique_key("smoke");
    let answers = |side: Side| {
        let client = fleet.client(0, side);
        let key = key.clone();
        async move {
            tokio::time::timeout(Duration::from_millis(1500), async move {
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("GET")
                    .arg(&key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await
        }
    };
    let mut conn = fleet
        .client(0, Side::A)
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let () = redis::cmd("SET")
        .arg(&key)
        .arg("kept")
        .query_async(&mut conn)
        .await
        .expect("SET");
    drop(conn);
    assert_eq!(
        answers(Side::A).await.expect("in time").unwrap().as_deref(),
        Some("kept")
    );

    fleet.pause(0).await.expect("pause");
    assert!(
        !matches!(answers(Side::B).await, Ok(Ok(_))),
        "a paused node answered"
    );
    fleet.resume(0).await.expect("resume");
    assert!(matches!(answers(Side::B).await, Ok(Ok(Some(_)))));

    fleet.partition(0, Side::A).await.expect("partition");
    assert!(!fleet.is_connected(0, Side::A) && fleet.is_connected(0, Side::B));
    assert!(
        !matches!(answers(Side::A).await, Ok(Ok(_))),
        "a cut link answered"
    );
    assert!(matches!(answers(Side::B).await, Ok(Ok(Some(_)))));
    fleet.heal(0, Side::A).await.expect("heal");
    assert!(matches!(answers(Side::A).await, Ok(Ok(Some(_)))));

    let before = fleet.container_id(0);
    fleet.kill(0).await.expect("kill");
    fleet.restart(0).await.expect("restart");
    assert_eq!(fleet.container_id(0), before, "restart keeps the container");
    assert_eq!(
        answers(Side::A).await.expect("in time").unwrap().as_deref(),
        Some("kept"),
        "the AOF kept the write"
    );
    assert!(fleet.logs(0).contains("Ready to accept connections"));
}

/// A one-node fleet restarts empty, twice: its networks stay (the container that goes is the
/// last one on them), and the new node serves at the same address, with no data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn a_one_node_fleet_restarts_empty_at_the_same_address() {
    let fleet = ContainerFleet::start(1).await.expect("a one-node fleet");
    let address = fleet.address(0, Side::A);
    for round in 0..2 {
        let mut conn = fleet
            .client(0, Side::A)
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query_async(&mut conn)
            .await
            .expect("SET");
        let before = fleet.container_id(0);
        fleet
            .restart_empty(0)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_ne!(fleet.container_id(0), before, "a new container");
        assert_eq!(fleet.address(0, Side::A), address);
        let mut conn = fleet
            .client(0, Side::A)
            .get_multiplexed_async_connection()
            .await
            .expect("a connection to the new node");
        let got: Option<String> = redis::cmd("GET")
            .arg("k")
            .query_async(&mut conn)
            .await
            .expect("GET");
        assert_eq!(got, None, "round {round}: the new node forgot");
    }
    fleet.pause(0).await.expect("pause");
    fleet.resume(0).await.expect("resume");
}

/// Start errors name what is wrong: an argument the server refuses (its log, with the
/// server's own words), a malformed image name, an empty one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn start_errors_name_the_cause() {
    let err = ContainerFleet::builder()
        .nodes(2)
        .server_args(["--no-such-option", "yes"])
        .start()
        .await
        .expect_err("a refused argument");
    let text = err.to_string();
    assert!(text.contains("stopped before it was ready"), "{text}");
    assert!(text.contains("no-such-option"), "the server's log: {text}");
    for (image, kind) in [
        ("Not A Valid::ref", std::io::ErrorKind::InvalidInput),
        ("", std::io::ErrorKind::InvalidInput),
    ] {
        let err = ContainerFleet::builder()
            .nodes(1)
            .image(image)
            .start()
            .await
            .expect_err("a bad image name");
        assert_eq!(err.kind(), kind, "{image:?}: {err}");
    }
}
