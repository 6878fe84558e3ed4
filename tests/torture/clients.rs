//! The client side of the torture suite: tasks that contend for a few keys through every path
//! of the library (fenced and native acquires, fixed TTLs and watchdog leases with holds of up
//! to several leases, extends, reentrant owners, cancelled calls, drops) and through every
//! primitive of the lock family (multi-key sets, some of them naming keys also locked alone;
//! a read-write lock; a semaphore of one permit under the run's quorum and one of two under
//! `Quorum::All`; a fair lock), each recording the intervals in which it believed it held a lock and the
//! paths it ran. Run in the test process and in separate worker processes; the test merges
//! and checks the histories.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use quorum_lock::testkit::history::{Hold, Interval};
use quorum_lock::testkit::monotonic_nanos;
use quorum_lock::{LockGuard, LockRequest, Owner, Quorum, QuorumLock};

/// The keys of one run, all under one prefix (a clock jump expires whatever matches it).
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

/// Keys 0..LOCKED are locked alone and in sets; the keys from LOCKED to KEYS only in sets.
const LOCKED: usize = 3;
const KEYS: usize = 5;

/// A semaphore of the run: its key's name and permits, and whether its clients use
/// `Quorum::All` (more than one permit needs it) instead of the run's quorum.
#[derive(Debug)]
struct Semaphore {
    name: &'static str,
    permits: u32,
    all: bool,
}

/// One permit is a mutex under any quorum; two need every node.
const SEMAPHORES: [Semaphore; 2] = [
    Semaphore {
        name: "sem1",
        permits: 1,
        all: false,
    },
    Semaphore {
        name: "sem2",
        permits: 2,
        all: true,
    },
];

/// Sets named in the caller's order: {3, 4} in both orders; {4, 2} sharing key 4 with them
/// and key 2 with its single holders; {0, 4, 3} sharing both keys with the first two and key
/// 0 with its single holders. Each set names at most one key locked alone: such a key is
/// rarely free (nothing makes its single holders give way to a set), and a set that needs
/// two of them at once hardly ever holds.
const SETS: [&[usize]; 4] = [&[3, 4], &[4, 3], &[4, 2], &[0, 4, 3]];

impl Keys {
    /// The keys under `prefix`.
    pub fn new(prefix: impl Into<String>) -> Keys {
        Keys {
            prefix: prefix.into(),
        }
    }

    fn key(&self, k: usize) -> String {
        format!("{}:{k}", self.prefix)
    }

    fn rw(&self) -> String {
        format!("{}:rw", self.prefix)
    }

    fn semaphore(&self, s: &Semaphore) -> String {
        format!("{}:{}", self.prefix, s.name)
    }

    fn fair(&self) -> String {
        format!("{}:fair", self.prefix)
    }

    /// The pattern of every key of the run on the nodes: the locks, the sets' keys, the
    /// writer's entry and the readers' sorted set (`quorum-lock:readers:{<h>}:K`), the pending
    /// writer mark, the semaphores, the fair lock, its line and ticket counter, and the
    /// fencing counters (which have no TTL, so a clock jump leaves them be).
    pub fn pattern(&self) -> String {
        format!("*{}:*", self.prefix)
    }

    /// Every key a lock stores with a TTL (not the fencing counters, which never expire by
    /// design, nor the fair lock's ticket counter, which its `INCR` creates without one until
    /// the waiter that drew the ticket joins the line).
    pub fn with_ttl(&self) -> Vec<String> {
        let rw = self.rw();
        let mut keys: Vec<String> = (0..KEYS).map(|k| self.key(k)).collect();
        keys.push(
            String::from_utf8_lossy(&quorum_lock::names::readers(rw.as_bytes())).into_owned(),
        );
        keys.push(
            String::from_utf8_lossy(&quorum_lock::names::writer_mark(rw.as_bytes())).into_owned(),
        );
        keys.push(rw);
        keys.extend(SEMAPHORES.iter().map(|s| self.semaphore(s)));
        let fair = self.fair();
        for line in ["queue", "queue-expiry", "queue-holder"] {
            keys.push(format!("quorum-lock:{line}:{fair}"));
        }
        keys.push(fair);
        keys
    }
}

/// What one acquisition takes.
#[derive(Debug, Clone, Copy)]
enum Pick {
    /// One of the keys locked alone (sometimes through a reentrant owner).
    Lock(usize),
    /// A set of keys, named in this order.
    Set(&'static [usize]),
    /// A read lock of the read-write lock.
    Read,
    /// Its write lock.
    Write,
    /// A permit of a semaphore.
    Permit(&'static Semaphore),
    /// The fair lock.
    Fair,
}

impl Pick {
    /// A third of the picks are single locks (they carry the reentrant, fenced and native
    /// paths); the rest are spread over the family, with twice as many readers as writers,
    /// so that readers meet readers. The semaphore that needs every node holds only between
    /// outages, whatever its share.
    fn draw(rng: &mut StdRng) -> Pick {
        match rng.random_range(0..100) {
            0..35 => Pick::Lock(rng.random_range(0..LOCKED)),
            35..52 => Pick::Set(SETS[rng.random_range(0..SETS.len())]),
            52..65 => Pick::Read,
            65..71 => Pick::Write,
            71..78 => Pick::Permit(&SEMAPHORES[0]),
            78..88 => Pick::Permit(&SEMAPHORES[1]),
            _ => Pick::Fair,
        }
    }

    /// The request, on `all` for a semaphore that needs every node, else on `locks` (or on
    /// `owner`, which only locks single keys).
    fn request<'a>(
        self,
        keys: &Keys,
        locks: &'a QuorumLock,
        all: &'a QuorumLock,
        owner: Option<&'a Owner>,
    ) -> LockRequest<'a> {
        match (self, owner) {
            (Pick::Lock(k), Some(owner)) => owner.lock(keys.key(k)),
            (Pick::Lock(k), None) => locks.lock(keys.key(k)),
            (Pick::Set(set), _) => locks.lock_all(set.iter().map(|&k| keys.key(k))),
            (Pick::Read, _) => locks.read_lock(keys.rw()),
            (Pick::Write, _) => locks.write_lock(keys.rw()),
            (Pick::Fair, _) => locks.fair_lock(keys.fair()),
            (Pick::Permit(s), _) => match s.all {
                true => all.semaphore(keys.semaphore(s), s.permits).counted(),
                false => locks.semaphore(keys.semaphore(s), s.permits).counted(),
            },
        }
    }

    /// The path an acquisition of this pick ran.
    fn acquired(self, fenced: bool) -> &'static str {
        match self {
            Pick::Lock(_) if fenced => "acquire fenced",
            Pick::Lock(_) => "acquire native (unfenced)",
            Pick::Set(set) if set.iter().any(|&k| k < LOCKED) => {
                "acquire multi-key set (with keys locked alone)"
            }
            Pick::Set(_) => "acquire multi-key set (keys of sets only)",
            Pick::Read => "acquire read lock",
            Pick::Write => "acquire write lock",
            Pick::Permit(s) if s.all => "acquire permit (1 of 2, Quorum::All)",
            Pick::Permit(_) => "acquire permit (1 of 1)",
            Pick::Fair => "acquire fair lock",
        }
    }

    /// The intervals the holder believes it holds: one per key of a set, each exclusive; a
    /// reader's and a permit's saying so.
    fn begin(self, guard: &LockGuard, name: &str) -> Vec<Interval> {
        match self {
            Pick::Set(_) => Interval::begin_each_key(guard, name),
            Pick::Read => vec![Interval::begin(guard, name).holding(Hold::Read)],
            Pick::Permit(s) => vec![Interval::begin(guard, name).holding(Hold::Permit(s.permits))],
            Pick::Lock(_) | Pick::Write | Pick::Fair => vec![Interval::begin(guard, name)],
        }
    }
}

/// What a group of torture clients does.
#[derive(Debug, Clone)]
pub struct ClientPlan {
    /// The nodes.
    pub urls: Vec<String>,
    /// The contended keys.
    pub keys: Keys,
    /// Seeds every random choice of these clients.
    pub seed: u64,
    /// How long they run.
    pub duration: Duration,
    /// Concurrent tasks, each with its own clients.
    pub tasks: usize,
    /// Names this group in the history.
    pub name: String,
    /// Confirmations required ([`Quorum::AtLeast`]); `None` for a majority. The semaphore of
    /// more than one permit always uses `Quorum::All`.
    pub at_least: Option<usize>,
}

/// What a group of torture clients saw.
#[derive(Debug, Clone, Default)]
pub struct ClientReport {
    /// Every interval in which a task believed it held a lock.
    pub intervals: Vec<Interval>,
    /// Acquire calls that failed (timeouts, no quorum): expected under faults.
    pub failed_acquires: u64,
    /// Releases not confirmed by a quorum: expected under faults.
    pub unconfirmed_releases: u64,
    /// Every code path a task went through, with when, for the coverage table.
    pub events: Vec<PathEvent>,
}

/// One or more runs of a code path during a time span, e.g. "renewal confirmed" 3 times
/// during one hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathEvent {
    /// The path (see [`PATHS`]).
    pub path: &'static str,
    /// When the span began (monotonic nanoseconds).
    pub start: u64,
    /// When it ended.
    pub end: u64,
    /// How many times the path ran in the span.
    pub count: u64,
}

/// The code paths the torture clients report, in table order. The first two acquire rows are
/// the single locks'; the family's acquires have a row each, whatever their fencing. The
/// other rows count every primitive's runs. The rows "readers held at once" and "permits
/// held at once" are read off the merged history ([`shared_holds`]): they show that the
/// checker's rules for holds that share a key were put to the test, not only exclusion.
pub const PATHS: [&str; 26] = [
    "acquire native (unfenced)",
    "acquire fenced",
    "acquire multi-key set (keys of sets only)",
    "acquire multi-key set (with keys locked alone)",
    "acquire read lock",
    "acquire write lock",
    "acquire permit (1 of 1)",
    "acquire permit (1 of 2, Quorum::All)",
    "acquire fair lock",
    "acquire cancelled",
    "acquire failed",
    "reentrant nested acquire",
    "readers held at once",
    "permits held at once",
    "renewal confirmed",
    "repair",
    "extend longer ok",
    "extend shorter ok",
    "extend failed",
    "extend cancelled",
    "hold outlived a fixed ttl",
    "max_hold ended a watchdog lock",
    "lost during hold",
    "release confirmed",
    "release not confirmed",
    "guard dropped",
];

/// How many acquisitions `intervals` record: a set's acquisition has one interval per key,
/// all begun at the same instant by the same client.
pub fn acquisitions<'a>(intervals: impl IntoIterator<Item = &'a Interval>) -> usize {
    intervals
        .into_iter()
        .map(|i| (&i.client, i.start))
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// A hold that began while another hold it shares the key with was open (a reader beside a
/// reader, a permit beside a permit), over the overlap, for the coverage table.
pub fn shared_holds(history: &[Interval]) -> Vec<PathEvent> {
    let mut by_key: std::collections::BTreeMap<&str, Vec<&Interval>> = Default::default();
    for i in history.iter().filter(|i| i.end > i.start) {
        by_key.entry(&i.key).or_default().push(i);
    }
    let mut events = Vec::new();
    for mut intervals in by_key.into_values() {
        intervals.sort_by_key(|i| (i.start, i.end));
        let mut open: Vec<&Interval> = Vec::new();
        for cur in intervals {
            open.retain(|o| o.end > cur.start);
            let path = match cur.hold {
                Hold::Read => Some("readers held at once"),
                Hold::Permit(p) if p > 1 => Some("permits held at once"),
                _ => None,
            };
            let beside = open
                .iter()
                .filter(|o| o.hold == cur.hold)
                .map(|o| o.end)
                .max();
            if let (Some(path), Some(end)) = (path, beside) {
                events.push(PathEvent {
                    path,
                    start: cur.start,
                    end: end.min(cur.end),
                    count: 1,
                });
            }
            open.push(cur);
        }
    }
    events
}

impl PathEvent {
    /// The line form: `path|start|end|count`.
    pub fn to_line(&self) -> String {
        format!("{}|{}|{}|{}", self.path, self.start, self.end, self.count)
    }

    /// Parses [`to_line`](Self::to_line) output (paths outside [`PATHS`] are refused).
    pub fn from_line(line: &str) -> Option<PathEvent> {
        let mut parts = line.split('|');
        let name = parts.next()?;
        let path = *PATHS.iter().find(|p| **p == name)?;
        Some(PathEvent {
            path,
            start: parts.next()?.parse().ok()?,
            end: parts.next()?.parse().ok()?,
            count: parts.next()?.parse().ok()?,
        })
    }
}

const ENV: &str = "QUORUM_LOCK_TORTURE_CLIENTS";

impl ClientPlan {
    /// The plan as one environment variable, for a worker process.
    pub fn to_env(&self) -> (&'static str, String) {
        let value = [
            self.urls.join(","),
            self.keys.prefix.clone(),
            self.seed.to_string(),
            self.duration.as_millis().to_string(),
            self.tasks.to_string(),
            self.name.clone(),
            self.at_least.map_or_else(String::new, |k| k.to_string()),
        ]
        .join(";");
        (ENV, value)
    }

    /// The plan a parent process passed with [`to_env`](Self::to_env), if any.
    pub fn from_env() -> Option<ClientPlan> {
        let value = std::env::var(ENV).ok()?;
        let parts: Vec<&str> = value.split(';').collect();
        let [urls, prefix, seed, millis, tasks, name, quorum] = parts.as_slice() else {
            return None;
        };
        Some(ClientPlan {
            urls: urls.split(',').map(str::to_string).collect(),
            keys: Keys::new(*prefix),
            seed: seed.parse().ok()?,
            duration: Duration::from_millis(millis.parse().ok()?),
            tasks: tasks.parse().ok()?,
            name: (*name).to_string(),
            at_least: quorum.parse().ok(),
        })
    }

    async fn client(&self, quorum: Quorum) -> quorum_lock::Result<QuorumLock> {
        QuorumLock::builder()
            .nodes(&self.urls)
            .quorum(quorum)
            .node_timeout(Duration::from_millis(100))
            .retry_delay(Duration::from_millis(20))
            .retry_jitter(Duration::from_millis(20))
            .lazy(true)
            .build()
            .await
    }

    /// Runs the tasks until the duration is over and returns their merged history.
    ///
    /// # Errors
    /// A client could not be built.
    ///
    /// # Panics
    /// If a task panics (the panic is passed on).
    pub async fn run(&self) -> quorum_lock::Result<ClientReport> {
        let until = Instant::now() + self.duration;
        let mut tasks = Vec::new();
        let quorum = self.at_least.map_or(Quorum::Majority, Quorum::AtLeast);
        for t in 0..self.tasks {
            let clients = Clients {
                locks: self.client(quorum).await?,
                all: self.client(Quorum::All).await?,
            };
            let keys = self.keys.clone();
            let name = format!("{}-{t}", self.name);
            let rng = StdRng::seed_from_u64(self.seed.wrapping_mul(1000).wrapping_add(t as u64));
            tasks.push(tokio::spawn(contend(clients, keys, rng, until, name)));
        }
        let mut report = ClientReport::default();
        for t in tasks {
            let r = match t.await {
                Ok(r) => r,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => panic!("a torture task was cancelled: {e}"),
            };
            report.intervals.extend(r.intervals);
            report.failed_acquires += r.failed_acquires;
            report.unconfirmed_releases += r.unconfirmed_releases;
            report.events.extend(r.events);
        }
        Ok(report)
    }
}

/// One task's clients: `locks` with the run's quorum, `all` with `Quorum::All` for the
/// semaphore of more than one permit.
struct Clients {
    locks: QuorumLock,
    all: QuorumLock,
}

/// One task: takes a random pick (a key, a set, a read or write lock, a permit) by a random
/// path (fenced or not, fixed TTL or watchdog with or without `max_hold`, for a key plain or
/// through a reentrant owner, sometimes cancelled), holds it from 0 ms to several leases
/// while sometimes extending it (longer or shorter, sometimes cancelled), and releases or
/// drops it; records what it believed and which paths ran.
async fn contend(
    clients: Clients,
    keys: Keys,
    mut rng: StdRng,
    until: Instant,
    name: String,
) -> ClientReport {
    let mut report = ClientReport::default();
    while Instant::now() < until {
        let pick = Pick::draw(&mut rng);
        let fenced = rng.random_bool(0.5);
        let owner = match pick {
            Pick::Lock(_) => rng.random_bool(0.25).then(|| clients.locks.owner()),
            _ => None,
        };
        let locks = match pick {
            Pick::Permit(s) if s.all => &clients.all,
            _ => &clients.locks,
        };
        let request = pick
            .request(&keys, &clients.locks, &clients.all, owner.as_ref())
            .fencing(fenced)
            .wait(Duration::from_millis(rng.random_range(200..2000)));
        // A lease, and how long to hold: from nothing to several leases.
        let (request, lease, max_hold) = if rng.random_bool(0.5) {
            let ttl = Duration::from_millis(rng.random_range(300..1500));
            (request.ttl(ttl), ttl, None)
        } else {
            let lease = Duration::from_millis(rng.random_range(300..900));
            let request = request.watchdog(lease);
            match rng.random_bool(0.3) {
                true => {
                    let max = lease.mul_f64(rng.random_range(0.5..2.5));
                    (request.max_hold(max), lease, Some(max))
                }
                false => (request, lease, None),
            }
        };
        let hold = match rng.random_bool(0.5) {
            true => Duration::from_millis(rng.random_range(0..40)),
            false => lease.mul_f64(rng.random_range(0.0..3.0)),
        };
        let before = locks.stats();
        let asked = monotonic_nanos();
        // Sometimes the caller gives up on the acquire at a random point.
        let cancel_after = rng
            .random_bool(0.1)
            .then(|| Duration::from_millis(rng.random_range(0..30)));
        let acquired = match cancel_after {
            Some(after) => match tokio::time::timeout(after, request.acquire()).await {
                Ok(r) => r,
                Err(_) => {
                    report.event("acquire cancelled", asked, 1);
                    continue;
                }
            },
            None => request.acquire().await,
        };
        let guard = match acquired {
            Ok(guard) => guard,
            Err(_) => {
                report.failed_acquires += 1;
                report.event("acquire failed", asked, 1);
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..20))).await;
                continue;
            }
        };
        let start = monotonic_nanos();
        report.event(pick.acquired(fenced), start, 1);
        let intervals = pick.begin(&guard, &name);
        let nested = match (&owner, pick) {
            (Some(owner), Pick::Lock(k)) if rng.random_bool(0.5) => {
                let inner = owner.lock(keys.key(k)).ttl(lease).try_acquire().await;
                match inner {
                    Ok(Some(inner)) => {
                        report.event("reentrant nested acquire", start, 1);
                        Some(inner)
                    }
                    _ => None,
                }
            }
            _ => None,
        };

        // The hold: sometimes an extend at a random point, cut short by loss.
        let lost = guard.lost_signal();
        let held_until = Instant::now() + hold;
        let mut was_lost = false;
        if rng.random_bool(0.3) {
            let at = hold.mul_f64(rng.random_range(0.0..1.0));
            let ttl = lease.mul_f64(rng.random_range(0.2..2.0));
            // An extend takes well under a millisecond on loopback: cancel it within one.
            let cancel = rng
                .random_bool(0.2)
                .then(|| Duration::from_micros(rng.random_range(0..1500)));
            tokio::select! {
                () = lost.wait() => was_lost = true,
                () = tokio::time::sleep(at) => {}
            }
            if !was_lost {
                let shorter = Instant::now() + ttl < guard.deadline();
                let extended = match cancel {
                    Some(after) => tokio::time::timeout(after, guard.extend(ttl)).await.ok(),
                    None => Some(guard.extend(ttl).await),
                };
                let path = match (extended, shorter) {
                    (None, _) => "extend cancelled",
                    (Some(Err(_)), _) => "extend failed",
                    (Some(Ok(())), true) => "extend shorter ok",
                    (Some(Ok(())), false) => "extend longer ok",
                };
                report.event(path, monotonic_nanos(), 1);
            }
        }
        if !was_lost {
            tokio::select! {
                () = lost.wait() => was_lost = true,
                () = tokio::time::sleep_until(held_until) => {}
            }
        }
        let intervals: Vec<Interval> = intervals.into_iter().map(|i| i.finish(&guard)).collect();
        let end = intervals[0].end;
        report.intervals.extend(intervals);
        if was_lost {
            let path = match (max_hold, guard.deadline() <= Instant::now()) {
                (Some(max), true) if hold >= max => "max_hold ended a watchdog lock",
                (None, true) if hold >= lease => "hold outlived a fixed ttl",
                _ => "lost during hold",
            };
            report.event(path, end, 1);
        }
        let after = locks.stats();
        let user_extends = report
            .events
            .iter()
            .rev()
            .take_while(|e| e.start >= start)
            .filter(|e| matches!(e.path, "extend longer ok" | "extend shorter ok"))
            .count() as u64;
        let renewals = (after.extended - before.extended).saturating_sub(user_extends);
        report.span("renewal confirmed", start, end, renewals);
        report.span("repair", start, end, after.repaired - before.repaired);
        drop(nested);
        if rng.random_bool(0.15) {
            report.event("guard dropped", monotonic_nanos(), 1);
            drop(guard);
        } else if guard.release().await.is_ok() {
            report.event("release confirmed", monotonic_nanos(), 1);
        } else {
            report.unconfirmed_releases += 1;
            report.event("release not confirmed", monotonic_nanos(), 1);
        }
    }
    report
}

impl ClientReport {
    fn event(&mut self, path: &'static str, at: u64, count: u64) {
        self.span(path, at, at, count);
    }

    fn span(&mut self, path: &'static str, start: u64, end: u64, count: u64) {
        if count > 0 {
            self.events.push(PathEvent {
                path,
                start,
                end,
                count,
            });
        }
    }
}

/// Lock keys (not the fencing counters, which never expire by design) that a node holds
/// without a TTL: a lock that would never free itself. `nodes` are the nodes' clients, in
/// node order.
pub async fn keys_without_ttl(
    nodes: impl IntoIterator<Item = redis::Client>,
    keys: &[String],
) -> Vec<String> {
    // A generous response timeout: a node just resumed may answer late, but does answer.
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    let mut untimed = Vec::new();
    for (i, node) in nodes.into_iter().enumerate() {
        let mut conn = node
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("a check connection");
        for key in keys {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .expect("PTTL");
            if pttl == -1 {
                untimed.push(format!("node {i}: {key}"));
            }
        }
    }
    untimed
}
