//! Holder values of the fair forms (release and hand-off from another client, made-up
//! values), waiters that die or move on their timers, split grants mended, late rollbacks,
//! and hand-off values claimed only by a later round.

use super::faults::line_dump;
use super::*;

/// A fair lock's token releases it as its guard would: the next waiter in line gets the key
/// handed on by the nodes (its grant's notices wake it), not after a timer.
#[tokio::test]
pub(super) async fn a_fair_locks_token_releases_it_from_another_client_with_the_hand_off() {
    let fleet = shared_fleet();
    let key = unique_key("fair-token");
    let holder = client(fleet, Quorum::Majority).await;
    let token = holder
        .fair_lock(&key)
        .ttl(LONG)
        .acquire()
        .await
        .unwrap()
        .into_holder()
        .expect("a fair lock's guard gives its token");
    holder.finish_background().await;
    let live = patient_client(fleet).await;
    let waiting = start_waiting(&live, &key, LONG, Duration::from_secs(20));
    eventually(fleet, LONG, "the waiter joins the line", || async {
        queued_everywhere(fleet, &key).await == 1 && live.stats().waiting == 1
    })
    .await;
    let other = client(fleet, Quorum::Majority).await;
    let validity = other
        .extend_by_holder(&key, &token, LONG)
        .await
        .expect("extended by holder value");
    assert!(validity > LONG / 2);
    other.release_by_holder(&key, &token).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was handed the key, not left to its timer")
        .unwrap()
        .unwrap();
    assert_eq!(live.stats().woken, 1, "woken by the grant naming it");
    got.release().await.unwrap();
    finish_background(&[live.clone(), other.clone()]).await;
    assert!(
        !any_line_keys(fleet, &key).await,
        "the line was left behind"
    );
}

/// A token's release by holder value takes its request out of the line as the guard's would: here
/// its holder came through the line (so its waiter is still first in line, its place good
/// for a minute), and the next waiter must be handed the key at once, not after that minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_fair_token_of_a_holder_that_came_through_the_line_hands_the_key_on() {
    let fleet = shared_fleet();
    let key = unique_key("fair-token-line");
    let blocker = client(fleet, Quorum::Majority).await;
    let first = blocker.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let holder = builder(fleet, Quorum::Majority)
        .queue_lease(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let held = start_waiting(&holder, &key, LONG, Duration::from_secs(20));
    eventually(fleet, LONG, "the holder waits in line", || async {
        line_lengths(fleet, &key).await.iter().all(|&n| n == 1)
    })
    .await;
    first.release().await.unwrap();
    let token = held.await.unwrap().unwrap().into_holder().unwrap();
    holder.finish_background().await;
    let live = patient_client(fleet).await;
    let waiting = start_waiting(&live, &key, LONG, Duration::from_secs(20));
    eventually(fleet, LONG, "the live waiter joins", || async {
        live.stats().waiting == 1 && line_lengths(fleet, &key).await.iter().all(|&n| n >= 1)
    })
    .await;
    let other = client(fleet, Quorum::Majority).await;
    other.release_by_holder(&key, &token).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("handed on by the token's release")
        .unwrap()
        .unwrap();
    got.release().await.unwrap();
    finish_background(&[live, other, holder, blocker]).await;
}

/// A made-up token naming a waiter (its id is public: grant notices and the line carry it)
/// takes nobody out of the line: the release of a holder value that holds nothing leaves the
/// line as it is, and the waiter keeps its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_made_up_fair_token_takes_nobody_out_of_the_line() {
    let fleet = shared_fleet();
    let key = unique_key("fair-forged");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let victim = patient_client(fleet).await;
    let victim_wait = start_waiting(&victim, &key, LONG, Duration::from_secs(20));
    eventually(fleet, LONG, "the victim joins the line", || async {
        line_lengths(fleet, &key).await.iter().all(|&n| n == 1) && victim.stats().waiting == 1
    })
    .await;
    let waiter_id = line(fleet, 0, &key).await[0].clone();
    let stranger = client(fleet, Quorum::Majority).await;
    let forged = format!("fair:{waiter_id}:0123456789abcdef0123456789abcdef:g");
    assert!(matches!(
        stranger.release_by_holder(&key, &forged).await,
        Err(Error::NotHeld { .. })
    ));
    stranger.finish_background().await;
    assert_eq!(
        line_lengths(fleet, &key).await,
        vec![1; 5],
        "the made-up token took the waiter out of the line"
    );
    guard.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), victim_wait)
        .await
        .expect("the victim keeps its turn")
        .unwrap()
        .unwrap();
    got.release().await.unwrap();
    finish_background(&[holder, victim, stranger]).await;
}

/// Two waiters die in line one behind the other: a crashed process with two waiting tasks.
/// The grant to the first names as the next waiter the first one behind it of another client
/// (the live waiter), whose client tries at the end of the claim window; its attempt finds
/// the key free and the second dead waiter first, and grants it its own claim window (and
/// names the live waiter again). Each dead waiter costs one claim window, not a queue lease
/// (a minute here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn two_dead_waiters_of_one_process_cost_two_claim_windows() {
    let fleet = shared_fleet();
    let key = unique_key("fair-two-dead");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let doomed = {
        let k = key.clone();
        Doomed::start(
            QuorumLock::builder()
                .nodes(fleet.urls())
                .queue_lease(Duration::from_secs(60)),
            move |locks| async move {
                let first = locks.fair_lock(&k).ttl(LONG).acquire();
                // The second task joins the line after the first.
                let second = async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    locks.fair_lock(&k).ttl(LONG).acquire().await
                };
                tokio::select! {
                    got = first => got,
                    got = second => got,
                }
            },
        )
    };
    eventually(fleet, LONG, "both doomed waiters join the line", || async {
        line_lengths(fleet, &key).await.iter().all(|&l| l == 2)
    })
    .await;
    doomed.freeze();
    let live = patient_client(fleet).await;
    let waiting = start_waiting(&live, &key, LONG, Duration::from_secs(20));
    eventually(fleet, LONG, "the live waiter joins the line", || async {
        line_lengths(fleet, &key).await.iter().all(|&n| n == 3) && live.stats().waiting == 1
    })
    .await;
    let released = tokio::time::Instant::now();
    guard.release().await.unwrap();
    let got = waiting.await.unwrap();
    let took = released.elapsed();
    assert!(
        got.is_ok() && took < Duration::from_secs(5),
        "the line stalled {took:?}: {got:?}"
    );
    got.unwrap().release().await.unwrap();
    finish_background(&[holder, live]).await;
}

/// A first waiter that moves on its timer (pub/sub off; likewise one whose notices were
/// lost) with a retry delay of 1 s: its claim window covers its own pause, so it keeps its
/// turn, and the waiter that joined after it is served after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_first_waiter_that_moves_on_its_timer_keeps_its_turn() {
    let fleet = shared_fleet();
    for _ in 0..2 {
        let key = unique_key("fair-timer-waiter");
        let holder = client(fleet, Quorum::Majority).await;
        let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
        let slow = QuorumLock::builder()
            .nodes(fleet.urls())
            .node_timeout(Duration::from_millis(50))
            .retry_delay(Duration::from_secs(1))
            .retry_jitter(Duration::ZERO)
            .pubsub(false)
            .build()
            .await
            .unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn_waiter = |locks: QuorumLock, name: &'static str| {
            let (key, order) = (key.clone(), order.clone());
            tokio::spawn(async move {
                let g = locks
                    .fair_lock(&key)
                    .ttl(LONG)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .unwrap();
                order.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(50)).await;
                g.release().await.unwrap();
            })
        };
        let first = spawn_waiter(slow.clone(), "first, on its timer");
        eventually(fleet, LONG, "the first waiter joins", || async {
            line_lengths(fleet, &key).await.iter().all(|&n| n == 1)
        })
        .await;
        let later = client(fleet, Quorum::Majority).await;
        let second = spawn_waiter(later.clone(), "second");
        eventually(fleet, LONG, "the second waiter joins", || async {
            line_lengths(fleet, &key).await.iter().all(|&n| n == 2)
        })
        .await;
        guard.release().await.unwrap();
        first.await.unwrap();
        second.await.unwrap();
        let order = order.lock().unwrap().clone();
        assert_eq!(
            order,
            ["first, on its timer", "second"],
            "out of ticket order"
        );
        finish_background(&[holder, slow, later]).await;
    }
}

/// Takes `waiter` out of `key`'s line on node `i`, as if its join had not landed there yet
/// (a join lands on each node in its own time).
pub(super) async fn not_joined_yet(fleet: &Fleet, i: usize, key: &str, waiter: &str) {
    let mut c = conn(fleet, i).await;
    let _: () = redis::pipe()
        .cmd("ZREM")
        .arg(quorum_lock::names::line(key.as_bytes()))
        .arg(waiter)
        .cmd("ZREM")
        .arg(quorum_lock::names::line_leases(key.as_bytes()))
        .arg(waiter)
        .cmd("HDEL")
        .arg(quorum_lock::names::line_entries(key.as_bytes()))
        .arg(waiter)
        .query_async(&mut c)
        .await
        .unwrap();
}

/// The waiter that joined `key`'s line last, as node `i` has it (highest ticket).
pub(super) async fn last_in_line(fleet: &Fleet, i: usize, key: &str) -> String {
    line(fleet, i, key).await.pop().expect("a waiter in line")
}

/// A release lands while the nodes' lines differ (a join not yet landed everywhere): each
/// node grants its own first waiter, here nodes 0-1 the first waiter, 2-3 the second and 4
/// the third. No waiter has a quorum of grants, so no notice wakes one, and the grants are
/// short, but a claim window outlasts the waiters' timers, a minute here: waiting the grants
/// out would stall the line for their 30 s. A waiter named by a minority of grants tries
/// after a node timeout instead; its try rejoins the line on the nodes that had lost its
/// place, and the rollbacks of those tries hand their nodes to the first waiter there, which
/// takes the lock; every waiter gets it within its wait. (Which of the first two goes first
/// depends on which rejoin reaches node 4 first: the first waiter's place was lost on a
/// majority of the nodes, the second's on one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_grant_split_between_waiters_is_mended_without_waiting_the_grants_out() {
    let fleet = shared_fleet();
    let key = unique_key("fair-split");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    holder.finish_background().await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    // Each waiter joins behind the ones before it; then the nodes listed forget its place.
    for (n, forgotten_on) in [(1, &[2, 3, 4][..]), (2, &[4][..]), (3, &[][..])] {
        let locks = patient_client(fleet).await;
        let (k, order) = (key.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let got = locks
                .fair_lock(&k)
                .ttl(LONG)
                .wait(Duration::from_secs(20))
                .acquire()
                .await;
            order.lock().unwrap().push(n);
            let stats = locks.stats();
            got.map_err(|e| format!("waiter {n}: {e}; {stats:?}"))?
                .release()
                .await
                .map_err(|e| format!("waiter {n}'s release: {e}"))
        }));
        eventually(
            fleet,
            Duration::from_secs(10),
            "the waiter in line",
            || async { line(fleet, 0, &key).await.len() == n },
        )
        .await;
        let waiter = last_in_line(fleet, 0, &key).await;
        eventually(
            fleet,
            Duration::from_secs(10),
            "its join everywhere",
            || async {
                let mut everywhere = true;
                for i in 0..fleet.len() {
                    everywhere &= line(fleet, i, &key).await.contains(&waiter);
                }
                everywhere
            },
        )
        .await;
        for &i in forgotten_on {
            not_joined_yet(fleet, i, &key, &waiter).await;
        }
    }
    let before = line_dump(fleet, &key).await;
    guard.release().await.unwrap();
    let mut failed = Vec::new();
    for w in waiters {
        if let Err(e) = w.await.unwrap() {
            failed.push(e);
        }
    }
    assert!(
        failed.is_empty(),
        "{failed:#?}\nbefore the release:\n{before}\nnow:\n{}",
        line_dump(fleet, &key).await
    );
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 3, "{order:?}");
    assert_eq!(
        order[2], 3,
        "the last to join, whose place no node lost, went before another: {order:?}"
    );
}

/// An attempt, a rollback or a withdrawal that lands late on a node (written on a connection
/// that was then replaced) must not undo what a later attempt, or a grant, of the same
/// request counts on: each attempt holds the key with a value of its own and claims only a
/// grant, and a rollback deletes only its own attempt's value. A request cut off from
/// a quorum goes on under a new identity, which its old withdrawal cannot touch. (When all
/// attempts shared one holder value, the late rollback deleted the next attempt's entry;
/// `tests/model_fair/` finds the two holders that follows.) The library's own scripts,
/// on one node, in the order a late delivery gives them.
#[tokio::test]
pub(super) async fn late_rollbacks_and_withdrawals_touch_nothing_a_later_attempt_or_grant_counts_on(
) {
    let fleet = shared_fleet();
    let key = unique_key("fair-late-scripts");
    let mut node = conn(fleet, 0).await;
    let lease = Duration::from_secs(30);
    let base = "fair:late.w1:0123456789abcdef0123456789abcdef";
    let (first, second, third) = (
        format!("{base}:1"),
        format!("{base}:2"),
        format!("{base}:3"),
    );
    let attempt = |holder: String, waiter: &'static str, ticket: u64, round: u64| {
        let key = key.clone();
        async move {
            let mut node = conn(fleet, 0).await;
            let attempt = testkit::FairAttempt {
                waiter,
                holder: &holder,
                ttl: LONG,
                place: ticket,
                round,
            };
            testkit::fair_attempt_in_round_on_node(&mut node, key.as_bytes(), attempt, lease)
                .await
                .unwrap()
        }
    };
    // Attempt 1 takes the free key. Attempt 2 (attempt 1 failed elsewhere, and its rollback
    // has not reached this node yet) is refused: an earlier attempt's value is never claimed.
    assert!(attempt(first.clone(), "late.w1", 1, 1).await);
    assert!(!attempt(second.clone(), "late.w1", 1, 2).await);
    assert_eq!(entry(fleet, 0, &key).await.as_deref(), Some(first.as_str()));
    // Attempt 1's rollback lands: the key goes straight back to the request, first in line,
    // as a grant: its hand-off value of the round of its entry's attempt (2).
    assert!(
        testkit::fair_rollback_on_node(&mut node, key.as_bytes(), "late.w1", &first)
            .await
            .unwrap()
    );
    let granted = format!("{base}:h2");
    assert_eq!(
        entry(fleet, 0, &key).await.as_deref(),
        Some(granted.as_str()),
        "the rollback granted the key to its request"
    );
    // Attempt 2, landing once more, does not claim it (the request may hold it from the
    // grant's notices); attempt 3 does.
    assert!(!attempt(second.clone(), "late.w1", 1, 2).await);
    assert_eq!(
        entry(fleet, 0, &key).await.as_deref(),
        Some(granted.as_str())
    );
    assert!(attempt(third.clone(), "late.w1", 1, 3).await);
    // Attempt 1 and its rollback land once more (a copy written on a replaced connection):
    // neither touches attempt 3's entry.
    assert!(!attempt(first.clone(), "late.w1", 1, 1).await);
    let deleted = testkit::fair_rollback_on_node(&mut node, key.as_bytes(), "late.w1", &first)
        .await
        .unwrap();
    assert!(!deleted, "a late rollback deleted the next attempt's entry");
    assert_eq!(entry(fleet, 0, &key).await.as_deref(), Some(third.as_str()));
    // Attempt 3 fails too and rolls back: the key goes straight back to the request, first
    // in line, as a grant; attempt 1's rollback, landing again, leaves the grant. (Attempt 1,
    // landing late, wrote its round into the request's entry: the grant is of round 1, which
    // the request's later attempts claim and whose notices it does not hold from, its latest
    // attempt being of round 3.)
    assert!(
        testkit::fair_rollback_on_node(&mut node, key.as_bytes(), "late.w1", &third)
            .await
            .unwrap()
    );
    let grant = format!("{base}:h1");
    assert_eq!(entry(fleet, 0, &key).await.as_deref(), Some(grant.as_str()));
    let deleted = testkit::fair_rollback_on_node(&mut node, key.as_bytes(), "late.w1", &first)
        .await
        .unwrap();
    assert!(!deleted, "a late rollback deleted a grant to its request");
    assert_eq!(entry(fleet, 0, &key).await.as_deref(), Some(grant.as_str()));
    // Cut off, the request withdraws (deleting its grant) and goes on as a new identity,
    // which joins the line and takes the key; the old withdrawal, landing again, leaves both.
    assert!(
        testkit::fair_withdraw_on_node(&mut node, key.as_bytes(), "late.w1", &first)
            .await
            .unwrap()
    );
    let renewed = "fair:late.w2:fedcba9876543210fedcba9876543210:1".to_string();
    assert!(attempt(renewed.clone(), "late.w2", 2, 4).await);
    let deleted = testkit::fair_withdraw_on_node(&mut node, key.as_bytes(), "late.w1", &first)
        .await
        .unwrap();
    assert!(
        !deleted,
        "a late withdrawal deleted the new identity's entry"
    );
    assert_eq!(
        entry(fleet, 0, &key).await.as_deref(),
        Some(renewed.as_str())
    );
    assert_eq!(line(fleet, 0, &key).await, vec!["late.w2".to_string()]);
    forget_fair_key(fleet, 0, &key).await;
}

/// A release handing the lock to a waiter of its own client sets the key to the waiter's
/// hand-off value for the round of its last attempt (`<base>:h<round>`), which the handed-over
/// guard holds. An attempt of that round or an earlier one, landing late, finds it held and
/// changes nothing (were it to take the key over, its rollback, landing after it, would
/// delete what the guard counts on); an attempt of a later round (the hand-off did not
/// happen, since the waiter attempts again) claims it. The library's own acquire script on
/// one node, for an attempt of round 1.
#[tokio::test]
pub(super) async fn a_hand_off_value_is_claimed_only_by_an_attempt_of_a_later_round() {
    let fleet = shared_fleet();
    let key = unique_key("fair-handed");
    let mut node = conn(fleet, 0).await;
    let base = "fair:handed.w1:0123456789abcdef0123456789abcdef";
    let attempt = format!("{base}:1");
    for (handed_round, claimed) in [(1, false), (2, false), (0, true)] {
        let handed = format!("{base}:h{handed_round}");
        plant(fleet, 0, &key, &handed).await;
        let took = testkit::fair_attempt_on_node(
            &mut node,
            key.as_bytes(),
            "handed.w1",
            &attempt,
            LONG,
            1,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        let now = entry(fleet, 0, &key).await;
        assert_eq!(took, claimed, "hand-off of round {handed_round}: {now:?}");
        let expected = if claimed { &attempt } else { &handed };
        assert_eq!(now.as_deref(), Some(expected.as_str()));
    }
    forget_fair_key(fleet, 0, &key).await;
}

/// Deletes a fair key and its line from node `i` of the shared fleet, as a test that edits
/// one node by hand leaves it.
pub(super) async fn forget_fair_key(fleet: &Fleet, i: usize, key: &str) {
    let mut c = conn(fleet, i).await;
    let _: () = redis::cmd("DEL")
        .arg(key)
        .arg(quorum_lock::names::line(key.as_bytes()))
        .arg(quorum_lock::names::line_leases(key.as_bytes()))
        .arg(quorum_lock::names::line_entries(key.as_bytes()))
        .arg(quorum_lock::names::tickets(key.as_bytes()))
        .query_async(&mut c)
        .await
        .unwrap();
}
