//! TLS on the bookie port, BookKeeper's way: a client's v3 START_TLS request is answered EOK in
//! plaintext and the same socket then runs a TLS handshake (rustls, ring provider), so the Java
//! client's `tlsProviderFactoryClass` works unchanged. This module turns the configuration
//! (BookKeeper's key names, PEM files only) into a rustls server configuration, reloads it when
//! the files change (`tlsCertFilesRefreshDurationSeconds`), and decides what a connection may
//! do once its handshake is done ([`Access`]): BookKeeper's `BookieAuthZFactory` (roles from the
//! client certificate's OU checked against `authorizedRoles`) plus Folio's per-operation roles.
//!
//! A reload is checked lazily, when a connection asks for StartTLS and the refresh interval has
//! passed since the last check, as BookKeeper does; files whose contents did not change are not
//! parsed again, and files that do not parse (a rotation half written) keep the old
//! configuration in force, with a warning.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tracing::{info, warn};

use crate::config::BookieConfig;
use crate::request::Request;

mod key;
pub use key::load_key;

/// Why TLS could not be set up. Each names the key or the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

fn err(msg: impl Into<String>) -> TlsError {
    TlsError(msg.into())
}

/// The TLS part of the bookie configuration, checked.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// PEM private key (`tlsKeyStore`).
    pub key: PathBuf,
    /// The file holding the password of an encrypted key (`tlsKeyStorePasswordPath`).
    pub key_password: Option<PathBuf>,
    /// PEM certificate chain, leaf first (`tlsCertificatePath`).
    pub chain: PathBuf,
    /// PEM CA bundle that client certificates must chain to (`tlsTrustStore`).
    pub trust: Option<PathBuf>,
    /// Client certificates are required, and nothing but StartTLS is served before the
    /// handshake (`tlsClientAuthentication`).
    pub client_auth: bool,
    pub protocols: Vec<&'static SupportedProtocolVersion>,
    /// Cipher suite names (IANA or Java names); `None` is rustls' safe defaults.
    pub cipher_suites: Option<Vec<String>>,
    /// `None`: never reload.
    pub refresh: Option<Duration>,
    /// How long a connection may take from StartTLS (or, when TLS is required, from its accept)
    /// to a finished handshake before it is closed.
    pub start_tls_timeout: Duration,
    pub authz: Option<Arc<Authz>>,
}

/// Who may do what, by the roles of a client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authz {
    /// `authorizedRoles` (BookKeeper): a connection whose certificate has none of these roles
    /// is refused altogether. Empty: any verified certificate is admitted.
    pub connection: Vec<String>,
    /// Folio's per-operation roles; an empty list leaves that kind of operation to whoever
    /// passed the connection check.
    pub read: Vec<String>,
    pub write: Vec<String>,
    pub recovery: Vec<String>,
}

impl Authz {
    fn is_empty(&self) -> bool {
        self.connection.is_empty()
            && self.read.is_empty()
            && self.write.is_empty()
            && self.recovery.is_empty()
    }
}

fn pem_type_ok(key: &str, value: &Option<String>) -> Result<(), TlsError> {
    match value.as_deref() {
        None => Ok(()),
        Some(v) if v.eq_ignore_ascii_case("PEM") => Ok(()),
        Some(v) => Err(err(format!(
            "{key} = {v:?} is not supported: Folio reads PEM files only; convert the store to PEM \
             (keytool -importkeystore -deststoretype PKCS12, then openssl pkcs12 -nodes) and set \
             {key} = \"PEM\""
        ))),
    }
}

fn parse_protocols(
    list: &Option<String>,
) -> Result<Vec<&'static SupportedProtocolVersion>, TlsError> {
    let Some(list) = list else {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    };
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let v = match name {
            "TLSv1.3" => &rustls::version::TLS13,
            "TLSv1.2" => &rustls::version::TLS12,
            other => {
                return Err(err(format!(
                    "tlsEnabledProtocols: {other:?} is not supported (only TLSv1.2 and TLSv1.3)"
                )));
            }
        };
        if !out.contains(&v) {
            out.push(v);
        }
    }
    if out.is_empty() {
        return Err(err("tlsEnabledProtocols names no protocol"));
    }
    Ok(out)
}

/// Splits a comma-separated list, dropping blanks.
pub fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl TlsSettings {
    /// The TLS settings of `config`, `None` when TLS is off (no `tlsProviderFactoryClass`).
    /// Only the keys are checked here; the files are read by [`ServerTls::load`].
    pub fn from_config(config: &BookieConfig) -> Result<Option<TlsSettings>, TlsError> {
        let authz = Authz {
            connection: config.authorized_roles.clone(),
            read: config.authorized_read_roles.clone(),
            write: config.authorized_write_roles.clone(),
            recovery: config.authorized_recovery_roles.clone(),
        };
        if let Some(class) = &config.bookie_auth_provider_factory_class
            && !class.ends_with("BookieAuthZFactory")
        {
            return Err(err(format!(
                "bookieAuthProviderFactoryClass = {class:?} is not supported: Folio implements \
                 only BookieAuthZFactory (roles from the TLS client certificate)"
            )));
        }
        if config.bookie_auth_provider_factory_class.is_some() && config.authorized_roles.is_empty()
        {
            return Err(err(
                "bookieAuthProviderFactoryClass is BookieAuthZFactory but authorizedRoles is empty",
            ));
        }
        if config.tls_provider_factory_class.is_none() {
            if !authz.is_empty() || config.tls_client_authentication {
                return Err(err(
                    "authorizedRoles and tlsClientAuthentication need TLS: set \
                     tlsProviderFactoryClass (and tlsKeyStore, tlsCertificatePath)",
                ));
            }
            return Ok(None);
        }
        pem_type_ok("tlsKeyStoreType", &config.tls_key_store_type)?;
        pem_type_ok("tlsTrustStoreType", &config.tls_trust_store_type)?;
        let key = config
            .tls_key_store
            .clone()
            .ok_or_else(|| err("TLS is on (tlsProviderFactoryClass) but tlsKeyStore (the PEM private key) is not set"))?;
        let chain = config.tls_certificate_path.clone().ok_or_else(|| {
            err("TLS is on (tlsProviderFactoryClass) but tlsCertificatePath (the PEM certificate chain) is not set")
        })?;
        if config.tls_client_authentication && config.tls_trust_store.is_none() {
            return Err(err(
                "tlsClientAuthentication needs tlsTrustStore (the PEM CA bundle client certificates chain to)",
            ));
        }
        if !authz.is_empty() && !config.tls_client_authentication {
            return Err(err(
                "authorizedRoles (and the per-operation roles) need tlsClientAuthentication = true: \
                 roles come from the client certificate",
            ));
        }
        if config.start_tls_timeout_secs == 0 {
            return Err(err("startTLSTimeoutSecs must be at least 1"));
        }
        let cipher_suites = config
            .tls_enabled_cipher_suites
            .as_deref()
            .map(split_list)
            .filter(|l| !l.is_empty());
        let settings = TlsSettings {
            key,
            key_password: config.tls_key_store_password_path.clone(),
            chain,
            trust: config.tls_trust_store.clone(),
            client_auth: config.tls_client_authentication,
            protocols: parse_protocols(&config.tls_enabled_protocols)?,
            cipher_suites,
            refresh: (config.tls_cert_files_refresh_duration_seconds > 0)
                .then(|| Duration::from_secs(config.tls_cert_files_refresh_duration_seconds)),
            start_tls_timeout: Duration::from_secs(config.start_tls_timeout_secs),
            authz: (!authz.is_empty()).then(|| Arc::new(authz)),
        };
        // The suite names are checked now, so that a typo is a start-up error.
        provider(&settings)?;
        Ok(Some(settings))
    }

    fn files(&self) -> Vec<&Path> {
        let mut f = vec![self.key.as_path(), self.chain.as_path()];
        f.extend(self.trust.as_deref());
        f.extend(self.key_password.as_deref());
        f
    }
}

/// The ring provider with only the configured cipher suites.
fn provider(settings: &TlsSettings) -> Result<Arc<CryptoProvider>, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(names) = &settings.cipher_suites {
        let all = provider.cipher_suites.clone();
        let name_of = |s: &rustls::SupportedCipherSuite| format!("{:?}", s.suite());
        let mut chosen = Vec::new();
        for name in names {
            // Java names TLS 1.3 suites TLS_AES_..., rustls TLS13_AES_...
            let wanted = match name.strip_prefix("TLS_") {
                Some(rest) if !rest.contains("_WITH_") => format!("TLS13_{rest}"),
                _ => name.clone(),
            };
            match all
                .iter()
                .find(|s| name_of(s) == wanted || name_of(s) == *name)
            {
                Some(s) => chosen.push(*s),
                None => {
                    let known: Vec<String> = all.iter().map(name_of).collect();
                    return Err(err(format!(
                        "tlsEnabledCipherSuites: {name:?} is not supported; supported: {}",
                        known.join(", ")
                    )));
                }
            }
        }
        provider.cipher_suites = chosen;
    }
    Ok(Arc::new(provider))
}

/// Reads a file, saying which one and what a keystore that is not PEM should become.
fn read_pem_file(path: &Path, what: &str) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| {
        err(format!(
            "cannot read the TLS {what} {}: {e}",
            path.display()
        ))
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        let kind = if bytes.starts_with(&[0xfe, 0xed, 0xfe, 0xed]) {
            "a JKS keystore"
        } else if bytes.first() == Some(&0x30) {
            "DER (PKCS12 or a DER certificate)"
        } else {
            "not PEM"
        };
        return Err(err(format!(
            "the TLS {what} {} is {kind}: Folio reads PEM files only; convert it to PEM \
             (keytool -importkeystore -deststoretype PKCS12, then openssl pkcs12 -nodes)",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Every certificate of a PEM file (at least one).
pub fn load_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem_file(path, what)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            err(format!(
                "invalid PEM in the TLS {what} {}: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(err(format!(
            "the TLS {what} {} holds no CERTIFICATE",
            path.display()
        )));
    }
    Ok(certs)
}

/// A CA bundle as a root store.
pub fn load_roots(path: &Path, what: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path, what)? {
        roots.add(cert).map_err(|e| {
            err(format!(
                "unusable CA certificate in {}: {e}",
                path.display()
            ))
        })?;
    }
    Ok(roots)
}

fn build(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider(settings)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&settings.protocols)
        .map_err(|e| err(format!("tlsEnabledProtocols / tlsEnabledCipherSuites: {e}")))?;
    let builder = match (&settings.trust, settings.client_auth) {
        (Some(trust), true) => {
            let roots = load_roots(trust, "trust store (tlsTrustStore)")?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| err(format!("tlsTrustStore {}: {e}", trust.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let chain = load_certs(&settings.chain, "certificate chain (tlsCertificatePath)")?;
    let key = load_key(&settings.key, settings.key_password.as_deref())?;
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        err(format!(
            "tlsKeyStore {} and tlsCertificatePath {} do not make a usable certificate: {e}",
            settings.key.display(),
            settings.chain.display()
        ))
    })?;
    Ok(Arc::new(config))
}

/// What the files held when last read (compared to notice a rotation).
fn fingerprint(settings: &TlsSettings) -> Vec<Option<Vec<u8>>> {
    settings
        .files()
        .iter()
        .map(|p| std::fs::read(p).ok())
        .collect()
}

struct Loaded {
    config: Arc<ServerConfig>,
    /// The files' contents the last time they were tried (loaded or refused).
    tried: Vec<Option<Vec<u8>>>,
    checked: Instant,
}

/// The bookie's TLS: settings plus the configuration in force.
pub struct ServerTls {
    settings: TlsSettings,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// The admin endpoint's HTTPS (`http_tls_key_file`, `http_tls_certificate_file`): no client
    /// certificates, both protocol versions, reloaded as the bookie port's files are.
    pub fn for_admin_http(config: &BookieConfig) -> Result<Option<ServerTls>, TlsError> {
        let (Some(key), Some(chain)) =
            (&config.http_tls_key_file, &config.http_tls_certificate_file)
        else {
            return Ok(None);
        };
        let settings = TlsSettings {
            key: key.clone(),
            key_password: None,
            chain: chain.clone(),
            trust: None,
            client_auth: false,
            protocols: parse_protocols(&None)?,
            cipher_suites: None,
            refresh: (config.tls_cert_files_refresh_duration_seconds > 0)
                .then(|| Duration::from_secs(config.tls_cert_files_refresh_duration_seconds)),
            start_tls_timeout: Duration::from_secs(config.start_tls_timeout_secs.max(1)),
            authz: None,
        };
        ServerTls::load(settings).map(Some).map_err(|e| {
            err(format!(
                "admin HTTP (http_tls_key_file, http_tls_certificate_file): {e}"
            ))
        })
    }

    /// Reads the files; every problem is an error naming the key or file.
    pub fn load(settings: TlsSettings) -> Result<ServerTls, TlsError> {
        let tried = fingerprint(&settings);
        let config = build(&settings)?;
        Ok(ServerTls {
            loaded: Mutex::new(Loaded {
                config,
                tried,
                checked: Instant::now(),
            }),
            settings,
        })
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// With `tlsClientAuthentication`, nothing but StartTLS is served in plaintext.
    pub fn required(&self) -> bool {
        self.settings.client_auth
    }

    /// The configuration for a new handshake, reloaded first if the files changed.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let mut loaded = self.loaded.lock();
        if let Some(every) = self.settings.refresh
            && loaded.checked.elapsed() >= every
        {
            loaded.checked = Instant::now();
            let now = fingerprint(&self.settings);
            if now != loaded.tried {
                loaded.tried = now;
                match build(&self.settings) {
                    Ok(config) => {
                        info!(
                            chain = %self.settings.chain.display(),
                            "TLS certificate files changed: reloaded"
                        );
                        loaded.config = config;
                    }
                    Err(e) => warn!(
                        "TLS certificate files changed but cannot be used, keeping the previous ones: {e}"
                    ),
                }
            }
        }
        tokio_rustls::TlsAcceptor::from(loaded.config.clone())
    }

    /// What a connection whose handshake finished with `peer` (the client's chain, leaf
    /// first, as the verifier accepted it) may do.
    pub fn authorize(&self, peer: Option<&[CertificateDer<'_>]>) -> Access {
        let Some(authz) = &self.settings.authz else {
            return Access::Open;
        };
        let Some(leaf) = peer.and_then(|c| c.first()) else {
            return Access::Refused("no client certificate".into());
        };
        let roles = match roles_of_certificate(leaf) {
            Ok(r) => r,
            Err(e) => return Access::Refused(format!("client certificate: {e}").into()),
        };
        if !authz.connection.is_empty() && !intersects(&roles, &authz.connection) {
            return Access::Refused(
                format!(
                    "client certificate roles {roles:?} include none of authorizedRoles {:?}",
                    authz.connection
                )
                .into(),
            );
        }
        Access::Roles {
            authz: authz.clone(),
            roles: roles.into(),
        }
    }
}

fn intersects(a: &[String], b: &[String]) -> bool {
    a.iter().any(|r| b.contains(r))
}

/// The roles of a certificate: BookKeeper's OU convention. The subject's first OU holds
/// `;`-separated `code:value` parts; code `0` is a `,`-separated role list (`1` names a cluster,
/// unused here). Example: `OU=0:reader,writer;1:prod`.
pub fn roles_of_certificate(der: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| format!("cannot parse: {e}"))?;
    let ou = cert
        .subject()
        .iter_organizational_unit()
        .next()
        .map(|a| a.as_str().map(str::to_string))
        .transpose()
        .map_err(|e| format!("OU is not a string: {e}"))?;
    Ok(ou.map(|ou| roles_of_ou(&ou)).unwrap_or_default())
}

/// The role list of an OU string in BookKeeper's convention (see [`roles_of_certificate`]).
pub fn roles_of_ou(ou: &str) -> Vec<String> {
    // As BookKeeper's map of codes: a later `0:` part wins over an earlier one.
    ou.split(';')
        .filter_map(|part| part.split_once(':'))
        .rfind(|(code, _)| code.trim() == "0")
        .map(|(_, value)| split_list(value))
        .unwrap_or_default()
}

/// What a connection may do.
#[derive(Debug, Clone)]
pub enum Access {
    /// Everything (no authorization configured).
    Open,
    /// Nothing: the first request is answered EUA and the connection closes. Says why.
    Refused(Arc<str>),
    /// A client certificate with these roles passed the connection check; each request is
    /// checked against its kind's roles.
    Roles {
        authz: Arc<Authz>,
        roles: Arc<[String]>,
    },
}

/// The kinds of operation that per-operation roles tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Reads, LAC reads, long polls, entry lists.
    Read,
    /// Adds, explicit LAC writes, force.
    Write,
    /// Fencing reads and recovery adds: what recovery and autorecovery do, and what can stop
    /// a writer.
    Recovery,
    /// Bookie info, auth and StartTLS: anyone admitted.
    Any,
}

/// The kind of a request.
pub fn op_kind(request: &Request) -> OpKind {
    match request {
        Request::Add(a) if a.recovery => OpKind::Recovery,
        // A write close is the writer's (recovery's fencing read marks the rotation itself).
        Request::Add(_)
        | Request::WriteLac { .. }
        | Request::ForceLedger { .. }
        | Request::WriteClose { .. } => OpKind::Write,
        Request::Read(r) if r.fence => OpKind::Recovery,
        Request::BatchRead { fence: true, .. } => OpKind::Recovery,
        Request::Read(_)
        | Request::BatchRead { .. }
        | Request::ReadLac { .. }
        | Request::GetListOfEntriesOfLedger { .. } => OpKind::Read,
        Request::GetBookieInfo { .. } | Request::Auth(_) | Request::StartTls => OpKind::Any,
    }
}

/// The decision on one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Answer EUA; the connection goes on.
    Deny(String),
    /// Answer EUA and close the connection.
    DenyAndClose(String),
}

impl Access {
    pub fn check(&self, request: &Request) -> Verdict {
        match self {
            Access::Open => Verdict::Allow,
            Access::Refused(why) => Verdict::DenyAndClose(why.to_string()),
            Access::Roles { authz, roles } => {
                let (kind, needed) = match op_kind(request) {
                    OpKind::Any => return Verdict::Allow,
                    OpKind::Read => ("authorizedReadRoles", &authz.read),
                    OpKind::Write => ("authorizedWriteRoles", &authz.write),
                    OpKind::Recovery => ("authorizedRecoveryRoles", &authz.recovery),
                };
                if needed.is_empty() || intersects(roles, needed) {
                    Verdict::Allow
                } else {
                    Verdict::Deny(format!(
                        "{} needs a role of {kind} {needed:?}; the certificate has {roles:?}",
                        crate::wire::op_name(request)
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{AddRequest, ReadRequest};
    use bytes::Bytes;

    #[test]
    fn ou_roles_follow_bookkeeper() {
        assert_eq!(roles_of_ou("0:reader, writer;1:prod"), ["reader", "writer"]);
        assert_eq!(roles_of_ou("1:prod;0:admin"), ["admin"]);
        assert!(roles_of_ou("admin").is_empty());
        assert!(roles_of_ou("").is_empty());
        assert!(roles_of_ou("00:admin").is_empty());
        assert_eq!(roles_of_ou("0:a;0:b"), ["b"]);
    }

    fn base() -> BookieConfig {
        BookieConfig {
            data_dir: Some("/d".into()),
            tls_provider_factory_class: Some("org.apache.bookkeeper.tls.TLSContextFactory".into()),
            tls_key_store: Some("/k.pem".into()),
            tls_certificate_path: Some("/c.pem".into()),
            ..BookieConfig::default()
        }
    }

    #[test]
    fn settings_refuse_what_cannot_work() {
        assert!(
            TlsSettings::from_config(&BookieConfig::default())
                .unwrap()
                .is_none()
        );
        let s = TlsSettings::from_config(&base()).unwrap().unwrap();
        assert_eq!(s.protocols.len(), 2);
        assert_eq!(s.start_tls_timeout, Duration::from_secs(10));
        for (bad, needle) in [
            (
                BookieConfig {
                    tls_key_store_type: Some("JKS".into()),
                    ..base()
                },
                "convert",
            ),
            (
                BookieConfig {
                    tls_trust_store_type: Some("PKCS12".into()),
                    ..base()
                },
                "PEM",
            ),
            (
                BookieConfig {
                    tls_key_store: None,
                    ..base()
                },
                "tlsKeyStore",
            ),
            (
                BookieConfig {
                    tls_client_authentication: true,
                    ..base()
                },
                "tlsTrustStore",
            ),
            (
                BookieConfig {
                    authorized_roles: vec!["a".into()],
                    ..base()
                },
                "tlsClientAuthentication",
            ),
            (
                BookieConfig {
                    tls_enabled_protocols: Some("TLSv1.1".into()),
                    ..base()
                },
                "TLSv1.1",
            ),
            (
                BookieConfig {
                    tls_enabled_cipher_suites: Some("TLS_RSA_WITH_RC4".into()),
                    ..base()
                },
                "TLS_RSA_WITH_RC4",
            ),
            (
                BookieConfig {
                    authorized_roles: vec!["a".into()],
                    tls_provider_factory_class: None,
                    ..base()
                },
                "need TLS",
            ),
        ] {
            let e = TlsSettings::from_config(&bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{needle}: {e}");
        }
        let s = TlsSettings::from_config(&BookieConfig {
            tls_enabled_cipher_suites: Some(
                "TLS_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".into(),
            ),
            tls_enabled_protocols: Some("TLSv1.3".into()),
            ..base()
        })
        .unwrap()
        .unwrap();
        assert_eq!(provider(&s).unwrap().cipher_suites.len(), 2);
    }

    #[test]
    fn per_operation_roles() {
        let authz = Arc::new(Authz {
            connection: vec!["svc".into()],
            read: vec!["reader".into()],
            write: vec!["writer".into()],
            recovery: vec!["recover".into()],
        });
        let access = Access::Roles {
            authz,
            roles: vec!["svc".to_string(), "reader".to_string()].into(),
        };
        let read = Request::Read(ReadRequest::entry(1, 0));
        let fence = Request::Read(ReadRequest {
            fence: true,
            master_key: Some(Bytes::new()),
            ..ReadRequest::entry(1, 0)
        });
        let add = Request::Add(AddRequest {
            ledger: 1,
            entry: 0,
            master_key: Bytes::new(),
            body: Bytes::new(),
            recovery: false,
            high_priority: false,
            deferred_sync: false,
        });
        assert_eq!(access.check(&read), Verdict::Allow);
        assert!(matches!(access.check(&fence), Verdict::Deny(_)));
        assert!(matches!(access.check(&add), Verdict::Deny(_)));
        assert_eq!(
            access.check(&Request::GetBookieInfo { requested: 0 }),
            Verdict::Allow
        );
        assert!(matches!(
            Access::Refused("x".into()).check(&read),
            Verdict::DenyAndClose(_)
        ));
    }
}
