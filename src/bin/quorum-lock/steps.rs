//! `extend KEY HOLDER` and `release KEY HOLDER`: fixed-TTL steps for scripts that cannot keep a
//! process alive (`run` and `hold` are the safe paths: they renew, watch the deadline and stop
//! the work in time). The library acts on the lock by its holder value
//! (`QuorumLock::extend_by_holder` and `release_by_holder`): its own scripts, quorum and validity rule.

use std::time::Instant;

use quorum_lock::{Error, QuorumLock};
use serde_json::{json, Value};

use crate::args::{ExtendArgs, ReleaseArgs};
use crate::exit::{self, Failure};
use crate::settings::Settings;

pub async fn extend(settings: &Settings, args: &ExtendArgs) -> Result<u8, Failure> {
    let holder = holder_arg(&args.holder)?;
    let client = settings.connect().await?;
    let result = client.extend_by_holder(&args.key, &holder, args.ttl).await;
    let until = result.as_ref().ok().map(|v| Instant::now() + *v);
    // The slower nodes' requests land before the report (and before the process exits): the
    // validity printed is what is left after that wait, and none left is a lost lock.
    client.finish_background().await;
    let result = match (result, until) {
        (Ok(_), Some(until)) => match until.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => Ok(left),
            _ => Err(Error::LockLost {
                key: args.key.clone(),
            }),
        },
        (result, _) => result,
    };
    let validity = result.as_ref().ok().map(|v| v.as_millis() as u64);
    let report = |confirmed| {
        json!({
            "key": args.key,
            "extended": validity.is_some(),
            "confirmed": confirmed,
            "required": client.quorum_size(),
            "validity_ms": validity,
        })
    };
    finish(&client, result.map(drop), args.json, &args.key, report).await
}

pub async fn release(settings: &Settings, args: &ReleaseArgs) -> Result<u8, Failure> {
    let holder = holder_arg(&args.holder)?;
    let client = settings.connect().await?;
    let result = client.release_by_holder(&args.key, &holder).await;
    let released = result.is_ok();
    let report = |confirmed| {
        json!({
            "key": args.key,
            "released": released,
            "confirmed": confirmed,
            "required": client.quorum_size(),
        })
    };
    finish(&client, result, args.json, &args.key, report).await
}

/// Lets the call's requests to the slower nodes land before the process exits, prints the
/// JSON report of an outcome on the nodes (not of a usage error), and maps the error.
async fn finish(
    client: &QuorumLock,
    result: Result<(), Error>,
    json: bool,
    key: &str,
    report: impl FnOnce(Value) -> Value,
) -> Result<u8, Failure> {
    client.finish_background().await;
    let usage = matches!(
        result,
        Err(Error::InvalidKey { .. } | Error::InvalidHolder { .. } | Error::InvalidTtl { .. })
    );
    if json && !usage {
        // The nodes that confirmed: a success returns at quorum; a lost lock's count is not
        // known (null).
        let confirmed = match &result {
            Ok(()) => json!(client.quorum_size()),
            Err(
                Error::NoQuorum { confirmed, .. }
                | Error::NotHeld { confirmed, .. }
                | Error::ReleaseUnconfirmed { confirmed, .. },
            ) => {
                json!(confirmed)
            }
            Err(_) => Value::Null,
        };
        exit::print(&format!("{}\n", report(confirmed)))?;
    }
    result.map(|()| exit::OK).map_err(|e| failure(&e, key))
}

/// Not held with this holder value is 75. A release below the quorum that the nodes which failed to
/// answer could have completed is 69 (nodes unavailable), as a failed extend is.
fn failure(e: &Error, key: &str) -> Failure {
    match e {
        Error::LockLost { .. } => Failure::new(
            exit::LOST,
            format!(
                "lock {key:?} is not held with this holder value by a quorum: it expired, was released \
                 or is another holder's"
            ),
        ),
        Error::NotHeld {
            confirmed,
            required,
            failures,
            ..
        } if confirmed + failures.len() >= *required => {
            Failure::new(exit::UNAVAILABLE, format!("nodes unavailable: {e}"))
        }
        Error::ReleaseUnconfirmed { .. } => {
            Failure::new(exit::UNAVAILABLE, format!("nodes unavailable: {e}"))
        }
        e => Failure::from_lock(e, &exit::Context::ttl(exit::SOFTWARE)),
    }
}

/// The holder value as given, or read from stdin for `-` (the command line is visible to
/// other local users; stdin is not). The library checks it.
fn holder_arg(arg: &str) -> Result<String, Failure> {
    if arg != "-" {
        return Ok(arg.to_string());
    }
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| Failure::usage(format!("reading the holder value from stdin: {e}")))?;
    Ok(line.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_held_with_this_holder_value_is_75_and_nodes_that_failed_are_69() {
        let lost = Error::LockLost { key: "k".into() };
        assert_eq!(failure(&lost, "k").code, exit::LOST);
        let refused = Error::NotHeld {
            key: "k".into(),
            confirmed: 1,
            required: 2,
            failures: Vec::new(),
        };
        assert_eq!(failure(&refused, "k").code, exit::LOST);
        let down = Error::NoQuorum {
            op: quorum_lock::Op::Extend,
            key: "k".into(),
            confirmed: 1,
            required: 2,
            refused: 0,
            failures: Vec::new(),
        };
        assert_eq!(failure(&down, "k").code, exit::UNAVAILABLE);
        let bad = Error::InvalidHolder {
            reason: "must not be empty".into(),
        };
        assert_eq!(failure(&bad, "k").code, exit::USAGE);
    }
}
