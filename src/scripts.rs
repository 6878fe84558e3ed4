//! The commands and Lua scripts run on every node. Each is atomic on its node; together with
//! the quorum rule they implement the RedLock steps. A lock is one string key whose value is
//! the holder value (fresh for every acquisition), with a TTL. Reentrancy is counted in the
//! client (see `owner`), so the nodes need no per-holder count (Redisson's hash layout): a
//! plain acquire is the native `SET key holder NX PX ttl`, no script at all.

use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

use redis::Cmd;

use crate::progress::Progress;

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

/// One call, shared by the per-node requests of an operation: the command is packed once
/// and sent to every node.
pub(crate) struct Call {
    /// For logs and metrics.
    pub(crate) name: &'static str,
    /// The Redis command sent first (EVALSHA for a script).
    verb: &'static str,
    /// The script, for the EVAL fallback; `None` for a native command.
    script: Option<&'static LockScript>,
    command: Cmd,
    /// Which nodes' requests hold their place on their connection, and whether the caller
    /// told the rest to stop (see [`Progress`]).
    pub(crate) progress: Progress,
    /// The call's time ran out: the requests dropped from now on timed out (for metrics).
    expired: AtomicBool,
}

/// The most nodes a client may have: [`Progress`](crate::progress::Progress) keeps one bit per
/// node.
pub(crate) const MAX_NODES: usize = 64;

impl Call {
    /// `EVALSHA sha 1 key ARGV...`.
    pub(crate) fn new(script: &'static LockScript, key: &[u8], argv: &[&[u8]]) -> Call {
        Call::with_keys(script, &[key], argv)
    }

    /// `EVALSHA sha numkeys KEYS... ARGV...`.
    pub(crate) fn with_keys(script: &'static LockScript, keys: &[&[u8]], argv: &[&[u8]]) -> Call {
        let hash = script.hash();
        let sizes = keys.iter().chain(argv).map(|a| a.len()).sum::<usize>();
        // The hash, numkeys (at most 20 decimal digits), the keys and the arguments.
        let mut evalsha = command(
            "EVALSHA",
            2 + keys.len() + argv.len(),
            hash.len() + 20 + sizes,
        );
        evalsha.arg(hash).arg(keys.len());
        for k in keys {
            evalsha.arg(*k);
        }
        for a in argv {
            evalsha.arg(*a);
        }
        Call {
            name: script.name,
            verb: "EVALSHA",
            script: Some(script),
            command: evalsha,
            progress: Progress::default(),
            expired: AtomicBool::new(false),
        }
    }

    /// `SET key holder NX PX ms`: takes a free key (RedLock's acquire, and the watchdog's
    /// repair). Answers OK, or nil when the key exists.
    pub(crate) fn set_if_absent(name: &'static str, key: &[u8], holder: &[u8], ms: &[u8]) -> Call {
        let mut set = command("SET", 5, key.len() + holder.len() + "NXPX".len() + ms.len());
        set.arg(key).arg(holder).arg("NX").arg("PX").arg(ms);
        Call {
            name,
            verb: "SET",
            script: None,
            command: set,
            progress: Progress::default(),
            expired: AtomicBool::new(false),
        }
    }

    /// `INCR counter`: the next value of a fencing or ticket counter (neither ever expires),
    /// named `name` in logs and metrics. Answers the new value.
    pub(crate) fn increment(name: &'static str, counter: &[u8]) -> Call {
        let mut incr = redis::cmd("INCR");
        incr.arg(counter);
        Call {
            name,
            verb: "INCR",
            script: None,
            command: incr,
            progress: Progress::default(),
            expired: AtomicBool::new(false),
        }
    }

    /// Marks the call's time as run out: its requests dropped from now on timed out.
    pub(crate) fn expire(&self) {
        self.expired
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Set once the call's time ran out (see [`expire`](Self::expire)).
    pub(crate) fn expired(&self) -> &AtomicBool {
        &self.expired
    }

    /// The Redis command sent first, for spans (`db.operation.name`).
    pub(crate) fn verb(&self) -> &'static str {
        self.verb
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
        match self.script {
            Some(script) => script_eval(script, self.command.args_iter().skip(2)),
            None => self.command.clone(),
        }
    }

    /// What to send when the call is sent a second time, after the connection dropped before
    /// its answer came: the first request may have been applied. A native `SET NX` would then
    /// find this holder's own entry and refuse; it is re-sent as [`ACQUIRE_OWN`] (plain EVAL,
    /// so that it cannot answer NOSCRIPT), which counts the holder's own entry as taken. Every
    /// script is safe to repeat as it is (see `Node::on_connection`).
    pub(crate) fn resend(&self, form: SendBy) -> Cmd {
        if self.script.is_some() {
            // In `SendBy::Eval` (a rollback) the re-send must not be able to answer NOSCRIPT
            // either.
            return match form {
                SendBy::Sha => self.command.clone(),
                SendBy::Eval => self.eval(),
            };
        }
        // SET key holder NX PX ms -> EVAL acquire-own 1 key holder ms
        let args: Vec<&[u8]> = self
            .command
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(bytes) => Some(bytes),
                _ => None,
            })
            .collect();
        match args.as_slice() {
            [_set, key, holder, _nx, _px, ms] => {
                let mut eval = redis::cmd("EVAL");
                eval.arg(ACQUIRE_OWN.source)
                    .arg(1)
                    .arg(*key)
                    .arg(*holder)
                    .arg(*ms);
                eval
            }
            _ => self.command.clone(),
        }
    }
}

/// A command `name` with room for `args` more arguments of `bytes` bytes in all: built once
/// per call (and packed again for each node), it then allocates each of its two buffers once
/// instead of growing them argument by argument.
fn command(name: &'static str, args: usize, bytes: usize) -> Cmd {
    let mut cmd = Cmd::with_capacity(1 + args, name.len() + bytes);
    cmd.arg(name);
    cmd
}

/// `EVAL source` followed by the given arguments (numkeys, keys, argv).
fn script_eval<'a>(script: &LockScript, args: impl Iterator<Item = redis::Arg<&'a [u8]>>) -> Cmd {
    let mut eval = redis::cmd("EVAL");
    eval.arg(script.source);
    for arg in args {
        if let redis::Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    eval
}

/// The native acquire, re-sent after a dropped connection (see [`Call::resend`]): takes the
/// key when it is free, and counts it as taken when it already holds this holder's value (the
/// first request was applied before the connection dropped). Never touches another holder's
/// entry, and leaves the TTL of an existing own entry as it is: it was set by the first
/// request, after the attempt's start, so it expires no earlier than the deadline the client
/// computes from that start.
///
/// KEYS[1] lock key. ARGV[1] holder value, ARGV[2] TTL in ms.
///
/// Returns OK (taken, or already this holder's), or nil when another holder has the key:
/// the same answers as `SET NX`.
pub(crate) static ACQUIRE_OWN: LockScript = LockScript::new(
    "acquire-own",
    r#"
local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
  return redis.status_reply('OK')
end
if current then
  return false
end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
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
/// Waiters count the notices per release and wake at a quorum (see `wakeup`), so the rollback
/// of a failed attempt, which held less than a quorum, normally wakes nobody.
///
/// The notice carries the SHA1 of the holder value, never the value itself: the value is the
/// only proof of ownership, and may still be live on nodes this release has not reached yet.
/// The digest tells the notices of one release apart from another's and grants nothing.
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
  redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
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

/// Multi-key acquire, on one node: the whole set in one atomic step, so that two sets that
/// overlap (`{a, b}` against `{b, a}`) are decided by each node at once and cannot deadlock.
/// Says yes only if every key is absent or already this holder's (a re-send after a dropped
/// connection, ordering invariant 6), and then sets the absent ones; an own key keeps the TTL
/// the first request gave it (set after the attempt's start).
///
/// KEYS the lock keys (sorted, distinct). ARGV[1] holder value, ARGV[2] TTL in ms.
///
/// Returns 1 when every key is now this holder's, 0 (changing nothing) when another holder
/// has any of them.
pub(crate) static SET_ACQUIRE: LockScript = LockScript::new(
    "acquire",
    r#"
for _, k in ipairs(KEYS) do
  local v = redis.call('get', k)
  if v and v ~= ARGV[1] then
    return 0
  end
end
for _, k in ipairs(KEYS) do
  redis.call('set', k, ARGV[1], 'NX', 'PX', ARGV[2])
end
return 1
"#,
);

/// Multi-key extend, on one node: only where every key is still this holder's, and then
/// PEXPIRE all of them; otherwise changes nothing. Never creates a key.
///
/// KEYS the lock keys. ARGV[1] holder value, ARGV[2] new TTL in ms. Returns 1 or 0.
pub(crate) static SET_EXTEND: LockScript = LockScript::new(
    "extend",
    r#"
for _, k in ipairs(KEYS) do
  if redis.call('get', k) ~= ARGV[1] then
    return 0
  end
end
for _, k in ipairs(KEYS) do
  redis.call('pexpire', k, ARGV[2])
end
return 1
"#,
);

/// Multi-key release (and rollback), on one node: deletes the keys this holder holds and
/// announces each freed key on its own release channel, as [`RELEASE`] does for one key
/// (mode "1" wherever the key is now free, mode "2" only where this call deleted it), so that
/// a waiter on any one key of the set wakes.
///
/// KEYS the lock keys. ARGV[1] holder value, ARGV[2] the notice mode, ARGV[2 + i] the release
/// channel of KEYS[i].
///
/// Returns 1 when every key was this holder's (all deleted), else 0.
pub(crate) static SET_RELEASE: LockScript = LockScript::new(
    "release",
    r#"
local all = 1
local digest = redis.sha1hex(ARGV[1])
for i, k in ipairs(KEYS) do
  local held = redis.call('get', k) == ARGV[1]
  if held then
    redis.call('del', k)
  else
    all = 0
  end
  if held or (ARGV[2] == '1' and redis.call('exists', k) == 0) then
    redis.call('publish', ARGV[i + 2], digest)
  end
end
return all
"#,
);

/// Multi-key repair, on one node, right after a quorum confirmed a renewal: puts back the
/// missing keys (`SET NX PX remaining-validity`) only if no key of the set is held by another
/// holder, and raises this holder's remaining keys to the same TTL (never lowering one), so
/// that the node supports the whole set until the deadline again.
///
/// KEYS the lock keys. ARGV[1] holder value, ARGV[2] the remaining validity in ms.
///
/// Returns 1 when it put back at least one key, else 0.
pub(crate) static SET_REPAIR: LockScript = LockScript::new(
    "repair",
    r#"
for _, k in ipairs(KEYS) do
  local v = redis.call('get', k)
  if v and v ~= ARGV[1] then
    return 0
  end
end
local ms = tonumber(ARGV[2])
local put = 0
for _, k in ipairs(KEYS) do
  if redis.call('set', k, ARGV[1], 'NX', 'PX', ms) then
    put = 1
  elseif redis.call('pttl', k) < ms then
    redis.call('pexpire', k, ms)
  end
end
return put
"#,
);

/// Fencing increment of a set, on one node: increments every key's counter and returns the
/// largest new value.
///
/// KEYS the fencing counters. Returns the largest value.
pub(crate) static SET_FENCE_INCR: LockScript = LockScript::new(
    "fence-incr",
    r#"
local m = 0
for _, k in ipairs(KEYS) do
  local v = redis.call('incr', k)
  if v > m then
    m = v
  end
end
return m
"#,
);

/// Fencing write-back of a set, on one node: [`FENCE_MAX`] for every counter of the set.
///
/// KEYS the fencing counters. ARGV[1] token. Returns 1.
pub(crate) static SET_FENCE_MAX: LockScript = LockScript::new(
    "fence-max",
    r#"
local t = tonumber(ARGV[1])
for _, k in ipairs(KEYS) do
  if tonumber(redis.call('get', k) or '0') < t then
    redis.call('set', k, ARGV[1])
  end
end
return 1
"#,
);

/// The opening of every script on a sorted set of leases (a semaphore's permits, a read-write
/// lock's readers), the set being the KEYS entry `$zset`: the node's own time in ms (`TIME`,
/// so scripts are replicated by effects: explicit on Redis 6.2, always so from 7), the expired
/// members purged first (a member whose expiry is at or before now is gone), and a helper that
/// keeps the set's own expiry at its latest member's, so that nothing lingers.
macro_rules! leases_prelude {
    ($zset:literal) => {
        concat!(
            r#"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', "#,
            $zset,
            r#", '-inf', now)
local function expire_at_latest()
  local last = redis.call('zrange', "#,
            $zset,
            r#", -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('pexpireat', "#,
            $zset,
            r#", last[2])
  end
end
"#
        )
    };
}

/// The opening of every permit script: [`leases_prelude`] on the semaphore's set, KEYS[1].
macro_rules! permits_prelude {
    () => {
        leases_prelude!("KEYS[1]")
    };
}

/// Takes a permit, on one node. The permits of a semaphore are a sorted set: member the
/// holder value, score its expiry in the node's milliseconds. Yes when this holder is already
/// a live member (a re-send: its expiry is kept) or fewer than P members are live.
///
/// KEYS[1] the semaphore key. ARGV[1] holder value, ARGV[2] TTL in ms, ARGV[3] P.
/// Returns 1 or 0.
pub(crate) static PERMIT_ACQUIRE: LockScript = LockScript::new(
    "acquire",
    concat!(
        permits_prelude!(),
        r#"
if redis.call('zscore', KEYS[1], ARGV[1]) then
  return 1
end
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  expire_at_latest()
  return 1
end
return 0
"#
    ),
);

/// Extends a permit, on one node: only a live member is extended (`ZADD XX`), never re-added.
///
/// KEYS[1] the semaphore key. ARGV[1] holder value, ARGV[2] new TTL in ms. Returns 1 or 0.
pub(crate) static PERMIT_EXTEND: LockScript = LockScript::new(
    "extend",
    concat!(
        permits_prelude!(),
        r#"
if not redis.call('zscore', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('zadd', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
expire_at_latest()
return 1
"#
    ),
);

/// Releases a permit (and rolls back a failed attempt), on one node: `ZREM`, then the release
/// notice as [`RELEASE`] sends it: mode "1" wherever a permit is now free, mode "2" only where
/// this call removed the member.
///
/// KEYS[1] the semaphore key. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the
/// notice mode, ARGV[4] P. Returns 1 when the holder had a live permit there, else 0.
pub(crate) static PERMIT_RELEASE: LockScript = LockScript::new(
    "release",
    concat!(
        permits_prelude!(),
        r#"
local held = redis.call('zrem', KEYS[1], ARGV[1]) == 1
expire_at_latest()
if held or (ARGV[3] == '1' and redis.call('zcard', KEYS[1]) < tonumber(ARGV[4])) then
  redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
end
if held then
  return 1
end
return 0
"#
    ),
);

/// Repairs a permit, on one node, right after a quorum confirmed a renewal: adds the member
/// back for the remaining validity only if it is absent and a permit is free.
///
/// KEYS[1] the semaphore key. ARGV[1] holder value, ARGV[2] remaining validity in ms,
/// ARGV[3] P. Returns 1 when it put the permit back, else 0.
pub(crate) static PERMIT_REPAIR: LockScript = LockScript::new(
    "repair",
    concat!(
        permits_prelude!(),
        r#"
if redis.call('zscore', KEYS[1], ARGV[1]) then
  return 0
end
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  expire_at_latest()
  return 1
end
return 0
"#
    ),
);

/// The opening of every read-write lock script: [`leases_prelude`] on the readers' sorted set
/// at KEYS[2] (KEYS[1] is the writer's entry, KEYS[3] the pending-writer mark). Expired
/// readers are purged first, so every test of "no live readers" below is a `ZCARD`.
macro_rules! rw_prelude {
    () => {
        leases_prelude!("KEYS[2]")
    };
}

/// Takes a read lock, on one node. Yes when this reader is already a live member (a re-send:
/// its expiry is kept), or when there is no writer entry and no pending-writer mark (a
/// waiting writer stops new readers); then the reader becomes a member with its own expiry.
///
/// KEYS[1] the key (the writer's entry), KEYS[2] the readers' sorted set, KEYS[3] the
/// pending-writer mark. ARGV[1] holder value, ARGV[2] TTL in ms. Returns 1 or 0.
pub(crate) static READ_ACQUIRE: LockScript = LockScript::new(
    "acquire",
    concat!(
        rw_prelude!(),
        r#"
if redis.call('zscore', KEYS[2], ARGV[1]) then
  return 1
end
if redis.call('exists', KEYS[1]) == 1 or redis.call('exists', KEYS[3]) == 1 then
  return 0
end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
expire_at_latest()
return 1
"#
    ),
);

/// Releases a read lock (and rolls back a failed attempt), on one node: `ZREM`, then the
/// release notice where the key is now free for a writer (no live reader, no writer entry):
/// in mode "1" (a release) also where this reader was not a member, in mode "2" (a rollback)
/// only where this call removed it. When a writer waits (its pending mark is there), the
/// notice names the mark (`drained:` and its digest), not this reader: readers that release
/// at once finish in different orders on different nodes, and notices that each named the
/// node's last reader would split between them, so that none reached the quorum that wakes
/// the writer.
///
/// KEYS as [`READ_ACQUIRE`]. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the notice
/// mode. Returns 1 when the reader was a live member there, else 0.
pub(crate) static READ_RELEASE: LockScript = LockScript::new(
    "release",
    concat!(
        rw_prelude!(),
        r#"
local held = redis.call('zrem', KEYS[2], ARGV[1]) == 1
expire_at_latest()
if (held or ARGV[3] == '1') and redis.call('zcard', KEYS[2]) == 0
    and redis.call('exists', KEYS[1]) == 0 then
  local mark = redis.call('get', KEYS[3])
  if mark then
    redis.call('publish', ARGV[2], 'drained:' .. redis.sha1hex(mark))
  else
    redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
  end
end
if held then
  return 1
end
return 0
"#
    ),
);

/// Repairs a read lock, on one node, right after a quorum confirmed a renewal: adds the
/// member back for the remaining validity only if it is absent and no writer holds the key
/// there. A pending-writer mark does not stop it: the mark keeps *new* readers out, and this
/// reader already holds on a quorum.
///
/// KEYS as [`READ_ACQUIRE`]. ARGV[1] holder value, ARGV[2] remaining validity in ms.
/// Returns 1 when it put the member back, else 0.
pub(crate) static READ_REPAIR: LockScript = LockScript::new(
    "repair",
    concat!(
        rw_prelude!(),
        r#"
if redis.call('zscore', KEYS[2], ARGV[1]) then
  return 0
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
expire_at_latest()
return 1
"#
    ),
);

/// Takes a write lock, on one node. Yes when the key already holds this holder (a re-send:
/// its TTL is kept), or when there is no writer entry and no live reader; then `SET key
/// holder PX ttl`. Refused because of live readers, a waiting writer (ARGV[3] not empty)
/// sets the pending-writer mark to its request's id for the mark's own lease (ARGV[4], the
/// client's queue lease, renewed by each refused attempt, so that a writer that dies while
/// waiting keeps readers out for one queue lease at most, not for its TTL), unless another
/// writer's mark is live: the mark stops new readers, so the readers drain and the writer is
/// not starved. Other writers' marks do not stop a writer.
///
/// KEYS as [`READ_ACQUIRE`]. ARGV[1] holder value, ARGV[2] TTL in ms, ARGV[3] the waiting
/// request's id, or empty for a single attempt (no mark), ARGV[4] the mark's lease in ms.
/// Returns 1 or 0.
pub(crate) static WRITE_ACQUIRE: LockScript = LockScript::new(
    "acquire",
    concat!(
        rw_prelude!(),
        r#"
local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
  return 1
end
if current then
  return 0
end
if redis.call('zcard', KEYS[2]) > 0 then
  if ARGV[3] ~= '' then
    local mark = redis.call('get', KEYS[3])
    if not mark or mark == ARGV[3] then
      redis.call('set', KEYS[3], ARGV[3], 'PX', ARGV[4])
    end
  end
  return 0
end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"#
    ),
);

/// Releases a write lock (and rolls back a failed attempt), on one node: compare-and-delete
/// of the writer's entry, as [`RELEASE`]. A release (mode "1") also deletes the
/// pending-writer mark if it is this request's (ARGV[4]); a rollback (mode "2") leaves it,
/// since the request is still waiting (it withdraws the mark with [`WRITE_WITHDRAW`] when it
/// gives up). Notices as [`RELEASE`]: mode "1" wherever the key is now free of a writer,
/// mode "2" only where this call deleted the entry.
///
/// KEYS as [`READ_ACQUIRE`]. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the notice
/// mode, ARGV[4] the request's id (may be empty). Returns 1 when the entry was deleted, else 0.
pub(crate) static WRITE_RELEASE: LockScript = LockScript::new(
    "release",
    r#"
local held = redis.call('get', KEYS[1]) == ARGV[1]
if held then
  redis.call('del', KEYS[1])
end
if ARGV[3] == '1' and ARGV[4] ~= '' and redis.call('get', KEYS[3]) == ARGV[4] then
  redis.call('del', KEYS[3])
end
if held or (ARGV[3] == '1' and redis.call('exists', KEYS[1]) == 0) then
  redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
end
if held then
  return 1
end
return 0
"#,
);

/// Withdraws a waiting writer's pending mark, on one node, when its request gives up: deletes
/// the mark only if it is this request's, and then announces the key on its release channel
/// (readers that the mark kept out may now come in).
///
/// KEYS as [`READ_ACQUIRE`]. ARGV[1] the request's id, ARGV[2] release channel. Returns 1 when
/// it deleted the mark, else 0.
pub(crate) static WRITE_WITHDRAW: LockScript = LockScript::new(
    "withdraw",
    r#"
if redis.call('get', KEYS[3]) == ARGV[1] then
  redis.call('del', KEYS[3])
  redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
  return 1
end
return 0
"#,
);

/// Repairs a write lock, on one node, right after a quorum confirmed a renewal: `SET NX PX
/// remaining-validity` only if no reader is live there (and so, by `NX`, no other writer).
///
/// KEYS as [`READ_ACQUIRE`]. ARGV[1] holder value, ARGV[2] remaining validity in ms.
/// Returns 1 when it put the entry back, else 0.
pub(crate) static WRITE_REPAIR: LockScript = LockScript::new(
    "repair",
    concat!(
        rw_prelude!(),
        r#"
if redis.call('zcard', KEYS[2]) > 0 then
  return 0
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
"#
    ),
);

/// The opening of every fair lock script. KEYS[1] is the key (the holder's entry, as a
/// mutex's), KEYS[2] the line (waiter ids, scored by ticket), KEYS[3] the waiters' queue
/// leases (waiter id, scored by expiry in the node's ms), KEYS[4] what a release needs to hand
/// the key to a waiter (waiter id -> "ttl-ms claim-ms holder-value"), KEYS[5] the ticket
/// counter. A waiter is live while its queue lease runs and all three entries exist; the
/// prelude purges the rest first, so "the first live waiter" is the lowest ticket left (ties
/// broken by waiter id, the same way on every node). Helpers:
/// - `leave(w)` takes waiter `w` out of the line;
/// - `keep_line()` keeps the three keys and the ticket counter (KEYS[5]) until the latest
///   queue lease ends, and deletes them when nobody waits (nothing lingers; a counter is only
///   needed while someone is in line, see `acquire::draw_ticket`);
/// - `first_live()` the first waiter, dropping any whose entries are incomplete (a key of the
///   three lost alone, e.g. evicted);
/// - `grant(channel, by, sure)` hands the free key to the first waiter. A waiter in `sure` (the
///   releasing client's own waiters, which it hands the lock to itself, see `fair`) gets it
///   for its whole TTL. Any other waiter gets a **short grant**: the key for its claim window
///   (capped by its TTL and by what is left of its queue lease), and its place in line for
///   exactly as long, so that a waiter that does not claim in time (dead, frozen, cut off)
///   leaves both at once and the key passes to the next waiter (Redisson's fair lock grants a
///   dead waiter's turn for its whole lease instead). A claim is an attempt of the waiter's,
///   which finds its holder value on the key and extends it to its TTL. The grant announces
///   `grant:<waiter id>:<by>` (a full grant) or `grant:<waiter id>:<by>:<claim ms>:<next
///   waiter id>` (a short one: the next waiter's client tries at the end of the claim window,
///   which takes the key over if the grant lapsed) on the release channel. The next waiter
///   named is the first one behind of another client (a waiter id starts with its client's
///   tag): waiters of the client that did not claim are likely just as dead. `by` is the
///   digest of the holder value whose release (or withdrawal) freed the key, so that the
///   notices of two grants to one waiter are told apart. Returns the waiter and the TTL of
///   the grant in ms.
macro_rules! fair_prelude {
    () => {
        r#"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function leave(w)
  redis.call('zrem', KEYS[2], w)
  redis.call('zrem', KEYS[3], w)
  redis.call('hdel', KEYS[4], w)
end
for _, w in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now)) do
  leave(w)
end
local function keep_line()
  local last = redis.call('zrange', KEYS[3], -1, -1, 'WITHSCORES')
  if last[2] then
    for i = 2, 5 do
      redis.call('pexpireat', KEYS[i], last[2])
    end
  else
    redis.call('del', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  end
end
local function live(w)
  return redis.call('hget', KEYS[4], w) and redis.call('zscore', KEYS[3], w)
end
local function owns(w, holder)
  local entry = redis.call('hget', KEYS[4], w)
  return entry and string.sub(entry, -(#holder + 1)) == ' ' .. holder
end
local function first_live()
  while true do
    local first = redis.call('zrange', KEYS[2], 0, 0)[1]
    if not first then
      return nil, nil
    end
    local entry = redis.call('hget', KEYS[4], first)
    if entry and redis.call('zscore', KEYS[3], first) then
      return first, entry
    end
    leave(first)
  end
end
local function client_of(w)
  return string.match(w, '^([^.]*)%.') or w
end
local function next_live(after)
  local client = client_of(after)
  for _, w in ipairs(redis.call('zrange', KEYS[2], 1, 16)) do
    if client_of(w) ~= client and live(w) then
      return w
    end
  end
  return ''
end
local function grant(channel, by, sure)
  if redis.call('exists', KEYS[1]) == 1 then
    return nil, nil
  end
  local first, entry = first_live()
  if not first then
    return nil, nil
  end
  local ttl, claim, holder = string.match(entry, '^(%d+) (%d+) (.+)$')
  if not ttl then
    -- an entry written before claim windows existed: "ttl-ms holder-value"
    ttl, holder = string.match(entry, '^(%d+) (.+)$')
    claim = ttl
  end
  ttl = tonumber(ttl)
  if sure[first] then
    redis.call('set', KEYS[1], holder, 'PX', ttl)
    redis.call('publish', channel, 'grant:' .. first .. ':' .. by)
    return first, ttl
  end
  local left = tonumber(redis.call('zscore', KEYS[3], first)) - now
  local ms = math.max(1, math.min(ttl, tonumber(claim), left))
  redis.call('set', KEYS[1], holder, 'PX', ms)
  redis.call('zadd', KEYS[3], 'XX', now + ms, first)
  redis.call('publish', channel,
    'grant:' .. first .. ':' .. by .. ':' .. ms .. ':' .. next_live(first))
  return first, ms
end
"#
    };
}

/// Takes a fair lock, on one node.
///
/// - The key already holds this request's holder value (a release granted it, or an earlier
///   attempt of the request left it): `PEXPIRE` to the TTL from now, which the attempt's
///   start bounds from below, and yes. This is how a waiter claims a short grant.
/// - Without a ticket (a request's first attempt): yes only when the key is free and nobody
///   waits in line; `SET key holder PX ttl`. Refused, a request that will wait (ARGV[4] "?")
///   draws its ticket at once: the node's `INCR` of the ticket counter is the answer, and the
///   largest of a quorum of them is the ticket (as `INCR` alone would draw it, one round trip
///   sooner). The counter lives at least a queue lease from the draw (a waiter that dies
///   before it joins the line leaves no counter for ever).
/// - With a ticket: the node's ticket counter is raised to it (so that every later ticket,
///   drawn from a quorum that meets this attempt's, is larger), the waiter joins the line at
///   its ticket (or keeps its place) and renews its queue lease; yes when the key is free and
///   this waiter is the first live one.
///
/// A refusal that finds the key free grants it to the first live waiter (a short grant, as a
/// release would): the key is free without a release when the grant to the waiter before
/// lapsed or a holder's entry expired, and the next waiter's claim window must start then.
/// A refusal carries the key's remaining TTL (a short grant's lapse, or a holder's expiry),
/// after which the key may be free: the waiter tries again no later.
///
/// KEYS as the prelude. ARGV[1] holder value, ARGV[2] TTL in ms, ARGV[3] the request's waiter
/// id, ARGV[4] its ticket (empty: none, and none drawn; "?": none yet, drawn if refused),
/// ARGV[5] the queue lease in ms, ARGV[6] the claim window in ms, ARGV[7] the release
/// channel. Returns 1, or `{0, drawn ticket or 0, the key's PTTL}`.
pub(crate) static FAIR_ACQUIRE: LockScript = LockScript::new(
    "acquire",
    concat!(
        fair_prelude!(),
        r#"
local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
local function refuse(drawn)
  -- A free key whose first live waiter is someone else: that waiter's turn has come
  -- without a release to grant it (its predecessor's grant lapsed, or a holder's entry
  -- expired). Grant it now, so that its claim window starts, rather than leave the key free
  -- with nobody allowed to take it.
  if not current then
    grant(ARGV[7], redis.sha1hex(ARGV[1]), {})
  end
  return {0, drawn, redis.call('pttl', KEYS[1])}
end
if ARGV[4] == '' or ARGV[4] == '?' then
  if current or first_live() then
    if ARGV[4] == '?' then
      local n = redis.call('incr', KEYS[5])
      if redis.call('pttl', KEYS[5]) < tonumber(ARGV[5]) then
        redis.call('pexpire', KEYS[5], ARGV[5])
      end
      return refuse(n)
    end
    return refuse(0)
  end
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if tonumber(redis.call('get', KEYS[5]) or '0') < tonumber(ARGV[4]) then
  redis.call('set', KEYS[5], ARGV[4])
end
redis.call('zadd', KEYS[2], 'NX', ARGV[4], ARGV[3])
redis.call('zadd', KEYS[3], now + tonumber(ARGV[5]), ARGV[3])
redis.call('hset', KEYS[4], ARGV[3], ARGV[2] .. ' ' .. ARGV[6] .. ' ' .. ARGV[1])
keep_line()
if current or first_live() ~= ARGV[3] then
  return refuse(0)
end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"#
    ),
);

/// Releases a fair lock (and rolls back a failed attempt), on one node: compare-and-delete of
/// the key, as [`RELEASE`]; then the free key goes straight to the first live waiter
/// (`grant`), which is the hand-off. A release (mode "1") also takes the request out of the
/// line; a rollback (mode "2") leaves it there (the request still waits) and, where it deleted
/// the key, grants it to the first waiter, which may be the request itself: then the key goes
/// straight back to it (and its grant notice wakes it), rather than lie free with nobody
/// allowed to take it but a request that sleeps. Where a release grants nobody, the notice is
/// [`RELEASE`]'s; a rollback announces nothing but its grants (all attempts of a request
/// share its holder value, so their rollbacks' notices would add up as one release's).
///
/// KEYS as [`FAIR_ACQUIRE`]'s. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the
/// notice mode, ARGV[4] the request's waiter id, ARGV[5...] the waiters the releasing client
/// hands the lock to itself (full grants, see the prelude). A release takes the request out
/// of the line only when it held the key or the line's entry has its holder value (a release
/// by a made-up token naming a waiter, whose id is public, takes nobody out). Returns 1 when
/// the key was deleted, else 0; as `{1 or 0, waiter id, grant ms}` when the key went to that
/// waiter.
pub(crate) static FAIR_RELEASE: LockScript = LockScript::new(
    "release",
    concat!(
        fair_prelude!(),
        r#"
local held = redis.call('get', KEYS[1]) == ARGV[1]
if held then
  redis.call('del', KEYS[1])
end
if ARGV[3] == '1' and (held or owns(ARGV[4], ARGV[1])) then
  leave(ARGV[4])
end
local sure = {}
for i = 5, #ARGV do
  sure[ARGV[i]] = true
end
local granted, ms = nil, nil
if held or ARGV[3] == '1' then
  granted, ms = grant(ARGV[2], redis.sha1hex(ARGV[1]), sure)
end
keep_line()
local answer = 0
if held then
  answer = 1
end
if granted then
  return {answer, granted, ms}
end
if ARGV[3] == '1' and (held or redis.call('exists', KEYS[1]) == 0) then
  redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
end
return answer
"#
    ),
);

/// Withdraws a fair lock's waiter, on one node, when its request gives up: leaves the line,
/// deletes the key if a release had granted it to this request (nobody will claim it), and
/// then hands the key on as [`FAIR_RELEASE`] does (short grants only), or announces it free.
///
/// KEYS as [`FAIR_RELEASE`]. ARGV[1] the waiter id, ARGV[2] the request's holder value,
/// ARGV[3] release channel. Returns 1 when the key had been granted to the request, else 0.
pub(crate) static FAIR_WITHDRAW: LockScript = LockScript::new(
    "withdraw",
    concat!(
        fair_prelude!(),
        r#"
leave(ARGV[1])
local held = redis.call('get', KEYS[1]) == ARGV[2]
if held then
  redis.call('del', KEYS[1])
end
local granted = grant(ARGV[3], redis.sha1hex(ARGV[2]), {})
keep_line()
if held and not granted then
  redis.call('publish', ARGV[3], redis.sha1hex(ARGV[2]))
end
if held then
  return 1
end
return 0
"#
    ),
);

/// Draws a fair lock's ticket, on one node, in a round of its own (when fewer than a quorum
/// of nodes drew it with the request's first attempt, see [`FAIR_ACQUIRE`]): `INCR` of the
/// ticket counter, which then lives at least a queue lease (a waiter that dies before it
/// joins the line leaves no counter for ever; the line's own scripts keep it as long as the
/// line and delete it with it).
///
/// KEYS[1] the ticket counter. ARGV[1] the queue lease in ms. Returns the new value.
pub(crate) static TICKET_DRAW: LockScript = LockScript::new(
    "ticket",
    r#"
local n = redis.call('incr', KEYS[1])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return n
"#,
);

/// Every script, for loading on connect.
pub(crate) static ALL_SCRIPTS: [&LockScript; 24] = [
    &FENCE_MAX,
    &RELEASE,
    &EXTEND,
    &SET_ACQUIRE,
    &SET_EXTEND,
    &SET_RELEASE,
    &SET_REPAIR,
    &SET_FENCE_INCR,
    &SET_FENCE_MAX,
    &PERMIT_ACQUIRE,
    &PERMIT_EXTEND,
    &PERMIT_RELEASE,
    &PERMIT_REPAIR,
    &READ_ACQUIRE,
    &READ_RELEASE,
    &READ_REPAIR,
    &WRITE_ACQUIRE,
    &WRITE_RELEASE,
    &WRITE_WITHDRAW,
    &WRITE_REPAIR,
    &FAIR_ACQUIRE,
    &FAIR_RELEASE,
    &FAIR_WITHDRAW,
    &TICKET_DRAW,
];

/// How a script call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendBy {
    /// EVALSHA (the script's hash), with EVAL fallback on NOSCRIPT.
    Sha,
    /// EVAL (the script's source): a rollback, which must not fail late with NOSCRIPT
    /// (ordering invariant 5).
    Eval,
}
