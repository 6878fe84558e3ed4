//! Durable votes (docs/DESIGN.md, "Durable votes"; `Builder::durable_votes`): a node's yes to
//! an acquire or an extend counts only once `WAITAOF` says the write reached the node's AOF
//! on disk (fsynced) or that many replicas. A node that restarts then still has every entry
//! whose vote was counted, even after a machine or kernel crash before its own fsync would
//! have come: a restart is not a forgetting fault.

use redis::Value;

use crate::error::Error;
use crate::rules::safety::NodeInfo;
use crate::scripts::Call;

/// Where a vote must be durable before it counts ([`Builder::durable_votes`]).
///
/// [`Builder::durable_votes`]: crate::Builder::durable_votes
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DurableVotes {
    /// Fsynced to the node's own AOF (`WAITAOF 1 0`): needs `appendonly yes` on the node.
    Local,
    /// Acknowledged by this many of the node's replicas' AOFs (`WAITAOF 0 n`), at least 1.
    Replica(u32),
}

impl DurableVotes {
    /// `Replica(0)` would confirm every vote at once: refused.
    pub(crate) fn check(self) -> crate::Result<()> {
        match self {
            DurableVotes::Replica(0) => Err(Error::InvalidConfig {
                field: "durable_votes",
                reason: "Replica(0) waits for no replica: give 1 or more, or Local".into(),
            }),
            _ => Ok(()),
        }
    }

    /// The `WAITAOF` that confirms a vote, waiting at most `timeout_ms`.
    pub(crate) fn wait_call(self, timeout_ms: u64) -> Call {
        match self {
            DurableVotes::Local => Call::wait_aof(1, 0, timeout_ms),
            DurableVotes::Replica(n) => Call::wait_aof(0, n, timeout_ms),
        }
    }

    /// Whether `WAITAOF`'s answer (`[local, replicas]`) makes the vote durable.
    pub(crate) fn confirmed_by(self, answer: &Value) -> bool {
        let Value::Array(counts) = answer else {
            return false;
        };
        let count = |i: usize| match counts.get(i) {
            Some(Value::Int(n)) => *n,
            _ => -1,
        };
        match self {
            DurableVotes::Local => count(0) >= 1,
            DurableVotes::Replica(n) => count(1) >= i64::from(n),
        }
    }
}

/// An answer that refuses (`SET NX`'s nil, a script's 0): nothing was written, nothing to
/// wait for.
pub(crate) fn refusal(answer: &Value) -> bool {
    matches!(answer, Value::Nil | Value::Int(0))
}

/// Why `info`'s node cannot give durable votes, if it cannot: a server older than Redis or
/// Valkey 7.2 (no `WAITAOF`), a cluster node (not supported), or, for [`DurableVotes::Local`],
/// AOF off.
pub(crate) fn why_not(info: &NodeInfo, durable: DurableVotes) -> Option<String> {
    let version = info.version.as_deref().unwrap_or("");
    if info.cluster.is_some() {
        Some("a cluster: durable votes are not supported on cluster nodes".into())
    } else if !at_least_7_2(version) {
        Some(format!(
            "{} {version} has no WAITAOF (Redis or Valkey 7.2 and later)",
            info.server.as_deref().unwrap_or("redis"),
        ))
    } else if durable == DurableVotes::Local && info.aof == Some(false) {
        Some("AOF is off (appendonly no): its votes fail until it is on".into())
    } else if durable == DurableVotes::Local {
        local_fsync(info)
    } else {
        None
    }
}

/// Whether a node's `WAITAOF 1 0` waits for its own fsync: under `appendfsync always` every
/// write is fsynced before its answer; under `everysec` only on a server whose `WAITAOF` was
/// seen to wait (before redis/redis#13793 Redis answered it once the write was in the file,
/// fsynced or not, and Valkey 8.1 still does); under `no` never (the OS flushes when it likes,
/// and such servers answer at once).
fn local_fsync(info: &NodeInfo) -> Option<String> {
    match (info.appendfsync.as_deref(), info.waitaof_early) {
        (Some("always"), _) | (Some("everysec"), Some(false)) => None,
        (Some("everysec"), Some(true)) => Some(
            "appendfsync everysec, and it answered WAITAOF before its fsync (a server defect, \
             fixed by redis/redis#13793): set appendfsync always, or run a server with the fix"
                .into(),
        ),
        (Some("everysec"), None) => Some(
            "appendfsync everysec, and whether its WAITAOF waits for the fsync could not be \
             told: set appendfsync always"
                .into(),
        ),
        (Some(other), _) => Some(format!(
            "appendfsync {other}: the node does not fsync on its own, and WAITAOF would \
             confirm writes not on disk; set appendfsync always"
        )),
        (None, _) => Some(
            "appendfsync unknown (CONFIG GET refused): local durable votes need to know that \
             the node fsyncs; allow CONFIG GET for the lock's user, with appendfsync always"
                .into(),
        ),
    }
}

/// Whether `info`'s node must be probed for [`NodeInfo::waitaof_early`] before local durable
/// votes can be judged: a standalone 7.2+ server with AOF on under `appendfsync everysec`.
pub(crate) fn needs_probe(info: &NodeInfo) -> bool {
    info.cluster.is_none()
        && info.aof == Some(true)
        && info.appendfsync.as_deref() == Some("everysec")
        && at_least_7_2(info.version.as_deref().unwrap_or(""))
}

/// Refuses durable votes on nodes that cannot give them at all (see [`why_not`]); a node
/// whose AOF is off is a warning (it may be switched on later; until then its votes fail).
pub(crate) fn check(infos: &[NodeInfo], durable: DurableVotes) -> crate::Result<()> {
    for info in infos {
        let Some(why) = why_not(info, durable) else {
            continue;
        };
        if info.aof == Some(false) && why.starts_with("AOF") {
            tracing::warn!(node = %info.node, "durable votes: {why}");
            continue;
        }
        return Err(Error::InvalidConfig {
            field: "durable_votes",
            reason: format!("node {}: {why}", info.node),
        });
    }
    Ok(())
}

/// `major.minor[.patch]` at least 7.2.
fn at_least_7_2(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (7, 2),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waitaof_answers_and_versions_are_read() {
        let answer = |l, r| Value::Array(vec![Value::Int(l), Value::Int(r)]);
        assert!(DurableVotes::Local.confirmed_by(&answer(1, 0)));
        assert!(!DurableVotes::Local.confirmed_by(&answer(0, 2)));
        assert!(DurableVotes::Replica(2).confirmed_by(&answer(0, 2)));
        assert!(!DurableVotes::Replica(2).confirmed_by(&answer(1, 1)));
        assert!(!DurableVotes::Local.confirmed_by(&Value::Nil));
        assert!(at_least_7_2("7.2.4") && at_least_7_2("8.1.1") && at_least_7_2("7.4"));
        assert!(!at_least_7_2("7.0.15") && !at_least_7_2("6.2.0") && !at_least_7_2(""));
        assert!(refusal(&Value::Nil) && refusal(&Value::Int(0)) && !refusal(&Value::Okay));
    }
}
