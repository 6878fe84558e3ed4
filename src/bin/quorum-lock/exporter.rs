//! `--metrics-addr`: the library's metrics (see the README's "Metrics") served in the
//! Prometheus text format over plain HTTP, for operators who watch long holds. Any request on
//! the address gets the current metrics; nothing else is served.

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::exit::Failure;

/// How often the exporter's histograms are compacted.
const UPKEEP: Duration = Duration::from_secs(5);

/// Binds `addr`, installs the Prometheus recorder and serves it in the background for as long
/// as the process lives. Prints the bound address on stderr (useful with port 0).
///
/// # Errors
/// Exit 71 when the address cannot be bound or a recorder is already installed.
pub async fn serve(addr: SocketAddr) -> Result<(), Failure> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::os(format!("--metrics-addr {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::os(format!("--metrics-addr {addr}: {e}")))?;
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| Failure::os(format!("installing the metrics recorder: {e}")))?;
    quorum_lock::describe_metrics();
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
