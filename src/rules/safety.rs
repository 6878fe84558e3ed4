//! What weakens a lock's safety on its nodes: one set of rules, which `build()` applies to the
//! nodes it connects to (refusing, or warning in the log) and `quorum-lock check` reports
//! (docs/DESIGN.md, "Build-time checks"). Pure: the callers query the nodes (`INFO`, `ROLE`,
//! `CONFIG GET appendfsync`) and hand the replies to [`NodeInfo::from_replies`].

use std::collections::HashMap;

use redis::Value;

use crate::error::Error;

/// What a node said about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The node's address, redacted.
    pub node: String,
    /// The server's run id (`INFO server`): two addresses of one server share it.
    pub run_id: Option<String>,
    /// The server's version: `valkey_version` on Valkey (whose `redis_version` is the Redis
    /// version it is compatible with), else `redis_version`.
    pub version: Option<String>,
    /// The server: `valkey` or `redis` (`server_name`, which Redis does not have).
    pub server: Option<String>,
    /// `master`, `slave` (`ROLE`, else `INFO replication`).
    pub role: Option<String>,
    /// Whether AOF persistence is on.
    pub aof: Option<bool>,
    /// `appendfsync`; `None` when `CONFIG GET` was refused (renamed away, or denied by an ACL).
    pub appendfsync: Option<String>,
    /// `maxmemory-policy`.
    pub maxmemory_policy: Option<String>,
    /// Under `appendfsync everysec`, whether the server answered `WAITAOF` for a write before
    /// its fsync could have run (a server defect, see docs/SAFETY.md "Durable votes"): read
    /// only when local durable votes are asked for (`build`) or reported (`quorum-lock
    /// check`); `None` when not read or when the probe could not tell.
    pub waitaof_early: Option<bool>,
    /// When the node is a Redis or Valkey Cluster (`cluster_enabled:1`): its shape. The
    /// persistence and eviction fields above are then the weakest of its primaries'.
    pub cluster: Option<ClusterInfo>,
}

/// What a node that is a whole cluster is made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterInfo {
    /// The primaries serving slots (`host:port`).
    pub primaries: Vec<String>,
    /// Replicas of those primaries.
    pub replicas: usize,
    /// Slots no primary serves (0 in a healthy cluster).
    pub uncovered_slots: usize,
    /// The ids of every member the member asked knows (`CLUSTER NODES`): two nodes sharing
    /// one are one cluster.
    pub members: Vec<String>,
    /// `cluster_state` (`CLUSTER INFO`): `ok`, or `fail` when the cluster refuses keys.
    pub state: Option<String>,
    /// Members that do not answer, each with why: primaries that did not answer the check,
    /// and members the cluster itself counts as failed (`CLUSTER NODES` flags `fail`,
    /// `fail?`, `noaddr`). A silent primary costs the node the keys of its slots only.
    pub not_answering: Vec<String>,
}

impl NodeInfo {
    /// Why this node cannot give durable votes of the kind `durable`
    /// ([`Builder::durable_votes`](crate::Builder::durable_votes)), if it cannot: before
    /// Redis or Valkey 7.2 (no `WAITAOF`), a cluster, or (local votes) AOF off.
    pub fn durable_votes_refused(&self, durable: crate::DurableVotes) -> Option<String> {
        crate::rules::durable::why_not(self, durable)
    }
}

impl ClusterInfo {
    /// Reads a member's `CLUSTER SLOTS` and `CLUSTER NODES` answers.
    pub fn from_replies(slots: &Value, nodes: &Value) -> ClusterInfo {
        let mut info = ClusterInfo::default();
        let mut covered = 0usize;
        if let Value::Array(ranges) = slots {
            for range in ranges {
                let Value::Array(parts) = range else { continue };
                if let (Some(Value::Int(start)), Some(Value::Int(end))) =
                    (parts.first(), parts.get(1))
                {
                    // Odd answers (out of range, reversed) count for nothing.
                    let span = (*end)
                        .min(i64::from(crate::rules::key::SLOTS - 1))
                        .checked_sub((*start).max(0))
                        .and_then(|d| d.checked_add(1))
                        .and_then(|n| usize::try_from(n).ok())
                        .unwrap_or(0);
                    covered = covered.saturating_add(span);
                }
                if let Some(Value::Array(primary)) = parts.get(2) {
                    if let (Some(host), Some(Value::Int(port))) =
                        (primary.first().and_then(string), primary.get(1))
                    {
                        let at = format!("{host}:{port}");
                        if !info.primaries.contains(&at) {
                            info.primaries.push(at);
                        }
                    }
                }
                info.replicas += parts.len().saturating_sub(3);
            }
        }
        info.uncovered_slots = usize::from(crate::rules::key::SLOTS).saturating_sub(covered);
        let listing = string(nodes).unwrap_or_default();
        info.members = listing
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect();
        // `<id> <ip:port@cport[,hostname]> <flags> ...`: the members the cluster counts failed.
        for line in listing.lines() {
            let mut fields = line.split_whitespace().skip(1);
            let (Some(at), Some(flags)) = (fields.next(), fields.next()) else {
                continue;
            };
            let failed = flags
                .split(',')
                .find(|f| matches!(*f, "fail" | "fail?" | "noaddr"));
            if let Some(flag) = failed {
                let at = at.split(['@', ',']).next().unwrap_or(at);
                info.not_answering
                    .push(format!("{at} (the cluster flags it {flag})"));
            }
        }
        info
    }

    /// Reads a member's `CLUSTER INFO` answer (`cluster_state`).
    pub fn read_state(&mut self, cluster_info: &Value) {
        self.state = string(cluster_info).and_then(|text| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix("cluster_state:"))
                .map(str::to_string)
        });
    }

    /// Adds the members that did not answer a check (`host:port (why)`), each once: one the
    /// cluster flags failed is named with this check's reason instead.
    pub fn add_not_answering(&mut self, silent: Vec<String>) {
        for member in silent {
            let at = member.split(' ').next().unwrap_or_default().to_string();
            self.not_answering
                .retain(|m| m.split(' ').next() != Some(at.as_str()));
            self.not_answering.push(member);
        }
    }
}

impl NodeInfo {
    /// Folds a cluster primary's answers into the node's: each setting becomes the weaker of
    /// the two (no AOF over AOF, a lazier `appendfsync`, an evicting policy).
    pub fn weakest_with(&mut self, primary: &NodeInfo) {
        match (self.aof, primary.aof) {
            (_, Some(false)) => self.aof = Some(false),
            (None, other) => self.aof = other,
            _ => {}
        }
        // Unknown (None) or lazier than `always` on any primary is the node's.
        if matches!(self.appendfsync.as_deref(), Some("always"))
            && primary.appendfsync.as_deref() != Some("always")
        {
            self.appendfsync = primary.appendfsync.clone();
        }
        if !evicting(self.maxmemory_policy.as_deref())
            && evicting(primary.maxmemory_policy.as_deref())
        {
            self.maxmemory_policy = primary.maxmemory_policy.clone();
        }
    }
}

/// A member id both nodes' clusters list, when both are clusters.
fn shared_member<'a>(a: &'a NodeInfo, b: &NodeInfo) -> Option<&'a String> {
    let theirs = &b.cluster.as_ref()?.members;
    a.cluster
        .as_ref()?
        .members
        .iter()
        .find(|m| theirs.contains(m))
}

fn evicting(policy: Option<&str>) -> bool {
    policy.is_some_and(|p| p.starts_with("allkeys") || p.starts_with("volatile"))
}

impl NodeInfo {
    /// Reads a node's replies: `INFO` (all sections), `ROLE` (if it was allowed) and
    /// `CONFIG GET appendfsync` (if it was allowed).
    pub fn from_replies(
        node: &str,
        info: &Value,
        role: Option<&Value>,
        appendfsync: Option<&Value>,
    ) -> NodeInfo {
        let text = match info {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::VerbatimString { text, .. } => text.clone(),
            Value::SimpleString(s) => s.clone(),
            _ => String::new(),
        };
        let fields: HashMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k, v.trim()))
            .collect();
        let field = |k: &str| fields.get(k).map(|v| (*v).to_string());
        let role = match role {
            Some(Value::Array(items)) => items.first().and_then(string),
            _ => None,
        }
        .or_else(|| field("role"));
        let appendfsync = match appendfsync {
            Some(Value::Array(items)) => items.get(1).and_then(string),
            _ => None,
        };
        NodeInfo {
            node: node.to_string(),
            run_id: field("run_id"),
            version: field("valkey_version").or_else(|| field("redis_version")),
            server: Some(match field("valkey_version") {
                Some(_) => field("server_name").unwrap_or_else(|| "valkey".into()),
                None => field("server_name").unwrap_or_else(|| "redis".into()),
            }),
            role,
            aof: fields.get("aof_enabled").map(|v| *v == "1"),
            appendfsync,
            maxmemory_policy: field("maxmemory_policy"),
            waitaof_early: None,
            cluster: (field("cluster_enabled").as_deref() == Some("1")).then(ClusterInfo::default),
        }
    }
}

fn string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// How much a finding weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Severity {
    /// The lock cannot be safe with it: `build()` refuses such nodes.
    Refused,
    /// It weakens the lock's safety under some faults: `build()` logs a warning.
    Warning,
    /// A part of the node does not answer now (a cluster member, a cluster in state `fail`):
    /// availability, not configuration; `build()` logs a warning.
    Unavailable,
}

/// What was found wrong with one node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// How much it weighs.
    pub severity: Severity,
    /// The node (redacted address).
    pub node: String,
    /// What, and what to do about it, in plain words.
    pub message: String,
    /// The other node, when the finding is about two (the same server twice).
    pub same_as: Option<String>,
}

/// The rules: the same server listed twice (one run id) would count twice toward the quorum;
/// a replica is not an independent master; without AOF and `appendfsync always` a restarted
/// node forgets its locks; an evicting `maxmemory-policy` may evict them (they have a TTL, so
/// `volatile-*` may too).
pub fn findings(nodes: &[NodeInfo]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for n in nodes {
        let mut add = |severity, message: String, same_as: Option<&str>| {
            out.push(Finding {
                severity,
                node: n.node.clone(),
                message,
                same_as: same_as.map(str::to_string),
            });
        };
        if let Some(run_id) = &n.run_id {
            if let Some(first) = seen.insert(run_id, &n.node) {
                add(
                    Severity::Refused,
                    format!(
                        "the same redis server as {first} (run_id {run_id}): it would count twice toward the quorum"
                    ),
                    Some(first),
                );
            }
        }
        if let Some(cluster) = &n.cluster {
            let other = nodes
                .iter()
                .take_while(|o| o.node != n.node)
                .find_map(|o| shared_member(o, n).map(|m| (o, m)));
            if let Some((first, member)) = other {
                add(
                    Severity::Refused,
                    format!(
                        "a member of the same cluster as {} (member {member}): one cluster is one node; list it once",
                        first.node
                    ),
                    Some(&first.node),
                );
            }
            if cluster.replicas > 0 {
                add(
                    Severity::Warning,
                    format!(
                        "a cluster with {} replicas: replication is asynchronous, so a failover inside it may lose the locks of its last moments; it counts against the quorum's tolerance like a restart without persistence",
                        cluster.replicas
                    ),
                    None,
                );
            }
            if let Some(state) = cluster.state.as_deref().filter(|s| *s != "ok") {
                add(
                    Severity::Unavailable,
                    format!(
                        "cluster_state {state}: the cluster refuses keys until it is ok again (a primary down without a replica to take over, or slots not assigned)"
                    ),
                    None,
                );
            }
            for member in &cluster.not_answering {
                add(
                    Severity::Unavailable,
                    format!(
                        "member {member} does not answer: the keys of its slots fail on this node until it does"
                    ),
                    None,
                );
            }
            if cluster.uncovered_slots > 0 {
                add(
                    Severity::Warning,
                    format!(
                        "{} hash slots are served by no primary: keys in them fail on this node",
                        cluster.uncovered_slots
                    ),
                    None,
                );
            }
            if nodes.len() == 1 {
                add(
                    Severity::Warning,
                    "one cluster is the whole lock service: single-instance safety (a failover inside it can lose a lock while it is held); list independent nodes for a quorum".into(),
                    None,
                );
            }
        }
        if let Some(role) = n
            .role
            .as_deref()
            .filter(|r| *r != "master" && n.cluster.is_none())
        {
            add(
                Severity::Refused,
                format!("role {role}: every node must be an independent master"),
                None,
            );
        }
        match (n.aof, n.appendfsync.as_deref()) {
            (Some(false), _) => add(
                Severity::Warning,
                "no AOF (appendonly no): after a restart this node forgets its locks; enable appendonly with appendfsync always, or delay restarts by more than the longest TTL".into(),
                None,
            ),
            (Some(true), Some("always")) | (None, _) => {}
            (Some(true), Some(other)) => add(
                Severity::Warning,
                format!("appendfsync {other}: after a crash this node may forget the locks of the last second; set appendfsync always"),
                None,
            ),
            (Some(true), None) => add(
                Severity::Warning,
                "appendfsync unknown (CONFIG GET refused): it must be always for a restart to keep the locks".into(),
                None,
            ),
        }
        if let Some(policy) = n.maxmemory_policy.as_deref().filter(|p| evicting(Some(p))) {
            add(
                Severity::Warning,
                format!("maxmemory-policy {policy} may evict lock entries early; use noeviction"),
                None,
            );
        }
    }
    out
}

/// What a client's build does with the findings: a server listed twice is refused
/// ([`Error::DuplicateNode`]), and so is a replica ([`Error::ReplicaNode`]); every other
/// finding is logged as a warning.
pub(crate) fn refuse_or_warn(nodes: &[NodeInfo]) -> crate::Result<()> {
    refuse_or_warn_findings(nodes, |_| true)
}

/// The check of a node whose build-time probe answered after the client was built: the rules
/// of [`refuse_or_warn`] for `late` against the nodes checked before it (`earlier`), its own
/// findings only.
pub(crate) fn refuse_or_warn_late(earlier: &[NodeInfo], late: NodeInfo) -> crate::Result<()> {
    let node = late.node.clone();
    let mut all = earlier.to_vec();
    all.push(late);
    refuse_or_warn_findings(&all, |f| f.node == node)
}

/// The rules of [`refuse_or_warn`], applied to the findings over `nodes` that `wanted` picks.
fn refuse_or_warn_findings(
    nodes: &[NodeInfo],
    wanted: impl Fn(&Finding) -> bool,
) -> crate::Result<()> {
    for finding in findings(nodes).into_iter().filter(|f| wanted(f)) {
        match (finding.severity, finding.same_as) {
            (Severity::Refused, Some(first))
                if nodes
                    .iter()
                    .any(|i| i.node == finding.node && i.cluster.is_some()) =>
            {
                let of = |name: &str| nodes.iter().find(|i| i.node == name);
                let member = match (of(&first), of(&finding.node)) {
                    (Some(a), Some(b)) => shared_member(a, b).cloned().unwrap_or_default(),
                    _ => String::new(),
                };
                return Err(Error::SameCluster {
                    first,
                    second: finding.node,
                    member,
                });
            }
            (Severity::Refused, Some(first)) => {
                let run_id = nodes
                    .iter()
                    .find(|i| i.node == finding.node)
                    .and_then(|i| i.run_id.clone())
                    .unwrap_or_default();
                return Err(Error::DuplicateNode {
                    first,
                    second: finding.node,
                    run_id,
                });
            }
            (Severity::Refused, None) => return Err(Error::ReplicaNode { node: finding.node }),
            _ => tracing::warn!(node = %finding.node, "{}", finding.message),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(node: &str, text: &str) -> NodeInfo {
        NodeInfo::from_replies(
            node,
            &Value::BulkString(text.as_bytes().to_vec()),
            None,
            None,
        )
    }

    #[test]
    fn the_rules_refuse_duplicates_and_replicas_and_warn_about_persistence_and_eviction() {
        let safe = "run_id:a\r\nrole:master\r\naof_enabled:1\r\nmaxmemory_policy:noeviction\r\n";
        let mut a = info("n0", safe);
        a.appendfsync = Some("always".into());
        assert!(findings(std::slice::from_ref(&a)).is_empty());
        let mut twice = a.clone();
        twice.node = "n1".into();
        let found = findings(&[a.clone(), twice]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].severity, Severity::Refused);
        assert_eq!(found[0].same_as.as_deref(), Some("n0"));
        let replica = info(
            "n2",
            "run_id:b\r\nrole:slave\r\naof_enabled:0\r\nmaxmemory_policy:allkeys-lru\r\n",
        );
        let found = findings(&[replica]);
        let severities: Vec<Severity> = found.iter().map(|f| f.severity).collect();
        assert_eq!(
            severities,
            [Severity::Refused, Severity::Warning, Severity::Warning],
            "{found:?}"
        );
    }

    #[test]
    fn valkey_is_named_with_its_own_version_not_the_redis_one_it_is_compatible_with() {
        let valkey = info(
            "v",
            "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n",
        );
        assert_eq!(valkey.version.as_deref(), Some("8.1.8"));
        assert_eq!(valkey.server.as_deref(), Some("valkey"));
        let redis = info("r", "redis_version:7.0.15\r\n");
        assert_eq!(redis.version.as_deref(), Some("7.0.15"));
        assert_eq!(redis.server.as_deref(), Some("redis"));
    }

    #[test]
    fn a_cluster_in_state_fail_and_its_failed_members_are_findings_of_availability() {
        let nodes = Value::BulkString(
            b"a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-8191\n\
              b 127.0.0.1:7001@17001 master,fail - 0 0 2 connected 8192-16383\n"
                .to_vec(),
        );
        let mut shape = ClusterInfo::from_replies(&Value::Array(Vec::new()), &nodes);
        shape.read_state(&Value::BulkString(b"cluster_state:fail\r\n".to_vec()));
        shape.add_not_answering(vec!["127.0.0.1:7001 (connection failed: refused)".into()]);
        assert_eq!(shape.state.as_deref(), Some("fail"));
        assert_eq!(
            shape.not_answering,
            ["127.0.0.1:7001 (connection failed: refused)"]
        );
        let mut node = info("c", "role:master\r\ncluster_enabled:1\r\n");
        node.cluster = Some(shape);
        let found = findings(&[node.clone(), info("d", "role:master\r\n")]);
        let unavailable: Vec<&str> = found
            .iter()
            .filter(|f| f.severity == Severity::Unavailable)
            .map(|f| f.message.as_str())
            .collect();
        assert_eq!(unavailable.len(), 2, "{found:?}");
        assert!(unavailable[1].contains("127.0.0.1:7001"), "{found:?}");
    }
}
