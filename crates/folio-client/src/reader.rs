//! Reading a ledger: entries (digest verified, next replica on a mismatch or an error),
//! the LAC (from all bookies until every ack quorum answered, or the first answer), and
//! the long poll that waits for the LAC to move.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use folio_metadata::Versioned;
use folio_proto::{DigestManager, Status, VerifiedEntry, pb};
use folio_types::metadata::LedgerMetadata;
use folio_types::quorum::QuorumConfig;
use folio_types::{BookieId, EntryId, LedgerId};
use parking_lot::Mutex;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::{Inner, metadata_lac};
use crate::conn::{RpcError, Sent, req};
use crate::coverage::covers_ensemble;
use crate::error::{ClientError, Result};

/// One entry read from a ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub ledger_id: LedgerId,
    pub entry_id: EntryId,
    pub payload: Bytes,
}

/// Maps a failed request to a bookie into the client's error for (ledger, entry).
pub(crate) fn rpc_error(
    ledger: LedgerId,
    entry: EntryId,
    bookie: &BookieId,
    e: RpcError,
) -> ClientError {
    match e {
        RpcError::Status(Status::NoEntry) => ClientError::NoSuchEntry { ledger, entry },
        RpcError::Status(Status::NoLedger) => ClientError::NoSuchEntry { ledger, entry },
        RpcError::Status(Status::Fenced) => ClientError::Fenced { ledger },
        RpcError::Status(Status::Unauthorized) => ClientError::Unauthorized {
            ledger,
            bookie: Some(bookie.clone()),
        },
        RpcError::Status(status) => ClientError::BookieError {
            ledger,
            entry,
            bookie: bookie.clone(),
            status,
        },
        RpcError::Timeout => ClientError::Timeout {
            what: format!("bookie {bookie} did not answer for ledger {ledger} entry {entry}"),
        },
        RpcError::Unreachable(reason) | RpcError::BadResponse(reason) => {
            ClientError::BookieUnreachable {
                bookie: bookie.clone(),
                reason,
            }
        }
    }
}

/// A read request to one replica, in flight: queued on a live connection (no future of
/// its own), or a whole call that connects first.
enum ReplicaRead<'a> {
    Sent(Sent),
    Call(Pin<Box<dyn Future<Output = std::result::Result<pb::Response, RpcError>> + Send + 'a>>),
}

struct InFlight<'a> {
    /// Index into the write set.
    replica: usize,
    speculative: bool,
    /// When it was sent: it times out `read_timeout` later (a [`ReplicaRead::Call`] also
    /// has its own timer, with the same deadline), and a speculative read waits from the
    /// last one sent.
    sent_at: Instant,
    read: ReplicaRead<'a>,
}

impl InFlight<'_> {
    fn poll_answer(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::result::Result<pb::Response, RpcError>> {
        match &mut self.read {
            ReplicaRead::Sent(s) => Pin::new(s).poll(cx),
            ReplicaRead::Call(c) => c.as_mut().poll(cx),
        }
    }
}

/// Consecutive entries a reader asks of the same replica first, where it has them.
const READ_RUN: i64 = 16;

/// The ensemble positions to ask for `entry`, in order: its write set, with the replica
/// that serves the entry's run of [`READ_RUN`] entries first when it is in the write set
/// (always, when E = Qw). BookKeeper asks the write set's first bookie, so a reader of
/// consecutive entries sends each bookie every E-th entry; asking one bookie for a run
/// gives each bookie bursts of requests for neighbouring entries, which it serves from one
/// read-ahead run and answers with one write, and gives the reader its answers in bursts
/// on one connection. Catch-up reads of 1 KiB entries with 100 in flight ran 1.2x faster
/// against Folio's bookies and against BookKeeper's (docs/performance.md, "Reading runs
/// from one replica"). Any replica of the write set may be asked: a replica without the
/// entry answers "no entry" and the next is asked at once.
fn read_order(quorum: &QuorumConfig, entry: EntryId) -> Vec<usize> {
    let mut order = quorum.write_set(entry);
    let run_replica = (entry.max(0) / READ_RUN) as usize % quorum.ensemble_size;
    if let Some(i) = order.iter().position(|&p| p == run_replica) {
        order[..=i].rotate_right(1);
    }
    order
}

/// Reads one entry from the replicas of its write set, in order, until one returns it
/// with a valid digest. An error or a digest mismatch moves on to the next replica at
/// once; a replica that has not answered after [`ClientConfig::speculative_read_timeout`]
/// gets company: the same read goes to the next replica too, and the first valid answer
/// wins (BookKeeper's speculative reads). All "no entry" is [`ClientError::NoSuchEntry`];
/// otherwise the first digest mismatch, or the last error, is returned.
///
/// One timer serves both the requests' timeouts and the speculative read, and a request
/// to a bookie with a live connection is queued on it without a future or timer of its
/// own: at a hundred reads in flight the timers and futures of the requests were a sixth
/// of a reader's CPU.
///
/// [`ClientConfig::speculative_read_timeout`]: crate::ClientConfig::speculative_read_timeout
pub(crate) async fn read_entry(
    inner: &Inner,
    meta: &LedgerMetadata,
    digest: &DigestManager,
    entry: EntryId,
) -> Result<VerifiedEntry> {
    let ledger = digest.ledger_id();
    let quorum = meta
        .quorum()
        .map_err(|e| ClientError::MetadataConflict { ledger, reason: e })?;
    let Some(ensemble) = meta.ensemble_for_entry(entry) else {
        return Err(ClientError::NoSuchEntry { ledger, entry });
    };
    let replicas: Vec<&BookieId> = read_order(&quorum, entry)
        .into_iter()
        .map(|p| &ensemble[p])
        .collect();
    let speculate = inner.config.speculative_read_timeout;
    let timeout = inner.config.read_timeout;
    // `pooled`: try the live connection first; a request that found it stale is sent
    // again through `call`, which makes a new one (and retries nothing more).
    let send = |replica: usize, speculative: bool, pooled: bool| {
        let bookie = replicas[replica];
        let sent = match pooled {
            true => inner.bookies.send(bookie, req::read(ledger, entry, None)),
            false => None,
        };
        let read = sent.map_or_else(
            || {
                let req = req::read(ledger, entry, None);
                ReplicaRead::Call(Box::pin(inner.bookies.call(bookie, req, timeout)))
            },
            ReplicaRead::Sent,
        );
        InFlight {
            replica,
            speculative,
            sent_at: Instant::now(),
            read,
        }
    };
    let first = send(0, false, true);
    let mut last_sent = first.sent_at;
    let mut inflight: Vec<InFlight<'_>> = vec![first];
    let mut next = 1;
    let mut mismatch = None;
    let mut other = None;
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        if inflight.is_empty() {
            if next == replicas.len() {
                break;
            }
            inflight.push(send(next, false, true));
            last_sent = inflight[0].sent_at;
            next += 1;
        }
        // A replica that answers within the speculative timeout spares the others.
        let can_speculate = !speculate.is_zero() && next < replicas.len();
        let speculate_at = can_speculate.then(|| last_sent + speculate);
        let wake_at = inflight
            .iter()
            .map(|r| r.sent_at + timeout)
            .chain(speculate_at)
            .min()
            .expect("a request is in flight");
        // Biased: an answer that is ready wins over a timer firing in the same tick (a
        // simulator seed replays exactly).
        let answer = std::future::poll_fn(|cx| {
            for k in 0..inflight.len() {
                if let Poll::Ready(r) = inflight[k].poll_answer(cx) {
                    let done = inflight.swap_remove(k);
                    let pooled = matches!(done.read, ReplicaRead::Sent(_));
                    return Poll::Ready(Some((done.replica, done.speculative, pooled, r)));
                }
            }
            // The timer is made (and registered) only by a read that has to wait.
            let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(wake_at)));
            if t.deadline() != wake_at {
                t.as_mut().reset(wake_at);
            }
            match t.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        let Some((i, speculative, pooled, result)) = answer else {
            let now = Instant::now();
            let expired: Vec<usize> = (0..inflight.len())
                .rev()
                .filter(|&k| inflight[k].sent_at + timeout <= now)
                .collect();
            let timed_out = !expired.is_empty();
            for k in expired {
                let r = inflight.swap_remove(k);
                other = Some(rpc_error(
                    ledger,
                    entry,
                    replicas[r.replica],
                    RpcError::Timeout,
                ));
            }
            if timed_out {
                // A replica that timed out could not give the entry: ask the next one.
                if inflight.is_empty() && next < replicas.len() {
                    inflight.push(send(next, false, true));
                    last_sent = now;
                    next += 1;
                }
                continue;
            }
            if speculate_at.is_some_and(|at| at <= now) {
                tracing::debug!(ledger, entry, "slow read; asking the next replica too");
                inner
                    .stats
                    .speculative_reads
                    .fetch_add(1, Ordering::Relaxed);
                inflight.push(send(next, true, true));
                last_sent = now;
                next += 1;
            }
            continue;
        };
        let bookie = replicas[i];
        match result {
            Ok(resp) => {
                let body = resp.read_response.and_then(|r| r.body).unwrap_or_default();
                match digest.verify(&body, entry) {
                    Ok(v) => {
                        if speculative {
                            inner
                                .stats
                                .speculative_read_wins
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        return Ok(v);
                    }
                    Err(e) => {
                        tracing::warn!(ledger, entry, %bookie, "bad entry: {e}");
                        mismatch.get_or_insert(ClientError::DigestMismatch {
                            ledger,
                            entry,
                            bookie: bookie.clone(),
                        });
                    }
                }
            }
            Err(RpcError::Status(Status::NoEntry | Status::NoLedger)) => {}
            Err(RpcError::Unreachable(reason)) if pooled => {
                // Perhaps only a pooled connection the bookie had closed: once more on a
                // new one, as `Bookies::call` does.
                tracing::debug!(%bookie, "stale connection ({reason}); reconnecting");
                inflight.push(send(i, speculative, false));
                continue;
            }
            Err(e) => other = Some(rpc_error(ledger, entry, bookie, e)),
        }
        // This replica could not give the entry: ask the next one at once.
        if next < replicas.len() {
            let r = send(next, false, true);
            last_sent = r.sent_at;
            inflight.push(r);
            next += 1;
        }
    }
    Err(mismatch
        .or(other)
        .unwrap_or(ClientError::NoSuchEntry { ledger, entry }))
}

/// The order in which a long poll beyond an LAC asks the ensemble's bookies, `next` being
/// the entry after that LAC: its replicas first (their answer carries it), those that also
/// store `next + 1` ahead of the others (the entry that carries `next`'s confirmation
/// reaches them; with striping, a replica of `next` alone learns it an entry later), then
/// the rest of the ensemble, which learn the LAC from later entries.
fn long_poll_order(quorum: &QuorumConfig, next: EntryId) -> Vec<usize> {
    let mut order = quorum.write_set(next);
    order.sort_by_key(|&p| !quorum.stores(next + 1, p));
    order.extend((0..quorum.ensemble_size).filter(|&p| !quorum.stores(next, p)));
    order
}

/// How to read the LAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LacMode {
    /// Until the answering bookies cover every ack quorum (or all answered).
    Quorum,
    /// The first answer.
    First,
}

/// A ledger opened for reading.
pub struct ReadHandle {
    inner: Arc<Inner>,
    ledger: LedgerId,
    /// Shared, so that a read takes a reference to it rather than a copy.
    meta: Mutex<Arc<LedgerMetadata>>,
    digest: DigestManager,
    lac: AtomicI64,
    /// The ledger's metadata as the store pushes it, made at the first long poll and kept
    /// for the next ones: a close ends a wait at once without a metadata round trip (and
    /// a new watch) per poll.
    watch: Mutex<Option<LedgerWatch>>,
    /// The entry after the LAC a long poll waited beyond, as a bookie piggybacked it on
    /// its answer (digest verified): the tailing reader's next read takes it from here
    /// instead of asking a bookie again, as BookKeeper's `readLastAddConfirmedAndEntry`.
    piggybacked: Mutex<Option<(EntryId, Bytes)>>,
    /// Long polls in a row that no bookie answered: the pause after the next one.
    unanswered: AtomicU32,
}

/// The longest pause after a long poll that no bookie answered.
const MAX_UNANSWERED_PAUSE: Duration = Duration::from_millis(100);

/// How a long poll ended.
enum PollEnd {
    /// The LAC moved past the one asked about; the entry after it, if the bookie had it.
    Moved(EntryId, Option<Bytes>),
    /// A bookie answered without a move: the wait ended there.
    Unmoved,
    /// No bookie answered: each one asked failed.
    Unanswered,
    /// The ledger was closed or deleted meanwhile.
    Ended,
}

type LedgerWatch = tokio::sync::watch::Receiver<Option<Versioned<LedgerMetadata>>>;

impl std::fmt::Debug for ReadHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadHandle")
            .field("ledger", &self.ledger)
            .field("lac", &self.last_add_confirmed())
            .finish()
    }
}

impl ReadHandle {
    pub(crate) fn new(
        inner: Arc<Inner>,
        ledger: LedgerId,
        meta: Versioned<LedgerMetadata>,
        digest: DigestManager,
    ) -> ReadHandle {
        let lac = metadata_lac(&meta.value);
        ReadHandle {
            inner,
            ledger,
            meta: Mutex::new(Arc::new(meta.value)),
            digest,
            lac: AtomicI64::new(lac),
            watch: Mutex::new(None),
            piggybacked: Mutex::new(None),
            unanswered: AtomicU32::new(0),
        }
    }

    pub fn id(&self) -> LedgerId {
        self.ledger
    }

    /// The metadata as this handle last read it.
    pub fn metadata(&self) -> LedgerMetadata {
        LedgerMetadata::clone(&self.meta.lock())
    }

    /// The same, shared.
    fn shared_metadata(&self) -> Arc<LedgerMetadata> {
        self.meta.lock().clone()
    }

    pub fn is_closed(&self) -> bool {
        self.meta.lock().is_closed()
    }

    /// The last entry readers may read: the last entry of a closed ledger, or the LAC
    /// learnt so far of an open one (it only moves forward).
    pub fn last_add_confirmed(&self) -> EntryId {
        self.lac.load(Ordering::SeqCst)
    }

    fn raise_lac(&self, lac: EntryId) -> EntryId {
        self.lac.fetch_max(lac, Ordering::SeqCst).max(lac)
    }

    /// Reads entries `first..=last`, which must not go beyond the LAC.
    pub async fn read(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        let lac = self.last_add_confirmed();
        if last > lac {
            return Err(ClientError::ReadBeyondLac {
                ledger: self.ledger,
                entry: last,
                lac,
            });
        }
        self.read_range(first, last).await
    }

    /// Reads entries `first..=last` even beyond the LAC (they may never be confirmed:
    /// BookKeeper's `readUnconfirmedEntries`).
    pub async fn read_unconfirmed(
        &self,
        first: EntryId,
        last: EntryId,
    ) -> Result<Vec<LedgerEntry>> {
        self.read_range(first, last).await
    }

    async fn read_range(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        if first < 0 {
            return Err(ClientError::InvalidArgument(format!(
                "bad entry range {first}..={last} for ledger {}: negative first entry",
                self.ledger
            )));
        }
        if last < first {
            // An empty range (e.g. 0..=-1 of an empty ledger).
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let first = match self.take_piggybacked(first) {
            Some(payload) => {
                out.push(LedgerEntry {
                    ledger_id: self.ledger,
                    entry_id: first,
                    payload,
                });
                if first == last {
                    return Ok(out);
                }
                first + 1
            }
            None => first,
        };
        let rest = match self.read_range_once(first, last).await {
            // The writer of an open ledger may have moved to a new fragment since this
            // handle read the metadata: look again once.
            Err(e) if !self.is_closed() => {
                tracing::debug!(
                    ledger = self.ledger,
                    "read failed ({e}); re-reading the metadata"
                );
                self.refresh_metadata().await?;
                self.read_range_once(first, last).await
            }
            other => other,
        }?;
        out.extend(rest);
        Ok(out)
    }

    /// The piggybacked payload of `entry`, if the last long poll brought it (taken: an
    /// entry is delivered from here once).
    fn take_piggybacked(&self, entry: EntryId) -> Option<Bytes> {
        let mut slot = self.piggybacked.lock();
        match slot.as_ref() {
            Some((e, _)) if *e == entry => slot.take().map(|(_, p)| p),
            // One behind the reader is of no more use.
            Some((e, _)) if *e < entry => {
                *slot = None;
                None
            }
            _ => None,
        }
    }

    /// The watch of this ledger's metadata, made once (`None` while the store cannot
    /// make one: the next poll tries again).
    async fn ledger_watch(&self) -> Option<LedgerWatch> {
        if let Some(w) = self.watch.lock().as_ref()
            && w.has_changed().is_ok()
        {
            return Some(w.clone());
        }
        let w = self.inner.metadata.watch_ledger(self.ledger).await.ok()?;
        *self.watch.lock() = Some(w.clone());
        Some(w)
    }

    async fn read_range_once(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        let meta = self.shared_metadata();
        if meta.is_closed() && last > meta.last_entry_id {
            return Err(ClientError::NoSuchEntry {
                ledger: self.ledger,
                entry: meta.last_entry_id + 1,
            });
        }
        if first == last {
            // One entry: read on the caller's task, not one spawned for it (a reader keeping
            // many single-entry reads in flight spawned a task per read).
            let entry = read_entry(&self.inner, &meta, &self.digest, first).await?;
            return Ok(vec![LedgerEntry {
                ledger_id: self.ledger,
                entry_id: first,
                payload: entry.payload,
            }]);
        }
        // A sliding window: `read_parallelism` entries in flight, the next one sent as soon
        // as any answers (a slow replica holds up only its own entry's slot).
        let window = self.inner.config.read_parallelism.max(1);
        let mut payloads: Vec<Option<Bytes>> = vec![None; (last - first + 1) as usize];
        let mut set = JoinSet::new();
        let mut next = first;
        loop {
            while next <= last && set.len() < window {
                let inner = self.inner.clone();
                let meta = meta.clone();
                let digest = self.digest.clone();
                let entry = next;
                set.spawn(async move { (entry, read_entry(&inner, &meta, &digest, entry).await) });
                next += 1;
            }
            let Some(r) = set.join_next().await else {
                break;
            };
            let (entry, result) =
                r.map_err(|e| ClientError::InvalidArgument(format!("read task failed: {e}")))?;
            payloads[(entry - first) as usize] = Some(result?.payload);
        }
        let mut out = Vec::with_capacity(payloads.len());
        for (entry_id, payload) in (first..).zip(payloads) {
            let Some(payload) = payload else {
                return Err(ClientError::NoSuchEntry {
                    ledger: self.ledger,
                    entry: entry_id,
                });
            };
            out.push(LedgerEntry {
                ledger_id: self.ledger,
                entry_id,
                payload,
            });
        }
        Ok(out)
    }

    /// Asks every bookie of the last ensemble for its LAC (explicit LAC or the LAC carried
    /// by its last entry) until the answers cover every ack quorum; returns the new LAC.
    /// Fails, with the last bookie's error, when every bookie has answered or failed and the
    /// answers still do not cover every ack quorum: the LAC then cannot be known to be as
    /// recent as the last acknowledged entry (BookKeeper's `readLastAddConfirmed` fails too).
    pub async fn read_last_add_confirmed(&self) -> Result<EntryId> {
        self.read_lac(LacMode::Quorum).await
    }

    /// Like [`ReadHandle::read_last_add_confirmed`] but takes the first answer
    /// (BookKeeper's `tryReadLastAddConfirmed`): cheaper, possibly older.
    pub async fn try_read_last_add_confirmed(&self) -> Result<EntryId> {
        self.read_lac(LacMode::First).await
    }

    async fn read_lac(&self, mode: LacMode) -> Result<EntryId> {
        let meta = self.metadata();
        if meta.is_closed() {
            return Ok(meta.last_entry_id);
        }
        let quorum = meta.quorum().map_err(|e| ClientError::MetadataConflict {
            ledger: self.ledger,
            reason: e,
        })?;
        let Some((_, ensemble)) = meta.current_ensemble() else {
            return Ok(self.last_add_confirmed());
        };
        let mut set = JoinSet::new();
        for (p, bookie) in ensemble.iter().enumerate() {
            let inner = self.inner.clone();
            let bookie = bookie.clone();
            let digest = self.digest.clone();
            let ledger = self.ledger;
            set.spawn(async move {
                let r = inner
                    .bookies
                    .call(&bookie, req::read_lac(ledger), inner.config.read_timeout)
                    .await;
                let answer = match r {
                    Ok(resp) => {
                        let rl = resp.read_lac_response.unwrap_or_default();
                        let mut lac = None;
                        if let Some(b) = rl.lac_body
                            && let Ok(l) = digest.verify_lac(&b)
                        {
                            lac = Some(l);
                        }
                        if let Some(b) = rl.last_entry_body
                            && let Ok(v) = digest.verify_any_entry(&b)
                        {
                            lac = Some(lac.unwrap_or(-1).max(v.lac));
                        }
                        match lac {
                            Some(l) => Ok(Some(l)),
                            None => Err(rpc_error(
                                ledger,
                                -1,
                                &bookie,
                                RpcError::BadResponse("no valid LAC in the answer".into()),
                            )),
                        }
                    }
                    Err(RpcError::Status(Status::NoEntry | Status::NoLedger)) => Ok(None),
                    Err(e) => Err(rpc_error(ledger, -1, &bookie, e)),
                };
                (p, answer)
            });
        }
        let mut answered = vec![false; ensemble.len()];
        let mut best = metadata_lac(&meta);
        let mut last_error = None;
        while let Some(r) = set.join_next().await {
            let Ok((p, answer)) = r else { continue };
            match answer {
                Ok(lac) => {
                    answered[p] = true;
                    if let Some(l) = lac {
                        best = best.max(l);
                    }
                    let done = match mode {
                        LacMode::First => true,
                        LacMode::Quorum => covers_ensemble(&quorum, &answered),
                    };
                    if done {
                        set.abort_all();
                        return Ok(self.raise_lac(best));
                    }
                }
                // As BookKeeper's ReadLastConfirmedOp: a bookie refusing the client ends
                // the read at once.
                Err(e @ ClientError::Unauthorized { .. }) => {
                    set.abort_all();
                    return Err(e);
                }
                Err(e) => last_error = Some(e),
            }
        }
        // Every bookie answered or failed and the answers do not cover every ack quorum:
        // the highest LAC heard may be older than an entry already acknowledged, so it is
        // not returned (BookKeeper's ReadLastConfirmedOp fails with the last error too).
        Err(last_error.unwrap_or_else(|| ClientError::Timeout {
            what: format!(
                "reading the LAC of ledger {}: too few bookies answered to cover every ack quorum",
                self.ledger
            ),
        }))
    }

    /// Waits until the LAC passes `previous` (a long poll on a bookie of the last ensemble,
    /// more when it fails or is slow: [`ClientConfig::speculative_read_lac_timeout`]) or
    /// `timeout` elapses; returns the LAC then. A ledger found closed in the meantime
    /// returns its last entry.
    ///
    /// [`ClientConfig::speculative_read_lac_timeout`]: crate::ClientConfig::speculative_read_lac_timeout
    pub async fn wait_for_lac_beyond(
        &self,
        previous: EntryId,
        timeout: Duration,
    ) -> Result<EntryId> {
        let current = self.last_add_confirmed();
        if current > previous {
            return Ok(current);
        }
        let meta = self.metadata();
        if meta.is_closed() {
            return Ok(meta.last_entry_id);
        }
        let Some(ensemble) = meta.current_ensemble().map(|(_, e)| e.to_vec()) else {
            return Ok(current);
        };
        let quorum = meta.quorum().map_err(|e| ClientError::MetadataConflict {
            ledger: self.ledger,
            reason: e,
        })?;
        let bookies: Vec<BookieId> = long_poll_order(&quorum, previous + 1)
            .into_iter()
            .filter_map(|p| ensemble.get(p).cloned())
            .collect();
        let timeout_ms = timeout.as_millis().min(i64::MAX as u128) as i64;
        let deadline = tokio::time::Instant::now() + timeout;
        let speculate = self.inner.config.speculative_read_lac_timeout;
        let poll = |bookie: BookieId| {
            let inner = self.inner.clone();
            let digest = self.digest.clone();
            let ledger = self.ledger;
            // The bookie holds the request up to `timeout`; allow it the read timeout on top.
            let rpc_timeout = timeout + inner.config.read_timeout;
            async move {
                inner
                    .bookies
                    .call(
                        &bookie,
                        req::long_poll(ledger, previous, timeout_ms),
                        rpc_timeout,
                    )
                    .await
                    .ok()
                    .and_then(|r| r.read_response)
                    .and_then(|r| {
                        // The entry after `previous`, when the bookie holds it (only an
                        // entry whose digest checks is kept).
                        let next = previous + 1;
                        let entry = r
                            .body
                            .filter(|b| r.entry_id == next && !b.is_empty())
                            .and_then(|b| digest.verify(&b, next).ok())
                            .map(|v| v.payload);
                        r.max_lac.map(|lac| (lac, entry))
                    })
            }
        };
        // One bookie at a time, as BookKeeper's sequential `readLastAddConfirmedAndEntry`:
        // one answer carries the LAC and the entry, and asking every bookie cost each of
        // them a poll, an answer and a copy of the entry per tailed entry. A bookie that
        // fails is followed by the next at once; one that has not answered within
        // `speculative_read_lac_timeout` gets company. Zero asks every bookie at once.
        let polls = async {
            let mut set = JoinSet::new();
            let mut asked = 0;
            let mut answered = false;
            let at_once = match speculate.is_zero() {
                true => bookies.len(),
                false => bookies.len().min(1),
            };
            while asked < at_once {
                set.spawn(poll(bookies[asked].clone()));
                asked += 1;
            }
            loop {
                let unasked = asked < bookies.len();
                let speculation = async {
                    match speculate.is_zero() {
                        true => std::future::pending().await,
                        false => tokio::time::sleep(speculate).await,
                    }
                };
                tokio::select! {
                    // Deterministic branch order (a simulator replays a seed exactly).
                    biased;
                    answer = set.join_next() => match answer {
                        None if answered => return PollEnd::Unmoved,
                        None => return PollEnd::Unanswered,
                        Some(Ok(Some((lac, entry)))) if lac > previous => {
                            return PollEnd::Moved(lac, entry);
                        }
                        // The wait timed out there: the LAC did not move in time.
                        Some(Ok(Some(_))) if !speculate.is_zero() => return PollEnd::Unmoved,
                        Some(Ok(Some(_))) => answered = true,
                        // That bookie failed: the next one, at once. Not once the wait is
                        // over: a bookie that knows no entry of the ledger yet holds the poll
                        // to its end and then answers NoLedger.
                        Some(_) if unasked && tokio::time::Instant::now() < deadline => {
                            set.spawn(poll(bookies[asked].clone()));
                            asked += 1;
                        }
                        Some(_) => {}
                    },
                    () = speculation, if unasked => {
                        tracing::debug!(
                            ledger = self.ledger,
                            previous,
                            "slow long poll; asking the next bookie too"
                        );
                        self.inner
                            .stats
                            .speculative_long_polls
                            .fetch_add(1, Ordering::Relaxed);
                        set.spawn(poll(bookies[asked].clone()));
                        asked += 1;
                    }
                }
            }
        };
        // A close (or delete) of the ledger ends the wait at once: no bookie LAC will move.
        let mut watch = self.ledger_watch().await;
        let ended = async {
            let Some(w) = watch.as_mut() else {
                return std::future::pending().await;
            };
            loop {
                let done = w
                    .borrow_and_update()
                    .as_ref()
                    .is_none_or(|v| v.value.is_closed());
                if done {
                    return;
                }
                if w.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        };
        tokio::pin!(ended);
        let end = tokio::select! {
            // Deterministic branch order (a simulator replays a seed exactly).
            biased;
            end = polls => end,
            () = &mut ended => PollEnd::Ended,
        };
        match end {
            PollEnd::Moved(lac, entry) => {
                self.unanswered.store(0, Ordering::Relaxed);
                if let Some(payload) = entry {
                    *self.piggybacked.lock() = Some((previous + 1, payload));
                }
                return Ok(self.raise_lac(lac));
            }
            PollEnd::Unmoved => self.unanswered.store(0, Ordering::Relaxed),
            PollEnd::Unanswered => {
                // Every bookie asked failed at once: all of them are down, or they are
                // BookKeeper's, which answer NoLedger at once on a ledger they hold no
                // entry of yet. A caller in a loop would ask again at once, a poll and a
                // metadata read per turn: pause first, longer while it lasts (1 ms
                // doubling to 100 ms), not past the wait's end, nor past a close.
                self.inner
                    .stats
                    .unanswered_long_polls
                    .fetch_add(1, Ordering::Relaxed);
                let streak = self.unanswered.fetch_add(1, Ordering::Relaxed).min(7);
                let pause = Duration::from_millis(1 << streak)
                    .min(MAX_UNANSWERED_PAUSE)
                    .min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                tokio::select! {
                    biased;
                    () = &mut ended => {}
                    () = tokio::time::sleep(pause) => {}
                }
            }
            PollEnd::Ended => {}
        }
        // Nothing moved, or the ledger ended: look at the metadata.
        self.refresh_metadata().await?;
        Ok(self.last_add_confirmed())
    }

    /// Waits (long-polling the LAC) until `entry` is confirmed, then reads it; `None` if
    /// `timeout` passes first or the ledger is closed below `entry`.
    pub async fn wait_for_entry(
        &self,
        entry: EntryId,
        timeout: Duration,
    ) -> Result<Option<LedgerEntry>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let lac = self.last_add_confirmed();
            if lac >= entry {
                return Ok(self.read(entry, entry).await?.pop());
            }
            if self.is_closed() {
                return Ok(None);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.wait_for_lac_beyond(lac, deadline - now).await?;
        }
    }

    /// Re-reads the metadata (to notice a close or a new fragment).
    pub async fn refresh_metadata(&self) -> Result<()> {
        let m = self.inner.read_ledger(self.ledger).await?;
        m.value
            .validate()
            .map_err(|reason| ClientError::MetadataConflict {
                ledger: self.ledger,
                reason,
            })?;
        let lac = metadata_lac(&m.value);
        let closed = m.value.is_closed();
        *self.meta.lock() = Arc::new(m.value);
        if closed {
            // Only the metadata bounds a closed ledger: bookies may hold entries (and LACs)
            // past its end, written by a concurrent recovery.
            self.lac.store(lac, Ordering::SeqCst);
        } else {
            self.raise_lac(lac);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(e: usize, w: usize, a: usize) -> QuorumConfig {
        QuorumConfig::new(e, w, a).unwrap()
    }

    #[test]
    fn a_long_poll_asks_the_replica_that_also_stores_the_next_entry_first() {
        // E3 Qw2: entry 1 is on positions 1 and 2, entry 2 on 2 and 0; position 2 learns
        // entry 1's confirmation from entry 2, position 1 only from entry 3.
        assert_eq!(long_poll_order(&q(3, 2, 2), 1), vec![2, 1, 0]);
        assert_eq!(long_poll_order(&q(3, 2, 2), 0), vec![1, 0, 2]);
        // E5 Qw3: entry 4 on 4, 0, 1; entry 5 on 0, 1, 2.
        assert_eq!(long_poll_order(&q(5, 3, 2), 4), vec![0, 1, 4, 2, 3]);
        // E = Qw: every replica stores every entry; the first asked turns with the entry.
        assert_eq!(long_poll_order(&q(3, 3, 2), 7), vec![1, 2, 0]);
        assert_eq!(long_poll_order(&q(3, 3, 2), 8), vec![2, 0, 1]);
    }

    #[test]
    fn a_run_of_entries_is_asked_of_one_replica_first_then_the_write_set_in_order() {
        let e3 = q(3, 3, 2);
        for entry in 0..16 {
            assert_eq!(read_order(&e3, entry)[0], 0, "entry {entry}");
        }
        assert_eq!(read_order(&e3, 16), vec![1, 2, 0]);
        assert_eq!(read_order(&e3, 17), vec![1, 2, 0]);
        assert_eq!(read_order(&e3, 18), vec![1, 0, 2]);
        assert_eq!(read_order(&e3, 32), vec![2, 0, 1]);
        assert_eq!(read_order(&e3, 48), vec![0, 1, 2]);
        // Striped (E > Qw): the run's replica first where the entry is on it, else the
        // write set as BookKeeper orders it; always a permutation of the write set.
        let e5 = q(5, 2, 2);
        assert_eq!(read_order(&e5, 0), vec![0, 1]);
        assert_eq!(read_order(&e5, 1), vec![1, 2]);
        assert_eq!(read_order(&e5, 4), vec![0, 4]);
        assert_eq!(read_order(&e5, 16), vec![1, 2]);
        assert_eq!(read_order(&e5, 17), vec![2, 3]);
        for entry in 0..200 {
            let mut got = read_order(&e5, entry);
            got.sort_unstable();
            let mut want = e5.write_set(entry);
            want.sort_unstable();
            assert_eq!(got, want, "entry {entry}");
        }
    }
}
