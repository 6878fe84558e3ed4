//! Cluster nodes beside standalone nodes, on one machine in one run (docs/DESIGN.md, "Cluster
//! nodes"): uncontended acquire + release, and 64 keys in flight at once, on five standalone
//! `redis-server` nodes and on five clusters of three primaries each (criterion); and, printed
//! before criterion starts, how 10,000 lock keys spread over one cluster's shards, what one
//! lock costs each cluster (commands its primaries ran per lock), and the `MOVED` answers a
//! client sees after a failover moves a primary's slots.
//!
//! `cargo bench --bench cluster` (about two minutes; report: target/criterion/report/).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use quorum_lock::testkit::{ClusterFleet, Fleet};
use quorum_lock::QuorumLock;

mod common;
use common::TTL;

const KEYS_IN_FLIGHT: usize = 64;

async fn client(urls: Vec<String>) -> QuorumLock {
    QuorumLock::builder()
        .nodes(urls)
        .build()
        .await
        .expect("client")
}

async fn one(locks: &QuorumLock, key: &str) {
    let guard = locks
        .try_acquire(key, TTL)
        .await
        .expect("acquire")
        .expect("uncontended");
    guard.release().await.expect("release");
}

/// Lock calls (`SET`, `EVALSHA`, `EVAL`, `INCR`) the primaries of cluster `c` have run so far
/// (a replica runs the writes it is sent as commands of its own: not counted).
fn lock_calls(fleet: &ClusterFleet, c: usize) -> u64 {
    (0..fleet.members())
        .filter(|&m| fleet.member(c, m).pid().is_some())
        .filter_map(|m| {
            let mut conn = fleet.client(c, m).get_connection().expect("member");
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn).expect("ROLE");
            matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master")
                .then_some(conn)
        })
        .map(|mut conn| calls(&mut conn))
        .sum()
}

/// Lock calls (`SET`, `EVALSHA`, `EVAL`, `INCR`) the server behind `conn` has run so far.
fn calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    info.lines()
        .filter(|l| {
            [
                "cmdstat_set:",
                "cmdstat_evalsha:",
                "cmdstat_eval:",
                "cmdstat_incr:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The figures printed before the timings.
fn report(rt: &tokio::runtime::Runtime) {
    // How evenly 10,000 keys spread over three primaries (slots split evenly).
    let primaries = 3usize;
    let mut load = vec![0u64; primaries];
    for i in 0..10_000 {
        let slot = usize::from(quorum_lock::names::hash_slot(
            format!("order:{i}").as_bytes(),
        ));
        load[slot * primaries / 16_384] += 1;
    }
    let max = *load.iter().max().unwrap_or(&0) as f64;
    let mean = 10_000.0 / primaries as f64;
    println!(
        "spread of 10,000 keys (order:0..order:9999) over 3 primaries: {load:?}, max/mean {:.3}",
        max / mean
    );
    // What one lock costs a standalone node, and each cluster, and the MOVED answers after a
    // failover.
    let standalone = Fleet::start(5).expect("fleet");
    rt.block_on(async {
        let locks = client(standalone.urls()).await;
        let mut conn = standalone.client(0).get_connection().expect("node");
        let before = calls(&mut conn);
        for i in 0..1_000 {
            one(&locks, &format!("cost:{i}")).await;
        }
        locks.finish_background().await;
        println!(
            "commands a standalone node ran per acquire+release: {:.2}",
            (calls(&mut conn) - before) as f64 / 1_000.0
        );
    });
    drop(standalone);
    let fleet = ClusterFleet::builder()
        .clusters(5)
        .replicas(1)
        .start()
        .expect("clusters");
    rt.block_on(async {
        let locks = client(fleet.urls()).await;
        let before = lock_calls(&fleet, 0);
        for i in 0..1_000 {
            one(&locks, &format!("cost:{i}")).await;
        }
        locks.finish_background().await;
        let per_lock = (lock_calls(&fleet, 0) - before) as f64 / 1_000.0;
        println!(
            "commands one cluster ran per acquire+release: {per_lock:.2}; MOVED seen: {}",
            locks.stats().redirects
        );
        // Member 0's slots move to its replica (member 3).
        fleet.failover(0, 3, false).expect("failover");
        fleet.wait_ok(0).expect("cluster ok");
        let (before, moved) = (lock_calls(&fleet, 0), locks.stats().redirects);
        let mut on_moved = 0;
        for i in 0..1_000 {
            let key = format!("after:{i}");
            if fleet.primary_of(0, key.as_bytes()).ok() == Some(3) {
                on_moved += 1;
            }
            one(&locks, &key).await;
        }
        locks.finish_background().await;
        println!(
            "after a failover in one cluster: 1,000 locks ({on_moved} on the moved slots): MOVED seen {}, commands that cluster ran per lock {:.2}",
            locks.stats().redirects - moved,
            (lock_calls(&fleet, 0) - before) as f64 / 1_000.0
        );
    });
}

fn cluster_vs_standalone(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    report(&rt);
    let standalone = Fleet::start(5).expect("fleet");
    let clusters = ClusterFleet::start(5).expect("clusters");
    let (plain, clustered) = rt.block_on(async {
        (
            client(standalone.urls()).await,
            client(clusters.urls()).await,
        )
    });
    let mut group = c.benchmark_group("cluster/acquire_release");
    group.measurement_time(Duration::from_secs(4));
    for (name, locks) in [("standalone", &plain), ("cluster", &clustered)] {
        group.bench_function(BenchmarkId::new(name, 5), |b| {
            b.to_async(&rt).iter(|| one(locks, "bench:cluster"))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("cluster/64_in_flight");
    group.measurement_time(Duration::from_secs(6));
    let keys: Vec<String> = (0..KEYS_IN_FLIGHT)
        .map(|i| format!("bench:many:{i}"))
        .collect();
    for (name, locks) in [("standalone", &plain), ("cluster", &clustered)] {
        group.bench_function(BenchmarkId::new(name, KEYS_IN_FLIGHT), |b| {
            b.to_async(&rt)
                .iter(|| futures::future::join_all(keys.iter().map(|k| one(locks, k))))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::plot::criterion();
    targets = cluster_vs_standalone
}
criterion_main!(benches);
