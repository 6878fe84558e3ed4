//! The `quorum-lock` binary, driven as a user drives it, against real `redis-server` fleets
//! (each test its own, on free ports): exclusion across processes under node faults, the
//! loss path (the command and its grandchildren dead before the lock's deadline), exit
//! codes, signal forwarding, `status`, `hold` from a shell script, the fixed-TTL steps, TLS
//! nodes with a private CA and client certificates, and a Redis ACL user limited to the
//! commands the library and the CLI send.
//!
//! Waits are bounded polls for an event (a file, a line, a counter); the timing bounds are
//! generous for a loaded 2-core machine.
//!
//! Here: running the binary and reading what it did (processes, signals, the nodes' entries).
//! The tests, by what they drive: `run`, `hold`, `access` (holder-value steps, `check`, ACL
//! users, TLS) and `edges` (exit codes across subcommands, metrics files, `status` per kind,
//! cluster nodes).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::pki::Pki;
use quorum_lock::testkit::{Fleet, Persistence};
use quorum_lock::QuorumLock;

#[path = "../common/mod.rs"]
mod common;

mod access;
mod edges;
mod elect;
mod hold;
mod permits;
mod run;

const BIN: &str = env!("CARGO_BIN_EXE_quorum-lock");

/// Settings the tests must not inherit from the environment they run in.
const ENV: [&str; 9] = [
    "QUORUM_LOCK_NODES",
    "QUORUM_LOCK_QUORUM",
    "QUORUM_LOCK_NODE_TIMEOUT",
    "QUORUM_LOCK_CONNECT_TIMEOUT",
    "QUORUM_LOCK_CONFIG",
    "QUORUM_LOCK_LOG",
    "QUORUM_LOCK_TLS_CA",
    "QUORUM_LOCK_TLS_CERT",
    "QUORUM_LOCK_TLS_KEY",
];

/// The CLI with a clean environment and `nodes` (given through the environment, as an
/// operator would, to keep passwords off the command line). Generous timeouts: a loaded
/// machine must not turn a healthy node into a failed one.
fn cli_with(nodes: &[String]) -> Command {
    environment(Command::new(BIN), nodes)
}

fn environment(mut cmd: Command, nodes: &[String]) -> Command {
    for var in ENV {
        cmd.env_remove(var);
    }
    cmd.env("QUORUM_LOCK_NODES", nodes.join(","))
        .env("QUORUM_LOCK_NODE_TIMEOUT", "250ms")
        .env("SHELL", "/bin/sh")
        .stdin(Stdio::null());
    cmd
}

fn cli(fleet: &Fleet) -> Command {
    cli_with(&fleet.urls())
}

/// Runs to completion: (exit code, stdout, stderr).
fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("running quorum-lock");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Polls `check` every 10 ms until it holds; panics naming `what` after `limit`.
fn wait_for(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A spawned CLI that is killed if the test ends early.
struct Running(Child);

impl Running {
    fn spawn(cmd: &mut Command) -> Running {
        Running(cmd.spawn().expect("spawning quorum-lock"))
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.0.id()).expect("pid")
    }

    /// Waits for the exit (bounded): its code.
    fn exit_code(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "quorum-lock did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut err) = self.0.stderr.take() {
            let _ = err.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lines of a child's stdout, read on a thread so that a wait for one is bounded.
struct Lines(mpsc::Receiver<String>);

impl Lines {
    fn of(stdout: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines(rx)
    }

    fn next(&self, limit: Duration) -> String {
        self.0
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("no line within {limit:?}: {e}"))
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid this test started (or read from its pid file).
    #[allow(unsafe_code)]
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(r, 0, "signal {sig} to {pid}");
}

/// Whether `pid` is gone (or a zombie: dead, only not yet reaped).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_none_or(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// The pid a shell wrote with `echo $$ > FILE`, once it is all there: the file exists from the
/// moment the shell opens it, before the pid is written.
fn pid_in(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()
        .filter(|text| text.ends_with('\n'))
        .and_then(|text| text.trim().parse().ok())
}

fn read_pid(path: &Path) -> i32 {
    pid_in(path).unwrap_or_else(|| panic!("no pid in {}", path.display()))
}

fn conn(fleet: &Fleet, i: usize) -> redis::Connection {
    fleet
        .client(i)
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("test connection")
}

/// The value stored for `key` on node `i`.
fn entry(fleet: &Fleet, i: usize, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut conn(fleet, i))
        .expect("GET")
}

fn holding(fleet: &Fleet, key: &str) -> usize {
    (0..fleet.len())
        .filter(|&i| entry(fleet, i, key).is_some())
        .count()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("quorum-lock-cli-")
        .tempdir()
        .expect("tempdir")
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}
