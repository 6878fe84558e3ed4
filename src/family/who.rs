//! Who holds a key (docs/DESIGN.md, "Who holds a lock"): the holder record a holder publishes
//! beside its entry (a label, since when, an election's value and term), and the read of
//! what one node knows of a key's holder. The record is a hash at
//! [`names::holder_record`](crate::names::holder_record), written only where the entry is the
//! publishing holder's (`lua/publish.lua`), kept as long as the entry (the extend script
//! moves both), and shown only while it names the entry's holder (`lua/holder_read.lua`).

use redis::Value;

use super::{rw, script};
use crate::rules::key::{kept, Key, HOLDER_NOTICES};
use crate::scripts::{Call, LockScript};

pub(crate) static PUBLISH: LockScript = script!("publish": "publish.lua");
static PUBLISH_MEMBER: LockScript = script!(
    "publish-member": "local leases = KEYS[1]\n" + "leases.lua", "publish_member.lua"
);
pub(crate) static HOLDER_READ: LockScript = script!("holder-read": "holder_read.lua");
pub(crate) static BREAK: LockScript = script!("break": "break.lua");
pub(crate) static ASK: LockScript = script!("ask": "ask.lua");

pub(super) static SCRIPTS: &[&LockScript] =
    &[&PUBLISH, &PUBLISH_MEMBER, &HOLDER_READ, &BREAK, &ASK];

/// A request to release `key` (`lua/ask.lua`): each holder told on the holder notices'
/// channel. Answers how many holders it asked on the node.
pub(crate) fn ask_call(key: &Key) -> Call {
    let keys = [key.bytes().to_vec(), rw::readers_key(key)];
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    Call::with_keys(&ASK, &keys, &[HOLDER_NOTICES.as_bytes()])
}

/// The break of `key` (`lua/break.lua`): every holder's entry replaced by a tombstone
/// (`tombstone`, which has a space: no holder value has one) that keeps the key taken until
/// the entry would have expired, and for `delay_ms` at least. Answers how many holders it
/// broke on the node.
pub(crate) fn break_call(key: &Key, tombstone: &str, delay_ms: &str) -> Call {
    let keys = [key.bytes().to_vec(), rw::readers_key(key), record_key(key)];
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let mode: &[u8] = match crate::failpoints::on(crate::failpoints::FailPoint::BreakDeletes) {
        true => b"delete",
        false => b"keep",
    };
    let argv = [
        tombstone.as_bytes(),
        delay_ms.as_bytes(),
        mode,
        HOLDER_NOTICES.as_bytes(),
    ];
    Call::with_keys(&BREAK, &keys, &argv)
}

/// The holder record of `key`.
pub(crate) fn record_key(key: &Key) -> Vec<u8> {
    key.derived(kept::HOLDER)
}

/// The channel on which a new holder record of `key` is announced.
pub(crate) fn record_channel(key: &Key) -> Vec<u8> {
    key.derived(kept::HOLDER_CHANNEL)
}

/// The arguments of the publish scripts: `holder`, `version`, the channel announcing a new
/// record of `key`, then `fields` (name, value).
fn publish_args(key: &Key, holder: &str, version: u64, fields: &[(&str, &str)]) -> Vec<Vec<u8>> {
    let mut argv = vec![
        holder.as_bytes().to_vec(),
        version.to_string().into_bytes(),
        record_channel(key),
    ];
    for (name, value) in fields {
        argv.push(name.as_bytes().to_vec());
        argv.push(value.as_bytes().to_vec());
    }
    argv
}

/// Publishes `fields` (name, value) in the holder record of each of `keys` (an exclusive
/// holder's entries: a mutex's, a fair lock's, a writer's, the keys of a multi-key lock)
/// where `holder` holds every entry, as version `version` (a record of the holder with a
/// version not below it is kept). Answers 1 / 0 ([`read_flag`](super::read_flag)).
pub(crate) fn publish(keys: &[Key], holder: &str, version: u64, fields: &[(&str, &str)]) -> Call {
    let argv = publish_args(&keys[0], holder, version, fields);
    let pairs: Vec<Vec<u8>> = keys
        .iter()
        .flat_map(|k| [k.bytes().to_vec(), record_key(k)])
        .collect();
    Call::with_keys(&PUBLISH, &super::refs(&pairs), &super::refs(&argv))
}

/// Publishes `fields` in `key`'s holder record as the fields of `holder`, a live member of
/// `leases` (a semaphore's permits, a read-write lock's readers), as version `version`.
/// Answers 1 / 0.
pub(crate) fn publish_member(
    key: &Key,
    leases: &[u8],
    holder: &str,
    version: u64,
    fields: &[(&str, &str)],
) -> Call {
    let argv = publish_args(key, holder, version, fields);
    let record = record_key(key);
    Call::with_keys(&PUBLISH_MEMBER, &[leases, &record], &super::refs(&argv))
}

/// The read of what a node knows of `key`'s holder ([`read_view`] reads the answer).
pub(crate) fn holder_read(key: &Key) -> Call {
    let keys = [
        key.bytes().to_vec(),
        record_key(key),
        key.fence_key(),
        rw::readers_key(key),
    ];
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let any: &[&[u8]] = match crate::failpoints::on(crate::failpoints::FailPoint::StaleRecordShown)
    {
        true => &[b"any"],
        false => &[],
    };
    Call::with_keys(&HOLDER_READ, &keys, any)
}

/// The kind of lock that holds a key, as its nodes show it (public as
/// [`quorum_lock::HeldAs`](crate::HeldAs)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeldAs {
    /// A mutex (also a write lock's writer and an election's leader: on a node they look
    /// alike).
    Mutex,
    /// A fair lock.
    Fair,
    /// Permits of a semaphore.
    Semaphore,
    /// Readers of a read-write lock.
    Read,
    /// Broken ([`QuorumLock::break_lock`](crate::QuorumLock::break_lock)): kept from new
    /// holders until the broken holders' entries would have expired (`ttl`); `holders` 0.
    Broken,
}

/// A holder record as a node keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) label: Option<String>,
    /// Unix time in ms.
    pub(crate) since_ms: Option<u64>,
    pub(crate) value: Option<String>,
    pub(crate) term: Option<u64>,
    pub(crate) version: u64,
}

/// What one node knows of a key's holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeView {
    /// `None`: free.
    pub(crate) kind: Option<HeldAs>,
    /// The remaining TTL in ms (negative: none).
    pub(crate) ttl_ms: i64,
    /// Live holders (1 for an exclusive entry).
    pub(crate) holders: u64,
    /// The SHA1 of an exclusive entry's holder value (empty otherwise).
    pub(crate) digest: String,
    pub(crate) fence: Option<u64>,
    /// The holder record, where it names the entry's holder.
    pub(crate) record: Option<Record>,
    /// The records of the live holders that share the key (permits, readers), by digest.
    pub(crate) members: Vec<(String, Record)>,
}

/// Reads a node's answer to [`holder_read`]; `None` when it is not one.
pub(crate) fn read_view(v: &Value) -> Option<NodeView> {
    let Value::Array(items) = v else {
        return None;
    };
    let text = |i: usize| -> Option<String> {
        match items.get(i)? {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
            Value::SimpleString(s) => Some(s.clone()),
            Value::Okay => Some("OK".into()),
            _ => None,
        }
    };
    let int = |i: usize| super::int(items.get(i)?);
    let some = |s: String| (!s.is_empty()).then_some(s);
    let kind = match text(0)?.as_str() {
        "free" => None,
        "mutex" => Some(HeldAs::Mutex),
        "fair" => Some(HeldAs::Fair),
        "semaphore" => Some(HeldAs::Semaphore),
        "read" => Some(HeldAs::Read),
        "broken" => Some(HeldAs::Broken),
        _ => return None,
    };
    let fence = some(text(4)?).map(|f| f.parse().ok()).unwrap_or(Some(0))?;
    let version = some(text(9)?).map(|v| v.parse::<u64>().ok());
    let record = match version {
        None => None,
        Some(None) => return None,
        Some(Some(version)) => Some(Record {
            label: some(text(5)?),
            since_ms: some(text(6)?).and_then(|s| s.parse().ok()),
            value: some(text(7)?),
            term: some(text(8)?).and_then(|t| t.parse().ok()),
            version,
        }),
    };
    Some(NodeView {
        kind,
        ttl_ms: int(1)?,
        holders: u64::try_from(int(2)?).ok()?,
        digest: text(3)?,
        fence: (fence > 0).then_some(fence),
        record,
        members: match items.get(10) {
            None => Vec::new(),
            Some(v) => read_members(v)?,
        },
    })
}

/// The members' records of a node view: {digest, version, label, since} each, flattened.
fn read_members(v: &Value) -> Option<Vec<(String, Record)>> {
    let Value::Array(items) = v else {
        return None;
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        _ => None,
    };
    items
        .chunks(4)
        .map(|c| {
            let [digest, version, label, since] = c else {
                return None;
            };
            let (label, since) = (text(label)?, text(since)?);
            let record = Record {
                label: (!label.is_empty()).then_some(label),
                since_ms: since.parse().ok(),
                value: None,
                term: None,
                version: text(version)?.parse().ok()?,
            };
            Some((text(digest)?, record))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_node_view_is_read_with_and_without_its_record() {
        let with = Value::Array(vec![
            bulk("mutex"),
            Value::Int(900),
            Value::Int(1),
            bulk("ab12"),
            bulk("7"),
            bulk("host-7"),
            bulk("1700000000000"),
            bulk(""),
            bulk(""),
            bulk("1"),
        ]);
        let view = read_view(&with).unwrap();
        assert_eq!(view.kind, Some(HeldAs::Mutex));
        assert_eq!(view.fence, Some(7));
        let record = view.record.unwrap();
        assert_eq!(record.label.as_deref(), Some("host-7"));
        assert_eq!(record.since_ms, Some(1_700_000_000_000));
        assert_eq!(record.value, None);
        let without = Value::Array(vec![
            bulk("free"),
            Value::Int(-2),
            Value::Int(0),
            bulk(""),
            bulk(""),
            bulk(""),
            bulk(""),
            bulk(""),
            bulk(""),
            bulk(""),
        ]);
        let view = read_view(&without).unwrap();
        assert_eq!((view.kind, view.fence, view.record), (None, None, None));
        assert_eq!(read_view(&Value::Int(1)), None);
    }
}
