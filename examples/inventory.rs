//! The seed scenario: 100 concurrent buyers of 90 MoonCakes, guarded by a lock across five
//! local Redis masters, one of which is killed halfway through.
//!
//! ```text
//! cargo run --example inventory                  # RedLock (majority): sells exactly 90
//! cargo run --example inventory -- --quorum all  # MultiLock: refuses while a node is down
//! cargo run --example inventory -- --no-lock     # the same buyers without a lock: oversells
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
            "-h" | "--help" => {
                return Err(
                    "usage: inventory [--quorum majority|all] [--buyers N] [--stock N] \
                     [--no-lock] [--external] [--halfway SHELL-COMMAND]"
                        .into(),
                )
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
    match run(opts).await {
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
    nodes.kill(NODE_TO_KILL)?;
    Ok(format!("killed node {NODE_TO_KILL}"))
}

async fn run(opts: Options) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (nodes, database) = fleets(&opts)?;
    let mut db = database
        .client(0)
        .get_multiplexed_async_connection()
        .await?;
    let _: () = db.set(STOCK_KEY, opts.stock).await?;

    let locks = QuorumLock::builder()
        .nodes(nodes.urls())
        .quorum(opts.quorum)
        .node_timeout(Duration::from_millis(100))
        .wait_timeout(Duration::from_secs(5))
        .build()
        .await?;
    let fault = match (&opts.halfway, nodes.is_external()) {
        (Some(cmd), _) => format!("{cmd:?} will run"),
        (None, true) => "nothing will be faulted".to_string(),
        (None, false) => format!("node {NODE_TO_KILL} will be killed"),
    };
    println!(
        "{} buyers, {} MoonCakes, quorum {:?} ({} of {} nodes), {fault} after {} sales{}",
        opts.buyers,
        opts.stock,
        opts.quorum,
        locks.quorum_size(),
        nodes.len(),
        opts.stock / 2,
        if opts.lock { "" } else { ", NO LOCK" }
    );

    let tally = Arc::new(Tally {
        half: u64::try_from(opts.stock / 2).unwrap_or(0).max(1),
        ..Tally::default()
    });
    let started = Instant::now();
    let mut buyers = tokio::task::JoinSet::new();
    for _ in 0..opts.buyers {
        let (locks, tally, mut db) = (locks.clone(), tally.clone(), db.clone());
        let use_lock = opts.lock;
        buyers.spawn(async move { buy(&locks, &mut db, use_lock, &tally).await });
    }
    let mut killed = false;
    loop {
        tokio::select! {
            _ = tally.halfway.notified(), if !killed => {
                killed = true;
                let at = started.elapsed();
                let what = halfway(&opts, &nodes)?;
                println!("{what}, from {at:?}");
            }
            done = buyers.join_next() => match done {
                Some(result) => result?,
                None => break,
            },
        }
    }
    let elapsed = started.elapsed();

    let final_stock: i64 = db.get(STOCK_KEY).await?;
    let sold = tally.sold.load(Ordering::SeqCst);
    let sold_i64 = i64::try_from(sold)?;
    let oversold = (sold_i64 - opts.stock).max(0) + (-final_stock).max(0);
    let lost_updates = (opts.stock - sold_i64 - final_stock).abs();
    let stats = locks.stats();
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
        stats.attempts, stats.acquired, stats.contended, stats.failed, stats.released, stats.release_failed
    );
    if oversold > 0 || lost_updates > 0 {
        println!("\nFAILED: the stock was oversold or updates were lost");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One buyer: lock, read the stock, think, write it back decremented, unlock.
async fn buy(
    locks: &QuorumLock,
    db: &mut redis::aio::MultiplexedConnection,
    use_lock: bool,
    tally: &Tally,
) {
    let guard = if use_lock {
        match locks.acquire(LOCK_KEY, Duration::from_secs(5)).await {
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
