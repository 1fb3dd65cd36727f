//! TLS to bookies, BookKeeper's way: on a new connection the client sends a v3 START_TLS
//! request, waits for its EOK, and runs a rustls handshake on the same socket, so Folio and
//! BookKeeper bookies with TLS both work. Hostname verification is always on (RFC 2818 / 6125
//! through webpki: the bookie's certificate must name the host or IP address of its bookie id);
//! there is no switch to turn it off. Handshake failures are described by what went wrong with
//! the certificate (unknown CA, expired, another host), since the bare rustls error is terse.

use std::io;
use std::path::Path;
use std::sync::Arc;

use bytes::BytesMut;
use folio_proto::pb::{self, OperationType};
use folio_proto::tls_key::{KeyNames, decode_private_key};
use folio_proto::{FrameDecoder, Status, v3};
use folio_types::BookieId;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conn::Stream;

/// Why the TLS files could not be used. Names the file.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TlsConfigError(pub String);

fn err(msg: impl Into<String>) -> TlsConfigError {
    TlsConfigError(msg.into())
}

/// A client's TLS: the CA bundle bookie certificates must chain to, and optionally the
/// client's own certificate (for bookies with `tlsClientAuthentication`).
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field(
                "client_certificate",
                &self.config.client_auth_cert_resolver.has_certs(),
            )
            .finish()
    }
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, TlsConfigError> {
    let bytes = std::fs::read(path).map_err(|e| {
        err(format!(
            "cannot read the TLS {what} {}: {e}",
            path.display()
        ))
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(err(format!(
            "the TLS {what} {} is not PEM (a JKS or PKCS12 store must be converted to PEM)",
            path.display()
        )));
    }
    Ok(bytes)
}

fn certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let bytes = read_pem(path, what)?;
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

/// The client's own certificate, for bookies with `tlsClientAuthentication`: its chain, its
/// private key (PEM), and the file holding the key's password when the key is an encrypted
/// PKCS#8 key (BookKeeper's `clientKeyStorePasswordPath`; Folio's `--tls-key-password-file`).
#[derive(Debug, Clone, Copy)]
pub struct ClientCertFiles<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub key_password: Option<&'a Path>,
}

impl<'a> ClientCertFiles<'a> {
    /// A certificate and an unencrypted key.
    pub fn new(cert: &'a Path, key: &'a Path) -> Self {
        ClientCertFiles {
            cert,
            key,
            key_password: None,
        }
    }
}

/// The client key of `files`, decrypted with its password file when it is encrypted.
fn client_key(files: &ClientCertFiles<'_>) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    let bytes = read_pem(files.key, "client key")?;
    let decoded = decode_private_key(
        &bytes,
        KeyNames {
            key: files.key,
            password: files.key_password,
            password_setting: "--tls-key-password-file",
        },
        |p| std::fs::read(p),
    )
    .map_err(err)?;
    if decoded.password_unused {
        tracing::warn!(
            "--tls-key-password-file is given but the client key {} is not encrypted",
            files.key.display()
        );
    }
    Ok(decoded.key)
}

impl ClientTls {
    /// From PEM files: `ca` (one or more CA certificates), and the client's certificate chain
    /// and private key when the bookies require client certificates.
    pub fn from_pem_files(
        ca: &Path,
        client: Option<ClientCertFiles<'_>>,
    ) -> Result<ClientTls, TlsConfigError> {
        let mut roots = RootCertStore::empty();
        for c in certs(ca, "CA file")? {
            roots
                .add(c)
                .map_err(|e| err(format!("unusable CA certificate in {}: {e}", ca.display())))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| err(e.to_string()))?
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some(files) => {
                let chain = certs(files.cert, "client certificate")?;
                let key = client_key(&files)?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    err(format!(
                        "client certificate {} and key do not go together: {e}",
                        files.cert.display()
                    ))
                })?
            }
        };
        Ok(ClientTls {
            config: Arc::new(config),
        })
    }

    /// StartTLS on a fresh connection to `bookie`, then the handshake. The caller bounds the
    /// time (the connect timeout).
    pub async fn upgrade(
        &self,
        mut stream: Box<dyn Stream>,
        bookie: &BookieId,
    ) -> io::Result<Box<dyn Stream>> {
        let host = host_of(bookie);
        let name = ServerName::try_from(host.to_string()).map_err(|_| {
            io::Error::other(format!(
                "bookie id {bookie} has no host name or IP address to verify its certificate against"
            ))
        })?;
        let request = pb::Request {
            header: v3::request_header(OperationType::StartTls, 0, None),
            start_tls_request: Some(pb::StartTlsRequest {}),
            ..Default::default()
        };
        let mut out = BytesMut::new();
        v3::encode_request_frame(&request, &mut out);
        stream.write_all(&out).await?;
        stream.flush().await?;
        let mut decoder = FrameDecoder::with_max_frame_size(64 * 1024);
        let frame = loop {
            if let Some(f) = decoder.next_frame().map_err(io::Error::other)? {
                break f;
            }
            if stream.read_buf(&mut decoder.read_buf()).await? == 0 {
                return Err(io::Error::other(
                    "the bookie closed the connection instead of answering StartTLS",
                ));
            }
        };
        let response = v3::decode_response(frame)
            .map_err(|e| io::Error::other(format!("undecodable StartTLS answer: {e}")))?;
        let status = Status::from_v3_value(response.status).map_err(io::Error::other)?;
        if response.header.operation != OperationType::StartTls as i32 {
            return Err(io::Error::other(
                "the bookie answered StartTLS with another operation",
            ));
        }
        match status {
            Status::Ok => {}
            Status::BadRequest => {
                return Err(io::Error::other(
                    "the bookie does not offer TLS (StartTLS answered EBADREQ)",
                ));
            }
            other => {
                return Err(io::Error::other(format!("StartTLS answered {other}")));
            }
        }
        if decoder.buffered() > 0 {
            return Err(io::Error::other(
                "the bookie sent bytes after its StartTLS answer",
            ));
        }
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        match connector.connect(name, stream).await {
            Ok(tls) => Ok(Box::new(tls)),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("TLS handshake failed: {}", describe(&e, host)),
            )),
        }
    }
}

/// The host part of a `host:port` bookie id (IPv6 brackets removed).
fn host_of(bookie: &BookieId) -> &str {
    let s = bookie.as_str();
    let host = match s.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => s,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A TLS error in words: what is wrong with which certificate (`host`: the name verified).
/// Other I/O errors are shown as they are.
pub(crate) fn describe(e: &io::Error, host: &str) -> String {
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return e.to_string();
    };
    use rustls::AlertDescription as A;
    match tls {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => format!(
                "unknown CA: the bookie's certificate is not signed by a CA of the trust file ({tls})"
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("the bookie's certificate has expired ({tls})")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("the bookie's certificate is not valid yet ({tls})")
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("wrong host: the bookie's certificate is not valid for {host} ({tls})")
            }
            _ => format!("the bookie's certificate is not acceptable ({tls})"),
        },
        rustls::Error::AlertReceived(
            a @ (A::CertificateRequired
            | A::BadCertificate
            | A::UnknownCA
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::AccessDenied),
        ) => format!(
            "the bookie refused this client's certificate (or its absence): alert {a:?}; \
             it requires a client certificate signed by a CA it trusts (--tls-cert, --tls-key)"
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_bookie_ids() {
        let h = |s: &str| host_of(&BookieId::new(s).unwrap()).to_string();
        assert_eq!(h("bookie-1.example:3181"), "bookie-1.example");
        assert_eq!(h("127.0.0.1:3181"), "127.0.0.1");
    }

    #[test]
    fn missing_and_non_pem_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = ClientTls::from_pem_files(&dir.path().join("nope.pem"), None).unwrap_err();
        assert!(e.0.contains("nope.pem"), "{e}");
        let jks = dir.path().join("store.jks");
        std::fs::write(&jks, [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2]).unwrap();
        let e = ClientTls::from_pem_files(&jks, None).unwrap_err();
        assert!(e.0.contains("not PEM"), "{e}");
    }
}
