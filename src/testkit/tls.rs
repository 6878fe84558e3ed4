//! TLS fleets (feature `tls`): [`FleetTls`], the certificates a test gives its nodes, and
//! those of the test kit's own clients.

use std::io;

use super::process;

/// TLS for a fleet's nodes (feature `tls`): PEM bytes, written into the fleet's directory.
///
/// Its `Debug` output shows neither key.
#[cfg(feature = "tls")]
#[derive(Clone)]
#[must_use]
pub struct FleetTls {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

#[cfg(feature = "tls")]
impl std::fmt::Debug for FleetTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetTls")
            .field("requires_client_certificate", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "tls")]
impl FleetTls {
    /// The CA certificate (`tls-ca-cert-file`: what nodes check client certificates against,
    /// and what the test kit's own clients trust), and the nodes' certificate and key (one
    /// certificate for all nodes, so it should name `127.0.0.1`). Clients are not asked for a
    /// certificate (`tls-auth-clients no`).
    pub fn new(
        ca_pem: impl Into<Vec<u8>>,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        FleetTls {
            ca: ca_pem.into(),
            cert: cert_pem.into(),
            key: key_pem.into(),
            client: None,
        }
    }

    /// Nodes require a client certificate signed by the CA (`tls-auth-clients yes`, Redis'
    /// default); the test kit's own clients ([`Fleet::client`](super::Fleet::client)) present
    /// this one.
    pub fn require_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Writes the files into `dir` once for all nodes.
    pub(super) fn write(&self, dir: &std::path::Path) -> io::Result<process::TlsFiles> {
        let files = process::TlsFiles {
            ca: dir.join("ca.crt"),
            cert: dir.join("node.crt"),
            key: dir.join("node.key"),
            auth_clients: self.client.is_some(),
        };
        std::fs::write(&files.ca, &self.ca)?;
        std::fs::write(&files.cert, &self.cert)?;
        std::fs::write(&files.key, &self.key)?;
        Ok(files)
    }

    /// The certificates of the test kit's own clients.
    pub(super) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: Some(self.ca.clone()),
        }
    }
}
