//! The request processor: BookKeeper's server-side semantics of every operation, over
//! [`BookieStorage`], with no I/O of its own.
//!
//! [`Processor::process`] takes one request and a [`Reply`] callback. The reply runs exactly once:
//! at once for reads and refusals, from the storage's durability callback for writes (an add is
//! answered only once journaled; a fence read only once the fence is durable), or, for a long-poll
//! read, when the ledger's LAC passes the reader's previous LAC (on a ledger no entry of which has
//! reached this bookie yet, too: BookKeeper answers NoLedger at once, and its readers ask again
//! at once, in a loop until the first add). The processor has no clock: a long
//! poll returns a [`LongPollTimer`] and the shell calls [`Processor::expire_long_poll`] when it
//! fires, which answers with the current LAC if nothing woke the read before.
//!
//! Bounds: at most `max_pending_adds` adds and `max_pending_reads` reads are in flight at once
//! across the bookie; beyond that requests get ETOOMANYREQUESTS, as BookKeeper's request queues
//! do. A long poll holds a read slot only while it is read, not while it waits (as in
//! BookKeeper, whose read queue holds no waiting watcher), so that long polls cannot use up
//! the reads of everyone else. Waiting long polls are bounded per connection instead
//! (`max_long_polls_per_connection`, ETOOMANYREQUESTS beyond), their wait by
//! `max_long_poll_timeout` whatever the client asked, and a closed connection's waiting long
//! polls are dropped ([`Connection`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use folio_types::{EntryId, LedgerId};
use parking_lot::Mutex;

use crate::request::{
    AUTH_DISABLED_PLUGIN, AddRequest, AuthMessage, BOOKIE_INFO_FREE_DISK_SPACE,
    BOOKIE_INFO_TOTAL_DISK_CAPACITY, ReadRequest, Request, Response, Status,
};
use crate::storage::{BookieStorage, StorageError, WriteCallback};
use folio_proto::availability::AvailabilityOfEntries;

/// Delivers the one response to a request. Called exactly once (dropping a processor with pending
/// long polls drops their replies unanswered; [`Processor::expire_all_long_polls`] answers them).
pub type Reply = Box<dyn FnOnce(Response) + Send + 'static>;

/// Limits of the processor.
#[derive(Debug, Clone)]
pub struct ProcessorConfig {
    /// Adds in flight (sent to storage, not yet durable) before new adds get ETOOMANYREQUESTS.
    pub max_pending_adds: usize,
    /// Reads in flight (including waiting long polls) before new reads get ETOOMANYREQUESTS.
    pub max_pending_reads: usize,
    /// Cap on the response size of a v2 batch read (BookKeeper's `maxBatchReadSize`); keep it
    /// under the frame size clients accept.
    pub max_batch_read_size: usize,
    /// Longest a long poll waits, whatever timeout its request asks for; then it is answered
    /// with the current LAC (as at its own timeout), and the client polls again.
    pub max_long_poll_timeout: Duration,
    /// Long polls one [`Connection`] may have waiting; beyond, ETOOMANYREQUESTS.
    pub max_long_polls_per_connection: usize,
}

impl Default for ProcessorConfig {
    fn default() -> Self {
        // BookKeeper: maxPendingAddRequestsPerThread / maxPendingReadRequestsPerThread = 10000.
        ProcessorConfig {
            max_pending_adds: 10_000,
            max_pending_reads: 10_000,
            max_batch_read_size: 5 * 1024 * 1024 - 1024,
            max_long_poll_timeout: Duration::from_secs(60),
            max_long_polls_per_connection: 500,
        }
    }
}

/// Runs a job on other threads: where the processor continues after a storage completion with
/// work that reads (a fence read's entry, waking long polls), so that the journal's completion
/// thread, which runs the completions, never waits on a disk read.
pub type Offload = Arc<dyn Fn(Box<dyn FnOnce() + Send + 'static>) + Send + Sync>;

/// A long-poll read is waiting: call [`Processor::expire_long_poll`] with `id` after `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongPollTimer {
    pub id: u64,
    pub timeout: Duration,
}

/// Names the connection a request came on ([`Connection::id`]); [`ConnectionId::NONE`] for
/// callers without connections (no per-connection bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId(u64);

impl ConnectionId {
    pub const NONE: ConnectionId = ConnectionId(0);
}

/// One client connection's share of the processor: its waiting long polls are counted against
/// `max_long_polls_per_connection`, and dropping it (the connection closed) drops them
/// unanswered, releasing what they hold. A request processed after the drop that would wait
/// is dropped too.
pub struct Connection<S: BookieStorage> {
    id: ConnectionId,
    processor: Processor<S>,
}

impl<S: BookieStorage> Connection<S> {
    pub fn id(&self) -> ConnectionId {
        self.id
    }

    /// Answers this connection's waiting long polls with the current LAC now (shutdown: the
    /// client is still there to read the answers).
    pub fn answer_waiting(&self) {
        for waiter in self.processor.take_connection_polls(self.id, false) {
            self.processor.answer_waiter(waiter);
        }
    }
}

impl<S: BookieStorage> Drop for Connection<S> {
    fn drop(&mut self) {
        // Dropped outside the lock: a reply's drop releases its slots.
        drop(self.processor.take_connection_polls(self.id, true));
    }
}

/// Cheap to clone; clones share state.
pub struct Processor<S: BookieStorage> {
    shared: Arc<Shared<S>>,
}

impl<S: BookieStorage> Clone for Processor<S> {
    fn clone(&self) -> Self {
        Processor {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<S> {
    storage: S,
    config: ProcessorConfig,
    pending_adds: AtomicUsize,
    pending_reads: AtomicUsize,
    next_poll_id: AtomicU64,
    next_connection_id: AtomicU64,
    long_polls: Mutex<LongPolls>,
    offload: std::sync::OnceLock<Offload>,
}

/// Where a long poll's LAC comes from: storage, which may read the disk for it (on a read
/// thread), or only memory (on the connection's task; see
/// [`Processor::long_poll_without_blocking`]).
#[derive(Clone, Copy)]
enum LacSource {
    Storage,
    Memory,
}

/// The most long polls a write wakes and answers on its own thread (the rest go to the read
/// threads): a few tailing readers per ledger are the common case, and a write should not
/// carry the answers of hundreds.
const INLINE_WAKES: usize = 8;

#[derive(Default)]
struct LongPolls {
    by_id: HashMap<u64, Waiter>,
    by_ledger: folio_types::IdHashMap<LedgerId, Vec<u64>>,
    /// The waiting long polls of each open connection (not of [`ConnectionId::NONE`]).
    by_conn: HashMap<ConnectionId, Vec<u64>>,
}

impl LongPolls {
    fn remove(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.by_id.remove(&id)?;
        if let Some(ids) = self.by_conn.get_mut(&waiter.conn) {
            ids.retain(|i| *i != id);
        }
        if let Some(ids) = self.by_ledger.get_mut(&waiter.request.ledger) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.by_ledger.remove(&waiter.request.ledger);
            }
        }
        Some(waiter)
    }
}

struct Waiter {
    conn: ConnectionId,
    request: ReadRequest,
    previous_lac: EntryId,
    reply: Reply,
}

/// Decrements a pending counter when the request is answered (or its reply dropped).
struct Pending<S> {
    shared: Arc<Shared<S>>,
    counter: fn(&Shared<S>) -> &AtomicUsize,
}

impl<S> Drop for Pending<S> {
    fn drop(&mut self) {
        (self.counter)(&self.shared).fetch_sub(1, Ordering::AcqRel);
    }
}

/// A plain read's answer from what storage gave, with `max_lac` on success.
fn read_answer(
    read: &ReadRequest,
    result: Result<Bytes, StorageError>,
    max_lac: impl FnOnce() -> Option<EntryId>,
) -> Response {
    match result {
        Ok(body) => Response::Read {
            status: Status::Ok,
            ledger: read.ledger,
            entry: read.entry,
            body: Some(body),
            max_lac: max_lac(),
        },
        Err(e) => Response::Read {
            status: read_status(&e),
            ledger: read.ledger,
            entry: read.entry,
            body: None,
            max_lac: None,
        },
    }
}

fn read_status(e: &StorageError) -> Status {
    match e {
        StorageError::NoLedger(_) => Status::NoLedger,
        StorageError::NoEntry { .. } => Status::NoEntry,
        StorageError::Unauthorized(_) => Status::Unauthorized,
        StorageError::Fenced(_) | StorageError::ReadOnly | StorageError::Io(_) => Status::Io,
    }
}

fn write_status(e: &StorageError) -> Status {
    match e {
        StorageError::Unauthorized(_) => Status::Unauthorized,
        StorageError::Fenced(_) => Status::Fenced,
        StorageError::ReadOnly => Status::ReadOnly,
        // A write never answers ENOLEDGER / ENOENTRY (not in BookKeeper's list for writes).
        StorageError::NoLedger(_) | StorageError::NoEntry { .. } | StorageError::Io(_) => {
            Status::Io
        }
    }
}

impl<S: BookieStorage> Processor<S> {
    pub fn new(storage: S, config: ProcessorConfig) -> Self {
        Processor {
            shared: Arc::new(Shared {
                storage,
                config,
                pending_adds: AtomicUsize::new(0),
                pending_reads: AtomicUsize::new(0),
                next_poll_id: AtomicU64::new(1),
                next_connection_id: AtomicU64::new(1),
                long_polls: Mutex::new(LongPolls::default()),
                offload: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Sets where work after a storage completion runs (once; later calls are ignored and
    /// return false). Without it, that work runs on the completing thread.
    pub fn set_offload(&self, offload: Offload) -> bool {
        self.shared.offload.set(offload).is_ok()
    }

    /// A new connection's handle (see [`Connection`]).
    pub fn connection(&self) -> Connection<S> {
        let id = ConnectionId(
            self.shared
                .next_connection_id
                .fetch_add(1, Ordering::Relaxed),
        );
        self.shared.long_polls.lock().by_conn.insert(id, Vec::new());
        Connection {
            id,
            processor: self.clone(),
        }
    }

    /// Takes the waiting long polls of `conn` out; with `close`, the connection is gone and
    /// later long polls of it are not registered.
    fn take_connection_polls(&self, conn: ConnectionId, close: bool) -> Vec<Waiter> {
        let mut polls = self.shared.long_polls.lock();
        let ids = if close {
            polls.by_conn.remove(&conn).unwrap_or_default()
        } else {
            polls
                .by_conn
                .get_mut(&conn)
                .map(std::mem::take)
                .unwrap_or_default()
        };
        ids.into_iter().filter_map(|id| polls.remove(id)).collect()
    }

    fn offloaded(&self, job: impl FnOnce() + Send + 'static) {
        match self.shared.offload.get() {
            Some(offload) => offload(Box::new(job)),
            None => job(),
        }
    }

    fn has_long_polls(&self, ledger: LedgerId) -> bool {
        self.shared
            .long_polls
            .lock()
            .by_ledger
            .contains_key(&ledger)
    }

    /// After a write made `ledger`'s LAC move (maybe): wakes its long polls. With the LAC
    /// known in memory, the first [`INLINE_WAKES`] whose answers storage gives without
    /// waiting (a tailing reader's next entry is in the write cache) are answered here; the
    /// others, and all of them when the LAC is not known in memory, off this thread. A read
    /// thread's wake-up and the hand-back to the reader's connection cost more than such an
    /// answer: at a thousand tailed entries a second they were two of a bookie's eleven
    /// context switches per entry (docs/performance.md, "2026-12-07 (11:24)").
    fn lac_may_have_moved(&self, ledger: LedgerId) {
        if !self.has_long_polls(ledger) {
            return;
        }
        let Some(lac) = self.shared.storage.known_lac(ledger) else {
            let this = self.clone();
            self.offloaded(move || this.notify_lac(ledger));
            return;
        };
        let mut rest = Vec::new();
        for (i, waiter) in self.take_woken(ledger, lac).into_iter().enumerate() {
            let answer = (i < INLINE_WAKES)
                .then(|| {
                    self.long_poll_answer(&waiter.request, waiter.previous_lac, lac, |e| {
                        self.shared
                            .storage
                            .read_entry_nowait(waiter.request.ledger, e)
                            .map(Ok)
                    })
                })
                .flatten();
            match answer {
                Some(response) => (waiter.reply)(response),
                None => rest.push(waiter),
            }
        }
        if !rest.is_empty() {
            let this = self.clone();
            self.offloaded(move || {
                for waiter in rest {
                    let response =
                        this.long_poll_response(&waiter.request, waiter.previous_lac, lac);
                    (waiter.reply)(response);
                }
            });
        }
    }

    pub fn storage(&self) -> &S {
        &self.shared.storage
    }

    /// Adds sent to storage and not yet answered.
    pub fn pending_adds(&self) -> usize {
        self.shared.pending_adds.load(Ordering::Acquire)
    }

    /// Reads being served (a waiting long poll is not one: see [`Processor::waiting_long_polls`]).
    pub fn pending_reads(&self) -> usize {
        self.shared.pending_reads.load(Ordering::Acquire)
    }

    /// Long polls waiting for their LAC or their timer.
    pub fn waiting_long_polls(&self) -> usize {
        self.shared.long_polls.lock().by_id.len()
    }

    /// Handles one request; `reply` runs exactly once with its response (see the module comment).
    /// Returns a timer when the request is a long poll that now waits.
    pub fn process(&self, request: Request, reply: Reply) -> Option<LongPollTimer> {
        self.process_on(ConnectionId::NONE, request, reply)
    }

    /// [`Processor::process`] for a request that came on connection `conn`.
    pub fn process_on(
        &self,
        conn: ConnectionId,
        request: Request,
        reply: Reply,
    ) -> Option<LongPollTimer> {
        match request {
            Request::Add(add) => {
                self.add(add, reply);
                None
            }
            Request::Read(read) => self.read(conn, read, reply, LacSource::Storage),
            Request::ReadLac { ledger } => {
                self.counted_read(&Request::ReadLac { ledger }, reply, |reply| {
                    reply(self.read_lac(ledger))
                });
                None
            }
            Request::WriteLac {
                ledger,
                lac,
                master_key,
                body,
            } => {
                self.write_lac(ledger, lac, master_key, body, reply);
                None
            }
            Request::ForceLedger { ledger } => {
                self.shared.storage.force_ledger(
                    ledger,
                    Box::new(move |result| {
                        let status = match result {
                            Ok(()) => Status::Ok,
                            Err(_) => Status::Io,
                        };
                        reply(Response::ForceLedger { status, ledger })
                    }),
                );
                None
            }
            Request::WriteClose { ledger, master_key } => {
                let status = match self.shared.storage.write_close(ledger, &master_key) {
                    Ok(()) => Status::Ok,
                    Err(StorageError::NoLedger(_)) => Status::NoLedger,
                    Err(e) => write_status(&e),
                };
                reply(Response::WriteClose { status, ledger });
                None
            }
            Request::GetBookieInfo { requested } => {
                reply(self.bookie_info(requested));
                None
            }
            Request::GetListOfEntriesOfLedger { ledger } => {
                self.counted_read(
                    &Request::GetListOfEntriesOfLedger { ledger },
                    reply,
                    |reply| {
                        let response = match self.shared.storage.entry_ids(ledger) {
                            Ok(ids) => Response::ListOfEntries {
                                status: Status::Ok,
                                ledger,
                                availability: Some(
                                    AvailabilityOfEntries::from_sorted_entries(ids).encode(),
                                ),
                            },
                            Err(e) => Response::ListOfEntries {
                                status: read_status(&e),
                                ledger,
                                availability: None,
                            },
                        };
                        reply(response)
                    },
                );
                None
            }
            Request::BatchRead {
                ledger,
                start_entry,
                max_count,
                max_size,
                fence,
                master_key,
            } => {
                let request = Request::BatchRead {
                    ledger,
                    start_entry,
                    max_count,
                    max_size,
                    fence,
                    master_key: master_key.clone(),
                };
                self.counted_read(&request.clone(), reply, |reply| {
                    if fence {
                        self.fence_then(request, ledger, master_key, reply, move |this| {
                            this.batch_read(ledger, start_entry, max_count, max_size)
                        })
                    } else {
                        reply(self.batch_read(ledger, start_entry, max_count, max_size))
                    }
                });
                None
            }
            Request::Auth(_) => {
                // Auth disabled: every connection is authenticated; answer as AuthDisabledPlugin.
                reply(Response::Auth {
                    status: Status::Ok,
                    message: AuthMessage {
                        plugin_name: AUTH_DISABLED_PLUGIN.to_string(),
                        payload: Bytes::new(),
                    },
                });
                None
            }
            Request::StartTls => {
                // No TLS configured: BookKeeper answers EBADREQ.
                reply(Response::StartTls {
                    status: Status::BadRequest,
                });
                None
            }
        }
    }

    /// Takes a slot in `counter` (bounded by `max`), or answers ETOOMANYREQUESTS via `None`.
    fn admit(&self, counter: fn(&Shared<S>) -> &AtomicUsize, max: usize) -> Option<Pending<S>> {
        let c = counter(&self.shared);
        let taken = c
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            return None;
        }
        Some(Pending {
            shared: self.shared.clone(),
            counter,
        })
    }

    /// Wraps `reply` so that the read slot is released when it runs.
    fn counted_read(&self, request: &Request, reply: Reply, f: impl FnOnce(Reply)) {
        let max = self.shared.config.max_pending_reads;
        match self.admit(|s| &s.pending_reads, max) {
            None => reply(Response::error_for(request, Status::TooManyRequests)),
            Some(slot) => f(Box::new(move |response| {
                drop(slot);
                reply(response)
            })),
        }
    }

    fn add(&self, add: AddRequest, reply: Reply) {
        let refuse = |status| Response::Add {
            status,
            ledger: add.ledger,
            entry: add.entry,
        };
        // The body starts with its own ledger and entry ids (spec §4.1); BookKeeper stores by them.
        // A body that disagrees with the request is a broken client: refuse it rather than guess.
        if add.body.len() < 16
            || add.body[0..8] != add.ledger.to_be_bytes()
            || add.body[8..16] != add.entry.to_be_bytes()
        {
            return reply(refuse(Status::BadRequest));
        }
        if add.master_key.is_empty() {
            return reply(refuse(Status::Unauthorized));
        }
        if self.shared.storage.is_read_only() && !add.high_priority {
            return reply(refuse(Status::ReadOnly));
        }
        let max = self.shared.config.max_pending_adds;
        let Some(slot) = self.admit(|s| &s.pending_adds, max) else {
            return reply(refuse(Status::TooManyRequests));
        };
        let (ledger, entry) = (add.ledger, add.entry);
        let done: WriteCallback = Box::new(move |result| {
            drop(slot);
            let status = match &result {
                Ok(()) => Status::Ok,
                Err(e) => write_status(e),
            };
            reply(Response::Add {
                status,
                ledger,
                entry,
            });
        });
        let storage = &self.shared.storage;
        if add.recovery && add.deferred_sync {
            storage.add_recovery_entry_deferred(ledger, entry, add.master_key, add.body, done);
        } else {
            storage.add_entry(ledger, entry, add.master_key, add.body, add.recovery, done);
        }
        // Storage serves the LAC this add carries once the entry is stored, before it is
        // durable here (see `BookieStorage::last_add_confirmed`): long polls wake now, not
        // a journal group later, as BookKeeper's bookie wakes them from its ledger storage.
        self.lac_may_have_moved(ledger);
    }

    /// The answer to a plain read (no fence, no long poll) if storage has the entry and its
    /// LAC without waiting for the disk: the caller (the connection's task) then answers it
    /// itself, where a read thread would cost two thread hand-offs. `None`: process the
    /// request as usual, on a read thread; that also answers every error. The answer is the
    /// one the read thread would give.
    pub fn read_without_blocking(&self, request: &Request) -> Option<Response> {
        let Request::Read(read) = request else {
            return None;
        };
        if read.fence || read.piggyback || read.previous_lac.is_some() {
            return None;
        }
        let storage = &self.shared.storage;
        let max_lac = storage.known_lac(read.ledger)?;
        let body = storage.read_entry_nowait(read.ledger, read.entry)?;
        Some(Response::Read {
            status: Status::Ok,
            ledger: read.ledger,
            entry: read.entry,
            body: Some(body),
            max_lac: Some(max_lac),
        })
    }

    /// A long poll taken on the caller's thread (the connection's task) when storage knows
    /// its ledger's LAC in memory: it registers to wait, or is answered at once from memory,
    /// as [`Processor::process_on`] would. Registering needs no disk, and a read thread's
    /// wake-up to do it cost more than the registering: tailing readers send one poll per
    /// entry. An answer whose entry is not in memory still goes to the read threads (the
    /// offload). `Err` gives the request back, untouched, when the LAC is not in memory or
    /// it is not a long poll: process it as usual, on a read thread.
    pub fn long_poll_without_blocking(
        &self,
        conn: ConnectionId,
        request: Request,
        reply: Reply,
    ) -> Result<Option<LongPollTimer>, (Request, Reply)> {
        match request {
            Request::Read(read)
                if read.previous_lac.is_some()
                    && !read.fence
                    && self.shared.storage.known_lac(read.ledger).is_some() =>
            {
                Ok(self.read(conn, read, reply, LacSource::Memory))
            }
            request => Err((request, reply)),
        }
    }

    fn read(
        &self,
        conn: ConnectionId,
        read: ReadRequest,
        reply: Reply,
        lac_from: LacSource,
    ) -> Option<LongPollTimer> {
        let max = self.shared.config.max_pending_reads;
        let Some(slot) = self.admit(|s| &s.pending_reads, max) else {
            reply(Response::error_for(
                &Request::Read(read),
                Status::TooManyRequests,
            ));
            return None;
        };
        if read.fence {
            let reply: Reply = Box::new(move |response| {
                drop(slot);
                reply(response)
            });
            self.fence_then_read(read, reply);
            return None;
        }
        if read.piggyback
            && (read.entry != folio_types::LAST_ENTRY_ID || read.previous_lac.is_none())
        {
            reply(Response::error_for(
                &Request::Read(read),
                Status::BadRequest,
            ));
            return None;
        }
        let Some(previous_lac) = read.previous_lac else {
            reply(self.read_now(&read, None));
            return None;
        };
        // Long poll. Register first, then read the LAC: an add that completes after the read
        // finds the waiter registered (`notify_lac` reads the LAC after storage applied the add),
        // and one that completed before is seen by the read. No storage call under the lock.
        // The read slot is held until this returns: a waiting long poll holds none.
        let cap = self.shared.config.max_long_poll_timeout.as_millis() as u64;
        let timeout_ms = read
            .timeout_ms
            .filter(|t| *t > 0)
            .map(|t| (t as u64).min(cap));
        let id = self.shared.next_poll_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut polls = self.shared.long_polls.lock();
            if conn != ConnectionId::NONE {
                let bound = self.shared.config.max_long_polls_per_connection;
                match polls.by_conn.get_mut(&conn) {
                    // The connection closed meanwhile: nobody is there to answer.
                    None => return None,
                    Some(ids) if ids.len() >= bound => {
                        drop(polls);
                        reply(Response::error_for(
                            &Request::Read(read),
                            Status::TooManyRequests,
                        ));
                        return None;
                    }
                    Some(ids) => ids.push(id),
                }
            }
            polls.by_ledger.entry(read.ledger).or_default().push(id);
            polls.by_id.insert(
                id,
                Waiter {
                    conn,
                    request: read.clone(),
                    previous_lac,
                    reply,
                },
            );
        }
        let storage = &self.shared.storage;
        let answer_now = match lac_from {
            LacSource::Storage => match storage.last_add_confirmed(read.ledger) {
                // No entry of this ledger has reached this bookie yet: wait for its first
                // add as for any other, and answer NoLedger only if the wait times out.
                // Answered at once, a reader tailing a new or idle empty ledger asked again
                // at once, a poll (and on Folio's client a metadata read) per turn.
                Err(StorageError::NoLedger(_)) if timeout_ms.is_some() => None,
                Err(e) => Some(Response::error_for(&Request::Read(read), read_status(&e))),
                Ok(lac) if timeout_ms.is_none() || lac > previous_lac => {
                    Some(self.long_poll_response(&read, previous_lac, lac))
                }
                Ok(_) => None,
            },
            LacSource::Memory => match storage.known_lac(read.ledger) {
                Some(lac) if timeout_ms.is_none() || lac > previous_lac => {
                    let nowait = |e| storage.read_entry_nowait(read.ledger, e).map(Ok);
                    match self.long_poll_answer(&read, previous_lac, lac, nowait) {
                        Some(answer) => Some(answer),
                        None => return self.answer_off_thread(id),
                    }
                }
                Some(_) => None,
                // Gone from memory since the caller looked (evicted, deleted, halted).
                None => return self.answer_off_thread(id),
            },
        };
        if let Some(answer) = answer_now {
            // Unless a wake-up answered it meanwhile.
            if let Some(waiter) = self.shared.long_polls.lock().remove(id) {
                (waiter.reply)(answer);
            }
            return None;
        }
        drop(slot);
        // Without a timeout there is always an answer now, so this is Some.
        timeout_ms.map(|t| LongPollTimer {
            id,
            timeout: Duration::from_millis(t),
        })
    }

    /// A registered long poll whose answer needs the disk: a read thread answers it with the
    /// LAC then, unless a wake-up answered it first.
    fn answer_off_thread(&self, id: u64) -> Option<LongPollTimer> {
        let this = self.clone();
        self.offloaded(move || {
            let waiter = this.shared.long_polls.lock().remove(id);
            if let Some(waiter) = waiter {
                this.answer_waiter(waiter);
            }
        });
        None
    }

    /// FENCE_LEDGER: the fence is made durable first, then the entry is read (BookKeeper answers
    /// a failed read at once; we never answer before the fence is durable).
    fn fence_then_read(&self, read: ReadRequest, reply: Reply) {
        let request = Request::Read(read.clone());
        self.fence_then(
            request,
            read.ledger,
            read.master_key.clone(),
            reply,
            move |this| this.read_now(&read, None),
        );
    }

    /// Fences `ledger` durably, then answers with `then` (EUA without a master key or with the
    /// wrong one, EIO if the fence could not be made durable).
    fn fence_then(
        &self,
        request: Request,
        ledger: LedgerId,
        master_key: Option<Bytes>,
        reply: Reply,
        then: impl FnOnce(&Self) -> Response + Send + 'static,
    ) {
        let Some(master_key) = master_key.filter(|k| !k.is_empty()) else {
            return reply(Response::error_for(&request, Status::Unauthorized));
        };
        let this = self.clone();
        self.shared.storage.fence(
            ledger,
            master_key,
            Box::new(move |result| match result {
                Ok(()) => {
                    let p = this.clone();
                    this.offloaded(move || reply(then(&p)))
                }
                Err(e) => {
                    let status = match e {
                        StorageError::Unauthorized(_) => Status::Unauthorized,
                        _ => Status::Io,
                    };
                    reply(Response::error_for(&request, status))
                }
            }),
        );
    }

    /// v2 batch read: consecutive entries until a count or size limit or the first missing
    /// entry; an error only if the first entry cannot be read.
    fn batch_read(
        &self,
        ledger: LedgerId,
        start: EntryId,
        max_count: i32,
        max_size: i64,
    ) -> Response {
        // BookKeeper's estimate: 24 + 8 + 4 fixed bytes, then 4 + len per entry.
        const FIXED: usize = 24 + 8 + 4;
        let cap = self.shared.config.max_batch_read_size;
        let max_size = if max_size <= 0 {
            cap
        } else {
            (max_size as u64).min(cap as u64) as usize
        };
        let max_count = if max_count <= 0 {
            usize::MAX
        } else {
            max_count as usize
        };
        let mut entries = Vec::new();
        let mut size = FIXED;
        let mut entry = start;
        while entries.len() < max_count {
            match self.shared.storage.read_entry(ledger, entry) {
                Ok(body) => {
                    if !entries.is_empty() && size + 4 + body.len() > max_size {
                        break;
                    }
                    size += 4 + body.len();
                    entries.push(body);
                }
                Err(e) => {
                    if entries.is_empty() {
                        return Response::BatchRead {
                            status: read_status(&e),
                            ledger,
                            start_entry: start,
                            entries,
                        };
                    }
                    break;
                }
            }
            entry += 1;
        }
        Response::BatchRead {
            status: Status::Ok,
            ledger,
            start_entry: start,
            entries,
        }
    }

    /// A plain read, answering with the bookie's known LAC as `maxLAC`.
    fn read_now(&self, read: &ReadRequest, known_lac: Option<EntryId>) -> Response {
        let storage = &self.shared.storage;
        read_answer(read, storage.read_entry(read.ledger, read.entry), || {
            known_lac.or_else(|| storage.last_add_confirmed(read.ledger).ok())
        })
    }

    /// The answer to a long poll once the LAC passed `previous_lac` or the wait timed out.
    fn long_poll_response(
        &self,
        read: &ReadRequest,
        previous_lac: EntryId,
        lac: EntryId,
    ) -> Response {
        self.long_poll_answer(read, previous_lac, lac, |e| {
            Some(self.shared.storage.read_entry(read.ledger, e))
        })
        .expect("a read that may wait always answers")
    }

    /// The answer to a long poll at `lac`, reading its entry with `get`; `None` if `get`
    /// would have to wait for it.
    fn long_poll_answer(
        &self,
        read: &ReadRequest,
        previous_lac: EntryId,
        lac: EntryId,
        get: impl FnOnce(EntryId) -> Option<Result<Bytes, StorageError>>,
    ) -> Option<Response> {
        if !read.piggyback {
            return Some(read_answer(read, get(read.entry)?, || Some(lac)));
        }
        if lac <= previous_lac {
            // Timed out: EOK with the current LAC and no entry.
            return Some(Response::Read {
                status: Status::Ok,
                ledger: read.ledger,
                entry: read.entry,
                body: None,
                max_lac: Some(lac),
            });
        }
        let next = previous_lac + 1;
        Some(match get(next)? {
            Ok(body) => Response::Read {
                status: Status::Ok,
                ledger: read.ledger,
                entry: next,
                body: Some(body),
                max_lac: Some(lac),
            },
            // The LAC passed but this bookie does not hold the entry (another bookie of the write
            // quorum does): the new LAC alone, as BookKeeper answers.
            Err(StorageError::NoEntry { .. }) | Err(StorageError::NoLedger(_)) => Response::Read {
                status: Status::Ok,
                ledger: read.ledger,
                entry: next,
                body: None,
                max_lac: Some(lac),
            },
            Err(e) => Response::error_for(&Request::Read(read.clone()), read_status(&e)),
        })
    }

    /// Wakes the long polls of `ledger` whose previous LAC the ledger's LAC has now passed.
    fn notify_lac(&self, ledger: LedgerId) {
        if !self.has_long_polls(ledger) {
            return;
        }
        // Read outside the lock; a stale value only delays a wake-up to the next write.
        let Ok(lac) = self.shared.storage.last_add_confirmed(ledger) else {
            return;
        };
        for waiter in self.take_woken(ledger, lac) {
            let response = self.long_poll_response(&waiter.request, waiter.previous_lac, lac);
            (waiter.reply)(response);
        }
    }

    /// Takes out the long polls of `ledger` whose previous LAC `lac` has passed.
    fn take_woken(&self, ledger: LedgerId, lac: EntryId) -> Vec<Waiter> {
        let mut polls = self.shared.long_polls.lock();
        let Some(mut ids) = polls.by_ledger.get(&ledger).cloned() else {
            return Vec::new();
        };
        ids.retain(|id| polls.by_id.get(id).is_some_and(|w| w.previous_lac < lac));
        ids.into_iter().filter_map(|id| polls.remove(id)).collect()
    }

    /// The shell's timer for a long poll fired: answer with the current LAC if still waiting.
    pub fn expire_long_poll(&self, id: u64) {
        let Some(waiter) = self.shared.long_polls.lock().remove(id) else {
            return; // already woken by the LAC
        };
        self.answer_waiter(waiter);
    }

    /// Answers every waiting long poll with the current LAC (shutdown).
    pub fn expire_all_long_polls(&self) {
        let waiters: Vec<Waiter> = {
            let mut polls = self.shared.long_polls.lock();
            polls.by_ledger.clear();
            for ids in polls.by_conn.values_mut() {
                ids.clear();
            }
            polls.by_id.drain().map(|(_, w)| w).collect()
        };
        for waiter in waiters {
            self.answer_waiter(waiter);
        }
    }

    fn answer_waiter(&self, waiter: Waiter) {
        let response = match self
            .shared
            .storage
            .last_add_confirmed(waiter.request.ledger)
        {
            Ok(lac) => self.long_poll_response(&waiter.request, waiter.previous_lac, lac),
            Err(e) => Response::error_for(&Request::Read(waiter.request), read_status(&e)),
        };
        (waiter.reply)(response)
    }

    fn read_lac(&self, ledger: LedgerId) -> Response {
        let storage = &self.shared.storage;
        let error = |status| Response::ReadLac {
            status,
            ledger,
            lac_body: None,
            last_entry_body: None,
        };
        let lac_body = match storage.explicit_lac(ledger) {
            Ok(b) => b,
            Err(e) => return error(read_status(&e)),
        };
        let last_entry_body = match storage.read_entry(ledger, folio_types::LAST_ENTRY_ID) {
            Ok(b) => Some(b),
            Err(StorageError::NoEntry { .. }) => None,
            Err(e) => return error(read_status(&e)),
        };
        if lac_body.is_none() && last_entry_body.is_none() {
            return error(Status::NoEntry);
        }
        Response::ReadLac {
            status: Status::Ok,
            ledger,
            lac_body,
            last_entry_body,
        }
    }

    fn write_lac(
        &self,
        ledger: LedgerId,
        lac: EntryId,
        master_key: Bytes,
        body: Bytes,
        reply: Reply,
    ) {
        if master_key.is_empty() {
            return reply(Response::WriteLac {
                status: Status::Unauthorized,
                ledger,
            });
        }
        let this = self.clone();
        self.shared.storage.write_lac(
            ledger,
            lac,
            master_key,
            body,
            Box::new(move |result| {
                let status = match &result {
                    Ok(()) => Status::Ok,
                    Err(StorageError::Unauthorized(_)) => Status::Unauthorized,
                    Err(_) => Status::Io,
                };
                reply(Response::WriteLac { status, ledger });
                if result.is_ok() {
                    this.lac_may_have_moved(ledger);
                }
            }),
        );
    }

    fn bookie_info(&self, requested: i64) -> Response {
        match self.shared.storage.space() {
            Ok(space) => Response::BookieInfo {
                status: Status::Ok,
                total_disk_capacity: (requested & BOOKIE_INFO_TOTAL_DISK_CAPACITY != 0)
                    .then_some(space.total as i64),
                free_disk_space: (requested & BOOKIE_INFO_FREE_DISK_SPACE != 0)
                    .then_some(space.free as i64),
            },
            Err(_) => Response::BookieInfo {
                status: Status::Io,
                total_disk_capacity: None,
                free_disk_space: None,
            },
        }
    }
}
