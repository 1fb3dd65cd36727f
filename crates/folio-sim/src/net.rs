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
//! the order of requests, which the seed fixes. Requests that reach one bookie at the same
//! virtual instant are processed together, with the journal's writer held until all are
//! queued: they share one group commit (one write, one fdatasync, callbacks in order), as
//! concurrent adds do in a real bookie, and a crash or disk fault can strike that group.

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

/// Negative controls that break the client's side of the protocol on the wire (the
/// client's own switches are crate-private). Off in every real run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProtocolBreaks {
    /// Recovery reads of entries (not the fence read of entry -1) lose their fence flag
    /// on the way: a bookie the fence phase did not reach stays unfenced (issue 2614).
    pub unfenced_recovery_reads: bool,
    /// A read request that is lost (dropped, or sent to a bookie behind a partition)
    /// is answered "no such entry", as a client counting a timeout as a negative would
    /// see it. Read requests are then lost at least 5% of the time.
    pub lost_read_as_no_entry: bool,
}

struct Conn {
    client: usize,
    bookie: BookieId,
    kill: watch::Sender<bool>,
}

/// Requests to process together, each with where its answer goes.
type Batch = Vec<(Request, oneshot::Sender<Option<Response>>)>;

#[derive(Default)]
struct State {
    /// The live incarnation of each bookie (`None` while it is down) and its epoch.
    bookies: BTreeMap<BookieId, (Option<Arc<Incarnation>>, u64)>,
    partitions: BTreeSet<(usize, BookieId)>,
    faults: NetFaults,
    conns: Vec<Conn>,
    /// Requests answered after the blocking wait gave up (OS thread timing leaked in).
    late_completions: u64,
    /// Every request delivered and every answer, folded into one hash in order (with the
    /// virtual time): two runs of a seed are the same run when these are equal.
    digest: u64,
    events: u64,
    /// The same events as lines, kept when asked for (to find where two runs part).
    log: Option<Vec<String>>,
    breaks: ProtocolBreaks,
    /// Bookies with a slow disk: until when, the time each write takes, and when the
    /// disk is done with the writes queued so far (writes wait for each other).
    slow: BTreeMap<BookieId, (tokio::time::Instant, Duration, tokio::time::Instant)>,
    dropped_requests: u64,
    dropped_responses: u64,
    duplicates: u64,
    slow_writes: u64,
    /// Checkpoints taken after a request (see `Incarnation::after_request`).
    store_checkpoints: u64,
    /// Per bookie incarnation (id, epoch), the requests delivered at this virtual instant
    /// and waiting to be processed together ([`process_together`]).
    inboxes: BTreeMap<(BookieId, u64), Batch>,
    /// Requests processed in a batch of two or more (sharing a journal group).
    batched_requests: u64,
    /// Reads answered by `Processor::read_without_blocking`.
    reads_without_blocking: u64,
    /// Long polls taken by `Processor::long_poll_without_blocking`.
    long_polls_without_blocking: u64,
    /// Stepped force-write path: steps taken, and the groups they made durable.
    force_write_steps: u64,
    force_write_groups: u64,
    /// Per bookie, every add it acknowledged (its last body per entry), for the check
    /// that a restarted bookie still holds them ([`Net::check_acknowledged`]).
    acknowledged: BTreeMap<BookieId, BTreeMap<(i64, i64), Bytes>>,
    /// Per bookie, the bodies of adds delivered to it and not (yet) acknowledged: one may
    /// have reached its journal before the add failed (an fsync error, a crash), so a
    /// restarted bookie may read it instead of the body it acknowledged for that entry.
    /// Only a recovery's rewrite of an entry differs from the writer's, in the LAC it
    /// carries, never in its payload.
    unacknowledged: BTreeMap<BookieId, BTreeMap<(i64, i64), BTreeSet<Bytes>>>,
    /// Per bookie, deferred-sync recovery adds it acknowledged that no ForceLedger has
    /// covered yet: owed only once one answers OK (they move to `acknowledged` then), and
    /// forgotten when the bookie goes down (a restart may lose them; the copier sees the
    /// connection break and copies again).
    unforced: BTreeMap<BookieId, BTreeMap<(i64, i64), Bytes>>,
    /// Per (client, ledger), the bookies whose answer to a LAC read (OK, no such entry or
    /// no such ledger: what readLastConfirmed counts) reached the client's stream.
    lac_answers: BTreeMap<(usize, i64), BTreeSet<BookieId>>,
    /// Reads of entry -1 answered by a bookie that had acknowledged entries of the ledger,
    /// and those whose answer named an older entry (or none).
    last_entries_checked: u64,
    stale_last_entries: Vec<String>,
}

/// FNV-1a over `bytes`, continuing from `h`.
pub fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |a, b| (a ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

/// FNV-1a's starting value.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// The network shared by every client and bookie of a run.
#[derive(Clone)]
pub struct Net {
    state: Arc<Mutex<State>>,
    rng: Arc<SimRng>,
    start: tokio::time::Instant,
}

impl Net {
    /// Built inside the run's runtime (it reads the virtual clock). `keep_log` keeps every
    /// message event as a line (see [`Net::log`]).
    pub fn new(rng: Arc<SimRng>, keep_log: bool) -> Net {
        let state = State {
            digest: FNV_START,
            log: keep_log.then(Vec::new),
            ..State::default()
        };
        Net {
            state: Arc::new(Mutex::new(state)),
            rng,
            start: tokio::time::Instant::now(),
        }
    }

    /// Folds one message event into the digest (and the log, when kept).
    fn record(&self, event: std::fmt::Arguments<'_>) {
        let at = self.start.elapsed().as_micros();
        let line = format!("{at} {event}");
        let mut s = self.state.lock();
        s.digest = fnv(s.digest, line.as_bytes());
        s.events += 1;
        if let Some(log) = s.log.as_mut() {
            log.push(line);
        }
    }

    /// The digest of every message event so far, and their number.
    pub fn digest(&self) -> (u64, u64) {
        let s = self.state.lock();
        (s.digest, s.events)
    }

    /// The message events, if kept.
    pub fn log(&self) -> Vec<String> {
        self.state.lock().log.clone().unwrap_or_default()
    }

    pub fn set_faults(&self, faults: NetFaults) {
        self.state.lock().faults = faults;
    }

    pub fn set_breaks(&self, breaks: ProtocolBreaks) {
        self.state.lock().breaks = breaks;
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
        s.unforced.remove(bookie);
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

    /// Counts a storage wait that gave up (see [`Outcome::late_completions`]).
    ///
    /// [`Outcome::late_completions`]: crate::Outcome::late_completions
    pub fn count_late(&self) {
        self.state.lock().late_completions += 1;
    }

    /// The bookie's disk is slow until `until`: each write request takes `per_write`
    /// (virtual time) of the disk, one after the other, before its journal takes it.
    pub fn slow_disk(&self, bookie: &BookieId, until: tokio::time::Instant, per_write: Duration) {
        let now = tokio::time::Instant::now();
        self.state
            .lock()
            .slow
            .insert(bookie.clone(), (until, per_write, now));
    }

    pub fn heal_disks(&self) {
        self.state.lock().slow.clear();
    }

    /// Adds the message faults injected so far to `into`.
    pub fn count_faults(&self, into: &mut crate::scenario::FaultCounts) {
        let s = self.state.lock();
        into.dropped_requests += s.dropped_requests;
        into.dropped_responses += s.dropped_responses;
        into.duplicates += s.duplicates;
        into.slow_writes += s.slow_writes;
        into.store_checkpoints += s.store_checkpoints;
        into.batched_requests += s.batched_requests;
        into.reads_without_blocking += s.reads_without_blocking;
        into.long_polls_without_blocking += s.long_polls_without_blocking;
        into.force_write_steps += s.force_write_steps;
        into.force_write_groups += s.force_write_groups;
    }

    /// Reads back from `inc` every entry `bookie` acknowledged: returns how many were
    /// checked and a line for each that is missing, unreadable or different.
    pub fn check_acknowledged(&self, bookie: &BookieId, inc: &Incarnation) -> (u64, Vec<String>) {
        let acked = self
            .state
            .lock()
            .acknowledged
            .get(bookie)
            .cloned()
            .unwrap_or_default();
        let mut lost = Vec::new();
        let unacked = self
            .state
            .lock()
            .unacknowledged
            .get(bookie)
            .cloned()
            .unwrap_or_default();
        for ((ledger, entry), body) in &acked {
            match inc.read_entry(*ledger, *entry) {
                Ok(b) if b == body => {}
                Ok(b)
                    if unacked
                        .get(&(*ledger, *entry))
                        .is_some_and(|u| u.contains(&b)) => {}
                Ok(_) => lost.push(format!("{ledger}:{entry} reads other bytes")),
                Err(e) => lost.push(format!("{ledger}:{entry}: {e}")),
            }
        }
        (acked.len() as u64, lost)
    }

    /// The bookies whose answer to a LAC read of `ledger` reached client `client`'s
    /// stream so far (see `State::lac_answers`).
    pub fn lac_answers(&self, client: usize, ledger: i64) -> BTreeSet<BookieId> {
        self.state
            .lock()
            .lac_answers
            .get(&(client, ledger))
            .cloned()
            .unwrap_or_default()
    }

    /// Bookies' answers to reads of entry -1 that named an entry older than one they had
    /// acknowledged (see [`Net::owed_last_entry`]), and how many answers were checked.
    pub fn stale_last_entries(&self) -> (u64, Vec<String>) {
        let s = self.state.lock();
        (s.last_entries_checked, s.stale_last_entries.clone())
    }

    /// The last entry of `ledger` that `bookie` acknowledged (and still owes): its answer
    /// to a read of entry -1 (the LAC read, a recovery's fencing read) must name that
    /// entry or a newer one, whatever restarts came between.
    fn owed_last_entry(&self, bookie: &BookieId, ledger: i64) -> Option<i64> {
        let s = self.state.lock();
        s.acknowledged
            .get(bookie)?
            .range((ledger, i64::MIN)..=(ledger, i64::MAX))
            .next_back()
            .map(|((_, e), _)| *e)
    }

    /// The bookie starts over on an empty disk (reformatted): it owes nothing.
    pub fn forget_acknowledged(&self, bookie: &BookieId) {
        let mut s = self.state.lock();
        s.acknowledged.remove(bookie);
        s.unacknowledged.remove(bookie);
    }

    /// The wait a slow disk adds before `request`, if it writes.
    fn disk_wait(&self, bookie: &BookieId, request: &Request) -> Option<Duration> {
        let writes = match request {
            Request::Add(_) | Request::WriteLac { .. } | Request::ForceLedger { .. } => true,
            Request::Read(r) => r.fence,
            _ => false,
        };
        let now = tokio::time::Instant::now();
        let mut s = self.state.lock();
        let (until, per_write, busy) = s.slow.get_mut(bookie)?;
        if !writes || now >= *until {
            return None;
        }
        let done = (*busy).max(now) + *per_write;
        *busy = done;
        s.slow_writes += 1;
        Some(done - now)
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
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Outgoing>();
    let mut wkilled = killed.clone();
    let (wnet, wbookie) = (net.clone(), bookie.clone());
    let writer = tokio::spawn(async move {
        loop {
            let out = tokio::select! {
                // Polled in this order (no random branch choice): the run follows the seed.
                biased;
                _ = wkilled.wait_for(|k| *k) => None,
                out = out_rx.recv() => out,
            };
            let Some((body, lac_answer)) = out else {
                return;
            };
            let mut frame = BytesMut::new();
            folio_proto::encode_frame(&body, &mut frame);
            if wr.write_all(&frame).await.is_err() {
                return;
            }
            // In the client's stream: its reader gets it, even if the connection closes.
            if let Some(ledger) = lac_answer {
                wnet.state
                    .lock()
                    .lac_answers
                    .entry((client, ledger))
                    .or_default()
                    .insert(wbookie.clone());
            }
        }
    });
    let mut decoder = folio_proto::FrameDecoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    'conn: loop {
        while let Ok(Some(frame)) = decoder.next_frame() {
            let (faults, breaks) = {
                let s = net.state.lock();
                (s.faults, s.breaks)
            };
            let lie = breaks.lost_read_as_no_entry;
            if net.per_mille(faults.drop_request) || (lie && net.per_mille(50)) {
                net.state.lock().dropped_requests += 1;
                if lie && let Some(answer) = no_entry(frame.clone()) {
                    let _ = out_tx.send((answer, None));
                }
                continue;
            }
            let copies = if net.per_mille(faults.duplicate) {
                net.state.lock().duplicates += 1;
                2
            } else {
                1
            };
            for copy in 0..copies {
                let delay = net.delay();
                let drop_response = net.per_mille(faults.drop_response);
                if drop_response && copy == 0 {
                    net.state.lock().dropped_responses += 1;
                }
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
            biased;
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

/// An answer on its way to a client, with the ledger if it is an answer to a LAC read
/// that readLastConfirmed counts (see `State::lac_answers`).
type Outgoing = (Bytes, Option<i64>);

/// Delivers one request after `delay`, processes it, and sends the answer (after another
/// seeded delay) if `out` is given and the path is still open.
async fn handle(
    net: Net,
    client: usize,
    bookie: BookieId,
    epoch: u64,
    frame: Bytes,
    delay: Duration,
    out: Option<mpsc::UnboundedSender<Outgoing>>,
) {
    tokio::time::sleep(delay).await;
    let breaks = net.state.lock().breaks;
    let Some(inc) = net.reachable(client, &bookie, epoch) else {
        if breaks.lost_read_as_no_entry
            && let (Some(out), Some(answer)) = (out, no_entry(frame))
        {
            let _ = out.send((answer, None));
        }
        return;
    };
    let (mut request, echo) = match wire::decode(frame) {
        Decoded::Request(r, e) => (r, e),
        Decoded::Answer(body) => {
            if let Some(out) = out {
                let _ = out.send((body, None));
            }
            return;
        }
        Decoded::Close(_) => return,
    };
    if breaks.unfenced_recovery_reads
        && let Request::Read(r) = &mut request
        && r.fence
        && r.entry >= 0
    {
        r.fence = false;
    }
    net.record(format_args!(
        "c{client} -> {bookie} (disk op {}): {request:?}",
        inc.fs.ops()
    ));
    let inc = match net.disk_wait(&bookie, &request) {
        Some(wait) => {
            tokio::time::sleep(wait).await;
            // The bookie may have crashed while the write waited for its disk.
            match net.reachable(client, &bookie, epoch) {
                Some(inc) => inc,
                None => return,
            }
        }
        None => inc,
    };
    let add = match &request {
        Request::Add(a) => Some((
            a.ledger,
            a.entry,
            a.body.clone(),
            a.recovery && a.deferred_sync,
        )),
        _ => None,
    };
    if let Some((ledger, entry, body, _)) = &add {
        net.state
            .lock()
            .unacknowledged
            .entry(bookie.clone())
            .or_default()
            .entry((*ledger, *entry))
            .or_default()
            .insert(body.clone());
    }
    // What a ForceLedger covers: the deferred adds acknowledged before it arrived.
    let forced: Vec<((i64, i64), Bytes)> = match &request {
        Request::ForceLedger { ledger } => net
            .state
            .lock()
            .unforced
            .get(&bookie)
            .map(|m| {
                m.range((*ledger, i64::MIN)..=(*ledger, i64::MAX))
                    .map(|(k, v)| (*k, v.clone()))
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    // A read of entry -1 (the LAC read, a fencing read): what the bookie owes it, taken
    // before the request is processed (an add acknowledged later may be processed after).
    let last_entry_read = match &request {
        Request::ReadLac { ledger } => Some((*ledger, "LAC read")),
        Request::Read(r) if r.entry == folio_types::LAST_ENTRY_ID && r.previous_lac.is_none() => {
            Some((r.ledger, if r.fence { "fencing read" } else { "read" }))
        }
        _ => None,
    }
    .and_then(|(ledger, what)| {
        net.owed_last_entry(&bookie, ledger)
            .map(|owed| (ledger, what, owed))
    });
    let response = process_together(&net, &bookie, epoch, &inc, request).await;
    let Some(response) = response else { return };
    if let Some((ledger, what, owed)) = last_entry_read
        && let Some(answered) = last_entry_answered(&response)
    {
        let mut s = net.state.lock();
        s.last_entries_checked += 1;
        if answered.is_none_or(|e| e < owed) {
            let at = net.start.elapsed().as_millis();
            let named = answered.map_or("no entry".to_string(), |e| format!("entry {e}"));
            s.stale_last_entries.push(format!(
                "{bookie} answered a {what} of entry -1 of ledger {ledger} at {at} ms with \
                 {named}, older than entry {owed} it acknowledged"
            ));
        }
    }
    let lac_answer = match &response {
        Response::ReadLac {
            status:
                folio_proto::Status::Ok | folio_proto::Status::NoEntry | folio_proto::Status::NoLedger,
            ledger,
            ..
        } => Some(*ledger),
        _ => None,
    };
    match (add, &response) {
        (
            Some((ledger, entry, body, deferred)),
            Response::Add {
                status: folio_proto::Status::Ok,
                ..
            },
        ) => {
            let mut s = net.state.lock();
            if let Some(u) = s
                .unacknowledged
                .get_mut(&bookie)
                .and_then(|m| m.get_mut(&(ledger, entry)))
            {
                u.remove(&body);
            }
            let owed = if deferred {
                &mut s.unforced
            } else {
                &mut s.acknowledged
            };
            owed.entry(bookie.clone())
                .or_default()
                .insert((ledger, entry), body);
        }
        (
            _,
            Response::ForceLedger {
                status: folio_proto::Status::Ok,
                ..
            },
        ) if !forced.is_empty() => {
            let mut s = net.state.lock();
            if let Some(m) = s.unforced.get_mut(&bookie) {
                for (k, _) in &forced {
                    m.remove(k);
                }
            }
            s.acknowledged
                .entry(bookie.clone())
                .or_default()
                .extend(forced);
        }
        _ => {}
    }
    // With the bookie's disk operation count: the digest then also covers the disk.
    net.record(format_args!(
        "c{client} <- {bookie} (disk op {}): {response:?}",
        inc.fs.ops()
    ));
    let back = net.delay();
    tokio::time::sleep(back).await;
    if net.reachable(client, &bookie, epoch).is_none() {
        return;
    }
    if let Some(out) = out {
        let _ = out.send((wire::encode(&echo, response), lac_answer));
    }
}

/// The last entry a bookie's answer to a read of entry -1 names: `Some(Some(id))` an
/// entry, `Some(None)` none (no such entry or ledger, or only an explicit LAC), `None`
/// when the answer is another error (a read-only or failed bookie), which owes nothing.
fn last_entry_answered(response: &Response) -> Option<Option<i64>> {
    use folio_proto::Status;
    let entry_id = |b: &Option<Bytes>| {
        b.as_deref()
            .and_then(folio_proto::EntryHeader::peek)
            .map(|h| h.entry_id)
    };
    match response {
        Response::ReadLac {
            status: Status::Ok,
            last_entry_body,
            ..
        } => Some(entry_id(last_entry_body)),
        Response::Read {
            status: Status::Ok,
            body,
            ..
        } => Some(entry_id(body)),
        Response::ReadLac {
            status: Status::NoEntry | Status::NoLedger,
            ..
        }
        | Response::Read {
            status: Status::NoEntry | Status::NoLedger,
            ..
        } => Some(None),
        _ => None,
    }
}

/// The "no such entry" answer to a read request frame (None for anything else).
fn no_entry(frame: Bytes) -> Option<Bytes> {
    let Decoded::Request(Request::Read(r), echo) = wire::decode(frame) else {
        return None;
    };
    let response = Response::Read {
        status: folio_proto::Status::NoEntry,
        ledger: r.ledger,
        entry: r.entry,
        body: None,
        max_lac: None,
    };
    Some(wire::encode(&echo, response))
}

/// Yields before a batch is taken, so that every request delivered at this instant joins.
const BATCH_YIELDS: usize = 4;

/// Processes `request` together with the others delivered to this incarnation at the same
/// virtual instant: the first to arrive waits for the others to queue behind it, then
/// runs them all ([`process_batch`]). A long poll runs alone (it may not answer now).
async fn process_together(
    net: &Net,
    bookie: &BookieId,
    epoch: u64,
    inc: &Arc<Incarnation>,
    request: Request,
) -> Option<Response> {
    if matches!(&request, Request::Read(r) if r.previous_lac.is_some()) {
        return process(net, inc, request).await;
    }
    let key = (bookie.clone(), epoch);
    let (tx, rx) = oneshot::channel();
    let first = {
        let mut s = net.state.lock();
        let inbox = s.inboxes.entry(key.clone()).or_default();
        inbox.push((request, tx));
        inbox.len() == 1
    };
    if first {
        for _ in 0..BATCH_YIELDS {
            tokio::task::yield_now().await;
        }
        let batch = net.state.lock().inboxes.remove(&key).unwrap_or_default();
        process_batch(net, inc, batch);
    }
    rx.await.ok().flatten()
}

/// A request's reply from the processor, and where the simulated network wants it.
type Pending = (
    oneshot::Receiver<Response>,
    oneshot::Sender<Option<Response>>,
);

/// Runs a batch through the processor with the journal's writer held until every request
/// is queued (one group commit), then waits for every answer, blocking the runtime thread
/// (so virtual time stands still) for up to a few real seconds. With the stepped
/// force-write path the group is only written now; its answers wait for a step
/// ([`defer_to_step`]).
fn process_batch(net: &Net, inc: &Arc<Incarnation>, batch: Batch) {
    if batch.len() > 1 {
        net.state.lock().batched_requests += batch.len() as u64;
    }
    let pending: Vec<Pending> = inc.held(|| {
        batch
            .into_iter()
            .map(|(request, out)| {
                let (tx, rx) = oneshot::channel::<Response>();
                let reply: Reply = Box::new(move |r| {
                    let _ = tx.send(r);
                });
                // Not a long poll (those run alone), so no timer.
                let _ = process_as_a_bookie(net, &inc.processor, request, reply);
                (rx, out)
            })
            .collect()
    });
    if inc.force_write() {
        return defer_to_step(net, inc, pending);
    }
    if inc.storage.engine().forces_wait_for_flush() {
        if !inc.quiesce() {
            net.state.lock().late_completions += 1;
        }
        checkpoint_for_forces(net, inc);
    }
    let late = deliver(pending);
    if late || !inc.quiesce() {
        net.state.lock().late_completions += 1;
    }
    // The ledger store's own rhythm: a checkpoint once enough is unflushed (its failure
    // already made the bookie read-only).
    if inc.after_request().is_some() {
        net.state.lock().store_checkpoints += 1;
    }
}

/// The checkpoint a ForceLedger of deferred-sync copies waits for, if one does (the
/// journal idle; its failure already made the bookie read-only).
fn checkpoint_for_forces(net: &Net, inc: &Incarnation) {
    if inc.checkpoint_for_forces().is_some() {
        net.state.lock().store_checkpoints += 1;
    }
}

/// Waits (blocking, up to 10 real seconds) for each answer and hands it on; true if one
/// came late (then it is handed on whenever the storage gives it).
fn deliver(pending: Vec<Pending>) -> bool {
    let started = std::time::Instant::now();
    let mut late = false;
    for (mut rx, out) in pending {
        loop {
            match rx.try_recv() {
                Ok(r) => {
                    let _ = out.send(Some(r));
                    break;
                }
                Err(oneshot::error::TryRecvError::Closed) => {
                    let _ = out.send(None);
                    break;
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if started.elapsed() > Duration::from_secs(10) {
                // OS thread timing leaked in: answer whenever the storage does.
                late = true;
                tokio::spawn(async move {
                    let _ = out.send(rx.await.ok());
                });
                break;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    late
}

/// The stepped force-write path: once the writer is idle (the batch's group written),
/// what is answered already (reads, refusals) goes now; the rest waits for the next
/// force-write step, scheduled 0-5 ms (virtual, seeded) later if none is, so that batches
/// arriving meanwhile write their groups behind this one's before one fdatasync covers
/// them all. A checkpoint may run meanwhile, with groups written but not durable.
fn defer_to_step(net: &Net, inc: &Arc<Incarnation>, pending: Vec<Pending>) {
    if !inc.quiesce() {
        net.state.lock().late_completions += 1;
    }
    checkpoint_for_forces(net, inc);
    let schedule = {
        let mut awaiting = inc.awaiting_sync.lock();
        for (mut rx, out) in pending {
            match rx.try_recv() {
                Ok(r) => {
                    let _ = out.send(Some(r));
                }
                Err(oneshot::error::TryRecvError::Closed) => {
                    let _ = out.send(None);
                }
                Err(oneshot::error::TryRecvError::Empty) => awaiting.0.push((rx, out)),
            }
        }
        let schedule = !awaiting.0.is_empty() && !awaiting.1;
        awaiting.1 |= schedule;
        schedule
    };
    if inc.after_request().is_some() {
        net.state.lock().store_checkpoints += 1;
    }
    if schedule {
        let delay = Duration::from_millis(net.rng.below(6));
        let (net, inc) = (net.clone(), inc.clone());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let awaiting = {
                let mut a = inc.awaiting_sync.lock();
                a.1 = false;
                std::mem::take(&mut a.0)
            };
            // Empty if the bookie crashed meanwhile (its unsynced groups are lost).
            if awaiting.is_empty() {
                return;
            }
            let groups = inc.force_write_step();
            {
                let mut st = net.state.lock();
                st.force_write_steps += 1;
                st.force_write_groups += groups as u64;
            }
            let late = deliver(awaiting);
            if late || !inc.quiesce() {
                net.state.lock().late_completions += 1;
            }
            if inc.after_request().is_some() {
                net.state.lock().store_checkpoints += 1;
            }
        });
    }
}

/// What a bookie's connection does with a request (folio-bookie's `dispatch`): a read that
/// storage can serve without the disk is answered at once, a long poll whose LAC storage
/// knows in memory is taken at once, anything else is processed.
fn process_as_a_bookie(
    net: &Net,
    processor: &folio_bookie::Processor<Arc<folio_bookie::engine::EngineStorage>>,
    request: Request,
    reply: Reply,
) -> Option<folio_bookie::LongPollTimer> {
    if let Some(response) = processor.read_without_blocking(&request) {
        net.state.lock().reads_without_blocking += 1;
        reply(response);
        return None;
    }
    match processor.long_poll_without_blocking(folio_bookie::ConnectionId::NONE, request, reply) {
        Ok(timer) => {
            net.state.lock().long_polls_without_blocking += 1;
            timer
        }
        Err((request, reply)) => processor.process(request, reply),
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
    let timer = process_as_a_bookie(net, &inc.processor, request, reply);
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
                Ok(r) => {
                    if !inc.quiesce() {
                        net.state.lock().late_completions += 1;
                    }
                    // The ledger store's own rhythm: a checkpoint once enough is
                    // unflushed (its failure already made the bookie read-only).
                    if inc.after_request().is_some() {
                        net.state.lock().store_checkpoints += 1;
                    }
                    return Some(r);
                }
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
