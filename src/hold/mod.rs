//! Holding a lock: one acquisition's lease (deadline, loss, renew, repair, release), the
//! caller's guard, the watchdog's renewals, the loss signal, an owner's reentrant holds, and
//! the calls by holder value, without a guard.

pub(crate) mod by_holder;
pub(crate) mod guard;
pub(crate) mod lease;
pub(crate) mod lost_signal;
pub(crate) mod notices;
pub(crate) mod record;
pub(crate) mod reentry;
pub(crate) mod rounds;
pub(crate) mod watchdog;

pub use guard::LockGuard;
pub use lost_signal::LostSignal;
