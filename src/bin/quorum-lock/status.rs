//! `status KEY`: each node's view of the lock (reachable, an entry present, its remaining TTL,
//! the fencing counter) and the verdict: held by a quorum, free, split, or unknown. Holder
//! values are never shown: entries are told apart by a number per distinct holder.

use std::collections::HashMap;
use std::fmt::Write;

use futures::future::join_all;
use serde::Serialize;

use crate::args::StatusArgs;
use quorum_lock::NodeClient;

use crate::direct::{self, int, text, NodeError};
use crate::exit::{self, Failure};
use crate::settings::Settings;
use crate::values::format_duration;

/// One node's view.
#[derive(Debug, Serialize)]
struct NodeView {
    node: String,
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    held: bool,
    /// Which holder (1, 2, ... by order of appearance), when held.
    holder: Option<usize>,
    ttl_ms: Option<i64>,
    fence: Option<i64>,
}

/// What a node answered, before holder values are replaced by numbers.
struct Raw {
    holder: Option<String>,
    pttl: Option<i64>,
    fence: Option<i64>,
}

#[derive(Debug, Serialize)]
struct Report {
    key: String,
    nodes: usize,
    quorum: usize,
    reachable: usize,
    verdict: &'static str,
    /// Nodes holding the most common holder's entry.
    held_by: usize,
    /// Reachable nodes without an entry.
    free: usize,
    node_status: Vec<NodeView>,
}

pub async fn status(settings: &Settings, args: &StatusArgs) -> Result<u8, Failure> {
    let required = settings.required()?;
    let nodes = settings.node_clients()?;
    let fence_key = format!("{}fence:{}", quorum_lock::RESERVED_PREFIX, args.key);
    let answers = join_all(
        nodes
            .iter()
            .map(|node| read_node(settings, node, &args.key, &fence_key)),
    )
    .await;
    direct::refused_by_tls(answers.iter().filter_map(|a| a.as_ref().err()))?;

    // Holder values become numbers here and are dropped: nothing below can print them.
    let mut holders: HashMap<String, usize> = HashMap::new();
    let mut counts: Vec<usize> = Vec::new();
    let mut views = Vec::with_capacity(nodes.len());
    for (node, answer) in nodes.iter().zip(answers) {
        let view = match answer {
            Ok(raw) => {
                let holder = raw.holder.map(|h| {
                    let next = holders.len() + 1;
                    let n = *holders.entry(h).or_insert(next);
                    if counts.len() < n {
                        counts.push(0);
                    }
                    counts[n - 1] += 1;
                    n
                });
                NodeView {
                    node: node.name().to_string(),
                    reachable: true,
                    error: None,
                    held: holder.is_some(),
                    holder,
                    ttl_ms: raw.pttl.filter(|_| holder.is_some()),
                    fence: raw.fence,
                }
            }
            Err(e) => NodeView {
                node: node.name().to_string(),
                reachable: false,
                error: Some(e.reason()),
                held: false,
                holder: None,
                ttl_ms: None,
                fence: None,
            },
        };
        views.push(view);
    }
    let reachable = views.iter().filter(|v| v.reachable).count();
    let free = views.iter().filter(|v| v.reachable && !v.held).count();
    let held_by = counts.iter().copied().max().unwrap_or(0);
    let unreachable = nodes.len() - reachable;
    let verdict = if held_by >= required {
        "held"
    } else if free >= required {
        "free"
    } else if held_by + unreachable >= required || free + unreachable >= required {
        // The nodes that did not answer could tip it either way.
        "unknown"
    } else {
        "split"
    };
    let report = Report {
        key: args.key.clone(),
        nodes: nodes.len(),
        quorum: required,
        reachable,
        verdict,
        held_by,
        free,
        node_status: views,
    };
    if args.json {
        let json = serde_json::to_string(&report)
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("encoding JSON: {e}")))?;
        exit::print(&format!("{json}\n"))?;
    } else {
        exit::print(&plain(&report))?;
    }
    Ok(if verdict == "unknown" {
        exit::UNAVAILABLE
    } else {
        exit::OK
    })
}

/// GET, PTTL and the fencing counter, within the connect timeout (a diagnostic may wait
/// longer than a lock call would).
async fn read_node(
    settings: &Settings,
    node: &NodeClient,
    key: &str,
    fence_key: &str,
) -> Result<Raw, NodeError> {
    let limit = settings.connect_timeout;
    let mut conn = direct::connect(node, limit, limit).await?;
    let mut get = redis::cmd("GET");
    get.arg(key);
    let mut pttl = redis::cmd("PTTL");
    pttl.arg(key);
    let mut fence = redis::cmd("GET");
    fence.arg(fence_key);
    let holder = direct::query(node, &mut conn, &get, limit).await?;
    let pttl = direct::query(node, &mut conn, &pttl, limit).await?;
    let fence = direct::query(node, &mut conn, &fence, limit).await?;
    Ok(Raw {
        holder: text(&holder),
        // -2: no key (it expired between the two commands), -1: no TTL.
        pttl: int(&pttl).filter(|&t| t != -2),
        fence: int(&fence),
    })
}

fn plain(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "key {:?}: {} nodes, quorum {}, {} reachable",
        r.key, r.nodes, r.quorum, r.reachable
    );
    let width = r
        .node_status
        .iter()
        .map(|v| v.node.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "  {:width$}  {:9}  {:9}  {:9}  FENCE",
        "NODE", "REACHABLE", "LOCK", "TTL"
    );
    for v in &r.node_status {
        if let Some(e) = &v.error {
            let _ = writeln!(out, "  {:width$}  no: {e}", v.node);
            continue;
        }
        let lock = match v.holder {
            Some(n) => format!("held #{n}"),
            None => "free".to_string(),
        };
        let ttl = match v.ttl_ms {
            Some(-1) => "no ttl".to_string(),
            Some(ms) => format_duration(std::time::Duration::from_millis(ms.max(0) as u64)),
            None => "-".to_string(),
        };
        let fence = v.fence.map_or_else(|| "-".to_string(), |f| f.to_string());
        let _ = writeln!(
            out,
            "  {:width$}  {:9}  {:9}  {:9}  {fence}",
            v.node, "yes", lock, ttl
        );
    }
    let verdict = match r.verdict {
        "held" => format!(
            "held by a quorum ({} of {} nodes hold one holder's entry)",
            r.held_by, r.nodes
        ),
        "free" => format!(
            "free ({} of {} nodes have no entry: an acquire can succeed)",
            r.free, r.nodes
        ),
        "split" => format!(
            "split (no holder has a quorum and fewer than {} nodes are free; entries expire with their TTL)",
            r.quorum
        ),
        _ => format!(
            "unknown ({} of {} nodes reachable, not enough to tell)",
            r.reachable, r.nodes
        ),
    };
    let _ = writeln!(out, "verdict: {verdict}");
    out
}
