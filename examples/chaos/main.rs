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
//! node runs without AOF and may restart empty or have its clock jump), `--clusters` (five
//! Redis Clusters of two primaries and a replica each as the lock nodes, with their own
//! faults: slot migration, failover; see `nemesis`), `--durable` (every client with durable
//! votes, on nodes with `WAITAOF`: Redis or Valkey 7.2 and later, from
//! `QUORUM_LOCK_REDIS_SERVER`; the nemesis adds machine crashes, which lose what a node had
//! not fsynced, on any node), `--nodes URLS` (an
//! existing fleet, comma-separated: no node faults, and its keys are scanned at the end),
//! `--faults N,N|none` (only these faults of the seed's schedule), `--kinds K,K` (only these
//! kinds), `--shrink RUNS` (a failing run is run again with less, up to RUNS times, and the
//! smallest program that still failed is printed; see `shrink`), `--check FILE` (check an
//! existing history and exit). Ends with one line that includes
//! `N anomalies`; exits 0 only when N is 0 (1 otherwise, 2 on a usage error).

mod check;
mod cli;
mod history;
mod nemesis;
mod run;
mod shrink;
mod workload;

use run::{Options, LIVENESS_BOUND};

fn usage(message: &str) -> ! {
    eprintln!("chaos: {message}");
    eprintln!(
        "usage: chaos [--seconds S] [--seed N] [--history FILE] [--clients C] \
         [--quorum majority|4] [--latency-ms MS] [--clusters | --durable | --nodes URL,URL,...] [--fail-point NAME] \
         [--faults N,N,...|none] [--kinds K,K,...] [--shrink RUNS] [--check FILE]"
    );
    std::process::exit(2)
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
    let args = cli::parse_from(std::env::args().skip(1)).unwrap_or_else(|e| usage(&e));
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
    let report = runtime.block_on(run::run(args.run.clone()));
    let code = print_verdict(&report);
    if code != 0 {
        println!(
            "chaos: failing program: {}",
            shrink::command_line(&args.run, args.fail_point_name.as_deref())
        );
    }
    if code != 0 && args.shrink > 0 {
        let quiet = run::Options {
            verbose: false,
            history: None,
            ..args.run.clone()
        };
        let planned = report.planned.clone();
        let minimal = shrink::shrink(quiet, &report, planned, args.shrink, |o| {
            runtime.block_on(run::run(o.clone()))
        });
        println!(
            "chaos: minimal failing program: {}",
            shrink::command_line(&minimal, args.fail_point_name.as_deref())
        );
    }
    std::process::exit(code);
}
