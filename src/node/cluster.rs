//! A node that is a whole Redis or Valkey Cluster (docs/DESIGN.md, "Cluster nodes"): which
//! primary serves a key's hash slot, learned from `CLUSTER SLOTS` and from `MOVED` answers,
//! and one [`Shard`] (connection) per primary.
//!
//! Unlike a cluster client, nothing here retries, and only a compare-and-delete follows a
//! redirect (once, `redirect`): a request is sent once,
//! to the primary the map names, on that primary's one connection (ordering invariants 1 and
//! 2 hold per shard, and every request about one key goes to one shard until the map
//! changes). A `MOVED` answer means the command was not run: it is one "no" of this node,
//! the map is corrected at once (and refreshed in the background), and the next request goes
//! to the new primary. So no redirect or retry can carry an acquire past the rollback or
//! release that undoes it, and the per-node deadline bounds everything a node request does.
//! The map moves a slot to another primary only after the cluster says so; a slot moves with
//! its keys (a migration), or in a failover, which is this node's fault (it may forget keys,
//! docs/SAFETY.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::{RedisError, ServerErrorKind, Value};
use tokio::sync::Notify;

use crate::error::{FailureKind, NodeFailure};
use crate::rules::key::SLOTS;

use super::shard::Shard;

/// The least time between two background refreshes of the map.
const REFRESH_EVERY: Duration = Duration::from_millis(100);

/// The shards of one cluster and which of them serves each slot.
pub(crate) struct Cluster {
    /// The node's own address: its credentials and TLS settings are every shard's.
    seed: Arc<Shard>,
    connect_timeout: Duration,
    state: Mutex<Topology>,
    refreshing: AtomicBool,
    /// Wakes the callers waiting for the first map.
    refreshed: Notify,
    /// `MOVED` and `ASK` answers seen (for the figures of the docs).
    redirects: AtomicU64,
    /// The seed's node id (`CLUSTER MYID`): where the map names it, the seed's own shard
    /// serves, whatever address the cluster announces for it (one connection per server).
    seed_id: std::sync::OnceLock<String>,
}

#[derive(Default)]
struct Topology {
    /// Every shard ever sent to, by `host:port`: a primary keeps its one connection across
    /// refreshes (its requests stay in order).
    known: HashMap<String, Arc<Shard>>,
    /// The primary serving each slot, when a map was read.
    owners: Option<Owners>,
    /// Why the latest refresh found no map.
    failure: Option<NodeFailure>,
    refreshed_at: Option<tokio::time::Instant>,
    /// The latest answer of a member said the cluster serves no slot (none assigned yet).
    slotless: bool,
}

/// The primary serving each of the [`SLOTS`] slots.
type Owners = Arc<[Option<Arc<Shard>>]>;

impl Cluster {
    pub(super) fn new(seed: Arc<Shard>, connect_timeout: Duration) -> Cluster {
        let mut topology = Topology::default();
        topology
            .known
            .insert(host_port(&seed.addr.endpoint), seed.clone());
        Cluster {
            seed,
            connect_timeout,
            state: Mutex::new(topology),
            refreshing: AtomicBool::new(false),
            refreshed: Notify::new(),
            redirects: AtomicU64::new(0),
            seed_id: std::sync::OnceLock::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Topology> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `MOVED` and `ASK` answers seen so far.
    pub(crate) fn redirects(&self) -> u64 {
        self.redirects.load(Ordering::Relaxed)
    }

    /// The shard serving `slot`; without a map yet, waits for the first (the caller bounds
    /// the wait).
    pub(super) async fn shard(
        self: &Arc<Self>,
        slot: u16,
        node: &str,
    ) -> Result<Arc<Shard>, NodeFailure> {
        let waited = self.refreshed.notified();
        {
            let state = self.state();
            if let Some(owners) = &state.owners {
                if let Some(Some(shard)) = owners.get(usize::from(slot)) {
                    return Ok(shard.clone());
                }
                drop(state);
                self.refresh();
                return Err(NodeFailure::new(
                    node,
                    FailureKind::Server,
                    format!("no primary of the cluster serves slot {slot} (cluster down?)"),
                ));
            }
        }
        self.refresh();
        waited.await;
        let state = self.state();
        match (&state.owners, &state.failure) {
            (Some(owners), _) => {
                owners
                    .get(usize::from(slot))
                    .cloned()
                    .flatten()
                    .ok_or_else(|| {
                        NodeFailure::new(
                            node,
                            FailureKind::Server,
                            format!("no primary of the cluster serves slot {slot} (cluster down?)"),
                        )
                    })
            }
            (None, Some(failure)) => Err(NodeFailure::new(
                node,
                failure.kind(),
                format!(
                    "the cluster's slot map could not be read: {} (member {})",
                    failure.detail(),
                    failure.node()
                ),
            )),
            (None, None) => Err(NodeFailure::new(
                node,
                FailureKind::Connection,
                "the cluster's slot map could not be read",
            )),
        }
    }

    /// The shard serving `slot` in the current map, if one was read.
    pub(super) fn serving(&self, slot: u16) -> Option<Arc<Shard>> {
        self.state()
            .owners
            .as_ref()?
            .get(usize::from(slot))?
            .clone()
    }

    /// Waits for the first map (bounded by the caller): `Ok` once one was read, or when the
    /// cluster answered that it serves no slot yet (its node costs its vote until slots are
    /// assigned; every use reads the map again).
    pub(super) async fn first_map(self: &Arc<Self>) -> Result<(), NodeFailure> {
        let _ = self.shard(0, &self.seed.addr.display).await;
        let state = self.state();
        if state.owners.is_some() || state.slotless {
            return Ok(());
        }
        Err(state.failure.clone().unwrap_or_else(|| {
            NodeFailure::new(
                &self.seed.addr.display,
                FailureKind::Connection,
                "the cluster's slot map could not be read",
            )
        }))
    }

    /// The primaries of the current map (none before one was read).
    pub(super) fn known_primaries(&self) -> Vec<Arc<Shard>> {
        let state = self.state();
        let mut primaries: Vec<Arc<Shard>> = Vec::new();
        for s in state.owners.iter().flat_map(|o| o.iter().flatten()) {
            if !primaries.iter().any(|p| Arc::ptr_eq(p, s)) {
                primaries.push(s.clone());
            }
        }
        primaries
    }

    /// Reads an error answer: a `MOVED` corrects the map at once; a `MOVED`, `ASK` or an
    /// answer that says the cluster changed (`CLUSTERDOWN`, `TRYAGAIN`, `MASTERDOWN`,
    /// `READONLY`) or a broken connection starts a refresh. Nothing is re-sent.
    pub(super) fn observe(self: &Arc<Self>, e: &RedisError) {
        let changed = match e.kind() {
            redis::ErrorKind::Server(ServerErrorKind::Moved) => {
                self.redirects.fetch_add(1, Ordering::Relaxed);
                if let Some((to, slot)) = e.redirect_node() {
                    self.moved(slot, to);
                }
                true
            }
            redis::ErrorKind::Server(ServerErrorKind::Ask) => {
                self.redirects.fetch_add(1, Ordering::Relaxed);
                true
            }
            redis::ErrorKind::Server(
                ServerErrorKind::ClusterDown
                | ServerErrorKind::TryAgain
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly,
            ) => true,
            _ => e.is_io_error() || e.is_connection_dropped(),
        };
        if changed {
            self.refresh();
        }
    }

    /// A connection to a shard could not be made: the map may be stale (a failover).
    pub(super) fn unreachable(self: &Arc<Self>) {
        self.refresh();
    }

    /// `slot` is served by `to` (`host:port`) now (applied once a map was read: before, the
    /// map read by the refresh decides).
    fn moved(&self, slot: u16, to: &str) {
        // A slot out of range, or no usable address (`MOVED n :port`, `MOVED n ?:port`: an
        // unknown endpoint): the refresh this answer starts decides.
        if slot >= SLOTS || self.state().owners.is_none() {
            return;
        }
        let Some(shard) = self.redirect_target(to) else {
            return;
        };
        let mut state = self.state();
        let Some(owners) = &state.owners else { return };
        if owners[usize::from(slot)]
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &shard))
        {
            return;
        }
        let mut updated = owners.to_vec();
        updated[usize::from(slot)] = Some(shard);
        state.owners = Some(updated.into());
    }

    /// The shard a redirect to `to` (`host:port`) names, unless it names no usable address:
    /// no host, or `?` (an unknown endpoint, which a member sends when it does not know the
    /// address it should announce).
    pub(super) fn redirect_target(&self, to: &str) -> Option<Arc<Shard>> {
        let (host, _) = to.rsplit_once(':')?;
        if matches!(host, "" | "?") {
            return None;
        }
        self.shard_at(to)
    }

    /// The shard at `host:port`, made on first use with the seed's credentials and TLS.
    fn shard_at(&self, at: &str) -> Option<Arc<Shard>> {
        let mut state = self.state();
        if let Some(shard) = state.known.get(at) {
            return Some(shard.clone());
        }
        let (host, port) = at.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addr = self.seed.addr.at(host, port).ok()?;
        let shard = Arc::new(Shard::new(Arc::new(addr)));
        state.known.insert(at.to_string(), shard.clone());
        Some(shard)
    }

    /// The seed's shard, known from now on also by the address the cluster announces for it.
    fn seed_at(&self, at: &str) -> Arc<Shard> {
        self.state().known.insert(at.to_string(), self.seed.clone());
        self.seed.clone()
    }

    /// Reads the map again in the background, unless a refresh is under way or one ended
    /// less than [`REFRESH_EVERY`] ago (the first map is always read).
    fn refresh(self: &Arc<Self>) {
        {
            let state = self.state();
            if state.owners.is_some()
                && state
                    .refreshed_at
                    .is_some_and(|at| at.elapsed() < REFRESH_EVERY)
            {
                return;
            }
        }
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut refresh = RefreshInFlight {
            cluster: self.clone(),
            result: None,
        };
        tokio::spawn(async move {
            let result = refresh.cluster.read_map().await;
            refresh.result = Some(result);
            drop(refresh);
        });
    }

    /// Asks the seed and every answering primary of the current map for `CLUSTER SLOTS` at
    /// once, and takes the first answer that is a map. Until the seed's node id is known
    /// (`CLUSTER MYID`, asked with its first map), only the seed is asked, and a map is taken
    /// only with it: the seed's own slots must go on the seed's connection, the one a node
    /// not yet known to be a cluster sent its requests on (two connections to one server
    /// could run a rollback before the acquire it undoes).
    async fn read_map(self: &Arc<Self>) -> Result<Owners, NodeFailure> {
        let mut asked: Vec<Arc<Shard>> = vec![self.seed.clone()];
        if self.seed_id.get().is_some() {
            if let Some(owners) = &self.state().owners {
                for s in owners.iter().flatten() {
                    // Not a primary that stopped answering: its queue would only grow.
                    let silent = s.is_connected() && s.answering(self.connect_timeout).is_none();
                    if !silent && !asked.iter().any(|a| Arc::ptr_eq(a, s)) {
                        asked.push(s.clone());
                    }
                }
            }
        }
        let limit = self.connect_timeout;
        let mut answers: FuturesUnordered<_> = asked
            .into_iter()
            .map(|shard| async move {
                match tokio::time::timeout(limit, self.ask_map(&shard)).await {
                    Ok(answer) => answer.map(|v| (shard, v)),
                    Err(_) => Err(NodeFailure::new(
                        &shard.addr.display,
                        FailureKind::Timeout,
                        format!("CLUSTER SLOTS: no answer within {limit:?}"),
                    )),
                }
            })
            .collect();
        let mut last = None;
        while let Some(answer) = answers.next().await {
            match answer.and_then(|(shard, v)| self.owners_from(&shard, &v)) {
                Ok(owners) => return Ok(owners),
                Err(f) => last = Some(f),
            }
        }
        Err(last.unwrap_or_else(|| {
            NodeFailure::new(
                &self.seed.addr.display,
                FailureKind::Connection,
                "no member of the cluster answered CLUSTER SLOTS",
            )
        }))
    }

    /// `CLUSTER SLOTS` of one member (and, the first time, the seed's `CLUSTER MYID`); a
    /// broken connection is dropped, to be made again by the next read.
    async fn ask_map(&self, shard: &Arc<Shard>) -> Result<Value, NodeFailure> {
        let (generation, mut link) = shard.connection(self.connect_timeout).await?;
        let failed = |e: RedisError| {
            if e.is_io_error() {
                shard.forget(generation);
            }
            super::connection::classify(&shard.addr, &e)
        };
        if Arc::ptr_eq(shard, &self.seed) && self.seed_id.get().is_none() {
            let mut myid = redis::cmd("CLUSTER");
            myid.arg("MYID");
            let id = link
                .conn
                .send_packed_command(&myid)
                .await
                .and_then(super::send::top_level_error)
                .map_err(failed)?;
            let Some(id) = text(&id) else {
                return Err(NodeFailure::new(
                    &shard.addr.display,
                    FailureKind::Protocol,
                    format!("CLUSTER MYID answered {id:?}"),
                ));
            };
            let _ = self.seed_id.set(id);
        }
        let mut slots = redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        link.conn
            .send_packed_command(&slots)
            .await
            .and_then(super::send::top_level_error)
            .map_err(failed)
    }

    /// The owners of every slot from a `CLUSTER SLOTS` answer of `asked`.
    fn owners_from(&self, asked: &Shard, answer: &Value) -> Result<Owners, NodeFailure> {
        let bad = |what: &str| {
            NodeFailure::new(
                &asked.addr.display,
                FailureKind::Protocol,
                format!("CLUSTER SLOTS answered {what}"),
            )
        };
        let Value::Array(ranges) = answer else {
            return Err(bad("something other than a list"));
        };
        if ranges.is_empty() {
            // A cluster whose slots are not assigned yet, or a member that lost its cluster
            // configuration: not a map to route by, and not a server that is not Redis (its
            // node costs its vote until a map is read; every use reads again).
            self.state().slotless = true;
            return Err(NodeFailure::new(
                &asked.addr.display,
                FailureKind::Server,
                "CLUSTER SLOTS answered no slot at all (none assigned yet?)",
            ));
        }
        let mut owners: Vec<Option<Arc<Shard>>> = vec![None; usize::from(SLOTS)];
        let asked_host = host_port(&asked.addr.endpoint)
            .rsplit_once(':')
            .map(|(h, _)| h.to_string())
            .unwrap_or_default();
        for range in ranges {
            let Value::Array(parts) = range else {
                return Err(bad("a range that is not a list"));
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                return Err(bad("a range without its bounds and primary"));
            };
            let (Some(host), Some(Value::Int(port))) =
                (primary.first().and_then(text), primary.get(1))
            else {
                return Err(bad("a primary without host and port"));
            };
            // An empty or unknown endpoint is the member that answered.
            let host = match host.as_str() {
                "" | "?" => asked_host.clone(),
                h => h.to_string(),
            };
            let at = match host.contains(':') {
                true => format!("[{host}]:{port}"),
                false => format!("{host}:{port}"),
            };
            let seed = primary
                .get(2)
                .and_then(text)
                .is_some_and(|id| self.seed_id.get() == Some(&id));
            let shard = match seed {
                true => self.seed_at(&at),
                false => self
                    .shard_at(&at)
                    .ok_or_else(|| bad(&format!("a primary at {at} that is not an address")))?,
            };
            let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else {
                return Err(bad("a slot out of range"));
            };
            if start > end || end >= SLOTS {
                return Err(bad("a slot out of range"));
            }
            for slot in start..=end {
                owners[usize::from(slot)] = Some(shard.clone());
            }
        }
        Ok(owners.into())
    }

    /// Where a pub/sub connection is made (a cluster delivers `PUBLISH` to the subscribers of
    /// every member): a primary that is not in `avoid` (members whose subscription dropped,
    /// stayed silent or could not be made, the latest last), one with an open connection
    /// first; when every primary is avoided, the one avoided longest ago; the seed without a
    /// map. A member's open lock connection is not taken as proof that it answers: a killed
    /// member's connection counts as open until a request fails on it.
    pub(super) fn pubsub_shard(&self, avoid: &[String]) -> Arc<Shard> {
        let state = self.state();
        let mut primaries: Vec<&Arc<Shard>> = Vec::new();
        for shard in state.owners.iter().flat_map(|o| o.iter().flatten()) {
            if !primaries.iter().any(|p| Arc::ptr_eq(p, shard)) {
                primaries.push(shard);
            }
        }
        let fresh = |s: &Arc<Shard>| !avoid.contains(&s.addr.display);
        let chosen = primaries
            .iter()
            .find(|s| fresh(s) && s.is_connected())
            .or_else(|| primaries.iter().find(|s| fresh(s)))
            .or_else(|| {
                avoid
                    .iter()
                    .find_map(|a| primaries.iter().find(|s| &s.addr.display == a))
            });
        chosen.map_or_else(|| self.seed.clone(), |s| Arc::clone(s))
    }
}

/// Publishes a refresh's outcome when it ends, also when its task is dropped before finishing
/// (its runtime shut down): the flag is never left set with nobody to clear it, and the
/// callers waiting for the first map are woken.
struct RefreshInFlight {
    cluster: Arc<Cluster>,
    result: Option<Result<Owners, NodeFailure>>,
}

impl Drop for RefreshInFlight {
    fn drop(&mut self) {
        let cluster = &self.cluster;
        {
            let mut state = cluster.state();
            match self.result.take() {
                Some(Ok(owners)) => {
                    state.owners = Some(owners);
                    state.failure = None;
                    state.slotless = false;
                }
                Some(Err(failure)) => state.failure = Some(failure),
                None => {
                    state.failure = Some(NodeFailure::new(
                        &cluster.seed.addr.display,
                        FailureKind::Connection,
                        "map read abandoned (runtime shut down)",
                    ))
                }
            }
            state.refreshed_at = Some(tokio::time::Instant::now());
        }
        cluster.refreshing.store(false, Ordering::Release);
        cluster.refreshed.notify_waiters();
    }
}

/// `host:port` of an endpoint (`host:port/db`).
pub(super) fn host_port(endpoint: &str) -> String {
    endpoint
        .rsplit_once('/')
        .map_or(endpoint, |(hp, _)| hp)
        .to_string()
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::address::NodeAddr;

    fn cluster() -> Cluster {
        let seed = NodeAddr::parse("redis://127.0.0.1:7000").expect("an address");
        let cluster = Cluster::new(Arc::new(Shard::new(Arc::new(seed))), Duration::from_secs(1));
        cluster.state().owners = Some(vec![None; usize::from(SLOTS)].into());
        cluster
    }

    #[test]
    fn a_redirect_to_an_unknown_endpoint_makes_no_shard_and_moves_no_slot() {
        let cluster = cluster();
        for to in ["?:7001", ":7001", "7001"] {
            cluster.moved(12, to);
            assert!(cluster.redirect_target(to).is_none(), "{to}");
        }
        assert_eq!(cluster.state().known.len(), 1, "the seed only");
        assert!(cluster.serving(12).is_none());
        cluster.moved(12, "127.0.0.1:7001");
        assert!(cluster
            .serving(12)
            .is_some_and(|s| s.addr.display == "redis://127.0.0.1:7001"));
    }
}
