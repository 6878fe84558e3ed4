//! The lock family: multi-key locks (`lock_all`) and semaphores with leased permits
//! (`semaphore`), on the mutex's machinery. Each has its exclusion test with the history
//! checker, its guard operations, and a negative control showing what its safety rule
//! (rollback of the whole set; `Quorum::All` for more than one permit) prevents.

#[path = "../common/mod.rs"]
mod common;
mod kinds;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use quorum_lock::testkit::history::{self, Interval};
use quorum_lock::testkit::{self, Fleet};
use quorum_lock::{Error, LockGuard, Quorum, QuorumLock};
use tokio::time::Instant;

/// Intervals, one per key of the guard, for the history checker (which checks per key).
fn begin(guard: &LockGuard, who: &str) -> Vec<Interval> {
    let first = Interval::begin(guard, who);
    guard
        .keys()
        .into_iter()
        .map(|k| Interval {
            key: String::from_utf8_lossy(k).into_owned(),
            ..first.clone()
        })
        .collect()
}

fn finish(intervals: Vec<Interval>, guard: &LockGuard) -> Vec<Interval> {
    intervals.into_iter().map(|i| i.finish(guard)).collect()
}

/// The most intervals open at one instant.
fn most_at_once(history: &[Interval]) -> usize {
    let mut events: Vec<(u64, i64)> = history
        .iter()
        .filter(|i| i.end > i.start)
        .flat_map(|i| [(i.start, 1), (i.end, -1)])
        .collect();
    // Ends before starts at the same instant: touching intervals do not overlap.
    events.sort();
    let (mut open, mut most) = (0i64, 0i64);
    for (_, d) in events {
        open += d;
        most = most.max(open);
    }
    most as usize
}

async fn raw_set_nx(fleet: &Fleet, i: usize, key: &str, value: &str) -> bool {
    let mut c = conn(fleet, i).await;
    let ok: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut c)
        .await
        .expect("SET");
    ok.is_some()
}

async fn raw_del(fleet: &Fleet, key: &str) {
    for i in 0..fleet.len() {
        let mut c = conn(fleet, i).await;
        let _: () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut c)
            .await
            .unwrap();
    }
}

/// The live permits of `key` on node `i` (members with an expiry in the future).
async fn permit_holders(fleet: &Fleet, i: usize, key: &str) -> Vec<String> {
    let mut c = conn(fleet, i).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
    let now = secs * 1000 + micros / 1000;
    redis::cmd("ZRANGEBYSCORE")
        .arg(key)
        .arg(format!("({now}"))
        .arg("+inf")
        .query_async(&mut c)
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Multi-key locks

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_overlapping_a_held_key_is_refused_and_leaves_no_entry_of_its_other_keys() {
    let fleet = shared_fleet();
    let (a, b, c) = (unique_key("a"), unique_key("b"), unique_key("c"));
    let holder = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    let held_b = holder
        .try_acquire(&b, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("b is free");

    let refused = other
        .lock_all([&c, &b, &a])
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap();
    assert!(refused.is_none(), "a set with a held key was granted");
    let waited = other
        .lock_all([&a, &b, &c])
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert!(waited.is_wait_timeout(), "{waited}");
    // The rollbacks have run on every node: no entry of a or c anywhere.
    other.finish_background().await;
    for i in 0..fleet.len() {
        for k in [&a, &c] {
            assert_eq!(entry(fleet, i, k).await, None, "node {i} kept {k}");
        }
    }
    // So a and c are free for anyone at once.
    let a_alone = holder
        .try_acquire(&a, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("a was left free by the refused set");
    a_alone.release().await.unwrap();

    held_b.release().await.unwrap();
    let set = other
        .lock_all([&c, &b, &a, &b])
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap()
        .expect("the whole set is free");
    let mut sorted = vec![a.clone(), b.clone(), c.clone()];
    sorted.sort();
    let keys: Vec<String> = set
        .keys()
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(keys, sorted, "keys deduplicated and sorted");
    assert_eq!(set.key(), sorted[0].as_bytes());
    let value = set.holder().to_string();
    for k in &sorted {
        assert!(
            nodes_holding(fleet, k, &value).await >= 3,
            "{k} not on a quorum"
        );
    }
    assert!(holder
        .try_acquire(&c, Duration::from_secs(5))
        .await
        .unwrap()
        .is_none());
    set.release().await.expect("release confirmed");
    other.finish_background().await;
    for k in &sorted {
        assert_eq!(nodes_holding(fleet, k, &value).await, 0, "{k} left behind");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_key_sets_are_refused_before_any_node_is_contacted() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let none: [&str; 0] = [];
    for result in [
        locks.lock_all(none).try_acquire().await,
        locks.lock_all(["ok", "quorum-lock:x"]).try_acquire().await,
        locks
            .lock_all((0..=quorum_lock::MAX_SET_KEYS).map(|i| format!("k{i}")))
            .try_acquire()
            .await,
    ] {
        assert!(
            matches!(result, Err(Error::InvalidKey { .. })),
            "{result:?}"
        );
    }
    assert_eq!(locks.stats().attempts, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_named_in_opposite_orders_make_progress_and_never_overlap() {
    const TASKS: usize = 16;
    const ROUNDS: usize = 4;
    let fleet = shared_fleet();
    let (a, b) = (unique_key("ab"), unique_key("ba"));
    let clients = [
        client(fleet, Quorum::Majority).await,
        client(fleet, Quorum::Majority).await,
    ];
    let history = Arc::new(Mutex::new(Vec::new()));
    let inside = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let locks = clients[t % 2].clone();
        // Half the tasks name {a, b}, half {b, a}.
        let keys = if t % 4 < 2 {
            [a.clone(), b.clone()]
        } else {
            [b.clone(), a.clone()]
        };
        let (history, inside, overlaps) = (history.clone(), inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locks
                    .lock_all(&keys)
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("the set within the wait time");
                let open = begin(&guard, &format!("task{t}"));
                for flag in inside.iter() {
                    if flag.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                for flag in inside.iter() {
                    flag.fetch_sub(1, Ordering::SeqCst);
                }
                let closed = finish(open, &guard);
                history.lock().unwrap().extend(closed);
                guard.release().await.expect("release confirmed");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("no progress: deadlock?")
            .expect("task panicked");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two sets held at once");
    let history = std::mem::take(&mut *history.lock().unwrap());
    assert_eq!(history.len(), TASKS * ROUNDS * 2);
    let report = history::check(&history);
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.keys, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_extends_releases_and_signals_its_loss() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let (a, b) = (unique_key("ext-a"), unique_key("ext-b"));
    let set = locks
        .lock_all([&a, &b])
        .ttl(Duration::from_secs(2))
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    set.extend(Duration::from_secs(20)).await.expect("extend");
    assert!(set.validity() > Duration::from_secs(19));
    // The acquire's and the extend's requests to every node landed (each returned at a quorum).
    locks.finish_background().await;
    let mut c = conn(fleet, 0).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&b)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(pttl > 19_000, "b not extended on node 0: {pttl}");
    let lost = set.lost_signal();
    assert!(!lost.is_fired());

    // One key of the set vanishes everywhere: the set is no longer held.
    raw_del(fleet, &b).await;
    let extended = set.extend(Duration::from_secs(20)).await;
    assert!(
        matches!(extended, Err(Error::LockLost { .. })),
        "{extended:?}"
    );
    tokio::time::timeout(Duration::from_secs(1), lost.wait())
        .await
        .expect("the loss signal fired");
    assert!(!set.is_held());
    // Extend changed nothing where b was missing: a keeps its TTL and b is not re-created.
    for i in 0..fleet.len() {
        assert_eq!(
            entry(fleet, i, &b).await,
            None,
            "extend re-created b on node {i}"
        );
    }
    let released = set.release().await;
    assert!(
        matches!(released, Err(Error::NotHeld { .. })),
        "{released:?}"
    );
    // Its release still deleted a, this holder's.
    locks.finish_background().await;
    for i in 0..fleet.len() {
        assert_eq!(entry(fleet, i, &a).await, None, "node {i} kept a");
    }

    let set = locks
        .lock_all([&a, &b])
        .ttl(Duration::from_secs(10))
        .try_acquire()
        .await
        .unwrap()
        .expect("free again");
    set.release().await.expect("release confirmed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_a_set_and_repairs_a_node_that_lost_one_key() {
    let fleet = own_fleet(3);
    let locks = builder(&fleet, Quorum::Majority)
        .watchdog_lease(Duration::from_millis(1500))
        .build()
        .await
        .unwrap();
    let (a, b) = (unique_key("wd-a"), unique_key("wd-b"));
    let set = locks.lock_all([&a, &b]).acquire().await.expect("free");
    let value = set.holder().to_string();
    // The acquire returned at a quorum: its request to the third node may still be on its
    // way. Node 0 must hold the entry before it can forget it.
    locks.finish_background().await;
    // Node 0's clock jumps: b (only) expires there at once.
    assert_eq!(fleet.expire_early(0, &b).unwrap(), 1);
    assert_eq!(entry(&fleet, 0, &b).await, None);
    // The entry is back on the node before the client has read the node's answer and
    // counted the repair: both are waited for.
    eventually(
        &fleet,
        Duration::from_secs(10),
        "the watchdog put b back on node 0, and counted it",
        || async {
            entry(&fleet, 0, &b).await.as_deref() == Some(value.as_str())
                && locks.stats().repaired >= 1
        },
    )
    .await;
    // Renewed through several leases.
    let start = Instant::now();
    eventually(
        &fleet,
        Duration::from_secs(10),
        "three renewals",
        || async { locks.stats().extended >= 3 },
    )
    .await;
    assert!(set.is_held(), "lost after {:?}", start.elapsed());
    let other = client(&fleet, Quorum::Majority).await;
    assert!(other
        .try_acquire(&a, Duration::from_secs(5))
        .await
        .unwrap()
        .is_none());
    set.release().await.expect("release confirmed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_of_sets_and_single_keys_increase_per_key() {
    const ROUNDS: usize = 6;
    let fleet = shared_fleet();
    let (a, b) = (unique_key("fa"), unique_key("fb"));
    let locks = client(fleet, Quorum::Majority).await;
    let history = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (t, keys) in [vec![a.clone()], vec![b.clone()], vec![b.clone(), a.clone()]]
        .into_iter()
        .enumerate()
    {
        let (locks, history) = (locks.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locks
                    .lock_all(&keys)
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .fencing(true)
                    .acquire()
                    .await
                    .expect("acquire");
                assert!(guard.fencing_token().is_some());
                let open = begin(&guard, &format!("task{t}"));
                tokio::time::sleep(Duration::from_millis(2)).await;
                history.lock().unwrap().extend(finish(open, &guard));
                guard.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task panicked");
    }
    let history = std::mem::take(&mut *history.lock().unwrap());
    assert_eq!(history.len(), ROUNDS * 4);
    let report = history::check(&history);
    assert!(report.is_safe(), "{report}");
    // No counter is above the largest token handed out: every increment belongs to a token.
    let largest = history.iter().filter_map(|i| i.token).max().unwrap();
    let mut c = conn(fleet, 0).await;
    let counters: Vec<Option<u64>> = redis::cmd("MGET")
        .arg(format!("quorum-lock:fence:{a}"))
        .arg(format!("quorum-lock:fence:{b}"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(counters.iter().flatten().max().copied().unwrap_or(0) <= largest);
}

/// Negative control: a multi-key lock taken key by key without rollback (what a naive client
/// does: SET NX each key, give up at the first refusal) breaks all-or-nothing: the keys it
/// took before the refusal stay behind and block others, although it holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_set_taken_key_by_key_without_rollback_leaves_blocking_entries() {
    let fleet = shared_fleet();
    let (a, b) = (unique_key("naive-a"), unique_key("naive-b"));
    let holder = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    let held_b = holder
        .try_acquire(&b, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("b is free");

    // The library's set: refused, rolled back, a left free.
    assert!(other
        .lock_all([&a, &b])
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    other.finish_background().await;
    let a_free = holder
        .try_acquire(&a, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("a free after the library's refused set");
    a_free.release().await.unwrap();
    // The release returns at a quorum: the raw writes below must come after it on every node.
    holder.finish_background().await;

    // The naive set: on every node, a is taken, b refused, and nothing rolled back.
    let naive = "naive-holder-value";
    let mut granted = 0;
    for i in 0..fleet.len() {
        let took_a = raw_set_nx(fleet, i, &a, naive).await;
        let took_b = took_a && raw_set_nx(fleet, i, &b, naive).await;
        granted += usize::from(took_a && took_b);
    }
    assert!(granted < 3, "the naive set cannot have its quorum");
    assert_eq!(nodes_holding(fleet, &a, naive).await, fleet.len());
    // All-or-nothing is broken: the naive client holds part of its set on every node, and it
    // blocks a holder of a that never competed for b.
    assert!(
        holder
            .try_acquire(&a, Duration::from_secs(5))
            .await
            .unwrap()
            .is_none(),
        "the naive set's leftovers should block a"
    );
    raw_del(fleet, &a).await;
    held_b.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// Semaphores

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_permits_under_all_never_admit_a_fourth_of_eight_tasks() {
    const TASKS: usize = 8;
    const ROUNDS: usize = 4;
    let fleet = shared_fleet();
    let key = unique_key("sem3");
    let clients = [
        client(fleet, Quorum::All).await,
        client(fleet, Quorum::All).await,
    ];
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let history = Arc::new(Mutex::new(Vec::new()));
    let served = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let locks = clients[t % 2].clone();
        let (key, inside, most, history, served) = (
            key.clone(),
            inside.clone(),
            most.clone(),
            history.clone(),
            served.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let permit = locks
                    .semaphore(&key, 3)
                    .counted()
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("a permit within the wait time");
                let open = Interval::begin(&permit, format!("task{t}"));
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                history.lock().unwrap().push(open.finish(&permit));
                served.fetch_add(1, Ordering::SeqCst);
                permit.release().await.expect("release confirmed");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task panicked");
    }
    assert_eq!(
        served.load(Ordering::SeqCst),
        TASKS * ROUNDS,
        "everyone got permits"
    );
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders of 3 permits at once");
    let history = std::mem::take(&mut *history.lock().unwrap());
    let at_once = most_at_once(&history);
    assert!(at_once <= 3, "the history shows {at_once} holders at once");
    for i in 0..fleet.len() {
        assert!(permit_holders(fleet, i, &key).await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_one_permit_without_quorum_all_is_refused_with_the_reason() {
    let fleet = shared_fleet();
    let key = unique_key("sem-majority");
    for quorum in [Quorum::Majority, Quorum::AtLeast(4)] {
        let locks = client(fleet, quorum).await;
        let refused = locks
            .semaphore(&key, 3)
            .counted()
            .try_acquire()
            .await
            .unwrap_err();
        match &refused {
            Error::InvalidConfig { field, reason } => {
                assert_eq!(*field, "permits");
                assert!(reason.contains("Quorum::All"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            refused.to_string().contains("clients can hold a permit"),
            "{refused}"
        );
        assert_eq!(locks.stats().attempts, 0, "no node contacted");
        // One permit is a mutex, fine under any quorum.
        let one = locks
            .semaphore(&key, 1)
            .ttl(Duration::from_secs(10))
            .try_acquire()
            .await
            .unwrap()
            .expect("one permit");
        assert!(locks
            .semaphore(&key, 1)
            .ttl(Duration::from_secs(10))
            .try_acquire()
            .await
            .unwrap()
            .is_none());
        one.release().await.unwrap();
        // The release returned at a quorum; the next pass's client may need more nodes free.
        locks.finish_background().await;
    }
    let locks = client(fleet, Quorum::Majority).await;
    let zero = locks.semaphore(&key, 0).try_acquire().await;
    assert!(matches!(zero, Err(Error::InvalidConfig { .. })), "{zero:?}");
}

/// Negative control: a semaphore of 3 permits under a majority of 5 (the check bypassed
/// through the test kit) admits 5 holders at once. Each client reaches a distinct 3-node
/// subset ({0,1,2}, {1,2,3}, {2,3,4}, {3,4,0}, {4,0,1}); each node is in three subsets, so it
/// admits all three of its clients, and each client has its majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_majority_semaphore_of_three_permits_admits_five_holders() {
    let fleet = own_fleet(5);
    let key = unique_key("sem-unsafe");
    let mut permits = Vec::new();
    for c in 0..5 {
        let reach = [c, (c + 1) % 5, (c + 2) % 5];
        let mut closed = closed_ports(5 - reach.len()).into_iter();
        let urls: Vec<String> = (0..5)
            .map(|i| match reach.contains(&i) {
                true => fleet.url(i),
                false => format!("redis://127.0.0.1:{}", closed.next().unwrap()),
            })
            .collect();
        let locks = QuorumLock::builder()
            .nodes(urls)
            .quorum(Quorum::Majority)
            .node_timeout(Duration::from_millis(250))
            .lazy(true)
            .build()
            .await
            .unwrap();
        let refused = locks.semaphore(&key, 3).counted().try_acquire().await;
        assert!(matches!(refused, Err(Error::InvalidConfig { .. })));
        let permit = testkit::unchecked_semaphore(&locks, &key, 3)
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("client {c} was refused"));
        permits.push((locks, permit));
    }
    let held = permits.iter().filter(|(_, p)| p.is_held()).count();
    assert_eq!(held, 5, "five holders of three permits at once");
    for i in 0..5 {
        assert_eq!(permit_holders(&fleet, i, &key).await.len(), 3, "node {i}");
    }
}

/// A set's or a permit's token cannot be handed on: the calls by holder value act on one key's
/// mutex entry. `into_holder` gives the guard back, still holding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_holder_gives_back_the_guard_of_a_set_or_a_permit() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::All).await;
    let (a, b) = (unique_key("token-set-a"), unique_key("token-set-b"));
    let set = locks
        .lock_all([&a, &b])
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap()
        .expect("a free set");
    let set = set.into_holder().expect_err("a set has no token calls");
    assert!(set.is_held());
    let key = unique_key("token-permit");
    let permit = locks
        .semaphore(&key, 2)
        .counted()
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap()
        .expect("a free permit");
    let permit = permit
        .into_holder()
        .expect_err("a permit has no token calls");
    assert!(permit.is_held());
    set.release().await.unwrap();
    permit.release().await.unwrap();
}

/// The README's minimal ACL rule for keys under `acl:`, with what it lists for semaphores,
/// read-write locks and fair locks: their commands (`ZADD`, `ZREM`, `ZSCORE`, `ZCARD`,
/// `ZRANGE`, `ZRANGEBYSCORE`, `ZREMRANGEBYSCORE`, `PEXPIREAT`, `TIME`, `HSET`, `HGET`, `HDEL`)
/// and key patterns.
const FAMILY_ACL_RULE: [&str; 45] = [
    "locker",
    "on",
    ">s3cret-pw",
    "resetkeys",
    "~acl:*",
    "~quorum-lock:fence:{acl:*",
    "~quorum-lock:readers:{acl:*",
    "~quorum-lock:writer-waiting:{acl:*",
    "~quorum-lock:queue:{acl:*",
    "~quorum-lock:queue-expiry:{acl:*",
    "~quorum-lock:queue-holder:{acl:*",
    "~quorum-lock:ticket:{acl:*",
    "~quorum-lock:holder:{acl:*",
    "resetchannels",
    "&quorum-lock:released:{acl:*",
    "&quorum-lock:holder-notices",
    "-@all",
    "+set",
    "+get",
    "+del",
    "+exists",
    "+pexpire",
    "+pttl",
    "+incr",
    "+publish",
    "+eval",
    "+evalsha",
    "+script|load",
    "+subscribe",
    "+unsubscribe",
    "+ping",
    "+info",
    "+config|get",
    "+zadd",
    "+zrem",
    "+zscore",
    "+zcard",
    "+zrange",
    "+zrangebyscore",
    "+zremrangebyscore",
    "+pexpireat",
    "+time",
    "+hset",
    "+hget",
    "+hdel",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_acl_rule_is_enough_for_semaphores_read_write_and_fair_locks() {
    let (fleet, urls) = common::acl_fleet(&FAMILY_ACL_RULE);
    let locks = QuorumLock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_millis(250))
        .build()
        .await
        .expect("build");
    let all = QuorumLock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_millis(250))
        .quorum(Quorum::All)
        .build()
        .await
        .expect("build");
    let ttl = Duration::from_secs(10);
    // Each primitive through acquire, a waiter woken by its release, extend and release.
    let permit = all
        .semaphore("acl:sem", 2)
        .counted()
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    permit.extend(ttl).await.unwrap();
    permit.release().await.unwrap();
    held_then_handed_over(
        &fleet,
        &locks,
        |l| l.read_lock("acl:rw"),
        |l| l.write_lock("acl:rw"),
    )
    .await;
    held_then_handed_over(
        &fleet,
        &locks,
        |l| l.fair_lock("acl:fair"),
        |l| l.fair_lock("acl:fair"),
    )
    .await;
    // Nothing was denied: the ACL log of every node is empty.
    for i in 0..3 {
        let mut c = fleet
            .client(i)
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let log: Vec<redis::Value> = redis::cmd("ACL")
            .arg("LOG")
            .query_async(&mut c)
            .await
            .expect("ACL LOG");
        assert!(log.is_empty(), "node {i} denied something: {log:?}");
    }
}

/// A request of the kind `first` makes holds, is extended and released, while one of the
/// kind `second` (same client, fenced) waits for it and gets the lock after.
async fn held_then_handed_over(
    fleet: &Fleet,
    locks: &QuorumLock,
    first: for<'a> fn(&'a QuorumLock) -> quorum_lock::LockRequest<'a>,
    second: for<'a> fn(&'a QuorumLock) -> quorum_lock::LockRequest<'a>,
) {
    let ttl = Duration::from_secs(10);
    let held = first(locks).ttl(ttl).acquire().await.unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            second(&locks)
                .ttl(ttl)
                .fencing(true)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    eventually(
        fleet,
        Duration::from_secs(20),
        "the second waits",
        || async { locks.stats().waiting == 1 },
    )
    .await;
    held.extend(ttl).await.unwrap();
    held.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
}
