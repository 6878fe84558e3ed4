//! The command `run` supervises: found as a shell would (127 not found, 126 not executable),
//! started in its own process group with a parent-death signal, signalled as a group, and
//! its exit status turned into an exit code (128 + N when signal N killed it). Also the
//! signals the CLI itself handles (INT, TERM, HUP).

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use tokio::process::Child;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::exit::{self, Failure};

/// The program and its arguments.
pub struct Command {
    program: OsString,
    args: Vec<String>,
}

impl Command {
    /// `CMD ARGS...`, or `$SHELL -c STRING` (`/bin/sh` when SHELL is unset or empty). The
    /// program is looked up before the lock is taken, so that a typo does not take the lock
    /// (the spawn reports the same errors, should the program vanish in between).
    ///
    /// # Errors
    /// Exit 127 when not found, 126 when not executable.
    pub fn resolve(cmd: &[String], shell_command: Option<&str>) -> Result<Command, Failure> {
        let (program, args) = match (shell_command, cmd.split_first()) {
            (Some(string), _) => {
                let shell = std::env::var_os("SHELL")
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| OsString::from("/bin/sh"));
                (shell, vec!["-c".to_string(), string.to_string()])
            }
            (None, Some((program, args))) => (OsString::from(program), args.to_vec()),
            (None, None) => return Err(Failure::usage("no command given")),
        };
        find(Path::new(&program))?;
        Ok(Command { program, args })
    }

    /// Starts the command in a new process group (its pid is the group id) with `env` added,
    /// and a parent-death signal: if this process dies, the kernel kills the command.
    ///
    /// Must be called from the thread that lives as long as the process (the main thread,
    /// where `block_on` polls the top-level future): the parent-death signal fires when the
    /// *thread* that forked exits, and a runtime worker thread may exit earlier.
    ///
    /// # Errors
    /// Exit 127 / 126 as a shell would, 71 for other failures.
    #[allow(unsafe_code)]
    pub fn spawn(&self, env: &[(&str, String)], clean: bool) -> Result<(Child, Group), Failure> {
        let mut command = tokio::process::Command::new(&self.program);
        if clean {
            for (name, _) in std::env::vars_os() {
                if name.to_str().is_some_and(|n| SETTINGS.contains(&n)) {
                    command.env_remove(name);
                }
            }
        }
        command
            .args(&self.args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .process_group(0)
            .kill_on_drop(false);
        // SAFETY: getpid is async-signal-safe and runs here, before the fork.
        let parent = unsafe { libc::getpid() };
        // SAFETY: between fork and exec the closure calls only async-signal-safe functions
        // (prctl, getppid) and allocates nothing.
        unsafe {
            command.pre_exec(move || {
                // KILL, not the kill signal: nobody is left to escalate, and the lock the
                // command relies on stops being renewed the moment this process dies. Linux
                // only; elsewhere the command outlives a killed CLI.
                #[cfg(target_os = "linux")]
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before the prctl: then no signal will come.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(|e| spawn_failure(&self.program, &e))?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| Failure::os("the command exited before it could be watched"))?;
        Ok((child, Group(pid)))
    }
}

/// Looks `program` up like a shell: a name with a slash is a path, else each `PATH` entry.
fn find(program: &Path) -> Result<PathBuf, Failure> {
    let shown = program.display();
    let not_found = || Failure::new(exit::NOT_FOUND, format!("{shown}: command not found"));
    let not_executable = |why: &str| Failure::new(exit::NOT_EXECUTABLE, format!("{shown}: {why}"));
    let executable =
        |p: &Path| std::fs::metadata(p).map(|m| (m.is_file(), m.permissions().mode() & 0o111 != 0));
    if program.as_os_str().is_empty() {
        return Err(not_found());
    }
    if program.to_string_lossy().contains('/') {
        return match executable(program) {
            Ok((true, true)) => Ok(program.to_path_buf()),
            Ok((false, _)) => Err(not_executable("is a directory")),
            Ok((true, false)) => Err(not_executable("permission denied")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Failure::new(
                exit::NOT_FOUND,
                format!("{shown}: no such file or directory"),
            )),
            Err(e) => Err(not_executable(&e.to_string())),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    let mut found_unexecutable = false;
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        match executable(&candidate) {
            Ok((true, true)) => return Ok(candidate),
            Ok((true, false)) => found_unexecutable = true,
            _ => {}
        }
    }
    if found_unexecutable {
        Err(not_executable("permission denied"))
    } else {
        Err(not_found())
    }
}

fn spawn_failure(program: &OsString, e: &io::Error) -> Failure {
    let shown = Path::new(program).display();
    match e.kind() {
        io::ErrorKind::NotFound => {
            Failure::new(exit::NOT_FOUND, format!("{shown}: command not found"))
        }
        io::ErrorKind::PermissionDenied => {
            Failure::new(exit::NOT_EXECUTABLE, format!("{shown}: permission denied"))
        }
        _ if e.raw_os_error() == Some(libc::ENOEXEC) => {
            Failure::new(exit::NOT_EXECUTABLE, format!("{shown}: exec format error"))
        }
        _ => Failure::os(format!("{shown}: could not start: {e}")),
    }
}

/// This tool's settings in the environment, kept from the command with `--clean-env`
/// (`QUORUM_LOCK_NODES` may hold passwords).
const SETTINGS: [&str; 9] = [
    "QUORUM_LOCK_NODES",
    "QUORUM_LOCK_QUORUM",
    "QUORUM_LOCK_NODE_TIMEOUT",
    "QUORUM_LOCK_CONNECT_TIMEOUT",
    "QUORUM_LOCK_CONFIG",
    "QUORUM_LOCK_TLS_CA",
    "QUORUM_LOCK_TLS_CERT",
    "QUORUM_LOCK_TLS_KEY",
    "QUORUM_LOCK_LOG",
];

/// Sends `signal` to this process's parent (`hold --warn-signal`: the script that started
/// it).
#[allow(unsafe_code)]
pub fn signal_parent(signal: i32) {
    // SAFETY: getppid and kill have no memory effects; pid 1 (the parent is gone) is never
    // signalled.
    unsafe {
        let parent = libc::getppid();
        if parent > 1 {
            libc::kill(parent, signal);
        }
    }
}

/// The command's process group.
#[derive(Debug, Clone, Copy)]
pub struct Group(i32);

impl Group {
    /// Sends `signal` to every process of the group (ESRCH, an empty group, is not an error).
    #[allow(unsafe_code)]
    pub fn signal(self, signal: i32) {
        // SAFETY: killpg has no memory effects; the group id is the child's pid, which stays
        // reserved while the child is unreaped, and is a group while any member lives.
        unsafe {
            libc::killpg(self.0, signal);
        }
    }

    /// Whether no process of the group is left (zombies count as left until reaped).
    #[allow(unsafe_code)]
    pub fn is_empty(self) -> bool {
        // SAFETY: signal 0 only checks for existence.
        let alive = unsafe { libc::killpg(self.0, 0) } == 0;
        !alive && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
}

/// A command's exit status as a shell reports it: its code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::SOFTWARE),
        (None, Some(signal)) => exit::signalled(signal),
        (None, None) => exit::SOFTWARE,
    }
}

/// INT, TERM and HUP, handled instead of ending the CLI: while waiting for the lock they end
/// the wait; while the command runs they are forwarded to its group.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    /// # Errors
    /// Exit 71 if a handler cannot be installed.
    pub fn install() -> Result<Signals, Failure> {
        let on = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::os(format!("installing a signal handler: {e}")))
        };
        Ok(Signals {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
        })
    }

    /// The next signal's number.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal not yet returned stays pending.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}
