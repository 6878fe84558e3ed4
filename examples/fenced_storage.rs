//! Fencing tokens end to end: a client whose lock expires while it stalls cannot overwrite
//! the work of the next holder, because the store checks the tokens.
//!
//! `cargo run --example fenced_storage` (starts five lock nodes and a store on loopback).
//! Exits non-zero if the stale write got through.

use std::process::ExitCode;
use std::time::Duration;

use quorum_lock::testkit::{FencedStore, Fleet};
use quorum_lock::QuorumLock;

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let nodes = Fleet::start(5)?;
    let database = Fleet::start(1)?;
    let store = FencedStore::connect(&database.client(0)).await?;
    let client = || QuorumLock::builder().nodes(nodes.urls()).build();
    let (a, b) = (client().await?, client().await?);

    let lock_a = a
        .lock("invoice:42")
        .ttl(Duration::from_millis(500))
        .fencing(true)
        .acquire()
        .await?;
    let token_a = lock_a.fencing_token().expect("fencing on");
    println!("A holds the lock with token {token_a}, then stalls for 700 ms (its lease is 500 ms)");
    tokio::time::sleep(Duration::from_millis(700)).await;

    let lock_b = b
        .lock("invoice:42")
        .ttl(Duration::from_secs(5))
        .fencing(true)
        .acquire()
        .await?;
    let token_b = lock_b.fencing_token().expect("fencing on");
    let wrote_b = store.write("invoice:42", "paid by B", token_b).await?;
    println!("B holds the lock with token {token_b}; its write accepted: {wrote_b}");

    println!(
        "A wakes up; is_held() = {} (it should check, but suppose it does not)",
        lock_a.is_held()
    );
    let wrote_a = store.write("invoice:42", "paid by A", token_a).await?;
    println!("A's write with token {token_a} accepted: {wrote_a}");
    println!("stored: {:?}", store.read("invoice:42").await?);
    lock_b.release().await?;
    Ok(if wrote_a {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
