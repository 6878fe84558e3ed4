//! Fleets of Redis (or Valkey) Clusters on loopback: N independent clusters, each a lock node
//! of its own, of real `redis-server --cluster-enabled yes` processes with every slot assigned.

use std::io;
use std::time::{Duration, Instant};

use super::process::{self, RedisProcess};
use super::{Persistence, START_TIMEOUT};

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

    /// The member of cluster `c` that serves `key`'s slot now (asked with `CLUSTER SLOTS` of
    /// a running member).
    ///
    /// # Errors
    /// No running member answered, or none serves the slot.
    pub fn primary_of(&self, c: usize, key: &[u8]) -> io::Result<usize> {
        self.primary_of_slot(c, crate::key::slot(key))
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

    /// Member `m` of cluster `c`, a replica, takes over from its primary (`CLUSTER FAILOVER`,
    /// or `CLUSTER FAILOVER TAKEOVER` when `force`: without the primary's agreement, as
    /// when it is down); returns once the member reports itself a primary and every running
    /// member's map names it.
    ///
    /// # Errors
    /// The member refused, or was not a primary within [`START_TIMEOUT`].
    pub fn failover(&self, c: usize, m: usize, force: bool) -> io::Result<()> {
        let mut conn = self.connect(c, m)?;
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("FAILOVER");
        if force {
            cmd.arg("TAKEOVER");
        }
        cmd.query::<()>(&mut conn).map_err(io::Error::other)?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let role: Vec<redis::Value> = redis::cmd("ROLE")
                .query(&mut conn)
                .map_err(io::Error::other)?;
            if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
                // Every member knows the new primary before the next step.
                let port = self.member(c, m).port();
                return self.wait_agreed(c, |ranges| ranges.iter().any(|r| r.3 == port));
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "member {m} of cluster {c} was not a primary in time"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The replica of cluster `c` that follows member `primary` now (asked with `ROLE` of
    /// each running member), if it has one.
    ///
    /// # Errors
    /// No running member answered.
    pub fn replica_of(&self, c: usize, primary: usize) -> io::Result<Option<usize>> {
        let port = i64::from(self.member(c, primary).port());
        let mut answered = false;
        for m in (0..self.members()).filter(|&m| m != primary) {
            if self.clusters[c][m].pid().is_none() {
                continue;
            }
            let Ok(mut conn) = self.connect(c, m) else {
                continue;
            };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let Ok(role) = redis::cmd("ROLE").query::<Vec<redis::Value>>(&mut conn) else {
                continue;
            };
            answered = true;
            let follows = matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"slave")
                && matches!(role.get(2), Some(redis::Value::Int(p)) if *p == port);
            if follows {
                return Ok(Some(m));
            }
        }
        if answered {
            Ok(None)
        } else {
            Err(io::Error::other(format!(
                "no member of cluster {c} answered ROLE"
            )))
        }
    }

    /// Moves `slot` of cluster `c` from the primary serving it to primary `to`, keys and all,
    /// as `redis-cli --cluster reshard` does: `SETSLOT IMPORTING` on `to`, `SETSLOT
    /// MIGRATING` on the source, `MIGRATE` of the slot's keys (their TTLs go with them),
    /// `midway` in that state (the source answers `ASK` for a key it does not have), the keys
    /// written meanwhile moved too, then `SETSLOT NODE` on every running primary (the source
    /// answers `MOVED` from then on); returns once every running member's map says so.
    /// Nothing happens when `to` already serves the slot.
    ///
    /// # Errors
    /// A member refused a step (`BUSYKEY`: the key exists on both primaries), or did not
    /// answer; the slot may be left migrating.
    pub fn migrate_slot(&self, c: usize, slot: u16, to: usize, midway: Duration) -> io::Result<()> {
        let from = self.primary_of_slot(c, slot)?;
        if from == to {
            return Ok(());
        }
        let id = |m: usize| -> io::Result<String> {
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut self.connect(c, m)?)
                .map_err(io::Error::other)
        };
        let (from_id, to_id) = (id(from)?, id(to)?);
        let setslot = |m: usize, state: &str, node: &str| -> io::Result<()> {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(state)
                .arg(node)
                .query::<()>(&mut self.connect(c, m)?)
                .map_err(io::Error::other)
        };
        setslot(to, "IMPORTING", &from_id)?;
        setslot(from, "MIGRATING", &to_id)?;
        let mut source = self.connect(c, from)?;
        let _ = source.set_read_timeout(Some(Duration::from_secs(5)));
        let to_port = self.member(c, to).port();
        let mut move_keys = || -> io::Result<()> {
            loop {
                let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100)
                    .query(&mut source)
                    .map_err(io::Error::other)?;
                if keys.is_empty() {
                    return Ok(());
                }
                // REPLACE: a MIGRATE cut short by a timeout may have restored some keys on
                // the target already; the source's copy is the one in force (every write
                // goes to the source while it has the key).
                redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(to_port)
                    .arg("")
                    .arg(0)
                    .arg(5000)
                    .arg("REPLACE")
                    .arg("KEYS")
                    .arg(&keys)
                    .query::<()>(&mut source)
                    .map_err(io::Error::other)?;
            }
        };
        move_keys()?;
        std::thread::sleep(midway);
        move_keys()?;
        // The new owner first, then the source, then the rest (as the reshard tool does).
        setslot(to, "NODE", &to_id)?;
        setslot(from, "NODE", &to_id)?;
        for m in self.primaries(c)? {
            if m != to && m != from && self.clusters[c][m].pid().is_some() {
                setslot(m, "NODE", &to_id)?;
            }
        }
        let port = self.member(c, to).port();
        self.wait_agreed(c, |ranges| {
            ranges
                .iter()
                .any(|(s, e, _, p)| (*s..=*e).contains(&i64::from(slot)) && *p == port)
        })
    }

    /// Waits until every running member of cluster `c` that answers `CLUSTER SLOTS` answers
    /// with a map that satisfies `agreed` (gossip spreads a change in moments; a next fault
    /// must not find members that disagree).
    ///
    /// # Errors
    /// Not within [`START_TIMEOUT`].
    fn wait_agreed(
        &self,
        c: usize,
        agreed: impl Fn(&[(i64, i64, String, u16)]) -> bool,
    ) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        for m in 0..self.members() {
            loop {
                if self.clusters[c][m].pid().is_none() {
                    break;
                }
                // A member that does not answer (paused, restarting) is not waited for.
                let map = self.connect(c, m).and_then(|mut conn| {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                    redis::cmd("CLUSTER")
                        .arg("SLOTS")
                        .query::<redis::Value>(&mut conn)
                        .map_err(io::Error::other)
                });
                match map {
                    Err(_) => break,
                    Ok(v) if agreed(&slot_ranges(&v)) => break,
                    Ok(_) => {}
                }
                if Instant::now() > deadline {
                    return Err(io::Error::other(format!(
                        "cluster {c} member {m} did not agree on the slot map in time"
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// The member of cluster `c` that serves `slot` now.
    ///
    /// # Errors
    /// As [`primary_of`](Self::primary_of).
    pub fn primary_of_slot(&self, c: usize, slot: u16) -> io::Result<usize> {
        let slot = i64::from(slot);
        self.slot_owners(c)?
            .into_iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|r| r.2)
            .ok_or_else(|| io::Error::other(format!("no member of cluster {c} serves slot {slot}")))
    }

    /// The members of cluster `c` that serve slots now (its primaries), in member order.
    ///
    /// # Errors
    /// No running member answered `CLUSTER SLOTS`.
    pub fn primaries(&self, c: usize) -> io::Result<Vec<usize>> {
        let mut members: Vec<usize> = self.slot_owners(c)?.into_iter().map(|r| r.2).collect();
        members.sort_unstable();
        members.dedup();
        Ok(members)
    }

    /// `(first slot, last slot, member)` of each range of cluster `c`'s `CLUSTER SLOTS`, as a
    /// running member answers it.
    fn slot_owners(&self, c: usize) -> io::Result<Vec<(i64, i64, usize)>> {
        let ranges: Vec<(i64, i64, String, u16)> = self.ask_any(c, |conn| {
            let value: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(conn)?;
            Ok(slot_ranges(&value))
        })?;
        ranges
            .into_iter()
            .map(|(start, end, _, port)| {
                let m = self.clusters[c]
                    .iter()
                    .position(|p| p.port() == port)
                    .ok_or_else(|| {
                        io::Error::other(format!("port {port} is not a member of cluster {c}"))
                    })?;
                Ok((start, end, m))
            })
            .collect()
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
        let slots = usize::from(crate::key::SLOTS);
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
        let deadline = Instant::now() + START_TIMEOUT;
        for &m in members {
            loop {
                let text: Option<String> = self
                    .connect(c, m)
                    .ok()
                    .and_then(|mut conn| redis::cmd("CLUSTER").arg("INFO").query(&mut conn).ok());
                if text.as_deref().is_some_and(|t| ok(t, m)) {
                    break;
                }
                if Instant::now() > deadline {
                    let log = self.clusters[c][m].logs();
                    let tail: Vec<&str> = log.lines().rev().take(20).collect();
                    return Err(io::Error::other(format!(
                        "cluster {c} member {m} not ready in time: {text:?}; its log ends:\n{}",
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }
}

/// `(start, end, host, port)` of each range of a `CLUSTER SLOTS` answer.
fn slot_ranges(value: &redis::Value) -> Vec<(i64, i64, String, u16)> {
    let redis::Value::Array(ranges) = value else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|r| {
            let redis::Value::Array(parts) = r else {
                return None;
            };
            let (Some(redis::Value::Int(s)), Some(redis::Value::Int(e))) =
                (parts.first(), parts.get(1))
            else {
                return None;
            };
            let redis::Value::Array(primary) = parts.get(2)? else {
                return None;
            };
            let host = match primary.first()? {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            };
            let redis::Value::Int(port) = primary.get(1)? else {
                return None;
            };
            Some((*s, *e, host, u16::try_from(*port).ok()?))
        })
        .collect()
}
