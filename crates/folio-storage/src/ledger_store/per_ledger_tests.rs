//! Unit tests of the entry log per ledger (`entryLogPerLedgerEnabled`) on real files:
//! one log per ledger in entry order, rotation at write close, at the access expiry
//! (a manual clock) and at eviction, the bound on open logs, the directory choice, the
//! size limit, switching modes, and garbage collection of whole logs.

use super::*;
use std::time::{Duration, Instant};

use folio_env::{Clock, FileSystem, OpenOptions, RealFileSystem, SystemRng};

/// A clock the test moves by hand.
struct ManualClock {
    base: Instant,
    offset: Mutex<Duration>,
}

impl ManualClock {
    fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock {
            base: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        })
    }

    fn advance(&self, d: Duration) {
        *self.offset.lock() += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + *self.offset.lock()
    }
    fn unix_millis(&self) -> u64 {
        0
    }
    fn sleep(&self, _d: Duration) {}
}

struct Fixture {
    _tmp: tempfile::TempDir,
    config: LedgerStoreConfig,
    clock: Arc<ManualClock>,
}

fn fixture(dirs: usize, max_active: usize) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = LedgerStoreConfig::new(
        (0..dirs)
            .map(|i| tmp.path().join(format!("ledgers{i}")))
            .collect(),
        tmp.path().join("index"),
    );
    config.entry_log_size_limit = 1 << 20;
    config.write_cache_bytes = 1 << 20;
    config.entry_log_per_ledger = true;
    config.max_active_entry_logs = max_active;
    Fixture {
        _tmp: tmp,
        config,
        clock: ManualClock::new(),
    }
}

fn open_with(f: &Fixture, per_ledger: bool) -> LedgerStore {
    let mut config = f.config.clone();
    config.entry_log_per_ledger = per_ledger;
    let env = Env {
        clock: f.clock.clone(),
        fs: Arc::new(RealFileSystem),
        rng: Arc::new(SystemRng::with_seed(1)),
    };
    LedgerStore::open(&env, config).unwrap()
}

fn open(f: &Fixture) -> LedgerStore {
    open_with(f, true)
}

fn data(ledger: i64, entry: i64) -> Bytes {
    Bytes::from(format!("ledger {ledger} entry {entry} payload"))
}

/// The (ledger, entry) of each record of log `id`, in file order.
fn records(s: &LedgerStore, id: u64) -> Vec<(i64, i64)> {
    let path = s.entry_log_path(id).unwrap();
    let file = RealFileSystem.open(&path, OpenOptions::read()).unwrap();
    let mut out = Vec::new();
    crate::entry_log::log_file::scan_entries(&*file, &path, &mut |r| out.push((r.ledger, r.entry)))
        .unwrap();
    out
}

/// Logs being written now.
fn active(s: &LedgerStore) -> Vec<u64> {
    let rotated = s.logs.rotated_log_ids();
    s.entry_log_ids()
        .into_iter()
        .filter(|id| !rotated.contains(id))
        .collect()
}

/// Every entry `entries` of every ledger `ledgers` reads back as `data` wrote it.
fn assert_reads(
    s: &LedgerStore,
    ledgers: impl IntoIterator<Item = i64>,
    entries: std::ops::Range<i64>,
) {
    for l in ledgers {
        for e in entries.clone() {
            assert_eq!(s.get_entry(l, e).unwrap(), Some(data(l, e)), "{l}/{e}");
        }
    }
}

fn stat(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn each_ledger_gets_its_own_log_in_entry_order() {
    let f = fixture(1, 500);
    let s = open(&f);
    assert!(s.entry_log_per_ledger());
    // Interleaved and out of order, as concurrent writers' adds arrive.
    for e in [2, 0, 1, 3] {
        for l in [3, 1, 2] {
            s.put_entry(l, e, data(l, e)).unwrap();
        }
    }
    s.flush().unwrap();
    let ids = s.entry_log_ids();
    assert_eq!(ids.len(), 3, "one log per ledger");
    assert_eq!(stat(&s.entry_log_stats().active_logs), 3);
    for id in ids {
        let recs = records(&s, id);
        let l = recs[0].0;
        assert_eq!(recs, (0..4).map(|e| (l, e)).collect::<Vec<_>>(), "log {id}");
    }
    s.close().unwrap();
    drop(s);
    let s = open(&f);
    for id in s.entry_log_ids() {
        let map = s.entry_log_ledgers(id).unwrap().expect("rotated at close");
        assert_eq!(map.len(), 1, "log {id} holds one ledger: {map:?}");
    }
    assert_reads(&s, 1..=3, 0..4);
}

#[test]
fn a_write_closed_ledgers_log_rotates_at_the_next_flush() {
    let f = fixture(1, 500);
    let s = open(&f);
    s.put_entry(1, 0, data(1, 0)).unwrap();
    s.put_entry(2, 0, data(2, 0)).unwrap();
    s.flush().unwrap();
    assert_eq!(active(&s).len(), 2);
    s.mark_write_closed(1);
    // Marked but not yet flushed: still open.
    assert_eq!(active(&s).len(), 2);
    s.put_entry(1, 1, data(1, 1)).unwrap();
    s.flush().unwrap();
    let still = active(&s);
    assert_eq!(still.len(), 1, "ledger 1's log rotated");
    assert_eq!(records(&s, still[0]), vec![(2, 0)]);
    let rotated = s.logs.rotated_log_ids();
    assert_eq!(rotated.len(), 1);
    assert_eq!(
        records(&s, rotated[0]),
        vec![(1, 0), (1, 1)],
        "the flush's entries went in before the rotation"
    );
    assert_eq!(
        s.entry_log_ledgers(rotated[0]).unwrap().map(|m| m.len()),
        Some(1)
    );
    assert_eq!(stat(&s.entry_log_stats().removed_by_write_close), 1);
    // A flush with nothing to write still rotates a marked log.
    s.mark_write_closed(2);
    s.flush().unwrap();
    assert!(active(&s).is_empty());
    // A later entry (recovery's write-back, say) opens a new log.
    s.put_entry(1, 2, data(1, 2)).unwrap();
    s.flush().unwrap();
    assert_eq!(active(&s).len(), 1);
    assert_eq!(stat(&s.entry_log_stats().ledgers_with_multiple_logs), 1);
    assert_reads(&s, [1], 0..3);
}

#[test]
fn an_idle_log_rotates_once_the_access_expiry_has_passed() {
    let f = fixture(1, 500);
    let s = open(&f);
    s.put_entry(1, 0, data(1, 0)).unwrap();
    s.put_entry(2, 0, data(2, 0)).unwrap();
    s.flush().unwrap();
    f.clock.advance(Duration::from_secs(200));
    s.put_entry(2, 1, data(2, 1)).unwrap();
    s.flush().unwrap();
    f.clock.advance(Duration::from_secs(99));
    s.flush().unwrap();
    assert_eq!(active(&s).len(), 2, "299 s idle: not yet");
    f.clock.advance(Duration::from_secs(1));
    s.flush().unwrap();
    let still = active(&s);
    assert_eq!(still.len(), 1, "ledger 1 idle for 300 s: rotated");
    assert_eq!(records(&s, still[0]), vec![(2, 0), (2, 1)]);
    assert_eq!(stat(&s.entry_log_stats().removed_by_expiry), 1);
    assert_eq!(s.get_entry(1, 0).unwrap(), Some(data(1, 0)));
}

#[test]
fn open_logs_are_bounded_and_the_least_recent_is_evicted() {
    let f = fixture(1, 2);
    let s = open(&f);
    s.put_entry(1, 0, data(1, 0)).unwrap();
    s.flush().unwrap();
    f.clock.advance(Duration::from_secs(1));
    s.put_entry(2, 0, data(2, 0)).unwrap();
    s.flush().unwrap();
    f.clock.advance(Duration::from_secs(1));
    s.put_entry(1, 1, data(1, 1)).unwrap();
    s.flush().unwrap();
    f.clock.advance(Duration::from_secs(1));
    // Ledger 2 was appended to least recently: its log makes room for ledger 3's.
    s.put_entry(3, 0, data(3, 0)).unwrap();
    s.flush().unwrap();
    let open_logs = active(&s);
    assert_eq!(open_logs.len(), 2);
    let mut held: Vec<i64> = open_logs.iter().map(|&id| records(&s, id)[0].0).collect();
    held.sort_unstable();
    assert_eq!(held, vec![1, 3]);
    assert_eq!(stat(&s.entry_log_stats().removed_by_max_size), 1);
    // One flush writing more ledgers than the bound: never more logs open than it.
    for l in 10..20 {
        s.put_entry(l, 0, data(l, 0)).unwrap();
    }
    s.flush().unwrap();
    assert_eq!(active(&s).len(), 2);
    assert_eq!(stat(&s.entry_log_stats().active_logs), 2);
    for l in (1..=3).chain(10..20) {
        assert_eq!(s.get_entry(l, 0).unwrap(), Some(data(l, 0)), "ledger {l}");
    }
}

#[test]
fn a_ledgers_log_still_rolls_at_the_size_limit() {
    let mut f = fixture(1, 500);
    // 64-byte header, records of 24 + ~25 bytes: a few per log.
    f.config.entry_log_size_limit = 256;
    // Buffered, so that a file's length is its records' (direct I/O pads a log being
    // written to a whole block).
    f.config.entry_log_direct_io = false;
    let s = open(&f);
    for e in 0..12 {
        s.put_entry(1, e, data(1, e)).unwrap();
        s.put_entry(2, e, data(2, e)).unwrap();
    }
    s.flush().unwrap();
    let ids = s.entry_log_ids();
    assert!(ids.len() > 4, "{ids:?}");
    for id in ids {
        let recs = records(&s, id);
        assert!(recs.iter().all(|r| r.0 == recs[0].0), "log {id}: {recs:?}");
        let len = s.logs.file_len(id).unwrap();
        assert!(len <= 256 + 64, "log {id} is {len} bytes");
    }
    assert_reads(&s, [2], 0..12);
}

#[test]
fn a_new_log_goes_to_the_directory_with_the_fewest_active_logs() {
    let f = fixture(3, 500);
    let s = open(&f);
    for l in 0..6 {
        s.put_entry(l, 0, data(l, 0)).unwrap();
    }
    s.flush().unwrap();
    let count = |s: &LedgerStore, dir: usize| {
        active(s)
            .iter()
            .filter(|&&id| {
                s.entry_log_path(id)
                    .unwrap()
                    .starts_with(&f.config.ledger_dirs[dir])
            })
            .count()
    };
    assert_eq!((count(&s, 0), count(&s, 1), count(&s, 2)), (2, 2, 2));
    // Two of the first directory's logs rotate: the next two new logs go there.
    let in_dir0: Vec<i64> = active(&s)
        .into_iter()
        .filter(|&id| {
            s.entry_log_path(id)
                .unwrap()
                .starts_with(&f.config.ledger_dirs[0])
        })
        .map(|id| records(&s, id)[0].0)
        .collect();
    for l in &in_dir0 {
        s.mark_write_closed(*l);
    }
    s.flush().unwrap();
    assert_eq!(count(&s, 0), 0);
    s.put_entry(100, 0, data(100, 0)).unwrap();
    s.put_entry(101, 0, data(101, 0)).unwrap();
    s.flush().unwrap();
    assert_eq!((count(&s, 0), count(&s, 1), count(&s, 2)), (2, 2, 2));
}

#[test]
fn a_store_switched_between_modes_reads_all_its_old_logs() {
    let f = fixture(2, 500);
    let mut written = Vec::new();
    for (round, per_ledger) in [(0, false), (1, true), (2, false), (3, true)] {
        let s = open_with(&f, per_ledger);
        assert_eq!(s.entry_log_per_ledger(), per_ledger);
        for l in 0..4 {
            for e in 0..5 {
                let l = l + 10 * round;
                s.put_entry(l, e, data(l, e)).unwrap();
                written.push((l, e));
            }
        }
        // Older ledgers get more entries too, in the new mode.
        if round > 0 {
            s.put_entry(10 * (round - 1), 5 + round, data(0, round))
                .unwrap();
            written.push((10 * (round - 1), 5 + round));
        }
        s.flush().unwrap();
        if round % 2 == 1 {
            // Not closed: a crash leaves unrotated logs, which must read as well.
            continue;
        }
        s.close().unwrap();
    }
    let s = open_with(&f, false);
    for &(l, e) in &written {
        let want = if e > 4 { data(0, e - 5) } else { data(l, e) };
        assert_eq!(s.get_entry(l, e).unwrap(), Some(want), "{l}/{e}");
    }
}

#[test]
fn a_deleted_ledgers_logs_go_whole_and_compaction_copies_nothing() {
    let f = fixture(1, 500);
    let s = open(&f);
    for e in 0..20 {
        for l in 1..=6 {
            s.put_entry(l, e, data(l, e)).unwrap();
        }
    }
    for l in 1..=6 {
        s.mark_write_closed(l);
    }
    s.flush().unwrap();
    assert!(active(&s).is_empty(), "every closed ledger's log rotated");
    let logs = s.entry_log_ids();
    assert_eq!(logs.len(), 6);
    for l in [2, 4, 6] {
        s.delete_ledger(l).unwrap();
    }
    s.flush().unwrap();
    let gc = s.remove_dead_entry_logs().unwrap();
    assert_eq!(gc.logs_removed.len(), 3, "{gc:?}");
    let compaction = s.compact(0.99, CompactionLimits::default()).unwrap();
    assert_eq!(compaction.entries_moved, 0, "{compaction:?}");
    assert_eq!(compaction.logs_compacted, 0, "{compaction:?}");
    assert_eq!(s.entry_log_ids().len(), 3);
    assert_reads(&s, [1, 3, 5], 0..20);
}

#[test]
fn the_bound_on_open_logs_must_be_positive() {
    let f = fixture(1, 0);
    let env = Env::real();
    let e = LedgerStore::open(&env, f.config.clone()).err().unwrap();
    assert!(e.to_string().contains("max_active_entry_logs"), "{e}");
}

#[test]
fn open_file_handles_stay_bounded_with_many_logs() {
    let f = fixture(1, 4);
    let s = open(&f);
    // 600 ledgers, each its own log (rotated at once by the bound of 4 open ones).
    for l in 0..600 {
        s.put_entry(l, 0, data(l, 0)).unwrap();
    }
    s.flush().unwrap();
    assert_eq!(s.entry_log_ids().len(), 600);
    assert!(s.logs.open_handles() <= 4, "{}", s.logs.open_handles());
    // Reading every ledger opens read handles, cached up to a bound.
    for l in 0..600 {
        assert_eq!(s.get_entry(l, 0).unwrap(), Some(data(l, 0)), "ledger {l}");
    }
    let open_now = s.logs.open_handles();
    assert!(
        open_now <= crate::entry_log::MAX_CACHED_READ_HANDLES + 4,
        "{open_now} handles open"
    );
}

#[test]
fn a_ledger_is_forgotten_ten_expiries_after_its_last_entry() {
    let f = fixture(1, 500);
    let s = open(&f);
    s.put_entry(1, 0, data(1, 0)).unwrap();
    s.mark_write_closed(1);
    s.flush().unwrap();
    s.put_entry(1, 1, data(1, 1)).unwrap();
    s.flush().unwrap();
    let multiple = || stat(&s.entry_log_stats().ledgers_with_multiple_logs);
    assert_eq!(multiple(), 1, "ledger 1 has two logs");
    // Its second log rotates at the expiry; the ledger is remembered for ten of them
    // (BookKeeper's entryLogPerLedgerCounterLimitsMultFactor), then forgotten.
    f.clock.advance(Duration::from_secs(300));
    s.flush().unwrap();
    assert!(active(&s).is_empty());
    f.clock.advance(Duration::from_secs(2699));
    s.flush().unwrap();
    assert_eq!(multiple(), 1);
    f.clock.advance(Duration::from_secs(1));
    s.flush().unwrap();
    assert_eq!(multiple(), 0);
}

#[test]
fn a_deleted_ledgers_open_log_rotates_at_the_next_flush_and_goes() {
    let f = fixture(1, 500);
    let s = open(&f);
    s.put_entry(1, 0, data(1, 0)).unwrap();
    s.put_entry(2, 0, data(2, 0)).unwrap();
    s.flush().unwrap();
    assert_eq!(active(&s).len(), 2);
    s.delete_ledger(1).unwrap();
    s.flush().unwrap();
    assert_eq!(active(&s).len(), 1, "ledger 1's log rotated");
    let gc = s.remove_dead_entry_logs().unwrap();
    assert_eq!(gc.logs_removed.len(), 1, "{gc:?}");
    assert_eq!(s.entry_log_ids().len(), 1);
    assert_eq!(s.get_entry(2, 0).unwrap(), Some(data(2, 0)));
}
