//! Settings of the journal and the engine, with BookKeeper's defaults.
//!
//! Each field names the BookKeeper `ServerConfiguration` key it mirrors, so an operator's
//! `bk_server.conf` knowledge carries over.

use std::path::PathBuf;
use std::time::Duration;

/// The journal: where it lives and how group commit batches.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// `journalDirectories`. Ledgers are hashed onto the directories; each has its own
    /// writer thread, its own files (`<dir>/current/*.txn`) and its own mark.
    pub dirs: Vec<PathBuf>,
    /// `journalMaxGroupWaitMSec` (2 ms): with `flush_when_queue_empty` off, the longest an
    /// add waits for others to share its fdatasync.
    pub max_group_wait: Duration,
    /// `journalBufferedWritesThreshold`: a group is written once it holds this many bytes.
    /// **Folio's default is 2 MiB**, BookKeeper's 512 KiB: with 64 KiB entries at 256 in
    /// flight, 2 MiB groups gave 1.27x the throughput at 0.65x the p99 (docs/performance.md,
    /// "Group commit without a timer"); small entries never fill either.
    pub max_group_bytes: u64,
    /// `journalBufferedEntriesThreshold` (0 = off): a group is written once it holds this
    /// many records.
    pub max_group_entries: u64,
    /// `journalFlushWhenQueueEmpty`: write the group as soon as the queue is empty
    /// instead of waiting for `max_group_wait`. **Folio's default is true**, BookKeeper's
    /// false: groups still form by themselves (whatever arrives while a group is written
    /// and fdatasynced is the next group, so they grow with the load), and nothing waits
    /// for a timer, however busy the journal. Measured on this project's machine
    /// (docs/performance.md, "Group commit without a timer" and "Group commit at once
    /// under load"): one add in flight p50 0.12 ms against 3.9 ms with the timer; over the
    /// network at 128 in flight, 1.4-1.6x the throughput at 100 B and 1 KiB of a group
    /// that waited for more under load (bookie CPU per entry level). `false` gives
    /// BookKeeper's timer back (for a disk whose fdatasync costs the same whatever the
    /// group size and where fewer fdatasyncs matter more than latency).
    pub flush_when_queue_empty: bool,
    /// `journalMaxSizeMB` (2048 MiB): a journal file is closed and a new one started past
    /// this size.
    pub max_file_size: u64,
    /// `journalPreAllocSizeMB` (16 MiB): up to this many bytes of written, synced zeroes
    /// are kept ahead of the write offset (refilled to the full size, with one fdatasync,
    /// whenever less than half is left), so that group commits overwrite already-written
    /// blocks (an fdatasync then costs about half: spec/rust-crates.md section 5). Zero
    /// turns preallocation off.
    pub prealloc_size: u64,
    /// `journalRemovePagesFromCache` (true): once a group is durable, drop the journal's
    /// pages before it from the page cache (`posix_fadvise` DONTNEED). The journal is read
    /// only at start-up; its pages would otherwise crowd out the entry logs' pages, and
    /// once memory is full every write pays for reclaiming them.
    pub remove_pages_from_cache: bool,
    /// Folio's own (no BookKeeper key; default true): write the journal with direct I/O
    /// (`O_DIRECT`), bypassing the page cache, when `sync_data` is on and the file system
    /// supports it (otherwise buffered, with a warning). Every group is then written as
    /// whole 4 KiB blocks: the block holding the previous group's end is written again
    /// with the same bytes in front (docs/formats/journal.md). It saves the kernel's copy
    /// of every journal byte into the page cache, and the page cache itself.
    pub direct_io: bool,
    /// Folio's own (default false): a force-write thread per directory, as BookKeeper has,
    /// makes written groups durable while the writer thread writes the next ones (one
    /// fdatasync then covers every group written meanwhile). Off, the writer thread
    /// fdatasyncs after each group itself, which also gives one disk-operation order per
    /// workload (the simulator needs that). Off by default: on this project's test machine
    /// it raised sustained 64 KiB throughput but worsened small-entry latency and CPU per
    /// entry (docs/performance.md, "Direct I/O journal").
    pub force_write_thread: bool,
    /// For the simulator, with `force_write_thread`: no thread is started; written groups
    /// wait in the force-write queue until [`crate::Journal::force_write_step`] makes them
    /// durable on the caller's thread. The simulator picks the moment (seeded), so that
    /// groups written while an earlier one awaits its fdatasync, and a crash among them,
    /// happen in one order per seed. Never set it otherwise: nothing is acknowledged
    /// until someone steps.
    #[doc(hidden)]
    pub force_write_by_caller: bool,
    /// `journalSyncData` (true). **Unsafe when false**: adds are acknowledged without an
    /// fdatasync, so a power loss loses acknowledged entries. For benchmarks only.
    pub sync_data: bool,
    /// Test-only fault: run completion callbacks *before* the fdatasync. Exists to prove
    /// the crash checker detects lost acknowledged writes. Never set it otherwise.
    #[doc(hidden)]
    pub unsafe_ack_before_sync: bool,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            dirs: vec![PathBuf::from("/tmp/folio-journal")],
            max_group_wait: Duration::from_millis(2),
            max_group_bytes: 2 * 1024 * 1024,
            max_group_entries: 0,
            flush_when_queue_empty: true,
            max_file_size: 2048 * 1024 * 1024,
            prealloc_size: 16 * 1024 * 1024,
            remove_pages_from_cache: true,
            direct_io: true,
            force_write_thread: false,
            force_write_by_caller: false,
            sync_data: true,
            unsafe_ack_before_sync: false,
        }
    }
}

impl JournalConfig {
    pub fn with_dirs(dirs: Vec<PathBuf>) -> Self {
        JournalConfig {
            dirs,
            ..Default::default()
        }
    }
}

/// The engine: the journal plus when to checkpoint.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    pub journal: JournalConfig,
    /// `flushInterval` (10 s): a checkpoint runs at least this often. Zero turns the
    /// periodic checkpoint off; the write-cache threshold and the ledger store's requests
    /// for room still trigger checkpoints, and `Storage::checkpoint` runs one on demand.
    pub flush_interval: Duration,
    /// A checkpoint also runs when the ledger store's write cache holds more than this
    /// many bytes (default 16 MiB, a quarter of the 64 MiB default write cache, so that a
    /// flush frees room before adds block on a full cache, and what is held between
    /// checkpoints stays small).
    pub checkpoint_write_cache_bytes: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            journal: JournalConfig::default(),
            flush_interval: Duration::from_secs(10),
            checkpoint_write_cache_bytes: 16 * 1024 * 1024,
        }
    }
}
