//! The line under faults and races: the negative control (lines ordered by arrival), late
//! rollbacks and withdrawals, a first waiter cut off from a quorum, several clients' tasks,
//! dead waiters and their grants, tickets drawn but never used.

use super::*;

/// Three waiters arrive at the five nodes in different orders (as they do when their
/// requests race), each first on a different part of the nodes: nodes 0 and 1 saw A first,
/// nodes 2 and 3 saw B, node 4 saw C.
pub(super) const ARRIVALS: [[usize; 3]; 5] =
    [[0, 1, 2], [0, 1, 2], [1, 2, 0], [1, 2, 0], [2, 0, 1]];

#[tokio::test]
pub(super) async fn negative_control_a_fair_lock_ordered_by_arrival_deadlocks_and_tickets_do_not() {
    let fleet = shared_fleet();
    let queue_lease = Duration::from_secs(60);
    let waiters = ["a", "b", "c"].map(|w| format!("waiter-{w}-{}", unique_key("")));
    let holders = ["a", "b", "c"].map(|w| format!("holder-{w}-{}", unique_key("")));
    let mut nodes = Vec::new();
    for i in 0..fleet.len() {
        nodes.push(conn(fleet, i).await);
    }
    // Round after round, every waiter tries on every node; its place on a node is where it
    // arrived there (no tickets), or its ticket (the same on every node).
    let run = |key: String, place: Box<dyn Fn(usize, usize) -> u64>| {
        let (waiters, holders, mut nodes) = (waiters.clone(), holders.clone(), nodes.clone());
        async move {
            // They arrive while another holder has the key: each joins every node's line.
            for node in nodes.iter_mut() {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg("the-holder-before")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(node)
                    .await
                    .unwrap();
            }
            for (i, node) in nodes.iter_mut().enumerate() {
                for &w in &ARRIVALS[i] {
                    let took = testkit::fair_attempt_on_node(
                        node,
                        key.as_bytes(),
                        &waiters[w],
                        &holders[w],
                        LONG,
                        place(i, w),
                        queue_lease,
                    )
                    .await
                    .unwrap();
                    assert!(!took, "the key was held");
                }
            }
            // The holder before them is gone: the key is free on every node.
            for node in nodes.iter_mut() {
                let _: () = redis::cmd("DEL").arg(&key).query_async(node).await.unwrap();
            }
            let mut granted = Vec::new();
            for _round in 0..10 {
                for (w, (waiter, holder)) in waiters.iter().zip(&holders).enumerate() {
                    if granted.contains(&w) {
                        continue;
                    }
                    let mut yes = Vec::new();
                    for (i, node) in nodes.iter_mut().enumerate() {
                        let ok = testkit::fair_attempt_on_node(
                            node,
                            key.as_bytes(),
                            waiter,
                            holder,
                            LONG,
                            place(i, w),
                            queue_lease,
                        )
                        .await
                        .unwrap();
                        if ok {
                            yes.push(i);
                        }
                    }
                    if yes.len() >= 3 {
                        granted.push(w);
                        // The holder is done: it leaves the key and the line (the release
                        // script's effect, written out).
                        for node in nodes.iter_mut() {
                            del_if(node, &key, holder, waiter).await;
                        }
                    } else {
                        // A failed attempt gives back what it took.
                        for &i in &yes {
                            let node = &mut nodes[i];
                            let _: i64 = redis::cmd("EVAL")
                                .arg("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0")
                                .arg(1)
                                .arg(&key)
                                .arg(holder)
                                .query_async(node)
                                .await
                                .unwrap();
                        }
                    }
                }
            }
            granted
        }
    };
    // By arrival: each waiter is first on two nodes at most. Nobody ever gets three.
    let by_arrival = unique_key("fair-arrival");
    let granted = run(
        by_arrival.clone(),
        Box::new(|i, w| ARRIVALS[i].iter().position(|&x| x == w).unwrap() as u64 + 1),
    )
    .await;
    assert!(
        granted.is_empty(),
        "ordered by arrival, {granted:?} got the lock"
    );
    // Each node may have granted the free key to its own first waiter (a refused attempt
    // grants it), but no holder has it on three nodes.
    let mut entries = Vec::new();
    for i in 0..fleet.len() {
        entries.push(entry(fleet, i, &by_arrival).await);
    }
    for holder in &holders {
        let on = entries
            .iter()
            .filter(|e| e.as_deref() == Some(holder.as_str()))
            .count();
        assert!(on < 3, "{holder} holds the key on {on} nodes: {entries:?}");
    }
    // With tickets (A drew 1, B 2, C 3, the same on every node), all three are served, in
    // ticket order, from the same arrivals.
    let granted = run(unique_key("fair-ticket"), Box::new(|_, w| w as u64 + 1)).await;
    assert_eq!(granted, vec![0, 1, 2]);
}

/// The release script's effect for a holder that is done: delete its entry, leave the line.
pub(super) async fn del_if(
    node: &mut redis::aio::MultiplexedConnection,
    key: &str,
    holder: &str,
    waiter: &str,
) {
    let _: () = redis::cmd("EVAL")
        .arg(
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end \
             redis.call('zrem', KEYS[2], ARGV[2]) redis.call('zrem', KEYS[3], ARGV[2]) \
             redis.call('hdel', KEYS[4], ARGV[2])",
        )
        .arg(4)
        .arg(key)
        .arg(quorum_lock::names::line(key.as_bytes()))
        .arg(quorum_lock::names::line_leases(key.as_bytes()))
        .arg(quorum_lock::names::line_entries(key.as_bytes()))
        .arg(holder)
        .arg(waiter)
        .query_async(node)
        .await
        .unwrap();
}

/// Publishes `message` on `channel` on node `i` (as a node does for a grant).
pub(super) async fn publish(fleet: &Fleet, i: usize, channel: &str, message: &str) {
    let mut c = conn(fleet, i).await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(channel)
        .arg(message)
        .query_async(&mut c)
        .await
        .unwrap();
}

/// One round of the late-rollback test: the waiter's attempt fails while its connection to
/// node 0 is being re-made (slowly), so the attempt's rollback to node 0 waits for the new
/// connection; the holder releases (granting the key to the waiter on nodes 0 and 1); the
/// waiter's next attempt takes the lock. Returns the waiter's guard and whether its entry on
/// node 0 was gone a second later (a rollback landing after the attempt deletes it: all
/// attempts of a fair request share its holder value).
pub(super) async fn late_rollback_round(
    fleet: &Fleet,
    holder: &QuorumLock,
    waiter_client: &QuorumLock,
    key: &str,
) -> (LockGuard, bool) {
    let channel =
        String::from_utf8_lossy(&quorum_lock::names::release_channel(key.as_bytes())).into_owned();
    let held = holder.fair_lock(key).ttl(LONG).acquire().await.unwrap();
    // Read before the waiter starts: `waiting` is a gauge, and a waiter that is already
    // asleep when it is read would never show as one more.
    let before = waiter_client.stats().waiting;
    let waiting = {
        let (c, k) = (waiter_client.clone(), key.to_string());
        tokio::spawn(async move {
            c.fair_lock(&k)
                .ttl(LONG)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        })
    };
    eventually(
        fleet,
        LONG,
        "the waiter is in line, listens and sleeps",
        || async {
            let s = waiter_client.stats();
            line(fleet, 0, key).await.len() == 1
                && line(fleet, 1, key).await.len() == 1
                && s.waiting > before
                && s.attempts == s.acquired + s.contended + s.failed
        },
    )
    .await;
    let waiter_id = line(fleet, 1, key).await.remove(0);
    // The waiter's connection to node 0 drops; the new one is slow to come.
    fleet.proxy(0).latency(Duration::from_millis(300));
    fleet.proxy(0).reset();
    // Wake the waiter (a quorum of notices naming it): its attempt fails (node 1 held, node 2
    // down), and its rollback to node 0 waits for the new connection.
    let attempts = waiter_client.stats().attempts;
    for _ in 0..2 {
        publish(fleet, 1, &channel, &format!("grant:{waiter_id}:first")).await;
    }
    eventually(fleet, LONG, "the attempt decided", || async {
        let s = waiter_client.stats();
        s.attempts > attempts && s.attempts == s.acquired + s.contended + s.failed
    })
    .await;
    // The holder (direct connections) releases: nodes 0 and 1 grant the key to the waiter,
    // whose next attempt takes it.
    held.release().await.unwrap();
    for _ in 0..2 {
        publish(fleet, 1, &channel, &format!("grant:{waiter_id}:second")).await;
    }
    let guard = tokio::time::timeout(LONG, waiting)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    fleet.proxy(0).heal();
    // Long enough for a rollback held up behind the reconnect to land.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let gone = entry(fleet, 0, key).await.is_none();
    (guard, gone)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_rollback_held_up_by_a_reconnect_never_deletes_the_entry_of_the_next_attempt()
{
    let fleet = Fleet::builder().nodes(3).proxied(true).start().unwrap();
    let direct: Vec<String> = (0..3).map(|i| fleet.direct_url(i)).collect();
    let holder = QuorumLock::builder()
        .nodes(direct)
        .node_timeout(Duration::from_millis(500))
        .retry_delay(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let waiter_client = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(5))
        .queue_lease(Duration::from_secs(300))
        .retry_delay(Duration::from_secs(60))
        .retry_jitter(Duration::ZERO)
        .build()
        .await
        .unwrap();
    // One node of three down: tolerated (N - q = 1). The guard then rests on nodes 0 and 1.
    fleet.kill(2).unwrap();
    for round in 0..3 {
        let key = unique_key("fair-late-rollback");
        let (guard, gone) = late_rollback_round(&fleet, &holder, &waiter_client, &key).await;
        assert!(
            !(gone && guard.is_held()),
            "round {round}: a valid guard whose entry on node 0 a late rollback deleted"
        );
        guard.release().await.unwrap();
    }
}

/// A waiter first in line that reaches only two of four nodes (fewer than the quorum of
/// three, but enough that nobody else can have three where it is not first) must not keep
/// its place with its failing attempts: it leaves the line, and the waiter behind it, which
/// reaches every node, gets the lock.
#[tokio::test]
pub(super) async fn a_first_waiter_cut_off_from_a_quorum_leaves_the_line_to_the_next() {
    use quorum_lock::testkit::FaultProxy;
    let fleet = own_fleet(4);
    let direct: Vec<String> = (0..4).map(|i| fleet.direct_url(i)).collect();
    let key = unique_key("fair-cut-off");
    let quick = |nodes: Vec<String>, wait: Duration| {
        QuorumLock::builder()
            .nodes(nodes)
            .node_timeout(Duration::from_millis(250))
            .queue_lease(Duration::from_secs(1))
            .retry_delay(Duration::from_millis(50))
            .retry_jitter(Duration::from_millis(20))
            .wait_timeout(wait)
            .build()
    };
    let holder = quick(direct.clone(), LONG).await.unwrap();
    let held = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    // The first waiter reaches nodes 2 and 3 through links of its own.
    let links = [
        FaultProxy::start(fleet.node(2).port()).unwrap(),
        FaultProxy::start(fleet.node(3).port()).unwrap(),
    ];
    let mut first_nodes = direct[..2].to_vec();
    first_nodes.extend(
        links
            .iter()
            .map(|p| format!("redis://127.0.0.1:{}", p.port())),
    );
    let first = quick(first_nodes, LONG).await.unwrap();
    let first_waits = wait_in_line(&fleet, &first, &key, 1).await;
    let second = quick(direct, Duration::from_secs(10)).await.unwrap();
    let second_waits = wait_in_line(&fleet, &second, &key, 2).await;
    // The first waiter's links to nodes 2 and 3 go down; the holder releases.
    for l in &links {
        l.black_hole();
    }
    held.release().await.unwrap();
    let got = second_waits.await.unwrap();
    let stalled = line(&fleet, 0, &key).await;
    for l in &links {
        l.heal();
    }
    let _ = first_waits.await;
    assert!(
        got.is_ok(),
        "the second waiter (reaching all four nodes) never got the lock: {got:?}; node 0's \
         line: {stalled:?}"
    );
}

/// One node's view of a fair key as [`line_dump`] reads it: holder, PTTL, line (member,
/// ticket), queue leases (member, ms left), members with an entry, the node's clock (ms).
type NodeView = (
    String,
    String,
    Vec<(String, String)>,
    Vec<(String, String)>,
    Vec<String>,
    String,
);

/// Every node's view of a fair key, for a failing test, each node's read in one script (so
/// that it is one moment's view): the entry's holder (by its waiter id, and whether that
/// waiter is in line) and PTTL, the line with tickets, and the queue leases (ms left).
pub(super) async fn line_dump(fleet: &Fleet, key: &str) -> String {
    const READ: &str = r#"
        local t = redis.call('time')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local leases = redis.call('zrange', KEYS[3], 0, -1, 'WITHSCORES')
        for i = 2, #leases, 2 do leases[i] = tostring(tonumber(leases[i]) - now) end
        return {redis.call('get', KEYS[1]) or '', tostring(redis.call('pttl', KEYS[1])),
                redis.call('zrange', KEYS[2], 0, -1, 'WITHSCORES'), leases,
                redis.call('hkeys', KEYS[4]), tostring(now)}"#;
    let mut out = String::new();
    for i in 0..fleet.len() {
        let mut c = conn(fleet, i).await;
        let (holder, pttl, line, leases, entries, now): NodeView = redis::cmd("EVAL")
            .arg(READ)
            .arg(4)
            .arg(key)
            .arg(quorum_lock::names::line(key.as_bytes()))
            .arg(quorum_lock::names::line_leases(key.as_bytes()))
            .arg(quorum_lock::names::line_entries(key.as_bytes()))
            .query_async(&mut c)
            .await
            .unwrap();
        // A fair holder value names its waiter, which is public.
        let parsed = quorum_lock::Holder::parse(&holder).ok();
        let held = match parsed.as_ref().and_then(quorum_lock::Holder::fair_waiter) {
            Some(w) if entries.iter().any(|e| e == w) => format!("{w} (in line)"),
            Some(w) => format!("{w} (not in line)"),
            None if holder.is_empty() => "nobody".to_string(),
            None => "a holder value that is not a fair one".to_string(),
        };
        out.push_str(&format!(
            "node {i} (ms {now}): key held by {held}, pttl {pttl}; line {line:?}; \
             queue leases (ms left) {leases:?}\n"
        ));
    }
    out
}

/// Sixteen tasks of eight clients take turns on one key; their timers are a minute long, so
/// every turn must come from a hand-off (within a client) or a grant's notice (across
/// clients): a line that stalls (a free key whose first waiter sleeps) fails the test by its
/// wait. Heavy on purpose: a stall that needs a loaded machine to show shows here first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn tasks_of_several_clients_take_turns_without_falling_back_to_their_timers() {
    if let Ok(path) = std::env::var("QUORUM_LOCK_TEST_TRACE") {
        let file = std::fs::File::create(path).expect("trace file");
        let _ = tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new("quorum_lock=trace"))
                .with_writer(Mutex::new(file))
                .with_ansi(false)
                .finish(),
        );
    }
    let fleet = shared_fleet();
    let key = unique_key("fair-turns");
    const CLIENTS: usize = 8;
    const TASKS: usize = 16;
    const TURNS: usize = 25;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(patient_client(fleet).await);
    }
    // The line's state when it first stalls (no turn for three seconds), for the failure
    // message: the state once the waits have ended says little.
    let turns = Arc::new(AtomicUsize::new(0));
    let monitor = {
        let (turns, key) = (turns.clone(), key.clone());
        tokio::spawn(async move {
            let mut last = (0, std::time::Instant::now());
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let now = turns.load(Ordering::Relaxed);
                if now != last.0 {
                    last = (now, std::time::Instant::now());
                } else if last.1.elapsed() > Duration::from_secs(3) {
                    return format!(
                        "after turn {now}, no turn for 3 s:\n{}",
                        line_dump(shared_fleet(), &key).await
                    );
                }
            }
        })
    };
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (locks, key, turns) = (clients[t % CLIENTS].clone(), key.clone(), turns.clone());
        tasks.push(tokio::spawn(async move {
            for turn in 0..TURNS {
                let started = std::time::Instant::now();
                let guard = match locks
                    .fair_lock(&key)
                    .ttl(LONG)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                {
                    Ok(guard) => guard,
                    Err(e) => {
                        return Err(format!(
                            "task {t}, turn {turn}: no turn within the wait ({:?}): {e}; {:?}\n{}",
                            started.elapsed(),
                            locks.stats(),
                            line_dump(shared_fleet(), &key).await
                        ))
                    }
                };
                turns.fetch_add(1, Ordering::Relaxed);
                guard.release().await.unwrap();
            }
            Ok(())
        }));
    }
    let mut stalled = Vec::new();
    for t in tasks {
        if let Err(e) = t.await.unwrap() {
            stalled.push(e);
        }
    }
    let first_stall = match monitor.is_finished() {
        true => monitor.await.unwrap(),
        false => {
            monitor.abort();
            "none seen".to_string()
        }
    };
    if !stalled.is_empty() {
        panic!(
            "the line stalled: {stalled:#?}\nfirst stall: {first_stall}\nat the end:\n{}",
            line_dump(fleet, &key).await
        );
    }
    let acquired: u64 = clients.iter().map(|c| c.stats().acquired).sum();
    assert_eq!(acquired, (TASKS * TURNS) as u64);
    // Once every call has landed on every node (a release returns at a quorum).
    finish_background(&clients).await;
    assert!(
        !any_line_keys(fleet, &key).await,
        "the line was left behind"
    );
}

/// A release grants the key to the first waiter; one that died in line (its place good for
/// a minute) would hold the line for its whole TTL (30 s here) if the grant were for its TTL,
/// as Redisson's is (#1353). A grant to a waiter of another client is short (its claim
/// window, four of its node timeouts) and, unclaimed, passes to the next waiter, whose client
/// tries at the end of the window: a patient waiter (timers a minute long) gets the lock
/// within a fraction of a second.
#[tokio::test]
pub(super) async fn a_grant_to_a_dead_waiter_passes_to_the_next_one_after_its_claim_window() {
    let fleet = shared_fleet();
    let key = unique_key("fair-dead-grant");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let doomed = {
        let key = key.clone();
        Doomed::start(
            QuorumLock::builder()
                .nodes(fleet.urls())
                .queue_lease(Duration::from_secs(60)),
            move |locks| async move { locks.fair_lock(&key).ttl(LONG).acquire().await },
        )
    };
    eventually(fleet, LONG, "the doomed waiter joins the line", || async {
        queued_everywhere(fleet, &key).await == 1
    })
    .await;
    doomed.freeze();
    let live = patient_client(fleet).await;
    let waiting = start_waiting(&live, &key, LONG, Duration::from_secs(20));
    eventually(fleet, LONG, "the live waiter joins the line", || async {
        line_lengths(fleet, &key).await.iter().all(|&n| n == 2) && live.stats().waiting == 1
    })
    .await;
    let released = tokio::time::Instant::now();
    guard.release().await.unwrap();
    let got = tokio::time::timeout(LONG, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{}", fleet.all_logs()));
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the line stalled {took:?} behind the dead waiter's grant"
    );
    got.release().await.unwrap();
    finish_background(&[holder.clone(), live.clone()]).await;
}

/// A waiting request draws its ticket with its first refused attempt, then joins the line
/// with the next. The counter it raised must not outlive it if it dies in between (no line
/// is there yet to keep the counter, or to delete it with itself).
#[tokio::test]
pub(super) async fn a_ticket_drawn_by_a_waiter_that_never_joins_the_line_expires() {
    let fleet = shared_fleet();
    let key = unique_key("fair-ticket-expiry");
    let holder = client(fleet, Quorum::Majority).await;
    let _guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    // The acquire returned at a quorum: node 0 may not have the entry yet.
    holder.finish_background().await;
    let mut node = conn(fleet, 0).await;
    let queue_lease = Duration::from_secs(2);
    let drawn = testkit::fair_first_attempt_on_node(
        &mut node,
        key.as_bytes(),
        "waiter-that-dies",
        "fair:waiter-that-dies:0123456789abcdef",
        LONG,
        queue_lease,
    )
    .await
    .unwrap();
    assert!(drawn.is_some(), "refused: someone holds the key");
    let counter = quorum_lock::names::tickets(key.as_bytes());
    let pttl = |mut node: redis::aio::MultiplexedConnection| {
        let counter = counter.clone();
        async move {
            let ms: i64 = redis::cmd("PTTL")
                .arg(&counter)
                .query_async(&mut node)
                .await
                .unwrap();
            ms
        }
    };
    let left = pttl(node.clone()).await;
    assert!(
        left > 0 && left <= 2000,
        "the ticket counter lives {left} ms (-1: for ever)"
    );
    // The same for a ticket drawn in a round of its own, on a node without the counter.
    let mut other = conn(fleet, 1).await;
    let _: () = redis::cmd("DEL")
        .arg(&counter)
        .query_async(&mut other)
        .await
        .unwrap();
    let ticket = testkit::fair_draw_on_node(&mut other, key.as_bytes(), queue_lease)
        .await
        .unwrap();
    assert!(ticket > 0);
    let left = pttl(other).await;
    assert!(
        left > 0 && left <= 2000,
        "the ticket counter lives {left} ms after a draw round (-1: for ever)"
    );
}

/// With one of five nodes frozen, two clients contending for a fair lock still take turns. A
/// refused attempt waits for its rollback only on the nodes that answered it yes, not for the
/// frozen node's timeout, so the waiter is in line before the holder's client asks again.
/// (When every rollback part was waited for, each refused attempt took a node timeout, the
/// holder's client found the line empty on a quorum and took the key straight back, and the
/// clients were served in runs.)
#[tokio::test]
async fn with_a_node_frozen_two_clients_still_take_turns() {
    const TURNS: usize = 10;
    let fleet = own_fleet(5);
    let key = unique_key("fair-frozen-turns");
    let clients = [patient_client(&fleet).await, patient_client(&fleet).await];
    fleet.pause(4).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (c, locks) in clients.iter().enumerate() {
        let (locks, key, order) = (locks.clone(), key.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..TURNS {
                let guard = locks
                    .fair_lock(&key)
                    .ttl(Duration::from_secs(5))
                    .wait(LONG)
                    .acquire()
                    .await
                    .unwrap();
                order.lock().unwrap().push(c);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(LONG * 2, task)
            .await
            .expect("both clients served")
            .unwrap();
    }
    fleet.resume(4).unwrap();
    let order = order.lock().unwrap().clone();
    let changes = order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        changes >= TURNS,
        "{changes} changes of client in {} turns: {order:?}",
        order.len()
    );
}
