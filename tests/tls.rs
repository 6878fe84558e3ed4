//! TLS nodes (`rediss://`) for real: a private CA given to the builder, client certificates
//! (mutual TLS), pub/sub over TLS, and a clear error for each certificate mistake, none of them
//! showing a key or a password. Certificates are made at test time (rcgen).

mod common;

use std::time::Duration;

use common::pki::Pki;
use common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Builder, Error, FailureKind, NodeFailure, Quorum, QuorumLock};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

/// The body of a PEM key (its base64 lines): what must never be shown.
fn key_body(pem: &str) -> Vec<&str> {
    pem.lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 16)
        .collect()
}

fn tls_fleet(pki: &Pki, n: usize, require_client_certificate: bool) -> Fleet {
    Fleet::builder()
        .nodes(n)
        .tls(pki.fleet_tls(require_client_certificate))
        .start()
        .expect("starting a TLS fleet")
}

/// The node failure of a build refused for a node's sake, checked to be one line naming a
/// node of `fleet` (redacted as the fleet's URLs are) and a TLS failure.
fn tls_failure(fleet: &Fleet, result: Result<QuorumLock, Error>) -> NodeFailure {
    let err = match result {
        Err(err) => err,
        Ok(locks) => panic!("the build succeeded: {locks:?}"),
    };
    let shown = err.to_string();
    assert!(!shown.contains('\n'), "not one line: {shown}");
    let Error::Node(failure) = err else {
        panic!("expected a node failure, got {err:?}")
    };
    assert_eq!(failure.kind(), FailureKind::Tls, "{shown}");
    assert!(
        fleet.urls().iter().any(|u| u == failure.node()) && shown.contains(failure.node()),
        "the error does not name a node of the fleet {:?}: {shown}",
        fleet.urls()
    );
    failure
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_and_a_client_certificate_acquire_extend_fence_and_release_on_tls_nodes() {
    let pki = Pki::new("private");
    let fleet = tls_fleet(&pki, 3, true);
    assert!(fleet.urls().iter().all(|u| u.starts_with("rediss://")));
    let locks = pki.builder(&fleet).build().await.unwrap();
    let other = pki.builder(&fleet).build().await.unwrap();
    let key = unique_key("tls");

    let guard = locks.acquire(&key, TTL).await.unwrap();
    assert!(guard.validity() > TTL - Duration::from_secs(2));
    // The acquire's requests to every node landed (it returned at a quorum), so the other
    // client meets the entry on each node.
    locks.finish_background().await;
    assert!(
        other.try_acquire(&key, TTL).await.unwrap().is_none(),
        "a second client got a held lock"
    );
    other.finish_background().await;
    // The test kit's own client reads the entries over TLS, with the client certificate.
    for i in 0..fleet.len() {
        assert!(
            entry(&fleet, i, &key).await.is_some(),
            "node {i} has no entry"
        );
    }
    guard.extend(2 * TTL).await.unwrap();
    assert!(guard.validity() > TTL, "{:?}", guard.validity());
    guard.release().await.unwrap();
    locks.finish_background().await;
    for i in 0..fleet.len() {
        assert_eq!(
            entry(&fleet, i, &key).await,
            None,
            "node {i} kept the entry"
        );
    }

    let fenced = locks
        .lock(&key)
        .ttl(TTL)
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    let first = fenced.fencing_token().expect("a fencing token");
    fenced.release().await.unwrap();
    let fenced = other
        .lock(&key)
        .ttl(TTL)
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    let second = fenced.fencing_token().expect("a fencing token");
    assert!(second > first, "tokens {first} then {second}");
    fenced.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_a_lock_on_tls_nodes() {
    const LEASE: Duration = Duration::from_secs(2);
    let pki = Pki::new("watchdog");
    let fleet = tls_fleet(&pki, 3, true);
    let locks = pki
        .builder(&fleet)
        .watchdog_lease(LEASE)
        .build()
        .await
        .unwrap();
    let other = pki.builder(&fleet).build().await.unwrap();
    let key = unique_key("tls-watchdog");
    let before = Instant::now();
    let guard = locks.lock(&key).acquire().await.unwrap();
    // The first lease ends before `before + LEASE`; renewals come every third of it.
    eventually(
        &fleet,
        Duration::from_secs(20),
        "three renewals, past the first lease",
        || async { locks.stats().extended >= 3 && before.elapsed() > LEASE },
    )
    .await;
    assert!(guard.is_held(), "{:?}", locks.stats());
    assert!(
        other.try_acquire(&key, TTL).await.unwrap().is_none(),
        "another client got a lock that was being renewed"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_notice_over_tls_wakes_a_waiter_long_before_its_retry_delay() {
    let pki = Pki::new("handoff");
    let fleet = tls_fleet(&pki, 3, true);
    let holder = pki.builder(&fleet).build().await.unwrap();
    // Only a notice can wake this waiter within the test: its retry delay is 60 s.
    let waiter = pki
        .builder(&fleet)
        .retry_delay(Duration::from_secs(60))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(120))
        .build()
        .await
        .unwrap();
    let key = unique_key("tls-handoff");
    let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
    let task = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move { waiter.acquire(&key, TTL).await })
    };
    // Two contended attempts: the waiter's subscriptions are confirmed before its second.
    eventually(
        &fleet,
        Duration::from_secs(10),
        "the waiter waits",
        || async { waiter.stats().contended >= 2 },
    )
    .await;
    held.release().await.unwrap();
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
async fn without_the_private_ca_the_build_fails_naming_the_node_whose_certificate_is_not_trusted() {
    let pki = Pki::new("untrusted");
    let fleet = tls_fleet(&pki, 3, false);
    for lazy in [false, true] {
        // Trusting the public roots only (no tls_root_certificate).
        let result = builder(&fleet, Quorum::Majority).lazy(lazy).build().await;
        let failure = tls_failure(&fleet, result);
        assert!(
            failure.detail().contains("not trusted"),
            "lazy {lazy}: {failure}"
        );
    }
    // The CA alone suffices where client certificates are not asked for.
    let locks = builder(&fleet, Quorum::Majority)
        .tls_root_certificate(&*pki.ca)
        .build()
        .await
        .unwrap();
    let guard = locks.try_acquire(unique_key("ca-only"), TTL).await.unwrap();
    guard.expect("the key is free").release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_requiring_client_certificates_refuses_a_client_without_one() {
    let pki = Pki::new("mutual");
    let fleet = tls_fleet(&pki, 3, true);
    let result = builder(&fleet, Quorum::Majority)
        .tls_root_certificate(&*pki.ca)
        .build()
        .await;
    let failure = tls_failure(&fleet, result);
    assert!(
        failure.detail().contains("requires a client certificate"),
        "{failure}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_certificate_from_another_ca_is_not_trusted() {
    let pki = Pki::new("right");
    let other = Pki::new("wrong");
    let fleet = tls_fleet(&pki, 3, true);
    let result = builder(&fleet, Quorum::Majority)
        .tls_root_certificate(&*other.ca)
        .tls_client_certificate(&*pki.client.cert, &*pki.client.key)
        .build()
        .await;
    let failure = tls_failure(&fleet, result);
    assert!(failure.detail().contains("not trusted"), "{failure}");
}

#[tokio::test]
async fn bad_pem_is_invalid_config_naming_the_setting_and_never_shows_the_key() {
    let pki = Pki::new("pem");
    let other = Pki::new("other");
    let secret_key = "-----BEGIN PRIVATE KEY-----\nS3cretKeyMaterialThatMustNotShow\n-----END PRIVATE KEY-----\n";
    let bad_base64 = "-----BEGIN CERTIFICATE-----\n@@@@not base64@@@@\n-----END CERTIFICATE-----\n";
    let base = || QuorumLock::builder().nodes(["rediss://127.0.0.1:1"]);
    let cases: Vec<(&str, Builder, &str)> = vec![
        (
            "text without PEM as root",
            base().tls_root_certificate("not a certificate"),
            "tls_root_certificate",
        ),
        (
            "a key as root",
            base().tls_root_certificate(&*pki.node.key),
            "tls_root_certificate",
        ),
        (
            "bad base64 as root",
            base().tls_root_certificate(bad_base64),
            "tls_root_certificate",
        ),
        (
            "a client certificate that is not PEM",
            base().tls_client_certificate("not a certificate", &*pki.client.key),
            "tls_client_certificate",
        ),
        (
            "a client key that is not readable PEM",
            base().tls_client_certificate(&*pki.client.cert, secret_key),
            "tls_client_certificate",
        ),
        (
            "a client key that is not PEM at all",
            base().tls_client_certificate(&*pki.client.cert, "S3cretKeyMaterialThatMustNotShow"),
            "tls_client_certificate",
        ),
        (
            "another certificate's key",
            base().tls_client_certificate(&*pki.client.cert, &*other.client.key),
            "tls_client_certificate",
        ),
        (
            "a redis:// node with a root certificate",
            QuorumLock::builder()
                .nodes(["rediss://127.0.0.1:1", "redis://:S3cretPw@127.0.0.1:2"])
                .tls_root_certificate(&*pki.ca),
            "tls_root_certificate",
        ),
        (
            "a unix socket node with a client certificate",
            QuorumLock::builder()
                .nodes(["unix:///tmp/ql-tls-none.sock"])
                .tls_client_certificate(&*pki.client.cert, &*pki.client.key),
            "tls_client_certificate",
        ),
    ];
    let secrets: Vec<&str> = ["S3cretKeyMaterial", "S3cretPw"]
        .into_iter()
        .chain(key_body(&pki.client.key))
        .chain(key_body(&other.client.key))
        .collect();
    let mut wrong = Vec::new();
    for (case, builder, setting) in cases {
        let debug = format!("{builder:?}");
        match builder.build().await {
            Err(Error::InvalidConfig { field, reason }) if field == setting => {
                let shown = format!(
                    "{} / {reason}",
                    Error::InvalidConfig {
                        field,
                        reason: reason.clone()
                    }
                );
                for text in [&shown, &debug] {
                    if let Some(s) = secrets.iter().find(|s| text.contains(*s)) {
                        wrong.push(format!("{case}: shows {s:?}: {text}"));
                    }
                }
            }
            other => wrong.push(format!(
                "{case}: expected InvalidConfig for {setting}, got {other:?}"
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A password-protected TLS fleet: rejected certificates, a wrong password and a working
/// client never show the password or the client key, in errors, Debug output or the crate's
/// logs at TRACE. Current-thread runtime: the capturing subscriber is this thread's default,
/// and every task of the test runs on this thread.
#[tokio::test]
async fn a_password_on_a_tls_node_never_shows_nor_does_the_client_key() {
    let pki = Pki::new("password");
    let other = Pki::new("stranger");
    let fleet = Fleet::builder()
        .nodes(3)
        .password("S3cretPw")
        .tls(pki.fleet_tls(true))
        .start()
        .unwrap();
    assert!(fleet.url(0).starts_with("rediss://:S3cretPw@127.0.0.1:"));
    let urls = |auth: &str| -> Vec<String> {
        (0..3)
            .map(|i| format!("rediss://{auth}@127.0.0.1:{}", fleet.node(i).port()))
            .collect()
    };
    let client_key = key_body(&pki.client.key);
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("quorum_lock=trace"))
        .with_ansi(false)
        .with_writer({
            let captured = captured.clone();
            move || captured.clone()
        })
        .finish();
    let logging = tracing::subscriber::set_default(subscriber);

    let mut shown = Vec::new();
    let with_certificate = |b: Builder| {
        b.connect_timeout(Duration::from_secs(5))
            .tls_client_certificate(&*pki.client.cert, &*pki.client.key)
    };
    let rejected = [
        (
            "another CA",
            with_certificate(QuorumLock::builder().nodes(urls(":S3cretPw")))
                .tls_root_certificate(&*other.ca),
            FailureKind::Tls,
        ),
        (
            "a wrong password",
            with_certificate(QuorumLock::builder().nodes(urls(":Wr0ngPw")))
                .tls_root_certificate(&*pki.ca),
            FailureKind::Auth,
        ),
    ];
    for (case, builder, kind) in rejected {
        shown.push((case.to_string(), format!("{builder:?}")));
        match builder.build().await {
            Err(err @ Error::Node(_)) if err.node_failures()[0].kind() == kind => {
                assert!(
                    err.to_string().contains("rediss://:***@127.0.0.1:"),
                    "{err}"
                );
                shown.push((case.to_string(), format!("{err} / {err:?}")));
            }
            other => panic!("{case}: expected a {kind:?} node failure, got {other:?}"),
        }
    }
    let locks = with_certificate(QuorumLock::builder().nodes(urls(":S3cretPw")))
        .tls_root_certificate(&*pki.ca)
        .build()
        .await
        .expect("the right password and certificates");
    let guard = locks
        .try_acquire(unique_key("tls-secret"), TTL)
        .await
        .unwrap()
        .expect("the key is free");
    shown.push(("nodes()".into(), locks.nodes().join(" ")));
    shown.push(("the client's Debug".into(), format!("{locks:?}")));
    shown.push(("the guard's Debug".into(), format!("{guard:?}")));
    guard.release().await.unwrap();
    drop(logging);
    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(
        logs.contains("rediss://:***@127.0.0.1:"),
        "the captured logs do not name the nodes:\n{logs}"
    );
    shown.extend(
        logs.lines()
            .map(|l| ("a log line".to_string(), l.to_string())),
    );

    let wrong: Vec<String> = shown
        .iter()
        .filter(|(_, text)| {
            text.contains("S3cretPw")
                || text.contains("Wr0ngPw")
                || client_key.iter().any(|k| text.contains(k))
        })
        .map(|(what, text)| format!("{what} shows a secret: {text}"))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `Builder::node_clients`: redis clients of one's own for the nodes, with the builder's TLS
/// settings, and their errors read as the lock client reads its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_clients_connect_with_the_builders_tls_settings() {
    let pki = Pki::new("node-clients");
    let fleet = Fleet::builder()
        .nodes(2)
        .password("S3cretPw")
        .tls(pki.fleet_tls(true))
        .start()
        .unwrap();
    for node in pki.builder(&fleet).node_clients().unwrap() {
        assert!(
            node.name().starts_with("rediss://:***@127.0.0.1:"),
            "{node:?}"
        );
        let mut conn = node
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("{}", node.failure(&e)));
        let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        assert_eq!(pong, "PONG");
    }
    // Without the CA: the handshake fails, named and explained as the build's would be.
    let untrusted = builder(&fleet, Quorum::Majority)
        .tls_client_certificate(&*pki.client.cert, &*pki.client.key)
        .node_clients()
        .unwrap();
    let e = untrusted[0]
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect_err("the node's certificate is not trusted");
    let failure = untrusted[0].failure(&e);
    assert_eq!(failure.kind(), FailureKind::Tls, "{failure}");
    assert!(failure.detail().contains("not trusted"), "{failure}");
    assert!(!failure.to_string().contains("S3cretPw"), "{failure}");
    // The TLS settings are checked as build checks them.
    let err = builder(&fleet, Quorum::Majority)
        .tls_root_certificate("not a certificate")
        .node_clients()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidConfig {
                field: "tls_root_certificate",
                ..
            }
        ),
        "{err}"
    );
}
