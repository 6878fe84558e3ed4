//! A client's validated settings ([`Config`]) and the checks every duration and TTL goes
//! through: pure, no I/O.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::quorum::{self, Quorum};

/// The longest TTL accepted (365 days): far beyond any sane lease, and well inside what
/// Redis' `PEXPIRE` accepts.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest duration accepted for any setting (365 days, the same as [`MAX_TTL`]): longer
/// ones are surely a mistake, and every instant computed from a setting stays representable.
pub const MAX_DURATION: Duration = MAX_TTL;

/// A duration as messages show it: `0ms`, `250µs`, `50.5ms`, `1.002s`, `2m30s`, `1h30m`,
/// `365d` (not `Debug`'s `1.00178812s`).
pub(crate) struct Human(pub(crate) Duration);

impl std::fmt::Display for Human {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.0;
        let secs = d.as_secs();
        if d.is_zero() {
            f.write_str("0ms")
        } else if d < Duration::from_millis(1) {
            write!(f, "{}µs", d.as_micros())
        } else if d < Duration::from_secs(1) {
            let tenths = d.as_micros() / 100;
            trimmed(f, tenths / 10, tenths % 10, 1, "ms")
        } else if secs < 60 {
            let millis = d.subsec_millis();
            trimmed(f, u128::from(secs), u128::from(millis), 3, "s")
        } else if secs < 3600 {
            match secs % 60 {
                0 => write!(f, "{}m", secs / 60),
                s => write!(f, "{}m{s}s", secs / 60),
            }
        } else if secs < 86_400 {
            match (secs % 3600) / 60 {
                0 => write!(f, "{}h", secs / 3600),
                m => write!(f, "{}h{m}m", secs / 3600),
            }
        } else {
            match (secs % 86_400) / 3600 {
                0 => write!(f, "{}d", secs / 86_400),
                h => write!(f, "{}d{h}h", secs / 86_400),
            }
        }
    }
}

/// `whole.fraction` with `digits` fraction digits, trailing zeros dropped, then `unit`.
fn trimmed(
    f: &mut std::fmt::Formatter<'_>,
    whole: u128,
    fraction: u128,
    digits: usize,
    unit: &str,
) -> std::fmt::Result {
    if fraction == 0 {
        return write!(f, "{whole}{unit}");
    }
    let text = format!("{fraction:0digits$}");
    write!(f, "{whole}.{}{unit}", text.trim_end_matches('0'))
}

/// Checks a duration setting against [`MAX_DURATION`], naming the setting when it is longer.
pub(crate) fn check_duration(field: &'static str, value: Duration) -> Result<()> {
    if value > MAX_DURATION {
        return Err(Error::InvalidConfig {
            field,
            reason: format!(
                "{} is longer than the most accepted, {}",
                Human(value),
                Human(MAX_DURATION)
            ),
        });
    }
    Ok(())
}

/// The validated settings of a client.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) quorum: Quorum,
    pub(crate) required: usize,
    pub(crate) node_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) max_retries: Option<u32>,
    pub(crate) wait_timeout: Duration,
    pub(crate) min_validity: Duration,
    pub(crate) watchdog_lease: Duration,
    pub(crate) queue_lease: Duration,
    /// How much longer than a guard's TTL its entries live on the nodes (see
    /// [`Builder::lock_delay`](crate::Builder::lock_delay)).
    pub(crate) lock_delay: Duration,
    pub(crate) pubsub: bool,
}

impl Config {
    /// The deadline of entries set for `ttl` by a request first sent at `start` (an acquire,
    /// an extend, a release that hands the key on): `start + ttl - drift` (invariant 2: the
    /// nodes that apply it expire the entry no earlier).
    pub(crate) fn trusted_until(&self, start: Instant, ttl: Duration) -> Instant {
        start + quorum::trusted_for(ttl, quorum::drift(ttl, self.drift_factor))
    }

    /// The TTL, in ms as the nodes take it, of an entry that a guard counts on for `ttl`:
    /// `ttl` plus the lock delay. The deadline is still computed from `ttl`, so it never
    /// outlives the entries (invariant 2); they outlive it by the delay.
    pub(crate) fn node_ttl_ms(&self, ttl: Duration) -> String {
        (ttl + self.lock_delay).as_millis().to_string()
    }

    /// How long a fair lock's short grant to a waiter of this client lasts (see
    /// `scripts::FAIR_ACQUIRE`): time for a live waiter to claim it with one attempt, whether
    /// its grant's notices wake it or, lost, its own timer does: four node timeouts, or its
    /// longest pause between attempts (the retry delay and jitter, at most a third of the
    /// queue lease) plus two node timeouts when that is longer. The nodes cap it by the
    /// waiter's TTL and by what is left of its place in line.
    pub(crate) fn claim_window(&self) -> Duration {
        let pause = (self.retry_delay + self.retry_jitter).min(self.queue_lease / 3);
        self.node_timeout
            .saturating_mul(4)
            .max(pause + self.node_timeout.saturating_mul(2))
    }

    /// Checks a TTL against this configuration: it must leave room for at least one node
    /// round trip and the drift allowance, or no acquire could ever succeed.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<Duration> {
        let invalid = |reason: String| Err(Error::InvalidTtl { ttl, reason });
        // Redis keeps whole milliseconds; rounding down keeps the validity conservative.
        let ttl_ms = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        if ttl_ms.is_zero() {
            return invalid("must be at least 1 ms".into());
        }
        if ttl_ms > MAX_TTL {
            return invalid(format!("must be at most {}", Human(MAX_TTL)));
        }
        if ttl_ms + self.lock_delay > MAX_TTL {
            return invalid(format!(
                "with the lock delay ({}), must be at most {}",
                Human(self.lock_delay),
                Human(MAX_TTL - self.lock_delay.min(MAX_TTL))
            ));
        }
        // One node round trip must fit, and the least validity asked for must be reachable.
        let floor =
            self.node_timeout.max(self.min_validity) + quorum::drift(ttl_ms, self.drift_factor);
        if ttl_ms <= floor {
            return invalid(format!(
                "must be larger than max(node_timeout, min_validity) + clock drift ({})",
                Human(floor)
            ));
        }
        Ok(ttl_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_shown_as_people_write_them() {
        let ms = Duration::from_millis;
        for (d, shown) in [
            (Duration::ZERO, "0ms"),
            (Duration::from_micros(250), "250µs"),
            (ms(50), "50ms"),
            (Duration::from_micros(50_500), "50.5ms"),
            (Duration::from_nanos(1_001_788_120), "1.001s"),
            (ms(30_000), "30s"),
            (ms(150_000), "2m30s"),
            (ms(5_400_000), "1h30m"),
            (MAX_TTL, "365d"),
        ] {
            assert_eq!(Human(d).to_string(), shown, "{d:?}");
        }
    }
}
