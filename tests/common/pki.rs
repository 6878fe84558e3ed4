//! Certificates made at test time (rcgen) for TLS fleets: a CA, a node certificate for
//! `127.0.0.1` and `localhost`, and a client certificate.

use quorum_lock::testkit::{Fleet, FleetTls};
use quorum_lock::{Builder, Quorum};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate and its key, as PEM.
pub struct Identity {
    pub cert: String,
    pub key: String,
}

/// A CA, and what it signed: a node certificate for 127.0.0.1 and localhost, and a client
/// certificate.
pub struct Pki {
    pub ca: String,
    pub node: Identity,
    pub client: Identity,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let sign = |names: Vec<String>, usage, cn: &str| {
            let mut params = CertificateParams::new(names).unwrap();
            params.extended_key_usages = vec![usage];
            params.distinguished_name.push(DnType::CommonName, cn);
            let key = KeyPair::generate().unwrap();
            Identity {
                cert: params.signed_by(&key, &ca).unwrap().pem(),
                key: key.serialize_pem(),
            }
        };
        Pki {
            node: sign(
                vec!["127.0.0.1".into(), "localhost".into()],
                ExtendedKeyUsagePurpose::ServerAuth,
                &format!("{name} node"),
            ),
            client: sign(
                Vec::new(),
                ExtendedKeyUsagePurpose::ClientAuth,
                &format!("{name} client"),
            ),
            ca: ca.pem(),
        }
    }

    /// TLS for a fleet's nodes; they require this PKI's client certificate when asked.
    pub fn fleet_tls(&self, require_client_certificate: bool) -> FleetTls {
        let tls = FleetTls::new(&*self.ca, &*self.node.cert, &*self.node.key);
        if require_client_certificate {
            tls.require_client_certificate(&*self.client.cert, &*self.client.key)
        } else {
            tls
        }
    }

    /// A lock client's builder for `fleet` trusting this CA and presenting its client
    /// certificate.
    pub fn builder(&self, fleet: &Fleet) -> Builder {
        super::builder(fleet, Quorum::Majority)
            .tls_root_certificate(&*self.ca)
            .tls_client_certificate(&*self.client.cert, &*self.client.key)
    }
}
