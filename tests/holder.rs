//! Acting on a lock by its holder value (`QuorumLock::extend_by_holder`, `release_by_holder`), as
//! another process handed the token does: invariant 5 (ownership: only where the value
//! matches, never re-creating an entry), the validity rule of an extend, the exact count of a
//! release, the release notice, and typed errors for bad input.

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::{Error, Op, Quorum, MAX_HOLDER_LEN, MAX_KEY_LEN, MAX_TTL};
use tokio::time::Instant;

const SHORT: Duration = Duration::from_millis(400);
const WRONG: &str = "0123456789abcdef0123456789abcdef";

/// Sleeps past a lock's deadline and its expiry on the nodes: time passing is what the tests
/// that call it are about.
async fn let_expire(ttl: Duration) {
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guards_token_extends_and_releases_its_lock_from_another_client() {
    let fleet = shared_fleet();
    let owner = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    let key = unique_key("token");
    let guard = owner
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free key");
    let holder = guard.holder().to_string();
    // The process that took the lock hands the token on and lets go of the guard without
    // releasing it.
    let token = guard.into_holder().expect("a single key's lock");
    assert_eq!(token, holder);
    owner.finish_background().await;
    for i in 0..fleet.len() {
        assert_eq!(
            entry(fleet, i, &key).await.as_deref(),
            Some(token.as_str()),
            "letting go of the guard released node {i}"
        );
    }

    let ttl = Duration::from_secs(60);
    let drift = Duration::from_millis(602); // 60 s * 0.01 + 2 ms
    let before = Instant::now();
    let validity = other.extend_by_holder(&key, &token, ttl).await.unwrap();
    let took = before.elapsed();
    assert!(
        validity <= ttl - drift && validity >= ttl - drift - took,
        "validity {validity:?} is not ttl - drift - elapsed (took {took:?})"
    );
    other.finish_background().await;
    for i in 0..fleet.len() {
        let left = pttl(fleet, i, &key).await;
        assert!(left > 50_000, "node {i} not extended: pttl {left}");
    }
    assert_eq!(other.stats().extended, 1);

    other.release_by_holder(&key, &token).await.unwrap();
    other.finish_background().await;
    for i in 0..fleet.len() {
        assert_eq!(entry(fleet, i, &key).await, None, "node {i} kept the entry");
    }
    assert_eq!(other.stats().released, 1);

    // Released: the token holds nothing any more.
    let err = other.release_by_holder(&key, &token).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotHeld {
                confirmed: 0,
                required: 3,
                ref failures,
                ..
            } if failures.is_empty()
        ),
        "{err}"
    );
    let err = other.extend_by_holder(&key, &token, ttl).await.unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    for i in 0..fleet.len() {
        assert_eq!(entry(fleet, i, &key).await, None, "node {i} re-created it");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_and_leaves_the_lock_as_it_was() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("wrong-token");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free key");
    locks.finish_background().await;

    let err = locks
        .extend_by_holder(&key, WRONG, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    let err = locks.release_by_holder(&key, WRONG).await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { confirmed: 0, .. }), "{err}");
    locks.finish_background().await;
    assert_eq!(
        nodes_holding(fleet, &key, guard.holder()).await,
        fleet.len()
    );
    for i in 0..fleet.len() {
        let left = pttl(fleet, i, &key).await;
        assert!(left <= 10_000, "node {i} extended by a wrong token: {left}");
    }
    assert!(guard.is_held());
    guard.release().await.expect("the holder releases normally");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lock_is_not_resurrected_by_its_token() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("token-expired");
    let guard = locks.try_acquire(&key, SHORT).await.unwrap().unwrap();
    let token = guard.holder().to_string();
    std::mem::forget(guard);
    let_expire(SHORT).await;

    let err = locks
        .extend_by_holder(&key, &token, Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    locks.finish_background().await;
    for i in 0..fleet.len() {
        assert_eq!(
            entry(fleet, i, &key).await,
            None,
            "node {i} re-created the key"
        );
    }
    let err = locks.release_by_holder(&key, &token).await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { confirmed: 0, .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holders_token_never_releases_nor_extends_the_new_holders_lock() {
    let fleet = shared_fleet();
    let a = client(fleet, Quorum::Majority).await;
    let b = client(fleet, Quorum::Majority).await;
    let key = unique_key("token-stale");
    let stale = a.try_acquire(&key, SHORT).await.unwrap().unwrap();
    let stale_token = stale.holder().to_string();
    std::mem::forget(stale);
    let_expire(SHORT).await;
    let fresh = b
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the expired key is free");
    b.finish_background().await;

    let err = a.release_by_holder(&key, &stale_token).await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { confirmed: 0, .. }), "{err}");
    let err = a
        .extend_by_holder(&key, &stale_token, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    a.finish_background().await;
    assert_eq!(
        nodes_holding(fleet, &key, fresh.holder()).await,
        fleet.len(),
        "the new holder's entries were touched"
    );
    fresh
        .release()
        .await
        .expect("the new holder releases normally");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_token_wakes_a_waiter_with_its_notice() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    // Only a notice can wake this waiter within the test: its retry delay is 60 s.
    let waiter = builder(fleet, Quorum::Majority)
        .retry_delay(Duration::from_secs(60))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(120))
        .build()
        .await
        .unwrap();
    let releaser = client(fleet, Quorum::Majority).await;
    let key = unique_key("token-handoff");
    let held = holder
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let token = held.holder().to_string();
    std::mem::forget(held);
    let task = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move { waiter.acquire(&key, Duration::from_secs(30)).await })
    };
    // Two contended attempts: the waiter's subscriptions are confirmed before its second.
    eventually(
        fleet,
        Duration::from_secs(10),
        "the waiter waits",
        || async { waiter.stats().contended >= 2 },
    )
    .await;
    releaser.release_by_holder(&key, &token).await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("no release notice woke the waiter")
        .unwrap()
        .unwrap();
    let stats = waiter.stats();
    assert!(stats.woken >= 1 && stats.notices >= 1, "{stats:?}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_tokens_and_ttls_are_typed_errors_before_any_node_is_asked() {
    let fleet = own_fleet(3);
    let locks = client(&fleet, Quorum::Majority).await;
    let ttl = Duration::from_secs(10);
    let long_key = "k".repeat(MAX_KEY_LEN + 1);
    for key in ["", "quorum-lock:fence:k", long_key.as_str()] {
        let err = locks.extend_by_holder(key, WRONG, ttl).await.unwrap_err();
        assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
        let err = locks.release_by_holder(key, WRONG).await.unwrap_err();
        assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
    }
    let long_token = "t".repeat(MAX_HOLDER_LEN + 1);
    for token in [
        "",
        "s3cret token",
        "s3cret-token\n",
        "s3cret\u{7f}",
        &long_token,
    ] {
        for err in [
            locks.extend_by_holder("k", token, ttl).await.unwrap_err(),
            locks.release_by_holder("k", token).await.unwrap_err(),
        ] {
            assert!(
                matches!(err, Error::InvalidHolder { .. }),
                "{token:?}: {err}"
            );
            assert!(!err.to_string().contains("s3cret"), "token shown: {err}");
        }
    }
    for ttl in [Duration::ZERO, Duration::from_millis(100), MAX_TTL * 2] {
        let err = locks.extend_by_holder("k", WRONG, ttl).await.unwrap_err();
        assert!(matches!(err, Error::InvalidTtl { .. }), "{ttl:?}: {err}");
    }
    // Nothing reached the nodes: no script ran on any of them.
    for i in 0..fleet.len() {
        let scripts =
            command_calls(&fleet, i, "evalsha").await + command_calls(&fleet, i, "eval").await;
        assert_eq!(scripts, 0, "node {i} ran a script");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nodes_down_an_extend_by_token_has_no_quorum_and_a_release_counts_exactly() {
    let fleet = own_fleet(3);
    let locks = client(&fleet, Quorum::Majority).await;
    let key = unique_key("token-down");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let token = guard.holder().to_string();
    std::mem::forget(guard);
    locks.finish_background().await;
    fleet.kill(1).unwrap();
    fleet.kill(2).unwrap();

    let err = locks
        .extend_by_holder(&key, &token, Duration::from_secs(60))
        .await
        .unwrap_err();
    // An extend decides as soon as the quorum is out of reach: node 0's answer may not be
    // counted yet.
    match &err {
        Error::NoQuorum {
            op: Op::Extend,
            confirmed: 0 | 1,
            required: 2,
            refused: 0,
            failures,
            ..
        } if failures.len() == 2 => {}
        other => panic!("expected NoQuorum with 2 failures: {other:?}"),
    }
    // A release below the quorum waits for every answer: its count is exact. The guard was
    // forgotten, not dropped, so its lease is still this client's and goes through it: the
    // lock was held to the end, and the nodes that did not confirm failed rather than
    // refused, so the release is unconfirmed, not a loss.
    let err = locks.release_by_holder(&key, &token).await.unwrap_err();
    match &err {
        Error::ReleaseUnconfirmed {
            confirmed: 1,
            required: 2,
            refused: 0,
            failures,
            ..
        } if failures.len() == 2 && !err.is_lost() => {}
        other => panic!("expected ReleaseUnconfirmed with 1 confirmed and 2 failures: {other:?}"),
    }
    assert_eq!(entry(&fleet, 0, &key).await, None, "node 0 released");
}

/// Calls by holder value from the client that holds the guard go through the guard: an extend to a
/// shorter TTL cuts its deadline, a release ends it (and fires its loss signal) before any
/// node lets go, so the guard never says "held" while another client holds the lock.
#[tokio::test]
async fn token_calls_from_the_guards_own_client_act_through_the_guard() {
    let fleet = shared_fleet();
    let key = unique_key("token-own-guard");
    let locks = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    let guard = locks.acquire(&key, Duration::from_secs(10)).await.unwrap();
    let lost = guard.lost_signal();
    let token = guard.holder().to_string();

    let validity = locks
        .extend_by_holder(&key, &token, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(validity <= Duration::from_secs(1), "{validity:?}");
    assert!(
        guard.validity() <= Duration::from_secs(1),
        "the guard still counts on {:?} after its entries were shortened to 1 s",
        guard.validity()
    );
    assert!(guard.is_held());

    locks.release_by_holder(&key, &token).await.unwrap();
    assert!(
        !guard.is_held(),
        "the guard says held after its release by holder value"
    );
    // Its deadline says so too (found by the chaos checker: it kept the deadline of the last
    // extend, 1 s away, while another client could already hold the key).
    assert!(
        guard.deadline() <= tokio::time::Instant::now(),
        "the guard's deadline is {:?} away after its release by holder value",
        guard.deadline() - tokio::time::Instant::now()
    );
    assert!(lost.is_fired(), "its loss signal did not fire");
    let theirs = other
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("another client takes the released key");
    assert!(!guard.is_held());
    assert!(
        matches!(guard.release().await, Err(Error::NotHeld { .. })),
        "released by holder value already"
    );
    assert!(
        theirs.is_held(),
        "the guard's own release touched the new holder's lock"
    );
    theirs.release().await.unwrap();

    // A guard kept by the watchdog: released by holder value, its renewals stop.
    let kept = locks.lock(&key).acquire().await.unwrap();
    let token = kept.holder().to_string();
    locks.release_by_holder(&key, &token).await.unwrap();
    assert!(!kept.is_held());
    let theirs = other
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free after the release by holder value");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(theirs.is_held());
    drop(kept);
    theirs.release().await.unwrap();
}

/// Holder-value calls from the guard's own client on every key of every kind act through the
/// guard: an extend to a shorter TTL cuts the guard's deadline, a release ends the guard (its
/// loss signal fires) before another client can take any of its keys. Before, only a guard's
/// first key was known to its client, so a release by holder value of a multi-key guard's
/// second key left the guard saying "held" while another client held that key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_calls_on_every_key_of_every_kind_act_through_the_guard() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    let ttl = Duration::from_secs(10);
    let short = Duration::from_secs(1);
    for (kind, n, request) in kinds(3) {
        for at in 0..n {
            let keys: Vec<String> = (0..n)
                .map(|i| unique_key(&format!("holder-every-key-{kind}-{i}")))
                .collect();
            let what = format!("{kind}, key {at} of {n}");
            let guard = request(&locks, &keys)
                .ttl(ttl)
                .try_acquire()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{what}: free keys"));
            let lost = guard.lost_signal();
            let holder = guard.holder().to_string();
            let key = &keys[at];

            let validity = locks.extend_by_holder(key, &holder, short).await.unwrap();
            assert!(validity <= short, "{what}: extend answered {validity:?}");
            assert!(
                guard.validity() <= short,
                "{what}: the guard counts on {:?} after its entries were cut to {short:?}",
                guard.validity()
            );
            assert!(guard.is_held(), "{what}: the extend kept the lock");

            locks.release_by_holder(key, &holder).await.unwrap();
            assert!(
                !guard.is_held(),
                "{what}: the guard says held after its release"
            );
            assert!(lost.is_fired(), "{what}: its loss signal did not fire");
            let theirs = request(&other, &keys)
                .ttl(ttl)
                .try_acquire()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{what}: another client takes the released lock"));
            assert!(!guard.is_held(), "{what}: two holders");
            assert!(
                matches!(guard.release().await, Err(Error::NotHeld { .. })),
                "{what}: released by holder value already"
            );
            assert!(
                theirs.is_held(),
                "{what}: the old guard's release touched theirs"
            );
            theirs.release().await.unwrap();
        }
    }
}
