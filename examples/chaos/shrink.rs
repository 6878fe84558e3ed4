//! Shrinking a failing run: the same seed run again with less (fewer clients, fewer faults
//! of its schedule, fewer kinds, fewer seconds), keeping each cut after which a run still
//! finds an anomaly. A run is not deterministic (threads, timers, the machine), so a cut is
//! kept only when two runs of it in a row failed, each finding two anomalies at least (one
//! would replay one timing away from none); the program found replays as a test
//! (tests/chaos_controls.rs).

use crate::check::Report;
use crate::run::Options;
use crate::workload::KIND_NAMES;

/// The options of a run, as the command line that runs it again.
pub fn command_line(o: &Options, fail_point: Option<&str>) -> String {
    let mut line = format!(
        "--seed {} --seconds {} --clients {}",
        o.seed, o.seconds, o.clients
    );
    if o.quorum4 {
        line.push_str(" --quorum 4");
    }
    if o.clusters {
        line.push_str(" --clusters");
    }
    if o.durable {
        line.push_str(" --durable");
    }
    if let Some(nodes) = &o.nodes {
        line.push_str(&format!(" --nodes {}", nodes.join(",")));
    }
    if let Some(d) = o.base_latency {
        line.push_str(&format!(" --latency-ms {}", d.as_millis()));
    }
    if let Some(faults) = &o.faults {
        let ids: Vec<String> = faults.iter().map(u64::to_string).collect();
        line.push_str(&format!(
            " --faults {}",
            if ids.is_empty() {
                "none".into()
            } else {
                ids.join(",")
            }
        ));
    }
    if let Some(kinds) = &o.kinds {
        line.push_str(&format!(" --kinds {}", kinds.join(",")));
    }
    if let Some(point) = fail_point {
        line.push_str(&format!(" --fail-point {point}"));
    }
    line
}

/// The kinds whose keys an anomaly names (a key's group: `x` mutex, reentrant and multi-key;
/// `f` fair; `rw` read and write; `s` the semaphores), or none when it names no key.
fn kinds_named(report: &Report, prefix: &str) -> Vec<String> {
    let mut kinds: Vec<&str> = Vec::new();
    for line in report.all() {
        // The last: the library's own keys carry the key after a name of theirs
        // (`quorum-lock:queue:{chaos-1}:{chaos-1}:f0`).
        let Some(at) = line.rfind(prefix) else {
            continue;
        };
        let group: String = line[at + prefix.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        kinds.extend(match group.as_str() {
            "x" => &["mutex", "reentrant", "multi-key"][..],
            "f" => &["fair"][..],
            "rw" => &["read", "write"][..],
            "s" => &["semaphore-1", "semaphore-2"][..],
            _ => &[][..],
        });
    }
    let mut kinds: Vec<String> = KIND_NAMES
        .iter()
        .filter(|k| kinds.contains(k))
        .map(|k| k.to_string())
        .collect();
    kinds.dedup();
    kinds
}

/// Shrinks `failing` (whose run found anomalies, `report`) with at most `budget` more runs of
/// `run`, and returns the smallest program that failed.
pub fn shrink(
    failing: Options,
    report: &Report,
    all_faults: Vec<u64>,
    budget: usize,
    mut run: impl FnMut(&Options) -> Report,
) -> Options {
    let mut best = failing;
    let mut runs = 0;
    // A margin: a cut whose runs find a single anomaly replays one timing away from none on
    // a loaded machine, so each run of a cut must find two (when the failing run did).
    let margin = report.anomalies().min(2);
    let mut attempt = |candidate: Options, best: &mut Options| -> bool {
        if runs >= budget {
            return false;
        }
        // Kept only when it fails twice in a row, with the margin each time: a cut that
        // fails now and then would replay as a test that catches now and then.
        let mut failed = true;
        for _ in 0..2 {
            if !failed || runs >= budget {
                failed = false;
                break;
            }
            runs += 1;
            failed = run(&candidate).anomalies() >= margin;
        }
        println!(
            "chaos: shrink runs {runs}/{budget}: {} -> {}",
            command_line(&candidate, None),
            if failed {
                "failed twice (kept)"
            } else {
                "passed"
            }
        );
        if failed {
            *best = candidate;
        }
        failed
    };
    // Kinds: those the anomalies name.
    let prefix = format!("{{chaos-{}}}:", best.seed);
    let named = kinds_named(report, &prefix);
    if !named.is_empty() && named.len() < KIND_NAMES.len() {
        let candidate = Options {
            kinds: Some(named),
            ..best.clone()
        };
        attempt(candidate, &mut best);
    }
    // Faults: none at all, else each half of those left, then one at a time.
    let mut faults = best.faults.clone().unwrap_or(all_faults);
    if !faults.is_empty() {
        let none = Options {
            faults: Some(Vec::new()),
            ..best.clone()
        };
        if attempt(none, &mut best) {
            faults.clear();
        }
    }
    while faults.len() > 1 {
        let half = faults.len() / 2;
        let (first, second) = faults.split_at(half);
        let kept = [first.to_vec(), second.to_vec()].into_iter().find(|part| {
            let candidate = Options {
                faults: Some(part.clone()),
                ..best.clone()
            };
            attempt(candidate, &mut best)
        });
        match kept {
            Some(part) => faults = part,
            None => break,
        }
    }
    // Clients: halved while it fails (two at least: a second client is the usual other
    // holder).
    while best.clients > 2 {
        let candidate = Options {
            clients: (best.clients / 2).max(2),
            ..best.clone()
        };
        if !attempt(candidate, &mut best) {
            break;
        }
    }
    // Seconds: halved while it fails (3 at least).
    while best.seconds > 3 {
        let candidate = Options {
            seconds: (best.seconds / 2).max(3),
            ..best.clone()
        };
        if !attempt(candidate, &mut best) {
            break;
        }
    }
    best
}
