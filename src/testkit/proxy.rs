//! A TCP fault proxy in front of one node: added latency, black hole (partition), connection
//! reset, heal. It runs on the test kit's own runtime thread, so it works the same whatever
//! runtime (or none) the test uses.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The fault a proxy applies to the traffic through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fault {
    /// Traffic passes untouched.
    #[default]
    None,
    /// Every chunk from the node to the client is held back this long: each round trip takes
    /// this much longer.
    Latency(Duration),
    /// A partition: connections are accepted, but nothing is forwarded in either direction
    /// until healed. Data is held, not dropped (as TCP retransmission would deliver it once
    /// the network heals), so requests sent meanwhile reach the node after the heal.
    BlackHole,
}

fn runtime() -> &'static tokio::runtime::Handle {
    static RUNTIME: OnceLock<tokio::runtime::Handle> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("building the test kit's proxy runtime");
        let handle = rt.handle().clone();
        std::thread::Builder::new()
            .name("quorum-lock-testkit-proxy".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .expect("spawning the proxy thread");
        handle
    })
}

struct State {
    fault: watch::Sender<Fault>,
    /// Cancelled to reset every open connection; replaced by a fresh token afterwards.
    resets: std::sync::Mutex<CancellationToken>,
    upstream: SocketAddr,
}

/// A fault proxy in front of one node.
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    state: Arc<State>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("fault", &*self.fault.borrow())
            .field("upstream", &self.upstream)
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port, forwarding to `upstream_port` on 127.0.0.1.
    ///
    /// # Errors
    /// No port could be bound.
    pub fn start(upstream_port: u16) -> io::Result<FaultProxy> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            fault: watch::Sender::new(Fault::None),
            resets: std::sync::Mutex::new(CancellationToken::new()),
            upstream: SocketAddr::from(([127, 0, 0, 1], upstream_port)),
        });
        let shutdown = CancellationToken::new();
        let rt = runtime();
        let listener = {
            let _enter = rt.enter();
            TcpListener::from_std(listener)?
        };
        rt.spawn(accept_loop(listener, state.clone(), shutdown.clone()));
        Ok(FaultProxy {
            port,
            state,
            shutdown,
        })
    }

    /// The proxy's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        *self.state.fault.borrow()
    }

    /// Applies `fault` from now on (also to data already in flight).
    pub fn set(&self, fault: Fault) {
        self.state.fault.send_replace(fault);
    }

    /// Adds `latency` to every round trip.
    pub fn latency(&self, latency: Duration) {
        self.set(Fault::Latency(latency));
    }

    /// Partitions the node: nothing passes until [`heal`](Self::heal).
    pub fn black_hole(&self) {
        self.set(Fault::BlackHole);
    }

    /// Removes the fault; held data flows on.
    pub fn heal(&self) {
        self.set(Fault::None);
    }

    /// Resets every open connection (RST to both sides); new connections are accepted as
    /// usual.
    pub fn reset(&self) {
        let old = {
            let mut resets = self.state.resets.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *resets, CancellationToken::new())
        };
        old.cancel();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.reset();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((client, _)) = accepted else { continue };
        let reset = state
            .resets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        tokio::spawn(connection(client, state.clone(), reset));
    }
}

/// Waits until the fault lets data through; `stamp` is when the data arrived, and `delayed`
/// whether this direction takes the latency.
async fn until_forwardable(fault: &mut watch::Receiver<Fault>, stamp: Instant, delayed: bool) {
    loop {
        let current = *fault.borrow_and_update();
        match current {
            Fault::BlackHole => {
                if fault.changed().await.is_err() {
                    return;
                }
            }
            Fault::Latency(d) if delayed && Instant::now() < stamp + d => {
                tokio::select! {
                    () = tokio::time::sleep_until(stamp + d) => {}
                    r = fault.changed() => if r.is_err() { return },
                }
            }
            _ => return,
        }
    }
}

async fn connection(client: TcpStream, state: Arc<State>, reset: CancellationToken) {
    let mut fault = state.fault.subscribe();
    // A new connection during a partition waits for the heal before it reaches the node.
    tokio::select! {
        () = reset.cancelled() => return,
        () = until_forwardable(&mut fault, Instant::now(), false) => {}
    }
    let Ok(server) = TcpStream::connect(state.upstream).await else {
        return;
    };
    // Linger 0: closing sends RST, as a reset should.
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, state.fault.subscribe(), false);
    let down = pump(server_read, client_write, state.fault.subscribe(), true);
    tokio::select! {
        () = reset.cancelled() => {}
        _ = futures::future::join(up, down) => {}
    }
}

/// Forwards one direction: a reader stamps each chunk on arrival, a writer forwards it once
/// the fault allows, in order.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
    delayed: bool,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((stamp, chunk)) = rx.recv().await {
            until_forwardable(&mut fault, stamp, delayed).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    futures::future::join(reader, writer).await;
}
