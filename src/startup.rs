//! Connecting to the nodes and checking them at build (docs/DESIGN.md, "Build-time checks"):
//! [`probe_until_quorum`] returns once a quorum answered (and the rest had a node timeout
//! more); the checks of the nodes still silent then finish in the background.

use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};

use crate::config::Config;
use crate::error::{Error, FailureKind, NodeFailure, Result};
use crate::node::Node;
use crate::safety::{self, NodeInfo};

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
    let mut ended = vec![false; nodes.len()];
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
        ended[i] = true;
        match probe {
            Ok(info) => infos.push(info),
            Err(f) if unfixable(&f) => return Err(Error::Node(f)),
            Err(f) => failures.push(f),
        }
        if grace.is_none() && infos.len() >= config.required {
            grace = Some(tokio::time::Instant::now() + config.node_timeout);
        }
    }
    if !probes.is_empty() {
        for (i, node) in nodes.iter().enumerate() {
            if !ended[i] {
                tracing::warn!(
                    node = node.name(),
                    "node not checked yet at build; it takes no lock calls until its check passes"
                );
                node.hold_until_checked();
            }
        }
        // Each late node is checked against every node admitted before it, the late ones too
        // (two addresses of one slow server are likely to be late together).
        let (nodes, mut checked) = (nodes.clone(), infos.clone());
        tokio::spawn(async move {
            while let Some((i, probe)) = probes.next().await {
                let node = &nodes[i];
                match probe {
                    Ok(info) => match safety::refuse_or_warn_late(&checked, info.clone()) {
                        Ok(()) => {
                            checked.push(info);
                            node.admit();
                        }
                        Err(e) => {
                            tracing::error!(node = node.name(), error = %e, "node excluded: it failed its check after build");
                            node.exclude(e.to_string());
                        }
                    },
                    Err(f) if unfixable(&f) => {
                        tracing::error!(node = node.name(), error = %f, "node excluded: it failed its check after build");
                        node.exclude(f.to_string());
                    }
                    Err(f) => {
                        tracing::warn!(node = f.node(), error = %f, "node unreachable at build; will retry on use");
                        node.admit();
                    }
                }
            }
        });
    }
    Ok((infos, failures))
}

/// What waiting will not fix: a wrong address or credentials, a refused TLS handshake, or a
/// server that is not Redis (it answered, but not RESP).
fn unfixable(f: &NodeFailure) -> bool {
    matches!(
        f.kind(),
        FailureKind::Auth | FailureKind::UnknownHost | FailureKind::Tls | FailureKind::Protocol
    )
}
