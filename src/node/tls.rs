//! TLS for `rediss://` nodes (feature `tls`): the builder's certificates, checked at build the
//! way the redis crate will read them, the crypto provider its rustls needs, and plain words for
//! the TLS errors of a connect.
//!
//! What the redis crate (1.8) does with them, read in its `tls.rs` and
//! `connection.rs::create_rustls_config`: a root certificate given to `build_with_tls` makes a
//! root store of those certificates **only** (the webpki roots it otherwise trusts are left out);
//! without one it trusts the webpki roots. A PEM with no certificate in it is taken silently as
//! an empty root store (every server is then refused at connect), and a client key that does not
//! match its certificate is found only at connect: both are checked here instead.

use std::error::Error as StdError;
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{AlertDescription, CertificateError, RootCertStore};

use crate::error::{Error, Result};
use crate::node::address::NodeAddr;

const ROOT: &str = "tls_root_certificate";
const CLIENT: &str = "tls_client_certificate";

/// The TLS settings of a builder, as given (PEM bytes).
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    root: Option<Vec<u8>>,
    client: Option<ClientIdentity>,
}

/// A client certificate chain and its private key. No `Debug`: the key is a secret.
#[derive(Clone)]
struct ClientIdentity {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl TlsSettings {
    pub(crate) fn set_root(&mut self, pem: Vec<u8>) {
        self.root = Some(pem);
    }

    pub(crate) fn set_client(&mut self, cert: Vec<u8>, key: Vec<u8>) {
        self.client = Some(ClientIdentity { cert, key });
    }

    pub(crate) fn has_root(&self) -> bool {
        self.root.is_some()
    }

    pub(crate) fn has_client(&self) -> bool {
        self.client.is_some()
    }

    /// Checks the settings and gives them to every node's client. Every node must be
    /// `rediss://` when any is set: a `redis://` node among them is most likely a mistake that
    /// would send its password and lock traffic in clear.
    pub(crate) fn apply(&self, addrs: Vec<NodeAddr>) -> Result<Vec<NodeAddr>> {
        if addrs.iter().any(NodeAddr::is_tls) {
            ensure_crypto_provider();
        }
        let Some(certificates) = self.certificates()? else {
            return Ok(addrs);
        };
        let field = if self.root.is_some() { ROOT } else { CLIENT };
        addrs
            .into_iter()
            .map(|addr| {
                if !addr.is_tls() {
                    return Err(invalid(
                        field,
                        format!(
                            "applies to rediss:// nodes only, and {} is not one",
                            addr.display
                        ),
                    ));
                }
                // Cannot fail for a rediss:// address with certificates checked as below; the
                // message is fixed so that nothing of the key could be echoed.
                addr.with_certificates(certificates.clone())
                    .map_err(|_| invalid(field, "the redis client refused the certificates".into()))
            })
            .collect()
    }

    /// The certificates for the redis crate, checked: `None` when no setting is given.
    fn certificates(&self) -> Result<Option<redis::TlsCertificates>> {
        if self.root.is_none() && self.client.is_none() {
            return Ok(None);
        }
        ensure_crypto_provider();
        if let Some(pem) = &self.root {
            let mut store = RootCertStore::empty();
            for (i, cert) in certificates(ROOT, pem)?.into_iter().enumerate() {
                store.add(cert).map_err(|e| {
                    invalid(
                        ROOT,
                        format!("certificate {} is not usable as a root: {e}", i + 1),
                    )
                })?;
            }
        }
        if let Some(ClientIdentity { cert, key }) = &self.client {
            let chain = certificates(CLIENT, cert)?;
            // The parser's own message is not shown: it could quote a line of the key.
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                invalid(
                    CLIENT,
                    match e {
                        pem::Error::NoItemsFound => {
                            "no PEM private key (PKCS#8, PKCS#1 or SEC1) in the key".into()
                        }
                        _ => "the key is not readable PEM".into(),
                    },
                )
            })?;
            // What the redis crate's rustls configuration does at each connect, done once here
            // so that a key that does not match the certificate fails the build, named.
            rustls::ClientConfig::builder()
                .with_root_certificates(RootCertStore::empty())
                .with_client_auth_cert(chain, key)
                .map_err(|e| {
                    invalid(
                        CLIENT,
                        match e {
                            rustls::Error::InconsistentKeys(_) => {
                                "the key does not match the certificate".into()
                            }
                            e => format!("the certificate and key are not usable: {e}"),
                        },
                    )
                })?;
        }
        Ok(Some(redis::TlsCertificates {
            client_tls: self.client.as_ref().map(|ClientIdentity { cert, key }| {
                redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }
            }),
            root_cert: self.root.clone(),
        }))
    }
}

/// The certificates of a PEM text (certificates are public: the parser's message may be shown).
fn certificates(field: &'static str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(field, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(
            field,
            "no certificate in the PEM (expected -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

fn invalid(field: &'static str, reason: String) -> Error {
    Error::InvalidConfig { field, reason }
}

/// The redis crate builds its rustls configuration with the process-wide default crypto
/// provider, and panics (in the task that connects) when there is none and the crate features
/// of rustls do not name exactly one. Installs ring's unless the application installed one
/// first; losing a race to another installer is fine.
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The rustls error behind a redis error, if any (a certificate refused on either side).
pub(crate) fn rustls_error(e: &redis::RedisError) -> Option<&rustls::Error> {
    let mut source = e.source();
    while let Some(error) = source {
        // The redis crate keeps a cause as an `Arc<dyn Error>`, and an `io::Error` does not
        // show its payload as its source: both are opened by hand.
        let error: &(dyn StdError + 'static) =
            match error.downcast_ref::<Arc<dyn StdError + Send + Sync>>() {
                Some(inner) => &**inner,
                None => error,
            };
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let payload = error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref);
        if let Some(tls) = payload.and_then(|p| p.downcast_ref::<rustls::Error>()) {
            return Some(tls);
        }
        source = error.source();
    }
    None
}

/// A TLS error in plain words, with the setting that fixes the common cases.
pub(crate) fn explain(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "the server's certificate is not trusted ({e}): give the CA that signed it \
             with tls_root_certificate (without one, only public roots are trusted)"
        ),
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
            format!("the server requires a client certificate ({e}): set tls_client_certificate")
        }
        rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA,
        ) => format!("the server refused the client certificate ({e})"),
        e => e.to_string(),
    }
}
