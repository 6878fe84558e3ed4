//! The removal of what a container fleet created: by id when the fleet is dropped
//! ([`Resources`]), or, should the process die first, by the reaper process ([`Reaper`]).

use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use super::docker::{self, docker, LABEL};

/// Everything a fleet created, removed by id when it is dropped; the reaper holds the same
/// ids in case the process dies first.
#[derive(Debug)]
pub(super) struct Resources {
    /// Containers, then networks, in creation order.
    created: Mutex<Vec<(&'static str, String)>>,
    reaper: Mutex<Reaper>,
    /// The fleet's label (`quorum-lock.testkit=<fleet id>`), on every container it runs.
    label: String,
}

impl Resources {
    pub(super) fn new(fleet: &str) -> io::Result<Resources> {
        Ok(Resources {
            created: Mutex::new(Vec::new()),
            reaper: Mutex::new(Reaper::spawn(fleet)?),
            label: format!("{}={fleet}", docker::LABEL),
        })
    }

    pub(super) fn created(&self, kind: &'static str, id: &str) -> io::Result<()> {
        self.list().push((kind, id.to_string()));
        self.reaper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .watch(kind, id)
    }

    pub(super) fn removed(&self, id: &str) {
        self.list().retain(|(_, known)| known != id);
    }

    fn list(&self) -> MutexGuard<'_, Vec<(&'static str, String)>> {
        self.created.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Resources {
    fn drop(&mut self) {
        let created = std::mem::take(&mut *self.list());
        let ids = |kind: &str| -> Vec<String> {
            created
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, id)| id.clone())
                .collect()
        };
        let (mut containers, networks) = (ids("container"), ids("network"));
        // Also any container of this fleet whose id was never learnt: `docker run` creates
        // it before starting it, and a start that fails prints no id. The label is this
        // fleet's own (a fresh id), so nothing else matches.
        if let Ok(listed) = docker(&[
            "ps",
            "--all",
            "--quiet",
            "--filter",
            &format!("label={}", self.label),
        ]) {
            for id in listed.split_whitespace() {
                if !containers.iter().any(|known| known.starts_with(id)) {
                    containers.push(id.to_string());
                }
            }
        }
        // Containers first: a network with containers on it cannot be removed.
        let mut removed = true;
        if !containers.is_empty() {
            let mut args = vec!["rm".to_string(), "--force".into(), "--volumes".into()];
            args.extend(containers);
            removed &= docker(&args).is_ok();
        }
        if !networks.is_empty() {
            let mut args = vec!["network".to_string(), "rm".into()];
            args.extend(networks);
            removed &= docker(&args).is_ok();
        }
        let reaper = self.reaper.get_mut().unwrap_or_else(|p| p.into_inner());
        if removed {
            reaper.stand_down();
        }
        // Otherwise the reaper, whose pipe closes as it is dropped here, tries once more.
    }
}

/// A `sh` process that removes a fleet's containers and networks when the fleet's process
/// dies without dropping the fleet (killed, aborted, or a fleet kept in a static): it reads
/// the ids from a pipe whose other end only this process holds, and removes them when the
/// pipe closes without the word `done`. A `docker run` still under way when the process died
/// makes a container whose id never reached the pipe: after the known ids, the reaper waits
/// for such commands to finish and removes what carries the fleet's own label (a fresh id,
/// so nothing of anyone else's). It runs in a session of its own, so that a Ctrl-C meant for
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
if [ -n "$networks" ]; then docker network rm $networks; fi
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
