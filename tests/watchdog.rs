//! The watchdog (renewal, repair), the loss signal and the scoped helper.

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::{Error, Quorum, Scoped};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2s_lease_is_kept_through_10s_of_work_and_lost_when_a_majority_pauses() {
    let fleet = own_fleet(5);
    let holder = builder(&fleet, Quorum::Majority)
        .watchdog_lease(LEASE)
        .build()
        .await
        .unwrap();
    let other = client(&fleet, Quorum::Majority).await;
    let key = unique_key("watchdog");

    let (worked, mut phase) = tokio::sync::mpsc::channel::<()>(1);
    let scoped = {
        let (holder, key) = (holder.clone(), key.clone());
        tokio::spawn(async move {
            holder
                .with_lock(&key, |_lost| async move {
                    // Ten seconds of work: five lease lengths.
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    worked.send(()).await.unwrap();
                    // Then work that never ends on its own.
                    std::future::pending::<()>().await;
                })
                .await
        })
    };
    phase.recv().await.expect("the work ran for 10 s");
    let renewals = holder.stats().extended;
    assert!(
        renewals >= 10,
        "only {renewals} renewals in 10 s of a 2 s lease"
    );
    assert!(
        other
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .is_none(),
        "another client got a lock that was being renewed"
    );

    for i in 0..3 {
        fleet.pause(i).unwrap();
    }
    let paused_at = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), scoped)
        .await
        .expect("the loss was not noticed")
        .unwrap()
        .unwrap();
    let noticed = paused_at.elapsed();
    assert_eq!(outcome, Scoped::Lost, "the scoped work was not cut off");
    assert!(
        noticed <= LEASE + Duration::from_millis(500),
        "lost after {noticed:?}, more than one validity"
    );
    assert!(holder.stats().lost >= 1);

    for i in 0..3 {
        fleet.resume(i).unwrap();
    }
    let guard = other
        .lock(&key)
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("free once the lost lease ran out");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_never_extends_or_revives_a_lock_another_client_now_holds() {
    let fleet = shared_fleet();
    let a = builder(fleet, Quorum::Majority)
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let b = client(fleet, Quorum::Majority).await;
    let key = unique_key("taken-over");
    let guard_a = a.lock(&key).acquire().await.unwrap();
    // Its requests to every node landed first (the acquire returned at a quorum).
    a.finish_background().await;
    // A's entries vanish everywhere (as if expired during a long stall) and B takes the key.
    for i in 0..fleet.len() {
        let mut c = conn(fleet, i).await;
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let guard_b = b
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("free");
    tokio::time::timeout(Duration::from_secs(5), guard_a.lost())
        .await
        .expect("A's next renewal must report the loss");
    assert!(!guard_a.is_held());
    assert!(matches!(
        guard_a.extend(Duration::from_secs(5)).await,
        Err(Error::LockLost { .. })
    ));
    assert_eq!(a.stats().repaired, 0, "repair re-created a lost lock");
    for i in 0..fleet.len() {
        let e = entry(fleet, i, &key).await;
        assert!(
            e.as_deref() != Some(guard_a.holder()),
            "node {i} revived A: {e:?}"
        );
    }
    let mut held_by_b = 0;
    for i in 0..fleet.len() {
        let mut c = conn(fleet, i).await;
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(pttl <= 30_000, "B's lock was extended by A: {pttl}");
        held_by_b += usize::from(entry(fleet, i, &key).await.as_deref() == Some(guard_b.holder()));
    }
    assert!(held_by_b >= 3);
    assert!(matches!(
        guard_a.release().await,
        Err(Error::NotHeld { .. })
    ));
    guard_b.release().await.expect("B is unaffected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_restores_nodes_that_restarted_empty() {
    let fleet = own_fleet(5);
    let a = builder(&fleet, Quorum::Majority)
        .watchdog_lease(LEASE)
        .build()
        .await
        .unwrap();
    let b = client(&fleet, Quorum::Majority).await;
    let key = unique_key("repair");
    let guard = a.lock(&key).acquire().await.unwrap();
    let holder = guard.holder().to_string();
    // No request of the acquire may reach a restarted node: it must come back empty.
    a.finish_background().await;
    fleet.restart(0).unwrap();
    fleet.restart(1).unwrap();
    for i in 0..2 {
        assert!(
            entry(&fleet, i, &key).await.is_none(),
            "node {i} kept data over a restart"
        );
    }
    for i in 0..2 {
        eventually(
            &fleet,
            Duration::from_secs(5),
            "the renewal repaired the restarted node",
            || async { entry(&fleet, i, &key).await.as_deref() == Some(&holder) },
        )
        .await;
    }
    // Both entries are back; the client counts a repair once it has read the node's answer.
    eventually(
        &fleet,
        Duration::from_secs(5),
        "both repairs counted",
        || async { a.stats().repaired >= 2 },
    )
    .await;

    // Two other nodes die: the lock lives on the repaired nodes and node 4.
    fleet.kill(2).unwrap();
    fleet.kill(3).unwrap();
    let renewed = a.stats().extended;
    eventually(
        &fleet,
        Duration::from_secs(5),
        "a renewal after the kills",
        || async { a.stats().extended > renewed },
    )
    .await;
    assert!(guard.is_held(), "a quorum still holds the lock");
    let taken = b.try_acquire(&key, Duration::from_secs(5)).await.unwrap();
    assert!(taken.is_none(), "a second client acquired a held lock");
    guard
        .release()
        .await
        .expect("release confirmed by the 3 live nodes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_ttl_guard_signals_loss_at_its_deadline() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("deadline");
    let guard = locks
        .try_acquire(&key, Duration::from_millis(600))
        .await
        .unwrap()
        .unwrap();
    let deadline = guard.deadline();
    let signal = guard.lost_signal();
    assert!(!signal.is_fired());
    tokio::time::timeout(Duration::from_secs(5), signal.wait())
        .await
        .expect("fired");
    assert!(Instant::now() >= deadline, "fired before the deadline");
    assert!(signal.is_fired() && !guard.is_held());
    assert_eq!(guard.validity(), Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_drop_stop_renewals() {
    let fleet = shared_fleet();
    let locks = builder(fleet, Quorum::Majority)
        .watchdog_lease(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let released = locks
        .lock(unique_key("stop-release"))
        .acquire()
        .await
        .unwrap();
    let dropped = locks.lock(unique_key("stop-drop")).acquire().await.unwrap();
    let keys = [released.key().to_vec(), dropped.key().to_vec()];
    let signal = released.lost_signal();
    released.release().await.unwrap();
    assert!(signal.is_fired(), "release fires the signal");
    drop(dropped);
    let renewals = locks.stats().extended;
    // Three renewal periods of silence.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        locks.stats().extended,
        renewals,
        "renewed after release or drop"
    );
    // The release's and the dropped guard's requests landed on every node.
    locks.finish_background().await;
    for key in &keys {
        for i in 0..fleet.len() {
            let mut c = conn(fleet, i).await;
            let exists: bool = redis::cmd("EXISTS")
                .arg(key)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(!exists, "node {i} still has a released key");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_work_that_completes_reports_its_value_and_releases() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("scoped");
    let outcome = locks
        .with_lock(&key, |lost| async move {
            assert!(!lost.is_fired());
            21 * 2
        })
        .await
        .unwrap();
    assert_eq!(outcome.completed(), Some(42));
    assert!(
        locks
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .is_some(),
        "released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_bounds_the_renewals() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("max-hold");
    let started = Instant::now();
    let guard = locks
        .lock(&key)
        .watchdog(Duration::from_millis(600))
        .max_hold(Duration::from_millis(1500))
        .acquire()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("renewals stopped, so the lock ran out");
    let held = started.elapsed();
    // Renewed past one lease (600 ms), never past the maximum hold (plus scheduling slack).
    assert!(held >= Duration::from_millis(1000), "held only {held:?}");
    assert!(
        held <= Duration::from_millis(2000),
        "held {held:?}, beyond max_hold"
    );
    assert!(!guard.is_held());
}
