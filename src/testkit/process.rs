//! One `redis-server` child process: start on a free port (plain or TLS), readiness from its
//! log, signals, reaping.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use super::{Persistence, START_TIMEOUT};

/// How one node is started.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) binary: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) password: Option<String>,
    pub(crate) persistence: Persistence,
    pub(crate) args: Vec<String>,
    /// A cluster member: `cluster-enabled yes`, with this `cluster-node-timeout` (ms).
    pub(crate) cluster_node_timeout: Option<u64>,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<TlsFiles>,
}

/// A TLS node's files, and whether it asks clients for a certificate.
#[cfg(feature = "tls")]
#[derive(Debug, Clone)]
pub(crate) struct TlsFiles {
    pub(crate) ca: PathBuf,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) auth_clients: bool,
}

/// Finds the server binary, or explains how to install it.
pub(crate) fn find_server() -> io::Result<PathBuf> {
    if let Some(path) = server_from_env() {
        return Ok(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("redis-server"))
            .find(|p| p.is_file())
    });
    found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, install_hint()))
}

pub(crate) fn install_hint() -> String {
    "redis-server was not found on PATH (and QUORUM_LOCK_REDIS_SERVER is not set). Install it, \
     e.g. `apt-get install -y redis-server` on Debian/Ubuntu or `brew install redis` on macOS, \
     or point QUORUM_LOCK_REDIS_SERVER at the binary"
        .to_string()
}

pub(crate) fn server_from_env() -> Option<PathBuf> {
    std::env::var_os("QUORUM_LOCK_REDIS_SERVER").map(PathBuf::from)
}

type SpawnReply = mpsc::Sender<io::Result<Child>>;
type SpawnRequest = (PathBuf, Vec<OsString>, SpawnReply);

/// Servers are spawned from one thread that lives as long as the process, with
/// `PR_SET_PDEATHSIG`: the kernel kills them when that thread (i.e. the process) dies, even by
/// SIGKILL or abort, where no destructor runs. Spawning from a test's own thread would kill a
/// shared fleet when that test ends.
fn spawn(binary: PathBuf, args: Vec<OsString>) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("quorum-lock-testkit-spawner".into())
            .spawn(move || {
                for (binary, args, reply) in rx {
                    let _ = reply.send(spawn_here(binary, args));
                }
            })
            .expect("spawning the test kit's spawner thread");
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    sender
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((binary, args, reply))
        .map_err(|_| io::Error::other("test kit spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("test kit spawner thread is gone"))?
}

fn spawn_here(binary: PathBuf, args: Vec<OsString>) -> io::Result<Child> {
    // SAFETY: getpid is async-signal-safe and called before the fork.
    let parent = unsafe { libc::getpid() };
    let mut cmd = Command::new(&binary);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::new(io::ErrorKind::NotFound, install_hint())
        } else {
            e
        }
    })
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

#[derive(Debug, Default)]
struct State {
    child: Option<Child>,
}

/// One `redis-server` process of a [`Fleet`](super::Fleet).
#[derive(Debug)]
pub struct RedisProcess {
    port: u16,
    /// A cluster member's bus port (kept across restarts).
    bus: Option<u16>,
    settings: Settings,
    state: Mutex<State>,
    log: Arc<Mutex<String>>,
}

enum Started {
    Ready,
    Exited,
}

impl RedisProcess {
    pub(crate) fn start(settings: Settings) -> io::Result<RedisProcess> {
        let log = Arc::new(Mutex::new(String::new()));
        let mut last = None;
        // A port picked free may be taken before the server binds it: try a few.
        for _ in 0..5 {
            let port = free_port()?;
            let bus = match settings.cluster_node_timeout {
                Some(_) => Some(free_port()?),
                None => None,
            };
            match launch(&settings, port, bus, &log)? {
                Ok(child) => {
                    return Ok(RedisProcess {
                        port,
                        bus,
                        settings,
                        state: Mutex::new(State { child: Some(child) }),
                        log,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free port")))
    }

    /// The TCP port on 127.0.0.1 (the TLS port of a TLS fleet's node, which has no other).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A cluster member's bus port (`cluster-port`).
    pub(crate) fn bus_port(&self) -> Option<u16> {
        self.bus
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.state().child.as_ref().map(Child::id)
    }

    /// The log so far.
    pub fn logs(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn running_pid(&self) -> io::Result<libc::pid_t> {
        let pid = self.pid().ok_or_else(|| {
            io::Error::other(format!("node on port {} is not running", self.port))
        })?;
        libc::pid_t::try_from(pid).map_err(io::Error::other)
    }

    pub(crate) fn kill(&self) -> io::Result<()> {
        let mut state = self.state();
        if let Some(mut child) = state.child.take() {
            // Child::kill sends SIGKILL, which also ends a stopped process; wait reaps it.
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    pub(crate) fn pause(&self) -> io::Result<()> {
        let pid = self.running_pid()?;
        signal(pid, libc::SIGSTOP)?;
        // Wait for the stop to take effect (WUNTRACED reports it without reaping).
        let mut status = 0;
        // SAFETY: plain syscall on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
        if r == pid && libc::WIFSTOPPED(status) {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "node on port {} did not stop",
                self.port
            )))
        }
    }

    pub(crate) fn resume(&self) -> io::Result<()> {
        signal(self.running_pid()?, libc::SIGCONT)
    }

    pub(crate) fn restart(&self) -> io::Result<()> {
        self.kill()?;
        let child = launch(&self.settings, self.port, self.bus, &self.log)??;
        self.state().child = Some(child);
        Ok(())
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

fn signal(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall; the pid is our own child's, which we have not reaped.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Starts the server on `port` and waits for "Ready to accept connections" in its log (logged
/// once every listener, TLS included, is bound: no TLS client is needed to see it). The
/// outer error is a spawn failure; the inner one a server that exited (`AddrInUse` when the
/// port was taken).
fn launch(
    settings: &Settings,
    port: u16,
    bus: Option<u16>,
    log: &Arc<Mutex<String>>,
) -> io::Result<io::Result<Child>> {
    let mut args: Vec<OsString> = Vec::new();
    let mut set = |k: &str, v: &str| {
        args.push(format!("--{k}").into());
        args.push(v.into());
    };
    // A TLS node listens with TLS only, on the free port picked; its plain port is closed.
    #[cfg(feature = "tls")]
    let plain_port = match &settings.tls {
        Some(tls) => {
            set("tls-port", &port.to_string());
            set("tls-ca-cert-file", &tls.ca.to_string_lossy());
            set("tls-cert-file", &tls.cert.to_string_lossy());
            set("tls-key-file", &tls.key.to_string_lossy());
            set(
                "tls-auth-clients",
                if tls.auth_clients { "yes" } else { "no" },
            );
            0
        }
        None => port,
    };
    #[cfg(not(feature = "tls"))]
    let plain_port = port;
    set("port", &plain_port.to_string());
    set("bind", "127.0.0.1");
    set("dir", &settings.dir.to_string_lossy());
    set("logfile", "");
    set("daemonize", "no");
    set("protected-mode", "no");
    set("save", "");
    set("enable-debug-command", "yes");
    match settings.persistence {
        Persistence::None => set("appendonly", "no"),
        Persistence::AofAlways => {
            set("appendonly", "yes");
            set("appendfsync", "always");
        }
    }
    if let Some(p) = &settings.password {
        set("requirepass", p);
        if settings.cluster_node_timeout.is_some() {
            set("masterauth", p);
        }
    }
    if let (Some(timeout), Some(bus)) = (settings.cluster_node_timeout, bus) {
        set("cluster-enabled", "yes");
        set("cluster-config-file", "nodes.conf");
        set("cluster-port", &bus.to_string());
        set("cluster-node-timeout", &timeout.to_string());
        // A replica takes over however long its primary was away.
        set("cluster-replica-validity-factor", "0");
        set("cluster-require-full-coverage", "no");
    }
    args.extend(settings.args.iter().map(OsString::from));
    let mut child = spawn(settings.binary.clone(), args)?;
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        follow(out, log.clone(), Some(tx));
    }
    if let Some(err) = child.stderr.take() {
        follow(err, log.clone(), None);
    }
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(Started::Ready) => Ok(Ok(child)),
        outcome => {
            let _ = child.kill();
            let _ = child.wait();
            let text = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let kind = if text.contains("Address already in use") {
                io::ErrorKind::AddrInUse
            } else {
                io::ErrorKind::Other
            };
            let why = match outcome {
                Ok(Started::Exited) => "exited",
                _ => "did not become ready in time",
            };
            Ok(Err(io::Error::new(
                kind,
                format!("redis-server on port {port} {why}; its log:\n{text}"),
            )))
        }
    }
}

/// Copies a pipe into the log, signalling readiness (or exit, at end of file).
fn follow(
    pipe: impl Read + Send + 'static,
    log: Arc<Mutex<String>>,
    ready: Option<mpsc::Sender<Started>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if line.contains("Ready to accept connections") {
                if let Some(tx) = &ready {
                    let _ = tx.send(Started::Ready);
                }
            }
            let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
            log.push_str(&line);
            log.push('\n');
        }
        if let Some(tx) = ready {
            let _ = tx.send(Started::Exited);
        }
    });
}
