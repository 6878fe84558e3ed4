//! A node's address: parsing every URL form the redis crate accepts, and keeping its
//! password out of everything shown (display form, error messages).

use std::time::Duration;

use crate::error::Error;

/// A parsed node address: the redis client for it, and its display form without secrets.
pub(crate) struct NodeAddr {
    pub(crate) display: String,
    /// Where it connects: host (lowercase) and port, or the socket path, and the database;
    /// the same for two addresses written alike (with or without a password, `redis://`
    /// or `rediss://`), so that a node listed twice is refused without asking it.
    pub(crate) endpoint: String,
    /// Every form in which the password could appear in a message (decoded and as written).
    secrets: Vec<String>,
    /// The address is `rediss://`.
    #[cfg(feature = "tls")]
    tls: bool,
    pub(crate) client: redis::Client,
}

/// Query parameters that carry a password (`unix:///path?pass=...` for the redis crate).
const SECRET_PARAMS: [&str; 2] = ["pass", "password"];

impl NodeAddr {
    /// Parses `redis://[user:pass@]host:port[/db]`, `rediss://...`, `valkey://...`,
    /// `valkeys://...` (the same, for Valkey), `unix:///path[?pass=..]` or
    /// `redis+unix:///path[?pass=..]`.
    pub(crate) fn parse(raw: &str) -> Result<NodeAddr, Error> {
        let invalid = |reason: String| Error::InvalidNodeUrl {
            address: redact_unparsed(raw),
            reason,
        };
        let url = url::Url::parse(raw.trim()).map_err(|e| invalid(e.to_string()))?;
        match url.scheme() {
            "redis" | "valkey" | "unix" | "redis+unix" => {}
            "rediss" | "valkeys" if cfg!(feature = "tls") => {}
            tls @ ("rediss" | "valkeys") => {
                return Err(invalid(format!(
                    "{tls}:// needs the `tls` feature of quorum-lock"
                )))
            }
            other => {
                return Err(invalid(format!(
                    "unsupported scheme {other:?} (use redis://, rediss://, valkey://, valkeys:// or unix://)"
                )))
            }
        }
        let tcp = matches!(url.scheme(), "redis" | "rediss" | "valkey" | "valkeys");
        if tcp && url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("no host".into()));
        }
        let mut secrets = Vec::new();
        let mut shown = url.clone();
        if let Some(p) = url.password() {
            secrets.push(p.to_string());
            secrets.extend(percent_decode(p));
            // Cannot fail: the URL has a host, since it has a password.
            let _ = shown.set_password(Some("***"));
        }
        if url.query_pairs().any(|(k, _)| SECRET_PARAMS.contains(&&*k)) {
            let pairs: Vec<(String, String)> = url
                .query_pairs()
                .map(|(k, v)| {
                    if SECRET_PARAMS.contains(&&*k) {
                        secrets.push(v.to_string());
                        (k.into_owned(), "***".to_string())
                    } else {
                        (k.into_owned(), v.into_owned())
                    }
                })
                .collect();
            // The raw (still encoded) values too, as they were written.
            for part in url.query().unwrap_or("").split('&') {
                if let Some((k, v)) = part.split_once('=') {
                    if SECRET_PARAMS.contains(&k) {
                        secrets.push(v.to_string());
                    }
                }
            }
            shown.query_pairs_mut().clear().extend_pairs(pairs);
        }
        secrets.retain(|s| !s.is_empty());
        let display = shown.to_string();
        let client = redis::Client::open(url.as_str())
            .and_then(|c| {
                redis::Client::open(
                    c.get_connection_info()
                        .clone()
                        .set_tcp_settings(tcp_settings()),
                )
            })
            .map_err(|e| invalid(scrub(&e.to_string(), &secrets)))?;
        let info = client.get_connection_info();
        let db = info.redis_settings().db();
        let endpoint = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port)
            | redis::ConnectionAddr::TcpTls { host, port, .. } => {
                format!("{}:{port}", host.to_ascii_lowercase())
            }
            redis::ConnectionAddr::Unix(path) => format!("unix:{}", path.display()),
            _ => display.clone(),
        };
        Ok(NodeAddr {
            endpoint: format!("{endpoint}/{db}"),
            display,
            secrets,
            #[cfg(feature = "tls")]
            tls: matches!(url.scheme(), "rediss" | "valkeys"),
            client,
        })
    }

    /// The same credentials, TLS settings and database at another `host` and `port`: a member
    /// of the cluster this address is a member of.
    pub(crate) fn at(&self, host: &str, port: u16) -> Result<NodeAddr, Error> {
        let invalid = |reason: String| Error::InvalidNodeUrl {
            address: format!("{host}:{port}"),
            reason,
        };
        let info = self.client.get_connection_info().clone();
        let addr = match info.addr() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => redis::ConnectionAddr::Tcp(host.to_string(), port),
        };
        let client = redis::Client::open(info.set_addr(addr))
            .map_err(|e| invalid(scrub(&e.to_string(), &self.secrets)))?;
        let mut shown = url::Url::parse(&self.display).map_err(|e| invalid(e.to_string()))?;
        if !matches!(shown.scheme(), "redis" | "rediss" | "valkey" | "valkeys") {
            shown = url::Url::parse("redis://localhost").map_err(|e| invalid(e.to_string()))?;
        }
        let bracketed = match host.contains(':') {
            true => format!("[{host}]"),
            false => host.to_string(),
        };
        shown
            .set_host(Some(&bracketed))
            .map_err(|e| invalid(e.to_string()))?;
        let _ = shown.set_port(Some(port));
        Ok(NodeAddr {
            display: shown.to_string(),
            endpoint: format!("{}:{port}/0", host.to_ascii_lowercase()),
            secrets: self.secrets.clone(),
            #[cfg(feature = "tls")]
            tls: self.tls,
            client,
        })
    }

    /// Whether the node is reached over TLS (`rediss://`).
    #[cfg(feature = "tls")]
    pub(crate) fn is_tls(&self) -> bool {
        self.tls
    }

    /// The same node, its client made with `certificates` (checked by the caller). Only for a
    /// `rediss://` address.
    #[cfg(feature = "tls")]
    pub(crate) fn with_certificates(
        mut self,
        certificates: redis::TlsCertificates,
    ) -> Result<NodeAddr, redis::RedisError> {
        self.client =
            redis::Client::build_with_tls(self.client.get_connection_info().clone(), certificates)?;
        Ok(self)
    }
}

/// How long a connection may leave written data unacknowledged before the kernel fails it
/// (`TCP_USER_TIMEOUT`; Linux's default is about 15 minutes), and about how long an idle one
/// may stay silent to keepalive probes (Linux's default: over two hours). A node whose host
/// vanished or was cut off (packets dropped, no reset) is then noticed within this bound and
/// its connection made again. A frozen server process is not noticed this way (its kernel
/// still acknowledges): the circuit breaker covers it.
pub(crate) const DEAD_LINK: Duration = Duration::from_secs(10);

/// The TCP settings of every node connection: no Nagle delay (a lock request is one small
/// write that must not wait for the previous one's acknowledgement), keepalive probes after
/// 4 s idle, every 1 s, 6 of them, and `TCP_USER_TIMEOUT` of [`DEAD_LINK`] (Linux).
fn tcp_settings() -> redis::io::tcp::TcpSettings {
    use redis::io::tcp::socket2::TcpKeepalive;
    let keepalive = TcpKeepalive::new().with_time(Duration::from_secs(4));
    // Where the platform lets the probes' interval and count be set (socket2's own list).
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd"
    ))]
    let keepalive = keepalive
        .with_interval(Duration::from_secs(1))
        .with_retries(6);
    let settings = redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(DEAD_LINK);
    settings
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// An address as it may be shown: parsed and redacted, or, when it does not parse, with
/// everything that could be a credential hidden.
pub(crate) fn redact(raw: &str) -> String {
    NodeAddr::parse(raw).map_or_else(|_| redact_unparsed(raw), |a| a.display)
}

/// Redacts the credentials of an address that did not even parse: everything between `://`
/// and the last `@` is hidden, and so is the value of every `pass=` / `password=` parameter.
pub(crate) fn redact_unparsed(raw: &str) -> String {
    let userinfo_hidden = match (raw.find("://"), raw.rfind('@')) {
        (Some(s), Some(at)) if at > s + 3 => format!("{}***{}", &raw[..s + 3], &raw[at..]),
        (None, Some(at)) => format!("***{}", &raw[at..]),
        _ => raw.to_string(),
    };
    let Some((head, query)) = userinfo_hidden.split_once('?') else {
        return userinfo_hidden;
    };
    let query: Vec<String> = query
        .split('&')
        .map(|part| match part.split_once('=') {
            Some((k, _)) if SECRET_PARAMS.contains(&k) => format!("{k}=***"),
            _ => part.to_string(),
        })
        .collect();
    format!("{head}?{}", query.join("&"))
}

/// Removes every occurrence of a secret from a message (defence in depth: redis errors do not
/// normally echo passwords, but nothing we print may).
pub(crate) fn scrub(msg: &str, secrets: &[String]) -> String {
    let mut msg = msg.to_string();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        msg = msg.replace(s.as_str(), "***");
    }
    msg
}

impl NodeAddr {
    /// `msg` with every form of this node's password replaced by `***`.
    pub(crate) fn scrub(&self, msg: &str) -> String {
        scrub(msg, &self.secrets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        let a = NodeAddr::parse("redis://user:s3cr%40t@127.0.0.1:7001/2").unwrap();
        assert_eq!(a.display, "redis://user:***@127.0.0.1:7001/2");
        assert!(a.secrets.iter().any(|s| s == "s3cr@t"));
        assert_eq!(scrub("bad s3cr@t here", &a.secrets), "bad *** here");
        assert_eq!(scrub("bad s3cr%40t here", &a.secrets), "bad *** here");
        let a = NodeAddr::parse("redis://:pw@localhost:6379").unwrap();
        assert!(!a.display.contains("pw"), "{}", a.display);
    }

    #[test]
    fn unparsable_addresses_hide_credentials() {
        assert_eq!(redact_unparsed("redis://u:p@[bad"), "redis://***@[bad");
        assert_eq!(redact_unparsed("u:p@host"), "***@host");
        let err = NodeAddr::parse("redis://u:hunter2@[bad:1").err().unwrap();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn valkey_urls_are_redis_urls() {
        let v = NodeAddr::parse("valkey://u:pw@host:7001/2").unwrap();
        let r = NodeAddr::parse("redis://host:7001/2").unwrap();
        // The same node whichever way it is written (a node listed twice is refused).
        assert_eq!(v.endpoint, r.endpoint);
        assert_eq!(v.display, "valkey://u:***@host:7001/2");
        #[cfg(feature = "tls")]
        assert!(NodeAddr::parse("valkeys://host:7001").unwrap().is_tls());
        #[cfg(not(feature = "tls"))]
        assert!(NodeAddr::parse("valkeys://host:7001").is_err());
    }

    #[test]
    fn schemes_are_checked() {
        assert!(NodeAddr::parse("http://127.0.0.1:1").is_err());
        assert!(NodeAddr::parse("unix:///tmp/redis.sock").is_ok());
        assert!(NodeAddr::parse("redis://127.0.0.1:1").is_ok());
        assert!(NodeAddr::parse("not a url").is_err());
        assert!(NodeAddr::parse("valkey://").is_err());
        assert!(NodeAddr::parse("").is_err());
    }
}
