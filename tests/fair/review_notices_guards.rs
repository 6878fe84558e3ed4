//! Review probes for the fair lock's holds from grant notices, continued (see
//! `review_notices.rs`): a guard held from notices before and after its first renewal:
//! `into_holder`, `max_hold`, extends, fixed TTLs, TTLs shorter than the claim window, lock
//! delay, fencing, a node paused or restarted at the hand-off, a dead waiter, a clock jump,
//! calls by holder value through the guard's own client.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::review_notices::{fair_client, is_handoff_value, leaves_nothing, Probe, LONG};
use super::{line_lengths, queued_everywhere, start_waiting};
use crate::common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Error, LockGuard, Quorum, QuorumLock};
use tokio::time::Instant;

/// A request kept by the watchdog (a lease of `d`) or with the fixed TTL `d`.
fn kept(
    watchdog: bool,
    d: Duration,
) -> impl Fn(quorum_lock::LockRequest<'_>) -> quorum_lock::LockRequest<'_> + Send + Sync + Clone + 'static
{
    move |r| match watchdog {
        true => r.watchdog(d),
        false => r.ttl(d),
    }
}

/// A holder (client A) takes `key`; a waiter of client B joins the line; A releases. Returns
/// B's guard, when A's release started, and how many attempts B made after it (0: held from
/// the notices).
async fn hand_over(
    fleet: &Fleet,
    key: &str,
    holder: &QuorumLock,
    waiting: &QuorumLock,
    shape: impl FnOnce(quorum_lock::LockRequest<'_>) -> quorum_lock::LockRequest<'_> + Send + 'static,
) -> (LockGuard, Instant, u64) {
    let guard = holder.fair_lock(key).ttl(LONG).acquire().await.unwrap();
    let (locks, owned) = (waiting.clone(), key.to_string());
    let task = tokio::spawn(async move { shape(locks.fair_lock(&owned)).acquire().await });
    eventually(fleet, LONG, "the waiter is in line everywhere", || async {
        queued_everywhere(fleet, key).await == 1 && waiting.stats().waiting == 1
    })
    .await;
    let attempts = waiting.stats().attempts;
    let released = Instant::now();
    guard.release().await.unwrap();
    let handed = tokio::time::timeout(LONG, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    (handed, released, waiting.stats().attempts - attempts)
}

/// [`hand_over`] until B holds from the notices (no attempt, a hand-off value): on a loaded
/// machine B's own attempt (a quick retry after it subscribed, its timer) may come first and
/// claim the grants instead, which these probes are not about; a guard so claimed is released
/// and the hand-over tried again, at most 10 times.
async fn noticed_guard(
    fleet: &Fleet,
    key: &str,
    holder: &QuorumLock,
    waiting: &QuorumLock,
    shape: impl Fn(quorum_lock::LockRequest<'_>) -> quorum_lock::LockRequest<'_>
        + Send
        + Sync
        + Clone
        + 'static,
) -> (LockGuard, Instant) {
    for _ in 0..10 {
        let (handed, released, attempts) =
            hand_over(fleet, key, holder, waiting, shape.clone()).await;
        if attempts == 0 && is_handoff_value(handed.holder()) {
            return (handed, released);
        }
        handed.release().await.unwrap();
    }
    panic!("never held from the notices in 10 hand-overs");
}

async fn waiting_client(fleet: &Fleet, claim: Duration) -> QuorumLock {
    // claim window = max(4 node timeouts, retry + jitter + 2 node timeouts)
    builder(fleet, Quorum::Majority)
        .retry_delay(claim.saturating_sub(Duration::from_millis(500)))
        .retry_jitter(Duration::ZERO)
        .queue_lease(Duration::from_secs(60))
        .build()
        .await
        .unwrap()
}

/// into_holder right after a hold from notices, with a fixed TTL of 30 s: the holder value is
/// handed to another process that means to keep the lock for the TTL. Do the nodes keep it?
#[tokio::test]
async fn review_notices_into_holder_keeps_the_ttl() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let waiting = waiting_client(fleet, Duration::from_secs(2)).await;
    let other = client(fleet, Quorum::Majority).await;
    let key = unique_key("rn-into-holder");
    let (g, _) = noticed_guard(fleet, &key, &holder, &waiting, |r| r.ttl(LONG)).await;
    let validity = g.validity();
    let ttl = g.ttl();
    let value = g.into_holder().unwrap();
    // Past the claim window (2 s).
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let on = nodes_holding(fleet, &key, &value).await;
    let mut pttls = Vec::new();
    for i in 0..fleet.len() {
        pttls.push(pttl(fleet, i, &key).await);
    }
    eprintln!(
        "into_holder after a notice hold: validity at hand-off {validity:?}, guard ttl {ttl:?}; 3 s later held on {on} nodes, pttl {pttls:?}"
    );
    // A competitor of a third client: does it get a lock the holder value's process thinks
    // it has for 30 s?
    let stolen = other.fair_lock(&key).ttl(LONG).try_acquire().await.unwrap();
    let stolen_held = stolen.is_some();
    if let Some(s) = stolen {
        s.release().await.unwrap();
    }
    let extended = other.extend_by_holder(&key, &value, LONG).await;
    let released = other.release_by_holder(&key, &value).await;
    eprintln!(
        "stolen {stolen_held}; extend_by_holder {extended:?}; release_by_holder {released:?}"
    );
    // Control: the same guard claimed by an attempt (the waiter does not subscribe, so it
    // claims its grant on its timer).
    let no_pubsub = builder(fleet, Quorum::Majority)
        .retry_delay(Duration::from_millis(100))
        .retry_jitter(Duration::ZERO)
        .pubsub(false)
        .build()
        .await
        .unwrap();
    let key2 = unique_key("rn-into-holder-control");
    let first = holder.fair_lock(&key2).ttl(LONG).acquire().await.unwrap();
    let (l, k) = (no_pubsub.clone(), key2.clone());
    let t = tokio::spawn(async move { l.fair_lock(&k).ttl(LONG).acquire().await });
    eventually(fleet, LONG, "in line", || async {
        queued_everywhere(fleet, &key2).await == 1
    })
    .await;
    first.release().await.unwrap();
    let g2 = t.await.unwrap().unwrap();
    let v2 = g2.validity();
    let value2 = g2.into_holder().unwrap();
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let on2 = nodes_holding(fleet, &key2, &value2).await;
    eprintln!("control (claimed by an attempt, validity {v2:?}): 3 s after into_holder held on {on2} nodes");
    other.release_by_holder(&key2, &value2).await.unwrap();
    finish_background(&[
        holder.clone(),
        waiting.clone(),
        other.clone(),
        no_pubsub.clone(),
    ])
    .await;
    assert!(
        on >= 3 && !stolen_held,
        "a fixed-TTL (30 s) guard held from notices and turned into its holder value kept the key only for the claim window: held on {on} nodes 3 s later, pttl {pttls:?}, another client took it: {stolen_held}"
    );
}

/// guard.extend with a short TTL right after the hold: the scheduled first renewal must not
/// undo it (the user asked for the lock to end soon).
#[tokio::test]
async fn review_notices_short_extend_is_not_undone_by_the_scheduled_renewal() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let waiting = waiting_client(fleet, Duration::from_secs(3)).await;
    for watchdog in [false, true] {
        let key = unique_key("rn-short-extend");
        let (g, _) = noticed_guard(fleet, &key, &holder, &waiting, kept(watchdog, LONG)).await;
        let v0 = g.validity();
        g.extend(Duration::from_millis(600)).await.unwrap();
        let v1 = g.validity();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let v2 = g.validity();
        let mut pttls = Vec::new();
        for i in 0..fleet.len() {
            pttls.push(pttl(fleet, i, &key).await);
        }
        eprintln!(
            "watchdog {watchdog}: validity at hold {v0:?}, after extend(600ms) {v1:?}, 1.5 s later {v2:?} held {}; pttl {pttls:?}",
            g.is_held()
        );
        let _ = g.release().await;
        if !watchdog {
            assert!(
                v2.is_zero() && pttls.iter().filter(|&&p| p > 0).count() < 3,
                "fixed TTL: the scheduled renewal undid extend(600ms): validity {v2:?}, pttl {pttls:?}"
            );
        }
    }
    finish_background(&[holder.clone(), waiting.clone()]).await;
}

/// max_hold beyond the claim window: the lock must end by acquire + max_hold.
#[tokio::test]
async fn review_notices_max_hold_is_kept() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let waiting = waiting_client(fleet, Duration::from_secs(3)).await;
    let mut bad = Vec::new();
    for (i, watchdog) in [false, true].into_iter().enumerate() {
        let key = unique_key("rn-max-hold");
        let max = Duration::from_millis(2000);
        let (g, released) = noticed_guard(fleet, &key, &holder, &waiting, move |r| {
            let r = r.max_hold(max);
            if watchdog {
                r.watchdog(Duration::from_millis(900))
            } else {
                r.ttl(LONG)
            }
        })
        .await;
        let got_at = Instant::now();
        let deadline_left = g.deadline().saturating_duration_since(got_at);
        // Watch the guard and the nodes until past max_hold.
        let mut last_held = got_at;
        while got_at.elapsed() < Duration::from_millis(3500) {
            if g.is_held() {
                last_held = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let held_for = last_held - released;
        let mut pttls = Vec::new();
        for n in 0..fleet.len() {
            pttls.push(pttl(fleet, n, &key).await);
        }
        eprintln!(
            "case {i} (watchdog {watchdog}): guard deadline at hold +{deadline_left:?}, held until {held_for:?} after the release; pttl 3.5 s after hold {pttls:?}; ttl {:?}",
            g.ttl()
        );
        let _ = g.release().await;
        if held_for > max + Duration::from_millis(100) {
            bad.push(format!(
                "case {i} (watchdog {watchdog}) max_hold {max:?}: guard still held {held_for:?} after the release began"
            ));
        }
        if pttls.iter().filter(|&&p| p > 0).count() >= 3 {
            bad.push(format!(
                "case {i}: entries still live 3.5 s after the hold: {pttls:?}"
            ));
        }
    }
    finish_background(&[holder.clone(), waiting.clone()]).await;
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A TTL shorter than the claim window: the guard's validity never exceeds its TTL, the
/// nodes cover it, and another client gets the key once it expires unreleased.
#[tokio::test]
async fn review_notices_ttl_shorter_than_the_claim_window() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let waiting = waiting_client(fleet, Duration::from_secs(3)).await;
    let probe = Probe::new(fleet).await;
    for ttl_ms in [300u64, 500, 900] {
        let key = unique_key("rn-short-ttl");
        let ttl = Duration::from_millis(ttl_ms);
        let (g, released) =
            noticed_guard(fleet, &key, &holder, &waiting, move |r| r.ttl(ttl)).await;
        let v = g.validity();
        let (cover, detail, _) = probe.covering(&g, Duration::ZERO).await;
        eprintln!(
            "ttl {ttl:?}: validity at hold {v:?} ({:?} after release), cover {cover}:{detail}",
            released.elapsed()
        );
        assert!(v <= ttl, "validity {v:?} > ttl {ttl:?}");
        assert!(cover >= 3, "cover {cover}:{detail}");
        // Keep the guard alive but let it expire: is it renewed past its fixed TTL?
        tokio::time::sleep(ttl + Duration::from_millis(400)).await;
        let held = g.is_held();
        let v2 = g.validity();
        let mut pttls = Vec::new();
        for n in 0..fleet.len() {
            pttls.push(pttl(fleet, n, &key).await);
        }
        eprintln!(
            "  {:?} after the hold: held {held} validity {v2:?} pttl {pttls:?}",
            ttl + Duration::from_millis(400)
        );
        let other = client(fleet, Quorum::Majority).await;
        let t0 = Instant::now();
        let o = other
            .fair_lock(&key)
            .ttl(LONG)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        eprintln!(
            "  another client got it after {:?}; old guard held {}",
            t0.elapsed(),
            g.is_held()
        );
        assert!(!(g.is_held() && o.is_held()), "two holders");
        o.release().await.unwrap();
        drop(g);
        finish_background(&[other]).await;
    }
    finish_background(&[holder.clone(), waiting.clone()]).await;
}

/// guard.ttl() and deadline() of a guard held from notices, fixed and watchdog, and the first
/// renewal giving the TTL on a quorum; validity never above the TTL.
#[tokio::test]
async fn review_notices_first_renewal_and_reported_ttl() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let waiting = waiting_client(fleet, Duration::from_secs(2)).await;
    let probe = Probe::new(fleet).await;
    for watchdog in [false, true] {
        let key = unique_key("rn-renewal");
        let ttl = Duration::from_secs(6);
        let (g, _) = noticed_guard(fleet, &key, &holder, &waiting, kept(watchdog, ttl)).await;
        let t0 = Instant::now();
        let mut samples = Vec::new();
        let mut max_v = Duration::ZERO;
        while t0.elapsed() < Duration::from_millis(2500) {
            let v = g.validity();
            max_v = max_v.max(v);
            let (cover, detail, held) = probe.covering(&g, Duration::ZERO).await;
            if held && g.is_held() && cover < 3 {
                panic!(
                    "watchdog {watchdog}: at {:?} cover {cover}:{detail}",
                    t0.elapsed()
                );
            }
            samples.push((t0.elapsed().as_millis(), v.as_millis(), g.ttl().as_millis()));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!("watchdog {watchdog}: (since hold ms, validity ms, ttl ms): {samples:?}");
        assert!(max_v <= ttl, "validity {max_v:?} above ttl");
        assert!(g.is_held());
        g.release().await.unwrap();
    }
    finish_background(&[holder.clone(), waiting.clone()]).await;
}

/// Lock delay longer than the claim window: a hold from notices would have no validity. Does
/// it hold anyway, and do the entries cover its deadline plus the delay?
#[tokio::test]
async fn review_notices_lock_delay_longer_than_the_claim_window() {
    let fleet = shared_fleet();
    let delay = Duration::from_millis(1500);
    let holder = builder(fleet, Quorum::Majority)
        .lock_delay(delay)
        .build()
        .await
        .unwrap();
    // claim window 1 s (4 node timeouts).
    let waiting = builder(fleet, Quorum::Majority)
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::from_millis(5))
        .lock_delay(delay)
        .build()
        .await
        .unwrap();
    let probe = Probe::new(fleet).await;
    for round in 0..3 {
        let key = unique_key("rn-delay-long");
        let (g, released, claimed) =
            hand_over(fleet, &key, &holder, &waiting, |r| r.ttl(LONG)).await;
        let took = released.elapsed();
        let v = g.validity();
        let (cover, detail, _) = probe.covering(&g, delay).await;
        eprintln!("round {round}: took {took:?}, attempts {claimed}, holder {}, validity {v:?}, cover {cover}:{detail}", g.holder());
        assert!(
            cover >= 3,
            "deadline + lock delay outlives the entries: {cover}:{detail}"
        );
        g.release().await.unwrap();
    }
    finish_background(&[holder.clone(), waiting.clone()]).await;
}

// ---------------------------------------------------------------------------------------
// 5. Fencing through hand-offs from notices, many clients.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_fencing_rises_through_notice_handoffs() {
    let fleet = shared_fleet();
    let key = unique_key("rn-fence");
    let mut clients = Vec::new();
    for i in 0..5 {
        let retry = [60_000, 5, 60_000, 200, 60_000][i];
        clients.push(fair_client(fleet, Duration::from_millis(retry), Duration::ZERO).await);
    }
    let order = Arc::new(Mutex::new(Vec::<(u64, String, bool)>::new()));
    let mut tasks = Vec::new();
    for (c, locks) in clients.iter().enumerate() {
        let (locks, key, order) = (locks.clone(), key.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            for r in 0..10 {
                let req = locks
                    .fair_lock(&key)
                    .fencing(true)
                    .wait(Duration::from_secs(60));
                let req = if r % 2 == 0 {
                    req.ttl(Duration::from_secs(2))
                } else {
                    req.watchdog(Duration::from_secs(2))
                };
                let g = req.acquire().await.unwrap();
                let t = g.fencing_token().unwrap();
                order
                    .lock()
                    .unwrap()
                    .push((t, format!("c{c}r{r}"), is_handoff_value(g.holder())));
                tokio::time::sleep(Duration::from_millis((r as u64 * 13) % 5)).await;
                if r % 3 == 0 {
                    let h = g.into_holder().unwrap();
                    locks.release_by_holder(&key, &h).await.unwrap();
                } else {
                    g.release().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .unwrap()
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    let handed = order.iter().filter(|o| o.2).count();
    eprintln!("fencing: {} holds, {handed} hand-off values", order.len());
    for w in order.windows(2) {
        assert!(
            w[1].0 > w[0].0,
            "tokens went back: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
    leaves_nothing(fleet, &key, &clients).await;
}

// ---------------------------------------------------------------------------------------
// 6. A node paused right at the hand-off: the notice hold uses the other nodes; when the
// paused node comes back it runs the release (and grants) late.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_node_paused_or_restarted_at_the_hand_off() {
    let fleet = own_fleet(5);
    let holder = connected_slow_client(&fleet, "warm").await;
    let waiting = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_millis(500))
        .retry_delay(Duration::from_secs(3))
        .retry_jitter(Duration::ZERO)
        .queue_lease(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let third = builder(&fleet, Quorum::Majority)
        .retry_delay(Duration::from_millis(5))
        .build()
        .await
        .unwrap();
    let probe = Probe::new(&fleet).await;
    for round in 0..6 {
        let key = unique_key("rn-paused");
        let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
        let (locks, owned) = (waiting.clone(), key.clone());
        let task = tokio::spawn(async move {
            locks
                .fair_lock(&owned)
                .ttl(Duration::from_secs(4))
                .acquire()
                .await
        });
        eventually(&fleet, LONG, "in line", || async {
            queued_everywhere(&fleet, &key).await == 1 && waiting.stats().waiting == 1
        })
        .await;
        // A third client's waiter behind.
        let behind = start_waiting(
            &third,
            &key,
            Duration::from_secs(4),
            Duration::from_secs(30),
        );
        eventually(&fleet, LONG, "two in line", || async {
            queued_everywhere(&fleet, &key).await == 2
        })
        .await;
        let node = 1 + round % 4;
        let restart = round % 2 == 1;
        if restart {
            fleet.kill(node).unwrap();
        } else {
            fleet.pause(node).unwrap();
        }
        let _ = guard.release().await;
        let g = tokio::time::timeout(LONG, task).await.unwrap().unwrap();
        let g = match g {
            Ok(g) => g,
            Err(e) => panic!("round {round}: {e}"),
        };
        let v = g.validity();
        let (cover, detail, _) = probe.covering(&g, Duration::ZERO).await;
        eprintln!(
            "round {round} (node {node} {}): holder {} validity {v:?} cover {cover}:{detail}",
            if restart { "killed" } else { "paused" },
            g.holder()
        );
        assert!(cover >= 3, "round {round}: cover {cover}:{detail}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        if restart {
            fleet.restart(node).unwrap();
        } else {
            fleet.resume(node).unwrap();
        }
        // Hold across the return of the node, and past the claim window.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(4000) {
            if !g.is_held() {
                break;
            }
            let (cover, detail, held) = probe.covering(&g, Duration::ZERO).await;
            if held && g.is_held() && cover < 3 {
                panic!(
                    "round {round}: at {:?}: cover {cover}:{detail}",
                    t0.elapsed()
                );
            }
            if behind.is_finished() && g.is_held() {
                let b = behind.await.unwrap();
                panic!(
                    "round {round}: the waiter behind got it while the guard holds: {:?}",
                    b.map(|g| g.holder().to_string())
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let held = g.is_held();
        let r = g.release().await;
        eprintln!("  held through {held}; release {r:?}");
        let b = tokio::time::timeout(LONG, behind).await.unwrap().unwrap();
        match b {
            Ok(b) => {
                b.release().await.ok();
            }
            Err(e) => eprintln!("  the waiter behind: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// 7. A waiter that dies at the moment its grants are made costs one claim window (or, if it
// held from the notices first, its TTL, as any holder that dies).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_dead_waiter_costs_a_claim_window() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let live = fair_client(fleet, Duration::from_secs(60), Duration::ZERO).await;
    for round in 0..3 {
        let key = unique_key("rn-dead");
        let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
        let doomed = {
            let key = key.clone();
            // Claim window 1 s (4 x 250 ms).
            Doomed::start(
                builder(fleet, Quorum::Majority)
                    .retry_delay(Duration::from_millis(5))
                    .queue_lease(Duration::from_secs(60)),
                move |locks| async move {
                    locks
                        .fair_lock(&key)
                        .ttl(Duration::from_secs(2))
                        .acquire()
                        .await
                },
            )
        };
        eventually(fleet, LONG, "doomed in line", || async {
            queued_everywhere(fleet, &key).await == 1
        })
        .await;
        let waiting = start_waiting(&live, &key, LONG, Duration::from_secs(20));
        eventually(fleet, LONG, "live in line", || async {
            line_lengths(fleet, &key).await.iter().all(|&n| n == 2)
        })
        .await;
        // Freeze it just before or after the release.
        let released = Instant::now();
        if round == 0 {
            doomed.freeze();
            guard.release().await.unwrap();
        } else {
            let r = tokio::spawn(guard.release());
            if round == 2 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            doomed.freeze();
            r.await.unwrap().unwrap();
        }
        let g = tokio::time::timeout(LONG, waiting).await.unwrap().unwrap();
        let took = released.elapsed();
        eprintln!(
            "round {round}: the live waiter got it after {took:?}: {:?}",
            g.as_ref().map(|g| g.holder().to_string())
        );
        let g = g.unwrap();
        // If the doomed waiter held from notices before freezing (its thread then ends), it
        // is a holder that died: its first renewal, sent at once, may have given its entries
        // its TTL (2 s), as a claim would have; otherwise it costs one claim window (1 s).
        assert!(
            took < Duration::from_secs(4),
            "round {round}: took {took:?}"
        );
        g.release().await.unwrap();
    }
    finish_background(&[holder.clone(), live.clone()]).await;
}

// ---------------------------------------------------------------------------------------
// 8. Clock jump on a minority right after a hold from notices, before the first renewal.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_clock_jump_before_the_first_renewal() {
    let fleet = own_fleet(5);
    let holder = client(&fleet, Quorum::Majority).await;
    let waiting = waiting_client(&fleet, Duration::from_secs(2)).await;
    let third = builder(&fleet, Quorum::Majority)
        .retry_delay(Duration::from_millis(5))
        .build()
        .await
        .unwrap();
    for round in 0..4 {
        let key = unique_key("rn-jump");
        let (g, _) = noticed_guard(&fleet, &key, &holder, &waiting, move |r| {
            if round % 2 == 0 {
                r.ttl(Duration::from_secs(5))
            } else {
                r.watchdog(Duration::from_secs(5))
            }
        })
        .await;
        // One node jumps (its grant is gone), and a competitor tries at once. A majority of
        // five tolerates a forgetting node only where the holder has more than three nodes
        // (docs/SAFETY.md): a node whose waiter's line entry had not landed when the release
        // came granted nobody, and under load the hold may rest on three grants. The jump
        // then hits one of the guard's nodes where it has four or five, and otherwise a node
        // without its grant (the competitor gets at most the two free nodes).
        let holding = which_nodes_hold(&fleet, &key, g.holder()).await;
        let node = match holding.len() {
            4.. => holding[round % holding.len()],
            _ => (0..fleet.len())
                .find(|i| !holding.contains(i))
                .expect("a node without the grant"),
        };
        eprintln!("round {round}: held on {holding:?}, node {node} jumps");
        fleet.expire_early(node, "test:*").unwrap();
        let comp = start_waiting(
            &third,
            &key,
            Duration::from_secs(5),
            Duration::from_secs(20),
        );
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(2500) {
            if comp.is_finished() && g.is_held() {
                let validity = g.validity();
                let got = comp.await.unwrap();
                let mut entries = Vec::new();
                for i in 0..fleet.len() {
                    entries.push((entry(&fleet, i, &key).await, pttl(&fleet, i, &key).await));
                }
                panic!(
                    "round {round}: competitor got {:?} while the guard {} holds (validity {validity:?}); entries {entries:?}",
                    got.map(|c| (c.holder().to_string(), c.validity())),
                    g.holder()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!(
            "round {round}: after 2.5 s guard held {} validity {:?}",
            g.is_held(),
            g.validity()
        );
        let _ = g.release().await;
        let c = tokio::time::timeout(LONG, comp)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        c.release().await.unwrap();
    }
}

#[allow(dead_code)]
fn _unused(_: Error) {}

/// A fixed TTL guard held from notices whose claim window already covers its TTL: how long
/// does the guard (and the key) live from the hold, against the TTL?
#[tokio::test]
async fn review_notices_fixed_ttl_lifetime() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let mut out = Vec::new();
    for (claim_s, ttl_ms) in [(5u64, 2000u64), (5, 4000), (2, 4000)] {
        let waiting = waiting_client(fleet, Duration::from_secs(claim_s)).await;
        let key = unique_key("rn-ttl-life");
        let ttl = Duration::from_millis(ttl_ms);
        let (g, released) =
            noticed_guard(fleet, &key, &holder, &waiting, move |r| r.ttl(ttl)).await;
        let v0 = g.validity();
        while g.is_held() && released.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let life = released.elapsed();
        // the key on the nodes
        let mut gone_at = None;
        while released.elapsed() < Duration::from_secs(20) {
            if nodes_holding(fleet, &key, g.holder()).await < 3 {
                gone_at = Some(released.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        out.push(format!(
            "claim window {claim_s}s, ttl {ttl:?}: validity at hold {v0:?}; guard held until {life:?} after the release; the key left a quorum at {gone_at:?}; extended {}",
            waiting.stats().extended
        ));
        drop(g);
        finish_background(&[waiting]).await;
    }
    eprintln!("{out:#?}");
}

/// guard.extend right after a hold from notices, before the scheduled first renewal: a long
/// extend must not be cut back by the renewal on the nodes while the guard keeps its
/// deadline; a medium one (past the renewal) must not be stretched for a fixed TTL. Also
/// extends racing the renewal at several offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_extend_before_and_around_the_first_renewal() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let waiting = waiting_client(fleet, Duration::from_secs(3)).await;
    let probe = Probe::new(fleet).await;
    let mut bad = Vec::new();
    let mut notes = Vec::new();
    let ttl = Duration::from_secs(10);
    // (watchdog, wait before extend ms, extend to)
    let mut cases = Vec::new();
    for watchdog in [false, true] {
        cases.push((watchdog, 0u64, Duration::from_secs(20)));
        cases.push((watchdog, 0, Duration::from_millis(1800)));
        for off in [900u64, 960, 985, 1000, 1015, 1040] {
            cases.push((watchdog, off, Duration::from_secs(20)));
            cases.push((watchdog, off, Duration::from_secs(4)));
        }
    }
    for (n, (watchdog, wait_ms, to)) in cases.into_iter().enumerate() {
        let key = unique_key("rn-extend-renewal");
        let (g, _) = noticed_guard(fleet, &key, &holder, &waiting, kept(watchdog, ttl)).await;
        let got = Instant::now();
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        let ext = g.extend(to).await;
        let v_after_extend = g.validity();
        // Past the scheduled renewal (a third of ~2.96 s) and any in flight.
        tokio::time::sleep(Duration::from_millis(
            1600u64
                .saturating_sub(got.elapsed().as_millis() as u64)
                .max(300),
        ))
        .await;
        let (cover, detail, held) = probe.covering(&g, Duration::ZERO).await;
        let v = g.validity();
        notes.push(format!(
            "case {n} watchdog {watchdog} extend({to:?}) at {wait_ms} ms: {ext:?}, validity after {v_after_extend:?}, at 1.6 s {v:?} held {held} cover {cover}"
        ));
        if held && g.is_held() && cover < 3 {
            bad.push(format!("case {n} watchdog {watchdog} extend({to:?}) at {wait_ms} ms: deadline outlives entries: cover {cover}:{detail}"));
        }
        if !watchdog && ext.is_ok() && to < ttl && v > to {
            bad.push(format!("case {n} fixed ttl: extend({to:?}) at {wait_ms} ms, then validity {v:?} at 1.6 s: stretched past the extend"));
        }
        let _ = g.release().await;
    }
    finish_background(&[holder.clone(), waiting.clone()]).await;
    eprintln!("{notes:#?}");
    assert!(bad.is_empty(), "{bad:#?}");
}

/// release_by_holder / extend_by_holder through the guard's own client before the first
/// renewal, and dropping the guard at once: the key goes to the next waiter promptly and the
/// first renewal does nothing afterwards; `into_holder` before it: the value keeps the TTL
/// until another client releases it by that value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_notices_by_holder_through_the_own_client_before_the_renewal() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    let waiting = waiting_client(fleet, Duration::from_secs(3)).await;
    let next = client(fleet, Quorum::Majority).await;
    for case in 0..4 {
        let key = unique_key("rn-own-by-holder");
        let (g, _) = noticed_guard(fleet, &key, &holder, &waiting, |r| r.ttl(LONG)).await;
        let value = g.holder().to_string();
        // A next waiter of a third client.
        let behind = start_waiting(&next, &key, Duration::from_secs(5), Duration::from_secs(20));
        eventually(fleet, LONG, "behind in line", || async {
            line_lengths(fleet, &key)
                .await
                .iter()
                .filter(|&&n| n >= 1)
                .count()
                >= 3
        })
        .await;
        match case {
            0 => waiting.release_by_holder(&key, &value).await.unwrap(),
            1 => {
                let v = waiting
                    .extend_by_holder(&key, &value, Duration::from_secs(8))
                    .await
                    .unwrap();
                eprintln!(
                    "case 1: extend_by_holder gave {v:?}; guard validity {:?}",
                    g.validity()
                );
                tokio::time::sleep(Duration::from_millis(1500)).await;
                eprintln!(
                    "case 1: after the renewal time, guard validity {:?} ttl {:?}",
                    g.validity(),
                    g.ttl()
                );
                waiting.release_by_holder(&key, &value).await.unwrap();
            }
            _ => {}
        }
        let t0 = Instant::now();
        if case == 2 {
            // The value given up keeps the guard's TTL (its first renewal goes out by holder
            // value), not the claim window: past the window it still holds a quorum, until
            // another client releases it by that value.
            let value = g.into_holder().unwrap();
            tokio::time::sleep(Duration::from_secs(4)).await;
            let on = nodes_holding(fleet, &key, &value).await;
            assert!(
                on >= 3,
                "the given-up value held on {on} nodes past the claim window"
            );
            holder.release_by_holder(&key, &value).await.unwrap();
        } else if case == 3 {
            drop(g);
        } else {
            assert!(
                !g.is_held(),
                "case {case}: guard still held after release_by_holder"
            );
            assert!(g.release().await.is_err());
        }
        let b = tokio::time::timeout(Duration::from_secs(20), behind)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        eprintln!(
            "case {case}: the next waiter got it after {:?}",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(b.is_held(), "case {case}");
        let on = nodes_holding(fleet, &key, b.holder()).await;
        assert!(on >= 3, "case {case}: next holder on {on} nodes");
        b.release().await.unwrap();
    }
    finish_background(&[holder.clone(), waiting.clone(), next.clone()]).await;
}

/// Control for the extend probe: a fair guard claimed by an attempt (a free key), fixed TTL
/// and watchdog, extended at once; its validity 3.6 s later (past a watchdog renewal).
#[tokio::test]
async fn review_notices_extend_control_without_notices() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    for watchdog in [false, true] {
        for to in [Duration::from_secs(20), Duration::from_millis(4500)] {
            let key = unique_key("rn-extend-control");
            let r = locks.fair_lock(&key);
            let r = if watchdog {
                r.watchdog(Duration::from_secs(10))
            } else {
                r.ttl(Duration::from_secs(10))
            };
            let g = r.acquire().await.unwrap();
            g.extend(to).await.unwrap();
            tokio::time::sleep(Duration::from_millis(3600)).await;
            eprintln!(
                "control watchdog {watchdog} extend({to:?}): validity 3.6 s later {:?}",
                g.validity()
            );
            g.release().await.unwrap();
        }
    }
}
