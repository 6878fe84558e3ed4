//! `status`'s report as text.

use std::fmt::Write;

use super::Report;
use crate::values::{format_duration, utc};

pub(super) fn plain(r: &Report) -> String {
    let mut out = String::new();
    let every = match r.every_node {
        true => " (every node: a semaphore of more than one permit)",
        false => "",
    };
    let _ = writeln!(
        out,
        "key {:?} ({}): {} nodes, quorum {}{every}, {} reachable",
        r.key, r.kind, r.nodes, r.quorum, r.reachable
    );
    let width = r
        .node_status
        .iter()
        .map(|v| v.node.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let extra = match r.kind {
        "read-write" => "READERS    ",
        "semaphore" => "PERMITS    ",
        "fair" => "LINE       ",
        _ => "",
    };
    let _ = writeln!(
        out,
        "  {:width$}  {:9}  {:9}  {:9}  {extra}FENCE",
        "NODE", "REACHABLE", "LOCK", "TTL"
    );
    for v in &r.node_status {
        if let Some(e) = &v.error {
            let _ = writeln!(out, "  {:width$}  no: {e}", v.node);
            continue;
        }
        let lock = match (v.holder, r.kind) {
            _ if v.broken => "broken".to_string(),
            (Some(n), "read-write") => format!("writer #{n}"),
            (Some(n), _) => format!("held #{n}"),
            (None, "read-write") if v.readers.unwrap_or(0) > 0 => "read".to_string(),
            (None, "semaphore") if v.permits.unwrap_or(0) > 0 => "taken".to_string(),
            (None, _) => "free".to_string(),
        };
        let ttl = match v.ttl_ms {
            Some(-1) => "no ttl".to_string(),
            Some(ms) => format_duration(std::time::Duration::from_millis(ms.max(0) as u64)),
            None => "-".to_string(),
        };
        // Left-aligned, as the header (numbers would align right, against the next column).
        let extra = match r.kind {
            "read-write" => {
                let mark = if v.writer_waiting { "+w" } else { "" };
                format!("{:<9}  ", format!("{}{mark}", v.readers.unwrap_or(0)))
            }
            "semaphore" => format!("{:<9}  ", v.permits.unwrap_or(0)),
            "fair" => format!("{:<9}  ", v.line.unwrap_or(0)),
            _ => String::new(),
        };
        let fence = v.fence.map_or_else(|| "-".to_string(), |f| f.to_string());
        let _ = writeln!(
            out,
            "  {:width$}  {:9}  {:9}  {:9}  {extra}{fence}",
            v.node, "yes", lock, ttl
        );
    }
    let waiting = r.node_status.iter().filter(|v| v.writer_waiting).count();
    let line = r
        .node_status
        .iter()
        .filter_map(|v| v.line)
        .max()
        .unwrap_or(0);
    let verdict = match (r.verdict, r.kind) {
        ("held", "read-write") => format!(
            "write-locked ({} of {} nodes hold one writer's entry)",
            r.held_by, r.nodes
        ),
        ("held", "fair") => format!(
            "held by a quorum ({} of {} nodes hold one holder's entry), {line} waiting in line",
            r.held_by, r.nodes
        ),
        ("held", _) => format!(
            "held by a quorum ({} of {} nodes hold one holder's entry)",
            r.held_by, r.nodes
        ),
        ("broken", _) => "broken (`quorum-lock break`): kept from new holders until its tombstones \
                           expire (TTL above)"
            .to_string(),
        ("read", _) => format!(
            "read-locked (readers on a quorum); a writer must wait{}",
            if waiting >= r.quorum {
                ", and one does: new readers are refused"
            } else {
                ""
            }
        ),
        ("full", _) => match r.permits.unwrap_or(0) {
            1 => "full (its one permit taken on a quorum of nodes)".to_string(),
            p => format!("full (all {p} permits taken on a quorum of nodes)"),
        },
        ("taken", _) => "permits are taken on a quorum of nodes (give --permits P to tell \
                         whether one is left)"
            .to_string(),
        ("free", "read-write") if waiting >= r.quorum => format!(
            "free for the waiting writer ({} of {} nodes have neither readers nor a writer; new readers are refused)",
            r.free, r.nodes
        ),
        ("free", "fair") if line > 0 => format!(
            "free ({} of {} nodes have no entry), {line} waiting in line: the first of them gets it",
            r.free, r.nodes
        ),
        ("free", "semaphore") => match r.permits {
            Some(p) => format!(
                "free (fewer than {p} permits taken on {} of {} nodes: an acquire can succeed)",
                r.free, r.nodes
            ),
            None => format!(
                "free ({} of {} nodes have no permit taken: an acquire can succeed)",
                r.free, r.nodes
            ),
        },
        ("free", "read-write") => format!(
            "free ({} of {} nodes have neither readers nor a writer: an acquire can succeed)",
            r.free, r.nodes
        ),
        ("free", _) => format!(
            "free ({} of {} nodes have no entry: an acquire can succeed)",
            r.free, r.nodes
        ),
        ("split", _) => format!(
            "split (no holder has a quorum and fewer than {} nodes are free; entries expire with their TTL)",
            r.quorum
        ),
        _ => format!(
            "unknown ({} of {} nodes reachable, not enough to tell)",
            r.reachable, r.nodes
        ),
    };
    let _ = writeln!(out, "verdict: {verdict}");
    for p in &r.labels {
        let since = p.since_ms.map(|ms| format!(" (since {})", utc(ms)));
        let label = p.label.as_deref().unwrap_or_default();
        let _ = writeln!(out, "label: {label}{}", since.unwrap_or_default());
    }
    if let Some(p) = &r.holder {
        if let Some(label) = &p.label {
            let _ = writeln!(out, "label: {label}");
        }
        if let (Some(value), Some(term)) = (&p.leader_value, p.term) {
            let _ = writeln!(out, "leader: {value} (term {term})");
        }
        if let Some(since) = p.since_ms {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64;
            let ago = std::time::Duration::from_millis(now.saturating_sub(since) / 1000 * 1000);
            let _ = writeln!(out, "since: {} ({} ago)", utc(since), format_duration(ago));
        }
    }
    out
}
