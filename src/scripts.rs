//! The commands and Lua scripts run on every node. Each is atomic on its node; together with
//! the quorum rule they implement the RedLock steps. A lock is one string key whose value is
//! the holder value (fresh for every acquisition), with a TTL. Reentrancy is counted in the
//! client (see `owner`), so the nodes need no per-holder count (Redisson's hash layout): a
//! plain acquire is the native `SET key holder NX PX ttl`, no script at all.

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
            verb: "EVALSHA",
            script: Some(script),
            command: evalsha,
            progress: Progress::default(),
        }
    }

    /// `SET key holder NX PX ms`: takes a free key (RedLock's acquire, and the watchdog's
    /// repair). Answers OK, or nil when the key exists.
    pub(crate) fn set_if_absent(name: &'static str, key: &[u8], holder: &[u8], ms: &[u8]) -> Call {
        let mut set = redis::cmd("SET");
        set.arg(key).arg(holder).arg("NX").arg("PX").arg(ms);
        Call {
            name,
            verb: "SET",
            script: None,
            command: set,
            progress: Progress::default(),
        }
    }

    /// `INCR counter`: the next value of a fencing counter (which never expires). Answers the
    /// new value.
    pub(crate) fn increment(counter: &[u8]) -> Call {
        let mut incr = redis::cmd("INCR");
        incr.arg(counter);
        Call {
            name: "fence-incr",
            verb: "INCR",
            script: None,
            command: incr,
            progress: Progress::default(),
        }
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

/// Every script, for loading on connect.
pub(crate) static ALL_SCRIPTS: [&LockScript; 3] = [&FENCE_MAX, &RELEASE, &EXTEND];

/// How a script call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendBy {
    /// EVALSHA (the script's hash), with EVAL fallback on NOSCRIPT.
    Sha,
    /// EVAL (the script's source): a rollback, which must not fail late with NOSCRIPT
    /// (ordering invariant 5).
    Eval,
}
