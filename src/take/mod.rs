//! Taking a lock: a request checked into its plan, one attempt (RedLock steps 1 to 5), the
//! ordered approach of a waiter that lost, the waiting loop, and a semaphore's slots.

pub(crate) mod arbiter;
pub(crate) mod attempt;
pub(crate) mod fair;
pub(crate) mod plan;
pub(crate) mod slots;
pub(crate) mod waiting;
