//! The generative checker: random programs over the whole public API from several clients
//! (separate `QuorumLock` instances on threads of their own, as separate service instances),
//! a seeded nemesis, a JSON-lines history in the form Jepsen's tools read, and an independent
//! check of that history (docs/SAFETY.md, "The generative checker").
//!
//! ```text
//! cargo run --release --all-features --example chaos -- --seconds 60 --seed 1 --history FILE
//! ```
//!
//! Options: `--seconds S` (30), `--seed N` (random, printed), `--history FILE` (written at the
//! end; the checker reads it back), `--clients C` (6), `--quorum majority|4` (with `4`, one
//! node runs without AOF and may restart empty or have its clock jump), `--nodes URLS` (an
//! existing fleet, comma-separated: no node faults, and its keys are scanned at the end),
//! `--check FILE` (check an existing history and exit). Ends with one line that includes
//! `N anomalies`; exits 0 only when N is 0 (1 otherwise, 2 on a usage error).

mod check;
mod history;
mod nemesis;
mod run;
mod workload;

use run::{Options, LIVENESS_BOUND};

/// The command line: a run's options, or a history to check.
struct Args {
    run: Options,
    check: Option<std::path::PathBuf>,
    fail_point: Option<quorum_lock::failpoints::FailPoint>,
}

fn usage(message: &str) -> ! {
    eprintln!("chaos: {message}");
    eprintln!(
        "usage: chaos [--seconds S] [--seed N] [--history FILE] [--clients C] \
         [--quorum majority|4] [--latency-ms MS] [--nodes URL,URL,...] [--fail-point NAME] \
         [--check FILE]"
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut args = Args {
        run: Options {
            seconds: 30,
            seed: u64::from(rand::random::<u32>()),
            history: None,
            clients: 6,
            quorum4: false,
            nodes: None,
            base_latency: None,
            verbose: true,
        },
        check: None,
        fail_point: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let run = &mut args.run;
        match flag.as_str() {
            "--seconds" => {
                run.seconds = value()
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .unwrap_or_else(|| usage("--seconds: a whole number, at least 1"))
            }
            "--seed" => {
                run.seed = value()
                    .parse()
                    .unwrap_or_else(|_| usage("--seed: a whole number"))
            }
            "--history" => run.history = Some(value().into()),
            "--latency-ms" => {
                let ms: u64 = value()
                    .parse()
                    .ok()
                    .filter(|ms| *ms <= 200)
                    .unwrap_or_else(|| usage("--latency-ms: 0 to 200"));
                run.base_latency = (ms > 0).then(|| std::time::Duration::from_millis(ms));
            }
            "--check" => args.check = Some(value().into()),
            "--clients" => {
                run.clients = value()
                    .parse()
                    .ok()
                    .filter(|c| (1..=64).contains(c))
                    .unwrap_or_else(|| usage("--clients: 1 to 64"))
            }
            "--quorum" => match value().as_str() {
                "majority" => run.quorum4 = false,
                "4" => run.quorum4 = true,
                other => usage(&format!("--quorum {other}: majority or 4")),
            },
            "--nodes" => {
                run.nodes = Some(value().split(',').map(str::to_string).collect());
            }
            "--fail-point" => {
                use quorum_lock::failpoints::FailPoint;
                args.fail_point = Some(match value().as_str() {
                    "quorum-of-one" => FailPoint::QuorumOfOne,
                    "holder-call-bypasses-guard" => FailPoint::HolderCallBypassesGuard,
                    "abandoned-answers-uncounted" => FailPoint::AbandonedAnswersUncounted,
                    "subscription-left" => FailPoint::SubscriptionLeft,
                    "token-goes-back" => FailPoint::TokenGoesBack,
                    other => usage(&format!("--fail-point {other}: unknown")),
                });
            }
            "--clusters" => usage("--clusters: cluster nodes are not in the generator yet"),
            other => usage(&format!("unknown option {other}")),
        }
    }
    args
}

/// A fleet given with `--nodes` is checked as a client would check it (lazily: a node down
/// now is no usage error): a bad URL, a duplicate, too few nodes for the quorum.
fn check_nodes(run: &Options) {
    let Some(urls) = &run.nodes else { return };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let quorum = if run.quorum4 {
        quorum_lock::Quorum::AtLeast(4)
    } else {
        quorum_lock::Quorum::Majority
    };
    let built = runtime.block_on(
        quorum_lock::QuorumLock::builder()
            .nodes(urls.clone())
            .quorum(quorum)
            .lazy(true)
            .build(),
    );
    if let Err(e) = built {
        usage(&format!("--nodes: {e}"));
    }
}

fn print_verdict(report: &check::Report) -> i32 {
    print!("{report}");
    println!("chaos: {} anomalies", report.anomalies());
    i32::from(report.anomalies() > 0)
}

fn main() {
    let args = parse();
    if let Some(path) = &args.check {
        let (ops, bad) =
            history::read(path).unwrap_or_else(|e| usage(&format!("{}: {e}", path.display())));
        let mut report = check::check(ops, LIVENESS_BOUND.as_nanos() as u64);
        if bad > 0 {
            report
                .malformed
                .push(format!("{bad} lines are not history lines"));
        }
        std::process::exit(print_verdict(&report));
    }
    check_nodes(&args.run);
    if let Some(point) = args.fail_point {
        println!("chaos: fail point {point:?} on (a negative control: anomalies expected)");
        quorum_lock::failpoints::enable(point);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let report = runtime.block_on(run::run(args.run));
    std::process::exit(print_verdict(&report));
}
