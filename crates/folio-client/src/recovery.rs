//! Ledger recovery, sans-IO: fence the last fragment's ensemble, read forward from the
//! LAC, write the entries found back, and decide where the ledger ends.
//!
//! The shell (`client::Client::open`) has already marked the ledger IN_RECOVERY in the
//! metadata by CAS (so the writer cannot change its ensemble any more) and carries out
//! the [`RecoveryAction`]s; this module decides. The steps are seed 000's and 002's, with
//! the corrections the TLA+ model of BookKeeper found:
//!
//! 1. Fence: a read of entry -1 with the fence flag to every bookie of the *current*
//!    ensemble; done once the fenced bookies (those that answered, with an entry or with
//!    "no entry") cover every ack quorum ([`crate::coverage`]). The highest LAC carried
//!    by the returned last entries is where reading starts.
//! 2. Read forward from `max(LAC, first entry of the last fragment - 1) + 1`: recovery
//!    covers the last fragment only (BookKeeper issue 2615: a fresh ensemble answers LAC
//!    -1, and reading from entry 0 wrote old entries into the new fragment). The last
//!    fragment may be an earlier recovery's write-back fragment: then reading starts at
//!    its first entry, whatever the LAC (see `start_reading`). Every recovery
//!    read carries the fence flag too (issue 2614: otherwise a bookie left unfenced by step
//!    1 can answer NoSuchEntry and then accept the old writer's add, so an acknowledged
//!    entry ends up beyond the sealed end). One positive answer (digest checked by the shell)
//!    recovers an entry; it is absent only when explicit NoSuchEntry answers cover its
//!    write set (`Qw - Qa + 1`); an error or timeout is never a negative, and if the
//!    answers run out undecided, recovery fails rather than guess.
//! 3. Write every recovered entry back to its write set with the recovery flag, carrying
//!    the LAC frozen at the start of recovery (so a concurrent recovery cannot make an
//!    unrecovered entry look confirmed), and wait for `Qa` acknowledgements each, in entry
//!    order. A bookie that fails a write-back is replaced as a writer would: a new fragment
//!    starting at the first entry not yet written back (never below the last fragment:
//!    issue 2615), recorded in the metadata before anything after it counts (issue 1591).
//!    Reads keep going to the fragment's original ensemble, where the writer put the data.
//! 4. Close: the ledger ends at the entry before the first absent one.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use folio_proto::DigestManager;
use folio_types::quorum::QuorumConfig;
use folio_types::{BookieId, EntryId, LedgerId};

use crate::coverage::{coverage_threshold, covers_ensemble};
use crate::error::ClientError;

/// A bookie's answer to the fencing read of entry -1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceAnswer {
    /// Fenced; the last entry it holds (digest verified) carries this LAC and length.
    LastEntry {
        entry: EntryId,
        lac: EntryId,
        length: u64,
    },
    /// Fenced; it holds no entry of the ledger (NoSuchEntry / NoSuchLedger).
    Empty,
    /// The bookie refused the master key.
    Unauthorized,
    /// Any failure (I/O error, timeout, bad digest, unreachable): not fenced.
    Error(String),
}

/// A bookie's answer to a recovery read of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAnswer {
    /// The entry, digest verified: its payload and the length field it was written with.
    Entry {
        payload: Bytes,
        length: u64,
    },
    /// An explicit NoSuchEntry (or NoSuchLedger) from the bookie's index.
    NoEntry,
    Unauthorized,
    /// Error, timeout, digest mismatch: never counted as a negative.
    Error(String),
}

/// A bookie's answer to a recovery write-back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteAnswer {
    Ok,
    Unauthorized,
    Error(String),
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq)]
pub enum RecoveryAction {
    /// Read entry -1 with the fence flag (and master key) from the bookie at this
    /// position of the last ensemble.
    FenceRead { position: usize, bookie: BookieId },
    /// Read the entry with the fence flag from the bookie at this position.
    RecoveryRead {
        entry: EntryId,
        position: usize,
        bookie: BookieId,
    },
    /// Add `body` with the recovery flag to the bookie at this position of the current
    /// write-back ensemble; answer with [`Recovery::on_write_answer`].
    WriteBack {
        entry: EntryId,
        position: usize,
        bookie: BookieId,
        body: Bytes,
    },
    /// Read the (confirmed) entry normally to learn its length field, then call
    /// [`Recovery::on_length`]. Only needed when nothing was recovered and no fence answer
    /// carried the last entry's length.
    ReadLength { entry: EntryId },
    /// Replace the `failed` positions of the write-back ensemble in a new fragment starting
    /// at `fragment_start` (the ledger stays IN_RECOVERY), by CAS; then call
    /// [`Recovery::on_ensemble_changed`] or [`Recovery::on_ensemble_change_failed`].
    ChangeEnsemble {
        fragment_start: EntryId,
        failed: BTreeMap<usize, BookieId>,
    },
    /// Recovery is complete: close the ledger by CAS with this last entry and length.
    Close { last_entry: EntryId, length: u64 },
    /// Recovery failed; the ledger stays IN_RECOVERY.
    Fail(ClientError),
}

#[derive(Debug)]
enum Phase {
    Fencing,
    Reading,
    /// The end is known; waiting for write-backs (or the length read).
    Finishing,
    Done,
}

#[derive(Debug, Default)]
struct EntryRead {
    answered: BTreeSet<usize>,
    negatives: usize,
    errors: Vec<String>,
}

#[derive(Debug)]
struct WriteBack {
    body: Bytes,
    /// Bookies that stored it (counted only while they hold a position of its write set).
    acks: BTreeSet<BookieId>,
}

/// The recovery of one ledger's last fragment.
#[derive(Debug)]
pub struct Recovery {
    ledger: LedgerId,
    quorum: QuorumConfig,
    ensemble: Vec<BookieId>,
    fragment_start: EntryId,
    digest: DigestManager,
    phase: Phase,
    fenced: Vec<bool>,
    fence_answered: Vec<bool>,
    max_lac: EntryId,
    /// Length fields of entries seen in fence answers.
    lengths: BTreeMap<EntryId, u64>,
    /// The LAC at the start of reading, carried by every write-back.
    frozen_lac: EntryId,
    reading: EntryId,
    read: EntryRead,
    last_recovered: Option<(EntryId, u64)>,
    write_backs: BTreeMap<EntryId, WriteBack>,
    end: Option<EntryId>,
    /// Where write-backs go: the fragment's ensemble until a bookie fails a write-back.
    write_ensemble: Vec<BookieId>,
    /// First entry of the fragment `write_ensemble` belongs to.
    write_start: EntryId,
    failed: BTreeMap<usize, BookieId>,
    changing: bool,
    ensemble_changes: u32,
    max_ensemble_changes: u32,
}

impl Recovery {
    /// Starts recovering the fragment of `ensemble` that begins at `fragment_start` (the
    /// ledger's last fragment). Returns the fencing reads to send.
    pub fn start(
        ledger: LedgerId,
        quorum: QuorumConfig,
        fragment_start: EntryId,
        ensemble: Vec<BookieId>,
        digest: DigestManager,
    ) -> (Recovery, Vec<RecoveryAction>) {
        assert_eq!(ensemble.len(), quorum.ensemble_size, "ensemble size");
        let n = ensemble.len();
        let actions = ensemble
            .iter()
            .enumerate()
            .map(|(position, bookie)| RecoveryAction::FenceRead {
                position,
                bookie: bookie.clone(),
            })
            .collect();
        let r = Recovery {
            ledger,
            quorum,
            ensemble: ensemble.clone(),
            fragment_start,
            digest,
            phase: Phase::Fencing,
            fenced: vec![false; n],
            fence_answered: vec![false; n],
            max_lac: -1,
            lengths: BTreeMap::new(),
            frozen_lac: -1,
            reading: -1,
            read: EntryRead::default(),
            last_recovered: None,
            write_backs: BTreeMap::new(),
            end: None,
            write_ensemble: ensemble,
            write_start: fragment_start,
            failed: BTreeMap::new(),
            changing: false,
            ensemble_changes: 0,
            max_ensemble_changes: 10,
        };
        (r, actions)
    }

    /// An earlier recovery already replaced bookies by write-back fragments: the last
    /// fragment (starting at `start`, with `ensemble`) is where write-backs go, while
    /// fencing and reads stay on the ensemble given to [`Recovery::start`], the writer's,
    /// where the entries to recover were written. A bookie that joined through a
    /// recovery's fragment holds only what was written back, so its NoSuchEntry proves
    /// nothing about the writer's entries (simulator seed 93: counting it truncated
    /// acknowledged entries). Reading starts at `start`, whatever the LAC: the entries
    /// before it are recovered already (simulator seed 1659), those from it on are in
    /// the write-back fragment's ensemble only if written back (seed 6753). Call before
    /// answering the fencing reads.
    pub fn set_write_fragment(&mut self, start: EntryId, ensemble: Vec<BookieId>) {
        assert_eq!(ensemble.len(), self.quorum.ensemble_size, "ensemble size");
        assert!(
            start >= self.fragment_start,
            "write fragment before the writer's"
        );
        self.write_start = start;
        self.write_ensemble = ensemble;
    }

    /// Bounds the ensemble changes of the write-backs (default 10).
    pub fn set_max_ensemble_changes(&mut self, max: u32) {
        self.max_ensemble_changes = max;
    }

    /// The LAC write-backs carry (valid once fencing is complete).
    pub fn frozen_lac(&self) -> EntryId {
        self.frozen_lac
    }

    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    fn fail(&mut self, reason: String) -> Vec<RecoveryAction> {
        self.phase = Phase::Done;
        vec![RecoveryAction::Fail(ClientError::RecoveryFailed {
            ledger: self.ledger,
            reason,
        })]
    }

    fn unauthorized(&mut self, position: usize) -> Vec<RecoveryAction> {
        self.phase = Phase::Done;
        vec![RecoveryAction::Fail(ClientError::Unauthorized {
            ledger: self.ledger,
            bookie: Some(self.ensemble[position].clone()),
        })]
    }

    /// A bookie answered the fencing read.
    pub fn on_fence_answer(&mut self, position: usize, answer: FenceAnswer) -> Vec<RecoveryAction> {
        if !matches!(self.phase, Phase::Fencing)
            || position >= self.ensemble.len()
            || self.fence_answered[position]
        {
            // Late answers (after coverage) are harmless: the bookie is fenced or not, and
            // recovery reads fence it anyway.
            return Vec::new();
        }
        self.fence_answered[position] = true;
        match answer {
            FenceAnswer::LastEntry { entry, lac, length } => {
                self.fenced[position] = true;
                self.max_lac = self.max_lac.max(lac);
                self.lengths.insert(entry, length);
            }
            FenceAnswer::Empty => self.fenced[position] = true,
            FenceAnswer::Unauthorized => return self.unauthorized(position),
            FenceAnswer::Error(_) => {}
        }
        if covers_ensemble(&self.quorum, &self.fenced) {
            return self.start_reading();
        }
        if self.fence_answered.iter().all(|&a| a) {
            let fenced = self.fenced.iter().filter(|&&f| f).count();
            return self.fail(format!(
                "fencing reached only {fenced} of {} bookies, not a bookie of every ack quorum",
                self.ensemble.len()
            ));
        }
        Vec::new()
    }

    fn start_reading(&mut self) -> Vec<RecoveryAction> {
        // Never below the last fragment (issue 2615), as BookKeeper's LedgerRecoveryOp
        // takes max(LAC, first entry of the last ensemble - 1). The writer opened its
        // fragment at its LAC + 1, so everything before `fragment_start` is confirmed.
        // When an earlier recovery appended write-back fragments, the last one starts at
        // `write_start`, and everything before it is recovered too: a recovery adds a
        // fragment only at its first write-back still short of an ack quorum, after every
        // entry before it was found and written back to an ack quorum of the fragment the
        // metadata gives it (and the fragment start itself was found, so the ledger ends
        // at or after `write_start - 1`). Starting lower would re-write those entries to
        // write sets that lie before the last fragment, where no bookie can be replaced
        // any more: with one of them gone for good, every later recovery failed and the
        // ledger stayed IN_RECOVERY forever (simulator seed 1659). The start never drops
        // below the last fragment's first entry, so it never reads from -1 across fragments, and every entry a writer may have
        // acknowledged above it is still read from the writer's ensemble as before.
        self.frozen_lac = self.max_lac.max(self.write_start - 1);
        self.phase = Phase::Reading;
        // Behind an earlier recovery's write-back fragment, the LAC does not bound the
        // work: entries from `write_start` up to the LAC are confirmed on the writer's
        // ensemble, but the metadata gives them to the write-back fragment's, which holds
        // only what that recovery wrote back before it stopped. Skipping them closed a
        // ledger whose entries had one copy in their fragment (simulator seed 6753), so
        // they are read and written back there too.
        let first =
            if self.write_start != self.fragment_start || self.write_ensemble != self.ensemble {
                self.write_start
            } else {
                self.frozen_lac + 1
            };
        self.read_entry(first)
    }

    fn read_entry(&mut self, entry: EntryId) -> Vec<RecoveryAction> {
        self.reading = entry;
        self.read = EntryRead::default();
        self.quorum
            .write_set(entry)
            .into_iter()
            .map(|position| RecoveryAction::RecoveryRead {
                entry,
                position,
                bookie: self.ensemble[position].clone(),
            })
            .collect()
    }

    /// A bookie answered a recovery read.
    pub fn on_read_answer(
        &mut self,
        entry: EntryId,
        position: usize,
        answer: ReadAnswer,
    ) -> Vec<RecoveryAction> {
        if !matches!(self.phase, Phase::Reading)
            || entry != self.reading
            || !self.quorum.stores(entry, position)
            || !self.read.answered.insert(position)
        {
            return Vec::new();
        }
        match answer {
            ReadAnswer::Entry { payload, length } => {
                // Generous on positive: one copy is enough to recover the entry.
                self.last_recovered = Some((entry, length));
                let body = self
                    .digest
                    .compute(entry, self.frozen_lac, length as i64, &payload);
                let mut actions: Vec<RecoveryAction> = self
                    .quorum
                    .write_set(entry)
                    .into_iter()
                    // A failed position gets the entry from its replacement.
                    .filter(|p| !self.failed.contains_key(p))
                    .map(|position| RecoveryAction::WriteBack {
                        entry,
                        position,
                        bookie: self.write_ensemble[position].clone(),
                        body: body.clone(),
                    })
                    .collect();
                self.write_backs.insert(
                    entry,
                    WriteBack {
                        body,
                        acks: BTreeSet::new(),
                    },
                );
                actions.extend(self.read_entry(entry + 1));
                actions
            }
            ReadAnswer::NoEntry => {
                self.read.negatives += 1;
                // Strict on negative: explicit NoSuchEntry answers must cover the write set.
                if self.read.negatives >= coverage_threshold(&self.quorum) {
                    self.end = Some(entry - 1);
                    self.phase = Phase::Finishing;
                    return self.try_finish();
                }
                self.check_undecided()
            }
            ReadAnswer::Unauthorized => self.unauthorized(position),
            ReadAnswer::Error(e) => {
                self.read
                    .errors
                    .push(format!("{}: {e}", self.ensemble[position]));
                self.check_undecided()
            }
        }
    }

    fn check_undecided(&mut self) -> Vec<RecoveryAction> {
        if self.read.answered.len() < self.quorum.write_quorum {
            return Vec::new();
        }
        let reason = format!(
            "entry {} is neither present nor proven absent: {} NoSuchEntry answers of the {} needed, errors: {}",
            self.reading,
            self.read.negatives,
            coverage_threshold(&self.quorum),
            self.read.errors.join("; ")
        );
        self.fail(reason)
    }

    /// A bookie answered a write-back.
    pub fn on_write_answer(
        &mut self,
        entry: EntryId,
        bookie: &BookieId,
        answer: WriteAnswer,
    ) -> Vec<RecoveryAction> {
        if matches!(self.phase, Phase::Done) || !self.write_backs.contains_key(&entry) {
            return Vec::new();
        }
        match answer {
            WriteAnswer::Ok => {
                if let Some(wb) = self.write_backs.get_mut(&entry) {
                    wb.acks.insert(bookie.clone());
                }
                self.drain()
            }
            WriteAnswer::Unauthorized => {
                self.phase = Phase::Done;
                vec![RecoveryAction::Fail(ClientError::Unauthorized {
                    ledger: self.ledger,
                    bookie: Some(bookie.clone()),
                })]
            }
            WriteAnswer::Error(e) => {
                let position = self
                    .quorum
                    .write_set(entry)
                    .into_iter()
                    .find(|&p| &self.write_ensemble[p] == bookie);
                match position {
                    Some(p) => {
                        tracing::debug!(ledger = self.ledger, entry, %bookie, "write-back failed: {e}");
                        self.failed.entry(p).or_insert_with(|| bookie.clone());
                        self.maybe_start_change()
                    }
                    None => Vec::new(),
                }
            }
        }
    }

    fn ack_count(&self, entry: EntryId, wb: &WriteBack) -> usize {
        self.quorum
            .write_set(entry)
            .into_iter()
            .filter(|&p| wb.acks.contains(&self.write_ensemble[p]))
            .count()
    }

    /// Completes write-backs in entry order while they have an ack quorum.
    fn drain(&mut self) -> Vec<RecoveryAction> {
        if self.changing {
            return Vec::new();
        }
        while let Some((&entry, wb)) = self.write_backs.iter().next() {
            if self.ack_count(entry, wb) < self.quorum.ack_quorum {
                break;
            }
            self.write_backs.remove(&entry);
        }
        self.try_finish()
    }

    fn maybe_start_change(&mut self) -> Vec<RecoveryAction> {
        if self.changing || self.failed.is_empty() {
            return Vec::new();
        }
        let Some(&first_pending) = self.write_backs.keys().next() else {
            return Vec::new();
        };
        if self.ensemble_changes >= self.max_ensemble_changes {
            return self.fail(format!(
                "write-backs needed more than {} ensemble changes",
                self.max_ensemble_changes
            ));
        }
        // Entries below `first_pending` are written back on the current ensemble; the new
        // fragment can never start before the last fragment (write-backs are above the LAC
        // frozen at or after its first entry - 1).
        debug_assert!(first_pending >= self.fragment_start);
        if first_pending < self.write_start {
            // The entry lies before the last fragment: no fragment can be added there.
            // Reading starts at or after the last fragment's first entry, so this only
            // guards the invariant; fail rather than count a wrong bookie.
            return self.fail(format!(
                "write-back of entry {first_pending} failed before the last fragment (first entry {})",
                self.write_start
            ));
        }
        self.changing = true;
        self.ensemble_changes += 1;
        // Only a recorded change matters: a failed one ends the recovery.
        self.write_start = first_pending;
        vec![RecoveryAction::ChangeEnsemble {
            fragment_start: first_pending,
            failed: self.failed.clone(),
        }]
    }

    /// The write-back ensemble change is in the metadata.
    pub fn on_ensemble_changed(&mut self, new_ensemble: Vec<BookieId>) -> Vec<RecoveryAction> {
        if matches!(self.phase, Phase::Done) {
            return Vec::new();
        }
        self.changing = false;
        let replaced: Vec<usize> = (0..self.write_ensemble.len())
            .filter(|&p| self.write_ensemble[p] != new_ensemble[p])
            .collect();
        self.write_ensemble = new_ensemble;
        let ensemble = &self.write_ensemble;
        self.failed.retain(|p, b| &ensemble[*p] == b);
        let mut actions = Vec::new();
        for (&entry, wb) in &self.write_backs {
            for p in self.quorum.write_set(entry) {
                if replaced.contains(&p)
                    && !self.failed.contains_key(&p)
                    && !wb.acks.contains(&self.write_ensemble[p])
                {
                    actions.push(RecoveryAction::WriteBack {
                        entry,
                        position: p,
                        bookie: self.write_ensemble[p].clone(),
                        body: wb.body.clone(),
                    });
                }
            }
        }
        actions.extend(self.drain());
        actions.extend(self.maybe_start_change());
        actions
    }

    /// The write-back ensemble change could not be made.
    pub fn on_ensemble_change_failed(&mut self, error: ClientError) -> Vec<RecoveryAction> {
        if matches!(self.phase, Phase::Done) {
            return Vec::new();
        }
        self.phase = Phase::Done;
        vec![RecoveryAction::Fail(error)]
    }

    fn try_finish(&mut self) -> Vec<RecoveryAction> {
        let Some(last) = self.end else {
            return Vec::new();
        };
        if !matches!(self.phase, Phase::Finishing) || !self.write_backs.is_empty() || self.changing
        {
            return Vec::new();
        }
        let length = match self.last_recovered {
            Some((e, len)) if e == last => Some(len),
            _ if last < 0 => Some(0),
            _ => self.lengths.get(&last).copied(),
        };
        match length {
            Some(length) => {
                self.phase = Phase::Done;
                vec![RecoveryAction::Close {
                    last_entry: last,
                    length,
                }]
            }
            None => vec![RecoveryAction::ReadLength { entry: last }],
        }
    }

    /// The length field of the last entry, read after [`RecoveryAction::ReadLength`].
    pub fn on_length(&mut self, result: Result<u64, ClientError>) -> Vec<RecoveryAction> {
        if !matches!(self.phase, Phase::Finishing) {
            return Vec::new();
        }
        let Some(last) = self.end else {
            return Vec::new();
        };
        match result {
            Ok(length) => {
                self.phase = Phase::Done;
                vec![RecoveryAction::Close {
                    last_entry: last,
                    length,
                }]
            }
            Err(e) => self.fail(format!("could not read the length of entry {last}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests;
