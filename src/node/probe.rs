//! The check of one node, the one both [`build`](crate::Builder::build) and `quorum-lock
//! check` run (docs/DESIGN.md, "Build-time checks" and "Cluster nodes"): `INFO` and `CONFIG
//! GET appendfsync` of the server; for a cluster, its map, its state, the persistence of
//! every primary that answers, and every member that does not.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use crate::error::{FailureKind, NodeFailure};
use crate::rules::safety::{ClusterInfo, NodeInfo};

use super::send::{answered, SendError};
use super::shard::Shard;
use super::Node;

/// How long the probe's second `WAITAOF` waits (see [`Node::waitaof_early`]): several turns of
/// a server's timer (100 ms by default), well within the second between two fsyncs.
const PROBE_WAIT: Duration = Duration::from_millis(400);

impl Node {
    /// Connects to one node and reads what the safety rules need: `INFO` and `CONFIG GET
    /// appendfsync` (`ROLE` is not asked: `INFO` has the role, and an ACL may deny `ROLE`).
    ///
    /// A cluster node answers when the member it was given by answers (its `INFO`, `CLUSTER
    /// SLOTS`, `CLUSTER NODES`, `CLUSTER INFO`, each within `limit`); its other primaries
    /// are asked at once, and one that has not answered within `members_within` is listed in
    /// [`ClusterInfo::not_answering`], by name, with its persistence unknown: a silent
    /// primary costs the node the keys of its own slots only, never the whole node. A
    /// cluster that serves no slot yet answers too (every slot uncovered): it costs its vote
    /// until slots are assigned, and its map is read again on use.
    pub(crate) async fn probe(
        &self,
        limit: Duration,
        members_within: Duration,
    ) -> Result<NodeInfo, NodeFailure> {
        let home = self.home.clone();
        let mut info = match self.probe_one(&home, limit).await {
            Ok(info) => info,
            // A `rediss://` node silent through the check may be a server without TLS: a
            // configuration error to say, not a node to wait for.
            Err(f) if f.kind() == FailureKind::Timeout => {
                return Err(super::connection::tls_to_plain(&home.addr, limit)
                    .await
                    .unwrap_or(f))
            }
            Err(f) => return Err(f),
        };
        if info.cluster.is_none() {
            return Ok(info);
        }
        tokio::time::timeout(limit, self.probe_seed(&mut info, limit))
            .await
            .map_err(|_| self.no_answer_within(limit))??;
        self.probe_primaries(&mut info, members_within).await;
        Ok(info)
    }

    /// What the member a cluster node was given by says of its cluster: the map (the first,
    /// read here), `CLUSTER SLOTS`, `CLUSTER NODES` and `CLUSTER INFO`.
    async fn probe_seed(&self, info: &mut NodeInfo, limit: Duration) -> Result<(), NodeFailure> {
        let cluster = self.become_cluster().clone();
        // A cluster with no slot yet has no map: not a failure of the check (see `probe`).
        cluster.first_map().await?;
        let cluster_cmd = |what: &str| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg(what);
            cmd
        };
        let slots = self.query_within(&cluster_cmd("SLOTS"), limit).await?;
        let nodes = self.query_within(&cluster_cmd("NODES"), limit).await?;
        let state = self.query_within(&cluster_cmd("INFO"), limit).await?;
        // Not one server's: two nodes of one cluster are found by their members.
        info.run_id = None;
        let mut shape = ClusterInfo::from_replies(&slots, &nodes);
        shape.read_state(&state);
        info.cluster = Some(shape);
        Ok(())
    }

    /// The weakest persistence of the primaries of the map, each asked within `within`; the
    /// silent ones are named in the node's [`ClusterInfo::not_answering`].
    async fn probe_primaries(&self, info: &mut NodeInfo, within: Duration) {
        let primaries = match self.cluster.get() {
            Some(cluster) => cluster.known_primaries(),
            None => Vec::new(),
        };
        let asked = futures::future::join_all(
            primaries
                .iter()
                .map(|p| async move { (p, self.probe_one(p, within).await) }),
        )
        .await;
        let seed = info.clone();
        info.aof = None;
        info.appendfsync = Some("always".into());
        info.maxmemory_policy = None;
        let mut answered = false;
        let mut silent = Vec::new();
        for (primary, answer) in asked {
            match answer {
                Ok(read) => {
                    answered = true;
                    info.weakest_with(&read);
                }
                Err(failure) => silent.push(format!(
                    "{} ({}: {})",
                    super::cluster::host_port(&primary.addr.endpoint),
                    failure.kind(),
                    // Named once, in front.
                    failure
                        .detail()
                        .split(" (primary ")
                        .next()
                        .unwrap_or_default()
                )),
            }
        }
        if !answered {
            // No primary known, or none answered: the member given is what was read.
            info.aof = seed.aof;
            info.appendfsync = seed.appendfsync;
            info.maxmemory_policy = seed.maxmemory_policy;
        }
        if let Some(shape) = info.cluster.as_mut() {
            shape.add_not_answering(silent);
        }
    }

    /// Whether the server answers `WAITAOF 1 0` before its fsync under `appendfsync everysec`
    /// ([`NodeInfo::waitaof_early`]): a write and its `WAITAOF`, which waits for the next
    /// fsync (within a second); then at once a second write and a `WAITAOF` of
    /// [`PROBE_WAIT`], while a second connection sends a `PING` every 20 ms. The second
    /// write's fsync is a second after the first's, so a server that waits for it answers 0;
    /// one that confirms it has not waited. (The `PING`s keep the server's event loop
    /// turning: a server with the defect confirms at its next turn, which an idle server may
    /// take only at its next timer tick.) Each write and its `WAITAOF` go on one connection as
    /// one pipeline (`WAITAOF` waits for its connection's own writes); the probe key lives
    /// 5 s and is deleted. `None` when it could not tell (the first write was not fsynced
    /// within 1.5 s, or the node did not answer within `limit` plus the waits).
    pub(crate) async fn waitaof_early(&self, limit: Duration) -> Option<bool> {
        let key = format!("quorum-lock:durable-probe:{:016x}", rand::random::<u64>());
        let mut first = redis::pipe();
        first
            .cmd("SET")
            .arg(&key)
            .arg(1)
            .arg("PX")
            .arg(5000)
            .cmd("WAITAOF")
            .arg(1)
            .arg(0)
            .arg(1500);
        let mut second = redis::pipe();
        second
            .cmd("SET")
            .arg(&key)
            .arg(2)
            .arg("PX")
            .arg(5000)
            .cmd("WAITAOF")
            .arg(1)
            .arg(0)
            .arg(PROBE_WAIT.as_millis() as u64)
            .cmd("DEL")
            .arg(&key);
        let local = |answers: &[Value]| match answers.get(1) {
            Some(Value::Array(counts)) => match counts.first() {
                Some(Value::Int(n)) => Some(*n),
                _ => None,
            },
            _ => None,
        };
        let run = |pipe: redis::Pipeline, count: usize| async move {
            let (_, mut link) = self.connection(&self.home).await.ok()?;
            link.conn.send_packed_commands(&pipe, 0, count).await.ok()
        };
        let probe = async {
            let fsynced = local(&run(first, 2).await?)?;
            if fsynced < 1 {
                return None;
            }
            let mut other = self
                .home
                .addr
                .client
                .get_multiplexed_async_connection()
                .await
                .ok()?;
            let pings = async {
                loop {
                    let _: Result<Value, _> = redis::cmd("PING").query_async(&mut other).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            let early = tokio::select! {
                answers = run(second, 3) => local(&answers?)?,
                _ = pings => return None,
            };
            Some(early >= 1)
        };
        let bound = limit * 3 + Duration::from_millis(1500) + PROBE_WAIT;
        tokio::time::timeout(bound, probe).await.ok().flatten()
    }

    /// `INFO` and `CONFIG GET appendfsync` of one server, each bounded by `limit`.
    async fn probe_one(
        &self,
        shard: &Arc<Shard>,
        limit: Duration,
    ) -> Result<NodeInfo, NodeFailure> {
        let info = self.query_on(shard, &redis::cmd("INFO"), limit).await?;
        if !matches!(
            info,
            redis::Value::BulkString(_)
                | redis::Value::VerbatimString { .. }
                | redis::Value::SimpleString(_)
        ) {
            return Err(NodeFailure::new(
                self.name(),
                FailureKind::Protocol,
                format!("INFO answered {info:?}"),
            ));
        }
        // INFO does not show appendfsync; CONFIG GET may be renamed away or denied by an ACL, in
        // which case the setting stays unknown (and the warning says so).
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg("appendfsync");
        let appendfsync = self.query_on(shard, &get, limit).await.ok();
        Ok(NodeInfo::from_replies(
            self.name(),
            &info,
            None,
            appendfsync.as_ref(),
        ))
    }

    /// Sends one command to one server of the node, bounded by `limit` (connecting
    /// included): the node's own server as [`query_within`](Self::query_within) does, another
    /// primary of a cluster directly.
    async fn query_on(
        &self,
        shard: &Arc<Shard>,
        cmd: &Cmd,
        limit: Duration,
    ) -> Result<Value, NodeFailure> {
        if Arc::ptr_eq(shard, &self.home) {
            return self.query_within(cmd, limit).await;
        }
        let sent = async {
            let (generation, mut link) = self.connection(shard).await?;
            link.conn
                .send_packed_command(cmd)
                .await
                .map_err(SendError::from)
                .and_then(answered)
                .map_err(|e| self.failure(shard, generation, &e))
        };
        tokio::time::timeout(limit, sent)
            .await
            .map_err(|_| self.no_answer_within(limit))?
    }
}
