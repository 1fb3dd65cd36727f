//! The bookie port: a tokio TCP server that moves frames between sockets and the processor.
//!
//! Per connection, a reader decodes frames (v3 or v2, per frame) and hands each request to the
//! processor; responses are written as they complete, in whatever order that is (clients match
//! them by txn id or by ledger and entry): the answers a journal group completes by the journal
//! thread, one write per connection, the rest by the connection's writer task, which batches
//! whatever is ready into one flush (`responder`). Bounds: a frame larger than
//! `max_frame_size` closes the connection (one log line); at most
//! `max_pending_per_connection` requests of a connection are unanswered at once, beyond which
//! the reader stops reading the socket until responses drain (TCP backpressure reaches the
//! client); at most `max_connections` connections are served, further ones are closed at accept.
//! Input that is not a request closes only its own connection and touches nothing stored.
//!
//! With TLS ([`ServerConfig::tls`]), a connection's first request may be StartTLS: it is
//! answered in plaintext, the same socket then runs the TLS handshake (bounded by
//! `start_tls_timeout`), and the connection is served over TLS with what its client
//! certificate allows ([`crate::tls::Access`]). When TLS is required (client
//! authentication), any other first request gets EUA and the connection closes.
//!
//! A connection's long polls are bounded and released when it closes
//! ([`crate::processor::Connection`]).
//!
//! Shutdown ([`ServerHandle::shutdown`]): stop accepting, stop reading, answer waiting long polls,
//! write every pending response, close. The caller then shuts the storage down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::processor::{ConnectionId, LongPollTimer, Processor, Reply};
use crate::read_pool::ReadPool;
use crate::request::{Request, Response, Status};
use crate::request_metrics::RequestMetrics;
use crate::responder::{self, Outgoing, Socket};
use crate::storage::BookieStorage;
use crate::tls::{Access, ServerTls, Verdict};
use crate::wire::{self, Decoded};

/// Limits of the bookie port.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest frame accepted, length prefix included (BookKeeper's `nettyMaxFrameSizeBytes`).
    pub max_frame_size: usize,
    /// Connections served at once.
    pub max_connections: usize,
    /// Unanswered requests per connection before the reader pauses.
    pub max_pending_per_connection: usize,
    /// Threads serving reads (BookKeeper's `numReadWorkerThreads`).
    pub read_threads: usize,
    /// How long shutdown waits for pending responses to be written before it closes the
    /// remaining connections anyway (a client that stops reading must not hang shutdown).
    pub drain_timeout: Duration,
    /// StartTLS and authorization by client certificate ([`crate::tls`]); `None`: StartTLS is
    /// answered EBADREQ, as by a BookKeeper bookie without TLS.
    pub tls: Option<Arc<ServerTls>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_frame_size: folio_proto::DEFAULT_MAX_FRAME_SIZE,
            max_connections: 4096,
            max_pending_per_connection: 1000,
            read_threads: 8,
            drain_timeout: Duration::from_secs(30),
            tls: None,
        }
    }
}

/// A bound listener, not yet serving.
pub struct BookieServer<S: BookieStorage> {
    listener: TcpListener,
    processor: Processor<S>,
    config: ServerConfig,
}

impl<S: BookieStorage> BookieServer<S> {
    /// Binds the bookie port (port 0: an ephemeral port, see [`BookieServer::local_addr`]).
    pub async fn bind(
        addr: impl ToSocketAddrs,
        processor: Processor<S>,
        config: ServerConfig,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(BookieServer {
            listener,
            processor,
            config,
        })
    }

    /// Serves on a listener bound by the caller (who needed its port first).
    pub fn from_listener(
        listener: TcpListener,
        processor: Processor<S>,
        config: ServerConfig,
    ) -> Self {
        BookieServer {
            listener,
            processor,
            config,
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Starts serving on the current tokio runtime.
    ///
    /// # Panics
    /// If the read threads cannot be started (the process is out of threads at start-up).
    pub fn start(self) -> ServerHandle {
        let local_addr = self.local_addr();
        let reads = ReadPool::new(self.config.read_threads).expect("cannot start the read threads");
        let pool = reads.clone();
        self.processor
            .set_offload(Arc::new(move |job| pool.execute(job)));
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(
            self.listener,
            self.processor,
            reads,
            Arc::new(self.config),
            shutdown_rx,
        ));
        info!(%local_addr, "bookie port listening");
        ServerHandle {
            local_addr,
            shutdown: shutdown_tx,
            task,
        }
    }
}

/// A running server.
pub struct ServerHandle {
    local_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ServerHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and reading, drains every pending response, and returns once every
    /// connection is closed.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        if let Err(e) = self.task.await {
            warn!("bookie port task ended abnormally: {e}");
        }
    }
}

async fn accept_loop<S: BookieStorage>(
    listener: TcpListener,
    processor: Processor<S>,
    reads: ReadPool,
    config: Arc<ServerConfig>,
    mut shutdown: watch::Receiver<bool>,
) {
    // One set of per-request metric handles for the server's connections.
    let request_metrics = Arc::new(RequestMetrics::default());
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            warn!(%peer, "refusing connection: {} connections already open", config.max_connections);
            drop(stream);
            continue;
        };
        metrics::counter!("folio_bookie_connections_total").increment(1);
        let conn = Conn {
            peer,
            processor: processor.clone(),
            reads: reads.clone(),
            config: config.clone(),
            request_metrics: request_metrics.clone(),
        };
        connections.spawn(serve_connection(stream, conn, shutdown.clone(), slot));
    }
    drop(listener);
    // Drain: connections stop reading at once; long polls are answered now rather than at
    // their timeout (and again as they come, since a connection may register one late).
    let deadline = tokio::time::Instant::now() + config.drain_timeout;
    loop {
        processor.expire_all_long_polls();
        if connections.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            warn!(
                "closing {} connections with responses still pending after {:?}",
                connections.len(),
                config.drain_timeout
            );
            connections.abort_all();
            while connections.join_next().await.is_some() {}
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), connections.join_next()).await;
    }
    info!("bookie port closed");
}

/// Counts the connection out however its task ends (even aborted).
struct ConnectionGauge;

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        metrics::gauge!("folio_bookie_connections").decrement(1.0);
    }
}

async fn serve_connection<S: BookieStorage>(
    stream: TcpStream,
    conn: Conn<S>,
    mut shutdown: watch::Receiver<bool>,
    _connection_slot: OwnedSemaphorePermit,
) {
    metrics::gauge!("folio_bookie_connections").increment(1.0);
    let _open = ConnectionGauge;
    let (peer, config) = (conn.peer, conn.config.clone());
    debug!(%peer, "connection opened");
    let _ = stream.set_nodelay(true);
    match &config.tls {
        None => {
            let (rd, wr) = stream.into_split();
            let decoder = folio_proto::FrameDecoder::with_max_frame_size(config.max_frame_size);
            conn.serve(rd, Socket::Plain(wr), decoder, None, Access::Open, shutdown)
                .await;
        }
        Some(tls) => match start_tls(stream, peer, tls, &config, &mut shutdown).await {
            Upgrade::Tls(stream, access) => {
                let (rd, wr) = tokio::io::split(*stream);
                let decoder = folio_proto::FrameDecoder::with_max_frame_size(config.max_frame_size);
                conn.serve(
                    rd,
                    Socket::Tls(Box::new(wr)),
                    decoder,
                    None,
                    access,
                    shutdown,
                )
                .await;
            }
            Upgrade::Plain(stream, decoder, first) => {
                let (rd, wr) = stream.into_split();
                conn.serve(
                    rd,
                    Socket::Plain(wr),
                    decoder,
                    Some(first),
                    Access::Open,
                    shutdown,
                )
                .await;
            }
            Upgrade::Closed => {}
        },
    }
    debug!(%peer, "connection closed");
}

/// How a connection of a TLS bookie goes on after its first request.
enum Upgrade {
    /// StartTLS done: TLS from here, with what the client certificate allows.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>, Access),
    /// A plaintext client (TLS is optional): serve it, starting with the frame already read.
    Plain(TcpStream, folio_proto::FrameDecoder, Bytes),
    Closed,
}

/// Frames before TLS are bounded tighter when TLS is required: only a StartTLS request (a
/// few bytes) is worth reading then, and a peer must not make the bookie buffer megabytes
/// before it has shown a certificate.
const PRE_TLS_MAX_FRAME: usize = 64 * 1024;

/// The first request of a connection to a TLS bookie: StartTLS upgrades the socket (answer
/// EOK in plaintext, then the handshake on the same socket, within `start_tls_timeout`);
/// anything else is served in plaintext, or, when TLS is required, answered EUA and closed.
async fn start_tls(
    mut stream: TcpStream,
    peer: SocketAddr,
    tls: &ServerTls,
    config: &ServerConfig,
    shutdown: &mut watch::Receiver<bool>,
) -> Upgrade {
    let timeout = tls.settings().start_tls_timeout;
    let required = tls.required();
    let max = if required {
        PRE_TLS_MAX_FRAME.min(config.max_frame_size)
    } else {
        config.max_frame_size
    };
    let mut decoder = folio_proto::FrameDecoder::with_max_frame_size(max);
    // With TLS required, the whole way from accept to a finished handshake has one deadline;
    // a plaintext client of an optional-TLS bookie may idle as on any bookie.
    let mut deadline = required.then(|| tokio::time::Instant::now() + timeout);
    let first = tokio::select! {
        first = until(deadline, read_frame(&mut stream, &mut decoder)) => first,
        _ = stopped(shutdown) => return Upgrade::Closed,
    };
    let frame = match first {
        None => {
            metrics::counter!("folio_bookie_tls_failures_total", "why" => "timeout").increment(1);
            warn!(%peer, "closing connection: no StartTLS within {timeout:?} (TLS is required)");
            return Upgrade::Closed;
        }
        Some(Ok(Some(frame))) => frame,
        Some(Ok(None)) => return Upgrade::Closed,
        Some(Err(e)) => {
            metrics::counter!("folio_bookie_bad_frames_total").increment(1);
            warn!(%peer, "closing connection: {e}");
            return Upgrade::Closed;
        }
    };
    let echo = match wire::decode(frame.clone()) {
        Decoded::Request(Request::StartTls, echo) => echo,
        Decoded::Request(request, echo) if required => {
            metrics::counter!("folio_bookie_tls_failures_total", "why" => "plaintext").increment(1);
            warn!(
                %peer,
                "refusing {} before TLS (tlsClientAuthentication: StartTLS first): EUA, closing",
                wire::op_name(&request)
            );
            let body = wire::encode(&echo, Response::error_for(&request, Status::Unauthorized));
            let _ = write_frame(&mut stream, &body).await;
            return Upgrade::Closed;
        }
        Decoded::Request(..) | Decoded::Answer(_) if !required => {
            return Upgrade::Plain(stream, decoder, frame);
        }
        Decoded::Request(..) | Decoded::Answer(_) => {
            warn!(%peer, "closing connection: a request other than StartTLS before TLS");
            return Upgrade::Closed;
        }
        Decoded::Close(why) => {
            metrics::counter!("folio_bookie_bad_frames_total").increment(1);
            warn!(%peer, "closing connection: {why}");
            return Upgrade::Closed;
        }
    };
    let ok = wire::encode(&echo, Response::StartTls { status: Status::Ok });
    if let Err(e) = write_frame(&mut stream, &ok).await {
        debug!(%peer, "write failed: {e}");
        return Upgrade::Closed;
    }
    // The client must wait for the answer before its ClientHello; bytes already here were
    // sent before it and would be read as TLS (or, worse, as requests of the TLS session).
    if decoder.buffered() > 0 {
        metrics::counter!("folio_bookie_tls_failures_total", "why" => "pipelined").increment(1);
        warn!(%peer, "closing connection: bytes sent after StartTLS before its answer");
        return Upgrade::Closed;
    }
    if deadline.is_none() {
        deadline = Some(tokio::time::Instant::now() + timeout);
    }
    let handshake = tokio::select! {
        h = until(deadline, tls.acceptor().accept(stream).into_fallible()) => h,
        _ = stopped(shutdown) => return Upgrade::Closed,
    };
    match handshake {
        None => {
            metrics::counter!("folio_bookie_tls_failures_total", "why" => "timeout").increment(1);
            warn!(%peer, "closing connection: TLS handshake not finished within {timeout:?}");
            Upgrade::Closed
        }
        Some(Err((e, stream))) => {
            metrics::counter!("folio_bookie_tls_failures_total", "why" => "handshake").increment(1);
            warn!(%peer, "closing connection: TLS handshake failed: {e}");
            linger_close(stream).await;
            Upgrade::Closed
        }
        Some(Ok(stream)) => {
            let access = tls.authorize(stream.get_ref().1.peer_certificates());
            metrics::counter!("folio_bookie_tls_connections_total").increment(1);
            debug!(%peer, ?access, "TLS established");
            Upgrade::Tls(Box::new(stream), access)
        }
    }
}

/// Closes a connection whose handshake failed so that the client reads the alert rustls
/// sent (unknown CA, certificate required): our side is shut first, then what the client
/// sent meanwhile is read and dropped until it closes too, for at most a second. Closing
/// with its bytes unread would answer them with a reset, and a reset discards the alert
/// from the client's buffer: it would see only "connection reset" (with TLS 1.3 a client
/// without a certificate has sent its first request before it learns it was refused).
async fn linger_close(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// `fut`, or `None` once `deadline` (if any) passes.
async fn until<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    fut: F,
) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, fut).await.ok(),
        None => Some(fut.await),
    }
}

/// Reads until one whole frame is buffered; `Ok(None)` at end of stream.
async fn read_frame(
    stream: &mut TcpStream,
    decoder: &mut folio_proto::FrameDecoder,
) -> Result<Option<Bytes>, String> {
    loop {
        if let Some(frame) = decoder.next_frame().map_err(|e| e.to_string())? {
            return Ok(Some(frame));
        }
        match stream.read_buf(&mut decoder.read_buf()).await {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
}

async fn write_frame(stream: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    stream.write_all(&out).await?;
    stream.flush().await
}

/// What serving one connection needs.
struct Conn<S: BookieStorage> {
    peer: SocketAddr,
    processor: Processor<S>,
    reads: ReadPool,
    config: Arc<ServerConfig>,
    request_metrics: Arc<RequestMetrics>,
}

impl<S: BookieStorage> Conn<S> {
    /// Serves requests over a plaintext or TLS stream until it closes or the server stops.
    /// `first` is a frame already read (by [`start_tls`]); `access` decides each request.
    async fn serve<R>(
        self,
        mut rd: R,
        socket: Socket,
        mut decoder: folio_proto::FrameDecoder,
        mut first: Option<Bytes>,
        access: Access,
        mut shutdown: watch::Receiver<bool>,
    ) where
        R: AsyncRead + Unpin,
    {
        let Conn {
            peer,
            processor,
            reads,
            config,
            request_metrics,
        } = self;
        // Dropped with this task (a shutdown past its drain timeout), the writer stops and
        // the connection's answers still pending are dropped.
        let (tx, mut writer) = responder::start(socket, peer, request_metrics.clone());
        let pending = Arc::new(Semaphore::new(config.max_pending_per_connection));
        // This connection's long polls: bounded, dropped when it closes.
        let polls = processor.connection();
        let conn_id = polls.id();
        'conn: loop {
            loop {
                let frame = match first.take() {
                    Some(frame) => frame,
                    None => match decoder.next_frame() {
                        Ok(Some(frame)) => frame,
                        Ok(None) => break,
                        Err(e) => {
                            metrics::counter!("folio_bookie_bad_frames_total").increment(1);
                            warn!(%peer, "closing connection: {e}");
                            break 'conn;
                        }
                    },
                };
                // Backpressure: without a free slot, stop reading until a response is written.
                let slot = tokio::select! {
                    slot = pending.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
                    _ = shutdown.wait_for(|stop| *stop) => break 'conn,
                };
                request_metrics.bytes_in(frame.len() as u64 + 4);
                match wire::decode(frame) {
                    Decoded::Request(request, echo) => match access.check(&request) {
                        Verdict::Allow => dispatch(
                            &processor,
                            conn_id,
                            &reads,
                            &shutdown,
                            request,
                            echo,
                            slot,
                            tx.clone(),
                            request_metrics.clone(),
                        ),
                        Verdict::Deny(why) => {
                            metrics::counter!("folio_bookie_unauthorized_total").increment(1);
                            debug!(%peer, "EUA: {why}");
                            let body = wire::encode(
                                &echo,
                                Response::error_for(&request, Status::Unauthorized),
                            );
                            tx.send(Outgoing::whole(body, slot));
                        }
                        Verdict::DenyAndClose(why) => {
                            metrics::counter!("folio_bookie_unauthorized_total").increment(1);
                            warn!(%peer, "EUA and closing connection: {why}");
                            let body = wire::encode(
                                &echo,
                                Response::error_for(&request, Status::Unauthorized),
                            );
                            tx.send(Outgoing::whole(body, slot));
                            break 'conn;
                        }
                    },
                    Decoded::Answer(body) => {
                        tx.send(Outgoing::whole(body, slot));
                        if matches!(access, Access::Refused(_)) {
                            break 'conn;
                        }
                    }
                    Decoded::Close(why) => {
                        metrics::counter!("folio_bookie_bad_frames_total").increment(1);
                        warn!(%peer, "closing connection: {why}");
                        break 'conn;
                    }
                }
            }
            // Straight into the decoder's buffer: a frame's bytes are never copied.
            let mut into = decoder.read_buf();
            tokio::select! {
                read = rd.read_buf(&mut into) => match read {
                    Ok(0) => break 'conn,
                    Ok(_) => {}
                    Err(e) => {
                        debug!(%peer, "read failed: {e}");
                        break 'conn;
                    }
                },
                _ = shutdown.wait_for(|stop| *stop) => break 'conn,
            }
        }
        // At shutdown the client is still there: its long polls get the current LAC. Otherwise
        // the client closed (or broke) the connection: its waiting long polls are dropped,
        // holding nothing (no timer answers into a dead socket).
        if *shutdown.borrow() {
            polls.answer_waiting();
        }
        drop(polls);
        // The writer ends once every pending reply has been sent (each holds a sender).
        drop(tx);
        writer.wait().await;
    }
}

/// Hands one request to the processor. Reads may block on disk, so they run on the read
/// threads, unless storage has the entry in memory or the page cache, or they are long polls
/// whose LAC storage knows in memory; writes only queue work for the journal and run inline.
#[allow(clippy::too_many_arguments)]
fn dispatch<S: BookieStorage>(
    processor: &Processor<S>,
    conn: ConnectionId,
    reads: &ReadPool,
    shutdown: &watch::Receiver<bool>,
    request: Request,
    echo: wire::Echo,
    slot: OwnedSemaphorePermit,
    tx: responder::Sender,
    request_metrics: Arc<RequestMetrics>,
) {
    let op = wire::op_index(&request);
    let started = Instant::now();
    let reply: Reply = Box::new(move |response| {
        request_metrics.done(op, response.status(), started.elapsed());
        let (body, tail) = wire::encode_pieces(&echo, response);
        tx.send(Outgoing::new(body, tail, slot));
    });
    let blocking = matches!(
        request,
        Request::Read(_)
            | Request::ReadLac { .. }
            | Request::GetListOfEntriesOfLedger { .. }
            | Request::BatchRead { .. }
    );
    if blocking {
        if let Some(response) = processor.read_without_blocking(&request) {
            reply(response);
            return;
        }
        let (request, reply) = match processor.long_poll_without_blocking(conn, request, reply) {
            Ok(timer) => {
                if let Some(timer) = timer {
                    let runtime = tokio::runtime::Handle::current();
                    schedule_expiry(
                        &runtime,
                        processor.clone(),
                        reads.clone(),
                        shutdown.clone(),
                        timer,
                    );
                }
                return;
            }
            Err(not_taken) => not_taken,
        };
        let p = processor.clone();
        let pool = reads.clone();
        let runtime = tokio::runtime::Handle::current();
        let shutdown = shutdown.clone();
        reads.execute(move || {
            if let Some(timer) = p.process_on(conn, request, reply) {
                schedule_expiry(&runtime, p, pool, shutdown, timer);
            }
        });
    } else if let Some(timer) = processor.process_on(conn, request, reply) {
        schedule_expiry(
            &tokio::runtime::Handle::current(),
            processor.clone(),
            reads.clone(),
            shutdown.clone(),
            timer,
        );
    }
}

/// Answers a waiting long poll when its timeout passes (on a read thread: it reads). Ends at
/// shutdown, which answers every long poll itself, so no timer keeps the storage alive.
fn schedule_expiry<S: BookieStorage>(
    runtime: &tokio::runtime::Handle,
    processor: Processor<S>,
    reads: ReadPool,
    mut shutdown: watch::Receiver<bool>,
    timer: LongPollTimer,
) {
    runtime.spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(timer.timeout) => {
                reads.execute(move || processor.expire_long_poll(timer.id));
            }
            _ = stopped(&mut shutdown) => {}
        }
    });
}

/// Resolves once the shutdown flag is set (the watch guard is not held across an await).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
