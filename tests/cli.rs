//! The `quorum-lock` binary, driven as a user drives it, against real `redis-server` fleets
//! (each test its own, on free ports): exclusion across processes under node faults, the
//! loss path (the command and its grandchildren dead before the lock's deadline), exit
//! codes, signal forwarding, `status`, `hold` from a shell script, the fixed-TTL steps, TLS
//! nodes with a private CA and client certificates, and a Redis ACL user limited to the
//! commands the library and the CLI send.
//!
//! Waits are bounded polls for an event (a file, a line, a counter); the timing bounds are
//! generous for a loaded 2-core machine.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::pki::Pki;
use quorum_lock::testkit::{Fleet, Persistence};
use quorum_lock::QuorumLock;

mod common;

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

#[test]
fn twelve_processes_never_overlap_while_a_node_is_killed_and_another_paused() {
    const WORKERS: usize = 12;
    const RUNS: usize = 10;
    let fleet = Arc::new(Fleet::start(5).expect("fleet"));
    let dir = tempdir();
    let log = dir.path().join("log");
    let done = Arc::new(AtomicUsize::new(0));
    // Each critical section appends its start and end; with O_APPEND the file's line order
    // is the order of the writes, so exclusion means strict s/e alternation of one run.
    let script = r#"echo "s $RUN $(date +%s%N)" >> "$LOG"; echo "e $RUN $(date +%s%N)" >> "$LOG""#;
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (fleet, done, log) = (fleet.clone(), done.clone(), log.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for r in 0..RUNS {
                    let (code, _, stderr) = run(cli(&fleet)
                        // After the pause, every build waits the connect timeout for the
                        // paused node, and every release up to the node timeout for the
                        // acquire's request to it, still waiting for a connection; a short
                        // lease bounds the wait should a release miss its quorum.
                        .args(["--connect-timeout", "1s", "--node-timeout", "100ms"])
                        .args(["run", "-w", "120s", "--lease", "5s", "cli:exclusion"])
                        .args(["-c", script])
                        .env("RUN", format!("{w}.{r}"))
                        .env("LOG", &log));
                    if code != 0 {
                        failures.push(format!("worker {w} run {r}: exit {code}: {stderr}"));
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
                failures
            })
        })
        .collect();
    let total = WORKERS * RUNS;
    let started = Instant::now();
    wait_for(Duration::from_secs(120), "20 runs done", || {
        done.load(Ordering::SeqCst) >= 20
    });
    eprintln!("20 done at {:?}", started.elapsed());
    fleet.kill(0).expect("kill node 0");
    // Late, so that fewer runs pay the paused node's timeouts (above).
    wait_for(Duration::from_secs(120), "90 runs done", || {
        done.load(Ordering::SeqCst) >= 90
    });
    eprintln!("90 done at {:?}", started.elapsed());
    fleet.pause(1).expect("pause node 1");
    let failures: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("worker thread"))
        .collect();
    fleet.resume(1).expect("resume node 1");
    assert!(failures.is_empty(), "runs failed:\n{}", failures.join("\n"));

    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(
        lines.len(),
        2 * total,
        "every run wrote start and end:\n{text}"
    );
    let mut previous_end: u128 = 0;
    for pair in lines.chunks(2) {
        let (start, end) = (&pair[0], &pair[1]);
        assert!(
            start[0] == "s" && end[0] == "e" && start[1] == end[1],
            "critical sections overlap: {start:?} then {end:?}\n{text}"
        );
        let (t0, t1): (u128, u128) = (start[2].parse().expect("ns"), end[2].parse().expect("ns"));
        assert!(
            previous_end <= t0 && t0 <= t1,
            "a section started before the previous one ended: {start:?}\n{text}"
        );
        previous_end = t1;
    }
    eprintln!("{total} runs in {:?}", started.elapsed());
}

#[test]
fn a_majority_pause_kills_the_command_and_its_grandchildren_before_the_deadline() {
    let fleet = Fleet::start(5).expect("fleet");
    let dir = tempdir();
    let key = "cli:loss";
    let lease = Duration::from_secs(3);
    // The command ignores TERM where it can (its background grandchild ignores it outright),
    // so only the KILL that must come before the deadline ends it.
    let script = r#"
        trap '' TERM
        sleep 1000 &
        echo $! > "$DIR/grandchild.pid"
        trap 'echo seen > "$DIR/term.seen"' TERM
        echo $$ > "$DIR/child.pid"
        while :; do sleep 0.05; done
    "#;
    let mut cli_run = Running::spawn(
        cli(&fleet)
            .args([
                "--node-timeout",
                "100ms",
                "run",
                "--lease",
                "3s",
                "--kill-grace",
                "1s",
            ])
            .args([key, "-c", script])
            .env("DIR", dir.path())
            .stderr(Stdio::piped()),
    );
    let child_pid_file = dir.path().join("child.pid");
    wait_for(Duration::from_secs(20), "the command started", || {
        pid_in(&child_pid_file).is_some() && pid_in(&dir.path().join("grandchild.pid")).is_some()
    });
    let child = read_pid(&child_pid_file);
    let grandchild = read_pid(&dir.path().join("grandchild.pid"));

    // A renewal shows as the entry's PTTL jumping back up to the lease on a live node. The
    // majority is paused half a renewal period after one, so that the deadline (at most one
    // lease after the last confirmed renewal started) is well inside the bound below.
    let mut node4 = conn(&fleet, 4);
    let pttl =
        |c: &mut redis::Connection| -> i64 { redis::cmd("PTTL").arg(key).query(c).expect("PTTL") };
    let mut last = pttl(&mut node4);
    wait_for(Duration::from_secs(10), "a renewal", || {
        let now = pttl(&mut node4);
        let jumped = now > last + 200;
        last = now;
        jumped
    });
    std::thread::sleep(lease / 6);
    for i in 0..3 {
        fleet.pause(i).expect("pause");
    }
    // Every renewal that could still be confirmed started before this instant, so the
    // lock's deadline is no later than this plus one lease.
    let paused = Instant::now();
    let latest_deadline = paused + lease;

    wait_for(lease * 2, "the command and its grandchild gone", || {
        gone(child) && gone(grandchild)
    });
    let dead_at = Instant::now();
    let code = cli_run.exit_code(Duration::from_secs(10));
    let stderr = cli_run.stderr();
    for i in 0..3 {
        fleet.resume(i).expect("resume");
    }
    eprintln!(
        "the command died {:?} after the pause, the latest deadline was {lease:?} after it",
        dead_at - paused
    );
    assert!(
        dead_at < latest_deadline,
        "the command died {:?} after the latest possible deadline",
        dead_at - latest_deadline
    );
    assert!(
        dir.path().join("term.seen").exists(),
        "the command got the kill signal (TERM) before KILL"
    );
    assert_eq!(code, 75, "exit code for a lost lock; stderr: {stderr}");
    // The command's own stderr (its shell reports the killed sleep) comes first.
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("quorum-lock:"))
        .collect();
    assert_eq!(ours.len(), 1, "one line of quorum-lock's: {stderr}");
    assert!(ours[0].contains("stopped"), "it says why: {stderr}");
}

#[test]
fn exit_codes_for_contention_and_for_the_command() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let (code, token, _) = run(cli(&fleet).args(["acquire", "cli:busy", "--ttl", "30s"]));
    assert_eq!(code, 0, "acquire");
    assert_eq!(token.trim().len(), 32, "a holder value: {token}");

    let (code, _, stderr) = run(cli(&fleet).args(["run", "-n", "cli:busy", "true"]));
    assert_eq!(code, 1, "busy, one attempt: {stderr}");
    // Silent, as flock(1) is: cron mails every line written.
    assert_eq!(stderr, "", "a busy lock printed something");
    let (code, _, stderr) =
        run(cli(&fleet).args(["-v", "run", "-n", "-E", "0", "cli:busy", "true"]));
    assert_eq!(code, 0, "busy, -E 0: {stderr}");
    assert!(stderr.contains("busy"), "--verbose says why: {stderr}");
    let (code, _, _) = run(cli(&fleet).args(["run", "-n", "-E", "42", "cli:busy", "true"]));
    assert_eq!(code, 42, "busy with -E 42");
    let (code, _, stderr) = run(cli(&fleet).args(["run", "-w", "300ms", "cli:busy", "true"]));
    assert_eq!(code, 1, "busy after waiting: {stderr}");

    let free = "cli:free";
    let (code, _, _) = run(cli(&fleet).args(["run", free, "--", "sh", "-c", "exit 7"]));
    assert_eq!(code, 7, "the command's own code");
    let (code, _, _) = run(cli(&fleet).args(["run", free, "-c", "kill -USR1 $$"]));
    assert_eq!(
        code,
        128 + libc::SIGUSR1,
        "128 + the signal that killed the command"
    );
    let (code, _, stderr) = run(cli(&fleet).args(["run", free, "--", "no-such-command-here"]));
    assert_eq!(code, 127, "not found: {stderr}");
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("script");
    let (code, _, stderr) = run(cli(&fleet).args(["run", free]).arg(&script));
    assert_eq!(code, 126, "not executable: {stderr}");
    // --max-hold ends the lock while the command runs: stopped, 75.
    let (code, _, stderr) = run(cli(&fleet)
        .args([
            "run",
            "--lease",
            "1s",
            "--kill-grace",
            "300ms",
            "--max-hold",
            "1500ms",
        ])
        .args([free, "sleep", "30"]));
    assert_eq!(code, 75, "max hold reached: {stderr}");
    assert!(
        stderr.contains("--max-hold (1.5s) ends the lock"),
        "{stderr}"
    );
    // A release returns at quorum; the slowest node follows within moments.
    wait_for(Duration::from_secs(5), "no entry left", || {
        holding(&fleet, free) == 0
    });
}

#[test]
fn run_read_shares_with_readers_and_run_write_waits_for_them() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let (a, b, done) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("done"),
    );
    // Two readers that can only finish together: each marks itself in and waits for the
    // other, then both wait for the test's word.
    let reader = |me: &Path, other: &Path| {
        Running::spawn(
            cli(&fleet)
                .args(["run", "--read", "cli:rw", "-c"])
                .arg(format!(
                    "touch {me}; while [ ! -e {other} ] || [ ! -e {done} ]; do sleep 0.01; done",
                    me = me.display(),
                    other = other.display(),
                    done = done.display()
                )),
        )
    };
    let mut first = reader(&a, &b);
    let mut second = reader(&b, &a);
    wait_for(Duration::from_secs(20), "both readers inside", || {
        a.exists() && b.exists()
    });
    // A writer cannot come in while they read; neither can a mutex user see a writer.
    let (code, _, stderr) = run(cli(&fleet).args(["run", "--write", "-n", "cli:rw", "true"]));
    assert_eq!(code, 1, "a writer got in beside readers: {stderr}");
    // A waiting writer gets in once they leave.
    let mut writer = Running::spawn(cli(&fleet).args([
        "run",
        "--write",
        "-w",
        "20s",
        "cli:rw",
        "-c",
        "echo wrote",
    ]));
    std::fs::write(&done, "").expect("done");
    assert_eq!(first.exit_code(Duration::from_secs(20)), 0);
    assert_eq!(second.exit_code(Duration::from_secs(20)), 0);
    assert_eq!(writer.exit_code(Duration::from_secs(20)), 0);
    // The kinds are exclusive options; the fair lock runs as the mutex does.
    let (code, _, stderr) = run(cli(&fleet).args(["run", "--read", "--write", "k", "true"]));
    assert_eq!(code, 64, "--read with --write: {stderr}");
    let (code, out, stderr) =
        run(cli(&fleet).args(["run", "--fair", "cli:fair", "-c", "echo fair"]));
    assert_eq!((code, out.trim()), (0, "fair"), "{stderr}");
}

#[test]
fn exit_codes_for_usage_configuration_and_unreachable_nodes() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    for args in [
        vec!["run"],
        vec!["run", "--bogus", "k", "true"],
        vec!["--quorum", "most", "status", "k"],
        vec!["run", "--lease", "30s", "--kill-grace", "20s", "k", "true"],
        vec!["run", "-w", "10x", "k", "true"],
        vec!["run", "--max-hold", "0s", "k", "true"],
        vec!["hold", "--max-hold", "0s", "k"],
        vec!["run", "--kill-grace", "0s", "k", "true"],
        vec!["run", "--hold-min", "3s", "--max-hold", "1s", "k", "true"],
        vec!["status", "--permits", "0", "k"],
        vec!["run", "--lease", "0s", "k", "true"],
        vec!["acquire", "k", "--ttl", "0s"],
        vec!["status", "quorum-lock:fence:k"],
        vec!["nonsense"],
    ] {
        let (code, _, stderr) = run(cli(&fleet).args(&args));
        assert_eq!(code, 64, "usage error for {args:?}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "one line for {args:?}: {stderr}"
        );
    }
    let (code, help, _) = run(cli(&fleet).arg("--help"));
    assert_eq!(code, 0);
    assert!(help.contains("Exit codes") && help.contains("75"), "{help}");
    assert!(help.contains("valkey://"), "the node URLs: {help}");
    // The library's `AtLeast(1)` is this tool's `--quorum 1`, in every subcommand.
    for sub in [&["run", "k", "true"][..], &["status", "k"], &["check"]] {
        let (code, _, stderr) = run(cli(&fleet).args(["--quorum", "1"]).args(sub));
        assert_eq!(code, 78, "{sub:?}: {stderr}");
        assert!(
            stderr.contains("--quorum 1 is not a majority") && !stderr.contains("AtLeast"),
            "{sub:?}: {stderr}"
        );
    }
    for sub in [
        "run", "hold", "status", "acquire", "extend", "release", "check",
    ] {
        let (code, help, _) = run(cli(&fleet).args([sub, "--help"]));
        assert_eq!(code, 0);
        assert!(
            help.contains("Exit codes") && help.contains("64"),
            "{sub}: {help}"
        );
    }

    let bad_toml = dir.path().join("bad.toml");
    std::fs::write(
        &bad_toml,
        "nodes = [\"redis://:hunter2@127.0.0.1:1\"\nquorum = \n",
    )
    .expect("file");
    let unknown_key = dir.path().join("unknown.toml");
    std::fs::write(&unknown_key, "nodez = []\n").expect("file");
    let missing = dir.path().join("missing.toml");
    let url = fleet.url(0);
    let mut cases: Vec<(&str, Command)> = vec![
        ("missing config file", cli(&fleet)),
        ("unparsable config file", cli_with(&[])),
        ("unknown setting", cli(&fleet)),
        (
            "bad scheme",
            cli_with(&["http://:hunter2@127.0.0.1:1".into()]),
        ),
        (
            "bad url for status",
            cli_with(&["redis://:hunter2@[::1".into()]),
        ),
        ("minority quorum", cli(&fleet)),
        ("no nodes", cli_with(&[])),
        (
            "same server twice",
            cli_with(&[url.clone(), url.replace("127.0.0.1", "localhost")]),
        ),
    ];
    cases[0]
        .1
        .arg("--config")
        .arg(&missing)
        .args(["status", "k"]);
    cases[1]
        .1
        .arg("--config")
        .arg(&bad_toml)
        .args(["status", "k"]);
    cases[2]
        .1
        .arg("--config")
        .arg(&unknown_key)
        .args(["status", "k"]);
    cases[3].1.args(["run", "k", "true"]);
    cases[4].1.args(["status", "k"]);
    cases[5].1.args(["--quorum", "1", "run", "k", "true"]);
    cases[6].1.args(["run", "k", "true"]);
    cases[7].1.args(["run", "k", "true"]);
    for (what, mut cmd) in cases {
        let (code, _, stderr) = run(&mut cmd);
        assert_eq!(code, 78, "configuration error, {what}: {stderr}");
        assert!(
            !stderr.contains("hunter2"),
            "{what}: password shown: {stderr}"
        );
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "one line, {what}: {stderr}"
        );
    }

    // Nodes that refuse connections: not contention, 69; the password never shown.
    let down = Fleet::start(3).expect("fleet");
    let urls: Vec<String> = (0..3)
        .map(|i| down.url(i).replace("redis://", "redis://:hunter2@"))
        .collect();
    for i in 0..3 {
        down.kill(i).expect("kill");
    }
    for args in [
        vec!["run", "k", "true"],
        vec!["status", "k"],
        vec!["release", "k", "token"],
    ] {
        let (code, _, stderr) = run(cli_with(&urls).args(&args));
        assert_eq!(code, 69, "unreachable, {args:?}: {stderr}");
        assert!(!stderr.contains("hunter2"), "password shown: {stderr}");
        assert!(
            !stderr.contains("Error {") && !stderr.contains("Os {"),
            "no Debug dump: {stderr}"
        );
    }
}

#[test]
fn signals_go_to_the_command_group_and_the_command_dies_with_the_cli() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let key = "cli:signals";
    let script = r#"
        trap 'echo trapped > "$DIR/trapped"; while [ ! -e "$DIR/go" ]; do sleep 0.01; done; exit 3' TERM
        echo $$ > "$DIR/child.pid"
        while :; do sleep 0.05; done
    "#;
    let mut cli_run = Running::spawn(
        cli(&fleet)
            .args(["run", key, "-c", script])
            .env("DIR", dir.path())
            .stderr(Stdio::piped()),
    );
    wait_for(Duration::from_secs(20), "the command started", || {
        dir.path().join("child.pid").exists()
    });
    signal(cli_run.pid(), libc::SIGTERM);
    wait_for(Duration::from_secs(10), "the command got TERM", || {
        dir.path().join("trapped").exists()
    });
    assert!(
        holding(&fleet, key) >= 2,
        "the lock is still held by a quorum while the command handles the signal"
    );
    std::fs::write(dir.path().join("go"), "").expect("go");
    assert_eq!(
        cli_run.exit_code(Duration::from_secs(10)),
        3,
        "the command's code"
    );
    // Released, not expired: the lease is 30 s.
    wait_for(Duration::from_secs(5), "the lock released", || {
        holding(&fleet, key) == 0
    });

    // The command dies with the CLI, even when the CLI is killed outright (parent-death
    // signal): nothing keeps working after the lock stops being renewed.
    let mut cli_run = Running::spawn(
        cli(&fleet)
            .args([
                "run",
                key,
                "-c",
                r#"echo $$ > "$DIR/orphan.pid"; exec sleep 100"#,
            ])
            .env("DIR", dir.path()),
    );
    let pid_file = dir.path().join("orphan.pid");
    wait_for(Duration::from_secs(20), "the command started", || {
        pid_in(&pid_file).is_some()
    });
    let orphan = read_pid(&pid_file);
    signal(cli_run.pid(), libc::SIGKILL);
    assert_eq!(cli_run.exit_code(Duration::from_secs(10)), -1, "killed");
    wait_for(
        Duration::from_secs(10),
        "the command gone with the CLI",
        || gone(orphan),
    );
}

/// `hold` says why it lost its lock: its `--max-hold` ended it, or renewals did not come
/// (two of three nodes frozen); before, both said "no renewal ... (or --max-hold ended it)",
/// also without a `--max-hold`.
#[test]
fn hold_says_whether_its_max_hold_or_the_nodes_ended_the_lock() {
    let fleet = Fleet::start(3).expect("fleet");
    let hold = |args: &[&str]| {
        let mut running = Running::spawn(
            cli(&fleet)
                .arg("hold")
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let lines = Lines::of(running.0.stdout.take().expect("stdout"));
        lines.next(Duration::from_secs(20));
        running
    };
    let mut limited = hold(&["--max-hold", "1s", "cli:why-max"]);
    assert_eq!(limited.exit_code(Duration::from_secs(10)), 75);
    let stderr = limited.stderr();
    assert!(stderr.contains("--max-hold (1s) ended it"), "{stderr}");

    let mut renewed = hold(&["--lease", "1s", "cli:why-nodes"]);
    fleet.pause(1).expect("pause");
    fleet.pause(2).expect("pause");
    let code = renewed.exit_code(Duration::from_secs(10));
    fleet.resume(1).expect("resume");
    fleet.resume(2).expect("resume");
    assert_eq!(code, 75);
    let stderr = renewed.stderr();
    assert!(
        stderr.contains("no renewal was confirmed") && !stderr.contains("--max-hold"),
        "{stderr}"
    );
}

#[test]
fn status_during_a_hold_shows_a_quorum_and_never_the_holder_value() {
    let fleet = Fleet::start(3).expect("fleet");
    let key = "cli:status";
    let mut hold = Running::spawn(
        cli(&fleet)
            .args(["hold", "--fencing", key])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let lines = Lines::of(hold.0.stdout.take().expect("stdout"));
    let line = lines.next(Duration::from_secs(20));
    let (token, fence) = line.split_once(' ').expect("token and fencing token");
    assert_eq!(token.len(), 32, "{line}");
    assert!(fence.parse::<u64>().is_ok_and(|f| f > 0), "{line}");
    // `hold` prints as soon as a quorum confirmed: the third node's entry may still be coming.
    wait_for(Duration::from_secs(5), "the entry on every node", || {
        holding(&fleet, key) == 3
    });

    let (code, text, _) = run(cli(&fleet).args(["status", "--json", key]));
    assert_eq!(code, 0);
    assert!(!text.contains(token), "holder value shown: {text}");
    let status = json(&text);
    assert_eq!(status["verdict"], "held", "{text}");
    assert_eq!(status["held_by"], 3, "{text}");
    assert_eq!(status["quorum"], 2, "{text}");
    let fence: i64 = fence.parse().expect("token");
    let nodes = status["node_status"].as_array().expect("nodes");
    for node in nodes {
        assert_eq!(node["holder"], 1, "{text}");
        assert!(node["ttl_ms"].as_i64().is_some_and(|t| t > 0), "{text}");
    }
    // The token was written back to a quorum (a node's counter may be higher: a re-sent
    // fenced acquire counts twice there).
    let fenced = nodes
        .iter()
        .filter(|n| n["fence"].as_i64().is_some_and(|f| f >= fence))
        .count();
    assert!(
        fenced >= 2,
        "counters at least the token on a quorum: {text}"
    );
    let (code, text, _) = run(cli(&fleet).args(["status", key]));
    assert_eq!(code, 0);
    assert!(text.contains("held by a quorum"), "{text}");
    assert!(!text.contains(token), "holder value shown: {text}");

    drop(hold.0.stdin.take());
    assert_eq!(
        hold.exit_code(Duration::from_secs(10)),
        0,
        "hold ends when stdin closes"
    );
    let (_, text, _) = run(cli(&fleet).args(["status", "--json", key]));
    assert_eq!(json(&text)["verdict"], "free", "{text}");
}

#[test]
fn hold_driven_by_a_shell_script_releases_when_its_stdin_closes() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let key = "cli:script";
    let script = r#"
        coproc HOLD { exec "$QL" hold "$KEY"; }
        pid=$HOLD_PID
        read -r token <&"${HOLD[0]}"
        echo "token=$token"
        while [ ! -e "$DIR/go" ]; do sleep 0.01; done
        exec {HOLD[1]}>&-
        wait "$pid"
        echo "exit=$?"
    "#;
    let mut bash = environment(Command::new("bash"), &fleet.urls());
    bash.args(["-c", script])
        .env("QL", BIN)
        .env("KEY", key)
        .env("DIR", dir.path())
        .stdout(Stdio::piped());
    let mut bash = Running::spawn(&mut bash);
    let lines = Lines::of(bash.0.stdout.take().expect("stdout"));
    let line = lines.next(Duration::from_secs(20));
    let token = line
        .strip_prefix("token=")
        .expect("the script read a token");
    assert_eq!(token.len(), 32, "{line}");
    assert!(
        (0..3)
            .filter(|&i| entry(&fleet, i, key).as_deref() == Some(token))
            .count()
            >= 2,
        "a quorum holds the printed token"
    );
    std::fs::write(dir.path().join("go"), "").expect("go");
    assert_eq!(
        lines.next(Duration::from_secs(10)),
        "exit=0",
        "hold's exit code"
    );
    assert_eq!(bash.exit_code(Duration::from_secs(10)), 0);
    wait_for(Duration::from_secs(5), "released on every node", || {
        holding(&fleet, key) == 0
    });
}

/// An HTTP GET of `path` on `addr`: the response's body.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).expect("connecting to the exporter");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n").expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a response head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

#[test]
fn hold_serves_its_metrics_in_the_prometheus_format_without_keys_or_addresses() {
    let fleet = Fleet::start(3).expect("fleet");
    let key = "cli:metrics-secret-name";
    let mut hold = Running::spawn(
        cli(&fleet)
            .args([
                "hold",
                "--lease",
                "1500ms",
                "--metrics-addr",
                "127.0.0.1:0",
                key,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let errors = Lines::of(hold.0.stderr.take().expect("stderr"));
    let line = errors.next(Duration::from_secs(20));
    let addr = line
        .strip_prefix("quorum-lock: metrics on http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("the bound address: {line}"))
        .to_string();
    let lines = Lines::of(hold.0.stdout.take().expect("stdout"));
    let token = lines.next(Duration::from_secs(20));
    // Held, and renewed at least once (every 500 ms).
    let mut body = String::new();
    wait_for(
        Duration::from_secs(20),
        "a confirmed renewal in the metrics",
        || {
            body = http_get(&addr, "/metrics");
            body.contains("quorum_lock_renewals_total{by=\"watchdog\",outcome=\"confirmed\"}")
        },
    );
    assert!(body.contains("quorum_lock_held 1"), "{body}");
    assert!(
        body.contains("quorum_lock_acquire_attempts_total{outcome=\"acquired\"} 1"),
        "{body}"
    );
    // Histograms (which can be added up across hosts), with buckets for lock waits.
    assert!(
        body.contains("# TYPE quorum_lock_acquire_duration_seconds histogram"),
        "{body}"
    );
    assert!(
        body.contains(
            "quorum_lock_acquire_duration_seconds_bucket{outcome=\"acquired\",le=\"0.005\"}"
        ),
        "{body}"
    );
    assert!(body.contains("node=\"2\""), "per-node series: {body}");
    for secret in [key, token.as_str(), "127.0.0.1", "redis://"] {
        assert!(!body.contains(secret), "{secret:?} in the metrics: {body}");
    }
    drop(hold.0.stdin.take());
    assert_eq!(hold.exit_code(Duration::from_secs(10)), 0);
}

#[test]
fn the_command_gets_the_key_and_fencing_token_and_hold_min_keeps_the_lock() {
    let fleet = Fleet::start(3).expect("fleet");
    let key = "cli:env";
    let (code, out, _) = run(cli(&fleet).args([
        "run",
        "--fencing",
        key,
        "-c",
        r#"echo "$QUORUM_LOCK_KEY $QUORUM_LOCK_HELD $QUORUM_LOCK_FENCING_TOKEN""#,
    ]));
    assert_eq!(code, 0);
    let fields: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(fields[..2], [key, "1"], "key and held flag: {out}");
    let first: u64 = fields[2].parse().expect("a fencing token");
    assert!(first >= 1, "{out}");
    let (_, out, _) = run(cli(&fleet).args([
        "run",
        "--fencing",
        key,
        "-c",
        "echo $QUORUM_LOCK_FENCING_TOKEN",
    ]));
    let second: u64 = out.trim().parse().expect("a fencing token");
    assert!(
        second > first,
        "the next holder's token is larger: {first}, {second}"
    );
    let (_, out, _) =
        run(cli(&fleet).args(["run", key, "-c", "echo ${QUORUM_LOCK_FENCING_TOKEN-unset}"]));
    assert_eq!(out.trim(), "unset", "no token without --fencing");

    // --hold-min: the command ends at once, the lock stays until the minimum has passed.
    let started = Instant::now();
    let (code, _, _) = run(cli(&fleet).args(["run", "--hold-min", "3s", key, "true"]));
    assert_eq!(code, 0);
    let (code, _, _) = run(cli(&fleet).args(["run", "-n", key, "true"]));
    if started.elapsed() < Duration::from_millis(2500) {
        assert_eq!(code, 1, "still held within --hold-min");
    }
    let (code, _, stderr) = run(cli(&fleet).args(["run", "-w", "10s", key, "true"]));
    assert_eq!(code, 0, "free after --hold-min: {stderr}");
    assert!(
        started.elapsed() >= Duration::from_millis(2900),
        "not before --hold-min"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_extend_and_release_by_token_follow_the_library() {
    let fleet = Fleet::start(3).expect("fleet");
    let key = "cli:steps";
    let cli_out = |args: Vec<String>| {
        let urls = fleet.urls();
        async move {
            tokio::task::spawn_blocking(move || run(cli_with(&urls).args(&args)))
                .await
                .expect("cli")
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (code, token, _) = cli_out(args(&["acquire", key, "--ttl", "10s"])).await;
    assert_eq!(code, 0);
    let token = token.trim().to_string();
    // The acquire returns at quorum and lets the slower node's request finish before exiting.
    wait_for(Duration::from_secs(5), "the entry on every node", || {
        holding(&fleet, key) == 3
    });

    let (code, out, _) = cli_out(args(&["extend", "--json", key, &token, "--ttl", "60s"])).await;
    assert_eq!(code, 0, "{out}");
    let extended = json(&out);
    assert_eq!(extended["extended"], true, "{out}");
    let confirmed = extended["confirmed"].as_u64().expect("confirmed");
    let long = (0..3)
        .filter(|&i| {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(key)
                .query(&mut conn(&fleet, i))
                .expect("PTTL");
            pttl > 50_000
        })
        .count();
    assert!(
        confirmed >= 2 && long as u64 >= confirmed,
        "extended to 60 s where confirmed: {out}"
    );
    let (code, _, stderr) = cli_out(args(&[
        "extend",
        key,
        "0123456789abcdef0123456789abcdef",
        "--ttl",
        "60s",
    ]))
    .await;
    assert_eq!(code, 75, "a wrong token holds nothing: {stderr}");
    let (code, _, stderr) = cli_out(args(&["extend", key, "two words", "--ttl", "60s"])).await;
    assert_eq!(code, 64, "not a token: {stderr}");
    assert!(
        !stderr.contains("two words"),
        "the token is not shown: {stderr}"
    );

    // A library client waits with a long retry delay: only the release notice, which the
    // CLI's release publishes as the library does, can wake it in time.
    let client = QuorumLock::builder()
        .nodes(fleet.urls())
        .node_timeout(Duration::from_millis(250))
        .retry_delay(Duration::from_secs(60))
        .build()
        .await
        .expect("client");
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lock(key)
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.stats().waiting == 0 {
        assert!(Instant::now() < deadline, "the waiter never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let released = Instant::now();
    let (code, _, stderr) = cli_out(args(&["release", key, &token])).await;
    assert_eq!(code, 0, "{stderr}");
    let guard = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter was woken by the release notice")
        .expect("task")
        .expect("acquired");
    assert!(released.elapsed() < Duration::from_secs(20));
    assert!(
        client.stats().woken >= 1,
        "woken by a notice, not its timer"
    );
    guard.release().await.expect("release");
    let (code, out, _) = cli_out(args(&["release", "--json", key, &token])).await;
    assert_eq!(code, 75, "releasing twice: not held");
    let released = json(&out);
    assert_eq!(released["released"], false, "{out}");
    assert_eq!(released["confirmed"], 0, "{out}");
}

#[test]
fn check_reports_what_weakens_safety() {
    let plain = Fleet::start(3).expect("fleet");
    let (code, out, _) = run(cli(&plain).args(["check"]));
    assert_eq!(code, 78, "nodes without AOF: {out}");
    assert!(out.contains("no AOF"), "{out}");
    let url = plain.url(0);
    let (code, out, _) = run(cli_with(&[
        url.clone(),
        url.replace("127.0.0.1", "localhost"),
        plain.url(1),
    ])
    .args(["check", "--json"]));
    assert_eq!(code, 78, "{out}");
    let report = json(&out);
    let findings = report["findings"].as_array().expect("findings");
    assert!(
        findings.iter().any(|f| f["message"]
            .as_str()
            .is_some_and(|m| m.contains("same redis server"))),
        "{out}"
    );

    let safe = Fleet::builder()
        .nodes(3)
        .persistence(Persistence::AofAlways)
        .start()
        .expect("fleet");
    let (code, out, _) = run(cli(&safe).args(["check"]));
    assert_eq!(code, 0, "a safe fleet: {out}");
    assert!(out.contains("no configuration problems found"), "{out}");
    let (code, out, _) = run(cli(&safe).args(["check", "--json"]));
    assert_eq!(code, 0);
    let report = json(&out);
    for node in report["nodes"].as_array().expect("nodes") {
        assert_eq!(node["role"], "master", "{out}");
        assert_eq!(node["appendfsync"], "always", "{out}");
        assert!(
            node["clock_offset_ms"]
                .as_f64()
                .is_some_and(|o| o.abs() < 500.0),
            "{out}"
        );
    }
}

/// The README's minimal ACL rule, for keys under `acl:`, with its additions for `check`
/// (TIME, ROLE) and `status` (TYPE, ZCOUNT, reading the family's keys). The commands: SET (acquire, repair); EVAL, EVALSHA, SCRIPT LOAD (the
/// scripts); GET, DEL, EXISTS, PEXPIRE, INCR, PTTL and PUBLISH (inside the scripts, where
/// ACLs apply too); SUBSCRIBE, UNSUBSCRIBE (release notices); INFO and CONFIG GET (build-time
/// checks). On Redis 7.2 and later also CLIENT SETINFO (the redis crate's handshake, which
/// ignores a refusal), added by the test when the server knows it.
const ACL_RULE: [&str; 32] = [
    "locker",
    "on",
    ">s3cret-pw",
    "resetkeys",
    "~acl:*",
    "~quorum-lock:fence:{acl:*",
    "%R~quorum-lock:readers:{acl:*",
    "%R~quorum-lock:writer-waiting:{acl:*",
    "%R~quorum-lock:queue-expiry:{acl:*",
    "resetchannels",
    "&quorum-lock:released:{acl:*",
    "-@all",
    "+set",
    "+get",
    "+del",
    "+exists",
    "+pexpire",
    "+pttl",
    "+incr",
    "+publish",
    "+eval",
    "+evalsha",
    "+script|load",
    "+subscribe",
    "+unsubscribe",
    "+ping",
    "+info",
    "+config|get",
    "+time",
    "+role",
    "+type",
    "+zcount",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_acl_user_limited_to_the_library_commands_is_enough() {
    let (fleet, urls) = common::acl_fleet(&ACL_RULE);
    let key = "acl:job";

    let client = QuorumLock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_millis(250))
        .retry_delay(Duration::from_secs(60))
        .build()
        .await
        .expect("build: INFO and CONFIG GET");
    let guard = client
        .acquire(key, Duration::from_secs(10))
        .await
        .expect("acquire");
    guard.extend(Duration::from_secs(20)).await.expect("extend");
    let fenced = {
        let waiter = {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .lock(key)
                    .ttl(Duration::from_secs(10))
                    .fencing(true)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
            })
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.stats().waiting == 0 {
            assert!(Instant::now() < deadline, "the waiter never subscribed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        guard.release().await.expect("release");
        tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("woken by the release notice (SUBSCRIBE, PUBLISH)")
            .expect("task")
            .expect("fenced acquire")
    };
    let first = fenced.fencing_token().expect("a fencing token");
    fenced.release().await.expect("release");
    let watched = client
        .lock(key)
        .watchdog(Duration::from_millis(900))
        .acquire()
        .await
        .expect("watchdog lock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.stats().extended < 3 {
        assert!(Instant::now() < deadline, "renewals");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(watched.is_held());
    watched.release().await.expect("release");

    let cli = |args: &[&str]| {
        let mut cmd = cli_with(&urls);
        cmd.args(args);
        tokio::task::spawn_blocking(move || run(&mut cmd))
    };
    let (code, out, stderr) = cli(&[
        "run",
        "--fencing",
        key,
        "-c",
        "echo $QUORUM_LOCK_FENCING_TOKEN",
    ])
    .await
    .expect("cli");
    assert_eq!(code, 0, "run: {stderr}");
    let second: u64 = out.trim().parse().expect("a fencing token");
    assert!(second > first, "fencing tokens increase: {first}, {second}");
    let (code, token, stderr) = cli(&["acquire", key, "--ttl", "10s"]).await.expect("cli");
    assert_eq!(code, 0, "acquire: {stderr}");
    let token = token.trim().to_string();
    let (code, out, stderr) = cli(&["status", "--json", key]).await.expect("cli");
    assert_eq!(code, 0, "status: {stderr}");
    assert_eq!(json(&out)["verdict"], "held", "{out}");
    let (code, _, stderr) = cli(&["extend", key, &token, "--ttl", "20s"])
        .await
        .expect("cli");
    assert_eq!(code, 0, "extend: {stderr}");
    let (code, _, stderr) = cli(&["release", key, &token]).await.expect("cli");
    assert_eq!(code, 0, "release: {stderr}");
    let (code, out, stderr) = cli(&["check", "--json"]).await.expect("cli");
    assert_eq!(code, 78, "check (no AOF on test nodes): {stderr}");
    for node in json(&out)["nodes"].as_array().expect("nodes") {
        assert_eq!(node["role"], "master", "ROLE allowed: {out}");
        assert!(node["appendfsync"].is_string(), "CONFIG GET allowed: {out}");
        assert!(node["clock_offset_ms"].is_number(), "TIME allowed: {out}");
    }

    // Nothing was denied: the ACL log of every node is empty.
    for i in 0..3 {
        let log: Vec<redis::Value> = redis::cmd("ACL")
            .arg("LOG")
            .query(&mut conn(&fleet, i))
            .expect("ACL LOG");
        assert!(log.is_empty(), "node {i} denied something: {log:?}");
    }
    // And the rule does restrict: another key prefix is refused.
    let (code, _, stderr) = cli(&["run", "-n", "other:job", "true"]).await.expect("cli");
    assert_ne!(code, 0, "a key outside the rule is refused: {stderr}");
}

/// A PKI's PEM files, as an operator keeps them.
struct TlsFiles {
    ca: std::path::PathBuf,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
}

impl TlsFiles {
    fn write(pki: &Pki, dir: &Path) -> TlsFiles {
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("client.pem"),
            key: dir.join("client.key"),
        };
        std::fs::write(&files.ca, &pki.ca).expect("ca.pem");
        std::fs::write(&files.cert, &pki.client.cert).expect("client.pem");
        std::fs::write(&files.key, &pki.client.key).expect("client.key");
        files
    }
}

/// Three TLS nodes that require a client certificate signed by the PKI's CA.
fn tls_fleet(pki: &Pki) -> Fleet {
    Fleet::builder()
        .nodes(3)
        .tls(pki.fleet_tls(true))
        .start()
        .expect("starting a TLS fleet")
}

#[test]
fn run_status_check_and_the_token_steps_on_tls_nodes_requiring_client_certificates() {
    let pki = Pki::new("cli");
    let fleet = tls_fleet(&pki);
    assert!(fleet.urls().iter().all(|u| u.starts_with("rediss://")));
    let dir = tempdir();
    let files = TlsFiles::write(&pki, dir.path());

    // The options on the command line.
    let (code, out, stderr) = run(cli(&fleet)
        .arg("--tls-ca")
        .arg(&files.ca)
        .arg("--tls-cert")
        .arg(&files.cert)
        .arg("--tls-key")
        .arg(&files.key)
        .args(["run", "tls:job", "-c", "echo ran"]));
    assert_eq!((code, out.trim()), (0, "ran"), "run: {stderr}");

    // The environment, for the steps of a script and status.
    let with_env = |args: &[&str]| {
        let mut cmd = cli(&fleet);
        cmd.env("QUORUM_LOCK_TLS_CA", &files.ca)
            .env("QUORUM_LOCK_TLS_CERT", &files.cert)
            .env("QUORUM_LOCK_TLS_KEY", &files.key)
            .args(args);
        run(&mut cmd)
    };
    let key = "tls:steps";
    let (code, token, stderr) = with_env(&["acquire", key, "--ttl", "30s"]);
    assert_eq!(code, 0, "acquire: {stderr}");
    let token = token.trim().to_string();
    let (code, out, stderr) = with_env(&["status", "--json", key]);
    assert_eq!(code, 0, "status: {stderr}");
    let report = json(&out);
    assert_eq!(report["verdict"], "held", "{out}");
    assert_eq!(report["reachable"], 3, "{out}");
    assert!(
        !out.contains(&token),
        "status shows the holder value: {out}"
    );
    let (code, _, stderr) = with_env(&["extend", key, &token, "--ttl", "60s"]);
    assert_eq!(code, 0, "extend: {stderr}");
    let (code, _, stderr) = with_env(&["release", key, &token]);
    assert_eq!(code, 0, "release: {stderr}");

    // The config file, with paths relative to it.
    let config = dir.path().join("quorum-lock.toml");
    let nodes: Vec<String> = fleet.urls().iter().map(|u| format!("{u:?}")).collect();
    std::fs::write(
        &config,
        format!(
            "nodes = [{}]\ntls_ca = \"ca.pem\"\ntls_cert = \"client.pem\"\ntls_key = \"client.key\"\n",
            nodes.join(", ")
        ),
    )
    .expect("config file");
    let from_file = |args: &[&str]| {
        let mut cmd = cli(&fleet);
        cmd.env_remove("QUORUM_LOCK_NODES")
            .env("QUORUM_LOCK_CONFIG", &config)
            .current_dir("/")
            .args(args);
        run(&mut cmd)
    };
    let (code, out, stderr) = from_file(&["status", key]);
    assert_eq!(code, 0, "status: {stderr}");
    assert!(out.contains("verdict: free"), "{out}");
    let (code, out, stderr) = from_file(&["check", "--json"]);
    assert_eq!(code, 78, "check (no AOF on test nodes): {stderr}");
    for node in json(&out)["nodes"].as_array().expect("nodes") {
        assert_eq!(node["reachable"], true, "{out}");
        assert_eq!(node["role"], "master", "{out}");
    }
}

#[test]
fn tls_mistakes_are_configuration_errors_in_one_line_that_never_show_the_key() {
    let pki = Pki::new("cli-mistakes");
    let other = Pki::new("cli-other");
    let fleet = tls_fleet(&pki);
    let dir = tempdir();
    let files = TlsFiles::write(&pki, dir.path());
    let secret = dir.path().join("secret.key");
    std::fs::write(
        &secret,
        "-----BEGIN PRIVATE KEY-----\nS3cretKeyMaterialThatMustNotShow\n-----END PRIVATE KEY-----\n",
    )
    .expect("secret.key");
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, &other.client.key).expect("other.key");
    let missing = dir.path().join("missing-ca.pem");
    let (ca, cert, key) = (&files.ca, &files.cert, &files.key);
    // What goes wrong, the TLS options, the command, and what the message must say.
    type Options<'a> = Vec<(&'a str, &'a Path)>;
    let cases: Vec<(&str, Options, &str, &[&str])> = vec![
        (
            "no CA",
            vec![("--tls-cert", cert), ("--tls-key", key)],
            "run",
            &["not trusted", "--tls-ca"],
        ),
        (
            "no CA",
            vec![("--tls-cert", cert), ("--tls-key", key)],
            "status",
            &["not trusted", "--tls-ca"],
        ),
        (
            "no CA",
            vec![("--tls-cert", cert), ("--tls-key", key)],
            "check",
            &["not trusted", "--tls-ca"],
        ),
        (
            "no client certificate",
            vec![("--tls-ca", ca)],
            "run",
            &["requires a client certificate", "--tls-cert"],
        ),
        (
            "no client certificate",
            vec![("--tls-ca", ca)],
            "status",
            &["requires a client certificate", "--tls-cert"],
        ),
        (
            "a CA file that is missing",
            vec![("--tls-ca", &missing)],
            "status",
            &["--tls-ca", "missing-ca.pem", "cannot read"],
        ),
        (
            "a key that is not PEM",
            vec![
                ("--tls-ca", ca),
                ("--tls-cert", cert),
                ("--tls-key", &secret),
            ],
            "run",
            &["--tls-key", "secret.key"],
        ),
        (
            "another certificate's key",
            vec![
                ("--tls-ca", ca),
                ("--tls-cert", cert),
                ("--tls-key", &other_key),
            ],
            "status",
            &["--tls-key", "does not match"],
        ),
        (
            "a key as the CA",
            vec![("--tls-ca", key)],
            "run",
            &["--tls-ca", "client.key"],
        ),
        (
            "a certificate without its key",
            vec![("--tls-ca", ca), ("--tls-cert", cert)],
            "run",
            &["--tls-key"],
        ),
    ];
    let secrets: Vec<&str> = std::iter::once("S3cretKeyMaterial")
        .chain(
            [&pki.client.key, &other.client.key]
                .into_iter()
                .flat_map(|k| {
                    k.lines()
                        .filter(|l| !l.starts_with("-----") && l.len() > 16)
                }),
        )
        .collect();
    for (what, options, command, expected) in cases {
        let mut cmd = cli(&fleet);
        for (option, path) in &options {
            cmd.arg(option).arg(path);
        }
        cmd.arg(command);
        if command != "check" {
            cmd.arg("tls:mistake");
        }
        if command == "run" {
            cmd.arg("true");
        }
        let (code, _, stderr) = run(&mut cmd);
        assert_eq!(code, 78, "{what}, {command}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "one line, {what}: {stderr}"
        );
        for text in expected {
            assert!(
                stderr.contains(text),
                "{what}, {command}: no {text:?} in {stderr}"
            );
        }
        if let Some(s) = secrets.iter().find(|s| stderr.contains(*s)) {
            panic!("{what}, {command}: shows {s:?}: {stderr}");
        }
    }
}

/// `--max-hold` shorter than a third of `--lease` (before: the command ran for most of the
/// lease, 24.7 s of a 2 s max hold): the lock is taken for the max hold only, and the
/// command is stopped before it ends.
#[test]
fn a_max_hold_shorter_than_the_lease_ends_the_lock_and_the_command_in_time() {
    let fleet = Fleet::start(3).expect("fleet");
    let key = "cli:max-hold";
    let start = Instant::now();
    let (code, _, stderr) =
        run(cli(&fleet).args(["run", "--max-hold", "2s", key, "--", "sleep", "40"]));
    let took = start.elapsed();
    assert_eq!(code, 75, "stopped at the max hold: {stderr}");
    assert!(
        took < Duration::from_secs(4),
        "the command ran {took:?} of a 2 s max hold"
    );
    // The time limit, said as such (before: "nodes unreachable, or --max-hold reached").
    assert!(stderr.contains("--max-hold (2s) ends the lock"), "{stderr}");
    assert!(!stderr.contains("unreachable"), "{stderr}");
    wait_for(
        Duration::from_secs(5),
        "the lock's entries are gone",
        || holding(&fleet, key) == 0,
    );
}

/// `status` names the kind of lock it finds and counts every node that answers as
/// reachable: a semaphore's permits (before: WRONGTYPE, shown as unreachable, exit 69), a
/// read-write lock's readers (before: "free", while a writer is refused), a fair lock's line.
/// A semaphore of more than one permit is judged against every node (its quorum), and the
/// plain rows say "taken" and "read" where the key is, with the counts apart from the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_kind_of_lock_it_finds() {
    let fleet = Fleet::start(3).expect("fleet");
    // Blocking calls of the binary: short, on one of the two worker threads.
    let status = |args: &[&str]| {
        let mut cmd = cli(&fleet);
        cmd.args(["status", "--json"]).args(args);
        let (code, out, err) = run(&mut cmd);
        assert_eq!(code, 0, "status {args:?}: {err}");
        json(&out)
    };
    let plain = |args: &[&str]| {
        let (code, out, err) = run(cli(&fleet).arg("status").args(args));
        assert_eq!(code, 0, "status {args:?}: {err}");
        out
    };
    let all = QuorumLock::builder()
        .nodes(fleet.urls())
        .quorum(quorum_lock::Quorum::All)
        .node_timeout(Duration::from_millis(250))
        .build()
        .await
        .unwrap();
    let permit = all
        .semaphore("cli:pool", 2)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    all.finish_background().await;
    let s = status(&["cli:pool"]);
    assert_eq!(s["kind"], "semaphore", "{s}");
    assert_eq!(s["reachable"], 3, "{s}");
    assert_eq!(s["verdict"], "taken", "{s}");
    let s = status(&["--permits", "1", "cli:pool"]);
    assert_eq!(s["verdict"], "full", "{s}");
    let s = status(&["--permits", "2", "cli:pool"]);
    assert_eq!(s["verdict"], "free", "a permit is left: {s}");
    // Two permits need every node, whatever the configured quorum (2 of 3).
    assert_eq!(s["quorum"], 3, "{s}");
    let text = plain(&["--permits", "2", "cli:pool"]);
    assert!(text.contains("quorum 3 (every node"), "{text}");
    assert!(
        text.contains("fewer than 2 permits taken on 3 of 3 nodes"),
        "{text}"
    );
    // Every node's row: the permit count, then the fence, apart (was "1-").
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("127.0.0.1")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    for row in rows {
        let words: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(words[2], "taken", "{text}");
        assert_eq!(words[words.len() - 2..], ["1", "-"], "{text}");
    }
    permit.release().await.unwrap();

    let reader = all
        .read_lock("cli:catalog")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    all.finish_background().await;
    let s = status(&["cli:catalog"]);
    assert_eq!(s["kind"], "read-write", "{s}");
    assert_eq!(s["verdict"], "read", "{s}");
    let text = plain(&["cli:catalog"]);
    let locks: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("127.0.0.1"))
        .map(|l| l.split_whitespace().nth(2).unwrap_or(""))
        .collect();
    assert_eq!(locks, ["read", "read", "read"], "the LOCK column: {text}");
    let (code, _, _) = run(cli(&fleet).args(["run", "-n", "--write", "cli:catalog", "true"]));
    assert_eq!(code, 1, "a writer is refused while a reader holds");
    reader.release().await.unwrap();

    let fair = all
        .fair_lock("cli:payouts")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiting = {
        let all = all.clone();
        tokio::spawn(async move {
            all.fair_lock("cli:payouts")
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let s = loop {
        let s = status(&["cli:payouts"]);
        if s["node_status"][0]["line"] == 1 {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter never showed in line: {s}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(s["kind"], "fair", "{s}");
    assert_eq!(s["verdict"], "held", "{s}");
    fair.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
    all.finish_background().await;
}

/// One mapping from errors to exit codes, the same for every subcommand (the README's
/// table): a node that is not Redis, a wrong password, an unknown host and the same address
/// twice are configuration (78), in one line; nodes that are down are 69. A literal duplicate
/// is refused without asking the node (it may be down).
#[test]
fn every_subcommand_maps_the_same_errors_to_the_same_exit_codes() {
    let fleet = Fleet::start(3).expect("fleet");
    let not_redis = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let not_redis_addr = not_redis.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in not_redis.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                use std::io::Write;
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n<html>no</html>\r\n");
            });
        }
    });
    let down = Fleet::start(1).expect("fleet");
    let down_url = down.url(0);
    down.kill(0).expect("kill");
    let wrong_password = fleet.url(0).replace("redis://", "redis://:hunter2@");
    let cases: Vec<(&str, Vec<String>, i32)> = vec![
        (
            "a node that is not Redis",
            vec![format!("redis://{not_redis_addr}")],
            78,
        ),
        (
            "a wrong password",
            vec![wrong_password.clone(), fleet.url(1), fleet.url(2)],
            78,
        ),
        (
            "an unknown host",
            vec!["redis://no-such-host.invalid:6379".into()],
            78,
        ),
        (
            "the same address twice, down",
            vec![down_url.clone(), down_url.clone(), fleet.url(1)],
            78,
        ),
        ("nodes down", vec![down_url.clone()], 69),
    ];
    let subcommands: [&[&str]; 7] = [
        &["run", "-n", "cli:codes", "true"],
        &["hold", "-n", "cli:codes"],
        &["acquire", "-n", "cli:codes", "--ttl", "10s"],
        &[
            "extend",
            "cli:codes",
            "0123456789abcdef0123456789abcdef",
            "--ttl",
            "10s",
        ],
        &["release", "cli:codes", "0123456789abcdef0123456789abcdef"],
        &["status", "cli:codes"],
        &["check"],
    ];
    for (what, nodes, code) in &cases {
        for args in subcommands {
            let (got, _, stderr) = run(cli_with(nodes).args(args));
            // `check` reports nodes down as a finding about availability.
            let want = if args[0] == "check" && *code == 69 {
                69
            } else {
                *code
            };
            assert_eq!(got, want, "{what}, {args:?}: {stderr}");
            // `status` and `check` report nodes down on stdout (their report), the rest one
            // line on stderr.
            let lines = stderr.trim().lines().count();
            if want == 69 && matches!(args[0], "status" | "check") {
                assert!(lines <= 1, "{what}, {args:?}: {stderr}");
            } else {
                assert_eq!(lines, 1, "one line, {what}, {args:?}: {stderr}");
            }
            assert!(!stderr.contains("hunter2"), "password shown: {stderr}");
            if what.contains("not Redis") && args[0] != "check" {
                assert!(
                    stderr.contains("Redis protocol") && !stderr.contains("Unexpected"),
                    "the parser's raw text: {stderr}"
                );
            }
        }
    }
}

/// A database index the server does not have (`/99`) and `rediss://` to a server without TLS
/// are configuration errors (78) that say what is wrong, not nodes unavailable (69: before,
/// "DB index is out of range" and a plain timeout).
#[test]
fn a_missing_database_and_tls_to_a_plain_server_are_configuration_errors() {
    let fleet = Fleet::start(1).expect("fleet");
    let cases = [
        (format!("{}/99", fleet.url(0)), "no such database"),
        (
            fleet.url(0).replace("redis://", "rediss://"),
            "a server without TLS",
        ),
    ];
    for (url, says) in &cases {
        for args in [
            &["run", "-n", "cli:config", "true"][..],
            &["status", "cli:config"],
            &["check"],
        ] {
            let (code, out, stderr) = run(cli_with(std::slice::from_ref(url))
                .env("QUORUM_LOCK_CONNECT_TIMEOUT", "500ms")
                .args(args));
            assert_eq!(code, 78, "{url} {args:?}: {out}{stderr}");
            assert!(
                format!("{out}{stderr}").contains(says),
                "{url} {args:?}: {out}{stderr}"
            );
        }
    }
}

/// `check` with one node of three down: the other two answer, so it is a finding about
/// availability, not about the nodes' configuration (before: 78).
#[test]
fn check_with_one_node_down_and_a_quorum_answering_is_not_a_configuration_error() {
    let safe = Fleet::builder()
        .nodes(3)
        .persistence(Persistence::AofAlways)
        .start()
        .expect("fleet");
    safe.kill(2).expect("kill");
    let (code, out, stderr) = run(cli(&safe).args(["check"]));
    assert_eq!(code, 0, "{out}{stderr}");
    assert!(out.contains("1 of 3 nodes unreachable"), "{out}");
    safe.kill(1).expect("kill");
    let (code, out, _) = run(cli(&safe).args(["check"]));
    assert_eq!(code, 69, "below the quorum: {out}");
}

/// `hold` warns its script before the lock's deadline when no renewal is confirmed (here
/// two of three nodes are frozen): a line `expiring MS` on stdout, and the signal chosen, to
/// its parent, while the lock can still be trusted; then it is lost (75).
#[test]
fn hold_warns_its_script_before_the_deadline_when_renewals_fail() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let warned = dir.path().join("warned");
    let script = format!(
        "trap 'echo warned > {}' USR1; exec 3<&0; \"$QL\" hold --lease 3s --warn-before 1500ms \
         --warn-signal USR1 cli:warn <&3 & pid=$!; wait $pid; wait $pid",
        warned.display()
    );
    let mut cmd = cli(&fleet);
    let mut shell = Command::new("/bin/sh");
    shell
        .arg("-c")
        .arg(&script)
        .env("QL", BIN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .stdin(Stdio::piped());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => shell.env(k, v),
            None => shell.env_remove(k),
        };
    }
    let _ = cmd.arg("--version");
    let mut sh = Running::spawn(&mut shell);
    let lines = Lines::of(sh.0.stdout.take().expect("stdout"));
    let token = lines.next(Duration::from_secs(20));
    assert_eq!(token.len(), 32, "{token}");
    fleet.pause(1).expect("pause");
    fleet.pause(2).expect("pause");
    let warning = lines.next(Duration::from_secs(10));
    let left: u64 = warning
        .strip_prefix("expiring ")
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("a warning line: {warning}"));
    assert!(left > 0 && left <= 1500, "{warning}");
    wait_for(Duration::from_secs(5), "the parent got the signal", || {
        warned.exists()
    });
    assert_eq!(
        sh.exit_code(Duration::from_secs(20)),
        75,
        "lost after the warning"
    );
    fleet.resume(1).expect("resume");
    fleet.resume(2).expect("resume");
}

/// `run --clean-env` keeps this tool's settings (QUORUM_LOCK_NODES may hold a password) out
/// of the command's environment; `-w` takes seconds as flock does; `--metrics-textfile`
/// leaves the run's metrics for node-exporter's textfile collector.
#[test]
fn run_keeps_the_settings_from_the_command_and_writes_its_metrics_file() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let env = dir.path().join("env");
    let metrics = dir.path().join("quorum_lock.prom");
    let (code, _, stderr) = run(cli(&fleet)
        .args(["run", "-w", "2", "--clean-env", "--metrics-textfile"])
        .arg(&metrics)
        .args(["cli:clean", "-c"])
        .arg(format!("env > {}", env.display())));
    assert_eq!(code, 0, "{stderr}");
    let seen = std::fs::read_to_string(&env).expect("env file");
    assert!(seen.contains("QUORUM_LOCK_KEY=cli:clean"), "{seen}");
    assert!(!seen.contains("QUORUM_LOCK_NODES"), "{seen}");
    assert!(!seen.contains("QUORUM_LOCK_NODE_TIMEOUT"), "{seen}");
    let (code, _, _) = run(cli(&fleet)
        .args(["run", "cli:clean", "-c"])
        .arg(format!("env > {}", env.display())));
    assert_eq!(code, 0);
    let seen = std::fs::read_to_string(&env).expect("env file");
    assert!(
        seen.contains("QUORUM_LOCK_NODES"),
        "without --clean-env: {seen}"
    );
    let text = std::fs::read_to_string(&metrics).expect("metrics file");
    assert!(
        text.contains("quorum_lock_acquire_attempts_total{outcome=\"acquired\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE quorum_lock_hold_duration_seconds histogram"),
        "{text}"
    );
    assert!(
        !text.contains("cli:clean") && !text.contains("127.0.0.1"),
        "{text}"
    );
}

/// `--metrics-textfile` never changes the exit code: a file that cannot be written is a
/// warning on stderr (the job's own code stays), and a run that fails before taking the lock
/// (nodes unreachable) still leaves its metrics, for the operator who watches the cron job.
#[test]
fn the_metrics_file_keeps_the_exit_code_and_is_written_when_the_lock_was_not_taken() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let unwritable = dir.path().join("no-such-dir").join("quorum_lock.prom");
    let (code, _, stderr) = run(cli(&fleet)
        .args(["run", "--metrics-textfile"])
        .arg(&unwritable)
        .args(["cli:textfile-exit", "-c", "exit 3"]));
    assert_eq!(code, 3, "the job's own exit code: {stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("--metrics-textfile"),
        "{stderr}"
    );
    // A command that is not found: its 127 is in the file too.
    let metrics = dir.path().join("not-found.prom");
    let (code, _, _) = run(cli(&fleet)
        .args(["run", "--metrics-textfile"])
        .arg(&metrics)
        .args(["cli:textfile-127", "--", "/no/such/command"]));
    assert_eq!(code, 127);
    let text = std::fs::read_to_string(&metrics).expect("a metrics file for a 127");
    assert!(
        text.contains("quorum_lock_cli_exit_code{command=\"run\"} 127"),
        "{text}"
    );
    for command in ["run", "hold"] {
        let metrics = dir.path().join(format!("{command}.prom"));
        let mut cmd = cli_with(&["redis://127.0.0.1:1".into(), "redis://127.0.0.1:2".into()]);
        cmd.args([command, "--metrics-textfile"])
            .arg(&metrics)
            .arg("cli:textfile-down");
        if command == "run" {
            cmd.arg("true");
        }
        let (code, _, stderr) = run(&mut cmd);
        assert_eq!(code, 69, "{command}: nodes down: {stderr}");
        let text = std::fs::read_to_string(&metrics)
            .unwrap_or_else(|e| panic!("{command}: no metrics file after a failed run: {e}"));
        assert!(
            text.contains(&format!(
                "quorum_lock_cli_exit_code{{command=\"{command}\"}} 69"
            )),
            "{command}: {text}"
        );
        assert!(text.contains("quorum_lock_cli_end_time_seconds"), "{text}");
    }
}

/// Cluster nodes from the command line: `run` locks, `status` reads each cluster's entry from
/// the primary serving the key (following its `MOVED`), `check` says each node is a cluster,
/// and two members of one cluster are a configuration error.
#[test]
fn run_status_and_check_on_cluster_nodes() {
    use quorum_lock::testkit::ClusterFleet;
    let fleet = ClusterFleet::start(2).expect("clusters");
    let nodes = fleet.urls();
    let dir = tempdir();
    let marker = dir.path().join("ran");
    let (code, _, err) = run(cli_with(&nodes).args([
        "run",
        "cli-cluster:job",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(marker.exists(), "the command ran");
    // Keys on every shard: `status` finds each entry wherever its slot is served.
    for i in 0..6 {
        let key = format!("cli-cluster:held:{i}");
        let (code, _, err) = run(cli_with(&nodes).args(["acquire", &key, "--ttl", "30s"]));
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = run(cli_with(&nodes).args(["status", &key]));
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("held by a quorum"), "{key}: {out}{err}");
    }
    // (Its exit code says "configuration": the test kit's members have no AOF.)
    let (_, out, err) = run(cli_with(&nodes).args(["check"]));
    assert!(
        out.contains("role cluster (3 primaries, 0 replicas"),
        "{out}{err}"
    );
    assert!(!out.contains("one cluster is one node"), "{out}{err}");
    let twice = [fleet.member_url(0, 0), fleet.member_url(0, 1)];
    let (code, out, err) = run(cli_with(&twice).args(["check"]));
    assert_eq!(code, 78, "{out}{err}");
    assert!(out.contains("one cluster is one node"), "{out}{err}");
}

/// `check` sees a cluster's members: with a primary of one cluster killed, it reports that
/// cluster's state (`fail`, once the others noticed) and names the killed member, which the
/// library's own node check (the one `build()` runs, now also `check`'s) found silent; before,
/// it asked the member given only and said "no configuration problems found".
#[test]
fn check_names_a_killed_cluster_member_and_the_clusters_state() {
    use quorum_lock::testkit::ClusterFleet;
    let fleet = ClusterFleet::start(3).expect("clusters");
    let nodes = fleet.urls();
    let port = fleet.member(0, 2).port();
    // (The test kit's clusters serve what they can; this one refuses every key when a slot
    // is not served, as a default deployment does.)
    for m in 0..2 {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("yes")
            .query::<()>(&mut fleet.client(0, m).get_connection().unwrap())
            .unwrap();
    }
    fleet.kill(0, 2).unwrap();
    let mut seed = fleet.client(0, 0).get_connection().unwrap();
    let mut last = String::new();
    let failed = (0..1000).any(|_| {
        last = format!(
            "{:?}",
            redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut seed)
        );
        let failed = last.contains("cluster_state:fail");
        if !failed {
            std::thread::sleep(Duration::from_millis(10));
        }
        failed
    });
    assert!(failed, "cluster 0 never in state fail: {last}");
    let (_, out, err) = run(cli_with(&nodes).args(["check"]));
    assert!(out.contains("state fail"), "{out}{err}");
    assert!(
        out.contains(&format!("member 127.0.0.1:{port} (connection failed")),
        "{out}{err}"
    );
    assert!(out.contains("cluster_state fail"), "{out}{err}");
    assert!(out.contains("1 cluster member not answering"), "{out}{err}");
    let (_, out, err) = run(cli_with(&nodes).args(["check", "--json"]));
    let report = json(&out);
    let silent = report["nodes"][0]["not_answering"].to_string();
    assert!(silent.contains(&port.to_string()), "{out}{err}");
}

/// `status` of a key whose slot a frozen member serves names that member, not the healthy
/// member the node was given by.
#[test]
fn status_names_the_frozen_member_that_serves_the_key() {
    use quorum_lock::testkit::ClusterFleet;
    let fleet = ClusterFleet::start(3).expect("clusters");
    let nodes = fleet.urls();
    let key = (0..)
        .map(|i| format!("cli-frozen:{i}"))
        .find(|k| fleet.primary_of(0, k.as_bytes()).unwrap() != 0)
        .unwrap();
    let m = fleet.primary_of(0, key.as_bytes()).unwrap();
    fleet.pause(0, m).unwrap();
    let (code, out, err) = run(cli_with(&nodes)
        .args(["--connect-timeout", "300ms"])
        .args(["status", &key]));
    fleet.resume(0, m).unwrap();
    assert_eq!(code, 0, "two of three answer: {out}{err}");
    let row = out
        .lines()
        .find(|l| l.contains(&fleet.urls()[0]))
        .unwrap_or_default()
        .to_string();
    let member = format!("member {}", fleet.member_url(0, m));
    assert!(row.contains(&member), "{row}\n{out}{err}");
}

/// `status` of a key cluster nodes refuse (a `}` outside a hash tag) is the usage error `run`
/// gives (64, the same message), not "unreachable" (69) on a healthy fleet.
#[test]
fn status_of_a_key_cluster_nodes_refuse_is_a_usage_error_as_for_run() {
    use quorum_lock::testkit::ClusterFleet;
    let fleet = ClusterFleet::start(1).expect("a cluster");
    let nodes = fleet.urls();
    let (code, _, run_err) = run(cli_with(&nodes).args(["run", "a}b", "--", "true"]));
    assert_eq!(code, 64, "{run_err}");
    let (code, out, err) = run(cli_with(&nodes).args(["status", "a}b"]));
    assert_eq!(code, 64, "{out}{err}");
    assert_eq!(err, run_err, "the same message as run");
    // A key with a hash tag is fine.
    let (code, out, err) = run(cli_with(&nodes).args(["status", "{a}b"]));
    assert_eq!(code, 0, "{out}{err}");
}
