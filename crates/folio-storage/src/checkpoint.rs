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
use std::time::Duration;

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
pub(crate) fn checkpoint(inner: &Inner, durability: Durability) -> Result<(), StorageError> {
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
        return Ok(());
    }
    for (i, mark) in marks.into_iter().enumerate() {
        if let Err(e) = inner.journal.persist_mark(i, mark) {
            poison(inner, &e);
            return Err(e);
        }
    }
    Ok(())
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

/// The checkpoint thread: every `flush_interval` (if not zero), and when asked: by an add
/// that passed the write-cache threshold ([`request_if_due`]) or by a put waiting for
/// room. It does not poll; requests wake it.
pub(crate) fn run_thread(inner: &Inner) {
    let interval = inner.config.flush_interval;
    let mut last = inner.env.clock.now();
    let mut last_whole = last;
    loop {
        {
            let mut stop = inner.stop.lock();
            if *stop {
                return;
            }
            if !inner.checkpoint_requested.load(Ordering::SeqCst) {
                // Requests set the flag before taking `stop` to notify, so none is missed;
                // with no interval the thread still wakes now and then to look at the flag.
                let wait = if interval.is_zero() {
                    Duration::from_secs(1)
                } else {
                    interval.saturating_sub(inner.env.clock.now().duration_since(last))
                };
                inner.stop_cv.wait_for(&mut stop, wait);
            }
            if *stop {
                return;
            }
        }
        inner.checkpoint_wakeups.fetch_add(1, Ordering::Relaxed);
        let now = inner.env.clock.now();
        let requested = inner.checkpoint_requested.swap(false, Ordering::SeqCst);
        let due = requested || (!interval.is_zero() && now.duration_since(last) >= interval);
        if due {
            // Also when the checkpoint is skipped below: the next wait is a whole interval
            // (otherwise a read-only engine would wake without pause).
            last = now;
        }
        let read_only = inner.journal.read_only_reason().is_some();
        if !due || (read_only && !requested) {
            continue;
        }
        // Asked for room, the checkpoint may stage the index; on the interval (and when
        // asked for room past it) it commits, so marks move at least that often.
        let durability = if requested && now.duration_since(last_whole) < interval {
            Durability::MayStage
        } else {
            Durability::Whole
        };
        if durability == Durability::Whole {
            last_whole = now;
        }
        if let Err(e) = checkpoint(inner, durability)
            && !read_only
        {
            tracing::error!("checkpoint failed: {e}");
        }
    }
}
