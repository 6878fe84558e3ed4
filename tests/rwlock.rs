//! The read-write lock (`read_lock`, `write_lock`): readers share, a writer excludes everyone,
//! a waiting writer's pending mark stops new readers, and every refused or expired hold leaves
//! nothing on the nodes. Nodes are inspected directly where a rule is about what they store.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Error, LockGuard, Quorum, QuorumLock};
use tokio::time::Instant;

fn readers_key(key: &str) -> String {
    String::from_utf8_lossy(&quorum_lock::names::readers(key.as_bytes())).into_owned()
}

fn mark_key(key: &str) -> String {
    String::from_utf8_lossy(&quorum_lock::names::writer_mark(key.as_bytes())).into_owned()
}

/// The live readers of `key` on node `i` (members with an expiry in the future), sorted.
async fn live_readers(fleet: &Fleet, i: usize, key: &str) -> Vec<String> {
    let mut c = conn(fleet, i).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
    let now = secs * 1000 + micros / 1000;
    let mut members: Vec<String> = redis::cmd("ZRANGEBYSCORE")
        .arg(readers_key(key))
        .arg(format!("({now}"))
        .arg("+inf")
        .query_async(&mut c)
        .await
        .unwrap();
    members.sort();
    members
}

async fn exists(fleet: &Fleet, i: usize, key: &str) -> bool {
    let mut c = conn(fleet, i).await;
    redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap()
}

/// How many nodes store `key` at all.
async fn nodes_with(fleet: &Fleet, key: &str) -> usize {
    let mut n = 0;
    for i in 0..fleet.len() {
        n += usize::from(exists(fleet, i, key).await);
    }
    n
}

async fn try_read(locks: &QuorumLock, key: &str) -> Option<LockGuard> {
    locks
        .read_lock(key)
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("read attempt")
}

async fn try_write(locks: &QuorumLock, key: &str) -> Option<LockGuard> {
    locks
        .write_lock(key)
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("write attempt")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_readers_hold_at_once_each_with_its_own_member() {
    let fleet = shared_fleet();
    let key = unique_key("rw-readers");
    let locks = client(fleet, Quorum::All).await;
    let mut readers = Vec::new();
    for n in 0..5 {
        readers.push(
            try_read(&locks, &key)
                .await
                .unwrap_or_else(|| panic!("reader {n} was refused while only readers hold")),
        );
    }
    let mut holders: Vec<String> = readers.iter().map(|g| g.holder().to_string()).collect();
    holders.sort();
    locks.finish_background().await;
    for i in 0..fleet.len() {
        assert_eq!(live_readers(fleet, i, &key).await, holders, "node {i}");
        assert!(!exists(fleet, i, &key).await, "node {i} has a writer entry");
    }
    for r in readers {
        r.release().await.expect("release of a reader");
    }
    locks.finish_background().await;
    assert_eq!(
        nodes_with(fleet, &readers_key(&key)).await,
        0,
        "readers left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_excludes_readers_and_writers() {
    let fleet = shared_fleet();
    let key = unique_key("rw-writer");
    let locks = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    let writer = try_write(&locks, &key).await.expect("free");
    assert!(try_read(&other, &key).await.is_none(), "a reader got in");
    assert!(try_write(&other, &key).await.is_none(), "a second writer");
    // The mutex's calls are not mixed with the rw lock, but the writer is the key's entry.
    assert!(nodes_holding(fleet, &key, writer.holder()).await >= 3);
    writer.release().await.expect("release of the writer");
    let reader = try_read(&other, &key)
        .await
        .expect("free after the release");
    reader.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_exclude_a_writer_and_a_single_attempt_leaves_no_mark() {
    let fleet = shared_fleet();
    let key = unique_key("rw-readers-exclude");
    let locks = client(fleet, Quorum::Majority).await;
    let reader = try_read(&locks, &key).await.expect("free");
    assert!(try_write(&locks, &key).await.is_none(), "a writer got in");
    locks.finish_background().await;
    assert_eq!(nodes_with(fleet, &mark_key(&key)).await, 0, "mark left");
    assert_eq!(nodes_with(fleet, &key).await, 0, "writer entry left");
    // No mark: readers still come in.
    let second = try_read(&locks, &key).await.expect("a second reader");
    second.release().await.unwrap();
    reader.release().await.unwrap();
    let writer = try_write(&locks, &key)
        .await
        .expect("free after the readers");
    writer.release().await.unwrap();
}

/// A writer on its own client (20 s retry delay: only release notices, or the mark's own
/// refusals, wake it earlier) waiting for `key` with `ttl` as its TTL and wait, spawned; returns
/// once it listens for releases with its mark on every node: the attempt after subscribing
/// (the second) was refused too.
async fn waiting_writer(
    fleet: &Fleet,
    key: &str,
    ttl: Duration,
) -> (
    QuorumLock,
    tokio::task::JoinHandle<quorum_lock::Result<LockGuard>>,
) {
    let writers = builder(fleet, Quorum::All)
        .retry_delay(Duration::from_secs(20))
        .retry_jitter(Duration::ZERO)
        .build()
        .await
        .unwrap();
    let waiting = {
        let (writers, key) = (writers.clone(), key.to_string());
        tokio::spawn(async move { writers.write_lock(&key).ttl(ttl).wait(ttl).acquire().await })
    };
    eventually(
        fleet,
        Duration::from_secs(10),
        "the writer listens, with its mark on every node",
        || async { writers.stats().contended >= 2 && nodes_with(fleet, &mark_key(key)).await == 5 },
    )
    .await;
    (writers, waiting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writers_mark_stops_new_readers_and_it_gets_the_lock_when_readers_release() {
    let fleet = shared_fleet();
    let key = unique_key("rw-pending");
    let locks = client(fleet, Quorum::All).await;
    let first = try_read(&locks, &key).await.expect("free");
    let second = try_read(&locks, &key).await.expect("readers share");
    let (writers, waiting) = waiting_writer(fleet, &key, Duration::from_secs(60)).await;
    assert!(
        try_read(&locks, &key).await.is_none(),
        "a new reader got in past the waiting writer's mark"
    );
    first.release().await.unwrap();
    assert!(!waiting.is_finished(), "the writer got in beside a reader");
    second.release().await.unwrap();
    let writer = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("woken by the last reader's release")
        .unwrap()
        .expect("the writer gets the lock");
    assert!(writers.stats().woken >= 1);
    assert!(
        try_read(&locks, &key).await.is_none(),
        "reader beside the writer"
    );
    writer.release().await.unwrap();
    writers.finish_background().await;
    assert_eq!(
        nodes_with(fleet, &mark_key(&key)).await,
        0,
        "the mark outlived the writer's release"
    );
    let reader = try_read(&locks, &key).await.expect("readers again");
    reader.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_readers_member_expires_alone_and_does_not_block_a_writer_past_its_ttl() {
    let fleet = shared_fleet();
    let key = unique_key("rw-crash");
    let locks = client(fleet, Quorum::All).await;
    let ttl = Duration::from_millis(1500);
    let kept = try_read(&locks, &key).await.expect("free");
    let crashed = locks
        .read_lock(&key)
        .ttl(ttl)
        .try_acquire()
        .await
        .unwrap()
        .expect("readers share");
    let taken_at = Instant::now();
    std::mem::forget(crashed);
    locks.finish_background().await;
    eventually(
        fleet,
        Duration::from_secs(10),
        "the crashed reader's member expires, the other's stays",
        || async {
            for i in 0..fleet.len() {
                if live_readers(fleet, i, &key).await != vec![kept.holder().to_string()] {
                    return false;
                }
            }
            true
        },
    )
    .await;
    assert!(taken_at.elapsed() >= ttl - Duration::from_millis(100));
    kept.release().await.unwrap();
    // Only the crashed member could block now, and it is gone: a writer gets in at once.
    let writer = try_write(&locks, &key)
        .await
        .expect("the crashed reader still blocks the writer");
    writer.release().await.unwrap();

    // A crashed reader alone: a waiting writer gets in no earlier than its TTL, and does.
    let crashed = locks
        .read_lock(&key)
        .ttl(ttl)
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    let taken_at = Instant::now();
    std::mem::forget(crashed);
    let writer = locks
        .write_lock(&key)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .expect("the crashed reader's member expired");
    assert!(
        taken_at.elapsed() >= ttl - Duration::from_millis(100),
        "the writer got in after {:?}, before the reader's ttl",
        taken_at.elapsed()
    );
    writer.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_mixing_readers_and_writers_over_two_clients_never_break_the_rules() {
    let fleet = shared_fleet();
    let key = unique_key("rw-mixed");
    let clients = [
        client(fleet, Quorum::Majority).await,
        client(fleet, Quorum::Majority).await,
    ];
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writers_in = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let writes = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let locks = clients[t % 2].clone();
        let key = key.clone();
        let (readers_in, writers_in) = (readers_in.clone(), writers_in.clone());
        let (reads, writes) = (reads.clone(), writes.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..6usize {
                let write = (t + n) % 3 == 0;
                let request = if write {
                    locks.write_lock(&key)
                } else {
                    locks.read_lock(&key)
                };
                let guard = request
                    .ttl(Duration::from_secs(20))
                    .wait(Duration::from_secs(120))
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("task {t} round {n}: {e}"));
                if write {
                    assert_eq!(writers_in.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(
                        readers_in.load(Ordering::SeqCst),
                        0,
                        "writer beside readers"
                    );
                } else {
                    readers_in.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(
                        writers_in.load(Ordering::SeqCst),
                        0,
                        "reader beside a writer"
                    );
                }
                // The work: long enough for others to try to come in.
                tokio::time::sleep(Duration::from_millis(3)).await;
                assert!(guard.validity() > Duration::ZERO, "held past the validity");
                if write {
                    assert_eq!(readers_in.load(Ordering::SeqCst), 0, "reader came in");
                    writers_in.fetch_sub(1, Ordering::SeqCst);
                    writes.fetch_add(1, Ordering::SeqCst);
                } else {
                    assert_eq!(writers_in.load(Ordering::SeqCst), 0, "writer came in");
                    readers_in.fetch_sub(1, Ordering::SeqCst);
                    reads.fetch_add(1, Ordering::SeqCst);
                }
                guard
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("task {t} round {n}: release {e}"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task broke a rule");
    }
    assert_eq!(writes.load(Ordering::SeqCst), 16);
    assert_eq!(reads.load(Ordering::SeqCst), 32);
    finish_background(&clients).await;
    assert_eq!(nodes_with(fleet, &key).await, 0, "writer entry left");
    assert_eq!(
        nodes_with(fleet, &readers_key(&key)).await,
        0,
        "readers left"
    );
    assert_eq!(nodes_with(fleet, &mark_key(&key)).await, 0, "mark left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_attempt_rolls_back_its_entry_member_and_mark_on_every_node() {
    let fleet = shared_fleet();
    let key = unique_key("rw-rollback");
    let locks = client(fleet, Quorum::Majority).await;
    // A foreign reader on nodes 0..3 only: a writer is refused there and says yes on 3 and 4,
    // short of the majority, so its entries there must be rolled back.
    for i in 0..3 {
        let mut c = conn(fleet, i).await;
        let _: () = redis::cmd("ZADD")
            .arg(readers_key(&key))
            .arg(u64::MAX >> 12)
            .arg("foreign-reader")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    assert!(
        try_write(&locks, &key).await.is_none(),
        "writer beside readers"
    );
    locks.finish_background().await;
    assert_eq!(nodes_with(fleet, &key).await, 0, "writer entry left");
    assert_eq!(
        nodes_with(fleet, &mark_key(&key)).await,
        0,
        "mark of a single attempt"
    );

    // A waiting writer that gives up withdraws its mark.
    let gave_up = locks
        .write_lock(&key)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(
        matches!(gave_up, Err(Error::WaitTimeout { .. })),
        "{gave_up:?}"
    );
    locks.finish_background().await;
    assert_eq!(nodes_with(fleet, &key).await, 0, "writer entry left");
    assert_eq!(
        nodes_with(fleet, &mark_key(&key)).await,
        0,
        "mark not withdrawn"
    );

    // A foreign writer on nodes 0..3 only: a reader says yes on 3 and 4, and is rolled back.
    for i in 0..3 {
        let mut c = conn(fleet, i).await;
        let _: () = redis::cmd("DEL")
            .arg(readers_key(&key))
            .query_async(&mut c)
            .await
            .unwrap();
        plant(fleet, i, &key, "foreign-writer").await;
    }
    assert!(
        try_read(&locks, &key).await.is_none(),
        "reader beside a writer"
    );
    locks.finish_background().await;
    assert_eq!(
        nodes_with(fleet, &readers_key(&key)).await,
        0,
        "reader member left"
    );
    for i in 0..3 {
        assert_eq!(
            entry(fleet, i, &key).await.as_deref(),
            Some("foreign-writer")
        );
        let mut c = conn(fleet, i).await;
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_share_the_keys_fencing_counter() {
    let fleet = shared_fleet();
    let key = unique_key("rw-fence");
    let locks = client(fleet, Quorum::Majority).await;
    let fenced = |write: bool| {
        let request = if write {
            locks.write_lock(&key)
        } else {
            locks.read_lock(&key)
        };
        request
            .ttl(Duration::from_secs(30))
            .fencing(true)
            .try_acquire()
    };
    let r1 = fenced(false).await.unwrap().expect("free");
    let r2 = fenced(false).await.unwrap().expect("readers share");
    let (t1, t2) = (r1.fencing_token().unwrap(), r2.fencing_token().unwrap());
    assert!(t2 > t1);
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = fenced(true).await.unwrap().expect("free");
    let tw = w.fencing_token().unwrap();
    assert!(tw > t2, "writer's token {tw} not above the readers' {t2}");
    w.release().await.unwrap();
    let r3 = fenced(false).await.unwrap().expect("free");
    assert!(r3.fencing_token().unwrap() > tw);
    r3.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_readers_and_writers_and_repairs_only_where_compatible() {
    let fleet = own_fleet(3);
    let locks = builder(&fleet, Quorum::Majority)
        .watchdog_lease(Duration::from_millis(1500))
        .build()
        .await
        .unwrap();
    let key = unique_key("rw-watchdog");

    // A reader whose member node 0 lost is put back there.
    let reader = locks.read_lock(&key).acquire().await.expect("free");
    let value = reader.holder().to_string();
    locks.finish_background().await;
    let mut c = conn(&fleet, 0).await;
    let removed: usize = redis::cmd("ZREM")
        .arg(readers_key(&key))
        .arg(&value)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(removed, 1);
    eventually(
        &fleet,
        Duration::from_secs(10),
        "the watchdog put the reader back on node 0, and counted it",
        // The counter moves once the lease has read the node's answer, just after the node
        // applied it.
        || async {
            live_readers(&fleet, 0, &key).await == vec![value.clone()]
                && locks.stats().repaired >= 1
        },
    )
    .await;
    reader.release().await.expect("release confirmed");

    // A writer whose entry node 0 lost is put back there, but not beside a live reader.
    let writer = locks.write_lock(&key).acquire().await.expect("free");
    let value = writer.holder().to_string();
    locks.finish_background().await;
    assert_eq!(fleet.expire_early(0, &key).unwrap(), 1);
    eventually(
        &fleet,
        Duration::from_secs(10),
        "the watchdog put the writer back on node 0",
        || async { entry(&fleet, 0, &key).await.as_deref() == Some(value.as_str()) },
    )
    .await;
    // The foreign reader first, so that no repair can come between the two.
    let _: () = redis::cmd("ZADD")
        .arg(readers_key(&key))
        .arg(u64::MAX >> 12)
        .arg("foreign-reader")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(fleet.expire_early(0, &key).unwrap(), 1);
    let renewed = locks.stats().extended;
    eventually(
        &fleet,
        Duration::from_secs(10),
        "three more renewals",
        || async { locks.stats().extended >= renewed + 3 },
    )
    .await;
    assert!(writer.is_held());
    assert_eq!(
        entry(&fleet, 0, &key).await,
        None,
        "the writer was repaired beside a live reader"
    );
    writer.release().await.expect("release confirmed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_holder_gives_back_the_guard_of_a_reader_or_a_writer() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::All).await;
    let (a, b) = (unique_key("rw-token-a"), unique_key("rw-token-b"));
    let reader = try_read(&locks, &a).await.expect("free");
    let reader = reader
        .into_holder()
        .expect_err("a reader has no token calls");
    assert!(reader.is_held());
    let writer = try_write(&locks, &b).await.expect("free");
    let writer = writer
        .into_holder()
        .expect_err("a writer has no token calls");
    assert!(writer.is_held());
    reader.release().await.unwrap();
    writer.release().await.unwrap();
}

/// A waiting writer whose request is dropped (a timeout around it) takes its mark back: new
/// readers get in at once, not after the mark's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiting_writer_takes_its_mark_back() {
    let fleet = shared_fleet();
    let key = unique_key("rw-cancelled");
    let locks = client(fleet, Quorum::All).await;
    let reader = try_read(&locks, &key).await.expect("free");
    let (writers, waiting) = waiting_writer(fleet, &key, Duration::from_secs(600)).await;
    assert!(
        try_read(&locks, &key).await.is_none(),
        "the mark stops readers"
    );
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    writers.finish_background().await;
    assert_eq!(
        nodes_with(fleet, &mark_key(&key)).await,
        0,
        "the cancelled writer's mark stayed (its TTL is 10 minutes)"
    );
    let second = try_read(&locks, &key).await.expect("readers again at once");
    second.release().await.unwrap();
    reader.release().await.unwrap();
}

/// Every new kind of request (a key set, a permit, a read lock, a write lock) checks its
/// durations as a mutex request does: a zero or unrepresentable TTL, wait or maximum hold is
/// a typed error naming it, before any node is asked, never a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_durations_on_sets_permits_rw_and_fair_locks_are_typed_errors() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::All).await;
    let key = unique_key("rw-durations");
    let other = unique_key("rw-durations-b");
    let requests = || {
        [
            ("set", locks.lock_all([&key, &other])),
            ("permit", locks.semaphore(&key, 2).counted()),
            ("read", locks.read_lock(&key)),
            ("write", locks.write_lock(&key)),
            ("fair", locks.fair_lock(&other)),
        ]
    };
    let mut wrong = Vec::new();
    for ttl in [Duration::ZERO, Duration::MAX] {
        for (what, req) in requests() {
            match req.ttl(ttl).try_acquire().await {
                Err(Error::InvalidTtl { .. }) => {}
                other => wrong.push(format!("{what} ttl {ttl:?}: {other:?}")),
            }
        }
    }
    for (what, req) in requests() {
        match req
            .ttl(Duration::from_secs(10))
            .wait(Duration::MAX)
            .acquire()
            .await
        {
            Err(Error::InvalidConfig { field: "wait", .. }) => {}
            other => wrong.push(format!("{what} wait MAX: {other:?}")),
        }
    }
    for (what, req) in requests() {
        match req.max_hold(Duration::MAX).try_acquire().await {
            Err(Error::InvalidConfig {
                field: "max_hold", ..
            }) => {}
            other => wrong.push(format!("{what} max_hold MAX: {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    for i in 0..fleet.len() {
        assert!(!exists(fleet, i, &key).await, "node {i} got an entry");
        assert!(!exists(fleet, i, &other).await, "node {i} got an entry");
    }
}

/// A writer waiting behind a reader dies (its pending mark on every node, its TTL 30 s). Its
/// mark expires on its own lease (the dead client's queue lease, 1 s here), not with the
/// writer's TTL: new readers get in soon after, not 30 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiting_writers_mark_keeps_readers_out_for_its_queue_lease_not_its_ttl() {
    let fleet = shared_fleet();
    let key = unique_key("rw-dead-writer");
    let locks = client(fleet, Quorum::Majority).await;
    let reader = try_read(&locks, &key).await.expect("free");
    let doomed = {
        let key = key.clone();
        Doomed::start(
            builder(fleet, Quorum::Majority).queue_lease(Duration::from_secs(1)),
            move |writers| async move {
                writers
                    .write_lock(&key)
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
            },
        )
    };
    eventually(
        fleet,
        Duration::from_secs(10),
        "the writer's mark is everywhere",
        || async { nodes_with(fleet, &mark_key(&key)).await == 5 },
    )
    .await;
    doomed.freeze();
    assert!(
        try_read(&locks, &key).await.is_none(),
        "a new reader got in past the waiting writer's mark"
    );
    reader.release().await.unwrap();
    let start = Instant::now();
    let next = locks
        .read_lock(&key)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("a reader gets in once the dead writer's mark expired");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "readers were kept out {:?}",
        start.elapsed()
    );
    next.release().await.unwrap();
}

/// Readers that release at once finish in different orders on different nodes: here the
/// last reader is a different one on nodes {0, 1}, {2, 3} and {4}. The waiting writer (a
/// 20 s timer) must still be woken by the release notices: they name its mark, not each
/// node's last reader, so they add up to a quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_released_in_different_orders_on_the_nodes_wake_the_waiting_writer() {
    let fleet = shared_fleet();
    let key = unique_key("rw-drain");
    let mut readers = Vec::new();
    for _ in 0..3 {
        let locks = client(fleet, Quorum::Majority).await;
        let guard = try_read(&locks, &key).await.expect("readers share");
        // Every node must have every reader before the writer's mark goes down: a reader's
        // late request, after the mark, would be refused there.
        locks.finish_background().await;
        readers.push((locks, guard));
    }
    let (writers, waiting) = waiting_writer(fleet, &key, Duration::from_secs(60)).await;
    const LAST: [[usize; 3]; 5] = [[1, 2, 0], [1, 2, 0], [0, 2, 1], [0, 2, 1], [0, 1, 2]];
    for (i, order) in LAST.iter().enumerate() {
        let mut node = conn(fleet, i).await;
        for &r in order {
            let holder = readers[r].1.holder().to_string();
            assert!(
                quorum_lock::testkit::read_release_on_node(&mut node, key.as_bytes(), &holder)
                    .await
                    .unwrap(),
                "reader {r} held the key on node {i}"
            );
        }
    }
    let writer = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("woken by the readers' release notices, not by its timer")
        .unwrap()
        .expect("the writer gets the lock");
    assert_eq!(writers.stats().woken, 1);
    writer.release().await.unwrap();
    for (locks, guard) in readers {
        drop(guard);
        locks.finish_background().await;
    }
}

/// A task that holds a read lock and asks for the write lock of the same key waits for
/// itself until its wait ends (there is no upgrade): the error then says so, naming both
/// locks, rather than "busy". The same for the writer asking for a read lock or for the
/// write lock again. A read lock moved to another task, or held by another future of the
/// same task, that ends within the wait is simply waited for; and another task of the same
/// client waits as any other client's would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_waited_for_its_own_read_or_write_lock_is_told_so() {
    let fleet = shared_fleet();
    let key = unique_key("rw-upgrade");
    let locks = client(fleet, Quorum::Majority).await;
    let long = Duration::from_secs(30);
    let short = Duration::from_millis(300);
    let read = locks.read_lock(&key).acquire().await.unwrap();
    let upgrade = locks.write_lock(&key).ttl(long).wait(short).acquire().await;
    assert!(
        matches!(
            &upgrade,
            Err(Error::WaitsForItself {
                held: "read",
                wanted: "write",
                ..
            })
        ),
        "{upgrade:?}"
    );
    let message = upgrade.unwrap_err().to_string();
    assert!(message.contains("no upgrade"), "{message}");
    // Another task of this client is a writer like any other: busy.
    let other = {
        let (locks, key) = (locks.clone(), key.clone());
        tokio::spawn(async move { locks.write_lock(&key).ttl(long).wait(short).acquire().await })
    };
    let other = other.await.unwrap();
    assert!(matches!(other, Err(Error::WaitTimeout { .. })), "{other:?}");
    // The read guard moved to another task, which releases it soon: simply waited for.
    let worker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        read.release().await.unwrap();
    });
    let write = locks
        .write_lock(&key)
        .ttl(long)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the moved read lock ended within the wait");
    worker.await.unwrap();
    for wanted in [
        locks.read_lock(&key).ttl(long).wait(short).acquire().await,
        locks.write_lock(&key).ttl(long).wait(short).acquire().await,
    ] {
        assert!(
            matches!(&wanted, Err(Error::WaitsForItself { held: "write", .. })),
            "{wanted:?}"
        );
    }
    write.release().await.unwrap();
    // Two futures of one task: one holds a read lock for a while, the other asks for the
    // write lock meanwhile, and gets it once the first lets go.
    let (read, write) = tokio::join!(
        async {
            let r = locks.read_lock(&key).acquire().await.unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
            r.release().await
        },
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            locks
                .write_lock(&key)
                .ttl(long)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    );
    read.unwrap();
    write
        .expect("the other future's read lock ended within the wait")
        .release()
        .await
        .unwrap();
}

/// A task holding a read lock asks for a second one while another client's writer waits:
/// the writer's mark keeps new readers out, and the writer waits for the task's first read
/// lock. The task is told it waited for itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_read_lock_behind_a_writer_waiting_for_the_first_is_told_so() {
    let fleet = shared_fleet();
    let key = unique_key("rw-second-read");
    let locks = client(fleet, Quorum::Majority).await;
    let first = locks.read_lock(&key).acquire().await.unwrap();
    let (writers, waiting) = waiting_writer(fleet, &key, Duration::from_secs(3)).await;
    let second = locks
        .read_lock(&key)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_millis(500))
        .acquire()
        .await;
    assert!(
        matches!(
            &second,
            Err(Error::WaitsForItself {
                held: "read",
                wanted: "read",
                ..
            })
        ),
        "{second:?}"
    );
    first.release().await.unwrap();
    let writer = waiting
        .await
        .unwrap()
        .expect("the writer after the first read lock");
    writer.release().await.unwrap();
    writers.finish_background().await;
}
