//! The independent checker of a chaos run: it reads only the history (see `history`), never
//! the library's state, and reports every anomaly it finds:
//!
//! - **exclusion**: a hold runs from its acquire's completion to the earlier of the call that
//!   ended it (release, drop, a release by holder value after the guard was handed off) and
//!   the deadline the guard reported at that call; per key, a mutex, fair, write or
//!   multi-key hold overlaps no other hold, readers overlap only readers, no more holders of
//!   a semaphore overlap than its permits, and fencing tokens rise wherever two holds are
//!   ordered (the test kit's interval checker does this part);
//! - **calls on another's lock**: an extend, a release, a call by holder value or a
//!   reentry of guard A reported ok, although another guard B that conflicts with A held the
//!   key for the call's whole span (from B's acquire's completion to the earlier of the call
//!   that ended B and the end of B's reported deadlines without a gap: see
//!   `HoldRecord::certain_until`); a semaphore of one permit is exclusive here too. Such a call cannot have met
//!   A's value on a quorum at any moment of its span (a linearization point of the lease
//!   mutex): it extended or released B's lock, or said so without doing anything;
//! - **lost updates**: each critical section of a fenced hold reads a register and writes
//!   the value plus one, both fenced by its token at the register; two accepted writes of one
//!   value mean two sections read the same value: an overlap the holds' own bookkeeping may
//!   not show;
//! - **liveness**: a call that failed with `NoQuorum` (nodes failed, none refused) while a
//!   quorum of nodes had been free of faults for the whole window from `bound` before the
//!   call to its end, its own client was not frozen then, and among the failed nodes is a
//!   healthy one whose circuit breaker kept the request back although no client had met a
//!   failure of that node within `bound` (a breaker open on a healthy node for no reason any
//!   client met). A plain timeout of a healthy node is not counted: on a loaded machine the
//!   machine, not the library, may be slow; the check cannot tell;
//! - **fair order**: a fair lock served request B while request A, a waiting acquire of the
//!   same key invoked at least [`FAIR_MARGIN`] before B (time enough to take its place in
//!   line), was still waiting, with no node fault and no freeze of A's or B's client from
//!   that margin before A to B's completion;
//! - **leaders**: a leader read that named a campaign (`g<guard>`) never made before the
//!   read ended, one that found the election busy (it never led), or a term other than the
//!   one the campaign reported (a campaign that failed or was cancelled may have led for a
//!   moment: its value may be read);
//! - **leaks**: anything the run's final scan found on the nodes after the quiet period
//!   (a lock entry, a queue, a mark, a subscription).

use std::collections::{BTreeMap, HashMap};

use quorum_lock::testkit::history::{check as check_intervals, Hold, Interval};

use crate::history::Op;

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    pub ops: usize,
    pub holds: usize,
    pub faults: usize,
    pub register_writes: usize,
    /// Pairs of fair requests whose order was judged: a waiter, and a request that came at
    /// least [`FAIR_MARGIN`] later while it waited and was served, on a healthy fleet.
    pub fair_pairs: usize,
    pub overlaps: Vec<String>,
    pub wrong_holder: Vec<String>,
    pub lost_updates: Vec<String>,
    pub spurious_failures: Vec<String>,
    pub out_of_order: Vec<String>,
    pub wrong_leader: Vec<String>,
    /// Leader reads that named a leader.
    pub leader_reads: usize,
    /// Labels shown by holder reads that name no labelled hold of the key alive then.
    pub wrong_label: Vec<String>,
    /// Labels shown by holder reads.
    pub labels_read: usize,
    pub leaks: Vec<String>,
    /// The numbers of the faults the run planned (filled in by the run, for shrinking).
    pub planned: Vec<u64>,
    /// Lines the checker could not use (a completion without its invocation, a hold
    /// without its keys), and faults the nemesis could not make or end.
    pub malformed: Vec<String>,
}

impl Report {
    pub fn anomalies(&self) -> usize {
        self.overlaps.len()
            + self.wrong_holder.len()
            + self.lost_updates.len()
            + self.spurious_failures.len()
            + self.out_of_order.len()
            + self.wrong_leader.len()
            + self.wrong_label.len()
            + self.leaks.len()
            + self.malformed.len()
    }

    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.overlaps
            .iter()
            .chain(&self.wrong_holder)
            .chain(&self.lost_updates)
            .chain(&self.spurious_failures)
            .chain(&self.out_of_order)
            .chain(&self.wrong_leader)
            .chain(&self.wrong_label)
            .chain(&self.leaks)
            .chain(&self.malformed)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} ops, {} holds, {} register writes, {} fair pairs judged, {} leader reads, {} labels read, \
             {} faults: {} exclusion, {} on another's lock, {} lost updates, {} spurious failures, \
             {} out of fair order, {} wrong leaders, {} wrong labels, {} leaks, {} malformed: {} anomalies",
            self.ops,
            self.holds,
            self.register_writes,
            self.fair_pairs,
            self.leader_reads,
            self.labels_read,
            self.faults,
            self.overlaps.len(),
            self.wrong_holder.len(),
            self.lost_updates.len(),
            self.spurious_failures.len(),
            self.out_of_order.len(),
            self.wrong_leader.len(),
            self.wrong_label.len(),
            self.leaks.len(),
            self.malformed.len(),
            self.anomalies()
        )?;
        for a in self.all().take(30) {
            writeln!(f, "  {a}")?;
        }
        Ok(())
    }
}

/// How long before another request a fair waiter must have started waiting for the check to
/// expect it served first: its first attempt (which draws its ticket), and a ticket draw of
/// its own where too few nodes drew one, on a healthy fleet.
pub const FAIR_MARGIN: u64 = 300_000_000;

/// A fair lock's acquire: its key, client, guard, invocation, completion and whether it
/// waited (`None` until it completes).
struct FairCall {
    key: String,
    process: u64,
    guard: u64,
    invoked: u64,
    completed: Option<u64>,
    ok: bool,
    waits: bool,
    /// When its wait runs out (it leaves the line then, whenever its completion is
    /// recorded).
    gives_up: u64,
}

/// A guard's hold as the history tells it.
struct HoldRecord {
    process: u64,
    keys: Vec<String>,
    hold: Hold,
    token: Option<u64>,
    start: u64,
    /// The deadline the guard reported most recently.
    deadline: u64,
    /// Until when the hold was certainly the guard's: its acquire's deadline, moved on by
    /// each later report of a later deadline made before it passed (a renewal confirmed with
    /// no gap), cut by any report of an earlier one (a release by holder value through its
    /// client, a cut before an extend); once a report comes after it, it moves no more.
    certain_until: u64,
    /// A report came after `certain_until`: the lock may have lapsed in between.
    gap: bool,
    /// When a call ended the hold.
    end: Option<u64>,
}

impl HoldRecord {
    /// A report, at `time`, that the guard's deadline is `deadline`. A call with a kept
    /// holder value (`stale`) may shorten the lease, never lengthen what the hold's client
    /// believes.
    fn reported(&mut self, time: u64, deadline: u64, stale: bool) {
        if stale {
            self.deadline = self.deadline.min(deadline);
        } else if self.end.is_none() {
            self.deadline = deadline;
        }
        if deadline < self.certain_until || stale {
            self.certain_until = self.certain_until.min(deadline);
        } else if !self.gap && time <= self.certain_until {
            self.certain_until = deadline;
        } else {
            self.gap = true;
        }
    }
}

fn hold_of(word: &str) -> Option<Hold> {
    match word {
        "x" => Some(Hold::Exclusive),
        "r" => Some(Hold::Read),
        p => Some(Hold::Permit(
            p.strip_prefix('p')?.parse().ok().filter(|n| *n > 0)?,
        )),
    }
}

/// A fault's window on one node or one client.
struct Window {
    node: Option<u64>,
    client: Option<u64>,
    start: u64,
    end: u64,
}

/// Checks a history. `bound`: how long (ns) a quorum must have been free of faults before a
/// `NoQuorum` counts as spurious (reconnects, breaker probes and restarts take that long).
pub fn check(mut ops: Vec<Op>, bound: u64) -> Report {
    ops.sort_by_key(|o| o.time);
    let mut report = Report {
        ops: ops.len(),
        ..Report::default()
    };
    if ops.is_empty() {
        report.malformed.push("no history lines".into());
    } else if !ops.iter().any(|o| o.f == "stop") {
        report
            .malformed
            .push("no stop line: the history was cut short (or the run did not end)".into());
    }
    let run_end = ops.last().map_or(0, |o| o.time);
    let run_start = ops.first().map_or(0, |o| o.time);
    let meta = ops.iter().find(|o| o.f == "start");
    let nodes = meta.and_then(|m| m.u64("nodes")).unwrap_or(0);
    let quorum = meta.and_then(|m| m.u64("quorum")).unwrap_or(nodes);

    let mut holds: BTreeMap<u64, HoldRecord> = BTreeMap::new();
    let mut writes: HashMap<(String, String), Vec<(u64, u64)>> = HashMap::new();
    let mut faults: HashMap<u64, Window> = HashMap::new();
    let mut invokes: HashMap<(u64, u64), &Op> = HashMap::new();
    let mut failures: Vec<(&Op, &Op)> = Vec::new();
    // Per node: when a call of any client met a failure of the node other than its breaker
    // (a timeout, a connection failure), which may open the breaker. Any client's, not only
    // the failing call's own: a stall of the whole machine (or of the proxies' thread) times
    // out every client's requests at once, and a client whose own timed-out requests were
    // background ones (stragglers, follow-ups) has none in its history.
    let mut met: HashMap<u64, Vec<u64>> = HashMap::new();
    // Guards whose client needs every node (`Quorum::All`), from their acquires.
    let mut all_nodes: HashMap<u64, bool> = HashMap::new();
    // Calls on a live lock reported ok: (guard, the key named, if one, invoked, completed, f).
    let mut calls_ok: Vec<(u64, Option<String>, u64, u64, &str)> = Vec::new();
    // Leak-scan lines: one per node (or cluster member) the run scanned.
    let mut scans = 0;
    // Fair acquires by guard.
    let mut fair: BTreeMap<u64, FairCall> = BTreeMap::new();

    for op in &ops {
        if op.f == "fault" {
            // A fault the nemesis could not make or end: the run was not the one planned.
            if op.kind == "fail" {
                report.malformed.push(format!(
                    "the nemesis failed: {}",
                    op.str("error").unwrap_or("(no error given)")
                ));
                continue;
            }
            let Some(id) = op.u64("id") else { continue };
            match op.str("phase") {
                Some("start") => {
                    faults.insert(
                        id,
                        Window {
                            node: op.u64("node"),
                            client: op.u64("client"),
                            start: op.time,
                            end: run_end,
                        },
                    );
                }
                Some("end") => {
                    if let Some(w) = faults.get_mut(&id) {
                        w.end = op.time;
                    }
                }
                _ => {}
            }
            continue;
        }
        if op.f == "leak-scan" {
            scans += 1;
            for field in ["keys", "channels"] {
                if !op.value.get(field).is_some_and(|v| v.is_array()) {
                    report.malformed.push(format!(
                        "a leak-scan line without its {field}: {}",
                        op.to_line()
                    ));
                }
                if let Some(left) = op.value.get(field).and_then(|v| v.as_array()) {
                    if !left.is_empty() {
                        report.leaks.push(format!(
                            "node {}: {field} left after the quiet period: {}",
                            op.u64("node").unwrap_or(u64::MAX),
                            serde_json::Value::Array(left.clone())
                        ));
                    }
                }
            }
            continue;
        }
        let Some(process) = op.process else { continue };
        let n = op.u64("n");
        if op.kind == "invoke" {
            if let Some(n) = n {
                invokes.insert((process, n), op);
            }
            if let (Some(g), Some(all)) = (op.u64("guard"), op.bool("all")) {
                all_nodes.entry(g).or_insert(all);
            }
        }
        let invoke = n.and_then(|n| invokes.get(&(process, n)).copied());
        if op.kind != "invoke" && invoke.is_none() {
            report.malformed.push(format!(
                "a completion without its invocation: {}",
                op.to_line()
            ));
            continue;
        }
        if op.kind == "fail" {
            for node in op
                .value
                .get("nodes")
                .and_then(|n| n.as_array())
                .into_iter()
                .flatten()
            {
                let (Some(i), Some(how)) = (
                    node.get("node").and_then(|n| n.as_u64()),
                    node.get("how").and_then(|h| h.as_str()),
                ) else {
                    continue;
                };
                if how != "breaker" {
                    met.entry(i).or_default().push(op.time);
                }
            }
        }
        let guard = op.u64("guard");
        // Every report of a guard's deadline is the guard's belief from then on.
        if let (Some(g), Some(deadline)) = (guard, op.u64("deadline")) {
            if let Some(h) = holds.get_mut(&g) {
                let stale = invoke.and_then(|i| i.bool("stale")) == Some(true);
                h.reported(op.time, deadline, stale);
            }
        }
        if let ("acquire", Some(g), Some(invoke)) = (op.f.as_str(), guard, invoke) {
            if invoke.str("kind") == Some("fair") {
                let key = invoke.value.get("keys").and_then(|k| k.get(0));
                if let (Some(key), "invoke") = (key.and_then(|k| k.as_str()), op.kind.as_str()) {
                    fair.insert(
                        g,
                        FairCall {
                            key: key.to_string(),
                            process,
                            guard: g,
                            invoked: op.time,
                            completed: None,
                            ok: false,
                            waits: invoke.str("mode") == Some("wait"),
                            gives_up: invoke
                                .u64("wait_ms")
                                .map_or(u64::MAX, |ms| op.time.saturating_add(ms * 1_000_000)),
                        },
                    );
                } else if let Some(call) = fair.get_mut(&g) {
                    call.completed = Some(op.time);
                    call.ok = op.kind == "ok";
                }
            }
        }
        match (op.f.as_str(), op.kind.as_str()) {
            ("acquire", "ok") => {
                let (Some(g), Some(deadline)) = (guard, op.u64("deadline")) else {
                    report.malformed.push(format!(
                        "an acquire without guard or deadline: {}",
                        op.to_line()
                    ));
                    continue;
                };
                let keys: Vec<String> = invoke
                    .and_then(|i| i.value.get("keys"))
                    .and_then(|k| k.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|k| k.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let Some(hold) = invoke.and_then(|i| i.str("hold")).and_then(hold_of) else {
                    report
                        .malformed
                        .push(format!("an acquire without its hold: {}", op.to_line()));
                    continue;
                };
                if keys.is_empty() {
                    report
                        .malformed
                        .push(format!("an acquire without keys: {}", op.to_line()));
                    continue;
                }
                // Guard numbers are unique in a run (each client numbers its own from
                // client * 1,000,000); a reused one would merge two holds into one.
                if holds.contains_key(&g) {
                    report
                        .malformed
                        .push(format!("a guard number acquired twice: {}", op.to_line()));
                    continue;
                }
                holds.insert(
                    g,
                    HoldRecord {
                        process,
                        keys,
                        hold,
                        token: op.u64("token"),
                        start: op.time,
                        deadline,
                        certain_until: deadline,
                        gap: false,
                        end: None,
                    },
                );
            }
            // The calls that end a hold, at their invocation: the client stops believing it
            // holds the lock when it asks to give it up.
            ("release" | "drop", "invoke") => end_hold(&mut holds, guard, op.time),
            ("release-by-holder", "invoke") if op.bool("handed_off") == Some(true) => {
                end_hold(&mut holds, guard, op.time)
            }
            ("extend" | "extend-by-holder" | "release" | "release-by-holder" | "reenter", "ok") => {
                if let (Some(g), Some(invoke)) = (guard, invoke) {
                    let key = invoke.str("key").map(String::from);
                    calls_ok.push((g, key, invoke.time, op.time, op.f.as_str()));
                }
            }
            ("write", "ok") if op.bool("written") == Some(true) => {
                let (Some(register), Some(value)) = (op.str("register"), op.str("value")) else {
                    continue;
                };
                writes
                    .entry((register.to_string(), value.to_string()))
                    .or_default()
                    .push((process, op.u64("token").unwrap_or(0)));
                report.register_writes += 1;
            }
            // Nodes failed and none refused: a refusal is the nodes' state (another holder,
            // an entry gone), not the library failing to reach a healthy quorum.
            (_, "fail")
                if op.str("error") == Some("NoQuorum")
                    && op.u64("failures") > Some(0)
                    && op.u64("refused") == Some(0) =>
            {
                if let Some(invoke) = invoke {
                    failures.push((invoke, op));
                }
            }
            _ => {}
        }
    }

    let scanned = meta.and_then(|m| m.u64("scanned")).unwrap_or(nodes);
    if scans != scanned {
        report.malformed.push(format!(
            "{scans} leak-scan lines for {scanned} nodes scanned: what was left is not known"
        ));
    }

    // Exclusion and tokens: one interval per key of each hold.
    let mut intervals = Vec::new();
    for (g, h) in &holds {
        let end = h.end.unwrap_or(run_end).min(h.deadline);
        for key in &h.keys {
            intervals.push(Interval {
                key: key.clone(),
                start: h.start,
                end,
                token: h.token,
                client: format!("p{}/g{g}", h.process),
                hold: h.hold,
            });
        }
    }
    report.holds = holds.len();
    let exclusion = check_intervals(&intervals);
    report.overlaps.extend(
        exclusion
            .overlaps
            .iter()
            .chain(&exclusion.over_permits)
            .chain(&exclusion.token_regressions)
            .cloned(),
    );

    report.wrong_holder = on_anothers_lock(&holds, &calls_ok, run_start);
    (report.wrong_leader, report.leader_reads) = wrong_leaders(&ops, &invokes, run_start);
    (report.wrong_label, report.labels_read) = wrong_labels(&ops, &invokes, run_start);
    (report.out_of_order, report.fair_pairs) = out_of_fair_order(&fair, &faults, run_start);

    for ((register, value), by) in writes {
        if by.len() > 1 {
            report.lost_updates.push(format!(
                "{register}: value {value} written {} times (process, token): {by:?}",
                by.len()
            ));
        }
    }

    report.faults = faults.len();
    for (invoke, failed) in failures {
        let process = failed.process.unwrap_or(u64::MAX);
        let from = invoke.time.saturating_sub(bound);
        let to = failed.time;
        let during = |w: &&Window| w.start <= to && w.end >= from;
        let frozen = faults
            .values()
            .filter(during)
            .any(|w| w.client == Some(process));
        let mut faulty: Vec<u64> = faults
            .values()
            .filter(during)
            .filter_map(|w| w.node)
            .collect();
        faulty.sort_unstable();
        faulty.dedup();
        let all = failed
            .u64("guard")
            .and_then(|g| all_nodes.get(&g).copied())
            .unwrap_or(false);
        let needed = if all { nodes } else { quorum };
        let healthy = nodes.saturating_sub(faulty.len() as u64);
        // A healthy node's breaker that kept this call's request back, with no failure of
        // that node met by this client within the window.
        let unexplained = failed
            .value
            .get("nodes")
            .and_then(|n| n.as_array())
            .into_iter()
            .flatten()
            .filter(|n| n.get("how").and_then(|h| h.as_str()) == Some("breaker"))
            .filter_map(|n| n.get("node").and_then(|i| i.as_u64()))
            .find(|i| {
                !faulty.contains(i)
                    && !met
                        .get(i)
                        .is_some_and(|ts| ts.iter().any(|t| *t >= from && *t <= to))
            });
        if let (false, true, Some(node)) = (frozen, healthy >= needed, unexplained) {
            report.spurious_failures.push(format!(
                "at {:.2} s, process {process}: {} failed with NoQuorum while {healthy} of {nodes} nodes \
                 had no fault from {} ms before it (faulty: {faulty:?}; needed {needed}), node \
                 {node}'s breaker open with no failure of it met: {}",
                (invoke.time.saturating_sub(run_start)) as f64 / 1e9,
                failed.f,
                bound / 1_000_000,
                failed.str("message").unwrap_or("")
            ));
        }
    }
    report
}

/// Leader reads that named a campaign never made before the read ended, one that found the
/// election busy, or a term other than the campaign's; and how many reads named a leader.
fn wrong_leaders(
    ops: &[Op],
    invokes: &HashMap<(u64, u64), &Op>,
    run_start: u64,
) -> (Vec<String>, usize) {
    // Campaigns by guard: invoked when, and how their acquire ended (kind, token, error).
    let mut campaigns: HashMap<u64, (u64, Option<&Op>)> = HashMap::new();
    for op in ops.iter().filter(|o| o.f == "acquire") {
        let invoke = op.process.zip(op.u64("n")).and_then(|k| invokes.get(&k));
        let election = invoke.is_some_and(|i| i.str("kind") == Some("election"));
        match (op.u64("guard"), op.kind.as_str()) {
            (Some(g), "invoke") if op.str("kind") == Some("election") => {
                campaigns.insert(g, (op.time, None));
            }
            (Some(g), _) if election => {
                if let Some(c) = campaigns.get_mut(&g) {
                    c.1 = Some(op);
                }
            }
            _ => {}
        }
    }
    let mut wrong = Vec::new();
    let mut reads = 0;
    for read in ops.iter().filter(|o| o.f == "leader" && o.kind == "ok") {
        let Some(value) = read.str("value") else {
            continue;
        };
        reads += 1;
        let at = (read.time.saturating_sub(run_start)) as f64 / 1e9;
        let term = read.u64("term");
        let campaign = value
            .strip_prefix('g')
            .and_then(|g| g.parse::<u64>().ok())
            .and_then(|g| campaigns.get(&g));
        let problem = match campaign {
            None => Some("no campaign of that guard".to_string()),
            Some((invoked, _)) if *invoked > read.time => {
                Some("a campaign invoked after the read ended".to_string())
            }
            Some((_, Some(end))) if end.kind == "fail" && end.str("error") == Some("busy") => {
                Some("a campaign that found the election busy".to_string())
            }
            Some((_, Some(end))) if end.kind == "ok" && end.u64("token") != term => {
                Some(format!("the campaign's term was {:?}", end.u64("token")))
            }
            _ => None,
        };
        if let Some(problem) = problem {
            wrong.push(format!(
                "at {at:.2} s, process {:?}: a leader read named {value} with term {term:?}: {problem}",
                read.process
            ));
        }
    }
    (wrong, reads)
}

/// Labels shown by holder reads (`g<guard>`) that name no labelled acquire of the key invoked
/// before the read ended, or a hold whose release had completed (ok: its holder value was
/// then on no quorum, so no quorum could show its record) before the read began; and how
/// many labels the reads showed.
fn wrong_labels(
    ops: &[Op],
    invokes: &HashMap<(u64, u64), &Op>,
    run_start: u64,
) -> (Vec<String>, usize) {
    // Labelled acquires by guard: invoked when, on which keys; and released when.
    let mut labelled: HashMap<u64, (u64, Vec<&str>)> = HashMap::new();
    let mut released: HashMap<u64, u64> = HashMap::new();
    for op in ops {
        match (op.f.as_str(), op.kind.as_str(), op.u64("guard")) {
            ("acquire", "invoke", Some(g)) if op.bool("labelled") == Some(true) => {
                let keys = op.value.get("keys").and_then(|k| k.as_array());
                let keys = keys.map(|a| a.iter().filter_map(|k| k.as_str()).collect());
                labelled.insert(g, (op.time, keys.unwrap_or_default()));
            }
            ("release" | "release-by-holder", "ok", Some(g)) => {
                let at = released.entry(g).or_insert(op.time);
                *at = (*at).min(op.time);
            }
            _ => {}
        }
    }
    let mut wrong = Vec::new();
    let mut shown = 0;
    for read in ops.iter().filter(|o| o.f == "holders" && o.kind == "ok") {
        let invoked = read
            .process
            .zip(read.u64("n"))
            .and_then(|k| invokes.get(&k))
            .map_or(read.time, |i| i.time);
        let key = read.str("key").unwrap_or_default();
        let labels = read.value.get("labels").and_then(|l| l.as_array());
        for label in labels.into_iter().flatten().filter_map(|l| l.as_str()) {
            shown += 1;
            let hold = label
                .strip_prefix('g')
                .and_then(|g| g.parse::<u64>().ok())
                .and_then(|g| Some((g, labelled.get(&g)?)));
            let problem = match hold {
                None => Some("no labelled acquire of that guard".to_string()),
                Some((_, (_, keys))) if !keys.contains(&key) => {
                    Some(format!("that guard's keys were {keys:?}"))
                }
                Some((_, (at, _))) if *at > read.time => {
                    Some("an acquire invoked after the read ended".to_string())
                }
                Some((g, _)) => released.get(&g).filter(|&&at| at < invoked).map(|at| {
                    let before = (invoked - at) as f64 / 1e6;
                    format!("released (ok) {before:.0} ms before the read began")
                }),
            };
            if let Some(problem) = problem {
                let at = invoked.saturating_sub(run_start) as f64 / 1e9;
                wrong.push(format!(
                    "at {at:.2} s, process {:?}: a holder read of {key} showed {label}: {problem}",
                    read.process
                ));
            }
        }
    }
    (wrong, shown)
}

/// Fair requests served while an earlier waiter of the same key waited on a healthy fleet.
fn out_of_fair_order(
    fair: &BTreeMap<u64, FairCall>,
    faults: &HashMap<u64, Window>,
    run_start: u64,
) -> (Vec<String>, usize) {
    let mut found = Vec::new();
    let mut judged = 0;
    let served = fair.values().filter(|b| b.ok);
    for b in served {
        let Some(b_done) = b.completed else { continue };
        for a in fair.values() {
            let earlier =
                a.waits && a.key == b.key && a.invoked.saturating_add(FAIR_MARGIN) <= b.invoked;
            // Still waiting when B came (its completion, of any kind, came later): a pair to
            // judge; passed if A was still waiting when B was served.
            let waiting = a.completed.is_none_or(|t| t > b.invoked) && a.gives_up > b.invoked;
            if !(earlier && waiting && a.guard != b.guard) {
                continue;
            }
            let passed = a.completed.is_none_or(|t| t > b_done) && a.gives_up > b_done;
            let from = a.invoked.saturating_sub(FAIR_MARGIN);
            let disturbed = faults.values().any(|w| {
                w.start <= b_done
                    && w.end >= from
                    && (w.node.is_some()
                        || w.client == Some(a.process)
                        || w.client == Some(b.process))
            });
            judged += usize::from(!disturbed);
            if passed && !disturbed {
                let at = |t: u64| t.saturating_sub(run_start) as f64 / 1e9;
                found.push(format!(
                    "{}: p{}/g{} (waiting since {:.3} s) was passed by p{}/g{} (invoked {:.3} s, \
                     served {:.3} s) on a healthy fleet",
                    a.key,
                    a.process,
                    a.guard,
                    at(a.invoked),
                    b.process,
                    b.guard,
                    at(b.invoked),
                    at(b_done)
                ));
            }
        }
    }
    (found, judged)
}

/// Calls of one guard reported ok while a conflicting guard held the key for their whole span.
fn on_anothers_lock(
    holds: &BTreeMap<u64, HoldRecord>,
    calls: &[(u64, Option<String>, u64, u64, &str)],
    run_start: u64,
) -> Vec<String> {
    let mut by_key: HashMap<&str, Vec<(u64, &HoldRecord)>> = HashMap::new();
    for (g, h) in holds {
        for k in &h.keys {
            by_key.entry(k.as_str()).or_default().push((*g, h));
        }
    }
    let mut found = Vec::new();
    for (g, key, invoked, completed, f) in calls {
        let Some(a) = holds.get(g) else { continue };
        let keys: Vec<&str> = match key {
            Some(k) => vec![k.as_str()],
            None => a.keys.iter().map(String::as_str).collect(),
        };
        for k in keys {
            for (other, b) in by_key.get(k).into_iter().flatten() {
                let conflicts = matches!(
                    (a.hold, b.hold),
                    (Hold::Exclusive, Hold::Exclusive | Hold::Read)
                        | (Hold::Read, Hold::Exclusive)
                        | (Hold::Permit(1), Hold::Permit(1))
                );
                let certain_end = b.end.unwrap_or(u64::MAX).min(b.certain_until);
                if other != g && conflicts && b.start <= *invoked && *completed <= certain_end {
                    found.push(format!(
                        "{k}: {f} of p{}/g{g} reported ok at {:.3} s..{:.3} s while p{}/g{other} \
                         held it ({:.3} s..{:.3} s)",
                        a.process,
                        invoked.saturating_sub(run_start) as f64 / 1e9,
                        completed.saturating_sub(run_start) as f64 / 1e9,
                        b.process,
                        b.start.saturating_sub(run_start) as f64 / 1e9,
                        certain_end.saturating_sub(run_start) as f64 / 1e9,
                    ));
                }
            }
        }
    }
    found
}

fn end_hold(holds: &mut BTreeMap<u64, HoldRecord>, guard: Option<u64>, at: u64) {
    if let Some(h) = guard.and_then(|g| holds.get_mut(&g)) {
        h.end.get_or_insert(at);
    }
}
