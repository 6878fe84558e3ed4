//! Direct connections to each node, for what the library has no API for: `status` and
//! `check`. Addresses are parsed by the same rules as the
//! library's, shown with the password replaced by `***`, and every message from a node is
//! scrubbed of the password in each form it was written.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};

use crate::exit::Failure;

/// Query parameters that carry a password (`unix:///path?pass=...`).
const SECRET_PARAMS: [&str; 2] = ["pass", "password"];

/// One node, ready to connect to.
pub struct Target {
    /// The address without its password: the only form ever shown.
    pub name: String,
    client: redis::Client,
    secrets: Vec<String>,
}

impl Target {
    /// Parses an address as the library does: `redis://`, `rediss://` (feature `tls`),
    /// `unix://` or `redis+unix://`.
    ///
    /// # Errors
    /// Exit 78, naming the address with its credentials hidden.
    pub fn parse(raw: &str) -> Result<Target, Failure> {
        let invalid = |reason: String| {
            Failure::config(format!(
                "invalid node address {}: {reason}",
                hide_credentials(raw)
            ))
        };
        let url = url::Url::parse(raw.trim()).map_err(|e| invalid(e.to_string()))?;
        match url.scheme() {
            "redis" | "unix" | "redis+unix" => {}
            "rediss" if cfg!(feature = "tls") => {}
            "rediss" => {
                return Err(invalid(
                    "rediss:// needs quorum-lock built with the `tls` feature".into(),
                ))
            }
            other => {
                return Err(invalid(format!(
                    "unsupported scheme {other:?} (use redis://, rediss:// or unix://)"
                )))
            }
        }
        if matches!(url.scheme(), "redis" | "rediss") && url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("no host".into()));
        }
        let mut secrets = Vec::new();
        let mut shown = url.clone();
        if let Some(p) = url.password() {
            secrets.push(p.to_string());
            if let Ok(decoded) = percent_decode(p) {
                secrets.push(decoded);
            }
            // Cannot fail: a URL with a password has a host.
            let _ = shown.set_password(Some("***"));
        }
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
        if url.query().is_some() {
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
        let client = redis::Client::open(url.as_str())
            .map_err(|e| invalid(scrub(&e.to_string(), &secrets)))?;
        Ok(Target {
            name: shown.to_string(),
            client,
            secrets,
        })
    }

    /// Connects within `connect_timeout`; each later command is bounded by `response_timeout`.
    ///
    /// # Errors
    /// The scrubbed reason.
    pub async fn connect(
        &self,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<MultiplexedConnection, String> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(response_timeout));
        // The driver's connection timeout covers the TCP connect; the handshake (AUTH, a
        // paused server) needs a bound too.
        match tokio::time::timeout(
            connect_timeout,
            self.client
                .get_multiplexed_async_connection_with_config(&config),
        )
        .await
        {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(self.scrub(&e)),
            Err(_) => Err(format!(
                "no connection within {}",
                crate::values::format_duration(connect_timeout)
            )),
        }
    }

    /// Sends one command, bounded by `limit`; a server error reply is an error.
    ///
    /// # Errors
    /// The scrubbed reason.
    pub async fn query(
        &self,
        conn: &mut MultiplexedConnection,
        cmd: &Cmd,
        limit: Duration,
    ) -> Result<Value, String> {
        match tokio::time::timeout(limit, conn.send_packed_command(cmd)).await {
            Ok(Ok(Value::ServerError(e))) => Err(self.scrub(&redis::RedisError::from(e))),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.scrub(&e)),
            Err(_) => Err(format!(
                "no answer within {}",
                crate::values::format_duration(limit)
            )),
        }
    }

    fn scrub(&self, e: &redis::RedisError) -> String {
        scrub(&e.to_string(), &self.secrets)
    }
}

/// Parses every configured address.
///
/// # Errors
/// Exit 78 for the first address that does not parse.
pub fn targets(nodes: &[String]) -> Result<Vec<Target>, Failure> {
    nodes.iter().map(|n| Target::parse(n)).collect()
}

fn scrub(msg: &str, secrets: &[String]) -> String {
    let mut msg = msg.to_string();
    for s in secrets {
        msg = msg.replace(s.as_str(), "***");
    }
    msg
}

fn percent_decode(s: &str) -> Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(())?;
            let hex = std::str::from_utf8(hex).map_err(|_| ())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

/// Hides what could be credentials in text that is not a parsed address: between `://` and
/// the next `@` of the same word, and the value of every `pass=` / `password=` parameter.
pub fn hide_credentials(text: &str) -> String {
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

/// A reply as text (bulk, simple or verbatim string).
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// A reply as an integer (integer or numeric string).
pub fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        other => text(other).and_then(|t| t.trim().parse().ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_shown_without_passwords() {
        let t = Target::parse("redis://user:s3cr%40t@127.0.0.1:7001/2").expect("parses");
        assert_eq!(t.name, "redis://user:***@127.0.0.1:7001/2");
        assert_eq!(
            scrub("bad s3cr@t and s3cr%40t", &t.secrets),
            "bad *** and ***"
        );
        let t = Target::parse("unix:///tmp/r.sock?pass=hunter2").expect("parses");
        assert!(!t.name.contains("hunter2"), "{}", t.name);
        for bad in ["http://:hunter2@h:1", "redis://:hunter2@[bad", "not a url"] {
            let f = Target::parse(bad).err().expect("refused");
            assert_eq!(f.code, crate::exit::CONFIG);
            assert!(!f.message.contains("hunter2"), "{}", f.message);
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
}
