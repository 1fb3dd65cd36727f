//! Deferred-sync recovery adds: entries a re-replicating client copies here without the
//! journal, made durable by a ledger-store flush that a ForceLedger of their ledger waits
//! for (and asks for).
//!
//! Why: a copied entry is then written once, to an entry log, instead of twice (journal,
//! then entry log); on a restoring bookie that halves the disk writes. The rule that keeps
//! it safe is the copier's: it names this bookie in the ledger's metadata only after a
//! ForceLedger answered OK on the same connection as every add (a restart in between
//! closes the connection and loses what was not flushed). Here: a flush that *started*
//! after a deferred put returned makes it durable, so a put records as its need the
//! number of the next flush to start, and a force waits until a flush with at least that
//! number has finished. A failed flush fails the forces it was to satisfy (the copier
//! copies again); their need stays, so the next force waits for a later flush.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::error::StorageError;
use crate::storage::WriteCallback;

#[derive(Default)]
pub(crate) struct Deferred {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Flushes started so far (the first is number 1).
    started: u64,
    /// Per ledger with deferred puts not yet known durable: the flush that covers them.
    need: HashMap<i64, u64>,
    waiters: Vec<(u64, WriteCallback)>,
}

impl Deferred {
    /// A deferred put of `ledger` returned: the next flush to start covers it.
    pub(crate) fn put_done(&self, ledger: i64) {
        let mut s = self.state.lock();
        let need = s.started + 1;
        let n = s.need.entry(ledger).or_insert(need);
        *n = (*n).max(need);
    }

    /// Whether `ledger` has deferred puts no finished flush is known to cover.
    pub(crate) fn is_pending(&self, ledger: i64) -> bool {
        self.state.lock().need.contains_key(&ledger)
    }

    /// Runs `done` once every deferred put of `ledger` made before the call is durable;
    /// returns false (and keeps nothing) if it has none pending: then `done` is returned
    /// to the caller untouched.
    pub(crate) fn wait(&self, ledger: i64, done: WriteCallback) -> Result<(), WriteCallback> {
        let mut s = self.state.lock();
        match s.need.get(&ledger).copied() {
            Some(need) => {
                s.waiters.push((need, done));
                Ok(())
            }
            None => Err(done),
        }
    }

    /// Whether a force waits for a flush.
    pub(crate) fn has_waiters(&self) -> bool {
        !self.state.lock().waiters.is_empty()
    }

    /// A ledger-store flush starts: its number, for [`Deferred::flush_finished`].
    pub(crate) fn flush_started(&self) -> u64 {
        let mut s = self.state.lock();
        s.started += 1;
        s.started
    }

    /// Flush number `k` finished with `result`: completes the waiters it satisfies (after
    /// the lock is released: their callbacks may call back into the engine).
    pub(crate) fn flush_finished(&self, k: u64, result: Result<(), String>) {
        let due = {
            let mut s = self.state.lock();
            if result.is_ok() {
                s.need.retain(|_, need| *need > k);
            }
            let (due, wait): (Vec<_>, Vec<_>) = s.waiters.drain(..).partition(|(n, _)| *n <= k);
            s.waiters = wait;
            due
        };
        for (_, done) in due {
            done(result.clone().map_err(|reason| StorageError::ReadOnly {
                reason: format!("the flush a ForceLedger waited for failed: {reason}"),
            }));
        }
    }

    /// The engine stops: every waiting force fails (its entries may not be durable).
    pub(crate) fn fail_all(&self, reason: &str) {
        let due: Vec<_> = self.state.lock().waiters.drain(..).collect();
        for (_, done) in due {
            done(Err(StorageError::ReadOnly {
                reason: reason.to_string(),
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn counter() -> (Arc<AtomicU32>, Arc<AtomicU32>, impl Fn() -> WriteCallback) {
        let ok = Arc::new(AtomicU32::new(0));
        let err = Arc::new(AtomicU32::new(0));
        let (o, e) = (ok.clone(), err.clone());
        (ok, err, move || {
            let (o, e) = (o.clone(), e.clone());
            Box::new(move |r: Result<(), StorageError>| {
                if r.is_ok() { &o } else { &e }.fetch_add(1, Ordering::SeqCst);
            })
        })
    }

    #[test]
    fn a_force_waits_for_a_flush_started_after_the_put() {
        let d = Deferred::default();
        let (ok, err, cb) = counter();
        let k1 = d.flush_started();
        // Put while flush 1 runs: flush 1 may have swapped its cache before the put.
        d.put_done(7);
        assert!(d.wait(7, cb()).is_ok());
        d.flush_finished(k1, Ok(()));
        assert_eq!(
            ok.load(Ordering::SeqCst),
            0,
            "flush 1 does not cover the put"
        );
        let k2 = d.flush_started();
        d.flush_finished(k2, Ok(()));
        assert_eq!(ok.load(Ordering::SeqCst), 1);
        // Durable now: a later force has nothing to wait for.
        assert!(d.wait(7, cb()).is_err());
        assert!(
            d.wait(8, cb()).is_err(),
            "another ledger has nothing deferred"
        );
        assert_eq!(err.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_failed_flush_fails_its_forces_and_the_need_stays() {
        let d = Deferred::default();
        let (ok, err, cb) = counter();
        d.put_done(7);
        assert!(d.wait(7, cb()).is_ok());
        let k = d.flush_started();
        d.flush_finished(k, Err("disk".into()));
        assert_eq!(
            (ok.load(Ordering::SeqCst), err.load(Ordering::SeqCst)),
            (0, 1)
        );
        assert!(d.wait(7, cb()).is_ok(), "still not durable");
        d.fail_all("stopping");
        assert_eq!(err.load(Ordering::SeqCst), 2);
        assert!(!d.has_waiters());
    }
}
