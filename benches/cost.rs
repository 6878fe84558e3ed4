//! What one uncontended acquire+release costs the client's CPU, counted rather than timed:
//! instructions (valgrind's callgrind) and heap allocations per operation, for quorum-lock,
//! the floor and rslock on five local nodes. Unlike latencies, counts hardly follow the
//! machine's load (they move by about 2 % between runs, with how many answers one wake-up
//! collects), so they can be compared across runs and commits.
//!
//! `cargo bench --bench cost` (under a minute). `QUORUM_LOCK_COST_OUT=DIR` keeps the
//! callgrind files there instead of in a temporary directory: `callgrind_annotate
//! --inclusive=yes DIR/callgrind.quorum-lock.1500.out` is where quorum-lock's instructions go.
//!
//! The benchmark starts the fleet once, then runs itself again as a child process for each
//! client and iteration count, under `valgrind --tool=callgrind` (the servers are other
//! processes and are not traced). The child runs the client on a current-thread tokio runtime
//! (every task on one thread, so nothing else is counted), does 100 warm-up cycles and then
//! the counted ones. Instructions per operation are the difference between a 1,500-cycle and
//! a 500-cycle run over 1,000: start-up, connecting, warm-up and exit are the same in both and
//! cancel. Allocations are counted by a global allocator over the counted cycles of the same
//! runs (callgrind does not replace the allocator), and differenced the same way.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use quorum_lock::testkit::Fleet;
use quorum_lock::QuorumLock;

mod common;
use common::{Counting, Floor, ALLOCATIONS, TTL};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The child's settings, passed in the environment (cargo adds its own arguments).
const CLIENT_VAR: &str = "QUORUM_LOCK_COST_CLIENT";
const CYCLES_VAR: &str = "QUORUM_LOCK_COST_CYCLES";
const NODES_VAR: &str = "QUORUM_LOCK_COST_NODES";
const OUT_VAR: &str = "QUORUM_LOCK_COST_OUT";

/// The two runs whose difference is counted, and the warm-up both do first.
const SHORT: u64 = 500;
const LONG: u64 = 1500;
const WARM_UP: u64 = 100;

/// The clients compared, by the name the child is given: the acquire+release of each, then
/// quorum-lock's calls of issue 36, each one cycle: a labelled acquire+release (the holder
/// record: one more round trip), an election's campaign+resign (a fenced acquire, the term's
/// round trips, the record), and `holder_of` of a free key (one read of every node); then
/// issue 37's semaphore of three permits, a permit's acquire+release: as slots under the
/// majority (a free slot is one mutex's), and counted under every node (`Quorum::All`).
const CLIENTS: [&str; 8] = [
    "quorum-lock",
    "floor",
    "rslock",
    "quorum-lock-labelled",
    "quorum-lock-election",
    "quorum-lock-holder-of",
    "quorum-lock-slots",
    "quorum-lock-counted",
];

fn main() {
    match std::env::var(CLIENT_VAR) {
        Ok(client) => child(&client),
        Err(_) => parent(),
    }
}

/// What one cycle of quorum-lock does.
#[derive(Clone, Copy)]
enum Call {
    AcquireRelease,
    Labelled,
    Election,
    HolderOf,
    Slots,
    Counted,
}

/// One client, connected to the parent's nodes.
enum Client {
    Ours(QuorumLock, Call),
    Floor(Floor),
    Rslock(rslock::LockManager),
}

impl Client {
    async fn connect(name: &str, urls: Vec<String>) -> Client {
        match name {
            // The node timeout of the floor's and rslock's connections (the redis crate's
            // response timeout) rather than the default 50 ms: under callgrind the client runs
            // some fifty times slower, and on a busy machine a pause of that length would fail
            // the run. No request comes near either bound, so the counts are the same.
            "quorum-lock"
            | "quorum-lock-labelled"
            | "quorum-lock-election"
            | "quorum-lock-holder-of"
            | "quorum-lock-slots"
            | "quorum-lock-counted" => {
                let quorum = match name {
                    "quorum-lock-counted" => quorum_lock::Quorum::All,
                    _ => quorum_lock::Quorum::Majority,
                };
                let locks = QuorumLock::builder()
                    .nodes(urls)
                    .quorum(quorum)
                    .node_timeout(Duration::from_millis(500))
                    .build()
                    .await
                    .expect("client");
                let call = match name {
                    "quorum-lock-labelled" => Call::Labelled,
                    "quorum-lock-election" => Call::Election,
                    "quorum-lock-holder-of" => Call::HolderOf,
                    "quorum-lock-slots" => Call::Slots,
                    "quorum-lock-counted" => Call::Counted,
                    _ => Call::AcquireRelease,
                };
                Client::Ours(locks, call)
            }
            "floor" => {
                let fleet = Fleet::external(urls).expect("node URLs");
                Client::Floor(Floor::connect(&fleet).await)
            }
            "rslock" => Client::Rslock(rslock::LockManager::new(urls)),
            other => panic!("unknown client {other:?}"),
        }
    }

    /// One uncontended acquire+release, as the peers benchmark does it.
    async fn cycle(&self, key: &str) {
        match self {
            Client::Ours(locks, Call::AcquireRelease) => {
                let guard = locks
                    .try_acquire(key, TTL)
                    .await
                    .expect("acquire")
                    .expect("uncontended");
                guard.release().await.expect("release");
            }
            Client::Ours(locks, Call::Labelled) => {
                let guard = locks
                    .lock(key)
                    .ttl(TTL)
                    .label("host-7/job-42")
                    .try_acquire()
                    .await
                    .expect("acquire")
                    .expect("uncontended");
                guard.release().await.expect("release");
            }
            Client::Ours(locks, Call::Election) => {
                let leading = locks
                    .election(key)
                    .lease(TTL)
                    .campaign("10.0.0.7:8080")
                    .await
                    .expect("campaign");
                leading.resign().await.expect("resign");
            }
            Client::Ours(locks, Call::HolderOf) => {
                let held = locks.holder_of(key).await.expect("holder_of");
                assert!(held.is_none(), "a free key");
            }
            Client::Ours(locks, call @ (Call::Slots | Call::Counted)) => {
                let request = match call {
                    Call::Counted => locks.semaphore(key, 3).counted(),
                    _ => locks.semaphore(key, 3),
                };
                let permit = request
                    .ttl(TTL)
                    .try_acquire()
                    .await
                    .expect("acquire")
                    .expect("uncontended");
                permit.release().await.expect("release");
            }
            Client::Floor(floor) => floor.lock_unlock(key, 3).await,
            Client::Rslock(peer) => {
                let lock = peer.lock(key, TTL).await.expect("rslock acquire");
                peer.unlock(&lock).await;
            }
        }
    }
}

/// The child: `cycles` counted cycles of one client after the warm-up; prints the
/// allocations of the counted cycles.
fn child(client: &str) {
    let cycles: u64 = std::env::var(CYCLES_VAR)
        .expect("cycles")
        .parse()
        .expect("cycles");
    let urls: Vec<String> = std::env::var(NODES_VAR)
        .expect("node URLs")
        .split(',')
        .map(str::to_owned)
        .collect();
    // One thread: the client's tasks and the connections' tasks are all counted, and
    // nothing runs on other threads whose work would vary with scheduling.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let allocations = rt.block_on(async {
        let key = format!("bench:cost:{client}");
        let client = Client::connect(client, urls).await;
        for _ in 0..WARM_UP {
            client.cycle(&key).await;
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..cycles {
            client.cycle(&key).await;
        }
        ALLOCATIONS.load(Ordering::Relaxed) - before
    });
    println!("allocations {allocations}");
}

/// What one child run counted.
struct Run {
    instructions: Option<u64>,
    allocations: u64,
}

/// How the parent runs its children.
struct Runner {
    exe: PathBuf,
    nodes: String,
    /// Where callgrind writes; `None` without valgrind.
    out: Option<PathBuf>,
}

impl Runner {
    fn out_file(&self, client: &str, cycles: u64) -> Option<PathBuf> {
        let out = self.out.as_ref()?;
        Some(out.join(format!("callgrind.{client}.{cycles}.out")))
    }

    /// The command of one child run: the benchmark itself, under callgrind when there is one.
    fn command(&self, client: &str, cycles: u64) -> Command {
        let mut cmd = match self.out_file(client, cycles) {
            Some(file) => {
                let mut cmd = Command::new("valgrind");
                cmd.arg("--tool=callgrind")
                    .arg("--quiet")
                    .arg(format!("--callgrind-out-file={}", file.display()))
                    .arg(&self.exe);
                cmd
            }
            None => Command::new(&self.exe),
        };
        cmd.env(CLIENT_VAR, client)
            .env(CYCLES_VAR, cycles.to_string())
            .env(NODES_VAR, &self.nodes);
        cmd
    }

    fn run(&self, client: &str, cycles: u64) -> Run {
        let output = self
            .command(client, cycles)
            .output()
            .expect("run the benchmark as a child");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{client} ({cycles} cycles) failed: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let allocations = stdout
            .lines()
            .find_map(|l| l.strip_prefix("allocations "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{client}: no allocation count in {stdout:?}"));
        let instructions = self
            .out_file(client, cycles)
            .map(|file| total_instructions(&file));
        Run {
            instructions,
            allocations,
        }
    }
}

/// The total instruction count (`Ir`) of a callgrind output file: its `summary:` line, or
/// `totals:` when it has none.
fn total_instructions(file: &Path) -> u64 {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let line = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    line("summary:")
        .or_else(|| line("totals:"))
        .unwrap_or_else(|| panic!("no summary or totals line in {}", file.display()))
}

fn has_valgrind() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn parent() {
    let fleet = Fleet::start(5).expect("fleet");
    let valgrind = has_valgrind();
    let kept = std::env::var_os(OUT_VAR).map(PathBuf::from);
    let scratch = std::env::temp_dir().join(format!("quorum-lock-cost-{}", std::process::id()));
    let out = kept.clone().unwrap_or_else(|| scratch.clone());
    if valgrind {
        std::fs::create_dir_all(&out).expect("callgrind output directory");
    }
    let runner = Runner {
        exe: std::env::current_exe().expect("the benchmark's own path"),
        nodes: fleet.urls().join(","),
        out: valgrind.then(|| out.clone()),
    };

    println!(
        "quorum-lock cost benchmark: uncontended acquire+release, 5 local nodes (and one cycle of \
         each quorum-lock call named after it)"
    );
    println!("command: cargo bench --bench cost");
    if valgrind {
        println!(
            "each client: `valgrind --tool=callgrind --callgrind-out-file=FILE {}` with \
             {CLIENT_VAR}=CLIENT {CYCLES_VAR}={SHORT} and {LONG}, {NODES_VAR}=<the fleet's URLs>; \
             per op = (count at {LONG} - count at {SHORT}) / {}",
            runner.exe.display(),
            LONG - SHORT
        );
    } else {
        println!(
            "valgrind not found: instructions are not counted (install valgrind for them); \
             allocations only, from runs without it"
        );
    }
    println!();

    let rows: Vec<(&str, Option<f64>, f64)> = CLIENTS
        .iter()
        .map(|&client| {
            let short = runner.run(client, SHORT);
            let long = runner.run(client, LONG);
            let per_op = |a: u64, b: u64| (a as f64 - b as f64) / (LONG - SHORT) as f64;
            let instructions = match (long.instructions, short.instructions) {
                (Some(l), Some(s)) => Some(per_op(l, s)),
                _ => None,
            };
            (
                client,
                instructions,
                per_op(long.allocations, short.allocations),
            )
        })
        .collect();

    let (floor_ir, floor_alloc) = (rows[1].1, rows[1].2);
    println!("quorum-lock's targets: at most 100,000 instructions and 16 allocations per op");
    println!("| client | instructions/op | allocations/op | instructions / floor | allocations / floor |");
    println!("|---|---|---|---|---|");
    for (client, ir, alloc) in &rows {
        let ir_text = ir.map_or("n/a".to_owned(), |i| format!("{i:.0}"));
        let ir_ratio = match (ir, floor_ir) {
            (Some(i), Some(f)) => format!("{:.2}", i / f),
            _ => "n/a".to_owned(),
        };
        println!(
            "| {client} | {ir_text} | {alloc:.1} | {ir_ratio} | {:.2} |",
            alloc / floor_alloc
        );
    }
    if valgrind {
        match kept {
            Some(dir) => println!("\ncallgrind files kept in {}", dir.display()),
            None => {
                let _ = std::fs::remove_dir_all(&scratch);
            }
        }
    }
}
