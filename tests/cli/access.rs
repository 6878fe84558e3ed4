//! Acting by holder value (`acquire`, `extend`, `release`), `check`, a Redis ACL user limited
//! to the library's commands, and TLS nodes.

use super::*;

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
/// (TIME, ROLE) and `status` (TYPE, ZCOUNT, HMGET, reading the family's keys and holder records). The commands: SET (acquire, repair); EVAL, EVALSHA, SCRIPT LOAD (the
/// scripts); GET, DEL, EXISTS, PEXPIRE, INCR, PTTL and PUBLISH (inside the scripts, where
/// ACLs apply too); SUBSCRIBE, UNSUBSCRIBE (release notices); INFO and CONFIG GET (build-time
/// checks). On Redis 7.2 and later also CLIENT SETINFO (the redis crate's handshake, which
/// ignores a refusal), added by the test when the server knows it.
const ACL_RULE: [&str; 35] = [
    "locker",
    "on",
    ">s3cret-pw",
    "resetkeys",
    "~acl:*",
    "~quorum-lock:fence:{acl:*",
    "%R~quorum-lock:readers:{acl:*",
    "%R~quorum-lock:writer-waiting:{acl:*",
    "%R~quorum-lock:queue-expiry:{acl:*",
    "~quorum-lock:holder:{acl:*",
    "resetchannels",
    "&quorum-lock:released:{acl:*",
    "&quorum-lock:holder-notices",
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
    "+hmget",
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
