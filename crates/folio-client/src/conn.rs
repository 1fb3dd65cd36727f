//! Connections to bookies: one pooled v3 connection per bookie, requests matched to
//! responses by txn id, reconnection with backoff.
//!
//! This is the only place that moves bytes. A connection has a writer task (frames from
//! a queue to the socket, so concurrent requests never interleave bytes) and a reader
//! task (frames from the socket to the waiting request). When either side fails, every
//! request waiting on that connection fails at once with the cause, and the next request
//! reconnects, unless the last attempt failed less than the backoff ago, in which case it
//! fails immediately: a dead bookie costs one connect timeout, not one per request.
//! With [`ClientConfig::tls`], every new connection first upgrades with StartTLS
//! ([`crate::tls`]).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use bytes::{Buf, Bytes};
use folio_proto::pb::{self, OperationType};
use folio_proto::{FrameDecoder, Status, v3};
use folio_types::BookieId;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::ClientConfig;

/// A byte stream to a bookie.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + std::any::Any + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

type ReadHalf = Box<dyn AsyncRead + Unpin + Send>;
type WriteHalf = Box<dyn AsyncWrite + Unpin + Send>;

/// The stream's reading and writing halves. A plain TCP stream splits into halves that
/// share nothing; any other (TLS, the simulator's) into halves that share it behind a
/// lock, which the writer holds for each write: the connection's reader waited on it,
/// and both woke each other (1-2% of a catch-up reader's CPU).
fn split(stream: Box<dyn Stream>) -> (ReadHalf, WriteHalf) {
    use std::any::Any;
    if (&*stream as &dyn Any).is::<tokio::net::TcpStream>() {
        let any: Box<dyn Any> = stream;
        let tcp = any
            .downcast::<tokio::net::TcpStream>()
            .expect("the type was checked above");
        let (rd, wr) = tcp.into_split();
        return (Box::new(rd), Box::new(wr));
    }
    let (rd, wr) = tokio::io::split(stream);
    (Box::new(rd), Box::new(wr))
}

/// A future returned by [`Connector::connect`].
pub type ConnectFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send + 'a>>;

/// How the client reaches a bookie: the network seam (a simulator plugs in its own).
pub trait Connector: Send + Sync + 'static {
    fn connect<'a>(&'a self, bookie: &'a BookieId) -> ConnectFuture<'a>;
}

/// TCP to the bookie id read as `host:port` (BookKeeper's legacy address resolution).
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    fn connect<'a>(&'a self, bookie: &'a BookieId) -> ConnectFuture<'a> {
        Box::pin(async move {
            let s = tokio::net::TcpStream::connect(bookie.as_str()).await?;
            s.set_nodelay(true)?;
            Ok(Box::new(s) as Box<dyn Stream>)
        })
    }
}

/// Binds requests to one connection (see [`Bookies::call_pinned`]).
#[derive(Debug, Default)]
pub struct ConnectionPin(Mutex<Option<u64>>);

impl ConnectionPin {
    fn is_bound(&self) -> bool {
        self.0.lock().is_some()
    }

    fn check(&self, bookie: &BookieId, conn: u64) -> Result<(), RpcError> {
        match *self.0.lock() {
            Some(bound) if bound != conn => Err(Self::replaced(bookie)),
            _ => Ok(()),
        }
    }

    /// Binds to `conn` if unbound; an error if bound to another (it broke while the
    /// answer came on a new one).
    fn bind(&self, bookie: &BookieId, conn: u64) -> Result<(), RpcError> {
        let mut bound = self.0.lock();
        match *bound {
            Some(b) if b != conn => Err(Self::replaced(bookie)),
            _ => {
                *bound = Some(conn);
                Ok(())
            }
        }
    }

    fn replaced(bookie: &BookieId) -> RpcError {
        RpcError::Unreachable(format!(
            "the connection to {bookie} was replaced by another: what it acknowledged \
             without making durable may be lost (a restart loses it)"
        ))
    }
}

/// Why a request got no usable response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcError {
    /// The bookie answered with this (non-OK) status.
    Status(Status),
    /// No answer within the timeout.
    Timeout,
    /// The bookie cannot be reached, or the connection broke before the answer came.
    Unreachable(String),
    /// The answer could not be decoded or did not match the request.
    BadResponse(String),
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcError::Status(s) => write!(f, "status {s}"),
            RpcError::Timeout => f.write_str("timed out"),
            RpcError::Unreachable(r) => write!(f, "unreachable: {r}"),
            RpcError::BadResponse(r) => write!(f, "bad response: {r}"),
        }
    }
}

/// Who waits for a request's answer.
enum Waiter {
    /// A caller's future ([`Bookies::call`] and friends).
    Call(oneshot::Sender<Result<pb::Response, RpcError>>),
    /// A ledger writer's add, answered straight to the writer: no future, no channel and
    /// no timer per add and bookie (together about 15% of a writer's CPU).
    Add(AddRoute),
}

impl Waiter {
    /// Hands the waiter its outcome; `Unreachable` gives an add the means to be sent once
    /// more on a new connection, as a stale pooled connection gets in [`Bookies::call`].
    fn answer(self, txn: u64, outcome: Result<pb::Response, RpcError>) {
        match self {
            Waiter::Call(tx) => {
                let _ = tx.send(outcome);
            }
            Waiter::Add(route) => route.answer(txn, outcome),
        }
    }
}

/// Where the answers of a ledger writer's adds go ([`Bookies::start_add`]).
pub(crate) type AddAnswers = Arc<dyn AnswerSink>;

/// Takes the answers of routed adds, on whatever task learns them: a bookie's answer and
/// a timeout on the connection's reader and the sweeper, which hold no lock then; an
/// `Unreachable` (the connection torn down) wherever the last handle of the connection
/// was let go, locks of this module or of the writer included. So an implementation
/// must not block on a lock of its own, nor take this module's, for `Unreachable`
/// answers (`writer::Writer` takes those on a task of their own).
pub(crate) trait AnswerSink: Send + Sync {
    fn answer(self: Arc<Self>, answer: AddAnswer);
}

#[cfg(test)]
impl AnswerSink for tokio::sync::mpsc::UnboundedSender<AddAnswer> {
    fn answer(self: Arc<Self>, answer: AddAnswer) {
        let _ = self.send(answer);
    }
}

/// A bookie's answer to a routed add.
pub(crate) struct AddAnswer {
    pub entry: i64,
    pub bookie: BookieId,
    pub result: Result<(), RpcError>,
    /// With `Unreachable` from a connection that was pooled: the add, to send once more
    /// on a new connection with [`Bookies::finish`] (whose answer is final).
    pub retry: Option<Started>,
}

/// A routed add waiting on a connection.
struct AddRoute {
    answers: AddAnswers,
    entry: i64,
    bookie: BookieId,
    operation: i32,
    deadline: Instant,
    /// The frame, kept (shared, not copied) to send again if the connection was stale.
    frame: FramePieces,
}

impl AddRoute {
    fn answer(self, txn: u64, outcome: Result<pb::Response, RpcError>) {
        let AddRoute {
            answers,
            entry,
            bookie,
            operation,
            deadline,
            frame,
        } = self;
        let (result, retry) = match outcome {
            Ok(resp) => (check_answer(&bookie, operation, resp).map(drop), None),
            Err(RpcError::Unreachable(why)) => {
                let retry = Started {
                    bookie: bookie.clone(),
                    operation,
                    deadline,
                    how: StartedHow::Resend { txn, frame },
                };
                (Err(RpcError::Unreachable(why)), Some(retry))
            }
            Err(e) => (Err(e), None),
        };
        answers.answer(AddAnswer {
            entry,
            bookie,
            result,
            retry,
        });
    }
}

/// State shared by a connection's tasks and its requesters.
struct Shared {
    /// `Err(why)` once the connection is dead: nobody may wait on it any more, and a
    /// request that comes too late learns why (say, a TLS alert that arrived before its
    /// first request was sent). Ordered, so that a dead connection fails its waiters in
    /// request order (the same order in every run: a simulator replays a seed exactly).
    waiting: Mutex<Result<BTreeMap<u64, Waiter>, String>>,
}

/// How often the client's sweeper walks each connection's waiters for routed adds past
/// their deadline ([`Bookies::start_add`]).
const SWEEP: Duration = Duration::from_millis(100);

impl Shared {
    fn kill(&self, reason: &str) {
        let waiting = {
            let mut guard = self.waiting.lock();
            if guard.is_err() {
                return;
            }
            std::mem::replace(&mut *guard, Err(reason.to_string()))
        };
        for (txn, w) in waiting.into_iter().flatten() {
            w.answer(txn, Err(RpcError::Unreachable(reason.to_string())));
        }
    }

    /// Times out the routed adds whose deadline passed (a caller's future keeps its own
    /// timer).
    fn expire_adds(&self, now: Instant) {
        let expired: Vec<(u64, Waiter)> = {
            let mut guard = self.waiting.lock();
            let Ok(map) = guard.as_mut() else {
                return;
            };
            let due: Vec<u64> = map
                .iter()
                .filter_map(|(&txn, w)| match w {
                    Waiter::Add(r) if r.deadline <= now => Some(txn),
                    _ => None,
                })
                .collect();
            due.into_iter()
                .filter_map(|txn| map.remove(&txn).map(|w| (txn, w)))
                .collect()
        };
        // Answered after the lock is let go, in txn order.
        for (txn, w) in expired {
            w.answer(txn, Err(RpcError::Timeout));
        }
    }

    fn is_alive(&self) -> bool {
        self.waiting.lock().is_ok()
    }

    /// How many requests wait for their answers (0 once dead).
    fn outstanding(&self) -> usize {
        self.waiting.lock().as_ref().map_or(0, BTreeMap::len)
    }

    fn forget(&self, txn: u64) {
        if let Ok(map) = self.waiting.lock().as_mut() {
            map.remove(&txn);
        }
    }
}

/// Removes a request's waiter when its caller stops waiting for any reason: a timeout, or
/// the caller's future being dropped (a speculative read whose sibling answered first, an
/// aborted range read). Without it a bookie that never answers would keep one waiter per
/// abandoned request for as long as the connection lives.
struct WaitGuard<'a> {
    shared: &'a Shared,
    txn: u64,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.shared.forget(self.txn);
    }
}

struct Conn {
    /// Unique among the process's connections (a [`ConnectionPin`] compares them).
    id: u64,
    shared: Arc<Shared>,
    /// The bookie answered a write close (BP-32) on this connection with EBADREQ (a Java
    /// bookie): no more are sent on it. A new connection asks again (the bookie may have
    /// been upgraded meanwhile).
    write_close_unsupported: std::sync::atomic::AtomicBool,
    /// Whole frames waiting for the writer task.
    outbox: Arc<Outbox>,
    reader: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
        self.shared.kill("connection closed");
        self.outbox.close();
    }
}

/// The frames a connection's writer task has still to write. A frame pushed here waits
/// for a [`Outbox::flush`]: a writer that sends many requests at once (the ledger writer
/// sending a batch of appends) pushes them all and flushes once, so that they leave in
/// one vectored write instead of one write (and one wake-up of the bookie) each.
struct Outbox {
    state: Mutex<OutboxState>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct OutboxState {
    /// Frames in order, each in one or two pieces (a large add's body is its own piece).
    pieces: VecDeque<Bytes>,
    /// The connection is closing (dropped) or its writer stopped: nothing more is taken.
    closed: bool,
}

impl Outbox {
    /// Queues a frame; `Err` once the writer stopped.
    fn push(&self, (head, body): FramePieces) -> Result<(), ()> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(());
        }
        st.pieces.push_back(head);
        if let Some(b) = body {
            st.pieces.push_back(b);
        }
        Ok(())
    }

    /// Wakes the writer for whatever is queued (a wake while it writes is kept: it looks
    /// again when done).
    fn flush(&self) {
        self.wake.notify_one();
    }

    fn close(&self) {
        self.state.lock().closed = true;
        self.wake.notify_one();
    }

    /// Everything queued, or `None` once closed with nothing left.
    fn take(&self, into: &mut VecDeque<Bytes>) -> Option<()> {
        let mut st = self.state.lock();
        if st.pieces.is_empty() && st.closed {
            return None;
        }
        std::mem::swap(into, &mut st.pieces);
        Some(())
    }
}

#[derive(Default)]
struct ChannelState {
    conn: Option<Arc<Conn>>,
    /// When the last connect failed, why, and the backoff then in force.
    failure: Option<(Instant, String, Duration)>,
}

/// The connection to one bookie.
struct Channel {
    bookie: BookieId,
    /// The live connection, for the fast path (no async lock per request).
    live: Mutex<Option<Arc<Conn>>>,
    /// Held while connecting, so that one attempt serves every waiting request.
    state: tokio::sync::Mutex<ChannelState>,
}

/// Every bookie connection of a client.
pub struct Bookies {
    connector: Arc<dyn Connector>,
    config: Arc<ClientConfig>,
    /// Shared with the sweeper task, which holds it weakly.
    channels: Arc<Mutex<BTreeMap<BookieId, Arc<Channel>>>>,
    next_txn: AtomicU64,
    /// Whether the sweeper task was started (at the first routed add).
    sweeping: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Bookies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bookies")
            .field("connections", &self.channels.lock().len())
            .finish()
    }
}

impl Bookies {
    pub fn new(connector: Arc<dyn Connector>, config: Arc<ClientConfig>) -> Bookies {
        Bookies {
            connector,
            config,
            channels: Arc::default(),
            next_txn: AtomicU64::new(1),
            sweeping: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Starts the task that times out routed adds, once: every [`SWEEP`] it walks the
    /// waiters of each live connection, for every ledger writer at once. Before, each
    /// writer swept the connections it used on its own 100 ms tick: with 10,000 ledgers
    /// written at once that was 100,000 wake-ups a second (and each walked the whole
    /// connection: 170 µs of the client's CPU per add, adds timed out). The task ends
    /// at its first tick after these `Bookies` (the client) are dropped.
    fn start_sweeper(&self) {
        if self.sweeping.swap(true, Ordering::Relaxed) {
            return;
        }
        let channels = Arc::downgrade(&self.channels);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(channels) = channels.upgrade() else {
                    return;
                };
                let live: Vec<Arc<Conn>> = channels
                    .lock()
                    .values()
                    .filter_map(|ch| ch.live.lock().clone())
                    .collect();
                drop(channels);
                let now = Instant::now();
                for conn in live {
                    conn.shared.expire_adds(now);
                }
            }
        });
    }

    /// How many requests wait for an answer on the live connection to `bookie`.
    #[cfg(test)]
    fn waiting_on(&self, bookie: &BookieId) -> usize {
        let conn = self.channel(bookie).live.lock().clone();
        conn.and_then(|c| c.shared.waiting.lock().as_ref().ok().map(|m| m.len()))
            .unwrap_or(0)
    }

    /// The connection to `bookie`, if there is one and it is alive; none is made.
    fn live(&self, bookie: &BookieId) -> Option<Arc<Conn>> {
        let conn = self.channel(bookie).live.lock().clone();
        conn.filter(|c| c.shared.is_alive())
    }

    /// Drops every connection (waiting requests fail).
    pub fn close_all(&self) {
        self.channels.lock().clear();
    }

    fn channel(&self, bookie: &BookieId) -> Arc<Channel> {
        self.channels
            .lock()
            .entry(bookie.clone())
            .or_insert_with(|| {
                Arc::new(Channel {
                    bookie: bookie.clone(),
                    live: Mutex::new(None),
                    state: tokio::sync::Mutex::new(ChannelState::default()),
                })
            })
            .clone()
    }

    /// The live connection to the bookie, and whether it was made just now.
    async fn connection(&self, ch: &Channel) -> Result<(Arc<Conn>, bool), RpcError> {
        if let Some(c) = ch.live.lock().as_ref()
            && c.shared.is_alive()
        {
            return Ok((c.clone(), false));
        }
        // Boxed: the connect (with StartTLS and the handshake) is a large future, which
        // every request's own future would otherwise carry, and copy, for nothing.
        Box::pin(self.connect(ch)).await
    }

    /// Makes the connection to the bookie, unless another request made it meanwhile or
    /// the last attempt's backoff still holds.
    async fn connect(&self, ch: &Channel) -> Result<(Arc<Conn>, bool), RpcError> {
        let mut st = ch.state.lock().await;
        if let Some(c) = &st.conn
            && c.shared.is_alive()
        {
            return Ok((c.clone(), false));
        }
        st.conn = None;
        let mut backoff = self.config.reconnect_backoff;
        if let Some((at, reason, b)) = &st.failure {
            if at.elapsed() < *b {
                return Err(RpcError::Unreachable(reason.clone()));
            }
            backoff = (*b * 2).min(self.config.max_reconnect_backoff);
        }
        // StartTLS and the handshake count against the connect timeout too.
        let connected = tokio::time::timeout(self.config.connect_timeout, async {
            let stream = self.connector.connect(&ch.bookie).await?;
            match &self.config.tls {
                Some(tls) => tls.upgrade(stream, &ch.bookie).await,
                None => Ok(stream),
            }
        })
        .await;
        let stream = match connected {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                let reason = format!("connect to {}: {e}", ch.bookie);
                st.failure = Some((Instant::now(), reason.clone(), backoff));
                return Err(RpcError::Unreachable(reason));
            }
            Err(_) => {
                let reason = format!(
                    "connect to {} timed out after {:?}",
                    ch.bookie, self.config.connect_timeout
                );
                st.failure = Some((Instant::now(), reason.clone(), backoff));
                return Err(RpcError::Unreachable(reason));
            }
        };
        st.failure = None;
        let conn = Arc::new(spawn_conn(
            stream,
            ch.bookie.clone(),
            self.config.max_frame_size,
        ));
        st.conn = Some(conn.clone());
        *ch.live.lock() = Some(conn.clone());
        Ok((conn, true))
    }

    /// Sends `req` (its txn id is assigned here) and waits for the response, at most
    /// `timeout`. A response whose status is not OK becomes [`RpcError::Status`].
    pub async fn call(
        &self,
        bookie: &BookieId,
        req: pb::Request,
        timeout: Duration,
    ) -> Result<pb::Response, RpcError> {
        self.call_on(bookie, req, timeout, None).await
    }

    /// [`Bookies::call`], answered on the connection `pin` is bound to (the first request
    /// made through it binds it): if that connection broke and another replaced it, the
    /// request fails without being sent. Deferred-sync copies need this: a bookie that
    /// restarted lost what was not forced, and only a broken connection tells.
    pub async fn call_pinned(
        &self,
        bookie: &BookieId,
        req: pb::Request,
        timeout: Duration,
        pin: &ConnectionPin,
    ) -> Result<pb::Response, RpcError> {
        self.call_on(bookie, req, timeout, Some(pin)).await
    }

    async fn call_on(
        &self,
        bookie: &BookieId,
        mut req: pb::Request,
        timeout: Duration,
        pin: Option<&ConnectionPin>,
    ) -> Result<pb::Response, RpcError> {
        let ch = self.channel(bookie);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut retried = false;
        let resp = loop {
            let (conn, fresh) = tokio::time::timeout_at(deadline, self.connection(&ch))
                .await
                .map_err(|_| RpcError::Timeout)??;
            if let Some(pin) = pin {
                pin.check(bookie, conn.id)?;
            }
            match self.exchange(&conn, bookie, &mut req, deadline).await {
                // A pooled connection the bookie had already closed (it restarted, or
                // dropped idle connections) is noticed only when used: try once more on a
                // new connection. Every request the client sends may be repeated (adds
                // of the same entry, reads, fences, LAC writes). Not once a pin is bound
                // (the new connection could not serve it).
                Err(RpcError::Unreachable(reason))
                    if !fresh && !retried && pin.is_none_or(|p| !p.is_bound()) =>
                {
                    tracing::debug!(%bookie, "stale connection ({reason}); reconnecting");
                    retried = true;
                }
                other => {
                    let resp = other?;
                    if let Some(pin) = pin {
                        pin.bind(bookie, conn.id)?;
                    }
                    break resp;
                }
            }
        };
        check_answer(bookie, req.header.operation, resp)
    }

    /// BP-32's advisory write close of `ledger` on `bookie`: `Ok(true)` if the bookie took
    /// it, `Ok(false)` if it does not support it. A bookie that answers EBADREQ (a Java
    /// bookie: `v3::WRITE_CLOSE` is an operation it never served) is remembered on the
    /// connection, and no write close is sent on that connection again.
    ///
    /// Sent only on a live connection, never one made for it: it is advice, sent in the
    /// background, and a connection attempt to a bookie that is down (or restarting) would
    /// put that bookie in the reconnect backoff, failing the next foreground request to
    /// it at once although it may be back by then.
    pub async fn write_close(
        &self,
        bookie: &BookieId,
        ledger: i64,
        master_key: &[u8],
        timeout: Duration,
    ) -> Result<bool, RpcError> {
        let Some(conn) = self.live(bookie) else {
            return Err(RpcError::Unreachable(format!(
                "no live connection to {bookie}"
            )));
        };
        if conn.write_close_unsupported.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let mut req = req::write_close(ledger, master_key);
        let deadline = tokio::time::Instant::now() + timeout;
        let answer = self.exchange(&conn, bookie, &mut req, deadline).await;
        match answer.and_then(|resp| check_answer(bookie, req.header.operation, resp)) {
            Ok(_) => Ok(true),
            Err(RpcError::Status(Status::BadRequest)) => {
                tracing::debug!(%bookie, "bookie does not support write close (EBADREQ)");
                conn.write_close_unsupported.store(true, Ordering::Relaxed);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Sends `req` on `conn` with a new txn id and waits for its response.
    async fn exchange(
        &self,
        conn: &Conn,
        bookie: &BookieId,
        req: &mut pb::Request,
        deadline: tokio::time::Instant,
    ) -> Result<pb::Response, RpcError> {
        let (txn, rx) = self.enqueue(conn, req)?;
        let _guard = WaitGuard {
            shared: &conn.shared,
            txn,
        };
        wait_answer(bookie, rx, deadline).await
    }

    /// Gives `req` a new txn id, registers who waits for its answer, queues its frame on
    /// `conn` and wakes the connection's writer.
    fn enqueue(
        &self,
        conn: &Conn,
        req: &mut pb::Request,
    ) -> Result<(u64, oneshot::Receiver<Result<pb::Response, RpcError>>), RpcError> {
        let txn = self.next_txn.fetch_add(1, Ordering::Relaxed);
        req.header.txn_id = txn;
        let (tx, rx) = oneshot::channel();
        match conn.shared.waiting.lock().as_mut() {
            Ok(map) => map.insert(txn, Waiter::Call(tx)),
            Err(why) => return Err(RpcError::Unreachable(why.clone())),
        };
        if conn
            .outbox
            .push(v3::encode_request_frame_pieces(req))
            .is_err()
        {
            conn.shared.kill("connection writer stopped");
        }
        conn.outbox.flush();
        Ok((txn, rx))
    }
}

/// A request queued on a live connection by [`Bookies::send`]: a future for its answer
/// with no timer and no connect path of its own (the caller keeps the time: a read
/// keeps one timer for its timeout and its speculative read together). Dropped before
/// its answer, it takes its waiter away with it.
pub(crate) struct Sent {
    shared: Arc<Shared>,
    txn: u64,
    operation: i32,
    bookie: BookieId,
    rx: oneshot::Receiver<Result<pb::Response, RpcError>>,
    answered: bool,
}

impl Future for Sent {
    type Output = Result<pb::Response, RpcError>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        let outcome = std::task::ready!(Pin::new(&mut this.rx).poll(cx));
        // The reader took the waiter out to answer it (or a dying connection did).
        this.answered = true;
        std::task::Poll::Ready(match outcome {
            Err(_) => Err(RpcError::Unreachable(format!(
                "connection to {} lost",
                this.bookie
            ))),
            Ok(r) => r.and_then(|resp| check_answer(&this.bookie, this.operation, resp)),
        })
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        if !self.answered {
            self.shared.forget(self.txn);
        }
    }
}

impl Bookies {
    /// Queues `req` on the live connection to `bookie` and wakes its writer; `None` when
    /// there is none (then [`Bookies::call`] makes one). The connection was pooled: an
    /// `Unreachable` answer may mean only that it was stale, and the caller may ask once
    /// more with [`Bookies::call`], as `call` itself does.
    pub(crate) fn send(&self, bookie: &BookieId, mut req: pb::Request) -> Option<Sent> {
        let conn = self.live(bookie)?;
        let (txn, rx) = self.enqueue(&conn, &mut req).ok()?;
        Some(Sent {
            shared: conn.shared.clone(),
            txn,
            operation: req.header.operation,
            bookie: bookie.clone(),
            rx,
            answered: false,
        })
    }
}

/// An add [`Bookies::start_add`] could not route (there was no live connection to its
/// bookie), or a routed add to send again on a new connection: [`Bookies::finish`]
/// answers it as [`Bookies::call`] would.
pub(crate) struct Started {
    bookie: BookieId,
    operation: i32,
    deadline: Instant,
    how: StartedHow,
}

enum StartedHow {
    /// Never sent: made on a (new) connection at the finish.
    Unsent(Box<pb::Request>),
    /// Sent on a pooled connection that broke before the answer: once more on a new one.
    Resend { txn: u64, frame: FramePieces },
}

impl Bookies {
    /// Queues the add `req` on the live connection to `bookie` without waking its writer,
    /// so that a ledger writer sending many adds flushes them together
    /// ([`Bookies::flush`]). Its answer (or `Timeout` once `deadline` passed and the
    /// sweeper looked, or `Unreachable` with a retry if the connection
    /// broke) goes to `answers`, tagged with `entry` and the bookie; `None` says so.
    /// With no live connection the add is handed back, for [`Bookies::finish`] to send.
    pub(crate) fn start_add(
        &self,
        bookie: &BookieId,
        mut req: pb::Request,
        deadline: Instant,
        answers: AddAnswers,
        entry: i64,
    ) -> Option<Started> {
        let operation = req.header.operation;
        if let Some(conn) = self.live(bookie) {
            let txn = self.next_txn.fetch_add(1, Ordering::Relaxed);
            req.header.txn_id = txn;
            let frame = v3::encode_request_frame_pieces(&req);
            let route = AddRoute {
                answers,
                entry,
                bookie: bookie.clone(),
                operation,
                deadline,
                frame: frame.clone(),
            };
            // Registered before the frame is queued: the answer cannot come first.
            let queued = match conn.shared.waiting.lock().as_mut() {
                Ok(map) => {
                    map.insert(txn, Waiter::Add(route));
                    true
                }
                Err(_) => false,
            };
            if queued {
                self.start_sweeper();
                if conn.outbox.push(frame).is_ok() {
                    return None;
                }
                // The writer stopped: the route is answered `Unreachable` with a retry.
                conn.shared.kill("connection writer stopped");
                return None;
            }
        }
        Some(Started {
            bookie: bookie.clone(),
            operation,
            deadline,
            how: StartedHow::Unsent(Box::new(req)),
        })
    }

    /// Wakes the writer of the live connection to `bookie` for what [`Bookies::start_add`]
    /// queued on it.
    pub(crate) fn flush(&self, bookie: &BookieId) {
        if let Some(c) = self
            .channels
            .lock()
            .get(bookie)
            .and_then(|ch| ch.live.lock().clone())
        {
            c.outbox.flush();
        }
    }

    /// The answer to an add [`Bookies::start_add`] handed back, or to a retry.
    pub(crate) async fn finish(&self, started: Started) -> Result<pb::Response, RpcError> {
        let Started {
            bookie,
            operation,
            deadline,
            how,
        } = started;
        // Boxed: the paths that (re)connect are large futures, and a writer keeps one per
        // add that takes this path.
        let resp = match how {
            StartedHow::Unsent(req) => {
                let timeout = deadline.saturating_duration_since(Instant::now());
                return Box::pin(self.call(&bookie, *req, timeout)).await;
            }
            StartedHow::Resend { txn, frame } => {
                tracing::debug!(%bookie, "stale connection; sending the add again");
                Box::pin(self.resend(&bookie, txn, frame, deadline)).await?
            }
        };
        check_answer(&bookie, operation, resp)
    }

    /// Sends a started request's frame again, on a new connection.
    async fn resend(
        &self,
        bookie: &BookieId,
        txn: u64,
        frame: FramePieces,
        deadline: Instant,
    ) -> Result<pb::Response, RpcError> {
        let ch = self.channel(bookie);
        let (conn, _) = tokio::time::timeout_at(deadline, self.connection(&ch))
            .await
            .map_err(|_| RpcError::Timeout)??;
        let (tx, rx) = oneshot::channel();
        match conn.shared.waiting.lock().as_mut() {
            Ok(map) => map.insert(txn, Waiter::Call(tx)),
            Err(why) => return Err(RpcError::Unreachable(why.clone())),
        };
        let _guard = WaitGuard {
            shared: &conn.shared,
            txn,
        };
        if conn.outbox.push(frame).is_err() {
            conn.shared.kill("connection writer stopped");
        }
        conn.outbox.flush();
        wait_answer(bookie, rx, deadline).await
    }
}

/// Waits for the answer to a request already sent, until `deadline`.
async fn wait_answer(
    bookie: &BookieId,
    rx: oneshot::Receiver<Result<pb::Response, RpcError>>,
    deadline: Instant,
) -> Result<pb::Response, RpcError> {
    match tokio::time::timeout_at(deadline, rx).await {
        Err(_) => Err(RpcError::Timeout),
        Ok(Err(_)) => Err(RpcError::Unreachable(format!(
            "connection to {bookie} lost"
        ))),
        Ok(Ok(r)) => r,
    }
}

/// The answer to a request of `operation`, as the caller sees it: an error unless it is
/// the same operation with status OK.
fn check_answer(
    bookie: &BookieId,
    operation: i32,
    resp: pb::Response,
) -> Result<pb::Response, RpcError> {
    if resp.header.operation != operation {
        return Err(RpcError::BadResponse(format!(
            "{bookie} answered txn {} with operation {} instead of {}",
            resp.header.txn_id, resp.header.operation, operation
        )));
    }
    let status =
        response_status(&resp).map_err(|e| RpcError::BadResponse(format!("{bookie}: {e}")))?;
    if status != Status::Ok {
        return Err(RpcError::Status(status));
    }
    Ok(resp)
}

/// BookKeeper's rule: the top-level status unless it is OK and a sub-response carries one.
fn response_status(resp: &pb::Response) -> Result<Status, folio_proto::ProtoError> {
    let top = Status::from_v3_value(resp.status)?;
    if top != Status::Ok {
        return Ok(top);
    }
    let sub = resp
        .read_response
        .as_ref()
        .map(|r| r.status)
        .or(resp.add_response.as_ref().map(|r| r.status))
        .or(resp.write_lac_response.as_ref().map(|r| r.status))
        .or(resp.read_lac_response.as_ref().map(|r| r.status))
        .or(resp.force_ledger_response.as_ref().map(|r| r.status));
    match sub {
        Some(s) => Status::from_v3_value(s),
        None => Ok(top),
    }
}

fn spawn_conn(stream: Box<dyn Stream>, bookie: BookieId, max_frame: usize) -> Conn {
    let (mut rd, mut wr) = split(stream);
    let shared = Arc::new(Shared {
        waiting: Mutex::new(Ok(BTreeMap::new())),
    });
    let outbox = Arc::new(Outbox {
        state: Mutex::new(OutboxState::default()),
        wake: tokio::sync::Notify::new(),
    });
    let ws = shared.clone();
    let wo = outbox.clone();
    let wb = bookie.clone();
    tokio::spawn(async move {
        // Frames queued while the previous write was in progress go out together, in one
        // vectored write (not copied into one buffer: a 64 KiB entry's frame would be
        // copied once more per bookie).
        let mut batch: VecDeque<Bytes> = VecDeque::new();
        // The queue is looked at before each wait, so that frames queued while a write
        // was in progress go out right after it, and a close that came meanwhile ends the
        // loop once the last frames are written.
        while wo.take(&mut batch).is_some() {
            if batch.is_empty() {
                wo.wake.notified().await;
                // With other requests in flight on this connection, their answers come
                // in bursts (one read of the socket holds many), and each wakes a caller
                // that sends its next request at once: let the tasks woken meanwhile
                // queue theirs before writing, so that they leave in one write, not one
                // each (catch-up reads at 100 in flight made one writev per read, and
                // with it the loopback's receive work, most of the reader's CPU; 8x
                // fewer writes, docs/performance.md). A lone request is not held back.
                if ws.outstanding() > 1 {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            if let Err(e) = write_frames(&mut wr, &mut batch).await {
                wo.state.lock().closed = true;
                ws.kill(&format!("write to {wb}: {e}"));
                return;
            }
        }
        let _ = wr.shutdown().await;
    });
    let rs = shared.clone();
    let reader = tokio::spawn(async move {
        let mut decoder = FrameDecoder::with_max_frame_size(max_frame);
        loop {
            loop {
                match decoder.next_frame() {
                    Ok(Some(frame)) => match v3::decode_response(frame) {
                        Ok(resp) => {
                            let w = rs
                                .waiting
                                .lock()
                                .as_mut()
                                .ok()
                                .and_then(|m| m.remove(&resp.header.txn_id));
                            // A response nobody waits for (timed out) is dropped.
                            if let Some(w) = w {
                                let txn = resp.header.txn_id;
                                w.answer(txn, Ok(resp));
                            }
                        }
                        Err(e) => {
                            rs.kill(&format!("undecodable response from {bookie}: {e}"));
                            return;
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        rs.kill(&format!("bad frame from {bookie}: {e}"));
                        return;
                    }
                }
            }
            // Straight into the decoder's buffer: an entry read is never copied.
            match rd.read_buf(&mut decoder.read_buf()).await {
                Ok(0) => {
                    rs.kill(&format!("{bookie} closed the connection"));
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    // With TLS 1.3 a refused client certificate shows here, as an alert
                    // on the first read after the handshake.
                    rs.kill(&format!(
                        "read from {bookie}: {}",
                        crate::tls::describe(&e, "")
                    ));
                    return;
                }
            }
        }
    });
    static NEXT_CONN: AtomicU64 = AtomicU64::new(1);
    Conn {
        id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
        shared,
        write_close_unsupported: std::sync::atomic::AtomicBool::new(false),
        outbox,
        reader,
    }
}

/// A frame as `v3::encode_request_frame_pieces` makes it: the pieces go out back to back.
type FramePieces = (Bytes, Option<Bytes>);

/// Writes every frame of `frames` (emptying it) with vectored writes.
async fn write_frames<W: AsyncWrite + Unpin>(
    wr: &mut W,
    frames: &mut VecDeque<Bytes>,
) -> std::io::Result<()> {
    while !frames.is_empty() {
        let slices: Vec<std::io::IoSlice<'_>> = frames
            .iter()
            .take(64)
            .map(|f| std::io::IoSlice::new(f))
            .collect();
        let mut n = wr.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let first = frames.front_mut().expect("wrote no more than was queued");
            if n >= first.len() {
                n -= first.len();
                frames.pop_front();
            } else {
                first.advance(n);
                n = 0;
            }
        }
    }
    Ok(())
}

/// Builders of the v3 requests the client sends.
pub mod req {
    use super::*;
    use folio_proto::v3::{HIGH_PRIORITY, request_header};

    fn request(op: OperationType, high_priority: bool) -> pb::Request {
        pb::Request {
            header: request_header(op, 0, high_priority.then_some(HIGH_PRIORITY)),
            ..Default::default()
        }
    }

    /// An add; `recovery` sets RECOVERY_ADD and high priority.
    pub fn add(
        ledger: i64,
        entry: i64,
        master_key: &[u8],
        body: Bytes,
        recovery: bool,
    ) -> pb::Request {
        add_keyed(
            ledger,
            entry,
            Bytes::copy_from_slice(master_key),
            body,
            recovery,
        )
    }

    /// [`add`] with the master key already in a shared buffer: a writer sends one for every
    /// entry and bookie, and shares its key rather than copying it into each.
    pub fn add_keyed(
        ledger: i64,
        entry: i64,
        master_key: Bytes,
        body: Bytes,
        recovery: bool,
    ) -> pb::Request {
        let mut r = request(OperationType::AddEntry, recovery);
        r.add_request = Some(pb::AddRequest {
            flag: recovery.then_some(pb::add_request::Flag::RecoveryAdd as i32),
            ledger_id: ledger,
            entry_id: entry,
            master_key,
            body,
            write_flags: None,
        });
        r
    }

    /// A deferred-sync recovery add (a re-replicating copy, made durable by
    /// [`force_ledger`]).
    pub fn add_deferred(ledger: i64, entry: i64, master_key: &[u8], body: Bytes) -> pb::Request {
        let mut r = add(ledger, entry, master_key, body, true);
        if let Some(a) = r.add_request.as_mut() {
            a.write_flags = Some(v3::WRITE_FLAG_DEFERRED_SYNC);
        }
        r
    }

    /// ForceLedger: answered once everything the bookie acknowledged for the ledger is
    /// durable.
    pub fn force_ledger(ledger: i64) -> pb::Request {
        let mut r = request(OperationType::ForceLedger, true);
        r.force_ledger_request = Some(pb::ForceLedgerRequest { ledger_id: ledger });
        r
    }

    /// A read; with `fence_key` it carries FENCE_LEDGER, the master key and high priority.
    pub fn read(ledger: i64, entry: i64, fence_key: Option<&[u8]>) -> pb::Request {
        let mut r = request(OperationType::ReadEntry, fence_key.is_some());
        r.read_request = Some(pb::ReadRequest {
            flag: fence_key.map(|_| pb::read_request::Flag::FenceLedger as i32),
            ledger_id: ledger,
            entry_id: entry,
            master_key: fence_key.map(Bytes::copy_from_slice),
            previous_lac: None,
            time_out: None,
        });
        r
    }

    /// A long-poll read: answered once the bookie's LAC passes `previous_lac` (with the
    /// next entry piggybacked when it has it) or after `timeout_ms`.
    pub fn long_poll(ledger: i64, previous_lac: i64, timeout_ms: i64) -> pb::Request {
        let mut r = request(OperationType::ReadEntry, false);
        r.read_request = Some(pb::ReadRequest {
            flag: Some(pb::read_request::Flag::EntryPiggyback as i32),
            ledger_id: ledger,
            entry_id: -1,
            master_key: None,
            previous_lac: Some(previous_lac),
            time_out: Some(timeout_ms),
        });
        r
    }

    pub fn read_lac(ledger: i64) -> pb::Request {
        let mut r = request(OperationType::ReadLac, false);
        r.read_lac_request = Some(pb::ReadLacRequest { ledger_id: ledger });
        r
    }

    /// BP-32's write close (Folio's own; `v3::WRITE_CLOSE`, docs/formats/write-close.md).
    pub fn write_close(ledger: i64, master_key: &[u8]) -> pb::Request {
        let mut r = request(folio_proto::v3::WRITE_CLOSE, false);
        r.write_close_request = Some(pb::WriteCloseRequest {
            ledger_id: ledger,
            master_key: Bytes::copy_from_slice(master_key),
        });
        r
    }

    pub fn write_lac(ledger: i64, lac: i64, master_key: &[u8], body: Bytes) -> pb::Request {
        let mut r = request(OperationType::WriteLac, false);
        r.write_lac_request = Some(pb::WriteLacRequest {
            ledger_id: ledger,
            lac,
            master_key: Bytes::copy_from_slice(master_key),
            body,
        });
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    /// A scripted bookie over a real socket: answers each request with `answer`.
    async fn serve_once<F>(answer: F) -> (BookieId, JoinHandle<()>)
    where
        F: Fn(pb::Request) -> Option<pb::Response> + Send + 'static,
    {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let id = BookieId::new(l.local_addr().unwrap().to_string()).unwrap();
        (id, serve_on(l, answer))
    }

    /// Serves one connection accepted on `l`, answering each request with `answer`.
    fn serve_on<F>(l: TcpListener, answer: F) -> JoinHandle<()>
    where
        F: Fn(pb::Request) -> Option<pb::Response> + Send + 'static,
    {
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut dec = FrameDecoder::new();
            let mut buf = vec![0u8; 4096];
            loop {
                while let Ok(Some(f)) = dec.next_frame() {
                    let r = v3::decode_request(f).unwrap();
                    if let Some(resp) = answer(r) {
                        let mut out = BytesMut::new();
                        v3::encode_response_frame(&resp, &mut out);
                        s.write_all(&out).await.unwrap();
                    }
                }
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => dec.feed(&buf[..n]),
                }
            }
        })
    }

    fn ok_add(r: &pb::Request, status: pb::StatusCode) -> pb::Response {
        let a = r.add_request.as_ref().unwrap();
        pb::Response {
            header: v3::response_header(&r.header),
            status: status as i32,
            add_response: Some(pb::AddResponse {
                status: status as i32,
                ledger_id: a.ledger_id,
                entry_id: a.entry_id,
            }),
            ..Default::default()
        }
    }

    fn bookies() -> Bookies {
        Bookies::new(Arc::new(TcpConnector), Arc::new(ClientConfig::default()))
    }

    #[tokio::test]
    async fn matches_responses_by_txn_and_maps_statuses() {
        let (id, _h) = serve_once(|r| {
            let entry = r.add_request.as_ref().unwrap().entry_id;
            Some(ok_add(
                &r,
                if entry == 1 {
                    pb::StatusCode::Efenced
                } else {
                    pb::StatusCode::Eok
                },
            ))
        })
        .await;
        let b = bookies();
        let t = Duration::from_secs(30);
        let r0 = b
            .call(&id, req::add(1, 0, &[0; 20], Bytes::new(), false), t)
            .await
            .unwrap();
        assert_eq!(r0.add_response.unwrap().entry_id, 0);
        let r1 = b
            .call(&id, req::add(1, 1, &[0; 20], Bytes::new(), false), t)
            .await;
        assert_eq!(r1.unwrap_err(), RpcError::Status(Status::Fenced));
    }

    /// A Java bookie answers BP-32's write close (an operation it never served) with
    /// EBADREQ: the client says "not supported", never an error, and sends no more write
    /// closes on that connection (the next is answered without a request); other requests
    /// on the connection go on. A Folio bookie's EOK is "taken".
    #[tokio::test]
    async fn a_bookie_answering_write_close_with_ebadreq_is_not_asked_again() {
        let seen = Arc::new(AtomicU64::new(0));
        let counted = seen.clone();
        let (id, _h) = serve_once(move |r| {
            if r.header.operation == v3::WRITE_CLOSE as i32 {
                counted.fetch_add(1, Ordering::SeqCst);
                return Some(pb::Response::status_only(
                    &r.header,
                    pb::StatusCode::Ebadreq,
                ));
            }
            Some(ok_add(&r, pb::StatusCode::Eok))
        })
        .await;
        let b = bookies();
        let t = Duration::from_secs(30);
        let add = || req::add(1, 0, &[0; 20], Bytes::new(), false);
        // A write close is sent only on a live connection: an add makes it.
        b.call(&id, add(), t).await.unwrap();
        assert_eq!(b.write_close(&id, 1, &[0; 20], t).await, Ok(false));
        assert_eq!(b.write_close(&id, 2, &[0; 20], t).await, Ok(false));
        assert_eq!(seen.load(Ordering::SeqCst), 1, "asked once per connection");
        b.call(&id, add(), t).await.unwrap();

        let (id, _h) = serve_once(|r| {
            let Some(w) = r.write_close_request.as_ref() else {
                return Some(ok_add(&r, pb::StatusCode::Eok));
            };
            Some(pb::Response {
                header: v3::response_header(&r.header),
                status: pb::StatusCode::Eok as i32,
                write_close_response: Some(pb::WriteCloseResponse {
                    status: pb::StatusCode::Eok as i32,
                    ledger_id: w.ledger_id,
                }),
                ..Default::default()
            })
        })
        .await;
        b.call(&id, add(), t).await.unwrap();
        assert_eq!(b.write_close(&id, 1, &[0; 20], t).await, Ok(true));
        assert_eq!(b.write_close(&id, 2, &[0; 20], t).await, Ok(true));
    }

    /// A write close (background advice) to a bookie with no live connection is not sent
    /// and makes no connection: a bookie that was down while a closed ledger's write
    /// closes went out, and is back, answers the next request, not the reconnect
    /// backoff's "unreachable" (a read of a ledger's only copy failed so after a restart).
    #[tokio::test]
    async fn a_write_close_makes_no_connection_and_no_backoff() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let id = BookieId::new(addr.to_string()).unwrap();
        drop(l);
        let cfg = ClientConfig {
            reconnect_backoff: Duration::from_secs(60),
            ..ClientConfig::default()
        };
        let b = Bookies::new(Arc::new(TcpConnector), Arc::new(cfg));
        let t = Duration::from_secs(30);
        let r = b.write_close(&id, 1, &[0; 20], t).await;
        let Err(RpcError::Unreachable(reason)) = r else {
            panic!("{r:?}")
        };
        assert!(reason.contains("no live connection"), "{reason}");
        // The bookie comes back on its address.
        let l = TcpListener::bind(addr).await.unwrap();
        let _h = serve_on(l, |r| Some(ok_add(&r, pb::StatusCode::Eok)));
        b.call(&id, req::add(1, 0, &[0; 20], Bytes::new(), false), t)
            .await
            .unwrap();
    }

    /// A stream that counts the writes that took bytes (vectored or not).
    struct CountedWrites {
        inner: tokio::net::TcpStream,
        writes: Arc<AtomicU64>,
    }

    impl AsyncRead for CountedWrites {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for CountedWrites {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            let r = Pin::new(&mut self.inner).poll_write(cx, buf);
            if let std::task::Poll::Ready(Ok(_)) = r {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            r
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> std::task::Poll<io::Result<usize>> {
            let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
            if let std::task::Poll::Ready(Ok(_)) = r {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            r
        }

        fn is_write_vectored(&self) -> bool {
            self.inner.is_write_vectored()
        }

        fn poll_flush(
            mut self: Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    struct CountingConnector(Arc<AtomicU64>);

    impl Connector for CountingConnector {
        fn connect<'a>(&'a self, bookie: &'a BookieId) -> ConnectFuture<'a> {
            Box::pin(async move {
                let inner = tokio::net::TcpStream::connect(bookie.as_str()).await?;
                inner.set_nodelay(true)?;
                Ok(Box::new(CountedWrites {
                    inner,
                    writes: self.0.clone(),
                }) as Box<dyn Stream>)
            })
        }
    }

    /// Callers that each send their next request as soon as the last is answered (a
    /// reader with many reads outstanding): their answers come in bursts, and the
    /// requests the woken callers send leave together, in a few writes rather than one
    /// write each (one writev per read, and the loopback's receive work it carries, was
    /// most of a catch-up reader's CPU). On two worker threads, where the connection's
    /// writer would otherwise run beside the callers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_sent_by_callers_woken_together_share_writes() {
        const CALLERS: u64 = 20;
        const ROUNDS: u64 = 50;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let id = BookieId::new(l.local_addr().unwrap().to_string()).unwrap();
        // Answers only once every caller's request is in, all in one write.
        let _h = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut dec = FrameDecoder::new();
            let mut buf = vec![0u8; 64 << 10];
            let mut held = Vec::new();
            loop {
                while let Ok(Some(f)) = dec.next_frame() {
                    held.push(v3::decode_request(f).unwrap());
                }
                if held.len() as u64 == CALLERS {
                    let mut out = BytesMut::new();
                    for r in held.drain(..) {
                        v3::encode_response_frame(&ok_add(&r, pb::StatusCode::Eok), &mut out);
                    }
                    s.write_all(&out).await.unwrap();
                }
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => dec.feed(&buf[..n]),
                }
            }
        });
        let writes = Arc::new(AtomicU64::new(0));
        let b = Arc::new(Bookies::new(
            Arc::new(CountingConnector(writes.clone())),
            Arc::new(ClientConfig::default()),
        ));
        let t = Duration::from_secs(60);
        let callers: Vec<_> = (0..CALLERS)
            .map(|c| {
                let (b, id) = (b.clone(), id.clone());
                tokio::spawn(async move {
                    for round in 0..ROUNDS {
                        let add = req::add(
                            1,
                            (round * CALLERS + c) as i64,
                            &[0; 20],
                            Bytes::new(),
                            false,
                        );
                        b.call(&id, add, t).await.unwrap();
                    }
                })
            })
            .collect();
        for c in callers {
            c.await.unwrap();
        }
        let sent = CALLERS * ROUNDS;
        let writes = writes.load(Ordering::Relaxed);
        assert!(
            writes * 2 < sent,
            "{sent} requests in {writes} writes: callers woken together wrote one by one"
        );
    }

    /// An add that finds no live connection gets a future of its own: the paths that
    /// connect are boxed out of line so that it stays small (5 KB with them inline,
    /// copied three times per entry, was 8% of a writer's CPU at 100 B entries).
    #[tokio::test]
    async fn a_request_future_does_not_carry_the_connect_path() {
        let b = bookies();
        let id = BookieId::new("127.0.0.1:1".to_string()).unwrap();
        let t = Duration::from_secs(1);
        let (tx, _rx) = answers();
        let started = b
            .start_add(
                &id,
                req::add(1, 0, &[0; 20], Bytes::new(), false),
                Instant::now() + t,
                tx,
                0,
            )
            .expect("no connection: not routed");
        let finish = b.finish(started);
        assert!(
            std::mem::size_of_val(&finish) <= 2048,
            "finish: {} bytes",
            std::mem::size_of_val(&finish)
        );
        let call = b.call(&id, req::read(1, 0, None), t);
        assert!(
            std::mem::size_of_val(&call) <= 3072,
            "call: {} bytes",
            std::mem::size_of_val(&call)
        );
    }

    /// A bookie that restarts after every answer: each connection serves one add, then
    /// closes (as a bookie process that died and came back).
    async fn serve_one_add_per_connection() -> BookieId {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let id = BookieId::new(l.local_addr().unwrap().to_string()).unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut dec = FrameDecoder::new();
                let mut buf = vec![0u8; 4096];
                'conn: loop {
                    if let Ok(Some(f)) = dec.next_frame() {
                        let r = v3::decode_request(f).unwrap();
                        let mut out = BytesMut::new();
                        v3::encode_response_frame(&ok_add(&r, pb::StatusCode::Eok), &mut out);
                        let _ = s.write_all(&out).await;
                        break 'conn;
                    }
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break 'conn,
                        Ok(n) => dec.feed(&buf[..n]),
                    }
                }
            }
        });
        id
    }

    /// Deferred-sync copies lose what was not forced if the bookie restarts: a pinned
    /// request never goes over a connection other than the one that answered the first
    /// (an unpinned one simply reconnects).
    #[tokio::test]
    async fn a_pinned_request_fails_once_its_connection_was_replaced() {
        let id = serve_one_add_per_connection().await;
        let b = bookies();
        let t = Duration::from_secs(30);
        let add = |e| req::add_deferred(1, e, &[0; 20], Bytes::new());
        let pin = ConnectionPin::default();
        b.call_pinned(&id, add(0), t, &pin).await.unwrap();
        let r = b.call_pinned(&id, add(1), t, &pin).await;
        // ("replaced", or "connection lost" if the close is seen only on this request.)
        assert!(matches!(&r, Err(RpcError::Unreachable(_))), "{r:?}");
        // Unpinned, the same request reconnects and is answered.
        b.call(&id, add(1), t).await.unwrap();
        // A new pin binds to whatever connection answers first.
        b.call_pinned(&id, add(2), t, &ConnectionPin::default())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn unanswered_request_times_out_and_a_closed_connection_fails_waiters() {
        let (id, h) = serve_once(|_| None).await;
        let b = bookies();
        let r = b
            .call(&id, req::read(1, 0, None), Duration::from_millis(200))
            .await;
        assert_eq!(r.unwrap_err(), RpcError::Timeout);
        // The server goes away: a waiting request fails with the cause, not a timeout.
        let b = Arc::new(b);
        let b2 = b.clone();
        let id2 = id.clone();
        let waiter = tokio::spawn(async move {
            b2.call(&id2, req::read(1, 1, None), Duration::from_secs(60))
                .await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        h.abort();
        let r = waiter.await.unwrap();
        assert!(matches!(r, Err(RpcError::Unreachable(_))), "{r:?}");
    }

    #[tokio::test]
    async fn an_abandoned_request_leaves_no_waiter_behind() {
        // A bookie that keeps the connection open and never answers (as a stuck replica
        // that a speculative read gives up on).
        let (id, _h) = serve_once(|_| None).await;
        let b = Arc::new(bookies());
        let b2 = b.clone();
        let id2 = id.clone();
        let call = tokio::spawn(async move {
            b2.call(&id2, req::read(1, 0, None), Duration::from_secs(3600))
                .await
        });
        let patience = tokio::time::Instant::now() + Duration::from_secs(60);
        while b.waiting_on(&id) == 0 {
            assert!(
                tokio::time::Instant::now() < patience,
                "the request was never sent"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        call.abort();
        let _ = call.await;
        assert_eq!(
            b.waiting_on(&id),
            0,
            "the dropped request still has a waiter"
        );
        // A timed-out request leaves none either.
        let r = b
            .call(&id, req::read(1, 1, None), Duration::from_millis(100))
            .await;
        assert_eq!(r.unwrap_err(), RpcError::Timeout);
        assert_eq!(b.waiting_on(&id), 0);
    }

    /// What a [`serve_scripted`] bookie does with a request.
    enum Act {
        Answer,
        Ignore,
        /// Closes the connection without answering.
        Close,
    }

    /// What a [`serve_scripted`] bookie saw: an add (connection number, entry), or the
    /// client closing a connection.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Add(usize, i64),
        Closed(usize),
    }

    /// A bookie over a real socket that accepts any number of connections, reports what
    /// it sees, and does with the `n`th request of connection `c` what `script(c, n)` says.
    async fn serve_scripted(
        script: fn(usize, usize) -> Act,
    ) -> (BookieId, mpsc::UnboundedReceiver<Seen>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let id = BookieId::new(l.local_addr().unwrap().to_string()).unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut c = 0;
            while let Ok((mut s, _)) = l.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut dec = FrameDecoder::new();
                    let mut buf = vec![0u8; 4096];
                    let mut n = 0;
                    loop {
                        while let Ok(Some(f)) = dec.next_frame() {
                            let r = v3::decode_request(f).unwrap();
                            let entry = r.add_request.as_ref().unwrap().entry_id;
                            let _ = tx.send(Seen::Add(c, entry));
                            n += 1;
                            match script(c, n - 1) {
                                Act::Answer => {
                                    let mut out = BytesMut::new();
                                    let resp = ok_add(&r, pb::StatusCode::Eok);
                                    v3::encode_response_frame(&resp, &mut out);
                                    s.write_all(&out).await.unwrap();
                                }
                                Act::Ignore => {}
                                Act::Close => return,
                            }
                        }
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => {
                                let _ = tx.send(Seen::Closed(c));
                                return;
                            }
                            Ok(k) => dec.feed(&buf[..k]),
                        }
                    }
                });
                c += 1;
            }
        });
        (id, rx)
    }

    fn add(entry: i64) -> pb::Request {
        req::add(1, entry, &[0; 20], Bytes::new(), false)
    }

    /// A sink for routed answers and the queue it fills.
    fn answers() -> (AddAnswers, mpsc::UnboundedReceiver<AddAnswer>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Arc::new(tx), rx)
    }

    /// The next routed answer, within a generous bound.
    async fn answer(rx: &mut mpsc::UnboundedReceiver<AddAnswer>) -> AddAnswer {
        tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("no answer came")
            .expect("the answer queue closed")
    }

    /// The ledger writer starts a turn's adds and flushes once: nothing leaves before the
    /// flush, everything leaves at it, in order, and each answer reaches the writer's
    /// queue tagged with its entry and bookie.
    #[tokio::test]
    async fn routed_adds_leave_at_the_flush_in_order_and_are_answered_to_the_queue() {
        let (id, mut seen) = serve_scripted(|_, _| Act::Answer).await;
        let b = bookies();
        let t = Duration::from_secs(60);
        let (tx, mut rx) = answers();
        b.call(&id, add(0), t).await.unwrap();
        assert_eq!(seen.recv().await, Some(Seen::Add(0, 0)));
        for e in 1..=5 {
            assert!(
                b.start_add(&id, add(e), Instant::now() + t, tx.clone(), e)
                    .is_none(),
                "a live connection takes it"
            );
        }
        // Nothing was written yet (the bookie would have seen it by now).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(seen.try_recv().is_err(), "sent before the flush");
        assert!(rx.try_recv().is_err(), "answered before the flush");
        b.flush(&id);
        for e in 1..=5 {
            let a = answer(&mut rx).await;
            assert_eq!((a.entry, &a.bookie), (e, &id));
            assert_eq!(a.result, Ok(()));
            assert!(a.retry.is_none());
            assert_eq!(seen.recv().await, Some(Seen::Add(0, e)));
        }
        assert_eq!(b.waiting_on(&id), 0);
        // Without a connection the add is handed back, and made on a new one at its finish.
        let (id, mut seen) = serve_scripted(|_, _| Act::Answer).await;
        let s = b
            .start_add(&id, add(7), Instant::now() + t, tx.clone(), 7)
            .expect("not routed");
        assert!(matches!(s.how, StartedHow::Unsent(_)));
        assert_eq!(b.finish(s).await.unwrap().add_response.unwrap().entry_id, 7);
        assert_eq!(seen.recv().await, Some(Seen::Add(0, 7)));
    }

    /// A bookie's refusal reaches the queue as its status.
    #[tokio::test]
    async fn a_routed_add_refused_by_the_bookie_is_answered_with_its_status() {
        let (id, _h) = serve_once(|r| Some(ok_add(&r, pb::StatusCode::Efenced))).await;
        let b = bookies();
        let t = Duration::from_secs(60);
        let (tx, mut rx) = answers();
        let r = b.call(&id, add(0), t).await;
        assert_eq!(r.unwrap_err(), RpcError::Status(Status::Fenced));
        assert!(
            b.start_add(&id, add(1), Instant::now() + t, tx.clone(), 1)
                .is_none()
        );
        b.flush(&id);
        let a = answer(&mut rx).await;
        assert_eq!(a.result, Err(RpcError::Status(Status::Fenced)));
        assert!(a.retry.is_none());
    }

    /// A routed add that no answer reaches times out at the client's sweep after its
    /// deadline, with nobody asking, and leaves no waiter behind; one whose deadline has
    /// not come stays.
    #[tokio::test]
    async fn an_unanswered_routed_add_times_out_at_the_sweep() {
        let (id, mut seen) = serve_scripted(|c, n| match (c, n) {
            (0, 0) => Act::Answer,
            _ => Act::Ignore,
        })
        .await;
        let b = bookies();
        let (tx, mut rx) = answers();
        b.call(&id, add(0), Duration::from_secs(60)).await.unwrap();
        assert!(
            b.start_add(
                &id,
                add(1),
                Instant::now() + Duration::from_millis(50),
                tx.clone(),
                1
            )
            .is_none()
        );
        assert!(
            b.start_add(
                &id,
                add(2),
                Instant::now() + Duration::from_secs(3600),
                tx.clone(),
                2
            )
            .is_none()
        );
        b.flush(&id);
        assert_eq!(seen.recv().await, Some(Seen::Add(0, 0)));
        assert_eq!(seen.recv().await, Some(Seen::Add(0, 1)));
        assert_eq!(seen.recv().await, Some(Seen::Add(0, 2)));
        let a = tokio::time::timeout(Duration::from_secs(30), answer(&mut rx))
            .await
            .expect("the sweep timed out entry 1");
        assert_eq!((a.entry, a.result), (1, Err(RpcError::Timeout)));
        assert!(a.retry.is_none());
        assert_eq!(b.waiting_on(&id), 1);
        tokio::time::sleep(SWEEP * 3).await;
        assert!(rx.try_recv().is_err(), "entry 2 timed out early");
        assert_eq!(b.waiting_on(&id), 1);
    }

    /// A pooled connection the bookie dropped (it restarted) fails an add routed on it
    /// with `Unreachable` and a retry: the retry goes on a new connection, as `call`
    /// does, and is answered.
    #[tokio::test]
    async fn a_routed_add_is_sent_again_when_its_connection_was_stale() {
        // The first connection answers one request and drops the next unanswered.
        let (id, mut seen) = serve_scripted(|c, n| match (c, n) {
            (0, 0) => Act::Answer,
            (0, _) => Act::Close,
            _ => Act::Answer,
        })
        .await;
        let b = bookies();
        let t = Duration::from_secs(60);
        let (tx, mut rx) = answers();
        b.call(&id, add(0), t).await.unwrap();
        assert!(
            b.start_add(&id, add(1), Instant::now() + t, tx.clone(), 1)
                .is_none()
        );
        b.flush(&id);
        let a = answer(&mut rx).await;
        assert!(
            matches!(a.result, Err(RpcError::Unreachable(_))),
            "{:?}",
            a.result
        );
        let retry = a
            .retry
            .expect("a broken connection's add comes with a retry");
        let r = b.finish(retry).await.unwrap();
        assert_eq!(r.add_response.unwrap().entry_id, 1);
        assert_eq!(seen.recv().await, Some(Seen::Add(0, 0)));
        assert_eq!(seen.recv().await, Some(Seen::Add(0, 1)));
        assert_eq!(seen.recv().await, Some(Seen::Add(1, 1)));
    }

    /// A dropped connection writes what was queued, then closes its socket (its writer
    /// task does not outlive it); the adds routed on it are answered `Unreachable`.
    #[tokio::test]
    async fn a_dropped_connection_writes_what_was_queued_then_closes() {
        let (id, mut seen) = serve_scripted(|_, _| Act::Ignore).await;
        let b = bookies();
        let t = Duration::from_secs(60);
        let (tx, mut rx) = answers();
        let s = b.start_add(&id, add(0), Instant::now() + t, tx.clone(), 0);
        assert!(s.is_some(), "no connection yet");
        drop(s);
        // Made by `call`; this one is never answered.
        let r = b.call(&id, add(1), Duration::from_millis(100)).await;
        assert_eq!(r.unwrap_err(), RpcError::Timeout);
        assert_eq!(seen.recv().await, Some(Seen::Add(0, 1)));
        assert!(
            b.start_add(&id, add(2), Instant::now() + t, tx.clone(), 2)
                .is_none()
        ); // queued, never flushed
        b.close_all();
        let wait = Duration::from_secs(60);
        let next = tokio::time::timeout(wait, seen.recv()).await.unwrap();
        assert_eq!(next, Some(Seen::Add(0, 2)));
        let next = tokio::time::timeout(wait, seen.recv()).await;
        assert_eq!(
            next.expect("the socket was never closed"),
            Some(Seen::Closed(0))
        );
        let a = answer(&mut rx).await;
        assert_eq!(a.entry, 2);
        assert!(
            matches!(a.result, Err(RpcError::Unreachable(_))),
            "{:?}",
            a.result
        );
    }

    #[tokio::test]
    async fn refused_connection_is_unreachable_and_backs_off() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let id = BookieId::new(l.local_addr().unwrap().to_string()).unwrap();
        drop(l);
        let cfg = ClientConfig {
            reconnect_backoff: Duration::from_secs(60),
            ..ClientConfig::default()
        };
        let b = Bookies::new(Arc::new(TcpConnector), Arc::new(cfg));
        let r = b
            .call(&id, req::read(1, 0, None), Duration::from_secs(30))
            .await;
        let Err(RpcError::Unreachable(reason)) = r else {
            panic!("{r:?}")
        };
        assert!(reason.contains(id.as_str()), "{reason}");
        // Within the backoff the same cause is returned without a new attempt.
        let r2 = b
            .call(&id, req::read(1, 0, None), Duration::from_secs(30))
            .await;
        assert_eq!(r2.unwrap_err(), RpcError::Unreachable(reason));
    }
}
