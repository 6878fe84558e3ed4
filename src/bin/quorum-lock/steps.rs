//! `extend KEY TOKEN` and `release KEY TOKEN`: fixed-TTL steps for scripts that cannot keep a
//! process alive (`run` and `hold` are the safe paths: they renew, watch the deadline and stop
//! the work in time).
//!
//! The library has no public API to act on a lock by its holder value, so these talk to the
//! nodes directly with the library's own scripts (src/scripts.rs, EXTEND and RELEASE, copied
//! verbatim): compare-and-PEXPIRE and compare-and-DELETE on every node at once, counted
//! against the same quorum, with the same validity rule for an extend (the TTL minus the time
//! taken minus the drift allowance must be positive).

use std::time::Duration;

use futures::future::join_all;
use quorum_lock::quorum;
use tokio::time::Instant;

use crate::args::{ExtendArgs, ReleaseArgs};
use crate::direct::{int, targets, Target};
use crate::exit::{self, Failure};
use crate::settings::Settings;
use crate::values::format_duration;

/// The library's extend script: PEXPIRE only where the holder's entry is there. Never creates
/// the key, so an expired lock cannot be turned back into a held one. Returns 1 or 0.
const EXTEND: &str = r#"
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

/// The library's release script: compare-and-delete, then announce the release (the SHA1 of
/// the holder value, never the value) wherever the key is now free, so that waiters wake.
/// Returns 1 when deleted, 0 when this holder did not hold the key on the node.
const RELEASE: &str = r#"
local held = redis.call('get', KEYS[1]) == ARGV[1]
if held then
  redis.call('del', KEYS[1])
end
if held or (ARGV[3] == '1' and redis.call('exists', KEYS[1]) == 0) then
  redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
end
if held then
  return 1
end
return 0
"#;

/// The library's drift factor (the default; the command line has no setting for it).
const DRIFT_FACTOR: f64 = 0.01;

/// One node's answer.
enum Answer {
    Yes,
    No,
    Failed(String),
}

/// The answers of every node, counted.
struct Tally {
    yes: usize,
    refused: usize,
    failures: Vec<String>,
}

pub async fn extend(settings: &Settings, args: &ExtendArgs) -> Result<u8, Failure> {
    let required = settings.required()?;
    let token = token(&args.token)?;
    let ttl = check_ttl(args.ttl, settings.node_timeout)?;
    let nodes = targets(&settings.nodes)?;
    let ms = ttl.as_millis().to_string();
    let mut eval = redis::cmd("EVAL");
    eval.arg(EXTEND).arg(1).arg(&args.key).arg(&token).arg(&ms);
    // The validity is measured from before the first request is sent, as the library does.
    let start = Instant::now();
    let tally = fan_out(settings, &nodes, &eval).await;
    let validity = quorum::validity(ttl, start.elapsed(), quorum::drift(ttl, DRIFT_FACTOR));
    let outcome = decide(&tally, nodes.len(), required, &args.key, "extend");
    if args.json {
        let json = serde_json::json!({
            "key": args.key,
            "extended": outcome.is_ok() && validity.is_some(),
            "confirmed": tally.yes,
            "required": required,
            "validity_ms": validity.map(|v| v.as_millis() as u64),
        });
        exit::print(&format!("{json}\n"))?;
    }
    outcome?;
    if validity.is_none() {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "nodes unavailable: the extend of {:?} to {} took so long that no validity is left",
                args.key,
                format_duration(ttl)
            ),
        ));
    }
    Ok(exit::OK)
}

pub async fn release(settings: &Settings, args: &ReleaseArgs) -> Result<u8, Failure> {
    let required = settings.required()?;
    let token = token(&args.token)?;
    let nodes = targets(&settings.nodes)?;
    let channel = format!("{}released:{}", quorum_lock::RESERVED_PREFIX, args.key);
    let mut eval = redis::cmd("EVAL");
    eval.arg(RELEASE)
        .arg(1)
        .arg(&args.key)
        .arg(&token)
        .arg(&channel)
        .arg("1");
    let tally = fan_out(settings, &nodes, &eval).await;
    let outcome = decide(&tally, nodes.len(), required, &args.key, "release");
    if args.json {
        let json = serde_json::json!({
            "key": args.key,
            "released": outcome.is_ok(),
            "confirmed": tally.yes,
            "required": required,
        });
        exit::print(&format!("{json}\n"))?;
    }
    outcome.map(|()| exit::OK)
}

/// A quorum of yes is success; when refusals alone leave no quorum possible, this holder no
/// longer holds the lock (75); otherwise too many nodes failed to answer (69).
fn decide(
    tally: &Tally,
    nodes: usize,
    required: usize,
    key: &str,
    op: &str,
) -> Result<(), Failure> {
    if tally.yes >= required {
        return Ok(());
    }
    if nodes - tally.refused < required {
        return Err(Failure::new(
            exit::LOST,
            format!(
                "lock {key:?} is not held with this token: {} of {nodes} nodes do not hold it, the quorum needs {required}",
                tally.refused
            ),
        ));
    }
    Err(Failure::new(
        exit::UNAVAILABLE,
        format!(
            "nodes unavailable: no quorum to {op} {key:?}: {} of {required} required nodes confirmed, {} refused, {} failed: {}",
            tally.yes,
            tally.refused,
            tally.failures.len(),
            tally.failures.join("; ")
        ),
    ))
}

/// Sends `cmd` to every node at once: each connects within the connect timeout and then
/// answers within the node timeout.
async fn fan_out(settings: &Settings, nodes: &[Target], cmd: &redis::Cmd) -> Tally {
    let answers = join_all(nodes.iter().map(|node| async move {
        let mut conn = match node
            .connect(settings.connect_timeout, settings.node_timeout)
            .await
        {
            Ok(conn) => conn,
            Err(e) => return Answer::Failed(format!("{}: {e}", node.name)),
        };
        match node.query(&mut conn, cmd, settings.node_timeout).await {
            Ok(v) if int(&v) == Some(1) => Answer::Yes,
            Ok(v) if int(&v) == Some(0) => Answer::No,
            Ok(_) => Answer::Failed(format!("{}: unexpected reply", node.name)),
            Err(e) => Answer::Failed(format!("{}: {e}", node.name)),
        }
    }))
    .await;
    let mut tally = Tally {
        yes: 0,
        refused: 0,
        failures: Vec::new(),
    };
    for answer in answers {
        match answer {
            Answer::Yes => tally.yes += 1,
            Answer::No => tally.refused += 1,
            Answer::Failed(reason) => tally.failures.push(reason),
        }
    }
    tally
}

/// The holder token as given, or read from stdin for `-` (the command line is visible to
/// other local users; stdin is not).
fn token(arg: &str) -> Result<String, Failure> {
    let token = if arg == "-" {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| Failure::usage(format!("reading the token from stdin: {e}")))?;
        line.trim().to_string()
    } else {
        arg.to_string()
    };
    if token.is_empty() || token.chars().any(char::is_whitespace) {
        return Err(Failure::usage(
            "the token must be the one line `acquire` printed",
        ));
    }
    Ok(token)
}

/// The library's TTL rule: whole milliseconds, at most 365 days, and more than one node
/// round trip plus the drift allowance (else no extend could leave any validity).
fn check_ttl(ttl: Duration, node_timeout: Duration) -> Result<Duration, Failure> {
    let ms = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    let floor = node_timeout + quorum::drift(ms, DRIFT_FACTOR);
    if ms > quorum_lock::MAX_TTL || ms <= floor {
        return Err(Failure::usage(format!(
            "invalid ttl {}: must be larger than the node timeout plus clock drift ({}) and at most 365d",
            format_duration(ttl),
            format_duration(floor)
        )));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_follow_the_library_rule() {
        let t = Duration::from_millis(50);
        assert!(check_ttl(Duration::from_millis(52), t).is_err());
        assert_eq!(
            check_ttl(Duration::from_micros(60_900), t).ok(),
            Some(Duration::from_millis(60))
        );
        assert!(check_ttl(Duration::from_secs(366 * 86400), t).is_err());
    }

    #[test]
    fn refusals_mean_lost_and_failures_mean_unavailable() {
        let tally = |yes, refused, failed: usize| Tally {
            yes,
            refused,
            failures: vec!["n: timed out".to_string(); failed],
        };
        assert!(decide(&tally(3, 2, 0), 5, 3, "k", "extend").is_ok());
        let lost = decide(&tally(2, 3, 0), 5, 3, "k", "extend").expect_err("lost");
        assert_eq!(lost.code, exit::LOST);
        let down = decide(&tally(2, 1, 2), 5, 3, "k", "extend").expect_err("down");
        assert_eq!(down.code, exit::UNAVAILABLE);
    }
}
