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

/// The recorded history of a run.
#[derive(Debug, Default)]
pub struct History {
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
        for e in 0..2 {
            h.reads.push(Read {
                ledger: 1,
                entry: e,
                payload: Bytes::from(format!("e{e}")),
                closed: true,
                who: "r1".into(),
            });
        }
        h
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
}
