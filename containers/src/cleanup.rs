//! Should the test process die without dropping its fleet (killed, aborted, or a fleet kept
//! in a static, which is never dropped), the reaper process removes what the fleet created
//! ([`Reaper`]); a fleet that is dropped removes its containers and networks itself (see
//! `Inner`'s `Drop`) and stands its reaper down. testcontainers has no such reaper of its
//! own: its containers are removed when dropped, and a process killed outright drops nothing.

use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

use super::engine::LABEL;

/// A `sh` process that removes a fleet's containers and networks when the fleet's process
/// dies without dropping the fleet (killed, aborted, or a fleet kept in a static): it reads
/// the ids from a pipe whose other end only this process holds, and removes them when the
/// pipe closes without the word `done`. A container or network the engine was still making
/// when the process died has an id that never reached the pipe: after the known ids, the
/// reaper waits for such requests to finish and removes the containers and networks that
/// carry the fleet's own label (a fresh id, so nothing of anyone else's). It runs in a session of its own, so that a Ctrl-C meant for
/// the tests does not stop it too.
#[derive(Debug)]
pub(crate) struct Reaper {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// `$1` is the fleet's label, `quorum-lock.testkit=<fleet id>`.
const REAPER_SCRIPT: &str = r#"
containers=""
networks=""
while read -r kind id; do
  case "$kind" in
    container) containers="$containers $id" ;;
    network) networks="$networks $id" ;;
    done) exit 0 ;;
  esac
done
if [ -n "$containers" ]; then docker rm --force --volumes $containers; fi
sleep 5
late=$(docker ps --all --quiet --filter "label=$1")
if [ -n "$late" ]; then docker rm --force --volumes $late; fi
late=$(docker network ls --quiet --filter "label=$1")
if [ -n "$networks$late" ]; then docker network rm $networks $late; fi
"#;

impl Reaper {
    /// Starts the reaper of the fleet whose label value is `fleet`.
    pub(crate) fn spawn(fleet: &str) -> io::Result<Reaper> {
        let mut cmd = Command::new("sh");
        let label = format!("{LABEL}={fleet}");
        cmd.args(["-c", REAPER_SCRIPT, "quorum-lock-reaper", &label])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        Ok(Reaper { child, stdin })
    }

    /// Adds a container or network id to remove should this process die.
    pub(crate) fn watch(&mut self, kind: &str, id: &str) -> io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::other("the reaper was stopped"))?;
        writeln!(stdin, "{kind} {id}")?;
        stdin.flush()
    }

    /// Stops the reaper without removing anything (the fleet removed its resources itself).
    pub(crate) fn stand_down(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "done");
        }
        let _ = self.child.wait();
    }
}

/// Hands an id to a fleet's reaper (shared by the fleet's start and its operations).
pub(crate) fn watch(reaper: &Mutex<Reaper>, kind: &str, id: &str) -> io::Result<()> {
    reaper
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .watch(kind, id)
}

/// The fleet removed itself: its reaper has nothing left to do.
pub(crate) fn stand_down(reaper: &Mutex<Reaper>) {
    reaper
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .stand_down();
}
