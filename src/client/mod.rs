//! The public handles: [`QuorumLock`], its [`Builder`] and `build()`'s probes of the nodes,
//! a [`LockRequest`], and an [`Owner`] of reentrant holds.

pub(crate) mod builder;
pub(crate) mod election;
pub(crate) mod observe;
pub(crate) mod owner;
pub(crate) mod quorum_lock;
pub(crate) mod request;
pub(crate) mod startup;
pub(crate) mod who;

pub use builder::Builder;
pub use election::{Election, Leader, Leadership, MAX_LEADER_VALUE_LEN};
pub use observe::Observer;
pub use owner::Owner;
pub use quorum_lock::QuorumLock;
pub use request::{LockRequest, Scoped};
pub use who::{check_public_text, HeldAs, Holding, Labelled, MAX_LABEL_LEN};
