//! The test kit's failure injection works as the torture suite assumes: persistence modes,
//! early expiry, and the fault proxy's latency, black hole, reset and heal.

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::testkit::{Fault, Fleet, Persistence};
use quorum_lock::{Error, Quorum, Unsent};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aof_node_keeps_its_locks_across_a_kill_and_a_plain_node_forgets_them() {
    let fleet = Fleet::builder()
        .nodes(3)
        .node_persistence(0, Persistence::AofAlways)
        .start()
        .unwrap();
    let locks = client(&fleet, Quorum::All).await;
    let key = unique_key("persist");
    let guard = locks.try_acquire(&key, TTL).await.unwrap().unwrap();
    fleet.kill(0).unwrap();
    fleet.kill(1).unwrap();
    fleet.restart(0).unwrap();
    fleet.restart(1).unwrap();
    assert!(
        (entry(&fleet, 0, &key).await.as_deref() == Some(guard.holder())),
        "AOF node forgot the lock"
    );
    assert!(
        entry(&fleet, 1, &key).await.is_none(),
        "a node without persistence kept the lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_expiry_cuts_lock_entries_but_not_fencing_counters() {
    let fleet = own_fleet(3);
    let locks = client(&fleet, Quorum::Majority).await;
    let key = unique_key("skew");
    let guard = locks
        .lock(&key)
        .ttl(TTL)
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    // The acquire's and the fencing calls' requests to every node landed (each returned at a
    // quorum).
    locks.finish_background().await;
    eventually(
        &fleet,
        Duration::from_secs(5),
        "entry on node 0",
        || async { entry(&fleet, 0, &key).await.as_deref() == Some(guard.holder()) },
    )
    .await;
    assert_eq!(
        fleet.expire_early(0, &format!("*{key}*")).unwrap(),
        1,
        "only the lock entry has a TTL"
    );
    assert!(entry(&fleet, 0, &key).await.is_none());
    let mut c = conn(&fleet, 0).await;
    let counter: Option<u64> = redis::cmd("GET")
        .arg(quorum_lock::names::fencing_counter(key.as_bytes()))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        counter,
        guard.fencing_token(),
        "the fencing counter survives"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_latency_black_hole_reset_and_heal() {
    let fleet = Fleet::builder().nodes(1).proxied(true).start().unwrap();
    let locks = builder(&fleet, Quorum::All)
        .node_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let key = unique_key("proxy");

    fleet.proxy(0).latency(Duration::from_millis(150));
    assert_eq!(
        fleet.proxy(0).fault(),
        Fault::Latency(Duration::from_millis(150))
    );
    let started = Instant::now();
    let guard = locks.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "latency not applied"
    );
    fleet.proxy(0).heal();
    guard.release().await.unwrap();

    fleet.proxy(0).black_hole();
    let err = locks.try_acquire(&key, TTL).await.unwrap_err();
    assert!(
        matches!(&err, Error::NoQuorum { failures, .. } if failures[0].is_timeout()),
        "{err}"
    );
    // The held request reaches the node after the heal, followed by its rollback.
    fleet.proxy(0).heal();
    eventually(
        &fleet,
        Duration::from_secs(5),
        "held acquire and rollback delivered",
        || async {
            command_calls(&fleet, 0, "eval").await >= 1 && entry(&fleet, 0, &key).await.is_none()
        },
    )
    .await;

    // The node's answers to the held requests reach the client a moment after the node ran
    // them (seen above through another connection): until the client reads one, the node's
    // circuit breaker stays open and a request is refused unsent. Under a loaded run that
    // moment was once longer than the next call took to start.
    let deadline = Instant::now() + Duration::from_secs(5);
    let guard = loop {
        match locks.try_acquire(&key, TTL).await {
            Ok(Some(guard)) => break guard,
            Err(Error::NoQuorum { failures, .. })
                if failures
                    .iter()
                    .all(|f| f.unsent() == Some(Unsent::BreakerOpen))
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => panic!("after the heal: {other:?}"),
        }
    };
    fleet.proxy(0).reset();
    // The dead connection is replaced within the same call.
    guard
        .extend(TTL)
        .await
        .expect("extend over a fresh connection");
    guard.release().await.unwrap();
}
