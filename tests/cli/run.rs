//! `run`: exclusion across processes under faults, the command's process group and signals,
//! and the exit codes.

use super::*;

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
