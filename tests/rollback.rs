//! Invariant 4 (full rollback): after a failed attempt no node keeps the attempt's entry, also
//! a node that answered too late because it was paused.

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::Quorum;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_reaches_a_node_that_timed_out() {
    let fleet = own_fleet(5);
    let locks = client(&fleet, Quorum::Majority).await;
    let key = unique_key("rollback");
    // Someone else holds the key on nodes 0 and 1, so the attempt can reach at most 3 of 5 and
    // fails once paused node 4 times out.
    for i in 0..2 {
        plant(&fleet, i, &key, "someone-else").await;
    }
    let set_before = command_calls(&fleet, 4, "set").await;
    let eval_before = command_calls(&fleet, 4, "eval").await;
    fleet.pause(4).unwrap();

    let attempt = locks.try_acquire(&key, Duration::from_secs(30)).await;
    assert!(
        matches!(attempt, Ok(None)),
        "contended attempt: {attempt:?}"
    );
    for i in 2..4 {
        eventually(
            &fleet,
            Duration::from_secs(5),
            "rolled back on a live node",
            || async { entry(&fleet, i, &key).await.is_none() },
        )
        .await;
    }

    fleet.resume(4).unwrap();
    // Node 4 now runs the queued acquire, then the rollback (plain EVAL), in that order.
    eventually(
        &fleet,
        Duration::from_secs(10),
        "node 4 ran the late acquire and the rollback",
        || async {
            command_calls(&fleet, 4, "set").await > set_before
                && command_calls(&fleet, 4, "eval").await > eval_before
        },
    )
    .await;
    assert!(
        entry(&fleet, 4, &key).await.is_none(),
        "node 4 kept the late attempt's entry"
    );
    for i in 0..2 {
        let e = entry(&fleet, i, &key).await;
        assert_eq!(
            e.as_deref(),
            Some("someone-else"),
            "the other holder is untouched on node {i}: {e:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_quorum_attempt_leaves_no_entry() {
    let fleet = own_fleet(5);
    let locks = client(&fleet, Quorum::Majority).await;
    let key = unique_key("noquorum");
    for i in 2..5 {
        fleet.pause(i).unwrap();
    }
    let err = locks
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(
        matches!(err, quorum_lock::Error::NoQuorum { confirmed: 2, .. }),
        "{err}"
    );
    for i in 2..5 {
        fleet.resume(i).unwrap();
    }
    for i in 0..5 {
        eventually(
            &fleet,
            Duration::from_secs(10),
            "no entry left after the failed attempt",
            || async { entry(&fleet, i, &key).await.is_none() },
        )
        .await;
    }
    // ... and the key is free for the next client.
    let other = client(&fleet, Quorum::Majority).await;
    let guard = other
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(guard.is_some(), "key free after rollback");
}

/// An attempt refused by one node, taken by one and unanswered by three of five is contended
/// (the key is someone else's where it was answered), not a failure: the count stops at the
/// decision, as it does when answers come, also when the nodes' time runs out together. The
/// node it took is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_nodes_count_only_until_the_attempt_is_decided() {
    let fleet = own_fleet(5);
    let key = unique_key("decided");
    let locks = connected_slow_client(&fleet, &key).await;
    plant(&fleet, 0, &key, "someone-else").await;
    for i in 2..5 {
        fleet.pause(i).unwrap();
    }
    let attempt = locks.try_acquire(&key, Duration::from_secs(30)).await;
    assert!(
        matches!(attempt, Ok(None)),
        "contended attempt: {attempt:?}"
    );
    locks.finish_background().await;
    assert_eq!(entry(&fleet, 1, &key).await, None, "node 1 given back");
    assert_eq!(
        entry(&fleet, 0, &key).await.as_deref(),
        Some("someone-else")
    );
    for i in 2..5 {
        fleet.resume(i).unwrap();
    }
}
