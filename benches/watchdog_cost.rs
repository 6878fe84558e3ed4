//! What the watchdog costs per held lock: hold many locks under the watchdog on a local
//! five-node fleet for a while, and report renewals and this process's CPU time.
//!
//! `cargo bench --bench watchdog_cost -- [LOCKS] [SECONDS] [LEASE_MS]` (defaults 1000 10 3000).

use std::time::{Duration, Instant};

use quorum_lock::testkit::Fleet;
use quorum_lock::QuorumLock;

/// User + system CPU time of this process, from /proc/self/stat (clock ticks of 10 ms).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` adds `--bench`: only the bare numbers are ours.
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let locks_held: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let seconds: u64 = args.next().map_or(Ok(10), |a| a.parse())?;
    let lease_ms: u64 = args.next().map_or(Ok(3000), |a| a.parse())?;

    let fleet = Fleet::start(5)?;
    let locks = QuorumLock::builder()
        .nodes(fleet.urls())
        .watchdog_lease(Duration::from_millis(lease_ms))
        .build()
        .await?;
    let mut guards = Vec::with_capacity(locks_held);
    for i in 0..locks_held {
        guards.push(locks.lock(format!("cost:{i}")).acquire().await?);
    }
    let renewals_before = locks.stats().extended;
    let cpu_before = cpu_time();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let wall = started.elapsed();
    let cpu = cpu_time() - cpu_before;
    let renewals = locks.stats().extended - renewals_before;
    let held = guards.iter().filter(|g| g.is_held()).count();
    for g in guards {
        g.release().await?;
    }
    let per_renewal = cpu.as_secs_f64() * 1e6 / renewals.max(1) as f64;
    println!(
        "locks held under the watchdog  {locks_held} (lease {lease_ms} ms, renewed every {} ms)",
        lease_ms / 3
    );
    println!("still held at the end          {held}");
    println!("wall time                      {wall:?}");
    println!(
        "renewals (quorum-confirmed)    {renewals} ({:.0}/s)",
        renewals as f64 / wall.as_secs_f64()
    );
    println!(
        "client CPU time                {cpu:?} ({:.1}% of one core)",
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    );
    println!("client CPU per renewal         {per_renewal:.0} us (one 5-node fan-out each)");
    println!(
        "client CPU per held lock       {:.1} us/s",
        cpu.as_secs_f64() * 1e6 / wall.as_secs_f64() / locks_held as f64
    );
    Ok(())
}
