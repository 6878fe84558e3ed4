//! The global settings: the command line and the environment (through clap) first, then the
//! TOML config file, then the library's defaults. Building the client maps the library's
//! errors to exit codes.

use std::path::Path;
use std::time::Duration;

use quorum_lock::{Quorum, QuorumLock};
use serde::Deserialize;

use crate::args::GlobalArgs;
use crate::direct::hide_credentials;
use crate::exit::Failure;
use crate::values::{parse_duration, parse_quorum};

/// The library's defaults, repeated for the commands that talk to the nodes directly.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The settings every command uses.
#[derive(Clone)]
pub struct Settings {
    /// As given: may contain passwords, so never printed (see `direct::Target::name`).
    pub nodes: Vec<String>,
    pub quorum: Quorum,
    pub node_timeout: Duration,
    pub connect_timeout: Duration,
}

/// The config file's contents (every key optional; unknown keys are an error, so that a typo
/// does not silently fall back to a default).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    nodes: Option<NodeList>,
    quorum: Option<QuorumValue>,
    #[serde(alias = "node-timeout")]
    node_timeout: Option<String>,
    #[serde(alias = "connect-timeout")]
    connect_timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum NodeList {
    List(Vec<String>),
    Joined(String),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum QuorumValue {
    Count(usize),
    Name(String),
}

impl Settings {
    /// Merges the command line (and environment) with the config file, if any.
    ///
    /// # Errors
    /// Exit 78: the file cannot be read or parsed, a setting in it is invalid, or no node is
    /// configured anywhere.
    pub fn load(global: &GlobalArgs) -> Result<Settings, Failure> {
        let file = match &global.config {
            Some(path) => read_file(path)?,
            None => FileSettings::default(),
        };
        let source = |path: &Path| format!("config file {}", path.display());
        let in_file = |what: &str| match &global.config {
            Some(path) => format!("{}: {what}", source(path)),
            None => what.to_string(),
        };
        let nodes = match (&global.nodes, file.nodes) {
            (Some(joined), _) => split_nodes(joined),
            (None, Some(NodeList::List(list))) => list,
            (None, Some(NodeList::Joined(joined))) => split_nodes(&joined),
            (None, None) => Vec::new(),
        };
        if nodes.is_empty() {
            return Err(Failure::config(
                "no nodes: give --nodes, QUORUM_LOCK_NODES or `nodes` in the config file",
            ));
        }
        let quorum = match (global.quorum, file.quorum) {
            (Some(q), _) => q,
            (None, Some(QuorumValue::Count(k))) => Quorum::AtLeast(k),
            (None, Some(QuorumValue::Name(name))) => parse_quorum(&name).map_err(|_| {
                Failure::config(in_file("quorum must be majority, all or a number"))
            })?,
            (None, None) => Quorum::Majority,
        };
        let duration = |cli: Option<Duration>, file: Option<String>, name: &str, default| {
            match (cli, file) {
                (Some(d), _) => Ok(d),
                // The value itself is not echoed: a misplaced line could hold a password.
                (None, Some(text)) => parse_duration(&text).map_err(|_| {
                    Failure::config(in_file(&format!(
                        "{name} must be a duration like 500ms, 30s or 2m"
                    )))
                }),
                (None, None) => Ok(default),
            }
        };
        Ok(Settings {
            nodes,
            quorum,
            node_timeout: duration(
                global.node_timeout,
                file.node_timeout,
                "node_timeout",
                DEFAULT_NODE_TIMEOUT,
            )?,
            connect_timeout: duration(
                global.connect_timeout,
                file.connect_timeout,
                "connect_timeout",
                DEFAULT_CONNECT_TIMEOUT,
            )?,
        })
    }

    /// The number of confirmations the quorum rule needs on these nodes.
    ///
    /// # Errors
    /// Exit 78 when the rule is not a majority of the nodes (or needs more than there are).
    pub fn required(&self) -> Result<usize, Failure> {
        self.quorum
            .required(self.nodes.len())
            .map_err(|reason| Failure::config(format!("invalid configuration: quorum: {reason}")))
    }

    /// Builds the library client: validates the settings, connects to every node and checks
    /// them (replicas and the same server twice are refused).
    ///
    /// # Errors
    /// Exit 78 for a bad setting or node, 69 when fewer nodes than the quorum are reachable.
    pub async fn connect(&self) -> Result<QuorumLock, Failure> {
        QuorumLock::builder()
            .nodes(&self.nodes)
            .quorum(self.quorum)
            .node_timeout(self.node_timeout)
            .connect_timeout(self.connect_timeout)
            .build()
            .await
            // Building never waits for a lock, so no error of it means "busy".
            .map_err(|e| Failure::from_lock(&e, crate::exit::SOFTWARE))
    }
}

/// `a,b , c` -> `[a, b, c]` (a comma inside a password must be percent-encoded, `%2C`).
fn split_nodes(joined: &str) -> Vec<String> {
    joined
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn read_file(path: &Path) -> Result<FileSettings, Failure> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::config(format!("config file {shown}: {e}")))?;
    toml::from_str(&text).map_err(|e| {
        // toml's own Display quotes the offending line, which may hold a password: give the
        // line number and the message only, with anything URL-like redacted.
        let line = e
            .span()
            .map(|span| text[..span.start.min(text.len())].lines().count().max(1));
        let message = hide_credentials(e.message().trim());
        match line {
            Some(line) => Failure::config(format!("config file {shown}, line {line}: {message}")),
            None => Failure::config(format!("config file {shown}: {message}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(nodes: Option<&str>, config: Option<&Path>) -> GlobalArgs {
        GlobalArgs {
            nodes: nodes.map(String::from),
            quorum: None,
            node_timeout: None,
            connect_timeout: None,
            config: config.map(Path::to_path_buf),
        }
    }

    /// A config file that is removed when dropped (the binary's tests have no tempfile).
    struct TempFile(std::path::PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn file(text: &str) -> (TempFile, std::path::PathBuf) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "quorum-lock-settings-{}-{n}.toml",
            std::process::id()
        ));
        std::fs::write(&path, text).expect("writing the config file");
        (TempFile(path.clone()), path)
    }

    #[test]
    fn the_command_line_wins_over_the_file() {
        let (_dir, path) = file(
            "nodes = [\"redis://a:1\", \"redis://b:2\", \"redis://c:3\"]\nquorum = 3\nnode_timeout = \"80ms\"\n",
        );
        let s =
            Settings::load(&global(None, Some(&path))).unwrap_or_else(|f| panic!("{}", f.message));
        assert_eq!(s.nodes.len(), 3);
        assert_eq!(s.quorum, Quorum::AtLeast(3));
        assert_eq!(s.node_timeout, Duration::from_millis(80));
        assert_eq!(s.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        let s = Settings::load(&global(Some("redis://x:1, redis://y:2"), Some(&path)))
            .unwrap_or_else(|f| panic!("{}", f.message));
        assert_eq!(s.nodes, ["redis://x:1", "redis://y:2"]);
    }

    #[test]
    fn file_errors_are_configuration_errors_without_secrets() {
        let (_dir, path) =
            file("nodes = \"redis://:hunter2@a:1\"\nnode_timeout = \"redis://:hunter2@a:1\"\n");
        let f = Settings::load(&global(None, Some(&path)))
            .err()
            .expect("bad duration");
        assert_eq!(f.code, crate::exit::CONFIG);
        assert!(!f.message.contains("hunter2"), "{}", f.message);
        let (_dir, path) = file("nodes = [\"redis://:hunter2@a:1\"\nnodez = 1\n");
        let f = Settings::load(&global(None, Some(&path)))
            .err()
            .expect("bad toml");
        assert_eq!(f.code, crate::exit::CONFIG);
        assert!(!f.message.contains("hunter2"), "{}", f.message);
        assert!(!f.message.contains('\n'), "{}", f.message);
        let (_dir, path) = file("node = [\"redis://a:1\"]\n");
        let f = Settings::load(&global(None, Some(&path)))
            .err()
            .expect("unknown key");
        assert!(f.message.contains("line 1"), "{}", f.message);
        let f = Settings::load(&global(None, None)).err().expect("no nodes");
        assert_eq!(f.code, crate::exit::CONFIG);
    }
}
