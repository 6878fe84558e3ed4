//! Every public type is Send + Sync (+ 'static where owned), and every returned future is Send,
//! so guards and calls move freely into spawned tasks.

use std::time::Duration;

use quorum_lock::testkit::{FencedStore, Fleet};
use quorum_lock::{
    Builder, Error, LockGuard, LockRequest, LostSignal, NodeClient, NodeFailure, Owner, QuorumLock,
    Scoped, Stats,
};

fn send_sync_static<T: Send + Sync + 'static>() {}
fn send<T: Send>(_: &T) {}

#[test]
fn public_types_are_send_sync_static() {
    // Compile-time checks: this test fails to build, not to run, if a bound is lost.
    send_sync_static::<QuorumLock>();
    send_sync_static::<Builder>();
    send_sync_static::<LockGuard>();
    send_sync_static::<LostSignal>();
    send_sync_static::<Owner>();
    send_sync_static::<Error>();
    send_sync_static::<NodeFailure>();
    send_sync_static::<NodeClient>();
    send_sync_static::<Stats>();
    send_sync_static::<Scoped<u8>>();
    send_sync_static::<Fleet>();
    send_sync_static::<FencedStore>();
    #[cfg(feature = "tls")]
    send_sync_static::<quorum_lock::testkit::FleetTls>();
    fn request_is_send<'a>(r: LockRequest<'a>) -> impl Send + 'a {
        r
    }
    let _ = request_is_send;
}

/// Checked by the compiler, never run: every future below must be `Send`.
#[allow(dead_code)]
fn returned_futures_are_send(locks: QuorumLock, guard: LockGuard, owner: Owner) {
    let ttl = Duration::from_secs(1);
    send(&QuorumLock::builder().build());
    send(&locks.acquire("k", ttl));
    send(&locks.try_acquire("k", ttl));
    send(&locks.lock("k").acquire());
    send(&locks.lock("k").try_acquire());
    send(&locks.with_lock("k", |_| async {}));
    send(&owner.acquire("k", ttl));
    send(&guard.extend(ttl));
    send(&guard.lost());
    send(&guard.lost_signal().wait());
    send(&locks.extend_by_holder("k", "token", ttl));
    send(&locks.release_by_holder("k", "token"));
    send(&guard.release());
}
