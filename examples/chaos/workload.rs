//! The chaos run's clients: each one a separate service instance (its own `QuorumLock`s, its
//! own OS thread and current-thread runtime, so that the nemesis can freeze it as a stalled
//! process), running a seeded random program over the public API until told to stop, and
//! writing every call to the history.
//!
//! Every other client is built with a `lock_delay` of 300 ms. A program is a series of holds. Each takes a random kind (mutex, multi-key, fair, read,
//! write, a semaphore of one permit, of two (counted under `Quorum::All`, or as two slots under
//! the run's quorum), a mutex through a reentrant
//! owner) by a random path (`try_acquire` or a waiting acquire; a fixed TTL or the watchdog,
//! with or without `max_hold`; fenced mostly), sometimes cancelled; while held, it does
//! fenced read-modify-writes of an unguarded register, extends (sometimes cancelled),
//! holder-value calls through the same client (extend, release: any key of a multi-key
//! guard), nested holds of the reentrant owner; and it ends with a release (sometimes
//! cancelled), a drop, or a hand-off of the holder value to another client (another
//! `QuorumLock`, as another service), which extends and releases it by holder value or lets
//! it expire. After some holds another client retries a call with the ended hold's holder
//! value (extend or release by holder value: it must be refused, whoever holds the key now).
//!
//! Elections are a kind too: a campaign (waiting or not, sometimes cancelled) whose
//! leadership is then held as its lock (its term the fencing token); now and then a client
//! reads the election's leader, which the checker matches against the campaigns. And now and
//! then a client breaks a key (`break_lock`, an operator's act): its holders must lose it
//! without anyone else holding it before their deadlines (the exclusion check).
//!
//! Every third hold (of any kind but a reentrant owner's or a leader's) carries a label, its
//! guard (`g<guard>`), and now and then a client reads who holds one of the keys
//! (`holder_of`); the checker matches each label shown against the labelled holds.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorum_lock::{Error, LockGuard, LockRequest, Quorum, QuorumLock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::history::{instant_nanos, Recorder};

/// Fenced read of a register: refused when a larger token was seen; otherwise the token is
/// remembered (so that an older holder's later write is refused) and the value returned.
const FENCED_READ: &str = r#"
local seen = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[1]) < seen then return {0, ''} end
redis.call('set', KEYS[2], ARGV[1])
return {1, redis.call('get', KEYS[1]) or '0'}
"#;

/// Fenced write of a register, as the read.
const FENCED_WRITE: &str = r#"
local seen = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[1]) < seen then return 0 end
redis.call('set', KEYS[2], ARGV[1])
redis.call('set', KEYS[1], ARGV[2])
return 1
"#;

/// What every client of a run shares.
#[derive(Clone)]
pub struct Settings {
    pub nodes: Vec<String>,
    pub quorum: Quorum,
    pub register: String,
    /// Every key of the run starts with it (a hash tag: one slot on cluster nodes).
    pub prefix: String,
    pub node_timeout: Duration,
    /// The kinds the programs draw from, by name (`None`: all; a shrunk program's).
    pub kinds: Option<Vec<String>>,
    /// Every client with durable votes (`DurableVotes::Local`).
    pub durable: bool,
}

/// Every kind's name, as `--kinds` takes them.
pub const KIND_NAMES: [&str; 9] = [
    "mutex",
    "multi-key",
    "fair",
    "read",
    "write",
    "semaphore-1",
    "semaphore-2",
    "reentrant",
    "election",
];

/// What the nemesis tells the clients.
#[derive(Default)]
pub struct Control {
    pub stop: AtomicBool,
    /// Per client: freeze for this many ms at the next freeze point (0: no freeze asked).
    pub freeze: Vec<AtomicU64>,
    /// Fault numbers, shared with the nemesis.
    pub fault_ids: AtomicU64,
    /// Clients that stopped their programs and wait for `release` to end (so that the leak
    /// scan sees live, idle clients).
    pub idle: AtomicUsize,
    pub release: AtomicBool,
    /// Raised at the start of each quiet stretch of the schedule: every client's next hold
    /// waits in the fair lock's line (a line the checker can judge the order of).
    pub line: AtomicU64,
}

impl Control {
    pub fn new(clients: usize) -> Control {
        Control {
            freeze: (0..clients).map(|_| AtomicU64::new(0)).collect(),
            ..Control::default()
        }
    }
}

/// What a client did, for the progress line and the summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub calls: u64,
    pub holds: u64,
    pub failed: u64,
    /// Fair locks held from the grant notices of a quorum (`Stats::noticed`).
    pub noticed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mutex,
    Multi,
    Fair,
    Read,
    Write,
    Permit1,
    Permits2,
    Reentrant,
    Leader,
}

const KINDS: [(Kind, u32); 9] = [
    (Kind::Mutex, 25),
    (Kind::Multi, 12),
    (Kind::Fair, 16),
    (Kind::Read, 10),
    (Kind::Write, 10),
    (Kind::Permit1, 10),
    (Kind::Permits2, 8),
    (Kind::Reentrant, 13),
    (Kind::Leader, 10),
];

impl Kind {
    /// A kind drawn by weight among `allowed` (by name; `None`: all).
    fn draw_among(rng: &mut StdRng, allowed: Option<&[String]>) -> Kind {
        let allowed = |k: &Kind| allowed.is_none_or(|a| a.iter().any(|n| n == k.name()));
        loop {
            let kind = Kind::draw(rng);
            // A filter that names no kind is refused at the command line.
            if allowed(&kind) {
                return kind;
            }
        }
    }

    fn draw(rng: &mut StdRng) -> Kind {
        let total: u32 = KINDS.iter().map(|(_, w)| w).sum();
        let mut pick = rng.random_range(0..total);
        for (kind, weight) in KINDS {
            if pick < weight {
                return kind;
            }
            pick -= weight;
        }
        Kind::Mutex
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Multi => "multi-key",
            Kind::Fair => "fair",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Permit1 => "semaphore-1",
            Kind::Permits2 => "semaphore-2",
            Kind::Reentrant => "reentrant",
            Kind::Leader => "election",
        }
    }

    /// How the hold shares its key (the checker's words).
    fn hold(self) -> &'static str {
        match self {
            Kind::Read => "r",
            Kind::Permit1 => "p1",
            Kind::Permits2 => "p2",
            _ => "x",
        }
    }

    /// Its keys: mutexes, reentrant mutexes and multi-key sets share one group of keys; each
    /// other kind has its own.
    fn keys(self, prefix: &str, rng: &mut StdRng) -> Vec<String> {
        let one = |group: &str, of: usize, rng: &mut StdRng| {
            format!("{prefix}{group}{}", rng.random_range(0..of))
        };
        match self {
            Kind::Mutex | Kind::Reentrant => vec![one("x", 3, rng)],
            Kind::Multi => {
                let a = rng.random_range(0..3);
                let b = (a + rng.random_range(1..3)) % 3;
                vec![format!("{prefix}x{a}"), format!("{prefix}x{b}")]
            }
            // One key: a line forms behind it, whose order the checker judges.
            Kind::Fair => vec![one("f", 1, rng)],
            Kind::Read | Kind::Write => vec![one("rw", 2, rng)],
            Kind::Permit1 => vec![one("s", 1, rng)],
            Kind::Permits2 => vec![one("s2-", 1, rng)],
            Kind::Leader => vec![one("e", 1, rng)],
        }
    }
}

/// The client's handles: its own `QuorumLock`s (the run's quorum, and `Quorum::All` for the
/// semaphore of two permits), and another client's (a separate service the holder value is
/// handed to).
struct Handles {
    locks: QuorumLock,
    all: QuorumLock,
    peer: QuorumLock,
    register: redis::aio::MultiplexedConnection,
}

/// One client's program state.
struct Client {
    index: u64,
    handles: Handles,
    rng: StdRng,
    /// The draws of the holder reads, apart from `rng`'s: adding them left every seed's
    /// program as it was.
    side: StdRng,
    recorder: Recorder,
    control: Arc<Control>,
    settings: Settings,
    next_op: u64,
    next_guard: u64,
    /// The last [`Control::line`] this client queued for.
    seen_line: u64,
    tally: Tally,
}

/// An error's name (its variant) for the history, with the numbers of nodes that failed to
/// answer and that refused, for `NoQuorum`.
fn describe(e: &Error) -> (String, usize, usize) {
    // Failures of availability only (timeouts, requests not sent, connections): a node's
    // error answer is not the fleet being unreachable.
    let (failures, refused) = match e {
        Error::NoQuorum {
            failures, refused, ..
        } => (
            failures
                .iter()
                .filter(|f| f.is_timeout() || f.is_connection())
                .count(),
            *refused,
        ),
        _ => (0, 0),
    };
    let debug = format!("{e:?}");
    let name = debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("Error")
        .to_string();
    (name, failures, refused)
}

/// Builds a client's handles (lazily: a node down at the start is checked once it answers).
async fn handles(settings: &Settings, lock_delay: Duration) -> Handles {
    let build = |quorum: Quorum, lock_delay: Duration| {
        let builder = QuorumLock::builder()
            .nodes(settings.nodes.clone())
            .quorum(quorum)
            .node_timeout(settings.node_timeout)
            .retry_delay(Duration::from_millis(5))
            .retry_jitter(Duration::from_millis(20))
            .lock_delay(lock_delay)
            .lazy(true);
        match settings.durable {
            true => builder.durable_votes(quorum_lock::DurableVotes::Local),
            false => builder,
        }
        .build()
    };
    let locks = build(settings.quorum, lock_delay)
        .await
        .expect("build a client");
    let all = build(Quorum::All, Duration::ZERO)
        .await
        .expect("build a client");
    let peer = build(settings.quorum, Duration::ZERO)
        .await
        .expect("build a client");
    let register = redis::Client::open(settings.register.as_str())
        .expect("register url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the register");
    Handles {
        locks,
        all,
        peer,
        register,
    }
}

/// Starts client `index` on a thread of its own; it runs until `control.stop`.
pub fn spawn(
    index: u64,
    seed: u64,
    settings: Settings,
    recorder: Recorder,
    control: Arc<Control>,
) -> std::thread::JoinHandle<Tally> {
    std::thread::Builder::new()
        .name(format!("chaos-client-{index}"))
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a client runtime");
            runtime.block_on(async move {
                // Every other client keeps a vanished holder's keys for a while past its
                // deadline (`lock_delay`).
                let lock_delay = match index % 2 {
                    1 => Duration::from_millis(300),
                    _ => Duration::ZERO,
                };
                let handles = handles(&settings, lock_delay).await;
                let mut client = Client {
                    index,
                    handles,
                    rng: StdRng::seed_from_u64(seed ^ (index.wrapping_mul(0x9e37_79b9_7f4a_7c15))),
                    side: StdRng::seed_from_u64(!seed ^ index.wrapping_mul(0x2545_f491_4f6c_dd1d)),
                    recorder,
                    control,
                    settings,
                    next_op: 0,
                    next_guard: index * 1_000_000,
                    seen_line: 0,
                    tally: Tally::default(),
                };
                while !client.control.stop.load(Ordering::Relaxed) {
                    client.hold_once().await;
                }
                client.handles.locks.finish_background().await;
                client.handles.peer.finish_background().await;
                client.handles.all.finish_background().await;
                client.tally.noticed = [
                    &client.handles.locks,
                    &client.handles.all,
                    &client.handles.peer,
                ]
                .iter()
                .map(|l| l.stats().noticed)
                .sum();
                client.control.idle.fetch_add(1, Ordering::Relaxed);
                while !client.control.release.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                client.tally
            })
        })
        .expect("spawn a client thread")
}

/// Runs `call` within a random cancellation point (sometimes none): `None` if cancelled.
async fn maybe_cancelled<F: std::future::Future>(rng: &mut StdRng, call: F) -> Option<F::Output> {
    match rng.random_bool(0.15) {
        true => tokio::time::timeout(cancel_point(rng), call).await.ok(),
        false => Some(call.await),
    }
}

/// When a cancelled call is cancelled: half of them within the round trip of a local node
/// (requests written, answers not read yet), the others anywhere in a slow call.
fn cancel_point(rng: &mut StdRng) -> Duration {
    match rng.random_bool(0.5) {
        true => Duration::from_micros(rng.random_range(0..1_500)),
        false => Duration::from_micros(rng.random_range(0..30_000)),
    }
}

/// How a call ended, for its completion line.
enum Outcome {
    Ok(Value),
    Fail(Value),
    Info(Value),
}

impl Client {
    fn invoke(&mut self, f: &str, mut value: Value) -> u64 {
        self.next_op += 1;
        value["n"] = json!(self.next_op);
        self.recorder.record("invoke", f, Some(self.index), value);
        self.tally.calls += 1;
        self.next_op
    }

    fn complete(&mut self, f: &str, n: u64, outcome: Outcome) {
        let (kind, mut value) = match outcome {
            Outcome::Ok(v) => ("ok", v),
            Outcome::Fail(v) => ("fail", v),
            Outcome::Info(v) => ("info", v),
        };
        if !value.is_object() {
            value = json!({});
        }
        value["n"] = json!(n);
        if kind != "ok" {
            self.tally.failed += 1;
        }
        self.recorder.record(kind, f, Some(self.index), value);
    }

    fn failed(guard: u64, e: &Error, all: bool) -> Outcome {
        Outcome::Fail(Self::failure(guard, e, all))
    }

    /// A call on a live guard, cancelled or not: its outcome, with the deadline the guard
    /// reports after it.
    fn on_guard<T>(g: u64, result: Option<Result<T, Error>>, deadline: u64) -> Outcome {
        match result {
            None => Outcome::Info(json!({"guard": g, "error": "cancelled", "deadline": deadline})),
            Some(Ok(_)) => Outcome::Ok(json!({"guard": g, "deadline": deadline})),
            Some(Err(e)) => {
                let mut v = Self::failure(g, &e, false);
                v["deadline"] = json!(deadline);
                Outcome::Fail(v)
            }
        }
    }

    /// A failed call's line: the error, and which nodes failed how.
    fn failure(guard: u64, e: &Error, all: bool) -> Value {
        let (name, failures, refused) = describe(e);
        // Which nodes failed, and how: a request the breaker kept back, or one that was
        // written (or tried) and failed.
        let nodes: Vec<Value> = e
            .node_failures()
            .iter()
            .map(|f| {
                let how = match f.unsent() {
                    Some(quorum_lock::Unsent::BreakerOpen) => "breaker",
                    Some(_) => "unsent",
                    None if f.is_timeout() => "timeout",
                    None => "failed",
                };
                json!({"node": f.index(), "how": how})
            })
            .collect();
        json!({
            "guard": guard,
            "error": name,
            "failures": failures,
            "refused": refused,
            "nodes": nodes,
            "all": all,
            "message": e.to_string(),
        })
    }

    /// A freeze the nemesis asked for: the client's thread stops (its runtime with it: no
    /// renewal, no answer read) for that long, as a stalled process would.
    fn freeze_point(&mut self) {
        let ms = self.control.freeze[self.index as usize].swap(0, Ordering::Relaxed);
        if ms == 0 {
            return;
        }
        let id = self.control.fault_ids.fetch_add(1, Ordering::Relaxed) + 1_000_000;
        let fault = json!({"id": id, "client": self.index, "what": "freeze", "ms": ms});
        let mut start = fault.clone();
        start["phase"] = json!("start");
        self.recorder.record("info", "fault", None, start);
        std::thread::sleep(Duration::from_millis(ms));
        let mut end = fault;
        end["phase"] = json!("end");
        self.recorder.record("info", "fault", None, end);
    }

    fn request<'a>(&self, kind: Kind, keys: &[String], locks: &'a QuorumLock) -> LockRequest<'a> {
        match kind {
            // (An election campaigns instead: see `hold_once`; its key is a mutex's.)
            Kind::Mutex | Kind::Reentrant | Kind::Leader => locks.lock(&keys[0]),
            Kind::Multi => locks.lock_all(keys),
            Kind::Fair => locks.fair_lock(&keys[0]),
            Kind::Read => locks.read_lock(&keys[0]),
            Kind::Write => locks.write_lock(&keys[0]),
            Kind::Permit1 => locks.semaphore(&keys[0], 1),
            Kind::Permits2 => locks.semaphore(&keys[0], 2).counted(),
        }
    }

    /// Reads the leader of the run's election key: the checker matches what it names
    /// (`g<guard>` and a term) against the campaigns.
    async fn read_leader(&mut self) {
        let key = format!("{}e0", self.settings.prefix);
        let n = self.invoke("leader", json!({ "key": key }));
        let election = self.handles.locks.election(&key);
        let outcome = match maybe_cancelled(&mut self.rng, election.leader()).await {
            None => Outcome::Info(json!({"error": "cancelled"})),
            Some(Ok(leader)) => Outcome::Ok(json!({
                "value": leader.as_ref().map(|l| l.value.clone()),
                "term": leader.as_ref().map(|l| l.term),
            })),
            Some(Err(e)) => Outcome::Fail(Self::failure(0, &e, false)),
        };
        self.complete("leader", n, outcome);
    }

    /// Reads who holds one of the run's keys (`holder_of`): the checker matches the labels
    /// it shows (`g<guard>`) against the labelled holds.
    async fn read_holders(&mut self) {
        let groups = ["x0", "x1", "x2", "f0", "rw0", "rw1", "s0", "s2-0"];
        let group = groups[self.side.random_range(0..groups.len())];
        self.read_holders_of(format!("{}{group}", self.settings.prefix))
            .await;
    }

    /// Reads who holds `key` (see [`Client::read_holders`]).
    async fn read_holders_of(&mut self, key: String) {
        let n = self.invoke("holders", json!({ "key": key }));
        let locks = self.handles.locks.clone();
        let outcome = match maybe_cancelled(&mut self.side, locks.holder_of(&key)).await {
            None => Outcome::Info(json!({"error": "cancelled"})),
            Some(Ok(held)) => {
                let labels: Vec<&str> = held
                    .iter()
                    .flat_map(|h| h.labels.iter().map(|l| l.label.as_str()))
                    .collect();
                let kind = held.as_ref().map(|h| format!("{:?}", h.kind));
                Outcome::Ok(json!({ "key": key, "kind": kind, "labels": labels }))
            }
            Some(Err(e)) => Outcome::Fail(Self::failure(0, &e, false)),
        };
        self.complete("holders", n, outcome);
    }

    /// Breaks a key of the mutexes, the election, a read-write lock or a semaphore (not the
    /// fair lock's: its order is judged).
    async fn break_some_key(&mut self) {
        let groups = ["x0", "x1", "x2", "e0", "rw0", "s0"];
        let key = format!(
            "{}{}",
            self.settings.prefix,
            groups[self.rng.random_range(0..groups.len())]
        );
        self.break_key(key).await;
    }

    /// Asks the holders of a key to release (nothing on the nodes changes: every check
    /// goes on as before).
    async fn ask_some_key(&mut self) {
        let groups = ["x0", "x1", "x2", "e0", "f0", "rw0", "s0"];
        let key = format!(
            "{}{}",
            self.settings.prefix,
            groups[self.rng.random_range(0..groups.len())]
        );
        let n = self.invoke("ask-release", json!({ "key": key }));
        let locks = self.handles.peer.clone();
        let outcome = match maybe_cancelled(&mut self.rng, locks.request_release(&key)).await {
            None => Outcome::Info(json!({"error": "cancelled"})),
            Some(Ok(asked)) => Outcome::Ok(json!({ "asked": asked })),
            Some(Err(e)) => Outcome::Fail(Self::failure(0, &e, false)),
        };
        self.complete("ask-release", n, outcome);
    }

    /// Breaks `key` through another service's client.
    async fn break_key(&mut self, key: String) {
        let n = self.invoke("break", json!({ "key": key }));
        let locks = self.handles.peer.clone();
        let outcome = match maybe_cancelled(&mut self.rng, locks.break_lock(&key)).await {
            None => Outcome::Info(json!({"error": "cancelled"})),
            Some(Ok(broken)) => Outcome::Ok(json!({ "broken": broken })),
            Some(Err(e)) => Outcome::Fail(Self::failure(0, &e, false)),
        };
        self.complete("break", n, outcome);
    }

    /// One hold: take, hold (with the calls a holder makes), and end it.
    async fn hold_once(&mut self) {
        if self.rng.random_bool(0.03) {
            self.break_some_key().await;
        }
        if self.rng.random_bool(0.03) {
            self.ask_some_key().await;
        }
        let elections = self
            .settings
            .kinds
            .as_ref()
            .is_none_or(|k| k.iter().any(|n| n == "election"));
        if elections && self.rng.random_bool(0.2) {
            self.read_leader().await;
        }
        if self.side.random_bool(0.3) {
            self.read_holders().await;
        }
        // A service is idle now and then: its connections go quiet (what a breaker that
        // counts only the answers its callers read gets wrong).
        let lining_up = self.control.line.load(Ordering::Relaxed) > self.seen_line;
        if !lining_up && self.rng.random_bool(0.25) {
            let idle = self.rng.random_range(0..1500);
            tokio::time::sleep(Duration::from_millis(idle)).await;
        }
        self.freeze_point();
        let line = self.control.line.load(Ordering::Relaxed);
        let fair_allowed = self
            .settings
            .kinds
            .as_ref()
            .is_none_or(|k| k.iter().any(|n| n == "fair"));
        let queue = line > self.seen_line && fair_allowed;
        self.seen_line = line;
        let kind = match queue {
            true => Kind::Fair,
            false => Kind::draw_among(&mut self.rng, self.settings.kinds.as_deref()),
        };
        let keys = kind.keys(&self.settings.prefix, &mut self.rng);
        // The semaphore of two permits: counted under every node, or (half the time, drawn
        // apart from the program) two slots under the run's quorum. The checker counts the
        // holders of its key either way.
        let slots = kind == Kind::Permits2 && self.side.random_bool(0.5);
        let all = kind == Kind::Permits2 && !slots;
        // A key of its own: the two forms do not see each other's holders.
        let keys = match slots {
            true => vec![format!("{}sl0", self.settings.prefix)],
            false => keys,
        };
        // A leader always has its term.
        let fenced = kind == Kind::Leader || self.rng.random_bool(0.9);
        let watchdog = self.rng.random_bool(0.4);
        let lease = Duration::from_millis(self.rng.random_range(600..2000));
        let waiting = queue || self.rng.random_bool(0.5);
        // A fair lock's waiters wait longer: a line forms, and its order can be judged.
        let wait = match kind {
            Kind::Fair => Duration::from_millis(self.rng.random_range(2000..5000)),
            _ => Duration::from_millis(self.rng.random_range(100..1500)),
        };
        let max_hold = (watchdog && self.rng.random_bool(0.3))
            .then(|| lease.mul_f64(self.rng.random_range(0.5..2.5)));
        let cancel_after = self
            .rng
            .random_bool(0.15)
            .then(|| cancel_point(&mut self.rng));
        self.next_guard += 1;
        let g = self.next_guard;
        let owner = (kind == Kind::Reentrant).then(|| self.handles.locks.owner());
        let locks = if all {
            self.handles.all.clone()
        } else {
            self.handles.locks.clone()
        };
        let mut request = match &owner {
            Some(owner) => owner.lock(&keys[0]),
            None if slots => locks.semaphore(&keys[0], 2),
            None => self.request(kind, &keys, &locks),
        };
        request = request.fencing(fenced).wait(wait);
        request = match watchdog {
            true => request.watchdog(lease),
            false => request.ttl(lease),
        };
        if let Some(max) = max_hold {
            request = request.max_hold(max);
        }
        // Every third hold is labelled with its guard (not a reentrant owner's, whose first
        // label stays while any of its guards holds, nor a leader's, whose value is its own):
        // decided by the guard number, so that no draw of the program moves.
        let labelled = g.is_multiple_of(3) && !matches!(kind, Kind::Reentrant | Kind::Leader);
        if labelled {
            request = request.label(format!("g{g}"));
        }
        let n = self.invoke(
            "acquire",
            json!({
                "guard": g, "keys": keys, "kind": kind.name(), "hold": kind.hold(),
                "mode": if waiting { "wait" } else { "try" }, "watchdog": watchdog,
                "wait_ms": wait.as_millis() as u64,
                "lease_ms": lease.as_millis() as u64, "fenced": fenced, "all": all,
                "labelled": labelled, "slots": slots,
            }),
        );
        let election = (kind == Kind::Leader).then(|| {
            let wait = if waiting { wait } else { Duration::ZERO };
            locks.election(&keys[0]).lease(lease).wait(wait)
        });
        let value = format!("g{g}");
        let acquire = async {
            match (&election, waiting) {
                // Its leadership is held as its lock from here on.
                (Some(election), _) => match election.campaign(value.as_str()).await {
                    Ok(leading) => Ok(Some(leading.into_guard())),
                    Err(e) if e.is_wait_timeout() && !waiting => Ok(None),
                    Err(e) => Err(e),
                },
                (None, true) => request.acquire().await.map(Some),
                (None, false) => request.try_acquire().await,
            }
        };
        let result = match cancel_after {
            Some(after) => tokio::time::timeout(after, acquire).await.ok(),
            None => Some(acquire.await),
        };
        let failed = matches!(result, Some(Err(_)));
        let Some(guard) = self.acquired(g, n, result, all) else {
            if failed {
                tokio::time::sleep(Duration::from_millis(self.rng.random_range(0..20))).await;
            }
            return;
        };
        // Who holds it now, as another service would ask.
        if self.side.random_bool(0.3) {
            self.read_holders_of(keys[0].clone()).await;
        }
        let exclusive = matches!(kind.hold(), "x" | "p1");
        let steps = self.rng.random_range(0..6);
        for _ in 0..steps {
            match self.rng.random_range(0..20) {
                0..=7 if exclusive && guard.fencing_token().is_some() => {
                    self.critical_section(g, &guard).await
                }
                8 | 9 => self.extend(g, &guard).await,
                10 | 11 => self.extend_by_holder(g, &guard, &locks).await,
                // The guard must stop saying held: the program goes on as a holder would,
                // trusting what the guard says (the critical section checks it first).
                12 | 13 => {
                    self.release_by_holder(g, &guard, &locks).await;
                    let pause = self.rng.random_range(0..lease.as_millis() as u64 / 2);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    if exclusive && guard.fencing_token().is_some() {
                        self.critical_section(g, &guard).await;
                    }
                }
                14 => {
                    if let Some(owner) = &owner {
                        self.reenter(g, &guard, owner).await;
                    }
                }
                // A leader (or any client meanwhile) reads who leads.
                15 | 16 if kind == Kind::Leader => self.read_leader().await,
                // An operator breaks the key under its holder, who goes on until it learns;
                // and someone tries to take it at once (it must be refused until the broken
                // entries expire).
                17 if matches!(kind, Kind::Mutex | Kind::Leader) => {
                    self.break_key(keys[0].clone()).await;
                    if let Some((g2, again)) = self.hold_again(Kind::Mutex, &keys[0]).await {
                        if exclusive && guard.fencing_token().is_some() {
                            self.critical_section(g, &guard).await;
                        }
                        self.release_uncancelled(g2, again).await;
                    }
                }
                _ => {
                    let pause = self.rng.random_range(0..lease.as_millis() as u64 / 4);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
            }
        }
        // A fair lock is held a while longer: the waiters behind it form a line.
        if kind == Kind::Fair {
            let pause = self.rng.random_range(200..800);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        // A service that retries a call with a holder value it kept: mostly after another
        // client took the key (the call must be refused, never extend or release that one).
        let stale = matches!(
            kind,
            Kind::Mutex | Kind::Fair | Kind::Reentrant | Kind::Multi | Kind::Leader
        ) && self.rng.random_bool(0.3);
        let kept = stale.then(|| (self.some_key(&guard), guard.holder().to_string()));
        self.end(g, guard).await;
        if let Some((key, holder)) = kept {
            // Half the time this client takes the key again first (a single-key hold of the
            // same kind), so that the stale value meets a live lock of another holder.
            let again = match self.rng.random_bool(0.5) {
                true => self.hold_again(kind, &key).await,
                false => None,
            };
            self.stale_call(g, key, holder).await;
            if let Some((g, guard)) = again {
                self.release_uncancelled(g, guard).await;
            }
        }
    }

    /// A release, recorded, never cancelled.
    async fn release_uncancelled(&mut self, g: u64, guard: LockGuard) {
        let n = self.invoke(
            "release",
            json!({"guard": g, "deadline": Self::deadline(&guard)}),
        );
        let outcome = match guard.release().await {
            Ok(()) => Outcome::Ok(json!({"guard": g})),
            Err(e) => Self::failed(g, &e, false),
        };
        self.complete("release", n, outcome);
    }

    /// A short `try_acquire` of `key` alone, recorded as a hold of its own.
    async fn hold_again(&mut self, kind: Kind, key: &str) -> Option<(u64, LockGuard)> {
        let kind = match kind {
            Kind::Fair => Kind::Fair,
            _ => Kind::Mutex,
        };
        self.next_guard += 1;
        let g = self.next_guard;
        let lease = Duration::from_millis(self.rng.random_range(600..1500));
        let n = self.invoke(
            "acquire",
            json!({
                "guard": g, "keys": [key], "kind": kind.name(), "hold": kind.hold(),
                "mode": "try", "watchdog": false, "lease_ms": lease.as_millis() as u64,
                "fenced": false, "all": false,
            }),
        );
        let locks = self.handles.locks.clone();
        let keys = [key.to_string()];
        let result = self
            .request(kind, &keys, &locks)
            .ttl(lease)
            .try_acquire()
            .await;
        Some((g, self.acquired(g, n, Some(result), false)?))
    }

    /// Completes acquire `n` of guard `g` (`None`: cancelled): ok with the guard's fencing
    /// token and deadline, busy, or failed; the guard when it was taken.
    fn acquired(
        &mut self,
        g: u64,
        n: u64,
        result: Option<Result<Option<LockGuard>, Error>>,
        all: bool,
    ) -> Option<LockGuard> {
        let outcome = match &result {
            None => Outcome::Info(json!({"guard": g, "error": "cancelled"})),
            Some(Ok(None)) => Outcome::Fail(json!({"guard": g, "error": "busy"})),
            Some(Err(e)) => Self::failed(g, e, all),
            Some(Ok(Some(guard))) => {
                self.tally.holds += 1;
                Outcome::Ok(json!({
                    "guard": g, "token": guard.fencing_token(), "deadline": Self::deadline(guard),
                }))
            }
        };
        self.complete("acquire", n, outcome);
        result?.ok()?
    }

    /// A call by a holder value whose hold has ended, from another client, after a while.
    async fn stale_call(&mut self, g: u64, key: String, holder: String) {
        let after = Duration::from_millis(self.rng.random_range(0..200));
        tokio::time::sleep(after).await;
        let ttl = Duration::from_millis(self.rng.random_range(500..2000));
        let extend = self.rng.random_bool(0.5);
        let f = if extend {
            "extend-by-holder"
        } else {
            "release-by-holder"
        };
        let n = self.invoke(
            f,
            // Given away, as a hand-off's: a hold handed off and left to expire may still
            // be live, and this release then ends it.
            json!({"guard": g, "key": key, "same_client": false, "handed_off": true,
                   "stale": true}),
        );
        let peer = &self.handles.peer;
        let started = tokio::time::Instant::now();
        let result = match extend {
            true => maybe_cancelled(&mut self.rng, peer.extend_by_holder(&key, &holder, ttl))
                .await
                .map(|r| r.map(Some)),
            false => maybe_cancelled(&mut self.rng, peer.release_by_holder(&key, &holder))
                .await
                .map(|r| r.map(|()| None)),
        };
        let mut outcome = match result {
            None => Outcome::Info(json!({"guard": g, "error": "cancelled"})),
            Some(Ok(validity)) => Outcome::Ok(match validity {
                Some(v) => json!({"guard": g, "deadline": instant_nanos(started + v)}),
                None => json!({"guard": g}),
            }),
            Some(Err(e)) => Self::failed(g, &e, false),
        };
        // An extend by the same holder value sets the lease to its TTL: a hold handed off and
        // left to expire may end sooner now (no later than the TTL from the call's start,
        // if it took effect at all). The checker keeps the earlier deadline.
        if let (true, Outcome::Info(v) | Outcome::Fail(v)) = (extend, &mut outcome) {
            v["deadline"] = json!(instant_nanos(started + ttl));
        }
        self.complete(f, n, outcome);
    }

    fn deadline(guard: &LockGuard) -> u64 {
        instant_nanos(guard.deadline())
    }

    /// A fenced read-modify-write of each key's register, while the guard says it holds.
    async fn critical_section(&mut self, g: u64, guard: &LockGuard) {
        let Some(token) = guard.fencing_token() else {
            return;
        };
        let keys: Vec<String> = guard
            .keys()
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        for key in keys {
            if !guard.is_held() {
                return;
            }
            let register = format!("register:{key}");
            let n = self.invoke(
                "read",
                json!({"guard": g, "register": register, "token": token, "deadline": Self::deadline(guard)}),
            );
            let read: redis::RedisResult<(i64, String)> = redis::Script::new(FENCED_READ)
                .key(&register)
                .key(format!("{register}:token"))
                .arg(token)
                .invoke_async(&mut self.handles.register)
                .await;
            let value = match read {
                Ok((1, v)) => {
                    self.complete("read", n, Outcome::Ok(json!({"guard": g, "value": v})));
                    v.parse::<u64>().unwrap_or(0)
                }
                Ok(_) => {
                    self.complete(
                        "read",
                        n,
                        Outcome::Fail(json!({"guard": g, "error": "fenced"})),
                    );
                    return;
                }
                Err(e) => {
                    let info = json!({"guard": g, "error": e.to_string()});
                    self.complete("read", n, Outcome::Info(info));
                    return;
                }
            };
            // A stall here is the case fencing exists for: the lease may run out before the
            // write, and a newer holder's read then fences it off.
            self.freeze_point();
            if self.rng.random_bool(0.3) {
                tokio::time::sleep(Duration::from_millis(self.rng.random_range(0..30))).await;
            }
            let next = (value + 1).to_string();
            let n = self.invoke(
                "write",
                json!({"guard": g, "register": register, "token": token, "value": next}),
            );
            let written: redis::RedisResult<i64> = redis::Script::new(FENCED_WRITE)
                .key(&register)
                .key(format!("{register}:token"))
                .arg(token)
                .arg(&next)
                .invoke_async(&mut self.handles.register)
                .await;
            let outcome = match written {
                Ok(w) => Outcome::Ok(json!({
                    "guard": g, "register": register, "token": token, "value": next, "written": w == 1,
                })),
                Err(e) => Outcome::Info(json!({"guard": g, "error": e.to_string()})),
            };
            self.complete("write", n, outcome);
        }
    }

    async fn extend(&mut self, g: u64, guard: &LockGuard) {
        let ttl = Duration::from_millis(self.rng.random_range(500..2000));
        let n = self.invoke(
            "extend",
            json!({"guard": g, "ttl_ms": ttl.as_millis() as u64}),
        );
        let result = maybe_cancelled(&mut self.rng, guard.extend(ttl)).await;
        let deadline = Self::deadline(guard);
        let outcome = Self::on_guard(g, result, deadline);
        self.complete("extend", n, outcome);
    }

    /// A random key of the guard (a multi-key guard's calls by holder value may name any).
    fn some_key(&mut self, guard: &LockGuard) -> String {
        let keys = guard.keys();
        let k = keys[self.rng.random_range(0..keys.len())];
        String::from_utf8_lossy(k).into_owned()
    }

    /// `extend_by_holder` through the guard's own client: it acts through the guard's lease.
    async fn extend_by_holder(&mut self, g: u64, guard: &LockGuard, locks: &QuorumLock) {
        let key = self.some_key(guard);
        let ttl = Duration::from_millis(self.rng.random_range(500..2000));
        let n = self.invoke(
            "extend-by-holder",
            json!({"guard": g, "key": key, "ttl_ms": ttl.as_millis() as u64, "same_client": true}),
        );
        let result = maybe_cancelled(
            &mut self.rng,
            locks.extend_by_holder(&key, guard.holder(), ttl),
        )
        .await;
        // The guard's own deadline is what it believes from now on.
        let deadline = Self::deadline(guard);
        let outcome = Self::on_guard(g, result, deadline);
        self.complete("extend-by-holder", n, outcome);
    }

    /// `release_by_holder` through the guard's own client: the guard must stop saying held.
    /// The hold goes on for as long as the guard says so (the checker reads its deadline).
    async fn release_by_holder(&mut self, g: u64, guard: &LockGuard, locks: &QuorumLock) {
        let key = self.some_key(guard);
        let n = self.invoke(
            "release-by-holder",
            json!({"guard": g, "key": key, "same_client": true, "handed_off": false}),
        );
        let result =
            maybe_cancelled(&mut self.rng, locks.release_by_holder(&key, guard.holder())).await;
        let deadline = Self::deadline(guard);
        let outcome = Self::on_guard(g, result, deadline);
        self.complete("release-by-holder", n, outcome);
    }

    /// A nested hold of the reentrant owner, given up again.
    async fn reenter(&mut self, g: u64, guard: &LockGuard, owner: &quorum_lock::Owner) {
        let key = self.some_key(guard);
        let ttl = Duration::from_millis(self.rng.random_range(600..2000));
        let n = self.invoke("reenter", json!({"guard": g, "key": key}));
        let nested = owner.try_acquire(&key, ttl).await;
        match nested {
            Ok(Some(inner)) => {
                let deadline = Self::deadline(guard);
                self.complete(
                    "reenter",
                    n,
                    Outcome::Ok(json!({"guard": g, "deadline": deadline})),
                );
                let _ = inner.release().await;
            }
            Ok(None) => self.complete(
                "reenter",
                n,
                Outcome::Fail(json!({"guard": g, "error": "busy"})),
            ),
            Err(e) => {
                let failed = Self::failed(g, &e, false);
                self.complete("reenter", n, failed);
            }
        }
    }

    /// Ends a hold: a release (sometimes cancelled), a drop, or a hand-off of the holder value
    /// to another client.
    async fn end(&mut self, g: u64, guard: LockGuard) {
        let deadline = Self::deadline(&guard);
        match self.rng.random_range(0..10) {
            0..=6 => {
                let n = self.invoke("release", json!({"guard": g, "deadline": deadline}));
                let outcome = match maybe_cancelled(&mut self.rng, guard.release()).await {
                    None => Outcome::Info(json!({"guard": g, "error": "cancelled"})),
                    Some(Ok(())) => Outcome::Ok(json!({"guard": g})),
                    Some(Err(e)) => Self::failed(g, &e, false),
                };
                self.complete("release", n, outcome);
            }
            7 => {
                let n = self.invoke("drop", json!({"guard": g, "deadline": deadline}));
                drop(guard);
                self.complete("drop", n, Outcome::Ok(json!({"guard": g})));
            }
            _ => self.hand_off(g, guard, deadline).await,
        }
    }

    /// Hands the holder value to another client (`into_holder`), which extends it and
    /// releases it by holder value, or lets it expire. Kinds that cannot be handed off
    /// (multi-key, permits, read-write) keep their guard and are released.
    async fn hand_off(&mut self, g: u64, guard: LockGuard, deadline: u64) {
        let n = self.invoke("handoff", json!({"guard": g, "deadline": deadline}));
        let key = String::from_utf8_lossy(guard.key()).into_owned();
        let holder = match guard.into_holder() {
            Ok(holder) => {
                self.complete("handoff", n, Outcome::Ok(json!({"guard": g})));
                holder
            }
            Err(guard) => {
                self.complete(
                    "handoff",
                    n,
                    Outcome::Fail(json!({"guard": g, "error": "kind"})),
                );
                self.release_uncancelled(g, guard).await;
                return;
            }
        };
        if self.rng.random_bool(0.5) {
            let ttl = Duration::from_millis(self.rng.random_range(500..2000));
            let n = self.invoke(
                "extend-by-holder",
                json!({"guard": g, "key": key, "ttl_ms": ttl.as_millis() as u64, "same_client": false}),
            );
            let started = tokio::time::Instant::now();
            let result = maybe_cancelled(
                &mut self.rng,
                self.handles.peer.extend_by_holder(&key, &holder, ttl),
            )
            .await;
            let outcome = match result {
                // The validity is measured from the call's start.
                Some(Ok(validity)) => Outcome::Ok(json!({
                    "guard": g, "deadline": instant_nanos(started + validity),
                })),
                // After a failure or a cancellation, trust it no longer than before, nor
                // longer than ttl from the call's start.
                None => Outcome::Info(json!({"guard": g, "error": "cancelled",
                    "deadline": deadline.min(instant_nanos(started + ttl))})),
                Some(Err(e)) => {
                    let mut v = Self::failure(g, &e, false);
                    v["deadline"] = json!(deadline.min(instant_nanos(started + ttl)));
                    Outcome::Fail(v)
                }
            };
            self.complete("extend-by-holder", n, outcome);
        }
        if self.rng.random_bool(0.8) {
            let n = self.invoke(
                "release-by-holder",
                json!({"guard": g, "key": key, "same_client": false, "handed_off": true}),
            );
            let outcome = match maybe_cancelled(
                &mut self.rng,
                self.handles.peer.release_by_holder(&key, &holder),
            )
            .await
            {
                None => Outcome::Info(json!({"guard": g, "error": "cancelled"})),
                Some(Ok(())) => Outcome::Ok(json!({"guard": g})),
                Some(Err(e)) => Self::failed(g, &e, false),
            };
            self.complete("release-by-holder", n, outcome);
        }
    }
}
