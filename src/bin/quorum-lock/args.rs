//! The command line (clap): global settings, the subcommands and their options, and the
//! parsers for durations, quorum rules, signals and keys.

use std::path::PathBuf;
use std::time::Duration;

pub use crate::kind_args::KindArgs;
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use quorum_lock::Quorum;

use crate::exit;
#[path = "coordination_args.rs"]
mod coordination;
pub use coordination::{AskArgs, BreakArgs, ElectArgs, LeaderArgs};
use coordination::{ASK_HELP, BREAK_HELP, ELECT_HELP, LEADER_EXIT};

use crate::values::{
    parse_duration, parse_key, parse_label, parse_quorum, parse_signal, parse_wait,
};

/// The exit codes, shown by `--help` (and documented in the README).
const EXIT_CODES: &str = "\
Exit codes:
  0        success (run: the command's own code)
  1        the lock stayed busy (the -E/--conflict-exit-code value)
  64       usage error
  69       too few nodes reachable for a quorum (not contention)
  71       an operating-system error (signal handlers, writing to stdout)
  75       the lock was lost, or --max-hold reached, while the command ran (it was stopped)
  78       configuration error (bad node address, config file or setting; a TLS file
           unreadable or not PEM; a node's certificate not trusted, or ours refused)
  126      the command is not executable
  127      the command was not found
  128+N    the command was killed by signal N (also the CLI itself, on a signal while waiting)

Environment:
  QUORUM_LOCK_NODES, QUORUM_LOCK_QUORUM, QUORUM_LOCK_NODE_TIMEOUT, QUORUM_LOCK_CONNECT_TIMEOUT,
  QUORUM_LOCK_CONFIG, QUORUM_LOCK_TLS_CA, QUORUM_LOCK_TLS_CERT, QUORUM_LOCK_TLS_KEY
           the global options above
  QUORUM_LOCK_LOG  the library's log on stderr, e.g. warn or quorum_lock=debug (default: none)";

const ABOUT: &str = "\
Locks across N independent Redis masters (RedLock / MultiLock), for cron jobs and scripts.

`run` is flock(1) across the fleet: it holds the lock while the command runs, renews it, and
stops the command (its whole process group) before the lock could pass to anyone else.";

/// `quorum-lock [GLOBAL OPTIONS] COMMAND ...`
#[derive(Debug, Parser)]
#[command(
    name = "quorum-lock",
    version,
    about = ABOUT,
    after_help = EXIT_CODES,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Settings for every command; each also comes from the environment or the config file
/// (command line first, then the environment, then the file).
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Node addresses, comma-separated: redis://[user:pass@]host:port[/db], rediss://...,
    /// valkey://..., valkeys://..., unix:///path. Prefer the environment or the config file for passwords: the command
    /// line is visible to other local users.
    #[arg(
        long,
        global = true,
        env = "QUORUM_LOCK_NODES",
        hide_env_values = true,
        value_name = "URL,..."
    )]
    pub nodes: Option<String>,

    /// How many nodes must confirm: majority (default), all, or a number K (more than half).
    #[arg(long, global = true, env = "QUORUM_LOCK_QUORUM", hide_env_values = true, value_parser = parse_quorum)]
    pub quorum: Option<Quorum>,

    /// How long one node may take to answer one call [default: 50ms].
    #[arg(long, global = true, env = "QUORUM_LOCK_NODE_TIMEOUT", hide_env_values = true, value_name = "DUR", value_parser = parse_duration)]
    pub node_timeout: Option<Duration>,

    /// How long to wait for each node's first connection [default: 2s]; status and check also
    /// wait this long for each node's answers.
    #[arg(long, global = true, env = "QUORUM_LOCK_CONNECT_TIMEOUT", hide_env_values = true, value_name = "DUR", value_parser = parse_duration)]
    pub connect_timeout: Option<Duration>,

    /// The CA certificate(s), PEM, that signed the rediss:// nodes' certificates: then the only
    /// roots trusted (without it, the public webpki roots).
    #[arg(
        long,
        global = true,
        env = "QUORUM_LOCK_TLS_CA",
        hide_env_values = true,
        value_name = "FILE"
    )]
    pub tls_ca: Option<PathBuf>,

    /// A client certificate chain, PEM, for rediss:// nodes that require one (with
    /// --tls-key).
    #[arg(
        long,
        global = true,
        env = "QUORUM_LOCK_TLS_CERT",
        hide_env_values = true,
        value_name = "FILE"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The client certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1); never shown.
    #[arg(
        long,
        global = true,
        env = "QUORUM_LOCK_TLS_KEY",
        hide_env_values = true,
        value_name = "FILE"
    )]
    pub tls_key: Option<PathBuf>,

    /// Say why on stderr when the lock stays busy (silent by default, as flock(1) is: cron
    /// mails any output).
    #[arg(short, long, global = true)]
    pub verbose: bool,

    /// A TOML file with the same settings: nodes, quorum, node_timeout, connect_timeout,
    /// tls_ca, tls_cert, tls_key (paths relative to the file).
    #[arg(
        long,
        global = true,
        env = "QUORUM_LOCK_CONFIG",
        hide_env_values = true,
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding KEY (flock(1) across the fleet).
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Acquire KEY, print the holder value, keep the lock until a signal or stdin closes.
    #[command(after_help = HOLD_EXIT)]
    Hold(HoldArgs),
    /// Show each node's view of KEY and whether a quorum holds it.
    #[command(after_help = STATUS_EXIT)]
    Status(StatusArgs),
    /// For scripts: acquire KEY for a fixed TTL and print the holder value (no renewal).
    #[command(after_help = ACQUIRE_EXIT)]
    Acquire(AcquireArgs),
    /// For scripts: extend KEY held with HOLDER (its holder value) to a new TTL.
    #[command(after_help = EXTEND_EXIT)]
    Extend(ExtendArgs),
    /// For scripts: release KEY held with HOLDER (its holder value).
    #[command(after_help = RELEASE_EXIT)]
    Release(ReleaseArgs),
    /// Check every node for what weakens the lock's safety.
    #[command(after_help = CHECK_EXIT)]
    Check(CheckArgs),
    /// Campaign in the election NAME (the KEY below) and run a command while leading.
    #[command(after_help = ELECT_HELP)]
    Elect(ElectArgs),
    /// Print the leader of the election NAME: its value and term.
    #[command(after_help = LEADER_EXIT)]
    Leader(LeaderArgs),
    /// Break KEY: whatever holds it loses it (an operator's last resort).
    #[command(name = "break", after_help = BREAK_HELP)]
    Break(BreakArgs),
    /// Ask whoever holds KEY to release it (cooperative: the holder may, or not).
    #[command(after_help = ASK_HELP)]
    AskRelease(AskArgs),
}

const HOLD_EXIT: &str = "\
Exit codes:
  0 released (after a signal, or stdin closed); 1 (-E) busy; 64 usage; 69 nodes
  unreachable; 71 operating-system error; 75 lock lost or --max-hold reached; 78
  configuration";

const STATUS_EXIT: &str = "\
Exit codes:
  0 the report (whatever its verdict, but unknown); 64 usage (also a key cluster nodes
  refuse); 69 too few nodes answered to tell (verdict unknown); 71 stdout not writable; 78
  configuration";

const ACQUIRE_EXIT: &str = "\
Exit codes:
  0 acquired (the holder value printed); 1 (-E) busy; 64 usage; 69 nodes unreachable; 71
  stdout not writable; 78 configuration; 128+N a signal N while waiting";

const EXTEND_EXIT: &str = "\
Exit codes:
  0 extended; 64 usage; 69 nodes unreachable; 71 stdout not writable (--json); 75 not held
  by a quorum (lost, or another holder's); 78 configuration";

const RELEASE_EXIT: &str = "\
Exit codes:
  0 released; 64 usage; 69 nodes unreachable (the release may not have reached a quorum);
  71 stdout not writable (--json); 75 not held by a quorum; 78 configuration";

const CHECK_EXIT: &str = "\
Exit codes:
  0 nothing found that weakens the lock (findings about availability may be listed); 64
  usage; 69 fewer nodes answer than the quorum needs; 71 stdout not writable; 78 a node's
  configuration weakens the lock, or the settings are wrong";

const RUN_HELP: &str = "\
The command runs in its own process group, dies with quorum-lock (parent-death signal), and
gets QUORUM_LOCK_KEY, QUORUM_LOCK_HELD=1 and, with --fencing, QUORUM_LOCK_FENCING_TOKEN.
INT, TERM and HUP sent to quorum-lock go to the command's group; the lock is released after
the command ends. If no renewal is confirmed by the lock's deadline minus --kill-grace, the
group gets --kill-signal, and KILL after the grace (never later than the deadline); the exit
code is then 75.

Examples:
  quorum-lock run -n nightly-report -- /usr/local/bin/report --full
  quorum-lock run --read catalog -- ./export   # many readers at once, never with a writer
  quorum-lock run --write catalog -- ./import  # alone, once the readers have left
  quorum-lock run --permits 3 gpu -- ./train   # at most 3 at once, under the quorum
  quorum-lock run -w 2m --lease 1m --hold-min 10m backup -c 'pg_dump db | gzip > /b/db.gz'

Exit codes:
  the command's code; 128+N if a signal N killed it; 1 (-E) busy; 64 usage; 69 nodes
  unreachable; 75 lock lost or --max-hold reached while it ran; 78 configuration; 126 not
  executable; 127 not found";

/// How to take a lock: shared by `run`, `hold` and `acquire`.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// How long to wait while someone else holds the lock (a number alone is seconds, as
    /// for flock -w). Not for ever by default, unlike flock: a job stuck behind a lock
    /// should fail and say so.
    #[arg(short, long, value_name = "DUR", default_value = "10s", value_parser = parse_wait)]
    pub wait: Duration,

    /// One attempt, no waiting.
    #[arg(short, long, conflicts_with = "wait")]
    pub nonblock: bool,

    /// The exit code when the lock stayed busy.
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = 1)]
    pub conflict_exit_code: u8,
}

/// How `run` and `hold` take and keep their lock: the kind, the wait, and the watchdog's
/// lease, fencing and maximum hold.
#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub wait: WaitArgs,

    #[command(flatten)]
    pub kind: KindArgs,

    /// The lock's lease, renewed every third of it while held.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub lease: Duration,

    /// Also take a fencing token (`run`: in QUORUM_LOCK_FENCING_TOKEN; `hold`: printed after
    /// the holder value).
    #[arg(long)]
    pub fencing: bool,

    /// End the lock after this long (exit 75): `run` stops its command before it does.
    /// Shorter than --lease, it is the lock's only lease.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub max_hold: Option<Duration>,

    /// Write the library's metrics to FILE (Prometheus text format, for node-exporter's
    /// textfile collector) when the command ends; replaced atomically.
    #[arg(long, value_name = "FILE")]
    pub metrics_textfile: Option<PathBuf>,

    /// A public label for the holder (who holds it: `host-7/job-42`), shown by `status`
    /// with the time it was taken. Any kind (a semaphore's on its slot).
    #[arg(long, value_name = "TEXT", value_parser = parse_label)]
    pub label: Option<String>,
}

impl WatchArgs {
    /// The lock's first lease: --lease, or --max-hold when that is shorter (the lock must not
    /// outlive it).
    pub fn first_lease(&self) -> Duration {
        match self.max_hold {
            Some(max) if max < self.lease => max,
            _ => self.lease,
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub watch: WatchArgs,

    /// Keep the lock at least this long after acquiring it, also when the command ends
    /// sooner, so that a late run on another host does not repeat the job.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub hold_min: Option<Duration>,

    /// The signal sent to the command's group when the lock can no longer be trusted.
    #[arg(long, value_name = "SIG", default_value = "TERM", value_parser = parse_signal)]
    pub kill_signal: i32,

    /// Time between --kill-signal and KILL; the signal is sent this long before the lock's
    /// deadline. At most half the lease [default: 5s, or a quarter of --lease if shorter].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub kill_grace: Option<Duration>,

    /// When someone asks the holder to release (`quorum-lock ask-release KEY`), send this
    /// signal to the command's group (once), which may finish early.
    #[arg(long, value_name = "SIG", value_parser = parse_signal)]
    pub on_release_request: Option<i32>,

    /// Keep this tool's settings (QUORUM_LOCK_NODES with any passwords in it, the TLS files,
    /// the config file) out of the command's environment.
    #[arg(long)]
    pub clean_env: bool,

    /// Run STRING with $SHELL -c (/bin/sh when SHELL is unset).
    #[arg(short = 'c', value_name = "STRING", conflicts_with = "cmd")]
    pub shell_command: Option<String>,

    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,

    /// The command and its arguments (after `--` if they start with a dash).
    #[arg(
        value_name = "CMD",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "shell_command"
    )]
    pub cmd: Vec<String>,
}

impl RunArgs {
    /// The kill grace: as given, else 5 s or a quarter of the first lease, whichever is
    /// shorter.
    pub fn kill_grace(&self) -> Duration {
        self.kill_grace
            .unwrap_or_else(|| DEFAULT_KILL_GRACE.min(self.watch.first_lease() / 4))
    }
}

const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Args)]
pub struct HoldArgs {
    #[command(flatten)]
    pub watch: WatchArgs,

    /// Print a JSON object instead of the plain line.
    #[arg(long)]
    pub json: bool,

    /// Serve the lock's metrics in the Prometheus text format on this address while it is
    /// held (e.g. 127.0.0.1:9464; port 0 picks one, printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// Warn this long before the lock's deadline when no renewal has been confirmed by then
    /// (nodes unreachable, or --max-hold near): a line `expiring MS` on stdout (MS: what is
    /// left of the lock) and, with --warn-signal, a signal to the parent process. A line
    /// `renewed` follows if a renewal then comes. [default: 5s, or a quarter of the first
    /// lease if shorter]
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub warn_before: Option<Duration>,

    /// Also send this signal to the parent process (the script) with the warning.
    #[arg(long, value_name = "SIG", value_parser = parse_signal)]
    pub warn_signal: Option<i32>,

    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,

    /// For a semaphore: its number of permits (the count is the clients', not stored on the
    /// nodes), to tell whether one is left; more than one permit, its slots (KEY#0 ..).
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u32).range(1..=i64::from(quorum_lock::MAX_SLOTS)))]
    pub permits: Option<u32>,

    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,
}

#[derive(Debug, Args)]
pub struct AcquireArgs {
    #[command(flatten)]
    pub wait: WaitArgs,

    /// The lock's TTL: it expires after that unless extended or released.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub ttl: Duration,

    /// Also take a fencing token (printed after the holder value).
    #[arg(long)]
    pub fencing: bool,

    /// Print a JSON object instead of the plain line.
    #[arg(long)]
    pub json: bool,

    /// A public label for the holder, shown by `status` with the time it was taken.
    #[arg(long, value_name = "TEXT", value_parser = parse_label)]
    pub label: Option<String>,

    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,
}

#[derive(Debug, Args)]
pub struct ExtendArgs {
    /// The new TTL, from now.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub ttl: Duration,

    /// Print a JSON object.
    #[arg(long)]
    pub json: bool,

    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,

    /// The holder value printed by `acquire`, or `-` to read it from stdin (the command line
    /// is visible to other local users).
    pub holder: String,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Print a JSON object.
    #[arg(long)]
    pub json: bool,

    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,

    /// The holder value printed by `acquire`, or `-` to read it from stdin.
    pub holder: String,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,

    /// Report a node whose clock is further than this from the others'.
    #[arg(long, value_name = "DUR", default_value = "500ms", value_parser = parse_duration)]
    pub clock_tolerance: Duration,
}

/// Parses the command line. Help and version go to stdout with exit 0; every usage error is
/// one line on stderr with exit 64 (clap's own code, 2, means nothing to cron or scripts).
pub fn parse() -> Result<Cli, u8> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                let _ = e.print();
                Err(exit::OK)
            }
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                eprint!("{}", e.render());
                Err(exit::USAGE)
            }
            _ => {
                eprintln!("quorum-lock: {} (see --help)", one_line(&e));
                Err(exit::USAGE)
            }
        },
    }
}

/// clap's message without its usage block and tips, on one line, with a value too long to
/// read cut short (an oversized key was quoted whole: a 70 KB line).
fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let head = text.split("\n\n").next().unwrap_or("");
    let head = head.strip_prefix("error: ").unwrap_or(head);
    head.split_whitespace()
        .map(|word| match word.char_indices().nth(LONGEST_WORD) {
            Some((at, _)) => format!("{}...({} bytes)", &word[..at], word.len()),
            None => word.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The longest word of a usage error shown whole.
const LONGEST_WORD: usize = 80;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_in_a_usage_error_is_cut_short() {
        let key = "k".repeat(70_000);
        let e = Cli::try_parse_from(["quorum-lock", "status", key.as_str()]).unwrap_err();
        let line = one_line(&e);
        assert!(line.len() < 300, "{} bytes: {}", line.len(), &line[..300]);
        assert!(
            line.contains("70002 bytes") || line.contains("70000 bytes"),
            "{line}"
        );
    }

    #[test]
    fn the_help_states_the_library_defaults() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        let builder = quorum_lock::QuorumLock::builder();
        for (option, value) in [
            ("--node-timeout", builder.get_node_timeout()),
            ("--connect-timeout", builder.get_connect_timeout()),
        ] {
            let at = help.find(option).expect(option);
            let shown = match value.subsec_millis() {
                0 => format!("{}s", value.as_secs()),
                _ => format!("{}ms", value.as_millis()),
            };
            let stated = format!("[default: {shown}]");
            assert!(
                help[at..].contains(&stated),
                "{option}: the help does not say {stated}"
            );
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
