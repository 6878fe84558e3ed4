//! Every bad input is a typed error naming the problem: never a panic, a hang or a silent
//! success, and never a password in a message.

mod common;

use std::time::{Duration, Instant};

use common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Error, FailureKind, Quorum, QuorumLock};

fn config_field(result: Result<QuorumLock, Error>) -> &'static str {
    match result {
        Err(Error::InvalidConfig { field, .. }) => field,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_keys_and_ttls() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await; // node timeout 250 ms
    let ttl = Duration::from_secs(5);
    assert!(matches!(
        locks.try_acquire("", ttl).await,
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        locks.acquire(b"", ttl).await,
        Err(Error::InvalidKey { .. })
    ));
    let huge = vec![b'k'; quorum_lock::MAX_KEY_LEN + 1];
    assert!(matches!(
        locks.try_acquire(&huge, ttl).await,
        Err(Error::InvalidKey { .. })
    ));

    let key = unique_key("bad-ttl");
    for bad in [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_millis(100), // below the node timeout
        Duration::from_millis(250), // equal to the node timeout
        Duration::from_millis(252), // not above node timeout + drift
        quorum_lock::MAX_TTL + Duration::from_secs(1),
        Duration::MAX,
    ] {
        match locks.try_acquire(&key, bad).await {
            Err(Error::InvalidTtl { ttl, reason }) => {
                assert_eq!(ttl, bad);
                assert!(!reason.is_empty());
            }
            other => panic!("ttl {bad:?}: expected InvalidTtl, got {other:?}"),
        }
    }
    let guard = locks.try_acquire(&key, ttl).await.unwrap().unwrap();
    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(Error::InvalidTtl { .. })
    ));
    assert!(guard.is_held(), "a rejected extend leaves the lock alone");
    guard.release().await.unwrap();
    // Once every call has landed on every node (a release returns at a quorum).
    locks.finish_background().await;
    for i in 0..fleet.len() {
        assert!(
            entry(fleet, i, &key).await.is_none(),
            "a rejected call touched node {i}"
        );
    }
}

#[tokio::test]
async fn bad_configuration_names_the_setting() {
    let urls = [
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:2",
        "redis://127.0.0.1:3",
    ];
    let b = || QuorumLock::builder().nodes(urls);
    assert_eq!(config_field(QuorumLock::builder().build().await), "nodes");
    assert_eq!(
        config_field(
            QuorumLock::builder()
                .nodes(Vec::<String>::new())
                .build()
                .await
        ),
        "nodes"
    );
    assert_eq!(
        config_field(b().quorum(Quorum::AtLeast(1)).build().await),
        "quorum"
    );
    assert_eq!(
        config_field(b().quorum(Quorum::AtLeast(4)).build().await),
        "quorum"
    );
    assert_eq!(
        config_field(b().node_timeout(Duration::ZERO).build().await),
        "node_timeout"
    );
    assert_eq!(
        config_field(b().drift_factor(0.7).build().await),
        "drift_factor"
    );
    for lease in [Duration::ZERO, Duration::from_millis(100), Duration::MAX] {
        assert_eq!(
            config_field(b().queue_lease(lease).build().await),
            "queue_lease",
            "a queue lease of {lease:?} (at most two node timeouts, or unrepresentable)"
        );
    }
    assert_eq!(
        config_field(b().node_timeout(Duration::from_secs(60)).build().await),
        "watchdog_lease",
        "node timeout not below the default 30 s watchdog lease"
    );
}

#[tokio::test]
async fn unparsable_and_unsupported_urls() {
    for bad in [
        "",
        "not a url",
        "http://127.0.0.1:6379",
        "redis://",
        "redis://u:hunter2@[::1:6379",
    ] {
        match QuorumLock::builder().nodes([bad]).build().await {
            Err(e @ Error::InvalidNodeUrl { .. }) => {
                assert!(!e.to_string().contains("hunter2"), "password in {e}");
                assert!(!format!("{e:?}").contains("hunter2"), "password in {e:?}");
            }
            other => panic!("{bad:?}: expected InvalidNodeUrl, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn unknown_host_names_the_node() {
    let started = Instant::now();
    let err = QuorumLock::builder()
        .nodes(["redis://no-such-host.invalid:6379"])
        .build()
        .await
        .unwrap_err();
    match &err {
        Error::Node(f) => {
            assert!(
                matches!(f.kind(), FailureKind::UnknownHost | FailureKind::Connection),
                "{err}"
            );
            assert!(f.node().contains("no-such-host.invalid"), "{err}");
        }
        Error::Unreachable { failures, .. } => {
            assert!(failures[0].node().contains("no-such-host.invalid"), "{err}")
        }
        other => panic!("expected a node error, got {other}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "bounded by the connect timeout"
    );
}

/// A database index the server does not have, and `rediss://` to a server without TLS, are
/// `FailureKind::Config` at build: what waiting will not fix, named as such (before: a
/// server error and a timeout, as for a node that is down).
#[tokio::test]
async fn a_missing_database_and_tls_to_a_plain_server_are_configuration_failures() {
    let fleet = Fleet::start(1).expect("fleet");
    let mut urls = vec![format!("{}/99", fleet.url(0))];
    if cfg!(feature = "tls") {
        urls.push(fleet.url(0).replace("redis://", "rediss://"));
    }
    for url in urls {
        let err = QuorumLock::builder()
            .nodes([url.as_str()])
            .connect_timeout(Duration::from_millis(500))
            .build()
            .await
            .unwrap_err();
        let failure = match &err {
            Error::Node(f) => f,
            Error::Unreachable { failures, .. } if failures.len() == 1 => &failures[0],
            other => panic!("{url}: expected a node failure, got {other}"),
        };
        assert_eq!(failure.kind(), FailureKind::Config, "{url}: {err}");
    }
}

#[tokio::test]
async fn wrong_password_names_the_node_and_hides_the_password() {
    let fleet = Fleet::builder()
        .nodes(1)
        .password("right-pass")
        .start()
        .unwrap();
    let port = fleet.node(0).port();
    let url = format!("redis://:wrong-pass-123@127.0.0.1:{port}");
    let err = QuorumLock::builder()
        .nodes([&url])
        .build()
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(
        matches!(&err, Error::Node(f) if f.kind() == FailureKind::Auth),
        "{err}"
    );
    assert!(
        shown.contains(&port.to_string()),
        "does not name the node: {shown}"
    );
    assert!(
        !shown.contains("wrong-pass-123"),
        "password leaked: {shown}"
    );
    // No password at all is an auth failure too.
    let err = QuorumLock::builder()
        .nodes([format!("redis://127.0.0.1:{port}")])
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Node(f) if f.kind() == FailureKind::Auth),
        "{err}"
    );
    // The right one works, and Debug output of the client hides it.
    let locks = QuorumLock::builder()
        .nodes(fleet.urls())
        .build()
        .await
        .unwrap();
    assert!(!format!("{locks:?}").contains("right-pass"), "{locks:?}");
    let guard = locks
        .try_acquire(unique_key("auth"), Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(!format!("{guard:?}").contains("right-pass"));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn all_nodes_down_is_an_error_unless_lazy() {
    let fleet = own_fleet(3);
    let urls = fleet.urls();
    for i in 0..3 {
        fleet.kill(i).unwrap();
    }
    let err = QuorumLock::builder()
        .nodes(&urls)
        .build()
        .await
        .unwrap_err();
    match &err {
        Error::Unreachable {
            reachable: 0,
            nodes: 3,
            required: 2,
            failures,
        } => {
            assert_eq!(failures.len(), 3);
            assert!(failures.iter().all(|f| f.is_connection()), "{err}");
        }
        other => panic!("expected Unreachable, got {other}"),
    }
    // Lazy: builds, fails per attempt (each node unchecked: not sent), and works once the
    // nodes are back and their checks, tried again every second, passed.
    let locks = QuorumLock::builder()
        .nodes(&urls)
        .lazy(true)
        .build()
        .await
        .unwrap();
    let err = locks
        .try_acquire("k", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoQuorum { confirmed: 0, .. }), "{err}");
    assert!(
        err.node_failures()
            .iter()
            .all(|f| f.unsent() == Some(quorum_lock::Unsent::Unchecked)),
        "{err}"
    );
    for i in 0..3 {
        fleet.restart(i).unwrap();
    }
    eventually(
        &fleet,
        Duration::from_secs(10),
        "nodes back and checked",
        || async {
            match locks.try_acquire("k", Duration::from_secs(5)).await {
                Ok(Some(guard)) => {
                    guard.release().await.unwrap();
                    true
                }
                Ok(None) => panic!("nobody else holds k"),
                Err(_) => false,
            }
        },
    )
    .await;
}

#[tokio::test]
async fn the_same_server_twice_and_replicas_are_rejected() {
    let fleet = own_fleet(2);
    let port = fleet.node(0).port();
    let twice = [
        format!("redis://127.0.0.1:{port}"),
        format!("redis://localhost:{port}/1"),
    ];
    let err = QuorumLock::builder()
        .nodes(&twice)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateNode { .. }), "{err}");

    let mut c = conn(&fleet, 1).await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(port)
        .query_async(&mut c)
        .await
        .unwrap();
    let err = QuorumLock::builder()
        .nodes(fleet.urls())
        .build()
        .await
        .unwrap_err();
    match err {
        Error::ReplicaNode { node } => assert!(node.contains(&fleet.node(1).port().to_string())),
        other => panic!("expected ReplicaNode, got {other}"),
    }
}
