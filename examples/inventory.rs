//! The seed scenario: 100 concurrent buyers of 90 MoonCakes, guarded by a lock across five
//! local Redis masters, one of which is killed halfway through.
//!
//! ```text
//! cargo run --example inventory                  # RedLock (majority): sells exactly 90
//! cargo run --example inventory -- --quorum all  # MultiLock: refuses while a node is down
//! cargo run --example inventory -- --no-lock     # the same buyers without a lock: oversells
//!
//! # the buyers spread over 10 separate clients (as 10 service instances), node 2 frozen
//! # (SIGSTOP) halfway instead of killed; runs healthy first and prints both times
//! cargo run --example inventory -- --clients 10 --freeze
//!
//! # the same buyers served in the order they asked (the fair lock): fewer attempts
//! cargo run --example inventory -- --clients 10 --fair
//!
//! # against the docker-compose fleet (docker-compose.yml), killing a node halfway
//! cargo run --example inventory -- --external --halfway 'docker-compose kill redis3'
//! ```
//!
//! With `--external` the lock nodes are `QUORUM_LOCK_NODES` (default: the compose fleet's
//! 127.0.0.1:7001-7005) and the stock database `QUORUM_LOCK_STOCK_DB` (default: the compose
//! fleet's `stock` service, 127.0.0.1:7006); the demo cannot kill those nodes itself, so
//! `--halfway CMD` runs a shell command at the halfway point instead.
//!
//! The stock lives on a sixth, separate Redis server and is updated with a plain
//! read-modify-write (GET, think, SET): only the lock keeps two buyers from selling the same
//! cake. Exits non-zero if anything was oversold.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorum_lock::testkit::Fleet;
use quorum_lock::{Error, Quorum, QuorumLock};
use redis::AsyncCommands;

const STOCK_KEY: &str = "stock:MoonCake";
const LOCK_KEY: &str = "lock:stock:MoonCake";
const NODE_TO_KILL: usize = 2;

struct Options {
    quorum: Quorum,
    buyers: u64,
    stock: i64,
    lock: bool,
    external: bool,
    /// A shell command run at the halfway point instead of killing a node.
    halfway: Option<String>,
    /// Separate clients (`QuorumLock` instances) the buyers are spread over.
    clients: usize,
    /// Freeze the node halfway (SIGSTOP) instead of killing it, after a healthy run.
    freeze: bool,
    /// The fair lock (buyers served in the order they asked) instead of the mutex.
    fair: bool,
}

/// The compose fleet's lock nodes and stock database (docker-compose.yml).
const COMPOSE_NODES: &str = "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003,redis://127.0.0.1:7004,redis://127.0.0.1:7005";
const COMPOSE_STOCK_DB: &str = "redis://127.0.0.1:7006";

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        quorum: Quorum::Majority,
        buyers: 100,
        stock: 90,
        lock: true,
        external: false,
        halfway: None,
        clients: 1,
        freeze: false,
        fair: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--quorum" => {
                o.quorum = match value("--quorum")?.as_str() {
                    "majority" => Quorum::Majority,
                    "all" => Quorum::All,
                    other => return Err(format!("--quorum is majority or all, not {other:?}")),
                }
            }
            "--buyers" => {
                o.buyers = value("--buyers")?
                    .parse()
                    .map_err(|e| format!("--buyers: {e}"))?
            }
            "--stock" => {
                o.stock = value("--stock")?
                    .parse()
                    .map_err(|e| format!("--stock: {e}"))?
            }
            "--no-lock" => o.lock = false,
            "--external" => o.external = true,
            "--halfway" => o.halfway = Some(value("--halfway")?),
            "--clients" => {
                o.clients = value("--clients")?
                    .parse()
                    .map_err(|e| format!("--clients: {e}"))?;
                if o.clients == 0 {
                    return Err("--clients must be at least 1".into());
                }
            }
            "--freeze" => o.freeze = true,
            "--fair" => o.fair = true,
            "-h" | "--help" => {
                // Asked for: on standard output, and a success.
                println!(
                    "usage: inventory [--quorum majority|all] [--buyers N] [--stock N] \
                     [--no-lock] [--clients N] [--freeze] [--fair] [--external] [--halfway SHELL-COMMAND]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(o)
}

#[derive(Default)]
struct Tally {
    /// Sales after which a node is killed.
    half: u64,
    halfway: tokio::sync::Notify,
    sold: AtomicU64,
    sold_out: AtomicU64,
    lock_refused: AtomicU64,
    release_unconfirmed: AtomicU64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if opts.freeze && !opts.external {
        // The same sale on a healthy fleet first, for the time beside the frozen run's.
        println!("== healthy run ==");
        let healthy = match run(&opts, false).await {
            Ok((ExitCode::SUCCESS, elapsed)) => elapsed,
            Ok((code, _)) => return code,
            Err(e) => {
                eprintln!("inventory: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("\n== node {NODE_TO_KILL} frozen halfway ==");
        return match run(&opts, true).await {
            Ok((code, frozen)) => {
                println!(
                    "\ntime: healthy {healthy:?}, node {NODE_TO_KILL} frozen halfway {frozen:?} ({:.2}x)",
                    frozen.as_secs_f64() / healthy.as_secs_f64()
                );
                code
            }
            Err(e) => {
                eprintln!("inventory: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match run(&opts, true).await.map(|(code, _)| code) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("inventory: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The lock nodes and the stock database: started here, or external (`--external`).
fn fleets(opts: &Options) -> Result<(Fleet, Fleet), Box<dyn std::error::Error>> {
    if !opts.external {
        println!("starting 5 lock nodes and 1 inventory database (redis-server on loopback)...");
        return Ok((Fleet::start(5)?, Fleet::start(1)?));
    }
    let nodes = match Fleet::from_env()? {
        Some(nodes) => nodes,
        None => Fleet::external(COMPOSE_NODES.split(','))?,
    };
    let db = std::env::var("QUORUM_LOCK_STOCK_DB").unwrap_or_else(|_| COMPOSE_STOCK_DB.into());
    println!(
        "external fleet: {} lock nodes from {}, stock database {}",
        nodes.len(),
        if std::env::var_os("QUORUM_LOCK_NODES").is_some() {
            "QUORUM_LOCK_NODES"
        } else {
            "the compose defaults"
        },
        if std::env::var_os("QUORUM_LOCK_STOCK_DB").is_some() {
            "from QUORUM_LOCK_STOCK_DB"
        } else {
            COMPOSE_STOCK_DB
        },
    );
    Ok((nodes, Fleet::external([db])?))
}

/// What happens halfway: the `--halfway` command, or (on a fleet started here) a node killed.
fn halfway(opts: &Options, nodes: &Fleet) -> Result<String, Box<dyn std::error::Error>> {
    if let Some(cmd) = &opts.halfway {
        let status = std::process::Command::new("sh")
            .args(["-c", cmd])
            .status()?;
        return Ok(format!("ran {cmd:?} ({status})"));
    }
    if nodes.is_external() {
        return Ok("no --halfway command given: no node was faulted".into());
    }
    if opts.freeze {
        nodes.pause(NODE_TO_KILL)?;
        return Ok(format!("froze node {NODE_TO_KILL} (SIGSTOP)"));
    }
    nodes.kill(NODE_TO_KILL)?;
    Ok(format!("killed node {NODE_TO_KILL}"))
}

/// One sale: the buyers, and halfway the fault (when `fault`). Returns the exit code and how
/// long the buyers took.
async fn run(
    opts: &Options,
    fault: bool,
) -> Result<(ExitCode, Duration), Box<dyn std::error::Error>> {
    let (nodes, database) = fleets(opts)?;
    let mut db = database
        .client(0)
        .get_multiplexed_async_connection()
        .await?;
    let _: () = db.set(STOCK_KEY, opts.stock).await?;

    // Each client stands for one service instance, with its own connections.
    let mut clients = Vec::with_capacity(opts.clients);
    for _ in 0..opts.clients {
        clients.push(
            QuorumLock::builder()
                .nodes(nodes.urls())
                .quorum(opts.quorum)
                .node_timeout(Duration::from_millis(100))
                .wait_timeout(Duration::from_secs(5))
                .build()
                .await?,
        );
    }
    let locks = clients[0].clone();
    let what = match (&opts.halfway, nodes.is_external(), fault) {
        (_, _, false) => "nothing will be faulted".to_string(),
        (Some(cmd), _, true) => format!("{cmd:?} will run"),
        (None, true, true) => "nothing will be faulted".to_string(),
        (None, false, true) if opts.freeze => format!("node {NODE_TO_KILL} will be frozen"),
        (None, false, true) => format!("node {NODE_TO_KILL} will be killed"),
    };
    println!(
        "{} buyers over {} client(s), {} MoonCakes, quorum {:?} ({} of {} nodes), {what} after {} sales{}",
        opts.buyers,
        opts.clients,
        opts.stock,
        opts.quorum,
        locks.quorum_size(),
        nodes.len(),
        opts.stock / 2,
        match (opts.lock, opts.fair) {
            (false, _) => ", NO LOCK",
            (true, true) => ", fair lock",
            (true, false) => "",
        }
    );

    let tally = Arc::new(Tally {
        half: u64::try_from(opts.stock / 2).unwrap_or(0).max(1),
        ..Tally::default()
    });
    let started = Instant::now();
    let mut buyers = tokio::task::JoinSet::new();
    for b in 0..opts.buyers {
        let locks = clients[b as usize % clients.len()].clone();
        let (tally, mut db) = (tally.clone(), db.clone());
        let lock = opts.lock.then_some(opts.fair);
        buyers.spawn(async move { buy(&locks, &mut db, lock, &tally).await });
    }
    let mut killed = !fault;
    loop {
        tokio::select! {
            _ = tally.halfway.notified(), if !killed => {
                killed = true;
                let at = started.elapsed();
                let what = halfway(opts, &nodes)?;
                println!("{what}, from {at:?}");
            }
            done = buyers.join_next() => match done {
                Some(result) => result?,
                None => break,
            },
        }
    }
    let elapsed = started.elapsed();
    if opts.freeze && killed && fault && !nodes.is_external() {
        nodes.resume(NODE_TO_KILL)?;
    }

    let final_stock: i64 = db.get(STOCK_KEY).await?;
    let sold = tally.sold.load(Ordering::SeqCst);
    let sold_i64 = i64::try_from(sold)?;
    let oversold = (sold_i64 - opts.stock).max(0) + (-final_stock).max(0);
    let lost_updates = (opts.stock - sold_i64 - final_stock).abs();
    // Summed over the clients.
    let sum =
        |f: fn(&quorum_lock::Stats) -> u64| clients.iter().map(|c| f(&c.stats())).sum::<u64>();
    println!();
    println!("sold                {sold}");
    println!(
        "refused (sold out)  {}",
        tally.sold_out.load(Ordering::SeqCst)
    );
    println!(
        "refused (no lock)   {}",
        tally.lock_refused.load(Ordering::SeqCst)
    );
    println!(
        "release unconfirmed {}",
        tally.release_unconfirmed.load(Ordering::SeqCst)
    );
    println!("final stock         {final_stock}");
    println!("oversold            {oversold}");
    println!("lost updates        {lost_updates}");
    println!("elapsed             {elapsed:?}");
    println!(
        "lock stats          attempts {}, acquired {}, contended {}, failed {}, released {}, release unconfirmed {}",
        sum(|s| s.attempts),
        sum(|s| s.acquired),
        sum(|s| s.contended),
        sum(|s| s.failed),
        sum(|s| s.released),
        sum(|s| s.release_failed)
    );
    // An attempt asks the nodes (a waiter refused by the key's arbiter asked only it); a fair
    // waiter handed the lock by the nodes' grants made none for it.
    println!(
        "attempts per lock   {:.1} ({} lock; {} of {} locks held from grant notices)",
        sum(|s| s.attempts) as f64 / sum(|s| s.acquired).max(1) as f64,
        if opts.fair { "fair" } else { "mutex" },
        sum(|s| s.noticed),
        sum(|s| s.acquired),
    );
    if oversold > 0 || lost_updates > 0 {
        println!("\nFAILED: the stock was oversold or updates were lost");
        return Ok((ExitCode::FAILURE, elapsed));
    }
    Ok((ExitCode::SUCCESS, elapsed))
}

/// One buyer: lock (`lock`: `Some(fair)`), read the stock, think, write it back decremented,
/// unlock.
async fn buy(
    locks: &QuorumLock,
    db: &mut redis::aio::MultiplexedConnection,
    lock: Option<bool>,
    tally: &Tally,
) {
    let guard = if let Some(fair) = lock {
        let ttl = Duration::from_secs(5);
        let acquired = match fair {
            true => locks.fair_lock(LOCK_KEY).ttl(ttl).acquire().await,
            false => locks.acquire(LOCK_KEY, ttl).await,
        };
        match acquired {
            Ok(g) => Some(g),
            Err(e) => {
                tally.lock_refused.fetch_add(1, Ordering::SeqCst);
                if matches!(e, Error::NoQuorum { .. })
                    && tally.lock_refused.load(Ordering::SeqCst) == 1
                {
                    println!("lock refused: {e}");
                }
                return;
            }
        }
    } else {
        None
    };
    let result: redis::RedisResult<()> = async {
        let stock: i64 = db.get(STOCK_KEY).await?;
        tokio::time::sleep(Duration::from_millis(2)).await; // the buyer thinks
        if stock > 0 {
            // Check the lock is still trustworthy before the side effect.
            if guard.as_ref().is_none_or(|g| g.is_held()) {
                let _: () = db.set(STOCK_KEY, stock - 1).await?;
                if tally.sold.fetch_add(1, Ordering::SeqCst) + 1 == tally.half {
                    tally.halfway.notify_one();
                }
            } else {
                tally.lock_refused.fetch_add(1, Ordering::SeqCst);
            }
        } else {
            tally.sold_out.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        eprintln!("database error: {e}");
    }
    if let Some(g) = guard {
        if g.release().await.is_err() {
            tally.release_unconfirmed.fetch_add(1, Ordering::SeqCst);
        }
    }
}
