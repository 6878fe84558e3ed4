//! Acting on a lock by its holder value, without a guard (docs/DESIGN.md, "By token"): extend
//! and release for a process that was handed the token, or a guard given up with
//! [`LockGuard::into_token`](crate::LockGuard::into_token). The rounds are a lease's own (`lease::extend_call`,
//! `lease::release_round`); only the deadline differs: with no guard, none is known before the
//! call, so the new one must hold when the quorum confirms.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::key::Key;
use crate::lease::{decide_extend, extend_call, release_result, release_round, Extended, Lease};
use crate::shape::{Fair, Shape};
use crate::state::ClientState;
use crate::telemetry::{self, RenewalEnd, RenewedBy};

/// The longest holder token accepted (256 bytes). The library's own holder values are 32
/// characters, or about 100 for a reentrant [`Owner`](crate::Owner)'s.
pub const MAX_TOKEN_LEN: usize = 256;

/// Checks a holder token: 1 to [`MAX_TOKEN_LEN`] bytes of printable ASCII without spaces, the
/// characters of every holder value (the library's are hexadecimal digits and `:`). A line read
/// with its newline, or an empty one, is refused here rather than refused by every node. The
/// reason never quotes the token: it is the proof of ownership.
fn check_token(token: &str) -> Result<()> {
    let invalid = |reason: String| Err(Error::InvalidToken { reason });
    if token.is_empty() {
        return invalid("must not be empty".into());
    }
    if token.len() > MAX_TOKEN_LEN {
        return invalid(format!(
            "{} bytes, longer than {MAX_TOKEN_LEN}",
            token.len()
        ));
    }
    if let Some(at) = token.bytes().position(|b| !b.is_ascii_graphic()) {
        return invalid(format!(
            "byte {} is not printable ASCII (a holder value has no spaces, line ends or \
             control characters)",
            at + 1
        ));
    }
    Ok(())
}

/// What a holder token acts on: a mutex's entry, or a fair lock's (whose holder value names
/// its waiter, so that a release leaves the line and hands the key on as the guard's would).
fn shape_of(client: &ClientState, key: &[u8], token: &str) -> Result<Shape> {
    let key = Key::new(key)?;
    check_token(token)?;
    Ok(match Fair::waiter_of(token) {
        Some(waiter) => Shape::Fair(Fair {
            key,
            waiter: waiter.into(),
            holder: token.into(),
            ticket: None,
            draws: false,
            queue_lease_ms: client.config.queue_lease.as_millis().to_string().into(),
            claim_ms: client.config.claim_window().as_millis().to_string().into(),
        }),
        None => Shape::Single(key),
    })
}

/// [`QuorumLock::extend_token`](crate::QuorumLock::extend_token).
pub(crate) async fn extend(
    client: &ClientState,
    key: &[u8],
    token: &str,
    ttl: Duration,
) -> Result<Duration> {
    let key = shape_of(client, key, token)?;
    let ttl = client.config.check_ttl(ttl)?;
    // A lock this client holds is extended through its guard's lease: the guard's deadline
    // follows (cut before a shortening is sent), as for the guard's own extend.
    if let Some(lease) = Lease::find(client, key.primary().bytes(), token) {
        lease.renew(ttl, None).await?;
        let validity = lease.deadline().saturating_duration_since(Instant::now());
        return match validity.is_zero() {
            true => Err(lease.lost_error()),
            false => Ok(validity),
        };
    }
    let span = tracing::debug_span!("extend", key = %key, ?ttl, by = "token");
    async {
        let lost = || {
            telemetry::renewal(RenewedBy::Extend, RenewalEnd::Lost);
            Err(Error::LockLost {
                key: key.to_string(),
            })
        };
        // The validity runs from before the first request is sent, as a guard's extend's does;
        // the quorum must come before it ends.
        let deadline = client.config.trusted_until(Instant::now(), ttl);
        let mut fan = extend_call(client, &key, token, ttl);
        let ended = decide_extend(&mut fan, &key, deadline).await;
        // No lease to leave the requests still in flight with: those not yet written to their
        // connection are stopped before the call returns (waiting only for one being written
        // at that moment), so that none can land after what this client sends next (ordering
        // invariant 4); those written finish in the background.
        if let Some(stragglers) = fan.detach(&client.background) {
            stragglers.settle().await;
        }
        match ended {
            Extended::Confirmed(_) => {
                let validity = deadline.saturating_duration_since(Instant::now());
                if validity.is_zero() {
                    return lost();
                }
                client.counters.extended.fetch_add(1, Ordering::Relaxed);
                telemetry::renewal(RenewedBy::Extend, RenewalEnd::Confirmed);
                Ok(validity)
            }
            Extended::TooLate | Extended::Refused => lost(),
            Extended::Failed(error) => {
                telemetry::renewal(RenewedBy::Extend, RenewalEnd::Failed);
                Err(error)
            }
        }
    }
    .instrument(span)
    .await
}

/// [`QuorumLock::release_token`](crate::QuorumLock::release_token).
pub(crate) async fn release(client: &ClientState, key: &[u8], token: &str) -> Result<()> {
    let key = shape_of(client, key, token)?;
    // A lock this client holds is released through its guard's lease: the guard stops
    // trusting the lock (and its loss signals fire) before any node lets go of it.
    if let Some(lease) = Lease::find(client, key.primary().bytes(), token) {
        return lease.release_by_token().await;
    }
    let span = tracing::debug_span!("release", key = %key, by = "token");
    async {
        // The slower nodes' releases finish in the background, as a guard's do: after a
        // release nothing may be sent with this token that a late compare-and-delete could
        // undo (an extend never re-creates an entry), and stopping them would leave the
        // entry on a node that was reconnecting until its TTL.
        let (outcome, _in_background) = release_round(client, &key, token).await;
        release_result(client, &key, &outcome, false)
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_without_being_shown() {
        assert!(check_token("0123456789abcdef0123456789abcdef").is_ok());
        assert!(check_token("c1:o2:0123456789abcdef").is_ok());
        assert!(check_token(&"a".repeat(MAX_TOKEN_LEN)).is_ok());
        for bad in [
            String::new(),
            "a".repeat(MAX_TOKEN_LEN + 1),
            "s3cret-token\n".into(),
            "s3cret token".into(),
            "s3cret-tökén".into(),
        ] {
            match check_token(&bad) {
                Err(e @ Error::InvalidToken { .. }) => {
                    assert!(!e.to_string().contains("s3cret"), "{e}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
