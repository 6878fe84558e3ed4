//! Uncontended acquire + release latency on local redis-server fleets (test kit), in one
//! criterion group per fleet size with the network floor and rslock beside quorum-lock (and
//! the lock family's 2-key set and semaphore permit), so criterion's report plots them
//! together.
//!
//! `cargo bench --bench acquire` (report: target/criterion/report/index.html)

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use quorum_lock::testkit::Fleet;
use quorum_lock::QuorumLock;

mod common;
use common::{Floor, TTL};

fn acquire_release(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    for n in [1usize, 3, 5, 7, 9] {
        let mut group = c.benchmark_group(format!("acquire_release/{n}_nodes"));
        group.measurement_time(Duration::from_secs(4));
        let fleet = Fleet::start(n).expect("fleet");
        let (locks, floor) = rt.block_on(async {
            let locks = QuorumLock::builder()
                .nodes(fleet.urls())
                .build()
                .await
                .expect("client");
            (locks, Floor::connect(&fleet).await)
        });
        let peer = rslock::LockManager::new(fleet.urls());
        group.bench_function(BenchmarkId::new("quorum-lock", n), |b| {
            b.to_async(&rt).iter(|| async {
                let guard = locks
                    .try_acquire("bench:lock", TTL)
                    .await
                    .expect("acquire")
                    .expect("uncontended");
                guard.release().await.expect("release");
            })
        });
        // The lock family beside the mutex: a 2-key set, and a permit (one permit, so that
        // it runs under the same majority as the mutex).
        group.bench_function(BenchmarkId::new("quorum-lock-set2", n), |b| {
            b.to_async(&rt).iter(|| async {
                let guard = locks
                    .lock_all(["bench:set:a", "bench:set:b"])
                    .ttl(TTL)
                    .try_acquire()
                    .await
                    .expect("acquire")
                    .expect("uncontended");
                guard.release().await.expect("release");
            })
        });
        group.bench_function(BenchmarkId::new("quorum-lock-permit", n), |b| {
            b.to_async(&rt).iter(|| async {
                let guard = locks
                    .semaphore("bench:permits", 1)
                    .ttl(TTL)
                    .try_acquire()
                    .await
                    .expect("acquire")
                    .expect("uncontended");
                guard.release().await.expect("release");
            })
        });
        group.bench_function(BenchmarkId::new("floor", n), |b| {
            b.to_async(&rt)
                .iter(|| floor.lock_unlock("bench:floor", n / 2 + 1))
        });
        group.bench_function(BenchmarkId::new("rslock", n), |b| {
            b.to_async(&rt).iter(|| async {
                let lock = peer.lock("bench:rslock", TTL).await.expect("rslock");
                peer.unlock(&lock).await;
            })
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = common::plot::criterion();
    targets = acquire_release
}
criterion_main!(benches);
