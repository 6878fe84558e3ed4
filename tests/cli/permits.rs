//! `run --permits P`: a permit of a semaphore of P slots under the configured quorum
//! (majority), and `status --permits P` showing the slots.

use super::*;

/// Three runs hold the three permits of `pool` under a majority of five; a fourth with
/// `-n` is busy (exit 1); `status --permits 3` shows every slot held, also with a node
/// killed; a permit freed is taken by the next run, which sees its slot in
/// `QUORUM_LOCK_SLOT`.
#[test]
fn three_runs_hold_three_permits_and_a_fourth_is_busy_with_a_node_down() {
    let fleet = Fleet::start(5).expect("fleet");
    let dir = tempdir();
    let mut runs = Vec::new();
    for i in 0..3 {
        let mark = dir.path().join(format!("run-{i}"));
        let script = format!("echo \"$QUORUM_LOCK_SLOT\" > {}; sleep 30", mark.display());
        runs.push((
            Running::spawn(cli(&fleet).args(["run", "--permits", "3", "pool", "-c", &script])),
            mark,
        ));
    }
    wait_for(Duration::from_secs(10), "three holders", || {
        runs.iter()
            .all(|(_, mark)| std::fs::read_to_string(mark).is_ok_and(|s| s.ends_with('\n')))
    });
    let mut slots: Vec<String> = runs
        .iter()
        .map(|(_, mark)| std::fs::read_to_string(mark).unwrap().trim().to_string())
        .collect();
    slots.sort();
    assert_eq!(slots, ["pool#0", "pool#1", "pool#2"]);
    let (code, _, err) = run(cli(&fleet).args(["run", "-n", "--permits", "3", "pool", "true"]));
    assert_eq!(code, 1, "busy: {err}");
    // More slots than a semaphore may have: a usage error, for status as for run.
    for args in [
        &["status", "--permits", "1025", "pool"][..],
        &["run", "--permits", "1025", "pool", "true"][..],
    ] {
        let (code, _, err) = run(cli(&fleet).args(args));
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains("1025"), "{args:?}: {err}");
    }

    fleet.kill(4).unwrap();
    let (code, out, err) = run(cli(&fleet).args(["status", "--json", "--permits", "3", "pool"]));
    assert_eq!(code, 0, "{err}");
    let report = json(&out);
    assert_eq!(
        (&report["kind"], &report["held"], &report["verdict"]),
        (&"semaphore-slots".into(), &3.into(), &"full".into()),
        "{out}"
    );
    let (code, _, err) = run(cli(&fleet).args(["run", "-n", "--permits", "3", "pool", "true"]));
    assert_eq!(code, 1, "still busy with a node down: {err}");

    // The first run ends (its command stopped): its slot goes to the next run.
    let (mut first, mark) = runs.remove(0);
    let freed = std::fs::read_to_string(&mark).unwrap().trim().to_string();
    signal(first.pid(), libc::SIGTERM);
    first.exit_code(Duration::from_secs(10));
    let (code, out, err) = run(cli(&fleet).args([
        "run",
        "-w",
        "5s",
        "--permits",
        "3",
        "pool",
        "-c",
        "echo $QUORUM_LOCK_SLOT",
    ]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), freed);
    let (_, out, _) = run(cli(&fleet).args(["status", "--permits", "3", "pool"]));
    assert!(
        out.starts_with("key \"pool\" (semaphore of 3 slots): 2 of 3 held, taken"),
        "{out}"
    );
    assert!(out.contains("key \"pool#0\""), "{out}");
    // Ended as an operator would (TERM reaches each command's process group), so that no
    // `sleep` outlives the test.
    for (mut running, _) in runs {
        signal(running.pid(), libc::SIGTERM);
        running.exit_code(Duration::from_secs(10));
    }
}

/// `check` says whether each node could give durable votes, and why not: these nodes run
/// without AOF (and Redis 7.0 has no `WAITAOF` at all).
#[test]
fn check_says_which_nodes_could_give_durable_votes() {
    let fleet = Fleet::start(3).expect("fleet");
    let (_, out, err) = run(cli(&fleet).args(["check"]));
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("durable votes"))
        .collect();
    assert_eq!(lines.len(), 3, "{out}{err}");
    for line in lines {
        assert!(
            line.contains("durable votes no (")
                && (line.contains("has no WAITAOF") || line.contains("AOF is off")),
            "{line}"
        );
    }
}
