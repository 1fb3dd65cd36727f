//! What a run observed, recorded as it happened, and the checkers that judge it.
//!
//! The checkers use only what clients saw (acknowledgements, closed-ledger metadata,
//! entries read), never the bookies' internals, so they hold whatever the timing was:
//! a run that is not replayed exactly is still judged soundly.

use std::collections::BTreeMap;

use bytes::Bytes;
use folio_types::{EntryId, LedgerId};

/// One read of one entry.
#[derive(Debug, Clone)]
pub struct Read {
    pub ledger: LedgerId,
    pub entry: EntryId,
    pub payload: Bytes,
    /// Read from a closed ledger (after recovery), not a tail read of an open one.
    pub closed: bool,
    pub who: String,
}

/// The LAC a reader of an open ledger was given by readLastConfirmed
/// (`ReadHandle::read_last_add_confirmed`, which a client's open without recovery runs;
/// `try_read_last_add_confirmed`): its handle's LAC afterwards.
#[derive(Debug, Clone)]
pub struct LacRead {
    pub ledger: LedgerId,
    pub lac: EntryId,
    /// Present when the read is held to what was acknowledged before it (see [`LacBound`]).
    pub bound: Option<LacBound>,
    pub who: String,
}

/// A readLastConfirmed whose answers (delivered by the network, each OK, no such entry or
/// no such ledger) came from bookies covering every ack quorum of the last fragment of the
/// ledger as the reader's metadata had it, open (not in recovery), read after history step
/// `since`. Every entry of that fragment acknowledged before `since` is on an ack quorum
/// of it, so some answering bookie holds it and answered an entry at least as new: the
/// LAC returned is at least the LAC that entry carries, as BookKeeper's
/// `ReadLastConfirmedOp` promises once its coverage set is covered.
#[derive(Debug, Clone, Copy)]
pub struct LacBound {
    pub since: u64,
    pub fragment_start: EntryId,
}

/// The recorded history of a run.
#[derive(Debug, Default)]
pub struct History {
    /// Steps, in the order they happened (one runtime thread): what an event's step is
    /// smaller than happened before it.
    pub step: u64,
    /// The step at which each append was issued (before the client was handed it), and at
    /// which its acknowledgement was seen: every entry acknowledged before an append was
    /// issued is at most the LAC that append's entry carries.
    pub appended_at: BTreeMap<(LedgerId, EntryId), u64>,
    pub acked_at: BTreeMap<(LedgerId, EntryId), u64>,
    /// Every readLastConfirmed answer a reader got.
    pub lac_reads: Vec<LacRead>,
    /// Bookies that answered a read of entry -1 (the LAC read, a recovery's fencing read)
    /// with an entry older than one they had acknowledged, as the network saw it.
    pub stale_last_entries: Vec<String>,
    /// What each writer sent as its n-th append (entry n of a non-adv ledger).
    pub issued: BTreeMap<(LedgerId, EntryId), Bytes>,
    /// Acknowledged appends: (ledger, entry id returned, payload).
    pub acked: Vec<(LedgerId, EntryId, Bytes)>,
    /// Last entry of a closed ledger as each recovering reader saw it.
    pub closes: Vec<(LedgerId, EntryId, String)>,
    pub reads: Vec<Read>,
    /// Liveness failures found while the run went on (after faults healed).
    pub liveness: Vec<String>,
    /// A readable account of events, printed with violations.
    pub trace: Vec<String>,
    pub ledgers: Vec<LedgerId>,
    /// Each time a closed ledger was seen: its last entry id and length (`None` when the
    /// observer was its writer, which knows only the end), and who saw it. A closed
    /// ledger never changes: every observation must agree (invariant 10's second half).
    pub closed_meta: Vec<(LedgerId, EntryId, Option<u64>, String)>,
    /// Invariant 10 violations found at quiescence by asking the bookies (autorecovery).
    pub invariant10: Vec<String>,
}

impl History {
    pub fn note(&mut self, at_ms: u64, what: impl Into<String>) {
        self.trace.push(format!("{at_ms:>7}ms {}", what.into()));
    }

    /// The next step.
    pub fn step(&mut self) -> u64 {
        self.step += 1;
        self.step
    }

    /// The highest LAC a judged readLastConfirmed owes: the greatest, over the entries of
    /// its fragment acknowledged before it, of the last entry acknowledged before that
    /// entry was appended (a lower bound of the LAC it carries); with that entry.
    fn lac_owed(&self, ledger: LedgerId, b: LacBound) -> Option<(EntryId, EntryId)> {
        let acked: Vec<(EntryId, u64)> = self
            .acked_at
            .range((ledger, EntryId::MIN)..=(ledger, EntryId::MAX))
            .map(|(&(_, e), &at)| (e, at))
            .collect();
        let mut owed: Option<(EntryId, EntryId)> = None;
        for &(e, at) in &acked {
            if at >= b.since || e < b.fragment_start {
                continue;
            }
            let Some(&appended) = self.appended_at.get(&(ledger, e)) else {
                continue;
            };
            let carried = acked
                .iter()
                .filter(|&&(_, a)| a < appended)
                .map(|&(e2, _)| e2)
                .max()
                .unwrap_or(-1);
            if owed.is_none_or(|(_, o)| carried > o) {
                owed = Some((e, carried));
            }
        }
        owed
    }

    /// Every invariant violated by this history, one line each.
    pub fn check(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut last: BTreeMap<LedgerId, EntryId> = BTreeMap::new();
        // Agreement on the end: every recovering reader saw the same last entry.
        for (ledger, end, who) in &self.closes {
            match last.get(ledger) {
                Some(prev) if prev != end => v.push(format!(
                    "agreement: ledger {ledger} closed at {prev} for one reader, at {end} for {who}"
                )),
                Some(_) => {}
                None => {
                    last.insert(*ledger, *end);
                }
            }
        }
        // No dirty reads: whatever is read is what the writer wrote at that id; and
        // agreement on payloads between readers of a closed ledger.
        let mut seen: BTreeMap<(LedgerId, EntryId), &Read> = BTreeMap::new();
        for r in &self.reads {
            match self.issued.get(&(r.ledger, r.entry)) {
                Some(p) if *p == r.payload => {}
                Some(_) => v.push(format!(
                    "dirty read: {} read ledger {} entry {} with bytes its writer never sent there",
                    r.who, r.ledger, r.entry
                )),
                None => v.push(format!(
                    "dirty read: {} read ledger {} entry {} that was never written",
                    r.who, r.ledger, r.entry
                )),
            }
            // A tail read of an open ledger too: an entry at or below a LAC some bookie
            // served was acknowledged by an ack quorum, so the closed ledger holds it.
            if let Some(end) = last.get(&r.ledger)
                && r.entry > *end
            {
                v.push(format!(
                    "agreement: {} read entry {} of ledger {} beyond its end {end}",
                    r.who, r.entry, r.ledger
                ));
            }
            if !r.closed {
                continue;
            }
            if let Some(prev) = seen.get(&(r.ledger, r.entry)) {
                if prev.payload != r.payload {
                    v.push(format!(
                        "agreement: ledger {} entry {} differs between {} and {}",
                        r.ledger, r.entry, prev.who, r.who
                    ));
                }
            } else {
                seen.insert((r.ledger, r.entry), r);
            }
        }
        // Persistence and fencing: every acknowledged entry is in the closed ledger with
        // its bytes; nothing was acknowledged beyond the recovered end.
        for (ledger, entry, payload) in &self.acked {
            if self.issued.get(&(*ledger, *entry)) != Some(payload) {
                v.push(format!(
                    "ack order: ledger {ledger} acknowledged entry {entry} for another append"
                ));
            }
            let Some(end) = last.get(ledger) else {
                v.push(format!(
                    "persistence: ledger {ledger} has acknowledged entry {entry} but was never closed"
                ));
                continue;
            };
            if entry > end {
                v.push(format!(
                    "fencing/persistence: ledger {ledger} entry {entry} was acknowledged but the ledger closed at {end}"
                ));
                continue;
            }
            match seen.get(&(*ledger, *entry)) {
                Some(r) if r.payload == *payload => {}
                Some(r) => v.push(format!(
                    "persistence: ledger {ledger} entry {entry} read by {} with other bytes than acknowledged",
                    r.who
                )),
                None => v.push(format!(
                    "persistence: acknowledged ledger {ledger} entry {entry} was never read back"
                )),
            }
        }
        // readLastConfirmed: never beyond the end (a LAC some bookie served was carried by
        // an entry whose writer had that many acknowledged), and, when its answers covered
        // every ack quorum of the open ledger's last fragment, never below the LAC carried
        // by an entry of that fragment acknowledged before it asked (a bookie answering a
        // stale last entry after a restart breaks it).
        for r in &self.lac_reads {
            if let Some(end) = last.get(&r.ledger)
                && r.lac > *end
            {
                v.push(format!(
                    "lac: {} was given LAC {} of ledger {} beyond its end {end}",
                    r.who, r.lac, r.ledger
                ));
            }
            if let Some(b) = r.bound
                && let Some((entry, owed)) = self.lac_owed(r.ledger, b)
                && r.lac < owed
            {
                v.push(format!(
                    "lac: {} was given LAC {} of ledger {}, but entry {entry}, acknowledged \
                     before it asked, carries a LAC of at least {owed} (its answers covered \
                     every ack quorum of the fragment from entry {})",
                    r.who, r.lac, r.ledger, b.fragment_start
                ));
            }
        }
        v.extend(
            self.stale_last_entries
                .iter()
                .map(|l| format!("last entry: {l}")),
        );
        // A closed ledger keeps its end and length, whoever repaired it.
        let mut first: BTreeMap<LedgerId, (EntryId, Option<u64>, &str)> = BTreeMap::new();
        for (ledger, end, length, who) in &self.closed_meta {
            match first.get_mut(ledger) {
                None => {
                    first.insert(*ledger, (*end, *length, who));
                }
                Some((e, l, w)) => {
                    if e != end || (l.is_some() && length.is_some() && l != length) {
                        v.push(format!(
                            "invariant 10: closed ledger {ledger} had last entry {e}, length {l:?} \
                             for {w} and last entry {end}, length {length:?} for {who}"
                        ));
                    } else if l.is_none() {
                        *l = *length;
                        *w = who;
                    }
                }
            }
        }
        v.extend(
            self.invariant10
                .iter()
                .map(|l| format!("invariant 10: {l}")),
        );
        v.extend(self.liveness.iter().map(|l| format!("liveness: {l}")));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> History {
        let mut h = History::default();
        for e in 0..3 {
            h.issued.insert((1, e), Bytes::from(format!("e{e}")));
        }
        h.acked.push((1, 0, Bytes::from("e0")));
        h.acked.push((1, 1, Bytes::from("e1")));
        h.closes.push((1, 1, "r1".into()));
        read_closed(&mut h, 0..2);
        h
    }

    /// Reader r1's reads of ledger 1's `entries` ("e<id>") after its close.
    fn read_closed(h: &mut History, entries: std::ops::Range<i64>) {
        for e in entries {
            h.reads.push(Read {
                ledger: 1,
                entry: e,
                payload: Bytes::from(format!("e{e}")),
                closed: true,
                who: "r1".into(),
            });
        }
    }

    #[test]
    fn a_consistent_history_passes() {
        assert_eq!(history().check(), Vec::<String>::new());
    }

    #[test]
    fn each_kind_of_violation_is_reported() {
        let mut h = history();
        h.closes.push((1, 0, "r2".into()));
        assert!(h.check()[0].starts_with("agreement"), "{:?}", h.check());

        let mut h = history();
        h.acked.push((1, 2, Bytes::from("e2")));
        assert!(h.check()[0].starts_with("fencing"), "{:?}", h.check());

        let mut h = history();
        h.reads.pop();
        assert!(h.check()[0].starts_with("persistence"), "{:?}", h.check());

        let mut h = history();
        h.reads[0].payload = Bytes::from("other");
        assert!(h.check()[0].starts_with("dirty read"), "{:?}", h.check());

        // A tailing reader of the open ledger shown entry 2 (a LAC of 2), which the
        // closed ledger (end 1) does not hold.
        let mut h = history();
        h.reads.push(Read {
            ledger: 1,
            entry: 2,
            payload: Bytes::from("e2"),
            closed: false,
            who: "tail1".into(),
        });
        assert!(h.check()[0].starts_with("agreement"), "{:?}", h.check());

        let mut h = history();
        h.closed_meta.push((1, 1, None, "writer".into()));
        h.closed_meta.push((1, 1, Some(20), "r1".into()));
        assert_eq!(h.check(), Vec::<String>::new());
        h.closed_meta
            .push((1, 1, Some(30), "final metadata".into()));
        assert!(h.check()[0].starts_with("invariant 10"), "{:?}", h.check());

        let mut h = history();
        h.closed_meta.push((1, 1, Some(20), "r1".into()));
        h.closed_meta
            .push((1, 2, Some(20), "final metadata".into()));
        assert!(h.check()[0].starts_with("invariant 10"), "{:?}", h.check());

        let mut h = history();
        h.invariant10.push("ledger 1 entry 0 missing".into());
        assert!(h.check()[0].starts_with("invariant 10"), "{:?}", h.check());
    }

    /// Entries 0 and 1 appended together (carrying LAC -1), acknowledged, then entry 2
    /// (carrying at least 1), acknowledged; readers then ask for the LAC.
    fn lac_history(lac: EntryId, bound: Option<LacBound>) -> History {
        let mut h = History::default();
        for e in 0..3 {
            h.issued.insert((1, e), Bytes::from(format!("e{e}")));
        }
        for e in 0..2 {
            let at = h.step();
            h.appended_at.insert((1, e), at);
        }
        for e in 0..2 {
            h.acked.push((1, e, Bytes::from(format!("e{e}"))));
            let at = h.step();
            h.acked_at.insert((1, e), at);
        }
        let at = h.step();
        h.appended_at.insert((1, 2), at);
        h.acked.push((1, 2, Bytes::from("e2")));
        let at = h.step();
        h.acked_at.insert((1, 2), at);
        let since = h.step();
        h.lac_reads.push(LacRead {
            ledger: 1,
            lac,
            bound: bound.map(|b| LacBound { since, ..b }),
            who: "lac1".into(),
        });
        h.closes.push((1, 2, "r1".into()));
        read_closed(&mut h, 0..3);
        h
    }

    #[test]
    fn a_lac_read_owes_the_lac_of_what_was_acknowledged_before_it() {
        let judged = Some(LacBound {
            since: 0,
            fragment_start: 0,
        });
        assert_eq!(lac_history(1, judged).check(), Vec::<String>::new());
        assert_eq!(lac_history(2, judged).check(), Vec::<String>::new());
        // Below what entry 2 carries: a stale answer.
        let v = lac_history(0, judged).check();
        assert!(
            v.len() == 1 && v[0].starts_with("lac:") && v[0].contains("at least 1"),
            "{v:?}"
        );
        // Not judged: its answers did not cover every ack quorum.
        assert_eq!(lac_history(0, None).check(), Vec::<String>::new());
        // Entry 2 outside the fragment the read asked (a later one): nothing owed by it.
        let later = Some(LacBound {
            since: 0,
            fragment_start: 3,
        });
        assert_eq!(lac_history(-1, later).check(), Vec::<String>::new());
        // Beyond the end.
        let v = lac_history(3, None).check();
        assert!(v[0].starts_with("lac:") && v[0].contains("beyond"), "{v:?}");
        let mut h = lac_history(2, None);
        h.stale_last_entries
            .push("b1 answered entry 2 below 39".into());
        assert!(h.check()[0].starts_with("last entry"), "{:?}", h.check());
    }
}
