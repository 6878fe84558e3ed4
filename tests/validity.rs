//! Invariants 2 and 3: validity is measured from before the first request, and an attempt
//! that leaves too little of it fails. Slow nodes are made with CLIENT PAUSE, which holds
//! every client of a node for a set time starting when the command returns.

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Error, Quorum};

async fn pause_clients(fleet: &Fleet, nodes: std::ops::Range<usize>, ms: u64) {
    for i in nodes {
        let mut c = conn(fleet, i).await;
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .query_async(&mut c)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_is_reduced_by_the_time_the_quorum_took() {
    let fleet = own_fleet(5);
    let locks = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let ttl = Duration::from_secs(6);
    let key = unique_key("slow");
    // Two nodes answer at once; the third confirmation comes from a node held for 800 ms.
    pause_clients(&fleet, 0..3, 800).await;
    let started = tokio::time::Instant::now();
    let guard = locks
        .try_acquire(&key, ttl)
        .await
        .unwrap()
        .expect("quorum after the pause");
    let took = started.elapsed();
    let drift = Duration::from_millis(62); // 6 s * 0.01 + 2 ms
    assert!(
        took >= Duration::from_millis(700),
        "the pause did not slow the quorum: {took:?}"
    );
    assert!(
        guard.validity() <= ttl - drift - Duration::from_millis(700),
        "validity {:?} ignores the {took:?} the quorum took",
        guard.validity()
    );
    // Measured from just before the first request, not from when the quorum was reached.
    let from_start = guard.deadline() - started;
    assert!(from_start >= ttl - drift, "{from_start:?}");
    assert!(
        from_start <= ttl - drift + Duration::from_millis(200),
        "{from_start:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_leaving_less_than_min_validity_fails_and_is_rolled_back() {
    let fleet = own_fleet(5);
    let locks = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_secs(2))
        .min_validity(Duration::from_millis(2200))
        .build()
        .await
        .unwrap();
    let ttl = Duration::from_secs(3);
    let key = unique_key("exhausted");
    pause_clients(&fleet, 0..3, 1000).await;
    let err = locks.try_acquire(&key, ttl).await.unwrap_err();
    match err {
        Error::ValidityExhausted { elapsed, .. } => {
            assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}")
        }
        other => panic!("expected ValidityExhausted, got {other}"),
    }
    for i in 0..5 {
        eventually(&fleet, Duration::from_secs(10), "rolled back", || async {
            entry(&fleet, i, &key).await.is_none()
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_slower_than_the_ttl_never_returns_a_guard() {
    let fleet = own_fleet(5);
    let locks = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_millis(900))
        .build()
        .await
        .unwrap();
    let ttl = Duration::from_secs(1);
    let key = unique_key("too-slow");
    // The majority answers only after 1.5 s, longer than the TTL: the node timeout ends the
    // attempt first, and it fails.
    pause_clients(&fleet, 0..3, 1500).await;
    let started = tokio::time::Instant::now();
    let err = locks.try_acquire(&key, ttl).await.unwrap_err();
    assert!(
        matches!(&err, Error::NoQuorum { failures, .. } if failures.len() == 3),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "waited for the slow nodes"
    );
    for i in 0..5 {
        eventually(&fleet, Duration::from_secs(10), "rolled back", || async {
            entry(&fleet, i, &key).await.is_none()
        })
        .await;
    }
}
