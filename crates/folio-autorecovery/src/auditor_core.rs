//! The Auditor's decisions (BookKeeper's `Auditor`), sans-IO: when bookies disappear,
//! when the lost-bookie delay changes and when the periodic check comes round, it says
//! whether to audit now or when. The shell in `auditor.rs` feeds it and acts.
//!
//! The rules (spec/autorecovery.md section 2):
//! - A bookie is lost when it leaves the available set (writable or read-only: a
//!   read-only bookie is never lost). The first known set is the cookies, so bookies that
//!   died before this Auditor started count as lost.
//! - Lost bookies with a delay of 0, or more than one bookie waiting: audit at once.
//!   One bookie: one audit after the delay; if it comes back before, the audit is
//!   cancelled.
//! - The delay rewritten: the pending audit is cancelled; a new value of 0 or the same
//!   value (BookKeeper's `triggeraudit`) audits now; another value reschedules.
//! - The periodic check is skipped while a delayed audit is pending.

use std::collections::BTreeSet;
use std::time::Duration;

use folio_metadata::Version;
use folio_types::BookieId;
use tokio::time::Instant;

/// The Auditor's state between events.
#[derive(Debug)]
pub struct AuditorCore {
    known: BTreeSet<BookieId>,
    /// Lost bookies whose audit waits for the delay.
    waiting: BTreeSet<BookieId>,
    /// When the delayed audit is due.
    due: Option<Instant>,
    delay: Duration,
    /// The delay's value and version as last read, to tell a rewrite.
    delay_seen: Option<(u32, Version)>,
}

/// What the shell must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing now (a delayed audit may be pending: see [`AuditorCore::due`]).
    Wait,
    /// Audit now.
    Audit,
}

impl AuditorCore {
    /// `known` is every bookie with a cookie; `delay` the lost-bookie delay in force.
    pub fn new(known: BTreeSet<BookieId>, delay: Duration) -> AuditorCore {
        AuditorCore {
            known,
            waiting: BTreeSet::new(),
            due: None,
            delay,
            delay_seen: None,
        }
    }

    /// When the pending delayed audit is due, if one is.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// The lost bookies waiting for the delay.
    pub fn waiting(&self) -> &BTreeSet<BookieId> {
        &self.waiting
    }

    /// The available bookies (writable and read-only) are now `available`.
    pub fn on_bookies(&mut self, available: &BTreeSet<BookieId>, now: Instant) -> Decision {
        let lost: BTreeSet<BookieId> = self.known.difference(available).cloned().collect();
        let back: Vec<BookieId> = self.waiting.intersection(available).cloned().collect();
        for b in &back {
            self.waiting.remove(b);
        }
        self.known = available.clone();
        self.waiting.extend(lost.iter().cloned());
        if self.waiting.is_empty() {
            if self.due.take().is_some() {
                tracing::info!(?back, "lost bookie back before the delay: audit cancelled");
            }
            return Decision::Wait;
        }
        if self.delay.is_zero() || self.waiting.len() > 1 {
            return self.audit_now();
        }
        if self.due.is_none() {
            self.due = Some(now + self.delay);
            tracing::info!(lost = ?self.waiting, delay = ?self.delay, "bookie lost: audit delayed");
        }
        Decision::Wait
    }

    /// The delay in the metadata store reads `value` at `version`.
    pub fn on_delay(&mut self, value: u32, version: Version, now: Instant) -> Decision {
        let previous = self.delay_seen.replace((value, version));
        let Some((old_value, old_version)) = previous else {
            // The first read: just the value in force.
            self.delay = Duration::from_secs(u64::from(value));
            return Decision::Wait;
        };
        if old_version == version {
            return Decision::Wait;
        }
        self.delay = Duration::from_secs(u64::from(value));
        self.due = None;
        if value == 0 || value == old_value {
            return self.audit_now();
        }
        if !self.waiting.is_empty() {
            self.due = Some(now + self.delay);
        }
        Decision::Wait
    }

    /// Time passed: audit if the delayed audit is due.
    pub fn on_tick(&mut self, now: Instant) -> Decision {
        match self.due {
            Some(due) if due <= now => self.audit_now(),
            _ => Decision::Wait,
        }
    }

    /// The periodic bookie check came round: audit unless a delayed audit is pending.
    pub fn on_periodic_check(&mut self) -> Decision {
        if self.due.is_some() {
            tracing::info!("periodic bookie check skipped: a delayed audit is pending");
            return Decision::Wait;
        }
        Decision::Audit
    }

    fn audit_now(&mut self) -> Decision {
        self.waiting.clear();
        self.due = None;
        Decision::Audit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(n: u16) -> BookieId {
        BookieId::new(format!("127.0.0.1:{n}")).unwrap()
    }

    fn set(ns: &[u16]) -> BTreeSet<BookieId> {
        ns.iter().map(|&n| b(n)).collect()
    }

    const DELAY: Duration = Duration::from_secs(60);

    #[test]
    fn a_bookie_dead_before_the_auditor_started_is_lost() {
        let now = Instant::now();
        let mut a = AuditorCore::new(set(&[1, 2, 3]), Duration::ZERO);
        assert_eq!(a.on_bookies(&set(&[1, 2]), now), Decision::Audit);
    }

    #[test]
    fn one_lost_bookie_waits_for_the_delay_and_its_return_cancels() {
        let now = Instant::now();
        let mut a = AuditorCore::new(set(&[1, 2, 3]), DELAY);
        assert_eq!(a.on_bookies(&set(&[1, 2, 3]), now), Decision::Wait);
        assert_eq!(a.on_bookies(&set(&[1, 2]), now), Decision::Wait);
        assert_eq!(a.due(), Some(now + DELAY));
        assert_eq!(a.on_tick(now + DELAY / 2), Decision::Wait);
        assert_eq!(
            a.on_bookies(&set(&[1, 2, 3]), now + DELAY / 2),
            Decision::Wait
        );
        assert_eq!(a.due(), None);
        assert_eq!(a.on_tick(now + DELAY * 2), Decision::Wait);
        // Lost again and not back: the audit comes at the delay.
        assert_eq!(a.on_bookies(&set(&[1, 2]), now + DELAY * 2), Decision::Wait);
        assert_eq!(a.on_tick(now + DELAY * 3), Decision::Audit);
        assert_eq!(a.due(), None);
    }

    #[test]
    fn a_second_lost_bookie_audits_at_once() {
        let now = Instant::now();
        let mut a = AuditorCore::new(set(&[1, 2, 3, 4]), DELAY);
        assert_eq!(a.on_bookies(&set(&[1, 2, 3]), now), Decision::Wait);
        assert_eq!(a.on_bookies(&set(&[1, 2]), now), Decision::Audit);
        assert!(a.waiting().is_empty());
    }

    #[test]
    fn rewriting_the_delay_triggers_an_audit_and_a_new_value_reschedules() {
        let now = Instant::now();
        let mut a = AuditorCore::new(set(&[1, 2, 3]), DELAY);
        let v = |n| Version::from_raw(n);
        assert_eq!(a.on_delay(60, v(1), now), Decision::Wait);
        assert_eq!(
            a.on_delay(60, v(1), now),
            Decision::Wait,
            "no write, no audit"
        );
        // triggeraudit: the same value written again.
        assert_eq!(a.on_delay(60, v(2), now), Decision::Audit);
        assert_eq!(a.on_bookies(&set(&[1, 2]), now), Decision::Wait);
        assert_eq!(a.on_delay(120, v(3), now), Decision::Wait);
        assert_eq!(a.due(), Some(now + Duration::from_secs(120)));
        assert_eq!(a.on_delay(0, v(4), now), Decision::Audit);
    }

    #[test]
    fn the_periodic_check_is_skipped_while_a_delayed_audit_is_pending() {
        let now = Instant::now();
        let mut a = AuditorCore::new(set(&[1, 2, 3]), DELAY);
        assert_eq!(a.on_periodic_check(), Decision::Audit);
        a.on_bookies(&set(&[1, 2]), now);
        assert_eq!(a.on_periodic_check(), Decision::Wait);
    }

    #[test]
    fn a_read_only_bookie_is_not_lost() {
        // The shell passes writable and read-only together: moving between them is no loss.
        let now = Instant::now();
        let mut a = AuditorCore::new(set(&[1, 2, 3]), Duration::ZERO);
        assert_eq!(a.on_bookies(&set(&[1, 2, 3]), now), Decision::Wait);
    }
}
