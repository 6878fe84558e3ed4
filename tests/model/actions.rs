//! The model's actions, their effects and their narration.

use super::*;

// ---------------------------------------------------------------------------------------------
// Actions and their narration
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Global time advances by one tick; entries expire.
    Tick,
    /// Client `c` starts an acquire attempt, to every node at once.
    Start(u8),
    /// Client `c` starts an acquire attempt by the ordered approach: to the arbiter first.
    StartOrdered(u8),
    /// Node `n` runs the oldest request on client `c`'s connection.
    Process(u8, u8),
    /// The oldest request on client `c`'s connection to node `n` is lost.
    Lose(u8, u8),
    /// The head request of client `c`'s connection to node `n` is answered `MOVED`.
    Redirect(u8, u8),
    /// Node `n`'s reply reaches client `c` (only with `reply_delay`).
    Answer(u8, u8),
    /// Client `c`'s node timeout: it stops waiting for every node that has not answered (the
    /// requests may still run later). All calls of a fan-out start together with the same
    /// timeout, so they time out together. For a renewal collecting answers for the repair,
    /// this is the next renewal coming due.
    GiveUp(u8),
    /// Client `c`'s circuit breaker for node `n` is open: the current fan-out's request to `n`
    /// is not written (taken back from the connection) and counts as failed at once.
    Skip(u8, u8),
    /// Client `c` extends to the given TTL.
    Extend(u8, u8),
    /// Client `c`'s watchdog renews.
    Renew(u8),
    /// Client `c` releases (or drops) its guard.
    Release(u8),
    /// Client `c`'s caller drops its acquire before it holds (a timeout around it).
    Cancel(u8),
    /// Node `n` restarts empty (amnesia: entry, readers, mark and counter lost).
    Restart(u8),
    /// Node `n`'s clock jumps forward past time `t`: everything on it that would have expired
    /// by `t` expires now (entry, readers, mark).
    ClockJump(u8, u8),
    /// Elections: client `c` publishes its holder record on every node.
    Publish(u8),
    /// Elections: the leader read reads node `n`.
    Read(u8),
    /// Breaks: the operator's break reaches node `n`.
    Break(u8),
    /// Durable configurations: node `n` fsyncs its AOF (every write so far reaches its disk).
    Sync(u8),
    /// Durable configurations: node `n`'s machine crashes and comes back with what its disk
    /// has (the writes not yet fsynced are lost).
    Crash(u8),
}

/// Collects the narration of a step, only when asked (never during the search).
pub(super) struct Log {
    pub(super) on: bool,
    pub(super) lines: Vec<String>,
}

impl Log {
    pub(super) fn off() -> Log {
        Log {
            on: false,
            lines: Vec::new(),
        }
    }

    pub(super) fn on() -> Log {
        Log {
            on: true,
            lines: Vec::new(),
        }
    }

    pub(super) fn note(&mut self, line: impl FnOnce() -> String) {
        if self.on {
            self.lines.push(line());
        }
    }
}

/// What a node has with a TTL (entry, readers, mark): names and expiries.
pub(super) fn leases(node: &NodeState) -> Vec<(String, u8)> {
    let mut leases = Vec::new();
    if let Some(e) = node.entry {
        leases.push((e.holder.to_string(), e.expiry));
    }
    for (i, &expiry) in node.readers.iter().enumerate() {
        if expiry != 0 {
            let holder = Holder {
                client: (i / MAX_ATTEMPTS) as u8,
                attempt: (i % MAX_ATTEMPTS) as u8,
            };
            leases.push((format!("reader {holder}"), expiry));
        }
    }
    if let Some(m) = node.mark {
        leases.push((format!("mark c{}", m.waiter), m.expiry));
    }
    leases
}

/// What `before` had and `after` has not, as "x expires" or "x, y expire".
pub(super) fn gone(before: &NodeState, after: &NodeState) -> String {
    let after = leases(after);
    let gone: Vec<String> = leases(before)
        .into_iter()
        .filter(|l| !after.contains(l))
        .map(|(name, _)| name)
        .collect();
    match gone.len() {
        1 => format!("{} expires", gone[0]),
        _ => format!("{} expire", gone.join(", ")),
    }
}

pub(super) fn nodes_of(mask: u8) -> String {
    let names: Vec<String> = (0..MAX_N)
        .filter(|n| mask & bit(*n) != 0)
        .map(|n| format!("n{n}"))
        .collect();
    format!("{{{}}}", names.join(","))
}

/// What a request did on its node, for the narration.
pub(super) enum Effect {
    /// The entry was taken until the expiry (with the counter for a fenced acquire).
    Taken(u8, Option<u8>),
    /// A reader became a member until the expiry (with the counter for a fenced acquire).
    Joined(u8, Option<u8>),
    /// A repair put the entry (or member) back until the expiry.
    Recreated(u8),
    /// Set if absent: refused, the key held by this entry.
    Refused(Option<Entry>),
    /// A writer refused because readers are live; the node's mark afterwards.
    RefusedByReaders(Option<Mark>),
    /// A reader refused because of a waiting writer's mark.
    RefusedByMark(Mark),
    /// Compare-and-something: this holder does not hold the key (it is absent or this entry).
    NotHeld(Option<Entry>),
    /// A reader's extend or release: the reader is not a member.
    NotMember,
    /// The entry (or member) now expires at this time.
    Expires(u8),
    /// Deleted (and the writer's mark with it).
    Deleted(bool),
    /// A reader's member removed (and, with `ReadReleaseDeletesTheSet`, every other member).
    Removed(bool),
    /// A withdrawal deleted the writer's mark, or found none of its own.
    Withdrawn(bool),
    /// The fencing counter is now this.
    Counter(u8),
    Published(bool),
}

impl std::fmt::Display for Effect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = |e: &Option<Entry>| match e {
            Some(e) => format!("held by {}", e.holder),
            None => "absent".to_string(),
        };
        match self {
            Effect::Taken(expiry, None) => write!(f, "taken until {expiry}"),
            Effect::Taken(expiry, Some(counter)) => {
                write!(f, "taken until {expiry}, counter {counter}")
            }
            Effect::Joined(expiry, None) => write!(f, "reader until {expiry}"),
            Effect::Joined(expiry, Some(counter)) => {
                write!(f, "reader until {expiry}, counter {counter}")
            }
            Effect::Recreated(expiry) => write!(f, "re-created until {expiry}"),
            Effect::Refused(entry) => write!(f, "refused ({})", held(entry)),
            Effect::RefusedByReaders(None) => write!(f, "refused (readers live)"),
            Effect::RefusedByReaders(Some(m)) => write!(
                f,
                "refused (readers live), mark c{} until {}",
                m.waiter, m.expiry
            ),
            Effect::RefusedByMark(m) => {
                write!(f, "refused (mark c{} until {})", m.waiter, m.expiry)
            }
            Effect::NotHeld(entry) => write!(f, "not held ({})", held(entry)),
            Effect::NotMember => write!(f, "not a reader"),
            Effect::Expires(expiry) => write!(f, "expires at {expiry} now"),
            Effect::Deleted(false) => write!(f, "deleted"),
            Effect::Deleted(true) => write!(f, "deleted, and its mark"),
            Effect::Removed(false) => write!(f, "removed"),
            Effect::Removed(true) => write!(f, "the readers' set deleted"),
            Effect::Withdrawn(true) => write!(f, "mark deleted"),
            Effect::Withdrawn(false) => write!(f, "no mark of its own"),
            Effect::Counter(counter) => write!(f, "counter now {counter}"),
            Effect::Published(true) => write!(f, "record written"),
            Effect::Published(false) => write!(f, "not its entry: nothing written"),
        }
    }
}
