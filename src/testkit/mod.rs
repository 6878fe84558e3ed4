//! Real `redis-server` fleets for tests, examples and benchmarks (feature `testkit`).
//!
//! A [`Fleet`] starts N `redis-server` processes on free loopback ports, each in its own
//! temporary directory, and kills and reaps them (by pid) when dropped, also when a test
//! panics. Should the whole test process die without unwinding, the servers die with it: they
//! are started from one long-lived thread with `PR_SET_PDEATHSIG` (Linux).
//!
//! Per node: [`kill`](Fleet::kill), [`pause`](Fleet::pause) / [`resume`](Fleet::resume)
//! (SIGSTOP / SIGCONT), [`restart`](Fleet::restart) (with or without persistence, see
//! [`Persistence`]). The fault proxy (latency, black hole, reset) and clock-jump emulation are
//! not part of the kit yet.
//!
//! The server binary is `$QUORUM_LOCK_REDIS_SERVER` if set, else `redis-server` on `PATH`. If
//! it is missing, [`Fleet::start`] fails with a message saying how to install it.

mod process;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

pub use process::RedisProcess;

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
    /// Extra server arguments: for every node (`None`) or one.
    args: Vec<(Option<usize>, Vec<String>)>,
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
        let mut nodes = Vec::with_capacity(self.nodes);
        for i in 0..self.nodes {
            let node_dir = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&node_dir)?;
            let settings = process::Settings {
                binary: binary.clone(),
                dir: node_dir,
                password: self.password.clone(),
                persistence: self.persistence,
                args: self
                    .args
                    .iter()
                    .filter(|(node, _)| node.is_none_or(|n| n == i))
                    .flat_map(|(_, args)| args.iter().cloned())
                    .collect(),
            };
            nodes.push(RedisProcess::start(settings)?);
        }
        Ok(Fleet {
            nodes,
            password: self.password,
            _dir: dir,
        })
    }
}

/// A fleet of real `redis-server` processes on loopback.
#[derive(Debug)]
pub struct Fleet {
    nodes: Vec<RedisProcess>,
    password: Option<String>,
    _dir: tempfile::TempDir,
}

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

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the fleet has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`.
    ///
    /// # Panics
    /// If `i` is out of range (a test bug).
    pub fn node(&self, i: usize) -> &RedisProcess {
        &self.nodes[i]
    }

    /// Every node's URL (with the password, if any), in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| self.url_of(n)).collect()
    }

    /// Node `i`'s URL (with the password, if any).
    pub fn url(&self, i: usize) -> String {
        self.url_of(&self.nodes[i])
    }

    fn url_of(&self, n: &RedisProcess) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", n.port()),
            None => format!("redis://127.0.0.1:{}", n.port()),
        }
    }

    /// A plain redis client for node `i`, for checks and fault setup in tests.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn client(&self, i: usize) -> redis::Client {
        redis::Client::open(self.url(i)).expect("fleet URLs are valid")
    }

    /// Kills node `i` (SIGKILL) and reaps it. Its port stays reserved for a restart.
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn kill(&self, i: usize) -> io::Result<()> {
        self.nodes[i].kill()
    }

    /// Stops node `i` (SIGSTOP) and waits until it is stopped: it keeps its connections but
    /// answers nothing until [`resume`](Self::resume).
    ///
    /// # Errors
    /// The node is not running, or the signal failed.
    pub fn pause(&self, i: usize) -> io::Result<()> {
        self.nodes[i].pause()
    }

    /// Resumes node `i` (SIGCONT).
    ///
    /// # Errors
    /// The node is not running, or the signal failed.
    pub fn resume(&self, i: usize) -> io::Result<()> {
        self.nodes[i].resume()
    }

    /// Kills node `i` (if running) and starts it again on the same port and directory. With
    /// [`Persistence::None`] it comes back empty.
    ///
    /// # Errors
    /// The node did not start again.
    pub fn restart(&self, i: usize) -> io::Result<()> {
        self.nodes[i].restart()
    }

    /// The log lines of node `i` so far (all its runs).
    pub fn logs(&self, i: usize) -> String {
        self.nodes[i].logs()
    }

    /// All nodes' logs, headed by node index and port: for failing tests to print.
    pub fn all_logs(&self) -> String {
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

pub(crate) fn install_hint() -> String {
    "redis-server was not found on PATH (and QUORUM_LOCK_REDIS_SERVER is not set). Install it, \
     e.g. `apt-get install -y redis-server` on Debian/Ubuntu or `brew install redis` on macOS, \
     or point QUORUM_LOCK_REDIS_SERVER at the binary"
        .to_string()
}

pub(crate) fn server_from_env() -> Option<PathBuf> {
    std::env::var_os("QUORUM_LOCK_REDIS_SERVER").map(PathBuf::from)
}
