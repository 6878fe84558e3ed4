//! The generative checker (examples/chaos) against the current code, and its negative
//! controls: each known class of defect, put back through a fail point, must be caught by the
//! checker, which reads only the history.
//!
//! Fail points are process-wide, so the runs of this file take turns (a lock). A run's
//! length comes from `QUORUM_LOCK_CHAOS_SECS` (10 s by default).

#[path = "../examples/chaos/check.rs"]
mod check;
#[path = "../examples/chaos/history.rs"]
mod history;
#[path = "../examples/chaos/nemesis.rs"]
mod nemesis;
#[path = "../examples/chaos/run.rs"]
mod run;
#[path = "../examples/chaos/workload.rs"]
mod workload;

use std::sync::Mutex;
use std::time::Duration;

use check::Report;
use quorum_lock::failpoints::{self, FailPoint};

static TURN: Mutex<()> = Mutex::new(());

fn seconds() -> u64 {
    std::env::var("QUORUM_LOCK_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
}

/// One run of `seconds()` with `point` on (none: the code as it is), on a runtime of its own.
fn chaos(seed: u64, point: Option<FailPoint>, latency_ms: u64) -> Report {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    failpoints::disable_all();
    if let Some(point) = point {
        failpoints::enable(point);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Kept for a look after a failure (the checker reads it back from there).
    let history = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "chaos-{seed}-{point:?}-{}.jsonl",
        quorum_lock::testkit::monotonic_nanos()
    ));
    let report = runtime.block_on(run::run(run::Options {
        seconds: seconds(),
        seed,
        history: Some(history.clone()),
        clients: 6,
        quorum4: false,
        nodes: None,
        base_latency: (latency_ms > 0).then(|| Duration::from_millis(latency_ms)),
        verbose: false,
    }));
    failpoints::disable_all();
    println!(
        "seed {seed}, {point:?} (history {}): {report}",
        history.display()
    );
    // A control that caught its defect, or a clean run that found nothing, leaves no file.
    if point.is_some() == (report.anomalies() > 0) {
        let _ = std::fs::remove_file(&history);
    }
    report
}

/// The code as it is: a short seeded run finds nothing (the seeds CI runs), on loopback links
/// and on links of 10 ms.
#[test]
fn a_seeded_run_of_the_current_code_has_no_anomaly() {
    for seed in [11, 12] {
        let report = chaos(seed, None, if seed % 2 == 0 { 10 } else { 0 });
        assert_eq!(report.anomalies(), 0, "seed {seed}: {report}");
        assert!(report.holds > 20 && report.register_writes > 10, "{report}");
    }
}

/// Each control: the fail point, and the anomalies that must show it.
fn caught(point: FailPoint, seed: u64, shows: fn(&Report) -> bool, what: &str) {
    // Links of 20 ms, as between machines: a call cancelled within its round trip leaves
    // requests written and unread on every node (the spurious failure's cause).
    let report = chaos(seed, Some(point), 20);
    assert!(shows(&report), "{point:?} ({what}) not caught: {report}");
}

#[test]
fn two_holders_across_clients_are_caught() {
    caught(
        FailPoint::QuorumOfOne,
        21,
        |r| !r.overlaps.is_empty() || !r.lost_updates.is_empty(),
        "a quorum of 1 of 5",
    );
}

#[test]
fn two_holders_through_a_holder_value_call_in_one_process_are_caught() {
    caught(
        FailPoint::HolderCallBypassesGuard,
        22,
        |r| !r.overlaps.is_empty() || !r.lost_updates.is_empty(),
        "the guard says held after its release by holder value",
    );
}

#[test]
fn a_spurious_no_quorum_on_a_healthy_quorum_is_caught() {
    caught(
        FailPoint::AbandonedAnswersUncounted,
        23,
        |r| !r.spurious_failures.is_empty(),
        "the breaker opens after a cancelled call",
    );
}

#[test]
fn a_leak_after_quiescence_is_caught() {
    caught(
        FailPoint::SubscriptionLeft,
        24,
        |r| !r.leaks.is_empty(),
        "a waiter leaves its subscription",
    );
}

#[test]
fn a_fencing_token_that_goes_back_is_caught() {
    caught(
        FailPoint::TokenGoesBack,
        25,
        |r| !r.overlaps.is_empty() || !r.lost_updates.is_empty(),
        "a guard reports an older token",
    );
}
