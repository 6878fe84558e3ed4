//! The client side of the torture suite: tasks that contend for a few keys with fencing on,
//! each recording the intervals in which it believed it held a lock. Run in the test process
//! and in separate worker processes; the test merges and checks the histories.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use super::history::Interval;
use crate::{Quorum, QuorumLock};

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

    async fn client(&self) -> crate::Result<QuorumLock> {
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
    pub async fn run(&self) -> crate::Result<ClientReport> {
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
        }
        Ok(report)
    }
}

/// One task: take a random key (fixed TTL or watchdog, fencing on), hold it a little, release;
/// record what it believed.
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
        let request = locks
            .lock(key)
            .fencing(true)
            .wait(Duration::from_millis(rng.random_range(200..2000)));
        let request = if rng.random_bool(0.5) {
            request.ttl(Duration::from_millis(rng.random_range(300..1500)))
        } else {
            request.watchdog(Duration::from_millis(rng.random_range(400..1200)))
        };
        match request.acquire().await {
            Ok(guard) => {
                let interval = Interval::begin(&guard, &name);
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..40))).await;
                report.intervals.push(interval.finish(&guard));
                if guard.release().await.is_err() {
                    report.unconfirmed_releases += 1;
                }
            }
            Err(_) => {
                report.failed_acquires += 1;
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..20))).await;
            }
        }
    }
    report
}
