//! Durable votes (`Builder::durable_votes`): a node's yes to an acquire or an extend counts
//! only once `WAITAOF` confirms it. Counted on servers that have `WAITAOF` (Redis or Valkey
//! 7.2 and later: CI's Valkey 8.1 pass); on older servers (Debian's Redis 7.0) the build
//! refuses. A machine crash before the fsync cannot be caused here; what is tested is the
//! counting: a node whose AOF is switched off, or whose replicas do not confirm, gives no
//! vote.

mod common;

use std::time::Duration;

use quorum_lock::testkit::{Fleet, Persistence};
use quorum_lock::{DurableVotes, Error, QuorumLock};

/// Whether the fleet's servers have `WAITAOF` (7.2 and later), by `INFO server`.
fn has_waitaof(fleet: &Fleet) -> bool {
    let mut conn = fleet.client(0).get_connection().expect("connect");
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut conn)
        .expect("INFO");
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))
        .or_else(|| info.lines().find_map(|l| l.strip_prefix("redis_version:")))
        .unwrap_or("");
    let mut parts = version
        .trim()
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (7, 2)
}

async fn durable_client(fleet: &Fleet, durable: DurableVotes) -> Result<QuorumLock, Error> {
    QuorumLock::builder()
        .nodes(fleet.urls())
        .node_timeout(Duration::from_millis(500))
        .durable_votes(durable)
        .build()
        .await
}

fn set_aof(fleet: &Fleet, i: usize, on: bool) {
    config_set(fleet, i, "appendonly", if on { "yes" } else { "no" });
}

/// Three nodes with AOF (`appendfsync always`).
fn aof_fleet() -> Fleet {
    Fleet::builder()
        .nodes(3)
        .persistence(Persistence::AofAlways)
        .start()
        .expect("fleet")
}

/// On a server without `WAITAOF` (Redis 7.0), checks that the build refuses durable votes,
/// naming it, and says so; the test then has nothing more to run there.
async fn refused_without_waitaof(fleet: &Fleet) -> bool {
    if has_waitaof(fleet) {
        return false;
    }
    let e = durable_client(fleet, DurableVotes::Local)
        .await
        .unwrap_err();
    assert!(refused_for(&e, "WAITAOF"), "{e}");
    true
}

fn entries(fleet: &Fleet, key: &str) -> usize {
    (0..fleet.len())
        .filter(|&i| {
            let mut conn = fleet.client(i).get_connection().expect("connect");
            redis::cmd("EXISTS")
                .arg(key)
                .query::<i64>(&mut conn)
                .expect("EXISTS")
                == 1
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_counts_only_where_the_node_made_it_durable() {
    let fleet = aof_fleet();
    if refused_without_waitaof(&fleet).await {
        return;
    }
    let locks = durable_client(&fleet, DurableVotes::Local).await.unwrap();
    let ttl = Duration::from_secs(10);
    let held = locks.try_acquire("durable:a", ttl).await.unwrap();
    let held = held.expect("every node's AOF is on: durable votes");
    assert_eq!(entries(&fleet, "durable:a"), 3);

    // Two of three nodes' AOF off: their yes counts for nothing. An acquire fails (no
    // quorum of durable votes) and is rolled back; an extend fails and moves no deadline.
    set_aof(&fleet, 0, false);
    set_aof(&fleet, 1, false);
    let e = locks.try_acquire("durable:b", ttl).await.unwrap_err();
    assert!(matches!(e, Error::NoQuorum { .. }), "{e}");
    assert!(
        e.to_string().contains("appendonly") || e.to_string().contains("durable"),
        "{e}"
    );
    locks.finish_background().await;
    assert_eq!(entries(&fleet, "durable:b"), 0, "rolled back on every node");
    let before = held.deadline();
    let e = held.extend(Duration::from_secs(30)).await.unwrap_err();
    assert!(matches!(e, Error::NoQuorum { .. }), "{e}");
    assert!(
        held.deadline() <= before,
        "a failed extend moves no deadline"
    );

    // One node off only: a quorum of durable votes again.
    set_aof(&fleet, 1, true);
    let extended = held.extend(Duration::from_secs(30)).await;
    assert!(extended.is_ok(), "{extended:?}");
    let again = locks.try_acquire("durable:b", ttl).await.unwrap();
    assert!(again.is_some());
    set_aof(&fleet, 0, true);

    // A fair lock is not handed to a waiter on a release's answers or a grant's notices
    // under durable votes: the waiter claims it with an acquire of its own, whose votes are
    // not durable on two of three nodes here.
    let other = durable_client(&fleet, DurableVotes::Local).await.unwrap();
    let fair = locks
        .fair_lock("durable:fair")
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let same = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let wait = Duration::from_secs(2);
            locks
                .fair_lock("durable:fair")
                .ttl(ttl)
                .wait(wait)
                .acquire()
                .await
        })
    };
    let across = tokio::spawn(async move {
        let wait = Duration::from_secs(2);
        other
            .fair_lock("durable:fair")
            .ttl(ttl)
            .wait(wait)
            .acquire()
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    set_aof(&fleet, 0, false);
    set_aof(&fleet, 1, false);
    fair.release().await.unwrap();
    for waiter in [same, across] {
        let got = waiter.await.unwrap();
        assert!(
            got.is_err(),
            "a fair lock held without durable votes: {got:?}"
        );
    }
    set_aof(&fleet, 0, true);
    set_aof(&fleet, 1, true);

    // Votes durable on a replica: these nodes have none, so nothing is confirmed.
    let replicas = durable_client(&fleet, DurableVotes::Replica(1))
        .await
        .unwrap();
    let e = replicas.try_acquire("durable:c", ttl).await.unwrap_err();
    assert!(matches!(e, Error::NoQuorum { .. }), "{e}");
    replicas.finish_background().await;
    assert_eq!(entries(&fleet, "durable:c"), 0);
    // Replica(0) would confirm everything at once.
    let e = durable_client(&fleet, DurableVotes::Replica(0))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidConfig {
                field: "durable_votes",
                ..
            }
        ),
        "{e}"
    );
}

fn config_set(fleet: &Fleet, i: usize, name: &str, value: &str) {
    let mut conn = fleet.client(i).get_connection().expect("connect");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(&mut conn)
        .expect("CONFIG SET");
}

fn refused_for(e: &Error, words: &str) -> bool {
    matches!(
        e,
        Error::InvalidConfig {
            field: "durable_votes",
            ..
        }
    ) && e.to_string().contains(words)
}

/// Whether node `i` (under `appendfsync everysec`) confirms writes faster than fsyncs once a
/// second could: five writes, each with `WAITAOF 1 0 1000` behind it on the same connection,
/// back to back, while another connection keeps the server busy. A server that waits for its
/// fsync takes about four seconds (each write after the first waits for the next fsync); one
/// with the defect answers all five within one.
fn confirms_faster_than_it_fsyncs(fleet: &Fleet, i: usize) -> bool {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let (client, done) = (fleet.client(i), done.clone());
        std::thread::spawn(move || {
            let mut conn = client.get_connection().expect("connect");
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let _: String = redis::cmd("PING").query(&mut conn).expect("PING");
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let mut conn = fleet.client(i).get_connection().expect("connect");
    let started = std::time::Instant::now();
    for n in 0..5 {
        let (_, counts): ((), Vec<i64>) = redis::pipe()
            .cmd("SET")
            .arg("durable:timed")
            .arg(n)
            .cmd("WAITAOF")
            .arg(1)
            .arg(0)
            .arg(1000)
            .query(&mut conn)
            .expect("SET and WAITAOF");
        assert_eq!(counts.len(), 2);
    }
    let took = started.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.join().unwrap();
    took < Duration::from_secs(1)
}

/// Local votes count a node's `WAITAOF` only where it waits for the node's fsync: under
/// `appendfsync always`, or `everysec` on a server whose `WAITAOF` was seen to wait (the
/// probe `build` runs; Valkey 8.1 answers before the fsync). `appendfsync no` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_votes_need_a_node_whose_waitaof_waits_for_its_fsync() {
    let fleet = aof_fleet();
    if refused_without_waitaof(&fleet).await {
        return;
    }
    config_set(&fleet, 2, "appendfsync", "no");
    let e = durable_client(&fleet, DurableVotes::Local)
        .await
        .unwrap_err();
    assert!(refused_for(&e, "appendfsync no"), "{e}");
    // Replicas' votes do not depend on the node's own fsync.
    assert!(durable_client(&fleet, DurableVotes::Replica(1))
        .await
        .is_ok());

    config_set(&fleet, 2, "appendfsync", "everysec");
    let node = &QuorumLock::builder()
        .nodes(fleet.urls())
        .node_clients()
        .unwrap()[2];
    let info = node.probe(Duration::from_secs(2)).await.unwrap();
    assert_eq!(info.appendfsync.as_deref(), Some("everysec"));
    // The truth, measured apart from the library's probe: Valkey 8.1 confirms early.
    let early = confirms_faster_than_it_fsyncs(&fleet, 2);
    assert_eq!(
        node.waitaof_early(&info, Duration::from_secs(2)).await,
        Some(early),
        "the probe against five timed writes"
    );
    let built = durable_client(&fleet, DurableVotes::Local).await;
    match early {
        true => {
            let e = built.unwrap_err();
            assert!(refused_for(&e, "before its fsync"), "{e}");
        }
        false => assert!(built.is_ok(), "{built:?}"),
    }
    // Nodes the probe does not concern: none under `always`.
    let always = node.probe(Duration::from_secs(2)).await.unwrap();
    config_set(&fleet, 2, "appendfsync", "always");
    let always_info = node.probe(Duration::from_secs(2)).await.unwrap();
    assert_eq!(always.appendfsync.as_deref(), Some("everysec"));
    assert_eq!(
        node.waitaof_early(&always_info, Duration::from_secs(2))
            .await,
        None
    );
    assert!(durable_client(&fleet, DurableVotes::Local).await.is_ok());
}

/// Fencing under durable votes: the increments and the write-back wait for `WAITAOF` too, so
/// a token is issued only where a quorum's counters are durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_acquires_wait_for_durable_counters() {
    let fleet = aof_fleet();
    if refused_without_waitaof(&fleet).await {
        return;
    }
    let locks = QuorumLock::builder()
        .nodes(fleet.urls())
        .node_timeout(Duration::from_millis(500))
        .durable_votes(DurableVotes::Local)
        .build()
        .await
        .unwrap();
    let ttl = Duration::from_secs(10);
    // A counter already past the others on one node: its write-back finds it higher.
    let counter = quorum_lock::names::fencing_counter(b"durable:fenced");
    let mut conn = fleet.client(0).get_connection().expect("connect");
    let _: () = redis::cmd("SET")
        .arg(&counter)
        .arg(40)
        .query(&mut conn)
        .unwrap();
    let mut last = 0;
    for _ in 0..3 {
        let guard = locks
            .lock("durable:fenced")
            .ttl(ttl)
            .fencing(true)
            .acquire()
            .await
            .unwrap();
        let token = guard.fencing_token().expect("a token");
        assert!(token > last, "{token} after {last}");
        last = token;
        guard.release().await.unwrap();
    }
    // No quorum of durable counters: no token, and no lock.
    set_aof(&fleet, 0, false);
    set_aof(&fleet, 1, false);
    let e = locks
        .lock("durable:fenced")
        .ttl(ttl)
        .fencing(true)
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NoQuorum { .. }), "{e}");
    set_aof(&fleet, 0, true);
    set_aof(&fleet, 1, true);
}
