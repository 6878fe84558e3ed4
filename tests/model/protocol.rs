//! The model itself: the protocol's steps as the library takes them, and its properties.

use super::*;

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

pub(super) struct Protocol {
    pub(super) cfg: Config,
}

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

    pub(super) fn clients(&self) -> usize {
        self.cfg.plans.len()
    }

    pub(super) fn all(&self) -> u8 {
        ((1u16 << self.n()) - 1) as u8
    }

    /// `quorum::Tally::decision`.
    pub(super) fn decision(&self, fan: &Fan) -> Decision {
        let (n, quorum, failed) = if self.cfg.has(Bug::QuorumOverNodesAsked) {
            let asked = self.n() as u8 - fan.skipped;
            (asked, asked / 2 + 1, fan.failed - fan.skipped)
        } else {
            (self.n() as u8, self.cfg.quorum, fan.failed)
        };
        if fan.yes >= quorum {
            Decision::Reached
        } else if n - fan.refused - failed < quorum {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }

    pub(super) fn tick_enabled(&self, s: &State) -> bool {
        if s.now >= self.cfg.max_time {
            return false;
        }
        if !self.cfg.timely {
            return true;
        }
        let quiet = s.conns.iter().all(Fifo::is_empty);
        let settled = (0..self.clients()).all(|c| {
            let cl = &s.clients[c];
            let wants = cl.phase == Phase::Idle && cl.attempts < self.cfg.plans[c].attempts;
            !cl.busy() && !wants && cl.phase != Phase::Collecting
        });
        quiet && settled
    }

    /// Sends `req` to the nodes of `mask`, behind everything already on those connections.
    pub(super) fn send(&self, s: &mut State, c: usize, mask: u8, req: Req) {
        for n in 0..self.n() {
            if mask & bit(n) != 0 {
                s.conn(c, n).push(req);
            }
        }
    }

    /// A new fan-out of `kind` to every node, waiting for every answer.
    pub(super) fn fan_out(&self, s: &mut State, c: usize, kind: Kind, arg: u8) {
        let holder = s.clients[c].holder(c);
        let mut fan = Fan::default();
        for slot in fan.slots.iter_mut().take(self.n()) {
            *slot = Slot::Waiting;
        }
        s.clients[c].fan = fan;
        self.send(s, c, self.all(), Req::new(kind, holder.attempt, arg, true));
    }

    /// The fan-out is decided or abandoned: its requests still queued run without anyone
    /// waiting for their answers (the library's stragglers), and replies on their way are
    /// ignored.
    pub(super) fn stop_waiting(&self, s: &mut State, c: usize) {
        s.clients[c].fan.slots = [Slot::Idle; MAX_N];
        for n in 0..self.n() {
            s.conn(c, n).unwait();
        }
    }

    /// `acquire.rs`, `attempt`: `t0` is noted before the first request, to the arbiter alone
    /// in the ordered approach (`arbiter.rs`, `approach`).
    pub(super) fn start(&self, s: &mut State, c: usize, ordered: bool, log: &mut Log) {
        let ttl = self.cfg.plans[c].ttl;
        let now = s.now;
        let cl = &mut s.clients[c];
        cl.attempts += 1;
        cl.published = false;
        cl.t0 = now;
        cl.approach = Approach::All;
        let holder = cl.holder(c);
        if !ordered {
            cl.phase = Phase::Acquiring;
            log.note(|| format!("t={now} c{c} starts {holder}: acquire ttl {ttl} to all nodes"));
            self.fan_out(s, c, Kind::Acquire, ttl);
            return;
        }
        cl.phase = Phase::Arbitrating;
        let mut fan = Fan::default();
        fan.slots[ARBITER] = Slot::Waiting;
        cl.fan = fan;
        log.note(|| {
            let to = format!("acquire ttl {ttl} to the arbiter n{ARBITER} first");
            format!("t={now} c{c} starts {holder} (ordered): {to}")
        });
        let req = Req::new(Kind::Acquire, holder.attempt, ttl, true);
        self.send(s, c, bit(ARBITER), req);
    }

    /// `arbiter.rs`, `approach`: the arbiter's answer (counted in the fan: yes, refused, or
    /// failed for a timeout or a request the breaker skipped) decides where the attempt goes.
    pub(super) fn arbitrated(&self, s: &mut State, c: usize, log: &mut Log) {
        let now = s.now;
        let ttl = self.cfg.plans[c].ttl;
        let fan = s.clients[c].fan;
        let others = self.all() & !bit(ARBITER);
        let holder = s.clients[c].holder(c);
        let a = ARBITER;
        if fan.yes == 1 && self.cfg.has(Bug::ArbiterYesHolds) {
            let cl = &mut s.clients[c];
            cl.acquire_yes = fan.yes_mask;
            cl.give_back = self.all();
            log.note(|| format!("t={now} c{c}'s arbiter n{a} says yes: taken for the lock"));
            self.try_hold(s, c, log);
        } else if fan.yes == 1 {
            // The fan keeps the arbiter's yes: the attempt is tallied over all N.
            let cl = &mut s.clients[c];
            cl.phase = Phase::Acquiring;
            cl.approach = Approach::ArbiterYes;
            for n in 0..self.n() {
                if others & bit(n) != 0 {
                    cl.fan.slots[n] = Slot::Waiting;
                }
            }
            log.note(|| {
                let to = nodes_of(others);
                format!("t={now} c{c}'s arbiter n{a} says yes: acquire ttl {ttl} to {to}")
            });
            let req = Req::new(Kind::Acquire, holder.attempt, ttl, true);
            self.send(s, c, others, req);
        } else if fan.refused == 1 {
            // A refusal took nothing: the attempt ends with nothing to roll back.
            let cl = &mut s.clients[c];
            cl.cleanup[usize::from(holder.attempt)] = Cleanup {
                ended: true,
                sent: 0,
                done: 0,
            };
            cl.phase = Phase::Idle;
            s.see(SEEN_ARBITER_REFUSED);
            log.note(|| {
                format!("t={now} c{c}'s arbiter n{a} refuses: {holder} ends, nothing else sent")
            });
        } else {
            // Failed, timed out or skipped: the first request, if written, stays queued ahead
            // of the fallback's on the arbiter's connection.
            let written = fan.skipped_mask & bit(ARBITER) == 0;
            let cl = &mut s.clients[c];
            cl.phase = Phase::Acquiring;
            cl.approach = Approach::FellBack { written };
            if self.cfg.has(Bug::FallbackForgetsArbiter) {
                let mut fan = Fan {
                    failed: 1,
                    ..Fan::default()
                };
                for n in 0..self.n() {
                    if others & bit(n) != 0 {
                        fan.slots[n] = Slot::Waiting;
                    }
                }
                cl.fan = fan;
                log.note(|| {
                    let to = nodes_of(others);
                    format!("t={now} c{c}'s arbiter n{a} failed: acquire ttl {ttl} to {to} only")
                });
                let req = Req::new(Kind::Acquire, holder.attempt, ttl, true);
                self.send(s, c, others, req);
            } else {
                log.note(|| {
                    format!("t={now} c{c}'s arbiter n{a} failed: acquire ttl {ttl} to all nodes")
                });
                self.fan_out(s, c, Kind::Acquire, ttl);
            }
        }
    }

    /// `acquire.rs`, `give_back_to`, when the acquire is decided (`ordered` configurations):
    /// every node but those that refused and those the request was never written to; after a
    /// fallback, also the arbiter if its first request was written (the fix: the library as
    /// first written left it out when its second request was refused or skipped).
    pub(super) fn give_back(&self, cl: &Client) -> u8 {
        if !self.cfg.ordered {
            return 0;
        }
        let mut mask = self.all() & !cl.fan.refused_mask & !cl.fan.skipped_mask;
        if let Approach::FellBack { written } = cl.approach {
            if self.cfg.has(Bug::FallbackForgetsArbiter) {
                mask &= !bit(ARBITER);
            } else if written && !self.cfg.has(Bug::FallbackRollbackSkipsArbiter) {
                mask |= bit(ARBITER);
            }
        }
        mask
    }

    /// Node `n` runs the oldest request on client `c`'s connection.
    pub(super) fn process(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let req = s.conn(c, n).pop();
        let now = s.now;
        let reads = self.cfg.reads(c);
        let (vote, effect) = if reads {
            self.run_reader(&mut s.nodes[n], c, req, now)
        } else {
            self.run_writer(&mut s.nodes[n], c, req, now)
        };
        if self.cfg.durable && matches!(vote, Vote::Yes(_)) && self.fsynced_before_counted(req) {
            // `WAITAOF` on the connection that wrote it: the node's fsync, which takes every
            // write so far to its disk, before the answer counts.
            s.nodes[n].sync();
        }
        match effect {
            Effect::Recreated(_) => s.see(SEEN_REPAIRED),
            Effect::RefusedByMark(_) => s.see(SEEN_MARK_REFUSED),
            Effect::Deleted(true) | Effect::Withdrawn(true) => s.see(SEEN_UNMARKED),
            _ => {}
        }
        if req.kind() == Kind::Release {
            s.clients[c].cleanup[usize::from(req.attempt())].done |= bit(n);
        }
        log.note(|| {
            let req = req.describe(c, reads);
            format!("t={now} n{n} runs c{c}'s {req}: {effect}")
        });
        if req.wait() {
            if self.cfg.reply_delay {
                s.clients[c].fan.slots[n] = Slot::Replied(vote);
            } else {
                s.clients[c].fan.slots[n] = Slot::Idle;
                self.count(s, c, n, Some(vote));
                self.react(s, c, log);
            }
        }
    }

    /// Durable votes: whether a yes to `req` counts only once the node fsynced it (acquires,
    /// extends, the fencing increments and write-back; not repairs, releases or rollbacks).
    fn fsynced_before_counted(&self, req: Req) -> bool {
        match req.kind() {
            _ if self.cfg.has(Bug::VoteBeforeFsync) => false,
            Kind::Incr | Kind::FenceMax => !self.cfg.has(Bug::FenceNotDurable),
            Kind::Acquire | Kind::Extend => true,
            _ => false,
        }
    }

    /// A mutex client's or a writer's request on a node: the mutex's calls, and the writer's
    /// scripts (which also look at the readers and the pending mark).
    pub(super) fn run_writer(
        &self,
        node: &mut NodeState,
        c: usize,
        req: Req,
        now: u8,
    ) -> (Vote, Effect) {
        let holder = req.holder(c);
        let before = node.entry;
        let expiry = now + req.arg();
        let waits = self.cfg.plans[c].role == Role::WaitingWriter;
        match req.kind() {
            Kind::Acquire | Kind::Repair if node.entry.is_some() => {
                (Vote::Refused, Effect::Refused(before))
            }
            // WRITE_ACQUIRE: refused because of live readers, a waiting writer marks the key
            // for its TTL, unless another request's mark is live. WRITE_REPAIR: refused.
            Kind::Acquire | Kind::Repair if node.has_readers() => {
                let ours = node.mark.is_none_or(|m| m.waiter == c as u8);
                if req.kind() == Kind::Acquire && waits && ours {
                    node.mark = Some(Mark {
                        waiter: c as u8,
                        expiry,
                    });
                }
                (Vote::Refused, Effect::RefusedByReaders(node.mark))
            }
            Kind::Acquire | Kind::Repair => {
                node.entry = Some(Entry { holder, expiry });
                if req.kind() == Kind::Acquire && self.cfg.has(Bug::RecordInAcquire) {
                    node.record = Some(holder);
                }
                if req.kind() == Kind::Repair {
                    (Vote::Yes(0), Effect::Recreated(expiry))
                } else if self.cfg.fencing == Some(Fencing::InAcquire) {
                    node.counter += 1;
                    (
                        Vote::Yes(node.counter),
                        Effect::Taken(expiry, Some(node.counter)),
                    )
                } else {
                    (Vote::Yes(0), Effect::Taken(expiry, None))
                }
            }
            Kind::Incr => {
                node.counter += 1;
                (Vote::Yes(node.counter), Effect::Counter(node.counter))
            }
            Kind::FenceMax => {
                node.counter = node.counter.max(req.arg());
                (Vote::Yes(0), Effect::Counter(node.counter))
            }
            Kind::Extend => match &mut node.entry {
                Some(e) if e.holder == holder => {
                    e.expiry = expiry;
                    (Vote::Yes(0), Effect::Expires(e.expiry))
                }
                _ => (Vote::Refused, Effect::NotHeld(before)),
            },
            Kind::Release => {
                // WRITE_RELEASE: a release (not a rollback) also deletes the request's mark.
                let unmark = req.arg() == 1 && node.mark.is_some_and(|m| m.waiter == c as u8);
                if unmark {
                    node.mark = None;
                }
                match node.entry {
                    Some(e) if e.holder == holder => {
                        node.entry = None;
                        (Vote::Yes(0), Effect::Deleted(unmark))
                    }
                    _ => (Vote::Refused, Effect::NotHeld(before)),
                }
            }
            Kind::Withdraw => {
                let ours = node.mark.is_some_and(|m| m.waiter == c as u8);
                if ours {
                    node.mark = None;
                }
                (Vote::Yes(0), Effect::Withdrawn(ours))
            }
            // PUBLISH: only where the entry is this holder's.
            Kind::Publish => {
                let ours = node.entry.is_some_and(|e| e.holder == holder);
                if ours {
                    node.record = Some(holder);
                }
                (Vote::Yes(0), Effect::Published(ours))
            }
        }
    }

    /// A reader's request on a node: READ_ACQUIRE, PERMIT_EXTEND, READ_REPAIR, READ_RELEASE.
    pub(super) fn run_reader(
        &self,
        node: &mut NodeState,
        c: usize,
        req: Req,
        now: u8,
    ) -> (Vote, Effect) {
        let holder = req.holder(c);
        let expiry = now + req.arg();
        let member = &mut node.readers[slot(holder)];
        match req.kind() {
            // The scripts' first check, for a re-sent acquire (yes, the expiry kept) and a
            // repair that finds the member (no). Neither happens here: each request runs
            // once, and a repair follows the renewal that found the member missing.
            Kind::Acquire if *member != 0 => (Vote::Yes(0), Effect::Expires(*member)),
            Kind::Repair if *member != 0 => (Vote::Refused, Effect::Expires(*member)),
            Kind::Acquire | Kind::Repair if node.entry.is_some() => {
                if req.kind() == Kind::Repair && self.cfg.has(Bug::ReadRepairIgnoresWriter) {
                    *member = expiry;
                    return (Vote::Yes(0), Effect::Recreated(expiry));
                }
                (Vote::Refused, Effect::Refused(node.entry))
            }
            // The mark keeps new readers out; a repair is for a reader that holds already.
            Kind::Acquire if node.mark.is_some() => {
                (Vote::Refused, Effect::RefusedByMark(node.mark.unwrap()))
            }
            Kind::Acquire => {
                *member = expiry;
                if self.cfg.fencing == Some(Fencing::InAcquire) {
                    node.counter += 1;
                    (
                        Vote::Yes(node.counter),
                        Effect::Joined(expiry, Some(node.counter)),
                    )
                } else {
                    (Vote::Yes(0), Effect::Joined(expiry, None))
                }
            }
            Kind::Repair => {
                *member = expiry;
                (Vote::Yes(0), Effect::Recreated(expiry))
            }
            Kind::Incr => {
                node.counter += 1;
                (Vote::Yes(node.counter), Effect::Counter(node.counter))
            }
            Kind::FenceMax => {
                node.counter = node.counter.max(req.arg());
                (Vote::Yes(0), Effect::Counter(node.counter))
            }
            // PERMIT_EXTEND: `ZADD XX`, only for a live member (the bug: a plain `ZADD`).
            Kind::Extend if *member != 0 => {
                *member = expiry;
                (Vote::Yes(0), Effect::Expires(expiry))
            }
            Kind::Extend if self.cfg.has(Bug::ReaderExtendReAdds) => {
                *member = expiry;
                (Vote::Yes(0), Effect::Recreated(expiry))
            }
            Kind::Extend => (Vote::Refused, Effect::NotMember),
            Kind::Release if *member != 0 => {
                *member = 0;
                let whole = self.cfg.has(Bug::ReadReleaseDeletesTheSet);
                if whole {
                    node.readers = [0; MAX_C * MAX_ATTEMPTS];
                }
                (Vote::Yes(0), Effect::Removed(whole))
            }
            Kind::Release => (Vote::Refused, Effect::NotMember),
            Kind::Withdraw => unreachable!("a reader has no mark"),
            Kind::Publish => unreachable!("a reader publishes no record"),
        }
    }

    /// Client `c` counts node `n`'s answer (`None`: failed or timed out).
    pub(super) fn count(&self, s: &mut State, c: usize, n: usize, vote: Option<Vote>) {
        let fan = &mut s.clients[c].fan;
        match vote {
            Some(Vote::Yes(v)) => {
                fan.yes += 1;
                fan.max_yes = fan.max_yes.max(v);
                fan.yes_mask |= bit(n);
            }
            Some(Vote::Refused) => {
                fan.refused += 1;
                fan.refused_mask |= bit(n);
            }
            None => fan.failed += 1,
        }
    }

    /// Client `c` acts on the answers counted so far.
    pub(super) fn react(&self, s: &mut State, c: usize, log: &mut Log) {
        // The arbiter's one answer: with its yes alone the decision would still be pending.
        if s.clients[c].phase == Phase::Arbitrating {
            self.arbitrated(s, c, log);
            return;
        }
        let now = s.now;
        let fan = s.clients[c].fan;
        let decision = self.decision(&fan);
        let tally = move || {
            format!(
                "yes {}, refused {}, failed {}",
                fan.yes, fan.refused, fan.failed
            )
        };
        match (s.clients[c].phase, decision) {
            (_, Decision::Pending) => {}
            (Phase::Acquiring, Decision::Reached) => {
                self.stop_waiting(s, c);
                if s.clients[c].approach == Approach::ArbiterYes {
                    s.see(SEEN_ARBITER_QUORUM);
                }
                let give_back = self.give_back(&s.clients[c]);
                let cl = &mut s.clients[c];
                cl.acquire_yes = fan.yes_mask;
                cl.give_back = give_back;
                let quorum = || nodes_of(fan.yes_mask);
                match self.cfg.fencing {
                    None => {
                        log.note(|| format!("t={now} c{c} acquire reaches quorum {}", quorum()));
                        self.try_hold(s, c, log);
                    }
                    Some(Fencing::InAcquire) => {
                        let token = fan.max_yes;
                        cl.token = token;
                        cl.phase = Phase::Fencing;
                        log.note(|| {
                            let then = format!("token {token}, written back");
                            format!("t={now} c{c} acquire reaches quorum {}: {then}", quorum())
                        });
                        self.fan_out(s, c, Kind::FenceMax, token);
                    }
                    Some(Fencing::AfterQuorum) => {
                        cl.phase = Phase::Incrementing;
                        log.note(|| {
                            let quorum = quorum();
                            format!("t={now} c{c} acquire reaches quorum {quorum}: increments")
                        });
                        self.fan_out(s, c, Kind::Incr, 0);
                    }
                }
            }
            (Phase::Incrementing, Decision::Reached) => {
                self.stop_waiting(s, c);
                let token = fan.max_yes;
                s.clients[c].token = token;
                s.clients[c].phase = Phase::Fencing;
                log.note(|| {
                    format!("t={now} c{c} increments confirmed: token {token}, written back")
                });
                self.fan_out(s, c, Kind::FenceMax, token);
            }
            (Phase::Fencing, Decision::Reached) => {
                self.stop_waiting(s, c);
                log.note(|| format!("t={now} c{c} write-back confirmed by a quorum"));
                self.try_hold(s, c, log);
            }
            (Phase::Acquiring | Phase::Incrementing | Phase::Fencing, Decision::Impossible) => {
                self.stop_waiting(s, c);
                if s.clients[c].phase == Phase::Acquiring {
                    s.clients[c].acquire_yes = fan.yes_mask;
                    s.clients[c].give_back = self.give_back(&s.clients[c]);
                }
                log.note(|| format!("t={now} c{c} attempt fails ({})", tally()));
                self.rollback(s, c, log);
            }
            (
                Phase::Renewing {
                    next,
                    repair,
                    shortens,
                },
                Decision::Reached,
            ) => {
                // In time: `tick` turned a renewal still running at the deadline into a loss.
                // So `quorum::validity(ttl, now - start, 0)` holds: `now < deadline <= next`
                // when the deadline was cut, and `now < deadline < next` when it was not.
                if shortens {
                    s.see(SEEN_SHORTENED);
                }
                s.see(SEEN_RENEWED);
                let cl = &mut s.clients[c];
                cl.deadline = next;
                log.note(|| format!("t={now} c{c} extend confirmed: deadline {next}"));
                if repair {
                    cl.phase = Phase::Collecting;
                    if !cl.busy() {
                        self.finish_collect(s, c, log);
                    }
                } else {
                    self.stop_waiting(s, c);
                    s.clients[c].phase = Phase::Holding;
                }
            }
            (Phase::Renewing { .. }, Decision::Impossible) => {
                self.stop_waiting(s, c);
                let n = self.n() as u8;
                let cl = &mut s.clients[c];
                if n - fan.refused < self.cfg.quorum {
                    cl.phase = Phase::Lost;
                    s.see(SEEN_LOST);
                    log.note(|| format!("t={now} c{c} extend refused ({}): lock lost", tally()));
                } else {
                    cl.phase = Phase::Holding;
                    let deadline = cl.deadline;
                    log.note(|| {
                        format!(
                            "t={now} c{c} extend fails ({}): deadline stays {deadline}",
                            tally()
                        )
                    });
                }
            }
            (Phase::Collecting, _) => {
                if !s.clients[c].busy() {
                    self.finish_collect(s, c, log);
                }
            }
            (phase, _) => unreachable!("c{c} counts an answer in {phase:?}"),
        }
    }

    /// The acquire (and its fencing) succeeded: a guard if validity is left.
    pub(super) fn try_hold(&self, s: &mut State, c: usize, log: &mut Log) {
        let now = s.now;
        let ttl = self.cfg.plans[c].ttl;
        let cl = &mut s.clients[c];
        let deadline = cl.t0 + ttl;
        if now >= deadline {
            log.note(|| format!("t={now} c{c} validity exhausted (deadline {deadline})"));
            self.rollback(s, c, log);
            return;
        }
        cl.phase = Phase::Holding;
        cl.deadline = deadline;
        cl.approach = Approach::All;
        cl.give_back = 0;
        let holder = cl.holder(c);
        let token = cl.token;
        if self.cfg.fencing.is_some() {
            // A writer's token exceeds every earlier holder's, a reader's every earlier
            // writer's: readers that overlap may share a token.
            let writes = !self.cfg.reads(c);
            let above = if writes {
                s.max_token
            } else {
                s.max_writer_token
            };
            if token <= above {
                s.token_regressed = true;
            }
            s.max_token = s.max_token.max(token);
            if writes {
                s.max_writer_token = s.max_writer_token.max(token);
            }
            log.note(|| format!("t={now} c{c} HOLDS {holder} until {deadline}, token {token}"));
        } else {
            log.note(|| format!("t={now} c{c} HOLDS {holder} until {deadline}"));
        }
    }

    /// `acquire.rs`, `rollback`: compare-and-delete on every node (the bug: only where yes;
    /// the library leaves out only the nodes that answered "refused", where it is a no-op, and
    /// those never written to; `ordered` configurations leave them out too, see `give_back`).
    /// A waiting writer whose last attempt failed then withdraws its mark from every node
    /// (`acquire.rs`, `Withdraw`), behind the rollback on each connection.
    pub(super) fn rollback(&self, s: &mut State, c: usize, log: &mut Log) {
        let cl = &s.clients[c];
        let mask = if self.cfg.has(Bug::RollbackOnlyWhereYes) {
            cl.acquire_yes
        } else if self.cfg.ordered {
            cl.give_back
        } else {
            self.all()
        };
        self.rollback_on(s, c, mask, log);
    }

    /// `attempt.rs`, `Undo`: the caller dropped the acquire before it held. The requests not
    /// yet written are never written (the model's are all written); the rollback goes to
    /// every node, behind them on each connection, as a failed attempt's (the bug: nowhere).
    pub(super) fn cancel(&self, s: &mut State, c: usize, log: &mut Log) {
        self.stop_waiting(s, c);
        let now = s.now;
        let holder = s.clients[c].holder(c);
        log.note(|| format!("t={now} c{c}'s acquire of {holder} is cancelled by its caller"));
        let mask = match self.cfg.has(Bug::CancelLeavesEntries) {
            true => 0,
            false => self.all(),
        };
        self.rollback_on(s, c, mask, log);
    }

    fn rollback_on(&self, s: &mut State, c: usize, mask: u8, log: &mut Log) {
        let now = s.now;
        let cl = &mut s.clients[c];
        let holder = cl.holder(c);
        cl.approach = Approach::All;
        cl.give_back = 0;
        cl.cleanup[usize::from(holder.attempt)] = Cleanup {
            ended: true,
            sent: mask,
            done: 0,
        };
        cl.phase = Phase::Idle;
        s.see(SEEN_ROLLBACK);
        log.note(|| format!("t={now} c{c} rolls back {holder} on {}", nodes_of(mask)));
        let req = Req::new(Kind::Release, holder.attempt, 0, false);
        self.send(s, c, mask, req);
        let plan = &self.cfg.plans[c];
        if plan.role == Role::WaitingWriter && s.clients[c].attempts == plan.attempts {
            log.note(|| format!("t={now} c{c} gives up: withdraws its mark on all nodes"));
            let req = Req::new(Kind::Withdraw, holder.attempt, 0, false);
            self.send(s, c, self.all(), req);
        }
    }

    /// `lease.rs`, `renew`: the deadline is cut before a shortening request is sent.
    pub(super) fn renew(&self, s: &mut State, c: usize, ttl: u8, repair: bool, log: &mut Log) {
        let now = s.now;
        let next = now + ttl;
        let cut = !self.cfg.has(Bug::NoCutBeforeShorterExtend);
        let cl = &mut s.clients[c];
        if repair {
            cl.renewals += 1;
        } else {
            cl.extends += 1;
        }
        let what = if repair { "renews" } else { "extends" };
        let holder = cl.holder(c);
        let shortens = next < cl.deadline;
        if cut && shortens {
            cl.deadline = next;
            log.note(|| {
                let cut = format!("deadline cut to {next} before sending");
                format!("t={now} c{c} {what} {holder} to ttl {ttl}: {cut}")
            });
        } else {
            let deadline = cl.deadline;
            log.note(|| {
                format!("t={now} c{c} {what} {holder} to ttl {ttl} (deadline stays {deadline})")
            });
        }
        cl.phase = Phase::Renewing {
            next,
            repair,
            shortens,
        };
        self.fan_out(s, c, Kind::Extend, ttl);
    }

    /// The renewal stops waiting for answers and repairs the nodes that said "not held".
    pub(super) fn finish_collect(&self, s: &mut State, c: usize, log: &mut Log) {
        self.stop_waiting(s, c);
        let now = s.now;
        let lease = self.cfg.plans[c].ttl;
        let cl = &mut s.clients[c];
        cl.phase = Phase::Holding;
        let refused = cl.fan.refused_mask;
        if refused == 0 {
            return;
        }
        let deadline = cl.deadline;
        let ttl = if self.cfg.has(Bug::RepairBeyondValidity) {
            lease
        } else if now < deadline {
            deadline - now
        } else {
            log.note(|| format!("t={now} c{c} does not repair: the validity is over"));
            return;
        };
        if now >= deadline || now + ttl > deadline {
            s.repair_overrun = true;
        }
        let holder = cl.holder(c);
        log.note(|| {
            let nodes = nodes_of(refused);
            format!("t={now} c{c} repairs {holder} on {nodes} with ttl {ttl} (deadline {deadline})")
        });
        let req = Req::new(Kind::Repair, holder.attempt, ttl, false);
        self.send(s, c, refused, req);
    }

    pub(super) fn release(&self, s: &mut State, c: usize, log: &mut Log) {
        let now = s.now;
        let cl = &mut s.clients[c];
        let holder = cl.holder(c);
        cl.cleanup[usize::from(holder.attempt)] = Cleanup {
            ended: true,
            sent: self.all(),
            done: 0,
        };
        cl.phase = Phase::Idle;
        log.note(|| format!("t={now} c{c} releases {holder} on all nodes"));
        // A release differs from a rollback on a node only for a waiting writer's mark; the
        // others' releases keep `arg` 0, so that the model does not tell apart states that are
        // the same.
        let mode = u8::from(self.cfg.plans[c].role == Role::WaitingWriter);
        let req = Req::new(Kind::Release, holder.attempt, mode, false);
        self.send(s, c, self.all(), req);
    }

    pub(super) fn tick(&self, s: &mut State, log: &mut Log) {
        s.now += 1;
        let now = s.now;
        log.note(|| format!("t={now} tick"));
        for n in 0..self.n() {
            let before = s.nodes[n];
            if s.nodes[n].expire(now) {
                let after = s.nodes[n];
                log.note(|| format!("t={now} n{n}: {}", gone(&before, &after)));
            }
        }
        for c in 0..self.clients() {
            let cl = &s.clients[c];
            // `renew` waits for the quorum only until the current deadline.
            if matches!(cl.phase, Phase::Renewing { .. }) && now >= cl.deadline {
                self.stop_waiting(s, c);
                s.clients[c].phase = Phase::Lost;
                s.see(SEEN_LOST);
                log.note(|| {
                    format!("t={now} c{c} extend not confirmed by the deadline: lock lost")
                });
            }
        }
    }

    pub(super) fn give_up(&self, s: &mut State, c: usize, log: &mut Log) {
        let now = s.now;
        if s.clients[c].phase == Phase::Collecting {
            log.note(|| format!("t={now} c{c} stops collecting answers (next renewal due)"));
            self.finish_collect(s, c, log);
            return;
        }
        let fan = &mut s.clients[c].fan;
        let mut late = 0;
        for (n, slot) in fan.slots.iter_mut().enumerate() {
            if *slot != Slot::Idle {
                *slot = Slot::Idle;
                fan.failed += 1;
                late |= bit(n);
            }
        }
        log.note(|| format!("t={now} c{c} times out on {}", nodes_of(late)));
        self.stop_waiting(s, c);
        self.react(s, c, log);
    }

    /// The head request of `c`'s connection to `n` is answered `MOVED`: it was not run. The
    /// library counts it as a failure of the node for its call, and sends nothing again (the
    /// next call goes to the new primary), unless it is a compare-and-delete (a release,
    /// rollback or withdrawal), which follows the redirect; under [`Bug::FollowRedirect`]
    /// every request is sent again,
    /// behind the requests already on the way to the new primary (in the model, the same
    /// connection: the node's state is the slot's, wherever it is served).
    pub(super) fn redirect(&self, s: &mut State, c: usize, n: usize, log: &mut Log) {
        let now = s.now;
        let req = s.conn(c, n).pop();
        s.lost += 1;
        s.see(SEEN_REDIRECTED);
        // A compare-and-delete follows the redirect once (src/node/redirect.rs); the model
        // lets it follow every time, which covers once.
        let follows = matches!(req.kind(), Kind::Release | Kind::Withdraw);
        if follows && !self.cfg.has(Bug::FollowRedirect) {
            s.conn(c, n).push(req);
            log.note(|| {
                let req = req.describe(c, self.cfg.reads(c));
                format!("t={now} n{n} answers MOVED to c{c}'s {req}: followed to the new primary")
            });
            return;
        }
        if self.cfg.has(Bug::FollowRedirect) {
            s.conn(c, n).push(req);
            log.note(|| {
                let req = req.describe(c, self.cfg.reads(c));
                format!("t={now} n{n} answers MOVED to c{c}'s {req}: re-sent to the new primary")
            });
            return;
        }
        log.note(|| {
            let req = req.describe(c, self.cfg.reads(c));
            format!("t={now} n{n} answers MOVED to c{c}'s {req}: not run, not re-sent")
        });
        if req.wait() && s.clients[c].fan.slots[n] == Slot::Waiting {
            s.clients[c].fan.slots[n] = Slot::Idle;
            self.count(s, c, n, None);
            self.react(s, c, log);
        }
    }

    /// Applies `action` to `s`; the narration goes to `log`.
    pub(super) fn step(&self, s: &mut State, action: Action, log: &mut Log) {
        let now = s.now;
        match action {
            Action::Tick => self.tick(s, log),
            Action::Start(c) => self.start(s, usize::from(c), false, log),
            Action::StartOrdered(c) => self.start(s, usize::from(c), true, log),
            Action::Process(c, n) => self.process(s, usize::from(c), usize::from(n), log),
            Action::Lose(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                let req = s.conn(c, n).pop();
                if self.cfg.losses.is_some() {
                    s.lost += 1;
                }
                log.note(|| {
                    let req = req.describe(c, self.cfg.reads(c));
                    format!("t={now} c{c}'s {req} to n{n} is lost")
                });
            }
            Action::Redirect(c, n) => self.redirect(s, usize::from(c), usize::from(n), log),
            Action::Answer(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                let Slot::Replied(vote) = s.clients[c].fan.slots[n] else {
                    unreachable!("no reply from n{n} to c{c}")
                };
                s.clients[c].fan.slots[n] = Slot::Idle;
                log.note(|| format!("t={now} c{c} gets n{n}'s answer: {vote:?}"));
                self.count(s, c, n, Some(vote));
                self.react(s, c, log);
            }
            Action::GiveUp(c) => self.give_up(s, usize::from(c), log),
            Action::Skip(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                let req = s.conn(c, n).last().expect("a request to skip");
                s.conn(c, n).pop_back();
                let fan = &mut s.clients[c].fan;
                fan.slots[n] = Slot::Idle;
                fan.skipped += 1;
                if self.cfg.ordered {
                    fan.skipped_mask |= bit(n);
                }
                log.note(|| {
                    let req = req.describe(c, self.cfg.reads(c));
                    format!("t={now} c{c}'s breaker for n{n} is open: its {req} is not sent")
                });
                self.count(s, c, n, None);
                self.react(s, c, log);
            }
            Action::Extend(c, ttl) => self.renew(s, usize::from(c), ttl, false, log),
            Action::Renew(c) => {
                let c = usize::from(c);
                self.renew(s, c, self.cfg.plans[c].ttl, true, log);
            }
            Action::Release(c) => self.release(s, usize::from(c), log),
            Action::Cancel(c) => self.cancel(s, usize::from(c), log),
            Action::Publish(c) => {
                let c = usize::from(c);
                let holder = s.clients[c].holder(c);
                s.clients[c].published = true;
                for n in 0..self.n() {
                    s.conn(c, n)
                        .push(Req::new(Kind::Publish, holder.attempt, 0, false));
                }
                log.note(|| format!("t={now} c{c} publishes {holder}'s record on every node"));
            }
            Action::Read(n) => self.read(s, usize::from(n), log),
            Action::Break(n) => {
                let n = usize::from(n);
                s.broke |= bit(n);
                let broken = s.nodes[n].entry.map(|e| e.holder);
                if (0..self.clients())
                    .any(|c| s.clients[c].holds(now) && Some(s.clients[c].holder(c)) == broken)
                {
                    s.see(SEEN_BROKEN_HOLDER);
                }
                let node = &mut s.nodes[n];
                let before = node.entry;
                node.entry = match before {
                    _ if self.cfg.has(Bug::BreakDeletes) => None,
                    Some(e) => Some(Entry {
                        holder: e.holder.tombstone(),
                        expiry: e.expiry,
                    }),
                    None => None,
                };
                log.note(|| match (before, self.cfg.has(Bug::BreakDeletes)) {
                    (Some(e), true) => {
                        format!("t={now} the break reaches n{n}: {} DELETED", e.holder)
                    }
                    (Some(e), false) => format!(
                        "t={now} the break reaches n{n}: {} replaced by its tombstone until {}",
                        e.holder, e.expiry
                    ),
                    (None, _) => format!("t={now} the break reaches n{n}: nothing held"),
                });
            }
            Action::Restart(n) => {
                let n = usize::from(n);
                // (`settle_records` drops the node's record with its entry.)
                s.forgotten += 1;
                s.see(SEEN_FORGOTTEN);
                let node = s.nodes[n];
                log.note(|| {
                    let had: Vec<String> =
                        leases(&node).into_iter().map(|(name, _)| name).collect();
                    let had = if had.is_empty() {
                        "nothing".to_string()
                    } else {
                        had.join(", ")
                    };
                    format!(
                        "t={now} n{n} RESTARTS EMPTY (had {had}, counter {})",
                        node.counter
                    )
                });
                s.nodes[n] = NodeState::default();
            }
            Action::Sync(n) => {
                let n = usize::from(n);
                s.nodes[n].sync();
                log.note(|| format!("t={now} n{n} fsyncs its AOF"));
            }
            Action::Crash(n) => {
                let n = usize::from(n);
                s.crashes += 1;
                let before = s.nodes[n];
                let node = &mut s.nodes[n];
                node.entry = node.disk.entry;
                node.counter = node.disk.counter;
                if node.entry != before.entry || node.counter != before.counter {
                    s.see(SEEN_CRASH_LOST);
                }
                let after = s.nodes[n];
                log.note(|| {
                    format!(
                        "t={now} n{n} CRASHES (machine) and comes back with its disk: {} -> {}, counter {} -> {}",
                        before.entry.map_or("nothing".to_string(), |e| format!("{} until {}", e.holder, e.expiry)),
                        after.entry.map_or("nothing".to_string(), |e| format!("{} until {}", e.holder, e.expiry)),
                        before.counter,
                        after.counter,
                    )
                });
            }
            Action::ClockJump(n, to) => {
                let n = usize::from(n);
                s.forgotten += 1;
                s.see(SEEN_FORGOTTEN);
                let before = s.nodes[n];
                s.nodes[n].expire(to);
                let after = s.nodes[n];
                log.note(|| {
                    let what = gone(&before, &after);
                    format!("t={now} n{n} CLOCK JUMPS past {to}: {what} early")
                });
            }
        }
        if self.cfg.elections {
            self.settle_records(s);
        }
    }

    /// Elections: the leader read reads node `n` (`lua/holder_read.lua`): the entry's
    /// holder where its record names it. Once a quorum of the nodes read name one holder,
    /// the read returns it as the leader: property "a leader read names a holder that held"
    /// then asks that it held a guard at some point.
    fn read(&self, s: &mut State, n: usize, log: &mut Log) {
        let node = &s.nodes[n];
        let named = node.entry.filter(|e| node.record == Some(e.holder));
        s.read[n] = named.map_or(1, |e| 2 + slot(e.holder) as u8);
        let now = s.now;
        log.note(|| match named {
            Some(e) => format!(
                "t={now} the leader read reads n{n}: {} with its record",
                e.holder
            ),
            None => format!("t={now} the leader read reads n{n}: no leader"),
        });
        if let Some(e) = named {
            let shown = s.read.iter().filter(|&&r| r == s.read[n]).count();
            if shown == usize::from(self.cfg.quorum) {
                s.see(SEEN_LEADER_READ);
                let held = s.guarded & 1 << slot(e.holder) != 0;
                s.read_wrong |= !held;
                log.note(|| {
                    let what = if held {
                        "held a guard"
                    } else {
                        "NEVER HELD A GUARD"
                    };
                    format!(
                        "t={now} the leader read returns {} as the leader: it {what}",
                        e.holder
                    )
                });
            }
        }
    }

    /// After every step: the holders inside their validity are marked as having held; a
    /// record that no longer names its node's entry (released, expired, taken by another,
    /// restarted) is dropped, as no read would show it.
    pub(super) fn settle_records(&self, s: &mut State) {
        for c in 0..self.clients() {
            if s.clients[c].holds(s.now) {
                s.guarded |= 1 << slot(s.clients[c].holder(c));
            }
        }
        for node in &mut s.nodes[..self.n()] {
            if node.record.is_some() && node.record != node.entry.map(|e| e.holder) {
                node.record = None;
            }
        }
    }

    /// Renames the nodes so that equivalent states become one: nodes sorted by everything the
    /// state says about them. Ties are nodes the state cannot tell apart, so any order among
    /// them gives the same state. Returns the renaming: new node `i` is old node `order[i]`.
    ///
    /// In `ordered` configurations node 0 is the arbiter, which the protocol treats unlike
    /// the others: renaming it would merge states that behave differently (a state where n1
    /// has c0's entry and one where the arbiter has it). Node 0 then keeps its name, and only
    /// the other nodes, which the protocol treats alike, are sorted: still exact.
    pub(super) fn canonicalize(&self, s: &mut State) -> [usize; MAX_N] {
        let (n, clients) = (self.n(), self.clients());
        let key = |s: &State, i: usize| {
            let mut e = Enc::<96>::new();
            e.node(&s.nodes[i]);
            for c in 0..clients {
                let cl = &s.clients[c];
                e.fifo(&s.conns[c * MAX_N + i]);
                e.slot(cl.fan.slots[i]);
                let masks = cl.acquire_yes >> i & 1
                    | (cl.fan.yes_mask >> i & 1) << 1
                    | (cl.fan.refused_mask >> i & 1) << 2
                    | (cl.cleanup[0].sent >> i & 1) << 3
                    | (cl.cleanup[0].done >> i & 1) << 4
                    | (cl.cleanup[1].sent >> i & 1) << 5
                    | (cl.cleanup[1].done >> i & 1) << 6
                    | (cl.give_back >> i & 1) << 7;
                e.put(&[masks, cl.fan.skipped_mask >> i & 1]);
            }
            e.put(&[s.read[i], s.broke >> i & 1]);
            e
        };
        let keys: [Enc<96>; MAX_N] = [
            key(s, 0),
            key(s, 1),
            key(s, 2),
            if n > 3 { key(s, 3) } else { Enc::new() },
            if n > 4 { key(s, 4) } else { Enc::new() },
        ];
        let mut order = [0, 1, 2, 3, 4];
        let fixed = if self.cfg.ordered { ARBITER + 1 } else { 0 };
        order[fixed..n].sort_by(|&a, &b| keys[a].bytes().cmp(keys[b].bytes()));
        if order[..n].iter().enumerate().all(|(i, &o)| i == o) {
            return order;
        }
        let old = *s;
        let remap = |m: u8| (0..n).fold(0u8, |acc, i| acc | (m >> order[i] & 1) << i);
        for (i, &o) in order[..n].iter().enumerate() {
            s.nodes[i] = old.nodes[o];
            s.read[i] = old.read[o];
            for c in 0..clients {
                s.conns[c * MAX_N + i] = old.conns[c * MAX_N + o];
                s.clients[c].fan.slots[i] = old.clients[c].fan.slots[o];
            }
        }
        s.broke = remap(old.broke);
        for cl in &mut s.clients[..clients] {
            cl.acquire_yes = remap(cl.acquire_yes);
            cl.give_back = remap(cl.give_back);
            cl.fan.yes_mask = remap(cl.fan.yes_mask);
            cl.fan.refused_mask = remap(cl.fan.refused_mask);
            cl.fan.skipped_mask = remap(cl.fan.skipped_mask);
            for cleanup in &mut cl.cleanup {
                cleanup.sent = remap(cleanup.sent);
                cleanup.done = remap(cleanup.done);
            }
        }
        order
    }

    /// Exclusion: a writer (a mutex client) inside its validity is the only client inside
    /// its validity; readers may overlap each other.
    pub(super) fn excluded(&self, s: &State) -> bool {
        let holding = || (0..self.clients()).filter(|&c| s.clients[c].holds(s.now));
        holding().count() <= 1 || holding().all(|c| self.cfg.reads(c))
    }

    /// Readers inside their validity.
    pub(super) fn readers_holding(&self, s: &State) -> usize {
        (0..self.clients())
            .filter(|&c| self.cfg.reads(c) && s.clients[c].holds(s.now))
            .count()
    }

    /// A writer inside its validity while a node has another writer's mark.
    pub(super) fn under_mark(&self, s: &State) -> bool {
        (0..self.clients()).any(|c| {
            !self.cfg.reads(c)
                && s.clients[c].holds(s.now)
                && s.nodes[..self.n()]
                    .iter()
                    .any(|node| node.mark.is_some_and(|m| usize::from(m.waiter) != c))
        })
    }

    /// Invariant 2 per client: while a client is inside its validity, at least `q - f` nodes
    /// hold its entry or member (`f`: forgetful faults so far). A writer and another client
    /// inside their validity at once would need `2q - f` of them on `N` nodes with no node
    /// holding both (see `node_excluded`), impossible when `f <= 2q - N - 1`.
    pub(super) fn supported(&self, s: &State) -> bool {
        (0..self.clients()).all(|c| {
            let cl = &s.clients[c];
            if !cl.holds(s.now) {
                return true;
            }
            let holder = cl.holder(c);
            // A break's tombstone keeps the key for the holder it replaced, until the same
            // expiry.
            let entries = s.nodes[..self.n()]
                .iter()
                .filter(|node| {
                    node.keeps(holder) || node.entry.is_some_and(|e| e.holder == holder.tombstone())
                })
                .count() as u8;
            entries + s.forgotten >= self.cfg.quorum
        })
    }

    /// What each node's scripts keep, atomically: never a writer's entry and a live reader
    /// on one node at once.
    pub(super) fn node_excluded(&self, s: &State) -> bool {
        s.nodes[..self.n()]
            .iter()
            .all(|node| node.entry.is_none() || !node.has_readers())
    }

    /// Invariant 4: once an attempt's rollback (or release) ran on every node it was sent to,
    /// no node keeps the attempt's entry (the attempt's own requests ran before it).
    pub(super) fn rolled_back(&self, s: &State) -> bool {
        (0..self.clients()).all(|c| {
            s.clients[c]
                .cleanup
                .iter()
                .enumerate()
                .all(|(attempt, cleanup)| {
                    let holder = Holder {
                        client: c as u8,
                        attempt: attempt as u8,
                    };
                    // Durable configurations: releases and rollbacks are not waited for,
                    // and a crash brings an entry back from the disk where its delete was
                    // not fsynced yet (until its TTL, as any entry).
                    let revived = |node: &NodeState| {
                        self.cfg.durable && s.crashes > 0 && node.disk.entry == node.entry
                    };
                    !(cleanup.ended && cleanup.done == cleanup.sent)
                        || s.nodes[..self.n()]
                            .iter()
                            .all(|node| !node.keeps(holder) || revived(node))
                })
        })
    }
}

/// A property's condition.
pub(super) type Condition = fn(&Protocol, &State) -> bool;

/// The `sometimes` properties: each client holds at some point.
pub(super) const HOLDS: [(&str, Condition); MAX_C] = [
    ("c0 holds", |_, s| s.clients[0].holds(s.now)),
    ("c1 holds", |_, s| s.clients[1].holds(s.now)),
    ("c2 holds", |_, s| s.clients[2].holds(s.now)),
];

/// The coverage properties: paths a configuration must reach.
pub(super) const COVERAGE: [(u16, &str, Condition); 16] = [
    (
        SEEN_CRASH_LOST,
        "reaches a crash that lost a write",
        |_, s| s.saw(SEEN_CRASH_LOST),
    ),
    (
        SEEN_BROKEN_HOLDER,
        "reaches a break of a holder's entry",
        |_, s| s.saw(SEEN_BROKEN_HOLDER),
    ),
    (
        SEEN_LEADER_READ,
        "reaches a leader read that names a leader",
        |_, s| s.saw(SEEN_LEADER_READ),
    ),
    (SEEN_ROLLBACK, "reaches a rollback", |_, s| {
        s.saw(SEEN_ROLLBACK)
    }),
    (SEEN_RENEWED, "reaches a confirmed extend", |_, s| {
        s.saw(SEEN_RENEWED)
    }),
    (
        SEEN_SHORTENED,
        "reaches a confirmed shorter extend",
        |_, s| s.saw(SEEN_SHORTENED),
    ),
    (SEEN_REPAIRED, "reaches a repaired entry", |_, s| {
        s.saw(SEEN_REPAIRED)
    }),
    (SEEN_LOST, "reaches a lost lock", |_, s| s.saw(SEEN_LOST)),
    (SEEN_FORGOTTEN, "reaches a forgotten entry", |_, s| {
        s.saw(SEEN_FORGOTTEN)
    }),
    (
        SEEN_MARK_REFUSED,
        "reaches a reader refused by a pending mark",
        |_, s| s.saw(SEEN_MARK_REFUSED),
    ),
    (SEEN_UNMARKED, "reaches a mark taken back", |_, s| {
        s.saw(SEEN_UNMARKED)
    }),
    (
        SEEN_SHARED,
        "reaches two readers holding at once",
        |m, s| m.readers_holding(s) >= 2,
    ),
    (
        SEEN_UNDER_MARK,
        "reaches a writer holding under another's mark",
        |m, s| m.under_mark(s),
    ),
    (
        SEEN_ARBITER_REFUSED,
        "reaches an ordered attempt refused by the arbiter",
        |_, s| s.saw(SEEN_ARBITER_REFUSED),
    ),
    (
        SEEN_ARBITER_QUORUM,
        "reaches an arbiter's yes and then the quorum",
        |_, s| s.saw(SEEN_ARBITER_QUORUM),
    ),
    (
        SEEN_REDIRECTED,
        "reaches a request answered MOVED",
        |_, s| s.saw(SEEN_REDIRECTED),
    ),
];

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let empty = State {
            now: 0,
            lost: 0,
            forgotten: 0,
            crashes: 0,
            max_token: 0,
            max_writer_token: 0,
            token_regressed: false,
            repair_overrun: false,
            seen: 0,
            nodes: [NodeState::default(); MAX_N],
            clients: [Client::default(); MAX_C],
            conns: [Fifo::default(); MAX_C * MAX_N],
            read: [0; MAX_N],
            guarded: 0,
            read_wrong: false,
            broke: 0,
        };
        // Fencing counters left by an earlier history: every vector of values up to
        // `counters`. The largest token handed out before is at most the q-th largest
        // counter, as its write-back reached a quorum.
        let mut states: Vec<State> = Vec::new();
        let values = usize::from(self.cfg.counters) + 1;
        for code in 0..values.pow(self.n() as u32) {
            let mut s = empty;
            let mut rest = code;
            for (i, node) in s.nodes[..self.n()].iter_mut().enumerate() {
                node.counter = match self.cfg.start_counters {
                    Some(counters) => counters[i],
                    None => (rest % values) as u8,
                };
                rest /= values;
                // An earlier history's counters are on disk.
                if self.cfg.durable {
                    node.disk.counter = node.counter;
                }
            }
            let mut counters: Vec<u8> = s.nodes[..self.n()].iter().map(|n| n.counter).collect();
            counters.sort_unstable_by(|a, b| b.cmp(a));
            // Taken as a writer's, which every later holder's token must exceed.
            s.max_token = counters[usize::from(self.cfg.quorum) - 1];
            s.max_writer_token = s.max_token;
            if self.cfg.symmetry {
                self.canonicalize(&mut s);
            }
            if !states.contains(&s) {
                states.push(s);
            }
        }
        states
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let cfg = &self.cfg;
        if self.tick_enabled(s) {
            actions.push(Action::Tick);
        }
        let may_lose = cfg.losses.is_none_or(|max| s.lost < max);
        for (c, plan) in cfg.plans.iter().enumerate() {
            let cl = &s.clients[c];
            let c8 = c as u8;
            match cl.phase {
                Phase::Idle if cl.attempts < plan.attempts => {
                    actions.push(Action::Start(c8));
                    if cfg.ordered {
                        actions.push(Action::StartOrdered(c8));
                    }
                }
                Phase::Holding => {
                    if s.now < cl.deadline {
                        if cl.extends < plan.extends {
                            for &ttl in plan.extend_to {
                                actions.push(Action::Extend(c8, ttl));
                            }
                        }
                        if cl.renewals < plan.renewals {
                            actions.push(Action::Renew(c8));
                        }
                    }
                    if plan.release {
                        actions.push(Action::Release(c8));
                    }
                    if cfg.elections && !cl.published && s.now < cl.deadline {
                        actions.push(Action::Publish(c8));
                    }
                }
                Phase::Lost if plan.release => actions.push(Action::Release(c8)),
                _ => {}
            }
            let attempting = matches!(
                cl.phase,
                Phase::Arbitrating | Phase::Acquiring | Phase::Incrementing | Phase::Fencing
            );
            if cfg.cancels && attempting {
                actions.push(Action::Cancel(c8));
            }
            if cfg.timeouts & bit(c) != 0 && cl.busy() {
                actions.push(Action::GiveUp(c8));
            }
            for n in 0..self.n() {
                let n8 = n as u8;
                let conn = &s.conns[c * MAX_N + n];
                if cfg.skips
                    && cl.fan.slots[n] == Slot::Waiting
                    && conn.last().is_some_and(Req::wait)
                {
                    actions.push(Action::Skip(c8, n8));
                }
                if !conn.is_empty() {
                    actions.push(Action::Process(c8, n8));
                    if may_lose {
                        actions.push(Action::Lose(c8, n8));
                        if cfg.redirects {
                            actions.push(Action::Redirect(c8, n8));
                        }
                    }
                }
                if let Slot::Replied(_) = cl.fan.slots[n] {
                    actions.push(Action::Answer(c8, n8));
                }
            }
        }
        if cfg.elections {
            for n in 0..self.n() {
                if s.read[n] == 0 {
                    actions.push(Action::Read(n as u8));
                }
            }
        }
        if cfg.breaks {
            for n in 0..self.n() {
                let live = s.nodes[n].entry.is_some_and(|e| !e.holder.is_tombstone());
                if s.broke & bit(n) == 0 && live {
                    actions.push(Action::Break(n as u8));
                }
            }
        }
        if cfg.durable {
            for n in 0..self.n() {
                // Only what changes something: a node with writes not on its disk yet.
                if !s.nodes[n].synced() {
                    actions.push(Action::Sync(n as u8));
                    if s.crashes < cfg.crashes {
                        actions.push(Action::Crash(n as u8));
                    }
                }
            }
        }
        if s.forgotten < cfg.forgetful {
            for n in 0..self.n() {
                let node = &s.nodes[n];
                // Only faults that change something: a restart of a node that has something,
                // a jump past each expiry on the node (a jump past none changes nothing, and
                // jumps between two expiries do the same as a jump past the earlier one).
                if node.expiries().next().is_some() || node.counter > 0 {
                    actions.push(Action::Restart(n as u8));
                }
                let mut past = 0u32;
                for expiry in node.expiries() {
                    if past & 1 << expiry == 0 {
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
        if self.cfg.symmetry {
            self.canonicalize(&mut s);
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::<Self>::always("exclusion", |m, s| m.excluded(s)),
            Property::<Self>::always("support", |m, s| m.supported(s)),
            Property::<Self>::always("node exclusion", |m, s| m.node_excluded(s)),
            Property::<Self>::always("tokens increase", |_, s| !s.token_regressed),
            Property::<Self>::always("full rollback", |m, s| m.rolled_back(s)),
            Property::<Self>::always("repair within validity", |_, s| !s.repair_overrun),
            Property::<Self>::always("a leader read names a holder that held", |_, s| {
                !s.read_wrong
            }),
        ];
        for (name, holds) in &HOLDS[..self.clients()] {
            p.push(Property::sometimes(name, *holds));
        }
        for (flag, name, reached) in COVERAGE {
            if self.cfg.cover & flag != 0 {
                p.push(Property::sometimes(name, reached));
            }
        }
        if self.cfg.liveness {
            p.push(Property::<Self>::eventually(
                "c0 eventually holds",
                |_, s| s.clients[0].holds(s.now),
            ));
        }
        p
    }
}
