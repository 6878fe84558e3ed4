//! A start whose future is dropped part way (a timeout around it): it completes on its own
//! thread and removes what it made, and the next start works. Alone in its test binary: it
//! checks that no container or network of any fleet is left, so no other fleet may live in
//! the process. Ignored by default (it needs Docker): `cargo test -p quorum-lock-containers
//! -- --ignored`.

use std::process::Command;
use std::time::{Duration, Instant};

use quorum_lock_containers::{ContainerFleet, Side};

/// Containers and networks that carry the fleets' label, of any fleet.
fn leftovers() -> (String, String) {
    let list = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().expect("docker");
        assert!(out.status.success(), "docker {args:?} failed");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let filter = "label=quorum-lock.testkit";
    (
        list(&["ps", "--all", "--quiet", "--filter", filter]),
        list(&["network", "ls", "--quiet", "--filter", filter]),
    )
}

/// Waits (up to `limit`) until no fleet's container or network is left.
async fn until_clean(limit: Duration) -> (String, String) {
    let deadline = Instant::now() + limit;
    loop {
        let left = leftovers();
        if (left.0.is_empty() && left.1.is_empty()) || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn a_cancelled_start_removes_what_it_made_and_the_next_start_works() {
    // A previous test binary's shared fleet is removed by its reaper within seconds.
    let before = until_clean(Duration::from_secs(30)).await;
    assert_eq!(
        before,
        (String::new(), String::new()),
        "left before the test"
    );
    // Cancelled while the networks are made, while the containers start, and near the end.
    for ms in [50, 600, 1000] {
        let started =
            tokio::time::timeout(Duration::from_millis(ms), ContainerFleet::start(3)).await;
        drop(started);
        let next = tokio::time::timeout(Duration::from_secs(60), ContainerFleet::start(1))
            .await
            .unwrap_or_else(|_| panic!("the start after one cancelled at {ms} ms hangs"))
            .expect("the next start");
        next.pause(0).await.expect("pause");
        next.resume(0).await.expect("resume");
        next.partition(0, Side::A).await.expect("partition");
        next.heal_all().await.expect("heal");
        drop(next);
        let left = until_clean(Duration::from_secs(30)).await;
        assert_eq!(
            left,
            (String::new(), String::new()),
            "containers and networks left 30 s after a start cancelled at {ms} ms"
        );
    }
}
