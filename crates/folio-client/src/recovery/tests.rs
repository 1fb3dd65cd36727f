//! Recovery state machine tests: the decisions one by one, the scripted interleavings of
//! BookKeeper issues 2614 and 2615, and a seeded message-bag simulation of the real
//! writer and recovery state machines against model bookies and a model metadata store:
//! messages delayed, reordered and lost, adds and write-backs failing, ensemble changes
//! applied when their (delayed) metadata write arrives, two recoveries racing the writer.
//! It checks the TLA+ invariants: no acknowledged entry beyond the sealed end, and every
//! entry of the closed ledger on `Qa` bookies of the ensemble the metadata records.
//! Negative controls show the checks can fail: recovery reads that do not fence (2614),
//! and a writer acknowledging during an ensemble change (1591).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use folio_proto::{DigestType, EntryHeader};

use super::*;
use crate::pending::{AddOutcome, WriterAction, WriterSettings, WriterState};

fn b(i: usize) -> BookieId {
    BookieId::new(format!("b{i}:3181")).unwrap()
}

fn dm() -> DigestManager {
    DigestManager::new(1, DigestType::Crc32c, b"pw")
}

fn start(e: usize, w: usize, a: usize, fragment_start: EntryId) -> (Recovery, Vec<RecoveryAction>) {
    Recovery::start(
        1,
        QuorumConfig::new(e, w, a).unwrap(),
        fragment_start,
        (0..e).map(b).collect(),
        dm(),
    )
}

fn reads(actions: &[RecoveryAction]) -> Vec<(EntryId, usize)> {
    actions
        .iter()
        .filter_map(|a| match a {
            RecoveryAction::RecoveryRead {
                entry, position, ..
            } => Some((*entry, *position)),
            _ => None,
        })
        .collect()
}

fn entry(payload: &[u8], length: u64) -> ReadAnswer {
    ReadAnswer::Entry {
        payload: Bytes::copy_from_slice(payload),
        length,
    }
}

#[test]
fn fencing_waits_for_coverage_of_every_ack_quorum() {
    let (mut r, a) = start(3, 2, 2, 0);
    assert_eq!(a.len(), 3);
    // One fenced bookie does not cover the write set of the other two.
    assert!(r.on_fence_answer(1, FenceAnswer::Empty).is_empty());
    assert!(
        r.on_fence_answer(2, FenceAnswer::Error("timeout".into()))
            .is_empty()
    );
    let a = r.on_fence_answer(0, FenceAnswer::Empty);
    assert_eq!(reads(&a), vec![(0, 0), (0, 1)]);
}

#[test]
fn fencing_fails_when_answers_run_out_without_coverage() {
    let (mut r, _) = start(3, 2, 2, 0);
    r.on_fence_answer(0, FenceAnswer::Error("refused".into()));
    r.on_fence_answer(1, FenceAnswer::Empty);
    let a = r.on_fence_answer(2, FenceAnswer::Error("refused".into()));
    assert!(
        matches!(&a[..], [RecoveryAction::Fail(ClientError::RecoveryFailed { reason, .. })] if reason.contains("1 of 3"))
    );
    assert!(r.is_done());
}

#[test]
fn reading_starts_after_the_highest_lac_and_write_backs_carry_it() {
    let (mut r, _) = start(3, 2, 2, 0);
    r.on_fence_answer(
        0,
        FenceAnswer::LastEntry {
            entry: 6,
            lac: 5,
            length: 70,
        },
    );
    let a = r.on_fence_answer(
        1,
        FenceAnswer::LastEntry {
            entry: 7,
            lac: 6,
            length: 80,
        },
    );
    assert_eq!(reads(&a), vec![(7, 1), (7, 2)]);
    assert_eq!(r.frozen_lac(), 6);
    let a = r.on_read_answer(7, 2, entry(b"seven", 80));
    // Write back to the whole write set with the recovery LAC, then read the next entry.
    let wbs: Vec<_> = a
        .iter()
        .filter_map(|x| match x {
            RecoveryAction::WriteBack {
                entry,
                position,
                body,
                ..
            } => Some((*entry, *position, body.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(wbs.len(), 2);
    let v = dm().verify(&wbs[0].2, 7).unwrap();
    assert_eq!((v.lac, v.length, &v.payload[..]), (6, 80, &b"seven"[..]));
    assert_eq!(reads(&a), vec![(8, 2), (8, 0)]);
    // Entry 8 is absent (Qw - Qa + 1 = 1 negative), but the ledger closes only after the
    // write-back of 7 reached Qa.
    assert!(r.on_read_answer(8, 0, ReadAnswer::NoEntry).is_empty());
    assert!(r.on_write_answer(7, &b(1), WriteAnswer::Ok).is_empty());
    let a = r.on_write_answer(7, &b(2), WriteAnswer::Ok);
    assert_eq!(
        a,
        vec![RecoveryAction::Close {
            last_entry: 7,
            length: 80
        }]
    );
}

#[test]
fn an_error_or_timeout_is_never_a_negative() {
    let (mut r, _) = start(3, 3, 2, 0);
    r.on_fence_answer(0, FenceAnswer::Empty);
    r.on_fence_answer(1, FenceAnswer::Empty);
    assert!(r.on_read_answer(0, 0, ReadAnswer::NoEntry).is_empty());
    assert!(
        r.on_read_answer(0, 1, ReadAnswer::Error("timeout".into()))
            .is_empty()
    );
    let a = r.on_read_answer(0, 2, ReadAnswer::Error("EIO".into()));
    assert!(
        matches!(&a[..], [RecoveryAction::Fail(ClientError::RecoveryFailed { reason, .. })]
        if reason.contains("entry 0") && reason.contains("1 NoSuchEntry answers of the 2 needed"))
    );
}

#[test]
fn a_duplicate_answer_is_not_a_second_negative() {
    let (mut r, _) = start(3, 3, 2, 0);
    r.on_fence_answer(0, FenceAnswer::Empty);
    r.on_fence_answer(1, FenceAnswer::Empty);
    assert!(r.on_read_answer(0, 0, ReadAnswer::NoEntry).is_empty());
    assert!(r.on_read_answer(0, 0, ReadAnswer::NoEntry).is_empty());
    // An answer for an entry that is not being read is ignored too.
    assert!(r.on_read_answer(5, 1, ReadAnswer::NoEntry).is_empty());
    let a = r.on_read_answer(0, 1, ReadAnswer::NoEntry);
    assert_eq!(
        a,
        vec![RecoveryAction::Close {
            last_entry: -1,
            length: 0
        }]
    );
}

#[test]
fn one_copy_recovers_an_entry_even_after_negatives() {
    let (mut r, _) = start(3, 3, 2, 0);
    r.on_fence_answer(0, FenceAnswer::Empty);
    r.on_fence_answer(2, FenceAnswer::Empty);
    r.on_read_answer(0, 0, ReadAnswer::NoEntry);
    let a = r.on_read_answer(0, 1, entry(b"x", 1));
    assert_eq!(
        a.len(),
        3 + 3,
        "three write-backs and three reads of entry 1"
    );
}

fn write_backs(actions: &[RecoveryAction]) -> Vec<(EntryId, BookieId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            RecoveryAction::WriteBack { entry, bookie, .. } => Some((*entry, bookie.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_failed_write_back_changes_the_ensemble_from_the_first_pending_entry() {
    // Last fragment starts at 10 on b0 b1 b2; nothing above 9 is confirmed.
    let (mut r, _) = start(3, 2, 2, 10);
    r.on_fence_answer(0, FenceAnswer::Empty);
    r.on_fence_answer(1, FenceAnswer::Empty);
    let a = r.on_read_answer(10, 1, entry(b"ten", 3));
    assert_eq!(write_backs(&a), vec![(10, b(1)), (10, b(2))]);
    let a = r.on_read_answer(11, 2, entry(b"eleven", 9));
    assert_eq!(write_backs(&a), vec![(11, b(2)), (11, b(0))]);
    assert!(r.on_read_answer(12, 0, ReadAnswer::NoEntry).is_empty());
    r.on_write_answer(10, &b(1), WriteAnswer::Ok);
    r.on_write_answer(11, &b(0), WriteAnswer::Ok);
    r.on_write_answer(11, &b(2), WriteAnswer::Ok);
    // Entry 11 has its quorum but waits for 10 (in order).
    let a = r.on_write_answer(10, &b(2), WriteAnswer::Error("EIO".into()));
    assert_eq!(
        a,
        vec![RecoveryAction::ChangeEnsemble {
            fragment_start: 10,
            failed: [(2, b(2))].into_iter().collect(),
        }]
    );
    // b2's acknowledgement of 11 no longer counts once b2 is replaced.
    let a = r.on_ensemble_changed(vec![b(0), b(1), b(3)]);
    assert_eq!(write_backs(&a), vec![(10, b(3)), (11, b(3))]);
    assert!(r.on_write_answer(10, &b(3), WriteAnswer::Ok).is_empty());
    let a = r.on_write_answer(11, &b(3), WriteAnswer::Ok);
    assert_eq!(
        a,
        vec![RecoveryAction::Close {
            last_entry: 11,
            length: 9
        }]
    );
}

/// Simulator seed 93: a first recovery replaced b2 by b3 in a write-back fragment at 10
/// and then failed. A second recovery must fence and read the writer's fragment (b0 b1
/// b2), not the last one: b3 holds only what was written back, and its NoSuchEntry for
/// entry 11 (one negative proves absence with Qw - Qa + 1 = 1) truncated acknowledged
/// entries.
#[test]
fn a_later_recovery_reads_the_writers_fragment_not_a_write_back_fragment() {
    // Writer's fragment starts at 0 on b0 b1 b2; the earlier recovery's fragment at 10
    // is b0 b1 b3.
    let (mut r, fences) = start(3, 2, 2, 0);
    r.set_write_fragment(10, vec![b(0), b(1), b(3)]);
    let fenced: Vec<BookieId> = fences
        .iter()
        .filter_map(|a| match a {
            RecoveryAction::FenceRead { bookie, .. } => Some(bookie.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(fenced, vec![b(0), b(1), b(2)]);
    r.on_fence_answer(
        0,
        FenceAnswer::LastEntry {
            entry: 11,
            lac: 9,
            length: 9,
        },
    );
    let a = r.on_fence_answer(1, FenceAnswer::Empty);
    assert_eq!(reads(&a), vec![(10, 1), (10, 2)]);
    let read_bookies: Vec<BookieId> = a
        .iter()
        .filter_map(|x| match x {
            RecoveryAction::RecoveryRead { bookie, .. } => Some(bookie.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        read_bookies,
        vec![b(1), b(2)],
        "reads go to the writer's b2"
    );
    // Entry 10 is found; it is written back to the last fragment (b1, b3).
    let a = r.on_read_answer(10, 2, entry(b"ten", 3));
    assert_eq!(write_backs(&a), vec![(10, b(1)), (10, b(3))]);
    let read_bookies: Vec<BookieId> = a
        .iter()
        .filter_map(|x| match x {
            RecoveryAction::RecoveryRead { bookie, .. } => Some(bookie.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(read_bookies, vec![b(2), b(0)]);
    // Entry 11 is on the writer's b2 and b0: found, not declared absent.
    let a = r.on_read_answer(11, 2, entry(b"eleven", 9));
    assert_eq!(write_backs(&a), vec![(11, b(3)), (11, b(0))]);
    r.on_read_answer(12, 0, ReadAnswer::NoEntry);
    for (e, bk) in [(10, b(1)), (10, b(3)), (11, b(3))] {
        assert!(r.on_write_answer(e, &bk, WriteAnswer::Ok).is_empty());
    }
    assert_eq!(
        r.on_write_answer(11, &b(0), WriteAnswer::Ok),
        vec![RecoveryAction::Close {
            last_entry: 11,
            length: 9
        }]
    );
}

#[test]
fn a_failed_write_back_ensemble_change_fails_recovery() {
    let (mut r, _) = start(3, 3, 2, 0);
    r.on_fence_answer(0, FenceAnswer::Empty);
    r.on_fence_answer(1, FenceAnswer::Empty);
    r.on_read_answer(0, 0, entry(b"x", 1));
    r.on_write_answer(0, &b(0), WriteAnswer::Ok);
    let a = r.on_write_answer(0, &b(1), WriteAnswer::Error("EIO".into()));
    assert!(matches!(
        a[..],
        [RecoveryAction::ChangeEnsemble {
            fragment_start: 0,
            ..
        }]
    ));
    // A second failure during the change waits for it.
    assert!(
        r.on_write_answer(0, &b(2), WriteAnswer::Error("EIO".into()))
            .is_empty()
    );
    let a = r.on_ensemble_change_failed(ClientError::NotEnoughBookies {
        need: 3,
        have: 1,
        read_only: 0,
    });
    assert_eq!(
        a,
        vec![RecoveryAction::Fail(ClientError::NotEnoughBookies {
            need: 3,
            have: 1,
            read_only: 0
        })]
    );
    assert!(r.is_done());
}

#[test]
fn unauthorized_fails_recovery_naming_the_bookie() {
    let (mut r, _) = start(3, 2, 2, 0);
    let a = r.on_fence_answer(2, FenceAnswer::Unauthorized);
    assert_eq!(
        a,
        vec![RecoveryAction::Fail(ClientError::Unauthorized {
            ledger: 1,
            bookie: Some(b(2))
        })]
    );
}

#[test]
fn empty_ledger_closes_at_minus_one() {
    let (mut r, _) = start(3, 2, 2, 0);
    r.on_fence_answer(0, FenceAnswer::Empty);
    let a = r.on_fence_answer(1, FenceAnswer::Empty);
    assert_eq!(reads(&a), vec![(0, 0), (0, 1)]);
    let a = r.on_read_answer(0, 1, ReadAnswer::NoEntry);
    assert_eq!(
        a,
        vec![RecoveryAction::Close {
            last_entry: -1,
            length: 0
        }]
    );
}

/// Simulator seed 1659: an earlier recovery wrote entries up to 32 back to an ack quorum,
/// added a write-back fragment at 33 (b2 replaced by b3) and stopped; the writer's b1 is
/// then gone for good. The fenced bookies still carry LAC 30. Reading from 31 wrote 31 and
/// 32 back to write sets before the last fragment, where b1 cannot be replaced, so every
/// recovery failed. Reading starts at the last fragment instead, as BookKeeper's
/// max(LAC, first entry of the last ensemble - 1).
#[test]
fn a_later_recovery_starts_at_an_earlier_recoverys_write_back_fragment() {
    let (mut r, _) = start(3, 3, 3, 0);
    r.set_write_fragment(33, vec![b(0), b(1), b(3)]);
    r.on_fence_answer(1, FenceAnswer::Error("connection refused".into()));
    let a = r.on_fence_answer(
        0,
        FenceAnswer::LastEntry {
            entry: 34,
            lac: 30,
            length: 99,
        },
    );
    assert_eq!(r.frozen_lac(), 32);
    assert_eq!(reads(&a), vec![(33, 0), (33, 1), (33, 2)]);
    assert!(r.on_fence_answer(2, FenceAnswer::Empty).is_empty());
    // Entry 33 goes back to the last fragment; b1's failure replaces it there.
    let a = r.on_read_answer(33, 0, entry(b"x", 60));
    assert_eq!(write_backs(&a), vec![(33, b(0)), (33, b(1)), (33, b(3))]);
    assert!(reads(&a).iter().all(|&(e, _)| e == 34));
    let a = r.on_read_answer(34, 2, entry(b"y", 99));
    assert_eq!(write_backs(&a), vec![(34, b(1)), (34, b(3)), (34, b(0))]);
    assert!(r.on_read_answer(35, 0, ReadAnswer::NoEntry).is_empty());
    let a = r.on_write_answer(33, &b(1), WriteAnswer::Error("gone".into()));
    assert_eq!(
        a,
        vec![RecoveryAction::ChangeEnsemble {
            fragment_start: 33,
            failed: [(1, b(1))].into_iter().collect(),
        }]
    );
    let a = r.on_ensemble_changed(vec![b(0), b(4), b(3)]);
    assert_eq!(write_backs(&a), vec![(33, b(4)), (34, b(4))]);
    for (e, bk) in [(33, b(0)), (33, b(3)), (33, b(4)), (34, b(0)), (34, b(3))] {
        assert!(r.on_write_answer(e, &bk, WriteAnswer::Ok).is_empty());
    }
    assert_eq!(
        r.on_write_answer(34, &b(4), WriteAnswer::Ok),
        vec![RecoveryAction::Close {
            last_entry: 34,
            length: 99
        }]
    );
}

/// Simulator seed 6753: an earlier recovery added a write-back fragment at 5 (b2 replaced
/// by b3) with the LAC it saw at 4, wrote back 5 and 6 and stopped. A later recovery sees
/// the writer's LAC 11 on the fenced bookies, but entries 5-11 are confirmed on the
/// writer's b2, not on b3 where the metadata puts them: skipping them closed the ledger
/// with single copies. Reading starts at the write-back fragment, whatever the LAC.
#[test]
fn a_later_recovery_rewrites_a_write_back_fragment_below_the_lac() {
    let (mut r, _) = start(3, 2, 2, 0);
    r.set_write_fragment(5, vec![b(0), b(1), b(3)]);
    r.on_fence_answer(
        0,
        FenceAnswer::LastEntry {
            entry: 12,
            lac: 11,
            length: 99,
        },
    );
    let a = r.on_fence_answer(1, FenceAnswer::Empty);
    assert_eq!(r.frozen_lac(), 11);
    assert_eq!(reads(&a), vec![(5, 2), (5, 0)]);
    let a = r.on_read_answer(5, 2, entry(b"five", 40));
    assert_eq!(write_backs(&a), vec![(5, b(3)), (5, b(0))]);
    assert_eq!(reads(&a), vec![(6, 0), (6, 1)]);
}

/// BookKeeper issue 2615: ensembles {0: b1 b2, 1000: b2 b3, 2000: b4 b5}; the bookies of
/// the last fragment hold nothing and answer "no entry" (LAC -1). Recovery must read from
/// entry 2000, never from entry 0, and write nothing outside the last fragment.
#[test]
fn issue_2615_recovery_covers_the_last_fragment_only() {
    let ensemble = vec![b(4), b(5)];
    let (mut r, a) = Recovery::start(1, QuorumConfig::new(2, 2, 2).unwrap(), 2000, ensemble, dm());
    assert!(
        a.iter()
            .all(|x| matches!(x, RecoveryAction::FenceRead { .. }))
    );
    // Qw = Qa: one fenced bookie per write set is enough.
    let a = r.on_fence_answer(0, FenceAnswer::Empty);
    assert_eq!(reads(&a), vec![(2000, 0), (2000, 1)]);
    assert_eq!(r.frozen_lac(), 1999);
    assert!(r.on_fence_answer(1, FenceAnswer::Empty).is_empty());
    // Qw - Qa + 1 = 1 negative proves 2000 absent. The last entry is 1999, confirmed in
    // the previous fragment; its length is read normally, nothing is written.
    let a = r.on_read_answer(2000, 1, ReadAnswer::NoEntry);
    assert_eq!(a, vec![RecoveryAction::ReadLength { entry: 1999 }]);
    let a = r.on_length(Ok(12345));
    assert_eq!(
        a,
        vec![RecoveryAction::Close {
            last_entry: 1999,
            length: 12345
        }]
    );
}

#[test]
fn last_entry_length_comes_from_a_fence_answer_when_nothing_is_recovered() {
    let (mut r, _) = start(3, 3, 2, 0);
    r.on_fence_answer(
        0,
        FenceAnswer::LastEntry {
            entry: 4,
            lac: 3,
            length: 50,
        },
    );
    r.on_fence_answer(
        1,
        FenceAnswer::LastEntry {
            entry: 5,
            lac: 4,
            length: 60,
        },
    );
    r.on_read_answer(5, 0, ReadAnswer::NoEntry);
    let a = r.on_read_answer(5, 2, ReadAnswer::NoEntry);
    assert_eq!(
        a,
        vec![RecoveryAction::Close {
            last_entry: 4,
            length: 50
        }]
    );
    // A failed length read fails recovery rather than closing with a wrong length.
    let (mut r, _) = start(2, 2, 2, 10);
    r.on_fence_answer(0, FenceAnswer::Empty);
    r.on_fence_answer(1, FenceAnswer::Empty);
    r.on_read_answer(10, 0, ReadAnswer::NoEntry);
    let a = r.on_length(Err(ClientError::NoSuchEntry {
        ledger: 1,
        entry: 9,
    }));
    assert!(matches!(&a[..], [RecoveryAction::Fail(_)]));
}

// ---------------------------------------------------------------------------------------
// A model of bookies and a message bag, to replay interleavings between a writer and
// recoveries. Bookies follow the bookie's rules: a fenced ledger refuses non-recovery adds;
// fence reads fence; recovery reads fence unless the negative control turns that off.

#[derive(Debug, Default, Clone)]
struct ModelBookie {
    fenced: bool,
    entries: BTreeMap<EntryId, Bytes>,
}

impl ModelBookie {
    fn add(&mut self, entry: EntryId, body: &Bytes, recovery: bool) -> AddOutcome {
        if self.fenced && !recovery {
            return AddOutcome::Fenced;
        }
        self.entries.insert(entry, body.clone());
        AddOutcome::Ok
    }

    fn fence_read(&mut self) -> FenceAnswer {
        self.fenced = true;
        match self.entries.iter().next_back() {
            None => FenceAnswer::Empty,
            Some((&e, body)) => {
                let h = EntryHeader::peek(body).unwrap();
                FenceAnswer::LastEntry {
                    entry: e,
                    lac: h.lac,
                    length: h.length as u64,
                }
            }
        }
    }

    fn recovery_read(&mut self, entry: EntryId, fence: bool) -> ReadAnswer {
        if fence {
            self.fenced = true;
        }
        match self.entries.get(&entry) {
            None => ReadAnswer::NoEntry,
            Some(body) => {
                let v = dm().verify(body, entry).unwrap();
                ReadAnswer::Entry {
                    payload: v.payload,
                    length: v.length as u64,
                }
            }
        }
    }
}

/// Messages in flight. `who` is the recovery client index.
#[derive(Debug, Clone)]
enum Msg {
    Add {
        entry: EntryId,
        bookie: usize,
        body: Bytes,
    },
    AddReply {
        entry: EntryId,
        bookie: usize,
        outcome: AddOutcome,
    },
    Fence {
        who: usize,
        position: usize,
        bookie: usize,
    },
    FenceReply {
        who: usize,
        position: usize,
        bookie: usize,
        answer: FenceAnswer,
    },
    Read {
        who: usize,
        entry: EntryId,
        position: usize,
        bookie: usize,
    },
    ReadReply {
        who: usize,
        entry: EntryId,
        position: usize,
        bookie: usize,
        answer: ReadAnswer,
    },
    WriteBack {
        who: usize,
        entry: EntryId,
        bookie: usize,
        body: Bytes,
    },
    WriteReply {
        who: usize,
        entry: EntryId,
        bookie: usize,
        answer: WriteAnswer,
    },
    /// The writer's ensemble change, applied to the metadata when delivered (a slow
    /// metadata store is a delayed message).
    MetaChange {
        fragment_start: EntryId,
        failed: BTreeMap<usize, BookieId>,
    },
    MetaChangeReply(Result<Vec<BookieId>, ClientError>),
    /// A recovery's write-back ensemble change (the ledger stays in recovery).
    RecoveryMetaChange {
        who: usize,
        fragment_start: EntryId,
        failed: BTreeMap<usize, BookieId>,
    },
    RecoveryMetaChangeReply {
        who: usize,
        reply: Result<Vec<BookieId>, ClientError>,
    },
}

/// The ledger's metadata record, changed atomically (as by CAS).
#[derive(Debug, Clone)]
struct ModelMeta {
    in_recovery: bool,
    closed: bool,
    ensembles: BTreeMap<EntryId, Vec<usize>>,
}

struct World {
    quorum: QuorumConfig,
    meta: ModelMeta,
    /// Bookies that failed an add (never chosen as replacements).
    failed_bookies: BTreeSet<usize>,
    bookies: Vec<ModelBookie>,
    recovery_reads_fence: bool,
    writer: WriterState,
    writer_acked: Vec<EntryId>,
    recoveries: Vec<Recovery>,
    /// The ensembles each recovery last saw in the metadata (its CAS expectation).
    recovery_views: Vec<BTreeMap<EntryId, Vec<usize>>>,
    /// Write-back ensemble changes recorded in the metadata.
    recovery_changes: usize,
    /// The metadata's last entry once closed (first close wins, as with CAS).
    closed: Option<EntryId>,
    closes: Vec<EntryId>,
    bag: Vec<Msg>,
}

fn idx(bk: &BookieId) -> usize {
    bk.as_str()[1..bk.as_str().find(':').unwrap()]
        .parse()
        .unwrap()
}

impl World {
    fn new(e: usize, w: usize, a: usize, recovery_reads_fence: bool) -> World {
        World::with_spares(e, w, a, recovery_reads_fence, 0, false)
    }

    fn with_spares(
        e: usize,
        w: usize,
        a: usize,
        recovery_reads_fence: bool,
        spares: usize,
        delay_ensemble_change: bool,
    ) -> World {
        World {
            quorum: QuorumConfig::new(e, w, a).unwrap(),
            meta: ModelMeta {
                in_recovery: false,
                closed: false,
                ensembles: [(0, (0..e).collect())].into_iter().collect(),
            },
            failed_bookies: BTreeSet::new(),
            bookies: vec![ModelBookie::default(); e + spares],
            recovery_reads_fence,
            writer: WriterState::new(
                1,
                QuorumConfig::new(e, w, a).unwrap(),
                (0..e).map(b).collect(),
                dm(),
                WriterSettings {
                    adv: false,
                    max_ensemble_changes: 100,
                    add_quorum_timeout: None,
                    delay_ensemble_change,
                },
            ),
            writer_acked: Vec::new(),
            recoveries: Vec::new(),
            recovery_views: Vec::new(),
            recovery_changes: 0,
            closed: None,
            closes: Vec::new(),
            bag: Vec::new(),
        }
    }

    fn writer_actions(&mut self, actions: Vec<WriterAction>) {
        for a in actions {
            match a {
                WriterAction::SendAdd {
                    entry,
                    bookie,
                    body,
                } => self.bag.push(Msg::Add {
                    entry,
                    bookie: idx(&bookie),
                    body,
                }),
                WriterAction::Acked { entry } => self.writer_acked.push(entry),
                WriterAction::ChangeEnsemble {
                    fragment_start,
                    failed,
                } => self.bag.push(Msg::MetaChange {
                    fragment_start,
                    failed,
                }),
                WriterAction::Failed { .. } => {}
            }
        }
    }

    fn append(&mut self) {
        if let Ok((_, actions)) = self.writer.add(None, b"payload", Instant::now()) {
            self.writer_actions(actions);
        }
    }

    fn start_recovery(&mut self) {
        if self.meta.closed {
            return;
        }
        // Step 1, atomically: the ledger is in recovery; the writer can no longer change
        // its ensemble.
        self.meta.in_recovery = true;
        let who = self.recoveries.len();
        self.recovery_views.push(self.meta.ensembles.clone());
        let (&start, ensemble) = self.meta.ensembles.iter().next_back().unwrap();
        let (r, actions) = Recovery::start(
            1,
            self.quorum,
            start,
            ensemble.iter().map(|&i| b(i)).collect(),
            dm(),
        );
        self.recoveries.push(r);
        self.recovery_actions(who, actions);
    }

    fn recovery_actions(&mut self, who: usize, actions: Vec<RecoveryAction>) {
        for a in actions {
            match a {
                RecoveryAction::FenceRead { position, bookie } => self.bag.push(Msg::Fence {
                    who,
                    position,
                    bookie: idx(&bookie),
                }),
                RecoveryAction::RecoveryRead {
                    entry,
                    position,
                    bookie,
                } => self.bag.push(Msg::Read {
                    who,
                    entry,
                    position,
                    bookie: idx(&bookie),
                }),
                RecoveryAction::WriteBack {
                    entry,
                    bookie,
                    body,
                    ..
                } => self.bag.push(Msg::WriteBack {
                    who,
                    entry,
                    bookie: idx(&bookie),
                    body,
                }),
                RecoveryAction::ReadLength { entry } => {
                    // A confirmed entry: any bookie holding it tells its length.
                    let len = self
                        .bookies
                        .iter()
                        .find_map(|bk| bk.entries.get(&entry))
                        .map(|body| EntryHeader::peek(body).unwrap().length as u64);
                    let more = self.recoveries[who]
                        .on_length(len.ok_or(ClientError::NoSuchEntry { ledger: 1, entry }));
                    self.recovery_actions(who, more);
                }
                RecoveryAction::Close { last_entry, .. } => {
                    self.closes.push(last_entry);
                    // The close CAS: a close by someone else is adopted; metadata changed
                    // by someone else (another recovery's fragment) is a conflict.
                    if !self.meta.closed && self.meta.ensembles == self.recovery_views[who] {
                        self.closed = Some(last_entry);
                        self.meta.closed = true;
                    }
                }
                RecoveryAction::ChangeEnsemble {
                    fragment_start,
                    failed,
                } => self.bag.push(Msg::RecoveryMetaChange {
                    who,
                    fragment_start,
                    failed,
                }),
                RecoveryAction::Fail(_) => {}
            }
        }
    }

    /// Replaces the failed positions of the last fragment with spare bookies in a fragment
    /// starting at `fragment_start`.
    fn apply_change(
        &mut self,
        fragment_start: EntryId,
        failed: &BTreeMap<usize, BookieId>,
    ) -> Result<Vec<BookieId>, ClientError> {
        let (_, current) = self.meta.ensembles.iter().next_back().unwrap();
        let mut next = current.clone();
        let mut spare = (0..self.bookies.len())
            .filter(|i| !current.contains(i) && !self.failed_bookies.contains(i));
        for &p in failed.keys() {
            next[p] = spare.next().ok_or(ClientError::NotEnoughBookies {
                need: 1,
                have: 0,
                read_only: 0,
            })?;
        }
        self.meta.ensembles.insert(fragment_start, next.clone());
        Ok(next.into_iter().map(b).collect())
    }

    /// Delivers message `i` of the bag.
    fn deliver(&mut self, i: usize) {
        let m = self.bag.remove(i);
        match m {
            Msg::Add {
                entry,
                bookie,
                body,
            } => {
                let outcome = self.bookies[bookie].add(entry, &body, false);
                self.bag.push(Msg::AddReply {
                    entry,
                    bookie,
                    outcome,
                });
            }
            Msg::AddReply {
                entry,
                bookie,
                outcome,
            } => {
                let a = self.writer.on_add_response(entry, &b(bookie), outcome);
                self.writer_actions(a);
            }
            Msg::Fence {
                who,
                position,
                bookie,
            } => {
                let answer = self.bookies[bookie].fence_read();
                self.bag.push(Msg::FenceReply {
                    who,
                    position,
                    bookie,
                    answer,
                });
            }
            Msg::FenceReply {
                who,
                position,
                answer,
                ..
            } => {
                let a = self.recoveries[who].on_fence_answer(position, answer);
                self.recovery_actions(who, a);
            }
            Msg::Read {
                who,
                entry,
                position,
                bookie,
            } => {
                let fence = self.recovery_reads_fence;
                let answer = self.bookies[bookie].recovery_read(entry, fence);
                self.bag.push(Msg::ReadReply {
                    who,
                    entry,
                    position,
                    bookie,
                    answer,
                });
            }
            Msg::ReadReply {
                who,
                entry,
                position,
                answer,
                ..
            } => {
                let a = self.recoveries[who].on_read_answer(entry, position, answer);
                self.recovery_actions(who, a);
            }
            Msg::MetaChange {
                fragment_start,
                failed,
            } => {
                let reply = if self.meta.in_recovery || self.meta.closed {
                    Err(ClientError::Fenced { ledger: 1 })
                } else {
                    self.apply_change(fragment_start, &failed)
                };
                self.bag.push(Msg::MetaChangeReply(reply));
            }
            Msg::RecoveryMetaChange {
                who,
                fragment_start,
                failed,
            } => {
                let reply = if self.meta.closed || self.meta.ensembles != self.recovery_views[who] {
                    Err(ClientError::MetadataConflict {
                        ledger: 1,
                        reason: "changed by someone else".into(),
                    })
                } else {
                    let r = self.apply_change(fragment_start, &failed);
                    self.recovery_views[who] = self.meta.ensembles.clone();
                    self.recovery_changes += r.is_ok() as usize;
                    r
                };
                self.bag.push(Msg::RecoveryMetaChangeReply { who, reply });
            }
            Msg::RecoveryMetaChangeReply { who, reply } => {
                let a = match reply {
                    Ok(ensemble) => self.recoveries[who].on_ensemble_changed(ensemble),
                    Err(e) => self.recoveries[who].on_ensemble_change_failed(e),
                };
                self.recovery_actions(who, a);
            }
            Msg::MetaChangeReply(reply) => {
                let a = match reply {
                    Ok(ensemble) => self.writer.on_ensemble_changed(ensemble),
                    Err(e) => self.writer.on_ensemble_change_failed(e),
                };
                self.writer_actions(a);
            }
            Msg::WriteBack {
                who,
                entry,
                bookie,
                body,
            } => {
                let answer = match self.bookies[bookie].add(entry, &body, true) {
                    AddOutcome::Ok => WriteAnswer::Ok,
                    other => WriteAnswer::Error(format!("{other:?}")),
                };
                self.bag.push(Msg::WriteReply {
                    who,
                    entry,
                    bookie,
                    answer,
                });
            }
            Msg::WriteReply {
                who,
                entry,
                bookie,
                answer,
            } => {
                let a = self.recoveries[who].on_write_answer(entry, &b(bookie), answer);
                self.recovery_actions(who, a);
            }
        }
    }

    /// Finds the first message matching `f` and delivers it.
    fn deliver_where(&mut self, f: impl Fn(&Msg) -> bool) {
        let i = self
            .bag
            .iter()
            .position(f)
            .expect("scripted message is in flight");
        self.deliver(i);
    }

    /// Drops the first message matching `f` (a lost message).
    fn lose_where(&mut self, f: impl Fn(&Msg) -> bool) {
        let i = self
            .bag
            .iter()
            .position(f)
            .expect("scripted message is in flight");
        self.bag.remove(i);
    }

    /// Entries of the closed ledger held by fewer than Qa bookies of their write set
    /// (TLA+ `AllCommittedEntriesReachAckQuorum`).
    fn under_replicated(&self) -> Vec<EntryId> {
        let Some(last) = self.closed else {
            return Vec::new();
        };
        (0..=last)
            .filter(|&e| {
                let (_, ensemble) = self.meta.ensembles.range(..=e).next_back().unwrap();
                self.quorum
                    .write_set(e)
                    .into_iter()
                    .filter(|&p| self.bookies[ensemble[p]].entries.contains_key(&e))
                    .count()
                    < self.quorum.ack_quorum
            })
            .collect()
    }

    /// The persistence property: no entry the writer acknowledged is beyond the sealed end.
    fn truncated(&self) -> Vec<EntryId> {
        match self.closed {
            None => Vec::new(),
            Some(last) => self
                .writer_acked
                .iter()
                .copied()
                .filter(|&e| e > last)
                .collect(),
        }
    }
}

/// The scripted interleaving of BookKeeper issue 2614 (found by the TLA+ model checker),
/// Qw = 3, Qa = 2, bookies b0..b2. Returns the world after the script.
fn issue_2614_script(recovery_reads_fence: bool) -> World {
    let mut w = World::new(3, 3, 2, recovery_reads_fence);
    w.append(); // w1 sends e0 to b0, b1, b2
    // w1's e0 to b0 is lost.
    w.lose_where(|m| matches!(m, Msg::Add { bookie: 0, .. }));
    // w2 marks the ledger in recovery (metadata, not modelled) and fences.
    w.start_recovery();
    // b0 is fenced and answers "no entry" (LAC -1).
    w.deliver_where(|m| matches!(m, Msg::Fence { bookie: 0, .. }));
    w.deliver_where(|m| matches!(m, Msg::FenceReply { bookie: 0, .. }));
    // w1's e0 reaches b1 and is acknowledged by it.
    w.deliver_where(|m| matches!(m, Msg::Add { bookie: 1, .. }));
    w.deliver_where(|m| matches!(m, Msg::AddReply { bookie: 1, .. }));
    // w2's fence reaches b1 (last entry e0, LAC -1): fencing is complete with b0, b1.
    w.deliver_where(|m| matches!(m, Msg::Fence { bookie: 1, .. }));
    w.deliver_where(|m| matches!(m, Msg::FenceReply { bookie: 1, .. }));
    // The fence to b2 is lost.
    w.lose_where(|m| matches!(m, Msg::Fence { bookie: 2, .. }));
    // Recovery reads e0: b0 and b2 answer NoSuchEntry (2 = Qw - Qa + 1 negatives).
    w.deliver_where(|m| matches!(m, Msg::Read { bookie: 0, .. }));
    w.deliver_where(|m| matches!(m, Msg::Read { bookie: 2, .. }));
    w.deliver_where(|m| matches!(m, Msg::ReadReply { bookie: 0, .. }));
    w.deliver_where(|m| matches!(m, Msg::ReadReply { bookie: 2, .. }));
    assert_eq!(w.closed, Some(-1), "w2 closes the ledger as empty");
    // w1's e0 now reaches b2.
    w.deliver_where(|m| matches!(m, Msg::Add { bookie: 2, .. }));
    w.deliver_where(|m| matches!(m, Msg::AddReply { bookie: 2, .. }));
    w
}

#[test]
fn issue_2614_recovery_reads_fence_so_the_late_add_is_refused() {
    let w = issue_2614_script(true);
    assert!(w.writer_acked.is_empty(), "e0 must not be acknowledged");
    assert!(w.writer.error().unwrap().is_fenced());
    assert!(w.truncated().is_empty());
}

/// Negative control: the same script with recovery reads that do not fence shows the
/// truncation the bug caused, so the test above can fail.
#[test]
fn issue_2614_negative_control_without_fencing_recovery_reads_truncates() {
    let w = issue_2614_script(false);
    assert_eq!(w.writer_acked, vec![0]);
    assert_eq!(w.truncated(), vec![0]);
}

/// A tiny deterministic generator (xorshift) so that every seed replays.
struct Xs(u64);

impl Xs {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Runs a writer and two recoveries with random delivery order and message loss.
/// Returns (truncated entries, distinct close decisions reached).
/// How a simulation run is shaped.
#[derive(Debug, Clone, Copy)]
struct SimConfig {
    e: usize,
    w: usize,
    a: usize,
    recovery_reads_fence: bool,
    loss_one_in: usize,
    recoveries: usize,
    /// Spare bookies for ensemble changes.
    spares: usize,
    /// An add is answered "failed" (a timeout) one time in this many; 0: never.
    fail_one_in: usize,
    delay_ensemble_change: bool,
    /// No recovery starts before this step.
    recovery_after: usize,
    /// Negative control: the writer acknowledges during ensemble changes (issue 1591).
    unsafe_ack_during_change: bool,
}

impl SimConfig {
    fn basic(
        e: usize,
        w: usize,
        a: usize,
        fence: bool,
        loss_one_in: usize,
        recoveries: usize,
    ) -> Self {
        SimConfig {
            e,
            w,
            a,
            recovery_reads_fence: fence,
            loss_one_in,
            recoveries,
            spares: 0,
            fail_one_in: 0,
            delay_ensemble_change: false,
            recovery_after: 0,
            unsafe_ack_during_change: false,
        }
    }
}

fn simulate(
    seed: u64,
    e: usize,
    w: usize,
    a: usize,
    fence: bool,
    loss_one_in: usize,
    recoveries: usize,
) -> (Vec<EntryId>, World) {
    simulate_with(
        seed,
        SimConfig::basic(e, w, a, fence, loss_one_in, recoveries),
    )
}

fn simulate_with(seed: u64, c: SimConfig) -> (Vec<EntryId>, World) {
    let SimConfig {
        e,
        w,
        a,
        recovery_reads_fence: fence,
        loss_one_in,
        recoveries,
        ..
    } = c;
    let mut rng = Xs(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut world = World::with_spares(e, w, a, fence, c.spares, c.delay_ensemble_change);
    world.writer.unsafe_ack_during_change = c.unsafe_ack_during_change;
    let mut appended = 0;
    let mut recoveries_started = 0;
    for step in 0..400 {
        let choice = rng.below(10);
        if choice == 0 && appended < 6 {
            world.append();
            appended += 1;
        } else if choice == 1
            && recoveries_started < recoveries
            && appended > 0
            && step >= c.recovery_after
        {
            world.start_recovery();
            recoveries_started += 1;
        } else if !world.bag.is_empty() {
            // Mostly the newest messages: older ones wait long, as behind a slow link.
            let n = world.bag.len();
            let i = if rng.below(3) == 0 {
                rng.below(n)
            } else {
                n - 1 - rng.below(n.min(2))
            };
            let fails = c.fail_one_in > 0
                && matches!(world.bag[i], Msg::Add { .. } | Msg::WriteBack { .. })
                && rng.below(c.fail_one_in) == 0;
            if fails && matches!(world.bag[i], Msg::WriteBack { .. }) {
                if let Msg::WriteBack {
                    who, entry, bookie, ..
                } = world.bag.remove(i)
                {
                    world.failed_bookies.insert(bookie);
                    world.bag.push(Msg::WriteReply {
                        who,
                        entry,
                        bookie,
                        answer: WriteAnswer::Error("timeout".into()),
                    });
                }
            } else if fails {
                // The bookie times out: the writer hears "failed" and replaces it.
                if let Msg::Add { entry, bookie, .. } = world.bag.remove(i) {
                    world.failed_bookies.insert(bookie);
                    world.bag.push(Msg::AddReply {
                        entry,
                        bookie,
                        outcome: AddOutcome::Failed("timeout".into()),
                    });
                }
            } else if rng.below(loss_one_in) == 0 {
                world.bag.remove(i); // lost
            } else {
                world.deliver(i);
            }
        }
    }
    // Let everything in flight arrive.
    while !world.bag.is_empty() {
        let i = rng.below(world.bag.len());
        world.deliver(i);
    }
    (world.truncated(), world)
}

#[test]
fn seeded_races_of_a_writer_and_two_recoveries_never_truncate() {
    for (e, w, a) in [(3, 3, 2), (3, 2, 2), (4, 3, 2), (5, 3, 1)] {
        let mut closed_runs = 0;
        for seed in 0..1000 {
            let (truncated, world) = simulate(seed, e, w, a, true, 12, 2);
            assert!(
                truncated.is_empty(),
                "E={e} Qw={w} Qa={a} seed {seed}: acknowledged entries {truncated:?} beyond the end {:?}",
                world.closed
            );
            assert!(
                world.under_replicated().is_empty(),
                "E={e} Qw={w} Qa={a} seed {seed}: entries {:?} of the closed ledger are below Qa",
                world.under_replicated()
            );
            if world.closed.is_some() {
                closed_runs += 1;
            }
        }
        assert!(
            closed_runs > 50,
            "the simulation must reach closes ({closed_runs})"
        );
    }
}

/// Negative control of the simulation: with recovery reads that do not fence, some seed
/// finds the 2614 truncation, so the check above can fail.
#[test]
fn seeded_races_find_the_2614_truncation_when_recovery_reads_do_not_fence() {
    let found = (0..3000)
        .filter(|&seed| !simulate(seed, 3, 3, 2, false, 12, 1).0.is_empty())
        .count();
    assert!(found > 0, "the checker must be able to see a truncation");
}

/// Writer failures and ensemble changes (some written to the metadata long after they
/// were decided: BookKeeper issue 1591's slow metadata store) racing two recoveries.
#[test]
fn seeded_races_with_ensemble_changes_never_truncate_or_under_replicate() {
    for (e, w, a) in [(3, 3, 2), (3, 2, 2), (4, 3, 2), (3, 2, 1)] {
        for delay in [false, true] {
            let mut changed_runs = 0;
            let mut recovery_changes = 0;
            for seed in 0..500 {
                let c = SimConfig {
                    spares: 3,
                    fail_one_in: 4,
                    delay_ensemble_change: delay,
                    recovery_after: 40,
                    ..SimConfig::basic(e, w, a, true, 12, 2)
                };
                let (truncated, world) = simulate_with(seed, c);
                assert!(
                    truncated.is_empty(),
                    "{c:?} seed {seed}: acknowledged {truncated:?} beyond the end {:?}",
                    world.closed
                );
                assert!(
                    world.under_replicated().is_empty(),
                    "{c:?} seed {seed}: entries {:?} below Qa in the metadata's ensembles {:?}",
                    world.under_replicated(),
                    world.meta.ensembles
                );
                if world.meta.ensembles.len() > 1 {
                    changed_runs += 1;
                }
                recovery_changes += world.recovery_changes;
            }
            assert!(
                changed_runs > 20,
                "ensemble changes must happen ({changed_runs})"
            );
            assert!(
                recovery_changes > 5,
                "write-back ensemble changes must happen ({recovery_changes})"
            );
        }
    }
}

/// Negative control: a writer that acknowledges while its ensemble change is not in the
/// metadata yet (BookKeeper issue 1591) leaves acknowledged entries below Qa in the
/// ensembles the metadata records, and the simulation sees it.
#[test]
fn seeded_races_find_1591_when_acknowledging_during_an_ensemble_change() {
    let found = (0..3000).any(|seed| {
        let c = SimConfig {
            spares: 3,
            fail_one_in: 4,
            recovery_after: 40,
            unsafe_ack_during_change: true,
            ..SimConfig::basic(3, 3, 2, true, 12, 2)
        };
        let (truncated, world) = simulate_with(seed, c);
        !truncated.is_empty() || !world.under_replicated().is_empty()
    });
    assert!(found, "the checker must be able to see the 1591 loss");
}
