//! Nodes that are whole Redis (or Valkey) Clusters: real `redis-server --cluster-enabled yes`
//! processes, 3 primaries per cluster (docs/DESIGN.md, "Cluster nodes"). Every lock's keys are
//! in one slot of each cluster; a request goes to the primary serving it, once; a `MOVED`
//! is one "no" and corrects the map; a killed, paused or failed-over primary costs its node
//! the keys of its slots only.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::*;
use quorum_lock::testkit::ClusterFleet;
use quorum_lock::{Error, QuorumLock};

/// Three clusters of three primaries, shared by the tests that inject no faults.
fn shared_clusters() -> &'static ClusterFleet {
    static FLEET: OnceLock<ClusterFleet> = OnceLock::new();
    FLEET.get_or_init(|| ClusterFleet::start(3).expect("start three clusters"))
}

async fn cluster_client(fleet: &ClusterFleet) -> QuorumLock {
    QuorumLock::builder()
        .nodes(fleet.urls())
        .node_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("build over cluster nodes")
}

/// The holder value of `key` on cluster `c` (read from the primary serving it).
async fn cluster_entry(fleet: &ClusterFleet, c: usize, key: &str) -> Option<String> {
    let m = fleet.primary_of(c, key.as_bytes()).ok()?;
    let mut conn = fleet
        .client(c, m)
        .get_multiplexed_async_connection()
        .await
        .ok()?;
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .ok()
        .flatten()
}

/// Waits (up to 5 s) until cluster `c` has `expected` at `key`: an acquire returns at a
/// quorum, and the last cluster's request may still be on its way.
async fn eventually_entry(fleet: &ClusterFleet, c: usize, key: &str, expected: Option<&str>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = cluster_entry(fleet, c, key).await;
        if now.as_deref() == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "cluster {c} has {now:?} at {key}, not {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Locks `key` until cluster `c` holds it too (up to 100 tries, 50 ms apart): a primary back
/// from a fault, or a new one, takes the key's slot again; panics saying `what` otherwise.
async fn served_again(fleet: &ClusterFleet, locks: &QuorumLock, c: usize, key: &str, what: &str) {
    for _ in 0..100 {
        let g = locks
            .lock(key)
            .ttl(Duration::from_secs(10))
            .acquire()
            .await
            .expect("lock");
        let served = cluster_entry(fleet, c, key).await.as_deref() == Some(g.holder());
        g.release().await.unwrap();
        if served {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_cluster_nodes_land_on_the_primary_of_their_slot() {
    let fleet = shared_clusters();
    let locks = cluster_client(fleet).await;
    let mut primaries = HashSet::new();
    for i in 0..24 {
        let key = unique_key(&format!("spread-{i}"));
        let guard = locks
            .lock(&key)
            .ttl(Duration::from_secs(10))
            .fencing(true)
            .acquire()
            .await
            .expect("acquire on three clusters");
        for c in 0..fleet.len() {
            // On the primary of its slot (that is where `cluster_entry` reads).
            eventually_entry(fleet, c, &key, Some(guard.holder())).await;
        }
        primaries.insert(fleet.primary_of(0, key.as_bytes()).unwrap());
        assert!(guard.fencing_token().is_some_and(|t| t >= 1));
        guard.release().await.expect("release");
        for c in 0..fleet.len() {
            eventually_entry(fleet, c, &key, None).await;
        }
    }
    assert!(
        primaries.len() > 1,
        "24 keys all on one of three shards: {primaries:?}"
    );
    assert_eq!(locks.stats().redirects, 0, "a map read at build: no MOVED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_clients_on_cluster_nodes_never_overlap() {
    const CLIENTS: usize = 4;
    const TASKS: usize = 3;
    const ROUNDS: usize = 8;
    let fleet = shared_clusters();
    let key = unique_key("cluster-exclusion");
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(cluster_client(fleet).await);
    }
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..CLIENTS * TASKS {
        let locks = clients[t % CLIENTS].clone();
        let (key, inside, overlaps) = (key.clone(), inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locks
                    .lock(&key)
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire within the wait");
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task panicked");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    let acquired: u64 = clients.iter().map(|c| c.stats().acquired).sum();
    assert_eq!(acquired, (CLIENTS * TASKS * ROUNDS) as u64);
    // Release notices reach waiters through every cluster (PUBLISH from the release script
    // is delivered to the subscribers of every member).
    let woken: u64 = clients.iter().map(|c| c.stats().woken).sum();
    assert!(woken > 0, "no wait ended by a release notice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_family_runs_on_cluster_nodes() {
    let fleet = shared_clusters();
    let locks = cluster_client(fleet).await;
    let ttl = Duration::from_secs(10);
    let key = unique_key("family");
    // Read-write: two readers, then a writer once they left.
    let r1 = locks
        .read_lock(&key)
        .ttl(ttl)
        .acquire()
        .await
        .expect("reader");
    let r2 = locks
        .read_lock(&key)
        .ttl(ttl)
        .acquire()
        .await
        .expect("reader");
    assert!(matches!(
        locks.write_lock(&key).ttl(ttl).try_acquire().await,
        Ok(None)
    ));
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = locks
        .write_lock(&key)
        .ttl(ttl)
        .acquire()
        .await
        .expect("writer");
    w.release().await.unwrap();
    // The fair lock: its line and tickets are in the key's slot.
    let fair = unique_key("fair");
    let f = locks
        .fair_lock(&fair)
        .ttl(ttl)
        .acquire()
        .await
        .expect("fair");
    assert!(matches!(
        locks.fair_lock(&fair).ttl(ttl).try_acquire().await,
        Ok(None)
    ));
    f.release().await.unwrap();
    // A multi-key lock whose keys share a hash tag, with fencing.
    let tag = unique_key("order");
    let keys = [format!("{{{tag}}}:a"), format!("{{{tag}}}:b")];
    let set = locks
        .lock_all(&keys)
        .ttl(ttl)
        .fencing(true)
        .acquire()
        .await
        .expect("a multi-key lock in one slot");
    assert!(set.fencing_token().is_some());
    set.release().await.unwrap();
    // A semaphore of one permit.
    let sem = locks
        .semaphore(unique_key("sem"), 1)
        .ttl(ttl)
        .acquire()
        .await
        .expect("permit");
    sem.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_a_cluster_cannot_keep_together_are_refused_by_name() {
    let fleet = shared_clusters();
    let locks = cluster_client(fleet).await;
    let ttl = Duration::from_secs(10);
    match locks
        .lock_all(["cross:a", "cross:b"])
        .ttl(ttl)
        .acquire()
        .await
    {
        Err(Error::InvalidKey { reason }) => {
            assert!(reason.contains("different hash slots"), "{reason}")
        }
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    match locks.lock("brace}key").ttl(ttl).acquire().await {
        Err(Error::InvalidKey { reason }) => assert!(reason.contains("hash tag"), "{reason}"),
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    // The same key with a hash tag is fine.
    let g = locks
        .lock(unique_key("{brace}key"))
        .ttl(ttl)
        .acquire()
        .await
        .expect("a tagged key");
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_of_one_cluster_are_one_node() {
    let fleet = shared_clusters();
    // The build checks the nodes that answer within a node timeout of a quorum answering;
    // one checked later is excluded then instead (not a build error). A loaded machine took
    // longer than the default for a cluster's check (its map, its members, its state): 5 s.
    let refused = QuorumLock::builder()
        .node_timeout(Duration::from_secs(5))
        .nodes([
            fleet.member_url(0, 0),
            fleet.member_url(0, 1),
            fleet.member_url(1, 0),
        ])
        .build()
        .await;
    match refused {
        Err(e @ Error::SameCluster { .. }) => {
            let shown = e.to_string();
            assert!(shown.contains("one cluster is one node"), "{shown}");
        }
        other => panic!("expected SameCluster, got {:?}", other.map(|_| ())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_as_the_whole_service_locks_with_single_instance_safety() {
    let fleet = shared_clusters();
    let locks = QuorumLock::builder()
        .nodes([fleet.member_url(2, 1)])
        .build()
        .await
        .expect("one cluster as the lock service");
    assert_eq!(locks.quorum_size(), 1);
    let key = unique_key("single-cluster");
    let g = locks
        .lock(&key)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .expect("lock");
    eventually_entry(fleet, 2, &key, Some(g.holder())).await;
    assert!(matches!(
        locks
            .lock(&key)
            .ttl(Duration::from_secs(1))
            .try_acquire()
            .await,
        Ok(None)
    ));
    g.release().await.unwrap();
    // What build() and `quorum-lock check` say about it.
    let info = quorum_lock::safety::NodeInfo::from_replies(
        "c",
        &redis::Value::BulkString(b"role:master\r\ncluster_enabled:1\r\n".to_vec()),
        None,
        None,
    );
    let found = quorum_lock::safety::findings(&[info]);
    assert!(
        found.iter().any(|f| f.message.contains("single-instance")),
        "{found:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_costs_its_node_the_keys_of_its_slots_only() {
    let fleet = ClusterFleet::start(3).expect("clusters");
    let locks = cluster_client(&fleet).await;
    let ttl = Duration::from_secs(10);
    let key = unique_key("killed");
    let dead = fleet.primary_of(0, key.as_bytes()).unwrap();
    // A key served by another primary of cluster 0.
    let other = (0..)
        .map(|i| unique_key(&format!("alive-{i}")))
        .find(|k| fleet.primary_of(0, k.as_bytes()).unwrap() != dead)
        .unwrap();
    fleet.kill(0, dead).unwrap();
    let g = locks
        .lock(&key)
        .ttl(ttl)
        .acquire()
        .await
        .expect("two clusters of three");
    g.release().await.unwrap();
    let g = locks.lock(&other).ttl(ttl).acquire().await.expect("lock");
    // Cluster 0 still serves the slots of its live primaries.
    eventually_entry(&fleet, 0, &other, Some(g.holder())).await;
    g.release().await.unwrap();
    // The primary comes back empty and rejoins: its keys are served again.
    fleet.restart(0, dead).unwrap();
    fleet.wait_ok(0).unwrap();
    served_again(
        &fleet,
        &locks,
        0,
        &key,
        "the restarted primary never took the key again",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_primary_is_a_silent_node_for_its_keys() {
    let fleet = ClusterFleet::start(3).expect("clusters");
    let locks = cluster_client(&fleet).await;
    let ttl = Duration::from_secs(10);
    // A key not served by cluster 1's seed (so that its frozen primary is another member).
    let key = (0..)
        .map(|i| unique_key(&format!("paused-first-{i}")))
        .find(|k| fleet.primary_of(1, k.as_bytes()).unwrap() != 0)
        .unwrap();
    let frozen = fleet.primary_of(1, key.as_bytes()).unwrap();
    fleet.pause(1, frozen).unwrap();
    for _ in 0..3 {
        let g = locks
            .lock(&key)
            .ttl(ttl)
            .acquire()
            .await
            .expect("two of three without the frozen primary");
        eventually_entry(&fleet, 0, &key, Some(g.holder())).await;
        g.release().await.unwrap();
    }
    // With the key's primary frozen in two of the three clusters, the attempt fails, and the
    // timeouts name the frozen primaries, not only their nodes' seeds.
    let other = (0..)
        .map(|i| unique_key(&format!("paused-{i}")))
        .find(|k| {
            fleet.primary_of(1, k.as_bytes()).unwrap() == frozen
                && fleet.primary_of(2, k.as_bytes()).unwrap() != 0
        })
        .unwrap();
    let frozen2 = fleet.primary_of(2, other.as_bytes()).unwrap();
    fleet.pause(2, frozen2).unwrap();
    let err = locks
        .try_acquire(&other, ttl)
        .await
        .expect_err("one of three");
    let failures = err.node_failures();
    for (c, m) in [(1, frozen), (2, frozen2)] {
        let primary = format!("(primary redis://127.0.0.1:{})", fleet.member(c, m).port());
        assert!(
            failures
                .iter()
                .any(|f| f.is_timeout() && f.to_string().contains(&primary)),
            "cluster {c}: no timeout names {primary}: {err}"
        );
    }
    fleet.resume(2, frozen2).unwrap();
    fleet.resume(1, frozen).unwrap();
    served_again(
        &fleet,
        &locks,
        1,
        &key,
        "the resumed primary never took the key again",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_the_map_follows_the_moved_slots() {
    let fleet = ClusterFleet::builder()
        .clusters(3)
        .replicas(1)
        .start()
        .expect("clusters with replicas");
    let locks = cluster_client(&fleet).await;
    let ttl = Duration::from_secs(10);
    let key = unique_key("failover");
    let g = locks.lock(&key).ttl(ttl).acquire().await.expect("lock");
    g.release().await.unwrap();
    let old = fleet.primary_of(0, key.as_bytes()).unwrap();
    // Member p's replica is 3 + p (one replica per primary).
    let replica = 3 + old;
    fleet.failover(0, replica, false).unwrap();
    fleet.wait_ok(0).unwrap();
    served_again(
        &fleet,
        &locks,
        0,
        &key,
        "cluster 0 never served the key from its new primary",
    )
    .await;
    assert_eq!(fleet.primary_of(0, key.as_bytes()).unwrap(), replica);
    assert!(
        locks.stats().redirects >= 1,
        "the old primary's MOVED was seen"
    );
}

/// The exclusion and fencing checks of the torture suite over cluster nodes while shard
/// primaries are paused and killed: 4 separate clients x 3 tasks on 3 keys (mutex and fair
/// lock, fenced) for 8 s over three clusters; one fault at a time, each on the primary that
/// serves one of the keys: a pause of 0.2-0.8 s, or a kill with a restart (empty) only after
/// the longest TTL, as RedLock asks of a node without persistence. Every hold is recorded as
/// an interval until its guard's deadline and checked by `testkit::history`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torture_over_clusters_with_primaries_killed_and_paused() {
    use quorum_lock::testkit::history::{check, Interval};
    use std::sync::Mutex;
    const CLIENTS: usize = 4;
    const TASKS: usize = 3;
    const RUN: Duration = Duration::from_secs(8);
    const TTL: Duration = Duration::from_millis(400);
    let fleet = Arc::new(ClusterFleet::start(3).expect("clusters"));
    let keys: Vec<String> = (0..3)
        .map(|i| unique_key(&format!("torture-{i}")))
        .collect();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(
            QuorumLock::builder()
                .nodes(fleet.urls())
                .node_timeout(Duration::from_millis(50))
                .build()
                .await
                .expect("client"),
        );
    }
    let history = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let during_fault = Arc::new(AtomicU64::new(0));
    let faulted = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..CLIENTS * TASKS {
        let locks = clients[t % CLIENTS].clone();
        let key = keys[t % keys.len()].clone();
        let (history, stop, faulted, during_fault) = (
            history.clone(),
            stop.clone(),
            faulted.clone(),
            during_fault.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let name = format!("c{}t{t}", t % CLIENTS);
            let fair = t % 2 == 0;
            while !stop.load(Ordering::SeqCst) {
                let request = match fair {
                    true => locks.fair_lock(&key),
                    false => locks.lock(&key),
                };
                let Ok(Some(guard)) = request.ttl(TTL).fencing(true).try_acquire().await else {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                };
                let interval = Interval::begin(&guard, name.clone());
                if faulted.load(Ordering::SeqCst) {
                    during_fault.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                history.lock().unwrap().push(interval.finish(&guard));
                let _ = guard.release().await;
            }
        }));
    }
    // One fault at a time, on the primary serving one of the keys in one cluster.
    let (pauses, kills) = {
        let (fleet, keys, stop, faulted) =
            (fleet.clone(), keys.clone(), stop.clone(), faulted.clone());
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let (mut pauses, mut kills) = (0u32, 0u32);
            let mut i = 0usize;
            while started.elapsed() < RUN {
                let (c, key) = (i % fleet.len(), &keys[i % keys.len()]);
                i += 1;
                let Ok(m) = fleet.primary_of(c, key.as_bytes()) else {
                    continue;
                };
                faulted.store(true, Ordering::SeqCst);
                if i.is_multiple_of(3) {
                    fleet.kill(c, m).expect("kill");
                    // Restarted empty only once every lock it held has expired.
                    std::thread::sleep(TTL * 2);
                    fleet.restart(c, m).expect("restart");
                    fleet.wait_ok(c).expect("cluster ok again");
                    kills += 1;
                } else {
                    fleet.pause(c, m).expect("pause");
                    std::thread::sleep(Duration::from_millis(200 + 150 * (i as u64 % 5)));
                    fleet.resume(c, m).expect("resume");
                    pauses += 1;
                }
                faulted.store(false, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(300));
            }
            stop.store(true, Ordering::SeqCst);
            (pauses, kills)
        })
        .await
        .expect("fault loop")
    };
    for t in tasks {
        t.await.expect("task panicked");
    }
    let history = history.lock().unwrap().clone();
    let report = check(&history);
    println!(
        "cluster torture: {} holds ({} while a primary was faulted), {pauses} pauses, {kills} kills; {report}",
        history.len(),
        during_fault.load(Ordering::SeqCst)
    );
    assert!(report.is_safe(), "{report}");
    assert!(
        history.len() >= 50,
        "too few holds to mean anything: {report}"
    );
    assert!(
        during_fault.load(Ordering::SeqCst) > 0,
        "no hold while a primary was down or paused"
    );
    assert!(pauses > 0 && kills > 0);
}

/// A node given by a host name the cluster does not announce (`localhost` for a member that
/// calls itself 127.0.0.1) keeps one connection to that member: the map names the member by
/// its id, and the requests of its slots go on the connection the node already has (two
/// connections to one server could run a rollback before the acquire it undoes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_named_otherwise_than_the_cluster_names_it_keeps_one_connection() {
    let fleet = ClusterFleet::start(1).expect("a cluster");
    let seed = format!("redis://localhost:{}", fleet.member(0, 0).port());
    let locks = QuorumLock::builder()
        .nodes([seed])
        .build()
        .await
        .expect("one cluster by a host name");
    let mut served = 0;
    for i in 0..30 {
        let key = unique_key(&format!("seed-{i}"));
        if fleet.primary_of(0, key.as_bytes()).unwrap() == 0 {
            served += 1;
        }
        let g = locks
            .lock(&key)
            .ttl(Duration::from_secs(5))
            .acquire()
            .await
            .expect("lock");
        g.release().await.unwrap();
    }
    assert!(served > 0, "no key on the seed's slots");
    let mut conn = fleet
        .client(0, 0)
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query_async(&mut conn)
        .await
        .unwrap();
    // This inspection's connection, and the lock client's one.
    assert_eq!(list.lines().count(), 2, "{list}");
    assert_eq!(locks.stats().redirects, 0);
}

/// One frozen primary that serves none of the key's slots, in two of three clusters: a client
/// built after the freeze reads each cluster's map from the member given, counts the frozen
/// primary silent after a node timeout (naming it), and locks the key at once on all three
/// nodes; before, the check of every primary failed the two nodes ("only 1 of 3 nodes
/// reachable") or held their calls for the connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_primary_outside_the_keys_slot_costs_a_new_client_nothing() {
    let fleet = ClusterFleet::start(3).expect("clusters");
    let key = unique_key("frozen-elsewhere");
    let mut frozen = Vec::new();
    for c in 0..2 {
        let serving = fleet.primary_of(c, key.as_bytes()).unwrap();
        // Not the member given (0): the node's own server answers.
        let m = (1..3).find(|&m| m != serving).unwrap();
        fleet.pause(c, m).unwrap();
        frozen.push(fleet.member(c, m).port());
    }
    let started = std::time::Instant::now();
    let locks = QuorumLock::builder()
        .nodes(fleet.urls())
        .node_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("a silent primary costs its own slots only");
    let built_in = started.elapsed();
    assert!(built_in < Duration::from_secs(2), "built in {built_in:?}");
    // At once, on every cluster: no node's calls wait for the frozen primary's check.
    let g = locks
        .lock(&key)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .expect("lock");
    for c in 0..3 {
        eventually_entry(&fleet, c, &key, Some(g.holder())).await;
    }
    g.release().await.unwrap();
    // The check names the silent member.
    let clients = QuorumLock::builder()
        .nodes(fleet.urls())
        .node_clients()
        .unwrap();
    let info = clients[0]
        .probe(Duration::from_millis(500))
        .await
        .expect("the member given answers");
    let silent = &info.cluster.expect("a cluster").not_answering;
    assert!(
        silent.len() == 1 && silent[0].contains(&frozen[0].to_string()),
        "{silent:?}"
    );
    for c in 0..2 {
        let m = (0..3)
            .find(|&m| frozen.contains(&fleet.member(c, m).port()))
            .unwrap();
        fleet.resume(c, m).unwrap();
    }
}

/// A cluster whose slots are not assigned yet (a one-member cluster after `CLUSTER RESET
/// HARD`) costs its vote only: `build()` succeeds with the other two nodes, and once the slots
/// are assigned the node takes keys again (its map is read again on use).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_no_slot_assigned_yet_costs_only_its_vote_until_it_has_slots() {
    let fleet = ClusterFleet::builder()
        .clusters(3)
        .primaries(1)
        .start()
        .expect("clusters");
    let mut conn = fleet
        .client(2, 0)
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("CLUSTER")
        .arg("RESET")
        .arg("HARD")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    let locks = cluster_client(&fleet).await;
    let key = unique_key("slotless");
    let g = locks
        .lock(&key)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .expect("two of three");
    g.release().await.unwrap();
    redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    fleet.wait_ok(2).unwrap();
    served_again(
        &fleet,
        &locks,
        2,
        &key,
        "the cluster never took keys once it had slots",
    )
    .await;
}

/// `CLUSTER <args>` on member `m` of cluster `c`.
fn cluster_cmd(fleet: &ClusterFleet, c: usize, m: usize, args: &[&str]) -> redis::Value {
    let mut conn = fleet.client(c, m).get_connection().unwrap();
    let mut cmd = redis::cmd("CLUSTER");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(&mut conn).unwrap()
}

/// What member `m` of cluster `c` holds at `key`, asked with `ASKING` (also in a slot it
/// is importing).
fn held_at(fleet: &ClusterFleet, c: usize, m: usize, key: &str) -> Option<String> {
    let mut conn = fleet.client(c, m).get_connection().unwrap();
    let (_, value): ((), Option<String>) = redis::pipe()
        .cmd("ASKING")
        .cmd("GET")
        .arg(key)
        .query(&mut conn)
        .unwrap();
    value
}

/// A release answered `ASK` (its key already migrated, the slot still migrating) or `MOVED`
/// (the slot migrated) follows the redirect once and deletes its entry on the primary that
/// has it; before, the entry stayed there for its whole TTL and refused the key to others
/// wherever another node was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_follows_ask_and_moved_to_the_primary_its_key_migrated_to() {
    let fleet = ClusterFleet::start(3).expect("clusters");
    let locks = cluster_client(&fleet).await;
    let ttl = Duration::from_secs(30);
    let tag = unique_key("migrating");
    let (k1, k2) = (format!("{{{tag}}}:1"), format!("{{{tag}}}:2"));
    let g1 = locks.lock(&k1).ttl(ttl).acquire().await.expect("lock");
    let g2 = locks.lock(&k2).ttl(ttl).acquire().await.expect("lock");
    eventually_entry(&fleet, 0, &k1, Some(g1.holder())).await;
    eventually_entry(&fleet, 0, &k2, Some(g2.holder())).await;
    let from = fleet.primary_of(0, k1.as_bytes()).unwrap();
    let to = (from + 1) % 3;
    let id = |m: usize| match cluster_cmd(&fleet, 0, m, &["MYID"]) {
        redis::Value::BulkString(b) => String::from_utf8(b).unwrap(),
        other => panic!("MYID answered {other:?}"),
    };
    let (from_id, to_id) = (id(from), id(to));
    let slot = quorum_lock::names::hash_slot(k1.as_bytes()).to_string();
    cluster_cmd(&fleet, 0, to, &["SETSLOT", &slot, "IMPORTING", &from_id]);
    cluster_cmd(&fleet, 0, from, &["SETSLOT", &slot, "MIGRATING", &to_id]);
    let mut source = fleet.client(0, from).get_connection().unwrap();
    redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(fleet.member(0, to).port())
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&k1)
        .arg(&k2)
        .query::<()>(&mut source)
        .unwrap();
    assert_eq!(held_at(&fleet, 0, to, &k1).as_deref(), Some(g1.holder()));
    // The slot is migrating: the source answers ASK.
    g1.release().await.expect("release");
    // A release returns at quorum: cluster 0's request may still be on its way.
    locks.finish_background().await;
    assert_eq!(held_at(&fleet, 0, to, &k1), None, "the ASK was followed");
    // The slot migrated: the source answers MOVED.
    for m in [to, from, 3 - from - to] {
        cluster_cmd(&fleet, 0, m, &["SETSLOT", &slot, "NODE", &to_id]);
    }
    g2.release().await.expect("release");
    locks.finish_background().await;
    assert_eq!(held_at(&fleet, 0, to, &k2), None, "the MOVED was followed");
    assert!(locks.stats().redirects >= 2);
}

/// The member of cluster `c` where a client has subscribed to `channel` (`PUBSUB NUMSUB`
/// counts a member's own subscribers); a member that does not answer within 200 ms is
/// skipped.
fn subscribed_at(fleet: &ClusterFleet, c: usize, channel: &[u8]) -> Option<usize> {
    let limit = Duration::from_millis(200);
    (0..fleet.members()).find(|&m| {
        let Ok(mut conn) = fleet.client(c, m).get_connection_with_timeout(limit) else {
            return false;
        };
        let _ = conn.set_read_timeout(Some(limit));
        let counts: redis::RedisResult<(Vec<u8>, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut conn);
        matches!(counts, Ok((_, n)) if n > 0)
    })
}

#[derive(Clone, Copy, Debug)]
enum SubscriberFault {
    Kill,
    Pause,
}

/// A waiter's release subscription on a cluster node lives at one member; when that member
/// dies or freezes, the subscription moves to another live primary of the cluster, and the
/// waiter hears the next release at once, not on its retry timer (30 s here). Before, the
/// subscriber kept reconnecting to the dead member (its lock connection still counted as
/// open) or stayed on the frozen one, and the waiter slept until its timer.
async fn a_waiter_hears_releases_after_its_subscription_member(
    fault: SubscriberFault,
    release_at_once: bool,
) {
    let fleet = ClusterFleet::start(3).expect("clusters");
    let holder = cluster_client(&fleet).await;
    let waiter = QuorumLock::builder()
        .nodes(fleet.urls())
        .node_timeout(Duration::from_millis(200))
        .retry_delay(Duration::from_secs(30))
        .build()
        .await
        .expect("build over cluster nodes");
    // A key none of whose primaries is the seed (member 0), where a client's subscriber is
    // likely to be: the fault is then on the subscription only.
    let key = (0..)
        .map(|i| unique_key(&format!("subscriber-{i}")))
        .find(|k| (0..3).all(|c| fleet.primary_of(c, k.as_bytes()).unwrap() != 0))
        .unwrap();
    let channel = quorum_lock::names::release_channel(key.as_bytes());
    let ttl = Duration::from_secs(30);
    let g = holder.lock(&key).ttl(ttl).acquire().await.expect("lock");
    let waiting = tokio::spawn({
        let key = key.clone();
        async move {
            let got = waiter
                .lock(&key)
                .ttl(ttl)
                .wait(Duration::from_secs(20))
                .acquire()
                .await;
            (
                tokio::time::Instant::now(),
                got.map(|g| g.holder().to_owned()),
            )
        }
    });
    let mut faulted = Vec::new();
    for c in 0..3 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let at = loop {
            if let Some(m) = subscribed_at(&fleet, c, &channel) {
                break m;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no subscriber on cluster {c}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if at != fleet.primary_of(c, key.as_bytes()).unwrap() {
            faulted.push((c, at));
        }
    }
    assert!(
        faulted.len() >= 2,
        "a quorum of subscriptions apart from the key's primaries"
    );
    for &(c, m) in &faulted {
        match fault {
            SubscriberFault::Kill => fleet.kill(c, m).unwrap(),
            SubscriberFault::Pause => fleet.pause(c, m).unwrap(),
        }
    }
    if release_at_once {
        // Released while the subscription is still at the faulted member (a frozen member's
        // silence shows only after its keepalive goes unanswered): the notice is lost there,
        // and the subscription made again elsewhere wakes the waiter to try.
        tokio::time::sleep(Duration::from_millis(50)).await;
    } else {
        // The subscription moves to another member of each faulted cluster.
        for &(c, m) in &faulted {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                match subscribed_at(&fleet, c, &channel) {
                    Some(at) if at != m => break,
                    _ => {}
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{fault:?}: the subscription on cluster {c} stayed at member {m}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let released = tokio::time::Instant::now();
    g.release().await.expect("release");
    let (at, got) = waiting.await.unwrap();
    got.expect("the waiter takes the released key");
    let heard = at - released;
    assert!(
        heard < Duration::from_secs(5),
        "{fault:?}: the waiter took the key {heard:?} after its release (its retry delay is 30 s)"
    );
    if let SubscriberFault::Pause = fault {
        for &(c, m) in &faulted {
            fleet.resume(c, m).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_hears_releases_after_its_subscription_member_is_killed() {
    a_waiter_hears_releases_after_its_subscription_member(SubscriberFault::Kill, false).await;
}

/// A release made right after the subscription's member froze, before the subscriber noticed
/// (found by the black-box review: the waiter then slept its whole 30 s retry delay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_hears_a_release_made_while_its_subscription_member_froze() {
    a_waiter_hears_releases_after_its_subscription_member(SubscriberFault::Pause, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_hears_releases_after_its_subscription_member_is_paused() {
    a_waiter_hears_releases_after_its_subscription_member(SubscriberFault::Pause, false).await;
}
