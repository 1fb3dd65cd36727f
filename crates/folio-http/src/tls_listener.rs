//! HTTPS for the admin endpoint: a listener that hands axum finished TLS connections, with
//! the handshakes bounded in number and in time.

use std::net::SocketAddr;
use std::sync::Arc;

use folio_bookie::tls::ServerTls;
use tracing::warn;

/// At most this many TLS handshakes of the admin endpoint run at once; further connections
/// are closed at accept (a peer cannot hold unbounded handshakes).
const MAX_HANDSHAKES: usize = 256;

/// Hands finished TLS connections to axum. Handshakes run on their own tasks, bounded in
/// number and in time, so a slow or silent peer delays nobody's accept.
pub(crate) struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

type TlsStream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

impl TlsListener {
    pub(crate) fn start(
        listener: tokio::net::TcpListener,
        tls: Arc<ServerTls>,
        local: SocketAddr,
    ) -> TlsListener {
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let accepting = tokio::spawn(async move {
            let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
            let timeout = tls.settings().start_tls_timeout;
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(a) => a,
                    Err(e) => {
                        warn!("admin HTTPS accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    warn!(%peer, "admin HTTPS: {MAX_HANDSHAKES} handshakes running, closing");
                    continue;
                };
                let acceptor = tls.acceptor();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "admin HTTPS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "admin HTTPS handshake timed out"),
                    }
                });
            }
        });
        TlsListener {
            ready,
            local,
            accepting,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accepting task ended (aborted): nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
