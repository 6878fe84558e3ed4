//! Lock keys and the library's namespace on the nodes: the key check, and the names derived
//! from a key (docs/DESIGN.md, "Keys on the nodes").

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The longest key accepted (64 KiB). Redis allows more, but a lock key is a name, and it is
/// copied into every request and release channel.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// The prefix of every key and channel the library itself names on the nodes (fencing
/// counters, release channels). Lock keys may not start with it ([`Error::InvalidKey`]), so a
/// user's lock can never be mistaken for one of the library's own keys, nor the other way
/// round.
pub const RESERVED_PREFIX: &str = "quorum-lock:";

const FENCE_PREFIX: &[u8] = b"quorum-lock:fence:";
const RELEASED_PREFIX: &[u8] = b"quorum-lock:released:";
const READERS_PREFIX: &[u8] = b"quorum-lock:readers:";
const WRITER_WAITING_PREFIX: &[u8] = b"quorum-lock:writer-waiting:";
const TICKET_PREFIX: &[u8] = b"quorum-lock:ticket:";
const QUEUE_PREFIX: &[u8] = b"quorum-lock:queue:";
const QUEUE_EXPIRY_PREFIX: &[u8] = b"quorum-lock:queue-expiry:";
const QUEUE_HOLDER_PREFIX: &[u8] = b"quorum-lock:queue-holder:";

/// A checked lock key: its bytes and its release channel, made once and shared by the
/// acquisition's lease, requests and logs. Shown as lossy UTF-8.
#[derive(Clone)]
pub(crate) struct Key {
    bytes: Arc<[u8]>,
    channel: Arc<[u8]>,
}

impl Key {
    /// Checks `bytes` as a lock key: 1 byte to [`MAX_KEY_LEN`], outside the reserved
    /// namespace.
    pub(crate) fn new(bytes: &[u8]) -> Result<Key> {
        let invalid = |reason: String| Err(Error::InvalidKey { reason });
        if bytes.is_empty() {
            return invalid("must not be empty".into());
        }
        if bytes.len() > MAX_KEY_LEN {
            return invalid(format!("{} bytes, longer than {MAX_KEY_LEN}", bytes.len()));
        }
        if bytes.starts_with(RESERVED_PREFIX.as_bytes()) {
            return invalid(format!(
                "keys starting with {RESERVED_PREFIX:?} are reserved for the library's own keys \
                 (fencing counters, release channels)"
            ));
        }
        Ok(Key {
            bytes: bytes.into(),
            // Collected straight into its `Arc` (one allocation; a `Vec` first would be two):
            // a key is made for every request.
            channel: RELEASED_PREFIX.iter().chain(bytes).copied().collect(),
        })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The pub/sub channel on which releases of this key are announced.
    pub(crate) fn release_channel(&self) -> &[u8] {
        &self.channel
    }

    /// The key of this key's fencing counter.
    pub(crate) fn fence_key(&self) -> Vec<u8> {
        prefixed(FENCE_PREFIX, &self.bytes)
    }

    /// The sorted set of a read-write lock's readers on this key.
    pub(crate) fn readers_key(&self) -> Vec<u8> {
        prefixed(READERS_PREFIX, &self.bytes)
    }

    /// The pending-writer mark of a read-write lock on this key.
    pub(crate) fn writer_waiting_key(&self) -> Vec<u8> {
        prefixed(WRITER_WAITING_PREFIX, &self.bytes)
    }

    /// The ticket counter of a fair lock on this key.
    pub(crate) fn ticket_key(&self) -> Vec<u8> {
        prefixed(TICKET_PREFIX, &self.bytes)
    }

    /// A fair lock's line on this key: waiter ids by ticket, their queue leases' expiries,
    /// and what a release needs to hand the lock to each (see `scripts::FAIR_ACQUIRE`).
    pub(crate) fn queue_keys(&self) -> [Vec<u8>; 3] {
        [
            prefixed(QUEUE_PREFIX, &self.bytes),
            prefixed(QUEUE_EXPIRY_PREFIX, &self.bytes),
            prefixed(QUEUE_HOLDER_PREFIX, &self.bytes),
        ]
    }
}

// Equality and hashing are the bytes' alone (the channel follows from them), so that a map
// keyed by `Key` can be looked up with the bytes.
impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes.hash(state);
    }
}

impl std::borrow::Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.bytes))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.bytes))
    }
}

fn prefixed(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(prefix.len() + key.len());
    name.extend_from_slice(prefix);
    name.extend_from_slice(key);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_and_named_in_the_reserved_namespace() {
        assert!(Key::new(b"").is_err());
        assert!(Key::new(&vec![b'k'; MAX_KEY_LEN + 1]).is_err());
        assert!(Key::new(b"quorum-lock:fence:x").is_err());
        let key = Key::new(b"stock:1").unwrap();
        assert_eq!(key.release_channel(), b"quorum-lock:released:stock:1");
        assert_eq!(key.fence_key(), b"quorum-lock:fence:stock:1");
        assert_eq!(key.readers_key(), b"quorum-lock:readers:stock:1");
        assert_eq!(
            key.writer_waiting_key(),
            b"quorum-lock:writer-waiting:stock:1"
        );
        assert_eq!(key.ticket_key(), b"quorum-lock:ticket:stock:1");
        assert_eq!(
            key.queue_keys(),
            [
                b"quorum-lock:queue:stock:1".to_vec(),
                b"quorum-lock:queue-expiry:stock:1".to_vec(),
                b"quorum-lock:queue-holder:stock:1".to_vec()
            ]
        );
        assert_eq!(key.to_string(), "stock:1");
    }
}
