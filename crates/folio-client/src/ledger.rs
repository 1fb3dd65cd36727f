//! The writer of a ledger: an actor task that owns the [`WriterState`] machine, sends
//! entries to bookies, writes ensemble changes and the close to the metadata, and
//! completes the callers' appends in entry order.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_metadata::Versioned;
use folio_proto::{DigestManager, master_key};
use folio_types::metadata::{LedgerMetadata, LedgerState};
use folio_types::{BookieId, EntryId, LedgerId};
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use crate::adds::{AddDone, Adds};
use crate::client::{Inner, proto_digest};
use crate::conn::req;
use crate::ensemble::{replace_bookies, with_new_fragment};
use crate::error::{ClientError, Result};
use crate::pending::{AddOutcome, WriterAction, WriterSettings, WriterState};

enum Cmd {
    Append {
        entry: Option<EntryId>,
        payload: Bytes,
        reply: oneshot::Sender<Result<EntryId>>,
    },
    Close {
        reply: oneshot::Sender<Result<()>>,
    },
}

/// The outcome of an ensemble change written to the metadata.
type EnsembleChanged = Result<Versioned<LedgerMetadata>>;

/// The future of one append: resolves to the entry id once the entry is acknowledged
/// (after every entry before it), or to the error that stopped the writer.
#[must_use = "an append is only known to be durable when its future resolves"]
pub struct AppendFuture {
    ledger: LedgerId,
    rx: oneshot::Receiver<Result<EntryId>>,
}

impl Future for AppendFuture {
    type Output = Result<EntryId>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let ledger = self.ledger;
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ClientError::LedgerClosed { ledger })))
    }
}

/// A ledger open for writing (made by [`crate::Client::create_ledger`]).
///
/// `append` returns at once with a future; many appends may be in flight, and their
/// futures complete in entry order. Dropping the handle without [`LedgerHandle::close`]
/// leaves the ledger open (a reader recovers it).
pub struct LedgerHandle {
    ledger: LedgerId,
    adv: bool,
    cmds: mpsc::UnboundedSender<Cmd>,
    lac: Arc<AtomicI64>,
    /// The outcome of the close, once the writer stopped.
    closed: Arc<Mutex<Option<Result<()>>>>,
}

impl std::fmt::Debug for LedgerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerHandle")
            .field("ledger", &self.ledger)
            .field("lac", &self.last_add_confirmed())
            .finish()
    }
}

impl LedgerHandle {
    pub(crate) fn spawn(
        inner: Arc<Inner>,
        ledger: LedgerId,
        meta: Versioned<LedgerMetadata>,
        password: Vec<u8>,
        adv: bool,
    ) -> LedgerHandle {
        let (cmds, cmd_rx) = mpsc::unbounded_channel();
        let lac = Arc::new(AtomicI64::new(-1));
        let closed = Arc::new(Mutex::new(None));
        let quorum = meta.value.quorum().expect("created with a checked quorum");
        let ensemble = meta
            .value
            .current_ensemble()
            .map(|(_, e)| e.to_vec())
            .expect("created with an ensemble");
        let digest = DigestManager::new(ledger, proto_digest(meta.value.digest_type), &password);
        let state = WriterState::new(
            ledger,
            quorum,
            ensemble,
            digest,
            WriterSettings {
                adv,
                max_ensemble_changes: inner.config.max_ensemble_changes,
                add_quorum_timeout: inner.config.add_entry_quorum_timeout,
                delay_ensemble_change: inner.config.delay_ensemble_change,
            },
        );
        let key = master_key(&password);
        let actor = Actor {
            adds: Adds::new(Arc::clone(&inner)),
            last_add: inner.clock.now(),
            inner,
            ledger,
            key,
            key_bytes: Bytes::copy_from_slice(&key),
            digest: DigestManager::new(ledger, proto_digest(meta.value.digest_type), &password),
            meta,
            state,
            callbacks: BTreeMap::new(),
            lac: lac.clone(),
            closed: closed.clone(),
            failed_bookies: BTreeSet::new(),
            piggybacked_lac: -1,
            explicit_lac_sent: -1,
        };
        tokio::spawn(actor.run(cmd_rx));
        LedgerHandle {
            ledger,
            adv,
            cmds,
            lac,
            closed,
        }
    }

    pub fn id(&self) -> LedgerId {
        self.ledger
    }

    /// The last entry acknowledged (with every entry before it).
    pub fn last_add_confirmed(&self) -> EntryId {
        self.lac.load(Ordering::SeqCst)
    }

    /// Appends an entry; the future gives its entry id once acknowledged. The order of
    /// calls is the order of entries.
    pub fn append(&self, payload: impl Into<Bytes>) -> AppendFuture {
        self.send_append(None, payload.into())
    }

    /// Appends an entry with a caller-chosen id (adv ledgers only).
    pub fn append_with_id(&self, entry: EntryId, payload: impl Into<Bytes>) -> AppendFuture {
        self.send_append(Some(entry), payload.into())
    }

    /// Whether this is an adv ledger (caller-chosen entry ids).
    pub fn is_adv(&self) -> bool {
        self.adv
    }

    fn send_append(&self, entry: Option<EntryId>, payload: Bytes) -> AppendFuture {
        let (reply, rx) = oneshot::channel();
        // If the actor is gone the reply sender is dropped and the future says "closed".
        let _ = self.cmds.send(Cmd::Append {
            entry,
            payload,
            reply,
        });
        AppendFuture {
            ledger: self.ledger,
            rx,
        }
    }

    /// Waits for every pending append, then closes the ledger in the metadata with the
    /// LAC as its last entry. Fails with [`ClientError::Fenced`] if the ledger was
    /// recovered (or closed) by someone else. Closing twice is fine.
    pub async fn close(&self) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        if self.cmds.send(Cmd::Close { reply }).is_ok()
            && let Ok(result) = rx.await
        {
            return result;
        }
        // The writer already stopped: report how its close went.
        self.closed.lock().clone().unwrap_or(Ok(()))
    }
}

struct Actor {
    inner: Arc<Inner>,
    ledger: LedgerId,
    key: [u8; 20],
    /// `key` in a shared buffer, for the adds.
    key_bytes: Bytes,
    digest: DigestManager,
    meta: Versioned<LedgerMetadata>,
    state: WriterState,
    callbacks: BTreeMap<EntryId, oneshot::Sender<Result<EntryId>>>,
    lac: Arc<AtomicI64>,
    closed: Arc<Mutex<Option<Result<()>>>>,
    /// Every bookie that failed this writer (never chosen again as a replacement).
    failed_bookies: BTreeSet<BookieId>,
    last_add: Instant,
    /// The LAC carried by the last entry sent.
    piggybacked_lac: EntryId,
    explicit_lac_sent: EntryId,
    /// The adds sent and their answers.
    adds: Adds,
}

/// Appends taken in one turn of the writer's loop at most, before their adds are flushed
/// and answers are looked at again.
const APPENDS_PER_TURN: usize = 64;

impl Drop for Actor {
    /// The adds still unanswered go on by themselves ([`Adds::finish_in_background`]).
    fn drop(&mut self) {
        let adds = std::mem::replace(&mut self.adds, Adds::new(self.inner.clone()));
        adds.finish_in_background();
    }
}

impl Actor {
    async fn run(mut self, mut cmds: mpsc::UnboundedReceiver<Cmd>) {
        let (events_tx, mut events) = mpsc::unbounded_channel::<EnsembleChanged>();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The tick serves only the add quorum timeout and the explicit LAC: without them
        // a writer does not wake on its own (an add's own timeout is the client's sweeper's,
        // `Bookies::start_add`), so that thousands of open ledgers cost nothing idle.
        let ticking = self.inner.config.add_entry_quorum_timeout.is_some()
            || self.inner.config.explicit_lac_interval.is_some();
        let mut close_waiters: Vec<oneshot::Sender<Result<()>>> = Vec::new();
        let mut handle_gone = false;
        loop {
            tokio::select! {
                // Branches in this order, not at random: the same inputs give the same
                // run (a simulator replays a seed exactly). Replies and the timeout tick
                // come before new appends, so that a producer that never pauses cannot
                // hold back acknowledgements and add timeouts.
                biased;
                Some(changed) = events.recv() => {
                    let actions = match changed {
                        Ok(meta) => {
                            let ensemble = meta
                                .value
                                .current_ensemble()
                                .map(|(_, e)| e.to_vec())
                                .unwrap_or_default();
                            tracing::info!(ledger = self.ledger, ?ensemble, "ensemble changed");
                            self.meta = meta;
                            self.state.on_ensemble_changed(ensemble)
                        }
                        Err(e) => {
                            tracing::warn!(ledger = self.ledger, "ensemble change failed: {e}");
                            self.state.on_ensemble_change_failed(e)
                        }
                    };
                    self.perform(actions, &events_tx);
                }
                Some(AddDone { entry, bookie, outcome }) = self.adds.next(), if !self.adds.is_empty() => {
                    if matches!(outcome, AddOutcome::Failed(_)) {
                        self.failed_bookies.insert(bookie.clone());
                    }
                    let actions = self.state.on_add_response(entry, &bookie, outcome);
                    self.perform(actions, &events_tx);
                }
                _ = tick.tick(), if ticking => {
                    let actions = self.state.on_tick(self.inner.clock.now());
                    self.perform(actions, &events_tx);
                    self.maybe_send_explicit_lac();
                }
                cmd = cmds.recv(), if !handle_gone => match cmd {
                    None => {
                        handle_gone = true;
                        self.state.start_closing();
                    }
                    Some(first) => {
                        // A burst of appends is taken together (their adds flushed once).
                        let mut next = Some(first);
                        let mut taken = 0;
                        while let Some(cmd) = next.take() {
                            match cmd {
                                Cmd::Append { entry, payload, reply } => {
                                    self.append(entry, payload, reply, &events_tx);
                                }
                                Cmd::Close { reply } => {
                                    self.state.start_closing();
                                    close_waiters.push(reply);
                                    break;
                                }
                            }
                            taken += 1;
                            if taken < APPENDS_PER_TURN {
                                next = cmds.try_recv().ok();
                            }
                        }
                    }
                },
            }
            self.adds.flush();
            let drained = self.state.pending_count() == 0 && !self.state.is_changing_ensemble();
            if drained && !close_waiters.is_empty() {
                let result = self.close_metadata().await;
                if result.is_ok() {
                    // After the close, never before it and never waited for.
                    crate::write_close::send(&self.inner, self.ledger, self.key, &self.meta.value);
                }
                *self.closed.lock() = Some(result.clone());
                for w in close_waiters.drain(..) {
                    let _ = w.send(result.clone());
                }
                // A closed writer takes nothing more: later commands find the actor gone.
                return;
            }
            if drained && handle_gone {
                return;
            }
        }
    }

    /// Takes one append from the caller.
    fn append(
        &mut self,
        entry: Option<EntryId>,
        payload: Bytes,
        reply: oneshot::Sender<Result<EntryId>>,
        events: &mpsc::UnboundedSender<EnsembleChanged>,
    ) {
        // Header, digest and protobuf framing stay well under 256 bytes.
        let max = self.inner.config.max_frame_size.saturating_sub(256);
        if payload.len() > max {
            let _ = reply.send(Err(ClientError::InvalidArgument(format!(
                "an entry of {} bytes exceeds the {max} bytes a frame to a bookie can carry (ledger {})",
                payload.len(),
                self.ledger
            ))));
            return;
        }
        match self.state.add(entry, &payload, self.inner.clock.now()) {
            Ok((id, actions)) => {
                self.callbacks.insert(id, reply);
                self.last_add = self.inner.clock.now();
                self.piggybacked_lac = self.state.lac();
                self.perform(actions, events);
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    fn perform(
        &mut self,
        actions: Vec<WriterAction>,
        events: &mpsc::UnboundedSender<EnsembleChanged>,
    ) {
        for a in actions {
            match a {
                WriterAction::SendAdd {
                    entry,
                    bookie,
                    body,
                } => {
                    // Queued on the connection now (in entry order), written at the flush.
                    self.adds
                        .send(self.ledger, &self.key_bytes, entry, &bookie, body);
                }
                WriterAction::Acked { entry } => {
                    self.lac.store(self.state.lac(), Ordering::SeqCst);
                    if let Some(cb) = self.callbacks.remove(&entry) {
                        let _ = cb.send(Ok(entry));
                    }
                }
                WriterAction::Failed { entry, error } => {
                    if let Some(cb) = self.callbacks.remove(&entry) {
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
                    let inner = self.inner.clone();
                    let events = events.clone();
                    let meta = self.meta.clone();
                    let ensemble = self.state.ensemble().to_vec();
                    let excluded = self.failed_bookies.clone();
                    let ledger = self.ledger;
                    tokio::spawn(async move {
                        let r = change_ensemble(
                            &inner,
                            ledger,
                            meta,
                            ensemble,
                            failed,
                            excluded,
                            fragment_start,
                        )
                        .await;
                        let _ = events.send(r);
                    });
                }
            }
        }
    }

    /// Sends the LAC explicitly when the writer is idle and the bookies have not seen the
    /// latest LAC piggybacked on an entry.
    fn maybe_send_explicit_lac(&mut self) {
        let Some(interval) = self.inner.config.explicit_lac_interval else {
            return;
        };
        let lac = self.state.lac();
        if self.state.error().is_some()
            || lac <= self.piggybacked_lac
            || lac <= self.explicit_lac_sent
            || self
                .inner
                .clock
                .now()
                .saturating_duration_since(self.last_add)
                < interval
        {
            return;
        }
        self.explicit_lac_sent = lac;
        let body = self.digest.compute_lac(lac);
        for bookie in self.state.ensemble().to_vec() {
            let inner = self.inner.clone();
            let request = req::write_lac(self.ledger, lac, &self.key, body.clone());
            tokio::spawn(async move {
                // Best effort: a lost explicit LAC only delays readers.
                let _ = inner
                    .bookies
                    .call(&bookie, request, inner.config.add_entry_timeout)
                    .await;
            });
        }
    }

    /// Closes the ledger in the metadata at the LAC.
    async fn close_metadata(&mut self) -> Result<()> {
        if let Some(e) = self.state.error()
            && e.is_fenced()
        {
            return Err(e.clone());
        }
        let lac = self.state.lac();
        let length = self.state.acked_length();
        let retries = self.inner.config.metadata_retries.max(1);
        let mut attempt = 0;
        loop {
            let current = &self.meta.value;
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
                .write_ledger(self.ledger, &closed, self.meta.version)
                .await
            {
                Ok(version) => {
                    self.meta = Versioned {
                        value: closed,
                        version,
                    };
                    return Ok(());
                }
                Err(e) if e.is_bad_version() && attempt < retries => {
                    attempt += 1;
                    self.meta = self
                        .inner
                        .metadata
                        .read_ledger(self.ledger)
                        .await
                        .map_err(|e| ClientError::from_metadata(self.ledger, e))?;
                }
                Err(e) => return Err(ClientError::from_metadata(self.ledger, e)),
            }
        }
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
    failed: std::collections::BTreeMap<usize, BookieId>,
    excluded: BTreeSet<BookieId>,
    fragment_start: EntryId,
) -> Result<Versioned<LedgerMetadata>> {
    let retries = inner.config.metadata_retries.max(1);
    let mut attempt = 0;
    loop {
        let writable = inner.metadata.list_bookies().await?.writable;
        let racks = inner.racks(&writable).await?;
        let next = replace_bookies(
            &ensemble,
            meta.value.write_quorum,
            &failed,
            &writable,
            &excluded,
            &racks,
            inner.rng.as_ref(),
        )?;
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
                let current = inner
                    .metadata
                    .read_ledger(ledger)
                    .await
                    .map_err(|e| ClientError::from_metadata(ledger, e))?;
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
