//! Checkpoints: make the ledger store durable, then let the journal forget.
//!
//! Order matters. (1) Take, per journal directory, the end of the last durable group:
//! every record before it was applied to the ledger store before it was queued.
//! (2) `flush` the ledger store. (3) Persist each directory's mark atomically, only
//! forward. (4) Delete the journal files wholly before the mark. A crash between any
//! two steps leaves an older mark, so the replay covers at least what the ledger store
//! may have lost. One checkpoint runs at a time (marks only move forward).
//!
//! A checkpoint taken for room (the write cache passed its threshold) may have the ledger
//! store stage its index instead of committing it (`LedgerStore::flush_for_room`): then
//! steps (3) and (4) are skipped, since what the flush wrote is not durable until a later
//! flush commits the index; that one's marks, taken before it, cover the staged ones too.
//! Nor does a staged flush count for the ForceLedgers of deferred-sync adds, and while
//! one waits every checkpoint commits.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::StorageError;
use crate::storage::Inner;

/// Whether a checkpoint must make the ledger store durable, or may stage its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    Whole,
    MayStage,
}

/// One checkpoint. A failure makes the engine read-only: after a failed fsync the
/// kernel may have dropped the data it could not write, and a later "successful"
/// flush would then move the mark past data that never reached the disk.
/// Returns whether it committed the ledger store (and moved the marks): a checkpoint that
/// may stage does so only once in a while (`LedgerStore::flush_for_room`).
pub(crate) fn checkpoint(inner: &Inner, durability: Durability) -> Result<bool, StorageError> {
    let _one_at_a_time = inner.checkpoint_lock.lock();
    // A ForceLedger waits for a flush that makes its deferred-sync adds durable.
    let may_stage = durability == Durability::MayStage && !inner.deferred.has_waiters();
    if let Some(reason) = inner.journal.read_only_reason() {
        // Marks stay where they are. The store is still flushed when it asks for room,
        // so that a put blocked on a full write cache is released (flushing only adds
        // durability; a store whose own fsync failed refuses it by itself).
        if let Err(e) = flush_store(inner, false) {
            tracing::warn!("ledger store flush while read-only failed: {e}");
        }
        return Err(StorageError::ReadOnly { reason });
    }
    let marks = inner.journal.synced_positions();
    if inner
        .delete_journal_before_flush_for_tests
        .load(Ordering::Relaxed)
    {
        // The broken order of the negative control: marks (and the deletion of the
        // journal files before them) first.
        for (i, mark) in marks.iter().enumerate() {
            if let Err(e) = inner.journal.persist_mark(i, *mark) {
                poison(inner, &e);
                return Err(e);
            }
        }
    }
    let durable = match flush_store(inner, may_stage) {
        Ok(durable) => durable,
        Err(e) => {
            let e = StorageError::from(e);
            if matches!(e, StorageError::NoSpace { .. }) {
                // A full disk refused the entry-log writes: nothing fsync'd failed and the
                // store keeps what it could not write for the next flush, so writes may
                // resume once space is freed (the bookie's disk checker sees to that).
                inner.journal.poison_no_space(
                    "checkpoint",
                    PathBuf::new(),
                    &io::Error::new(io::ErrorKind::StorageFull, e.to_string()),
                );
            } else {
                poison(inner, &e);
            }
            return Err(e);
        }
    };
    inner.checkpoints.fetch_add(1, Ordering::Relaxed);
    if !durable
        && !inner
            .marks_past_a_staged_index_for_tests
            .load(Ordering::Relaxed)
    {
        // Staged: the journal still holds what the entry logs hold beyond the index.
        return Ok(false);
    }
    for (i, mark) in marks.into_iter().enumerate() {
        if let Err(e) = inner.journal.persist_mark(i, mark) {
            poison(inner, &e);
            return Err(e);
        }
    }
    Ok(durable)
}

/// The ledger store's flush, numbered for the deferred-sync adds it makes durable: a
/// staged one (`may_stage`, returning false) makes none durable and finishes nothing.
fn flush_store(inner: &Inner, may_stage: bool) -> Result<bool, crate::error::BackendError> {
    let k = inner.deferred.flush_started();
    let r = if may_stage {
        inner.store.flush_for_room()
    } else {
        inner.store.flush().map(|()| true)
    };
    match &r {
        Ok(false) => {}
        Ok(true) => inner.deferred.flush_finished(k, Ok(())),
        Err(e) => inner.deferred.flush_finished(k, Err(e.to_string())),
    }
    r
}

fn poison(inner: &Inner, e: &StorageError) {
    inner.journal.poison(
        "checkpoint",
        PathBuf::new(),
        &io::Error::other(e.to_string()),
    );
}

/// Asks the checkpoint thread for a checkpoint now (the write cache is full).
pub(crate) fn request(inner: &Inner) {
    inner.checkpoint_requested.store(true, Ordering::SeqCst);
    let _stop = inner.stop.lock();
    inner.stop_cv.notify_all();
}

/// Asks for a checkpoint once the entries put since the last flush started pass
/// `checkpoint_write_cache_bytes` (called after every add). The checkpoint thread's own
/// poll would notice up to 100 ms late: at 200+ MB/s of 64 KiB adds that is 20+ MiB more
/// in the cache, the flush starts with the cache nearly full and adds wait for room
/// (measured: 25-120 ms stalls, flushes of 60 MiB instead of 32).
pub(crate) fn request_if_due(inner: &Inner) {
    if !inner.checkpoint_requested.load(Ordering::Relaxed)
        && inner.store.unflushed_bytes() >= inner.config.checkpoint_write_cache_bytes
    {
        request(inner);
    }
}

/// When the checkpoint thread checkpoints, and whether it must commit: the decision of
/// [`run_thread`], apart from its waiting, so that it can be tested on its own.
#[derive(Debug)]
struct Cadence {
    interval: Duration,
    /// The last checkpoint of any kind: with no request the next one waits a whole
    /// interval after it.
    last: Instant,
    /// The last checkpoint that committed the ledger store and moved the marks: a `Whole`
    /// one, or one for room whose flush committed. The next is due an interval after it.
    last_commit: Instant,
}

impl Cadence {
    fn new(interval: Duration, now: Instant) -> Cadence {
        Cadence {
            interval,
            last: now,
            last_commit: now,
        }
    }

    /// How long to wait for a request before the periodic checkpoint is due.
    fn wait(&self, now: Instant) -> Duration {
        if self.interval.is_zero() {
            // No periodic checkpoint: only look at the request flag now and then.
            Duration::from_secs(1)
        } else {
            self.interval.saturating_sub(now.duration_since(self.last))
        }
    }

    /// Whether a checkpoint is due at `now` (on a request, or on the interval). A due
    /// one counts as taken, also if the caller skips it: the next wait is then a whole
    /// interval (otherwise a read-only engine would wake without pause).
    fn due(&mut self, now: Instant, requested: bool) -> bool {
        let due = requested
            || (!self.interval.is_zero() && now.duration_since(self.last) >= self.interval);
        if due {
            self.last = now;
        }
        due
    }

    /// The durability of a due checkpoint: one asked for room may stage the index, unless
    /// nothing committed for an interval; then (and on the interval) it commits, so the
    /// marks move at least that often.
    fn durability(&self, now: Instant, requested: bool) -> Durability {
        if requested && now.duration_since(self.last_commit) < self.interval {
            Durability::MayStage
        } else {
            Durability::Whole
        }
    }

    /// A checkpoint at `now` committed the ledger store (whether it had to or its flush
    /// for room did). Counted from any commit, not only from a `Whole` checkpoint's: at
    /// 10,000 ledgers written at once a commit for room came about every 10 s, and the
    /// `Whole` one counted from the previous `Whole` followed it within a second or two,
    /// committing nearly as many ledgers' blocks again for a second's entries (an index
    /// commit costs by the ledgers it touches; docs/performance.md, "2026-12-07 (08:30)").
    fn committed(&mut self, now: Instant) {
        self.last_commit = now;
    }
}

/// The checkpoint thread: every `flush_interval` (if not zero), and when asked: by an add
/// that passed the write-cache threshold ([`request_if_due`]) or by a put waiting for
/// room. It does not poll; requests wake it.
pub(crate) fn run_thread(inner: &Inner) {
    let mut cadence = Cadence::new(inner.config.flush_interval, inner.env.clock.now());
    loop {
        {
            let mut stop = inner.stop.lock();
            if *stop {
                return;
            }
            if !inner.checkpoint_requested.load(Ordering::SeqCst) {
                // Requests set the flag before taking `stop` to notify, so none is missed.
                let wait = cadence.wait(inner.env.clock.now());
                inner.stop_cv.wait_for(&mut stop, wait);
            }
            if *stop {
                return;
            }
        }
        inner.checkpoint_wakeups.fetch_add(1, Ordering::Relaxed);
        let now = inner.env.clock.now();
        let requested = inner.checkpoint_requested.swap(false, Ordering::SeqCst);
        let due = cadence.due(now, requested);
        let read_only = inner.journal.read_only_reason().is_some();
        if !due || (read_only && !requested) {
            continue;
        }
        match checkpoint(inner, cadence.durability(now, requested)) {
            Ok(true) => cadence.committed(now),
            Ok(false) => {}
            Err(e) => {
                if !read_only {
                    tracing::error!("checkpoint failed: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(10);

    fn at(start: Instant, secs: f64) -> Instant {
        start + Duration::from_secs_f64(secs)
    }

    /// Checkpoints asked for room stage the index until an interval has passed since the
    /// last commit, of whatever kind: a flush for room that committed restarts it.
    #[test]
    fn a_commit_for_room_restarts_the_interval_to_the_next_whole_checkpoint() {
        let t0 = Instant::now();
        let mut c = Cadence::new(INTERVAL, t0);
        assert!(c.due(at(t0, 1.0), true));
        assert_eq!(c.durability(at(t0, 1.0), true), Durability::MayStage);
        // A flush for room at 9 s commits (its staging bound was reached).
        assert!(c.due(at(t0, 9.0), true));
        assert_eq!(c.durability(at(t0, 9.0), true), Durability::MayStage);
        c.committed(at(t0, 9.0));
        // Past 10 s from the start but not from that commit: still staging.
        assert!(c.due(at(t0, 11.0), true));
        assert_eq!(c.durability(at(t0, 11.0), true), Durability::MayStage);
        // An interval after that commit, the next one commits.
        assert!(c.due(at(t0, 19.5), true));
        assert_eq!(c.durability(at(t0, 19.5), true), Durability::Whole);
    }

    /// With no request, the periodic checkpoint comes an interval after the last
    /// checkpoint of any kind, and commits.
    #[test]
    fn the_periodic_checkpoint_waits_an_interval_and_commits() {
        let t0 = Instant::now();
        let mut c = Cadence::new(INTERVAL, t0);
        assert_eq!(c.wait(at(t0, 4.0)), Duration::from_secs(6));
        assert!(!c.due(at(t0, 4.0), false));
        assert!(c.due(at(t0, 10.0), false));
        assert_eq!(c.durability(at(t0, 10.0), false), Durability::Whole);
        // A request counts as the last checkpoint for the wait.
        assert!(c.due(at(t0, 12.0), true));
        assert_eq!(c.wait(at(t0, 12.0)), INTERVAL);
        assert!(!c.due(at(t0, 21.0), false));
    }

    /// With no interval nothing is periodic and every checkpoint commits.
    #[test]
    fn no_interval_means_no_periodic_checkpoint_and_every_one_commits() {
        let t0 = Instant::now();
        let mut c = Cadence::new(Duration::ZERO, t0);
        assert!(!c.due(at(t0, 3600.0), false));
        assert_eq!(c.wait(t0), Duration::from_secs(1));
        assert!(c.due(at(t0, 1.0), true));
        assert_eq!(c.durability(at(t0, 1.0), true), Durability::Whole);
    }
}
