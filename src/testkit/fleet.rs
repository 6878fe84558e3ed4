//! Fleets of `redis-server` processes on loopback: [`Fleet`] with its process controls, its
//! options ([`FleetBuilder`], [`Persistence`]), and external fleets that someone else runs.

use std::io;
use std::time::Duration;

use super::process::{self, RedisProcess};
use super::FaultProxy;
#[cfg(feature = "tls")]
use super::FleetTls;

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
                cluster_node_timeout: None,
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
            .map(|i| crate::node::address::redact(&self.url(i)))
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
                    format!(
                        "external node {i} ({}): {e}",
                        crate::node::address::redact(url)
                    ),
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
            crate::node::tls::ensure_crypto_provider();
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
                    crate::node::address::redact(&urls[i])
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
            let urls: Vec<String> = urls
                .iter()
                .map(|u| crate::node::address::redact(u))
                .collect();
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
