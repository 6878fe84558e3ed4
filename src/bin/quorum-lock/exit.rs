//! Exit codes (sysexits.h where one fits, a shell's for the command) and the failure every
//! command returns: one human line on stderr, never a Rust `Debug` dump, never a password.

use std::io::Write;

use quorum_lock::{Error, FailureKind};

use crate::values::format_duration;

pub const OK: u8 = 0;
/// EX_USAGE: the command line is wrong.
pub const USAGE: u8 = 64;
/// EX_UNAVAILABLE: too few nodes answered for a quorum (not contention).
pub const UNAVAILABLE: u8 = 69;
/// EX_SOFTWARE: an error this tool does not know how to classify.
pub const SOFTWARE: u8 = 70;
/// EX_OSERR: the operating system refused something (signal handlers, the runtime).
pub const OS_ERROR: u8 = 71;
/// EX_TEMPFAIL: the lock was lost (or `--max-hold` reached) while it was needed.
pub const LOST: u8 = 75;
/// EX_CONFIG: node addresses, the config file, a setting or a TLS file are wrong, or a node
/// refused the TLS handshake (its certificate not trusted, ours missing or refused).
pub const CONFIG: u8 = 78;
/// As a shell: the command exists but cannot be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// As a shell: the command was not found.
pub const NOT_FOUND: u8 = 127;

/// A command's failure: its exit code and the one line that explains it.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// Shown only with `--verbose`: the lock stayed busy (as flock(1), silent on conflict,
    /// so that cron mails only real failures).
    pub quiet: bool,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: one_line(&message.into()),
            quiet: false,
        }
    }

    /// The lock stayed busy: exit `code` (the `--conflict-exit-code`), silently unless
    /// `--verbose`.
    pub fn busy(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            quiet: true,
            ..Failure::new(code, message)
        }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, message)
    }

    pub fn config(message: impl Into<String>) -> Failure {
        Failure::new(CONFIG, message)
    }

    pub fn os(message: impl Into<String>) -> Failure {
        Failure::new(OS_ERROR, message)
    }

    /// A library error, classified by its kind (never by its text): the one mapping from
    /// errors to exit codes (the README's table):
    ///
    /// | error | exit |
    /// |---|---|
    /// | busy: the wait ended with the lock held by another holder | `conflict` (-E, 1) |
    /// | too few nodes answered for a quorum (down, paused, cut off, too slow) | 69 |
    /// | the lock was lost, or is not held with this token | 75 |
    /// | a bad key, token, TTL or duration for this lock | 64 |
    /// | a bad setting or node address, the same node twice, a replica, a node that is not Redis, wrong credentials, an unknown host, a TLS handshake refused | 78 |
    /// | anything else | 70 |
    ///
    /// Library settings are named by the options that set them (`--lease` for the
    /// watchdog's lease, `ttl` for `as_ttl`), and every message is one line.
    pub fn from_lock(e: &Error, cx: &Context) -> Failure {
        let code = code(e, cx.conflict);
        let message = match e {
            Error::WaitTimeout { .. } => format!("busy: {e}"),
            Error::NoQuorum { .. }
            | Error::Unreachable { .. }
            | Error::ValidityExhausted { .. }
                if code == UNAVAILABLE =>
            {
                format!("nodes unavailable: {e}")
            }
            Error::InvalidConfig { field, reason } => {
                let (option, reason) = (option(field, cx.ttl), options_in(reason));
                // "--quorum 1 is not a majority ..." names its option already.
                match reason.starts_with(&option) {
                    true => reason,
                    false => format!("{option}: {reason}"),
                }
            }
            Error::InvalidTtl { ttl, reason } => {
                format!(
                    "{} {}: {}",
                    cx.ttl,
                    format_duration(*ttl),
                    options_in(reason)
                )
            }
            Error::Unreachable { .. }
            | Error::NoQuorum { .. }
            | Error::DuplicateNode { .. }
            | Error::SameCluster { .. }
            | Error::DuplicateAddress { .. }
            | Error::ReplicaNode { .. }
            | Error::Node(_) => format!("configuration: {e}"),
            _ => e.to_string(),
        };
        match e {
            Error::WaitTimeout { .. } => Failure::busy(code, message),
            _ => Failure::new(code, message),
        }
    }
}

/// What a command tells [`Failure::from_lock`]: its busy exit code, and the option that set
/// the lock's TTL.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    pub conflict: u8,
    pub ttl: &'static str,
}

impl Context {
    /// A command that takes or changes a lock with `--ttl` (`acquire`, `extend`).
    pub const fn ttl(conflict: u8) -> Context {
        Context {
            conflict,
            ttl: "--ttl",
        }
    }

    /// A command that never waits for a lock nor sets a TTL.
    pub const NONE: Context = Context {
        conflict: SOFTWARE,
        ttl: "--lease",
    };
}

/// The exit code of a library error (see [`Failure::from_lock`]).
pub fn code(e: &Error, conflict: u8) -> u8 {
    match e {
        Error::WaitTimeout { .. } => conflict,
        // Nodes that answered wrongly (credentials, TLS, not Redis, no such host) are
        // configuration: waiting will not fix them.
        Error::NoQuorum { failures, .. } | Error::Unreachable { failures, .. }
            if failures.iter().any(|f| misconfigured(f.kind())) =>
        {
            CONFIG
        }
        Error::NoQuorum { .. }
        | Error::Unreachable { .. }
        | Error::ValidityExhausted { .. }
        | Error::ReleaseUnconfirmed { .. } => UNAVAILABLE,
        Error::LockLost { .. } | Error::NotHeld { .. } => LOST,
        Error::InvalidKey { .. }
        | Error::InvalidHolder { .. }
        | Error::InvalidTtl { .. }
        | Error::WaitsForItself { .. } => USAGE,
        Error::InvalidConfig { field, .. } if REQUEST_FIELDS.contains(field) => USAGE,
        Error::InvalidConfig { .. }
        | Error::InvalidNodeUrl { .. }
        | Error::DuplicateNode { .. }
        | Error::SameCluster { .. }
        | Error::DuplicateAddress { .. }
        | Error::ReplicaNode { .. }
        | Error::Node(_) => CONFIG,
        _ => SOFTWARE,
    }
}

/// A node failure that means the address or the credentials are wrong, not that the node
/// is down.
pub fn misconfigured(kind: FailureKind) -> bool {
    matches!(
        kind,
        FailureKind::Auth
            | FailureKind::Tls
            | FailureKind::UnknownHost
            | FailureKind::Protocol
            | FailureKind::Config
    )
}

/// The settings of one request (options of the command, not of the configuration): a bad
/// value is a usage error.
const REQUEST_FIELDS: [&str; 3] = ["max_hold", "wait", "permits"];

/// The option that sets library setting `field`.
fn option(field: &str, ttl: &'static str) -> String {
    match field {
        "max_hold" => "--max-hold",
        "wait" | "wait_timeout" => "--wait",
        "watchdog_lease" => "--lease",
        "node_timeout" => "--node-timeout",
        "connect_timeout" => "--connect-timeout",
        "quorum" => "--quorum",
        "ttl" => ttl,
        other => return other.to_string(),
    }
    .to_string()
}

/// A library reason that names settings, with this tool's options instead.
pub fn options_in(reason: &str) -> String {
    let reason = reason
        .replace("node_timeout", "--node-timeout")
        .replace("min_validity", "the minimum validity")
        .replace("the watchdog lease", "--lease");
    // The library's `Quorum::AtLeast(k)` is `--quorum k` here.
    let mut out = String::with_capacity(reason.len());
    let mut rest = reason.as_str();
    while let Some(at) = rest.find("AtLeast(") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "AtLeast(".len()..];
        match after.split_once(')') {
            Some((k, tail)) if k.bytes().all(|b| b.is_ascii_digit()) => {
                out.push_str(&format!("--quorum {k}"));
                rest = tail;
            }
            _ => {
                out.push_str("AtLeast(");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Every line break and run of spaces as one space: an error is one line on stderr.
pub fn one_line(text: &str) -> String {
    if text.contains(['\n', '\r']) {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    } else {
        text.to_string()
    }
}

/// Writes `text` to stdout. A closed pipe (`quorum-lock status | head -1`) is an error to
/// report, not a panic.
///
/// # Errors
/// Exit 71 when stdout cannot be written.
pub fn print(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::os(format!("writing to stdout: {e}")))
}

/// The exit code of a shell for a command killed by `signal`.
pub fn signalled(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(255)
}

/// Flushes what was printed and ends the process with `code`. `std::process::exit` rather
/// than returning from `main`: dropping the runtime would wait for a blocking stdin read
/// (`hold`) that may never end.
pub fn finish(code: u8) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(i32::from(code))
}
