//! The writer of a ledger: the [`WriterState`] machine behind a lock, driven in place by
//! whoever has something for it.
//!
//! A bookie's answer runs on the task that learnt it (the connection's reader, the
//! client's sweeper for a timeout), which completes the caller's append once the entry
//! and every entry before it reached their ack quorum. An append to a writer with few
//! appends pending runs on the caller's task, its adds queued on the connections and
//! flushed before `append` returns; a writer with many pending (a pipeline of its own)
//! queues the append for its task ([`run`]), which takes a burst per turn and flushes
//! their adds once. Before, that task was woken for every append and every answer,
//! through two channels: with 10,000 ledgers written at once, each with one append in
//! flight, those wake-ups and the channels' cold cache lines made the client cost 12.3 µs
//! per entry against 8.9 now (docs/performance.md). Other work that has to wait runs on
//! a task spawned when needed: an add with no live connection (or to send once more on
//! a new one), an ensemble change written to the metadata, the close, and the tick of
//! the add quorum timeout and the explicit LAC when they are configured.
//!
//! An answer never waits for the lock: one that finds the writer locked (by an append,
//! by an answer from another bookie, or by the very append whose queuing tore a
//! connection down and answered its adds at once) is left in the writer's inbox, and
//! whoever holds the lock takes the inbox before letting go (`release`).
//!
//! The adds keep going when the handle is dropped: each routed add holds the writer
//! until its answer, and an add to send again gets a task of its own, so that every
//! entry still reaches every bookie of its write quorum.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_metadata::Versioned;
use folio_proto::{DigestManager, Status, master_key};
use folio_types::metadata::{LedgerMetadata, LedgerState};
use folio_types::{BookieId, EntryId, LedgerId};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot};

use crate::client::{Inner, proto_digest};
use crate::conn::{AddAnswer, AddAnswers, AnswerSink, RpcError, Started, req};
use crate::ensemble::with_new_fragment;
use crate::entry_queue::EntryQueue;
use crate::error::{ClientError, Result};
use crate::pending::{AddOutcome, WriterAction, WriterSettings, WriterState};

/// The outcome of an ensemble change written to the metadata.
type EnsembleChanged = Result<Versioned<LedgerMetadata>>;

/// A ledger writer, shared by its handle, the routed adds waiting for their answers,
/// and the tasks it spawns.
pub(crate) struct Writer {
    inner: Arc<Inner>,
    /// The runtime the ledger was made on: an append may come from any thread, and what
    /// it spawns (an add without a live connection, an ensemble change) runs there.
    rt: tokio::runtime::Handle,
    ledger: LedgerId,
    key: [u8; 20],
    /// `key` in a shared buffer, for the adds.
    key_bytes: Bytes,
    /// For the explicit LAC.
    digest: DigestManager,
    lac: AtomicI64,
    /// The outcome of the close, once it was made.
    closed: Mutex<Option<Result<()>>>,
    core: Mutex<Core>,
    /// Answers that found `core` locked, in arrival order.
    inbox: Mutex<Vec<AddAnswer>>,
}

/// What the lock guards.
struct Core {
    state: WriterState,
    meta: Versioned<LedgerMetadata>,
    callbacks: EntryQueue<oneshot::Sender<Result<EntryId>>>,
    /// Every bookie that failed this writer (never chosen again as a replacement).
    failed_bookies: BTreeSet<BookieId>,
    last_add: Instant,
    /// The LAC carried by the last entry sent.
    piggybacked_lac: EntryId,
    explicit_lac_sent: EntryId,
    /// Bookies with adds queued but not yet flushed (flushed before the lock is let go,
    /// so that the adds of one turn leave in one write per bookie).
    unflushed: Vec<BookieId>,
    close_waiters: Vec<oneshot::Sender<Result<()>>>,
    /// The close task was started (once every pending append was answered).
    close_started: bool,
    /// Commands sent to the writer's task and not yet taken by it.
    queued: usize,
}

/// What the writer's task takes from its queue (`Writer::append`, `Writer::close`).
pub(crate) enum Cmd {
    Append {
        entry: Option<EntryId>,
        payload: Bytes,
        reply: oneshot::Sender<Result<EntryId>>,
    },
    Close {
        reply: oneshot::Sender<Result<()>>,
    },
}

/// A writer with this many appends pending queues the next for its task, which takes
/// them in bursts: at 128 appends in flight on one ledger, taking each on the caller's
/// task flushed each one's adds on its own (twice the client's socket writes and context
/// switches, docs/performance.md); with one or a few in flight (many ledgers written at
/// once, or a writer that waits for each append) the caller's task saves the hand-off.
const QUEUE_AT_PENDING: usize = 16;

/// Appends taken in one turn of the writer's task at most, before their adds are
/// flushed and the answers left meanwhile are taken.
const APPENDS_PER_TURN: usize = 64;

/// How often the add quorum timeout and the explicit LAC are looked at, when configured.
const TICK: Duration = Duration::from_millis(100);

impl Writer {
    pub(crate) fn new(
        inner: Arc<Inner>,
        ledger: LedgerId,
        meta: Versioned<LedgerMetadata>,
        password: &[u8],
        adv: bool,
    ) -> Arc<Writer> {
        let quorum = meta.value.quorum().expect("created with a checked quorum");
        let ensemble = meta
            .value
            .current_ensemble()
            .map(|(_, e)| e.to_vec())
            .expect("created with an ensemble");
        let digest = proto_digest(meta.value.digest_type);
        let state = WriterState::new(
            ledger,
            quorum,
            ensemble,
            DigestManager::new(ledger, digest, password),
            WriterSettings {
                adv,
                max_ensemble_changes: inner.config.max_ensemble_changes,
                add_quorum_timeout: inner.config.add_entry_quorum_timeout,
                delay_ensemble_change: inner.config.delay_ensemble_change,
            },
        );
        let key = master_key(password);
        let writer = Arc::new(Writer {
            rt: tokio::runtime::Handle::current(),
            ledger,
            key,
            key_bytes: Bytes::copy_from_slice(&key),
            digest: DigestManager::new(ledger, digest, password),
            lac: AtomicI64::new(-1),
            closed: Mutex::new(None),
            core: Mutex::new(Core {
                state,
                meta,
                callbacks: EntryQueue::default(),
                failed_bookies: BTreeSet::new(),
                last_add: inner.clock.now(),
                piggybacked_lac: -1,
                explicit_lac_sent: -1,
                unflushed: Vec::new(),
                close_waiters: Vec::new(),
                close_started: false,
                queued: 0,
            }),
            inbox: Mutex::new(Vec::new()),
            inner,
        });
        // Without an add quorum timeout or an explicit LAC nothing is timed here (an
        // add's own timeout is the client's sweeper's, `Bookies::start_add`), so that
        // thousands of open ledgers cost nothing idle.
        let config = &writer.inner.config;
        if config.add_entry_quorum_timeout.is_some() || config.explicit_lac_interval.is_some() {
            writer.rt.spawn(tick(Arc::downgrade(&writer)));
        }
        writer
    }

    pub(crate) fn ledger(&self) -> LedgerId {
        self.ledger
    }

    pub(crate) fn last_add_confirmed(&self) -> EntryId {
        self.lac.load(Ordering::SeqCst)
    }

    /// Takes an append; the receiver gets its entry id once acknowledged, or the error.
    /// A writer with few appends pending takes it here, on the caller's task; a busy one
    /// (or one with appends already queued, which go first) queues it on `cmds` for its
    /// task, which takes a burst of them per turn and flushes their adds once.
    pub(crate) fn append(
        self: &Arc<Self>,
        cmds: &mpsc::UnboundedSender<Cmd>,
        entry: Option<EntryId>,
        payload: Bytes,
    ) -> oneshot::Receiver<Result<EntryId>> {
        let (reply, rx) = oneshot::channel();
        // Header, digest and protobuf framing stay well under 256 bytes.
        let max = self.inner.config.max_frame_size.saturating_sub(256);
        if payload.len() > max {
            let _ = reply.send(Err(ClientError::InvalidArgument(format!(
                "an entry of {} bytes exceeds the {max} bytes a frame to a bookie can carry (ledger {})",
                payload.len(),
                self.ledger
            ))));
            return rx;
        }
        let _rt = self.rt.enter();
        let mut core = self.core.lock();
        if core.queued > 0 || core.state.pending_count() >= QUEUE_AT_PENDING {
            // Counted and sent under the lock: an append taken here later finds it
            // counted, and queues behind it.
            core.queued += 1;
            // With the task gone (its runtime shut down) the reply is dropped: "closed".
            let _ = cmds.send(Cmd::Append {
                entry,
                payload,
                reply,
            });
        } else {
            self.add(&mut core, entry, payload, reply);
        }
        self.release(core);
        rx
    }

    fn add(
        self: &Arc<Self>,
        core: &mut Core,
        entry: Option<EntryId>,
        payload: Bytes,
        reply: oneshot::Sender<Result<EntryId>>,
    ) {
        let now = self.inner.clock.now();
        match core.state.add(entry, &payload, now) {
            Ok((id, actions)) => {
                core.callbacks.insert(id, reply);
                core.last_add = now;
                core.piggybacked_lac = core.state.lac();
                self.perform(core, actions);
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Waits for every pending append, then closes the ledger in the metadata with the
    /// LAC as its last entry (`LedgerHandle::close`). Closing twice is fine. Behind the
    /// appends queued before it, if any.
    pub(crate) async fn close(self: &Arc<Self>, cmds: &mpsc::UnboundedSender<Cmd>) -> Result<()> {
        let rx = {
            let mut core = self.core.lock();
            if let Some(result) = self.closed.lock().clone() {
                return result;
            }
            let (reply, rx) = oneshot::channel();
            if core.queued > 0 {
                core.queued += 1;
                let _ = cmds.send(Cmd::Close { reply });
            } else {
                Self::start_close(&mut core, reply);
            }
            self.release(core);
            rx
        };
        match rx.await {
            Ok(result) => result,
            Err(_) => self.closed.lock().clone().unwrap_or(Ok(())),
        }
    }

    /// No more appends are taken; the close is made once every pending one is answered
    /// (`release`).
    fn start_close(core: &mut Core, reply: oneshot::Sender<Result<()>>) {
        core.state.start_closing();
        core.close_waiters.push(reply);
    }

    /// Lets go of the lock after a turn: takes the answers left in the inbox meanwhile,
    /// flushes the adds queued, and starts the close once nothing is pending. Answers
    /// left after the lock was let go, by a task that found it still held, are taken by
    /// locking again (or by whoever holds it then, who releases it through here too).
    fn release<'a>(self: &'a Arc<Self>, mut core: MutexGuard<'a, Core>) {
        loop {
            loop {
                let mail = std::mem::take(&mut *self.inbox.lock());
                if mail.is_empty() {
                    break;
                }
                for answer in mail {
                    self.on_answer(&mut core, answer);
                }
            }
            for bookie in core.unflushed.drain(..) {
                self.inner.bookies.flush(&bookie);
            }
            let drained = core.state.pending_count() == 0 && !core.state.is_changing_ensemble();
            if drained && !core.close_started && !core.close_waiters.is_empty() {
                core.close_started = true;
                self.rt.spawn(Arc::clone(self).finish_close());
            }
            drop(core);
            if self.inbox.lock().is_empty() {
                return;
            }
            match self.core.try_lock() {
                Some(c) => core = c,
                None => return,
            }
        }
    }

    fn on_answer(self: &Arc<Self>, core: &mut Core, answer: AddAnswer) {
        let AddAnswer {
            entry,
            bookie,
            result,
            retry,
        } = answer;
        if let Some(retry) = retry {
            // A stale pooled connection: once more, on a new one.
            self.finish_unrouted(entry, bookie, retry);
            return;
        }
        let outcome = outcome(result);
        if matches!(outcome, AddOutcome::Failed(_)) {
            core.failed_bookies.insert(bookie.clone());
        }
        let actions = core.state.on_add_response(entry, &bookie, outcome);
        self.perform(core, actions);
    }

    /// Carries out what the state machine asked for, under the lock.
    fn perform(self: &Arc<Self>, core: &mut Core, actions: Vec<WriterAction>) {
        // One clock reading for the adds of one call (an entry's write set, or a resend):
        // three readings per entry were a visible part of the client's CPU at small adds.
        let mut deadline = None;
        for a in actions {
            match a {
                WriterAction::SendAdd {
                    entry,
                    bookie,
                    body,
                } => {
                    // Queued on the connection now (in entry order), written at the flush.
                    let request =
                        req::add_keyed(self.ledger, entry, self.key_bytes.clone(), body, false);
                    let sink: AddAnswers = Arc::clone(self) as AddAnswers;
                    let timeout = self.inner.config.add_entry_timeout;
                    let deadline =
                        *deadline.get_or_insert_with(|| tokio::time::Instant::now() + timeout);
                    if let Some(started) = self
                        .inner
                        .bookies
                        .start_add(&bookie, request, deadline, sink, entry)
                    {
                        self.finish_unrouted(entry, bookie.clone(), started);
                    }
                    if !core.unflushed.contains(&bookie) {
                        core.unflushed.push(bookie);
                    }
                }
                WriterAction::Acked { entry } => {
                    self.lac.store(core.state.lac(), Ordering::SeqCst);
                    if let Some(cb) = core.callbacks.remove(&entry) {
                        let _ = cb.send(Ok(entry));
                    }
                }
                WriterAction::Failed { entry, error } => {
                    if let Some(cb) = core.callbacks.remove(&entry) {
                        let _ = cb.send(Err(error));
                    }
                }
                WriterAction::ChangeEnsemble {
                    fragment_start,
                    failed,
                } => {
                    tracing::info!(
                        ledger = self.ledger,
                        fragment_start,
                        ?failed,
                        "changing ensemble"
                    );
                    let writer = Arc::clone(self);
                    let meta = core.meta.clone();
                    let ensemble = core.state.ensemble().to_vec();
                    let excluded = core.failed_bookies.clone();
                    self.rt.spawn(async move {
                        let r = change_ensemble(
                            &writer.inner,
                            writer.ledger,
                            meta,
                            ensemble,
                            failed,
                            excluded,
                            fragment_start,
                        )
                        .await;
                        writer.on_ensemble_written(r);
                    });
                }
            }
        }
    }

    /// An add with no live connection, or one to send once more on a new connection:
    /// on a task of its own, whose answer comes back as any other.
    fn finish_unrouted(self: &Arc<Self>, entry: EntryId, bookie: BookieId, started: Started) {
        let writer = Arc::clone(self);
        self.rt.spawn(async move {
            let result = writer.inner.bookies.finish(started).await.map(drop);
            writer.answer(AddAnswer {
                entry,
                bookie,
                result,
                retry: None,
            });
        });
    }

    fn on_ensemble_written(self: &Arc<Self>, changed: EnsembleChanged) {
        let mut core = self.core.lock();
        let actions = match changed {
            Ok(meta) => {
                let ensemble = meta
                    .value
                    .current_ensemble()
                    .map(|(_, e)| e.to_vec())
                    .unwrap_or_default();
                tracing::info!(ledger = self.ledger, ?ensemble, "ensemble changed");
                core.meta = meta;
                core.state.on_ensemble_changed(ensemble)
            }
            Err(e) => {
                tracing::warn!(ledger = self.ledger, "ensemble change failed: {e}");
                core.state.on_ensemble_change_failed(e)
            }
        };
        self.perform(&mut core, actions);
        self.release(core);
    }

    /// The tick: the add quorum timeout and the explicit LAC. False once closed.
    fn on_tick(self: &Arc<Self>) -> bool {
        if self.closed.lock().is_some() {
            return false;
        }
        let mut core = self.core.lock();
        let actions = core.state.on_tick(self.inner.clock.now());
        self.perform(&mut core, actions);
        self.maybe_send_explicit_lac(&mut core);
        self.release(core);
        true
    }

    /// Sends the LAC explicitly when the writer is idle and the bookies have not seen the
    /// latest LAC piggybacked on an entry.
    fn maybe_send_explicit_lac(&self, core: &mut Core) {
        let Some(interval) = self.inner.config.explicit_lac_interval else {
            return;
        };
        let lac = core.state.lac();
        if core.state.error().is_some()
            || lac <= core.piggybacked_lac
            || lac <= core.explicit_lac_sent
            || self
                .inner
                .clock
                .now()
                .saturating_duration_since(core.last_add)
                < interval
        {
            return;
        }
        core.explicit_lac_sent = lac;
        let body = self.digest.compute_lac(lac);
        for bookie in core.state.ensemble().to_vec() {
            let inner = self.inner.clone();
            let request = req::write_lac(self.ledger, lac, &self.key, body.clone());
            self.rt.spawn(async move {
                // Best effort: a lost explicit LAC only delays readers.
                let _ = inner
                    .bookies
                    .call(&bookie, request, inner.config.add_entry_timeout)
                    .await;
            });
        }
    }

    /// Closes the ledger in the metadata once every append was answered, then answers
    /// every close waiting.
    async fn finish_close(self: Arc<Self>) {
        let result = self.close_metadata().await;
        if result.is_ok() {
            // After the close, never before it and never waited for.
            let meta = self.core.lock().meta.value.clone();
            crate::write_close::send(&self.inner, self.ledger, self.key, &meta);
        }
        let waiters = {
            let mut core = self.core.lock();
            *self.closed.lock() = Some(result.clone());
            std::mem::take(&mut core.close_waiters)
        };
        for w in waiters {
            let _ = w.send(result.clone());
        }
    }

    /// Closes the ledger in the metadata at the LAC.
    async fn close_metadata(&self) -> Result<()> {
        let (mut meta, lac, length) = {
            let core = self.core.lock();
            if let Some(e) = core.state.error()
                && e.is_fenced()
            {
                return Err(e.clone());
            }
            (
                core.meta.clone(),
                core.state.lac(),
                core.state.acked_length(),
            )
        };
        let retries = self.inner.config.metadata_retries.max(1);
        let mut attempt = 0;
        loop {
            let current = &meta.value;
            if current.is_closed() {
                return if current.last_entry_id == lac {
                    Ok(())
                } else {
                    Err(ClientError::Fenced {
                        ledger: self.ledger,
                    })
                };
            }
            if current.state != LedgerState::Open {
                return Err(ClientError::Fenced {
                    ledger: self.ledger,
                });
            }
            let mut closed = current.clone();
            closed.state = LedgerState::Closed;
            closed.last_entry_id = lac;
            closed.length = length;
            match self
                .inner
                .metadata
                .write_ledger(self.ledger, &closed, meta.version)
                .await
            {
                Ok(version) => {
                    self.core.lock().meta = Versioned {
                        value: closed,
                        version,
                    };
                    return Ok(());
                }
                Err(e) if e.is_bad_version() && attempt < retries => {
                    attempt += 1;
                    meta = self.inner.read_ledger(self.ledger).await?;
                }
                Err(e) => return Err(ClientError::from_metadata(self.ledger, e)),
            }
        }
    }
}

impl AnswerSink for Writer {
    /// Takes the answer at once if the writer is free, else leaves it in the inbox for
    /// whoever holds the lock (never waits for it).
    fn answer(self: Arc<Self>, answer: AddAnswer) {
        if matches!(answer.result, Err(RpcError::Unreachable(_))) {
            // A connection torn down: that happens under locks of the client's own (a
            // connection dropped where its pool is locked) or of this writer (the append
            // whose queuing found the connection's writer stopped), so the answer is
            // taken on a task of its own. Rare, and the add goes out again from there.
            self.inbox.lock().push(answer);
            let rt = self.rt.clone();
            rt.spawn(async move {
                let core = self.core.lock();
                self.release(core);
            });
            return;
        }
        match self.core.try_lock() {
            Some(mut core) => {
                // Answers left earlier go first.
                let mail = std::mem::take(&mut *self.inbox.lock());
                for earlier in mail {
                    self.on_answer(&mut core, earlier);
                }
                self.on_answer(&mut core, answer);
                self.release(core);
            }
            None => {
                self.inbox.lock().push(answer);
                // The holder may have let go between the two: look once more.
                if let Some(core) = self.core.try_lock() {
                    self.release(core);
                }
            }
        }
    }
}

/// The writer's task: takes the appends and closes queued for it, a burst per turn,
/// until the handle is dropped.
pub(crate) async fn run(writer: Arc<Writer>, mut cmds: mpsc::UnboundedReceiver<Cmd>) {
    while let Some(first) = cmds.recv().await {
        let mut core = writer.core.lock();
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(cmd) = next.take() {
            core.queued -= 1;
            match cmd {
                Cmd::Append {
                    entry,
                    payload,
                    reply,
                } => writer.add(&mut core, entry, payload, reply),
                Cmd::Close { reply } => Writer::start_close(&mut core, reply),
            }
            taken += 1;
            if taken < APPENDS_PER_TURN {
                next = cmds.try_recv().ok();
            }
        }
        writer.release(core);
    }
}

/// The tick of a writer with an add quorum timeout or an explicit LAC, until it is
/// closed or gone.
async fn tick(writer: std::sync::Weak<Writer>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(w) = writer.upgrade() else {
            return;
        };
        if !w.on_tick() {
            return;
        }
    }
}

/// What an add's result means to the writer.
fn outcome(result: std::result::Result<(), RpcError>) -> AddOutcome {
    match result {
        Ok(()) => AddOutcome::Ok,
        Err(RpcError::Status(Status::Fenced)) => AddOutcome::Fenced,
        Err(RpcError::Status(Status::Unauthorized)) => AddOutcome::Unauthorized,
        Err(e) => AddOutcome::Failed(e.to_string()),
    }
}

/// Replaces the failed bookies and writes the new fragment by CAS. A concurrent change
/// that left the last fragment as we knew it (e.g. autorecovery repairing an older
/// fragment) is merged; a recovery or a close by someone else is [`ClientError::Fenced`].
async fn change_ensemble(
    inner: &Inner,
    ledger: LedgerId,
    mut meta: Versioned<LedgerMetadata>,
    ensemble: Vec<BookieId>,
    failed: BTreeMap<usize, BookieId>,
    excluded: BTreeSet<BookieId>,
    fragment_start: EntryId,
) -> Result<Versioned<LedgerMetadata>> {
    let retries = inner.config.metadata_retries.max(1);
    let mut attempt = 0;
    loop {
        let next = inner
            .replacements(&ensemble, meta.value.write_quorum, &failed, &excluded)
            .await?;
        let value =
            with_new_fragment(ledger, &meta.value, LedgerState::Open, fragment_start, next)?;
        match inner
            .metadata
            .write_ledger(ledger, &value, meta.version)
            .await
        {
            Ok(version) => return Ok(Versioned { value, version }),
            Err(e) if e.is_bad_version() && attempt < retries => {
                attempt += 1;
                let current = inner.read_ledger(ledger).await?;
                if current.value.state != LedgerState::Open {
                    return Err(ClientError::Fenced { ledger });
                }
                if current.value.current_ensemble() != meta.value.current_ensemble() {
                    return Err(ClientError::MetadataConflict {
                        ledger,
                        reason: "the last fragment was changed by someone else".into(),
                    });
                }
                meta = current;
            }
            Err(e) => return Err(ClientError::from_metadata(ledger, e)),
        }
    }
}
