//! The builder: settings with their defaults, their validation into a [`Config`], and the
//! build-time checks on the nodes (docs/DESIGN.md, "Build-time checks").

use std::sync::Arc;
use std::time::Duration;

use crate::client::quorum_lock::QuorumLock;
use crate::client::startup::probe_until_quorum;
use crate::error::{Error, Result};
use crate::human::Human;
use crate::node::address::{redact, NodeAddr};
#[cfg(feature = "tls")]
use crate::node::tls::TlsSettings;
use crate::node::{Node, NodeClient};
use crate::rules::config::from_node_timeout;
use crate::rules::config::{check_duration, Config};
use crate::rules::durable::DurableVotes;
use crate::rules::quorum::Quorum;
use crate::scripts::MAX_NODES;
use crate::state::ClientState;

/// Builds a [`QuorumLock`]: nodes, quorum rule, timeouts and retry policy.
///
/// Setters never fail; [`build`](Self::build) validates everything, names the setting at fault
/// in [`Error::InvalidConfig`], then connects to the nodes and checks them. Its `Debug` output
/// shows the node addresses with their passwords redacted, and of the TLS settings only whether
/// they are set.
///
/// # Examples
///
/// ```no_run
/// # use std::time::Duration;
/// # use quorum_lock::QuorumLock;
/// # async fn example() -> Result<(), quorum_lock::Error> {
/// use quorum_lock::Quorum;
/// let locks = QuorumLock::builder()
///     .nodes(["redis://a:6379", "redis://b:6379", "redis://c:6379", "redis://d:6379", "redis://e:6379"])
///     .quorum(Quorum::Majority) // 3 of 5; Quorum::All is MultiLock
///     .node_timeout(Duration::from_millis(50))
///     .build()
///     .await?;
/// # let _ = locks;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct Builder {
    nodes: Vec<String>,
    quorum: Quorum,
    node_timeout: Duration,
    connect_timeout: Duration,
    drift_factor: f64,
    retry_delay: Duration,
    retry_jitter: Duration,
    max_retries: Option<u32>,
    wait_timeout: Duration,
    min_validity: Duration,
    watchdog_lease: Duration,
    queue_lease: Option<Duration>,
    lock_delay: Duration,
    pubsub: bool,
    durable: Option<DurableVotes>,
    lazy: bool,
    unchecked_quorum: Option<usize>,
    #[cfg(feature = "tls")]
    tls: TlsSettings,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|n| redact(n)).collect();
        let mut f = f.debug_struct("Builder");
        f.field("nodes", &nodes)
            .field("quorum", &self.quorum)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("drift_factor", &self.drift_factor)
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .field("max_retries", &self.max_retries)
            .field("wait_timeout", &self.wait_timeout)
            .field("min_validity", &self.min_validity)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("queue_lease", &self.queue_lease)
            .field("lock_delay", &self.lock_delay)
            .field("durable_votes", &self.durable)
            .field("pubsub", &self.pubsub)
            .field("lazy", &self.lazy);
        #[cfg(feature = "tls")]
        f.field("tls_root_certificate", &self.tls.has_root())
            .field("tls_client_certificate", &self.tls.has_client());
        f.finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            nodes: Vec::new(),
            quorum: Quorum::Majority,
            node_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(2),
            drift_factor: 0.01,
            retry_delay: Duration::from_millis(100),
            retry_jitter: Duration::from_millis(100),
            max_retries: None,
            wait_timeout: Duration::from_secs(10),
            min_validity: Duration::ZERO,
            watchdog_lease: Duration::from_secs(30),
            queue_lease: None,
            lock_delay: Duration::ZERO,
            durable: None,
            pubsub: true,
            lazy: false,
            unchecked_quorum: None,
            #[cfg(feature = "tls")]
            tls: TlsSettings::default(),
        }
    }
}

/// What a builder is set to: the value [`build`](Builder::build) would use, a default where
/// nothing was set (for tools that show or derive from the library's defaults rather than
/// repeat them).
impl Builder {
    /// See [`Builder::quorum`].
    pub fn get_quorum(&self) -> Quorum {
        self.quorum
    }

    /// See [`Builder::node_timeout`].
    pub fn get_node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// See [`Builder::connect_timeout`].
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// See [`Builder::drift_factor`].
    pub fn get_drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// See [`Builder::retry_delay`].
    pub fn get_retry_delay(&self) -> Duration {
        self.retry_delay
    }

    /// See [`Builder::retry_jitter`].
    pub fn get_retry_jitter(&self) -> Duration {
        self.retry_jitter
    }

    /// See [`Builder::max_retries`].
    pub fn get_max_retries(&self) -> Option<u32> {
        self.max_retries
    }

    /// See [`Builder::wait_timeout`].
    pub fn get_wait_timeout(&self) -> Duration {
        self.wait_timeout
    }

    /// See [`Builder::min_validity`].
    pub fn get_min_validity(&self) -> Duration {
        self.min_validity
    }

    /// See [`Builder::watchdog_lease`].
    pub fn get_watchdog_lease(&self) -> Duration {
        self.watchdog_lease
    }

    /// See [`Builder::queue_lease`]: the value set, else the default derived from the node
    /// timeout.
    pub fn get_queue_lease(&self) -> Duration {
        self.queue_lease
            .unwrap_or_else(|| from_node_timeout::queue_lease_default(self.node_timeout))
    }

    /// See [`Builder::lock_delay`].
    pub fn get_lock_delay(&self) -> Duration {
        self.lock_delay
    }

    /// See [`Builder::pubsub`].
    pub fn get_pubsub(&self) -> bool {
        self.pubsub
    }
}

impl Builder {
    /// The node addresses, each `redis://[user:pass@]host:port[/db]`, `rediss://...` (feature
    /// `tls`) or `unix:///path`. Every node must be an independent master. Replaces earlier
    /// calls. No default: at least one node is required, and a single node has no fault
    /// tolerance.
    pub fn nodes<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.nodes = nodes.into_iter().map(|s| s.as_ref().to_string()).collect();
        self
    }

    /// The quorum rule. Defaults to [`Quorum::Majority`].
    pub fn quorum(mut self, quorum: Quorum) -> Self {
        self.quorum = quorum;
        self
    }

    /// How long one node may take to answer one call (including a reconnect) before it counts
    /// as failed. At least 1 ms, and well below the TTL. Defaults to 50 ms.
    ///
    /// The library derives these durations from it (`t` below):
    /// - the circuit breaker: a node that left a request unanswered for longer than `t` takes
    ///   no further requests but one probe per `t`, and is passed over as a key's arbiter;
    /// - a probe's (and the breaker's follow-up `PING`'s) wait: `20 t`, within [1 s, 30 s];
    /// - the arbiter: a node still counts as answering within 4x the fastest node's round trip
    ///   plus 1 ms, or `t / 4`, whichever is more;
    /// - [`build`](Self::build)'s grace: once a quorum passed its checks, the other nodes get
    ///   `t` more;
    /// - a fair lock's claim window (a short grant to a waiter): `4 t`, or the longest pause
    ///   between attempts plus `2 t`;
    /// - the [queue lease](Self::queue_lease): 5 s or `3 t` by default, and always more than
    ///   `2 t`;
    /// - a TTL must exceed `max(t, min_validity)` plus the drift allowance.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// How long [`build`](Self::build) waits for each node's first connection and checks.
    /// Defaults to 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The clock-drift factor: validity is reduced by `ttl * factor + 2 ms`. Must be in
    /// `[0, 0.5)`. Defaults to 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// The base delay between two attempts of [`acquire`](QuorumLock::acquire) when no
    /// release notice comes first (capped by the holder's remaining TTL, when known). Defaults
    /// to 100 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// A random extra delay, uniform in `[0, jitter]`, added to each retry delay so contending
    /// clients do not retry in lock-step. Defaults to 100 ms.
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.retry_jitter = jitter;
        self
    }

    /// The most retries after the first attempt, or `None` for as many as the wait time
    /// allows. Defaults to `None`.
    pub fn max_retries(mut self, retries: Option<u32>) -> Self {
        self.max_retries = retries;
        self
    }

    /// How long [`acquire`](QuorumLock::acquire) keeps trying by default. Defaults to 10 s.
    pub fn wait_timeout(mut self, wait: Duration) -> Self {
        self.wait_timeout = wait;
        self
    }

    /// The least validity an acquire must leave; an attempt leaving less fails with
    /// [`Error::ValidityExhausted`] (and is rolled back). With `ttl - min_validity` below the
    /// node timeout, this bounds how slow a successful attempt may be. Defaults to zero (any
    /// positive validity).
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.min_validity = min;
        self
    }

    /// The lease of a lock kept by the watchdog (requests without a fixed TTL, like
    /// Redisson's `lockWatchdogTimeout`): renewed every third of it while held, so a crashed
    /// holder's lock frees within one lease. Defaults to 30 s.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How long a waiter of a fair lock ([`QuorumLock::fair_lock`]) keeps its place in line,
    /// and a waiting writer of a read-write lock ([`QuorumLock::write_lock`]) its pending mark
    /// (which keeps new readers out), without renewing them. A waiting request renews them with
    /// each attempt, at least every third of this; a waiter that dies (crash, lost network)
    /// loses them when they expire, so the waiters behind it (or the readers) stall at most
    /// this long. Must exceed twice the node timeout. Defaults to 5 s (as Redisson's fair lock
    /// waits for a dead waiter), or three node timeouts when that is longer.
    ///
    /// [`QuorumLock::fair_lock`]: crate::QuorumLock::fair_lock
    /// [`QuorumLock::write_lock`]: crate::QuorumLock::write_lock
    pub fn queue_lease(mut self, lease: Duration) -> Self {
        self.queue_lease = Some(lease);
        self
    }

    /// Keeps a lock unavailable for `delay` after its holder lost it without releasing it
    /// (Chubby's and Consul's lock-delay): every entry a guard relies on lives `delay` longer
    /// on the nodes than the guard's deadline (`ttl + delay` where the guard counts `ttl`),
    /// so a holder that was cut off, paused or crashed mid-write has that long after its
    /// deadline before anyone else can take the key; its late writes cannot overlap the next
    /// holder's. A release deletes the entries as always, so the delay costs nothing when
    /// holders release. Use it where the protected resource cannot check fencing tokens;
    /// where it can, fencing ([`LockRequest::fencing`]) stops late writes whatever their delay.
    /// `ttl + delay` must not exceed [`MAX_TTL`](crate::MAX_TTL). Defaults to zero.
    ///
    /// [`LockRequest::fencing`]: crate::LockRequest::fencing
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Counts a node's yes to an acquire or an extend only once `WAITAOF` says the write is
    /// fsynced to its AOF ([`DurableVotes::Local`]: needs `appendonly yes`) or on `n`
    /// replicas ([`DurableVotes::Replica`]), within the node timeout (an fsync may take up to
    /// a second with `everysec`); docs/SAFETY.md, "Deployment shapes". Servers before 7.2,
    /// cluster nodes and `Replica(0)` are [`Error::InvalidConfig`] (`durable_votes`).
    pub fn durable_votes(mut self, durable: DurableVotes) -> Self {
        self.durable = Some(durable);
        self
    }

    /// Whether waiters subscribe to release notices (one pub/sub connection per node, shared
    /// by all waiters of the client) to take the lock about one round trip after it is
    /// released. Without, they wake on the retry delay only. Also whether holders listen for
    /// notices to holders (another pub/sub connection per node, from the client's first
    /// hold): without, a broken holder learns of the break at its next renewal, and
    /// [`LockGuard::release_requested`](crate::LockGuard::release_requested) never fires.
    /// Defaults to `true`.
    pub fn pubsub(mut self, enabled: bool) -> Self {
        self.pubsub = enabled;
        self
    }

    /// Whether [`build`](Self::build) may succeed with fewer reachable nodes than the quorum
    /// (they are connected on first use). Configuration errors (unknown host, wrong password,
    /// a certificate refused, replica, duplicate server) still fail the build. Defaults to
    /// `false`.
    pub fn lazy(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    /// The root certificates that the certificates of `rediss://` nodes must be signed by: PEM,
    /// one certificate or a bundle (feature `tls`). When set, these are the only roots trusted:
    /// the public (webpki) roots are not, so give a bundle to trust more than one CA. Every node
    /// must then be `rediss://` (a `redis://` node among them fails the build: it would send
    /// its password in clear). Replaces earlier calls. Defaults to none: the public webpki
    /// roots (Mozilla's) are trusted.
    ///
    /// [`build`](Self::build) fails with [`Error::InvalidConfig`] naming this setting when the
    /// PEM holds no certificate, or one that cannot be a root.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.set_root(pem.into());
        self
    }

    /// A client certificate and its private key, presented to `rediss://` nodes that ask for one
    /// (Redis' default, `tls-auth-clients yes`): the certificate chain as PEM (the client's
    /// certificate first, then any intermediates), the key as PEM (PKCS#8, PKCS#1 or SEC1)
    /// (feature `tls`). The key is never shown: not in `Debug` output (which says only that a
    /// client certificate is set), errors or logs. Every node must then be `rediss://`.
    /// Replaces earlier calls. Defaults to none.
    ///
    /// [`build`](Self::build) fails with [`Error::InvalidConfig`] naming this setting when the
    /// certificate or the key is not PEM, or the key does not match the certificate.
    #[cfg(feature = "tls")]
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.set_client(cert_pem.into(), key_pem.into());
        self
    }

    /// Requires exactly `k` confirmations without checking that `k` is a majority: only for
    /// [`testkit::unchecked_quorum`](crate::testkit::unchecked_quorum), never in the public
    /// builder.
    #[cfg(feature = "testkit")]
    pub(crate) fn unchecked_quorum(mut self, k: usize) -> Self {
        self.unchecked_quorum = Some(k);
        self
    }

    fn validate(&self) -> Result<Config> {
        let invalid =
            |field: &'static str, reason: String| Err(Error::InvalidConfig { field, reason });
        if self.nodes.is_empty() {
            return invalid("nodes", "at least one node is required".into());
        }
        let required = match (
            self.unchecked_quorum,
            self.quorum.required(self.nodes.len()),
        ) {
            (Some(k), _) if (1..=self.nodes.len()).contains(&k) => k,
            (Some(k), _) => return invalid("quorum", format!("{k} of {} nodes", self.nodes.len())),
            (None, Ok(q)) => q,
            (None, Err(reason)) => return invalid("quorum", reason),
        };
        if self.nodes.len() > MAX_NODES {
            return invalid(
                "nodes",
                format!(
                    "{} nodes, more than the {MAX_NODES} supported",
                    self.nodes.len()
                ),
            );
        }
        for (field, value) in [
            ("node_timeout", self.node_timeout),
            ("connect_timeout", self.connect_timeout),
            ("retry_delay", self.retry_delay),
            ("retry_jitter", self.retry_jitter),
            ("wait_timeout", self.wait_timeout),
            ("min_validity", self.min_validity),
            ("watchdog_lease", self.watchdog_lease),
            ("queue_lease", self.queue_lease.unwrap_or_default()),
            ("lock_delay", self.lock_delay),
        ] {
            check_duration(field, value)?;
        }
        // Timeouts are kept in whole milliseconds (the breaker's clock), and no node answers
        // across a network in less: below one, every node would count as failed.
        for (field, value) in [
            ("node_timeout", self.node_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value < Duration::from_millis(1) {
                return invalid(
                    field,
                    format!(
                        "{value:?}: must be at least 1ms (a node answers in a network round trip)"
                    ),
                );
            }
        }
        let queue_lease = self.get_queue_lease();
        if queue_lease <= from_node_timeout::queue_lease_floor(self.node_timeout) {
            return invalid(
                "queue_lease",
                format!(
                    "{} must exceed twice the node timeout ({}): a waiter \
                     renews its place in line with requests bounded by that timeout",
                    Human(queue_lease),
                    Human(self.node_timeout)
                ),
            );
        }
        if !(self.drift_factor.is_finite() && (0.0..0.5).contains(&self.drift_factor)) {
            return invalid(
                "drift_factor",
                format!("must be in [0, 0.5), got {}", self.drift_factor),
            );
        }
        self.durable.map(DurableVotes::check).transpose()?;
        let config = Config {
            quorum: self.quorum,
            required,
            node_timeout: self.node_timeout,
            connect_timeout: self.connect_timeout,
            drift_factor: self.drift_factor,
            retry_delay: self.retry_delay,
            retry_jitter: self.retry_jitter,
            max_retries: self.max_retries,
            wait_timeout: self.wait_timeout,
            min_validity: self.min_validity,
            watchdog_lease: self.watchdog_lease,
            queue_lease,
            lock_delay: self.lock_delay,
            durable: self.durable,
            pubsub: self.pubsub,
        };
        if self.watchdog_lease.saturating_add(self.lock_delay) > crate::rules::config::MAX_TTL {
            return invalid(
                "lock_delay",
                format!(
                    "{} with the watchdog lease ({}) exceeds the longest TTL, {}",
                    Human(self.lock_delay),
                    Human(self.watchdog_lease),
                    Human(crate::rules::config::MAX_TTL)
                ),
            );
        }
        if let Err(Error::InvalidTtl { reason, .. }) = config.check_ttl(self.watchdog_lease) {
            return invalid("watchdog_lease", reason);
        }
        Ok(config)
    }

    /// The node addresses parsed, with the TLS settings checked and applied (before any node is
    /// contacted).
    fn addresses(&self) -> Result<Vec<NodeAddr>> {
        let addrs = self
            .nodes
            .iter()
            .map(|raw| NodeAddr::parse(raw))
            .collect::<Result<Vec<_>>>()?;
        // The same address twice would count twice toward the quorum: refused without asking
        // it (the run_id check at build needs an answer; a node that is down gives none).
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = addrs.iter().find(|a| !seen.insert(a.endpoint.as_str())) {
            return Err(Error::DuplicateAddress {
                node: twice.display.clone(),
            });
        }
        #[cfg(feature = "tls")]
        let addrs = self.tls.apply(addrs)?;
        Ok(addrs)
    }

    /// The configured nodes, each as a [`NodeClient`] for connections of your own beside the
    /// lock client's (diagnostics), in the order given: parsed, and with the TLS settings
    /// checked and applied, exactly as [`build`](Self::build) does, without contacting any node
    /// and whatever the other settings.
    ///
    /// # Errors
    /// [`Error::InvalidNodeUrl`]; [`Error::DuplicateAddress`]; [`Error::InvalidConfig`] naming a
    /// TLS setting (feature `tls`) that is not usable, or given with a node that is not
    /// `rediss://`.
    pub fn node_clients(&self) -> Result<Vec<NodeClient>> {
        Ok(self.addresses()?.into_iter().map(NodeClient::new).collect())
    }

    /// Validates the configuration, connects to every node concurrently and checks them.
    /// Returns once every node answered or failed, or a node timeout after a quorum of nodes
    /// answered: a node still silent then (frozen, black-holed) does not hold the client up
    /// for the whole connect timeout. Its check goes on in the background, and lock calls
    /// count it as failed, sending it nothing, until the check passes; a check that fails
    /// then (the same server as another node, a replica) excludes the node for good and logs
    /// an error. A node unreachable at build is held the same way, its check tried again
    /// every second until it answers.
    ///
    /// Checks: the same server listed twice (same `run_id`) and replicas are rejected;
    /// evicting `maxmemory-policy` and missing persistence are logged as warnings (tracing);
    /// fewer reachable nodes than the quorum is an error unless [`lazy`](Self::lazy).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the setting, [`Error::InvalidNodeUrl`],
    /// [`Error::DuplicateAddress`] (before any node is contacted), [`Error::Node`] for an
    /// unknown host, rejected credentials, a failed TLS handshake (a certificate refused on
    /// either side) or a server that does not speak Redis, [`Error::DuplicateNode`],
    /// [`Error::ReplicaNode`], [`Error::Unreachable`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the half-built client and its connections.
    pub async fn build(self) -> Result<QuorumLock> {
        let config = self.validate()?;
        #[cfg(feature = "metrics")]
        {
            static DESCRIBED: std::sync::Once = std::sync::Once::new();
            DESCRIBED.call_once(crate::telemetry::describe_metrics);
        }
        let nodes: Arc<[Node]> = self
            .addresses()?
            .into_iter()
            .map(|addr| Node::new(addr, config.node_timeout, config.connect_timeout))
            .collect();
        let (mut infos, failures) = probe_until_quorum(&nodes, &config).await?;
        crate::client::startup::check_at_build(&nodes, &mut infos, &config).await?;
        let reachable = nodes.len() - failures.len();
        if reachable < config.required && !self.lazy {
            return Err(Error::Unreachable {
                reachable,
                nodes: nodes.len(),
                required: config.required,
                failures,
            });
        }
        for f in &failures {
            tracing::warn!(node = f.node(), error = %f, "node unreachable at build; checked when it answers");
        }
        if nodes.len() == 1 {
            tracing::warn!("a single-node lock has no fault tolerance");
        }
        Ok(QuorumLock::from_state(ClientState::new(nodes, config)))
    }
}

#[cfg(test)]
mod tests;
