//! A start whose future is dropped part way (a timeout around it): it completes on its own
//! thread and removes what it made, and the next start works. Alone in its test binary: it
//! checks that no container or network of a fleet is left but those there before it began,
//! so no other fleet may start in the process. Ignored by default (it needs Docker): `cargo test -p quorum-lock-containers
//! -- --ignored`.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use quorum_lock_containers::{ContainerFleet, Side};

/// The ids of the containers and networks that carry the fleets' label, of any fleet.
fn labelled() -> BTreeSet<String> {
    let list = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().expect("docker");
        assert!(out.status.success(), "docker {args:?} failed");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let filter = "label=quorum-lock.testkit";
    let mut ids: BTreeSet<String> = list(&["ps", "--all", "--quiet", "--filter", filter])
        .into_iter()
        .collect();
    ids.extend(list(&["network", "ls", "--quiet", "--filter", filter]));
    ids
}

/// Waits (up to `limit`) until nothing labelled is left but what was there `before` (another
/// process's fleet, or what the engine could not remove before this test); returns the rest.
async fn until_clean(before: &BTreeSet<String>, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<String> = labelled().difference(before).cloned().collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: run with --ignored"]
async fn a_cancelled_start_removes_what_it_made_and_the_next_start_works() {
    let before = labelled();
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
        let left = until_clean(&before, Duration::from_secs(30)).await;
        assert!(
            left.is_empty(),
            "containers and networks left 30 s after a start cancelled at {ms} ms: {left:?}"
        );
    }
}
