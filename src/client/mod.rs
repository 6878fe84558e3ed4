//! The public handles: [`QuorumLock`], its [`Builder`] and `build()`'s probes of the nodes,
//! a [`LockRequest`], and an [`Owner`] of reentrant holds.

pub(crate) mod builder;
pub(crate) mod owner;
pub(crate) mod quorum_lock;
pub(crate) mod request;
pub(crate) mod startup;

pub use builder::Builder;
pub use owner::Owner;
pub use quorum_lock::QuorumLock;
pub use request::{LockRequest, Scoped};
