//! A semaphore's permit: a member of the sorted set at the semaphore's key (member the holder
//! value, score its expiry on the node's clock), at most P live members per node
//! (docs/DESIGN.md, "Lock family"). More than one permit needs `Quorum::All`.

use std::fmt;
use std::sync::Arc;

use redis::Value;

use super::{read_flag, script, Kind, Notice, Reader, Shape, Standing};
use crate::error::{Error, Result};
use crate::rules::config::Config;
use crate::rules::key::Key;
use crate::scripts::{Call, LockScript};

/// One permit of a semaphore of `permits` on `key`.
#[derive(Clone)]
pub(crate) struct Permit {
    pub(crate) key: Key,
    pub(crate) permits: u32,
}

/// The set of leases is KEYS[1] in every permit script.
static ACQUIRE: LockScript =
    script!("acquire": "local leases = KEYS[1]\n" + "leases.lua", "permit_acquire.lua");
/// Also a read-write lock's reader's extend, on the readers' set (`rw`).
pub(crate) static LEASE_EXTEND: LockScript =
    script!("extend": "local leases = KEYS[1]\n" + "leases.lua", "lease_extend.lua");
static RELEASE: LockScript = script!(
    "release": "local leases = KEYS[1]\n" + "leases.lua", "notice.lua", "permit_release.lua"
);
static REPAIR: LockScript =
    script!("repair": "local leases = KEYS[1]\n" + "leases.lua", "permit_repair.lua");

pub(super) static SCRIPTS: &[&LockScript] = &[&ACQUIRE, &LEASE_EXTEND, &RELEASE, &REPAIR];

/// The extend of a member of `leases` that also keeps `key`'s holder record
/// (`lease_extend.lua` with both keys).
pub(crate) fn member_extend(key: &Key, leases: &[u8], holder: &str, ttl_ms: &str) -> Call {
    let record = super::who::record_key(key);
    let argv: [&[u8]; 2] = [holder.as_bytes(), ttl_ms.as_bytes()];
    Call::with_keys(&LEASE_EXTEND, &[leases, &record], &argv)
}

impl Permit {
    /// A permit of a semaphore of `permits`. More than one permit needs [`Quorum::All`]
    /// (docs/DESIGN.md, "Lock family"), unless `checked` is false (the test kit's negative
    /// control).
    ///
    /// [`Quorum::All`]: crate::Quorum::All
    pub(crate) fn shape(
        key: &[u8],
        permits: u32,
        config: &Config,
        nodes: usize,
        checked: bool,
    ) -> Result<Shape> {
        let key = Key::new(key)?;
        if permits == 0 {
            return Err(Error::InvalidConfig {
                field: "permits",
                reason: "a semaphore needs at least one permit".into(),
            });
        }
        let q = config.required;
        if checked && permits > 1 && q < nodes {
            let most = (nodes as u64 * u64::from(permits)) / q as u64;
            return Err(Error::InvalidConfig {
                field: "permits",
                reason: format!(
                    "a semaphore of {permits} permits needs Quorum::All: with a quorum of {q} \
                     of {nodes} nodes, each node admits {permits} holders and each holder \
                     needs {q} nodes, so up to {nodes} x {permits} / {q} = {most} clients can \
                     hold a permit at once (the quorums of different holders need not \
                     intersect in a node that counts them all); one permit is a mutex and \
                     works under any quorum"
                ),
            });
        }
        Ok(Shape::Permit(Permit { key, permits }))
    }
}

impl Kind for Permit {
    fn keys(&self) -> &[Key] {
        std::slice::from_ref(&self.key)
    }

    fn acquire(&self, holder: &str, ttl_ms: &str, _: &Standing) -> (Call, Reader) {
        let p = self.permits.to_string();
        let argv: [&[u8]; 3] = [holder.as_bytes(), ttl_ms.as_bytes(), p.as_bytes()];
        (Call::new(&ACQUIRE, self.key.bytes(), &argv), read_flag)
    }

    fn extend(&self, holder: &str, ttl_ms: &str) -> Call {
        let argv: [&[u8]; 2] = [holder.as_bytes(), ttl_ms.as_bytes()];
        Call::new(&LEASE_EXTEND, self.key.bytes(), &argv)
    }

    fn extend_recorded(&self, holder: &str, ttl_ms: &str) -> Call {
        member_extend(&self.key, self.key.bytes(), holder, ttl_ms)
    }

    fn publish(&self, holder: &str, version: u64, fields: &[(&str, &str)]) -> Call {
        super::who::publish_member(&self.key, self.key.bytes(), holder, version, fields)
    }

    fn release(&self, holder: &str, notice: Notice, _: &[(Arc<str>, u64)]) -> (Call, Reader) {
        let p = self.permits.to_string();
        let argv: [&[u8]; 4] = [
            holder.as_bytes(),
            self.key.release_channel(),
            notice.arg(),
            p.as_bytes(),
        ];
        (Call::new(&RELEASE, self.key.bytes(), &argv), read_flag)
    }

    fn repair(&self, holder: &str, ms: &str) -> (Call, fn(&Value) -> bool) {
        let p = self.permits.to_string();
        let argv: [&[u8]; 3] = [holder.as_bytes(), ms.as_bytes(), p.as_bytes()];
        (Call::new(&REPAIR, self.key.bytes(), &argv), |v| {
            matches!(v, Value::Int(1))
        })
    }
}

impl fmt::Display for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (1 of {} permits)", self.key, self.permits)
    }
}
