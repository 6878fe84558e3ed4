//! How a call is sent to the nodes: a Lua script with its SHA1 ([`LockScript`]), and one call
//! packed once and shared by the requests of every node ([`Call`]), with its EVAL and re-send
//! forms. What each kind of lock sends, and its Lua, are the lock family's (`family`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use redis::Cmd;

use crate::rules::progress::Progress;

/// A script with its SHA1, loaded on every node connection. Its Lua is written with comments
/// (`family/lua/*.lua`); what is loaded, hashed and sent is the same without its comment lines
/// (a rollback sends the whole source every time).
pub(crate) struct LockScript {
    name: &'static str,
    commented: &'static str,
    source: OnceLock<String>,
    hash: OnceLock<String>,
}

impl LockScript {
    pub(crate) const fn new(name: &'static str, commented: &'static str) -> Self {
        LockScript {
            name,
            commented,
            source: OnceLock::new(),
            hash: OnceLock::new(),
        }
    }

    /// For logs and metrics.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    pub(crate) fn hash(&self) -> &str {
        self.hash
            .get_or_init(|| redis::Script::new(self.source()).get_hash().to_string())
    }

    /// The Lua as sent: without its comment lines.
    pub(crate) fn source(&self) -> &str {
        self.source.get_or_init(|| {
            self.commented
                .lines()
                .filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty())
                .fold(String::with_capacity(self.commented.len()), |mut s, l| {
                    s.push_str(l);
                    s.push('\n');
                    s
                })
        })
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
    /// What a native command is re-sent as after its connection dropped (see
    /// [`resend`](Self::resend)).
    resend_as: Option<&'static LockScript>,
    command: Cmd,
    /// Which nodes' requests hold their place on their connection, and whether the caller
    /// told the rest to stop (see [`Progress`]).
    pub(crate) progress: Progress,
    /// The call's time ran out: the requests dropped from now on timed out (for metrics).
    expired: AtomicBool,
    /// Bit `i`: node `i`'s request of a fan-out was polled (see
    /// [`FanOut`](crate::fanout::FanOut)).
    polled: AtomicU64,
    /// A vote (an acquire's, an extend's) counts only once the node made it durable
    /// (`WAITAOF`, see `rules::durable`).
    durable: Option<crate::rules::durable::DurableVotes>,
}

/// The most nodes a client may have: [`Progress`](crate::rules::progress::Progress) keeps one bit per
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
            name: script.name(),
            verb: "EVALSHA",
            script: Some(script),
            resend_as: None,
            command: evalsha,
            progress: Progress::default(),
            expired: AtomicBool::new(false),
            polled: AtomicU64::new(0),
            durable: None,
        }
    }

    /// `SET key holder NX PX ms`: takes a free key (RedLock's acquire, and the watchdog's
    /// repair). Answers OK, or nil when the key exists. Re-sent after a dropped connection as
    /// `resend_as` (a script taking the same KEYS[1], ARGV[1] holder and ARGV[2] ms), which
    /// must count this holder's own entry as taken.
    pub(crate) fn set_if_absent(
        name: &'static str,
        key: &[u8],
        holder: &[u8],
        ms: &[u8],
        resend_as: &'static LockScript,
    ) -> Call {
        let mut set = command("SET", 5, key.len() + holder.len() + "NXPX".len() + ms.len());
        set.arg(key).arg(holder).arg("NX").arg("PX").arg(ms);
        Call {
            name,
            verb: "SET",
            script: None,
            resend_as: Some(resend_as),
            command: set,
            progress: Progress::default(),
            expired: AtomicBool::new(false),
            polled: AtomicU64::new(0),
            durable: None,
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
            resend_as: None,
            command: incr,
            progress: Progress::default(),
            expired: AtomicBool::new(false),
            polled: AtomicU64::new(0),
            durable: None,
        }
    }

    /// `WAITAOF numlocal numreplicas timeout`: how many local AOF fsyncs (0 or 1) and
    /// replicas' acknowledge every write of the connection so far.
    pub(crate) fn wait_aof(local: u32, replicas: u32, timeout_ms: u64) -> Call {
        let mut wait = redis::cmd("WAITAOF");
        wait.arg(local).arg(replicas).arg(timeout_ms.max(1));
        Call {
            name: "waitaof",
            verb: "WAITAOF",
            script: None,
            resend_as: None,
            command: wait,
            progress: Progress::default(),
            expired: AtomicBool::new(false),
            polled: AtomicU64::new(0),
            durable: None,
        }
    }

    /// The call whose votes count only once durable, with `durable`.
    pub(crate) fn durable(mut self, durable: Option<crate::rules::durable::DurableVotes>) -> Call {
        self.durable = durable;
        self
    }

    /// See [`durable`](Self::durable).
    pub(crate) fn durability(&self) -> Option<crate::rules::durable::DurableVotes> {
        self.durable
    }

    /// The call's first key: on a cluster node, the request goes to the primary serving its
    /// slot (every key of one call is in one slot, docs/DESIGN.md "Cluster nodes").
    pub(crate) fn route(&self) -> Option<&[u8]> {
        let at = match self.verb {
            "EVALSHA" => 3,
            _ => 1,
        };
        match self.command.args_iter().nth(at)? {
            redis::Arg::Simple(key) => Some(key),
            _ => None,
        }
    }

    /// Marks the call's time as run out: its requests dropped from now on timed out.
    pub(crate) fn expire(&self) {
        self.expired.store(true, Ordering::Relaxed);
    }

    /// Set once the call's time ran out (see [`expire`](Self::expire)).
    pub(crate) fn expired(&self) -> &AtomicBool {
        &self.expired
    }

    /// Node `index`'s request of a fan-out is being polled for the first time.
    pub(crate) fn mark_polled(&self, index: usize) {
        self.polled.fetch_or(1 << index, Ordering::Relaxed);
    }

    /// Bit `i`: node `i`'s request was polled.
    pub(crate) fn polled(&self) -> u64 {
        self.polled.load(Ordering::Relaxed)
    }

    /// The Redis command sent first, for spans (`db.operation.name`).
    pub(crate) fn verb(&self) -> &'static str {
        self.verb
    }

    /// What is sent first: EVALSHA for a script, else the native command.
    pub(crate) fn command(&self) -> &Cmd {
        &self.command
    }

    /// Whether the call is a compare-and-delete (a release, a rollback, which sends the
    /// release, or a withdrawal), which may follow a cluster's `MOVED` or `ASK` once: every
    /// effect it has is conditioned on this holder's own entry (docs/DESIGN.md, "Cluster
    /// nodes"). An acquire or an extend never follows one.
    pub(crate) fn follows_redirect(&self) -> bool {
        self.script.is_some() && matches!(self.name, "release" | "withdraw")
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
    /// find this holder's own entry and refuse; it is re-sent as its `resend_as` script (the
    /// mutex's `acquire_own.lua`, by plain EVAL, so that it cannot answer NOSCRIPT), which
    /// counts the holder's own entry as taken. Every script is safe to repeat as it is (see
    /// `Node::on_connection`).
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
        match (args.as_slice(), self.resend_as) {
            ([_set, key, holder, _nx, _px, ms], Some(script)) => {
                let mut eval = redis::cmd("EVAL");
                eval.arg(script.source())
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
    eval.arg(script.source());
    for arg in args {
        if let redis::Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    eval
}

/// How a script call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendBy {
    /// EVALSHA (the script's hash), with EVAL fallback on NOSCRIPT.
    Sha,
    /// EVAL (the script's source): a rollback, which must not fail late with NOSCRIPT
    /// (ordering invariant 5).
    Eval,
}
