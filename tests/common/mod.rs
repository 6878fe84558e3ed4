//! Helpers shared by the integration tests: fleets, clients, and direct node inspection.
#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use quorum_lock::testkit::Fleet;
use quorum_lock::{Builder, Quorum, QuorumLock};

#[cfg(feature = "tls")]
pub mod pki;

/// A five-node fleet shared by the tests of one binary that use unique keys and inject no
/// faults. Its servers die with the test process (the test kit's parent-death signal).
///
/// With `QUORUM_LOCK_NODES` set (five comma-separated URLs, e.g. the repository's
/// docker-compose fleet), these tests run against those nodes instead.
pub fn shared_fleet() -> &'static Fleet {
    static FLEET: OnceLock<Fleet> = OnceLock::new();
    FLEET.get_or_init(|| match Fleet::from_env().expect("QUORUM_LOCK_NODES") {
        Some(external) => {
            assert_eq!(external.len(), 5, "the shared fleet has five nodes");
            external
        }
        None => Fleet::start(5).expect("starting the shared fleet"),
    })
}

/// A fresh fleet for a test that injects faults.
pub fn own_fleet(n: usize) -> Fleet {
    Fleet::start(n).expect("starting a fleet")
}

/// A key no other test uses.
pub fn unique_key(name: &str) -> String {
    format!("test:{name}:{}", uuid::Uuid::new_v4().simple())
}

/// Test defaults: generous timeouts, so that a loaded 2-core machine does not turn a healthy
/// node into a failed one.
pub fn builder(fleet: &Fleet, quorum: Quorum) -> Builder {
    QuorumLock::builder()
        .nodes(fleet.urls())
        .quorum(quorum)
        .node_timeout(Duration::from_millis(250))
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::from_millis(10))
}

pub async fn client(fleet: &Fleet, quorum: Quorum) -> QuorumLock {
    builder(fleet, quorum)
        .build()
        .await
        .expect("building the client")
}

/// Waits until each client's calls have landed on every node that answers (a call returns at
/// a quorum; its requests to the other nodes finish in the background).
pub async fn finish_background(clients: &[QuorumLock]) {
    for locks in clients {
        locks.finish_background().await;
    }
}

/// A client for a test whose calls must all be confirmed while no node is silenced, with TTLs
/// of seconds: a node timeout (2 s) no healthy node misses on a loaded machine. Behind
/// Docker's port proxy (the compose fleet, `QUORUM_LOCK_NODES`) a healthy node's answer has
/// taken longer than [`builder`]'s 250 ms, which fails a `Quorum::All` release outright.
pub async fn long_timeout_client(fleet: &Fleet, quorum: Quorum) -> QuorumLock {
    builder(fleet, quorum)
        .node_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("building the client")
}

/// A client for a test that silences nodes: a node timeout (2 s) no healthy node misses on a loaded
/// machine (only the silent ones time out), with its connection to every node open (made by
/// one acquire and release of `key`), so that the silenced nodes already have theirs.
pub async fn connected_slow_client(fleet: &Fleet, key: &str) -> QuorumLock {
    let locks = long_timeout_client(fleet, Quorum::Majority).await;
    locks
        .try_acquire(key, Duration::from_secs(30))
        .await
        .expect("acquire on a healthy fleet")
        .expect("a free key")
        .release()
        .await
        .expect("release on a healthy fleet");
    locks.finish_background().await;
    locks
}

/// Stores `key` = `value` on node `i` for a minute, as another holder's entry.
pub async fn plant(fleet: &Fleet, i: usize, key: &str, value: &str) {
    let mut c = conn(fleet, i).await;
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut c)
        .await
        .expect("SET");
}

pub async fn conn(fleet: &Fleet, i: usize) -> redis::aio::MultiplexedConnection {
    // A generous response timeout: nodes under CLIENT PAUSE answer late, but do answer.
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    fleet
        .client(i)
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("test connection")
}

/// The holder value stored for `key` on node `i`, if any.
pub async fn entry(fleet: &Fleet, i: usize, key: &str) -> Option<String> {
    let mut c = conn(fleet, i).await;
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut c)
        .await
        .expect("GET")
}

/// The remaining TTL in ms of `key` on node `i` (negative when absent, as `PTTL` answers).
pub async fn pttl(fleet: &Fleet, i: usize, key: &str) -> i64 {
    let mut c = conn(fleet, i).await;
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut c)
        .await
        .expect("PTTL")
}

/// How many of the fleet's nodes hold `key` for `holder`.
pub async fn nodes_holding(fleet: &Fleet, key: &str, holder: &str) -> usize {
    which_nodes_hold(fleet, key, holder).await.len()
}

/// The fleet's nodes that hold `key` for `holder`, in node order.
pub async fn which_nodes_hold(fleet: &Fleet, key: &str, holder: &str) -> Vec<usize> {
    let mut holding = Vec::new();
    for i in 0..fleet.len() {
        if entry(fleet, i, key).await.as_deref() == Some(holder) {
            holding.push(i);
        }
    }
    holding
}

/// `INFO commandstats` calls of `command` on node `i`.
pub async fn command_calls(fleet: &Fleet, i: usize, command: &str) -> u64 {
    let mut c = conn(fleet, i).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Waits (polling, bounded) until `check` holds; panics with `what` and the fleet's logs if it
/// does not within `limit`.
pub async fn eventually<F, Fut>(fleet: &Fleet, limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        if tokio::time::Instant::now() > deadline {
            panic!("not within {limit:?}: {what}\n{}", fleet.all_logs());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Logs of the crate (RUST_LOG, e.g. `quorum_lock=debug`) in the test's captured output.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A `Write` into a shared buffer, for capturing log output.
#[derive(Clone, Default)]
pub struct Captured(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether the test kit's server (`QUORUM_LOCK_REDIS_SERVER`, else `redis-server`) has
/// `CLIENT SETINFO`: Valkey, or Redis 7.2 and later.
pub fn server_has_client_setinfo() -> bool {
    let server =
        std::env::var("QUORUM_LOCK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let out = std::process::Command::new(&server)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{server} --version: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let version: Vec<u32> = text
        .split("v=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .map(|v| v.split('.').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default();
    text.starts_with("Valkey") || version.as_slice() >= [7, 2].as_slice()
}

/// Three nodes with the ACL user `rule` (its first words: `locker on >s3cret-pw`), and the
/// node URLs that log in as that user.
pub fn acl_fleet(rule: &[&str]) -> (Fleet, Vec<String>) {
    let mut args = vec!["--user".to_string()];
    args.extend(rule.iter().map(|s| s.to_string()));
    // As the README says: on Redis 7.2 and later and on Valkey, the redis crate's handshake
    // sends CLIENT SETINFO (a refusal is ignored, but the ACL log records it).
    if server_has_client_setinfo() {
        args.push("+client|setinfo".to_string());
    }
    let fleet = Fleet::builder()
        .nodes(3)
        .server_args(args)
        .start()
        .expect("fleet");
    let urls = (0..3)
        .map(|i| {
            fleet
                .url(i)
                .replace("redis://", "redis://locker:s3cret-pw@")
        })
        .collect();
    (fleet, urls)
}

/// A lock request in a "process" that will die: a client of its own, in a runtime of its own
/// thread, polling its request until [`Doomed::freeze`]. Then that runtime's only thread
/// blocks for good: the request is never polled again, nor dropped (it neither renews what it
/// keeps on the nodes nor withdraws it), and its connections go quiet, as a process that was
/// killed or froze.
pub struct Doomed {
    freeze: std::sync::mpsc::Sender<()>,
    frozen: std::sync::mpsc::Receiver<()>,
}

impl Doomed {
    /// Starts `request` on a client built from `builder`. The request must not get the lock
    /// (the thread panics if it does).
    pub fn start<F>(
        builder: Builder,
        request: impl FnOnce(QuorumLock) -> F + Send + 'static,
    ) -> Doomed
    where
        F: std::future::Future<Output = quorum_lock::Result<quorum_lock::LockGuard>> + 'static,
    {
        let (freeze, told) = std::sync::mpsc::channel::<()>();
        let (done, frozen) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let locks = builder.build().await.unwrap();
                let mut request = Box::pin(request(locks));
                loop {
                    tokio::select! {
                        got = &mut request => panic!("the doomed request got the lock: {got:?}"),
                        () = tokio::time::sleep(Duration::from_millis(5)) => {}
                    }
                    if told.try_recv().is_ok() {
                        let _ = done.send(());
                        loop {
                            std::thread::park();
                        }
                    }
                }
            });
        });
        Doomed { freeze, frozen }
    }

    /// Freezes it for good, and returns once it is frozen.
    pub fn freeze(self) {
        let _ = self.freeze.send(());
        let _ = self.frozen.recv_timeout(Duration::from_secs(30));
    }
}

/// `n` distinct loopback ports nothing listens on: connections to them are refused at once.
/// The listeners are held together until every port is read, so that the kernel cannot hand
/// out one port twice (two closed ports alike would be the same address twice).
pub fn closed_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// Lock commands node `i` has run so far (INFO commandstats: SET, EVAL, EVALSHA, INCR).
pub async fn lock_commands_run(fleet: &Fleet, i: usize) -> u64 {
    let mut c = conn(fleet, i).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .filter(|l| {
            [
                "cmdstat_set:",
                "cmdstat_eval:",
                "cmdstat_evalsha:",
                "cmdstat_incr:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Each kind of lock, as a request for `keys` (the multi-key lock takes them all; the others
/// the first).
pub type KindRequest = for<'a> fn(&'a QuorumLock, &[String]) -> quorum_lock::LockRequest<'a>;

/// Every kind of lock: its name, how many keys it takes (`multi` for the multi-key lock), and
/// its request. The semaphore has one permit, so that it excludes as the mutex does.
pub fn kinds(multi: usize) -> [(&'static str, usize, KindRequest); 6] {
    [
        ("mutex", 1, |l, k| l.lock(&k[0])),
        ("multi-key", multi, |l, k| l.lock_all(k)),
        ("semaphore", 1, |l, k| l.semaphore(&k[0], 1)),
        ("read", 1, |l, k| l.read_lock(&k[0])),
        ("write", 1, |l, k| l.write_lock(&k[0])),
        ("fair", 1, |l, k| l.fair_lock(&k[0])),
    ]
}
