//! Exhaustive model check of the quorum-lock protocol (the mutex and the read-write lock),
//! with `stateright`.
//!
//! The model is a small state machine of what the library does, explored by breadth-first
//! search over every interleaving within the bounds of each configuration. It mirrors:
//!
//! - **Acquire** (`src/acquire.rs`, `attempt`): note `t0`, send the acquire (`SET NX PX`; in
//!   the `Fencing::InAcquire` negative control, a script that also increments the node's
//!   counter) to every node at once, decide
//!   at quorum or as soon as the quorum became impossible. A guard exists only when the quorum
//!   came while `now < t0 + ttl` (validity `ttl - elapsed - drift`, with drift 0 and
//!   `min_validity` 0); its deadline is `t0 + ttl`. Otherwise the attempt is rolled back on
//!   *every* node (compare-and-delete), behind the attempt's own requests on each connection
//!   (`src/ordering.rs`, invariant 5). The holder value is unique per attempt. (The library
//!   skips the nodes that answered that they refused: a refusing node never took this
//!   attempt's holder value, so its compare-and-delete would find nothing; the model sends it
//!   anyway, which reaches the same node states.)
//! - **The ordered approach** (`src/arbiter.rs`, `approach`; in configurations with
//!   `ordered`): a mutex waiter that lost an earlier attempt (or owes the courtesy after its
//!   own release) sends its acquire first only to the key's arbiter, node `n0` here (`t0`
//!   noted before). A yes: the acquire goes to the other nodes, and the attempt is tallied
//!   over all N with the arbiter's yes counted. A refusal: the attempt ends, nothing sent
//!   elsewhere, nothing to roll back. A failure, a timeout or a request the breaker skipped:
//!   the usual fan-out to every node, the arbiter included with the same holder value
//!   (`SET NX`, so its first request, if it ran first, has it refused by the attempt's own
//!   entry), tallied fresh. Either kind of attempt may start at any moment, so they mix. In
//!   these configurations the rollback goes where the library sends it (`acquire.rs`,
//!   `give_back_to`): to every node but those that refused and those never written to; and,
//!   after a fallback, also to the arbiter when its first request was written (the fix the
//!   model found: the library as first written left it out, the negative control
//!   [`Bug::FallbackRollbackSkipsArbiter`]).
//! - **Fencing** (`acquire.rs`, `fence_token`): once the acquire reached its quorum, a second
//!   fan-out increments the counters, and the token is the largest answer from a quorum (in
//!   the `Fencing::InAcquire` negative control, the largest counter among the confirming
//!   nodes); it is written back (`counter = max(counter, token)`) to a quorum before the guard
//!   exists.
//! - **Extend and renewal** (`src/lease.rs`, `renew` and `confirm`): compare-and-PEXPIRE on
//!   every node. If `start + ttl` is earlier than the current deadline, the deadline is cut to
//!   it *before* the request is sent; it becomes `start + ttl` when a quorum confirms before
//!   the current deadline; when so many nodes refused that no quorum can hold the entry, the
//!   lock is lost; a plain failure keeps the (possibly cut) deadline; the deadline passing
//!   first loses it.
//! - **Watchdog renewal with repair** (`src/watchdog.rs`; `lease.rs`, `repair`): after a
//!   confirmed renewal, the other nodes' answers are collected until the next renewal is due;
//!   then the nodes that answered "not held" get `SET NX PX remaining-validity`, and only
//!   while the validity lasts. Renewals happen at any moment (the lease/3 schedule is not
//!   modelled) and renew for the whole lease; the renewal that `max_hold` shortens is covered
//!   by the shorter extend (without its repair).
//! - **Release** (`lease.rs`, `release_on_nodes`): compare-and-delete on every node, after the
//!   lease's earlier requests on each connection; the client stops believing it holds when
//!   the release starts.
//! - **The read-write lock** (`src/family/rw.rs`, `Shape::Read` and `Shape::Write`; the
//!   scripts in `src/family/lua/`): the same client machinery, with each call replaced by the script the
//!   shape sends (see [`Role`]). On a node, a reader acquire (READ_ACQUIRE) is refused by a
//!   writer's entry or a pending-writer mark and adds the reader's member with its own expiry;
//!   a writer acquire (WRITE_ACQUIRE) is refused by a writer's entry or a live reader, and a
//!   waiting writer refused by readers marks the key (unless another request's mark is live);
//!   a reader's extend (PERMIT_EXTEND) moves only a live member's expiry (`ZADD XX`), the
//!   writer's is EXTEND; a reader's repair (READ_REPAIR) adds the member back only where no
//!   writer's entry is, a writer's (WRITE_REPAIR) only where no reader is live and no entry
//!   exists; a reader's release and rollback (READ_RELEASE) remove its member, a writer's
//!   (WRITE_RELEASE) its entry, and a waiting writer's release also its own mark; a waiting
//!   writer whose last attempt failed withdraws its mark (WRITE_WITHDRAW) behind the rollback.
//!   Readers and writers share the key's fencing counter.
//!
//! The environment: `N` nodes, each with the key's entry (holder value and expiry on the
//! node's clock), the readers' set (each reader's expiry), the pending-writer mark (waiting
//! request and expiry) and a fencing counter; global time in ticks (node clocks run at the true rate: the
//! drift allowance covers rate differences, and the model uses drift 0, which is then exact;
//! an entry has expired when `now >= expiry`); one FIFO request queue per (client, node)
//! connection, whose head a node may run at any moment (requests are delayed arbitrarily, and
//! reordered across nodes, never within one connection); requests that may be lost
//! (unavailability); in configurations with `skips`, a client's circuit breaker for a node
//! (`src/node/backlog.rs`), which takes the fan-out's request to it back before it is written
//! and counts it as failed at once; a client's node timeout at any moment, which fails every node of the
//! current fan-out that has not answered (they all started together, with the same timeout);
//! replies that arrive as the node answers, or (one configuration) travel separately and late;
//! and forgetful faults, bounded per run: a restart empty (everything lost; requests still
//! queued run on the restarted node, as if re-sent) and a clock jump past a time (everything
//! that would expire by then expires early).
//!
//! Properties: (a) `exclusion`: a writer (or mutex client) inside its validity is the only
//! client inside its validity (readers may overlap each other); (a') `support`: while a client
//! is inside its validity, at least `q - f` nodes hold its entry or member (`f` = forgetful
//! faults so far), which implies (a) by quorum counting whenever `f <= 2q - N - 1`, and needs
//! no second client, so single-client configurations can go deeper; (a'') `node exclusion`:
//! no node has a writer's entry and a live reader at once, the per-node fact (a) rests on;
//! (b) `tokens increase`: a writer's token exceeds every earlier holder's, a reader's every
//! earlier writer's; (c) liveness sanity; (d) `full rollback`: once an attempt's rollback (or
//! release) ran on every node it was sent to, no node keeps the attempt's entry or member; (e)
//! `repair within validity`; (f) in the election configurations, `a leader read names a
//! holder that held`: a read of each node in turn (`lua/holder_read.lua`, at any moment, each
//! node once) that finds a quorum showing one holder's entry with its holder record names a
//! holder that held a guard at some point.
//!
//! - **Leader election** (`src/client/election.rs`; in configurations with `elections`):
//!   leading is holding the key as above (the term is the fencing token, whose scheme the
//!   fencing configurations check). Once it holds, a leader publishes its holder record on
//!   every node (PUBLISH, `lua/publish.lua`: written only where the entry is its own), behind
//!   its earlier requests on each connection; a record that no longer names its node's entry
//!   is never shown, and the model drops it. The negative control [`Bug::RecordInAcquire`]
//!   writes the record with the acquire instead: a timed-out attempt then shows as the leader.
//! - **Breaking a lock** (`QuorumLock::break_lock`, `lua/break.lua`; in configurations with
//!   `breaks`): an operator's break reaches each node at any moment (each once), replacing the
//!   entry by a tombstone with its expiry (lock delay 0) that no holder's call recognises as
//!   its own: the holder's next renewal is refused, and the tombstone keeps the key until the
//!   entry would have expired. Property (a') counts a holder's tombstones as its entries. The
//!   negative control [`Bug::BreakDeletes`] deletes the entries instead: (a) fails.
//!
//! - **Durable votes** (`src/rules/durable.rs`; in configurations with `durable`): each node
//!   also has its disk, what its last fsync wrote. A yes to an acquire, an extend, a fencing
//!   increment or write-back counts only once the node fsynced (the node fsyncs as it
//!   answers, taking every write so far to its disk: `WAITAOF` on the writing connection);
//!   repairs, releases and rollbacks reach the disk at the node's own fsyncs, at any moment.
//!   A machine crash, on any node and not counted as forgetful, brings the node back with its
//!   disk. Property (a') then holds with `f` = 0 however many nodes crash. The negative
//!   controls [`Bug::VoteBeforeFsync`] (a vote counted as written: plain votes, or a
//!   `WAITAOF` that does not wait for the fsync) and [`Bug::FenceNotDurable`] (the fencing
//!   calls counted without their fsync) break (a) and (b).
//!
//! Property (b) failed for the library's first fencing scheme (increments with the acquire):
//! `negative_fencing_incremented_during_the_acquire_can_repeat_tokens` keeps the
//! counterexample; the library now increments after the quorum (`Fencing::AfterQuorum`), which
//! passes.
//!
//! Not modelled (docs/SAFETY.md, "Model check", lists every simplification): clock rates that
//! differ, the wait loop's timing and wake-ups (a client may start its next attempt at any
//! moment), connecting, NOSCRIPT fallbacks and re-sends after a reset (every request is on its
//! connection from the moment the fan-out starts; a lost one is gone), reentrant owners, the
//! answers of releases, rollbacks and repairs (nothing depends on them), the release notices,
//! a waiting writer that gives up before its last attempt (its mark then stays until it
//! expires), the readers' set's own expiry (every script that changes the set keeps it at the
//! latest member's, so it removes nothing a member's expiry does not), a mutex and a
//! read-write lock on one key, and anything beyond the bounds of each configuration (nodes,
//! clients, attempts, extends, renewals, ticks, losses, faults).
//!
//! Run: `cargo test --all-features --test model -- --nocapture` prints the state counts and
//! the counterexample traces of the negative controls; the larger configurations are
//! `#[ignore]`d: `cargo test --release --all-features --test model -- --ignored --nocapture`.
//!
//! # Layout
//!
//! - `config`: who does what (roles, plans), the faults, and the bugs put back for the
//!   negative controls.
//! - `state`: the nodes' entries, the clients and their requests, and the state's encoding.
//! - `actions`: the actions, their effects and their narration.
//! - `protocol`: the model itself, the protocol's steps as the library takes them, and the
//!   properties.
//! - `checks`: running the checker on a configuration, and narrating a counterexample.
//! - here: the configurations, each a test.

use stateright::{Model, Path, Property};

/// Fixed capacities, so that a state is a plain `Copy` value.
const MAX_N: usize = 5;
const MAX_C: usize = 3;
const MAX_ATTEMPTS: usize = 2;
/// Requests one connection can hold at once (every request a client makes in a run fits).
const QUEUE: usize = 8;

fn bit(n: usize) -> u8 {
    1 << n
}

mod actions;
mod checks;
mod config;
#[path = "../common/model_check.rs"]
mod model_check;
mod protocol;
mod state;

use actions::*;
use checks::*;
use config::*;
use protocol::*;
use state::*;

// ---------------------------------------------------------------------------------------------
// Positive configurations: no counterexample
// ---------------------------------------------------------------------------------------------

/// A holder that extends twice, to a shorter or a longer TTL than its acquire's.
const EXTENDER: Plan = Plan {
    role: Role::Writer,
    attempts: 1,
    ttl: 3,
    extend_to: &[1, 4],
    extends: 2,
    renewals: 0,
    release: true,
};

/// A holder kept by the watchdog: renewals with repair.
const WATCHED: Plan = Plan {
    role: Role::Writer,
    attempts: 1,
    ttl: 3,
    extend_to: &[],
    extends: 0,
    renewals: 2,
    release: true,
};

/// One of everything: an extend (shorter or longer), a renewal with repair, the release.
const EVERYTHING: Plan = Plan {
    role: Role::Writer,
    attempts: 1,
    ttl: 3,
    extend_to: &[1, 4],
    extends: 1,
    renewals: 1,
    release: true,
};

/// Two clients, one attempt each, with a tick of time: expiry at the deadline.
#[test]
fn two_clients_majority_of_3() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1).cover(SEEN_ROLLBACK);
    assert_safe("two clients, Majority of 3", cfg);
}

/// Circuit breakers: either client may skip any node in any fan-out (its request not written,
/// counted as failed at once), beside losses and timeouts; the quorum is counted over all N.
#[test]
fn two_clients_majority_of_3_breakers() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1).cover(SEEN_ROLLBACK);
    cfg.skips = true;
    assert_safe("two clients, Majority of 3, circuit breakers", cfg);
}

/// Any number of lost requests.
#[test]
fn two_clients_majority_of_3_lossy() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .losses(None)
        .cover(SEEN_ROLLBACK);
    assert_safe("two clients, Majority of 3, any losses", cfg);
}

/// A second attempt queued behind the first one's rollback.
#[test]
fn two_clients_majority_of_3_retry() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(2, 2)], 0).cover(SEEN_ROLLBACK);
    assert_safe("two clients, Majority of 3, a retry", cfg);
}

/// MultiLock tolerates N - 1 forgetful nodes: here 2 of 3.
#[test]
fn two_clients_all_of_3_two_forgetful() {
    let cfg = Config::new(3, 3, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .forgetful(2)
        .cover(SEEN_FORGOTTEN);
    assert_safe("two clients, All of 3, 2 forgetful", cfg);
}

/// The holder shortens its lock while the other client tries to take it.
#[test]
fn two_clients_shorter_extend() {
    let extender = Plan {
        extend_to: &[1],
        extends: 1,
        release: false,
        ..EXTENDER
    };
    let contender = Plan {
        release: false,
        ..acquirer(1, 2)
    };
    let cfg = Config::new(3, 2, &[extender, contender], 1).cover(SEEN_SHORTENED);
    assert_safe("two clients, Majority of 3, shorter extend", cfg);
}

#[test]
fn one_client_extend() {
    let cfg = Config::new(3, 2, &[EXTENDER], 3).cover(SEEN_SHORTENED | SEEN_RENEWED | SEEN_LOST);
    assert_safe("one client, Majority of 3, extends", cfg);
}

#[test]
fn one_client_watchdog() {
    let cfg = Config::new(3, 2, &[WATCHED], 3)
        .losses(Some(1))
        .cover(SEEN_REPAIRED | SEEN_RENEWED | SEEN_LOST);
    assert_safe("one client, Majority of 3, watchdog", cfg);
}

#[test]
fn one_client_retry() {
    let cfg = Config::new(3, 2, &[acquirer(2, 2)], 2)
        .losses(None)
        .cover(SEEN_ROLLBACK);
    assert_safe("one client, Majority of 3, retries", cfg);
}

#[test]
fn one_client_all_of_3_two_forgetful() {
    let cfg = Config::new(3, 3, &[EVERYTHING], 2)
        .forgetful(2)
        .losses(Some(1))
        // No repair under `All`: a renewal is confirmed only where every node has the entry.
        .cover(SEEN_FORGOTTEN | SEEN_SHORTENED | SEEN_LOST);
    assert_safe("one client, All of 3, 2 forgetful", cfg);
}

#[test]
fn one_client_at_least_4_of_5_two_forgetful() {
    let watched = Plan {
        renewals: 1,
        ..WATCHED
    };
    let cfg = Config::new(5, 4, &[watched], 2)
        .forgetful(2)
        .cover(SEEN_FORGOTTEN | SEEN_REPAIRED);
    assert_safe("one client, AtLeast(4) of 5, 2 forgetful", cfg);
}

#[test]
fn one_client_majority_of_5() {
    let watched = Plan {
        renewals: 1,
        ..WATCHED
    };
    let cfg = Config::new(5, 3, &[watched], 2)
        .losses(Some(1))
        .cover(SEEN_REPAIRED);
    assert_safe("one client, Majority of 5", cfg);
}

/// Replies travel on their own and may come late or not at all.
#[test]
fn one_client_replies_delayed() {
    let mut cfg = Config::new(3, 2, &[EVERYTHING], 2).cover(SEEN_REPAIRED | SEEN_SHORTENED);
    cfg.reply_delay = true;
    assert_safe("one client, Majority of 3, replies delayed", cfg);
}

#[test]
fn liveness_one_client() {
    let mut cfg = Config::new(3, 2, &[acquirer(2, 2)], 2);
    cfg.timely = true;
    cfg.timeouts = 0;
    cfg.liveness = true;
    assert_safe("liveness: one client, no faults, timely network", cfg);
}

/// Two clients, fencing: the counters an earlier history left (n0=0, n1=1, n2=1), one lost
/// request, no timeouts (see `negative_fencing_incremented_during_the_acquire_can_repeat_tokens`).
fn fencing_config(fencing: Fencing) -> Config {
    let second = Plan {
        release: false,
        ..acquirer(1, 2)
    };
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), second], 0)
        .fencing(fencing, 0)
        .losses(Some(1));
    cfg.start_counters = Some([0, 1, 1, 0, 0]);
    cfg.timeouts = 0;
    cfg
}

/// The library's fencing scheme (incremented after the quorum): no counterexample.
#[test]
fn fencing_incremented_after_quorum() {
    let cfg = fencing_config(Fencing::AfterQuorum);
    assert_safe("fencing incremented after the quorum (the library's)", cfg);
}

// ---------------------------------------------------------------------------------------------
// Durable votes (`Builder::durable_votes`): a vote counts once the node fsynced it, and a
// machine crash on any node loses only what was not fsynced: not a forgetting fault.
// ---------------------------------------------------------------------------------------------

/// Two clients, machine crashes on two nodes (beyond any forgetful fault a majority of three
/// tolerates).
#[test]
fn durable_two_clients_majority_of_3_two_crashes() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .durable(2)
        .cover(SEEN_CRASH_LOST | SEEN_ROLLBACK);
    assert_safe("durable votes, two clients, two crashes", cfg);
}

/// The same with a tick (expiry at the deadline): 1.2 M states, 31 s in a debug build.
#[test]
#[ignore]
fn large_durable_two_clients_majority_of_3_two_crashes_with_a_tick() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1)
        .durable(2)
        .cover(SEEN_CRASH_LOST | SEEN_ROLLBACK);
    assert_safe("durable votes, two clients, two crashes, a tick", cfg);
}

/// One holder that extends and renews with repair, machine crashes on two nodes: it stays
/// supported by a quorum of entries while inside its validity (repairs are not durable, and
/// are never counted).
#[test]
fn durable_one_client_everything_two_crashes() {
    let cfg = Config::new(3, 2, &[EVERYTHING], 2)
        .durable(2)
        .cover(SEEN_CRASH_LOST | SEEN_REPAIRED | SEEN_RENEWED);
    assert_safe(
        "durable votes, one client, extend and renewal, two crashes",
        cfg,
    );
}

/// Fencing under durable votes, a crash on any node: tokens still increase.
#[test]
fn durable_fencing_with_a_crash() {
    let cfg = fencing_config(Fencing::AfterQuorum)
        .durable(1)
        .cover(SEEN_CRASH_LOST);
    assert_safe("durable votes, fencing, a crash", cfg);
}

/// Negative control: votes counted as written (before the fsync): one crash is enough for two
/// holders.
#[test]
fn negative_durable_votes_counted_before_the_fsync() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1)
        .durable(2)
        .bug(Bug::VoteBeforeFsync);
    assert_finds("votes counted before the fsync", cfg, "exclusion");
}

/// Negative control: durable votes, but the fencing increments and write-back counted without
/// their fsync: a crash takes a counter back, and a token repeats.
#[test]
fn negative_durable_fencing_counted_before_the_fsync() {
    let cfg = fencing_config(Fencing::AfterQuorum)
        .durable(1)
        .bug(Bug::FenceNotDurable);
    assert_finds("fencing counted before the fsync", cfg, "tokens increase");
}

// ---------------------------------------------------------------------------------------------
// Cancelled acquires (`src/take/attempt.rs`, `Undo`): a caller drops an acquire at any point
// before it holds (a timeout around it); its rollback goes to every node, behind what the
// attempt wrote. Without it, see `negative_a_cancelled_acquire_that_leaves_its_entries`.
// ---------------------------------------------------------------------------------------------

/// Two clients, either one's attempt cancelled at any point, timeouts.
#[test]
fn two_clients_majority_of_3_cancelled() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0).cover(SEEN_ROLLBACK);
    cfg.cancels = true;
    assert_safe("two clients, Majority of 3, acquires cancelled", cfg);
}

/// The ordered approach's attempts cancelled: while the arbiter alone was asked, and after.
#[test]
fn two_clients_majority_of_3_ordered_cancelled() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .ordered()
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_QUORUM);
    cfg.cancels = true;
    assert_safe(
        "two clients, Majority of 3, ordered, acquires cancelled",
        cfg,
    );
}

// ---------------------------------------------------------------------------------------------
// Leader election (`src/client/election.rs`): leading is holding the key (the mutex, its
// fencing token the term); the leader publishes its holder record once it holds, and a leader
// read names the holder a quorum of nodes shows with its record. The mutex's properties hold
// as for any holder; the read's own: a leader read never names a holder that did not hold.
// ---------------------------------------------------------------------------------------------

/// Two candidates, timeouts, a leader read of each node at any moment.
#[test]
fn election_two_candidates_majority_of_3() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .cover(SEEN_ROLLBACK | SEEN_LEADER_READ);
    cfg.elections = true;
    assert_safe("election: two candidates, Majority of 3", cfg);
}

/// With cancelled campaigns and a tick, so that leaders lapse while read (about 9.6 million
/// states): `--ignored`.
#[test]
#[ignore]
fn large_election_two_candidates_cancelled_with_a_tick() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1)
        .cover(SEEN_ROLLBACK | SEEN_LEADER_READ);
    cfg.elections = true;
    cfg.cancels = true;
    assert_safe(
        "election: two candidates, Majority of 3, cancelled campaigns, a tick",
        cfg,
    );
}

/// The record written by the acquire where it takes the key: an attempt that times out (or
/// comes too late) and is rolled back shows as the leader on a quorum meanwhile.
#[test]
fn negative_an_election_record_written_by_the_acquire() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1).bug(Bug::RecordInAcquire);
    cfg.elections = true;
    assert_finds(
        "the record written by the acquire",
        cfg,
        "a leader read names a holder that held",
    );
}

// ---------------------------------------------------------------------------------------------
// Breaking a lock (`QuorumLock::break_lock`): an operator's break reaches each node at any
// moment; the holder learns of it at its next renewal (refused), and nobody else may hold
// before the broken entries would have expired.
// ---------------------------------------------------------------------------------------------

/// Two clients, timeouts, a break at any moment.
#[test]
fn breaks_two_clients_majority_of_3() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0).cover(SEEN_BROKEN_HOLDER);
    cfg.breaks = true;
    assert_safe("breaks: two clients, Majority of 3", cfg);
}

/// A broken holder's watchdog renewal finds its lock lost; its entries' tombstones keep the
/// key (property (a'), support) until they expire.
#[test]
fn breaks_one_client_renewal() {
    let watchdog = Plan {
        renewals: 2,
        ..acquirer(1, 2)
    };
    let mut cfg = Config::new(3, 2, &[watchdog], 2).cover(SEEN_BROKEN_HOLDER | SEEN_LOST);
    cfg.breaks = true;
    assert_safe("breaks: one client, Majority of 3, two renewals", cfg);
}

/// A holder with a watchdog renewal, a contender and a tick (about 11.7 million states):
/// `--ignored`.
#[test]
#[ignore]
fn large_breaks_two_clients_with_a_renewal() {
    let watchdog = Plan {
        renewals: 1,
        ..acquirer(1, 2)
    };
    let mut cfg =
        Config::new(3, 2, &[watchdog, acquirer(1, 2)], 1).cover(SEEN_BROKEN_HOLDER | SEEN_LOST);
    cfg.breaks = true;
    assert_safe("breaks: two clients, Majority of 3, a renewal, a tick", cfg);
}

/// A break that deletes the entries: the contender holds while the broken holder still
/// believes it holds.
#[test]
fn negative_a_break_that_deletes_the_entries() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0).bug(Bug::BreakDeletes);
    cfg.breaks = true;
    assert_finds("a break that deletes the entries", cfg, "exclusion");
}

/// With a second attempt for c0 and a tick (about 5.5 million states): `--ignored`.
#[test]
#[ignore]
fn large_two_clients_majority_of_3_cancelled_retry() {
    let mut cfg = Config::new(3, 2, &[acquirer(2, 2), acquirer(1, 2)], 1).cover(SEEN_ROLLBACK);
    cfg.cancels = true;
    assert_safe(
        "two clients, Majority of 3, acquires cancelled, a retry, a tick",
        cfg,
    );
}

/// Cancelled while the fencing token is drawn or written back, the acquire having had its
/// quorum (about 3 million states): `--ignored`.
#[test]
#[ignore]
fn large_fencing_with_cancelled_acquires() {
    let mut cfg = fencing_config(Fencing::AfterQuorum);
    cfg.cancels = true;
    assert_safe("fencing after the quorum, acquires cancelled", cfg);
}

/// An acquire dropped by its caller that rolls nothing back: its requests written before
/// the drop still take the key on the nodes, for the entry's TTL, with no guard anywhere.
#[test]
fn negative_a_cancelled_acquire_that_leaves_its_entries() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2)], 0).bug(Bug::CancelLeavesEntries);
    cfg.cancels = true;
    assert_finds(
        "a cancelled acquire that leaves its entries",
        cfg,
        "full rollback",
    );
}

// ---------------------------------------------------------------------------------------------
// The ordered approach (`src/arbiter.rs`): every attempt of every client may ask the arbiter n0
// first, or every node at once. The rollback goes where the library sends it, with the fix
// (after a fallback, the arbiter too when its first request was written); without the fix,
// see `negative_a_fallback_rollback_that_skips_the_arbiter`.
// ---------------------------------------------------------------------------------------------

/// Both kinds of attempt mixed, timeouts, a tick: reaches an arbiter's refusal and an
/// arbiter's yes completed to a quorum. (No forgetful fault: under Majority of 3 one breaks
/// exclusion whatever the approach, `negative_bare_majority_with_a_forgetful_node`.)
#[test]
fn two_clients_majority_of_3_ordered() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1)
        .ordered()
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    assert_safe("two clients, Majority of 3, ordered approach", cfg);
}

/// Circuit breakers beside the ordered approach: the arbiter's request skipped (a fallback),
/// the fallback's request to it skipped after the first was written, any node of the second
/// fan-out skipped.
#[test]
fn two_clients_majority_of_3_ordered_breakers() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .ordered()
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    cfg.skips = true;
    assert_safe(
        "two clients, Majority of 3, ordered approach, circuit breakers",
        cfg,
    );
}

/// The ordered approach under All of 3 with two forgetful faults (the arbiter's among them).
#[test]
fn two_clients_all_of_3_ordered_two_forgetful() {
    let cfg = Config::new(3, 3, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .ordered()
        .forgetful(2)
        .cover(SEEN_FORGOTTEN | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    assert_safe("two clients, All of 3, ordered approach, 2 forgetful", cfg);
}

/// One client, two attempts, replies that arrive late (or never), one lost request, the
/// breakers, two ticks: the validity runs from before the arbiter was asked. A `t0` taken when
/// the arbiter's yes arrives fails `support` here (tried while building the model).
#[test]
fn one_client_ordered_replies_delayed() {
    let mut cfg = Config::new(3, 2, &[acquirer(2, 2)], 2)
        .ordered()
        .losses(Some(1))
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    cfg.skips = true;
    cfg.reply_delay = true;
    assert_safe(
        "one client, Majority of 3, ordered approach, replies delayed",
        cfg,
    );
}

// ---------------------------------------------------------------------------------------------
// The read-write lock. One reader and one writer exclude each other as two mutex clients do,
// so the configurations that matter most have two readers; they do without timeouts (with
// three clients, timeouts multiply the states by thirty: the `#[ignore]`d set has them).
// ---------------------------------------------------------------------------------------------

/// A client that takes the lock once and keeps it until it expires.
const fn keeps(plan: Plan) -> Plan {
    Plan {
        release: false,
        ..plan
    }
}

/// No client times out: a fan-out is decided by the nodes' answers only.
fn without_timeouts(mut cfg: Config) -> Config {
    cfg.timeouts = 0;
    cfg
}

#[test]
fn two_readers_share_the_lock_and_a_writer_excludes_them() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).cover(SEEN_SHARED | SEEN_ROLLBACK);
    assert_safe("two readers and a writer, Majority of 3", cfg);
}

#[test]
fn a_waiting_writers_mark_keeps_new_readers_out_until_taken_back() {
    let plans = [
        keeps(reader(1, 2)),
        keeps(reader(1, 2)),
        waiting_writer(1, 2),
    ];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0))
        .cover(SEEN_SHARED | SEEN_MARK_REFUSED | SEEN_UNMARKED);
    assert_safe("two readers and a waiting writer, Majority of 3", cfg);
}

/// Another writer's mark does not stop a writer.
#[test]
fn two_writers_exclude_each_other_and_a_reader_under_a_mark() {
    let plans = [
        keeps(reader(1, 2)),
        keeps(waiting_writer(1, 2)),
        keeps(acquirer(1, 2)),
    ];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).cover(SEEN_UNDER_MARK);
    assert_safe("a reader and two writers, Majority of 3", cfg);
}

/// The reader extends (shorter or longer) while a writer tries to take the key.
#[test]
fn a_reader_extend_never_brings_its_member_back() {
    let extender = Plan {
        role: Role::Reader,
        ttl: 2,
        extend_to: &[1, 3],
        extends: 1,
        release: false,
        ..EXTENDER
    };
    let cfg = without_timeouts(Config::new(3, 2, &[extender, keeps(acquirer(1, 3))], 2))
        .cover(SEEN_RENEWED | SEEN_SHORTENED);
    assert_safe("a reader that extends and a writer, Majority of 3", cfg);
}

/// The reader's watchdog renews twice and repairs, while a writer tries to take the key.
#[test]
fn a_renewed_reader_is_repaired_only_where_no_writer_holds() {
    let watched = Plan {
        role: Role::Reader,
        ttl: 2,
        release: false,
        ..WATCHED
    };
    let cfg = without_timeouts(Config::new(3, 2, &[watched, keeps(acquirer(1, 3))], 2))
        .cover(SEEN_REPAIRED | SEEN_RENEWED);
    assert_safe("a watched reader and a writer, Majority of 3", cfg);
}

/// The writer's watchdog renews twice and repairs, while a reader tries to take the key.
#[test]
fn a_renewed_writer_is_repaired_only_where_no_reader_is_live() {
    let watched = Plan {
        ttl: 2,
        release: false,
        ..WATCHED
    };
    let cfg = without_timeouts(Config::new(3, 2, &[watched, keeps(reader(1, 3))], 2))
        .cover(SEEN_REPAIRED | SEEN_RENEWED);
    assert_safe("a watched writer and a reader, Majority of 3", cfg);
}

/// Readers and writers share the key's counter.
#[test]
fn fencing_orders_a_reader_and_a_writer() {
    let cfg = without_timeouts(Config::new(3, 2, &[reader(1, 2), acquirer(1, 2)], 0))
        .fencing(Fencing::AfterQuorum, 0)
        .losses(Some(1));
    assert_safe("fencing, a reader and a writer, 1 lost request", cfg);
}

/// Clock jumps that expire some of a node's leases and not others.
#[test]
fn a_reader_and_a_writer_under_all_of_3_survive_two_forgetful_nodes() {
    let plans = [keeps(reader(1, 2)), keeps(acquirer(1, 2))];
    let cfg = without_timeouts(Config::new(3, 3, &plans, 1))
        .forgetful(2)
        .cover(SEEN_FORGOTTEN);
    assert_safe("a reader and a writer, All of 3, 2 forgetful", cfg);
}

// ---------------------------------------------------------------------------------------------
// Negative controls: the checker must find the counterexample
// ---------------------------------------------------------------------------------------------

/// The liveness property is not vacuous: with nodes that lose requests, a client may never
/// hold.
#[test]
fn negative_liveness_with_unavailable_nodes() {
    let mut cfg = Config::new(3, 2, &[acquirer(2, 2)], 2).losses(None);
    cfg.timely = true;
    cfg.liveness = true;
    assert_finds("liveness, nodes unavailable", cfg, "c0 eventually holds");
}

/// A lock on a bare majority does not survive one forgetful node.
#[test]
fn negative_bare_majority_with_a_forgetful_node() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0).forgetful(1);
    assert_finds("bare majority, one forgetful node", cfg, "exclusion");
}

/// The shorter-extend bug of an earlier version.
#[test]
fn negative_shorter_extend_without_cut() {
    let extender = Plan {
        extend_to: &[1],
        extends: 1,
        ..EXTENDER
    };
    let cfg = Config::new(3, 2, &[extender, acquirer(1, 2)], 1).bug(Bug::NoCutBeforeShorterExtend);
    assert_finds("shorter extend without the cut", cfg, "exclusion");
}

/// A repair for the whole lease, or after the validity.
#[test]
fn negative_repair_beyond_validity() {
    let watched = Plan {
        renewals: 1,
        ..WATCHED
    };
    let cfg = Config::new(3, 2, &[watched], 2)
        .losses(Some(1))
        .bug(Bug::RepairBeyondValidity);
    assert_finds("repair beyond the validity", cfg, "repair within validity");
}

/// A fan-out that counts its quorum over the nodes it asked, leaving out those its circuit
/// breaker skipped, lets two clients hold at once: one skips two nodes of three and holds with
/// the third, the other holds the two.
#[test]
fn negative_quorum_over_the_nodes_asked() {
    let mut cfg =
        Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0).bug(Bug::QuorumOverNodesAsked);
    cfg.skips = true;
    assert_finds("quorum over the nodes asked", cfg, "exclusion");
}

/// The arbiter's yes is one vote: a client that takes it for the lock holds while another
/// client holds the two other nodes.
#[test]
fn negative_the_arbiters_yes_alone_is_not_a_lock() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .ordered()
        .bug(Bug::ArbiterYesHolds);
    assert_finds("the arbiter's yes taken for the lock", cfg, "exclusion");
}

/// A fallback that leaves the arbiter out of its fan-out and its rollback: the arbiter's first
/// request, timed out but written, takes the key after the rollback was sent elsewhere.
#[test]
fn negative_a_fallback_that_forgets_the_arbiter() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2)], 0)
        .ordered()
        .bug(Bug::FallbackForgetsArbiter);
    assert_finds("a fallback that forgets the arbiter", cfg, "full rollback");
}

/// The library as written: the fallback's `SET NX` to the arbiter is refused by the entry its
/// own first request took, and the rollback, which skips the nodes that refused, leaves that
/// entry in place (until it expires, every ordered waiter is refused by the arbiter).
#[test]
fn negative_a_fallback_rollback_that_skips_the_arbiter() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2)], 0)
        .ordered()
        .bug(Bug::FallbackRollbackSkipsArbiter);
    assert_finds(
        "a fallback rollback that skips the arbiter (the library as written)",
        cfg,
        "full rollback",
    );
}

/// Cluster nodes (`src/node/cluster.rs`): any request may be answered `MOVED` (one per run),
/// which the library counts as the node's failure for the call and never re-sends.
#[test]
fn two_clients_majority_of_3_cluster_redirects() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .losses(Some(1))
        .cover(SEEN_REDIRECTED | SEEN_ROLLBACK);
    cfg.redirects = true;
    assert_safe("two clients, Majority of 3, cluster redirects", cfg);
}

/// The same with a second attempt queued behind the first one's rollback (`--ignored`).
#[test]
#[ignore = "large: run with --release --ignored"]
fn large_two_clients_majority_of_3_cluster_redirects_retry() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(2, 2)], 0)
        .losses(Some(1))
        .cover(SEEN_REDIRECTED | SEEN_ROLLBACK);
    cfg.redirects = true;
    assert_safe(
        "two clients, Majority of 3, cluster redirects, a retry",
        cfg,
    );
}

/// Following a `MOVED` as a cluster client does: the acquire, sent again to the new primary,
/// runs there after the rollback the client sent meanwhile, and its entry stays.
#[test]
fn negative_following_a_redirect_lets_an_acquire_overtake_its_rollback() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2)], 0)
        .losses(Some(1))
        .bug(Bug::FollowRedirect);
    cfg.redirects = true;
    assert_finds("following a MOVED", cfg, "full rollback");
}

/// A rollback sent only to the nodes that said yes misses the late ones.
#[test]
fn negative_rollback_only_where_yes() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2)], 0).bug(Bug::RollbackOnlyWhereYes);
    assert_finds("rollback only where yes", cfg, "full rollback");
}

/// The defect of the library's first fencing scheme that the model found (docs/SAFETY.md,
/// "Model check"): a successor's acquire may read a node's counter before its predecessor's
/// write-back reached that node, and read another node whose write-back was lost; its token
/// then does not exceed the predecessor's. The library now increments after the quorum
/// (`fencing_incremented_after_quorum`).
#[test]
fn negative_fencing_incremented_during_the_acquire_can_repeat_tokens() {
    let cfg = fencing_config(Fencing::InAcquire);
    assert_finds(
        "fencing incremented during the acquire",
        cfg,
        "tokens increase",
    );
}

/// A reader's extend that is a plain `ZADD` puts its member back beside a writer's entry; the
/// renewal that node confirms keeps the reader inside its validity after a quorum of its
/// members is gone.
#[test]
fn negative_a_reader_extend_that_re_adds_its_member_lets_a_writer_in() {
    let extender = Plan {
        role: Role::Reader,
        ttl: 2,
        extend_to: &[2],
        extends: 1,
        release: false,
        ..EXTENDER
    };
    let cfg = without_timeouts(Config::new(3, 2, &[extender, keeps(acquirer(1, 3))], 2))
        .bug(Bug::ReaderExtendReAdds);
    assert_finds(
        "a reader's extend that re-adds its member",
        cfg,
        "exclusion",
    );
}

/// A reader's release that deletes the readers' set takes the other readers' members with it.
#[test]
fn negative_a_reader_release_that_deletes_the_set_lets_a_writer_in() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).bug(Bug::ReadReleaseDeletesTheSet);
    assert_finds("a reader's release that deletes the set", cfg, "exclusion");
}

/// A reader's repair beside a writer's entry: the next renewal, confirmed there, outlives the
/// reader's members on a quorum.
#[test]
fn negative_a_read_repair_that_ignores_the_writer_lets_a_writer_in() {
    let watched = Plan {
        role: Role::Reader,
        ttl: 2,
        release: false,
        ..WATCHED
    };
    let cfg = without_timeouts(Config::new(3, 2, &[watched, keeps(acquirer(1, 3))], 2))
        .bug(Bug::ReadRepairIgnoresWriter);
    assert_finds("a read repair that ignores the writer", cfg, "exclusion");
}

// ---------------------------------------------------------------------------------------------
// Larger configurations, too slow for CI in the debug profile. Run them with:
// cargo test --release --all-features --test model -- --ignored --nocapture
// ---------------------------------------------------------------------------------------------

/// Two clients on five nodes.
#[test]
#[ignore]
fn large_two_clients_majority_of_5() {
    let cfg = Config::new(5, 3, &[acquirer(1, 2), acquirer(1, 2)], 0);
    assert_safe("two clients, Majority of 5", cfg);
}

/// Two clients on five nodes, one forgetful node.
#[test]
#[ignore]
fn large_two_clients_at_least_4_of_5_one_forgetful() {
    let once = Plan {
        release: false,
        ..acquirer(1, 2)
    };
    let cfg = Config::new(5, 4, &[once, once], 0).forgetful(1);
    assert_safe("two clients, AtLeast(4) of 5, 1 forgetful", cfg);
}

/// The library's fencing scheme with timeouts and every initial counter vector up to 1.
#[test]
#[ignore]
fn large_fencing_incremented_after_quorum() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 0)
        .fencing(Fencing::AfterQuorum, 1)
        .losses(Some(1));
    assert_safe("fencing incremented after the quorum, with timeouts", cfg);
}

/// Two readers and a writer with timeouts.
#[test]
#[ignore]
fn large_two_readers_and_a_writer_with_timeouts() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = Config::new(3, 2, &plans, 0).cover(SEEN_SHARED | SEEN_ROLLBACK);
    assert_safe("two readers and a writer, with timeouts", cfg);
}

/// Two readers and a writer over a tick: readers expire and a writer comes in.
#[test]
#[ignore]
fn large_two_readers_and_a_writer_over_a_tick() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 1)).cover(SEEN_SHARED);
    assert_safe("two readers and a writer, 1 tick", cfg);
}

/// A waiting writer's two attempts: its mark outlives the first one's rollback.
#[test]
#[ignore]
fn large_two_readers_and_a_waiting_writer_that_retries() {
    let plans = [reader(1, 2), reader(1, 2), waiting_writer(2, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0))
        .cover(SEEN_SHARED | SEEN_MARK_REFUSED | SEEN_UNMARKED);
    assert_safe("two readers and a waiting writer with 2 attempts", cfg);
}

/// A reader and two writers, every one releasing.
#[test]
#[ignore]
fn large_a_reader_and_two_writers() {
    let plans = [reader(1, 2), waiting_writer(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).cover(SEEN_UNDER_MARK);
    assert_safe("a reader and two writers, releasing", cfg);
}

/// Two readers and a writer, one forgetful node under `All`.
#[test]
#[ignore]
fn large_two_readers_and_a_writer_all_of_3_one_forgetful() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 3, &plans, 0))
        .forgetful(1)
        .cover(SEEN_FORGOTTEN | SEEN_SHARED);
    assert_safe("two readers and a writer, All of 3, 1 forgetful", cfg);
}

/// Fencing with two readers and a writer: the writer's token exceeds both readers'.
#[test]
#[ignore]
fn large_fencing_two_readers_and_a_writer() {
    let plans = [reader(1, 2), reader(1, 2), acquirer(1, 2)];
    let cfg = without_timeouts(Config::new(3, 2, &plans, 0)).fencing(Fencing::AfterQuorum, 0);
    assert_safe("fencing, two readers and a writer", cfg);
}

/// The reader's extends against a writer, with timeouts.
#[test]
#[ignore]
fn large_a_reader_that_extends_and_a_writer_with_timeouts() {
    let extender = Plan {
        role: Role::Reader,
        ttl: 2,
        extend_to: &[1, 3],
        extends: 1,
        release: false,
        ..EXTENDER
    };
    let cfg = Config::new(3, 2, &[extender, keeps(acquirer(1, 3))], 2)
        .cover(SEEN_RENEWED | SEEN_SHORTENED);
    assert_safe("a reader that extends and a writer, with timeouts", cfg);
}

/// The ordered approach with a second attempt for c1 (behind its first one's rollback).
#[test]
#[ignore]
fn large_two_clients_majority_of_3_ordered_retry() {
    let cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(2, 2)], 0)
        .ordered()
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    assert_safe("two clients, Majority of 3, ordered approach, a retry", cfg);
}

/// The ordered approach with circuit breakers and a tick.
#[test]
#[ignore]
fn large_two_clients_majority_of_3_ordered_breakers_over_a_tick() {
    let mut cfg = Config::new(3, 2, &[acquirer(1, 2), acquirer(1, 2)], 1)
        .ordered()
        .cover(SEEN_ROLLBACK | SEEN_ARBITER_REFUSED | SEEN_ARBITER_QUORUM);
    cfg.skips = true;
    assert_safe(
        "two clients, Majority of 3, ordered approach, circuit breakers, 1 tick",
        cfg,
    );
}
