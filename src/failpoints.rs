//! Fail points: known classes of defect, put back at run time so that the generative
//! checker's negative controls (tests/chaos_controls.rs) can show that it catches each. With
//! the `failpoints` feature they are compiled in and off until [`enable`] turns one on (for
//! the whole process); without it every check is a constant `false`.

#[cfg(feature = "failpoints")]
use std::sync::atomic::{AtomicU32, Ordering};

/// A defect to put back.
// Public with the feature (the module is then public), crate-private without.
#[cfg_attr(not(feature = "failpoints"), allow(unreachable_pub))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailPoint {
    /// Every fan-out counts one confirmation as its quorum: two clients can hold one key
    /// (each on nodes the other did not reach first: a slow link, a restarted node).
    QuorumOfOne,
    /// A call by holder value from the guard's own client goes straight to the nodes: the
    /// guard keeps saying held after its lock was released (issue 30's item 2).
    HolderCallBypassesGuard,
    /// Answers to requests whose callers went away are never counted, and the breaker opens
    /// on wall time alone: the next call after a cancelled one fails on a healthy fleet
    /// (issue 30's item 1).
    AbandonedAnswersUncounted,
    /// A waiter leaves without unsubscribing its key's release channel.
    SubscriptionLeft,
    /// A guard reports a fencing token 2 below the one it was given, for every third token.
    TokenGoesBack,
    /// A release that a node refused (its entry holds another holder's value, or none)
    /// reports success: from the caller's side, a release of a lock someone else holds.
    RefusedReleaseReportsOk,
    /// A fair waiter joins the line at a random place at or before its ticket's: a later
    /// waiter may be served before an earlier one.
    FairPlaceAtRandom,
    /// A leader publishes the term after its own: leader reads show a term its campaign
    /// never had.
    LeaderTermOffByOne,
    /// A break deletes the entries instead of leaving tombstones, and tells no holder (an
    /// operator's `DEL` of the key): a broken holder still believes it holds while another
    /// takes the key.
    BreakDeletes,
    /// The holder read shows a holder record whatever holder it names: a record left by an
    /// earlier holder labels the next one.
    StaleRecordShown,
    /// A semaphore of slots takes one slot more than its permits (`K#P` too): P + 1 holders.
    SlotBeyondPermits,
    /// Under durable votes, a vote counts whatever its `WAITAOF` answers (a node whose AOF
    /// is off, or one that answers before its fsync): a machine crash then loses a counted
    /// vote.
    VoteBeforeFsync,
}

#[cfg(feature = "failpoints")]
static ON: AtomicU32 = AtomicU32::new(0);

#[cfg(feature = "failpoints")]
fn bit(point: FailPoint) -> u32 {
    1 << (point as u32)
}

/// Turns `point` on for the whole process.
#[cfg(feature = "failpoints")]
pub fn enable(point: FailPoint) {
    ON.fetch_or(bit(point), Ordering::SeqCst);
}

/// Turns every fail point off.
#[cfg(feature = "failpoints")]
pub fn disable_all() {
    ON.store(0, Ordering::SeqCst);
}

/// Whether `point` is on.
#[cfg(feature = "failpoints")]
pub(crate) fn on(point: FailPoint) -> bool {
    ON.load(Ordering::Relaxed) & bit(point) != 0
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn on(_point: FailPoint) -> bool {
    false
}

/// The ticket a fair waiter joins the line with: `drawn`, or with
/// [`FailPoint::FairPlaceAtRandom`] on, any from 1 to it.
pub(crate) fn fair_ticket(drawn: u64) -> u64 {
    match on(FailPoint::FairPlaceAtRandom) {
        true => rand::Rng::random_range(&mut rand::rng(), 1..=drawn.max(1)),
        false => drawn,
    }
}
