//! What the benchmarks share: the network floors that a lock client is measured against.
#![allow(dead_code)]

pub mod plot;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use quorum_lock::testkit::Fleet;
use redis::aio::MultiplexedConnection;
use tokio::sync::oneshot;

/// Counts heap allocations (and reallocations), to report allocations per operation: a
/// benchmark that reports them installs it with `#[global_allocator]` and reads
/// [`ALLOCATIONS`].
pub struct Counting;

/// Allocations so far, when [`Counting`] is the global allocator.
pub static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The lock TTL of every benchmark.
pub const TTL: Duration = Duration::from_secs(10);
const TTL_MS: u64 = 10_000;

/// The floor: plain commands on one multiplexed connection per node.
pub struct Floor {
    conns: Vec<MultiplexedConnection>,
    del: String,
}

const COMPARE_AND_DELETE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

/// A multiplexed connection to each node of `fleet`.
async fn connections(fleet: &Fleet) -> Vec<MultiplexedConnection> {
    let mut conns = Vec::new();
    for i in 0..fleet.len() {
        conns.push(
            fleet
                .client(i)
                .get_multiplexed_async_connection()
                .await
                .unwrap(),
        );
    }
    conns
}

/// Loads `script` on every node of `conns`; returns its hash, for EVALSHA.
async fn load(conns: &[MultiplexedConnection], script: &str) -> String {
    for c in conns {
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query_async(&mut c.clone())
            .await
            .unwrap();
    }
    redis::Script::new(script).get_hash().to_string()
}

impl Floor {
    pub async fn connect(fleet: &Fleet) -> Floor {
        let conns = connections(fleet).await;
        let del = load(&conns, COMPARE_AND_DELETE).await;
        Floor { conns, del }
    }

    /// Sends `cmd` to every node; returns after `needed` answers, each given to `answer`, the
    /// rest finishing in the background.
    async fn fan_out(&self, cmd: redis::Cmd, needed: usize, mut answer: impl FnMut(redis::Value)) {
        let cmd = Arc::new(cmd);
        let mut pending: FuturesUnordered<_> = self
            .conns
            .iter()
            .map(|c| {
                let (mut c, cmd) = (c.clone(), cmd.clone());
                async move { c.send_packed_command(&cmd).await }
            })
            .collect();
        for _ in 0..needed {
            answer(pending.next().await.unwrap().unwrap());
        }
        if !pending.is_empty() {
            tokio::spawn(async move { while pending.next().await.is_some() {} });
        }
    }

    pub async fn lock_unlock(&self, key: &str, needed: usize) {
        let value = uuid::Uuid::new_v4().simple().to_string();
        let mut set = redis::cmd("SET");
        set.arg(key).arg(&value).arg("NX").arg("PX").arg(TTL_MS);
        self.fan_out(set, needed, drop).await;
        let mut del = redis::cmd("EVALSHA");
        del.arg(&self.del).arg(1).arg(key).arg(&value);
        self.fan_out(del, needed, drop).await;
    }
}

// KEYS[1] the key; ARGV[1] the holder's value, ARGV[2] the next holder's value, ARGV[3] the
// TTL in milliseconds. 1 when the key was the holder's and is now the next holder's, else 0.
const PASS: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[3]) return 1 end return 0";

/// The hand-off floor: the least a hand-off can send with one client, that a lock's hand-off
/// is measured against. Tasks of one process take turns on one key in the order of a local
/// FIFO queue. The first acquisition sets the key on all nodes (`SET NX PX`), returning at a
/// majority; a release with a task waiting is one fan-out of a compare-and-set script that
/// hands the key to that task's value, returning at a majority (the rest finishing in the
/// background), after which that task holds; a release with no task waiting deletes the key
/// (compare-and-delete). So a hand-off costs one quorum round trip and nothing else.
///
/// What it leaves out, that a lock cannot: no fencing token; no validity or clock-drift
/// arithmetic; no detection that the key was lost (it expired, a node failed or restarted):
/// it only asserts that the majority it waited for answered yes; no fairness between clients,
/// since the queue lives in this process and orders its own tasks only (another client's
/// `SET NX` would just fail until the last release); no wait limit, retry or cancellation (a
/// task must not drop `acquire` while it is queued). The background rest of a fan-out is in
/// order before the next command to the same node, because each node has one connection.
pub struct HandOffFloor {
    floor: Floor,
    pass: String,
    key: String,
    needed: usize,
    turns: Mutex<Turns>,
}

/// Who may touch the key next. A std mutex: it is never held across an await.
#[derive(Default)]
struct Turns {
    /// A task holds the key, or is setting or deleting it: a task that asks now queues.
    busy: bool,
    /// The queued tasks, first come first served, each with the value it will hold the key
    /// under and where it is told that its turn came.
    queue: VecDeque<(String, oneshot::Sender<Turn>)>,
}

/// What a queued task is told when its turn comes.
#[derive(Debug)]
enum Turn {
    /// The key was handed to its value: it holds.
    Held,
    /// The key was deleted while it queued: it sets the key itself.
    Free,
}

impl HandOffFloor {
    /// The hand-off floor on `key`, with a majority of `fleet`'s nodes as quorum.
    pub async fn connect(fleet: &Fleet, key: &str) -> HandOffFloor {
        let floor = Floor::connect(fleet).await;
        let pass = load(&floor.conns, PASS).await;
        HandOffFloor {
            floor,
            pass,
            key: key.to_string(),
            needed: fleet.len() / 2 + 1,
            turns: Mutex::default(),
        }
    }

    /// Waits for this task's turn; returns the value the task holds the key under.
    pub async fn acquire(&self) -> String {
        let value = uuid::Uuid::new_v4().simple().to_string();
        let queued = {
            let mut turns = self.turns.lock().unwrap();
            if turns.busy {
                let (tx, rx) = oneshot::channel();
                turns.queue.push_back((value.clone(), tx));
                Some(rx)
            } else {
                turns.busy = true;
                None
            }
        };
        let turn = match queued {
            Some(rx) => rx.await.unwrap(),
            None => Turn::Free,
        };
        if let Turn::Free = turn {
            let mut set = redis::cmd("SET");
            set.arg(&self.key)
                .arg(&value)
                .arg("NX")
                .arg("PX")
                .arg(TTL_MS);
            self.on_quorum(set, "set").await;
        }
        value
    }

    /// Hands the key held under `value` to the first queued task, or deletes it when no task
    /// is queued.
    pub async fn release(&self, value: String) {
        let next = self.turns.lock().unwrap().queue.pop_front();
        if let Some((next, turn)) = next {
            let mut pass = redis::cmd("EVALSHA");
            pass.arg(&self.pass)
                .arg(1)
                .arg(&self.key)
                .arg(&value)
                .arg(&next)
                .arg(TTL_MS);
            self.on_quorum(pass, "hand-off").await;
            turn.send(Turn::Held).unwrap();
            return;
        }
        let mut del = redis::cmd("EVALSHA");
        del.arg(&self.floor.del).arg(1).arg(&self.key).arg(&value);
        self.on_quorum(del, "delete").await;
        let mut turns = self.turns.lock().unwrap();
        match turns.queue.pop_front() {
            Some((_, turn)) => turn.send(Turn::Free).unwrap(),
            None => turns.busy = false,
        }
    }

    /// Sends `cmd` to every node, returning at a majority; panics unless each answer of that
    /// majority is a yes (`OK` or 1), so that a broken floor cannot pass for a fast one.
    async fn on_quorum(&self, cmd: redis::Cmd, what: &str) {
        let mut granted = 0;
        self.floor
            .fan_out(cmd, self.needed, |answer| {
                granted += usize::from(matches!(answer, redis::Value::Okay | redis::Value::Int(1)));
            })
            .await;
        assert_eq!(
            granted, self.needed,
            "the hand-off floor's {what} was refused by a node of the majority"
        );
    }
}

// KEYS[1] the key, KEYS[2] the next holder's grant list; ARGV[1] the holder's value, ARGV[2]
// the next holder's value, ARGV[3] the TTL in milliseconds. Hands the key over on the node
// itself and pushes the grant to the next holder's parked read: 1, else 0.
const GRANT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[3]) \
     redis.call('rpush', KEYS[2], ARGV[2]) return 1 end return 0";

/// The grant floor across clients: the least a hand-off from one client to another can cost
/// on these nodes, that a cross-client hand-off is measured against. The waiting client has a
/// read parked on every node (`BLPOP` of its grant list, on a connection of its own per
/// node); the holder's release is one fan-out of a script that, where the holder still holds
/// the key, sets it to the waiter's value and pushes that value to the waiter's list; the
/// waiter holds once a majority of its parked reads answered. One round trip from the
/// release's send (release to node, grant to waiter), against a client-driven hand-off's
/// two or more (the release, a notice, the waiter's own attempt).
///
/// What it leaves out, that a lock cannot: the validity (a grant's deadline would run from
/// the send of the read that received it), re-arming the parked reads, fencing, a line of
/// more than one waiter, any failure.
pub struct GrantFloor {
    holder: Floor,
    /// The waiter's connections, one per node, each carrying only its parked read.
    waiter: Vec<MultiplexedConnection>,
    grant: String,
    needed: usize,
}

impl GrantFloor {
    /// The grant floor on `fleet`, with a majority of its nodes as quorum.
    pub async fn connect(fleet: &Fleet) -> GrantFloor {
        let holder = Floor::connect(fleet).await;
        let grant = load(&holder.conns, GRANT).await;
        let waiter = connections(fleet).await;
        GrantFloor {
            holder,
            waiter,
            grant,
            needed: fleet.len() / 2 + 1,
        }
    }

    /// One hand-off of `key` from the holder to the waiter: the time from the release's send
    /// to the waiter holding a majority of grants. Panics unless every node granted.
    pub async fn hand_off(&self, key: &str) -> Duration {
        let (held, next) = (
            uuid::Uuid::new_v4().simple().to_string(),
            uuid::Uuid::new_v4().simple().to_string(),
        );
        let grants = format!("{key}:grants");
        let mut set = redis::cmd("SET");
        set.arg(key).arg(&held).arg("NX").arg("PX").arg(TTL_MS);
        let mut taken = 0;
        self.holder
            .fan_out(set, self.holder.conns.len(), |v| {
                taken += usize::from(v == redis::Value::Okay);
            })
            .await;
        assert_eq!(taken, self.holder.conns.len(), "the key was not free");
        // The waiter parks a read on every node, and waits until each node has it blocked.
        let mut parked: FuturesUnordered<_> = self
            .waiter
            .iter()
            .map(|c| {
                let (mut c, grants) = (c.clone(), grants.clone());
                async move {
                    let got: (String, String) = redis::cmd("BLPOP")
                        .arg(&grants)
                        .arg(0)
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    got.1
                }
            })
            .collect();
        let blocked = async {
            for c in &self.holder.conns {
                loop {
                    let info: String = redis::cmd("INFO")
                        .arg("clients")
                        .query_async(&mut c.clone())
                        .await
                        .unwrap();
                    if info.contains("\nblocked_clients:1") {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
        };
        // The reads are sent by polling them alongside the check.
        let mut early = Vec::new();
        tokio::select! {
            biased;
            () = blocked => {}
            got = parked.next() => early.extend(got),
        }
        assert!(early.is_empty(), "a grant before the release");
        let mut pass = redis::cmd("EVALSHA");
        pass.arg(&self.grant)
            .arg(2)
            .arg(key)
            .arg(&grants)
            .arg(&held)
            .arg(&next)
            .arg(TTL_MS);
        let released = tokio::time::Instant::now();
        let all = self.holder.conns.len();
        let mut granted = 0;
        let held_at = {
            let sent = self.holder.fan_out(pass, all, |v| {
                granted += usize::from(v == redis::Value::Int(1));
            });
            tokio::pin!(sent);
            let mut received = 0;
            let mut held_at = None;
            let mut sent_done = false;
            while received < all || !sent_done {
                tokio::select! {
                    got = parked.next(), if received < all => {
                        assert_eq!(got.as_deref(), Some(next.as_str()));
                        received += 1;
                        if received == self.needed {
                            held_at = Some(released.elapsed());
                        }
                    }
                    () = &mut sent, if !sent_done => sent_done = true,
                }
            }
            held_at
        };
        assert_eq!(granted, all, "a node did not grant");
        let mut del = redis::cmd("EVALSHA");
        del.arg(&self.holder.del).arg(1).arg(key).arg(&next);
        self.holder.fan_out(del, all, drop).await;
        held_at.expect("a majority of grants")
    }
}
