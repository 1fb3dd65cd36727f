//! Asking other bookies' admin endpoints (the dashboard's cluster page, `list_bookie_info`):
//! each bookie publishes its endpoint in its service info (`http` endpoint, protocol `http`
//! or `https`); one `GET` over HTTP/1.1 within [`PEER_TIMEOUT`], over TLS for an `https`
//! endpoint. HTTPS peers are verified against the CA bundle this endpoint is configured to
//! trust (`http_tls_ca_file`, else the bookie port's `tlsTrustStore`; `--tls-ca` for
//! `folio autorecovery`), host name included, as the client verifies bookies; with no CA
//! configured the row says what to set.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use folio_types::BookieId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::rustls;

use crate::bk_api::with_store;
use crate::server::AdminState;

/// How long asking another bookie's admin endpoint may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// Another bookie's published admin endpoint.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub host: String,
    pub port: u16,
    pub https: bool,
}

/// The TLS client that reads HTTPS peers: trusts the PEM CA bundle `ca` only.
pub(crate) fn peer_connector(ca: &Path) -> Result<tokio_rustls::TlsConnector, String> {
    let roots = folio_bookie::tls::load_roots(ca, "the CA bundle for peers' HTTPS endpoints")
        .map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS for peers' HTTPS endpoints: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The admin endpoint `bookie` publishes.
pub(crate) async fn peer_endpoint(s: &AdminState, bookie: &BookieId) -> Result<Peer, String> {
    let b = bookie.clone();
    match with_store(s, |st| async move { st.bookie_service_info(&b).await }).await {
        Ok(service) => match service.endpoints.iter().find(|e| e.id == "http") {
            Some(ep) => Ok(Peer {
                host: ep.host.clone(),
                port: ep.port,
                https: ep.protocol == "https",
            }),
            None => Err("the bookie publishes no admin endpoint".into()),
        },
        Err(_) => Err("the bookie's service info is unreadable".into()),
    }
}

/// `GET path` of `peer`, as JSON, within [`PEER_TIMEOUT`].
pub(crate) async fn peer_get(
    s: &AdminState,
    peer: &Peer,
    path: &str,
) -> Result<serde_json::Value, String> {
    tokio::time::timeout(PEER_TIMEOUT, ask_peer(s, peer, path))
        .await
        .map_err(|_| format!("no answer within {} s", PEER_TIMEOUT.as_secs()))?
}

async fn ask_peer(s: &AdminState, peer: &Peer, path: &str) -> Result<serde_json::Value, String> {
    let (host, port) = (peer.host.as_str(), peer.port);
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    if !peer.https {
        return exchange(tcp, host, port, path).await;
    }
    let Some(tls) = &s.peer_tls else {
        // A bookie's endpoint takes the CA from its config, `folio autorecovery` from --tls-ca.
        let what = if s.storage.is_some() {
            "set http_tls_ca_file (or tlsTrustStore)"
        } else {
            "start this process with --tls-ca"
        };
        return Err(format!(
            "its admin endpoint {host}:{port} is HTTPS and this endpoint trusts no CA for it: \
             {what} to the CA bundle that signed it"
        ));
    };
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| format!("{host:?} is not a host name or IP address"))?;
    let stream = tls
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS with {host}:{port}: {e}"))?;
    exchange(stream, host, port, path).await
}

/// One request on `conn` and its JSON answer (200 only).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    host: &str,
    port: u16,
    path: &str,
) -> Result<serde_json::Value, String> {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // A TLS peer that closes without close_notify still sent the whole answer first.
    if let Err(e) = conn.read_to_end(&mut response).await
        && (response.is_empty() || e.kind() != std::io::ErrorKind::UnexpectedEof)
    {
        return Err(e.to_string());
    }
    let text = String::from_utf8_lossy(&response);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err("malformed HTTP response".into());
    };
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or_default();
        return Err(format!("{path} answered {status}: {}", body.trim()));
    }
    serde_json::from_str(body.trim()).map_err(|e| format!("malformed JSON: {e}"))
}
