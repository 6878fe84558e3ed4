//! Hardening regressions: each test pins down one defect found in review and states the
//! behaviour required once it is fixed (shortened deadlines, abandoned waiters, reconnects on
//! slow links, renewals next to a paused node, extreme inputs, secrets, reserved keys, release
//! notices, retried acquires). Real redis-server fleets only; a test that injects faults has
//! its own fleet, the others share one and use unique keys.
//!
//! Where a test checks several things, it collects every violation and reports them together,
//! so that one run shows all that is wrong.

mod common;

use std::any::Any;
use std::future::Future;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Builder, Error, LockGuard, Quorum, QuorumLock, Scoped};
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Polls `check` every 10 ms until it returns `Ok`, for at most `limit`; the last `Err` says
/// what was still wrong when time ran out.
async fn settled<F, Fut>(limit: Duration, mut check: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(()) => return Ok(()),
            Err(still) if Instant::now() >= deadline => return Err(still),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// The message of a caught panic.
fn panic_text(payload: Box<dyn Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "<non-string panic payload>".to_string()
    }
}

/// Runs `fut` as its own task, so that a panic inside it becomes an `Err` naming the panic
/// (instead of tearing down the test with an unrelated-looking message).
async fn without_panic<T: Send + 'static>(
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    match tokio::spawn(fut).await {
        Ok(value) => Ok(value),
        Err(e) if e.is_panic() => Err(format!("panicked: {}", panic_text(e.into_panic()))),
        Err(e) => Err(format!("task failed: {e}")),
    }
}

/// Subscribers of `channel` on node `i`, by `PUBSUB NUMSUB` on a direct connection.
async fn numsub(fleet: &Fleet, i: usize, channel: &[u8]) -> i64 {
    let mut c = conn(fleet, i).await;
    let (_, n): (Vec<u8>, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut c)
        .await
        .expect("PUBSUB NUMSUB");
    n
}

/// The release channel of `key`, as the library names it.
fn release_channel(key: &str) -> Vec<u8> {
    quorum_lock::names::release_channel(key.as_bytes())
}

// ---------------------------------------------------------------------------------------------
// 1. A shorter extend must cut the guard's deadline before anything is sent.
// ---------------------------------------------------------------------------------------------

/// Extending to 1 s while three of five nodes answer late: every node applies the 1 s TTL
/// (the proxies delay replies only), but no quorum confirms in time, so `extend` fails. The
/// guard must not go on trusting its old 10 s deadline: the nodes now expire the key after
/// 1 s, and another client can take it then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_extend_to_a_shorter_ttl_still_cuts_the_guards_deadline() {
    let fleet = Fleet::builder().nodes(5).proxied(true).start().unwrap();
    let locks = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    // The rival is built before any fault, so its connections exist when it needs them.
    let rival = client(&fleet, Quorum::Majority).await;
    let key = unique_key("short-extend");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the key is free");

    // Replies of nodes 0..3 come 300 ms late, beyond the 100 ms node timeout: the extend
    // reaches (and is applied by) every node, but only two confirm in time.
    for i in 0..3 {
        fleet.proxy(i).latency(Duration::from_millis(300));
    }
    let started = Instant::now();
    let err = guard
        .extend(Duration::from_secs(1))
        .await
        .expect_err("three late nodes leave no quorum for the extend");
    // Read at once: this is what the caller sees right after the failed extend.
    let validity = guard.validity();
    let deadline_after_start = guard.deadline().saturating_duration_since(started);
    assert!(
        matches!(err, Error::NoQuorum { .. }),
        "expected NoQuorum, got {err}"
    );

    // The extend was applied by the nodes: every node now expires the key within 1 s.
    for i in 0..3 {
        fleet.proxy(i).heal();
    }
    let rival_started = Instant::now();
    let rival_guard = loop {
        match rival.try_acquire(&key, Duration::from_secs(10)).await {
            Ok(Some(g)) => break g,
            Ok(None) | Err(_) if rival_started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("the rival could not take the key within 10 s: {other:?}"),
        }
    };
    // The moment another client holds the key, the first guard must no longer claim it.
    let first_still_held = guard.is_held();
    let first_validity_then = guard.validity();

    let mut wrong = Vec::new();
    if validity > Duration::from_secs(1) {
        wrong.push(format!(
            "right after the failed extend to 1 s the guard reported validity {validity:?} (must be <= 1 s)"
        ));
    }
    if deadline_after_start > Duration::from_secs(1) {
        wrong.push(format!(
            "the guard's deadline was {deadline_after_start:?} after the extend's start (must be <= 1 s)"
        ));
    }
    if first_still_held {
        wrong.push(format!(
            "another client acquired the key {:?} after the extend, yet the first guard was still held with {first_validity_then:?} of validity: two holders",
            rival_started.elapsed()
        ));
    }
    rival_guard.release().await.unwrap();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The same when the caller gives up on the extend: the request is already on the wire and
/// the nodes apply it, so the guard must already trust only the shorter TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_extend_to_a_shorter_ttl_still_cuts_the_guards_deadline() {
    let fleet = Fleet::builder().nodes(5).proxied(true).start().unwrap();
    let locks = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let key = unique_key("dropped-extend");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the key is free");

    // No reply can arrive within 20 ms: the extend is dropped after it was sent.
    for i in 0..5 {
        fleet.proxy(i).latency(Duration::from_millis(300));
    }
    let dropped = tokio::time::timeout(
        Duration::from_millis(20),
        guard.extend(Duration::from_secs(1)),
    )
    .await;
    assert!(
        dropped.is_err(),
        "the extend finished within 20 ms: {dropped:?}"
    );
    let validity = guard.validity();

    // Precondition: the dropped extend did reach the nodes (each now holds a <= 1 s TTL).
    for i in 0..5 {
        eventually(
            &fleet,
            Duration::from_secs(5),
            "the dropped extend's PEXPIRE applied on every node",
            || async {
                let mut c = conn(&fleet, i).await;
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                pttl <= 1000
            },
        )
        .await;
    }
    for i in 0..5 {
        fleet.proxy(i).heal();
    }
    assert!(
        validity <= Duration::from_secs(1),
        "after a dropped extend to 1 s (applied by the nodes) the guard still reported validity {validity:?} (must be <= 1 s)"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. A loss signal must follow a deadline that moved earlier.
// ---------------------------------------------------------------------------------------------

/// A task already waiting on the loss signal when an extend shortens the lock from 10 s to
/// 500 ms must be woken at the new deadline, not the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_signal_waited_on_before_a_shortening_extend_fires_at_the_new_deadline() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("signal-shortened");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the key is free");
    let lost = guard.lost_signal();
    // Start waiting now (one poll registers the wait against the current, 10 s deadline).
    let mut waiting = std::pin::pin!(lost.wait());
    assert!(
        futures::poll!(waiting.as_mut()).is_pending(),
        "the loss signal fired on a fresh lock"
    );

    let extended_at = Instant::now();
    guard
        .extend(Duration::from_millis(500))
        .await
        .expect("a healthy fleet confirms the extend");
    let fired = tokio::time::timeout(Duration::from_secs(3), waiting).await;
    assert!(
        fired.is_ok(),
        "the loss signal, waited on before the extend, had not fired {:?} after the lock was shortened to 500 ms (validity now {:?}, held {}): it still sleeps until the old 10 s deadline",
        extended_at.elapsed(),
        guard.validity(),
        guard.is_held()
    );
}

/// The same through the scoped helper: the watchdog's last renewal before `max_hold` shortens
/// the lease (9 s lease, renewed at 3 s to the 1 s left of a 4 s maximum hold), so work that
/// outlives the lock must be reported lost at about 4 s, not when the first lease would have
/// ended (about 9 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_work_is_cut_off_when_the_last_renewal_shortens_the_lock() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("scoped-shortened");
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        locks
            .lock(&key)
            .watchdog(Duration::from_secs(9))
            .max_hold(Duration::from_secs(4))
            .run(|_lost| std::future::pending::<()>()),
    )
    .await
    .expect("the work never ends: the loss must cut it off")
    .expect("the key is free");
    let took = started.elapsed();
    assert_eq!(outcome, Scoped::Lost, "work outliving its lock completed");
    assert!(
        took < Duration::from_millis(6500),
        "the work was cut off only after {took:?}; the lock ended at about 4 s (max_hold)"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Abandoned waiters must not leak.
// ---------------------------------------------------------------------------------------------

/// A waiter whose acquire was dropped while it waited for its release-notice subscription.
struct Abandoned {
    fleet: Fleet,
    /// The holder, and its guard on the key.
    held: LockGuard,
    /// The waiter's client (retry delay 2 s, no jitter).
    waiter: QuorumLock,
    key: String,
}

/// Client A holds a key; client B (pubsub on, node timeout 1.5 s) tries to acquire it. Node
/// 4's replies are 3 s late, so B's first attempt is decided by the other four nodes' refusals
/// at once, and B then waits up to its node timeout (1.5 s) for node 4 to confirm the
/// SUBSCRIBE. B's acquire is dropped inside that wait.
async fn abandon_a_waiter_while_it_subscribes(name: &str) -> Abandoned {
    let fleet = Fleet::builder().nodes(5).proxied(true).start().unwrap();
    let holder = client(&fleet, Quorum::Majority).await;
    let waiter = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_millis(1500))
        .retry_delay(Duration::from_secs(2))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let key = unique_key(name);
    let held = holder
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the key is free");

    fleet.proxy(4).latency(Duration::from_secs(3));
    let task = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move { waiter.acquire(&key, Duration::from_secs(30)).await })
    };
    // B registers as waiting the moment it starts subscribing (before the confirmation wait).
    eventually(
        &fleet,
        Duration::from_secs(10),
        "B starts subscribing",
        || async { waiter.stats().waiting == 1 },
    )
    .await;
    let seen_waiting = Instant::now();
    task.abort();
    let aborted = task.await;
    let abandoned_after = seen_waiting.elapsed();
    assert!(
        aborted.as_ref().is_err_and(|e| e.is_cancelled()),
        "B's acquire ended on its own: {aborted:?}"
    );
    // Precondition: the drop landed well inside the 1.5 s confirmation wait.
    assert!(
        abandoned_after < Duration::from_millis(500),
        "precondition: B was dropped {abandoned_after:?} after it started subscribing, maybe after its 1.5 s subscription wait"
    );
    fleet.proxy(4).heal();
    Abandoned {
        fleet,
        held,
        waiter,
        key,
    }
}

/// After the drop nothing of B's wait may remain: not in its waiting gauge, and not as a
/// subscription on any node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_while_subscribing_leaves_no_waiter_and_no_subscription() {
    let Abandoned {
        fleet,
        held,
        waiter,
        key,
    } = abandon_a_waiter_while_it_subscribes("abandoned-subscribe").await;
    let channel = release_channel(&key);
    let result = settled(Duration::from_secs(10), || async {
        let waiting = waiter.stats().waiting;
        let mut subscribed = Vec::new();
        for i in 0..fleet.len() {
            subscribed.push(numsub(&fleet, i, &channel).await);
        }
        if waiting == 0 && subscribed.iter().all(|&n| n == 0) {
            Ok(())
        } else {
            Err(format!(
                "B.stats().waiting = {waiting} (must be 0); PUBSUB NUMSUB of its release channel per node = {subscribed:?} (must be all 0)"
            ))
        }
    })
    .await;
    held.release().await.unwrap();
    if let Err(still) = result {
        panic!("10 s after B's acquire was dropped mid-subscription: {still}");
    }
}

/// B's next acquire of the key, once it is free, must attempt at once: a registration left
/// over from the dropped acquire would make it queue behind a waiter that no longer exists,
/// and sleep B's 2 s retry delay before its first attempt. The key is freed by expiry (the
/// node clocks jump, as `expire_early` emulates), which sends no release notice: with a
/// release, the leaked subscription's own wake-up would hide the stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_acquire_dropped_while_subscribing_the_next_acquire_tries_at_once() {
    let Abandoned {
        fleet,
        held,
        waiter,
        key,
    } = abandon_a_waiter_while_it_subscribes("abandoned-next").await;
    // A's entries end without a release (and so without a notice).
    for i in 0..fleet.len() {
        fleet.expire_early(i, &key).unwrap();
    }
    let started = Instant::now();
    let guard = waiter
        .acquire(&key, Duration::from_secs(30))
        .await
        .expect("the key is free");
    let took = started.elapsed();
    let stats = waiter.stats();
    guard.release().await.unwrap();
    drop(held);
    assert!(
        took < Duration::from_secs(1),
        "B's acquire of a free key took {took:?} (retry delay 2 s): it waited behind its own abandoned registration ({stats:?})"
    );
}

/// The same after A releases: B must take the key promptly (this passes today too: the
/// leaked subscription hears the release and wakes B; kept as a guard for the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_acquire_dropped_while_subscribing_the_next_acquire_follows_a_release_promptly() {
    // The fleet is bound (not `..`): dropping it would stop the servers.
    let Abandoned {
        fleet: _fleet,
        held,
        waiter,
        key,
    } = abandon_a_waiter_while_it_subscribes("abandoned-release").await;
    held.release().await.unwrap();
    let started = Instant::now();
    let guard = waiter
        .acquire(&key, Duration::from_secs(30))
        .await
        .expect("the key is free");
    let took = started.elapsed();
    let stats = waiter.stats();
    guard.release().await.unwrap();
    assert!(
        took < Duration::from_secs(1),
        "B's acquire after A's release took {took:?} (retry delay 2 s): {stats:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Reconnecting over a slow link.
// ---------------------------------------------------------------------------------------------

/// Every round trip takes 60 ms and the node timeout is 100 ms: one call fits, but a
/// reconnect (TCP, connection setup, script loads: several round trips) does not. After every
/// connection is reset, the client must reconnect under its connect timeout (5 s), not die
/// trying within each 100 ms call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reset_a_client_reconnects_over_links_slower_than_half_its_node_timeout() {
    let fleet = Fleet::builder().nodes(5).proxied(true).start().unwrap();
    let locks = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_millis(100))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    for i in 0..5 {
        fleet.proxy(i).latency(Duration::from_millis(60));
    }
    // Precondition: with the connections up, an acquire fits the node timeout.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match locks
            .try_acquire(unique_key("slow-link"), Duration::from_secs(10))
            .await
        {
            Ok(Some(g)) => {
                // Whether the release confirms over these links is not what is tested here.
                let _ = g.release().await;
                break;
            }
            other if Instant::now() > until => {
                panic!("precondition: no acquire over the 60 ms links: {other:?}")
            }
            _ => {}
        }
    }

    for i in 0..5 {
        fleet.proxy(i).reset();
    }
    let reset_at = Instant::now();
    let mut last = None;
    while reset_at.elapsed() < Duration::from_secs(10) {
        match locks
            .try_acquire(unique_key("slow-link"), Duration::from_secs(10))
            .await
        {
            Ok(Some(g)) => {
                let _ = g.release().await;
                return;
            }
            other => last = Some(format!("{other:?}")),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no acquire succeeded within 10 s of the connection reset (60 ms links, 100 ms node timeout, 5 s connect timeout); last outcome: {}",
        last.unwrap_or_default()
    );
}

// ---------------------------------------------------------------------------------------------
// 5. A renewal confirmed by a quorum is not lost by waiting for a paused node.
// ---------------------------------------------------------------------------------------------

/// With one of five nodes paused, every renewal is confirmed by the other four at once. The
/// lease (420 ms, renewed every 140 ms) is shorter than a renewal interval plus the node
/// timeout (300 ms) spent waiting for the paused node, so a renewal that waits for every node
/// before it counts runs past the deadline. (These are the brief's 140 ms / 100 ms, scaled up
/// by 3 for margin on a loaded machine; the ratio, which is what matters, is the same.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_lock_stays_held_while_one_of_five_nodes_is_paused() {
    let fleet = own_fleet(5);
    let locks = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let key = unique_key("paused-renewal");
    let guard = locks
        .lock(&key)
        .watchdog(Duration::from_millis(420))
        .acquire()
        .await
        .unwrap();
    let lost = guard.lost_signal();
    fleet.pause(4).unwrap();
    let paused_at = Instant::now();
    let renewed_before = locks.stats().extended;
    // Three seconds: about 21 renewals.
    let fired = tokio::time::timeout(Duration::from_secs(3), lost.wait()).await;
    let lost_after = paused_at.elapsed();
    let held = guard.is_held();
    let renewals = locks.stats().extended - renewed_before;
    fleet.resume(4).unwrap();
    assert!(
        fired.is_err() && held,
        "the lock was declared lost {lost_after:?} after node 4 paused, with 4 of 5 nodes answering (held {held}, renewals counted meanwhile {renewals}, stats {:?})",
        locks.stats()
    );
    assert!(
        renewals >= 5,
        "only {renewals} renewals in 3 s of a 420 ms lease"
    );
    guard.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 6. No panics on representable input.
// ---------------------------------------------------------------------------------------------

/// Every builder duration set to `Duration::MAX`, and non-finite drift factors, are rejected
/// by `build()` as `InvalidConfig` naming the setter: no panic, no client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_builder_settings_are_config_errors_naming_the_setter() {
    let fleet = shared_fleet();
    let base = || QuorumLock::builder().nodes(fleet.urls());
    let max = Duration::MAX;
    let cases: Vec<(&str, &str, Builder)> = vec![
        (
            "node_timeout(Duration::MAX)",
            "node_timeout",
            base().node_timeout(max),
        ),
        (
            "connect_timeout(Duration::MAX)",
            "connect_timeout",
            base().connect_timeout(max),
        ),
        (
            "min_validity(Duration::MAX)",
            "min_validity",
            base().min_validity(max),
        ),
        (
            "retry_delay(Duration::MAX)",
            "retry_delay",
            base().retry_delay(max),
        ),
        (
            "retry_jitter(Duration::MAX)",
            "retry_jitter",
            base().retry_jitter(max),
        ),
        (
            "wait_timeout(Duration::MAX)",
            "wait_timeout",
            base().wait_timeout(max),
        ),
        (
            "watchdog_lease(Duration::MAX)",
            "watchdog_lease",
            base().watchdog_lease(max),
        ),
        (
            "drift_factor(f64::INFINITY)",
            "drift_factor",
            base().drift_factor(f64::INFINITY),
        ),
        (
            "drift_factor(f64::NAN)",
            "drift_factor",
            base().drift_factor(f64::NAN),
        ),
        (
            "drift_factor(f64::NEG_INFINITY)",
            "drift_factor",
            base().drift_factor(f64::NEG_INFINITY),
        ),
    ];
    let mut wrong = Vec::new();
    for (setting, field, builder) in cases {
        match without_panic(builder.build()).await {
            Ok(Err(Error::InvalidConfig { field: f, .. })) if f == field => {}
            Ok(other) => wrong.push(format!(
                "{setting}: expected Err(InvalidConfig {{ field: {field:?} }}), got {other:?}"
            )),
            Err(panic) => wrong.push(format!("{setting}: build() {panic}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Per-request durations at `Duration::MAX` are errors: `wait` and `max_hold` are
/// `InvalidConfig` naming the setting, a watchdog lease or extend TTL is `InvalidTtl`. No
/// panic, not even in the watchdog task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_request_durations_are_errors_not_panics() {
    let fleet = shared_fleet();
    // A 1 s watchdog lease, so that a watchdog that died shows within seconds.
    let locks = builder(fleet, Quorum::Majority)
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let mut wrong = Vec::new();

    let (l, k) = (locks.clone(), unique_key("wait-max"));
    match without_panic(async move {
        l.lock(&k)
            .wait(Duration::MAX)
            .ttl(Duration::from_secs(10))
            .acquire()
            .await
    })
    .await
    {
        Ok(Err(Error::InvalidConfig { field: "wait", .. })) => {}
        Ok(other) => wrong.push(format!(
            "wait(Duration::MAX): expected Err(InvalidConfig {{ field: \"wait\" }}), got {other:?}"
        )),
        Err(panic) => wrong.push(format!("wait(Duration::MAX): acquire {panic}")),
    }

    let (l, k) = (locks.clone(), unique_key("max-hold-max"));
    match without_panic(async move { l.lock(&k).max_hold(Duration::MAX).acquire().await }).await {
        Ok(Err(Error::InvalidConfig {
            field: "max_hold", ..
        })) => {}
        Ok(Ok(guard)) => {
            // The watchdog runs in its own task; if it panicked, nobody renews and the lock
            // is lost when its first 1 s lease runs out.
            let acquired = Instant::now();
            let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await;
            let verdict = if lost.is_ok() {
                format!(
                    "and the lock was lost {:?} later, at the end of its first 1 s lease: its watchdog task died (panicked) instead of renewing",
                    acquired.elapsed()
                )
            } else {
                "(its watchdog did keep renewing)".to_string()
            };
            wrong.push(format!(
                "max_hold(Duration::MAX): expected Err(InvalidConfig {{ field: \"max_hold\" }}), got a guard {verdict}"
            ));
            drop(guard);
        }
        Ok(Err(other)) => wrong.push(format!(
            "max_hold(Duration::MAX): expected Err(InvalidConfig {{ field: \"max_hold\" }}), got Err({other:?})"
        )),
        Err(panic) => wrong.push(format!("max_hold(Duration::MAX): acquire {panic}")),
    }

    let (l, k) = (locks.clone(), unique_key("watchdog-max"));
    match without_panic(async move { l.lock(&k).watchdog(Duration::MAX).acquire().await }).await {
        Ok(Err(Error::InvalidTtl { .. })) => {}
        Ok(other) => wrong.push(format!(
            "watchdog(Duration::MAX): expected Err(InvalidTtl), got {other:?}"
        )),
        Err(panic) => wrong.push(format!("watchdog(Duration::MAX): acquire {panic}")),
    }

    let guard = locks
        .try_acquire(unique_key("extend-max"), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the key is free");
    match without_panic(async move {
        let result = guard.extend(Duration::MAX).await;
        (result, guard)
    })
    .await
    {
        Ok((Err(Error::InvalidTtl { .. }), guard)) => guard.release().await.unwrap(),
        Ok((other, _)) => wrong.push(format!(
            "extend(Duration::MAX): expected Err(InvalidTtl), got {other:?}"
        )),
        Err(panic) => wrong.push(format!("extend(Duration::MAX): {panic}")),
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The public arithmetic accepts any representable input without panicking.
#[test]
fn quorum_arithmetic_never_panics_on_extreme_inputs() {
    use quorum_lock::quorum::{drift, validity};
    /// A call, and the call itself (its result formatted).
    type Case = (&'static str, fn() -> String);
    let cases: Vec<Case> = vec![
        ("drift(Duration::MAX, 0.4)", || {
            format!("{:?}", drift(Duration::MAX, 0.4))
        }),
        ("drift(1 s, f64::INFINITY)", || {
            format!("{:?}", drift(Duration::from_secs(1), f64::INFINITY))
        }),
        ("drift(1 s, f64::NAN)", || {
            format!("{:?}", drift(Duration::from_secs(1), f64::NAN))
        }),
        ("drift(1 s, f64::NEG_INFINITY)", || {
            format!("{:?}", drift(Duration::from_secs(1), f64::NEG_INFINITY))
        }),
        ("validity(Duration::MAX, 0, 0)", || {
            format!(
                "{:?}",
                validity(Duration::MAX, Duration::ZERO, Duration::ZERO)
            )
        }),
    ];
    let mut wrong = Vec::new();
    for (call, run) in cases {
        if let Err(panic) = std::panic::catch_unwind(run) {
            wrong.push(format!("{call} panicked: {}", panic_text(panic)));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// 7. Secrets are never shown.
// ---------------------------------------------------------------------------------------------

/// Node addresses carrying the password `S3cretPw` in every supported form (the last one
/// percent-encoded: `%65` is `e`).
const SECRET_URLS: [&str; 6] = [
    "unix:///tmp/nonexistent.sock?pass=S3cretPw",
    "redis+unix:///tmp/nonexistent.sock?pass=S3cretPw",
    "unix:///tmp/nonexistent.sock?user=u&pass=S3cretPw",
    "redis://u:S3cretPw@127.0.0.1:1",
    "redis://:S3cretPw@127.0.0.1:1",
    "redis://u:S3cr%65tPw@127.0.0.1:1",
];

/// Records in `wrong` where `text` shows the password (decoded or encoded).
fn check_hidden(wrong: &mut Vec<String>, url: &str, what: &str, text: &str) {
    if text.contains("S3cretPw") || text.contains("S3cr%65tPw") {
        wrong.push(format!("{url}: {what} shows the password: {text}"));
    }
}

#[test]
fn a_builders_debug_output_never_shows_a_node_password() {
    let mut wrong = Vec::new();
    for url in SECRET_URLS {
        let builder = QuorumLock::builder().nodes([url]);
        check_hidden(
            &mut wrong,
            url,
            "format!(\"{:?}\", builder)",
            &format!("{builder:?}"),
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Build errors (unreachable nodes), the node list and Debug output of a lazily built client,
/// and the error of an acquire never show the password, whatever the address form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_node_lists_and_debug_output_never_show_a_node_password() {
    let mut wrong = Vec::new();
    for url in SECRET_URLS {
        let err = QuorumLock::builder()
            .nodes([url])
            .connect_timeout(Duration::from_millis(500))
            .build()
            .await
            .expect_err("the node is unreachable");
        check_hidden(
            &mut wrong,
            url,
            "the build error (Display)",
            &err.to_string(),
        );
        check_hidden(
            &mut wrong,
            url,
            "the build error (Debug)",
            &format!("{err:?}"),
        );

        let locks = QuorumLock::builder()
            .nodes([url])
            .connect_timeout(Duration::from_millis(500))
            .lazy(true)
            .build()
            .await
            .expect("a lazy build tolerates an unreachable node");
        check_hidden(&mut wrong, url, "nodes()", &locks.nodes().join(" "));
        check_hidden(&mut wrong, url, "the client's Debug", &format!("{locks:?}"));
        let err = locks
            .try_acquire(unique_key("secret"), Duration::from_secs(5))
            .await
            .expect_err("the node is unreachable");
        check_hidden(
            &mut wrong,
            url,
            "the acquire error (Display)",
            &err.to_string(),
        );
        check_hidden(
            &mut wrong,
            url,
            "the acquire error (Debug)",
            &format!("{err:?}"),
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The crate's logs at TRACE never show the password. Current-thread runtime: the capturing
/// subscriber is this thread's default, and every task of the test (connections, rollbacks)
/// runs on this thread, so nothing is logged past it.
#[tokio::test]
async fn trace_logs_never_show_a_node_password() {
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
    for url in SECRET_URLS {
        let _ = QuorumLock::builder()
            .nodes([url])
            .connect_timeout(Duration::from_millis(500))
            .build()
            .await;
        let locks = QuorumLock::builder()
            .nodes([url])
            .connect_timeout(Duration::from_millis(500))
            .lazy(true)
            .build()
            .await
            .expect("a lazy build tolerates an unreachable node");
        let _ = locks
            .try_acquire(unique_key("secret-log"), Duration::from_secs(5))
            .await;
    }
    drop(logging);
    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    // The capture works, and the logs do name the nodes (so the check below means something).
    assert!(
        logs.contains("nonexistent.sock") && logs.contains("127.0.0.1:1"),
        "the captured logs do not name the nodes:\n{logs}"
    );
    let leaking: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("S3cretPw") || l.contains("S3cr%65tPw"))
        .collect();
    assert!(
        leaking.is_empty(),
        "{} log lines show the password, e.g.:\n{}",
        leaking.len(),
        leaking
            .iter()
            .take(5)
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A password-protected fleet, reachable by TCP and by unix socket: rejected credentials (a
/// wrong password, or the right one for a user that does not exist) and a working client
/// never show the password in errors, node lists or Debug output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_protected_fleet_never_shows_a_password() {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let sockets: Vec<String> = (0..3)
        .map(|i| format!("/tmp/ql-hardening-{}-{i}.sock", &tag[..12]))
        .collect();
    let mut fleet = Fleet::builder().nodes(3).password("S3cretPw");
    for (i, socket) in sockets.iter().enumerate() {
        fleet = fleet.node_server_args(i, ["--unixsocket", socket.as_str()]);
    }
    let fleet = fleet.start().unwrap();
    let tcp = |auth: &str| -> Vec<String> {
        (0..3)
            .map(|i| format!("redis://{auth}@127.0.0.1:{}", fleet.node(i).port()))
            .collect()
    };
    let unix = |query: &str| -> Vec<String> {
        sockets
            .iter()
            .map(|s| format!("unix://{s}?{query}"))
            .collect()
    };
    let mut wrong = Vec::new();
    let rejected: [(&str, &str, Vec<String>); 4] = [
        ("Wr0ngPw", "tcp, wrong password", tcp(":Wr0ngPw")),
        ("S3cretPw", "tcp, unknown user", tcp("nobody:S3cretPw")),
        ("Wr0ngPw", "unix, wrong password", unix("pass=Wr0ngPw")),
        (
            "S3cretPw",
            "unix, unknown user",
            unix("user=nobody&pass=S3cretPw"),
        ),
    ];
    for (secret, case, urls) in rejected {
        let result = QuorumLock::builder()
            .nodes(&urls)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .await;
        match result {
            Err(err) => {
                let shown = format!("{err} / {err:?}");
                if shown.contains(secret) {
                    wrong.push(format!("{case}: the build error shows {secret:?}: {shown}"));
                }
            }
            Ok(locks) => wrong.push(format!(
                "{case}: rejected credentials built a client {locks:?}"
            )),
        }
    }
    let locks = QuorumLock::builder()
        .nodes(unix("pass=S3cretPw"))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("the right password over the unix sockets");
    let guard = locks
        .try_acquire(unique_key("secret-fleet"), Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the key is free");
    for (what, text) in [
        ("nodes()", locks.nodes().join(" ")),
        ("the client's Debug", format!("{locks:?}")),
        ("the guard's Debug", format!("{guard:?}")),
    ] {
        if text.contains("S3cretPw") {
            wrong.push(format!(
                "unix, right password: {what} shows the password: {text}"
            ));
        }
    }
    guard.release().await.unwrap();
    drop(fleet);
    for s in &sockets {
        let _ = std::fs::remove_file(s);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// 8. Library keys do not collide with user keys.
// ---------------------------------------------------------------------------------------------

/// The library keeps its own keys under `quorum-lock:` (fencing counters
/// `quorum-lock:fence:{<h>}:<key>`, release channels `quorum-lock:released:{<h>}:<key>`, `<h>`
/// the part of the key a cluster hashes). A user key in
/// that namespace collides with them: after a fenced lock on X, X's counter (no TTL) blocks a
/// lock on the name of X's counter forever; a user lock on the name of Y's counter breaks fenced
/// locks on Y (INCR on a holder value). Such keys must be rejected as `InvalidKey`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_the_librarys_reserved_namespace_are_rejected() {
    const TTL: Duration = Duration::from_secs(10);
    let fleet = shared_fleet();
    // A short default wait: today the colliding acquire waits until it gives up.
    let locks = builder(fleet, Quorum::Majority)
        .wait_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let mut wrong = Vec::new();

    // A fenced lock on X creates X's counter (`names::fencing_counter`).
    let x = unique_key("fenced");
    locks
        .lock(&x)
        .ttl(TTL)
        .fencing(true)
        .acquire()
        .await
        .expect("fenced lock on X")
        .release()
        .await
        .unwrap();
    let x_counter = String::from_utf8(quorum_lock::names::fencing_counter(x.as_bytes())).unwrap();
    match locks.acquire(&x_counter, TTL).await {
        Err(Error::InvalidKey { .. }) => {}
        other => wrong.push(format!(
            "acquire({x_counter:?}) (X's fencing counter exists): expected Err(InvalidKey), got {other:?}"
        )),
    }
    match locks.try_acquire(&x_counter, TTL).await {
        Err(Error::InvalidKey { .. }) => {}
        other => wrong.push(format!(
            "try_acquire({x_counter:?}): expected Err(InvalidKey), got {other:?}"
        )),
    }

    // A user lock on the name of Y's counter first, then a fenced lock on Y.
    let y = unique_key("fenced-later");
    let y_counter = String::from_utf8(quorum_lock::names::fencing_counter(y.as_bytes())).unwrap();
    let user = locks.try_acquire(&y_counter, TTL).await;
    let fenced = locks.lock(&y).ttl(TTL).fencing(true).try_acquire().await;
    if !matches!(user, Err(Error::InvalidKey { .. })) {
        wrong.push(format!(
            "try_acquire({y_counter:?}): expected Err(InvalidKey), got {user:?}; while it was held, a fenced lock on Y answered {fenced:?}"
        ));
    }
    if !matches!(fenced, Ok(Some(_))) {
        wrong.push(format!(
            "a fenced lock on Y (no one holds Y): expected a guard, got {fenced:?}"
        ));
    }

    // Anything else in the namespace, however it is requested.
    for reserved in [
        String::from_utf8(quorum_lock::names::release_channel(y.as_bytes())).unwrap(),
        "quorum-lock:".to_string(),
        format!("quorum-lock:{}", unique_key("other")),
    ] {
        match locks.try_acquire(&reserved, TTL).await {
            Err(Error::InvalidKey { .. }) => {}
            other => wrong.push(format!(
                "try_acquire({reserved:?}): expected Err(InvalidKey), got {other:?}"
            )),
        }
        match locks.lock(&reserved).ttl(TTL).acquire().await {
            Err(Error::InvalidKey { .. }) => {}
            other => wrong.push(format!(
                "lock({reserved:?}).acquire(): expected Err(InvalidKey), got {other:?}"
            )),
        }
    }
    drop((user, fenced));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// 9. Release notices do not publish the holder value.
// ---------------------------------------------------------------------------------------------

/// The holder value proves ownership (anyone who knows it can release the lock), so the
/// release notice, which any client of the nodes can subscribe to, must not carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_notices_do_not_carry_the_holder_value() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("notice");
    let channel = release_channel(&key);
    // An outside subscriber on every node (direct connections; subscribe awaits the
    // confirmation, so the release below is seen).
    let mut streams = Vec::new();
    for i in 0..fleet.len() {
        let mut pubsub = fleet.client(i).get_async_pubsub().await.unwrap();
        pubsub.subscribe(&channel).await.unwrap();
        streams.push(pubsub.into_on_message());
    }
    let mut notices = futures::stream::select_all(streams);

    let guard = locks
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the key is free");
    let holder = guard.holder().to_string();
    guard.release().await.unwrap();

    let first = tokio::time::timeout(Duration::from_secs(5), notices.next())
        .await
        .expect("no release notice within 5 s")
        .expect("the notice streams ended");
    let mut payloads = vec![first.get_payload_bytes().to_vec()];
    // The other nodes' notices follow within moments.
    let drain_until = Instant::now() + Duration::from_millis(300);
    while let Ok(Some(msg)) = tokio::time::timeout_at(drain_until, notices.next()).await {
        payloads.push(msg.get_payload_bytes().to_vec());
    }
    let carrying: Vec<String> = payloads
        .iter()
        .filter(|p| p.windows(holder.len()).any(|w| w == holder.as_bytes()))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    assert!(
        carrying.is_empty(),
        "{} of {} release notices carry the holder value {holder:?}: {carrying:?}",
        carrying.len(),
        payloads.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 10. A re-sent SET NX recognises the attempt's own entry.
// ---------------------------------------------------------------------------------------------

/// MultiLock; node 2's replies are held back. Its SET NX executes, then its connection is
/// reset before the reply arrives: the client reconnects and sends the SET NX again (within
/// the same call, see `Node::on_connection`), which finds the entry the first send created.
/// That entry is this attempt's own: the node must count as a yes, and the attempt succeed.
/// Run with RUST_LOG=quorum_lock=debug to see "connection dropped; reconnecting once" and the
/// node's vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_nx_resent_after_a_connection_reset_counts_the_attempts_own_entry() {
    // Long enough that the reset certainly lands before node 2's first reply is forwarded,
    // and the reconnect (setup, script loads, the re-sent SET: three round trips at this
    // latency, which stays on) fits the 6 s node timeout.
    const LATENCY: Duration = Duration::from_millis(800);
    init_tracing();
    let fleet = Fleet::builder().nodes(5).proxied(true).start().unwrap();
    let locks = builder(&fleet, Quorum::All)
        .node_timeout(Duration::from_secs(6))
        .build()
        .await
        .unwrap();
    let key = unique_key("resent-set");
    fleet.proxy(2).latency(LATENCY);
    let started = Instant::now();
    let attempt = {
        let (locks, key) = (locks.clone(), key.clone());
        tokio::spawn(async move { locks.try_acquire(&key, Duration::from_secs(30)).await })
    };
    // The SET NX has executed on node 2 (seen directly, bypassing the proxy); its reply is
    // held in the proxy.
    eventually(
        &fleet,
        Duration::from_secs(5),
        "the SET NX executed on node 2",
        || async { entry(&fleet, 2, &key).await.is_some() },
    )
    .await;
    fleet.proxy(2).reset();
    let reset_after = started.elapsed();
    assert!(
        reset_after < LATENCY - Duration::from_millis(300),
        "precondition: the reset came {reset_after:?} after the SET, too close to its held reply ({LATENCY:?})"
    );
    let outcome = attempt.await.unwrap();
    fleet.proxy(2).heal();
    let set_calls = command_calls(&fleet, 2, "set").await;
    match outcome {
        Ok(Some(guard)) => {
            assert_eq!(
                nodes_holding(&fleet, &key, guard.holder()).await,
                5,
                "a MultiLock guard must hold all five nodes"
            );
            guard.release().await.unwrap();
        }
        other => panic!(
            "the MultiLock attempt failed: {other:?}; node 2 saw {set_calls} SET calls (the first, and the one re-sent after the reset, which met the attempt's own entry)"
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// finish_background: a short-lived process lets its background work land before it exits
// ---------------------------------------------------------------------------------------------

/// A dropped guard is released by a background task, and a release returns at quorum while its
/// requests to the other nodes finish in the background; a process that exits at once cuts
/// that work off (the CLI's exits did, under load: entries stayed on a minority of nodes until
/// they expired). After `finish_background` every node has seen the releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_finish_background_every_node_has_seen_the_releases() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let keys: Vec<String> = (0..8).map(|i| unique_key(&format!("flush-{i}"))).collect();
    let mut released = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let guard = locks
            .acquire(key, Duration::from_secs(60))
            .await
            .expect("acquire");
        if i % 2 == 0 {
            drop(guard); // released by a background task
        } else {
            released.push(guard.release()); // returns at quorum
        }
    }
    for release in released {
        release.await.expect("release");
    }
    locks.finish_background().await;
    for key in &keys {
        for i in 0..fleet.len() {
            assert_eq!(
                entry(fleet, i, key).await,
                None,
                "node {i} still holds {key} after finish_background"
            );
        }
    }
}
