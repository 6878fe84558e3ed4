//! Connecting to the nodes and checking them at build (docs/DESIGN.md, "Build-time checks"):
//! [`probe_until_quorum`] returns once a quorum answered (and the rest had a node timeout
//! more); the checks of the nodes still silent then finish in the background.

use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};

use crate::error::{Error, FailureKind, NodeFailure, Result};
use crate::node::Node;
use crate::rules::config::from_node_timeout;
use crate::rules::config::Config;
use crate::rules::durable::DurableVotes;
use crate::rules::safety::{self, NodeInfo};

/// Probes every node at once (connect, `INFO`): returns the answers and the failures once every
/// probe ended, or a node timeout after a quorum of probes answered. The probes still running
/// then go on in the background; their nodes take no lock calls until their check passes.
/// A failure that waiting will not fix (a wrong address or credentials, a refused TLS
/// handshake, a server that does not speak RESP) is returned at once.
pub(crate) async fn probe_until_quorum(
    nodes: &Arc<[Node]>,
    config: &Config,
) -> Result<(Vec<NodeInfo>, Vec<NodeFailure>)> {
    let limit = config.connect_timeout;
    // A cluster's other primaries: a node timeout, as a lock call would wait for them.
    let node_timeout = config.node_timeout;
    let mut probes: FuturesUnordered<_> = (0..nodes.len())
        .map(|i| {
            let nodes = nodes.clone();
            async move { (i, nodes[i].probe(limit, node_timeout).await) }
        })
        .collect();
    let mut infos = Vec::new();
    let mut failures = Vec::new();
    let mut passed = vec![false; nodes.len()];
    let mut grace: Option<tokio::time::Instant> = None;
    loop {
        let next = match grace {
            None => probes.next().await,
            Some(at) => tokio::select! {
                next = probes.next() => next,
                () = tokio::time::sleep_until(at) => break,
            },
        };
        let Some((i, probe)) = next else { break };
        match probe.map_err(|f| f.at(i)) {
            Ok(info) => {
                passed[i] = true;
                infos.push(info);
            }
            Err(f) if unfixable(&f) => return Err(Error::Node(f)),
            // Checked later, when it answers (below).
            Err(f) => failures.push(f),
        }
        if grace.is_none() && infos.len() >= config.required {
            grace = Some(
                tokio::time::Instant::now() + from_node_timeout::build_grace(config.node_timeout),
            );
        }
    }
    // Every node not checked at build (its check still running, or the node unreachable)
    // takes no lock calls until a check of it passes: unchecked, it could be another node's
    // server under a second name, and vote twice (a reader's or a permit's script answers yes
    // to its own member again). Its check goes on, or is tried again, in the background.
    let unchecked: Vec<usize> = (0..nodes.len()).filter(|&i| !passed[i]).collect();
    if unchecked.is_empty() {
        return Ok((infos, failures));
    }
    let unreachable: Vec<usize> = failures.iter().filter_map(NodeFailure::index).collect();
    for &i in &unchecked {
        // An unreachable node is logged with its failure by `build`.
        if !unreachable.contains(&i) {
            tracing::warn!(
                node = nodes[i].name(),
                "node not checked yet at build; it takes no lock calls until its check passes"
            );
        }
        nodes[i].hold_until_checked();
    }
    tokio::spawn(check_late(
        Arc::downgrade(nodes),
        probes,
        unreachable,
        infos.clone(),
        (limit, node_timeout),
        config.durable,
    ));
    Ok((infos, failures))
}

/// How long a node that could not be checked waits before its check is tried again.
const RECHECK_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The checks of the nodes not checked at build: those still running (`probes`), and those
/// of the nodes that could not be reached (`unreachable`), tried again every
/// [`RECHECK_AFTER`] until they answer. Each late node is checked against every node admitted
/// before it, the late ones too (two addresses of one slow server are likely to be late
/// together), and admitted or excluded for good. Ends with the client (its nodes are held
/// weakly).
async fn check_late<P>(
    nodes: std::sync::Weak<[Node]>,
    mut probes: FuturesUnordered<P>,
    unreachable: Vec<usize>,
    mut checked: Vec<NodeInfo>,
    limit: (std::time::Duration, std::time::Duration),
    durable: Option<DurableVotes>,
) where
    P: std::future::Future<Output = (usize, Result<NodeInfo, NodeFailure>)>,
{
    let mut retries: FuturesUnordered<_> = unreachable
        .into_iter()
        .map(|i| recheck(nodes.clone(), i, limit))
        .collect();
    loop {
        let (i, probe) = tokio::select! {
            Some(done) = probes.next() => done,
            Some(done) = retries.next() => match done {
                Some(done) => done,
                None => return,
            },
            else => return,
        };
        let Some(all) = nodes.upgrade() else { return };
        let node = &all[i];
        match probe {
            Ok(mut info) => {
                let mut verdict = safety::refuse_or_warn_late(&checked, info.clone());
                if let (Ok(()), Some(durable)) = (&verdict, durable) {
                    verdict =
                        check_durable(&all, std::slice::from_mut(&mut info), durable, limit.0)
                            .await;
                }
                match verdict {
                    Ok(()) => {
                        checked.push(info);
                        node.admit();
                    }
                    Err(e) => {
                        tracing::error!(node = node.name(), error = %e, "node excluded: it failed its check after build");
                        node.exclude(e.to_string());
                    }
                }
            }
            Err(f) if unfixable(&f) => {
                tracing::error!(node = node.name(), error = %f, "node excluded: it failed its check after build");
                node.exclude(f.to_string());
            }
            Err(f) => {
                tracing::debug!(node = f.node(), error = %f, "node still unreachable; its check is tried again");
                retries.push(recheck(nodes.clone(), i, limit));
            }
        }
    }
}

/// Node `i`'s check, after [`RECHECK_AFTER`], bounded as at build (`limit`: the connect
/// timeout, and the node timeout for a cluster's other primaries); `None` once the client is
/// gone.
async fn recheck(
    nodes: std::sync::Weak<[Node]>,
    i: usize,
    limit: (std::time::Duration, std::time::Duration),
) -> Option<(usize, Result<NodeInfo, NodeFailure>)> {
    tokio::time::sleep(RECHECK_AFTER).await;
    let all = nodes.upgrade()?;
    let probe = all[i].probe(limit.0, limit.1).await;
    Some((i, probe))
}

/// What waiting will not fix: a wrong address or credentials, a refused TLS handshake, a
/// server that is not Redis (it answered, but not RESP), a database index or TLS the server
/// does not have.
fn unfixable(f: &NodeFailure) -> bool {
    matches!(
        f.kind(),
        FailureKind::Auth
            | FailureKind::UnknownHost
            | FailureKind::Tls
            | FailureKind::Protocol
            | FailureKind::Config
    )
}

/// The checks `build()` makes of the nodes it probed: the safety rules, the same as
/// `quorum-lock check` reports (refused, or logged), and durable votes' where asked for.
pub(crate) async fn check_at_build(
    nodes: &[Node],
    infos: &mut [NodeInfo],
    config: &Config,
) -> Result<()> {
    safety::refuse_or_warn(infos)?;
    match config.durable {
        Some(durable) => check_durable(nodes, infos, durable, config.connect_timeout).await,
        None => Ok(()),
    }
}

/// Durable votes' check of the nodes `infos` describe (`rules::durable::check`), at build
/// and for a node checked late alike: first [`NodeInfo::waitaof_early`] of each node that
/// needs it for local votes (`rules::durable::needs_probe`), probed at once, each bounded by
/// `limit` plus the probe's waits.
pub(crate) async fn check_durable(
    nodes: &[Node],
    infos: &mut [NodeInfo],
    durable: DurableVotes,
    limit: std::time::Duration,
) -> Result<()> {
    if durable == DurableVotes::Local {
        let probes = infos
            .iter_mut()
            .filter(|info| crate::rules::durable::needs_probe(info))
            .filter_map(|info| {
                let node = nodes.iter().find(|n| n.name() == info.node)?;
                Some(async move { info.waitaof_early = node.waitaof_early(limit).await })
            });
        futures::future::join_all(probes).await;
    }
    crate::rules::durable::check(infos, durable)
}
