//! The global settings: the command line and the environment (through clap) first, then the
//! TOML config file, then the library's defaults. The TLS files are read here. Building the
//! client, or the nodes for direct connections, maps the library's errors to exit codes, with
//! the TLS settings named as this tool takes them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use quorum_lock::{Builder, Error, FailureKind, NodeClient, NodeFailure, Quorum, QuorumLock};
use serde::Deserialize;

use crate::args::GlobalArgs;
use crate::exit::{self, Failure};
use crate::values::{parse_duration, parse_quorum};

/// The settings every command uses. No `Debug`: the nodes may hold passwords and the TLS
/// settings a private key.
#[derive(Clone)]
pub struct Settings {
    /// As given: may contain passwords, so never printed (the library's `NodeClient::name` and
    /// its errors show them redacted).
    pub nodes: Vec<String>,
    pub quorum: Quorum,
    pub node_timeout: Duration,
    pub connect_timeout: Duration,
    tls: Tls,
}

/// The TLS files, read: the CA bundle, and the client certificate with its key.
#[derive(Clone, Default)]
struct Tls {
    ca: Option<Pem>,
    client: Option<(Pem, Pem)>,
}

/// A PEM file's contents, and the setting and path it came from (for messages; never the
/// contents).
#[derive(Clone)]
struct Pem {
    source: String,
    pem: Vec<u8>,
}

/// The library's message on a refused TLS handshake names the builder's settings: these are
/// this tool's options for them.
const TLS_OPTIONS: &str = "in quorum-lock, tls_root_certificate is --tls-ca FILE and \
                           tls_client_certificate is --tls-cert FILE with --tls-key FILE";

/// A node that refused the TLS handshake, or whose certificate is not trusted: configuration
/// (78), in one line naming the node and the cause.
pub fn tls_refused(failure: &NodeFailure) -> Failure {
    Failure::config(format!("configuration: node {failure}; {TLS_OPTIONS}"))
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
    #[serde(alias = "tls-ca")]
    tls_ca: Option<PathBuf>,
    #[serde(alias = "tls-cert")]
    tls_cert: Option<PathBuf>,
    #[serde(alias = "tls-key")]
    tls_key: Option<PathBuf>,
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
        // A path in the file is relative to the file (cron and services start elsewhere).
        let dir = global.config.as_deref().and_then(Path::parent);
        let path = |cli: &Option<PathBuf>, file: Option<PathBuf>, option: &str, key: &str| match (
            cli, file,
        ) {
            (Some(path), _) => Some((format!("{option} {}", path.display()), path.clone())),
            (None, Some(path)) => {
                let path = dir.map_or_else(|| path.clone(), |dir| dir.join(&path));
                Some((in_file(&format!("{key} {}", path.display())), path))
            }
            (None, None) => None,
        };
        let ca = path(&global.tls_ca, file.tls_ca, "--tls-ca", "tls_ca");
        let cert = path(&global.tls_cert, file.tls_cert, "--tls-cert", "tls_cert");
        let key = path(&global.tls_key, file.tls_key, "--tls-key", "tls_key");
        let client = match (cert, key) {
            (Some(cert), Some(key)) => Some((read_pem(cert)?, read_pem(key)?)),
            (None, None) => None,
            (Some((given, _)), None) | (None, Some((given, _))) => {
                return Err(Failure::config(format!(
                    "{given}: a client certificate needs both --tls-cert and --tls-key \
                     (tls_cert and tls_key in the config file)"
                )))
            }
        };
        let tls = Tls {
            ca: ca.map(read_pem).transpose()?,
            client,
        };
        Ok(Settings {
            tls,
            nodes,
            quorum,
            node_timeout: duration(
                global.node_timeout,
                file.node_timeout,
                "node_timeout",
                QuorumLock::builder().get_node_timeout(),
            )?,
            connect_timeout: duration(
                global.connect_timeout,
                file.connect_timeout,
                "connect_timeout",
                QuorumLock::builder().get_connect_timeout(),
            )?,
        })
    }

    /// The number of confirmations the quorum rule needs on these nodes.
    ///
    /// # Errors
    /// Exit 78 when the rule is not a majority of the nodes (or needs more than there are).
    pub fn required(&self) -> Result<usize, Failure> {
        self.quorum.required(self.nodes.len()).map_err(|reason| {
            Failure::config(format!(
                "invalid configuration: {}",
                crate::exit::options_in(&reason)
            ))
        })
    }

    /// The library's builder with these settings.
    fn builder(&self) -> Builder {
        let mut builder = QuorumLock::builder()
            .nodes(&self.nodes)
            .quorum(self.quorum)
            .node_timeout(self.node_timeout)
            .connect_timeout(self.connect_timeout);
        if let Some(ca) = &self.tls.ca {
            builder = builder.tls_root_certificate(ca.pem.clone());
        }
        if let Some((cert, key)) = &self.tls.client {
            builder = builder.tls_client_certificate(cert.pem.clone(), key.pem.clone());
        }
        builder
    }

    /// Builds the library client: validates the settings, connects to every node and checks
    /// them (replicas and the same server twice are refused).
    ///
    /// # Errors
    /// Exit 78 for a bad setting, node or certificate, 69 when fewer nodes than the quorum
    /// are reachable.
    pub async fn connect(&self) -> Result<QuorumLock, Failure> {
        self.builder().build().await.map_err(|e| self.failure(&e))
    }

    /// As [`connect`](Self::connect), with `adjust` applied to the builder first.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with(
        &self,
        adjust: impl FnOnce(Builder) -> Builder,
    ) -> Result<QuorumLock, Failure> {
        adjust(self.builder())
            .build()
            .await
            .map_err(|e| self.failure(&e))
    }

    /// The nodes for direct connections (`status`, `check`), with the TLS settings.
    ///
    /// # Errors
    /// Exit 78 for a bad node address or TLS file.
    pub fn node_clients(&self) -> Result<Vec<NodeClient>, Failure> {
        self.builder().node_clients().map_err(|e| self.failure(&e))
    }

    /// A library error of building, with a TLS setting named by the option and file it came
    /// from. Building never waits for a lock, so no error of it means "busy".
    fn failure(&self, e: &Error) -> Failure {
        match (e, &self.tls) {
            (
                Error::InvalidConfig {
                    field: "tls_root_certificate",
                    reason,
                },
                Tls { ca: Some(ca), .. },
            ) => Failure::config(format!("{}: {reason}", ca.source)),
            (
                Error::InvalidConfig {
                    field: "tls_client_certificate",
                    reason,
                },
                Tls {
                    client: Some((cert, key)),
                    ..
                },
            ) => Failure::config(format!("{}, {}: {reason}", cert.source, key.source)),
            (Error::Node(failure), _) if failure.kind() == FailureKind::Tls => tls_refused(failure),
            _ => Failure::from_lock(e, &exit::Context::NONE),
        }
    }
}

/// Reads a TLS file. The message names the setting and the path, never the contents.
fn read_pem((source, path): (String, PathBuf)) -> Result<Pem, Failure> {
    let pem =
        std::fs::read(&path).map_err(|e| Failure::config(format!("{source}: cannot read: {e}")))?;
    Ok(Pem { source, pem })
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

/// Query parameters that carry a password (`unix:///path?pass=...`).
const SECRET_PARAMS: [&str; 2] = ["pass", "password"];

/// Hides what could be credentials in text that is not an address (a TOML parser's message):
/// between `://` and the next `@` of the same word, and the value of every `pass=` /
/// `password=` parameter.
fn hide_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("://") {
        let (head, tail) = rest.split_at(start + 3);
        out.push_str(head);
        let word_end = tail
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == ',')
            .unwrap_or(tail.len());
        match tail[..word_end].rfind('@') {
            Some(at) => {
                out.push_str("***");
                rest = &tail[at..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    for param in SECRET_PARAMS {
        let needle = format!("{param}=");
        let mut hidden = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(i) = rest.find(&needle) {
            let (head, tail) = rest.split_at(i + needle.len());
            hidden.push_str(head);
            hidden.push_str("***");
            let end = tail
                .find(|c: char| c == '&' || c.is_whitespace() || c == '"' || c == '\'')
                .unwrap_or(tail.len());
            rest = &tail[end..];
        }
        hidden.push_str(rest);
        out = hidden;
    }
    out
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
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            verbose: false,
        }
    }

    #[test]
    fn credentials_are_hidden_in_free_text() {
        assert_eq!(
            hide_credentials("at redis://u:p@h:1, and \"rediss://:x@y\""),
            "at redis://***@h:1, and \"rediss://***@y\""
        );
        assert_eq!(
            hide_credentials("unix:///s?pass=pw&db=1"),
            "unix:///s?pass=***&db=1"
        );
        assert_eq!(hide_credentials("no url here"), "no url here");
    }

    #[test]
    fn tls_files_are_read_relative_to_the_config_file_and_named_when_missing() {
        let (_ca, ca) = file("a CA bundle");
        let name = ca.file_name().expect("a file name").to_string_lossy();
        let (_config, config) = file(&format!(
            "nodes = [\"rediss://a:1\"]\ntls_ca = \"{name}\"\n"
        ));
        let s = Settings::load(&global(None, Some(&config)))
            .unwrap_or_else(|f| panic!("{}", f.message));
        let read = s.tls.ca.expect("the CA file");
        assert_eq!(read.pem, b"a CA bundle");
        assert!(read.source.contains("tls_ca"), "{}", read.source);

        let (_config, config) = file(&format!(
            "nodes = [\"rediss://a:1\"]\ntls_cert = \"missing-{name}\"\ntls_key = \"{name}\"\n"
        ));
        let f = Settings::load(&global(None, Some(&config)))
            .err()
            .expect("the certificate file is missing");
        assert_eq!(f.code, crate::exit::CONFIG);
        assert!(
            f.message.contains("tls_cert") && f.message.contains(&format!("missing-{name}")),
            "{}",
            f.message
        );

        let mut args = global(Some("rediss://a:1"), None);
        args.tls_key = Some(ca.clone());
        let f = Settings::load(&args)
            .err()
            .expect("a key without a certificate");
        assert_eq!(f.code, crate::exit::CONFIG);
        assert!(f.message.contains("--tls-cert"), "{}", f.message);
        assert!(!f.message.contains("a CA bundle"), "{}", f.message);
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
        assert_eq!(
            s.connect_timeout,
            QuorumLock::builder().get_connect_timeout()
        );
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
