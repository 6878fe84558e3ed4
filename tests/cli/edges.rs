//! Edges: the max hold against the lease, `status` per kind, the same exit codes in every
//! subcommand, configuration errors, the metrics file, and cluster nodes.

use super::*;

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
        .counted()
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
