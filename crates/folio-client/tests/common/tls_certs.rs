//! Certificates made by the tests (rcgen): CAs, and leaf certificates for bookies and clients,
//! written as PEM files. Also included by the `folio` crate's command-line TLS tests.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A leaf certificate and its key, as PEM.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Leaf {
    /// Writes `<stem>.crt.pem` and `<stem>.key.pem` in `dir`; returns (chain, key).
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.crt.pem"));
        let key = dir.join(format!("{stem}.key.pem"));
        std::fs::write(&cert, &self.cert_pem).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (cert, key)
    }

    /// The key encrypted with `password` (PBES2: PBKDF2-SHA256, AES-256-CBC), as PEM, the way
    /// `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it.
    pub fn encrypted_key_pem(&self, password: &[u8]) -> String {
        use pkcs8::der::Decode;
        use pkcs8::der::pem;
        let (_, der) = pem::decode_vec(self.key_pem.as_bytes()).unwrap();
        let params =
            pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(2048, b"test salt", &[9; 16])
                .unwrap();
        let encrypted = pkcs8::PrivateKeyInfo::from_der(&der)
            .unwrap()
            .encrypt_with_params(params, password)
            .unwrap();
        pem::encode_string(
            "ENCRYPTED PRIVATE KEY",
            pem::LineEnding::LF,
            encrypted.as_bytes(),
        )
        .unwrap()
    }
}

/// What a leaf certificate should be.
#[derive(Default, Clone)]
pub struct LeafSpec<'a> {
    /// Subject alternative names (DNS names or IP addresses).
    pub names: &'a [&'a str],
    /// The subject's OU (BookKeeper's role convention: "0:role1,role2").
    pub ou: Option<&'a str>,
    /// Valid only in the year 2000.
    pub expired: bool,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    pub fn write(&self, dir: &Path, stem: &str) -> PathBuf {
        let p = dir.join(format!("{stem}.ca.pem"));
        std::fs::write(&p, &self.pem).unwrap();
        p
    }

    pub fn issue(&self, spec: LeafSpec<'_>) -> Leaf {
        let names: Vec<String> = spec.names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(
            DnType::CommonName,
            spec.names.first().copied().unwrap_or("client"),
        );
        if let Some(ou) = spec.ou {
            params
                .distinguished_name
                .push(DnType::OrganizationalUnitName, ou);
        }
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if spec.expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2000, 12, 31);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A bookie certificate for 127.0.0.1 and localhost.
    pub fn bookie(&self) -> Leaf {
        self.issue(LeafSpec {
            names: &["127.0.0.1", "localhost"],
            ..Default::default()
        })
    }

    /// A client certificate with `ou` as its subject's OU.
    pub fn client(&self, ou: Option<&str>) -> Leaf {
        self.issue(LeafSpec {
            names: &["client.test"],
            ou,
            ..Default::default()
        })
    }
}
