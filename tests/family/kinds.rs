//! The scenarios every kind of lock must pass alike, run through one body over every kind
//! (the mutex, a multi-key lock, a semaphore permit, a reader, a writer, the fair lock): an
//! extend after expiry is a loss and re-creates nothing, a release wakes a waiter of another
//! client, and a crashed holder's entries free the key at their TTL and leave nothing behind.
//! What is particular to one kind stays in its own file.

use std::time::Duration;

use crate::common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Error, LockRequest, Quorum, QuorumLock};
use tokio::time::Instant;

/// Where a kind keeps a holder's entry on a node.
enum Entry {
    /// A string holding the holder value, at each of these keys.
    Strings(Vec<String>),
    /// A sorted-set member named by the holder value, at this key.
    Member(String),
}

/// A hold of one kind on `keys`: its request, the request that conflicts with it (a reader is
/// blocked by a writer, not by another reader), and where its entries are.
struct Case {
    name: &'static str,
    keys: Vec<String>,
    request: KindRequest,
    conflicting: KindRequest,
}

impl Case {
    fn all(tag: &str) -> Vec<Case> {
        let by_name = |wanted: &str| {
            kinds(2)
                .into_iter()
                .find(|(name, _, _)| *name == wanted)
                .map(|(_, _, request)| request)
                .expect(wanted)
        };
        kinds(2)
            .into_iter()
            .map(|(name, n, request)| Case {
                name,
                keys: (0..n)
                    .map(|_| unique_key(&format!("{tag}-{name}")))
                    .collect(),
                request,
                conflicting: match name {
                    "read" => by_name("write"),
                    "write" => by_name("read"),
                    _ => request,
                },
            })
            .collect()
    }

    fn request<'a>(&self, locks: &'a QuorumLock) -> LockRequest<'a> {
        (self.request)(locks, &self.keys)
    }

    fn conflicting<'a>(&self, locks: &'a QuorumLock) -> LockRequest<'a> {
        (self.conflicting)(locks, &self.keys)
    }

    fn entry(&self) -> Entry {
        match self.name {
            "semaphore" => Entry::Member(self.keys[0].clone()),
            "read" => Entry::Member(
                String::from_utf8_lossy(&quorum_lock::names::readers(self.keys[0].as_bytes()))
                    .into_owned(),
            ),
            _ => Entry::Strings(self.keys.clone()),
        }
    }

    /// Whether node `i` keeps any entry of `holder` (a sorted-set member even past its
    /// expiry: an extend must purge it, never re-add it).
    async fn kept_on(&self, fleet: &Fleet, i: usize, holder: &str) -> bool {
        let mut c = conn(fleet, i).await;
        match self.entry() {
            Entry::Strings(keys) => {
                for key in keys {
                    let value: Option<String> = redis::cmd("GET")
                        .arg(&key)
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    if value.as_deref() == Some(holder) {
                        return true;
                    }
                }
                false
            }
            Entry::Member(key) => {
                let score: Option<f64> = redis::cmd("ZSCORE")
                    .arg(&key)
                    .arg(holder)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                score.is_some()
            }
        }
    }

    /// Makes `holder`'s entries expire now on every node, as the node's clock would at their
    /// TTL: a string's expiry moved to 1 ms from now, a member's score into the past (kept,
    /// as a member that expired but was not purged yet).
    async fn expire_now(&self, fleet: &Fleet, holder: &str) {
        for i in 0..fleet.len() {
            let mut c = conn(fleet, i).await;
            match self.entry() {
                Entry::Strings(keys) => {
                    for key in keys {
                        let _: () = redis::cmd("PEXPIRE")
                            .arg(&key)
                            .arg(1)
                            .query_async(&mut c)
                            .await
                            .unwrap();
                    }
                }
                Entry::Member(key) => {
                    let _: () = redis::cmd("ZADD")
                        .arg(&key)
                        .arg("XX")
                        .arg(1)
                        .arg(holder)
                        .query_async(&mut c)
                        .await
                        .unwrap();
                }
            }
        }
        // A string's 1 ms runs out.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_after_expiry_is_a_loss_and_re_creates_nothing_for_every_kind() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    for case in Case::all("expired") {
        let guard = case
            .request(&locks)
            .ttl(Duration::from_secs(2))
            .try_acquire()
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{}: free", case.name));
        guard
            .extend(Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| panic!("{}: extend {e}", case.name));
        assert!(guard.validity() > Duration::from_secs(19), "{}", case.name);
        // The acquire's and the extend's requests to every node landed.
        locks.finish_background().await;
        let holder = guard.holder().to_string();
        for i in 0..fleet.len() {
            assert!(
                case.kept_on(fleet, i, &holder).await,
                "{}: node {i}",
                case.name
            );
        }

        case.expire_now(fleet, &holder).await;
        let extended = guard.extend(Duration::from_secs(20)).await;
        assert!(
            matches!(extended, Err(Error::LockLost { .. })),
            "{}: {extended:?}",
            case.name
        );
        assert!(!guard.is_held(), "{}", case.name);
        // The extend returned at a quorum of refusals; its requests to the others land.
        locks.finish_background().await;
        for i in 0..fleet.len() {
            assert!(
                !case.kept_on(fleet, i, &holder).await,
                "{}: node {i} re-created or kept the expired entry",
                case.name
            );
        }
        // Once lost, always lost.
        assert!(
            matches!(
                guard.extend(Duration::from_secs(20)).await,
                Err(Error::LockLost { .. })
            ),
            "{}",
            case.name
        );
        assert!(
            matches!(guard.release().await, Err(Error::NotHeld { .. })),
            "{}",
            case.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_of_another_client_for_every_kind() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    // Only a release notice can wake the waiter before its 20 s fallback.
    let waiter = builder(fleet, Quorum::Majority)
        .retry_delay(Duration::from_secs(20))
        .retry_jitter(Duration::ZERO)
        .build()
        .await
        .unwrap();
    for case in Case::all("wake") {
        let held = case
            .request(&locks)
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{}: free", case.name));
        let (contended, woken) = (waiter.stats().contended, waiter.stats().woken);
        let wait = {
            let (waiter, keys, conflicting) = (waiter.clone(), case.keys.clone(), case.conflicting);
            tokio::spawn(async move {
                conflicting(&waiter, &keys)
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
            })
        };
        eventually(
            fleet,
            Duration::from_secs(10),
            // Its first refused attempt subscribes; the attempt made at once after
            // subscribing is the second: once that one is refused too, only the notice can
            // end its wait early (a release between the two would let it in unwoken).
            "the waiter listens for the release",
            || async { waiter.stats().contended >= contended + 2 },
        )
        .await;
        let released_at = Instant::now();
        held.release().await.unwrap();
        let taken = tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .unwrap_or_else(|_| panic!("{}: not woken by the release notice", case.name))
            .unwrap()
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert!(
            released_at.elapsed() < Duration::from_secs(5),
            "{}",
            case.name
        );
        assert!(waiter.stats().woken > woken, "{}", case.name);
        taken.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holder_frees_the_key_at_its_ttl_and_leaves_nothing_for_every_kind() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let other = client(fleet, Quorum::Majority).await;
    let ttl = Duration::from_millis(1500);
    for case in Case::all("crash") {
        let crashed = case
            .request(&locks)
            .ttl(ttl)
            .try_acquire()
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{}: free", case.name));
        let taken_at = Instant::now();
        let holder = crashed.holder().to_string();
        // A crash: no release, no renewal, the guard never dropped.
        std::mem::forget(crashed);
        assert!(
            case.conflicting(&other)
                .ttl(ttl)
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "{}: taken while held",
            case.name
        );
        let next = case
            .conflicting(&other)
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: the crashed hold never freed: {e}", case.name));
        assert!(
            taken_at.elapsed() >= ttl - Duration::from_millis(100),
            "{}: freed after {:?}, before its ttl",
            case.name,
            taken_at.elapsed()
        );
        next.release().await.unwrap();
        locks.finish_background().await;
        other.finish_background().await;
        // Nothing of the crashed holder lingers, and the key is free again.
        for i in 0..fleet.len() {
            assert!(
                !case.kept_on(fleet, i, &holder).await,
                "{}: node {i} kept the crashed entry",
                case.name
            );
        }
        let again = case
            .request(&locks)
            .try_acquire()
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{}: not free after the release", case.name));
        again.release().await.unwrap();
        // The last release leaves no key of the kind's entries behind (a sorted set goes with
        // its last member).
        locks.finish_background().await;
        let keys = match case.entry() {
            Entry::Strings(keys) => keys,
            Entry::Member(key) => vec![key],
        };
        for i in 0..fleet.len() {
            let mut c = conn(fleet, i).await;
            for key in &keys {
                let exists: bool = redis::cmd("EXISTS")
                    .arg(key)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                assert!(!exists, "{}: node {i} kept {key}", case.name);
            }
        }
    }
}
