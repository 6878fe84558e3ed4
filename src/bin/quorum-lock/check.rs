//! `check`: connects to every node and reports what weakens the lock's safety: the same
//! server listed twice (INFO run_id), replicas (ROLE), no AOF or `appendfsync` other than
//! `always` (a restarted node forgets its locks), an evicting `maxmemory-policy` (locks have a
//! TTL, so even `volatile-*` may evict them), and a clock far from the others' (TIME against
//! the local clock, corrected by half the round trip).

use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use serde::Serialize;

use crate::args::CheckArgs;
use quorum_lock::safety::{self, ClusterInfo, NodeInfo, Severity};
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
    role: Option<String>,
    aof: Option<bool>,
    /// `None` when CONFIG GET was refused (renamed away, or denied by an ACL).
    appendfsync: Option<String>,
    maxmemory_policy: Option<String>,
    /// The node's clock minus this machine's, corrected by half the round trip.
    clock_offset_ms: Option<f64>,
    rtt_ms: Option<f64>,
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
    let mut conn = direct::connect(node, limit, limit).await?;
    let info = direct::query(node, &mut conn, &redis::cmd("INFO"), limit).await?;
    report.reachable = true;
    // ROLE is the authoritative answer; INFO's replication section is the fallback when an
    // ACL denies ROLE (or CONFIG GET, which leaves appendfsync unknown).
    let role = direct::query(node, &mut conn, &redis::cmd("ROLE"), limit)
        .await
        .ok();
    let mut get = redis::cmd("CONFIG");
    get.arg("GET").arg("appendfsync");
    let appendfsync = direct::query(node, &mut conn, &get, limit).await.ok();
    let mut read = NodeInfo::from_replies(node.name(), &info, role.as_ref(), appendfsync.as_ref());
    if read.cluster.is_some() {
        // A cluster is one node: its shape (primaries, replicas, members) instead of one
        // server's identity; its persistence is the member's asked.
        let mut slots = redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        let slots = direct::query(node, &mut conn, &slots, limit).await?;
        let mut nodes = redis::cmd("CLUSTER");
        nodes.arg("NODES");
        let nodes = direct::query(node, &mut conn, &nodes, limit).await?;
        let shape = ClusterInfo::from_replies(&slots, &nodes);
        read.role = Some(format!(
            "cluster ({} primaries, {} replicas; persistence of the member given)",
            shape.primaries.len(),
            shape.replicas
        ));
        read.cluster = Some(shape);
        read.run_id = None;
    }
    report.run_id = read.run_id.clone();
    report.version = read.version.clone();
    report.role = read.role.clone();
    report.aof = read.aof;
    report.appendfsync = read.appendfsync.clone();
    report.maxmemory_policy = read.maxmemory_policy.clone();
    report.info = Some(read);
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
        let _ =
            writeln!(out,
            "{}: redis {}, role {}, aof {aof}, appendfsync {}, maxmemory-policy {}, clock {clock}",
            n.node,
            or(&n.version),
            or(&n.role),
            n.appendfsync.as_deref().unwrap_or("unknown"),
            or(&n.maxmemory_policy),
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
    let down = r.findings.len() - problems;
    let _ = match problems {
        0 => write!(out, "no configuration problems found"),
        1 => write!(out, "1 configuration problem found"),
        n => write!(out, "{n} configuration problems found"),
    };
    let _ = match down {
        0 => writeln!(out),
        n => writeln!(out, "; {n} of {} nodes unreachable", r.nodes.len()),
    };
    out
}
