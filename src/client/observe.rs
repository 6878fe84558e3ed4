//! Watching an election's leader ([`Election::observe`]): reads of the leader, made again
//! when a node announces a release of the election's key or a new leader's record, and
//! otherwise every [`Observer::every`].

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::client::election::{Election, Leader};
use crate::error::Result;
use crate::family::who::record_channel;
use crate::node::Nodes;

/// Pause before a listener connects again after its connection failed or dropped.
const RECONNECT: Duration = Duration::from_millis(250);

/// Watches an election's leader ([`Election::observe`]). Listens on every node (one pub/sub
/// connection each, made at the first [`next`](Self::next)) until dropped.
pub struct Observer {
    election: Election,
    every: Duration,
    /// The leader (term and value) last returned; `None` before the first.
    last: Option<Option<(u64, String)>>,
    woken: Arc<Notify>,
    listeners: Vec<JoinHandle<()>>,
    /// After a read that failed: no new read before then (a caller that loops on errors
    /// does not spin).
    retry_at: Option<tokio::time::Instant>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.election)
            .field("every", &self.every)
            .field("listening", &!self.listeners.is_empty())
            .finish()
    }
}

impl Observer {
    pub(crate) fn new(election: Election) -> Observer {
        Observer {
            election,
            every: Duration::from_secs(1),
            last: None,
            woken: Arc::new(Notify::new()),
            listeners: Vec::new(),
            retry_at: None,
        }
    }

    /// How often the leader is read when no node announced anything: the longest an
    /// observer takes to see a leader that lapsed without a word, or a change announced
    /// only on nodes it cannot hear. Defaults to 1 s; at least 10 ms.
    pub fn every(mut self, period: Duration) -> Self {
        self.every = period.max(Duration::from_millis(10));
        self
    }

    /// The leader (`None`: nobody leads): at the first call the current one, then the next
    /// change of leader, term or value.
    ///
    /// # Errors
    /// As [`Election::leader`]; the observer stays usable: the next call reads again, once
    /// [`every`](Self::every) (at most 1 s) has passed since the failed read.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call loses nothing the next one would return.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        self.listen();
        if let Some(at) = self.retry_at {
            tokio::time::sleep_until(at).await;
            self.retry_at = None;
        }
        loop {
            // Armed before the read: an announcement during it wakes the wait below.
            let woken = self.woken.clone();
            let notified = woken.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let leader = match self.election.leader().await {
                Ok(leader) => leader,
                Err(e) => {
                    let pause = self.every.min(std::time::Duration::from_secs(1));
                    self.retry_at = Some(tokio::time::Instant::now() + pause);
                    return Err(e);
                }
            };
            let seen = leader.as_ref().map(|l| (l.term, l.value.clone()));
            if self.last.as_ref() != Some(&seen) {
                if self.last.is_some() {
                    crate::telemetry::leader_changed();
                }
                self.last = Some(seen);
                return Ok(leader);
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(self.every) => {}
            }
        }
    }

    /// Starts a listener per node, once.
    fn listen(&mut self) {
        if !self.listeners.is_empty() {
            return;
        }
        let Ok(key) = crate::rules::key::Key::new(&self.election.name) else {
            return;
        };
        let channels = vec![key.release_channel().to_vec(), record_channel(&key)];
        let nodes = self.election.state.nodes.clone();
        self.listeners = (0..nodes.len())
            .map(|i| {
                tokio::spawn(listener(
                    nodes.clone(),
                    i,
                    channels.clone(),
                    self.woken.clone(),
                ))
            })
            .collect();
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for listener in &self.listeners {
            listener.abort();
        }
    }
}

/// Node `i`'s listener: wakes the observer at every message on `channels`, and once each
/// time it (re)subscribed (an announcement may have gone unheard meanwhile).
async fn listener(nodes: Nodes, i: usize, channels: Vec<Vec<u8>>, woken: Arc<Notify>) {
    loop {
        if let (_, Ok(mut pubsub)) = nodes[i].pubsub(&[]).await {
            if pubsub.subscribe(&channels).await.is_ok() {
                woken.notify_one();
                let mut messages = pubsub.on_message();
                while messages.next().await.is_some() {
                    woken.notify_one();
                }
            }
        }
        tokio::time::sleep(RECONNECT).await;
    }
}
