//! The client side of the torture suite: tasks that contend for a few keys through every path
//! of the library (fenced and native acquires, fixed TTLs and watchdog leases with holds of up
//! to several leases, extends, reentrant owners, cancelled calls, drops), each recording the
//! intervals in which it believed it held a lock and the paths it ran. Run in the test process
//! and in separate worker processes; the test merges and checks the histories.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use quorum_lock::testkit::history::Interval;
use quorum_lock::testkit::monotonic_nanos;
use quorum_lock::{Quorum, QuorumLock};

/// What a group of torture clients does.
#[derive(Debug, Clone)]
pub struct ClientPlan {
    /// The nodes.
    pub urls: Vec<String>,
    /// The contended keys.
    pub keys: Vec<String>,
    /// Seeds every random choice of these clients.
    pub seed: u64,
    /// How long they run.
    pub duration: Duration,
    /// Concurrent tasks, each with its own client.
    pub tasks: usize,
    /// Names this group in the history.
    pub name: String,
    /// Confirmations required ([`Quorum::AtLeast`]); `None` for a majority.
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

/// The code paths the torture clients report, in table order.
pub const PATHS: [&str; 17] = [
    "acquire native (unfenced)",
    "acquire fenced",
    "acquire cancelled",
    "acquire failed",
    "reentrant nested acquire",
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
            self.keys.join(","),
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
        let [urls, keys, seed, millis, tasks, name, quorum] = parts.as_slice() else {
            return None;
        };
        Some(ClientPlan {
            urls: urls.split(',').map(str::to_string).collect(),
            keys: keys.split(',').map(str::to_string).collect(),
            seed: seed.parse().ok()?,
            duration: Duration::from_millis(millis.parse().ok()?),
            tasks: tasks.parse().ok()?,
            name: (*name).to_string(),
            at_least: quorum.parse().ok(),
        })
    }

    async fn client(&self) -> quorum_lock::Result<QuorumLock> {
        QuorumLock::builder()
            .nodes(&self.urls)
            .quorum(self.at_least.map_or(Quorum::Majority, Quorum::AtLeast))
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
        for t in 0..self.tasks {
            let locks = self.client().await?;
            let keys = self.keys.clone();
            let name = format!("{}-{t}", self.name);
            let rng = StdRng::seed_from_u64(self.seed.wrapping_mul(1000).wrapping_add(t as u64));
            tasks.push(tokio::spawn(contend(locks, keys, rng, until, name)));
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

/// One task: takes a random key by a random path (fenced or not, fixed TTL or watchdog with
/// or without `max_hold`, plain or through a reentrant owner, sometimes cancelled), holds it
/// from 0 ms to several leases while sometimes extending it (longer or shorter, sometimes
/// cancelled), and releases or drops it; records what it believed and which paths ran.
async fn contend(
    locks: QuorumLock,
    keys: Vec<String>,
    mut rng: StdRng,
    until: Instant,
    name: String,
) -> ClientReport {
    let mut report = ClientReport::default();
    while Instant::now() < until {
        let key = &keys[rng.random_range(0..keys.len())];
        let fenced = rng.random_bool(0.5);
        let owner = rng.random_bool(0.25).then(|| locks.owner());
        let base = match &owner {
            Some(owner) => owner.lock(key),
            None => locks.lock(key),
        };
        let request = base
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
        report.event(
            if fenced {
                "acquire fenced"
            } else {
                "acquire native (unfenced)"
            },
            start,
            1,
        );
        let interval = Interval::begin(&guard, &name);
        let nested = match &owner {
            Some(owner) if rng.random_bool(0.5) => {
                let inner = owner.lock(key).ttl(lease).try_acquire().await;
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
        let interval = interval.finish(&guard);
        let end = interval.end;
        report.intervals.push(interval);
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
