//! What a node that stopped answering may still be sent (see [`Backlog`]).

use crate::rules::config::from_node_timeout::breaker_silence;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The requests written to one connection and not answered yet, as far as this client can
/// tell: a node answers in order, so an answer to a request says that every request written
/// before it was answered too, also those whose callers stopped waiting (timed out) and will
/// never read their answers.
///
/// A node that stopped answering (frozen, black-holed) would otherwise collect every request
/// of this client, each one timed out and forgotten by its caller but still queued on the
/// connection; once it answers again, new requests would wait behind all of them. Worse, every
/// operation would wait a whole node timeout for it before it could count it as a "no": an
/// attempt that split the live nodes (two yes, two no, the silent one unknown) holds its
/// entries, and keeps other clients out, until then.
///
/// So this is also the node's circuit breaker: once the node has left a request unanswered
/// for longer than the node timeout (it answered nothing since that request was written), and
/// a wait for one of its answers ran out meanwhile (a caller's node timeout or fan-out
/// deadline, or a follow-up's node timeout: see [`waited_out`](Self::waited_out)), requests
/// fail at once without being written ("not sent", counted as a timeout: a "no" that
/// costs nothing to wait for). One probe per node timeout goes out instead, a `PING` of its
/// own that no operation waits for (an operation carrying the probe would wait a node timeout
/// for it, and the clients that act least often would carry most probes and always lose);
/// its answer closes the breaker, as does any late answer to an earlier request (a node that
/// was only slow for a moment is back at its next answer), whoever waits for it: a request
/// whose caller went away before reading its answer (a timeout around the call, a decided
/// fan-out, a stalled thread) is followed by a `PING` of the connection's own, at most one
/// out at a time, whose answer counts it (`send::Unread`).
///
/// Releases and rollbacks still go through an open breaker while fewer than
/// [`MAX_SILENT_BACKLOG`] requests are unanswered: one must follow the acquire it undoes on a
/// node that is only slow (else its entry stays until its TTL). A rollback is not sent at all
/// where the acquire was never written. The quorum is still counted over all N
/// nodes; a request not sent only stands for the answer the node would not have given in
/// time.
pub(super) struct Backlog {
    /// Sequence number of the latest request written.
    written: AtomicU64,
    /// The highest sequence number answered.
    answered: AtomicU64,
    /// When (ms since `epoch`) the node last answered, or a request was written while
    /// everything before had been answered.
    quiet_since: AtomicU64,
    /// When (ms since `epoch`) the latest probe was let through.
    probed_at: AtomicU64,
    /// The node's smoothed round trip in µs (0: none measured yet), for the choice of a key's
    /// arbiter (see `take::arbiter`).
    rtt_us: AtomicU64,
    /// A follow-up `PING` is under way (see [`follow_up_wanted`](Self::follow_up_wanted)).
    following: AtomicBool,
    /// A request was left unread after the follow-up under way was written.
    follow_again: AtomicBool,
    /// A wait for an answer ran out since the node last answered.
    waited_out: AtomicBool,
    epoch: tokio::time::Instant,
}

/// How many unanswered requests a silent node may collect through an open breaker (releases
/// and rollbacks, see [`Backlog`]): its answers to them, once it is back, take well under a
/// millisecond each.
pub(super) const MAX_SILENT_BACKLOG: u64 = 256;

/// What [`Backlog::admit`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    /// Write the request, numbered so.
    Send(u64),
    /// Do not write it; when `probe` is given, write a probe of the breaker's own, numbered so.
    Refused { probe: Option<u64> },
}

impl Admit {
    #[cfg(test)]
    fn sent(self) -> Option<u64> {
        match self {
            Admit::Send(seq) => Some(seq),
            Admit::Refused { .. } => None,
        }
    }

    #[cfg(test)]
    fn probe(self) -> Option<u64> {
        match self {
            Admit::Refused { probe } => probe,
            Admit::Send(_) => None,
        }
    }
}

impl Backlog {
    pub(super) fn new() -> Backlog {
        Backlog {
            written: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            quiet_since: AtomicU64::new(0),
            probed_at: AtomicU64::new(0),
            rtt_us: AtomicU64::new(0),
            following: AtomicBool::new(false),
            follow_again: AtomicBool::new(false),
            waited_out: AtomicBool::new(false),
            epoch: tokio::time::Instant::now(),
        }
    }

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A sequence number for a request about to be written, or, when it must not be (the
    /// node has left a request unanswered for longer than `timeout`), whether a probe is due
    /// (none went out for `timeout`) and its sequence number.
    pub(super) fn admit(&self, timeout: Duration, cleanup: bool) -> Admit {
        let now = self.now_ms();
        let timeout = u64::try_from(breaker_silence(timeout).as_millis()).unwrap_or(u64::MAX);
        let written = self.written.load(Ordering::Acquire);
        let outstanding = written.saturating_sub(self.answered.load(Ordering::Acquire));
        if outstanding == 0 {
            self.quiet_since.store(now, Ordering::Release);
        } else if now.saturating_sub(self.quiet_since.load(Ordering::Acquire)) > timeout
            && (self.waited_out.load(Ordering::Acquire)
                || crate::failpoints::on(crate::failpoints::FailPoint::AbandonedAnswersUncounted))
            && !(cleanup && outstanding < MAX_SILENT_BACKLOG)
        {
            let probed = self.probed_at.load(Ordering::Acquire);
            if now.saturating_sub(probed) <= timeout
                || self
                    .probed_at
                    .compare_exchange(probed, now, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                return Admit::Refused { probe: None };
            }
            return Admit::Refused {
                probe: Some(self.written.fetch_add(1, Ordering::AcqRel) + 1),
            };
        }
        Admit::Send(self.written.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// The request numbered `seq` was answered (and so was every request before it).
    pub(super) fn answered(&self, seq: u64) {
        self.answered.fetch_max(seq, Ordering::AcqRel);
        self.quiet_since.store(self.now_ms(), Ordering::Release);
        self.waited_out.store(false, Ordering::Release);
    }

    /// A wait for an answer ran out: a caller dropped its request when its node timeout or
    /// deadline passed, or a follow-up `PING` went unanswered for a node timeout. The breaker
    /// opens only once this happened since the node's last answer: wall time alone would
    /// take the client's own stall (a thread blocked while the answers arrived, unread) for
    /// the node's silence, and fail the next call on a healthy fleet. A caller that went away
    /// early (a timeout around the call) says nothing here; its follow-up does, a node
    /// timeout later.
    pub(super) fn waited_out(&self) {
        self.waited_out.store(true, Ordering::Release);
    }

    /// A request was written and its caller went away before reading the answer: whether the
    /// caller is to start a follow-up `PING` (none is under way; one under way is asked to
    /// send another, behind this request, once it is answered). The connection reads every
    /// answer, whoever waits for it; only a follow-up can count the unread ones (a node
    /// answers in order). At most one follow-up per connection is out at a time.
    pub(super) fn follow_up_wanted(&self) -> bool {
        self.follow_again.store(true, Ordering::Release);
        !self.following.swap(true, Ordering::AcqRel)
    }

    /// The follow-up `PING` is about to be written: its sequence number.
    pub(super) fn follow_up_sent(&self) -> u64 {
        self.follow_again.store(false, Ordering::Release);
        self.written.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The follow-up was answered: whether to send another (a request was left unread after
    /// it was written). When not, the follow-up has ended.
    pub(super) fn follow_up_again(&self) -> bool {
        if self.follow_again.load(Ordering::Acquire) {
            return true;
        }
        self.following.store(false, Ordering::Release);
        // A request left unread between the load and the store found a follow-up under way:
        // take it on, unless a new follow-up already did.
        self.follow_again.load(Ordering::Acquire) && !self.following.swap(true, Ordering::AcqRel)
    }

    /// The follow-up ended without an answer (the node stayed silent past its wait, or the
    /// connection failed): the breaker decides from here, as for any unanswered request.
    pub(super) fn follow_up_ended(&self) {
        self.following.store(false, Ordering::Release);
    }

    /// Folds one request's round trip into the smoothed round trip (weight 1/8).
    pub(super) fn round_trip(&self, rtt: Duration) {
        let sample = u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX).max(1);
        let old = self.rtt_us.load(Ordering::Relaxed);
        let new = match old {
            0 => sample,
            _ => old - old / 8 + sample / 8,
        };
        self.rtt_us.store(new.max(1), Ordering::Relaxed);
    }

    /// A request went unanswered for `waited`: its round trip is at least that. Folded in
    /// (as [`round_trip`](Self::round_trip)) only when it is above the estimate, so that a
    /// request abandoned early says nothing, and one abandoned after a node timeout raises
    /// the estimate of a node that answers only after its callers gave up.
    pub(super) fn at_least(&self, waited: Duration) {
        let waited_us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        if waited_us > self.rtt_us.load(Ordering::Relaxed) {
            self.round_trip(waited);
        }
    }

    /// The smoothed round trip in µs, unless the breaker is open or about to open (a request
    /// unanswered for longer than `timeout`); `Some(0)` before any answer.
    pub(super) fn answering(&self, timeout: Duration) -> Option<u64> {
        let timeout = u64::try_from(breaker_silence(timeout).as_millis()).unwrap_or(u64::MAX);
        let silent = self.outstanding() > 0
            && self
                .now_ms()
                .saturating_sub(self.quiet_since.load(Ordering::Acquire))
                > timeout;
        (!silent).then(|| self.rtt_us.load(Ordering::Relaxed))
    }

    /// Requests written and not answered yet.
    pub(super) fn outstanding(&self) -> u64 {
        self.written
            .load(Ordering::Acquire)
            .saturating_sub(self.answered.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_follow_up_at_a_time_and_another_for_a_request_left_unread_behind_it() {
        let backlog = Backlog::new();
        let timeout = Duration::from_millis(100);
        let a = backlog.admit(timeout, false).sent().unwrap();
        assert!(
            backlog.follow_up_wanted(),
            "the first unread request starts one"
        );
        let ping = backlog.follow_up_sent();
        assert!(ping > a);
        let b = backlog.admit(timeout, false).sent().unwrap();
        assert!(
            !backlog.follow_up_wanted(),
            "one is under way: it is asked for another"
        );
        backlog.answered(ping);
        assert!(
            backlog.follow_up_again(),
            "b was left unread behind the first ping"
        );
        let ping2 = backlog.follow_up_sent();
        assert!(ping2 > b);
        backlog.answered(ping2);
        assert!(
            !backlog.follow_up_again(),
            "nothing left unread: the follow-up ends"
        );
        assert_eq!(backlog.outstanding(), 0);
        assert!(
            backlog.follow_up_wanted(),
            "the next unread request starts a new one"
        );
        backlog.follow_up_ended();
        assert!(
            backlog.follow_up_wanted(),
            "an ended follow-up leaves room for the next"
        );
    }

    #[test]
    fn requests_abandoned_after_a_node_timeout_raise_the_round_trip_of_a_slow_node() {
        let backlog = Backlog::new();
        let timeout = Duration::from_millis(250);
        backlog.round_trip(Duration::from_micros(200));
        // Abandoned early (a decided fan-out): says nothing about the node.
        backlog.at_least(Duration::from_micros(50));
        assert_eq!(backlog.answering(timeout), Some(200));
        // Abandoned at the node timeout, three times: the estimate passes a quarter of the
        // node timeout, the arbiter's floor (`arbiter`), so the node is no longer chosen.
        for _ in 0..3 {
            backlog.at_least(timeout);
        }
        let rtt = backlog.answering(timeout).unwrap();
        assert!(rtt > 250_000 / 4, "{rtt} µs");
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_silent_for_a_timeout_gets_one_probe_per_timeout_until_it_answers() {
        let timeout = Duration::from_millis(100);
        let backlog = Backlog::new();
        // A healthy node: requests come and go; nothing is held back however many are out.
        for _ in 0..1000 {
            assert!(backlog.admit(timeout, false).sent().is_some());
        }
        backlog.answered(1000);
        assert_eq!(backlog.outstanding(), 0);
        // Many requests at once, answered a moment later: busy, not silent.
        let mut last = 0;
        for _ in 0..512 {
            last = backlog
                .admit(timeout, false)
                .sent()
                .expect("a busy node takes requests");
        }
        tokio::time::advance(timeout / 2).await;
        assert!(
            backlog.admit(timeout, false).sent().is_some(),
            "silent for less than the timeout"
        );
        backlog.answered(last + 1);
        // The node stops answering: one request written, nothing answered for a timeout...
        let unanswered = backlog.admit(timeout, false).sent().unwrap();
        tokio::time::advance(timeout * 2).await;
        assert!(
            backlog.admit(timeout, false).sent().is_some(),
            "no wait ran out yet: the client itself may have stalled"
        );
        backlog.waited_out();
        // ...then, once its caller's wait ran out, nothing is sent, but one probe of the breaker's own per timeout.
        let probe = backlog.admit(timeout, false).probe().expect("the probe");
        for _ in 0..100 {
            assert_eq!(
                backlog.admit(timeout, false),
                Admit::Refused { probe: None }
            );
        }
        tokio::time::advance(timeout + Duration::from_millis(1)).await;
        let probe2 = backlog
            .admit(timeout, false)
            .probe()
            .expect("the next probe");
        assert!(probe2 > probe);
        assert_eq!(
            backlog.admit(timeout, false),
            Admit::Refused { probe: None }
        );
        assert_eq!(
            backlog.outstanding(),
            4,
            "the bound: two requests and two probes"
        );
        // A late answer to the first request: the node was only slow; it is back.
        backlog.answered(unanswered);
        assert!(
            backlog.admit(timeout, false).sent().is_some(),
            "back at its next answer"
        );
        // It stops again, and comes back by answering a probe (so, everything before it).
        tokio::time::advance(timeout * 2).await;
        backlog.waited_out();
        let probe3 = backlog.admit(timeout, false).probe().expect("a probe");
        assert_eq!(
            backlog.admit(timeout, false),
            Admit::Refused { probe: None }
        );
        backlog.answered(probe3);
        assert_eq!(backlog.outstanding(), 0);
        assert!(
            backlog.admit(timeout, false).sent().is_some(),
            "flowing again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_client_does_not_take_its_unread_answers_for_silence() {
        let timeout = Duration::from_millis(100);
        let backlog = Backlog::new();
        let written = backlog.admit(timeout, false).sent().unwrap();
        // The client's thread stalls for several timeouts with the request out: its answer
        // came, unread, and no caller's timer could run.
        tokio::time::advance(timeout * 7).await;
        assert!(
            backlog.admit(timeout, false).sent().is_some(),
            "the next call is written"
        );
        // The answers are read: nothing was ever wrong.
        backlog.answered(written + 1);
        assert_eq!(backlog.outstanding(), 0);
        // Had a caller's wait run out instead (a silent node), the breaker would be open.
        let silent = backlog.admit(timeout, false).sent().unwrap();
        tokio::time::advance(timeout * 2).await;
        backlog.waited_out();
        assert!(backlog.admit(timeout, false).probe().is_some());
        backlog.answered(silent);
        assert!(
            backlog.admit(timeout, false).sent().is_some(),
            "an answer clears it"
        );
    }
}
