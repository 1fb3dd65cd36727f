//! Making written groups durable: BookKeeper's force-write thread.
//!
//! The writer thread writes a group and hands it here as a [`SyncJob`]; the [`Syncer`]
//! fdatasyncs and only then runs the group's callbacks, in order. With a force-write
//! thread (`force_write_thread`, off by default) the writer goes on writing the next
//! groups while an fdatasync runs, and the next fdatasync covers every group written
//! meanwhile: under load the
//! groups made durable together grow with the backlog, as in BookKeeper, instead of each
//! waiting for its own fdatasync. Without one (the default, and the simulator, which
//! needs one disk-operation order per seed) the writer calls the same [`Syncer`] inline
//! after each write. The simulator can also run the force-write path with no thread
//! (`force_write_by_caller`): groups wait in the [`ForceQueue`] until it steps them.
//!
//! Durability rule, the same either way: a callback runs `Ok` only after an fdatasync of
//! its group's file, issued after its group's write returned, returned `Ok`. A failed
//! fdatasync poisons the journal: its jobs, and every job and request after them, fail.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use folio_env::op_stats::{self, Kind, OpStats};
use folio_env::{Clock, File};
use parking_lot::{Condvar, Mutex};

use super::format::Position;
use super::writer::{Counters, DirShared, Poison, Request, fail};

/// Journal pages are dropped from the page cache once this many bytes are durable.
const DROP_CACHE_BYTES: u64 = 1 << 20;
/// The page size assumed when rounding down to a page boundary (a larger real page only
/// makes the kernel keep one more partial page).
const PAGE_BYTES: u64 = 4096;

/// BookKeeper's op stats of the journal's fdatasyncs.
const SYNC: &str = "bookie_journal_JOURNAL_SYNC";

/// A written group waiting for its fdatasync.
pub(crate) struct SyncJob {
    /// The file the group went to (a roll may have started another since).
    pub file: Arc<dyn File>,
    pub path: PathBuf,
    /// Whether the file was opened with direct I/O (no pages to drop).
    pub direct: bool,
    /// The end of the group: the new durable position once synced.
    pub end: Position,
    /// Whether the group wrote anything (a force-only group writes nothing).
    pub wrote: bool,
    pub batch: Vec<Request>,
}

/// Runs fdatasyncs and callbacks for one journal directory.
pub(crate) struct Syncer {
    shared: Arc<DirShared>,
    clock: Arc<dyn Clock>,
    sync_data: bool,
    remove_pages_from_cache: bool,
    /// The file whose pages were last dropped, and the offset below which they were.
    cache_file: u64,
    cache_dropped: u64,
    /// BookKeeper's `bookie_journal_JOURNAL_ADD_ENTRY` (ms, `success="true"`), looked up by
    /// the first group on this (labelled) thread; one op stats sample per entry.
    add_entry: Option<Arc<OpStats>>,
    /// BookKeeper's `bookie_journal_JOURNAL_SYNC` (ms), `success="true"` and `"false"`,
    /// looked up as `add_entry`: a metrics macro per group looked its series up by name
    /// and labels every time (about 2% of the journal thread at 1 KiB adds).
    sync_ok: Option<Arc<OpStats>>,
    sync_failed: Option<Arc<OpStats>>,
}

/// The op stats in `slot`, made and shown as `family{success=...}` on first use (on the
/// journal's thread, whose `bookie` label they take).
fn journal_op_stats<'a>(
    slot: &'a mut Option<Arc<OpStats>>,
    key: &str,
    family: &'static str,
    success: &str,
) -> &'a Arc<OpStats> {
    slot.get_or_insert_with(|| {
        let s = op_stats::op_stats(key);
        op_stats::expose(family, Kind::Summary, &[("success", success)], &[&s]);
        s
    })
}

impl Syncer {
    pub(crate) fn new(
        shared: Arc<DirShared>,
        clock: Arc<dyn Clock>,
        sync_data: bool,
        remove_pages_from_cache: bool,
    ) -> Self {
        Syncer {
            shared,
            clock,
            sync_data,
            remove_pages_from_cache,
            cache_file: 0,
            cache_dropped: 0,
            add_entry: None,
            sync_ok: None,
            sync_failed: None,
        }
    }

    /// Makes `jobs` (in write order) durable and completes them: one fdatasync per file
    /// that got bytes (in order), then every callback in order; or, if the journal is or
    /// becomes poisoned, fails them all.
    pub(crate) fn complete(&mut self, mut jobs: Vec<SyncJob>) {
        let poison = self.shared.poison.get();
        if let Some(p) = poison {
            fail_jobs(jobs, || p.later_error());
            return;
        }
        let Some(end) = jobs.last().map(|j| j.end) else {
            return;
        };
        if self.sync_data {
            let started = self.clock.now();
            // Each file that got bytes, once, oldest first (files change only by a roll):
            // an fdatasync issued after a group's write returned covers that group.
            let mut files: Vec<(&Arc<dyn File>, &PathBuf)> = Vec::new();
            for j in jobs.iter().filter(|j| j.wrote) {
                if !files.last().is_some_and(|(f, _)| Arc::ptr_eq(f, &j.file)) {
                    files.push((&j.file, &j.path));
                }
            }
            let syncs = files.len();
            let failed = files.into_iter().find_map(|(f, path)| match f.sync_data() {
                Ok(()) => {
                    Counters::add(&self.shared.counters.group_fdatasyncs, 1);
                    None
                }
                Err(e) => Some(Poison::new("fdatasync", path.clone(), &e)),
            });
            // BookKeeper's journal op stats (ms, `success`), for its users' dashboards.
            let took = self.clock.now().saturating_duration_since(started);
            let sync = match failed {
                None => journal_op_stats(&mut self.sync_ok, "journal sync", SYNC, "true"),
                Some(_) => {
                    journal_op_stats(&mut self.sync_failed, "journal sync failed", SYNC, "false")
                }
            };
            sync.record(took);
            if let Some(p) = failed {
                self.shared.poison_all(&p);
                fail_jobs(jobs, || p.group_error());
                return;
            }
            if took >= super::writer::SLOW_GROUP {
                tracing::debug!(
                    groups = jobs.len(),
                    syncs,
                    fdatasync_ms = took.as_secs_f64() * 1e3,
                    "slow journal fdatasync"
                );
            }
        }
        // Durable now; set before the callbacks, so that whoever a callback wakes sees
        // the position cover its record.
        *self.shared.synced.lock() = end;
        let now = self.clock.now();
        let add_entry = journal_op_stats(
            &mut self.add_entry,
            "journal add",
            "bookie_journal_JOURNAL_ADD_ENTRY",
            "true",
        );
        // One batch: what the callbacks leave (a bookie's answers to write, one write per
        // connection) runs once they all have.
        crate::callback_batch::run(|| {
            for job in &mut jobs {
                for r in job.batch.drain(..) {
                    // From the submit to durable: what an add waits for the journal.
                    add_entry.record(now.saturating_duration_since(r.enqueued));
                    if let Some(done) = r.done {
                        done(Ok(()));
                    }
                }
            }
        });
        // After the callbacks: not needed for any group's durability.
        if let Some(last) = jobs.last() {
            self.drop_synced_pages(last);
        }
        for job in jobs {
            self.shared.give_back_batch(job.batch);
        }
    }

    /// Drops the pages of durable records (everything before `end`) from the page cache,
    /// a MiB or more at a time, up to the page holding `end` (not that one: the next group
    /// writes into it, and a dropped page would have to be read back first).
    fn drop_synced_pages(&mut self, last: &SyncJob) {
        // Direct I/O leaves no journal pages in the cache to drop.
        if !self.remove_pages_from_cache || !self.sync_data || last.direct {
            return;
        }
        if last.end.file_id != self.cache_file {
            self.cache_file = last.end.file_id;
            self.cache_dropped = 0;
        }
        let end = last.end.offset & !(PAGE_BYTES - 1);
        if end < self.cache_dropped + DROP_CACHE_BYTES {
            return;
        }
        if let Err(e) = last
            .file
            .drop_cache(self.cache_dropped, end - self.cache_dropped)
        {
            tracing::debug!(file = %last.path.display(), "dropping journal pages from the cache: {e}");
        }
        self.cache_dropped = end;
    }
}

fn fail_jobs(jobs: Vec<SyncJob>, err: impl Fn() -> crate::error::StorageError) {
    for job in jobs {
        for r in job.batch {
            fail(r, err());
        }
    }
}

/// Jobs handed from the writer thread to the force-write thread.
#[derive(Default)]
pub(crate) struct ForceQueue {
    state: Mutex<(VecDeque<SyncJob>, bool)>,
    cv: Condvar,
}

impl ForceQueue {
    pub(crate) fn push(&self, job: SyncJob) {
        self.state.lock().0.push_back(job);
        self.cv.notify_one();
    }

    /// Everything queued, for a caller that makes it durable itself
    /// (`force_write_by_caller`).
    pub(crate) fn take_all(&self) -> Vec<SyncJob> {
        self.state.lock().0.drain(..).collect()
    }

    /// No more jobs will come: the thread finishes what is queued and returns.
    pub(crate) fn close(&self) {
        self.state.lock().1 = true;
        self.cv.notify_one();
    }

    /// The force-write thread: takes everything queued, makes it durable, repeats.
    pub(crate) fn run(&self, mut syncer: Syncer) {
        loop {
            let jobs: Vec<SyncJob> = {
                let mut st = self.state.lock();
                while st.0.is_empty() && !st.1 {
                    self.cv.wait(&mut st);
                }
                if st.0.is_empty() {
                    return;
                }
                st.0.drain(..).collect()
            };
            let n = jobs.len() as u64;
            syncer.complete(jobs);
            syncer
                .shared
                .force_write_queued
                .fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
