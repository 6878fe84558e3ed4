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

/// The hash slots of a Redis or Valkey Cluster.
pub(crate) const SLOTS: u16 = 16384;

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
            channel: derived(kept::RELEASED, bytes).into(),
        })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The pub/sub channel on which releases of this key are announced.
    pub(crate) fn release_channel(&self) -> &[u8] {
        &self.channel
    }

    /// The key of this key's fencing counter (every kind of lock on the key shares it).
    pub(crate) fn fence_key(&self) -> Vec<u8> {
        self.derived(kept::FENCE)
    }

    /// The name of a key the library keeps for this key, in its namespace:
    /// `quorum-lock:<what>:<key>` (each kind of lock names its own in `family`).
    pub(crate) fn derived(&self, what: &str) -> Vec<u8> {
        derived(what, &self.bytes)
    }
}

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

/// The `<what>` of each key the library keeps for a lock key, `quorum-lock:<what>:<key>`
/// (written once: the lock kinds in `family` and the public [`names`](crate::names) use
/// these).
pub(crate) mod kept {
    /// The fencing counter.
    pub(crate) const FENCE: &str = "fence";
    /// The release channel.
    pub(crate) const RELEASED: &str = "released";
    /// A read-write lock's readers.
    pub(crate) const READERS: &str = "readers";
    /// A read-write lock's pending-writer mark.
    pub(crate) const WRITER_MARK: &str = "writer-waiting";
    /// A fair lock's line.
    pub(crate) const LINE: &str = "queue";
    /// A fair lock's queue leases.
    pub(crate) const LINE_LEASES: &str = "queue-expiry";
    /// What a fair lock's release needs to hand the key on.
    pub(crate) const LINE_ENTRIES: &str = "queue-holder";
    /// A fair lock's ticket counter.
    pub(crate) const TICKETS: &str = "ticket";
    /// What the holder published about itself (a label, since when, an election's value).
    pub(crate) const HOLDER: &str = "holder";
    /// The channel on which a new holder record is announced.
    pub(crate) const HOLDER_CHANNEL: &str = "holder-published";
}

/// The channel of notices to holders (a break, a request to release), shared by every key.
pub(crate) const HOLDER_NOTICES: &str = "quorum-lock:holder-notices";

/// `quorum-lock:<what>:{<hashed>}:<key>`: the name of a key the library keeps for `key`,
/// where `<hashed>` is the part of `key` a cluster hashes ([`hashed`]): in braces, it is the
/// name's hash tag, so that on a cluster node the name is in the key's own slot and one script
/// can touch both (docs/DESIGN.md, "Keys on the nodes").
pub(crate) fn derived(what: &str, key: &[u8]) -> Vec<u8> {
    let tag = hashed(key);
    let mut name =
        Vec::with_capacity(RESERVED_PREFIX.len() + what.len() + tag.len() + key.len() + 4);
    name.extend_from_slice(RESERVED_PREFIX.as_bytes());
    name.extend_from_slice(what.as_bytes());
    name.extend_from_slice(b":{");
    name.extend_from_slice(tag);
    name.extend_from_slice(b"}:");
    name.extend_from_slice(key);
    name
}

/// The part of `key` a cluster hashes to find its slot: the content of its hash tag (the
/// first `{` and the first `}` after it, when something is between them), else the whole
/// key.
pub(crate) fn hashed(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// Whether the names [`derived`] from `key` hash to `key`'s own slot: not when the part of
/// `key` a cluster hashes holds a `}` (a key without a hash tag that has one), which cannot
/// stand in a hash tag.
pub(crate) fn taggable(key: &[u8]) -> bool {
    !hashed(key).contains(&b'}')
}

/// The cluster hash slot of `key`: CRC16 (XMODEM) of its hashed part, modulo [`SLOTS`].
pub(crate) fn slot(key: &[u8]) -> u16 {
    let crc = hashed(key).iter().fold(0u16, |mut crc, &b| {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
        crc
    });
    crc % SLOTS
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
        assert_eq!(
            key.release_channel(),
            b"quorum-lock:released:{stock:1}:stock:1"
        );
        assert_eq!(key.fence_key(), b"quorum-lock:fence:{stock:1}:stock:1");
        assert_eq!(
            key.derived("readers"),
            b"quorum-lock:readers:{stock:1}:stock:1"
        );
        assert_eq!(key.to_string(), "stock:1");
        // The channel is made without `derived`, once per key: the same name.
        assert_eq!(key.release_channel(), key.derived(kept::RELEASED));
        // A key with a hash tag: its names carry the tag only.
        let tagged = Key::new(b"order:{42}:items").unwrap();
        assert_eq!(
            tagged.fence_key(),
            b"quorum-lock:fence:{42}:order:{42}:items"
        );
    }

    #[test]
    fn slots_are_the_clusters() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"123456789"), 0x31c3 % SLOTS);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(hashed(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hashed(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hashed(b"foo{bar}{zap}"), b"bar");
        // Every name kept for a key is in the key's slot, tagged or not.
        for key in [&b"stock:1"[..], b"a{b}c", b"{x", b"x{", b"y{z}{w}"] {
            for what in [kept::FENCE, kept::READERS, kept::LINE, kept::RELEASED] {
                assert_eq!(slot(&derived(what, key)), slot(key), "{key:?} {what}");
            }
        }
        assert!(!taggable(b"a}b"));
        assert!(!taggable(b"{}}"));
        assert!(taggable(b"a{b}c}"));
    }
}
