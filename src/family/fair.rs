//! The fair lock (docs/DESIGN.md, "Fair lock"): the lock is the mutex's entry; what is added
//! is the order in which waiting requests get it. On each node a line (waiter ids by ticket),
//! the waiters' queue leases and what a release needs to hand the key over, and a ticket
//! counter; a release grants the free key to the first waiter on the node itself.

use std::fmt;
use std::sync::Arc;

use redis::Value;

use super::{mutex, read_counter, read_flag, refs, script, Answer, Kind, Notice, Reader, Standing};
use crate::rules::config::Config;
use crate::rules::holder::Holder;
use crate::rules::key::{kept, Key};
use crate::scripts::{Call, LockScript};

/// A request for a fair lock: what its attempts, its place in line and a release's hand-off
/// to it share.
#[derive(Clone)]
pub(crate) struct Fair {
    pub(crate) key: Key,
    /// The request's id: its member in the line, named by the grant notices (not a secret).
    pub(crate) waiter: Arc<str>,
    /// The request's base, `fair:<waiter id>:<secret>`: its identity on the nodes. Each
    /// attempt sets the key to a value of its own under it ([`Holder::fair_attempt`]); a node
    /// that grants the key to the request sets `<base>:g`, which any attempt of the request
    /// claims (setting its own value), or, for a hand-off by the request's own client,
    /// [`Fair::handed_holder`]. A rollback deletes only its own attempt's value: one that
    /// lands late (its connection was replaced while it was on the way) cannot delete a later
    /// attempt's entry, a grant or a hand-off, and a late attempt claims neither a later
    /// attempt's entry nor a hand-off of its own round. A request cut off from a quorum takes
    /// a new base (see `take::fair`).
    pub(crate) base: Holder,
    /// The queue lease, in ms, as the scripts take it.
    pub(crate) queue_lease_ms: Arc<str>,
    /// The claim window, in ms: how long a short grant to this request lasts.
    pub(crate) claim_ms: Arc<str>,
}

static ACQUIRE: LockScript = script!("acquire": "fair_line.lua", "fair_acquire.lua");
static RELEASE: LockScript = script!("release": "fair_line.lua", "fair_release.lua");
static WITHDRAW: LockScript = script!("withdraw": "fair_line.lua", "fair_withdraw.lua");
pub(crate) static TICKET_DRAW: LockScript = script!("ticket": "ticket_draw.lua");

pub(super) static SCRIPTS: &[&LockScript] = &[&ACQUIRE, &RELEASE, &WITHDRAW, &TICKET_DRAW];

/// The line of `key`: waiter ids by ticket, their queue leases' expiries, and what a release
/// needs to hand the lock to each.
pub(crate) fn line_keys(key: &Key) -> [Vec<u8>; 3] {
    [
        key.derived(kept::LINE),
        key.derived(kept::LINE_LEASES),
        key.derived(kept::LINE_ENTRIES),
    ]
}

/// The ticket counter of `key`.
pub(crate) fn ticket_key(key: &Key) -> Vec<u8> {
    key.derived(kept::TICKETS)
}

/// The keys of every fair script: the key, its line and its ticket counter.
fn script_keys(key: &Key) -> Vec<Vec<u8>> {
    let mut keys = Vec::with_capacity(5);
    keys.push(key.bytes().to_vec());
    keys.extend(line_keys(key));
    keys.push(ticket_key(key));
    keys
}

impl Fair {
    /// A new request for `key`, with an identity of its own (see [`Holder::fair_base`]).
    pub(crate) fn new(key: Key, client_tag: &str, config: &Config) -> Fair {
        let (waiter, base) = Holder::fair_base(client_tag);
        Fair::with_identity(key, waiter, base, config)
    }

    /// What a call by holder value acts on when `holder` is a fair holder value: the request
    /// it names (so that a release leaves the line and hands the key on as the guard's would).
    pub(crate) fn of_holder(key: &Key, holder: &Holder, config: &Config) -> Option<Fair> {
        let (waiter, base) = holder.fair_base_of()?;
        Some(Fair::with_identity(key.clone(), waiter, base, config))
    }

    fn with_identity(key: Key, waiter: Arc<str>, base: Holder, config: &Config) -> Fair {
        Fair {
            key,
            waiter,
            base,
            queue_lease_ms: config.queue_lease.as_millis().to_string().into(),
            claim_ms: config.claim_window().as_millis().to_string().into(),
        }
    }

    /// The value a node sets the key to when its client's release hands the lock to the
    /// request, waiting after its attempt `round`: what the handed-over guard holds.
    ///
    /// Only an attempt of a later round claims it (the hand-off then never happened: a waiter
    /// handed the lock makes no further attempt). An attempt of round `round` or earlier that
    /// lands late (written on a connection since replaced) finds it held and changes nothing,
    /// so that its rollback, landing after it, cannot delete what the guard counts on.
    pub(crate) fn handed_holder(&self, round: u64) -> Holder {
        self.base.fair_handed(round)
    }

    /// A ticket drawn in a round of its own (`ticket_draw.lua`), read as a counter.
    pub(crate) fn draw(&self) -> (Call, Reader) {
        let call = Call::new(
            &TICKET_DRAW,
            &ticket_key(&self.key),
            &[self.queue_lease_ms.as_bytes()],
        );
        (call, read_counter)
    }
}

/// A fair acquire's reply: 1, or a refusal `{0, drawn ticket or 0, the key's PTTL}`: with a
/// ticket number drawn on a first attempt, or with the key's remaining TTL as a wake-up hint
/// (a short grant's lapse, or a holder's expiry).
pub(crate) fn read_drawn(v: &Value) -> Option<Answer> {
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(0), Value::Int(n), Value::Int(_)] if *n > 0 => Some(Answer::Drawn(*n)),
            [Value::Int(0), Value::Int(0), Value::Int(pttl)] => Some(Answer::Refused(
                u64::try_from(*pttl)
                    .ok()
                    .map(std::time::Duration::from_millis),
            )),
            _ => None,
        },
        _ => read_flag(v),
    }
}

/// A fair release's (and rollback's) reply: 1 / 0, or `{1 or 0, waiter id, grant ms}` when
/// the node handed the key to that waiter (see [`granted_to`]).
pub(crate) fn read_grant(v: &Value) -> Option<Answer> {
    match v {
        Value::Array(items) => match items.as_slice() {
            [flag, Value::BulkString(_), Value::Int(_)] => read_flag(flag),
            _ => None,
        },
        _ => read_flag(v),
    }
}

/// The waiter a fair release or rollback handed the key to on one node, and for how many ms,
/// if its reply says so.
pub(crate) fn granted_to(v: &Value) -> Option<(&[u8], i64)> {
    match v {
        Value::Array(items) => match items.as_slice() {
            [_, Value::BulkString(waiter), Value::Int(ms)] => Some((waiter, *ms)),
            _ => None,
        },
        _ => None,
    }
}

impl Kind for Fair {
    fn keys(&self) -> &[Key] {
        std::slice::from_ref(&self.key)
    }

    fn acquire(&self, holder: &str, ttl_ms: &str, standing: &Standing) -> (Call, Reader) {
        let ticket = match (standing.ticket, standing.draws) {
            (Some(t), _) => t.to_string(),
            (None, true) => "?".to_string(),
            (None, false) => String::new(),
        };
        let keys = script_keys(&self.key);
        let round = standing.round.to_string();
        let argv: [&[u8]; 8] = [
            holder.as_bytes(),
            ttl_ms.as_bytes(),
            self.waiter.as_bytes(),
            ticket.as_bytes(),
            self.queue_lease_ms.as_bytes(),
            self.claim_ms.as_bytes(),
            self.key.release_channel(),
            round.as_bytes(),
        ];
        (Call::with_keys(&ACQUIRE, &refs(&keys), &argv), read_drawn)
    }

    fn extend(&self, holder: &str, ttl_ms: &str) -> Call {
        mutex::extend_entry(&self.key, holder, ttl_ms)
    }

    fn release(&self, holder: &str, notice: Notice, sure: &[(Arc<str>, u64)]) -> (Call, Reader) {
        let rounds: Vec<String> = sure.iter().map(|(_, r)| r.to_string()).collect();
        let mut argv = vec![
            holder.as_bytes(),
            self.key.release_channel(),
            notice.arg(),
            self.waiter.as_bytes(),
        ];
        for ((w, _), r) in sure.iter().zip(&rounds) {
            argv.extend([w.as_bytes(), r.as_bytes()]);
        }
        let keys = script_keys(&self.key);
        (Call::with_keys(&RELEASE, &refs(&keys), &argv), read_grant)
    }

    fn repair(&self, holder: &str, ms: &str) -> (Call, fn(&Value) -> bool) {
        (
            mutex::set_if_absent("repair", &self.key, holder, ms),
            mutex::set_answered_ok,
        )
    }

    /// The waiter leaves the line when its request gives up.
    fn withdraw(&self) -> Option<Call> {
        let keys = script_keys(&self.key);
        Some(Call::with_keys(
            &WITHDRAW,
            &refs(&keys),
            &[
                self.waiter.as_bytes(),
                self.base.as_str().as_bytes(),
                self.key.release_channel(),
            ],
        ))
    }

    fn attempt_holder(&self) -> Option<Holder> {
        Some(self.base.fair_attempt())
    }

    fn keeps_a_place(&self) -> bool {
        true
    }

    fn by_holder(&self) -> bool {
        true
    }

    fn hands_off(&self) -> bool {
        true
    }

    /// A fair request waits for its rollback's answers from the nodes that answered its
    /// attempt yes, one of which may give the key straight back to it, first in line (see
    /// `lua/fair_release.lua`); not from the others (see `take::attempt::give_back`).
    fn waits_for_rollback(&self) -> bool {
        true
    }

    fn given_back(&self, answer: &Value) -> bool {
        granted_to(answer).is_some_and(|(w, _)| w == self.waiter.as_bytes())
    }
}

impl fmt::Display for Fair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (fair)", self.key)
    }
}
