//! The read-write lock (docs/DESIGN.md, "Read-write lock"): the writer is the holder value at
//! the key itself, as a mutex's entry; the readers are a sorted set of leases at
//! `quorum-lock:readers:{<h>}:K`; a waiting writer's pending mark, which keeps new readers out, is
//! `quorum-lock:writer-waiting:{<h>}:K`. Every script names the three keys in KEYS, in that order.

use std::fmt;
use std::sync::Arc;

use redis::Value;

use super::{mutex, read_flag, script, Kind, Notice, Reader, Standing};
use crate::rules::key::{kept, Key};
use crate::scripts::{Call, LockScript};

/// A reader.
#[derive(Clone)]
pub(crate) struct Read {
    pub(crate) key: Key,
}

/// The writer. `waiter` is the id of a waiting request, the value of its pending mark; `None`
/// for a single attempt, which sets no mark. `mark_ms` is the mark's lease (the client's
/// queue lease), in ms.
#[derive(Clone)]
pub(crate) struct Write {
    pub(crate) key: Key,
    pub(crate) waiter: Option<Arc<str>>,
    pub(crate) mark_ms: Arc<str>,
}

/// The readers' set is KEYS[2] in every script that purges it.
static READ_ACQUIRE: LockScript =
    script!("acquire": "local leases = KEYS[2]\n" + "leases.lua", "read_acquire.lua");
static READ_RELEASE: LockScript =
    script!("release": "local leases = KEYS[2]\n" + "leases.lua", "notice.lua", "read_release.lua");
static READ_REPAIR: LockScript =
    script!("repair": "local leases = KEYS[2]\n" + "leases.lua", "read_repair.lua");
static WRITE_ACQUIRE: LockScript =
    script!("acquire": "local leases = KEYS[2]\n" + "leases.lua", "write_acquire.lua");
static WRITE_RELEASE: LockScript = script!("release": "notice.lua", "write_release.lua");
static WRITE_WITHDRAW: LockScript = script!("withdraw": "write_withdraw.lua");
static WRITE_REPAIR: LockScript =
    script!("repair": "local leases = KEYS[2]\n" + "leases.lua", "write_repair.lua");

pub(super) static SCRIPTS: &[&LockScript] = &[
    &READ_ACQUIRE,
    &READ_RELEASE,
    &READ_REPAIR,
    &WRITE_ACQUIRE,
    &WRITE_RELEASE,
    &WRITE_WITHDRAW,
    &WRITE_REPAIR,
];

/// The readers' sorted set of `key`.
pub(crate) fn readers_key(key: &Key) -> Vec<u8> {
    key.derived(kept::READERS)
}

/// The pending-writer mark of `key`.
pub(crate) fn mark_key(key: &Key) -> Vec<u8> {
    key.derived(kept::WRITER_MARK)
}

/// The three keys of every script: the writer's entry, the readers, the mark.
struct RwKeys([Vec<u8>; 3]);

impl RwKeys {
    fn of(key: &Key) -> RwKeys {
        RwKeys([key.bytes().to_vec(), readers_key(key), mark_key(key)])
    }

    fn refs(&self) -> [&[u8]; 3] {
        [&self.0[0], &self.0[1], &self.0[2]]
    }
}

fn added(v: &Value) -> bool {
    matches!(v, Value::Int(1))
}

impl Kind for Read {
    fn keys(&self) -> &[Key] {
        std::slice::from_ref(&self.key)
    }

    fn acquire(&self, holder: &str, ttl_ms: &str, _: &Standing) -> (Call, Reader) {
        let argv: [&[u8]; 2] = [holder.as_bytes(), ttl_ms.as_bytes()];
        let call = Call::with_keys(&READ_ACQUIRE, &RwKeys::of(&self.key).refs(), &argv);
        (call, read_flag)
    }

    /// A reader's member is extended as a permit is (`ZADD XX`, never re-added).
    fn extend(&self, holder: &str, ttl_ms: &str) -> Call {
        let argv: [&[u8]; 2] = [holder.as_bytes(), ttl_ms.as_bytes()];
        Call::new(&super::permit::LEASE_EXTEND, &readers_key(&self.key), &argv)
    }

    fn extend_recorded(&self, holder: &str, ttl_ms: &str) -> Call {
        super::permit::member_extend(&self.key, &readers_key(&self.key), holder, ttl_ms)
    }

    fn publish(&self, holder: &str, version: u64, fields: &[(&str, &str)]) -> Call {
        super::who::publish_member(&self.key, &readers_key(&self.key), holder, version, fields)
    }

    fn release(&self, holder: &str, notice: Notice, _: &[(Arc<str>, u64)]) -> (Call, Reader) {
        let argv: [&[u8]; 3] = [holder.as_bytes(), self.key.release_channel(), notice.arg()];
        let call = Call::with_keys(&READ_RELEASE, &RwKeys::of(&self.key).refs(), &argv);
        (call, read_flag)
    }

    fn repair(&self, holder: &str, ms: &str) -> (Call, fn(&Value) -> bool) {
        let argv: [&[u8]; 2] = [holder.as_bytes(), ms.as_bytes()];
        let call = Call::with_keys(&READ_REPAIR, &RwKeys::of(&self.key).refs(), &argv);
        (call, added)
    }

    fn rw_side(&self) -> Option<&'static str> {
        Some("read")
    }
}

impl Kind for Write {
    fn keys(&self) -> &[Key] {
        std::slice::from_ref(&self.key)
    }

    fn acquire(&self, holder: &str, ttl_ms: &str, _: &Standing) -> (Call, Reader) {
        let w = self.waiter.as_deref().unwrap_or("").as_bytes();
        let argv: [&[u8]; 4] = [
            holder.as_bytes(),
            ttl_ms.as_bytes(),
            w,
            self.mark_ms.as_bytes(),
        ];
        let call = Call::with_keys(&WRITE_ACQUIRE, &RwKeys::of(&self.key).refs(), &argv);
        (call, read_flag)
    }

    /// The writer's entry is extended as the mutex's.
    fn extend(&self, holder: &str, ttl_ms: &str) -> Call {
        mutex::extend_entry(&self.key, holder, ttl_ms)
    }

    fn release(&self, holder: &str, notice: Notice, _: &[(Arc<str>, u64)]) -> (Call, Reader) {
        let w = self.waiter.as_deref().unwrap_or("").as_bytes();
        let argv: [&[u8]; 4] = [
            holder.as_bytes(),
            self.key.release_channel(),
            notice.arg(),
            w,
        ];
        let call = Call::with_keys(&WRITE_RELEASE, &RwKeys::of(&self.key).refs(), &argv);
        (call, read_flag)
    }

    fn repair(&self, holder: &str, ms: &str) -> (Call, fn(&Value) -> bool) {
        let argv: [&[u8]; 2] = [holder.as_bytes(), ms.as_bytes()];
        let call = Call::with_keys(&WRITE_REPAIR, &RwKeys::of(&self.key).refs(), &argv);
        (call, added)
    }

    /// A waiting writer's withdrawal of its pending mark, when its request gives up.
    fn withdraw(&self) -> Option<Call> {
        let waiter = self.waiter.as_ref()?;
        Some(Call::with_keys(
            &WRITE_WITHDRAW,
            &RwKeys::of(&self.key).refs(),
            &[waiter.as_bytes(), self.key.release_channel()],
        ))
    }

    fn keeps_a_place(&self) -> bool {
        self.waiter.is_some()
    }

    fn rw_side(&self) -> Option<&'static str> {
        Some("write")
    }
}

impl fmt::Display for Read {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (read)", self.key)
    }
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (write)", self.key)
    }
}
