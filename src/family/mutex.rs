//! The mutex: one key whose value is the holder value, with a TTL (docs/DESIGN.md, "Acquire").
//! Its acquire is the native `SET key holder NX PX ttl`, no script at all; its extend and
//! fencing calls are shared by the kinds that keep a string entry (the writer of a read-write
//! lock, the fair lock) or a counter per key.

use std::fmt;
use std::sync::Arc;

use redis::Value;

use super::{read_counter, script, Answer, Kind, Notice, Reader, Standing};
use crate::rules::key::Key;
use crate::scripts::{Call, LockScript};

/// One key's lock.
#[derive(Clone)]
pub(crate) struct Mutex {
    pub(crate) key: Key,
}

pub(crate) static ACQUIRE_OWN: LockScript = script!("acquire-own": "acquire_own.lua");
pub(crate) static RELEASE: LockScript = script!("release": "notice.lua", "release.lua");
pub(crate) static EXTEND: LockScript = script!("extend": "extend.lua");
pub(crate) static FENCE_MAX: LockScript = script!("fence-max": "fence_max.lua");

pub(super) static SCRIPTS: &[&LockScript] = &[&ACQUIRE_OWN, &RELEASE, &EXTEND, &FENCE_MAX];

/// An acquire's reply: `OK` / nil from `SET NX` (and from its re-sent form).
pub(crate) fn read_acquire(v: &Value) -> Option<Answer> {
    match v {
        Value::Okay => Some(Answer::Yes(1)),
        Value::Nil => Some(Answer::Refused(None)),
        _ => None,
    }
}

/// Whether a `SET NX` repair put the entry back.
pub(crate) fn set_answered_ok(v: &Value) -> bool {
    matches!(v, Value::Okay)
}

/// `SET key holder NX PX ms`, re-sent after a dropped connection as `acquire_own.lua`.
pub(crate) fn set_if_absent(name: &'static str, key: &Key, holder: &str, ms: &str) -> Call {
    Call::set_if_absent(
        name,
        key.bytes(),
        holder.as_bytes(),
        ms.as_bytes(),
        &ACQUIRE_OWN,
    )
}

/// Compare-and-PEXPIRE of a string entry (`extend.lua`).
pub(crate) fn extend_entry(key: &Key, holder: &str, ttl_ms: &str) -> Call {
    Call::new(
        &EXTEND,
        key.bytes(),
        &[holder.as_bytes(), ttl_ms.as_bytes()],
    )
}

/// Compare-and-PEXPIRE of a string entry and its holder record (`extend.lua` with both keys),
/// for a holder that published one.
pub(crate) fn extend_recorded(key: &Key, holder: &str, ttl_ms: &str) -> Call {
    let record = super::who::record_key(key);
    Call::with_keys(
        &EXTEND,
        &[key.bytes(), &record],
        &[holder.as_bytes(), ttl_ms.as_bytes()],
    )
}

/// The fencing increment of one key's counter: `INCR`, answering the new value.
pub(crate) fn fence_increment(key: &Key) -> (Call, Reader) {
    (
        Call::increment("fence-incr", &key.fence_key()),
        read_counter,
    )
}

/// The fencing write-back of one key's counter (`fence_max.lua`).
pub(crate) fn fence_write(key: &Key, token: &str) -> Call {
    Call::new(&FENCE_MAX, &key.fence_key(), &[token.as_bytes()])
}

impl Kind for Mutex {
    fn keys(&self) -> &[Key] {
        std::slice::from_ref(&self.key)
    }

    fn acquire(&self, holder: &str, ttl_ms: &str, _: &Standing) -> (Call, Reader) {
        (
            set_if_absent("acquire", &self.key, holder, ttl_ms),
            read_acquire,
        )
    }

    fn extend(&self, holder: &str, ttl_ms: &str) -> Call {
        extend_entry(&self.key, holder, ttl_ms)
    }

    fn ordered_approach(&self) -> bool {
        true
    }

    fn courteous(&self) -> bool {
        true
    }

    fn by_holder(&self) -> bool {
        true
    }

    fn release(&self, holder: &str, notice: Notice, _: &[(Arc<str>, u64)]) -> (Call, Reader) {
        let argv: [&[u8]; 3] = [holder.as_bytes(), self.key.release_channel(), notice.arg()];
        (Call::new(&RELEASE, self.key.bytes(), &argv), read_released)
    }

    fn repair(&self, holder: &str, ms: &str) -> (Call, fn(&Value) -> bool) {
        (
            set_if_absent("repair", &self.key, holder, ms),
            set_answered_ok,
        )
    }
}

impl fmt::Display for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.key)
    }
}

/// The mutex release's answer: `Yes(1 + the subscribers that heard its notice)` where it
/// deleted this holder's entry, a refusal where it was not this holder's.
fn read_released(v: &Value) -> Option<Answer> {
    match super::int(v)? {
        0 => Some(Answer::Refused(None)),
        n if n >= 1 => Some(Answer::Yes(n)),
        _ => None,
    }
}
