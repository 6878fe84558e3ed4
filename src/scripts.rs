//! The commands and Lua scripts run on every node. Each is atomic on its node; together with
//! the quorum rule they implement the RedLock steps. A lock is one string key whose value is
//! the holder value (fresh for every acquisition), with a TTL. Reentrancy is counted in the
//! client (see `owner`), so the nodes need no per-holder count (Redisson's hash layout): a
//! plain acquire is the native `SET key holder NX PX ttl`, no script at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use redis::Cmd;

/// A script with its SHA1, loaded on every node connection.
pub(crate) struct LockScript {
    name: &'static str,
    source: &'static str,
    hash: OnceLock<String>,
}

impl LockScript {
    const fn new(name: &'static str, source: &'static str) -> Self {
        LockScript {
            name,
            source,
            hash: OnceLock::new(),
        }
    }

    fn hash(&self) -> &str {
        self.hash
            .get_or_init(|| redis::Script::new(self.source).get_hash().to_string())
    }

    pub(crate) fn source(&self) -> &'static str {
        self.source
    }
}

/// One script call, shared by the per-node requests of an operation: the EVALSHA command is
/// packed once and sent to every node.
pub(crate) struct Call {
    /// For logs.
    pub(crate) name: &'static str,
    /// The script, for the EVAL fallback; `None` for a native command.
    script: Option<&'static LockScript>,
    command: Cmd,
    /// For calls whose stragglers may outlive the caller (acquire): which nodes' requests hold
    /// their place on the connection, and whether the caller told the rest to stop.
    pub(crate) progress: Option<Progress>,
}

/// Lets a later call on the same key (the release) know whether it can be sent at once: a
/// request whose send has begun keeps its place in the connection's queue (the multiplexed
/// connection's channel is FIFO, also when full), so anything sent later runs after it on that
/// node. A request that has not begun (still connecting, or between a NOSCRIPT answer and its
/// EVAL fallback, or between a dropped connection and the retry) could be overtaken, so the
/// later call either waits for it or stops it. Both sides use sequentially consistent
/// atomics: either the straggler sees `stopped` before it sends, or the caller sees it
/// unqueued and waits.
pub(crate) struct Progress {
    queued: Box<[AtomicBool]>,
    stopped: AtomicBool,
}

impl Progress {
    pub(crate) fn new(nodes: usize) -> Progress {
        Progress {
            queued: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            stopped: AtomicBool::new(false),
        }
    }

    /// Before a node's request is sent: false when the caller has stopped the call.
    pub(crate) fn may_send(&self, slot: usize) -> bool {
        self.queued[slot].store(false, Ordering::SeqCst);
        !self.stopped.load(Ordering::SeqCst)
    }

    /// After a node's request was first polled: it holds its place in the queue.
    pub(crate) fn queued(&self, slot: usize) {
        self.queued[slot].store(true, Ordering::SeqCst);
    }

    /// Stops every request not yet queued; true when one may still be on its way (the
    /// caller must wait for the stragglers before overtaking them).
    pub(crate) fn stop(&self) -> bool {
        self.stopped.store(true, Ordering::SeqCst);
        self.queued.iter().any(|q| !q.load(Ordering::SeqCst))
    }
}

impl Call {
    /// `EVALSHA sha 1 key ARGV...`.
    pub(crate) fn new(script: &'static LockScript, key: &[u8], argv: &[&[u8]]) -> Call {
        Call::with_keys(script, &[key], argv)
    }

    /// `EVALSHA sha numkeys KEYS... ARGV...`.
    pub(crate) fn with_keys(script: &'static LockScript, keys: &[&[u8]], argv: &[&[u8]]) -> Call {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.hash()).arg(keys.len());
        for k in keys {
            evalsha.arg(*k);
        }
        for a in argv {
            evalsha.arg(*a);
        }
        Call {
            name: script.name,
            script: Some(script),
            command: evalsha,
            progress: None,
        }
    }

    /// `SET key holder NX PX ms`: takes a free key (RedLock's acquire, and the watchdog's
    /// repair). Answers OK, or nil when the key exists.
    pub(crate) fn set_if_absent(name: &'static str, key: &[u8], holder: &[u8], ms: &[u8]) -> Call {
        let mut set = redis::cmd("SET");
        set.arg(key).arg(holder).arg("NX").arg("PX").arg(ms);
        Call {
            name,
            script: None,
            command: set,
            progress: None,
        }
    }

    /// Tracks per-node progress (see [`Progress`]).
    pub(crate) fn tracked(mut self, nodes: usize) -> Call {
        self.progress = Some(Progress::new(nodes));
        self
    }

    /// What is sent first: EVALSHA for a script, else the native command.
    pub(crate) fn command(&self) -> &Cmd {
        &self.command
    }

    /// Whether a NOSCRIPT answer can be retried as EVAL.
    pub(crate) fn is_script(&self) -> bool {
        self.script.is_some()
    }

    /// The same call in a form that cannot answer NOSCRIPT: `EVAL source ...` for a script,
    /// the command itself otherwise.
    pub(crate) fn eval(&self) -> Cmd {
        let Some(script) = self.script else {
            return self.command.clone();
        };
        let mut eval = redis::cmd("EVAL");
        eval.arg(script.source);
        for arg in self.command.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }
}

/// Fenced acquire (DESIGN 3, "Fencing tokens"), on one node: takes the key when it is free
/// (or already this holder's: a repeated request is idempotent), and then increments the
/// key's fencing counter, a separate key that never expires, and returns it.
///
/// KEYS[1] lock key, KEYS[2] fencing counter. ARGV[1] holder value, ARGV[2] TTL in ms.
///
/// Returns `{1, counter}`, or `{0, pttl}` when another holder has the key.
pub(crate) static ACQUIRE_FENCED: LockScript = LockScript::new(
    "acquire-fenced",
    r#"
local current = redis.call('get', KEYS[1])
if current == false or current == ARGV[1] then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, redis.call('incr', KEYS[2])}
end
return {0, redis.call('pttl', KEYS[1])}
"#,
);

/// Fencing write-back, on one node: raises the counter to the token (never lowers it), so
/// that every later quorum, which intersects this write's quorum, sees at least the token.
///
/// KEYS[1] fencing counter. ARGV[1] token. Returns 1.
pub(crate) static FENCE_MAX: LockScript = LockScript::new(
    "fence-max",
    r#"
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1])
end
return 1
"#,
);

/// Release, and the rollback of a failed attempt, on one node. Compare-and-delete: acts only
/// where the stored holder value matches.
///
/// KEYS[1] lock key. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the notice mode:
/// "1" (a release) publishes wherever the key is now free, also on a node that never had this
/// holder's entry (a quorum returns before every node answers, and waiters may be subscribed
/// only there); "2" (a rollback) publishes only where it deleted the entry, giving a node back.
/// Waiters count the notices per holder and wake at a quorum (see `wakeup`), so the rollback
/// of a failed attempt, which held at most a minority, wakes nobody.
///
/// Returns 1 when the key was deleted, 0 when the holder did not hold it.
pub(crate) static RELEASE: LockScript = LockScript::new(
    "release",
    r#"
local held = redis.call('get', KEYS[1]) == ARGV[1]
if held then
  redis.call('del', KEYS[1])
end
if held or (ARGV[3] == '1' and redis.call('exists', KEYS[1]) == 0) then
  redis.call('publish', ARGV[2], ARGV[1])
end
if held then
  return 1
end
return 0
"#,
);

/// Extend, on one node: PEXPIRE only where the holder's field exists. Never creates the key,
/// so an expired lock cannot be turned back into a held one.
///
/// KEYS[1] lock key. ARGV[1] holder value, ARGV[2] new TTL in ms.
///
/// Returns 1 when extended, 0 when the holder does not hold the key on this node.
pub(crate) static EXTEND: LockScript = LockScript::new(
    "extend",
    r#"
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
"#,
);

/// Every script, for loading on connect.
pub(crate) static ALL_SCRIPTS: [&LockScript; 4] = [&ACQUIRE_FENCED, &FENCE_MAX, &RELEASE, &EXTEND];

/// The pub/sub channel on which a release of `key` is announced.
pub(crate) fn release_channel(key: &[u8]) -> Vec<u8> {
    prefixed(b"quorum-lock:released:", key)
}

/// The key of `key`'s fencing counter.
pub(crate) fn fence_key(key: &[u8]) -> Vec<u8> {
    prefixed(b"quorum-lock:fence:", key)
}

fn prefixed(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(prefix.len() + key.len());
    name.extend_from_slice(prefix);
    name.extend_from_slice(key);
    name
}
