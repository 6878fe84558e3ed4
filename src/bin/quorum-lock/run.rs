//! `run KEY CMD...`: flock(1) across the fleet. Takes the lock under the watchdog, runs the
//! command while it is renewed, and releases it after the command ends.
//!
//! # Loss
//! The guard's deadline is the instant until which the lock may be trusted: the library keeps
//! it no later than the earliest expiry a quorum of its entries could have, and moves it with
//! every confirmed renewal. If the deadline comes within `--kill-grace` without having moved
//! (no renewal confirmed: nodes down, partitioned, or `--max-hold` reached), or the lock is
//! lost outright, the command's whole process group gets `--kill-signal`, then KILL once the
//! grace is over and never later than the deadline: the work is dead before the lock could
//! pass to another holder. The exit code is then 75.

use std::process::ExitStatus;
use std::time::Duration;

use quorum_lock::LockGuard;
use tokio::process::Child;
use tokio::time::Instant;

use crate::args::RunArgs;
use crate::child::{exit_code, Command, Group, Signals};
use crate::exit::{self, Failure};
use crate::hold::{take_leadership, take_watched};
use crate::settings::Settings;
use crate::values::{format_duration, signal_name};

/// KILL goes this long before the deadline at the latest, so that a late timer wake-up on a
/// loaded machine still kills the group before the lock can pass on.
const KILL_LEAD: Duration = Duration::from_millis(50);

/// The longest the supervisor sleeps without re-reading the deadline. A renewal only moves it
/// later, but the last renewal before `--max-hold` shortens it, and nothing announces that.
const RECHECK: Duration = Duration::from_millis(100);

/// While the command's group is being stopped after the command itself ended, how often to
/// look whether the rest of the group is gone.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Why the command was stopped.
#[derive(Debug, Clone, Copy)]
enum Reason {
    /// The lock was reported lost (a quorum said the entry is gone, or its validity ran out).
    Lost,
    /// No renewal was confirmed by `deadline - kill grace`.
    NotRenewed,
    /// `--max-hold` ends the lock: its deadline is the time limit's.
    MaxHold,
}

/// How close to the end of `--max-hold` a deadline must be for the stop to be the time
/// limit's (the watchdog caps the last renewal at the limit; a failed renewal leaves the
/// deadline a third of a lease or more before it).
const MAX_HOLD_SLACK: Duration = Duration::from_millis(500);

/// Whether a lock whose deadline is (or was, when it was lost) `deadline` ends at its
/// `--max-hold` (`max_end`), rather than for a renewal that did not come.
pub fn max_hold_reached(max_end: Option<Instant>, deadline: Instant) -> bool {
    max_end.is_some_and(|end| deadline + MAX_HOLD_SLACK >= end)
}

/// The stop in progress: the kill signal was sent; KILL follows at `kill_at`.
#[derive(Debug)]
struct Stop {
    reason: Reason,
    kill_at: Instant,
    killed: bool,
}

/// `run`, or with `elect` (the leader value) `elect`: the command runs while leading the
/// election named by the key.
pub async fn run(settings: &Settings, args: &RunArgs, elect: Option<&str>) -> Result<u8, Failure> {
    // Installed first: the metrics file says how the run ended, however it ended (a usage
    // error, a command not found, nodes down).
    let metrics = match &args.watch.metrics_textfile {
        Some(_) => Some(crate::exporter::install()?),
        None => None,
    };
    let result = supervised(settings, args, elect).await;
    let textfile = args.watch.metrics_textfile.as_deref();
    let what = if elect.is_some() { "elect" } else { "run" };
    crate::exporter::write_at_end(textfile, metrics.as_ref(), what, &result);
    result
}

/// `run` once its metrics are set up.
async fn supervised(
    settings: &Settings,
    args: &RunArgs,
    elect: Option<&str>,
) -> Result<u8, Failure> {
    if elect.is_some() {
        check_elect(args)?;
    }
    crate::hold::check_max_hold(&args.watch)?;
    if args.kill_grace.is_some_and(|g| g.is_zero()) {
        return Err(Failure::usage(
            "--kill-grace 0s: must be positive (the command's time between --kill-signal and KILL)",
        ));
    }
    if let (Some(min), Some(max)) = (args.hold_min, args.watch.max_hold) {
        if min > max {
            return Err(Failure::usage(format!(
                "--hold-min ({}) is longer than --max-hold ({}): the lock ends before its minimum",
                format_duration(min),
                format_duration(max)
            )));
        }
    }
    let grace = args.kill_grace();
    let first = args.watch.first_lease();
    if grace > first / 2 {
        let limit = match args.watch.max_hold {
            Some(max) if max < args.watch.lease => format!("--max-hold ({})", format_duration(max)),
            _ => format!("--lease ({})", format_duration(args.watch.lease)),
        };
        return Err(Failure::usage(format!(
            "--kill-grace ({}) must be at most half the {limit}: the command is stopped that long before the lock's first deadline",
            format_duration(grace),
        )));
    }
    if args.hold_min.is_some_and(|d| d > quorum_lock::MAX_DURATION) {
        return Err(Failure::usage("--hold-min is longer than 365d"));
    }
    let command = Command::resolve(&args.cmd, args.shell_command.as_deref())?;
    let client = settings.connect().await?;
    let result = async {
        // Installed before the wait, so that INT or TERM while waiting ends it cleanly.
        let mut signals = Signals::install()?;
        let mut env = vec![
            ("QUORUM_LOCK_KEY", args.key.clone()),
            ("QUORUM_LOCK_HELD", "1".to_string()),
        ];
        let guard = match elect {
            None => match take_watched(&client, &mut signals, &args.key, &args.watch).await? {
                Ok(guard) => guard,
                Err(signalled) => return Ok(signalled),
            },
            Some(value) => {
                let taken = take_leadership(&client, &mut signals, &args.key, value, &args.watch);
                let leading = match taken.await? {
                    Ok(leading) => leading,
                    Err(signalled) => return Ok(signalled),
                };
                env.push(("QUORUM_LOCK_TERM", leading.term().to_string()));
                env.push(("QUORUM_LOCK_LEADER_VALUE", leading.value().to_string()));
                // From here on, the leadership is its lock: released (resigned) as `run`
                // releases.
                leading.into_guard()
            }
        };
        let acquired = Instant::now();

        if let Some(token) = guard.fencing_token() {
            env.push(("QUORUM_LOCK_FENCING_TOKEN", token.to_string()));
        }
        // A semaphore's permit: the slot taken (KEY#i), whose token the fencing token is.
        if args.watch.kind.permits.is_some_and(|p| p > 1) {
            let slot = String::from_utf8_lossy(guard.key()).into_owned();
            env.push(("QUORUM_LOCK_SLOT", slot));
        }
        // Spawned here, in the top-level future, which `block_on` polls on the main thread (see
        // `Command::spawn` on the parent-death signal).
        let (child, group) = match command.spawn(&env, args.clean_env) {
            Ok(spawned) => spawned,
            Err(failure) => {
                let _ = guard.release().await;
                return Err(failure);
            }
        };
        let max_end = args.watch.max_hold.map(|max| acquired + max);
        let (status, stop) =
            supervise(&guard, child, group, &mut signals, args, grace, max_end).await;

        if let Some(stop) = stop {
            // Best effort: the lock may still stand if the group died before the deadline.
            let _ = guard.release().await;
            let how = if stop.killed && args.kill_signal != libc::SIGKILL {
                format!("{} and then KILL", signal_name(args.kill_signal))
            } else {
                signal_name(args.kill_signal)
            };
            let why = match stop.reason {
                Reason::Lost => "the lock was lost".to_string(),
                Reason::NotRenewed => format!(
                    "no renewal was confirmed by {} before the lock's deadline (nodes unreachable or too slow)",
                    format_duration(grace)
                ),
                Reason::MaxHold => format!(
                    "--max-hold ({}) ends the lock",
                    format_duration(args.watch.max_hold.unwrap_or_default())
                ),
            };
            return Err(Failure::new(
                exit::LOST,
                format!(
                    "lock {:?}: {why}; the command was stopped with {how}",
                    args.key
                ),
            ));
        }
        let code = match status {
            Ok(status) => exit_code(status),
            Err(e) => {
                let _ = guard.release().await;
                return Err(Failure::os(format!("waiting for the command: {e}")));
            }
        };
        if let Some(min) = args.hold_min {
            keep_until(guard, acquired + min, &args.key).await;
        } else if let Err(e) = guard.release().await {
            // The command ran under the lock; only the release is unconfirmed. Its entries expire
            // within one lease.
            eprintln!(
                "quorum-lock: warning: release of {:?} not confirmed: {e}",
                args.key
            );
        }
        Ok(code)
    }
    .await;
    // The release (or acquire) returned at quorum: let its requests to the slower nodes
    // land before the process exits.
    client.finish_background().await;
    result
}

/// What `elect` refuses: the options of `run` that do not apply to an election's lock.
fn check_elect(args: &RunArgs) -> Result<(), Failure> {
    let watch = &args.watch;
    let kind = &watch.kind;
    let refused = if kind.read || kind.write || kind.fair || kind.permits.is_some() {
        "--read, --write, --fair and --permits: an election's key is taken as a mutex"
    } else if watch.fencing {
        "--fencing: a leader always has its term, in QUORUM_LOCK_TERM and QUORUM_LOCK_FENCING_TOKEN"
    } else if watch.max_hold.is_some() {
        "--max-hold: a leader leads until its command ends (or use --lease)"
    } else if watch.label.is_some() {
        "--label: a leader's public text is its --value"
    } else {
        return Ok(());
    };
    Err(Failure::usage(format!("elect does not take {refused}")))
}

/// Waits for the command, forwarding INT/TERM/HUP to its group, and stops the group when the
/// lock can no longer be trusted (see the module docs). Returns the command's status and the
/// stop, if there was one. `max_end`: when `--max-hold` ends the lock.
async fn supervise(
    guard: &LockGuard,
    mut child: Child,
    group: Group,
    signals: &mut Signals,
    args: &RunArgs,
    grace: Duration,
    max_end: Option<Instant>,
) -> (std::io::Result<ExitStatus>, Option<Stop>) {
    let recheck = RECHECK.min(grace / 4).max(Duration::from_millis(5));
    let lost = guard.lost_signal();
    // `--on-release-request`: passed on once.
    let mut ask = args.on_release_request;
    let mut stop: Option<Stop> = None;
    let mut status: Option<std::io::Result<ExitStatus>> = None;
    loop {
        if let Some(done) = status.take() {
            match &stop {
                None => return (done, None),
                // A stop is finished when KILL went out, or when nothing of the group is
                // left (the command's own children may outlive it).
                Some(s) if s.killed || done.is_err() || group.is_empty() => return (done, stop),
                Some(_) => status = Some(done),
            }
        }
        let now = Instant::now();
        let wake = match &stop {
            None => {
                let term_at = guard.deadline().checked_sub(grace).unwrap_or(now);
                term_at.min(now + recheck)
            }
            Some(s) if !s.killed && status.is_some() => s.kill_at.min(now + GROUP_POLL),
            Some(s) if !s.killed => s.kill_at,
            Some(_) => now + Duration::from_secs(3600),
        };
        tokio::select! {
            done = child.wait(), if status.is_none() => status = Some(done),
            signal = signals.recv() => group.signal(signal),
            () = guard.release_requested(), if ask.is_some() && stop.is_none() => {
                if let Some(signal) = ask.take() {
                    group.signal(signal);
                }
            }
            () = lost.wait(), if stop.is_none() => {
                stop = Some(begin_stop(Reason::Lost, guard, group, args.kill_signal, grace));
            }
            () = tokio::time::sleep_until(wake) => match &mut stop {
                // The deadline is read again: a confirmed renewal has moved it.
                None if Instant::now() + grace >= guard.deadline() => {
                    let reason = match max_hold_reached(max_end, guard.deadline()) {
                        true => Reason::MaxHold,
                        false => Reason::NotRenewed,
                    };
                    stop = Some(begin_stop(reason, guard, group, args.kill_signal, grace));
                }
                Some(s) if !s.killed && Instant::now() >= s.kill_at => {
                    group.signal(libc::SIGKILL);
                    s.killed = true;
                }
                _ => {}
            },
        }
    }
}

/// Sends the kill signal to the group and schedules KILL: after the grace, but never later
/// than the deadline (less a margin for timer lateness).
fn begin_stop(
    reason: Reason,
    guard: &LockGuard,
    group: Group,
    kill_signal: i32,
    grace: Duration,
) -> Stop {
    let now = Instant::now();
    group.signal(kill_signal);
    let latest = guard
        .deadline()
        .checked_sub(KILL_LEAD)
        .unwrap_or(now)
        .max(now);
    Stop {
        reason,
        kill_at: (now + grace).min(latest),
        killed: kill_signal == libc::SIGKILL,
    }
}

/// `--hold-min`: the command ended early, so the lock stays until `until`. The entries are
/// extended (or shortened) to end then and left to expire, and this process exits at once; if
/// that fails (too short a TTL for one round trip, or no quorum), the lock is kept here,
/// renewed, and released at `until`.
async fn keep_until(guard: LockGuard, until: Instant, key: &str) {
    let remaining = until.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        if let Err(e) = guard.release().await {
            eprintln!("quorum-lock: warning: release of {key:?} not confirmed: {e}");
        }
        return;
    }
    if guard.extend(remaining).await.is_ok() {
        // Releasing (or dropping) would end the lock now; the entries end at `until`.
        // A single key's lock: never refused.
        let _ = guard.into_holder();
        return;
    }
    tokio::time::sleep_until(until).await;
    if let Err(e) = guard.release().await {
        eprintln!("quorum-lock: warning: release of {key:?} not confirmed: {e}");
    }
}
