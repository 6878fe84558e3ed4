//! A semaphore of more than one permit as slots (`QuorumLock::semaphore`, the default for
//! P > 1): each permit one of P mutexes `KEY#0` .. `KEY#P-1` under the client's quorum, so a
//! node down stops nothing and at most P hold at once. Separate clients, real servers.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{names, Error, Quorum, MAX_SLOTS};

/// The acceptance check: three holders of three permits under a majority of five, a fourth
/// refused; one node killed; a freed permit taken again; never more than three at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_permits_hold_under_a_majority_with_a_node_killed() {
    let fleet = Fleet::start(5).expect("fleet");
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(client(&fleet, Quorum::Majority).await);
    }
    let key = unique_key("pool");
    let mut held = Vec::new();
    for locks in &clients[..3] {
        let permit = locks.semaphore(&key, 3).fencing(true).try_acquire().await;
        held.push(permit.unwrap().expect("a permit is free"));
    }
    let mut slots: Vec<Vec<u8>> = held.iter().map(|g| g.key().to_vec()).collect();
    slots.sort();
    let expected: Vec<Vec<u8>> = (0..3)
        .map(|i| names::semaphore_slot(key.as_bytes(), i))
        .collect();
    assert_eq!(slots, expected, "each holder has a slot of its own");
    assert!(held.iter().all(|g| g.fencing_token().is_some()));
    assert!(clients[3]
        .semaphore(&key, 3)
        .try_acquire()
        .await
        .unwrap()
        .is_none());

    fleet.kill(4).unwrap();
    assert!(
        clients[3]
            .semaphore(&key, 3)
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "still full with a node down"
    );
    // A waiter gets the permit freed, within a round trip of the release's notice.
    let waiting = {
        let locks = clients[3].clone();
        let key = key.clone();
        tokio::spawn(async move {
            locks
                .semaphore(&key, 3)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let freed = held.remove(1);
    let slot = freed.key().to_vec();
    freed.release().await.unwrap();
    let again = waiting.await.unwrap().expect("the freed permit");
    assert_eq!(again.key(), slot.as_slice());
    assert!(clients[4]
        .semaphore(&key, 3)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    for guard in held.into_iter().chain([again]) {
        assert!(guard.is_held());
        guard.release().await.unwrap();
    }
}

/// Eight clients contend for three permits with a node frozen: never more than three hold
/// at once, by what their guards say (each checks `is_held` inside its section).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_clients_never_hold_more_than_the_permits_with_a_node_frozen() {
    let fleet = Fleet::start(5).expect("fleet");
    let key = unique_key("contended");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    fleet.pause(2).unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let locks = client(&fleet, Quorum::Majority).await;
        let (key, inside, most) = (key.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let mut sections = 0;
            for _ in 0..6 {
                let permit = locks
                    .semaphore(&key, 3)
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .expect("a permit within the wait");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                assert!(permit.is_held());
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
                sections += 1;
            }
            sections
        }));
    }
    let mut sections = 0;
    for task in tasks {
        sections += task.await.unwrap();
    }
    fleet.resume(2).unwrap();
    assert_eq!(sections, 48);
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} held at once");
}

/// A slot's holder has a lock's calls: a label on its slot, the loss signal when the slot is
/// broken, extend by holder value; the counted form is still there (`counted`), and bad
/// counts are typed errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_a_lock_of_its_slot_and_bad_counts_are_refused() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    let key = unique_key("slot-calls");
    let permit = locks
        .semaphore(&key, 2)
        .label("worker-1")
        .watchdog(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let slot = String::from_utf8(permit.key().to_vec()).unwrap();
    let seen = other.holder_of(&slot).await.unwrap().expect("held");
    assert_eq!(seen.label.as_deref(), Some("worker-1"));
    other
        .extend_by_holder(&slot, permit.holder(), Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(other.break_lock(&slot).await.unwrap(), 1);
    tokio::time::timeout(Duration::from_secs(5), permit.lost_signal().wait())
        .await
        .expect("the broken permit's holder hears it");
    assert!(!permit.is_held());

    // The counted form needs Quorum::All, as before.
    let counted = locks.semaphore(&key, 2).counted().try_acquire().await;
    assert!(matches!(
        counted,
        Err(Error::InvalidConfig {
            field: "permits",
            ..
        })
    ));
    for bad in [0, MAX_SLOTS + 1] {
        let e = locks.semaphore(&key, bad).try_acquire().await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidConfig {
                    field: "permits",
                    ..
                }
            ),
            "{bad}: {e}"
        );
    }
    // The broken slot stays taken until the broken entry would have expired: one is free.
    let a = locks.semaphore(&key, 2).try_acquire().await.unwrap();
    assert!(a.is_some());
    assert!(locks
        .semaphore(&key, 2)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    // A key whose longest slot name is too long: one typed error, before any node is
    // asked, whichever slot a round would start at.
    let long = "k".repeat(quorum_lock::MAX_KEY_LEN - 2);
    for _ in 0..8 {
        let e = locks.semaphore(&long, 12).try_acquire().await.unwrap_err();
        assert!(matches!(e, Error::InvalidKey { .. }), "{e}");
        assert!(e.to_string().contains("slot 11"), "{e}");
    }
    // A wait that ends on a full semaphore is a wait timeout naming the key.
    let key = unique_key("slot-full");
    let a = locks.semaphore(&key, 2).try_acquire().await.unwrap();
    let b = locks.semaphore(&key, 2).try_acquire().await.unwrap();
    assert!(a.is_some() && b.is_some(), "both slots free again");
    let e = other
        .semaphore(&key, 2)
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert!(e.is_wait_timeout(), "{e}");
    assert!(e.to_string().contains(&key), "{e}");
}

/// A cancelled acquire (a timeout around it at every step of its rounds) leaves no slot
/// taken and the next call works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_leaves_no_slot_taken() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("slot-cancel");
    for step in 0..12u64 {
        let cut = Duration::from_micros(step * 400);
        let _ = tokio::time::timeout(cut, locks.semaphore(&key, 2).acquire()).await;
    }
    locks.finish_background().await;
    let a = locks.semaphore(&key, 2).try_acquire().await.unwrap();
    let b = locks.semaphore(&key, 2).try_acquire().await.unwrap();
    assert!(
        a.is_some() && b.is_some(),
        "both slots free after the cancelled calls"
    );
}
