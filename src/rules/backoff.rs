//! Retry timing of a waiting acquire and of the watchdog's failed renewals: pure (the
//! randomness is passed in), so it is unit-tested without a runtime or a clock.

use std::time::Duration;

/// After a wake-up, up to this many contended attempts are retried after [`QUICK_RETRY`],
/// doubling: another client may have raced for the nodes the release freed.
const QUICK_RETRIES: u32 = 3;
const QUICK_RETRY: Duration = Duration::from_millis(1);

/// How long a waiter sleeps between two attempts when no release notice comes first.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    delay: Duration,
    jitter: Duration,
    /// Quick retries left since the last wake-up.
    quick: u32,
}

impl Backoff {
    pub(crate) fn new(delay: Duration, jitter: Duration) -> Backoff {
        Backoff {
            delay,
            jitter,
            quick: 0,
        }
    }

    /// A release notice woke the waiter: its next contended attempts retry quickly rather than
    /// wait for notices that, for this release, already came.
    pub(crate) fn woken(&mut self) {
        self.quick = QUICK_RETRIES;
    }

    /// Ends the quick retries of the latest wake-up: another waiter won this release's race
    /// (the key's arbiter refused), so the next useful try follows the next notice.
    pub(crate) fn lost_the_race(&mut self) {
        self.quick = 0;
    }

    /// The pause after an attempt: the retry delay plus `random` (in `[0, 1]`) times the
    /// jitter, capped by the holder's remaining TTL when it is known (its key is gone by then)
    /// and, after a wake-up, by the next quick retry (1, 2, 4 ms) when the attempt was
    /// contended (not failed).
    pub(crate) fn pause(
        &mut self,
        contended: bool,
        hint: Option<Duration>,
        random: f64,
    ) -> Duration {
        let share = if random.is_nan() {
            0.0
        } else {
            random.clamp(0.0, 1.0)
        };
        let mut pause = self.delay + self.jitter.mul_f64(share);
        if let Some(hint) = hint {
            pause = pause.min(hint);
        }
        if contended && self.quick > 0 {
            self.quick -= 1;
            pause = pause.min(QUICK_RETRY * (1 << (QUICK_RETRIES - 1 - self.quick)));
        }
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_pause_is_the_delay_plus_a_share_of_the_jitter_capped_by_the_hint() {
        let mut b = Backoff::new(100 * MS, 100 * MS);
        assert_eq!(b.pause(true, None, 0.0), 100 * MS);
        assert_eq!(b.pause(true, None, 1.0), 200 * MS);
        assert_eq!(b.pause(true, None, 0.5), 150 * MS);
        assert_eq!(b.pause(true, Some(30 * MS), 0.5), 30 * MS);
        // Out-of-range randomness is clamped, never a panic.
        assert_eq!(b.pause(false, None, f64::NAN), 100 * MS);
        assert_eq!(b.pause(false, None, 7.0), 200 * MS);
    }

    #[test]
    fn after_a_wake_up_contended_attempts_retry_after_1_2_4_ms() {
        let mut b = Backoff::new(100 * MS, Duration::ZERO);
        b.woken();
        let quick: Vec<Duration> = (0..4).map(|_| b.pause(true, None, 0.0)).collect();
        assert_eq!(quick, [MS, 2 * MS, 4 * MS, 100 * MS]);
        // A failed (not contended) attempt takes the full delay and keeps the quick retries.
        b.woken();
        assert_eq!(b.pause(false, None, 0.0), 100 * MS);
        assert_eq!(b.pause(true, None, 0.0), MS);
    }

    #[test]
    fn a_lost_race_ends_the_quick_retries() {
        let mut b = Backoff::new(100 * MS, Duration::ZERO);
        b.woken();
        assert_eq!(b.pause(true, None, 0.0), MS);
        b.lost_the_race();
        assert_eq!(b.pause(true, None, 0.0), 100 * MS);
        assert_eq!(b.pause(true, Some(30 * MS), 0.0), 30 * MS);
    }

    #[test]
    fn extreme_settings_do_not_panic() {
        let max = Duration::from_secs(365 * 24 * 3600);
        let mut b = Backoff::new(max, max);
        assert_eq!(b.pause(true, None, 1.0), 2 * max);
    }
}
