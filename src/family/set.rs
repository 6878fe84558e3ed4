//! A multi-key lock: several keys taken as one, all or none, by one script per node for the
//! whole set (docs/DESIGN.md, "Lock family"), so that two sets that overlap are decided by
//! each node at once and cannot deadlock.

use std::fmt;
use std::sync::Arc;

use redis::Value;

use super::{read_counter, read_flag, refs, script, Kind, Notice, Reader, Shape, Standing};
use crate::error::{Error, Result};
use crate::rules::key::Key;
use crate::scripts::{Call, LockScript};

/// The most keys a multi-key lock may take at once (every key travels in each request).
#[allow(unreachable_pub)] // re-exported at the crate root
pub const MAX_SET_KEYS: usize = 64;

/// A set of keys (sorted, distinct, at least two).
#[derive(Clone)]
pub(crate) struct Set {
    pub(crate) keys: Arc<[Key]>,
}

static ACQUIRE: LockScript = script!("acquire": "set_acquire.lua");
static EXTEND: LockScript = script!("extend": "set_extend.lua");
static RELEASE: LockScript = script!("release": "notice.lua", "set_release.lua");
static REPAIR: LockScript = script!("repair": "set_repair.lua");
static FENCE_INCR: LockScript = script!("fence-incr": "set_fence_incr.lua");
static FENCE_MAX: LockScript = script!("fence-max": "set_fence_max.lua");

pub(super) static SCRIPTS: &[&LockScript] = &[
    &ACQUIRE,
    &EXTEND,
    &RELEASE,
    &REPAIR,
    &FENCE_INCR,
    &FENCE_MAX,
];

impl Set {
    /// A set of keys taken as one: checked one by one ([`Key::new`]), deduplicated and
    /// sorted (the order a caller names them in does not matter); a set of one key is the
    /// mutex itself.
    pub(crate) fn shape(keys: &[Vec<u8>]) -> Result<Shape> {
        let invalid = |reason: String| Err(Error::InvalidKey { reason });
        if keys.is_empty() {
            return invalid("a multi-key lock needs at least one key".into());
        }
        let mut checked = keys
            .iter()
            .map(|k| Key::new(k))
            .collect::<Result<Vec<Key>>>()?;
        checked.sort_by(|a, b| a.bytes().cmp(b.bytes()));
        checked.dedup();
        if checked.len() > MAX_SET_KEYS {
            return invalid(format!(
                "{} distinct keys, more than the {MAX_SET_KEYS} a multi-key lock may take",
                checked.len()
            ));
        }
        if checked.len() == 1 {
            return Ok(Shape::mutex(checked.remove(0)));
        }
        Ok(Shape::Set(Set {
            keys: checked.into(),
        }))
    }

    fn key_bytes(&self) -> Vec<&[u8]> {
        self.keys.iter().map(Key::bytes).collect()
    }

    fn counters(&self) -> Vec<Vec<u8>> {
        self.keys.iter().map(Key::fence_key).collect()
    }
}

impl Kind for Set {
    fn keys(&self) -> &[Key] {
        &self.keys
    }

    fn acquire(&self, holder: &str, ttl_ms: &str, _: &Standing) -> (Call, Reader) {
        let argv: [&[u8]; 2] = [holder.as_bytes(), ttl_ms.as_bytes()];
        (
            Call::with_keys(&ACQUIRE, &self.key_bytes(), &argv),
            read_flag,
        )
    }

    fn extend(&self, holder: &str, ttl_ms: &str) -> Call {
        let argv: [&[u8]; 2] = [holder.as_bytes(), ttl_ms.as_bytes()];
        Call::with_keys(&EXTEND, &self.key_bytes(), &argv)
    }

    /// Every key's entry and then every key's holder record (`set_extend.lua` told how many
    /// keys there are).
    fn extend_recorded(&self, holder: &str, ttl_ms: &str) -> Call {
        let mut keys: Vec<Vec<u8>> = self.keys.iter().map(|k| k.bytes().to_vec()).collect();
        keys.extend(self.keys.iter().map(super::who::record_key));
        let n = self.keys.len().to_string();
        let argv: [&[u8]; 3] = [holder.as_bytes(), ttl_ms.as_bytes(), n.as_bytes()];
        Call::with_keys(&EXTEND, &refs(&keys), &argv)
    }

    fn ordered_approach(&self) -> bool {
        true
    }

    fn release(&self, holder: &str, notice: Notice, _: &[(Arc<str>, u64)]) -> (Call, Reader) {
        let mut argv = vec![holder.as_bytes(), notice.arg()];
        argv.extend(self.keys.iter().map(Key::release_channel));
        (
            Call::with_keys(&RELEASE, &self.key_bytes(), &argv),
            read_flag,
        )
    }

    fn repair(&self, holder: &str, ms: &str) -> (Call, fn(&Value) -> bool) {
        let argv: [&[u8]; 2] = [holder.as_bytes(), ms.as_bytes()];
        (Call::with_keys(&REPAIR, &self.key_bytes(), &argv), |v| {
            matches!(v, Value::Int(1))
        })
    }

    /// Every key's counter incremented on each node in one script, which answers the
    /// largest: the token then exceeds every earlier token of every key in the set, and
    /// every later holder of any of them (alone or in a set) gets a larger one.
    fn fence_increment(&self) -> (Call, Reader) {
        let counters = self.counters();
        (
            Call::with_keys(&FENCE_INCR, &refs(&counters), &[]),
            read_counter,
        )
    }

    fn fence_write(&self, token: &str) -> Call {
        let counters = self.counters();
        Call::with_keys(&FENCE_MAX, &refs(&counters), &[token.as_bytes()])
    }
}

impl fmt::Display for Set {
    /// The first key and how many more: a set may hold 64 keys of 64 KiB each, too much for
    /// every log line and error.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.keys.split_first() {
            Some((first, [])) => write!(f, "{{{first}}}"),
            Some((first, rest)) => write!(f, "{{{first} and {} more}}", rest.len()),
            None => f.write_str("{}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_sorted_deduplicated_and_checked() {
        let set = Set::shape(&[b"b".to_vec(), b"a".to_vec(), b"b".to_vec()]).unwrap();
        assert_eq!(set.to_string(), "{a and 1 more}");
        assert!(matches!(set, Shape::Set(_)));
        assert!(matches!(
            Set::shape(&[b"a".to_vec(), b"a".to_vec()]).unwrap(),
            Shape::Mutex(_)
        ));
        assert!(Set::shape(&[]).is_err());
        assert!(Set::shape(&[b"a".to_vec(), b"quorum-lock:x".to_vec()]).is_err());
        let many: Vec<Vec<u8>> = (0..=MAX_SET_KEYS).map(|i| i.to_string().into()).collect();
        assert!(matches!(Set::shape(&many), Err(Error::InvalidKey { .. })));
        assert!(Set::shape(&many[..MAX_SET_KEYS]).is_ok());
    }
}
