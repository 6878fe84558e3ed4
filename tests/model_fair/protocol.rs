//! The model itself: the fair lock's steps as the library takes them, and its properties.

use super::*;

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

pub(super) struct Protocol {
    pub(super) cfg: Config,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    Pending,
    Reached,
    Impossible,
}

impl Protocol {
    pub(super) fn new(cfg: Config) -> Protocol {
        Protocol { cfg }
    }

    pub(super) fn n(&self) -> usize {
        self.cfg.nodes
    }

    pub(super) fn requests(&self) -> usize {
        self.cfg.plans.len()
    }

    pub(super) fn all(&self) -> u8 {
        ((1u16 << self.n()) - 1) as u8
    }

    pub(super) fn client(&self, r: usize) -> usize {
        usize::from(self.cfg.plans[r].client)
    }

    pub(super) fn ttl(&self, r: usize) -> u8 {
        self.cfg.plans[r].ttl
    }

    pub(super) fn see(&self, s: &mut State, path: u16) {
        s.seen |= path & self.cfg.cover;
    }

    /// `quorum::Tally::decision`.
    pub(super) fn decision(&self, fan: &Fan) -> Decision {
        let n = self.n() as u8;
        if ones(fan.yes) >= self.cfg.quorum {
            Decision::Reached
        } else if n - ones(fan.refused) - fan.failed < self.cfg.quorum {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }

    pub(super) fn conn<'a>(&self, s: &'a mut State, r: usize, n: usize) -> &'a mut Fifo {
        &mut s.conns[self.client(r) * MAX_N + n]
    }

    /// Writes `req` of request `r` onto its client's connections to the nodes of `mask`.
    pub(super) fn send(&self, s: &mut State, r: usize, mask: u8, req: Req) {
        for n in 0..self.n() {
            if mask & bit(n) != 0 {
                self.conn(s, r, n).push(req);
            }
        }
    }

    /// A new fan-out (or waited-for broadcast) of request `r` to `mask`.
    pub(super) fn fan_out(
        &self,
        s: &mut State,
        r: usize,
        mask: u8,
        kind: Kind,
        val: Val,
        arg: u16,
    ) {
        s.reqs[r].fan = Fan {
            pending: mask,
            ..Fan::default()
        };
        self.send(s, r, mask, Req::new(kind, r, val, arg, true));
    }

    /// Request `r`'s grant value, which also names its current identity (its base).
    pub(super) fn base(&self, s: &State, r: usize) -> Val {
        Val::grant(r, s.reqs[r].gen)
    }

    /// Request `r` stops waiting: its requests still queued run unanswered.
    pub(super) fn stop_waiting(&self, s: &mut State, r: usize) {
        s.reqs[r].fan.pending = 0;
        for n in 0..self.n() {
            self.conn(s, r, n).unwait(r);
        }
    }

    /// Request `r`'s slot leaves `Waiting` (it attempts, claims, holds or gives up): no
    /// release in flight may hand it the lock any more (its next `Waiting` has a later stamp).
    pub(super) fn leave_waiting(&self, s: &mut State, r: usize) {
        s.reqs[r].waiting = false;
        for q in &mut s.reqs {
            q.eligible &= !bit(r);
        }
    }

    // --- The node scripts --------------------------------------------------------------------

    /// The prelude's `grant(channel, by, sure)`: the key, if free, to the first live waiter:
    /// a waiter in `sure` gets its hand-off value `B:h<r>` (the round `r` sent with it, 4 bits
    /// per request in `rounds`) for its whole TTL; any other its grant value `B:g`, short.
    pub(super) fn grant(
        &self,
        node: &mut NodeState,
        sure: u16,
        rounds: u16,
        now: u8,
    ) -> Option<(usize, u8, u8)> {
        if node.key.is_some() && !self.cfg.has(Bug::GrantIgnoresKey) {
            return None;
        }
        let w = node.first_live()?;
        let ttl = self.ttl(w / GENS);
        let attempt_value = self.cfg.has(Bug::GrantSetsAttemptValue);
        let holder = if attempt_value {
            Val::attempt(w / GENS, (w % GENS) as u8, node.entry[w])
        } else {
            Val::granted_to(w)
        };
        if sure & slot_bit(w) != 0 {
            let round = (rounds >> (4 * (w / GENS)) & 15) as u8;
            let holder = if attempt_value {
                holder
            } else {
                Val::handed(w, round)
            };
            node.key = Some(Entry {
                holder,
                expiry: now + ttl,
            });
            return Some((w, ttl, now + ttl));
        }
        let left = node.lease[w] - now;
        let ms = ttl.min(self.cfg.claim).min(left).max(1);
        // The hand-off value of the round its entry records (only that round's later
        // attempts claim it), and a notice with that round and the node's time since that
        // attempt ran ("Grants held from their notices" in `fair_line.lua`).
        let holder = match attempt_value || self.cfg.has(Bug::NoticedGrantClaimable) {
            true => holder,
            false => Val::handed(w, node.round[w]),
        };
        node.key = Some(Entry {
            holder,
            expiry: now + ms,
        });
        node.lease[w] = now + ms;
        node.nr[w] = node.round[w];
        node.nd[w] = now - node.at[w];
        node.nms[w] = ms;
        Some((w, ms, now + ms))
    }

    /// Runs `req` on node `n`: its answer, and what it did (for the narration).
    pub(super) fn run(&self, s: &mut State, n: usize, req: Req) -> (Answer, String) {
        let now = s.now;
        let ql = self.cfg.queue_lease;
        let (r, val) = (req.r(), req.val());
        // The request's waiter id, of the identity the request was written with.
        let w = val.base();
        let ttl = self.ttl(r);
        let whole = |w: usize, ms: u8| ms == self.cfg.plans[w / GENS].ttl;
        let no = Answer {
            yes: false,
            value: 0,
            grant: None,
        };
        let yes = Answer { yes: true, ..no };
        let mut seen = 0;
        // A release's `sure` set goes with the round of each of its waiters.
        let rounds = s.reqs[r].sure_rounds;
        let node = &mut s.nodes[n];
        let (answer, effect) = match req.kind() {
            Kind::Acquire => {
                let (ticket, round) = ((req.arg() & 0xff) as u8, (req.arg() >> 8) as u8);
                let taken = Some(Entry {
                    holder: val,
                    expiry: now + ttl,
                });
                // Claimable: this attempt's own value (a re-sent attempt), the request's grant
                // value, or its hand-off value of an earlier round than this attempt's (the
                // hand-off did not happen, since it attempts again): set to this attempt's
                // value for its TTL. Anything else counts as held: another attempt's value
                // (its rollback may still land and delete whatever has its value), a hand-off
                // value of this round or a later one (a late attempt must not take over the
                // value a handed-over guard counts on, which its late rollback would delete).
                let overwrite = self.cfg.has(Bug::AcquireOverwritesOwnValues);
                let unfenced = self.cfg.has(Bug::HandOffWithoutRoundFence);
                let claimable = node.key.is_some_and(|e| {
                    let h = e.holder;
                    h == val
                        || h == Val::granted_to(w)
                        || h.base() == w && h.round().is_some_and(|hr| unfenced || hr < round)
                        || overwrite && h.base() == w
                });
                if claimable {
                    let found = node.key.unwrap();
                    if found.holder != val {
                        seen |= SEEN_CLAIMED;
                    }
                    let what = found.holder.describe();
                    if self.cfg.has(Bug::ClaimWithoutExtend) {
                        let expiry = found.expiry;
                        (yes, format!("{what} claimed, yes (left until {expiry})"))
                    } else {
                        node.key = taken;
                        (yes, format!("{what} claimed: SET until {}", now + ttl))
                    }
                } else if ticket == 0 {
                    if node.key.is_some() || node.first_live().is_some() {
                        let drawn = node.draw(now, ql);
                        let why = match node.key {
                            Some(e) => format!("key {}", e.holder.describe()),
                            None => "line not empty".to_string(),
                        };
                        // A refusal that finds the key free grants it (FAIR_ACQUIRE's
                        // `refuse`).
                        let grant = node
                            .key
                            .is_none()
                            .then(|| self.grant(node, 0, 0, now))
                            .flatten();
                        if grant.is_some() {
                            seen |= SEEN_SHORT_GRANT;
                        }
                        let granted = match grant {
                            Some(_) => format!(", {}", describe_grant(grant, whole)),
                            None => String::new(),
                        };
                        let answer = Answer { value: drawn, ..no };
                        let effect = format!("refused ({why}), draws ticket {drawn}{granted}");
                        (answer, effect)
                    } else {
                        node.key = taken;
                        (yes, format!("taken until {}", now + ttl))
                    }
                } else {
                    if node.counter_exp == 0 || node.counter < ticket {
                        node.counter = ticket;
                        node.counter_exp = u8::MAX;
                    }
                    if !node.in_line(w) {
                        node.line[w] = ticket;
                    }
                    node.lease[w] = now + ql;
                    node.round[w] = round;
                    node.at[w] = now;
                    if self.cfg.has(Bug::GrantSetsAttemptValue) {
                        node.entry[w] = val.k();
                    }
                    node.keep_line();
                    let place = node.line[w];
                    if let Some(e) = node.key {
                        let why = format!("key {} until {}", e.holder.describe(), e.expiry);
                        (no, format!("in line #{place}, refused ({why})"))
                    } else if node.first_live() != Some(w) {
                        let first = waiter_name(node.first_live().unwrap());
                        let grant = self.grant(node, 0, 0, now);
                        if grant.is_some() {
                            seen |= SEEN_SHORT_GRANT;
                        }
                        let granted = describe_grant(grant, whole);
                        let effect =
                            format!("in line #{place}, refused ({first} first), {granted}");
                        (no, effect)
                    } else {
                        node.key = taken;
                        (
                            yes,
                            format!("in line #{place}, first: taken until {}", now + ttl),
                        )
                    }
                }
            }
            Kind::Release | Kind::Rollback => {
                let release = req.kind() == Kind::Release;
                // A release deletes any of the request's values; a rollback only the value it
                // was given, exactly (its attempt's, or the hand-off value a claim gives back;
                // never the grant value, nor another attempt's).
                let held = if release || self.cfg.has(Bug::RollbackByBase) {
                    node.key_of(w)
                } else {
                    node.key.is_some_and(|e| e.holder == val)
                };
                if held {
                    node.key = None;
                }
                if release {
                    node.leave(w);
                }
                let sure = if release { req.arg() } else { 0 };
                let grant = if held || release {
                    self.grant(node, sure, rounds, now)
                } else {
                    None
                };
                node.keep_line();
                if let Some((g, ms, _)) = grant {
                    if !whole(g, ms) {
                        seen |= SEEN_SHORT_GRANT;
                    }
                    if !release && g == w {
                        seen |= SEEN_SELF_REGRANT;
                    }
                }
                let deleted = if held { "deleted" } else { "not held" };
                let answer = Answer {
                    yes: held,
                    value: 0,
                    grant: grant.filter(|_| release),
                };
                (
                    answer,
                    format!("{deleted}, {}", describe_grant(grant, whole)),
                )
            }
            Kind::Withdraw => {
                node.leave(w);
                let held = node.key_of(w);
                if held {
                    node.key = None;
                }
                let grant = self.grant(node, 0, 0, now);
                node.keep_line();
                if grant.is_some_and(|(g, ms, _)| !whole(g, ms)) {
                    seen |= SEEN_SHORT_GRANT;
                }
                let deleted = if held {
                    "its key deleted"
                } else {
                    "left the line"
                };
                (yes, format!("{deleted}, {}", describe_grant(grant, whole)))
            }
            Kind::Draw => {
                let drawn = node.draw(now, ql);
                let answer = Answer {
                    value: drawn,
                    ..yes
                };
                (answer, format!("counter now {drawn}"))
            }
        };
        self.see(s, seen);
        (answer, effect)
    }

    // --- The clients -------------------------------------------------------------------------

    /// Node `n` runs the oldest request on client `c`'s connection.
    pub(super) fn process(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let req = s.conns[c * MAX_N + n].pop();
        let now = s.now;
        let (answer, effect) = self.run(s, n, req);
        log.note(|| format!("t={now} n{n} runs {}: {effect}", req.describe()));
        let r = req.r();
        if req.wait() && s.reqs[r].fan.pending & bit(n) != 0 {
            self.count(s, r, n, Some(answer));
            self.react(s, r, log);
        }
    }

    /// Node `n` runs the oldest request written to client `c`'s failed connection: nobody
    /// reads its answer.
    pub(super) fn process_stale(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let req = s.stale[c * MAX_N + n].pop();
        let now = s.now;
        if matches!(req.kind(), Kind::Rollback | Kind::Withdraw) {
            self.see(s, SEEN_LATE);
        }
        let (_, effect) = self.run(s, n, req);
        log.note(|| format!("t={now} n{n} runs LATE {}: {effect}", req.describe()));
    }

    /// Client `c`'s connection to node `n` fails and is replaced.
    pub(super) fn reconnect(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let now = s.now;
        s.reconnected += 1;
        let mut old = s.conns[c * MAX_N + n];
        s.conns[c * MAX_N + n] = Fifo::default();
        log.note(|| format!("t={now} c{c}'s connection to n{n} FAILS and is replaced"));
        let mut failed = 0u8;
        for req in &mut old.items[..usize::from(old.len)] {
            if req.wait() {
                failed |= bit(req.r());
                *req = req.unwaited();
            }
        }
        s.stale[c * MAX_N + n] = old;
        for r in 0..self.requests() {
            if failed & bit(r) != 0 && s.reqs[r].fan.pending & bit(n) != 0 {
                log.note(|| format!("t={now} r{r}'s request to n{n} fails"));
                self.count(s, r, n, None);
                self.react(s, r, log);
            }
        }
    }

    /// Request `r` counts node `n`'s answer (`None`: failed or timed out).
    pub(super) fn count(&self, s: &mut State, r: usize, n: usize, answer: Option<Answer>) {
        let fan = &mut s.reqs[r].fan;
        fan.pending &= !bit(n);
        match answer {
            Some(a) => {
                if a.yes {
                    fan.yes |= bit(n);
                } else {
                    fan.refused |= bit(n);
                }
                fan.max = fan.max.max(a.value);
                if let Some((w, ms, expiry)) = a.grant {
                    fan.grant[n] = (w as u8 + 1) | ms << 4;
                    fan.gexp[n] = expiry;
                }
            }
            None => fan.failed += 1,
        }
    }

    /// Request `r` acts on the answers counted so far.
    pub(super) fn react(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let fan = s.reqs[r].fan;
        let tally = move || {
            format!(
                "yes {}, refused {}, failed {}",
                ones(fan.yes),
                ones(fan.refused),
                fan.failed
            )
        };
        match s.reqs[r].phase {
            Phase::Attempt => match self.decision(&fan) {
                Decision::Pending => {}
                Decision::Reached => {
                    self.stop_waiting(s, r);
                    let deadline = s.reqs[r].t0 + self.ttl(r);
                    if now < deadline {
                        let q = &mut s.reqs[r];
                        q.phase = Phase::Holding;
                        q.deadline = deadline;
                        q.granted = 0;
                        log.note(|| {
                            let quorum = nodes_of(fan.yes);
                            format!("t={now} r{r} attempt reaches {quorum}: HOLDS until {deadline}")
                        });
                    } else {
                        s.reqs[r].miss = Miss::Exhausted;
                        log.note(|| format!("t={now} r{r} quorum too late (deadline {deadline})"));
                        self.rollback(s, r, self.all() & !fan.refused, fan.yes, log);
                    }
                }
                Decision::Impossible => {
                    self.stop_waiting(s, r);
                    let q = &mut s.reqs[r];
                    let room = self.n() as u8 - fan.failed >= self.cfg.quorum;
                    q.drawn = 0;
                    if room {
                        q.miss = Miss::Contended;
                        if q.ticket == 0 && ones(fan.refused) >= self.cfg.quorum {
                            q.drawn = fan.max;
                        }
                    } else {
                        q.miss = Miss::NoQuorum;
                    }
                    let miss = q.miss;
                    log.note(|| format!("t={now} r{r} attempt fails ({}): {miss:?}", tally()));
                    self.rollback(s, r, self.all() & !fan.refused, fan.yes, log);
                }
            },
            Phase::Rollback if fan.pending == 0 => self.after_rollback(s, r, log),
            Phase::Withdraw { sent: true } if fan.pending == 0 => self.after_withdrawal(s, r, log),
            Phase::Draw => match self.decision(&fan) {
                Decision::Pending => {}
                Decision::Reached => {
                    self.stop_waiting(s, r);
                    s.reqs[r].ticket = fan.max;
                    s.reqs[r].phase = Phase::Pause;
                    log.note(|| format!("t={now} r{r} draws ticket {}", fan.max));
                }
                Decision::Impossible => {
                    self.stop_waiting(s, r);
                    s.reqs[r].phase = Phase::Pause;
                    log.note(|| format!("t={now} r{r} draw fails ({})", tally()));
                }
            },
            Phase::Release { sent: true } => match self.decision(&fan) {
                Decision::Pending => {}
                Decision::Reached => {
                    self.stop_waiting(s, r);
                    s.reqs[r].phase = Phase::Done;
                    log.note(|| format!("t={now} r{r} release confirmed ({})", tally()));
                    self.hand_off(s, r, log);
                }
                Decision::Impossible => {
                    self.stop_waiting(s, r);
                    s.reqs[r].phase = Phase::Done;
                    log.note(|| format!("t={now} r{r} release not confirmed ({})", tally()));
                }
            },
            _ => {}
        }
    }

    /// `give_back`: FAIR_RELEASE mode 2 on `mask`, waited for.
    /// The rollback is written to every node of `mask` and waited for on those of `wait`
    /// (an attempt's: the nodes that answered it yes; a hand-off's give-back: all), the
    /// parts to the others left to finish unanswered (`give_back`).
    pub(super) fn rollback(&self, s: &mut State, r: usize, mask: u8, wait: u8, log: &mut Log) {
        let now = s.now;
        s.reqs[r].phase = Phase::Rollback;
        let holder = s.reqs[r].holder;
        let wait = match self.cfg.has(Bug::RollbackUnwaited) {
            true => 0,
            false => mask & wait,
        };
        log.note(|| {
            let (on, waits) = (nodes_of(mask), nodes_of(wait));
            format!(
                "t={now} r{r} rolls back {} on {on} (waits for {waits})",
                holder.describe()
            )
        });
        let unwaited = mask & !wait;
        if unwaited != 0 {
            self.send(
                s,
                r,
                unwaited,
                Req::new(Kind::Rollback, r, holder, 0, false),
            );
        }
        self.fan_out(s, r, wait, Kind::Rollback, holder, 0);
        if wait == 0 {
            self.after_rollback(s, r, log);
        }
    }

    /// The rollback finished: the cut-off withdrawal, or waiting (and a ticket).
    pub(super) fn after_rollback(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let q = s.reqs[r];
        if q.miss == Miss::NoQuorum && q.ticket != 0 {
            self.see(s, SEEN_CUT_OFF);
            if self.cfg.has(Bug::WaitingBeforeWithdrawal) {
                s.reqs[r].phase = Phase::Withdraw { sent: false };
                s.reqs[r].waiting = true;
                log.note(|| format!("t={now} r{r} cut off: WAITING, withdrawal not yet sent"));
            } else {
                s.reqs[r].phase = Phase::Withdraw { sent: true };
                let w = waiter_name(waiter(r, q.gen));
                log.note(|| format!("t={now} r{r} cut off: withdraws {w} on all nodes (waits)"));
                self.fan_out(s, r, self.all(), Kind::Withdraw, self.base(s, r), 0);
            }
            return;
        }
        s.reqs[r].waiting = true;
        self.draw_or_pause(s, r, log);
    }

    /// The cut-off withdrawal finished: the ticket is dropped, the request takes a new
    /// identity (waiter id and base; it registers with its client's waiters under the new id)
    /// and waits (with `Bug::WaitingBeforeWithdrawal` it was marked waiting already, and may
    /// have been handed the lock since).
    pub(super) fn after_withdrawal(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let q = &mut s.reqs[r];
        q.ticket = 0;
        // The version with the round-3 defect had one identity per request.
        if !self.cfg.has(Bug::CutOffKeepsIdentity) && !self.cfg.has(Bug::WaitingBeforeWithdrawal) {
            q.gen += 1;
            q.nonce = 0;
        }
        if !self.cfg.has(Bug::WaitingBeforeWithdrawal) {
            q.waiting = true;
        }
        q.phase = Phase::Pause;
        let w = waiter_name(waiter(r, q.gen));
        log.note(|| format!("t={now} r{r} withdrawn, ticket dropped: waiting as {w}"));
    }

    /// Marked waiting: a refused request without a ticket takes the one its refusals drew, or
    /// draws one in a round of its own.
    pub(super) fn draw_or_pause(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let q = s.reqs[r];
        if q.miss != Miss::Contended || q.ticket != 0 {
            s.reqs[r].phase = Phase::Pause;
            log.note(|| format!("t={now} r{r} waiting"));
        } else if q.drawn != 0 {
            s.reqs[r].ticket = q.drawn;
            s.reqs[r].phase = Phase::Pause;
            log.note(|| format!("t={now} r{r} waiting with ticket {}", q.drawn));
        } else {
            self.see(s, SEEN_DRAW_ROUND);
            s.reqs[r].phase = Phase::Draw;
            log.note(|| format!("t={now} r{r} waiting, draws a ticket on all nodes"));
            self.fan_out(s, r, self.all(), Kind::Draw, self.base(s, r), 0);
        }
    }

    /// Whether request `r`, at the top of its wait loop, has a step to take.
    pub(super) fn can_step(&self, s: &State, r: usize) -> bool {
        let (plan, q) = (&self.cfg.plans[r], &s.reqs[r]);
        q.phase == Phase::Pause && (q.granted != 0 || q.attempts < plan.attempts || plan.gives_up)
    }

    /// The top of the wait loop: the hand-off if any, else an attempt, or giving up.
    pub(super) fn step_request(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let plan = self.cfg.plans[r];
        let q = s.reqs[r];
        let out = q.attempts >= plan.attempts;
        if out && plan.gives_up {
            // Out of attempts: the wait (`Waiting`) ends (its check comes before it takes a
            // hand-off), its registration is dropped, and the `Withdraw` guard sends the
            // withdrawal of its current identity without waiting for it.
            self.leave_waiting(s, r);
            s.reqs[r].granted = 0;
            s.reqs[r].phase = Phase::Done;
            self.see(s, SEEN_GAVE_UP);
            let dropped = if q.granted != 0 {
                " (drops its hand-off)"
            } else {
                ""
            };
            log.note(|| format!("t={now} r{r} gives up{dropped}: withdraws on all nodes"));
            let withdraw = Req::new(Kind::Withdraw, r, self.base(s, r), 0, false);
            self.send(s, r, self.all(), withdraw);
        } else if q.granted != 0 {
            // `take_grant_or_attempt`, then `claim`.
            // The release set the key to the hand-off value on the nodes it counted: the
            // guard's value (`hand_off` put it in `holder`).
            let deadline = q.granted;
            s.reqs[r].granted = 0;
            s.reqs[r].noticeable = false;
            self.leave_waiting(s, r);
            if now < deadline {
                s.reqs[r].phase = Phase::Holding;
                s.reqs[r].deadline = deadline;
                log.note(|| format!("t={now} r{r} takes its hand-off: HOLDS until {deadline}"));
            } else {
                s.reqs[r].miss = Miss::Exhausted;
                log.note(|| format!("t={now} r{r} hand-off too late (deadline {deadline})"));
                self.rollback(s, r, self.all(), self.all(), log);
            }
        } else {
            self.leave_waiting(s, r);
            let q = &mut s.reqs[r];
            q.attempts += 1;
            q.nonce += 1;
            q.round += 1;
            q.holder = Val::attempt(r, q.gen, q.nonce);
            q.t0 = now;
            q.noticeable = true;
            q.phase = Phase::Attempt;
            let (ticket, holder, round) = (q.ticket, q.holder, q.round);
            log.note(|| {
                let with = if ticket == 0 {
                    "?".to_string()
                } else {
                    ticket.to_string()
                };
                let holder = holder.describe();
                format!(
                    "t={now} r{r} attempts {holder}, round {round} (ticket {with}) on all nodes"
                )
            });
            let arg = u16::from(ticket) | u16::from(round) << 8;
            self.fan_out(s, r, self.all(), Kind::Acquire, holder, arg);
        }
    }

    /// The deadline a hold of request `r` from the notices of its short grants would have
    /// now (`Line::held_from_notices`, `notices_deadline`): only at the top of its wait loop,
    /// with no hand-off of its client's waiting, its latest try an attempt of round `round`
    /// sent at `t0`; of the nodes' latest notices to its waiter id that carry that round
    /// (any may have been delivered, with any delay), the quorum's latest end, each grant made
    /// its node's gap after `t0` and lasting its length. `None` when that leaves no validity.
    pub(super) fn notices_deadline(&self, s: &State, r: usize) -> Option<u8> {
        let q = &s.reqs[r];
        if q.phase != Phase::Pause || !q.noticeable || q.granted != 0 {
            return None;
        }
        let w = waiter(r, q.gen);
        let mut ends: Vec<u8> = s.nodes[..self.n()]
            .iter()
            .filter(|node| node.nr[w] == q.round)
            .map(|node| match self.cfg.has(Bug::NoticeFromReading) {
                true => s.now + node.nms[w],
                false => q.t0 + node.nd[w] + node.nms[w],
            })
            .collect();
        ends.sort_unstable_by(|a, b| b.cmp(a));
        let deadline = *ends.get(usize::from(self.cfg.quorum) - 1)?;
        (s.now < deadline).then_some(deadline)
    }

    /// Forgets the notices no hold can count any more, so that states differing only in them
    /// are one: a notice counts only for its request's current identity, with the round of
    /// its latest try, an attempt, before it holds, and until its grant's end (rounds and
    /// time only grow).
    pub(super) fn forget_spent_notices(&self, s: &mut State) {
        let mut live = [false; SLOTS];
        for (r, q) in s.reqs[..self.requests()].iter().enumerate() {
            let waiting = !matches!(
                q.phase,
                Phase::Holding | Phase::Release { .. } | Phase::Done
            );
            if q.noticeable && waiting {
                live[waiter(r, q.gen)] = true;
            }
        }
        for node in &mut s.nodes[..self.n()] {
            for (w, &live) in live.iter().enumerate() {
                if node.nr[w] == 0 {
                    continue;
                }
                let q = &s.reqs[w / GENS];
                let end = match self.cfg.has(Bug::NoticeFromReading) {
                    true => u8::MAX,
                    false => q.t0 + node.nd[w] + node.nms[w],
                };
                if !live || node.nr[w] != q.round || end <= s.now {
                    node.nr[w] = 0;
                    node.nd[w] = 0;
                    node.nms[w] = 0;
                }
            }
        }
    }

    /// Request `r` holds from its grants' notices, with their hand-off value of its round.
    pub(super) fn hold_from_notices(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let Some(deadline) = self.notices_deadline(s, r) else {
            return;
        };
        self.leave_waiting(s, r);
        self.see(s, SEEN_NOTICED);
        let q = &mut s.reqs[r];
        let w = waiter(r, q.gen);
        q.holder = match self.cfg.has(Bug::NoticedGrantClaimable) {
            true => Val::granted_to(w),
            false => Val::handed(w, q.round),
        };
        q.noticeable = false;
        q.phase = Phase::Holding;
        q.deadline = deadline;
        let holder = q.holder.describe();
        log.note(|| {
            format!("t={now} r{r} holds {holder} from its grants' notices until {deadline}")
        });
    }

    /// The release's first step: the guard ends, the stamp, the instant and `waiting_before`.
    pub(super) fn release(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let client = self.client(r);
        let (mut eligible, mut sure, mut rounds) = (0, 0, 0);
        for w in 0..self.requests() {
            let q = &s.reqs[w];
            if w != r && self.client(w) == client && q.waiting && q.granted == 0 {
                eligible |= bit(w);
                sure |= slot_bit(waiter(w, q.gen));
                rounds |= u16::from(q.round) << (4 * w);
            }
        }
        let q = &mut s.reqs[r];
        q.phase = Phase::Release { sent: false };
        q.eligible = eligible;
        q.sure_rounds = rounds;
        q.sure = if self.cfg.has(Bug::HandOffOnShortGrants) {
            0
        } else {
            sure
        };
        q.sent = now;
        log.note(|| {
            let waiting = waiters_of(sure);
            format!("t={now} r{r} releases: stamp taken, its client's waiters {waiting}")
        });
    }

    pub(super) fn send_release(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let (sure, holder) = (s.reqs[r].sure, s.reqs[r].holder);
        s.reqs[r].phase = Phase::Release { sent: true };
        log.note(|| format!("t={now} r{r} sends its release to all nodes"));
        self.fan_out(s, r, self.all(), Kind::Release, holder, sure);
    }

    /// `FairWaiters::hand_off`, after release `h` reached its quorum.
    pub(super) fn hand_off(&self, s: &mut State, h: usize, log: &mut Log) {
        let now = s.now;
        let cfg = &self.cfg;
        let q = s.reqs[h];
        let fan = q.fan;
        let by_waiter_only =
            cfg.has(Bug::HandOffOnShortGrants) || cfg.has(Bug::HandOffIgnoresGrantTtl);
        // `quorum_granted`: a (waiter, ms) answered by at least a quorum (by waiter alone in
        // the controls that ignore the TTL).
        let mut found = None;
        for n in 0..self.n() {
            let g = fan.grant[n];
            if g == 0 {
                continue;
            }
            let same = |o: u8| {
                o != 0
                    && if by_waiter_only {
                        o & 15 == g & 15
                    } else {
                        o == g
                    }
            };
            let nodes = (0..self.n())
                .filter(|&m| same(fan.grant[m]))
                .fold(0u8, |acc, m| acc | bit(m));
            if ones(nodes) >= cfg.quorum {
                found = Some((usize::from(g & 15) - 1, g >> 4, nodes));
                break;
            }
        }
        let Some((id, ms, nodes)) = found else {
            return;
        };
        // The waiter id must be one of this client's (its slot), still registered: a request
        // registers again under its new id after a cut-off.
        let w = id / GENS;
        let registered = s.reqs[w].phase != Phase::Done && waiter(w, s.reqs[w].gen) == id;
        if self.client(w) != self.client(h) || !registered {
            return;
        }
        if ms != self.ttl(w) && !by_waiter_only {
            return;
        }
        let waits = if cfg.has(Bug::HandOffIgnoresStamp) {
            s.reqs[w].waiting
        } else {
            q.eligible & bit(w) != 0
        };
        if !waits {
            log.note(|| format!("t={now} r{h}: r{w} no longer waits since the stamp: no hand-off"));
            return;
        }
        let deadline = if cfg.has(Bug::HandOffFromDecision) {
            now + self.ttl(w)
        } else {
            q.sent + self.ttl(w)
        };
        if deadline <= now {
            return;
        }
        // Property (b): the deadline is no later than any grant the hand-off counted.
        let earliest = (0..self.n())
            .filter(|&m| nodes & bit(m) != 0)
            .map(|m| fan.gexp[m])
            .min()
            .unwrap();
        if deadline > earliest {
            s.overrun = true;
        }
        // The guard's value: what the nodes set for the round sent with the `sure` set (the
        // waiter's round, unchanged while it waits since the stamp).
        let round = (q.sure_rounds >> (4 * w) & 15) as u8;
        let holder = if cfg.has(Bug::HandOffOnShortGrants) {
            Val::granted_to(id)
        } else if cfg.has(Bug::GrantSetsAttemptValue) {
            Val::attempt(w, s.reqs[w].gen, s.reqs[w].nonce.max(1))
        } else {
            Val::handed(id, round)
        };
        self.leave_waiting(s, w);
        s.reqs[w].granted = deadline;
        s.reqs[w].holder = holder;
        self.see(s, SEEN_HANDOFF);
        log.note(|| {
            format!(
                "t={now} r{h} HANDS OFF to r{w} until {deadline}, value {} (grants on {}, earliest expiry {earliest})",
                holder.describe(),
                nodes_of(nodes)
            )
        });
    }

    pub(super) fn tick(&self, s: &mut State, log: &mut Log) {
        s.now += 1;
        let now = s.now;
        log.note(|| format!("t={now} tick"));
        for n in 0..self.n() {
            let before = s.nodes[n];
            if s.nodes[n].expire(now) {
                // A short grant lapsing: the key and its holder's place expire together.
                if let Some(e) = before.key {
                    let w = e.holder.base();
                    if e.expiry <= now && before.in_line(w) && before.lease[w] == e.expiry {
                        self.see(s, SEEN_LAPSED);
                    }
                }
                let after = s.nodes[n];
                log.note(|| format!("t={now} n{n} expires: now {}", describe_node(&after)));
            }
        }
    }

    pub(super) fn time_out(&self, s: &mut State, r: usize, log: &mut Log) {
        let now = s.now;
        let pending = s.reqs[r].fan.pending;
        log.note(|| format!("t={now} r{r} times out on {}", nodes_of(pending)));
        for n in 0..self.n() {
            if pending & bit(n) != 0 {
                self.count(s, r, n, None);
            }
        }
        self.stop_waiting(s, r);
        self.react(s, r, log);
    }

    /// Applies `action` to `s`; the narration goes to `log`.
    pub(super) fn step(&self, s: &mut State, action: Action, log: &mut Log) {
        let now = s.now;
        match action {
            Action::Tick => self.tick(s, log),
            Action::Step(r) => self.step_request(s, usize::from(r), log),
            Action::Noticed(r) => self.hold_from_notices(s, usize::from(r), log),
            Action::Release(r) => self.release(s, usize::from(r), log),
            Action::SendRelease(r) => self.send_release(s, usize::from(r), log),
            Action::SendWithdraw(r) => {
                let r = usize::from(r);
                s.reqs[r].phase = Phase::Withdraw { sent: true };
                log.note(|| format!("t={now} r{r} withdraws on all nodes (waits)"));
                self.fan_out(s, r, self.all(), Kind::Withdraw, self.base(s, r), 0);
            }
            Action::Process(c, n) => self.process(s, usize::from(c), usize::from(n), log),
            Action::ProcessStale(c, n) => {
                self.process_stale(s, usize::from(c), usize::from(n), log)
            }
            Action::Reconnect(c, n) => self.reconnect(s, usize::from(c), usize::from(n), log),
            Action::Lose(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                let req = s.conns[c * MAX_N + n].pop();
                if self.cfg.losses.is_some() {
                    s.lost += 1;
                }
                log.note(|| format!("t={now} {} to n{n} is lost", req.describe()));
            }
            Action::TimeOut(r) => self.time_out(s, usize::from(r), log),
            Action::Restart(n) => {
                let n = usize::from(n);
                s.forgotten += 1;
                self.see(s, SEEN_FORGOTTEN);
                let had = describe_node(&s.nodes[n]);
                log.note(|| format!("t={now} n{n} RESTARTS EMPTY (had {had})"));
                s.nodes[n] = s.nodes[n].restarted();
            }
            Action::ClockJump(n, to) => {
                let n = usize::from(n);
                s.forgotten += 1;
                self.see(s, SEEN_FORGOTTEN);
                s.nodes[n].expire(to);
                let after = describe_node(&s.nodes[n]);
                log.note(|| format!("t={now} n{n} CLOCK JUMPS past {to}: now {after}"));
            }
        }
    }

    /// Renames the nodes so that equivalent states become one (see `tests/model/`).
    /// Returns the renaming: new node `i` is old node `order[i]`.
    pub(super) fn canonicalize(&self, s: &mut State) -> [usize; MAX_N] {
        let (n, clients, requests) = (self.n(), self.cfg.clients(), self.requests());
        let key = |s: &State, i: usize| {
            let mut e = Enc::<512>::new();
            e.node(&s.nodes[i]);
            for c in 0..clients {
                e.fifo(&s.conns[c * MAX_N + i]);
                e.fifo(&s.stale[c * MAX_N + i]);
            }
            for q in &s.reqs[..requests] {
                let f = &q.fan;
                let masks = f.pending >> i & 1 | (f.yes >> i & 1) << 1 | (f.refused >> i & 1) << 2;
                e.put(&[masks, f.grant[i], f.gexp[i]]);
            }
            e
        };
        let keys: [Enc<512>; MAX_N] = [
            key(s, 0),
            key(s, 1),
            key(s, 2),
            if n > 3 { key(s, 3) } else { Enc::new() },
            if n > 4 { key(s, 4) } else { Enc::new() },
        ];
        let mut order = [0, 1, 2, 3, 4];
        order[..n].sort_by(|&a, &b| keys[a].bytes().cmp(keys[b].bytes()));
        if order[..n].iter().enumerate().all(|(i, &o)| i == o) {
            return order;
        }
        let old = *s;
        let remap = |m: u8| (0..n).fold(0u8, |acc, i| acc | (m >> order[i] & 1) << i);
        for (i, &o) in order[..n].iter().enumerate() {
            s.nodes[i] = old.nodes[o];
            for c in 0..clients {
                s.conns[c * MAX_N + i] = old.conns[c * MAX_N + o];
                s.stale[c * MAX_N + i] = old.stale[c * MAX_N + o];
            }
            for (q, oq) in s.reqs[..requests].iter_mut().zip(&old.reqs) {
                q.fan.grant[i] = oq.fan.grant[o];
                q.fan.gexp[i] = oq.fan.gexp[o];
            }
        }
        for q in &mut s.reqs[..requests] {
            q.fan.pending = remap(q.fan.pending);
            q.fan.yes = remap(q.fan.yes);
            q.fan.refused = remap(q.fan.refused);
        }
        order
    }

    /// (a) No two requests inside the validity of a guard at once.
    pub(super) fn excluded(&self, s: &State) -> bool {
        s.reqs[..self.requests()]
            .iter()
            .filter(|q| q.holds(s.now))
            .count()
            <= 1
    }

    /// (a') Invariant 2: while a request is inside its validity, at least `q - f` nodes hold
    /// its guard's value exactly (the attempt's `A_k`, or the hand-off value `H_r`: nothing of
    /// the request replaces either) with an expiry no earlier than its deadline.
    pub(super) fn supported(&self, s: &State) -> bool {
        (0..self.requests()).all(|r| {
            let q = &s.reqs[r];
            if !q.holds(s.now) {
                return true;
            }
            let entries = s.nodes[..self.n()]
                .iter()
                .filter(|node| {
                    node.key
                        .is_some_and(|e| e.holder == q.holder && e.expiry >= q.deadline)
                })
                .count() as u8;
            entries + s.forgotten >= self.cfg.quorum
        })
    }

    pub(super) fn initial(&self) -> State {
        let mut s = State {
            now: 0,
            lost: 0,
            forgotten: 0,
            overrun: false,
            seen: 0,
            nodes: [NodeState::default(); MAX_N],
            reqs: [Request::default(); MAX_R],
            conns: [Fifo::default(); MAX_R * MAX_N],
            stale: [Fifo::default(); MAX_R * MAX_N],
            reconnected: 0,
        };
        let ql = self.cfg.queue_lease;
        for (r, plan) in self.cfg.plans.iter().enumerate() {
            match plan.start {
                Start::Fresh => {}
                Start::Holding => {
                    let q = &mut s.reqs[r];
                    q.phase = Phase::Holding;
                    q.deadline = plan.ttl;
                    q.nonce = 1;
                    q.round = 1;
                    q.holder = Val::attempt(r, 0, 1);
                    for node in &mut s.nodes[..self.n()] {
                        node.key = Some(Entry {
                            holder: q.holder,
                            expiry: plan.ttl,
                        });
                    }
                }
                Start::InLine(ticket) => {
                    let q = &mut s.reqs[r];
                    q.waiting = true;
                    q.ticket = ticket;
                    q.nonce = 1;
                    q.round = 1;
                    q.noticeable = true;
                    q.holder = Val::attempt(r, 0, 1);
                    let entry = if self.cfg.has(Bug::GrantSetsAttemptValue) {
                        1
                    } else {
                        0
                    };
                    for node in &mut s.nodes[..self.n()] {
                        let w = waiter(r, 0);
                        node.line[w] = ticket;
                        node.lease[w] = ql;
                        node.entry[w] = entry;
                        node.round[w] = 1;
                        node.counter = node.counter.max(ticket);
                        node.counter_exp = ql;
                    }
                }
            }
        }
        s
    }
}

/// A property's condition.
pub(super) type Condition = fn(&Protocol, &State) -> bool;

pub(super) const HOLDS: [(&str, Condition); MAX_R] = [
    ("r0 holds", |_, s| s.reqs[0].holds(s.now)),
    ("r1 holds", |_, s| s.reqs[1].holds(s.now)),
    ("r2 holds", |_, s| s.reqs[2].holds(s.now)),
];

pub(super) const COVERAGE: [(u16, &str); 11] = [
    (SEEN_HANDOFF, "reaches a hand-off"),
    (SEEN_CLAIMED, "reaches a claim of its own entry"),
    (SEEN_SHORT_GRANT, "reaches a short grant"),
    (SEEN_LAPSED, "reaches a short grant that lapsed"),
    (
        SEEN_SELF_REGRANT,
        "reaches a rollback re-granting its own request",
    ),
    (SEEN_CUT_OFF, "reaches a cut-off withdrawal"),
    (SEEN_DRAW_ROUND, "reaches a draw round"),
    (SEEN_GAVE_UP, "reaches a request that gave up"),
    (SEEN_FORGOTTEN, "reaches a forgotten node"),
    (SEEN_LATE, "reaches a late rollback or withdrawal"),
    (SEEN_NOTICED, "reaches a hold from grant notices"),
];

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut s = self.initial();
        if self.cfg.symmetry {
            self.canonicalize(&mut s);
        }
        vec![s]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let cfg = &self.cfg;
        if s.now < cfg.max_time {
            actions.push(Action::Tick);
        }
        for (r, plan) in cfg.plans.iter().enumerate() {
            let q = &s.reqs[r];
            let r8 = r as u8;
            match q.phase {
                Phase::Pause if self.notices_deadline(s, r).is_some() => {
                    actions.push(Action::Noticed(r8));
                    if self.can_step(s, r) {
                        actions.push(Action::Step(r8));
                    }
                }
                Phase::Pause if self.can_step(s, r) => actions.push(Action::Step(r8)),
                Phase::Holding if plan.release => actions.push(Action::Release(r8)),
                Phase::Release { sent: false } => actions.push(Action::SendRelease(r8)),
                Phase::Withdraw { sent: false } => actions.push(Action::SendWithdraw(r8)),
                _ => {}
            }
            if cfg.timeouts & bit(r) != 0 && q.fan.pending != 0 {
                actions.push(Action::TimeOut(r8));
            }
        }
        let may_lose = cfg.losses.is_none_or(|max| s.lost < max);
        let may_reconnect = s.reconnected < cfg.reconnects;
        for c in 0..cfg.clients() {
            for n in 0..self.n() {
                let (c8, n8) = (c as u8, n as u8);
                let stale = s.stale[c * MAX_N + n].is_empty();
                if !s.conns[c * MAX_N + n].is_empty() {
                    actions.push(Action::Process(c8, n8));
                    if may_lose {
                        actions.push(Action::Lose(c8, n8));
                    }
                    if may_reconnect && stale {
                        actions.push(Action::Reconnect(c8, n8));
                    }
                }
                if !stale {
                    actions.push(Action::ProcessStale(c8, n8));
                }
            }
        }
        if s.forgotten < cfg.forgetful {
            for n in 0..self.n() {
                let node = &s.nodes[n];
                if node.expiries().next().is_some() {
                    actions.push(Action::Restart(n as u8));
                }
                let mut past = 0u64;
                for expiry in node.expiries() {
                    if expiry < 64 && past & 1 << expiry == 0 {
                        past |= 1 << expiry;
                        actions.push(Action::ClockJump(n as u8, expiry));
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = *last;
        self.step(&mut s, action, &mut Log::off());
        self.forget_spent_notices(&mut s);
        if self.cfg.symmetry {
            self.canonicalize(&mut s);
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::<Self>::always("exclusion", |m, s| m.excluded(s)),
            Property::<Self>::always("support", |m, s| m.supported(s)),
            Property::<Self>::always("hand-off within its grants", |_, s| !s.overrun),
        ];
        // Each request that can take the lock (an attempt, or a start holding) sometimes holds.
        for (r, (name, holds)) in HOLDS[..self.requests()].iter().enumerate() {
            let plan = &self.cfg.plans[r];
            if plan.attempts > 0 || plan.start == Start::Holding {
                p.push(Property::sometimes(name, *holds));
            }
        }
        for (flag, name) in COVERAGE {
            if self.cfg.cover & flag != 0 {
                let reached: Condition = match flag {
                    SEEN_HANDOFF => |_, s| s.seen & SEEN_HANDOFF != 0,
                    SEEN_CLAIMED => |_, s| s.seen & SEEN_CLAIMED != 0,
                    SEEN_SHORT_GRANT => |_, s| s.seen & SEEN_SHORT_GRANT != 0,
                    SEEN_LAPSED => |_, s| s.seen & SEEN_LAPSED != 0,
                    SEEN_SELF_REGRANT => |_, s| s.seen & SEEN_SELF_REGRANT != 0,
                    SEEN_CUT_OFF => |_, s| s.seen & SEEN_CUT_OFF != 0,
                    SEEN_DRAW_ROUND => |_, s| s.seen & SEEN_DRAW_ROUND != 0,
                    SEEN_GAVE_UP => |_, s| s.seen & SEEN_GAVE_UP != 0,
                    SEEN_FORGOTTEN => |_, s| s.seen & SEEN_FORGOTTEN != 0,
                    SEEN_LATE => |_, s| s.seen & SEEN_LATE != 0,
                    _ => |_, s| s.seen & SEEN_NOTICED != 0,
                };
                p.push(Property::sometimes(name, reached));
            }
        }
        p
    }
}
