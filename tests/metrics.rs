//! What the library records through the `metrics` facade (feature `metrics`), read back with
//! metrics-util's debugging recorder: names, labels and values after real operations on real
//! nodes, and that no label carries a key or an address.
//!
//! The recorder is global to this test binary, so the tests take turns (a shared lock) and
//! compare what was recorded before and after their own operations. The debugging recorder
//! hands out what was recorded since its previous snapshot; [`record`] adds that up.

mod common;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use quorum_lock::{Error, Quorum};

const TTL: Duration = Duration::from_secs(10);

/// One recorded series: its name, labels and everything recorded so far.
#[derive(Clone)]
struct Series {
    name: String,
    labels: BTreeMap<String, String>,
    value: Value,
}

#[derive(Clone, Debug)]
enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(Vec<f64>),
}

struct Recorded(Vec<Series>);

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("installing the debugging recorder");
        snapshotter
    })
}

/// Serialises the tests of this binary: they share the global recorder.
async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    TURN.get_or_init(Default::default).lock().await
}

/// Everything recorded since the binary started: each snapshot of the debugging recorder
/// holds what was recorded since the previous one (counters and gauge moves as deltas,
/// histogram samples once), added here to the running totals.
fn record() -> Recorded {
    type Totals = BTreeMap<(String, BTreeMap<String, String>), Value>;
    static TOTALS: OnceLock<Mutex<Totals>> = OnceLock::new();
    let mut totals = TOTALS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    for (key, _unit, _help, value) in snapshotter().snapshot().into_vec() {
        let (_kind, key) = key.into_parts();
        let labels = key
            .labels()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect();
        let entry = totals.entry((key.name().to_string(), labels));
        match value {
            DebugValue::Counter(n) => {
                let total = entry.or_insert(Value::Counter(0));
                if let Value::Counter(t) = total {
                    *t += n;
                }
            }
            DebugValue::Gauge(g) => {
                let total = entry.or_insert(Value::Gauge(0.0));
                if let Value::Gauge(t) = total {
                    *t += g.into_inner();
                }
            }
            DebugValue::Histogram(xs) => {
                let total = entry.or_insert(Value::Histogram(Vec::new()));
                if let Value::Histogram(t) = total {
                    t.extend(xs.into_iter().map(|x| x.into_inner()));
                }
            }
        }
    }
    Recorded(
        totals
            .iter()
            .map(|((name, labels), value)| Series {
                name: name.clone(),
                labels: labels.clone(),
                value: value.clone(),
            })
            .collect(),
    )
}

impl Recorded {
    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Series> + 'a {
        self.0.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The sum of the counters of `name` carrying `labels` (and any others).
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .map(|s| match &s.value {
                Value::Counter(n) => *n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    /// The samples of the histograms of `name` carrying `labels`.
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(name, labels)
            .flat_map(|s| match &s.value {
                Value::Histogram(v) => v.clone(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .collect()
    }

    /// How much the counters of `name` carrying `labels` grew since `before`.
    fn counter_since(&self, before: &Recorded, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counter(name, labels) - before.counter(name, labels)
    }

    /// The samples recorded after `before`.
    fn samples_since(&self, before: &Recorded, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let seen = before.samples(name, labels).len();
        self.samples(name, labels)[seen..].to_vec()
    }

    fn gauge(&self, name: &str) -> f64 {
        self.matching(name, &[])
            .map(|s| match &s.value {
                Value::Gauge(g) => *g,
                other => panic!("{name} is not a gauge: {other:?}"),
            })
            .sum()
    }

    /// The node labels seen on `name`.
    fn nodes(&self, name: &str) -> Vec<String> {
        let mut nodes: Vec<String> = self
            .matching(name, &[])
            .filter_map(|s| s.labels.get("node").cloned())
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }

    /// No label value mentions a key or an address; node labels are indexes below `n`.
    fn assert_no_secrets(&self, n: usize, forbidden: &[&str]) {
        for s in &self.0 {
            assert!(
                s.name.starts_with("quorum_lock_"),
                "unexpected metric {}",
                s.name
            );
            for (k, v) in &s.labels {
                for f in forbidden {
                    assert!(!v.contains(f), "label {k}={v} of {} shows {f:?}", s.name);
                }
                if k == "node" {
                    let i: usize = v.parse().expect("a node label is an index");
                    assert!(i < n, "node label {v} of {} out of range", s.name);
                }
            }
        }
    }
}

const REQUESTS: &str = "quorum_lock_node_requests_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_and_its_release_are_recorded_by_outcome_node_and_operation() {
    let _turn = turn().await;
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("metrics-basic");
    let before = record();
    let held_before = before.gauge("quorum_lock_held");

    let guard = locks.acquire(&key, TTL).await.unwrap();
    let during = record();
    assert_eq!(during.gauge("quorum_lock_held"), held_before + 1.0);
    guard.release().await.unwrap();
    locks.finish_background().await;
    let after = record();

    assert_eq!(
        after.counter_since(
            &before,
            "quorum_lock_acquire_attempts_total",
            &[("outcome", "acquired")]
        ),
        1
    );
    let acquired = during.samples_since(
        &before,
        "quorum_lock_acquire_duration_seconds",
        &[("outcome", "acquired")],
    );
    assert_eq!(acquired.len(), 1, "one acquire call: {acquired:?}");
    assert!(acquired[0] > 0.0 && acquired[0] < TTL.as_secs_f64());
    assert_eq!(after.gauge("quorum_lock_held"), held_before);
    assert_eq!(
        after
            .samples_since(
                &before,
                "quorum_lock_hold_duration_seconds",
                &[("end", "ended")]
            )
            .len(),
        1
    );
    assert_eq!(
        after.counter_since(
            &before,
            "quorum_lock_releases_total",
            &[("by", "release"), ("outcome", "confirmed")]
        ),
        1
    );
    // One request per node and call. The release settles the acquire's slower requests
    // first: those already written are awaited, the rest are stopped unsent. The release's
    // own slower requests finish in the background, which `finish_background` waited for.
    for i in 0..5 {
        let node = i.to_string();
        for op in ["acquire", "release"] {
            assert_eq!(
                after.counter_since(&before, REQUESTS, &[("node", &node), ("operation", op)]),
                1,
                "node {i}, {op}"
            );
        }
    }
    let answered = after.counter_since(
        &before,
        REQUESTS,
        &[("operation", "acquire"), ("result", "answered")],
    );
    let stopped = after.counter_since(
        &before,
        REQUESTS,
        &[("operation", "acquire"), ("result", "stopped")],
    );
    assert!(answered >= 3, "a quorum answered the acquire: {answered}");
    assert_eq!(answered + stopped, 5);
    assert_eq!(
        after.counter_since(
            &before,
            REQUESTS,
            &[("operation", "release"), ("result", "answered")]
        ),
        5
    );
    assert_eq!(after.nodes(REQUESTS), ["0", "1", "2", "3", "4"]);
    let latencies = after
        .samples_since(
            &before,
            "quorum_lock_node_request_duration_seconds",
            &[("operation", "acquire")],
        )
        .len();
    assert_eq!(latencies as u64, answered, "one latency per node answer");
    after.assert_no_secrets(5, &[&key, "test:", "127.0.0.1", "redis://"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_timeouts_rollbacks_and_wakeups_are_recorded() {
    let _turn = turn().await;
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let waiter = builder(fleet, Quorum::Majority)
        .retry_delay(Duration::from_secs(3))
        .retry_jitter(Duration::ZERO)
        .build()
        .await
        .unwrap();
    let key = unique_key("metrics-contention");
    let before = record();
    let ordered_before = waiter.stats().ordered;

    let held = holder.acquire(&key, TTL).await.unwrap();
    assert!(waiter.try_acquire(&key, TTL).await.unwrap().is_none());
    let timed_out = waiter
        .lock(&key)
        .ttl(TTL)
        .wait(Duration::from_millis(200))
        .acquire()
        .await;
    assert!(
        matches!(timed_out, Err(Error::WaitTimeout { .. })),
        "{timed_out:?}"
    );
    let mid = record();
    assert_eq!(
        mid.samples_since(
            &before,
            "quorum_lock_acquire_duration_seconds",
            &[("outcome", "busy")]
        )
        .len(),
        1
    );
    assert_eq!(
        mid.samples_since(
            &before,
            "quorum_lock_acquire_duration_seconds",
            &[("outcome", "timeout")]
        )
        .len(),
        1
    );
    let contended = mid.counter_since(
        &before,
        "quorum_lock_acquire_attempts_total",
        &[("outcome", "contended")],
    );
    assert!(contended >= 2, "{contended} contended attempts");
    // An attempt after the waiter's first refusal asks the key's arbiter alone, which refuses
    // and took nothing: only the attempts sent to every node are rolled back.
    let ordered = waiter.stats().ordered - ordered_before;
    assert!(ordered >= 1, "{ordered} ordered attempts");
    assert_eq!(
        mid.counter_since(&before, "quorum_lock_rollbacks_total", &[]),
        contended - ordered,
        "every contended attempt sent to every node is rolled back"
    );
    // The 200 ms wait ended on its timer (the retry delay is 3 s, so it is cut at the wait's
    // end), since no release came.
    assert!(mid.counter_since(&before, "quorum_lock_wakeups_total", &[("source", "timer")]) >= 1);

    // A waiter woken by the release notice.
    let woken_before = waiter.stats().woken;
    let task = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move { waiter.acquire(&key, TTL).await })
    };
    // Its first refused attempt subscribes to the key's release notices, and the attempt
    // made at once after subscribing is the second: after it, the waiter listens.
    let contended_so_far = waiter.stats().contended;
    eventually(
        fleet,
        Duration::from_secs(10),
        "the waiter listens for the release",
        || async { waiter.stats().contended >= contended_so_far + 2 },
    )
    .await;
    held.release().await.unwrap();
    let guard = task.await.unwrap().unwrap();
    let after = record();
    let woken = waiter.stats().woken - woken_before;
    assert!(woken >= 1, "the release notice woke the waiter");
    assert_eq!(
        after.counter_since(
            &before,
            "quorum_lock_wakeups_total",
            &[("source", "notice")]
        ),
        woken
    );
    drop(guard);
    after.assert_no_secrets(5, &[&key, "test:", "127.0.0.1", "redis://"]);
    // The dropped guard's release and the rollbacks still running must not be recorded in
    // the next test's window (the turn only orders the tests, not their background work).
    finish_background(&[holder, waiter]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renewals_repairs_and_a_loss_by_expiry_are_recorded() {
    let _turn = turn().await;
    let fleet = own_fleet(3);
    let locks = builder(&fleet, Quorum::Majority)
        .watchdog_lease(Duration::from_millis(1500))
        .build()
        .await
        .unwrap();
    let key = unique_key("metrics-expiry");
    let before = record();
    let held_before = before.gauge("quorum_lock_held");

    let guard = locks.lock(&key).acquire().await.unwrap();
    let lost = guard.lost_signal();
    // The acquire returned at a quorum: its request to the third node may still be on its
    // way. Node 0 must hold the entry before it can forget it.
    locks.finish_background().await;
    // One node forgets the entry (its clock jumped): the next renewal repairs it.
    assert_eq!(fleet.expire_early(0, &key).unwrap(), 1);
    eventually(&fleet, Duration::from_secs(10), "a repair", || async {
        locks.stats().repaired >= 1
    })
    .await;
    let mid = record();
    assert!(
        mid.counter_since(
            &before,
            "quorum_lock_renewals_total",
            &[("by", "watchdog"), ("outcome", "confirmed")]
        ) >= 1
    );
    assert_eq!(
        mid.counter_since(&before, "quorum_lock_repaired_entries_total", &[]),
        locks.stats().repaired
    );

    // Two of three nodes die: no renewal can be confirmed, and the lock runs out.
    fleet.kill(1).unwrap();
    fleet.kill(2).unwrap();
    lost.wait().await;
    let after = record();
    assert_eq!(
        after.counter_since(&before, "quorum_lock_lost_total", &[("reason", "expired")]),
        1
    );
    assert_eq!(
        after.counter_since(&before, "quorum_lock_lost_total", &[]),
        1
    );
    assert_eq!(after.gauge("quorum_lock_held"), held_before);
    assert_eq!(
        after
            .samples_since(
                &before,
                "quorum_lock_hold_duration_seconds",
                &[("end", "lost")]
            )
            .len(),
        1
    );
    drop(guard);
    after.assert_no_secrets(5, &[&key, "test:", "127.0.0.1", "redis://"]);
    // Nothing of this test may be recorded in the next one's window.
    locks.finish_background().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_refused_by_a_majority_is_recorded_as_a_loss_by_refusal() {
    let _turn = turn().await;
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("metrics-refused");
    let before = record();
    let held_before = before.gauge("quorum_lock_held");

    let guard = locks.acquire(&key, TTL).await.unwrap();
    locks.finish_background().await;
    // Three of five nodes forget the entry (their clocks jumped).
    for i in 0..3 {
        assert_eq!(fleet.expire_early(i, &key).unwrap(), 1);
    }
    let extended = guard.extend(TTL).await;
    assert!(
        matches!(extended, Err(Error::LockLost { .. })),
        "{extended:?}"
    );
    let after = record();
    assert_eq!(
        after.counter_since(&before, "quorum_lock_lost_total", &[("reason", "refused")]),
        1
    );
    assert_eq!(
        after.counter_since(
            &before,
            "quorum_lock_renewals_total",
            &[("by", "extend"), ("outcome", "lost")]
        ),
        1
    );
    assert_eq!(after.gauge("quorum_lock_held"), held_before);
    assert_eq!(
        after
            .samples_since(
                &before,
                "quorum_lock_hold_duration_seconds",
                &[("end", "lost")]
            )
            .len(),
        1
    );
    let released = guard.release().await;
    assert!(
        matches!(released, Err(Error::NotHeld { .. })),
        "{released:?}"
    );
    let end = record();
    assert_eq!(
        end.counter_since(
            &before,
            "quorum_lock_releases_total",
            &[("by", "release"), ("outcome", "not_held")]
        ),
        1
    );
    // The gauge went down once, at the loss: releasing a lost lock does not lower it again.
    assert_eq!(end.gauge("quorum_lock_held"), held_before);
    end.assert_no_secrets(5, &[&key, "test:", "127.0.0.1", "redis://"]);
    locks.finish_background().await;
}

/// A node that does not answer: its requests are recorded as timed out (not stopped), whether
/// the call returned at quorum without it (the request then runs out of time in the
/// background) or waited for it, and the error of a call that no quorum answered names each
/// silent node with a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_to_a_silent_node_are_recorded_as_timed_out() {
    let _turn = turn().await;
    let fleet = quorum_lock::testkit::Fleet::start(5).unwrap();
    let key = unique_key("metrics-silent");
    let locks = connected_slow_client(&fleet, &key).await;
    fleet.pause(4).unwrap();
    let before = record();

    let guard = locks.acquire(&key, TTL).await.unwrap();
    guard.release().await.unwrap();
    locks.finish_background().await;
    let after = record();
    for op in ["acquire", "release"] {
        let silent = [("node", "4"), ("operation", op)];
        // Every result of the silent node's requests, for the message of a failure.
        let results: Vec<(&str, u64)> = ["answered", "timeout", "stopped", "error"]
            .into_iter()
            .map(|r| {
                let labels = [silent[0], silent[1], ("result", r)];
                (r, after.counter_since(&before, REQUESTS, &labels))
            })
            .collect();
        assert_eq!(
            after.counter_since(
                &before,
                REQUESTS,
                &[silent[0], silent[1], ("result", "timeout")]
            ),
            1,
            "{op} on the silent node: {results:?}"
        );
        assert_eq!(after.counter_since(&before, REQUESTS, &silent), 1, "{op}");
        assert!(
            after.counter_since(
                &before,
                REQUESTS,
                &[("operation", op), ("result", "answered")]
            ) >= 4,
            "{op} on the others"
        );
    }

    // Three silent nodes of five: no quorum, and the error names each with a timeout.
    fleet.pause(2).unwrap();
    fleet.pause(3).unwrap();
    let before = record();
    let failed = locks.try_acquire(&key, TTL).await;
    // The attempt's rollback (to every node that did not refuse and was sent the acquire)
    // waits for each node.
    locks.finish_background().await;
    let after = record();
    let Err(Error::NoQuorum { failures, .. }) = &failed else {
        panic!("expected no quorum: {failed:?}");
    };
    let mut silent: Vec<&str> = failures
        .iter()
        .filter(|f| f.kind() == quorum_lock::FailureKind::Timeout)
        .map(|f| f.node())
        .collect();
    silent.sort();
    let mut expected: Vec<String> = [2, 3, 4].iter().map(|&i| fleet.url(i)).collect();
    expected.sort();
    assert_eq!(silent, expected, "{failures:?}");
    assert_eq!(
        after.counter_since(
            &before,
            REQUESTS,
            &[("operation", "acquire"), ("result", "timeout")]
        ),
        3
    );
    // The rollback goes to the silent nodes the acquire was written to: not to one whose
    // circuit breaker was already open (node 4, silent since the loop above), where the
    // acquire was never sent.
    let unsent = failures
        .iter()
        .filter(|f| f.unsent() == Some(quorum_lock::Unsent::BreakerOpen))
        .count();
    assert_eq!(
        after.counter_since(
            &before,
            REQUESTS,
            &[("operation", "release"), ("result", "timeout")]
        ),
        3 - unsent as u64,
        "the rollback's requests to the silent nodes ({unsent} acquires not sent)"
    );
    for i in [2, 3, 4] {
        fleet.resume(i).unwrap();
    }
    locks.finish_background().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_and_the_changes_an_observer_sees_are_recorded() {
    let _turn = turn().await;
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let name = unique_key("metrics-leader");
    let mut observer = locks
        .election(&name)
        .observe()
        .every(Duration::from_secs(60));
    assert_eq!(observer.next().await.unwrap(), None);
    let before = record();
    let leaderships = before.gauge("quorum_lock_leaderships");
    let leading = locks.election(&name).campaign("v1").await.unwrap();
    let during = record();
    assert_eq!(during.gauge("quorum_lock_leaderships"), leaderships + 1.0);
    assert_eq!(
        during.gauge("quorum_lock_leader_term"),
        leading.term() as f64
    );
    assert!(observer.next().await.unwrap().is_some());
    leading.resign().await.unwrap();
    assert_eq!(observer.next().await.unwrap(), None);
    let after = record();
    assert_eq!(after.gauge("quorum_lock_leaderships"), leaderships);
    assert_eq!(
        after.counter_since(&before, "quorum_lock_leader_changes_total", &[]),
        2
    );
}
