//! `quorum-lock`, the command-line tool (feature `cli`): locks across N independent Redis
//! masters for cron jobs and shell scripts. `run` is flock(1) across the fleet and stops the
//! command before the lock could pass to anyone else; `hold` keeps a lock for a script;
//! `acquire`, `extend` and `release` are fixed-TTL steps; `status` and `check` inspect the
//! nodes. Exit codes are listed in `exit` and in `--help`.
//!
//! # Layout
//!
//! `args` the command line (clap); `values` durations, quorum rules, signals and keys;
//! `settings` the global settings from the command line, the environment and the TOML file,
//! and the TLS files; `exit` exit codes and the one-line failure; `run` the supervised
//! command and its loss handling; `child` its process group, exit status and the CLI's
//! signals; `hold` taking a lock through the library, `hold` and `acquire`; `direct`
//! per-node connections (the library's node clients) for `status` and `check`; `steps`
//! extend and release by holder value; `status`; `check`; `exporter` the Prometheus
//! endpoint of `hold --metrics-addr`.

#![deny(unsafe_code)]

mod args;
mod check;
mod child;
mod direct;
mod exit;
mod exporter;
mod hold;
mod kind_args;
mod leader;
mod run;
mod settings;
mod status;
mod steps;
mod values;

use args::{Cli, Command};
use exit::Failure;
use settings::Settings;

fn main() {
    let cli = match args::parse() {
        Ok(cli) => cli,
        Err(code) => exit::finish(code),
    };
    init_logging();
    // Two workers: the watchdog's renewals and the supervisor's timers must not wait behind
    // each other on a loaded machine. The top-level future itself runs on this (the main)
    // thread, which `run` relies on for the parent-death signal.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("quorum-lock: starting the async runtime: {e}");
            exit::finish(exit::OS_ERROR)
        }
    };
    let verbose = cli.global.verbose;
    let code = match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(failure) => {
            if !failure.quiet || verbose {
                eprintln!("quorum-lock: {}", failure.message);
            }
            failure.code
        }
    };
    // Not returning: the runtime is not dropped (see `exit::finish`).
    exit::finish(code)
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let settings = Settings::load(&cli.global)?;
    match &cli.command {
        Command::Run(args) => run::run(&settings, args, None).await,
        Command::Elect(args) => run::run(&settings, &args.run, Some(&args.value)).await,
        Command::Leader(args) => leader::leader(&settings, args).await,
        Command::Break(args) => leader::break_lock(&settings, args).await,
        Command::AskRelease(args) => leader::ask_release(&settings, args).await,
        Command::Hold(args) => hold::hold(&settings, args).await,
        Command::Acquire(args) => hold::acquire(&settings, args).await,
        Command::Extend(args) => steps::extend(&settings, args).await,
        Command::Release(args) => steps::release(&settings, args).await,
        Command::Status(args) => status::status(&settings, args).await,
        Command::Check(args) => check::check(&settings, args).await,
    }
}

/// The library logs through `tracing` (warnings about unsafe node settings, failed renewals,
/// lost locks; addresses redacted, holder values never). Silent unless `QUORUM_LOCK_LOG` asks,
/// e.g. `QUORUM_LOCK_LOG=warn` or `quorum_lock=debug`, so that cron mails stay quiet.
fn init_logging() {
    let Some(filter) = std::env::var("QUORUM_LOCK_LOG")
        .ok()
        .filter(|f| !f.is_empty())
    else {
        return;
    };
    match tracing_subscriber::EnvFilter::try_new(&filter) {
        Ok(filter) => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init(),
        Err(e) => eprintln!("quorum-lock: warning: QUORUM_LOCK_LOG ignored: {e}"),
    }
}
