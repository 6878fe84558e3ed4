//! What the benchmarks share: the network floor that a lock client is measured against.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use quorum_lock::testkit::Fleet;
use redis::aio::MultiplexedConnection;

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

impl Floor {
    pub async fn connect(fleet: &Fleet) -> Floor {
        let mut conns = Vec::new();
        for i in 0..fleet.len() {
            let mut c = fleet
                .client(i)
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(COMPARE_AND_DELETE)
                .query_async(&mut c)
                .await
                .unwrap();
            conns.push(c);
        }
        Floor {
            conns,
            del: redis::Script::new(COMPARE_AND_DELETE)
                .get_hash()
                .to_string(),
        }
    }

    /// Sends `cmd` to every node; returns after `needed` answers, the rest finishing in the
    /// background.
    async fn fan_out(&self, cmd: redis::Cmd, needed: usize) {
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
            pending.next().await.unwrap().unwrap();
        }
        if !pending.is_empty() {
            tokio::spawn(async move { while pending.next().await.is_some() {} });
        }
    }

    pub async fn lock_unlock(&self, key: &str, needed: usize) {
        let value = uuid::Uuid::new_v4().simple().to_string();
        let mut set = redis::cmd("SET");
        set.arg(key).arg(&value).arg("NX").arg("PX").arg(TTL_MS);
        self.fan_out(set, needed).await;
        let mut del = redis::cmd("EVALSHA");
        del.arg(&self.del).arg(1).arg(key).arg(&value);
        self.fan_out(del, needed).await;
    }
}
