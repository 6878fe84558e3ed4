//! The values the command line takes: durations (`500ms`, `30s`, `2m`), quorum rules,
//! signals and lock keys; and durations shown to people.

use std::time::Duration;

use quorum_lock::{Quorum, MAX_DURATION, MAX_KEY_LEN, RESERVED_PREFIX};

/// Parses `500ms`, `30s`, `2m`, `1h`, `1d`, decimals (`1.5s`) and sums (`1m30s`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{text:?} is not a duration like 500ms, 30s, 2m or 1h30m");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?} has no unit (write e.g. 30s or 500ms)"))?;
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = number.parse().map_err(|_| invalid())?;
        let seconds = match unit.trim() {
            "ms" => value / 1000.0,
            "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            "d" => value * 86400.0,
            _ => return Err(invalid()),
        };
        let part = Duration::try_from_secs_f64(seconds).map_err(|_| invalid())?;
        total = total.checked_add(part).ok_or_else(invalid)?;
        rest = tail.trim_start();
    }
    if total > MAX_DURATION {
        return Err(format!("{text:?} is longer than the most accepted, 365d"));
    }
    Ok(total)
}

/// A wait: a duration, or a number alone as seconds (as flock's `-w 2`).
pub fn parse_wait(text: &str) -> Result<Duration, String> {
    let plain = text.trim();
    if !plain.is_empty() && plain.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return parse_duration(&format!("{plain}s"));
    }
    parse_duration(text)
}

/// A duration for people: `250ms`, `1.5s`, `2m30s`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".to_string()
    } else if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let tenths = ms / 100;
        if tenths.is_multiple_of(10) {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        }
    } else {
        let s = ms / 1000;
        match (s / 3600, (s % 3600) / 60, s % 60) {
            (0, m, 0) => format!("{m}m"),
            (0, m, s) => format!("{m}m{s}s"),
            (h, m, _) => format!("{h}h{m}m"),
        }
    }
}

/// `majority`, `all`, or a number K (checked against the node count when the client is built).
pub fn parse_quorum(text: &str) -> Result<Quorum, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "majority" => Ok(Quorum::Majority),
        "all" => Ok(Quorum::All),
        other => other
            .parse::<usize>()
            .map(Quorum::AtLeast)
            .map_err(|_| format!("{text:?} is not majority, all or a number of nodes")),
    }
}

/// A signal by name (`TERM`, `SIGTERM`, `term`) or number.
pub fn parse_signal(text: &str) -> Result<i32, String> {
    let name = text.trim().to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    if let Ok(n) = name.parse::<i32>() {
        if (1..=64).contains(&n) {
            return Ok(n);
        }
    }
    SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| {
            format!("{text:?} is not a signal name (TERM, INT, HUP, KILL, ...) or number")
        })
}

const SIGNALS: [(&str, i32); 9] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("XCPU", libc::SIGXCPU),
];

/// `TERM` for 15, else the number.
pub fn signal_name(signal: i32) -> String {
    SIGNALS
        .iter()
        .find(|(_, s)| *s == signal)
        .map_or_else(|| signal.to_string(), |(n, _)| (*n).to_string())
}

/// A lock key the library accepts: 1 byte to 64 KiB, outside its reserved prefix. Checked
/// here too, so that `status`, which reads the nodes directly, refuses the same keys, and every
/// command refuses a bad key before it connects.
/// A public line of text of at most `max` bytes: a label, a leader value.
fn public_text(what: &'static str, text: &str, max: usize) -> Result<String, String> {
    match quorum_lock::check_public_text(what, text, max) {
        Ok(()) => Ok(text.to_string()),
        Err(quorum_lock::Error::InvalidConfig { reason, .. }) => {
            Err(format!("the {what} {reason}"))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// `--label`: public, shown by `status` (never a secret).
pub fn parse_label(text: &str) -> Result<String, String> {
    public_text("label", text, quorum_lock::MAX_LABEL_LEN)
}

/// `elect --value`: public, shown by `leader` and `status`.
pub fn parse_leader_value(text: &str) -> Result<String, String> {
    public_text("leader value", text, quorum_lock::MAX_LEADER_VALUE_LEN)
}

pub fn parse_key(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("the key must not be empty".into());
    }
    if text.len() > MAX_KEY_LEN {
        return Err(format!("the key is longer than {MAX_KEY_LEN} bytes"));
    }
    if text.starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "keys starting with {RESERVED_PREFIX:?} are reserved for the library's own keys"
        ));
    }
    Ok(text.to_string())
}

/// `ms` (Unix time) as UTC, `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn unix_ms_reads_as_utc() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(super::utc(1_795_865_977_123), "2026-11-28T11:39:37Z");
    }

    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        for bad in ["", "30", "s", "3x", "-1s", "1..2s", "999999d", "1e9s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_wait_without_unit_is_seconds_as_for_flock() {
        assert_eq!(parse_wait("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_wait("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_wait("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_wait("").is_err());
        assert!(parse_wait("2x").is_err());
    }

    #[test]
    fn durations_format_for_people() {
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_secs(150)), "2m30s");
        assert_eq!(format_duration(Duration::from_secs(3720)), "1h2m");
    }

    #[test]
    fn quorum_signal_and_key_parsers() {
        assert_eq!(parse_quorum("Majority"), Ok(Quorum::Majority));
        assert_eq!(parse_quorum("all"), Ok(Quorum::All));
        assert_eq!(parse_quorum("4"), Ok(Quorum::AtLeast(4)));
        assert!(parse_quorum("most").is_err());
        assert_eq!(parse_signal("TERM"), Ok(libc::SIGTERM));
        assert_eq!(parse_signal("sigint"), Ok(libc::SIGINT));
        assert_eq!(parse_signal("9"), Ok(libc::SIGKILL));
        assert!(parse_signal("BOGUS").is_err());
        assert!(parse_signal("0").is_err());
        assert_eq!(signal_name(libc::SIGTERM), "TERM");
        assert!(parse_key("").is_err());
        assert!(parse_key("quorum-lock:fence:x").is_err());
        assert_eq!(parse_key("jobs:nightly"), Ok("jobs:nightly".into()));
    }
}
