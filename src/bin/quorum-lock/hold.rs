//! Taking a lock through the library (shared by `run`, `hold` and `acquire`), and the two
//! commands that hand the holder value to a script: `hold` (renewed until a signal or stdin
//! closes) and `acquire` (a fixed TTL, left to expire or to `extend` / `release`).

use metrics_exporter_prometheus::PrometheusHandle;
use quorum_lock::{LockGuard, LockRequest, QuorumLock};
use tokio::io::AsyncReadExt;

use std::time::Duration;

use tokio::time::Instant;

use crate::args::{AcquireArgs, HoldArgs, WaitArgs, WatchArgs};
use crate::child::Signals;
use crate::exit::{self, Context, Failure};
use crate::exporter;
use crate::settings::Settings;

/// Takes the lock: one attempt with `--nonblock`, else waiting up to `--wait`. `ttl` names
/// the option that set the lock's TTL, for messages.
///
/// # Errors
/// The `--conflict-exit-code` when the lock stayed busy (silent unless `--verbose`), 69 when
/// too few nodes answered, 64 for a bad key, lease or duration, 78 for a bad setting.
pub async fn take(
    req: LockRequest<'_>,
    wait: &WaitArgs,
    key: &str,
    ttl: &'static str,
) -> Result<LockGuard, Failure> {
    let cx = Context {
        conflict: wait.conflict_exit_code,
        ttl,
    };
    if wait.nonblock {
        match req.try_acquire().await {
            Ok(Some(guard)) => Ok(guard),
            Ok(None) => Err(Failure::busy(
                cx.conflict,
                format!("busy: lock {key:?} is held by another holder"),
            )),
            Err(e) => Err(Failure::from_lock(&e, &cx)),
        }
    } else {
        req.wait(wait.wait)
            .acquire()
            .await
            .map_err(|e| Failure::from_lock(&e, &cx))
    }
}

/// The lock of `run` and `hold` on `key`, as `watch` says, taken as [`take`] does unless one
/// of the CLI's signals comes first.
///
/// # Errors
/// As [`take`]. `Ok(Err(code))`: a signal ended the wait, and `code` is the exit code it
/// gives (128 + the signal).
pub async fn take_watched(
    client: &QuorumLock,
    signals: &mut Signals,
    key: &str,
    watch: &WatchArgs,
) -> Result<Result<LockGuard, u8>, Failure> {
    let WatchArgs {
        wait,
        kind,
        lease,
        fencing,
        max_hold,
        label,
        ..
    } = watch;
    let mut req = kind.request(client, key).watchdog(*lease).fencing(*fencing);
    if let Some(max) = *max_hold {
        req = req.max_hold(max);
    }
    if let Some(label) = label {
        req = req.label(label.as_str());
    }
    tokio::select! {
        taken = take(req, wait, key, "--lease") => taken.map(Ok),
        signal = signals.recv() => Ok(Err(exit::signalled(signal))),
    }
}

/// `elect`'s leadership of the election `name` with `value`, waiting as `watch` says (a
/// mutex with a fencing token, the term), unless one of the CLI's signals comes first.
///
/// # Errors
/// As [`take_watched`].
pub async fn take_leadership(
    client: &QuorumLock,
    signals: &mut Signals,
    name: &str,
    value: &str,
    watch: &WatchArgs,
) -> Result<Result<quorum_lock::Leadership, u8>, Failure> {
    let cx = Context {
        conflict: watch.wait.conflict_exit_code,
        ttl: "--lease",
    };
    let wait = match watch.wait.nonblock {
        true => std::time::Duration::ZERO,
        false => watch.wait.wait,
    };
    let election = client.election(name).lease(watch.lease).wait(wait);
    tokio::select! {
        taken = election.campaign(value) => match taken {
            Ok(leading) => Ok(Ok(leading)),
            Err(e @ quorum_lock::Error::WaitTimeout { .. }) => Err(Failure::busy(
                cx.conflict,
                format!("not elected: {e}"),
            )),
            Err(e) => Err(Failure::from_lock(&e, &cx)),
        },
        signal = signals.recv() => Ok(Err(exit::signalled(signal))),
    }
}

/// What `hold` and `acquire` print: the holder value, and the fencing token if asked for.
///
/// # Errors
/// Exit 71 when stdout cannot be written (the caller still holds the guard, and releases it).
fn print_holder(guard: &LockGuard, key: &str, json: bool) -> Result<(), Failure> {
    let line = if json {
        serde_json::json!({
            "key": key,
            "holder": guard.holder(),
            "fencing_token": guard.fencing_token(),
            "validity_ms": guard.validity().as_millis() as u64,
        })
        .to_string()
    } else {
        match guard.fencing_token() {
            Some(token) => format!("{} {token}", guard.holder()),
            None => guard.holder().to_string(),
        }
    };
    exit::print(&format!("{line}\n"))
}

/// `hold KEY`: acquires under the watchdog, prints the holder value (and the fencing token), and keeps the lock until a
/// signal (INT, TERM, HUP) or the end of stdin; then releases it.
///
/// # Errors
/// As [`take`]; 75 when the lock is lost while held (or `--max-hold` ends it), or when the
/// release finds it no longer held by a quorum.
pub async fn hold(settings: &Settings, args: &HoldArgs) -> Result<u8, Failure> {
    // Installed first: the metrics file says how `hold` ended, however it ended.
    let metrics = match (&args.metrics_addr, &args.watch.metrics_textfile) {
        (None, None) => None,
        _ => Some(exporter::install()?),
    };
    let result = held(settings, args, metrics.as_ref()).await;
    let textfile = args.watch.metrics_textfile.as_deref();
    exporter::write_at_end(textfile, metrics.as_ref(), "hold", &result);
    result
}

/// `hold` once its metrics are set up.
async fn held(
    settings: &Settings,
    args: &HoldArgs,
    metrics: Option<&PrometheusHandle>,
) -> Result<u8, Failure> {
    check_max_hold(&args.watch)?;
    if let (Some(addr), Some(handle)) = (args.metrics_addr, metrics) {
        exporter::serve(addr, handle.clone()).await?;
    }
    let client = settings.connect().await?;
    let result = async {
        let mut signals = Signals::install()?;
        let taken = take_watched(&client, &mut signals, &args.key, &args.watch);
        let guard = match taken.await? {
            Ok(guard) => guard,
            Err(signalled) => return Ok(signalled),
        };
        if let Err(failure) = print_holder(&guard, &args.key, args.json) {
            let _ = guard.release().await;
            return Err(failure);
        }
        let lost = guard.lost_signal();
        let max_end = args.watch.max_hold.map(|max| Instant::now() + max);
        let margin = args
            .warn_before
            .unwrap_or_else(|| WARN_BEFORE.min(args.watch.first_lease() / 4));
        tokio::select! {
            () = lost.wait() => {
                // The time limit's end, or a renewal that did not come (as `run` tells them).
                let why = match crate::run::max_hold_reached(max_end, guard.deadline()) {
                    true => format!(
                        "--max-hold ({}) ended it",
                        crate::values::format_duration(args.watch.max_hold.unwrap_or_default())
                    ),
                    false => "no renewal was confirmed in time (nodes unreachable or too slow)".to_string(),
                };
                return Err(Failure::new(exit::LOST, format!("lock {:?} lost: {why}", args.key)));
            }
            _ = signals.recv() => {}
            () = stdin_closed() => {}
            () = warn_when_late(&guard, margin, args.warn_signal) => {}
        }
        guard
            .release()
            .await
            .map(|()| exit::OK)
            .map_err(|e| Failure::from_lock(&e, &Context::NONE))
    }
    .await;
    // The release (or acquire) returned at quorum: let its requests to the slower nodes
    // land before the process exits.
    client.finish_background().await;
    result
}

/// `hold`'s default warning margin: 5 s, or a quarter of the first lease if shorter.
const WARN_BEFORE: Duration = Duration::from_secs(5);

/// How often the deadline is read again while waiting for the warning's moment.
const RECHECK: Duration = Duration::from_millis(100);

/// Warns the script when no renewal has been confirmed by `margin` before the lock's
/// deadline (the deadline moves with every confirmed renewal; it is read again every
/// 100 ms): `expiring MS` on stdout and `signal` to the parent process. `renewed` follows if
/// a renewal then moves the deadline. Never completes: the lock's loss ends `hold`.
async fn warn_when_late(guard: &LockGuard, margin: Duration, signal: Option<i32>) {
    let mut warned = false;
    loop {
        let deadline = guard.deadline();
        let now = Instant::now();
        let late = now + margin >= deadline;
        if late && !warned {
            warned = true;
            let left = deadline.saturating_duration_since(now).as_millis();
            let _ = exit::print(&format!("expiring {left}\n"));
            if let Some(signal) = signal {
                crate::child::signal_parent(signal);
            }
        } else if !late && warned {
            warned = false;
            let _ = exit::print("renewed\n");
        }
        let until = if warned {
            now + RECHECK
        } else {
            deadline
                .checked_sub(margin)
                .unwrap_or(now)
                .min(now + RECHECK)
        };
        tokio::time::sleep_until(until.max(now + Duration::from_millis(1))).await;
    }
}

/// `--max-hold` must leave the lock some time: zero is a usage error (caught before any
/// node is contacted).
///
/// # Errors
/// Exit 64 for a zero `--max-hold`.
pub fn check_max_hold(watch: &WatchArgs) -> Result<(), Failure> {
    match watch.max_hold {
        Some(max) if max.is_zero() => Err(Failure::usage("--max-hold 0s: must be positive")),
        _ => Ok(()),
    }
}

/// Completes at the end of stdin (the script closed it, or exited). Whatever is written to
/// it is ignored.
async fn stdin_closed() {
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 1024];
    while let Ok(n) = stdin.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

/// `acquire KEY --ttl DUR`: takes the lock for a fixed TTL and prints the holder value (and the fencing token). The lock is
/// then left to expire, or to `extend` and `release` with the holder value.
///
/// # Errors
/// As [`take`].
pub async fn acquire(settings: &Settings, args: &AcquireArgs) -> Result<u8, Failure> {
    let client = settings.connect().await?;
    let mut req = client.lock(&args.key).ttl(args.ttl).fencing(args.fencing);
    if let Some(label) = &args.label {
        req = req.label(label.as_str());
    }
    let guard = take(req, &args.wait, &args.key, "--ttl").await?;
    if let Err(failure) = print_holder(&guard, &args.key, args.json) {
        let _ = guard.release().await;
        return Err(failure);
    }
    // Dropping the guard would release the lock; the script owns it now.
    // A single key's lock: never refused.
    let _ = guard.into_holder();
    // The acquire returned at quorum; its requests to the slower nodes finish in the
    // background, so that the entry lands on every reachable node: wait for them.
    client.finish_background().await;
    Ok(exit::OK)
}
