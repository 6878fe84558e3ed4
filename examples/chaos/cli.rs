//! The chaos run's command line (see `main`), also parsed by the tests that replay a
//! program the shrinker printed.

use crate::run::Options;
use crate::workload::KIND_NAMES;

/// The command line: a run's options, or a history to check.
pub struct Args {
    pub run: Options,
    pub check: Option<std::path::PathBuf>,
    pub fail_point: Option<quorum_lock::failpoints::FailPoint>,
    /// The fail point's name, as given.
    pub fail_point_name: Option<String>,
    /// Runs a failing run may spend on shrinking (0: none).
    pub shrink: usize,
}

/// Parses a command line (without the program name).
///
/// # Errors
/// What is wrong with it, in the words of the usage line.
pub fn parse_from(argv: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        run: Options {
            seconds: 30,
            seed: u64::from(rand::random::<u32>()),
            history: None,
            clients: 6,
            quorum4: false,
            nodes: None,
            clusters: false,
            base_latency: None,
            verbose: true,
            faults: None,
            kinds: None,
            durable: false,
        },
        check: None,
        fail_point: None,
        fail_point_name: None,
        shrink: 0,
    };
    let mut it = argv.into_iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let run = &mut args.run;
        match flag.as_str() {
            "--seconds" => {
                run.seconds = number(
                    value()?,
                    1..=86_400,
                    "--seconds: a whole number, 1 to 86400",
                )?
            }
            "--seed" => run.seed = number(value()?, 0..=u64::MAX, "--seed: a whole number")?,
            "--history" => run.history = Some(value()?.into()),
            "--latency-ms" => {
                let ms = number(value()?, 0..=200, "--latency-ms: 0 to 200")?;
                run.base_latency = (ms > 0).then(|| std::time::Duration::from_millis(ms));
            }
            "--check" => args.check = Some(value()?.into()),
            "--clients" => run.clients = number(value()?, 1..=64, "--clients: 1 to 64")?,
            "--quorum" => match value()?.as_str() {
                "majority" => run.quorum4 = false,
                "4" => run.quorum4 = true,
                other => return Err(format!("--quorum {other}: majority or 4")),
            },
            "--nodes" => {
                run.nodes = Some(value()?.split(',').map(str::to_string).collect());
            }
            "--faults" => {
                let list = value()?;
                run.faults = Some(match list.as_str() {
                    "none" => Vec::new(),
                    _ => list
                        .split(',')
                        .map(|id| id.parse().ok())
                        .collect::<Option<Vec<u64>>>()
                        .ok_or_else(|| {
                            "--faults: fault numbers, comma-separated, or none".to_string()
                        })?,
                });
            }
            "--kinds" => {
                let kinds: Vec<String> = value()?.split(',').map(str::to_string).collect();
                if let Some(bad) = kinds.iter().find(|k| !KIND_NAMES.contains(&k.as_str())) {
                    return Err(format!("--kinds {bad}: one of {}", KIND_NAMES.join(", ")));
                }
                run.kinds = Some(kinds);
            }
            "--shrink" => args.shrink = number(value()?, 1..=100, "--shrink: runs, 1 to 100")?,
            "--fail-point" => {
                use quorum_lock::failpoints::FailPoint;
                let name = value()?;
                args.fail_point_name = Some(name.clone());
                args.fail_point = Some(match name.as_str() {
                    "quorum-of-one" => FailPoint::QuorumOfOne,
                    "holder-call-bypasses-guard" => FailPoint::HolderCallBypassesGuard,
                    "abandoned-answers-uncounted" => FailPoint::AbandonedAnswersUncounted,
                    "subscription-left" => FailPoint::SubscriptionLeft,
                    "token-goes-back" => FailPoint::TokenGoesBack,
                    "refused-release-reports-ok" => FailPoint::RefusedReleaseReportsOk,
                    "fair-place-at-random" => FailPoint::FairPlaceAtRandom,
                    "leader-term-off-by-one" => FailPoint::LeaderTermOffByOne,
                    "break-deletes" => FailPoint::BreakDeletes,
                    "stale-record-shown" => FailPoint::StaleRecordShown,
                    "slot-beyond-permits" => FailPoint::SlotBeyondPermits,
                    "vote-before-fsync" => FailPoint::VoteBeforeFsync,
                    other => return Err(format!("--fail-point {other}: unknown")),
                });
            }
            "--clusters" => run.clusters = true,
            "--durable" => run.durable = true,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if args.run.clusters && args.run.nodes.is_some() {
        return Err("--clusters starts its own fleet: not with --nodes".into());
    }
    if args.run.durable && (args.run.clusters || args.run.nodes.is_some() || args.run.quorum4) {
        return Err("--durable starts its own fleet of standalone nodes, under a majority".into());
    }
    if args.run.clusters && args.run.base_latency.is_some() {
        return Err("--latency-ms: cluster nodes have no proxies".into());
    }
    Ok(args)
}

/// `text` as a number within `range`, or the usage error `message`.
fn number<T: std::str::FromStr + PartialOrd>(
    text: String,
    range: std::ops::RangeInclusive<T>,
    message: &str,
) -> Result<T, String> {
    text.parse()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| message.to_string())
}
