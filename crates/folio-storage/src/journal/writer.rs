//! The group-commit writer: one thread per journal directory.
//!
//! The thread takes whatever requests are queued (up to the group bounds) and, by
//! default (`flush_when_queue_empty`), writes them at once: what arrives meanwhile is the
//! next group, so groups grow with the load without any add waiting for a timer. With
//! BookKeeper's timer instead, it waits (up to `max_group_wait` counted from the oldest
//! request) for more unless the group is already big enough. It encodes them into one reused buffer, writes it with one positional write, and has it
//! made durable (`force.rs`: fdatasync inline, or on the force-write thread while the
//! next groups are written); only when an fdatasync covering the group returns Ok do
//! its completion callbacks run, in queue order. Requests arriving meanwhile form the
//! next group.
//! A failed write or fdatasync poisons the directory: the group's callbacks get the
//! error and every later request fails at once.
//!
//! With direct I/O (the default when fsync is on) the file is written in whole aligned
//! blocks: a group's write starts at the block holding the previous group's end, with
//! that block's bytes (kept in `tail`) in front, and ends padded with zeroes to the next
//! block boundary. The rewritten prefix is byte for byte what is already on disk, so a
//! torn write of it cannot change an acknowledged record; the padding is what the
//! preallocated headroom holds anyway, and replay reads zeroes as the end.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use folio_env::{AlignedBuf, Clock, DIRECT_IO_ALIGN, File, FileSystem, OpenOptions};
use parking_lot::{Condvar, Mutex};

use super::JournalStats;
use super::force::{ForceQueue, SyncJob, Syncer};
use super::format::{self, HEADER_LEN, Position, RECORD_HEADER_LEN, RecordKind};
use crate::config::JournalConfig;
use crate::error::StorageError;
use crate::storage::WriteCallback;

/// The most zeroes one write call puts ahead of the write offset (the size of the
/// reused zero buffer), and the largest top-up piece.
const PREALLOC_CHUNK: u64 = 1 << 20;

/// Most top-up pieces written after one group: enough to keep up with groups of up to
/// a few MiB, few enough that no group waits long behind the zeroes.
const MAX_PIECES_PER_GROUP: u64 = 4;

/// A group slower than this (queued or on disk) is logged at debug level.
pub(crate) const SLOW_GROUP: std::time::Duration = std::time::Duration::from_millis(10);

/// What a request asks of the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// Append a record.
    Record(RecordKind),
    /// Append nothing; complete once everything queued before is durable (force ledger).
    Force,
}

/// One queued write.
pub struct Request {
    pub kind: RequestKind,
    pub ledger: i64,
    pub entry: i64,
    pub payload: Bytes,
    /// The payload's entry log record checksum, when the caller had it.
    pub payload_crc: Option<u32>,
    pub done: Option<WriteCallback>,
    pub(crate) enqueued: Instant,
}

impl Request {
    fn encoded_len(&self) -> usize {
        match self.kind {
            RequestKind::Record(_) => RECORD_HEADER_LEN + self.payload.len(),
            RequestKind::Force => 0,
        }
    }
}

/// Why a directory stopped taking writes, kept so each later caller gets an error
/// of the right kind naming the right path.
#[derive(Debug, Clone)]
pub(crate) struct Poison {
    op: &'static str,
    path: PathBuf,
    kind: io::ErrorKind,
    message: String,
    /// A full disk refused a write, and nothing that was fdatasync'd or acknowledged can
    /// have been lost by it: writes may resume once space is freed
    /// ([`super::Journal::resume_after_space_freed`]). Never set for a failed fdatasync
    /// (invariant 9: the kernel may have dropped pages that were never written).
    pub(crate) no_space: bool,
}

impl Poison {
    /// A poison for good: writes never resume (a failed fdatasync, any other failure).
    pub(crate) fn new(op: &'static str, path: PathBuf, e: &io::Error) -> Self {
        Poison {
            op,
            path,
            kind: e.kind(),
            message: e.to_string(),
            no_space: false,
        }
    }

    /// A write refused by a full disk; see `no_space`. The caller has made sure the
    /// refused write left nothing behind that replay could take for records.
    pub(crate) fn no_space(op: &'static str, path: PathBuf, e: &io::Error) -> Self {
        Poison {
            no_space: true,
            ..Poison::new(op, path, e)
        }
    }

    /// Records `p` in `slot`: the first poison is kept, except that a poison for good
    /// replaces one that only waits for free space.
    pub(crate) fn record(slot: &mut Option<Poison>, p: &Poison) {
        match slot {
            Some(old) if !old.no_space || p.no_space => {}
            _ => *slot = Some(p.clone()),
        }
    }

    /// The error of the group whose write or fdatasync failed.
    pub(crate) fn group_error(&self) -> StorageError {
        StorageError::io(
            self.op,
            self.path.clone(),
            io::Error::new(self.kind, self.message.clone()),
        )
    }

    /// The error of every write after it.
    pub(crate) fn later_error(&self) -> StorageError {
        StorageError::ReadOnly {
            reason: self.reason(),
        }
    }

    pub(crate) fn reason(&self) -> String {
        if self.path.as_os_str().is_empty() {
            return format!("{} failed: {}", self.op, self.message);
        }
        let failed = format!(
            "journal {} of {} failed: {}",
            self.op,
            self.path.display(),
            self.message
        );
        // A full disk is named as one (the directory first), whichever write hit it:
        // with groups written as soon as the queue is empty, it is often the zero fill
        // after a group, and the first add to fail is then a later one.
        match self.path.parent().filter(|_| self.no_space) {
            Some(dir) => format!("no space left in {}: {failed}", dir.display()),
            None => failed,
        }
    }
}

/// A directory's counters since the journal opened (see [`JournalStats`]).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    group_commits: AtomicU64,
    pub(crate) group_fdatasyncs: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    prealloc_fdatasyncs: AtomicU64,
    prealloc_bytes: AtomicU64,
    files_created: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds this directory's counts to `into`.
    pub(crate) fn sum_into(&self, into: &mut JournalStats) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        into.group_commits += get(&self.group_commits);
        into.group_fdatasyncs += get(&self.group_fdatasyncs);
        into.records += get(&self.records);
        into.bytes += get(&self.bytes);
        into.prealloc_fdatasyncs += get(&self.prealloc_fdatasyncs);
        into.prealloc_bytes += get(&self.prealloc_bytes);
        into.files_created += get(&self.files_created);
    }
}

#[derive(Default)]
struct Queue {
    reqs: VecDeque<Request>,
    /// Encoded bytes of `reqs`.
    bytes: u64,
    shutdown: bool,
    /// The writer takes nothing while set ([`DirShared::hold`]): what is queued meanwhile
    /// forms one group once released.
    held: bool,
    /// The writer thread is waiting for work (or has exited): nothing of it touches a file
    /// until it is woken ([`DirShared::wait_idle`]).
    idle: bool,
    /// Set while the writer holds a group open waiting for the group-commit timer
    /// (`flush_when_queue_empty` off): it needs waking only once the queue alone would fill
    /// the group, at these queued bytes or records. A wake-up per add there cost a futex
    /// call and a context switch for each add, only to go back to sleep.
    lingering: Option<Fill>,
}

/// Queued bytes or records at which a lingering writer's group is full.
#[derive(Clone, Copy)]
struct Fill {
    bytes: u64,
    records: usize,
}

/// The journal's poison, shared by all its directories: set when a write or fdatasync
/// failed, or a full disk refused a write. Every add reads it (the submit, the bookie's
/// read-only check), so the common case, no poison, is one atomic load rather than a
/// lock the journal's threads share with every connection.
#[derive(Default)]
pub(crate) struct PoisonSlot {
    /// Whether `slot` holds a poison; written only under `slot`'s lock.
    poisoned: AtomicBool,
    slot: Mutex<Option<Poison>>,
}

impl PoisonSlot {
    /// The poison, if any.
    pub(crate) fn get(&self) -> Option<Poison> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        self.slot.lock().clone()
    }

    /// Changes the poison under its lock.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut Option<Poison>) -> R) -> R {
        let mut slot = self.slot.lock();
        let r = f(&mut slot);
        self.poisoned.store(slot.is_some(), Ordering::Release);
        r
    }
}

/// State shared by a directory's writer thread and the engine.
pub(crate) struct DirShared {
    /// `<journal dir>/current`
    pub dir: PathBuf,
    queue: Mutex<Queue>,
    cv: Condvar,
    /// Signalled when the writer becomes idle.
    idle_cv: Condvar,
    /// Shared by all directories: one failed write or fdatasync stops them all.
    pub(crate) poison: Arc<PoisonSlot>,
    /// End of the last group made durable: every record before it was applied to the
    /// ledger store before it was queued, so a checkpoint may take it as its mark.
    pub(crate) synced: Mutex<Position>,
    /// The mark last persisted (marks only move forward).
    pub(crate) persisted_mark: Mutex<Position>,
    pub(crate) counters: Counters,
    /// Written groups waiting for the force-write thread's fdatasync (BookKeeper's
    /// `JOURNAL_FORCE_WRITE_QUEUE_SIZE`); always 0 without that thread.
    pub(crate) force_write_queued: AtomicU64,
    /// Emptied group lists the force-write thread handed back, for the writer's next
    /// groups (see [`DirShared::give_back_batch`]).
    pub(super) spare_batches: Mutex<Vec<Vec<Request>>>,
}

/// How many emptied group lists are kept for reuse: enough for the groups in flight
/// between the writer and the force-write thread.
pub(super) const SPARE_BATCHES: usize = 4;

impl DirShared {
    pub(crate) fn new(dir: PathBuf, mark: Position, poison: Arc<PoisonSlot>) -> Self {
        DirShared {
            dir,
            queue: Mutex::new(Queue::default()),
            cv: Condvar::new(),
            idle_cv: Condvar::new(),
            poison,
            synced: Mutex::new(mark),
            persisted_mark: Mutex::new(mark),
            counters: Counters::default(),
            force_write_queued: AtomicU64::new(0),
            spare_batches: Mutex::new(Vec::new()),
        }
    }

    /// Keeps a group's emptied list for a later group. A list built on the writer thread
    /// and dropped on the force-write thread was a fresh allocation per group, large
    /// with thousands of adds in flight, and its pages were faulted in again each time
    /// (docs/performance.md).
    pub(crate) fn give_back_batch(&self, mut batch: Vec<Request>) {
        batch.clear();
        let mut spare = self.spare_batches.lock();
        if spare.len() < SPARE_BATCHES {
            spare.push(batch);
        }
    }

    /// A list for the next group, with room for at least `records`.
    fn spare_batch(&self, records: usize) -> Vec<Request> {
        let mut batch = self.spare_batches.lock().pop().unwrap_or_default();
        batch.reserve(records);
        batch
    }

    pub(crate) fn synced(&self) -> Position {
        *self.synced.lock()
    }

    /// Queues a request, or fails it at once if the directory is poisoned or shut down.
    pub(crate) fn submit(&self, req: Request) {
        if let Some(p) = self.poison.get() {
            fail(req, p.later_error());
            return;
        }
        let mut q = self.queue.lock();
        if q.shutdown {
            drop(q);
            fail(req, StorageError::ShutDown);
            return;
        }
        q.bytes += req.encoded_len() as u64;
        q.reqs.push_back(req);
        let wake = q
            .lingering
            .is_none_or(|fill| q.bytes >= fill.bytes || q.reqs.len() >= fill.records);
        drop(q);
        if wake {
            self.cv.notify_one();
        }
    }

    /// Stops all writes (every directory shares the poison): records why, and fails the
    /// requests queued here (later submits fail in `submit`; what a thread holds, it fails
    /// when it next looks).
    pub(crate) fn poison_all(&self, p: &Poison) {
        tracing::error!("journal poisoned: {}", p.reason());
        self.poison.update(|slot| Poison::record(slot, p));
        let rest: Vec<Request> = {
            let mut q = self.queue.lock();
            q.bytes = 0;
            q.reqs.drain(..).collect()
        };
        for r in rest {
            fail(r, p.later_error());
        }
    }

    pub(crate) fn shutdown(&self) {
        self.queue.lock().shutdown = true;
        self.cv.notify_all();
    }

    /// Holds the writer (it takes no group) or releases it. For the simulator, which
    /// queues several requests and needs them in one group whatever the OS scheduling.
    pub(crate) fn hold(&self, held: bool) {
        self.queue.lock().held = held;
        self.cv.notify_all();
    }

    /// Waits (up to `timeout`) until the writer thread waits for work with nothing it
    /// could take: every request queued before the call written and handed on. For the
    /// simulator, whose next step must not race the thread's disk operations.
    pub(crate) fn wait_idle(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut q = self.queue.lock();
        while !(q.idle && (q.reqs.is_empty() || q.held || q.shutdown)) {
            if self.idle_cv.wait_until(&mut q, deadline).timed_out() {
                return false;
            }
        }
        true
    }
}

pub(crate) fn fail(req: Request, e: StorageError) {
    if let Some(done) = req.done {
        done(Err(e));
    }
}

/// The writer thread's own state: the open file and reused buffers.
pub(crate) struct Writer {
    shared: Arc<DirShared>,
    fs: Arc<dyn FileSystem>,
    clock: Arc<dyn Clock>,
    cfg: JournalConfig,
    file: Arc<dyn File>,
    path: PathBuf,
    file_id: u64,
    offset: u64,
    prealloc_end: u64,
    /// Whether `file` is open with direct I/O; then every write is `align`-aligned.
    direct: bool,
    /// Direct I/O was asked for but refused once (the file system lacks it): stop asking.
    direct_refused: bool,
    /// `DIRECT_IO_ALIGN` with direct I/O, else 1 (writes go where they fall).
    align: u64,
    /// With direct I/O: the bytes from the block boundary at or before `offset` up to
    /// `offset`, which the next group's write puts in front of its records.
    tail: Vec<u8>,
    buf: AlignedBuf,
    zeros: AlignedBuf,
    batch: Vec<Request>,
    /// Where written groups go to be made durable.
    sync: Sync,
}

/// How the writer gets its groups made durable.
enum Sync {
    /// By the force-write thread (see `force.rs`), once `run` has started it.
    Thread(Arc<ForceQueue>),
    /// Inline, after each write, by the writer thread itself (`force_write_thread` off,
    /// and until `run` starts the thread).
    Inline(Syncer),
}

impl Writer {
    /// Creates journal file `file_id` (header written, synced, directory entry synced),
    /// ready to append.
    pub(crate) fn create(
        shared: Arc<DirShared>,
        fs: Arc<dyn FileSystem>,
        clock: Arc<dyn Clock>,
        cfg: JournalConfig,
        file_id: u64,
    ) -> Result<Writer, StorageError> {
        let zeros = AlignedBuf::zeroed(
            (cfg.prealloc_size.min(PREALLOC_CHUNK) as usize).next_multiple_of(DIRECT_IO_ALIGN),
        );
        let syncer = Syncer::new(
            Arc::clone(&shared),
            Arc::clone(&clock),
            cfg.sync_data,
            cfg.remove_pages_from_cache,
        );
        let (file, path) = new_file(&*fs, &shared.dir, file_id)?;
        Counters::add(&shared.counters.files_created, 1);
        *shared.synced.lock() = Position {
            file_id,
            offset: HEADER_LEN,
        };
        let mut w = Writer {
            shared,
            fs,
            clock,
            cfg,
            file,
            path,
            file_id,
            offset: HEADER_LEN,
            prealloc_end: HEADER_LEN,
            direct: false,
            direct_refused: false,
            align: 1,
            tail: Vec::new(),
            buf: AlignedBuf::with_capacity(1 << 16),
            zeros,
            batch: Vec::new(),
            sync: Sync::Inline(syncer),
        };
        w.reopen_direct();
        w.fill_headroom().map_err(|p| p.group_error())?;
        Ok(w)
    }

    /// Hands written groups to `queue` instead of making them durable: the caller steps
    /// them (`force_write_by_caller`), with the [`Syncer`] this returns.
    pub(crate) fn sync_through(&mut self, queue: Arc<ForceQueue>) -> Syncer {
        match std::mem::replace(&mut self.sync, Sync::Thread(queue)) {
            Sync::Inline(syncer) => syncer,
            Sync::Thread(_) => unreachable!("the writer starts inline"),
        }
    }

    /// The thread's loop; returns at shutdown once the queue is drained and every
    /// written group completed. Starts the force-write thread first, if configured.
    pub(crate) fn run(mut self) {
        // Without a force-write thread, or with its queue handed to the caller
        // (`sync_through`).
        if !self.cfg.force_write_thread || matches!(self.sync, Sync::Thread(_)) {
            return self.write_loop();
        }
        let queue = Arc::new(ForceQueue::default());
        let Sync::Inline(syncer) =
            std::mem::replace(&mut self.sync, Sync::Thread(Arc::clone(&queue)))
        else {
            unreachable!("the writer starts inline");
        };
        let name = format!(
            "{}-sync",
            std::thread::current().name().unwrap_or("journal")
        );
        std::thread::scope(|s| {
            let q = Arc::clone(&queue);
            let started = std::thread::Builder::new()
                .name(name)
                .spawn_scoped(s, folio_env::metric_label::carry(move || q.run(syncer)));
            if let Err(e) = started {
                // Without the thread the journal still works, syncing inline.
                tracing::warn!("cannot start the journal's force-write thread: {e}");
                self.sync = Sync::Inline(Syncer::new(
                    Arc::clone(&self.shared),
                    Arc::clone(&self.clock),
                    self.cfg.sync_data,
                    self.cfg.remove_pages_from_cache,
                ));
            }
            self.write_loop();
            queue.close();
        });
    }

    fn write_loop(&mut self) {
        while self.take_batch() {
            self.commit_batch();
        }
    }

    /// Fills `self.batch` following the group-commit policy; false at shutdown with
    /// nothing left to do.
    fn take_batch(&mut self) -> bool {
        let shared = Arc::clone(&self.shared);
        let mut q = shared.queue.lock();
        while q.reqs.is_empty() || (q.held && !q.shutdown) {
            q.idle = true;
            shared.idle_cv.notify_all();
            if q.shutdown {
                return false;
            }
            shared.cv.wait(&mut q);
        }
        q.idle = false;
        let first_enqueued = q.reqs.front().expect("non-empty").enqueued;
        let deadline = first_enqueued + self.cfg.max_group_wait;
        let mut bytes = 0u64;
        let cfg = &self.cfg;
        let full = |bytes: u64, n: usize| {
            bytes >= cfg.max_group_bytes
                || (cfg.max_group_entries > 0 && n as u64 >= cfg.max_group_entries)
        };
        loop {
            // Take what is queued, up to the group bounds; the rest forms the next group.
            while !full(bytes, self.batch.len()) {
                let Some(r) = q.reqs.pop_front() else { break };
                q.bytes -= r.encoded_len() as u64;
                bytes += r.encoded_len() as u64;
                self.batch.push(r);
            }
            let now = self.clock.now();
            if full(bytes, self.batch.len())
                || q.shutdown
                || cfg.flush_when_queue_empty
                || now >= deadline
            {
                // BookKeeper's gauge: records waiting for the journal thread.
                metrics::gauge!("bookie_journal_JOURNAL_QUEUE_SIZE").set(q.reqs.len() as f64);
                return true;
            }
            // Adds arriving meanwhile wake the writer only if they fill the group: at
            // the deadline it takes them.
            q.lingering = Some(Fill {
                bytes: cfg.max_group_bytes.saturating_sub(bytes),
                records: match cfg.max_group_entries {
                    0 => usize::MAX,
                    n => (n as usize).saturating_sub(self.batch.len()),
                },
            });
            shared.cv.wait_for(&mut q, deadline - now);
            q.lingering = None;
        }
    }

    fn commit_batch(&mut self) {
        let poison = self.shared.poison.get();
        if let Some(p) = poison {
            for r in self.batch.drain(..) {
                fail(r, p.later_error());
            }
            return;
        }
        let started = self.clock.now();
        let oldest = self.batch.first().map(|r| r.enqueued);
        let records = self.batch.len();
        match self.write_group() {
            Ok(wrote) => {
                if self.cfg.unsafe_ack_before_sync {
                    self.complete_ok();
                }
                let written = self.clock.now();
                // With direct I/O a zero fill is a synchronous device write on this
                // thread; while requests are waiting, serve them first (the groups then
                // extend the file, and the headroom is refilled once the queue is empty:
                // 64 KiB bursts ran ~20% faster, docs/performance.md). Decided before
                // the callbacks run, so that a caller who waits for each add (the
                // simulator) sees one order of disk operations. Buffered zero fills only
                // copy into the page cache and are not held back.
                let backlog = self.direct && self.shared.queue.lock().bytes > 0;
                let job = SyncJob {
                    file: Arc::clone(&self.file),
                    path: self.path.clone(),
                    direct: self.direct,
                    end: Position {
                        file_id: self.file_id,
                        offset: self.offset,
                    },
                    wrote,
                    // The next group starts with room for one like this one, rather
                    // than growing from empty (fresh memory at every doubling), in a
                    // list an earlier group used if one is back.
                    batch: std::mem::replace(&mut self.batch, self.shared.spare_batch(records)),
                };
                match &mut self.sync {
                    Sync::Thread(q) => {
                        self.shared
                            .force_write_queued
                            .fetch_add(1, Ordering::Relaxed);
                        q.push(job)
                    }
                    Sync::Inline(syncer) => syncer.complete(vec![job]),
                }
                // After handing the group on (inline: after its callbacks): the zeroes
                // are not needed for its durability.
                if !backlog
                    && self.shared.poison.get().is_none()
                    && let Err(p) = self.top_up(self.pieces_per_group() * PREALLOC_CHUNK)
                {
                    self.poison(p);
                }
                let done = self.clock.now();
                // For finding stalls (FOLIO_LOG=folio_storage::journal=debug): a group
                // whose own disk work took long, or whose oldest record waited long.
                if done - started >= SLOW_GROUP
                    || oldest.is_some_and(|o| started.saturating_duration_since(o) >= SLOW_GROUP)
                {
                    tracing::debug!(
                        records,
                        queued_ms = oldest
                            .map_or(0.0, |o| started.saturating_duration_since(o).as_secs_f64()
                                * 1e3),
                        write_ms = (written - started).as_secs_f64() * 1e3,
                        after_ms = (done - written).as_secs_f64() * 1e3,
                        "slow journal group"
                    );
                }
            }
            Err(p) => {
                // Poisoned before any callback runs, so a caller that sees the error
                // also sees the storage read-only.
                self.poison(p.clone());
                for r in self.batch.drain(..) {
                    fail(r, p.group_error());
                }
            }
        }
    }

    /// How many zero-fill pieces may follow one group: with direct I/O each is a
    /// synchronous device write that the next group waits for, so as few as keep up with
    /// the largest group (`max_group_bytes`: one piece for groups up to a piece).
    fn pieces_per_group(&self) -> u64 {
        if self.direct {
            self.cfg
                .max_group_bytes
                .div_ceil(PREALLOC_CHUNK)
                .clamp(1, MAX_PIECES_PER_GROUP)
        } else {
            MAX_PIECES_PER_GROUP
        }
    }

    fn poison(&mut self, p: Poison) {
        self.shared.poison_all(&p);
    }

    fn complete_ok(&mut self) {
        for r in self.batch.drain(..) {
            if let Some(done) = r.done {
                done(Ok(()));
            }
        }
    }

    /// Writes the batch's records (rolling to a new file first if they would not fit);
    /// returns whether anything was written.
    fn write_group(&mut self) -> Result<bool, Poison> {
        let len: usize = self.batch.iter().map(Request::encoded_len).sum();
        if len > 0 {
            if self.offset + len as u64 > self.cfg.max_file_size && self.offset > HEADER_LEN {
                self.roll()?;
            }
            // With direct I/O the write starts at the block boundary before `offset`
            // (the tail's bytes again) and ends padded to the next one; buffered, the
            // tail is empty and the padding none.
            let block_start = self.offset - self.tail.len() as u64;
            self.buf.clear();
            self.buf
                .reserve(self.tail.len() + len + self.align as usize);
            self.buf.vec().extend_from_slice(&self.tail);
            for r in &self.batch {
                if let RequestKind::Record(kind) = r.kind {
                    format::encode_record(
                        self.buf.vec(),
                        self.file_id,
                        kind,
                        r.ledger,
                        r.entry,
                        &r.payload,
                        r.payload_crc,
                    );
                }
            }
            self.buf.pad_to(self.align as usize);
            debug_assert!(self.buf.is_aligned(), "reserve keeps the buffer aligned");
            if let Err(e) = self.file.write_all_at(self.buf.as_slice(), block_start) {
                return Err(self.failed_write(&e));
            }
            self.offset += len as u64;
            if self.direct {
                let new_block = self.offset & !(self.align - 1);
                let from = (new_block - block_start) as usize;
                let to = (self.offset - block_start) as usize;
                self.tail.clear();
                self.tail.extend_from_slice(&self.buf.as_slice()[from..to]);
            }
            let c = &self.shared.counters;
            Counters::add(&c.group_commits, 1);
            Counters::add(&c.bytes, len as u64);
            Counters::add(
                &c.records,
                self.batch
                    .iter()
                    .filter(|r| matches!(r.kind, RequestKind::Record(_)))
                    .count() as u64,
            );
            // A group larger than the zeroed headroom extends the file itself.
            self.prealloc_end = self.prealloc_end.max(block_start + self.buf.len() as u64);
        }
        Ok(len > 0)
    }

    /// The poison for a group whose write failed. On a full disk the write may have left
    /// part of the group in the file after the last record; cut the file back to the write
    /// offset so that nothing but records (and then zeroes) is there when writes resume.
    /// If the cut fails too, the poison is for good.
    fn failed_write(&mut self, e: &io::Error) -> Poison {
        if !crate::error::is_no_space(e) {
            return Poison::new("write", self.path.clone(), e);
        }
        if let Err(cut) = self.file.set_len(self.offset) {
            tracing::error!(file = %self.path.display(), "cutting a refused write off failed: {cut}");
            return Poison::new("write", self.path.clone(), e);
        }
        // The preallocated zeroes went with the cut.
        self.prealloc_end = self.prealloc_end.min(self.offset);
        Poison::no_space("write", self.path.clone(), e)
    }

    /// Keeps about `prealloc_size` bytes of written zeroes ahead of the write offset, so
    /// that group commits overwrite allocated blocks and their fdatasync has no metadata
    /// to commit (about half the cost: spec/rust-crates.md section 5).
    ///
    /// Runs after each group's callbacks and writes little: only once the headroom has
    /// shrunk by a whole piece (`prealloc_size / 2`, at most 1 MiB), and at most
    /// `MAX_PIECES_PER_GROUP` pieces, whose write-back it starts without waiting and
    /// without an fdatasync of its own: the next group's fdatasync makes them durable
    /// (one metadata commit per piece). Zero-filling half the headroom at once with its
    /// own fdatasync stalled the next group for 10-20 ms every 8 MiB appended (measured
    /// in docs/performance.md). Zeroes are never written at or below the write offset,
    /// so everything past the last record is zeroes (or nothing) and replay reads it as
    /// a torn tail; whether they are durable does not matter for correctness.
    fn top_up(&mut self, max_bytes: u64) -> Result<(), Poison> {
        if self.cfg.prealloc_size == 0 {
            return Ok(());
        }
        // With direct I/O every zero write is block-aligned too (align is 1 otherwise).
        let a = self.align;
        let limit = self.cfg.max_file_size.max(self.offset);
        let target = (self.offset + self.cfg.prealloc_size)
            .min(limit)
            .next_multiple_of(a);
        let piece = (self.cfg.prealloc_size / 2)
            .clamp(1, PREALLOC_CHUNK)
            .next_multiple_of(a);
        let start = self.prealloc_end.next_multiple_of(a);
        let missing = target.saturating_sub(start);
        if missing == 0 || (missing < piece && target < limit) {
            return Ok(());
        }
        let end = (start + missing.min(max_bytes.max(piece))).next_multiple_of(a);
        let mut at = start;
        while at < end {
            let k = (end - at).min(self.zeros.len() as u64) as usize;
            if let Err(e) = self.file.write_all_at(&self.zeros.as_slice()[..k], at) {
                if crate::error::is_no_space(&e) {
                    // Preallocation is an optimisation: on a full disk, skip it; the
                    // next group's own write reports the full disk.
                    tracing::warn!(file = %self.path.display(), "no space to preallocate: {e}");
                    return Ok(());
                }
                return Err(Poison::new("preallocate", self.path.clone(), &e));
            }
            at += k as u64;
        }
        // (Direct I/O leaves nothing to write back.)
        if !self.direct
            && let Err(e) = self.file.start_write_back(start, end - start)
        {
            // Only a hint to the kernel; a real write error shows in the next fdatasync.
            tracing::debug!(file = %self.path.display(), "start_write_back of zeroes: {e}");
        }
        Counters::add(&self.shared.counters.prealloc_bytes, end - start);
        self.prealloc_end = end;
        Ok(())
    }

    /// Fills the whole headroom and makes it durable: for a new file, before its first
    /// group (start-up time, not an add's latency).
    fn fill_headroom(&mut self) -> Result<(), Poison> {
        self.top_up(u64::MAX)?;
        if self.cfg.prealloc_size > 0 && self.cfg.sync_data {
            self.file
                .sync_data()
                .map_err(|e| Poison::new("fdatasync preallocated", self.path.clone(), &e))?;
            Counters::add(&self.shared.counters.prealloc_fdatasyncs, 1);
        }
        Ok(())
    }

    /// Starts the next journal file, once everything in the current one is durable:
    /// replay takes damage in any file but the newest for lost acknowledged data, so no
    /// crash may leave an older file torn. Inline, the last group's fdatasync already
    /// ran; with the force-write thread it may still be queued, so sync here (once per
    /// file, `max_file_size` apart).
    fn roll(&mut self) -> Result<(), Poison> {
        if self.cfg.sync_data && matches!(self.sync, Sync::Thread(_)) {
            self.file
                .sync_data()
                .map_err(|e| Poison::new("fdatasync before roll", self.path.clone(), &e))?;
        }
        let next = self.file_id + 1;
        let (file, path) = new_file(&*self.fs, &self.shared.dir, next).map_err(|e| Poison {
            op: "create",
            path: self.shared.dir.join(format::file_name(next)),
            kind: match e {
                StorageError::NoSpace { .. } => io::ErrorKind::StorageFull,
                _ => io::ErrorKind::Other,
            },
            message: e.to_string(),
            no_space: false,
        })?;
        tracing::debug!(file = %path.display(), "journal rolled");
        Counters::add(&self.shared.counters.files_created, 1);
        self.file = file;
        self.path = path;
        self.file_id = next;
        self.offset = HEADER_LEN;
        self.prealloc_end = HEADER_LEN;
        self.reopen_direct();
        Ok(())
    }

    /// Switches the new file (header written and durable through a buffered handle) to a
    /// direct-I/O handle when the configuration asks for one and the file system allows
    /// it; otherwise stays buffered, warning once. Sets `align` and `tail` to match.
    fn reopen_direct(&mut self) {
        self.direct = false;
        self.align = 1;
        self.tail.clear();
        if !self.cfg.direct_io || !self.cfg.sync_data || self.direct_refused {
            return;
        }
        let opts = OpenOptions {
            write: true,
            ..OpenOptions::default()
        }
        .direct(true);
        match self.fs.open(&self.path, opts) {
            Ok(f) => {
                self.file = f;
                self.direct = true;
                self.align = DIRECT_IO_ALIGN as u64;
                self.tail
                    .extend_from_slice(&format::encode_header(self.file_id));
            }
            Err(e) => {
                self.direct_refused = true;
                tracing::warn!(
                    file = %self.path.display(),
                    "journal direct I/O unavailable, writing through the page cache: {e}"
                );
            }
        }
    }
}

/// Creates a journal file with its header durable and its directory entry durable,
/// so a record acknowledged in it can never vanish with the file.
fn new_file(
    fs: &dyn FileSystem,
    dir: &std::path::Path,
    file_id: u64,
) -> Result<(Arc<dyn File>, PathBuf), StorageError> {
    let path = dir.join(format::file_name(file_id));
    let file = fs
        .open(&path, OpenOptions::create_new())
        .map_err(|e| StorageError::io("create journal file", path.clone(), e))?;
    file.write_all_at(&format::encode_header(file_id), 0)
        .map_err(|e| StorageError::io("write journal header", path.clone(), e))?;
    file.sync_data()
        .map_err(|e| StorageError::io("fdatasync journal header", path.clone(), e))?;
    fs.sync_dir(dir)
        .map_err(|e| StorageError::io_dir("fsync journal directory", dir.to_path_buf(), e))?;
    Ok((file, path))
}
