//! Lock histories and their checker: every client records when it believed it held a lock
//! (from the moment `acquire` returned until the earlier of its validity deadline and the
//! start of its release), with its fencing token and how the hold shares its key ([`Hold`]);
//! the checker verifies, per key, that an exclusive hold (a lock, each key of a multi-key
//! lock, a writer) overlaps no other hold, that readers overlap only readers, that no more
//! holders of a semaphore overlap than it has permits, and that fencing tokens increase
//! wherever the order of two holds is known.
//!
//! Times are [`monotonic_nanos`](super::monotonic_nanos), so histories from several processes
//! on one machine can be merged. An interval serialises to one line, for processes to report
//! their histories on standard output.

use std::collections::BTreeMap;
use std::fmt;

use crate::LockGuard;

/// How a hold shares its key with the other holds of that key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Hold {
    /// Shares it with nobody: a lock, one key of a multi-key lock, a read-write lock's writer.
    #[default]
    Exclusive,
    /// A read-write lock's reader: shares it with other readers only.
    Read,
    /// One permit of a semaphore of this many: shares it with at most this many holders in
    /// all, itself included.
    Permit(u32),
}

impl Hold {
    /// Whether a hold of this kind and one of `other` may overlap on one key (the permits'
    /// count is checked apart).
    fn may_share_with(self, other: Hold) -> bool {
        matches!(
            (self, other),
            (Hold::Read, Hold::Read) | (Hold::Permit(_), Hold::Permit(_))
        )
    }

    /// Whether no other hold of the key may overlap this one, so that every other hold began
    /// either after it ended or before it began: its fencing token is then ordered against
    /// every other token of the key. Overlapping readers or permits are not: each takes its
    /// token from its own quorum of increments, in no order the intervals show.
    fn is_alone(self) -> bool {
        matches!(self, Hold::Exclusive | Hold::Permit(1))
    }

    fn to_word(self) -> String {
        match self {
            Hold::Exclusive => "x".into(),
            Hold::Read => "r".into(),
            Hold::Permit(p) => format!("p{p}"),
        }
    }

    fn from_word(word: &str) -> Option<Hold> {
        match word {
            "x" => Some(Hold::Exclusive),
            "r" => Some(Hold::Read),
            _ => Some(Hold::Permit(word.strip_prefix('p')?.parse().ok()?)),
        }
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hold::Exclusive => f.write_str("exclusive"),
            Hold::Read => f.write_str("reader"),
            Hold::Permit(p) => write!(f, "1 of {p} permits"),
        }
    }
}

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
    /// How the hold shares its key.
    pub hold: Hold,
}

impl Interval {
    /// Starts an exclusive interval for a guard that `acquire` just returned, on its key (for
    /// a multi-key lock, its first key only: see [`begin_each_key`](Self::begin_each_key)).
    /// A reader's or a permit's interval says so with [`holding`](Self::holding).
    pub fn begin(guard: &LockGuard, client: impl Into<String>) -> Interval {
        Interval {
            key: line_key(guard.key()),
            start: super::monotonic_nanos(),
            end: deadline_nanos(guard),
            token: guard.fencing_token(),
            client: client.into(),
            hold: Hold::Exclusive,
        }
    }

    /// Starts one exclusive interval per key of the guard: a multi-key lock excludes every
    /// other holder of each of its keys, so each key's history has it.
    pub fn begin_each_key(guard: &LockGuard, client: impl Into<String>) -> Vec<Interval> {
        let first = Interval::begin(guard, client);
        guard
            .keys()
            .into_iter()
            .map(|k| Interval {
                key: line_key(k),
                ..first.clone()
            })
            .collect()
    }

    /// The same interval, held as `hold`.
    #[must_use]
    pub fn holding(mut self, hold: Hold) -> Interval {
        self.hold = hold;
        self
    }

    /// Ends the interval now (call before releasing), or at the guard's deadline if that came
    /// first. The deadline is read now, so it includes every renewal, extend and cut made
    /// during the hold: the guard believed it held the lock until then.
    pub fn finish(mut self, guard: &LockGuard) -> Interval {
        self.end = super::monotonic_nanos().min(deadline_nanos(guard));
        self
    }

    /// The line form: `key start end token client hold`, the hold as `x` (exclusive), `r`
    /// (reader) or `pP` (a permit of P).
    pub fn to_line(&self) -> String {
        let token = self
            .token
            .map_or_else(|| "-".to_string(), |t| t.to_string());
        format!(
            "{} {} {} {} {} {}",
            self.key,
            self.start,
            self.end,
            token,
            self.client,
            self.hold.to_word()
        )
    }

    /// Parses [`to_line`](Self::to_line) output (a line without the hold is exclusive, as
    /// lines were before holds were recorded).
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
        let hold = match parts.next() {
            Some(word) => Hold::from_word(word)?,
            None => Hold::Exclusive,
        };
        Some(Interval {
            key,
            start,
            end,
            token,
            client,
            hold,
        })
    }

    fn describe(&self) -> String {
        format!(
            "{} ({}) held [{}, {}]",
            self.client, self.hold, self.start, self.end
        )
    }
}

/// A key as one word of the line form (lossy UTF-8, spaces replaced).
fn line_key(key: &[u8]) -> String {
    String::from_utf8_lossy(key).replace(' ', "_")
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
    /// Pairs of intervals of one key that may not overlap but do: an exclusive hold with any
    /// other, a reader with an exclusive hold (mutual exclusion broken).
    pub overlaps: Vec<String>,
    /// Holders of a semaphore that took a permit while all of its permits were held.
    pub over_permits: Vec<String>,
    /// Intervals of one key whose tokens are not above those of holds known to come before
    /// them.
    pub token_regressions: Vec<String>,
}

impl Report {
    /// Whether the history is safe.
    pub fn is_safe(&self) -> bool {
        self.violations() == 0
    }

    /// All violations.
    pub fn violations(&self) -> usize {
        self.overlaps.len() + self.over_permits.len() + self.token_regressions.len()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} intervals on {} keys: {} overlaps, {} holders beyond the permits, {} token \
             regressions",
            self.intervals,
            self.keys,
            self.overlaps.len(),
            self.over_permits.len(),
            self.token_regressions.len()
        )?;
        let all = self
            .overlaps
            .iter()
            .chain(&self.over_permits)
            .chain(&self.token_regressions);
        for v in all.take(20) {
            writeln!(f, "  {v}")?;
        }
        Ok(())
    }
}

/// Checks a merged history, key by key: who shared the key with whom, and the fencing
/// tokens. Empty intervals (a guard whose deadline had passed when `acquire` returned) are
/// left out: nobody believed anything during them.
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
        check_sharing(key, &intervals, &mut report);
        check_tokens(key, &intervals, &mut report);
    }
    report
}

/// Walks one key's intervals in order of their starts, keeping those still open when each
/// begins: every overlap of two intervals shows up when the later one begins.
fn check_sharing(key: &str, intervals: &[&Interval], report: &mut Report) {
    let mut open: Vec<&Interval> = Vec::new();
    for &cur in intervals {
        open.retain(|o| o.end > cur.start);
        // One report per interval that should not have begun: against the open hold it may
        // not share the key with that ends last.
        let conflict = open
            .iter()
            .filter(|o| !cur.hold.may_share_with(o.hold))
            .max_by_key(|o| o.end);
        if let Some(prev) = conflict {
            report.overlaps.push(format!(
                "{key}: {} while {} ({} us of overlap)",
                cur.describe(),
                prev.describe(),
                (prev.end.min(cur.end) - cur.start) / 1000
            ));
        }
        if let Hold::Permit(permits) = cur.hold {
            let others: Vec<&&Interval> = open
                .iter()
                .filter(|o| matches!(o.hold, Hold::Permit(_)))
                .collect();
            if others.len() >= permits as usize {
                let held: Vec<String> = others.iter().map(|o| o.describe()).collect();
                report.over_permits.push(format!(
                    "{key}: {} while {} others held a permit: {}",
                    cur.describe(),
                    others.len(),
                    held.join(", ")
                ));
            }
        }
        open.push(cur);
    }
}

/// Tokens are checked where the intervals order two holds: around a hold that nobody may
/// share the key with ([`Hold::is_alone`]), every other hold began before it began or after
/// it ended (in a safe history), and whichever came later got the larger token. Each such
/// hold is compared with the largest token among the holds that began before it, and with
/// the smallest among the later holds that share (a later hold that shares with nobody
/// makes the comparison itself), so that a pair of holds that share with nobody is reported
/// once.
fn check_tokens(key: &str, intervals: &[&Interval], report: &mut Report) {
    let mut largest: Option<(&Interval, u64)> = None;
    for &cur in intervals {
        let Some(token) = cur.token else { continue };
        if cur.hold.is_alone() {
            if let Some((prev, t)) = largest.filter(|(_, t)| *t >= token) {
                report.token_regressions.push(format!(
                    "{key}: token {token} of {} after token {t} of {}",
                    cur.describe(),
                    prev.describe()
                ));
            }
        }
        if largest.is_none_or(|(_, t)| token > t) {
            largest = Some((cur, token));
        }
    }
    let mut smallest_sharing: Option<(&Interval, u64)> = None;
    for &cur in intervals.iter().rev() {
        let Some(token) = cur.token else { continue };
        if !cur.hold.is_alone() {
            if smallest_sharing.is_none_or(|(_, t)| token < t) {
                smallest_sharing = Some((cur, token));
            }
            continue;
        }
        if let Some((next, t)) = smallest_sharing.filter(|(_, t)| *t <= token) {
            report.token_regressions.push(format!(
                "{key}: token {t} of {} after token {token} of {}",
                next.describe(),
                cur.describe()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(key: &str, start: u64, end: u64, token: u64) -> Interval {
        held(key, start, end, Some(token), Hold::Exclusive)
    }

    fn held(key: &str, start: u64, end: u64, token: Option<u64>, hold: Hold) -> Interval {
        Interval {
            key: key.into(),
            start,
            end,
            token,
            client: format!("c{start}"),
            hold,
        }
    }

    fn reader(start: u64, end: u64, token: Option<u64>) -> Interval {
        held("rw", start, end, token, Hold::Read)
    }

    fn writer(start: u64, end: u64, token: Option<u64>) -> Interval {
        held("rw", start, end, token, Hold::Exclusive)
    }

    fn permit(start: u64, end: u64, permits: u32) -> Interval {
        held("sem", start, end, None, Hold::Permit(permits))
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
    fn readers_share_with_readers_and_their_tokens_in_any_order() {
        let r = check(&[
            reader(0, 50, Some(3)),
            reader(10, 30, Some(2)),
            reader(20, 60, Some(2)),
            // A writer after them all, above every reader's token; then readers above it.
            writer(60, 70, Some(4)),
            reader(70, 90, Some(6)),
            reader(75, 80, Some(5)),
        ]);
        assert!(r.is_safe(), "{r}");
    }

    #[test]
    fn a_reader_inside_a_writers_interval_is_caught() {
        let r = check(&[writer(0, 100, None), reader(40, 60, None)]);
        assert_eq!(r.overlaps.len(), 1, "{r}");
        assert!(r.overlaps[0].contains("(reader)"), "{r}");
    }

    #[test]
    fn a_writer_that_begins_among_readers_is_caught() {
        let r = check(&[
            reader(0, 100, None),
            reader(10, 20, None),
            writer(50, 60, None),
        ]);
        assert_eq!(r.overlaps.len(), 1, "{r}");
        let r = check(&[writer(0, 10, None), writer(5, 20, None)]);
        assert_eq!(r.overlaps.len(), 1, "two writers: {r}");
    }

    #[test]
    fn a_writers_token_is_ordered_against_every_reader() {
        // A reader before the writer with a larger token.
        let r = check(&[reader(0, 10, Some(7)), writer(20, 30, Some(5))]);
        assert_eq!(r.token_regressions.len(), 1, "{r}");
        // A reader after the writer with a smaller token.
        let r = check(&[writer(0, 10, Some(5)), reader(20, 30, Some(4))]);
        assert_eq!(r.token_regressions.len(), 1, "{r}");
        assert!(r.token_regressions[0].contains("token 4"), "{r}");
        // A reader after the writer with the same token.
        let r = check(&[writer(0, 10, Some(5)), reader(20, 30, Some(5))]);
        assert_eq!(r.token_regressions.len(), 1, "{r}");
    }

    #[test]
    fn more_holders_than_permits_are_caught() {
        let three = [permit(0, 100, 3), permit(10, 100, 3), permit(20, 100, 3)];
        let r = check(&three);
        assert!(r.is_safe(), "three of three permits: {r}");
        let mut four = three.to_vec();
        four.push(permit(30, 40, 3));
        // Touching is not overlapping: a fifth after the fourth ended, with one freed.
        four.push(permit(100, 110, 3));
        let r = check(&four);
        assert_eq!(r.over_permits.len(), 1, "{r}");
        assert_eq!(r.violations(), 1, "{r}");
        assert!(r.over_permits[0].contains("3 others held a permit"), "{r}");
        // One permit is a mutex.
        let r = check(&[permit(0, 10, 1), permit(5, 20, 1)]);
        assert_eq!(r.over_permits.len(), 1, "{r}");
    }

    #[test]
    fn one_permits_tokens_are_ordered_and_several_permits_are_not() {
        let one = |start, token| held("sem", start, start + 10, Some(token), Hold::Permit(1));
        let r = check(&[one(0, 2), one(10, 1)]);
        assert_eq!(r.token_regressions.len(), 1, "{r}");
        let two = |start, token| held("sem", start, start + 10, Some(token), Hold::Permit(2));
        let r = check(&[two(0, 2), two(10, 1)]);
        assert!(r.is_safe(), "{r}");
    }

    #[test]
    fn lines_round_trip() {
        let i = iv("k:1", 3, 9, 7);
        assert_eq!(Interval::from_line(&i.to_line()), Some(i));
        let mut j = iv("k", 1, 2, 0);
        j.token = None;
        assert_eq!(Interval::from_line(&j.to_line()), Some(j));
        for hold in [Hold::Read, Hold::Permit(3)] {
            let h = held("k", 1, 2, Some(4), hold);
            assert_eq!(Interval::from_line(&h.to_line()), Some(h));
        }
        assert_eq!(
            Interval::from_line("k 1 2 - c").map(|i| i.hold),
            Some(Hold::Exclusive)
        );
        assert_eq!(Interval::from_line("garbage"), None);
        assert_eq!(Interval::from_line("k 1 2 - c p"), None);
    }
}
