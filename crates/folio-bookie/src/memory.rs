//! An in-memory [`BookieStorage`]: the fake the processor's unit tests run on, with knobs to
//! make the bookie read-only, to fail I/O, and to hold write completions back (a journal that has
//! not synced yet), so tests can check that nothing is acknowledged before it is durable.
//!
//! It keeps BookKeeper's rules (first master key wins, fenced ledgers refuse non-recovery adds,
//! LAC = max of the entries' piggybacked LAC and the explicit LAC) but nothing survives the process.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use folio_types::{EntryId, LedgerId};
use parking_lot::Mutex;

use crate::storage::{BookieStorage, StorageError, WriteCallback};

#[derive(Default)]
struct LedgerState {
    master_key: Bytes,
    fenced: bool,
    entries: BTreeMap<EntryId, Bytes>,
    lac: EntryId,
    explicit_lac: Option<Bytes>,
}

struct Inner {
    ledgers: HashMap<LedgerId, LedgerState>,
    read_only: bool,
    fail_io: Option<String>,
    hold_completions: bool,
    held: Vec<(WriteCallback, Result<(), StorageError>)>,
    space: folio_env::DiskSpace,
    /// Whether `read_entry_nowait` and `known_lac` answer (as the engine's write cache and
    /// LAC map do); off by default, so that every read goes the way that may wait.
    without_waiting: bool,
    /// Reads asked of this storage (`read_entry` and `read_entry_nowait`), for tests that
    /// count the work a client gives the bookies.
    reads: u64,
}

/// See the module comment.
pub struct MemoryStorage {
    inner: Mutex<Inner>,
}

impl Default for MemoryStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStorage {
    pub fn new() -> Self {
        MemoryStorage {
            inner: Mutex::new(Inner {
                ledgers: HashMap::new(),
                read_only: false,
                fail_io: None,
                hold_completions: false,
                held: Vec::new(),
                without_waiting: false,
                reads: 0,
                space: folio_env::DiskSpace {
                    free: 1 << 30,
                    total: 4 << 30,
                },
            }),
        }
    }

    /// Entry reads asked of this storage so far (`read_entry` and `read_entry_nowait`).
    pub fn reads(&self) -> u64 {
        self.inner.lock().reads
    }

    /// From now on entries and LACs are also served without waiting
    /// (`read_entry_nowait`, `known_lac`), as the engine serves those it holds in memory.
    pub fn serve_without_waiting(&self, on: bool) {
        self.inner.lock().without_waiting = on;
    }

    pub fn set_read_only(&self, read_only: bool) {
        self.inner.lock().read_only = read_only;
    }

    /// From now on every read and write fails with `StorageError::Io(reason)` (None: stop failing).
    pub fn set_fail_io(&self, reason: Option<&str>) {
        self.inner.lock().fail_io = reason.map(str::to_string);
    }

    /// While held, write completions queue up (as if the journal had not synced yet) until
    /// [`MemoryStorage::release_completions`].
    pub fn hold_completions(&self, hold: bool) {
        self.inner.lock().hold_completions = hold;
    }

    /// Runs the queued completions, oldest first; returns how many ran.
    pub fn release_completions(&self) -> usize {
        let held = std::mem::take(&mut self.inner.lock().held);
        let n = held.len();
        for (done, result) in held {
            done(result);
        }
        n
    }

    pub fn set_space(&self, space: folio_env::DiskSpace) {
        self.inner.lock().space = space;
    }

    /// Forgets `entry` of `ledger`, as a disk that lost it while the bookie stays up (a
    /// wiped or corrupt log), for the tests of the checks that must find such holes;
    /// whether it was there.
    pub fn lose_entry(&self, ledger: LedgerId, entry: EntryId) -> bool {
        self.inner
            .lock()
            .ledgers
            .get_mut(&ledger)
            .is_some_and(|l| l.entries.remove(&entry).is_some())
    }

    pub fn is_fenced(&self, ledger: LedgerId) -> bool {
        self.inner
            .lock()
            .ledgers
            .get(&ledger)
            .is_some_and(|l| l.fenced)
    }

    /// Completes a write now, or queues it while completions are held. Callbacks run outside the
    /// lock: they may call back into storage.
    fn complete(&self, done: WriteCallback, result: Result<(), StorageError>) {
        let mut inner = self.inner.lock();
        if inner.hold_completions {
            inner.held.push((done, result));
        } else {
            drop(inner);
            done(result);
        }
    }

    /// Finds or creates the ledger after checking the master key.
    fn ledger_for_write<'a>(
        inner: &'a mut Inner,
        ledger: LedgerId,
        master_key: &Bytes,
    ) -> Result<&'a mut LedgerState, StorageError> {
        let state = inner.ledgers.entry(ledger).or_insert_with(|| LedgerState {
            master_key: master_key.clone(),
            lac: -1,
            ..LedgerState::default()
        });
        if state.master_key != *master_key {
            return Err(StorageError::Unauthorized(ledger));
        }
        Ok(state)
    }
}

/// The LAC a writer piggybacks on an entry (offset 16 of the entry with digest, spec §4.1).
fn piggybacked_lac(body: &[u8]) -> Option<EntryId> {
    body.get(16..24)
        .map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
}

impl BookieStorage for MemoryStorage {
    fn add_entry(
        &self,
        ledger: LedgerId,
        entry: EntryId,
        master_key: Bytes,
        body: Bytes,
        recovery: bool,
        done: WriteCallback,
    ) {
        let result = (|| {
            let mut inner = self.inner.lock();
            if let Some(reason) = &inner.fail_io {
                return Err(StorageError::Io(reason.clone()));
            }
            let state = Self::ledger_for_write(&mut inner, ledger, &master_key)?;
            if state.fenced && !recovery {
                return Err(StorageError::Fenced(ledger));
            }
            if let Some(lac) = piggybacked_lac(&body) {
                state.lac = state.lac.max(lac);
            }
            state.entries.insert(entry, body);
            Ok(())
        })();
        self.complete(done, result);
    }

    fn fence(&self, ledger: LedgerId, master_key: Bytes, done: WriteCallback) {
        let result = (|| {
            let mut inner = self.inner.lock();
            if let Some(reason) = &inner.fail_io {
                return Err(StorageError::Io(reason.clone()));
            }
            Self::ledger_for_write(&mut inner, ledger, &master_key)?.fenced = true;
            Ok(())
        })();
        self.complete(done, result);
    }

    fn read_entry(&self, ledger: LedgerId, entry: EntryId) -> Result<Bytes, StorageError> {
        let mut inner = self.inner.lock();
        inner.reads += 1;
        if let Some(reason) = &inner.fail_io {
            return Err(StorageError::Io(reason.clone()));
        }
        let state = inner
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?;
        let found = if entry == folio_types::LAST_ENTRY_ID {
            state.entries.values().next_back()
        } else {
            state.entries.get(&entry)
        };
        found
            .cloned()
            .ok_or(StorageError::NoEntry { ledger, entry })
    }

    fn read_entry_nowait(&self, ledger: LedgerId, entry: EntryId) -> Option<Bytes> {
        let mut inner = self.inner.lock();
        inner.reads += 1;
        if !inner.without_waiting || inner.fail_io.is_some() {
            return None;
        }
        inner.ledgers.get(&ledger)?.entries.get(&entry).cloned()
    }

    fn known_lac(&self, ledger: LedgerId) -> Option<EntryId> {
        let inner = self.inner.lock();
        if !inner.without_waiting || inner.fail_io.is_some() {
            return None;
        }
        inner.ledgers.get(&ledger).map(|l| l.lac)
    }

    fn last_add_confirmed(&self, ledger: LedgerId) -> Result<EntryId, StorageError> {
        let inner = self.inner.lock();
        if let Some(reason) = &inner.fail_io {
            return Err(StorageError::Io(reason.clone()));
        }
        inner
            .ledgers
            .get(&ledger)
            .map(|l| l.lac)
            .ok_or(StorageError::NoLedger(ledger))
    }

    fn explicit_lac(&self, ledger: LedgerId) -> Result<Option<Bytes>, StorageError> {
        let inner = self.inner.lock();
        if let Some(reason) = &inner.fail_io {
            return Err(StorageError::Io(reason.clone()));
        }
        inner
            .ledgers
            .get(&ledger)
            .map(|l| l.explicit_lac.clone())
            .ok_or(StorageError::NoLedger(ledger))
    }

    fn write_lac(
        &self,
        ledger: LedgerId,
        lac: EntryId,
        master_key: Bytes,
        body: Bytes,
        done: WriteCallback,
    ) {
        let result = (|| {
            let mut inner = self.inner.lock();
            if let Some(reason) = &inner.fail_io {
                return Err(StorageError::Io(reason.clone()));
            }
            let state = Self::ledger_for_write(&mut inner, ledger, &master_key)?;
            state.lac = state.lac.max(lac);
            state.explicit_lac = Some(body);
            Ok(())
        })();
        self.complete(done, result);
    }

    fn force_ledger(&self, _ledger: LedgerId, done: WriteCallback) {
        let result = match &self.inner.lock().fail_io {
            Some(reason) => Err(StorageError::Io(reason.clone())),
            None => Ok(()),
        };
        self.complete(done, result);
    }

    fn entry_ids(&self, ledger: LedgerId) -> Result<Vec<EntryId>, StorageError> {
        let inner = self.inner.lock();
        if let Some(reason) = &inner.fail_io {
            return Err(StorageError::Io(reason.clone()));
        }
        inner
            .ledgers
            .get(&ledger)
            .map(|l| l.entries.keys().copied().collect())
            .ok_or(StorageError::NoLedger(ledger))
    }

    fn is_read_only(&self) -> bool {
        self.inner.lock().read_only
    }

    fn space(&self) -> Result<folio_env::DiskSpace, StorageError> {
        let inner = self.inner.lock();
        match &inner.fail_io {
            Some(reason) => Err(StorageError::Io(reason.clone())),
            None => Ok(inner.space),
        }
    }
}
