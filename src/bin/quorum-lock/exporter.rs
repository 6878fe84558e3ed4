//! The library's metrics (see the README's "Metrics") for operators: served in the
//! Prometheus text format over plain HTTP while a lock is held (`hold --metrics-addr`), or
//! written at the end of a run to a node-exporter textfile (`--metrics-textfile`, for cron
//! jobs). Durations are histograms, with buckets suited to each (a node's answer, a wait for
//! the lock, a hold), so that they can be aggregated across hosts, which summaries cannot.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::exit::Failure;

/// How often the exporter's histograms are compacted.
const UPKEEP: Duration = Duration::from_secs(5);

/// A node's answer: half a millisecond to a second (the node timeout is far below).
const NODE_BUCKETS: [f64; 11] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];
/// An acquire, with its wait: a millisecond to five minutes.
const ACQUIRE_BUCKETS: [f64; 15] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// A hold: ten milliseconds to a day.
const HOLD_BUCKETS: [f64; 12] = [
    0.01, 0.1, 1.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 14_400.0, 86_400.0,
];

/// Installs the Prometheus recorder, with histograms for the durations.
///
/// # Errors
/// Exit 71 when a recorder is already installed.
pub fn install() -> Result<PrometheusHandle, Failure> {
    let buckets = |builder: PrometheusBuilder, name: &str, buckets: &[f64]| {
        builder
            .set_buckets_for_metric(Matcher::Full(name.to_string()), buckets)
            .map_err(|e| Failure::os(format!("metrics buckets: {e}")))
    };
    let builder = PrometheusBuilder::new();
    let builder = buckets(
        builder,
        "quorum_lock_node_request_duration_seconds",
        &NODE_BUCKETS,
    )?;
    let builder = buckets(
        builder,
        "quorum_lock_acquire_duration_seconds",
        &ACQUIRE_BUCKETS,
    )?;
    let builder = buckets(builder, "quorum_lock_hold_duration_seconds", &HOLD_BUCKETS)?;
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| Failure::os(format!("installing the metrics recorder: {e}")))?;
    quorum_lock::describe_metrics();
    metrics::describe_gauge!(
        "quorum_lock_cli_exit_code",
        "the exit code of the command-line tool's last run (with --metrics-textfile)"
    );
    metrics::describe_gauge!(
        "quorum_lock_cli_end_time_seconds",
        "when the command-line tool's last run ended, Unix time (with --metrics-textfile)"
    );
    Ok(handle)
}

/// Binds `addr` and serves `handle` in the background for as long as the process lives.
/// Prints the bound address on stderr (useful with port 0).
///
/// # Errors
/// Exit 71 when the address cannot be bound.
pub async fn serve(addr: SocketAddr, handle: PrometheusHandle) -> Result<(), Failure> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::os(format!("--metrics-addr {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::os(format!("--metrics-addr {addr}: {e}")))?;
    eprintln!("quorum-lock: metrics on http://{bound}/metrics");
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP).await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, handle.clone()));
                }
                // Out of file descriptors, say: accepting again at once would spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    Ok(())
}

/// Writes the metrics for `--metrics-textfile` when a command ends, however it ends (a run
/// that failed before taking the lock too: a cron job's failures are what its operator most
/// needs to see). A file that cannot be written is said on stderr and changes nothing else:
/// the exit code stays the command's (a job that exited 3 still reports 3).
///
/// With the library's metrics go the command's own: `quorum_lock_cli_exit_code` (its exit
/// code) and `quorum_lock_cli_end_time_seconds` (when it ended, Unix time), labelled
/// `command`, so that an alert can say "the job failed, and when" even where no lock
/// operation ran (nodes unreachable at start).
pub fn write_at_end(
    path: Option<&Path>,
    handle: Option<&PrometheusHandle>,
    command: &'static str,
    result: &Result<u8, Failure>,
) {
    if let (Some(path), Some(handle)) = (path, handle) {
        let code = match result {
            Ok(code) => *code,
            Err(failure) => failure.code,
        };
        metrics::gauge!("quorum_lock_cli_exit_code", "command" => command).set(f64::from(code));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        metrics::gauge!("quorum_lock_cli_end_time_seconds", "command" => command).set(now);
        if let Err(failure) = write_textfile(path, handle) {
            eprintln!("quorum-lock: warning: {}", failure.message);
        }
    }
}

/// Writes the metrics to `path` for node-exporter's textfile collector: to a temporary file
/// beside it, then renamed over it, so that the collector never reads half a file.
///
/// # Errors
/// Exit 71 when the file cannot be written.
fn write_textfile(path: &Path, handle: &PrometheusHandle) -> Result<(), Failure> {
    let fail =
        |e: std::io::Error| Failure::os(format!("--metrics-textfile {}: {e}", path.display()));
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, handle.render()).map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })
}

/// Reads the request head (bounded in size and time) and answers with the metrics.
async fn answer(mut stream: TcpStream, handle: PrometheusHandle) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    if !matches!(read, Ok(true)) {
        return;
    }
    let body = handle.render();
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
