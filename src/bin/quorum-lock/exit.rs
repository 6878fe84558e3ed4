//! Exit codes (sysexits.h where one fits, a shell's for the command) and the failure every
//! command returns: one human line on stderr, never a Rust `Debug` dump, never a password.

use std::io::Write;

use quorum_lock::Error;

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
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
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

    /// A library error, classified by its kind (never by its text): busy is `conflict`, too
    /// few nodes is 69, a lost lock 75, a bad key, token or TTL 64, a bad setting or node 78.
    pub fn from_lock(e: &Error, conflict: u8) -> Failure {
        let (code, what) = match e {
            Error::WaitTimeout { .. } => (conflict, "busy: "),
            Error::NoQuorum { .. }
            | Error::Unreachable { .. }
            | Error::ValidityExhausted { .. } => (UNAVAILABLE, "nodes unavailable: "),
            Error::LockLost { .. } | Error::NotHeld { .. } => (LOST, ""),
            Error::InvalidKey { .. } | Error::InvalidToken { .. } | Error::InvalidTtl { .. } => {
                (USAGE, "")
            }
            Error::InvalidConfig { .. } | Error::InvalidNodeUrl { .. } => (CONFIG, ""),
            Error::DuplicateNode { .. } | Error::ReplicaNode { .. } | Error::Node(_) => {
                (CONFIG, "configuration: ")
            }
            _ => (SOFTWARE, ""),
        };
        // The library's messages are one line, lowercase, with addresses redacted.
        Failure::new(code, format!("{what}{e}"))
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
