//! Acquire under node failures: killed and paused (SIGSTOP) nodes, Majority and All. Each test
//! has its own fleet.

mod common;

use std::time::{Duration, Instant};

use common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Error, Quorum, QuorumLock};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_survives_two_killed_nodes_but_not_three() {
    let fleet = own_fleet(5);
    let locks = client(&fleet, Quorum::Majority).await;
    fleet.kill(0).unwrap();
    fleet.kill(1).unwrap();
    let key = unique_key("killed");
    let guard = locks
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("3 of 5 are up");
    for i in 2..5 {
        assert!(
            (entry(&fleet, i, &key).await.as_deref() == Some(guard.holder())),
            "live node {i}"
        );
    }
    guard.release().await.expect("3 of 5 confirm the release");

    fleet.kill(2).unwrap();
    let started = Instant::now();
    let err = locks.try_acquire(&key, TTL).await.unwrap_err();
    let took = started.elapsed();
    match &err {
        Error::NoQuorum {
            confirmed,
            required,
            failures,
            ..
        } => {
            // Decided as soon as the third failure made the quorum impossible, whether or not
            // the two live nodes had answered yet.
            assert!(*confirmed <= 2 && *required == 3, "{err}");
            assert_eq!(failures.len(), 3, "{err}");
            assert!(failures.iter().all(|f| f.is_connection()), "{err}");
        }
        other => panic!("expected NoQuorum, got {other}"),
    }
    // Refused connections fail at once; far below any TCP timeout.
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_survives_two_paused_nodes_but_not_three() {
    let fleet = own_fleet(5);
    let locks = client(&fleet, Quorum::Majority).await;
    fleet.pause(3).unwrap();
    fleet.pause(4).unwrap();
    let key = unique_key("paused");
    let guard = locks
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("3 of 5 answer");
    guard.release().await.expect("3 of 5 confirm the release");

    fleet.pause(2).unwrap();
    let started = Instant::now();
    let err = locks.try_acquire(&key, TTL).await.unwrap_err();
    let took = started.elapsed();
    match &err {
        Error::NoQuorum { failures, .. } => {
            assert_eq!(failures.len(), 3, "{err}");
            assert!(failures.iter().all(|f| f.is_timeout()), "{err}");
        }
        other => panic!("expected NoQuorum, got {other}"),
    }
    // Bounded by the 250 ms node timeout, not by TCP.
    assert!(
        took >= Duration::from_millis(250),
        "decided before the timeout: {took:?}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
    for i in 2..5 {
        fleet.resume(i).unwrap();
    }
    // Healed: works again on the same connections, as soon as the resumed nodes' answers to
    // the requests they held show that they are back (their circuit breakers close).
    healed(&fleet, &locks, &key).await;
}

/// Waits until `locks` takes and releases `key` again after the nodes came back.
async fn healed(fleet: &quorum_lock::testkit::Fleet, locks: &QuorumLock, key: &str) {
    eventually(
        fleet,
        Duration::from_secs(30),
        "the lock works again",
        || async {
            match locks.try_acquire(key, TTL).await {
                Ok(Some(guard)) => guard.release().await.is_ok(),
                _ => false,
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multilock_refuses_while_any_node_is_down() {
    let fleet = own_fleet(3);
    let locks = client(&fleet, Quorum::All).await;
    let key = unique_key("all");
    let guard = locks.try_acquire(&key, TTL).await.unwrap().expect("all up");
    guard.release().await.unwrap();

    fleet.kill(1).unwrap();
    let err = locks.try_acquire(&key, TTL).await.unwrap_err();
    assert!(matches!(err, Error::NoQuorum { required: 3, .. }), "{err}");

    fleet.pause(2).unwrap();
    fleet.restart(1).unwrap();
    let err = locks.try_acquire(&key, TTL).await.unwrap_err();
    assert!(
        matches!(&err, Error::NoQuorum { failures, .. } if failures.iter().any(|f| f.is_timeout())),
        "{err}"
    );
    fleet.resume(2).unwrap();
    // The restarted node is reconnected (and its scripts loaded) on use; the resumed one is
    // back once its answers arrive.
    healed(&fleet, &locks, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_is_reconnected() {
    let fleet = own_fleet(3);
    let locks = client(&fleet, Quorum::All).await;
    let key = unique_key("restart");
    for i in 0..3 {
        fleet.restart(i).unwrap();
    }
    // Each node's first call finds its connection dead and retries on a fresh one (with the
    // scripts loaded again): no call fails because of the restarts.
    let guard = locks
        .try_acquire(&key, TTL)
        .await
        .unwrap_or_else(|e| panic!("not reconnected: {e}\n{}", fleet.all_logs()))
        .expect("nobody else holds the key");
    guard.release().await.unwrap();
}

/// A node frozen for a while would collect every request of every call meanwhile, each one
/// timed out and forgotten by its caller but still queued on the connection, and once it
/// answers again new requests would wait behind all of them. The requests written to a
/// silent node are bounded: once it has left a request unanswered for a node timeout, the
/// rest are not sent (one probe per node timeout goes through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requests_queued_to_a_frozen_node_are_bounded() {
    let fleet = own_fleet(5);
    let locks = client(&fleet, Quorum::Majority).await;
    let warm = locks.try_acquire(unique_key("warm"), TTL).await.unwrap();
    warm.expect("a free key").release().await.unwrap();
    locks.finish_background().await;
    let before = lock_commands_run(&fleet, 4).await;
    fleet.pause(4).unwrap();
    let started = Instant::now();
    // Calls made before the node had been silent for a node timeout (250 ms) and some more:
    // until then nothing tells a frozen node from a slow one, and every request is sent.
    // At least 1,500 calls, and more made after that point than before it, however fast the
    // machine makes them (a fixed count made most of them early on a fast machine).
    let (mut early, mut calls) = (0, 0);
    while calls < 1500 || calls - early <= early {
        let guard = locks
            .try_acquire(format!("backlog:{calls}"), TTL)
            .await
            .unwrap()
            .expect("four of five answer");
        guard.release().await.unwrap();
        calls += 1;
        if started.elapsed() < Duration::from_millis(400) {
            early += 1;
        }
    }
    let frozen_for = started.elapsed();
    fleet.resume(4).unwrap();
    locks.finish_background().await;
    // Once the node answers again, the client's next calls reach it on the same connection.
    eventually(
        &fleet,
        Duration::from_secs(10),
        "node 4 answers the client again",
        || async {
            let key = unique_key("after");
            let guard = locks.try_acquire(&key, TTL).await.unwrap().unwrap();
            guard.release().await.unwrap();
            locks.finish_background().await;
            let mut c = conn(&fleet, 4).await;
            let _: () = redis::cmd("PING").query_async(&mut c).await.unwrap();
            lock_commands_run(&fleet, 4).await > before
        },
    )
    .await;
    let run = lock_commands_run(&fleet, 4).await - before;
    // The requests of the calls made before the node counted as silent (or 256, if more),
    // one probe per 250 ms node timeout while frozen, and the calls made after it resumed.
    let probes = (frozen_for.as_millis() / 250) as u64 + 1;
    let bound = (2 * early).max(256) + probes + 64;
    eprintln!(
        "frozen node ran {run} requests; bound {bound}; early calls {early}; frozen {frozen_for:?}"
    );
    assert!(
        2 * early < 2 * calls / 2,
        "the test made too few calls after the node counted as silent to show anything"
    );
    assert!(
        run <= bound,
        "the frozen node ran {run} of the {} requests made while it was frozen (bound {bound})",
        2 * calls
    );
}

/// A silent node trips its circuit breaker after one node timeout: from then on an attempt
/// that split the live nodes (two yes, two held by another holder, the silent one unknown)
/// counts the silent node as a "no" at once instead of waiting a node timeout for it, and its
/// requests are not written (one probe per node timeout is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_one_node_timeout_a_silent_node_is_not_waited_for() {
    let fleet = own_fleet(5);
    let node_timeout = Duration::from_secs(2);
    let locks = QuorumLock::builder()
        .nodes(fleet.urls())
        .node_timeout(node_timeout)
        .build()
        .await
        .unwrap();
    let key = unique_key("breaker");
    for i in [2, 3] {
        let mut c = conn(&fleet, i).await;
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("another-holder")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let before = lock_commands_run(&fleet, 4).await;
    fleet.pause(4).unwrap();
    // Until the node has been silent for a node timeout, it might still answer in time.
    let first = Instant::now();
    assert!(locks.try_acquire(&key, TTL).await.unwrap().is_none());
    let first = first.elapsed();
    let attempts: u32 = 10;
    let rest = Instant::now();
    for _ in 0..attempts {
        assert!(locks.try_acquire(&key, TTL).await.unwrap().is_none());
    }
    let rest = rest.elapsed();
    fleet.resume(4).unwrap();
    locks.finish_background().await;
    let run = lock_commands_run(&fleet, 4).await - before;
    assert!(
        first >= node_timeout,
        "the first split attempt decided in {first:?}, before the node timeout"
    );
    // Without the breaker each attempt would wait the whole node timeout.
    assert!(
        rest < node_timeout * attempts,
        "{attempts} split attempts took {rest:?}: they waited for the silent node"
    );
    // The first attempt's acquire and rollback, and a probe per node timeout after it.
    let probes = (rest.as_millis() / node_timeout.as_millis()) as u64 + 1;
    assert!(
        run <= 2 + 2 * probes,
        "the silent node was sent {run} lock commands for {} attempts ({probes} probe windows)",
        attempts + 1
    );
}

/// A failure says in a typed value, not in its text, whether its request was ever written to
/// the node and why not (a rollback skips only the nodes never written to), and names the node
/// by its index as well as by its address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_breaker_kept_back_is_typed_and_names_its_node_by_index() {
    let fleet = own_fleet(3);
    let locks = client(&fleet, Quorum::All).await;
    let warm = locks.try_acquire(unique_key("warm"), TTL).await.unwrap();
    warm.expect("a free key").release().await.unwrap();
    locks.finish_background().await;
    fleet.pause(2).unwrap();
    let failure_of = |e: quorum_lock::Error| {
        let failures = e.node_failures().to_vec();
        assert_eq!(failures.len(), 1, "only node 2 fails: {e}");
        failures[0].clone()
    };
    // Written, and not answered within the node timeout.
    let first = locks
        .try_acquire(unique_key("typed"), TTL)
        .await
        .unwrap_err();
    let first = failure_of(first);
    assert_eq!(first.index(), Some(2), "{first}");
    assert_eq!(
        first.unsent(),
        None,
        "the first request was written: {first}"
    );
    assert!(first.is_timeout(), "{first}");
    // Silent for longer than the node timeout: the breaker keeps the next request back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kept = locks
        .try_acquire(unique_key("typed"), TTL)
        .await
        .unwrap_err();
    let kept = failure_of(kept);
    fleet.resume(2).unwrap();
    assert_eq!(kept.index(), Some(2), "{kept}");
    assert_eq!(
        kept.unsent(),
        Some(quorum_lock::Unsent::BreakerOpen),
        "{kept}"
    );
    assert!(kept.is_timeout(), "{kept}");
    assert!(
        kept.detail().starts_with("not sent: the node has left ")
            && kept
                .detail()
                .contains(" requests unanswered for longer than the node timeout (250ms)"),
        "{kept}"
    );
    assert!(
        !kept.detail().contains(" - "),
        "a driver's error layout: {kept}"
    );
}

/// `build()` with one node of five frozen returns once the others answered its checks (and a
/// node timeout more), not after the whole connect timeout; the frozen node takes no lock calls
/// until its check answers, and then does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_with_a_frozen_node_returns_at_quorum_and_checks_the_node_when_it_answers() {
    let fleet = own_fleet(5);
    fleet.pause(4).unwrap();
    let connect_timeout = Duration::from_secs(20);
    let started = Instant::now();
    let locks = QuorumLock::builder()
        .nodes(fleet.urls())
        .connect_timeout(connect_timeout)
        .build()
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        took < connect_timeout,
        "build took {took:?}: it waited for the frozen node"
    );
    let key = unique_key("build-frozen");
    let guard = locks.try_acquire(&key, TTL).await.unwrap().expect("4 of 5");
    guard.release().await.unwrap();
    locks.finish_background().await;
    fleet.resume(4).unwrap();
    // The commands the node ran once resumed: its check (INFO, CONFIG), none of the lock's.
    let before = lock_commands_run(&fleet, 4).await;
    assert_eq!(before, 0, "the unchecked node was sent lock calls");
    // Once its check answers, the node takes lock calls again.
    eventually(
        &fleet,
        Duration::from_secs(30),
        "node 4 is used",
        || async {
            let guard = locks.try_acquire(&key, TTL).await.unwrap().unwrap();
            guard.release().await.unwrap();
            locks.finish_background().await;
            lock_commands_run(&fleet, 4).await > before
        },
    )
    .await;
}

/// A node listed twice (directly and through a proxy) whose second address was silent at
/// build is checked when it answers: the duplicate is excluded for good, never counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_checked_after_build_that_repeats_another_is_excluded() {
    let fleet = Fleet::builder().nodes(3).proxied(true).start().unwrap();
    let mut urls: Vec<String> = (0..3).map(|i| fleet.direct_url(i)).collect();
    urls.push(fleet.url(0));
    // Four nodes, quorum 3: the same server twice could make a quorum of two servers.
    fleet.proxy(0).black_hole();
    let locks = QuorumLock::builder()
        .nodes(urls)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    fleet.proxy(0).heal();
    let key = unique_key("late-duplicate");
    // Node 2 down: the quorum of 3 could only come from node 0 counted twice.
    fleet.kill(2).unwrap();
    eventually(
        &fleet,
        Duration::from_secs(30),
        "the duplicate's check ends in its exclusion",
        || async {
            match locks.try_acquire(&key, TTL).await {
                Err(Error::NoQuorum { failures, .. }) => failures
                    .iter()
                    .any(|f| f.to_string().contains("excluded") && f.to_string().contains("same")),
                Ok(Some(_)) => panic!("node 0 counted twice toward the quorum"),
                _ => false,
            }
        },
    )
    .await;
}

/// A node whose check could not finish at build (unreachable, or silent past the connect
/// timeout) is not used unchecked: it is checked when it answers. Admitted unchecked, an
/// address that names another node's server again voted twice for a read lock or a permit
/// (their scripts answer yes to their own member again), so one server made a quorum of two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_unreachable_at_build_that_repeats_another_never_votes_twice() {
    let fleet = own_fleet(4);
    let mut urls = fleet.urls();
    // Node 0's server under a second name: one server, two votes, unless a check finds it.
    urls.push(format!("redis://localhost:{}", fleet.node(0).port()));
    // Both of its names unreachable at build: neither is checked there.
    fleet.kill(0).unwrap();
    let locks = QuorumLock::builder()
        .nodes(urls.clone())
        .build()
        .await
        .unwrap();
    fleet.restart(0).unwrap();
    // Nodes 2 and 3 down: a quorum of 3 of 5 could only come from node 0 counted twice.
    fleet.kill(2).unwrap();
    fleet.kill(3).unwrap();
    let (read, permit) = (unique_key("unchecked-read"), unique_key("unchecked-permit"));
    eventually(
        &fleet,
        Duration::from_secs(30),
        "the second name's check ends in its exclusion",
        || async {
            if let Ok(Some(_)) = locks.semaphore(&permit, 1).ttl(TTL).try_acquire().await {
                // Seen once in three suite runs under load, never alone: what answers at each
                // of the client's addresses, and which of them hold the permit.
                let seen = servers_at(&urls, &format!("*{permit}*")).await;
                panic!("node 0 counted twice toward a permit's quorum; the client's nodes:{seen}");
            }
            match locks.read_lock(&read).ttl(TTL).try_acquire().await {
                Err(Error::NoQuorum { failures, .. }) => failures
                    .iter()
                    .any(|f| f.to_string().contains("excluded") && f.to_string().contains("same")),
                Ok(Some(_)) => panic!("node 0 counted twice toward a read lock's quorum"),
                _ => false,
            }
        },
    )
    .await;
}

/// Each of `urls`: the run id of the server answering there (or why none does) and its keys
/// matching `pattern`.
async fn servers_at(urls: &[String], pattern: &str) -> String {
    let mut out = String::new();
    for url in urls {
        let seen = async {
            let client = redis::Client::open(url.as_str())?;
            let mut conn = tokio::time::timeout(
                Duration::from_millis(500),
                client.get_multiplexed_async_connection(),
            )
            .await
            .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "no answer")))??;
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut conn)
                .await?;
            let run_id = info
                .lines()
                .find_map(|l| l.strip_prefix("run_id:"))
                .unwrap_or("?")
                .to_string();
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query_async(&mut conn)
                .await?;
            Ok::<_, redis::RedisError>(format!("run_id {run_id}, keys {keys:?}"))
        }
        .await;
        let seen = seen.unwrap_or_else(|e| format!("none: {e}"));
        out.push_str(&format!("\n  {url}: {seen}"));
    }
    out
}

/// Every node connection has TCP keepalive on (the kernel's keepalive timer runs on it), so
/// that a link whose packets are dropped is noticed within a bound (see `DEAD_LINK` in
/// `src/address.rs`), not after Linux's default of hours.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_connections_run_the_keepalive_timer() {
    let fleet = own_fleet(3);
    let locks = client(&fleet, Quorum::Majority).await;
    let guard = locks
        .try_acquire(unique_key("keepalive"), TTL)
        .await
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
    let port = fleet.node(0).port();
    let out = std::process::Command::new("ss")
        .args(["-tno", "state", "established", &format!("dport = :{port}")])
        .output()
        .expect("ss (iproute2) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let ours: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!(":{port}")))
        .collect();
    assert!(!ours.is_empty(), "no connection to node 0 found: {text}");
    assert!(
        ours.iter().all(|l| l.contains("keepalive")),
        "a connection to node 0 without the keepalive timer: {ours:?}"
    );
}

/// A guard released within its validity while two of three nodes are frozen: the release is
/// unconfirmed (one node confirmed, two timed out, none refused), not `NotHeld`: the lock was
/// held to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_released_in_time_while_nodes_are_silent_is_unconfirmed_not_lost() {
    let fleet = own_fleet(3);
    let locks = client(&fleet, Quorum::Majority).await;
    let guard = locks
        .try_acquire(unique_key("unconfirmed"), Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    fleet.pause(1).unwrap();
    fleet.pause(2).unwrap();
    let released = guard.release().await;
    fleet.resume(1).unwrap();
    fleet.resume(2).unwrap();
    match &released {
        Err(
            e @ Error::ReleaseUnconfirmed {
                confirmed: 1,
                required: 2,
                refused: 0,
                failures,
                ..
            },
        ) if failures.len() == 2 && !e.is_lost() => {}
        other => panic!("expected ReleaseUnconfirmed (1 of 2, 2 failures): {other:?}"),
    }
}
