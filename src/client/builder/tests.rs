//! The builder's checks of its settings, without nodes.

use super::*;
use crate::error::FailureKind;
use crate::rules::config::MAX_TTL;

fn field(r: Result<Config>) -> &'static str {
    match r {
        Err(Error::InvalidConfig { field, .. }) => field,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

fn five() -> Builder {
    QuorumLock::builder().nodes((1..=5).map(|i| format!("redis://127.0.0.1:{}", 7000 + i)))
}

#[test]
fn settings_are_validated_by_name() {
    assert_eq!(field(QuorumLock::builder().validate()), "nodes");
    assert_eq!(
        field(five().quorum(Quorum::AtLeast(2)).validate()),
        "quorum"
    );
    assert_eq!(
        field(five().quorum(Quorum::AtLeast(6)).validate()),
        "quorum"
    );
    assert_eq!(
        field(five().node_timeout(Duration::ZERO).validate()),
        "node_timeout"
    );
    assert_eq!(
        field(five().node_timeout(Duration::from_nanos(1)).validate()),
        "node_timeout"
    );
    assert_eq!(
        field(
            five()
                .connect_timeout(Duration::from_micros(999))
                .validate()
        ),
        "connect_timeout"
    );
    assert!(five()
        .node_timeout(Duration::from_millis(1))
        .validate()
        .is_ok());
    assert_eq!(
        field(five().drift_factor(f64::NAN).validate()),
        "drift_factor"
    );
    assert_eq!(field(five().drift_factor(-0.1).validate()), "drift_factor");
    assert_eq!(
        field(five().watchdog_lease(Duration::from_millis(10)).validate()),
        "watchdog_lease"
    );
    assert!(five().validate().is_ok());
    assert!(five().quorum(Quorum::AtLeast(3)).validate().is_ok());
}

#[test]
fn node_clients_show_no_password_and_need_no_node() {
    let nodes = QuorumLock::builder()
        .nodes([
            "redis://:hunter2@127.0.0.1:1",
            "unix:///tmp/ql.sock?pass=hunter2",
        ])
        .node_clients()
        .unwrap();
    assert_eq!(nodes[0].name(), "redis://:***@127.0.0.1:1");
    for node in &nodes {
        let shown = format!("{} {node:?}", node.name());
        assert!(!shown.contains("hunter2"), "{shown}");
    }
    let refused = redis::RedisError::from((redis::ErrorKind::Io, "refused", "hunter2".into()));
    let failure = nodes[0].failure(&refused);
    assert_eq!(failure.kind(), FailureKind::Connection);
    assert!(!failure.to_string().contains("hunter2"), "{failure}");
    assert!(matches!(
        QuorumLock::builder()
            .nodes(["redis://:hunter2@[bad"])
            .node_clients(),
        Err(Error::InvalidNodeUrl { .. })
    ));
}

#[test]
fn ttl_checks() {
    let c = five().validate().unwrap();
    assert!(matches!(
        c.check_ttl(Duration::ZERO),
        Err(Error::InvalidTtl { .. })
    ));
    assert!(matches!(
        c.check_ttl(Duration::from_micros(999)),
        Err(Error::InvalidTtl { .. })
    ));
    // node timeout 50 ms + drift 2.5 ms: 52 ms is not enough, 60 ms is.
    assert!(c.check_ttl(Duration::from_millis(52)).is_err());
    assert_eq!(
        c.check_ttl(Duration::from_micros(60_900)).unwrap(),
        Duration::from_millis(60)
    );
    assert!(c.check_ttl(MAX_TTL + Duration::from_secs(1)).is_err());
    assert!(c.check_ttl(Duration::MAX).is_err());
}

#[test]
fn the_getters_read_what_build_uses_and_the_queue_lease_follows_the_node_timeout() {
    let b = five();
    assert_eq!(b.get_node_timeout(), Duration::from_millis(50));
    assert_eq!(b.get_connect_timeout(), Duration::from_secs(2));
    assert_eq!(b.get_quorum(), Quorum::Majority);
    // Unset, the queue lease is 5 s, or three node timeouts when that is longer.
    assert_eq!(b.get_queue_lease(), Duration::from_secs(5));
    let slow = five().node_timeout(Duration::from_secs(2));
    assert_eq!(slow.get_queue_lease(), Duration::from_secs(6));
    let c = slow.clone().validate().unwrap();
    assert_eq!(c.queue_lease, slow.get_queue_lease());
    assert_eq!(c.node_timeout, slow.get_node_timeout());
    let set = five().queue_lease(Duration::from_secs(9));
    assert_eq!(set.get_queue_lease(), Duration::from_secs(9));
}
