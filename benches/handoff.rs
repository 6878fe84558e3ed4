//! Hand-off latency: from the holder's release to the waiter's acquire returning. The mutex
//! with pub/sub wake-ups (waiter on another client, or on the holder's own client), with
//! timer-only waiting (the library's default retry delay and jitter), and the fair lock
//! (waiter on another client: woken by the grant notice naming it, it claims with one
//! attempt; on the holder's own client: it holds from the release's answers); beside them, a
//! release alone (one fan-out returning at a quorum), and the grant floor across clients (a
//! waiter with a read parked on every node, granted by the release's own script: one round
//! trip, the least a hand-off to another client can cost on these nodes; see
//! `common::GrantFloor`).
//!
//! `cargo bench --bench handoff`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use quorum_lock::testkit::Fleet;
use quorum_lock::{LockRequest, QuorumLock};
use tokio::time::Instant;

mod common;

const TTL: Duration = Duration::from_secs(30);
const KEY: &str = "bench:handoff";

/// How a request for the key is made: the mutex or the fair lock.
type Kind = for<'a> fn(&'a QuorumLock, &'static str) -> LockRequest<'a>;

fn mutex<'a>(locks: &'a QuorumLock, key: &'static str) -> LockRequest<'a> {
    locks.lock(key)
}

fn fair<'a>(locks: &'a QuorumLock, key: &'static str) -> LockRequest<'a> {
    locks.fair_lock(key)
}

/// Holder takes the key, a waiter starts waiting, and once it is waiting the holder releases:
/// the time from release to the waiter's guard.
async fn one_handoff(holder: &QuorumLock, waiter: &QuorumLock, kind: Kind) -> Duration {
    let held = kind(holder, KEY)
        .ttl(TTL)
        .try_acquire()
        .await
        .expect("acquire")
        .expect("free");
    let before = waiter.stats().contended;
    let task = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let guard = kind(&waiter, KEY)
                .ttl(TTL)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("handoff");
            let at = Instant::now();
            guard.release().await.expect("release");
            at
        })
    };
    // Waiting means: its first attempt failed, and its second one too (with pub/sub, made
    // after subscribing; the fair lock's, joining the line with its ticket). The waiter counts
    // as waiting once that attempt has returned: a moment later.
    while waiter.stats().contended < before + 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    task.await.expect("waiter") - released
}

/// The release alone: one fan-out returning at a quorum.
async fn one_release(holder: &QuorumLock) -> Duration {
    let held = holder
        .try_acquire(KEY, TTL)
        .await
        .expect("acquire")
        .expect("free");
    let released = Instant::now();
    held.release().await.expect("release");
    released.elapsed()
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
    let other = build(true);
    let retry_only = build(false);
    let grant_floor = rt.block_on(common::GrantFloor::connect(&fleet));
    let mut group = c.benchmark_group("handoff");
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("release-alone", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let holder = holder.clone();
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += one_release(&holder).await;
                }
                total
            }
        })
    });
    group.bench_function("grant-floor-other-client", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let grant_floor = &grant_floor;
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += grant_floor.hand_off("bench:grant-floor").await;
                }
                total
            }
        })
    });
    let cases: [(&str, &QuorumLock, Kind); 5] = [
        ("pubsub", &other, mutex),
        ("mutex-same-client", &holder, mutex),
        ("fair-other-client", &other, fair),
        ("fair-same-client", &holder, fair),
        ("retry-only", &retry_only, mutex),
    ];
    for (name, waiter, kind) in cases {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (holder, waiter) = (holder.clone(), waiter.clone());
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += one_handoff(&holder, &waiter, kind).await;
                    }
                    total
                }
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::plot::criterion();
    targets = handoff
}
criterion_main!(benches);
