//! The writer's protocol core, sans-IO: pending adds, quorum tracking, in-order
//! acknowledgement, bookie failures and the ensemble changes they call for.
//!
//! The async shell (`writer::Writer`, behind `LedgerHandle`) feeds it the caller's
//! appends, the bookies' answers and the outcome of metadata updates, and carries out the
//! [`WriterAction`]s it returns; nothing here waits, sleeps or touches a socket, so the
//! unit tests drive every interleaving with plain function calls.
//!
//! Rules kept here, each the answer to a known BookKeeper bug or seed requirement:
//! * an entry is acknowledged once `Qa` bookies *of its write set in the current
//!   ensemble* have it, and only when every entry before it is acknowledged (the LAC
//!   advances over a contiguous prefix; adv ledgers with caller-chosen ids included);
//! * an answer from a bookie that is no longer in the entry's write set does not count
//!   (after an ensemble change the entry belongs to the new fragment, and readers will
//!   look for it on the new bookie);
//! * while an ensemble change is being written to the metadata, nothing is acknowledged
//!   (BookKeeper issue 1591: acknowledging on a locally changed ensemble that the metadata
//!   does not have yet loses the entry for a recovering reader). The new fragment starts at
//!   `LAC + 1`, and the LAC cannot move while the change is in flight;
//! * a fenced answer or an unauthorized answer fails the writer for good.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_proto::DigestManager;
use folio_types::quorum::QuorumConfig;
use folio_types::{BookieId, EntryId, LedgerId};

use crate::entry_queue::EntryQueue;
use crate::error::ClientError;

/// What a bookie answered to an add (timeouts and lost connections are `Failed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddOutcome {
    Ok,
    Fenced,
    Unauthorized,
    /// Any other failure: the bookie is replaced by an ensemble change.
    Failed(String),
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq)]
pub enum WriterAction {
    /// Send the entry (with digest) to the bookie.
    SendAdd {
        entry: EntryId,
        bookie: BookieId,
        body: Bytes,
    },
    /// The entry is acknowledged: complete the caller's append. Emitted in entry order.
    Acked { entry: EntryId },
    /// The entry failed: complete the caller's append with the error.
    Failed { entry: EntryId, error: ClientError },
    /// Replace the `failed` ensemble positions with new bookies in a fragment starting at
    /// `fragment_start`, by CAS on the metadata; then call
    /// [`WriterState::on_ensemble_changed`] or [`WriterState::on_ensemble_change_failed`].
    ChangeEnsemble {
        fragment_start: EntryId,
        failed: BTreeMap<usize, BookieId>,
    },
}

#[derive(Debug)]
struct PendingAdd {
    body: Bytes,
    /// Bookies that stored the entry (whatever their position was when they answered),
    /// each once: a write quorum's few, so a vector, not a tree allocated per add.
    acks: Vec<BookieId>,
    added_at: Instant,
    payload_len: u64,
}

/// The writer of one ledger.
#[derive(Debug)]
pub struct WriterState {
    ledger: LedgerId,
    quorum: QuorumConfig,
    ensemble: Vec<BookieId>,
    digest: DigestManager,
    /// Caller-chosen entry ids ("adv" ledger).
    adv: bool,
    pending: EntryQueue<PendingAdd>,
    lac: EntryId,
    /// Highest entry id handed out or added.
    last_added: EntryId,
    /// Cumulative length of every entry added (BookKeeper's `length` header field).
    length: u64,
    /// Payload bytes of the acknowledged entries: the length a close records.
    acked_length: u64,
    /// Ensemble positions whose bookie failed and is not yet replaced.
    failed: BTreeMap<usize, BookieId>,
    changing: bool,
    ensemble_changes: u32,
    max_ensemble_changes: u32,
    add_quorum_timeout: Option<Duration>,
    delay_ensemble_change: bool,
    error: Option<ClientError>,
    closing: bool,
    /// Negative control for tests only: acknowledge while an ensemble change is not yet
    /// in the metadata (BookKeeper issue 1591's bug).
    #[cfg(test)]
    pub(crate) unsafe_ack_during_change: bool,
}

/// Settings of a [`WriterState`].
#[derive(Debug, Clone)]
pub struct WriterSettings {
    pub adv: bool,
    pub max_ensemble_changes: u32,
    pub add_quorum_timeout: Option<Duration>,
    /// BookKeeper's `delayEnsembleChange`: keep writing to the surviving bookies while
    /// every pending entry can still reach its ack quorum; change the ensemble only when
    /// one cannot. Entries acknowledged meanwhile have `Qa` copies in the ensemble the
    /// metadata records (fewer than `Qw`).
    pub delay_ensemble_change: bool,
}

impl WriterState {
    /// A writer of a ledger whose LAC is `lac` (-1 for a new ledger) and whose entries up
    /// to it total `length` bytes, writing to `ensemble`.
    pub fn new(
        ledger: LedgerId,
        quorum: QuorumConfig,
        ensemble: Vec<BookieId>,
        digest: DigestManager,
        settings: WriterSettings,
    ) -> Self {
        assert_eq!(ensemble.len(), quorum.ensemble_size, "ensemble size");
        WriterState {
            ledger,
            quorum,
            ensemble,
            digest,
            adv: settings.adv,
            pending: EntryQueue::default(),
            lac: -1,
            last_added: -1,
            length: 0,
            acked_length: 0,
            failed: BTreeMap::new(),
            changing: false,
            ensemble_changes: 0,
            max_ensemble_changes: settings.max_ensemble_changes,
            add_quorum_timeout: settings.add_quorum_timeout,
            delay_ensemble_change: settings.delay_ensemble_change,
            error: None,
            closing: false,
            #[cfg(test)]
            unsafe_ack_during_change: false,
        }
    }

    pub fn ledger_id(&self) -> LedgerId {
        self.ledger
    }

    /// The last add confirmed: every entry up to it is acknowledged.
    pub fn lac(&self) -> EntryId {
        self.lac
    }

    /// Payload bytes of the acknowledged entries (what a close records as the length).
    pub fn acked_length(&self) -> u64 {
        self.acked_length
    }

    pub fn ensemble(&self) -> &[BookieId] {
        &self.ensemble
    }

    /// The error that stopped the writer, if any.
    pub fn error(&self) -> Option<&ClientError> {
        self.error.as_ref()
    }

    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    pub fn is_changing_ensemble(&self) -> bool {
        self.changing
    }

    /// No more appends are accepted; pending ones still complete.
    pub fn start_closing(&mut self) {
        self.closing = true;
    }

    /// Adds an entry. `entry` must be `None` for ordinary ledgers (the next id is
    /// assigned) and `Some(id)` for adv ledgers. Returns the entry id and the sends.
    pub fn add(
        &mut self,
        entry: Option<EntryId>,
        payload: &[u8],
        now: Instant,
    ) -> Result<(EntryId, Vec<WriterAction>), ClientError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.closing {
            return Err(ClientError::LedgerClosed {
                ledger: self.ledger,
            });
        }
        let id = match (self.adv, entry) {
            (false, None) => self.last_added + 1,
            (true, Some(id)) => {
                if id < 0 {
                    return Err(ClientError::InvalidArgument(format!(
                        "entry id {id} of ledger {} is negative",
                        self.ledger
                    )));
                }
                if id <= self.lac || self.pending.contains_key(&id) {
                    return Err(ClientError::DuplicateEntry {
                        ledger: self.ledger,
                        entry: id,
                    });
                }
                id
            }
            (false, Some(id)) => {
                return Err(ClientError::InvalidArgument(format!(
                    "ledger {} assigns entry ids itself; entry id {id} given (only adv ledgers take ids)",
                    self.ledger
                )));
            }
            (true, None) => {
                return Err(ClientError::InvalidArgument(format!(
                    "ledger {} is an adv ledger: every append needs an entry id",
                    self.ledger
                )));
            }
        };
        self.last_added = self.last_added.max(id);
        self.length += payload.len() as u64;
        let body = self
            .digest
            .compute(id, self.lac, self.length as i64, payload);
        let mut actions = Vec::new();
        for p in self.quorum.write_positions(id) {
            // A failed position gets the entry from its replacement's resend.
            if !self.failed.contains_key(&p) {
                actions.push(WriterAction::SendAdd {
                    entry: id,
                    bookie: self.ensemble[p].clone(),
                    body: body.clone(),
                });
            }
        }
        self.pending.insert(
            id,
            PendingAdd {
                body,
                acks: Vec::new(),
                added_at: now,
                payload_len: payload.len() as u64,
            },
        );
        // With a delayed ensemble change, this entry may be the first that cannot reach
        // its ack quorum on the surviving bookies.
        self.maybe_start_change(&mut actions);
        Ok((id, actions))
    }

    /// A bookie answered an add.
    pub fn on_add_response(
        &mut self,
        entry: EntryId,
        bookie: &BookieId,
        outcome: AddOutcome,
    ) -> Vec<WriterAction> {
        let mut actions = Vec::new();
        if self.error.is_some() || !self.pending.contains_key(&entry) {
            return actions;
        }
        match outcome {
            AddOutcome::Ok => {
                if let Some(p) = self.pending.get_mut(&entry)
                    && !p.acks.contains(bookie)
                {
                    p.acks.push(bookie.clone());
                }
                self.drain(&mut actions);
            }
            AddOutcome::Fenced => self.fail_all(
                ClientError::Fenced {
                    ledger: self.ledger,
                },
                &mut actions,
            ),
            AddOutcome::Unauthorized => self.fail_all(
                ClientError::Unauthorized {
                    ledger: self.ledger,
                    bookie: Some(bookie.clone()),
                },
                &mut actions,
            ),
            AddOutcome::Failed(_) => {
                // Only a bookie that still holds a position of this entry's write set matters;
                // an answer from a replaced bookie is stale.
                let position = self
                    .quorum
                    .write_set(entry)
                    .into_iter()
                    .find(|&p| &self.ensemble[p] == bookie);
                if let Some(p) = position {
                    self.failed.entry(p).or_insert_with(|| bookie.clone());
                    self.maybe_start_change(&mut actions);
                }
            }
        }
        actions
    }

    /// The ensemble change asked for was written to the metadata: `new_ensemble` is the
    /// ensemble of the fragment starting at the `fragment_start` it was asked for.
    pub fn on_ensemble_changed(&mut self, new_ensemble: Vec<BookieId>) -> Vec<WriterAction> {
        let mut actions = Vec::new();
        self.changing = false;
        if self.error.is_some() {
            return actions;
        }
        assert_eq!(new_ensemble.len(), self.ensemble.len(), "ensemble size");
        let replaced: Vec<usize> = (0..self.ensemble.len())
            .filter(|&p| self.ensemble[p] != new_ensemble[p])
            .collect();
        self.ensemble = new_ensemble;
        // Failures reported during the change for positions that were not replaced wait
        // for the next change.
        let ensemble = &self.ensemble;
        self.failed.retain(|p, b| &ensemble[*p] == b);
        for (entry, add) in self.pending.iter() {
            for p in self.quorum.write_set(entry) {
                if replaced.contains(&p)
                    && !self.failed.contains_key(&p)
                    && !add.acks.contains(&self.ensemble[p])
                {
                    actions.push(WriterAction::SendAdd {
                        entry,
                        bookie: self.ensemble[p].clone(),
                        body: add.body.clone(),
                    });
                }
            }
        }
        self.drain(&mut actions);
        self.maybe_start_change(&mut actions);
        actions
    }

    /// The ensemble change could not be made (no replacement bookie, metadata changed by
    /// someone else, metadata store failure): the writer stops.
    pub fn on_ensemble_change_failed(&mut self, error: ClientError) -> Vec<WriterAction> {
        let mut actions = Vec::new();
        self.changing = false;
        if self.error.is_none() {
            self.fail_all(error, &mut actions);
        }
        actions
    }

    /// Time passed: fails the writer if the oldest pending entry waited longer than the
    /// add-quorum timeout.
    pub fn on_tick(&mut self, now: Instant) -> Vec<WriterAction> {
        let mut actions = Vec::new();
        let Some(timeout) = self.add_quorum_timeout else {
            return actions;
        };
        if self.error.is_some() {
            return actions;
        }
        if let Some((entry, add)) = self.pending.first()
            && now.saturating_duration_since(add.added_at) >= timeout
        {
            let error = ClientError::Timeout {
                what: format!(
                    "ledger {} entry {entry} did not reach its ack quorum of {} within {:?}",
                    self.ledger, self.quorum.ack_quorum, timeout
                ),
            };
            self.fail_all(error, &mut actions);
        }
        actions
    }

    /// Stops the writer with `error` (e.g. the shell learnt the ledger was closed).
    pub fn fail(&mut self, error: ClientError) -> Vec<WriterAction> {
        let mut actions = Vec::new();
        if self.error.is_none() {
            self.fail_all(error, &mut actions);
        }
        actions
    }

    fn ack_count(&self, entry: EntryId, add: &PendingAdd) -> usize {
        self.quorum
            .write_positions(entry)
            .filter(|&p| add.acks.contains(&self.ensemble[p]))
            .count()
    }

    /// Acknowledges the contiguous prefix that reached its ack quorum.
    fn drain(&mut self, actions: &mut Vec<WriterAction>) {
        #[cfg(test)]
        let changing = self.changing && !self.unsafe_ack_during_change;
        #[cfg(not(test))]
        let changing = self.changing;
        if changing {
            return;
        }
        while let Some((entry, add)) = self.pending.first() {
            if entry != self.lac + 1 || self.ack_count(entry, add) < self.quorum.ack_quorum {
                break;
            }
            if let Some(add) = self.pending.remove(&entry) {
                self.acked_length += add.payload_len;
            }
            self.lac = entry;
            actions.push(WriterAction::Acked { entry });
        }
    }

    /// Whether the failed positions must be replaced now: always, unless the change is
    /// delayed and every pending entry can still reach its ack quorum without them.
    fn change_needed(&self) -> bool {
        !self.delay_ensemble_change
            || self.pending.keys().any(|e| {
                self.quorum
                    .write_set(e)
                    .into_iter()
                    .filter(|p| !self.failed.contains_key(p))
                    .count()
                    < self.quorum.ack_quorum
            })
    }

    fn maybe_start_change(&mut self, actions: &mut Vec<WriterAction>) {
        if self.changing || self.failed.is_empty() || self.error.is_some() || !self.change_needed()
        {
            return;
        }
        if self.ensemble_changes >= self.max_ensemble_changes {
            let error = ClientError::TooManyEnsembleChanges {
                ledger: self.ledger,
                limit: self.max_ensemble_changes,
            };
            self.fail_all(error, actions);
            return;
        }
        self.changing = true;
        self.ensemble_changes += 1;
        actions.push(WriterAction::ChangeEnsemble {
            fragment_start: self.lac + 1,
            failed: self.failed.clone(),
        });
    }

    fn fail_all(&mut self, error: ClientError, actions: &mut Vec<WriterAction>) {
        self.error = Some(error.clone());
        for (entry, _) in self.pending.drain() {
            actions.push(WriterAction::Failed {
                entry,
                error: error.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_proto::DigestType;

    fn b(i: usize) -> BookieId {
        BookieId::new(format!("b{i}:3181")).unwrap()
    }

    fn writer(e: usize, w: usize, a: usize) -> WriterState {
        writer_with(e, w, a, false)
    }

    fn writer_with(e: usize, w: usize, a: usize, adv: bool) -> WriterState {
        WriterState::new(
            1,
            QuorumConfig::new(e, w, a).unwrap(),
            (0..e).map(b).collect(),
            DigestManager::new(1, DigestType::Crc32c, b"pw"),
            WriterSettings {
                adv,
                max_ensemble_changes: 3,
                add_quorum_timeout: Some(Duration::from_secs(10)),
                delay_ensemble_change: false,
            },
        )
    }

    fn sends(actions: &[WriterAction]) -> Vec<(EntryId, BookieId)> {
        actions
            .iter()
            .filter_map(|a| match a {
                WriterAction::SendAdd { entry, bookie, .. } => Some((*entry, bookie.clone())),
                _ => None,
            })
            .collect()
    }

    fn acked(actions: &[WriterAction]) -> Vec<EntryId> {
        actions
            .iter()
            .filter_map(|a| match a {
                WriterAction::Acked { entry } => Some(*entry),
                _ => None,
            })
            .collect()
    }

    fn failed(actions: &[WriterAction]) -> Vec<EntryId> {
        actions
            .iter()
            .filter_map(|a| match a {
                WriterAction::Failed { entry, .. } => Some(*entry),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn entries_stripe_round_robin_and_carry_the_lac() {
        let mut w = writer(3, 2, 2);
        let now = Instant::now();
        let (e0, a0) = w.add(None, b"x", now).unwrap();
        assert_eq!(e0, 0);
        assert_eq!(sends(&a0), vec![(0, b(0)), (0, b(1))]);
        let (_, a1) = w.add(None, b"y", now).unwrap();
        assert_eq!(sends(&a1), vec![(1, b(1)), (1, b(2))]);
        let (_, a2) = w.add(None, b"z", now).unwrap();
        assert_eq!(sends(&a2), vec![(2, b(2)), (2, b(0))]);
        // The body is the entry with digest: entry id, the LAC at the time, cumulative length.
        let WriterAction::SendAdd { body, .. } = &a2[0] else {
            panic!()
        };
        let dm = DigestManager::new(1, DigestType::Crc32c, b"pw");
        let v = dm.verify(body, 2).unwrap();
        assert_eq!((v.lac, v.length, &v.payload[..]), (-1, 3, &b"z"[..]));
    }

    #[test]
    fn acknowledgements_are_delivered_in_entry_order() {
        let mut w = writer(3, 2, 2);
        let now = Instant::now();
        for _ in 0..3 {
            w.add(None, b"x", now).unwrap();
        }
        // Entry 1 and 2 complete first: nothing is acknowledged before entry 0.
        assert!(acked(&w.on_add_response(1, &b(1), AddOutcome::Ok)).is_empty());
        assert!(acked(&w.on_add_response(1, &b(2), AddOutcome::Ok)).is_empty());
        assert!(acked(&w.on_add_response(2, &b(2), AddOutcome::Ok)).is_empty());
        assert!(acked(&w.on_add_response(2, &b(0), AddOutcome::Ok)).is_empty());
        assert!(acked(&w.on_add_response(0, &b(0), AddOutcome::Ok)).is_empty());
        assert_eq!(w.lac(), -1);
        assert_eq!(
            acked(&w.on_add_response(0, &b(1), AddOutcome::Ok)),
            vec![0, 1, 2]
        );
        assert_eq!(w.lac(), 2);
        assert_eq!(w.acked_length(), 3);
        // The next entry piggybacks LAC 2.
        let (_, a) = w.add(None, b"x", now).unwrap();
        let WriterAction::SendAdd { body, .. } = &a[0] else {
            panic!()
        };
        assert_eq!(folio_proto::EntryHeader::peek(body).unwrap().lac, 2);
    }

    #[test]
    fn ack_quorum_smaller_than_write_quorum_acks_early_and_ignores_late_answers() {
        let mut w = writer(3, 3, 2);
        w.add(None, b"x", Instant::now()).unwrap();
        assert!(acked(&w.on_add_response(0, &b(2), AddOutcome::Ok)).is_empty());
        assert_eq!(acked(&w.on_add_response(0, &b(0), AddOutcome::Ok)), vec![0]);
        // A duplicate or late answer for an acknowledged entry changes nothing.
        assert!(w.on_add_response(0, &b(1), AddOutcome::Ok).is_empty());
        assert!(
            w.on_add_response(0, &b(1), AddOutcome::Failed("late".into()))
                .is_empty()
        );
        assert!(!w.is_changing_ensemble());
    }

    #[test]
    fn a_bookie_answering_twice_counts_once() {
        // A request sent again on a new connection can be answered twice by one bookie.
        let mut w = writer(3, 3, 2);
        w.add(None, b"x", Instant::now()).unwrap();
        assert!(acked(&w.on_add_response(0, &b(1), AddOutcome::Ok)).is_empty());
        assert!(
            acked(&w.on_add_response(0, &b(1), AddOutcome::Ok)).is_empty(),
            "one bookie twice is not an ack quorum of two"
        );
        assert_eq!(acked(&w.on_add_response(0, &b(2), AddOutcome::Ok)), vec![0]);
    }

    #[test]
    fn a_bookie_outside_the_write_set_does_not_count() {
        let mut w = writer(3, 2, 2);
        w.add(None, b"x", Instant::now()).unwrap(); // write set {0,1}
        w.on_add_response(0, &b(0), AddOutcome::Ok);
        assert!(acked(&w.on_add_response(0, &b(2), AddOutcome::Ok)).is_empty());
        assert!(acked(&w.on_add_response(0, &b(9), AddOutcome::Ok)).is_empty());
        assert_eq!(acked(&w.on_add_response(0, &b(1), AddOutcome::Ok)), vec![0]);
    }

    #[test]
    fn fenced_answer_fails_every_pending_and_future_append() {
        let mut w = writer(3, 2, 2);
        let now = Instant::now();
        for _ in 0..3 {
            w.add(None, b"x", now).unwrap();
        }
        w.on_add_response(0, &b(0), AddOutcome::Ok);
        w.on_add_response(0, &b(1), AddOutcome::Ok);
        let a = w.on_add_response(1, &b(1), AddOutcome::Fenced);
        assert_eq!(failed(&a), vec![1, 2]);
        assert!(matches!(
            &a[0],
            WriterAction::Failed {
                error: ClientError::Fenced { ledger: 1 },
                ..
            }
        ));
        assert_eq!(w.lac(), 0);
        assert!(w.add(None, b"x", now).unwrap_err().is_fenced());
        // Answers after the failure are ignored.
        assert!(w.on_add_response(1, &b(2), AddOutcome::Ok).is_empty());
    }

    #[test]
    fn unauthorized_answer_fails_the_writer_naming_the_bookie() {
        let mut w = writer(3, 2, 2);
        w.add(None, b"x", Instant::now()).unwrap();
        let a = w.on_add_response(0, &b(1), AddOutcome::Unauthorized);
        assert!(matches!(
            &a[0],
            WriterAction::Failed { error: ClientError::Unauthorized { bookie: Some(x), .. }, .. } if *x == b(1)
        ));
    }

    #[test]
    fn failure_triggers_an_ensemble_change_at_lac_plus_one_and_resends_pending_entries() {
        let mut w = writer(3, 2, 2);
        let now = Instant::now();
        for _ in 0..3 {
            w.add(None, b"x", now).unwrap();
        }
        w.on_add_response(0, &b(0), AddOutcome::Ok);
        assert_eq!(acked(&w.on_add_response(0, &b(1), AddOutcome::Ok)), vec![0]);
        // Bookie 2 fails entry 1 (write set {1,2}).
        let a = w.on_add_response(1, &b(2), AddOutcome::Failed("connection reset".into()));
        assert_eq!(
            a,
            vec![WriterAction::ChangeEnsemble {
                fragment_start: 1,
                failed: [(2, b(2))].into_iter().collect(),
            }]
        );
        // Entry 1 reaches two acks on the old ensemble... but bookie 2 failed it; entry 2
        // (write set {2,0}) gets b0. Nothing is acknowledged during the change.
        assert!(acked(&w.on_add_response(1, &b(1), AddOutcome::Ok)).is_empty());
        // New appends during the change skip the failed position.
        let (e3, a3) = w.add(None, b"x", now).unwrap(); // write set {0,1}
        assert_eq!(sends(&a3), vec![(e3, b(0)), (e3, b(1))]);
        let (e4, a4) = w.add(None, b"x", now).unwrap(); // write set {1,2}
        assert_eq!(sends(&a4), vec![(e4, b(1))]);
        let (e5, a5) = w.add(None, b"x", now).unwrap(); // write set {2,0}
        assert_eq!(sends(&a5), vec![(e5, b(0))]);
        // The change lands: entries 1, 2, 4, 5 (those with position 2) are resent to b3.
        let a = w.on_ensemble_changed(vec![b(0), b(1), b(3)]);
        assert_eq!(sends(&a), vec![(1, b(3)), (2, b(3)), (4, b(3)), (5, b(3))]);
        assert!(acked(&a).is_empty());
        assert_eq!(acked(&w.on_add_response(1, &b(3), AddOutcome::Ok)), vec![1]);
        // A late Ok from the replaced bookie does not count.
        w.on_add_response(2, &b(0), AddOutcome::Ok);
        assert!(acked(&w.on_add_response(2, &b(2), AddOutcome::Ok)).is_empty());
        assert_eq!(acked(&w.on_add_response(2, &b(3), AddOutcome::Ok)), vec![2]);
    }

    /// BookKeeper issue 1591: with Qw > Qa, an entry that reaches Qa during an ensemble
    /// change must wait until the change is in the metadata.
    #[test]
    fn nothing_is_acknowledged_while_the_ensemble_change_is_not_in_the_metadata() {
        let mut w = writer(3, 3, 2);
        let now = Instant::now();
        w.add(None, b"x", now).unwrap();
        let a = w.on_add_response(0, &b(0), AddOutcome::Failed("timeout".into()));
        assert!(matches!(
            a[0],
            WriterAction::ChangeEnsemble {
                fragment_start: 0,
                ..
            }
        ));
        w.on_add_response(0, &b(1), AddOutcome::Ok);
        assert!(acked(&w.on_add_response(0, &b(2), AddOutcome::Ok)).is_empty());
        assert_eq!(w.lac(), -1);
        // Once the metadata has the new ensemble {b3,b1,b2}, b1 and b2 still count.
        let a = w.on_ensemble_changed(vec![b(3), b(1), b(2)]);
        assert_eq!(acked(&a), vec![0]);
        assert_eq!(sends(&a), vec![(0, b(3))]);
    }

    #[test]
    fn failures_during_a_change_start_another_change_after_it() {
        let mut w = writer(4, 2, 2);
        let now = Instant::now();
        for _ in 0..4 {
            w.add(None, b"x", now).unwrap();
        }
        let a = w.on_add_response(0, &b(0), AddOutcome::Failed("x".into()));
        assert_eq!(a.len(), 1);
        // Second failure while changing: no second concurrent change.
        assert!(
            w.on_add_response(2, &b(2), AddOutcome::Failed("x".into()))
                .is_empty()
        );
        let a = w.on_ensemble_changed(vec![b(5), b(1), b(2), b(3)]);
        assert!(a.contains(&WriterAction::ChangeEnsemble {
            fragment_start: 0,
            failed: [(2, b(2))].into_iter().collect()
        }));
        // Entries with position 0: 0 (ws {0,1}) and 3 (ws {3,0}).
        assert_eq!(sends(&a), vec![(0, b(5)), (3, b(5))]);
    }

    #[test]
    fn the_number_of_ensemble_changes_is_bounded() {
        let mut w = writer(3, 2, 2);
        let now = Instant::now();
        w.add(None, b"x", now).unwrap();
        for next in 3..6 {
            let bad = w.ensemble()[0].clone();
            let a = w.on_add_response(0, &bad, AddOutcome::Failed("x".into()));
            assert!(matches!(a[0], WriterAction::ChangeEnsemble { .. }));
            let mut e = w.ensemble().to_vec();
            e[0] = b(next);
            w.on_ensemble_changed(e);
        }
        let bad = w.ensemble()[0].clone();
        let a = w.on_add_response(0, &bad, AddOutcome::Failed("x".into()));
        assert!(matches!(
            &a[0],
            WriterAction::Failed {
                error: ClientError::TooManyEnsembleChanges { limit: 3, .. },
                ..
            }
        ));
    }

    #[test]
    fn failed_ensemble_change_fails_the_writer() {
        let mut w = writer(3, 2, 2);
        w.add(None, b"x", Instant::now()).unwrap();
        w.on_add_response(0, &b(0), AddOutcome::Failed("x".into()));
        let a = w.on_ensemble_change_failed(ClientError::NotEnoughBookies {
            need: 3,
            have: 2,
            read_only: 0,
        });
        assert_eq!(failed(&a), vec![0]);
        assert_eq!(
            w.add(None, b"x", Instant::now()).unwrap_err(),
            ClientError::NotEnoughBookies {
                need: 3,
                have: 2,
                read_only: 0
            }
        );
    }

    #[test]
    fn add_quorum_timeout_fails_the_writer() {
        let mut w = writer(3, 2, 2);
        let t0 = Instant::now();
        w.add(None, b"x", t0).unwrap();
        w.on_add_response(0, &b(0), AddOutcome::Ok);
        assert!(w.on_tick(t0 + Duration::from_secs(9)).is_empty());
        let a = w.on_tick(t0 + Duration::from_secs(10));
        assert!(
            matches!(&a[0], WriterAction::Failed { entry: 0, error: ClientError::Timeout { what } } if what.contains("entry 0"))
        );
    }

    #[test]
    fn adv_ledger_lac_advances_over_the_contiguous_prefix_only() {
        let mut w = writer_with(3, 3, 3, true);
        let now = Instant::now();
        for id in [2, 0, 3] {
            w.add(Some(id), b"x", now).unwrap();
        }
        for id in [2, 0, 3] {
            for i in 0..3 {
                w.on_add_response(id, &b(i), AddOutcome::Ok);
            }
        }
        assert_eq!(w.lac(), 0, "entry 1 is missing");
        w.add(Some(1), b"x", now).unwrap();
        let mut got = Vec::new();
        for i in 0..3 {
            got.extend(acked(&w.on_add_response(1, &b(i), AddOutcome::Ok)));
        }
        assert_eq!(got, vec![1, 2, 3]);
        assert_eq!(w.lac(), 3);
        assert!(matches!(
            w.add(Some(2), b"x", now),
            Err(ClientError::DuplicateEntry { entry: 2, .. })
        ));
        assert!(matches!(
            w.add(None, b"x", now),
            Err(ClientError::InvalidArgument(_))
        ));
        assert!(matches!(
            w.add(Some(-4), b"x", now),
            Err(ClientError::InvalidArgument(_))
        ));
    }

    #[test]
    fn delayed_ensemble_change_waits_until_an_entry_cannot_reach_its_ack_quorum() {
        let mut w = writer(3, 3, 2);
        w.delay_ensemble_change = true;
        let now = Instant::now();
        w.add(None, b"x", now).unwrap();
        // Bookie 2 fails: entry 0 can still reach Qa = 2 on b0 and b1.
        assert!(
            w.on_add_response(0, &b(2), AddOutcome::Failed("x".into()))
                .is_empty()
        );
        w.on_add_response(0, &b(0), AddOutcome::Ok);
        assert_eq!(acked(&w.on_add_response(0, &b(1), AddOutcome::Ok)), vec![0]);
        // Entry 1 goes to the survivors only.
        let (_, a) = w.add(None, b"x", now).unwrap();
        assert_eq!(sends(&a), vec![(1, b(1)), (1, b(0))]);
        // A second failure leaves entry 1 one bookie short: now the ensemble changes,
        // from the LAC + 1, replacing both.
        let a = w.on_add_response(1, &b(1), AddOutcome::Failed("x".into()));
        assert_eq!(
            a,
            vec![WriterAction::ChangeEnsemble {
                fragment_start: 1,
                failed: [(1, b(1)), (2, b(2))].into_iter().collect(),
            }]
        );
        let a = w.on_ensemble_changed(vec![b(0), b(3), b(4)]);
        assert_eq!(sends(&a), vec![(1, b(3)), (1, b(4))]);
    }

    #[test]
    fn closing_refuses_new_appends() {
        let mut w = writer(3, 2, 2);
        w.start_closing();
        assert_eq!(
            w.add(None, b"x", Instant::now()).unwrap_err(),
            ClientError::LedgerClosed { ledger: 1 }
        );
        assert!(matches!(
            writer(3, 2, 2).add(Some(3), b"x", Instant::now()),
            Err(ClientError::InvalidArgument(_))
        ));
    }
}
