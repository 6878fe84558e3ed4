//! The arguments of the coordination commands: `elect`, `leader`, `break` and `ask-release`.

use std::time::Duration;

use clap::Args;

use super::RunArgs;
use crate::values::{parse_duration, parse_key, parse_leader_value};

pub(super) const ASK_HELP: &str = "\
Each holder's client is told on the nodes; a `run` holding KEY with
--on-release-request SIG passes SIG to its command, which may finish early. Nothing on the
key changes. Prints how many holders were asked.

Exit codes:
  0 asked (or nothing held); 64 usage; 69 fewer than a quorum of nodes answered; 71 stdout
  not writable; 78 configuration";

#[derive(Debug, Args)]
pub struct AskArgs {
    /// Print a JSON object.
    #[arg(long)]
    pub json: bool,

    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,
}

pub(super) const BREAK_HELP: &str = "\
Every holder of KEY, of any kind, loses it on every node: its entries are replaced by
tombstones that keep the key from new holders until they would have expired (and for
--lock-delay at least), so that nobody takes it while a broken holder may still believe it
holds. A connected holder learns of it within a round trip (a notice on the channel
quorum-lock:holder-notices), and at its next renewal at the latest; a `run` holding it stops
its command as on a loss, exit 75. An election's leader is deposed the same way. Prints how
many holders were broken. A break needs publish rights on that channel: without them it
fails and changes nothing.

Exit codes:
  0 broken (or nothing held); 64 usage; 69 fewer than a quorum of nodes answered (the break
  may have run on some); 71 stdout not writable; 78 configuration";

#[derive(Debug, Args)]
pub struct BreakArgs {
    /// Keep the key from new holders this long at least after the break.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub lock_delay: Option<Duration>,

    /// Print a JSON object.
    #[arg(long)]
    pub json: bool,

    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,
}

pub(super) const ELECT_HELP: &str = "\
Campaigns in the election KEY (waiting up to --wait, as `run` waits for its lock) and runs
the command while leading, as `run` does under a lock: the command gets QUORUM_LOCK_KEY,
QUORUM_LOCK_HELD=1, QUORUM_LOCK_TERM (the leader's term, higher for every new leader: carry
it with the leader's writes as a fencing token, as QUORUM_LOCK_FENCING_TOKEN) and
QUORUM_LOCK_LEADER_VALUE, and is stopped before leadership can lapse. Resigns when the
command ends, and the next candidate is elected at once.

Examples:
  quorum-lock elect billing-leader --value \"$(hostname):8080\" -w 1d -- ./billing --leader
  quorum-lock leader billing-leader            # prints the value and term; exit 1: nobody

Exit codes:
  as `run`: the command's code; 1 (-E) not elected within --wait; 64 usage; 69 nodes
  unreachable; 75 leadership lost while it ran; 78 configuration";

pub(super) const LEADER_EXIT: &str = "\
Prints `VALUE TERM` (or a JSON object with --json), as a quorum of nodes shows it. With
--watch, a line at the start and at every change (`-` alone while nobody leads), until INT
or TERM.

Exit codes:
  0 a leader (with --watch: stopped by a signal); 1 nobody leads; 64 usage; 69 too few
  nodes answered; 71 stdout not writable; 78 configuration";

#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The value published for this leader while it leads (an address, a host name):
    /// public, shown by `leader` and `status`.
    #[arg(long, value_name = "V", value_parser = parse_leader_value)]
    pub value: String,

    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// Print a line at every change until INT or TERM.
    #[arg(long)]
    pub watch: bool,

    /// Print JSON objects.
    #[arg(long)]
    pub json: bool,

    /// The election's name (its key).
    #[arg(value_parser = parse_key)]
    pub name: String,
}
