//! Who holds a key ([`QuorumLock::holder_of`](crate::QuorumLock::holder_of)): each node's view
//! read in one step (`family::who`), combined into what a quorum of nodes shows; and the
//! public label a request may publish beside its entry.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::stream::{FuturesUnordered, StreamExt};

use crate::error::{Error, NodeFailure, Result};
pub use crate::family::who::HeldAs;
use crate::family::who::{holder_read, read_view, NodeView, Record};
use crate::node::Nodes;
use crate::rules::key::Key;
use crate::scripts::{Call, SendBy};

/// The longest label ([`LockRequest::label`](crate::LockRequest::label)), in bytes.
pub const MAX_LABEL_LEN: usize = 256;

/// Who holds a key, as a quorum of its nodes shows it
/// ([`QuorumLock::holder_of`](crate::QuorumLock::holder_of)). A snapshot: the holder may
/// release or lose the key as soon as it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holding {
    /// The kind of lock.
    pub kind: HeldAs,
    /// How many hold it on a quorum at least: 1 for a mutex or a fair lock, the live permits
    /// or readers otherwise.
    pub holders: u64,
    /// The label the holder published ([`LockRequest::label`](crate::LockRequest::label)),
    /// for the kinds with one holder (a mutex, a fair lock, a write lock, each key of a
    /// multi-key lock); `None` for permits and readers, whose labels are in `labels`.
    pub label: Option<String>,
    /// Every holder's label, oldest first: the one holder's (as `label`), or each permit's
    /// or reader's that published one and holds on a quorum of the nodes that show the key.
    pub labels: Vec<Labelled>,
    /// When the holder took the key, by its own clock, where it published a label (or an
    /// election's leader did).
    pub since: Option<SystemTime>,
    /// How long a quorum of nodes keeps the entry at least, as they answered (before a
    /// renewal moves it).
    pub ttl: Duration,
    /// The key's fencing counter, the largest among the nodes that show the holder: the
    /// holder's token when it asked for one, unless a later attempt drew another.
    pub fencing_token: Option<u64>,
    /// An election's leader value and term, from the holder record.
    pub(crate) record: Option<Record>,
}

/// One holder's label ([`Holding::labels`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Labelled {
    /// The label ([`LockRequest::label`](crate::LockRequest::label)).
    pub label: String,
    /// When the holder took the key, by its own clock.
    pub since: Option<SystemTime>,
}

impl Labelled {
    fn of(record: &Record) -> Option<Labelled> {
        Some(Labelled {
            label: record.label.clone()?,
            since: record
                .since_ms
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        })
    }
}

/// Each shared holder's record (permits, readers) that a quorum of `required` among
/// `group` shows (the holder holds there), the newest version of each.
fn member_labels(group: &[&NodeView], required: usize) -> Vec<Labelled> {
    let mut by_digest: std::collections::BTreeMap<&str, Vec<&Record>> = Default::default();
    for view in group {
        for (digest, record) in &view.members {
            by_digest.entry(digest).or_default().push(record);
        }
    }
    let mut labels: Vec<Labelled> = by_digest
        .into_values()
        .filter(|records| records.len() >= required)
        .filter_map(|records| Labelled::of(records.into_iter().max_by_key(|r| r.version)?))
        .collect();
    labels.sort_by_key(|l| l.since);
    labels
}

/// Checks a label or an election's value: 1 to `max` bytes, no control characters, no
/// invisible, line-separating or direction formatting characters (the format characters of
/// Unicode category Cf that hide or reorder text, and U+2028/U+2029). A label is public: it
/// is stored on the nodes and shown by `quorum-lock status`. The error is
/// [`Error::InvalidConfig`] naming `field`.
pub fn check_public_text(field: &'static str, text: &str, max: usize) -> Result<()> {
    let reason = if text.is_empty() {
        "must not be empty".to_string()
    } else if text.len() > max {
        format!("{} bytes, longer than {max}", text.len())
    } else if text.chars().any(char::is_control) {
        "must not hold control characters (newlines, tabs, escapes)".to_string()
    } else if let Some(c) = text.chars().find(|&c| invisible(c)) {
        format!(
            "must not hold invisible, line-separating or direction formatting characters \
             (found U+{:04X})",
            c as u32
        )
    } else {
        return Ok(());
    };
    Err(Error::InvalidConfig { field, reason })
}

/// The characters that hide, split or reorder text when shown: zero-width and joiners,
/// bidirectional marks, overrides and isolates (U+061C too), the byte order mark, the soft
/// hyphen, fillers and invisible letters, Mongolian free variation selectors, interlinear
/// annotations, musical formatting, tags, and the line and paragraph separators.
pub(crate) fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}'
        | '\u{1D173}'..='\u{1D17A}' | '\u{E0000}'..='\u{E007F}')
}

/// Now, as Unix time in ms (the "since" of a holder record).
pub(crate) fn unix_ms_now() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    now.as_millis().to_string()
}

/// The calls on who holds a key: read it, break it, ask it to release.
impl crate::QuorumLock {
    /// Who holds `key`, as a quorum of nodes shows it: the kind of lock, how many hold it,
    /// the label and since-when its holder published
    /// ([`LockRequest::label`](crate::LockRequest::label)), how long a quorum keeps it and
    /// the fencing counter. `None` when no holder is shown by a quorum (free, or an entry
    /// on too few nodes). Reads every node in one step each and returns as soon as the answer
    /// is decided: a frozen node costs nothing once a quorum has answered alike. Never
    /// shows a holder value: the record holds its SHA1 only.
    ///
    /// # Errors
    /// [`Error::InvalidKey`](crate::Error::InvalidKey);
    /// [`Error::Unreachable`](crate::Error::Unreachable) when fewer than a quorum answered.
    ///
    /// # Cancel safety
    /// Reads only: dropping the future changes nothing on the nodes.
    pub async fn holder_of(&self, key: impl AsRef<[u8]>) -> Result<Option<crate::Holding>> {
        let key = crate::take::plan::lock_key(&self.state, key.as_ref())?;
        holder_of(&self.state.nodes, self.state.config.required, &key).await
    }

    /// Breaks `key` (administration: a stuck lock, a holder that must stop): whatever holds
    /// it, of any kind, loses it on every node. Its entries are replaced by tombstones that
    /// keep the key taken until they would have expired (and for this client's
    /// [`lock_delay`](crate::Builder::lock_delay) at least), so that no one else can take
    /// it while a broken holder may still believe it holds; a broken holder's next renewal
    /// finds its lock lost (its loss signal fires), and a `quorum-lock run` holding it stops
    /// its command then. Returns how many holders were broken (the largest count among the
    /// nodes; 0 when the key was free). An election's leader is deposed the same way.
    /// Holders learn of it within a round trip through their notices
    /// (`quorum-lock:holder-notices`; not with [`pubsub(false)`](crate::Builder::pubsub) on
    /// the holder's client), and at their next renewal at the latest. A break announces
    /// every holder before it writes anything: one refused (an ACL rule without the channel)
    /// fails and changes nothing on that node.
    ///
    /// # Errors
    /// [`Error::InvalidKey`](crate::Error::InvalidKey);
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) (`Op::Break`) when fewer than a quorum of
    /// nodes answered (the break may have run on those that did).
    ///
    /// # Cancel safety
    /// The break may then have run on some nodes: call it again.
    pub async fn break_lock(&self, key: impl AsRef<[u8]>) -> Result<u64> {
        let key = crate::take::plan::lock_key(&self.state, key.as_ref())?;
        let config = &self.state.config;
        break_lock(&self.state.nodes, config.required, config.lock_delay, &key).await
    }

    /// Asks whoever holds `key` to release it (cooperative: Curator's revocable locks). Each
    /// holder's guard's [`release_requested`](crate::LockGuard::release_requested) signal
    /// fires within a round trip when its client is connected (and listens: not with
    /// [`pubsub(false)`](crate::Builder::pubsub)); the holder may honour it, or not: the lock
    /// is not touched. Returns how many holders were asked (the largest count
    /// among the nodes; 0 when the key was free).
    ///
    /// # Errors
    /// [`Error::InvalidKey`](crate::Error::InvalidKey);
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) (`Op::AskRelease`) when fewer than a quorum
    /// of nodes answered.
    ///
    /// # Cancel safety
    /// The request may then have reached the holders, or not.
    pub async fn request_release(&self, key: impl AsRef<[u8]>) -> Result<u64> {
        let key = crate::take::plan::lock_key(&self.state, key.as_ref())?;
        request_release(&self.state.nodes, self.state.config.required, &key).await
    }
}

/// Reads every node's view of `key` and combines what a quorum of `required` shows; returns
/// as soon as that is decided (a frozen node costs nothing once a quorum has answered alike).
/// Fewer than `required` nodes answering is [`Error::Unreachable`].
pub(crate) async fn holder_of(
    nodes: &Nodes,
    required: usize,
    key: &Key,
) -> Result<Option<Holding>> {
    let call = std::sync::Arc::new(holder_read(key));
    let mut pending: FuturesUnordered<_> = (0..nodes.len())
        .map(|i| {
            let (nodes, call) = (nodes.clone(), call.clone());
            async move { (i, read_one(&nodes, &call, i).await) }
        })
        .collect();
    let mut views = Vec::with_capacity(nodes.len());
    let mut failures = Vec::new();
    while let Some((_, answer)) = pending.next().await {
        match answer {
            Ok(view) => views.push(view),
            Err(failure) => failures.push(failure),
        }
        if let Some(decided) = decide(&views, pending.len(), required) {
            return Ok(decided);
        }
    }
    if views.len() < required {
        failures.sort_by_key(|f| f.to_string());
        return Err(Error::Unreachable {
            reachable: views.len(),
            nodes: nodes.len(),
            required,
            failures,
        });
    }
    Ok(combine(&views, required))
}

async fn read_one(
    nodes: &Nodes,
    call: &Call,
    i: usize,
) -> std::result::Result<NodeView, NodeFailure> {
    let node = &nodes[i];
    let value = node.run_within_timeout(call, SendBy::Sha, i).await?;
    read_view(&value).ok_or_else(|| {
        NodeFailure::new(
            node.name(),
            crate::error::FailureKind::Protocol,
            "unexpected answer to the holder read",
        )
    })
}

/// Asks the holders of `key` to release
/// ([`QuorumLock::request_release`](crate::QuorumLock::request_release)): how many holders a
/// node asked, at most.
pub(crate) async fn request_release(nodes: &Nodes, required: usize, key: &Key) -> Result<u64> {
    let call = crate::family::who::ask_call(key);
    let answers = crate::fanout::broadcast(nodes, 0..nodes.len(), call, SendBy::Sha).await;
    counted(answers, required, key, crate::error::Op::AskRelease)
}

/// The largest count the nodes answered, once a quorum answered.
fn counted(
    answers: Vec<std::result::Result<redis::Value, NodeFailure>>,
    required: usize,
    key: &Key,
    op: crate::error::Op,
) -> Result<u64> {
    let mut failures = Vec::new();
    let (mut confirmed, mut most) = (0, 0);
    for answer in answers {
        match answer.map(|v| crate::family::int(&v)) {
            Ok(Some(n)) => {
                confirmed += 1;
                most = most.max(n.max(0) as u64);
            }
            Ok(None) => {}
            Err(failure) => failures.push(failure),
        }
    }
    if confirmed < required {
        return Err(Error::NoQuorum {
            op,
            key: key.to_string(),
            confirmed,
            required,
            refused: 0,
            failures,
        });
    }
    Ok(most)
}

/// Breaks `key` on every node ([`QuorumLock::break_lock`](crate::QuorumLock::break_lock)):
/// how many holders a node broke, at most; waits for every node (each bounded by its
/// timeout) so that the count is exact.
pub(crate) async fn break_lock(
    nodes: &Nodes,
    required: usize,
    delay: Duration,
    key: &Key,
) -> Result<u64> {
    let tombstone = format!("broken {}", uuid::Uuid::new_v4().simple());
    let call = crate::family::who::break_call(key, &tombstone, &delay.as_millis().to_string());
    let answers = crate::fanout::broadcast(nodes, 0..nodes.len(), call, SendBy::Sha).await;
    let broken = counted(answers, required, key, crate::error::Op::Break)?;
    tracing::info!(key = %key, broken, "lock broken");
    Ok(broken)
}

/// What one holder (or one kind of shared holding) is shown by: its nodes' views.
fn groups(views: &[NodeView]) -> Vec<Vec<&NodeView>> {
    let mut groups: Vec<Vec<&NodeView>> = Vec::new();
    for view in views.iter().filter(|v| v.kind.is_some()) {
        let same = |g: &Vec<&NodeView>| match view.kind {
            Some(HeldAs::Mutex | HeldAs::Fair) => g[0].digest == view.digest,
            kind => g[0].kind == kind,
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(group) => group.push(view),
            None => groups.push(vec![view]),
        }
    }
    groups
}

/// Decided once a holder is shown by a quorum, or none can be with the answers still to come.
fn decide(views: &[NodeView], pending: usize, required: usize) -> Option<Option<Holding>> {
    if let Some(found) = combine(views, required) {
        return Some(Some(found));
    }
    let best = groups(views).iter().map(Vec::len).max().unwrap_or(0);
    (views.len() >= required && best + pending < required).then_some(None)
}

/// The holder a quorum of `required` shows among `views`, if any.
fn combine(views: &[NodeView], required: usize) -> Option<Holding> {
    let groups = groups(views);
    let group = groups.into_iter().find(|g| g.len() >= required)?;
    // The value a quorum shows at least: the `required`-th largest.
    let at_least = |mut values: Vec<i64>| {
        values.sort_unstable_by(|a, b| b.cmp(a));
        values[required - 1]
    };
    let ttl = at_least(group.iter().map(|v| v.ttl_ms).collect());
    let holders = at_least(group.iter().map(|v| v.holders as i64).collect());
    let fair = group
        .iter()
        .filter(|v| v.kind == Some(HeldAs::Fair))
        .count();
    let kind = match group[0].kind {
        Some(HeldAs::Mutex | HeldAs::Fair) if fair * 2 > group.len() => HeldAs::Fair,
        Some(kind @ (HeldAs::Semaphore | HeldAs::Read | HeldAs::Broken)) => kind,
        _ => HeldAs::Mutex,
    };
    let record = group
        .iter()
        .filter_map(|v| v.record.as_ref())
        .max_by_key(|r| r.version)
        .cloned();
    let labels = match kind {
        HeldAs::Semaphore | HeldAs::Read => member_labels(&group, required),
        _ => record.iter().filter_map(Labelled::of).collect(),
    };
    Some(Holding {
        kind,
        holders: holders.max(0) as u64,
        labels,
        label: record.as_ref().and_then(|r| r.label.clone()),
        since: record
            .as_ref()
            .and_then(|r| r.since_ms)
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        ttl: Duration::from_millis(ttl.max(0) as u64),
        fencing_token: group.iter().filter_map(|v| v.fence).max(),
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(digest: &str, ttl_ms: i64, record: Option<u64>) -> NodeView {
        NodeView {
            kind: Some(HeldAs::Mutex),
            ttl_ms,
            holders: 1,
            digest: digest.into(),
            fence: Some(3),
            record: record.map(|version| Record {
                label: Some(format!("v{version}")),
                since_ms: Some(1_000),
                value: None,
                term: None,
                version,
            }),
            members: Vec::new(),
        }
    }

    fn free() -> NodeView {
        NodeView {
            kind: None,
            ttl_ms: -2,
            holders: 0,
            digest: String::new(),
            fence: None,
            record: None,
            members: Vec::new(),
        }
    }

    #[test]
    fn a_holder_counts_only_where_a_quorum_shows_the_same_entry() {
        let views = [
            entry("a", 900, Some(1)),
            entry("a", 500, Some(2)),
            entry("b", 990, None),
        ];
        assert_eq!(combine(&views, 3), None);
        let held = combine(&views, 2).unwrap();
        assert_eq!(held.ttl, Duration::from_millis(500));
        assert_eq!(held.label.as_deref(), Some("v2"), "the newest record wins");
        assert_eq!(held.kind, HeldAs::Mutex);
    }

    #[test]
    fn a_shared_holders_label_shows_where_a_quorum_shows_it() {
        let member = |digest: &str, version: u64| {
            let record = Record {
                label: Some(format!("{digest}{version}")),
                since_ms: Some(version),
                value: None,
                term: None,
                version,
            };
            (digest.to_string(), record)
        };
        let permits = |members: Vec<(String, Record)>| NodeView {
            kind: Some(HeldAs::Semaphore),
            ttl_ms: 900,
            holders: 2,
            digest: String::new(),
            fence: None,
            record: None,
            members,
        };
        let views = [
            permits(vec![member("a", 1), member("b", 1)]),
            permits(vec![member("a", 2)]),
            permits(vec![member("b", 1)]),
        ];
        let held = combine(&views, 3).unwrap();
        assert_eq!((held.kind, held.label), (HeldAs::Semaphore, None));
        assert!(held.labels.is_empty(), "no label on all three nodes");
        let held = combine(&views, 2).unwrap();
        let labels: Vec<&str> = held.labels.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["b1", "a2"], "the newest of each, oldest first");
    }

    #[test]
    fn the_decision_waits_only_while_a_quorum_could_still_form() {
        let views = [entry("a", 900, None), free()];
        assert_eq!(
            decide(&views, 1, 2),
            None,
            "the third node may still show a"
        );
        assert_eq!(decide(&views, 0, 2), Some(None));
        let views = [free(), free()];
        assert_eq!(
            decide(&views, 1, 2),
            Some(None),
            "no holder can reach a quorum"
        );
        assert!(
            decide(&[entry("a", 9, None), entry("a", 9, None)], 1, 2).is_some_and(|h| h.is_some())
        );
    }

    #[test]
    fn public_text_is_bounded_and_printable() {
        assert!(check_public_text("label", "host-7/job-42", 256).is_ok());
        for bad in [
            "",
            "a\nb",
            &"x".repeat(257),
            "evil\u{202E}txt",
            "a\u{061C}b",
            "a\u{2028}b",
            "soft\u{00AD}hyphen",
            "tag\u{E0041}",
            "filler\u{3164}",
        ] {
            let e = check_public_text("label", bad, 256).unwrap_err();
            assert!(
                matches!(e, Error::InvalidConfig { field: "label", .. }),
                "{e}"
            );
        }
    }
}
