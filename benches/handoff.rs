//! Hand-off latency: from the holder's release to the waiter's acquire returning, with pub/sub
//! wake-ups versus timer-only waiting (the library's default retry delay and jitter).
//!
//! `cargo bench --bench handoff`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use quorum_lock::testkit::Fleet;
use quorum_lock::QuorumLock;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

/// Holder takes the key, a waiter starts waiting, and once it is waiting the holder releases:
/// the time from release to the waiter's guard.
async fn one_handoff(holder: &QuorumLock, waiter: &QuorumLock) -> Duration {
    let held = holder
        .try_acquire("bench:handoff", TTL)
        .await
        .expect("acquire")
        .expect("free");
    let before = waiter.stats().contended;
    let task = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let guard = waiter.acquire("bench:handoff", TTL).await.expect("handoff");
            let at = Instant::now();
            guard.release().await.expect("release");
            at
        })
    };
    // Waiting means: its first attempt failed, and (with pub/sub) its second one too.
    while waiter.stats().contended < before + 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let released = Instant::now();
    held.release().await.expect("release");
    task.await.expect("waiter") - released
}

fn handoff(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let fleet = Fleet::start(5).expect("fleet");
    let build = |pubsub: bool| {
        rt.block_on(
            QuorumLock::builder()
                .nodes(fleet.urls())
                .pubsub(pubsub)
                .build(),
        )
        .expect("client")
    };
    let holder = build(true);
    let mut group = c.benchmark_group("handoff");
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(10));
    for (name, pubsub) in [("pubsub", true), ("retry-only", false)] {
        let waiter = build(pubsub);
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (holder, waiter) = (holder.clone(), waiter.clone());
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += one_handoff(&holder, &waiter).await;
                    }
                    total
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, handoff);
criterion_main!(benches);
