//! Real `redis-server` fleets for tests, examples and benchmarks (feature `testkit`).
//!
//! A [`Fleet`] starts N `redis-server` processes on free loopback ports, each in its own
//! temporary directory, and kills and reaps them (by pid) when dropped, also when a test
//! panics. Should the whole test process die without unwinding, the servers die with it: they
//! are started from one long-lived thread with `PR_SET_PDEATHSIG` (Linux).
//!
//! Per node: [`kill`](Fleet::kill), [`pause`](Fleet::pause) / [`resume`](Fleet::resume)
//! (SIGSTOP / SIGCONT), [`restart`](Fleet::restart) (with or without persistence, see
//! [`Persistence`]), a [`FaultProxy`] in front of each node when asked for (added latency,
//! black hole, connection reset, heal), and [`expire_early`](Fleet::expire_early), the
//! emulation of a node clock jumping forward (libfaketime cannot run Debian's redis-server).
//! [`history`] records who believed it held which lock when, and how (alone, as a reader,
//! as one of a semaphore's permits), and checks that no two such intervals overlap where they
//! may not, that no semaphore had more holders than permits, and that fencing tokens increase
//! (for your own tests too: record an interval around each critical section, then check them
//! all).
//!
//! With the `tls` feature, [`FleetBuilder::tls`] starts nodes that speak TLS only, with the
//! certificates a test gives them ([`FleetTls`]), optionally requiring client certificates.
//!
//! The server binary is `$QUORUM_LOCK_REDIS_SERVER` if set, else `redis-server` on `PATH`. If
//! it is missing, [`Fleet::start`] fails with a message saying how to install it.
//!
//! An **external fleet** ([`Fleet::external`], [`Fleet::from_env`]) is a set of nodes someone
//! else runs, e.g. the repository's `docker-compose.yml`: the same URLs, clients and
//! [`expire_early`](Fleet::expire_early), but no process control (kill, pause, restart and
//! logs say so; fault them with `docker kill` / `docker pause` instead). The integration
//! tests that share one fleet and inject no faults run against it when
//! `QUORUM_LOCK_NODES` is set.
//!
//! With the feature `containers` (alias `testcontainers`), [`containers`] runs fleets in
//! Docker containers instead, seen from two sides (two networks), so that one client can be
//! cut off from nodes that another still reaches.

#[cfg(feature = "containers")]
pub mod containers;
#[cfg(feature = "containers")]
mod docker;
mod fenced_store;
pub mod history;
mod process;
mod proxy;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

pub use fenced_store::FencedStore;
pub use process::RedisProcess;
pub use proxy::{Fault, FaultProxy};

/// **Unsafe, for negative tests only**: `builder` requiring exactly `k` confirmations
/// without checking that `k` is a majority. With `k <= N/2` two holders can both reach
/// "quorum"; the torture suite uses this to prove that its checker catches it. Not a builder
/// method, so that production code cannot reach it by autocompletion.
pub fn unchecked_quorum(builder: crate::Builder, k: usize) -> crate::Builder {
    builder.unchecked_quorum(k)
}

/// **Unsafe, for negative tests only**: a semaphore request of `permits` permits without
/// the check that more than one permit needs [`Quorum::All`](crate::Quorum::All). Under a
/// majority of five nodes, up to 5 x `permits` / 3 clients can then hold a permit at once;
/// the lock family's tests use it to show that. Not a client method, so that production code
/// cannot reach it by autocompletion.
pub fn unchecked_semaphore(
    locks: &crate::QuorumLock,
    key: impl AsRef<[u8]>,
    permits: u32,
) -> crate::LockRequest<'_> {
    locks.unchecked_semaphore(key.as_ref(), permits)
}

/// **For negative tests only**: one attempt of a fair lock on one node, with `place` as the
/// waiter's position in that node's line (the fair lock's own acquire script, as a request
/// with a ticket sends it; the key's counter is raised to `place`). The library orders every
/// node's line by the same ticket; a test gives each node its own order (as if each ordered
/// its waiters by arrival) to show what tickets prevent. Answers whether the node gave the
/// key to `holder`.
pub async fn fair_attempt_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    waiter: &str,
    holder: &str,
    ttl: Duration,
    place: u64,
    queue_lease: Duration,
) -> redis::RedisResult<bool> {
    let (call, _) =
        fair_shape(key, waiter, holder, Some(place), queue_lease, ttl)?.acquire(holder, &ms(ttl));
    let answer: redis::Value = call.eval().query_async(node).await?;
    Ok(answer == redis::Value::Int(1))
}

/// **For tests of the node scripts**: the first attempt of a waiting fair request on one
/// node, with no ticket yet (the library's own call). Answers the ticket number the node drew
/// when it refused (someone holds the key or waits), or `None` when it gave the key to
/// `holder`.
pub async fn fair_first_attempt_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    waiter: &str,
    holder: &str,
    ttl: Duration,
    queue_lease: Duration,
) -> redis::RedisResult<Option<u64>> {
    let (call, _) =
        fair_shape(key, waiter, holder, None, queue_lease, ttl)?.acquire(holder, &ms(ttl));
    match call.eval().query_async(node).await? {
        redis::Value::Int(1) => Ok(None),
        redis::Value::Array(items) => match items.as_slice() {
            [_, redis::Value::Int(n), ..] => Ok(u64::try_from(*n).ok()),
            _ => Err(unexpected("a fair first attempt")),
        },
        _ => Err(unexpected("a fair first attempt")),
    }
}

/// **For tests of the node scripts**: a fair lock's ticket drawn on one node in a round of
/// its own (the library's own call, made when fewer than a quorum of nodes drew it with the
/// request's first attempt). Answers the ticket number.
pub async fn fair_draw_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    queue_lease: Duration,
) -> redis::RedisResult<u64> {
    let key = crate::key::Key::new(key).map_err(|e| invalid(e.to_string()))?;
    let lease = ms(queue_lease);
    let call = crate::scripts::Call::new(
        &crate::scripts::TICKET_DRAW,
        &key.ticket_key(),
        &[lease.as_bytes()],
    );
    call.eval().query_async(node).await
}

/// **For tests of the node scripts**: the release of a read lock of `key` held with
/// `holder`, on one node (the library's own call). A test runs it node by node in an order
/// of its choosing, as concurrent releases of several readers can interleave. Answers whether
/// the reader held the key there.
pub async fn read_release_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    holder: &str,
) -> redis::RedisResult<bool> {
    let key = crate::key::Key::new(key).map_err(|e| invalid(e.to_string()))?;
    let call = crate::shape::Shape::Read(key).release(holder, crate::shape::Notice::Release);
    let answer: redis::Value = call.eval().query_async(node).await?;
    Ok(answer == redis::Value::Int(1))
}

fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}

fn invalid(reason: String) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, "bad argument", reason))
}

fn unexpected(what: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, "unexpected reply to", what.into()))
}

/// A fair request as the library makes it, for the script calls above.
fn fair_shape(
    key: &[u8],
    waiter: &str,
    holder: &str,
    ticket: Option<u64>,
    queue_lease: Duration,
    claim: Duration,
) -> redis::RedisResult<crate::shape::Shape> {
    Ok(crate::shape::Shape::Fair(crate::shape::Fair {
        key: crate::key::Key::new(key).map_err(|e| invalid(e.to_string()))?,
        waiter: waiter.into(),
        holder: holder.into(),
        ticket,
        draws: true,
        queue_lease_ms: ms(queue_lease).into(),
        claim_ms: ms(claim).into(),
    }))
}

/// What a node keeps across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Persistence {
    /// Nothing: a restarted node comes back empty (forgets its locks).
    #[default]
    None,
    /// AOF with `appendfsync always`: a restarted node keeps every acknowledged lock.
    AofAlways,
}

/// Options for a fleet.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct FleetBuilder {
    nodes: usize,
    password: Option<String>,
    persistence: Persistence,
    node_persistence: Vec<(usize, Persistence)>,
    proxied: bool,
    /// Extra server arguments: for every node (`None`) or one.
    args: Vec<(Option<usize>, Vec<String>)>,
    #[cfg(feature = "tls")]
    tls: Option<FleetTls>,
}

/// TLS for a fleet's nodes (feature `tls`): PEM bytes, written into the fleet's directory.
///
/// Its `Debug` output shows neither key.
#[cfg(feature = "tls")]
#[derive(Clone)]
#[must_use]
pub struct FleetTls {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

#[cfg(feature = "tls")]
impl std::fmt::Debug for FleetTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetTls")
            .field("requires_client_certificate", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "tls")]
impl FleetTls {
    /// The CA certificate (`tls-ca-cert-file`: what nodes check client certificates against,
    /// and what the test kit's own clients trust), and the nodes' certificate and key (one
    /// certificate for all nodes, so it should name `127.0.0.1`). Clients are not asked for a
    /// certificate (`tls-auth-clients no`).
    pub fn new(
        ca_pem: impl Into<Vec<u8>>,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        FleetTls {
            ca: ca_pem.into(),
            cert: cert_pem.into(),
            key: key_pem.into(),
            client: None,
        }
    }

    /// Nodes require a client certificate signed by the CA (`tls-auth-clients yes`, Redis'
    /// default); the test kit's own clients ([`Fleet::client`]) present this one.
    pub fn require_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Writes the files into `dir` once for all nodes.
    fn write(&self, dir: &std::path::Path) -> io::Result<process::TlsFiles> {
        let files = process::TlsFiles {
            ca: dir.join("ca.crt"),
            cert: dir.join("node.crt"),
            key: dir.join("node.key"),
            auth_clients: self.client.is_some(),
        };
        std::fs::write(&files.ca, &self.ca)?;
        std::fs::write(&files.cert, &self.cert)?;
        std::fs::write(&files.key, &self.key)?;
        Ok(files)
    }

    /// The certificates of the test kit's own clients.
    fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: Some(self.ca.clone()),
        }
    }
}

impl FleetBuilder {
    /// How many nodes. Defaults to 0 (set it).
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// A `requirepass` for every node. Defaults to none.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The persistence mode of every node. Defaults to [`Persistence::None`].
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// The persistence mode of node `i`, overriding [`persistence`](Self::persistence).
    pub fn node_persistence(mut self, i: usize, persistence: Persistence) -> Self {
        self.node_persistence.push((i, persistence));
        self
    }

    /// Puts a [`FaultProxy`] in front of every node; [`Fleet::urls`] then name the proxies.
    /// Defaults to `false`.
    pub fn proxied(mut self, proxied: bool) -> Self {
        self.proxied = proxied;
        self
    }

    /// Extra `redis-server` command-line arguments for every node, e.g.
    /// `["--rename-command", "SUBSCRIBE", ""]` to disable SUBSCRIBE.
    pub fn server_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args
            .push((None, args.into_iter().map(Into::into).collect()));
        self
    }

    /// Extra `redis-server` command-line arguments for node `i` only.
    pub fn node_server_args<I, S>(mut self, i: usize, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args
            .push((Some(i), args.into_iter().map(Into::into).collect()));
        self
    }

    /// Nodes that speak TLS only (feature `tls`), on their ephemeral ports; [`Fleet::urls`]
    /// are then `rediss://`. Defaults to plain TCP.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: FleetTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Starts the fleet and waits until every node accepts connections.
    ///
    /// # Errors
    /// The server binary is missing (the message says how to install it), or a node did not
    /// start (the message holds its log).
    pub fn start(self) -> io::Result<Fleet> {
        let binary = process::find_server()?;
        let dir = tempfile::Builder::new()
            .prefix("quorum-lock-fleet-")
            .tempdir()?;
        #[cfg(feature = "tls")]
        let tls_files = match &self.tls {
            Some(tls) => Some(tls.write(dir.path())?),
            None => None,
        };
        let mut nodes = Vec::with_capacity(self.nodes);
        for i in 0..self.nodes {
            let node_dir = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&node_dir)?;
            let settings = process::Settings {
                binary: binary.clone(),
                dir: node_dir,
                password: self.password.clone(),
                persistence: self
                    .node_persistence
                    .iter()
                    .rev()
                    .find(|(n, _)| *n == i)
                    .map_or(self.persistence, |(_, p)| *p),
                args: self
                    .args
                    .iter()
                    .filter(|(node, _)| node.is_none_or(|n| n == i))
                    .flat_map(|(_, args)| args.iter().cloned())
                    .collect(),
                #[cfg(feature = "tls")]
                tls: tls_files.clone(),
            };
            nodes.push(RedisProcess::start(settings)?);
        }
        let proxies = if self.proxied {
            nodes
                .iter()
                .map(|n| FaultProxy::start(n.port()))
                .collect::<io::Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        Ok(Fleet {
            nodes,
            proxies,
            password: self.password,
            external: None,
            #[cfg(feature = "tls")]
            tls: self.tls,
            _dir: Some(dir),
        })
    }
}

/// A fleet of real `redis-server` processes on loopback, or of external nodes. Its `Debug`
/// output shows node addresses without passwords.
pub struct Fleet {
    nodes: Vec<RedisProcess>,
    proxies: Vec<FaultProxy>,
    password: Option<String>,
    /// The nodes' URLs, for a fleet the test kit does not run.
    external: Option<Vec<String>>,
    #[cfg(feature = "tls")]
    tls: Option<FleetTls>,
    _dir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = (0..self.len())
            .map(|i| crate::address::redact(&self.url(i)))
            .collect();
        f.debug_struct("Fleet")
            .field("nodes", &nodes)
            .field("external", &self.is_external())
            .field("proxied", &!self.proxies.is_empty())
            .finish_non_exhaustive()
    }
}

/// The variable naming an external fleet's nodes (comma-separated URLs), as for the CLI.
pub const NODES_ENV: &str = "QUORUM_LOCK_NODES";

impl Fleet {
    /// Starts `n` nodes without persistence or password.
    ///
    /// # Errors
    /// As [`FleetBuilder::start`].
    pub fn start(n: usize) -> io::Result<Fleet> {
        Fleet::builder().nodes(n).start()
    }

    /// Options for a fleet.
    pub fn builder() -> FleetBuilder {
        FleetBuilder::default()
    }

    /// A fleet of nodes run by someone else (e.g. `docker-compose up`), at `urls`. Nothing
    /// is started or stopped; the process controls fail with [`io::ErrorKind::Unsupported`].
    ///
    /// # Errors
    /// No URL, or one the redis crate cannot parse.
    pub fn external<I, S>(urls: I) -> io::Result<Fleet>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls: Vec<String> = urls.into_iter().map(Into::into).collect();
        if urls.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an external fleet needs at least one node URL",
            ));
        }
        for (i, url) in urls.iter().enumerate() {
            redis::Client::open(url.as_str()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("external node {i} ({}): {e}", crate::address::redact(url)),
                )
            })?;
        }
        Ok(Fleet {
            nodes: Vec::new(),
            proxies: Vec::new(),
            password: None,
            external: Some(urls),
            #[cfg(feature = "tls")]
            tls: None,
            _dir: None,
        })
    }

    /// The external fleet named by `QUORUM_LOCK_NODES` (comma-separated URLs), if set and
    /// not empty.
    ///
    /// # Errors
    /// As [`external`](Self::external).
    pub fn from_env() -> io::Result<Option<Fleet>> {
        match std::env::var(NODES_ENV) {
            Ok(v) if !v.trim().is_empty() => {
                Fleet::external(v.split(',').map(str::trim).filter(|u| !u.is_empty())).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Whether the test kit does not run these nodes (see [`external`](Self::external)).
    pub fn is_external(&self) -> bool {
        self.external.is_some()
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.external.as_ref().map_or(self.nodes.len(), Vec::len)
    }

    /// Whether the fleet has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`.
    ///
    /// # Panics
    /// If `i` is out of range, or the fleet is external (a test bug).
    pub fn node(&self, i: usize) -> &RedisProcess {
        assert!(!self.is_external(), "an external fleet has no processes");
        &self.nodes[i]
    }

    /// Every node's URL for lock clients (through its proxy, if the fleet is proxied; with
    /// the password, if any), in node order.
    pub fn urls(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.url(i)).collect()
    }

    /// Node `i`'s URL for lock clients (through its proxy, if any).
    pub fn url(&self, i: usize) -> String {
        if let Some(urls) = &self.external {
            return urls[i].clone();
        }
        self.url_at(
            self.proxies
                .get(i)
                .map_or(self.nodes[i].port(), FaultProxy::port),
        )
    }

    /// Node `i`'s URL bypassing any proxy.
    pub fn direct_url(&self, i: usize) -> String {
        if let Some(urls) = &self.external {
            return urls[i].clone();
        }
        self.url_at(self.nodes[i].port())
    }

    fn url_at(&self, port: u16) -> String {
        #[cfg(feature = "tls")]
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        #[cfg(not(feature = "tls"))]
        let scheme = "redis";
        match &self.password {
            Some(p) => format!("{scheme}://:{p}@127.0.0.1:{port}"),
            None => format!("{scheme}://127.0.0.1:{port}"),
        }
    }

    /// A plain redis client for node `i`, bypassing any proxy: for checks and fault setup (with
    /// the fleet's CA and client certificate, if it uses TLS).
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn client(&self, i: usize) -> redis::Client {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            crate::tls::ensure_crypto_provider();
            return redis::Client::build_with_tls(self.direct_url(i), tls.certificates())
                .expect("fleet URLs and certificates are valid");
        }
        redis::Client::open(self.direct_url(i)).expect("fleet URLs are valid")
    }

    /// The fault proxy in front of node `i`.
    ///
    /// # Panics
    /// If the fleet is not [`proxied`](FleetBuilder::proxied), or `i` is out of range.
    pub fn proxy(&self, i: usize) -> &FaultProxy {
        &self.proxies[i]
    }

    /// Emulates node `i`'s clock jumping forward: every key matching `pattern` that has a
    /// TTL (lock entries; fencing counters have none) expires at once. Returns
    /// how many keys it cut short.
    ///
    /// # Errors
    /// The node could not be reached.
    pub fn expire_early(&self, i: usize, pattern: &str) -> io::Result<usize> {
        const SCRIPT: &str = "local n = 0 \
            for _, k in ipairs(redis.call('keys', ARGV[1])) do \
              if redis.call('pttl', k) > 0 then redis.call('pexpire', k, 0) n = n + 1 end \
            end return n";
        let mut conn = self
            .client(i)
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(io::Error::other)?;
        redis::cmd("EVAL")
            .arg(SCRIPT)
            .arg(0)
            .arg(pattern)
            .query::<usize>(&mut conn)
            .map_err(io::Error::other)
    }

    /// Kills node `i` (SIGKILL) and reaps it. Its port stays reserved for a restart.
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn kill(&self, i: usize) -> io::Result<()> {
        self.controlled(i)?.kill()
    }

    /// Stops node `i` (SIGSTOP) and waits until it is stopped: it keeps its connections but
    /// answers nothing until [`resume`](Self::resume).
    ///
    /// # Errors
    /// The node is not running, or the signal failed.
    pub fn pause(&self, i: usize) -> io::Result<()> {
        self.controlled(i)?.pause()
    }

    /// Resumes node `i` (SIGCONT).
    ///
    /// # Errors
    /// The node is not running, or the signal failed.
    pub fn resume(&self, i: usize) -> io::Result<()> {
        self.controlled(i)?.resume()
    }

    /// Kills node `i` (if running) and starts it again on the same port and directory. With
    /// [`Persistence::None`] it comes back empty.
    ///
    /// # Errors
    /// The node did not start again.
    pub fn restart(&self, i: usize) -> io::Result<()> {
        self.controlled(i)?.restart()
    }

    /// Node `i`'s process, or why there is none to control.
    fn controlled(&self, i: usize) -> io::Result<&RedisProcess> {
        match &self.external {
            Some(urls) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "node {i} ({}) belongs to an external fleet: the test kit cannot kill, \
                     pause or restart it (use docker kill / docker pause)",
                    crate::address::redact(&urls[i])
                ),
            )),
            None => Ok(&self.nodes[i]),
        }
    }

    /// The log lines of node `i` so far (all its runs); empty for an external fleet.
    pub fn logs(&self, i: usize) -> String {
        if self.is_external() {
            return String::new();
        }
        self.nodes[i].logs()
    }

    /// All nodes' logs, headed by node index and port: for failing tests to print.
    pub fn all_logs(&self) -> String {
        if let Some(urls) = &self.external {
            let urls: Vec<String> = urls.iter().map(|u| crate::address::redact(u)).collect();
            return format!("(external fleet {urls:?}: no logs here)\n");
        }
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            out.push_str(&format!(
                "--- node {i} (port {}) ---\n{}",
                n.port(),
                n.logs()
            ));
        }
        out
    }
}

/// How long a node may take to start before [`Fleet::start`] gives up.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Nanoseconds on the machine's monotonic clock (`CLOCK_MONOTONIC`): comparable across the
/// processes of one machine, unlike `Instant`. For histories recorded by several processes.
pub fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

pub(crate) fn install_hint() -> String {
    "redis-server was not found on PATH (and QUORUM_LOCK_REDIS_SERVER is not set). Install it, \
     e.g. `apt-get install -y redis-server` on Debian/Ubuntu or `brew install redis` on macOS, \
     or point QUORUM_LOCK_REDIS_SERVER at the binary"
        .to_string()
}

pub(crate) fn server_from_env() -> Option<PathBuf> {
    std::env::var_os("QUORUM_LOCK_REDIS_SERVER").map(PathBuf::from)
}
