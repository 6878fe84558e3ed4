//! Leader election over the quorum ([`QuorumLock::election`](crate::QuorumLock::election);
//! docs/DESIGN.md, "Leader election"): leading is holding the election's key as a mutex with
//! a fencing token, the token is the term, and the leader publishes its value and term in the
//! key's holder record (`family::who`) once it holds the key, so that a reader never takes
//! an attempt that did not win for a leader.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::client::observe::Observer;
use crate::client::request::{LockRequest, Scoped};
use crate::client::who::{check_public_text, holder_of, unix_ms_now, HeldAs};
use crate::error::{Error, Result};
use crate::hold::guard::LockGuard;
use crate::hold::lost_signal::LostSignal;
use crate::state::ClientState;

/// The longest leader value, in bytes.
pub const MAX_LEADER_VALUE_LEN: usize = 1024;

/// How long one round of an unbounded campaign waits before it asks again (it then goes on).
const CAMPAIGN_ROUND: Duration = Duration::from_secs(60);

/// A leader election among the clients that campaign under one name
/// ([`QuorumLock::election`](crate::QuorumLock::election)). Cheap to clone.
#[derive(Clone)]
pub struct Election {
    pub(crate) state: Arc<ClientState>,
    pub(crate) name: Vec<u8>,
    lease: Option<Duration>,
    wait: Option<Duration>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("lease", &self.lease)
            .field("wait", &self.wait)
            .finish()
    }
}

/// The current leader of an election, as a quorum of its nodes shows it
/// ([`Election::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader published ([`Election::campaign`], [`Leadership::proclaim`]).
    pub value: String,
    /// The leader's term: its fencing token, higher for every new leader.
    pub term: u64,
    /// When it was elected, by its own clock.
    pub since: Option<SystemTime>,
    /// How long a quorum keeps its leadership at least, as they answered (its watchdog
    /// renews it).
    pub ttl: Duration,
}

impl Election {
    pub(crate) fn new(state: Arc<ClientState>, name: &[u8]) -> Election {
        Election {
            state,
            name: name.to_vec(),
            lease: None,
            wait: None,
        }
    }

    /// The leader's lease, which its watchdog renews every third of it: how long the
    /// election stays without a leader after a leader dies without resigning. Defaults to
    /// the client's [`watchdog_lease`](crate::Builder::watchdog_lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long [`campaign`](Self::campaign) waits to be elected before it gives up with
    /// [`Error::WaitTimeout`]. Defaults to none: it waits until elected.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Campaigns with `value` (what others read as the leader's value: an address, a host
    /// name; public, never a secret; 1 to [`MAX_LEADER_VALUE_LEN`] bytes without control
    /// characters) and waits until elected. The [`Leadership`] has the lock's semantics (a
    /// watchdog, a loss signal) and a term: higher than every earlier leader's, for the
    /// leader's writes to carry as a fencing token. Its value and term are published on a
    /// quorum before this returns.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `value`; [`Error::InvalidKey`] for the name; as
    /// [`QuorumLock::acquire`](crate::QuorumLock::acquire) (with [`wait`](Self::wait),
    /// [`Error::WaitTimeout`]); the errors of publishing the value: the key is then released.
    ///
    /// # Cancel safety
    /// As an acquire: a dropped campaign leaves nothing held.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let value = value.into();
        check_public_text("value", &value, MAX_LEADER_VALUE_LEN)?;
        let guard = loop {
            let mut request = LockRequest::new(&self.state, &self.name).fencing(true);
            if let Some(lease) = self.lease {
                request = request.watchdog(lease);
            }
            match request
                .wait(self.wait.unwrap_or(CAMPAIGN_ROUND))
                .acquire()
                .await
            {
                Ok(guard) => break guard,
                Err(Error::WaitTimeout { .. }) if self.wait.is_none() => continue,
                Err(e) => return Err(e),
            }
        };
        let Some(term) = guard.fencing_token() else {
            unreachable!("an election's key is taken with a fencing token");
        };
        let mut leadership = Leadership {
            guard,
            term,
            value: String::new(),
            since: SystemTime::now(),
        };
        leadership.publish(value).await?;
        // Counted as a leadership until its lease ends (resigned, dropped or lost).
        leadership.guard.lease().leads(term);
        Ok(leadership)
    }

    /// Campaigns with `value`, runs `work` as leader, and resigns when it ends; `work` is
    /// dropped (cancelled) the moment leadership is lost, as in
    /// [`LockRequest::run`](crate::LockRequest::run).
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and resigns in the background.
    pub async fn run<F, Fut, T>(&self, value: impl Into<String>, work: F) -> Result<Scoped<T>>
    where
        F: FnOnce(LostSignal, u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let leadership = self.campaign(value).await?;
        let signal = leadership.lost_signal();
        let work = work(signal.clone(), leadership.term());
        let outcome = tokio::select! {
            biased;
            () = signal.wait() => Scoped::Lost,
            value = work => Scoped::Completed(value),
        };
        if let Err(e) = leadership.resign().await {
            tracing::warn!(error = %e, "resigning after the leader's work was not confirmed");
        }
        Ok(outcome)
    }

    /// The current leader, as a quorum of nodes shows it: its value, term and since-when;
    /// `None` while nobody leads (also while a winner has not yet published its value).
    /// Returns as soon as a quorum answered alike.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for the name; [`Error::Unreachable`] when fewer than a quorum of
    /// nodes answered.
    ///
    /// # Cancel safety
    /// Reads only.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let key = crate::take::plan::lock_key(&self.state, &self.name)?;
        let state = &self.state;
        let Some(holding) = holder_of(&state.nodes, state.config.required, &key).await? else {
            return Ok(None);
        };
        let record = match (holding.kind, holding.record) {
            (HeldAs::Mutex, Some(record)) => record,
            _ => return Ok(None),
        };
        let (Some(value), Some(term)) = (record.value, record.term) else {
            return Ok(None);
        };
        Ok(Some(Leader {
            value,
            term,
            since: record
                .since_ms
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            ttl: holding.ttl,
        }))
    }

    /// Watches the leader: [`Observer::next`] returns the current leader first, then each
    /// change (a new leader or term, a new value, nobody). A release or a new leader's
    /// value is announced on the nodes, so an observer learns of it within a round trip of
    /// the announcement; a leader that lapsed without a word (its process died) is seen at
    /// the next read, every [`Observer::every`] (1 s by default).
    pub fn observe(&self) -> Observer {
        Observer::new(self.clone())
    }
}

/// Leading an election ([`Election::campaign`]): the election's key held as a lock, with its
/// term. Dropping it resigns in the background.
#[must_use = "dropping a leadership resigns at once"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    term: u64,
    value: String,
    since: SystemTime,
}

impl Leadership {
    /// The term: the fencing token of this leadership, higher than every earlier leader's.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The value published for this leadership.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// When it was elected, by this client's clock.
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// Whether it still leads (checked against its deadline, as
    /// [`LockGuard::is_held`](crate::LockGuard::is_held)).
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// The instant until which it leads unless renewed.
    pub fn deadline(&self) -> Instant {
        self.guard.deadline()
    }

    /// Completes when leadership is lost (never on resign).
    pub async fn lost(&self) {
        self.guard.lost().await
    }

    /// Completes when someone asked the leader to step down
    /// ([`QuorumLock::request_release`](crate::QuorumLock::request_release) on the
    /// election's name); the leader may [`resign`](Self::resign), or not.
    pub async fn release_requested(&self) {
        self.guard.release_requested().await
    }

    /// A signal that fires when leadership is lost, for work that runs elsewhere.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// The lock this leadership holds.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The lock this leadership holds, to keep as a lock: releasing it resigns.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// Publishes `value` as the leader's value, keeping the term: readers see it once a
    /// quorum stored it.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `value`; [`Error::LockLost`] when leadership was
    /// lost; [`Error::NoQuorum`] when too many nodes failed (the value may then show on some
    /// nodes; leadership is kept).
    ///
    /// # Cancel safety
    /// The value may then show on some nodes, or none.
    pub async fn proclaim(&mut self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        check_public_text("value", &value, MAX_LEADER_VALUE_LEN)?;
        self.publish(value).await
    }

    async fn publish(&mut self, value: String) -> Result<()> {
        let term = match crate::failpoints::on(crate::failpoints::FailPoint::LeaderTermOffByOne) {
            true => self.term + 1,
            false => self.term,
        };
        let (term, since) = (term.to_string(), unix_ms(self.since));
        let fields = [
            ("value", value.as_str()),
            ("term", term.as_str()),
            ("since", since.as_str()),
        ];
        self.guard.lease().publish(&fields, false).await?;
        self.value = value;
        Ok(())
    }

    /// Resigns: releases the election's key, announcing it so that the next leader is
    /// elected at once.
    ///
    /// # Errors
    /// As [`LockGuard::release`](crate::LockGuard::release).
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }
}

fn unix_ms(at: SystemTime) -> String {
    match at.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis().to_string(),
        Err(_) => unix_ms_now(),
    }
}
