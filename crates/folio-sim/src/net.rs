//! The simulated network: a [`Connector`] that hands the client one end of an in-memory
//! duplex stream whose other end is served by a simulated bookie, with seeded faults.
//!
//! Faults act on whole messages (decoded frames), never on bytes, because a TCP stream
//! never corrupts or reorders bytes: a request may be delayed, dropped, or delivered twice
//! (processed twice, answered once); a response may be delayed or dropped; delays reorder
//! messages. A partition between a client and a bookie closes their connections and
//! refuses new ones; a crashed bookie does the same for every client.
//!
//! Each request is processed on the runtime thread and its storage completion waited for
//! there (the journal completes on its own OS thread within microseconds on the simulated
//! disk). That keeps virtual time still while the journal works, so a paused-clock runtime
//! never auto-advances past a write in progress, and it makes the order of journal writes
//! the order of requests, which the seed fixes.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use folio_bookie::wire::{self, Decoded};
use folio_bookie::{Reply, Request, Response};
use folio_client::conn::{ConnectFuture, Connector, Stream};
use folio_types::BookieId;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use crate::bookie::Incarnation;
use crate::rng::SimRng;
use folio_env::Rng;

/// Message-level fault rates, in per-mille, and the delay bound.
#[derive(Debug, Clone, Copy, Default)]
pub struct NetFaults {
    pub drop_request: u64,
    pub drop_response: u64,
    pub duplicate: u64,
    pub max_delay_ms: u64,
}

struct Conn {
    client: usize,
    bookie: BookieId,
    kill: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    /// The live incarnation of each bookie (`None` while it is down) and its epoch.
    bookies: BTreeMap<BookieId, (Option<Arc<Incarnation>>, u64)>,
    partitions: BTreeSet<(usize, BookieId)>,
    faults: NetFaults,
    conns: Vec<Conn>,
    /// Requests answered after the blocking wait gave up (OS thread timing leaked in).
    late_completions: u64,
}

/// The network shared by every client and bookie of a run.
#[derive(Clone)]
pub struct Net {
    state: Arc<Mutex<State>>,
    rng: Arc<SimRng>,
}

impl Net {
    pub fn new(rng: Arc<SimRng>) -> Net {
        Net {
            state: Arc::default(),
            rng,
        }
    }

    pub fn set_faults(&self, faults: NetFaults) {
        self.state.lock().faults = faults;
    }

    /// Puts a bookie incarnation on the network (a start or restart).
    pub fn bring_up(&self, bookie: &BookieId, inc: Arc<Incarnation>) {
        let mut s = self.state.lock();
        let slot = s.bookies.entry(bookie.clone()).or_insert((None, 0));
        slot.0 = Some(inc);
        slot.1 += 1;
    }

    /// Takes a bookie off the network: its connections close, new ones are refused.
    /// Returns the incarnation that was running.
    pub fn take_down(&self, bookie: &BookieId) -> Option<Arc<Incarnation>> {
        let mut s = self.state.lock();
        let old = s.bookies.get_mut(bookie).and_then(|slot| {
            slot.1 += 1;
            slot.0.take()
        });
        s.conns.retain(|c| {
            if &c.bookie == bookie {
                let _ = c.kill.send(true);
                false
            } else {
                true
            }
        });
        old
    }

    pub fn incarnation(&self, bookie: &BookieId) -> Option<Arc<Incarnation>> {
        self.state
            .lock()
            .bookies
            .get(bookie)
            .and_then(|s| s.0.clone())
    }

    pub fn partition(&self, client: usize, bookie: &BookieId) {
        let mut s = self.state.lock();
        s.partitions.insert((client, bookie.clone()));
        s.conns.retain(|c| {
            if c.client == client && &c.bookie == bookie {
                let _ = c.kill.send(true);
                false
            } else {
                true
            }
        });
    }

    pub fn heal_partitions(&self) {
        self.state.lock().partitions.clear();
    }

    pub fn late_completions(&self) -> u64 {
        self.state.lock().late_completions
    }

    /// The connector of client number `client`.
    pub fn connector(&self, client: usize) -> SimConnector {
        SimConnector {
            net: self.clone(),
            client,
        }
    }

    /// Whether a message between `client` and `bookie`'s incarnation `epoch` may pass.
    fn reachable(&self, client: usize, bookie: &BookieId, epoch: u64) -> Option<Arc<Incarnation>> {
        let s = self.state.lock();
        if s.partitions.contains(&(client, bookie.clone())) {
            return None;
        }
        match s.bookies.get(bookie) {
            Some((Some(inc), e)) if *e == epoch => Some(inc.clone()),
            _ => None,
        }
    }

    fn per_mille(&self, rate: u64) -> bool {
        rate > 0 && self.rng.below(1000) < rate
    }

    fn delay(&self) -> Duration {
        let max = self.state.lock().faults.max_delay_ms;
        Duration::from_millis(if max == 0 { 0 } else { self.rng.below(max + 1) })
    }
}

/// One client's way to its bookies.
pub struct SimConnector {
    net: Net,
    client: usize,
}

impl Connector for SimConnector {
    fn connect<'a>(&'a self, bookie: &'a BookieId) -> ConnectFuture<'a> {
        Box::pin(async move {
            let delay = self.net.delay();
            tokio::time::sleep(delay).await;
            let epoch = {
                let s = self.net.state.lock();
                let up = s.bookies.get(bookie).filter(|b| b.0.is_some());
                match up {
                    Some((_, e)) if !s.partitions.contains(&(self.client, bookie.clone())) => *e,
                    _ => {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            format!("simulated: {bookie} unreachable"),
                        ));
                    }
                }
            };
            let (client_end, server_end) = tokio::io::duplex(1 << 20);
            let (kill, killed) = watch::channel(false);
            self.net.state.lock().conns.push(Conn {
                client: self.client,
                bookie: bookie.clone(),
                kill,
            });
            tokio::spawn(serve(
                self.net.clone(),
                self.client,
                bookie.clone(),
                epoch,
                server_end,
                killed,
            ));
            Ok(Box::new(client_end) as Box<dyn Stream>)
        })
    }
}

async fn serve(
    net: Net,
    client: usize,
    bookie: BookieId,
    epoch: u64,
    stream: tokio::io::DuplexStream,
    mut killed: watch::Receiver<bool>,
) {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Bytes>();
    let mut wkilled = killed.clone();
    let writer = tokio::spawn(async move {
        loop {
            let body = tokio::select! {
                _ = wkilled.wait_for(|k| *k) => None,
                body = out_rx.recv() => body,
            };
            let Some(body) = body else { return };
            let mut frame = BytesMut::new();
            folio_proto::encode_frame(&body, &mut frame);
            if wr.write_all(&frame).await.is_err() {
                return;
            }
        }
    });
    let mut decoder = folio_proto::FrameDecoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    'conn: loop {
        while let Ok(Some(frame)) = decoder.next_frame() {
            let faults = net.state.lock().faults;
            if net.per_mille(faults.drop_request) {
                continue;
            }
            let copies = if net.per_mille(faults.duplicate) {
                2
            } else {
                1
            };
            for copy in 0..copies {
                let delay = net.delay();
                let drop_response = net.per_mille(faults.drop_response);
                tokio::spawn(handle(
                    net.clone(),
                    client,
                    bookie.clone(),
                    epoch,
                    frame.clone(),
                    delay,
                    // A duplicate is processed, but only one answer comes back.
                    (copy == 0 && !drop_response).then(|| out_tx.clone()),
                ));
            }
        }
        let n = tokio::select! {
            _ = killed.wait_for(|k| *k) => 0,
            read = rd.read(&mut buf) => read.unwrap_or(0),
        };
        if n == 0 {
            break 'conn;
        }
        decoder.feed(&buf[..n]);
    }
    writer.abort();
}

/// Delivers one request after `delay`, processes it, and sends the answer (after another
/// seeded delay) if `out` is given and the path is still open.
async fn handle(
    net: Net,
    client: usize,
    bookie: BookieId,
    epoch: u64,
    frame: Bytes,
    delay: Duration,
    out: Option<mpsc::UnboundedSender<Bytes>>,
) {
    tokio::time::sleep(delay).await;
    let Some(inc) = net.reachable(client, &bookie, epoch) else {
        return;
    };
    let (request, echo) = match wire::decode(frame) {
        Decoded::Request(r, e) => (r, e),
        Decoded::Answer(body) => {
            if let Some(out) = out {
                let _ = out.send(body);
            }
            return;
        }
        Decoded::Close(_) => return,
    };
    let response = process(&net, &inc, request).await;
    let Some(response) = response else { return };
    let back = net.delay();
    tokio::time::sleep(back).await;
    if net.reachable(client, &bookie, epoch).is_none() {
        return;
    }
    if let Some(out) = out {
        let _ = out.send(wire::encode(&echo, response));
    }
}

/// Runs the request through the processor and waits for its answer, blocking the runtime
/// thread (so virtual time stands still) for up to a few real seconds.
async fn process(net: &Net, inc: &Incarnation, request: Request) -> Option<Response> {
    let long_poll = matches!(&request, Request::Read(r) if r.previous_lac.is_some());
    let (tx, mut rx) = oneshot::channel::<Response>();
    let reply: Reply = Box::new(move |r| {
        let _ = tx.send(r);
    });
    let timer = inc.processor.process(request, reply);
    if let Some(t) = timer {
        let p = inc.processor.clone();
        tokio::spawn(async move {
            tokio::time::sleep(t.timeout).await;
            p.expire_long_poll(t.id);
        });
    }
    if !long_poll {
        let started = std::time::Instant::now();
        loop {
            match rx.try_recv() {
                Ok(r) => return Some(r),
                Err(oneshot::error::TryRecvError::Closed) => return None,
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if started.elapsed() > Duration::from_secs(10) {
                net.state.lock().late_completions += 1;
                break;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    rx.await.ok()
}
