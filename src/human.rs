//! Durations as messages show them (pure).

use std::time::Duration;

/// A duration as messages show it: `0s`, `250µs`, `50.5ms`, `1.002s`, `2m30s`, `1h30m`,
/// `365d` (not `Debug`'s `1.00178812s`).
pub(crate) struct Human(pub(crate) Duration);

impl std::fmt::Display for Human {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.0;
        let secs = d.as_secs();
        if d.is_zero() {
            f.write_str("0s")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_shown_as_people_write_them() {
        let ms = Duration::from_millis;
        for (d, shown) in [
            (Duration::ZERO, "0s"),
            (Duration::from_micros(250), "250µs"),
            (ms(50), "50ms"),
            (Duration::from_micros(50_500), "50.5ms"),
            (Duration::from_nanos(1_001_788_120), "1.001s"),
            (ms(30_000), "30s"),
            (ms(150_000), "2m30s"),
            (ms(5_400_000), "1h30m"),
            (Duration::from_secs(365 * 24 * 3600), "365d"),
        ] {
            assert_eq!(Human(d).to_string(), shown, "{d:?}");
        }
    }
}
