//! `hold`: its end (the max hold or the nodes), its script over stdin, its metrics, and
//! the environment the command gets.

use super::*;

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
