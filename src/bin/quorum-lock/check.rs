//! `check`: runs the library's node check (`NodeClient::probe`, the one `build()` runs) on
//! every node and reports what weakens the lock's safety: the same server listed twice (INFO
//! run_id), replicas (INFO role), a cluster's state and its members that do not answer, no AOF or `appendfsync` other than
//! `always` (a restarted node forgets its locks), an evicting `maxmemory-policy` (locks have a
//! TTL, so even `volatile-*` may evict them), and a clock far from the others' (TIME against
//! the local clock, corrected by half the round trip).

use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use serde::Serialize;

use crate::args::CheckArgs;
use quorum_lock::safety::{self, NodeInfo, Severity};
use quorum_lock::NodeClient;

use crate::direct::{self, int, NodeError};
use crate::exit::{self, Failure};
use crate::settings::Settings;
use crate::values::format_duration;

/// The severity of a node that did not answer: availability, not configuration.
const UNAVAILABLE_FINDING: &str = "unavailable";

/// How many TIME round trips per node; the fastest one gives the offset.
const TIME_SAMPLES: usize = 3;

#[derive(Debug, Default, Serialize)]
struct NodeReport {
    node: String,
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    run_id: Option<String>,
    version: Option<String>,
    /// `redis` or `valkey`.
    server: Option<String>,
    role: Option<String>,
    /// Members of a cluster node that do not answer (each with why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    not_answering: Vec<String>,
    aof: Option<bool>,
    /// `None` when CONFIG GET was refused (renamed away, or denied by an ACL).
    appendfsync: Option<String>,
    maxmemory_policy: Option<String>,
    /// The node's clock minus this machine's, corrected by half the round trip.
    clock_offset_ms: Option<f64>,
    rtt_ms: Option<f64>,
    /// Whether the node can give durable votes (`Builder::durable_votes(Local)`): "yes", or
    /// why not.
    durable_votes: Option<String>,
    /// What the library's safety rules read (`quorum_lock::safety`).
    #[serde(skip)]
    info: Option<NodeInfo>,
}

#[derive(Debug, Serialize)]
struct Finding {
    severity: &'static str,
    node: Option<String>,
    message: String,
}

#[derive(Debug, Serialize)]
struct Report {
    nodes: Vec<NodeReport>,
    quorum: usize,
    reachable: usize,
    findings: Vec<Finding>,
}

pub async fn check(settings: &Settings, args: &CheckArgs) -> Result<u8, Failure> {
    let required = settings.required()?;
    let nodes = settings.node_clients()?;
    let inspected = join_all(nodes.iter().map(|n| inspect(settings, n))).await;
    direct::misconfigured(inspected.iter().filter_map(|(_, e)| e.as_ref()))?;
    let reports: Vec<NodeReport> = inspected.into_iter().map(|(r, _)| r).collect();
    let findings = findings(&reports, args.clock_tolerance);
    let reachable = reports.iter().filter(|r| r.reachable).count();
    let report = Report {
        nodes: reports,
        quorum: required,
        reachable,
        findings,
    };
    if args.json {
        let json = serde_json::to_string(&report)
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("encoding JSON: {e}")))?;
        exit::print(&format!("{json}\n"))?;
    } else {
        exit::print(&plain(&report))?;
    }
    // A node that is down costs availability, not safety: it is reported, and only makes
    // the exit code 69 when too few nodes answer for a quorum. Every other finding is about
    // the nodes' configuration (78).
    let configuration = report
        .findings
        .iter()
        .any(|f| f.severity != UNAVAILABLE_FINDING);
    Ok(if reachable < required {
        exit::UNAVAILABLE
    } else if configuration {
        exit::CONFIG
    } else {
        exit::OK
    })
}

/// One node's report, and why it could not be read, if so.
async fn inspect(settings: &Settings, node: &NodeClient) -> (NodeReport, Option<NodeError>) {
    let mut report = NodeReport {
        node: node.name().to_string(),
        ..NodeReport::default()
    };
    let error = read(settings, node, &mut report).await.err();
    if let Some(e) = &error {
        report.reachable = false;
        report.error = Some(e.reason());
    }
    (report, error)
}

async fn read(
    settings: &Settings,
    node: &NodeClient,
    report: &mut NodeReport,
) -> Result<(), NodeError> {
    let limit = settings.connect_timeout;
    // The library's own check, the one `build()` runs: for a cluster, its shape and state,
    // the weakest persistence of its primaries and every member that does not answer.
    let mut read = node.probe(limit).await.map_err(NodeError::Failed)?;
    // Under `appendfsync everysec`, whether durable votes could count depends on how the
    // server answers WAITAOF: the probe build() runs (a key of its own, for 5 s at most).
    read.waitaof_early = node.waitaof_early(&read, limit).await;
    report.reachable = true;
    report.run_id = read.run_id.clone();
    report.version = read.version.clone();
    report.server = read.server.clone();
    report.role = match &read.cluster {
        Some(shape) => Some(format!(
            "cluster ({} primaries, {} replicas, state {}; persistence of the weakest primary)",
            shape.primaries.len(),
            shape.replicas,
            shape.state.as_deref().unwrap_or("unknown"),
        )),
        None => read.role.clone(),
    };
    report.not_answering = read
        .cluster
        .as_ref()
        .map(|c| c.not_answering.clone())
        .unwrap_or_default();
    report.aof = read.aof;
    report.appendfsync = read.appendfsync.clone();
    report.maxmemory_policy = read.maxmemory_policy.clone();
    report.durable_votes = Some(
        read.durable_votes_refused(quorum_lock::DurableVotes::Local)
            .map_or("yes".to_string(), |why| format!("no ({why})")),
    );
    report.info = Some(read);
    // The clock, on a connection of its own.
    let mut conn = direct::connect(node, limit, limit).await?;
    let mut best: Option<(f64, f64)> = None;
    for _ in 0..TIME_SAMPLES {
        let sent = SystemTime::now();
        let Ok(redis::Value::Array(t)) =
            direct::query(node, &mut conn, &redis::cmd("TIME"), limit).await
        else {
            break;
        };
        let rtt = sent.elapsed().unwrap_or_default();
        let (Some(secs), Some(micros)) = (t.first().and_then(int), t.get(1).and_then(int)) else {
            break;
        };
        let node_ms = secs as f64 * 1000.0 + micros as f64 / 1000.0;
        let local_ms = sent
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
            * 1000.0;
        // The node read its clock about half a round trip after we sent the command.
        let rtt_ms = rtt.as_secs_f64() * 1000.0;
        let offset = node_ms - (local_ms + rtt_ms / 2.0);
        if best.is_none_or(|(r, _)| rtt_ms < r) {
            best = Some((rtt_ms, offset));
        }
    }
    if let Some((rtt, offset)) = best {
        report.rtt_ms = Some(rtt);
        report.clock_offset_ms = Some(offset);
    }
    Ok(())
}

fn findings(reports: &[NodeReport], tolerance: Duration) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut add = |severity, node: &str, message: String| {
        out.push(Finding {
            severity,
            node: Some(node.to_string()),
            message,
        });
    };
    for r in reports.iter().filter(|r| !r.reachable) {
        add(
            UNAVAILABLE_FINDING,
            &r.node,
            format!("unreachable: {}", r.error.as_deref().unwrap_or("no answer")),
        );
    }
    // The library's own rules, the same that `build()` applies.
    let infos: Vec<NodeInfo> = reports.iter().filter_map(|r| r.info.clone()).collect();
    for finding in safety::findings(&infos) {
        let severity = match finding.severity {
            Severity::Refused => "error",
            Severity::Unavailable => UNAVAILABLE_FINDING,
            _ => "warning",
        };
        add(severity, &finding.node, finding.message);
    }
    // The clocks: each node against the median of all, so that one wrong clock stands out
    // (and this machine's own offset, shared by all, cancels).
    let mut offsets: Vec<f64> = reports.iter().filter_map(|r| r.clock_offset_ms).collect();
    offsets.sort_by(f64::total_cmp);
    if let Some(&median) = offsets.get(offsets.len() / 2) {
        let limit = tolerance.as_secs_f64() * 1000.0;
        for r in reports {
            if let Some(offset) = r.clock_offset_ms {
                let off = offset - median;
                if off.abs() > limit {
                    add(
                        "warning",
                        &r.node,
                        format!(
                            "clock {:+.0} ms from the others' (more than {}): check its time synchronisation; a clock that jumps expires locks early",
                            off,
                            format_duration(tolerance)
                        ),
                    );
                }
            }
        }
    }
    out
}

fn plain(r: &Report) -> String {
    let mut out = String::new();
    for n in &r.nodes {
        if !n.reachable {
            let _ = writeln!(out, "{}: unreachable", n.node);
            continue;
        }
        let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".to_string());
        let aof = match n.aof {
            Some(true) => "yes",
            Some(false) => "no",
            None => "?",
        };
        let clock = match (n.clock_offset_ms, n.rtt_ms) {
            // No "-0.0": an offset below the shown precision is zero.
            (Some(o), Some(rtt)) => {
                let o = if o.abs() < 0.05 { 0.0 } else { o };
                format!("{o:+.1} ms from this machine (rtt {rtt:.1} ms)")
            }
            _ => "?".to_string(),
        };
        let _ = writeln!(
            out,
            "{}: {} {}, role {}, aof {aof}, appendfsync {}, maxmemory-policy {}, clock {clock}, durable votes {}",
            n.node,
            n.server.as_deref().unwrap_or("redis"),
            or(&n.version),
            or(&n.role),
            n.appendfsync.as_deref().unwrap_or("unknown"),
            or(&n.maxmemory_policy),
            or(&n.durable_votes),
        );
    }
    for f in &r.findings {
        let _ = match &f.node {
            Some(node) => writeln!(out, "{}: {node}: {}", f.severity, f.message),
            None => writeln!(out, "{}: {}", f.severity, f.message),
        };
    }
    if r.reachable < r.quorum {
        let _ = writeln!(
            out,
            "only {} of {} nodes reachable; the quorum needs {}",
            r.reachable,
            r.nodes.len(),
            r.quorum
        );
    }
    let problems = r
        .findings
        .iter()
        .filter(|f| f.severity != UNAVAILABLE_FINDING)
        .count();
    let down = r.nodes.iter().filter(|n| !n.reachable).count();
    let members: usize = r.nodes.iter().map(|n| n.not_answering.len()).sum();
    let _ = match problems {
        0 => write!(out, "no configuration problems found"),
        1 => write!(out, "1 configuration problem found"),
        n => write!(out, "{n} configuration problems found"),
    };
    if down > 0 {
        let _ = write!(out, "; {down} of {} nodes unreachable", r.nodes.len());
    }
    let _ = match members {
        0 => writeln!(out),
        1 => writeln!(out, "; 1 cluster member not answering"),
        n => writeln!(out, "; {n} cluster members not answering"),
    };
    out
}
