//! `leader NAME [--watch]`: the election's leader as a quorum of nodes shows it; and
//! `break KEY`, which deposes a leader as it breaks any lock.

use quorum_lock::Leader;

use crate::args::{AskArgs, BreakArgs, LeaderArgs};
use crate::child::Signals;
use crate::exit::{self, Context, Failure};
use crate::settings::Settings;

/// The exit code when nobody leads.
const NOBODY: u8 = 1;

pub async fn leader(settings: &Settings, args: &LeaderArgs) -> Result<u8, Failure> {
    let client = settings.connect().await?;
    let election = client.election(&args.name);
    if !args.watch {
        return match election.leader().await {
            Ok(Some(leader)) => {
                exit::print(&line(&args.name, Some(&leader), args.json))?;
                Ok(exit::OK)
            }
            Ok(None) => {
                if args.json {
                    exit::print(&line(&args.name, None, true))?;
                }
                Err(Failure::busy(
                    NOBODY,
                    format!("nobody leads {:?}", args.name),
                ))
            }
            Err(e) => Err(Failure::from_lock(&e, &Context::NONE)),
        };
    }
    let mut signals = Signals::install()?;
    let mut observer = election.observe();
    loop {
        tokio::select! {
            next = observer.next() => match next {
                Ok(leader) => exit::print(&line(&args.name, leader.as_ref(), args.json))?,
                // The observer waits before its next read after a failed one.
                Err(e) => eprintln!("quorum-lock: warning: reading the leader: {e}"),
            },
            _ = signals.recv() => return Ok(exit::OK),
        }
    }
}

/// `break KEY`: prints how many holders were broken.
pub async fn break_lock(settings: &Settings, args: &BreakArgs) -> Result<u8, Failure> {
    let client = match args.lock_delay {
        Some(delay) => settings.connect_with(|b| b.lock_delay(delay)).await?,
        None => settings.connect().await?,
    };
    let broken = client
        .break_lock(&args.key)
        .await
        .map_err(|e| Failure::from_lock(&e, &Context::NONE))?;
    let line = match args.json {
        true => format!(
            "{}\n",
            serde_json::json!({"key": args.key, "broken": broken})
        ),
        false => format!("broken {broken}\n"),
    };
    exit::print(&line)?;
    Ok(exit::OK)
}

/// `ask-release KEY`: prints how many holders were asked.
pub async fn ask_release(settings: &Settings, args: &AskArgs) -> Result<u8, Failure> {
    let client = settings.connect().await?;
    let asked = client
        .request_release(&args.key)
        .await
        .map_err(|e| Failure::from_lock(&e, &Context::NONE))?;
    let line = match args.json {
        true => format!("{}\n", serde_json::json!({"key": args.key, "asked": asked})),
        false => format!("asked {asked}\n"),
    };
    exit::print(&line)?;
    Ok(exit::OK)
}

/// `VALUE TERM` (`-` alone: nobody leads), or a JSON object.
fn line(name: &str, leader: Option<&Leader>, json: bool) -> String {
    match (leader, json) {
        (Some(l), false) => format!("{} {}\n", l.value, l.term),
        (None, false) => "-\n".to_string(),
        (l, true) => {
            let since = l.and_then(|l| l.since).and_then(|s| {
                s.duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_millis() as u64)
            });
            let object = serde_json::json!({
                "name": name,
                "leader": l.map(|l| l.value.as_str()),
                "term": l.map(|l| l.term),
                "since_ms": since,
                "ttl_ms": l.map(|l| l.ttl.as_millis() as u64),
            });
            format!("{object}\n")
        }
    }
}
