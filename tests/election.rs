//! Who holds a lock (`LockRequest::label`, `QuorumLock::holder_of`) and leader election
//! (`QuorumLock::election`: campaign, proclaim, resign, leader, observe), across separate
//! clients on real servers, with nodes killed and frozen and a leader cut off.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{names, Error, HeldAs, Quorum, MAX_LABEL_LEN};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_shows_who_holds_a_lock_to_another_client_and_goes_with_it() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    for fair in [false, true] {
        let key = unique_key("labelled");
        let request = match fair {
            false => holder.lock(&key),
            true => holder.fair_lock(&key),
        };
        let before = SystemTime::now() - Duration::from_secs(1);
        let guard = request
            .label("host-7/job-42")
            .fencing(true)
            .acquire()
            .await
            .unwrap();
        let seen = other.holder_of(&key).await.unwrap().expect("held");
        assert_eq!(seen.kind, if fair { HeldAs::Fair } else { HeldAs::Mutex });
        assert_eq!(seen.label.as_deref(), Some("host-7/job-42"));
        assert_eq!(seen.holders, 1);
        assert_eq!(seen.fencing_token, guard.fencing_token());
        assert!(
            seen.since
                .is_some_and(|s| s >= before && s <= SystemTime::now()),
            "{seen:?}"
        );
        assert!(
            seen.ttl > Duration::ZERO && seen.ttl <= Duration::from_secs(30),
            "{seen:?}"
        );
        // The record on the nodes holds the holder's digest, never its value.
        let mut conn = conn(fleet, 0).await;
        let record: Vec<String> = redis::cmd("HGETALL")
            .arg(names::holder_record(key.as_bytes()))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(record.iter().any(|f| f == "host-7/job-42"), "{record:?}");
        assert!(
            !record.iter().any(|f| f.contains(guard.holder())),
            "{record:?}"
        );
        guard.release().await.unwrap();
        assert_eq!(other.holder_of(&key).await.unwrap(), None);
        // The next holder without a label shows none: the old record names the old holder.
        let next = other
            .try_acquire(&key, Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        let seen = holder.holder_of(&key).await.unwrap().expect("held");
        assert_eq!((seen.label, seen.since), (None, None));
        next.release().await.unwrap();
    }
}

/// The labels `holder_of` shows, as a sorted list.
fn labels(seen: &quorum_lock::Holding) -> Vec<&str> {
    let mut labels: Vec<&str> = seen.labels.iter().map(|l| l.label.as_str()).collect();
    labels.sort_unstable();
    labels
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_lasts_as_long_as_the_watchdog_keeps_the_lock_of_every_kind() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::All).await;
    let (key, set_key) = (unique_key("label-renewed"), unique_key("label-renewed-2"));
    let lease = Duration::from_millis(600);
    let requests = [
        locks.lock(&key).watchdog(lease).label("mutex"),
        locks
            .semaphore(key.clone() + "s", 2)
            .counted()
            .watchdog(lease)
            .label("permit"),
        locks
            .read_lock(key.clone() + "r")
            .watchdog(lease)
            .label("reader"),
        locks
            .lock_all([&set_key, &(set_key.clone() + "b")])
            .watchdog(lease)
            .label("set"),
    ];
    let mut held = Vec::new();
    for request in requests {
        held.push(request.acquire().await.unwrap());
    }
    // Three leases later the records are still there: the renewals moved their expiry too.
    tokio::time::sleep(lease * 3).await;
    for (k, label) in [
        (key.clone(), "mutex"),
        (key.clone() + "s", "permit"),
        (key.clone() + "r", "reader"),
        (set_key.clone(), "set"),
        (set_key.clone() + "b", "set"),
    ] {
        let seen = locks.holder_of(&k).await.unwrap().expect("held");
        assert_eq!(labels(&seen), [label], "{k}: {seen:?}");
    }
    for guard in held {
        assert!(guard.is_held());
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_permit_reader_and_key_of_a_set_shows_its_own_label() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::All).await;
    let other = client(fleet, Quorum::All).await;
    let key = unique_key("shared");
    let before = SystemTime::now() - Duration::from_secs(1);
    let a = locks
        .semaphore(&key, 3)
        .counted()
        .label("permit-a")
        .acquire()
        .await
        .unwrap();
    let b = other.semaphore(&key, 3).counted().acquire().await.unwrap();
    let c = other
        .semaphore(&key, 3)
        .counted()
        .label("permit-c")
        .acquire()
        .await
        .unwrap();
    let seen = locks.holder_of(&key).await.unwrap().expect("held");
    assert_eq!(
        (seen.kind, seen.holders, seen.label.as_deref()),
        (HeldAs::Semaphore, 3, None)
    );
    assert_eq!(labels(&seen), ["permit-a", "permit-c"]);
    assert!(seen.labels.iter().all(|l| l
        .since
        .is_some_and(|s| s >= before && s <= SystemTime::now())));
    // A released permit's label goes with it; a new holder's replaces nothing of the others'.
    a.release().await.unwrap();
    let d = locks
        .semaphore(&key, 3)
        .counted()
        .label("permit-d")
        .acquire()
        .await
        .unwrap();
    let seen = other.holder_of(&key).await.unwrap().expect("held");
    assert_eq!(labels(&seen), ["permit-c", "permit-d"]);
    drop((b, c, d));

    let key = unique_key("readers");
    let r1 = locks
        .read_lock(&key)
        .label("reader-1")
        .acquire()
        .await
        .unwrap();
    let r2 = other
        .read_lock(&key)
        .label("reader-2")
        .acquire()
        .await
        .unwrap();
    let seen = locks.holder_of(&key).await.unwrap().expect("held");
    assert_eq!((seen.kind, seen.holders), (HeldAs::Read, 2));
    assert_eq!(labels(&seen), ["reader-1", "reader-2"]);
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    // The writer after them shows its own label, not the readers'.
    let w = other
        .write_lock(&key)
        .label("writer")
        .acquire()
        .await
        .unwrap();
    let seen = locks.holder_of(&key).await.unwrap().expect("held");
    assert_eq!(
        (seen.kind, seen.label.as_deref(), labels(&seen)),
        (HeldAs::Mutex, Some("writer"), vec!["writer"])
    );
    w.release().await.unwrap();
    // And readers after a writer show theirs.
    let r3 = locks
        .read_lock(&key)
        .label("reader-3")
        .acquire()
        .await
        .unwrap();
    let seen = other.holder_of(&key).await.unwrap().expect("held");
    assert_eq!((seen.kind, seen.label.as_deref()), (HeldAs::Read, None));
    assert_eq!(labels(&seen), ["reader-3"]);
    r3.release().await.unwrap();

    // A multi-key lock's label shows on each key, also after an extend by holder value on
    // its second key.
    let (k1, k2) = (unique_key("set-a"), unique_key("set-b"));
    let set = locks
        .lock_all([&k1, &k2])
        .label("set")
        .acquire()
        .await
        .unwrap();
    for k in [&k1, &k2] {
        let seen = other.holder_of(k).await.unwrap().expect("held");
        assert_eq!(
            (seen.kind, seen.label.as_deref()),
            (HeldAs::Mutex, Some("set")),
            "{k}"
        );
    }
    let token = set.holder().to_string();
    other
        .extend_by_holder(&k2, &token, Duration::from_secs(20))
        .await
        .unwrap();
    let seen = other.holder_of(&k2).await.unwrap().expect("held");
    assert_eq!(seen.label.as_deref(), Some("set"));
    set.release().await.unwrap();
    assert_eq!(other.holder_of(&k1).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_of_refuses_bad_input() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("bad-labels");
    // A label that is not a public line of text: refused before anything is sent.
    let long = "x".repeat(MAX_LABEL_LEN + 1);
    for result in [
        locks
            .read_lock(&key)
            .label("two\nlines")
            .try_acquire()
            .await,
        locks.semaphore(&key, 1).label("").try_acquire().await,
        locks
            .lock_all([&key, &unique_key("b")])
            .label("evil\u{202E}txt")
            .try_acquire()
            .await,
        locks.lock(&key).label(long).try_acquire().await,
    ] {
        let e = result.unwrap_err();
        assert!(
            matches!(e, Error::InvalidConfig { field: "label", .. }),
            "{e}"
        );
    }
    assert_eq!(locks.holder_of(&key).await.unwrap(), None);
    assert!(matches!(
        locks.holder_of("").await,
        Err(Error::InvalidKey { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successive_leaders_of_separate_clients_have_rising_terms_and_one_leads_at_a_time() {
    let fleet = shared_fleet();
    let name = unique_key("election");
    let reader = client(fleet, Quorum::Majority).await;
    assert_eq!(reader.election(&name).leader().await.unwrap(), None);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client(fleet, Quorum::Majority).await);
    }
    let mut last_term = 0;
    // Each client campaigns; the first wins at once, the others wait for its resignation.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for (i, locks) in clients.iter().enumerate() {
        let election = locks.election(&name);
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let leading = election.campaign(format!("node-{i}")).await.unwrap();
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            tx.send((i, leading.term(), done_tx)).unwrap();
            let _ = done_rx.await;
            assert!(leading.is_leader());
            leading.resign().await.unwrap();
        }));
    }
    for _ in 0..3 {
        let (i, term, done) = rx.recv().await.unwrap();
        assert!(term > last_term, "terms rise: {term} after {last_term}");
        last_term = term;
        let leader = reader
            .election(&name)
            .leader()
            .await
            .unwrap()
            .expect("a leader");
        assert_eq!((leader.value, leader.term), (format!("node-{i}"), term));
        assert!(leader.since.is_some());
        done.send(()).unwrap();
    }
    for task in tasks {
        task.await.unwrap();
    }
    finish_background(&clients).await;
    assert_eq!(reader.election(&name).leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_hears_a_new_value_a_resignation_and_a_new_leader_within_a_round_trip() {
    let fleet = shared_fleet();
    let name = unique_key("observed");
    let watcher = client(fleet, Quorum::Majority).await;
    let a = client(fleet, Quorum::Majority).await;
    let b = client(fleet, Quorum::Majority).await;
    // Reads on a timer only every minute: every change below must come from announcements.
    let mut observer = watcher
        .election(&name)
        .observe()
        .every(Duration::from_secs(60));
    assert_eq!(observer.next().await.unwrap(), None);
    let bound = Duration::from_secs(5);
    let mut leading = a.election(&name).campaign("a-1").await.unwrap();
    let seen = tokio::time::timeout(bound, observer.next())
        .await
        .expect("heard")
        .unwrap();
    assert_eq!(
        seen.map(|l| (l.value, l.term)),
        Some(("a-1".into(), leading.term()))
    );
    leading.proclaim("a-2").await.unwrap();
    assert_eq!(leading.value(), "a-2");
    let seen = tokio::time::timeout(bound, observer.next())
        .await
        .expect("heard")
        .unwrap();
    assert_eq!(
        seen.map(|l| (l.value, l.term)),
        Some(("a-2".into(), leading.term()))
    );
    let first_term = leading.term();
    let waiting = tokio::spawn({
        let election = b.election(&name);
        async move { election.campaign("b-1").await.unwrap() }
    });
    leading.resign().await.unwrap();
    // Nobody, then b (or straight to b, when b was elected before the observer read).
    let mut seen = tokio::time::timeout(bound, observer.next())
        .await
        .expect("heard")
        .unwrap();
    if seen.is_none() {
        seen = tokio::time::timeout(bound, observer.next())
            .await
            .expect("heard")
            .unwrap();
    }
    let next = waiting.await.unwrap();
    let seen = seen.expect("b leads");
    assert_eq!((seen.value.as_str(), seen.term), ("b-1", next.term()));
    assert!(next.term() > first_term);
    next.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_election_input_is_refused_before_anything_is_sent() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let name = unique_key("bad-election");
    for value in [
        "",
        "a\tb",
        &"v".repeat(quorum_lock::MAX_LEADER_VALUE_LEN + 1),
    ] {
        let e = locks.election(&name).campaign(value).await.unwrap_err();
        assert!(
            matches!(e, Error::InvalidConfig { field: "value", .. }),
            "{e}"
        );
    }
    assert_eq!(locks.election(&name).leader().await.unwrap(), None);
    let e = locks.election("").campaign("v").await.unwrap_err();
    assert!(matches!(e, Error::InvalidKey { .. }), "{e}");
    // A bounded campaign against a leader gives up with the wait's error.
    let leading = locks.election(&name).campaign("first").await.unwrap();
    let other = client(fleet, Quorum::Majority).await;
    let e = other
        .election(&name)
        .wait(Duration::from_millis(300))
        .campaign("second")
        .await
        .unwrap_err();
    assert!(e.is_wait_timeout(), "{e}");
    leading.resign().await.unwrap();
}

/// A leader cut off from every node (its connections black-holed) stops believing it leads by
/// its deadline, before the next leader is elected; the next term is higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_knows_it_is_deposed_before_the_next_leader_is_elected() {
    let fleet = Fleet::builder().nodes(3).proxied(true).start().unwrap();
    let name = unique_key("cut-off");
    let lease = Duration::from_millis(900);
    let cut = builder(&fleet, Quorum::Majority).build().await.unwrap();
    let direct: Vec<String> = (0..3).map(|i| fleet.direct_url(i)).collect();
    let other = quorum_lock::QuorumLock::builder()
        .nodes(direct)
        .node_timeout(Duration::from_millis(250))
        .build()
        .await
        .unwrap();
    let leading = cut
        .election(&name)
        .lease(lease)
        .campaign("old")
        .await
        .unwrap();
    let old_term = leading.term();
    for i in 0..3 {
        fleet.proxy(i).black_hole();
    }
    let next = other
        .election(&name)
        .lease(lease)
        .campaign("new")
        .await
        .unwrap();
    let elected = Instant::now();
    assert!(
        !leading.is_leader(),
        "the old leader still believed it led when the next was elected"
    );
    assert!(leading.deadline() <= elected);
    assert!(next.term() > old_term);
    let seen = other
        .election(&name)
        .leader()
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!((seen.value.as_str(), seen.term), ("new", next.term()));
    next.resign().await.unwrap();
    for i in 0..3 {
        fleet.proxy(i).heal();
    }
    drop(leading);
}

/// Elections go on with a minority of nodes killed or frozen; the leader read answers fast
/// with a frozen node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_go_on_with_a_node_killed_and_one_frozen() {
    let fleet = own_fleet(5);
    let name = unique_key("faults");
    let a = client(&fleet, Quorum::Majority).await;
    let b = client(&fleet, Quorum::Majority).await;
    let leading = a
        .election(&name)
        .lease(Duration::from_secs(2))
        .campaign("a")
        .await
        .unwrap();
    fleet.kill(1).unwrap();
    fleet.pause(3).unwrap();
    // The watchdog keeps the leadership over the three nodes left.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(leading.is_leader());
    let started = Instant::now();
    let seen = b.election(&name).leader().await.unwrap().expect("a leader");
    assert_eq!((seen.value.as_str(), seen.term), ("a", leading.term()));
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "waited for the frozen node"
    );
    let term = leading.term();
    let waiting = tokio::spawn({
        let election = b.election(&name);
        async move { election.campaign("b").await.unwrap() }
    });
    leading.resign().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("elected")
        .unwrap();
    assert!(next.term() > term);
    fleet.resume(3).unwrap();
    next.resign().await.unwrap();
}

/// `break_lock`: the holder's next renewal finds its lock lost, and nobody takes the key
/// before the broken entries would have expired; `holder_of` shows it broken meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_lock_is_lost_at_its_holders_next_renewal_and_kept_from_others_until_it_expires() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let admin = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    let key = unique_key("broken");
    assert_eq!(admin.break_lock(&key).await.unwrap(), 0, "a free key");
    let lease = Duration::from_millis(900);
    let guard = holder
        .lock(&key)
        .watchdog(lease)
        .label("stuck")
        .acquire()
        .await
        .unwrap();
    let broken_at = Instant::now();
    assert_eq!(admin.break_lock(&key).await.unwrap(), 1);
    let seen = other.holder_of(&key).await.unwrap().expect("kept");
    assert_eq!(
        (seen.kind, seen.holders, seen.label),
        (HeldAs::Broken, 0, None)
    );
    assert!(
        other.try_acquire(&key, lease).await.unwrap().is_none(),
        "kept from others"
    );
    tokio::time::timeout(lease, guard.lost())
        .await
        .expect("lost at the next renewal");
    assert!(!guard.is_held());
    // Free once the broken entries expire (a renewal had moved them on by at most a lease).
    let next = loop {
        if let Some(next) = other.try_acquire(&key, lease).await.unwrap() {
            break next;
        }
        assert!(broken_at.elapsed() < lease * 3, "still kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        !guard.is_held(),
        "the broken holder believed it held when the next one took it"
    );
    next.release().await.unwrap();
    drop(guard);
}

/// The breaking client's lock delay keeps the key that long at least; permits and readers are
/// broken too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_break_honours_the_lock_delay_and_breaks_permits_and_readers() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::All).await;
    let delay = Duration::from_millis(1200);
    let admin = builder(fleet, Quorum::Majority)
        .lock_delay(delay)
        .build()
        .await
        .unwrap();
    let key = unique_key("delayed-break");
    let short = Duration::from_millis(400);
    let guard = locks.try_acquire(&key, short).await.unwrap().unwrap();
    let broken_at = Instant::now();
    assert_eq!(admin.break_lock(&key).await.unwrap(), 1);
    tokio::time::sleep(short * 2).await;
    assert!(!guard.is_held());
    assert!(
        locks.try_acquire(&key, short).await.unwrap().is_none(),
        "within the delay"
    );
    let next = loop {
        if let Some(next) = locks.try_acquire(&key, short).await.unwrap() {
            break next;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        broken_at.elapsed() >= delay - Duration::from_millis(100),
        "{:?}",
        broken_at.elapsed()
    );
    drop(next);
    // Two permits of three and a reader: every holder broken, each finds it at its renewal.
    let sem = unique_key("broken-permits");
    let lease = Duration::from_millis(900);
    let a = locks
        .semaphore(&sem, 3)
        .counted()
        .watchdog(lease)
        .acquire()
        .await
        .unwrap();
    let b = locks
        .semaphore(&sem, 3)
        .counted()
        .watchdog(lease)
        .acquire()
        .await
        .unwrap();
    assert_eq!(admin.break_lock(&sem).await.unwrap(), 2);
    assert_eq!(
        locks.holder_of(&sem).await.unwrap().map(|h| h.kind),
        Some(HeldAs::Broken)
    );
    let rw = unique_key("broken-readers");
    let r = locks
        .read_lock(&rw)
        .watchdog(lease)
        .acquire()
        .await
        .unwrap();
    assert_eq!(admin.break_lock(&rw).await.unwrap(), 1);
    for guard in [&a, &b, &r] {
        tokio::time::timeout(lease, guard.lost())
            .await
            .expect("lost at the next renewal");
    }
    assert!(
        locks.write_lock(&rw).try_acquire().await.unwrap().is_none(),
        "kept from a writer"
    );
}

/// A broken leader is deposed: the next candidate leads once its entries expire, with a
/// higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_leader_is_deposed_and_the_next_one_has_a_higher_term() {
    let fleet = shared_fleet();
    let a = client(fleet, Quorum::Majority).await;
    let b = client(fleet, Quorum::Majority).await;
    let name = unique_key("broken-leader");
    let lease = Duration::from_millis(900);
    let leading = a.election(&name).lease(lease).campaign("a").await.unwrap();
    let waiting = tokio::spawn({
        let election = b.election(&name).lease(lease);
        async move { election.campaign("b").await.unwrap() }
    });
    assert_eq!(b.break_lock(&name).await.unwrap(), 1);
    assert_eq!(b.election(&name).leader().await.unwrap(), None);
    tokio::time::timeout(lease, leading.lost())
        .await
        .expect("deposed");
    let next = tokio::time::timeout(lease * 4, waiting)
        .await
        .expect("elected")
        .unwrap();
    assert!(!leading.is_leader());
    assert!(next.term() > leading.term());
    next.resign().await.unwrap();
}

/// A break's notice reaches a connected holder at once (not at its next renewal, a third of
/// its lease later); a request to release fires the holder's signal and touches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_hears_a_break_and_a_request_to_release_within_a_round_trip() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let admin = client(fleet, Quorum::Majority).await;
    let lease = Duration::from_secs(30);
    let key = unique_key("asked");
    let guard = holder.lock(&key).watchdog(lease).acquire().await.unwrap();
    assert!(!guard.is_release_requested());
    // Asked again until heard: the holder's subscription may still be under way just after
    // its client was built.
    let mut heard = false;
    for _ in 0..10 {
        assert_eq!(admin.request_release(&key).await.unwrap(), 1);
        let asked = tokio::time::timeout(Duration::from_millis(300), guard.release_requested());
        if asked.await.is_ok() {
            heard = true;
            break;
        }
    }
    assert!(heard, "never asked");
    assert!(
        guard.is_release_requested() && guard.is_held(),
        "asked, still held"
    );
    assert_eq!(admin.break_lock(&key).await.unwrap(), 1);
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost within a round trip, not at the renewal 10 s later");
    assert!(!guard.is_held());
    drop(guard);
    assert_eq!(admin.request_release(unique_key("free")).await.unwrap(), 0);
    // A leader asked to step down.
    let name = unique_key("asked-leader");
    let leading = holder.election(&name).campaign("l").await.unwrap();
    admin.request_release(&name).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), leading.release_requested())
        .await
        .expect("asked");
    leading.resign().await.unwrap();
}

/// A proclaim that failed (its requests held back, landing later) does not make a later one
/// report success while readers keep the earlier value: every proclaim takes a new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaim_after_a_failed_one_is_what_readers_see() {
    let fleet = Fleet::builder().nodes(3).proxied(true).start().unwrap();
    let name = unique_key("proclaims");
    let a = builder(&fleet, Quorum::Majority).build().await.unwrap();
    let direct: Vec<String> = (0..3).map(|i| fleet.direct_url(i)).collect();
    let b = quorum_lock::QuorumLock::builder()
        .nodes(direct)
        .build()
        .await
        .unwrap();
    let mut leading = a
        .election(&name)
        .lease(Duration::from_secs(20))
        .campaign("v1")
        .await
        .unwrap();
    fleet.proxy(1).black_hole();
    fleet.proxy(2).black_hole();
    assert!(leading.proclaim("X").await.is_err());
    fleet.proxy(1).heal();
    fleet.proxy(2).heal();
    // Until the nodes' circuit breakers let requests through again.
    let started = Instant::now();
    while let Err(e) = leading.proclaim("Y").await {
        assert!(started.elapsed() < Duration::from_secs(10), "{e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = b.election(&name).leader().await.unwrap().expect("a leader");
    assert_eq!(seen.value, "Y");
    leading.resign().await.unwrap();
}

/// A label (and a leader's value) lasts while the lock is extended by its holder value from
/// another client, and comes back with the entry after a node restarts empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_lasts_through_extends_by_holder_value_and_repairs() {
    let fleet = own_fleet(3);
    let a = client(&fleet, Quorum::Majority).await;
    let b = client(&fleet, Quorum::Majority).await;
    let key = unique_key("extended-label");
    let ttl = Duration::from_millis(1200);
    let guard = a
        .lock(&key)
        .ttl(ttl)
        .label("job-1")
        .acquire()
        .await
        .unwrap();
    let holder = guard.into_holder().unwrap();
    for _ in 0..4 {
        tokio::time::sleep(ttl / 3).await;
        b.extend_by_holder(&key, &holder, ttl).await.unwrap();
    }
    let seen = b.holder_of(&key).await.unwrap().expect("held");
    assert_eq!(seen.label.as_deref(), Some("job-1"));
    b.release_by_holder(&key, &holder).await.unwrap();
    // Each node restarts empty in turn; the watchdog's repairs put the entry and the record
    // back.
    let name = unique_key("repaired-leader");
    let lease = Duration::from_millis(900);
    let leading = a
        .election(&name)
        .lease(lease)
        .campaign("kept")
        .await
        .unwrap();
    for i in 0..3 {
        fleet.restart(i).unwrap();
        tokio::time::sleep(lease).await;
    }
    assert!(leading.is_leader());
    let seen = b.election(&name).leader().await.unwrap().expect("a leader");
    assert_eq!((seen.value.as_str(), seen.term), ("kept", leading.term()));
    leading.resign().await.unwrap();
}

/// A break refused on the nodes (an ACL rule without the notices' channel) changes nothing:
/// the permits and readers are still their holders', and no one more gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_break_that_fails_changes_nothing() {
    let rule = [
        "locker",
        "on",
        ">s3cret-pw",
        "resetkeys",
        "~acl:*",
        "~quorum-lock:*",
        "resetchannels",
        "&quorum-lock:released:{acl:*",
        "+@all",
    ];
    let (_fleet, urls) = acl_fleet(&rule);
    let connect = || {
        quorum_lock::QuorumLock::builder()
            .nodes(&urls)
            .quorum(Quorum::All)
            .node_timeout(Duration::from_millis(250))
            .build()
    };
    let (a, admin, other) = (
        connect().await.unwrap(),
        connect().await.unwrap(),
        connect().await.unwrap(),
    );
    let ttl = Duration::from_secs(20);
    let first = a
        .semaphore("acl:sem", 2)
        .counted()
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let second = a
        .semaphore("acl:sem", 2)
        .counted()
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let e = admin.break_lock("acl:sem").await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::NoQuorum {
                op: quorum_lock::Op::Break,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        other
            .semaphore("acl:sem", 2)
            .counted()
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a third permit"
    );
    let seen = other.holder_of("acl:sem").await.unwrap().expect("held");
    assert_eq!((seen.kind, seen.holders), (HeldAs::Semaphore, 2));
    let reader = a.read_lock("acl:rw").ttl(ttl).acquire().await.unwrap();
    assert!(admin.break_lock("acl:rw").await.is_err());
    assert!(
        other
            .write_lock("acl:rw")
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a writer"
    );
    for guard in [first, second, reader] {
        assert!(guard.is_held());
        guard.release().await.unwrap();
    }
}

/// A reentrant owner's first label stays while any of its guards holds; a later guard's
/// label does not replace it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_owners_first_label_stays() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("reentrant-label");
    let owner = locks.owner();
    let ttl = Duration::from_secs(10);
    let first = owner
        .lock(&key)
        .label("first")
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let second = owner
        .lock(&key)
        .label("second")
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let seen = locks.holder_of(&key).await.unwrap().expect("held");
    assert_eq!(seen.label.as_deref(), Some("first"));
    first.release().await.unwrap();
    let seen = locks.holder_of(&key).await.unwrap().expect("held");
    assert_eq!(seen.label.as_deref(), Some("first"));
    second.release().await.unwrap();
    assert_eq!(locks.holder_of(&key).await.unwrap(), None);
}
