//! `elect`, `leader [--watch]`, and `--label` with `status`: leader election and who holds a
//! lock, driven from the shell across processes.

use super::*;

/// `elect` runs its command as leader with its term and value; `leader` (here from inside
/// the command, a separate process) prints them; after the command ends nobody leads, and
/// the next leader's term is higher.
#[test]
fn elect_runs_the_command_as_leader_and_leader_prints_value_and_term() {
    let fleet = Fleet::start(3).expect("fleet");
    let script = format!(
        "echo \"$QUORUM_LOCK_LEADER_VALUE $QUORUM_LOCK_TERM $QUORUM_LOCK_FENCING_TOKEN\"; {BIN} leader jobs"
    );
    let mut terms = Vec::new();
    for value in ["host-a:80", "host-b:80"] {
        let (code, out, err) =
            run(cli(&fleet).args(["elect", "jobs", "--value", value, "-w", "5s", "-c", &script]));
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        let (env, printed) = (lines[0], lines[1]);
        let fields: Vec<&str> = env.split(' ').collect();
        assert_eq!(fields[0], value);
        assert_eq!(fields[1], fields[2], "the term is the fencing token");
        assert_eq!(printed, format!("{value} {}", fields[1]));
        terms.push(fields[1].parse::<u64>().unwrap());
    }
    assert!(terms[1] > terms[0], "{terms:?}");
    let (code, out, err) = run(cli(&fleet).args(["leader", "jobs"]));
    // Exit 1 and nothing said, as a busy lock (`-v` says it).
    assert_eq!((code, out.as_str(), err.as_str()), (1, "", ""));
    let (code, _, err) = run(cli(&fleet).args(["-v", "leader", "jobs"]));
    assert_eq!(code, 1);
    assert!(err.contains("nobody leads"), "{err}");
    let (code, out, _) = run(cli(&fleet).args(["leader", "--json", "jobs"]));
    assert_eq!(code, 1);
    assert_eq!(json(&out)["leader"], serde_json::Value::Null);
}

/// A second candidate waits while the first leads, then leads with a higher term; one that
/// may not wait is refused as busy. `leader --watch` prints every change.
#[test]
fn a_waiting_candidate_leads_next_and_leader_watch_follows_each_change() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let release = dir.path().join("release");
    let mut watch = cli(&fleet);
    watch
        .args(["leader", "--watch", "cron"])
        .stdout(Stdio::piped());
    let mut watching = Running::spawn(&mut watch);
    let lines = Lines::of(watching.0.stdout.take().unwrap());
    assert_eq!(lines.next(Duration::from_secs(10)), "-");
    let hold = format!(
        "while [ ! -e {} ]; do sleep 0.02; done; echo $QUORUM_LOCK_TERM",
        release.display()
    );
    let mut first = cli(&fleet);
    first
        .args(["elect", "cron", "--value", "first", "-c", &hold])
        .stdout(Stdio::piped());
    let mut first = Running::spawn(&mut first);
    let seen = lines.next(Duration::from_secs(10));
    assert!(seen.starts_with("first "), "{seen}");
    let first_term: u64 = seen["first ".len()..].parse().unwrap();
    // Busy: -n is one attempt.
    let (code, _, err) =
        run(cli(&fleet).args(["-v", "elect", "cron", "--value", "x", "-n", "true"]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not elected"), "{err}");
    let mut second = cli(&fleet);
    second
        .args([
            "elect",
            "cron",
            "--value",
            "second",
            "-w",
            "20s",
            "--",
            "sh",
            "-c",
            "echo $QUORUM_LOCK_TERM",
        ])
        .stdout(Stdio::piped());
    let mut second = Running::spawn(&mut second);
    std::fs::write(&release, b"").unwrap();
    assert_eq!(
        first.exit_code(Duration::from_secs(10)),
        0,
        "{}",
        first.stderr()
    );
    assert_eq!(
        second.exit_code(Duration::from_secs(20)),
        0,
        "{}",
        second.stderr()
    );
    let mut out = String::new();
    second
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let second_term: u64 = out.trim().parse().unwrap();
    assert!(second_term > first_term);
    // Between the two, maybe nobody for a moment; then the second, then nobody.
    let mut next = lines.next(Duration::from_secs(10));
    if next == "-" {
        next = lines.next(Duration::from_secs(10));
    }
    assert_eq!(next, format!("second {second_term}"));
    assert_eq!(lines.next(Duration::from_secs(10)), "-");
    signal(watching.pid(), libc::SIGTERM);
    assert_eq!(watching.exit_code(Duration::from_secs(10)), 0);
}

/// `--label` on `run` (a reader's too), `hold` and `acquire` shows in `status` with since-when; `elect`
/// refuses the options that do not apply to it, and bad text is a usage error.
#[test]
fn a_label_shows_in_status_and_elect_refuses_what_does_not_apply() {
    let fleet = Fleet::start(3).expect("fleet");
    let status = format!("{BIN} status job");
    let (code, out, err) =
        run(cli(&fleet).args(["run", "--label", "host-7/job-42", "job", "-c", &status]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("label: host-7/job-42"), "{out}");
    assert!(out.contains("since: "), "{out}");
    let (code, out, err) =
        run(cli(&fleet).args(["acquire", "--ttl", "30s", "--label", "script", "step"]));
    assert_eq!(code, 0, "{err}");
    let holder = out.trim().to_string();
    let (_, out, _) = run(cli(&fleet).args(["status", "--json", "step"]));
    let report = json(&out);
    assert_eq!(report["holder"]["label"], "script", "{out}");
    assert!(
        !out.contains(&holder),
        "the holder value is never shown: {out}"
    );
    let (code, _, err) = run(cli(&fleet).args(["release", "step", &holder]));
    assert_eq!(code, 0, "{err}");
    // A reader's label too, beside the others'.
    let (code, out, err) = run(cli(&fleet).args([
        "run",
        "--read",
        "--label",
        "export-1",
        "catalog",
        "-c",
        &format!("{BIN} status catalog"),
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("label: export-1 (since "), "{out}");
    let (_, out, _) = run(cli(&fleet).args([
        "elect",
        "ldr",
        "--value",
        "me",
        "-c",
        &format!("{BIN} status ldr"),
    ]));
    assert!(out.contains("leader: me (term "), "{out}");
    for (args, what) in [
        (
            vec!["elect", "e", "--value", "v", "--fair", "true"],
            "--fair",
        ),
        (
            vec!["elect", "e", "--value", "v", "--fencing", "true"],
            "--fencing",
        ),
        (
            vec!["elect", "e", "--value", "v", "--label", "l", "true"],
            "--label",
        ),
        (vec!["elect", "e", "--value", "", "true"], "empty"),
        (vec!["run", "--label", "a\tb", "k", "true"], "control"),
        (vec!["run", "--read", "--label", "", "k", "true"], "label"),
    ] {
        let (code, _, err) = run(cli(&fleet).args(&args));
        assert!(code == 64 || code == 78, "{args:?}: {code} {err}");
        assert!(err.contains(what), "{args:?}: {err}");
    }
}

/// `break` ends the holder's `run` as a loss (its command stopped, exit 75); `status` shows
/// the key broken meanwhile, and the next `run` gets it once the tombstones expire.
#[test]
fn break_stops_the_holders_run_and_status_shows_the_key_broken() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let started = dir.path().join("started");
    let script = format!("touch {}; sleep 30", started.display());
    let mut run_cmd = cli(&fleet);
    run_cmd
        .args([
            "run",
            "--lease",
            "1500ms",
            "--kill-grace",
            "300ms",
            "job",
            "-c",
            &script,
        ])
        .stderr(Stdio::piped());
    let mut holder = Running::spawn(&mut run_cmd);
    wait_for(Duration::from_secs(10), "the command started", || {
        started.exists()
    });
    // Kept broken 3 s at least (`--lock-delay`): the tombstones otherwise live only what was
    // left of the 1.5 s lease, which a loaded machine can spend before `status` reads them.
    let (code, out, err) = run(cli(&fleet).args(["break", "--lock-delay", "3s", "job"]));
    assert_eq!((code, out.as_str()), (0, "broken 1\n"), "{err}");
    let (_, out, _) = run(cli(&fleet).args(["status", "job"]));
    assert!(out.contains("verdict: broken"), "{out}");
    assert_eq!(
        holder.exit_code(Duration::from_secs(5)),
        75,
        "{}",
        holder.stderr()
    );
    let (code, _, err) = run(cli(&fleet).args(["run", "-w", "10s", "job", "true"]));
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(cli(&fleet).args(["break", "--json", "job"]));
    assert_eq!(code, 0);
    assert_eq!(json(&out)["broken"], 0);
}

/// `ask-release` passes `--on-release-request`'s signal to the holder's command, which ends
/// early; a `break` notice stops a holder at once (not at its next renewal).
#[test]
fn ask_release_signals_the_holders_command_and_break_stops_it_at_once() {
    let fleet = Fleet::start(3).expect("fleet");
    let dir = tempdir();
    let (started, asked) = (dir.path().join("started"), dir.path().join("asked"));
    let script = format!(
        "trap 'touch {}; exit 0' USR1; touch {}; while true; do sleep 0.05; done",
        asked.display(),
        started.display()
    );
    let mut run_cmd = cli(&fleet);
    run_cmd.args(["run", "--on-release-request", "USR1", "job", "-c", &script]);
    let mut holder = Running::spawn(&mut run_cmd);
    wait_for(Duration::from_secs(10), "the command started", || {
        started.exists()
    });
    // Asked again until heard: the holder's notices may be subscribing just after its start.
    wait_for(Duration::from_secs(30), "the command was signalled", || {
        let (code, out, _) = run(cli(&fleet).args(["ask-release", "job"]));
        assert_eq!((code, out.as_str()), (0, "asked 1\n"));
        std::thread::sleep(Duration::from_millis(200));
        asked.exists()
    });
    assert_eq!(holder.exit_code(Duration::from_secs(10)), 0);
    // A 60 s lease: its renewal is 20 s away; the break's notice stops the command at once.
    // (First an ask it notes and ignores, until heard: the notices reach it.)
    std::fs::remove_file(&asked).unwrap();
    let script = format!(
        "trap 'touch {}' USR2; touch {}; while true; do sleep 0.05; done",
        asked.display(),
        started.display()
    );
    let mut run_cmd = cli(&fleet);
    run_cmd
        .args([
            "run",
            "--lease",
            "60s",
            "--on-release-request",
            "USR2",
            "job",
            "-c",
            &script,
        ])
        .stderr(Stdio::piped());
    let mut holder = Running::spawn(&mut run_cmd);
    wait_for(Duration::from_secs(30), "the command was signalled", || {
        run(cli(&fleet).args(["ask-release", "job"]));
        std::thread::sleep(Duration::from_millis(200));
        asked.exists()
    });
    let (code, _, err) = run(cli(&fleet).args(["break", "job"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        holder.exit_code(Duration::from_secs(10)),
        75,
        "{}",
        holder.stderr()
    );
}
