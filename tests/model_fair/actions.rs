//! The model's actions, their effects and their narration.

use super::*;

// ---------------------------------------------------------------------------------------------
// Actions and their narration
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Global time advances by one tick; entries, queue leases and counters expire.
    Tick,
    /// Request `r`, at the top of its wait loop: takes its hand-off, attempts, or gives up.
    Step(u8),
    /// Request `r`, at the top of its wait loop, holds from the notices of a quorum's short
    /// grants (`Line::held_from_notices`).
    Noticed(u8),
    /// Request `r` releases its guard: the stamp, `sent` and the `sure` set.
    Release(u8),
    /// Request `r`'s release is written to every node.
    SendRelease(u8),
    /// Request `r`'s cut-off withdrawal is written (`Bug::WaitingBeforeWithdrawal` only).
    SendWithdraw(u8),
    /// Node `n` runs the oldest request on client `c`'s connection.
    Process(u8, u8),
    /// The oldest request on client `c`'s connection to node `n` is lost.
    Lose(u8, u8),
    /// Request `r`'s node timeout: it stops waiting for every node that has not answered.
    TimeOut(u8),
    /// Node `n` runs the oldest request written to client `c`'s failed connection to it.
    ProcessStale(u8, u8),
    /// Client `c`'s connection to node `n` fails and is replaced (`Config::reconnects`). The
    /// requests awaited on it fail (their re-sends are not modelled); those written to it may
    /// still run on the node later (e.g. buffered by a proxy in front of a paused node), in
    /// any order with what is written to the new connection. Ordering invariants 1 and 2
    /// assume they do not; the holder values make safety independent of them.
    Reconnect(u8, u8),
    /// Node `n` restarts empty.
    Restart(u8),
    /// Node `n`'s clock jumps past time `t`: what would have expired by then expires now.
    ClockJump(u8, u8),
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

pub(super) fn nodes_of(mask: u8) -> String {
    let names: Vec<String> = (0..MAX_N)
        .filter(|n| mask & bit(*n) != 0)
        .map(|n| format!("n{n}"))
        .collect();
    format!("{{{}}}", names.join(","))
}

pub(super) fn waiters_of(mask: u16) -> String {
    let names: Vec<String> = (0..SLOTS)
        .filter(|&w| mask & slot_bit(w) != 0)
        .map(waiter_name)
        .collect();
    format!("{{{}}}", names.join(","))
}

/// A node's state in a few words.
pub(super) fn describe_node(node: &NodeState) -> String {
    let mut parts = Vec::new();
    match node.key {
        Some(e) => parts.push(format!("key {} until {}", e.holder.describe(), e.expiry)),
        None => parts.push("key free".to_string()),
    }
    let mut line: Vec<usize> = (0..SLOTS).filter(|&w| node.in_line(w)).collect();
    line.sort_by_key(|&w| (node.line[w], w));
    if !line.is_empty() {
        let members: Vec<String> = line
            .iter()
            .map(|&w| {
                let name = waiter_name(w);
                format!("{name}#{} until {}", node.line[w], node.lease[w])
            })
            .collect();
        parts.push(format!("line [{}]", members.join(", ")));
    }
    if node.counter_exp != 0 {
        parts.push(format!(
            "counter {} until {}",
            node.counter, node.counter_exp
        ));
    }
    parts.join(", ")
}

/// What a grant did, for the narration.
pub(super) fn describe_grant(
    grant: Option<(usize, u8, u8)>,
    whole: impl Fn(usize, u8) -> bool,
) -> String {
    match grant {
        Some((w, ms, expiry)) if whole(w, ms) => {
            format!("granted {} (whole, {ms}) until {expiry}", waiter_name(w))
        }
        Some((w, ms, expiry)) => {
            format!("granted {} SHORT ({ms}) until {expiry}", waiter_name(w))
        }
        None => "no grant".to_string(),
    }
}
