//! Combinations through the public API, written by a review that tried to break the move of
//! the fair lock's client side behind the kind seam: holder values of every form (parsed,
//! given up by every kind, used by another client, forged), a single fair try while others
//! wait, waits for itself, cancelled and aborted waiters of several clients around hand-offs,
//! a waiter cut off from a quorum, barging, and fencing through hand-offs.

use std::time::Duration;

use super::{any_line_keys, line, line_lengths, start_waiting};
use crate::common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Error, Holder, HolderForm, Quorum, QuorumLock, MAX_HOLDER_LEN};

const LONG: Duration = Duration::from_secs(30);

async fn tickets(fleet: &Fleet, key: &str) -> Vec<Option<u64>> {
    let mut v = Vec::new();
    for i in 0..fleet.len() {
        let mut c = conn(fleet, i).await;
        let t: Option<u64> = redis::cmd("GET")
            .arg(quorum_lock::names::tickets(key.as_bytes()))
            .query_async(&mut c)
            .await
            .unwrap();
        v.push(t);
    }
    v
}

async fn until_line_len(fleet: &Fleet, key: &str, n: usize) {
    eventually(fleet, LONG, &format!("{n} in line everywhere"), || async {
        line_lengths(fleet, key).await.iter().all(|&l| l == n)
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Holder::parse and Debug

#[test]
fn holder_parse_edges() {
    for bad in ["", " ", "a b", "x\n", "\t", "é", "a\u{7f}"] {
        let e = Holder::parse(bad).unwrap_err();
        assert!(matches!(e, Error::InvalidHolder { .. }), "{bad:?}: {e:?}");
    }
    assert!(Holder::parse(&"x".repeat(MAX_HOLDER_LEN)).is_ok());
    assert!(Holder::parse(&"x".repeat(MAX_HOLDER_LEN + 1)).is_err());
    let secret = "0123456789abcdef0123456789abcdef";
    let cases: &[(&str, HolderForm, Option<&str>)] = &[
        (secret, HolderForm::Plain, None),
        ("fair:w:s:g", HolderForm::Fair, Some("w")),
        ("fair:w:s:h3", HolderForm::Fair, Some("w")),
        ("fair:w:s:0123456789abcdef", HolderForm::Fair, Some("w")),
        ("fair:w:s:", HolderForm::Plain, None),
        ("fair:w:s", HolderForm::Plain, None),
        ("fair::s:g", HolderForm::Plain, None),
        ("fair:w::g", HolderForm::Plain, None),
        ("fair:w:s:g:x", HolderForm::Plain, None),
        ("FAIR:w:s:g", HolderForm::Plain, None),
        ("c:o:s", HolderForm::Owner, None),
    ];
    for (v, form, waiter) in cases {
        let h = Holder::parse(v).unwrap();
        assert_eq!(h.form(), *form, "{v}");
        assert_eq!(h.fair_waiter(), *waiter, "{v}");
        assert_eq!(h.as_str(), *v);
    }
    let h = Holder::parse(&format!("fair:abcd1234.w:{secret}:g")).unwrap();
    assert!(!format!("{h:?}").contains(secret), "{h:?}");
    let h = Holder::parse(&format!("c:o:{secret}")).unwrap();
    assert!(!format!("{h:?}").contains(secret), "{h:?}");
    let e = Holder::parse(&format!("{secret} ")).unwrap_err();
    assert!(!e.to_string().contains(secret));
    assert!(!format!("{e:?}").contains(secret));
}

// ---------------------------------------------------------------------------------------
// into_holder on each kind

#[tokio::test]
async fn into_holder_on_each_kind() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let keys = [unique_key("ih-a"), unique_key("ih-b")];
    for (name, n, request) in kinds(2) {
        let guard = request(&locks, &keys[..n])
            .ttl(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let value = guard.holder().to_string();
        match (name, guard.into_holder()) {
            ("mutex" | "fair", Ok(h)) => {
                assert_eq!(h, value, "{name}");
                let parsed = Holder::parse(&h).unwrap();
                let want = if name == "fair" {
                    HolderForm::Fair
                } else {
                    HolderForm::Plain
                };
                assert_eq!(parsed.form(), want, "{name}: {parsed:?}");
                if name == "fair" {
                    // fair:<8 hex>.<32 hex>:<32 hex>:<16 hex>
                    let parts: Vec<&str> = h.split(':').collect();
                    assert_eq!(parts.len(), 4, "{name}");
                    assert_eq!(parts[0], "fair");
                    let (tag, id) = parts[1].split_once('.').unwrap();
                    assert_eq!((tag.len(), id.len()), (8, 32));
                    assert_eq!(parts[2].len(), 32);
                    assert_eq!(parts[3].len(), 16);
                    assert!(parts[3].bytes().all(|b| b.is_ascii_hexdigit()));
                } else {
                    assert_eq!(h.len(), 32);
                }
                locks.release_by_holder(&keys[0], &h).await.unwrap();
            }
            ("mutex" | "fair", Err(_)) => panic!("{name}: into_holder refused"),
            (_, Ok(h)) => panic!("{name}: into_holder gave {}", h.len()),
            (_, Err(guard)) => {
                assert!(guard.is_held(), "{name}");
                guard.release().await.unwrap();
            }
        }
    }
    locks.finish_background().await;
    for k in &keys {
        for i in 0..fleet.len() {
            assert_eq!(entry(fleet, i, k).await, None);
        }
    }
}

// ---------------------------------------------------------------------------------------
// read/write waits for itself

#[tokio::test]
async fn read_write_waits_for_itself() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("wfi");
    let short = Duration::from_millis(300);
    let r = locks.read_lock(&key).ttl(LONG).acquire().await.unwrap();
    match locks.write_lock(&key).wait(short).acquire().await {
        Err(Error::WaitsForItself { held, wanted, .. }) => {
            assert_eq!((held, wanted), ("read", "write"))
        }
        other => panic!("{other:?}"),
    }
    // try_acquire is not a wait: it says busy.
    assert!(locks
        .write_lock(&key)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    r.release().await.unwrap();
    let w = locks.write_lock(&key).ttl(LONG).acquire().await.unwrap();
    for req in [locks.read_lock(&key), locks.write_lock(&key)] {
        match req.wait(short).acquire().await {
            Err(Error::WaitsForItself { held, .. }) => assert_eq!(held, "write"),
            other => panic!("{other:?}"),
        }
    }
    w.release().await.unwrap();
    // A fair lock held by the task, asked again: a plain timeout.
    let f = locks.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    match locks.fair_lock(&key).wait(short).acquire().await {
        Err(Error::WaitTimeout { .. }) => {}
        other => panic!("{other:?}"),
    }
    f.release().await.unwrap();
    // Read held by another task: a plain timeout.
    let r = locks.read_lock(&key).ttl(LONG).acquire().await.unwrap();
    let l2 = locks.clone();
    let k2 = key.clone();
    let other = tokio::spawn(async move { l2.write_lock(&k2).wait(short).acquire().await })
        .await
        .unwrap();
    assert!(matches!(other, Err(Error::WaitTimeout { .. })), "{other:?}");
    r.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// try_acquire of a fair lock while others wait

#[tokio::test]
async fn a_single_fair_try_does_not_join_the_line() {
    let fleet = shared_fleet();
    let key = unique_key("fair-try");
    let holder = client(fleet, Quorum::Majority).await;
    let waiter = client(fleet, Quorum::Majority).await;
    let trier = client(fleet, Quorum::Majority).await;
    let held = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let waits = start_waiting(&waiter, &key, LONG, LONG);
    until_line_len(fleet, &key, 1).await;
    let before = tickets(fleet, &key).await;
    for _ in 0..5 {
        assert!(trier.fair_lock(&key).try_acquire().await.unwrap().is_none());
    }
    trier.finish_background().await;
    assert_eq!(line_lengths(fleet, &key).await, vec![1; fleet.len()]);
    assert_eq!(
        tickets(fleet, &key).await,
        before,
        "a single try drew a ticket"
    );
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waits)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    // The trier still cannot take it.
    assert!(trier.fair_lock(&key).try_acquire().await.unwrap().is_none());
    got.release().await.unwrap();
    // Free: a single try takes it.
    let t = trier.fair_lock(&key).try_acquire().await.unwrap().unwrap();
    t.release().await.unwrap();
    for c in [&holder, &waiter, &trier] {
        c.finish_background().await;
    }
    assert!(!any_line_keys(fleet, &key).await);
}

// ---------------------------------------------------------------------------------------
// fair holder values used by another client

#[tokio::test]
async fn fair_holder_values_extend_and_release_from_another_client() {
    let fleet = shared_fleet();
    let key = unique_key("fair-holder");
    let a = client(fleet, Quorum::Majority).await;
    let b = client(fleet, Quorum::Majority).await;
    let c = client(fleet, Quorum::Majority).await;
    let guard = a
        .fair_lock(&key)
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let h = guard.into_holder().unwrap();
    // Another client extends it.
    let v = c.extend_by_holder(&key, &h, LONG).await.unwrap();
    assert!(v > Duration::from_secs(20), "{v:?}");
    // A made-up suffix of the same base is refused (no entry has it).
    let (base, _) = h.rsplit_once(':').unwrap();
    for forged in [
        format!("{base}:g"),
        format!("{base}:h1"),
        format!("{base}:0000000000000000"),
    ] {
        match c.extend_by_holder(&key, &forged, LONG).await {
            Err(Error::LockLost { .. }) => {}
            other => panic!("forged: {other:?}"),
        }
    }
    // A waiter of b's, then c releases by holder: the waiter gets it at once.
    let waits = start_waiting(&b, &key, Duration::from_secs(5), LONG);
    until_line_len(fleet, &key, 1).await;
    let t0 = tokio::time::Instant::now();
    c.release_by_holder(&key, &h).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waits)
        .await
        .expect("the waiter got the lock after a release by holder")
        .unwrap()
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // The old holder value does nothing now.
    assert!(matches!(
        c.extend_by_holder(&key, &h, LONG).await,
        Err(Error::LockLost { .. })
    ));
    assert!(c.release_by_holder(&key, &h).await.is_err());
    assert!(got.is_held());
    // The live guard's holder, used by another client (not through the guard).
    let gh = got.holder().to_string();
    let v = c.extend_by_holder(&key, &gh, LONG).await.unwrap();
    assert!(v > Duration::from_secs(20));
    c.release_by_holder(&key, &gh).await.unwrap();
    // The guard itself no longer holds anything on the nodes.
    let r = got.release().await;
    eprintln!("release of a guard released by holder from another client: {r:?}");
    for x in [&a, &b, &c] {
        x.finish_background().await;
    }
    assert!(!any_line_keys(fleet, &key).await);
    for i in 0..fleet.len() {
        assert_eq!(entry(fleet, i, &key).await, None);
    }
}

/// A waiter handed the lock by its own client's release holds the hand-off value
/// `<base>:h<round>`: its holder value works from another client, and its release hands on.
#[tokio::test]
async fn a_handed_over_holder_value_releases_from_another_client() {
    let fleet = shared_fleet();
    let key = unique_key("fair-handed");
    let a = client(fleet, Quorum::Majority).await;
    let b = client(fleet, Quorum::Majority).await;
    let c = client(fleet, Quorum::Majority).await;
    let held = a.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let own = start_waiting(&a, &key, LONG, LONG);
    until_line_len(fleet, &key, 1).await;
    let other = start_waiting(&b, &key, LONG, LONG);
    until_line_len(fleet, &key, 2).await;
    held.release().await.unwrap();
    let handed = tokio::time::timeout(Duration::from_secs(5), own)
        .await
        .expect("handed over")
        .unwrap()
        .unwrap();
    let h = handed.holder().to_string();
    let suffix = h.rsplit(':').next().unwrap();
    eprintln!("handed guard's suffix: {suffix}");
    assert!(
        suffix.starts_with('h') || suffix.len() == 16,
        "unexpected suffix {suffix}"
    );
    let parsed = Holder::parse(&h).unwrap();
    assert_eq!(parsed.form(), HolderForm::Fair);
    let h = handed.into_holder().unwrap();
    let v = c.extend_by_holder(&key, &h, LONG).await.unwrap();
    assert!(v > Duration::from_secs(20));
    c.release_by_holder(&key, &h).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), other)
        .await
        .expect("the next waiter got it")
        .unwrap()
        .unwrap();
    got.release().await.unwrap();
    for x in [&a, &b, &c] {
        x.finish_background().await;
    }
    assert!(!any_line_keys(fleet, &key).await);
}

// ---------------------------------------------------------------------------------------
// cancellations under contention between several clients

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_fair_waiters_of_several_clients_leave_nothing_behind() {
    let fleet = shared_fleet();
    let key = unique_key("fair-cancel");
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(
            builder(fleet, Quorum::Majority)
                .retry_delay(Duration::from_millis(20))
                .retry_jitter(Duration::from_millis(10))
                .queue_lease(Duration::from_secs(60))
                .build()
                .await
                .unwrap(),
        );
    }
    for round in 0..12u64 {
        // A holder for a short while; contenders of every client with random cancellations.
        let holder = clients[0].clone();
        let held = holder
            .fair_lock(&key)
            .ttl(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for (i, c) in clients.iter().enumerate().skip(1) {
            for j in 0..2u64 {
                let (c, key) = (c.clone(), key.clone());
                let cancel_ms = 1 + (round * 37 + i as u64 * 11 + j * 53) % 180;
                tasks.push(tokio::spawn(async move {
                    tokio::time::timeout(
                        Duration::from_millis(cancel_ms),
                        c.fair_lock(&key).ttl(Duration::from_secs(5)).acquire(),
                    )
                    .await
                }));
            }
        }
        // Release in the middle of the cancellations.
        tokio::time::sleep(Duration::from_millis((round * 13) % 120)).await;
        held.release().await.unwrap();
        for t in tasks {
            if let Ok(Ok(g)) = t.await.unwrap() {
                g.release().await.unwrap();
            }
        }
        // Now a normal acquire by each client in turn must get the key promptly.
        for (i, c) in clients.iter().enumerate() {
            let t0 = tokio::time::Instant::now();
            let g = c
                .fair_lock(&key)
                .ttl(Duration::from_secs(5))
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("round {round}, client {i}: {e}"));
            let took = t0.elapsed();
            assert!(
                took < Duration::from_secs(2),
                "round {round}, client {i}: took {took:?}; lines {:?}",
                line_lengths(fleet, &key).await
            );
            g.release().await.unwrap();
        }
    }
    for c in &clients {
        c.finish_background().await;
        assert_eq!(c.stats().waiting, 0);
    }
    eventually(
        fleet,
        Duration::from_secs(10),
        "no line keys left",
        || async { !any_line_keys(fleet, &key).await },
    )
    .await;
    for i in 0..fleet.len() {
        assert_eq!(entry(fleet, i, &key).await, None);
    }
}

/// Same-client waiters (hand-offs) with cancellations: a waiter cancelled just as its own
/// client's release hands it the lock must not leave the key held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_same_client_waiters_do_not_keep_a_handed_over_key() {
    let fleet = shared_fleet();
    let key = unique_key("fair-cancel-own");
    let locks = builder(fleet, Quorum::Majority)
        .retry_delay(Duration::from_secs(60))
        .retry_jitter(Duration::ZERO)
        .queue_lease(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let other = client(fleet, Quorum::Majority).await;
    for round in 0..10u64 {
        let held = locks
            .fair_lock(&key)
            .ttl(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        let own = {
            let (l, k) = (locks.clone(), key.clone());
            tokio::spawn(async move {
                tokio::time::timeout(
                    Duration::from_millis(200 + round * 7),
                    l.fair_lock(&k).ttl(Duration::from_secs(10)).acquire(),
                )
                .await
            })
        };
        until_line_len(fleet, &key, 1).await;
        // Release at about the moment the waiter is cancelled.
        tokio::time::sleep(Duration::from_millis(150 + round * 9)).await;
        held.release().await.unwrap();
        if let Ok(Ok(g)) = own.await.unwrap() {
            g.release().await.unwrap();
        }
        // Another client must get the key well within its TTL of 10 s.
        another_client_gets_it_soon(&other, &key, &format!("round {round}")).await;
    }
    nothing_left(fleet, &key, &locks, &other).await;
}

// ---------------------------------------------------------------------------------------
// a waiter cut off from a quorum takes a new identity and still gets the lock

#[tokio::test]
async fn a_cut_off_waiter_rejoins_under_a_new_identity_and_gets_the_lock() {
    let fleet = own_fleet(3);
    let key = unique_key("fair-rejoin");
    let mk = || {
        builder(&fleet, Quorum::Majority)
            .node_timeout(Duration::from_millis(250))
            .queue_lease(Duration::from_secs(2))
            .retry_delay(Duration::from_millis(50))
            .retry_jitter(Duration::from_millis(20))
            .build()
    };
    let holder = mk().await.unwrap();
    let waiter = mk().await.unwrap();
    let held = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let waits = start_waiting(&waiter, &key, Duration::from_secs(5), LONG);
    until_line_len(&fleet, &key, 1).await;
    let first_id = line(&fleet, 0, &key).await[0].clone();
    // Cut the waiter off: two of three nodes paused, until one of its attempts failed.
    let failed = waiter.stats().failed;
    fleet.pause(1).unwrap();
    fleet.pause(2).unwrap();
    eventually(&fleet, LONG, "an attempt of the waiter failed", || async {
        waiter.stats().failed > failed
    })
    .await;
    fleet.resume(1).unwrap();
    fleet.resume(2).unwrap();
    // Back in line everywhere, under a new identity.
    let rejoined = std::sync::Mutex::new(String::new());
    eventually(
        &fleet,
        LONG,
        "the waiter is in line again, renamed",
        || async {
            let mut ids = Vec::new();
            for i in 0..fleet.len() {
                ids.push(line(&fleet, i, &key).await);
            }
            let first = ids[0].clone();
            let renamed =
                first.len() == 1 && first[0] != first_id && ids.iter().all(|l| *l == first);
            if renamed {
                *rejoined.lock().unwrap() = first[0].clone();
            }
            renamed
        },
    )
    .await;
    let rejoined = rejoined.into_inner().unwrap();
    // The holder lets go; the waiter gets the lock under its new identity.
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(15), waits)
        .await
        .expect("the cut-off waiter got the lock")
        .unwrap()
        .unwrap();
    let h = Holder::parse(got.holder()).unwrap();
    assert_eq!(h.form(), HolderForm::Fair);
    assert_eq!(h.fair_waiter(), Some(rejoined.as_str()));
    got.release().await.unwrap();
    holder.finish_background().await;
    waiter.finish_background().await;
    eventually(
        &fleet,
        Duration::from_secs(10),
        "no line keys left",
        || async { !any_line_keys(&fleet, &key).await },
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// more combinations

/// The holder's own client, asking again right after its release while a waiter of another
/// client is in line, does not barge (single try or wait).
#[tokio::test]
async fn a_releasing_client_does_not_barge_past_the_line() {
    let fleet = shared_fleet();
    let key = unique_key("fair-barge");
    let a = client(fleet, Quorum::Majority).await;
    let b = client(fleet, Quorum::Majority).await;
    for _ in 0..5 {
        let held = a.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
        let waits = start_waiting(&b, &key, Duration::from_secs(5), LONG);
        until_line_len(fleet, &key, 1).await;
        held.release().await.unwrap();
        let tried = a.fair_lock(&key).try_acquire().await.unwrap();
        assert!(
            tried.is_none(),
            "the releasing client barged with a single try"
        );
        let got = waits.await.unwrap().unwrap();
        got.release().await.unwrap();
    }
    a.finish_background().await;
    b.finish_background().await;
    assert!(!any_line_keys(fleet, &key).await);
}

/// Waiters of one client aborted at about the moment its release hands the lock over: the key
/// never stays held by a request that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_an_own_waiter_around_the_hand_off_leaves_the_key_free() {
    let fleet = shared_fleet();
    let key = unique_key("fair-abort-handoff");
    let locks = builder(fleet, Quorum::Majority)
        .retry_delay(Duration::from_secs(60))
        .retry_jitter(Duration::ZERO)
        .queue_lease(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let other = client(fleet, Quorum::Majority).await;
    for round in 0..16u64 {
        let held = locks
            .fair_lock(&key)
            .ttl(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        let own = start_waiting(&locks, &key, Duration::from_secs(20), LONG);
        until_line_len(fleet, &key, 1).await;
        let release = tokio::spawn(held.release());
        if round % 4 != 0 {
            tokio::time::sleep(Duration::from_micros(round * 300)).await;
        }
        own.abort();
        let got = own.await;
        release.await.unwrap().unwrap();
        let kept = matches!(got, Ok(Ok(_)));
        if let Ok(Ok(g)) = got {
            g.release().await.unwrap();
        }
        let round = format!("round {round} (own waiter got it: {kept})");
        another_client_gets_it_soon(&other, &key, &round).await;
    }
    nothing_left(fleet, &key, &locks, &other).await;
}

/// `other` takes the fair lock `key` (waiting up to 20 s) in less than 3 s, and lets it go.
pub(super) async fn another_client_gets_it_soon(other: &QuorumLock, key: &str, round: &str) {
    let t0 = tokio::time::Instant::now();
    let g = other
        .fair_lock(key)
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "{round}: took {:?}",
        t0.elapsed()
    );
    g.release().await.unwrap();
}

/// Once both clients' calls landed, `locks` has no waiter left and `key` no line.
async fn nothing_left(fleet: &Fleet, key: &str, locks: &QuorumLock, other: &QuorumLock) {
    locks.finish_background().await;
    other.finish_background().await;
    assert_eq!(locks.stats().waiting, 0);
    assert!(!any_line_keys(fleet, key).await);
}

/// Fencing tokens keep rising through hand-offs within a client and releases by holder value.
#[tokio::test]
async fn fencing_rises_through_hand_offs_and_releases_by_holder() {
    let fleet = shared_fleet();
    let key = unique_key("fair-fence");
    let a = client(fleet, Quorum::Majority).await;
    let c = client(fleet, Quorum::Majority).await;
    let mut last = 0;
    let mut held = a
        .fair_lock(&key)
        .ttl(LONG)
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    for round in 0..6 {
        last = held.fencing_token().unwrap().max(last);
        let next = {
            let (a, key) = (a.clone(), key.clone());
            tokio::spawn(async move { a.fair_lock(&key).ttl(LONG).fencing(true).acquire().await })
        };
        until_line_len(fleet, &key, 1).await;
        if round % 2 == 0 {
            held.release().await.unwrap();
        } else {
            let h = held.into_holder().unwrap();
            // Through another client: no hand-off within a's client, the nodes grant it.
            c.release_by_holder(&key, &h).await.unwrap();
        }
        held = tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .expect("next holder")
            .unwrap()
            .unwrap();
        let t = held.fencing_token().unwrap();
        assert!(t > last, "round {round}: token {t} after {last}");
    }
    held.release().await.unwrap();
    a.finish_background().await;
    c.finish_background().await;
    assert!(!any_line_keys(fleet, &key).await);
}

/// Bad holder values through the calls: typed errors that never quote the value; the key is
/// checked first, the TTL after the holder.
#[tokio::test]
async fn bad_holder_values_through_the_calls() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("bad-holder");
    let secret = "s3cret-0123456789abcdef";
    for bad in [
        format!("{secret}\n"),
        format!("fair:w:{secret} :g"),
        "x".repeat(257),
    ] {
        for e in [
            locks.extend_by_holder(&key, &bad, LONG).await.unwrap_err(),
            locks.release_by_holder(&key, &bad).await.unwrap_err(),
            locks
                .extend_by_holder(&key, &bad, Duration::ZERO)
                .await
                .unwrap_err(),
        ] {
            assert!(matches!(e, Error::InvalidHolder { .. }), "{e:?}");
            assert!(!e.to_string().contains(secret) && !format!("{e:?}").contains(secret));
        }
        let e = locks.release_by_holder("", &bad).await.unwrap_err();
        assert!(matches!(e, Error::InvalidKey { .. }), "{e:?}");
    }
    let e = locks
        .extend_by_holder(&key, "fair:w:s:g", Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidTtl { .. }), "{e:?}");
    // A well-formed fair value nobody holds: refused, nothing created.
    assert!(matches!(
        locks.extend_by_holder(&key, "fair:w:s:g", LONG).await,
        Err(Error::LockLost { .. })
    ));
    assert!(locks.release_by_holder(&key, "fair:w:s:g").await.is_err());
    locks.finish_background().await;
    assert!(!any_line_keys(fleet, &key).await);
}
