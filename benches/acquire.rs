//! Uncontended acquire + release latency on local redis-server fleets (test kit), against a
//! single-node `SET NX PX` + compare-and-delete reference.
//!
//! `cargo bench --bench acquire`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use quorum_lock::testkit::Fleet;
use quorum_lock::QuorumLock;

const TTL: Duration = Duration::from_secs(10);

fn acquire_release(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("acquire_release");
    group.measurement_time(Duration::from_secs(5));

    for n in [1usize, 3, 5] {
        let fleet = Fleet::start(n).expect("fleet");
        let locks = rt.block_on(async {
            QuorumLock::builder()
                .nodes(fleet.urls())
                .build()
                .await
                .expect("client")
        });
        group.bench_with_input(BenchmarkId::new("quorum-lock", n), &n, |b, _| {
            b.to_async(&rt).iter(|| async {
                let guard = locks
                    .try_acquire("bench:lock", TTL)
                    .await
                    .expect("acquire")
                    .expect("uncontended");
                guard.release().await.expect("release");
            })
        });
    }

    // Reference: one node, SET NX PX then a compare-and-delete script, sequentially.
    let fleet = Fleet::start(1).expect("fleet");
    let conn = rt.block_on(async {
        fleet
            .client(0)
            .get_multiplexed_async_connection()
            .await
            .expect("connection")
    });
    let del = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
    );
    group.bench_function(
        BenchmarkId::new("single-node SET NX + DEL script", 1),
        |b| {
            b.to_async(&rt).iter(|| {
                let mut conn = conn.clone();
                let del = &del;
                async move {
                    let ok: Option<String> = redis::cmd("SET")
                        .arg("bench:raw")
                        .arg("holder")
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000)
                        .query_async(&mut conn)
                        .await
                        .expect("set");
                    assert!(ok.is_some());
                    let _: i64 = del
                        .key("bench:raw")
                        .arg("holder")
                        .invoke_async(&mut conn)
                        .await
                        .expect("del");
                }
            })
        },
    );
    group.finish();
}

criterion_group!(benches, acquire_release);
criterion_main!(benches);
