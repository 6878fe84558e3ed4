//! Fleets of Redis (or Valkey) Clusters on loopback: N independent clusters, each a lock node
//! of its own, of real `redis-server --cluster-enabled yes` processes with every slot assigned.

use std::io;
use std::time::{Duration, Instant};

use super::process::{self, RedisProcess};
use super::{Persistence, START_TIMEOUT};

mod slots;

/// Options for a [`ClusterFleet`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ClusterFleetBuilder {
    clusters: usize,
    primaries: usize,
    replicas: usize,
    node_timeout: Duration,
}

impl Default for ClusterFleetBuilder {
    fn default() -> Self {
        ClusterFleetBuilder {
            clusters: 5,
            primaries: 3,
            replicas: 0,
            node_timeout: Duration::from_millis(1000),
        }
    }
}

impl ClusterFleetBuilder {
    /// How many independent clusters (lock nodes): 5 by default.
    pub fn clusters(mut self, n: usize) -> Self {
        self.clusters = n;
        self
    }

    /// Primaries per cluster, the slots split evenly between them: 3 by default.
    pub fn primaries(mut self, n: usize) -> Self {
        self.primaries = n;
        self
    }

    /// Replicas per primary: 0 by default. With one, a primary's failure (or
    /// [`ClusterFleet::failover`]) hands its slots to its replica.
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// `cluster-node-timeout`: how long a member may be silent before the others count it
    /// failed (and a replica takes over); 1 s by default.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Starts every member, joins each cluster's members (`CLUSTER MEET`), assigns the slots
    /// (`CLUSTER ADDSLOTSRANGE`) and replicas (`CLUSTER REPLICATE`), and waits until every
    /// member of every cluster reports the cluster ok and knows all its members.
    ///
    /// # Errors
    /// A member did not start, or a cluster did not form within [`START_TIMEOUT`].
    pub fn start(self) -> io::Result<ClusterFleet> {
        if self.clusters == 0 || self.primaries == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a cluster fleet needs at least one cluster of at least one primary",
            ));
        }
        let binary = process::find_server()?;
        let dir = tempfile::Builder::new()
            .prefix("quorum-lock-clusters-")
            .tempdir()?;
        let per = self.primaries * (1 + self.replicas);
        let timeout_ms = u64::try_from(self.node_timeout.as_millis()).unwrap_or(u64::MAX);
        let mut clusters = Vec::with_capacity(self.clusters);
        for c in 0..self.clusters {
            let mut members = Vec::with_capacity(per);
            for m in 0..per {
                let member_dir = dir.path().join(format!("cluster{c}-member{m}"));
                std::fs::create_dir_all(&member_dir)?;
                members.push(RedisProcess::start(process::Settings {
                    binary: binary.clone(),
                    dir: member_dir,
                    password: None,
                    persistence: Persistence::None,
                    args: Vec::new(),
                    cluster_node_timeout: Some(timeout_ms),
                    #[cfg(feature = "tls")]
                    tls: None,
                })?);
            }
            clusters.push(members);
        }
        let fleet = ClusterFleet {
            clusters,
            primaries: self.primaries,
            _dir: dir,
        };
        for c in 0..fleet.clusters.len() {
            fleet.form(c, self.replicas)?;
        }
        Ok(fleet)
    }
}

/// N independent Redis Clusters on loopback, each given to a lock client as one node (by the
/// URL of one member). Members are numbered per cluster: `0..primaries` are the primaries at
/// start, then each primary's replicas. Every process is killed and reaped when the fleet is
/// dropped, also when a test panics.
pub struct ClusterFleet {
    clusters: Vec<Vec<RedisProcess>>,
    primaries: usize,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for ClusterFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterFleet")
            .field("nodes", &self.urls())
            .field("members", &self.clusters[0].len())
            .finish_non_exhaustive()
    }
}

impl ClusterFleet {
    /// `clusters` clusters of 3 primaries each, no replicas.
    ///
    /// # Errors
    /// As [`ClusterFleetBuilder::start`].
    pub fn start(clusters: usize) -> io::Result<ClusterFleet> {
        ClusterFleet::builder().clusters(clusters).start()
    }

    /// Options for a cluster fleet.
    pub fn builder() -> ClusterFleetBuilder {
        ClusterFleetBuilder::default()
    }

    /// How many clusters (lock nodes).
    pub fn len(&self) -> usize {
        self.clusters.len()
    }

    /// Never: a fleet has at least one cluster.
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
    }

    /// Members per cluster (primaries and replicas).
    pub fn members(&self) -> usize {
        self.clusters[0].len()
    }

    /// One URL per cluster (its member 0): the lock client's node list.
    pub fn urls(&self) -> Vec<String> {
        (0..self.len()).map(|c| self.member_url(c, 0)).collect()
    }

    /// The URL of member `m` of cluster `c`.
    pub fn member_url(&self, c: usize, m: usize) -> String {
        format!("redis://127.0.0.1:{}", self.member(c, m).port())
    }

    /// Member `m` of cluster `c`.
    pub fn member(&self, c: usize, m: usize) -> &RedisProcess {
        &self.clusters[c][m]
    }

    /// A redis client for member `m` of cluster `c` (plain connections, no redirects).
    pub fn client(&self, c: usize, m: usize) -> redis::Client {
        // A URL made here, always valid.
        redis::Client::open(self.member_url(c, m)).expect("a loopback URL")
    }

    /// Kills member `m` of cluster `c` (SIGKILL) and reaps it.
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn kill(&self, c: usize, m: usize) -> io::Result<()> {
        self.clusters[c][m].kill()
    }

    /// Stops member `m` of cluster `c` (SIGSTOP) until [`resume`](Self::resume).
    ///
    /// # Errors
    /// The member is not running, or the signal failed.
    pub fn pause(&self, c: usize, m: usize) -> io::Result<()> {
        self.clusters[c][m].pause()
    }

    /// Resumes member `m` of cluster `c` (SIGCONT).
    ///
    /// # Errors
    /// The member is not running, or the signal failed.
    pub fn resume(&self, c: usize, m: usize) -> io::Result<()> {
        self.clusters[c][m].resume()
    }

    /// Kills member `m` of cluster `c` (if running) and starts it again on the same ports and
    /// directory: it rejoins its cluster (`nodes.conf`) with an empty dataset.
    ///
    /// # Errors
    /// The member did not start again.
    pub fn restart(&self, c: usize, m: usize) -> io::Result<()> {
        self.clusters[c][m].restart()
    }

    /// Waits until every running member of cluster `c` reports `cluster_state:ok`.
    ///
    /// # Errors
    /// Not within [`START_TIMEOUT`].
    pub fn wait_ok(&self, c: usize) -> io::Result<()> {
        let running: Vec<usize> = (0..self.members())
            .filter(|&m| self.clusters[c][m].pid().is_some())
            .collect();
        self.wait_until(c, &running, |text, _| text.contains("cluster_state:ok"))
    }

    /// All members' logs, headed by cluster, member and port: for failing tests to print.
    pub fn all_logs(&self) -> String {
        let mut out = String::new();
        for (c, members) in self.clusters.iter().enumerate() {
            for (m, p) in members.iter().enumerate() {
                out.push_str(&format!(
                    "--- cluster {c} member {m} (port {}) ---\n{}",
                    p.port(),
                    p.logs()
                ));
            }
        }
        out
    }

    fn connect(&self, c: usize, m: usize) -> io::Result<redis::Connection> {
        self.client(c, m)
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(io::Error::other)
    }

    /// Runs `f` on the first running member of cluster `c` that answers.
    fn ask_any<T>(
        &self,
        c: usize,
        f: impl Fn(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> io::Result<T> {
        let mut last = io::Error::other(format!("no member of cluster {c} is running"));
        for m in 0..self.members() {
            if self.clusters[c][m].pid().is_none() {
                continue;
            }
            match self.connect(c, m).and_then(|mut conn| {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                f(&mut conn).map_err(io::Error::other)
            }) {
                Ok(v) => return Ok(v),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Joins cluster `c`'s members, assigns the slots and replicas, and waits until it is ok.
    fn form(&self, c: usize, replicas: usize) -> io::Result<()> {
        let members = &self.clusters[c];
        let first_port = members[0].port();
        let first_bus = members[0].bus_port().unwrap_or(first_port + 10_000);
        for m in 1..members.len() {
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(first_port)
                .arg(first_bus)
                .query::<()>(&mut self.connect(c, m)?)
                .map_err(io::Error::other)?;
        }
        let slots = usize::from(crate::rules::key::SLOTS);
        for p in 0..self.primaries {
            let start = slots * p / self.primaries;
            let end = slots * (p + 1) / self.primaries - 1;
            redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(start)
                .arg(end)
                .query::<()>(&mut self.connect(c, p)?)
                .map_err(io::Error::other)?;
        }
        let all: Vec<usize> = (0..members.len()).collect();
        let total = members.len();
        self.wait_until(c, &all, |text, _| {
            text.contains(&format!("cluster_known_nodes:{total}"))
        })?;
        for r in 0..replicas * self.primaries {
            let primary = r % self.primaries;
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut self.connect(c, primary)?)
                .map_err(io::Error::other)?;
            redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(id)
                .query::<()>(&mut self.connect(c, self.primaries + r)?)
                .map_err(io::Error::other)?;
        }
        self.wait_until(c, &all, |text, _| text.contains("cluster_state:ok"))
    }

    /// Waits until `CLUSTER INFO` of each of `members` of cluster `c` satisfies `ok`.
    fn wait_until(
        &self,
        c: usize,
        members: &[usize],
        ok: impl Fn(&str, usize) -> bool,
    ) -> io::Result<()> {
        let mut info = redis::cmd("CLUSTER");
        info.arg("INFO");
        self.wait_members(c, members, &info, "ready", |text: Option<&String>, m| {
            text.is_some_and(|t| ok(t, m))
        })
    }

    /// Asks each of `members` of cluster `c` `cmd` (2 s to answer) until `ok` holds of its
    /// answer (`None`: it did not answer), for up to [`START_TIMEOUT`] in all; a member that
    /// never does is named with its answer, `what` was awaited, and its log's end.
    fn wait_members<T: redis::FromRedisValue + std::fmt::Debug>(
        &self,
        c: usize,
        members: &[usize],
        cmd: &redis::Cmd,
        what: &str,
        ok: impl Fn(Option<&T>, usize) -> bool,
    ) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        for &m in members {
            loop {
                let answer: Option<T> = self.connect(c, m).ok().and_then(|mut conn| {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                    cmd.query(&mut conn).ok()
                });
                if ok(answer.as_ref(), m) {
                    break;
                }
                if Instant::now() > deadline {
                    let log = self.clusters[c][m].logs();
                    let tail: Vec<&str> = log.lines().rev().take(20).collect();
                    return Err(io::Error::other(format!(
                        "cluster {c} member {m} not {what} in time: {answer:?}; its log ends:\n{}",
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }
}
