//! Lock histories and their checker: every client records when it believed it held a lock
//! (from the moment `acquire` returned until the earlier of its validity deadline and the
//! start of its release), with its fencing token; the checker verifies that no two intervals
//! for one key overlap and that tokens increase in interval order.
//!
//! Times are [`monotonic_nanos`](super::monotonic_nanos), so histories from several processes
//! on one machine can be merged. An interval serialises to one line, for processes to report
//! their histories on standard output.

use std::collections::BTreeMap;
use std::fmt;

use crate::LockGuard;

/// One client's belief that it held a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// The lock key (lossy UTF-8, without spaces).
    pub key: String,
    /// When `acquire` returned (monotonic nanoseconds).
    pub start: u64,
    /// When the client stopped believing it held the lock (monotonic nanoseconds).
    pub end: u64,
    /// The fencing token, if any.
    pub token: Option<u64>,
    /// Who held it (process and task).
    pub client: String,
}

impl Interval {
    /// Starts an interval for a guard that `acquire` just returned.
    pub fn begin(guard: &LockGuard, client: impl Into<String>) -> Interval {
        Interval {
            key: String::from_utf8_lossy(guard.key()).replace(' ', "_"),
            start: super::monotonic_nanos(),
            end: deadline_nanos(guard),
            token: guard.fencing_token(),
            client: client.into(),
        }
    }

    /// Ends the interval now (call before releasing), or at the guard's deadline if that came
    /// first. The deadline is read now, so it includes every renewal, extend and cut made
    /// during the hold: the guard believed it held the lock until then.
    pub fn finish(mut self, guard: &LockGuard) -> Interval {
        self.end = super::monotonic_nanos().min(deadline_nanos(guard));
        self
    }

    /// The line form: `key start end token client`.
    pub fn to_line(&self) -> String {
        let token = self
            .token
            .map_or_else(|| "-".to_string(), |t| t.to_string());
        format!(
            "{} {} {} {} {}",
            self.key, self.start, self.end, token, self.client
        )
    }

    /// Parses [`to_line`](Self::to_line) output.
    pub fn from_line(line: &str) -> Option<Interval> {
        let mut parts = line.split_whitespace();
        let key = parts.next()?.to_string();
        let start = parts.next()?.parse().ok()?;
        let end = parts.next()?.parse().ok()?;
        let token = match parts.next()? {
            "-" => None,
            t => Some(t.parse().ok()?),
        };
        let client = parts.next()?.to_string();
        Some(Interval {
            key,
            start,
            end,
            token,
            client,
        })
    }
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 4)
}

/// The guard's current deadline in [`monotonic_nanos`](super::monotonic_nanos).
fn deadline_nanos(guard: &LockGuard) -> u64 {
    let (now, now_nanos) = (tokio::time::Instant::now(), super::monotonic_nanos());
    let deadline = guard.deadline();
    if deadline >= now {
        now_nanos.saturating_add(nanos(deadline - now))
    } else {
        now_nanos.saturating_sub(nanos(now - deadline))
    }
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Intervals checked.
    pub intervals: usize,
    /// Keys seen.
    pub keys: usize,
    /// Pairs of intervals of one key that overlap (mutual exclusion broken).
    pub overlaps: Vec<String>,
    /// Successive intervals of one key whose tokens did not increase.
    pub token_regressions: Vec<String>,
}

impl Report {
    /// Whether the history is safe.
    pub fn is_safe(&self) -> bool {
        self.overlaps.is_empty() && self.token_regressions.is_empty()
    }

    /// All violations.
    pub fn violations(&self) -> usize {
        self.overlaps.len() + self.token_regressions.len()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} intervals on {} keys: {} overlaps, {} token regressions",
            self.intervals,
            self.keys,
            self.overlaps.len(),
            self.token_regressions.len()
        )?;
        for v in self.overlaps.iter().chain(&self.token_regressions).take(20) {
            writeln!(f, "  {v}")?;
        }
        Ok(())
    }
}

/// Checks a merged history.
pub fn check(history: &[Interval]) -> Report {
    let mut by_key: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
    for i in history.iter().filter(|i| i.end > i.start) {
        by_key.entry(&i.key).or_default().push(i);
    }
    let mut report = Report {
        intervals: history.len(),
        keys: by_key.len(),
        ..Report::default()
    };
    for (key, mut intervals) in by_key {
        intervals.sort_by_key(|i| (i.start, i.end));
        // Compare each interval with the one that ends last among those before it: any
        // overlap with an earlier interval shows up there.
        let mut latest: Option<&Interval> = None;
        let mut previous: Option<&Interval> = None;
        for cur in intervals {
            if let Some(prev) = latest {
                if cur.start < prev.end {
                    report.overlaps.push(format!(
                        "{key}: {} held [{}, {}] while {} held [{}, {}] ({} us of overlap)",
                        cur.client,
                        cur.start,
                        cur.end,
                        prev.client,
                        prev.start,
                        prev.end,
                        (prev.end.min(cur.end) - cur.start) / 1000
                    ));
                }
            }
            if let Some(prev) = previous {
                if let (Some(a), Some(b)) = (prev.token, cur.token) {
                    if b <= a {
                        report.token_regressions.push(format!(
                            "{key}: token {b} of {} after token {a} of {}",
                            cur.client, prev.client
                        ));
                    }
                }
            }
            previous = Some(cur);
            if latest.is_none_or(|p| cur.end >= p.end) {
                latest = Some(cur);
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(key: &str, start: u64, end: u64, token: u64) -> Interval {
        Interval {
            key: key.into(),
            start,
            end,
            token: Some(token),
            client: format!("c{start}"),
        }
    }

    #[test]
    fn disjoint_increasing_history_is_safe() {
        let h = [
            iv("a", 0, 10, 1),
            iv("a", 10, 20, 2),
            iv("b", 5, 30, 1),
            iv("a", 25, 26, 5),
        ];
        let r = check(&h);
        assert!(r.is_safe(), "{r}");
        assert_eq!((r.intervals, r.keys), (4, 2));
    }

    #[test]
    fn overlaps_and_regressions_are_caught() {
        let r = check(&[iv("a", 0, 100, 1), iv("a", 10, 20, 2), iv("a", 50, 60, 3)]);
        assert_eq!(r.overlaps.len(), 2, "{r}");
        let r = check(&[iv("a", 0, 10, 5), iv("a", 20, 30, 5)]);
        assert_eq!((r.overlaps.len(), r.token_regressions.len()), (0, 1), "{r}");
    }

    #[test]
    fn lines_round_trip() {
        let i = iv("k:1", 3, 9, 7);
        assert_eq!(Interval::from_line(&i.to_line()), Some(i));
        let mut j = iv("k", 1, 2, 0);
        j.token = None;
        assert_eq!(Interval::from_line(&j.to_line()), Some(j));
        assert_eq!(Interval::from_line("garbage"), None);
    }
}
