//! Scripts run by EVALSHA with a transparent EVAL fallback when a node answers NOSCRIPT.

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::Quorum;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_after_script_flush() {
    let fleet = own_fleet(3);
    let locks = client(&fleet, Quorum::All).await;
    let key = unique_key("flush");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
    for i in 0..3 {
        let mut c = conn(&fleet, i).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(
            command_calls(&fleet, i, "eval").await,
            0,
            "no EVAL before the flush"
        );
    }
    let guard = locks
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("acquire after flush");
    guard
        .extend(Duration::from_secs(10))
        .await
        .expect("extend after flush");
    guard.release().await.expect("release after flush");
    for i in 0..3 {
        assert!(entry(&fleet, i, &key).await.is_none());
        assert!(
            command_calls(&fleet, i, "eval").await >= 1,
            "node {i} never fell back to EVAL"
        );
    }
}
