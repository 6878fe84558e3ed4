//! Pure rules, no I/O: quorum sizes and the tally, validated settings and the one deadline
//! rule, keys and their derived names, the retry pause, the stop-or-wait handshake, and the
//! node checks shared by `build()` and `quorum-lock check`.

pub(crate) mod backoff;
pub(crate) mod config;
pub(crate) mod durable;
pub(crate) mod holder;
pub(crate) mod key;
pub mod quorum;
pub mod safety;

/// The handshake of ordering invariant 4 (see `fanout::ordering`). Its code is in
/// `progress.rs`, included here with the standard atomics and, by the loom test
/// (tests/loom_progress.rs), with loom's, so that the code checked is the code that runs.
pub(crate) mod progress {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    include!("progress.rs");
}
