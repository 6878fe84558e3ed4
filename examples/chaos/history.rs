//! The history of a chaos run: one JSON object per line, in the form Jepsen's tools read.
//! Every call is an `invoke` followed by its completion: `ok`, `fail` (it did not happen) or
//! `info` (its outcome is unknown: a cancelled call). The nemesis writes `info` lines of its
//! own. Fields: `type`, `f` (the call), `process` (a client's number, or `"nemesis"`), `time`
//! (monotonic nanoseconds), `value` (an object: the key, the kind, the guard's number, the
//! fencing token, the deadline the guard reported, the error).
//!
//! Holder values are secrets (whoever has one can release the lock): a guard is named by a
//! number of the run's own, never by its holder value.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

/// Monotonic nanoseconds, the history's clock (one clock for every client of the run).
pub fn now() -> u64 {
    quorum_lock::testkit::monotonic_nanos()
}

/// A tokio instant (a guard's deadline) on the history's clock.
pub fn instant_nanos(at: tokio::time::Instant) -> u64 {
    let (now_instant, now_nanos) = (tokio::time::Instant::now(), now());
    let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 4);
    if at >= now_instant {
        now_nanos.saturating_add(nanos(at - now_instant))
    } else {
        now_nanos.saturating_sub(nanos(now_instant - at))
    }
}

/// One line of the history.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// `invoke`, `ok`, `fail` or `info`.
    pub kind: String,
    pub f: String,
    /// A client's number; `None` for the nemesis (and the run's own records).
    pub process: Option<u64>,
    pub time: u64,
    pub value: Map<String, Value>,
}

impl Op {
    pub fn to_line(&self) -> String {
        let process = match self.process {
            Some(p) => json!(p),
            None => json!("nemesis"),
        };
        json!({
            "type": self.kind,
            "f": self.f,
            "process": process,
            "time": self.time,
            "value": Value::Object(self.value.clone()),
        })
        .to_string()
    }

    pub fn from_line(line: &str) -> Option<Op> {
        let v: Value = serde_json::from_str(line).ok()?;
        Some(Op {
            kind: v.get("type")?.as_str()?.to_string(),
            f: v.get("f")?.as_str()?.to_string(),
            // A client's number, or the nemesis's name; anything else is no history line.
            process: match v.get("process")? {
                Value::String(s) if s == "nemesis" => None,
                p => Some(p.as_u64()?),
            },
            time: v.get("time")?.as_u64()?,
            value: v.get("value")?.as_object()?.clone(),
        })
    }

    pub fn u64(&self, field: &str) -> Option<u64> {
        self.value.get(field).and_then(Value::as_u64)
    }

    pub fn str(&self, field: &str) -> Option<&str> {
        self.value.get(field).and_then(Value::as_str)
    }

    pub fn bool(&self, field: &str) -> Option<bool> {
        self.value.get(field).and_then(Value::as_bool)
    }
}

/// Where the clients and the nemesis write their lines (in memory; written out at the end).
#[derive(Clone, Default)]
pub struct Recorder {
    ops: Arc<Mutex<Vec<Op>>>,
}

impl Recorder {
    pub fn record(&self, kind: &str, f: &str, process: Option<u64>, value: Value) -> u64 {
        let time = now();
        let value = match value {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(Op {
            kind: kind.into(),
            f: f.into(),
            process,
            time,
            value,
        });
        time
    }

    pub fn len(&self) -> usize {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Every line so far, in the order recorded.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn write_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for op in self.ops() {
            writeln!(out, "{}", op.to_line())?;
        }
        out.flush()
    }
}

/// Reads a history file (lines that do not parse are skipped and counted).
pub fn read(path: &std::path::Path) -> std::io::Result<(Vec<Op>, usize)> {
    let text = std::fs::read_to_string(path)?;
    let mut bad = 0;
    let ops = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let op = Op::from_line(l);
            bad += usize::from(op.is_none());
            op
        })
        .collect();
    Ok((ops, bad))
}
