//! Unit tests of `LedgerStore` on real files in temporary directories; a small
//! fault-injecting `FileSystem` wrapper stands in for a full disk and a failing fsync.

use super::*;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use folio_env::{File, FileSystem, OpenOptions, RealFileSystem};

/// Generous: the machine is slow and shared.
const PATIENCE: Duration = Duration::from_secs(60);

struct Dirs {
    _tmp: tempfile::TempDir,
    config: LedgerStoreConfig,
}

fn dirs(limit: u64, cache: u64) -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let config = LedgerStoreConfig {
        ledger_dirs: vec![tmp.path().join("ledgers")],
        index_dir: tmp.path().join("index"),
        entry_log_size_limit: limit,
        write_cache_bytes: cache,
        journal_dirs: Vec::new(),
        entry_log_per_ledger: false,
        max_active_entry_logs: 500,
        entry_log_access_expiry: std::time::Duration::from_secs(300),
        entry_log_direct_io: false,
        read_ahead_cache_bytes: crate::ledger_store::DEFAULT_READ_AHEAD_CACHE_BYTES,
        read_ahead_batch_size: crate::ledger_store::DEFAULT_READ_AHEAD_BATCH_SIZE,
        read_ahead_batch_bytes: crate::ledger_store::DEFAULT_READ_AHEAD_BATCH_BYTES,
        index_cache_bytes: crate::index::DEFAULT_INDEX_CACHE_BYTES,
        index_commit_flushes: crate::ledger_store::DEFAULT_INDEX_COMMIT_FLUSHES,
        skip_last_entry_lookup_for_tests: false,
    };
    Dirs { _tmp: tmp, config }
}

fn open(d: &Dirs) -> LedgerStore {
    LedgerStore::open(&Env::real(), d.config.clone()).unwrap()
}

fn data(ledger: i64, entry: i64) -> Bytes {
    Bytes::from(format!("ledger {ledger} entry {entry} payload"))
}

#[test]
fn ledger_store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<LedgerStore>();
}

#[test]
fn entries_are_readable_before_and_after_flush() {
    let d = dirs(1 << 20, 1 << 20);
    let s = open(&d);
    assert_eq!(s.get_entry(1, 0).unwrap(), None, "unknown ledger");
    for e in 0..3 {
        s.put_entry(1, e, data(1, e)).unwrap();
    }
    assert_eq!(s.get_entry(1, 1).unwrap(), Some(data(1, 1)));
    assert!(s.write_cache_used() > 0);
    s.flush().unwrap();
    assert_eq!(s.write_cache_used(), 0);
    assert_eq!(s.get_entry(1, 1).unwrap(), Some(data(1, 1)));
    assert_eq!(
        s.get_entry(1, -1).unwrap(),
        Some(data(1, 2)),
        "-1 = last entry"
    );
    assert_eq!(s.get_entry(1, 3).unwrap(), None);
    assert_eq!(s.entry_ids(1).unwrap(), vec![0, 1, 2]);
    assert!(matches!(
        s.get_entry(1, -2),
        Err(LedgerStoreError::InvalidEntryId { .. })
    ));
    assert!(matches!(
        s.put_entry(1, -1, data(1, 1)),
        Err(LedgerStoreError::InvalidEntryId { .. })
    ));
}

/// A flush rewrites a ledger's info only when more than its last entry changed, so after
/// a restart the last entry (the read of entry -1, which a recovery's fencing read of the
/// last entry depends on) comes from the index: never the older value the info holds.
#[test]
fn the_last_entry_after_a_reopen_is_the_last_the_index_has() {
    let d = dirs(1 << 20, 1 << 20);
    {
        let s = open(&d);
        for e in 0..3 {
            s.put_entry(1, e, data(1, e)).unwrap();
        }
        s.put_entry(2, 0, data(2, 0)).unwrap();
        s.flush().unwrap();
        for e in 3..40 {
            s.put_entry(1, e, data(1, e)).unwrap();
        }
        s.flush().unwrap();
    }
    let s = open(&d);
    assert_eq!(s.get_entry(1, -1).unwrap(), Some(data(1, 39)));
    assert_eq!(s.ledger_info(1).unwrap().unwrap().last_entry_id, Some(39));
    assert_eq!(s.get_entry(2, -1).unwrap(), Some(data(2, 0)));
    // Entries put after the reopen raise it further, flushed or not.
    s.put_entry(1, 40, data(1, 40)).unwrap();
    assert_eq!(s.get_entry(1, -1).unwrap(), Some(data(1, 40)));
    s.flush().unwrap();
    drop(s);
    let s = open(&d);
    assert_eq!(s.ledger_info(1).unwrap().unwrap().last_entry_id, Some(40));
    assert_eq!(s.get_entry(1, -1).unwrap(), Some(data(1, 40)));
    assert_eq!(s.get_entry(3, -1).unwrap(), None);
}

/// The negative control the simulator runs (`skip_last_entry_lookup_for_tests`): without
/// the index lookup the reopened store answers the info's stale last entry.
#[test]
fn without_the_index_lookup_the_last_entry_after_a_reopen_is_stale() {
    let mut d = dirs(1 << 20, 1 << 20);
    {
        let s = open(&d);
        for e in 0..3 {
            s.put_entry(1, e, data(1, e)).unwrap();
        }
        s.flush().unwrap();
        for e in 3..40 {
            s.put_entry(1, e, data(1, e)).unwrap();
        }
        s.flush().unwrap();
    }
    d.config.skip_last_entry_lookup_for_tests = true;
    let s = open(&d);
    assert_eq!(s.get_entry(1, -1).unwrap(), Some(data(1, 2)));
}

#[test]
fn reopen_after_flush_finds_entries_and_ledger_state() {
    let d = dirs(1 << 20, 1 << 20);
    {
        let s = open(&d);
        s.put_entry(1, 0, data(1, 0)).unwrap();
        s.put_entry(1, 5, data(1, 5)).unwrap();
        s.put_entry(2, 0, data(2, 0)).unwrap();
        s.set_master_key(1, Bytes::from_static(&[9; 20])).unwrap();
        s.set_fenced(1).unwrap();
        s.set_explicit_lac(2, Bytes::from_static(b"lac body"))
            .unwrap();
        s.set_master_key(3, Bytes::from_static(&[3; 20])).unwrap();
        s.flush().unwrap();
        s.put_entry(2, 1, data(2, 1)).unwrap(); // never flushed: may be lost
    }
    let s = open(&d);
    assert_eq!(s.ledgers().unwrap(), vec![1, 2, 3]);
    assert_eq!(s.get_entry(1, 5).unwrap(), Some(data(1, 5)));
    assert_eq!(s.get_entry(2, 0).unwrap(), Some(data(2, 0)));
    assert_eq!(s.entry_ids(1).unwrap(), vec![0, 5]);
    let one = s.ledger_info(1).unwrap().unwrap();
    assert!(one.fenced && !one.deleted);
    assert_eq!(one.master_key.as_deref(), Some(&[9u8; 20][..]));
    assert_eq!(one.last_entry_id, Some(5));
    let two = s.ledger_info(2).unwrap().unwrap();
    assert_eq!(two.explicit_lac.as_deref(), Some(&b"lac body"[..]));
    assert!(!two.fenced);
    assert_eq!(s.ledger_info(3).unwrap().unwrap().last_entry_id, None);
    assert_eq!(s.ledger_info(4).unwrap(), None);
}

#[test]
fn reput_is_idempotent_before_and_after_flush() {
    let d = dirs(1 << 20, 1 << 20);
    {
        let s = open(&d);
        s.put_entry(1, 0, data(1, 0)).unwrap();
        s.put_entry(1, 0, data(1, 0)).unwrap();
        assert_eq!(s.write_cache_used(), data(1, 0).len() as u64);
        s.flush().unwrap();
        // Journal replay puts it again after it was flushed.
        s.put_entry(1, 0, data(1, 0)).unwrap();
        s.flush().unwrap();
        assert_eq!(s.entry_ids(1).unwrap(), vec![0]);
    }
    let s = open(&d);
    assert_eq!(s.entry_ids(1).unwrap(), vec![0]);
    assert_eq!(s.get_entry(1, 0).unwrap(), Some(data(1, 0)));
}

/// Finds the only entry log file and the offset of the record of `ledger`/`entry`.
fn only_log(s: &LedgerStore) -> PathBuf {
    let ids = s.entry_log_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    s.entry_log_path(ids[0]).unwrap()
}

#[test]
fn a_flipped_byte_is_a_read_error_naming_file_and_offset() {
    let d = dirs(1 << 20, 1 << 20);
    let s = open(&d);
    s.put_entry(1, 0, data(1, 0)).unwrap();
    s.put_entry(1, 1, data(1, 1)).unwrap();
    s.flush().unwrap();
    let path = only_log(&s);
    let f = RealFileSystem
        .open(&path, OpenOptions::write_create())
        .unwrap();
    // Entry 1's record starts after the header and entry 0's record; flip a payload byte.
    let rec0 = crate::entry_log::format::RECORD_HEADER_LEN as u64 + data(1, 0).len() as u64;
    let offset = crate::entry_log::format::HEADER_LEN as u64 + rec0;
    let at = offset + crate::entry_log::format::RECORD_HEADER_LEN as u64 + 3;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x01], at).unwrap();
    let e = s.get_entry(1, 1).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, LedgerStoreError::Corrupt { offset: o, .. } if o == offset),
        "{msg}"
    );
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("checksum"), "{msg}");
    assert_eq!(
        s.get_entry(1, 0).unwrap(),
        Some(data(1, 0)),
        "entry 0 intact"
    );
}

#[test]
fn a_truncated_log_is_a_read_error_not_a_missing_entry() {
    let d = dirs(1 << 20, 1 << 20);
    {
        let s = open(&d);
        s.put_entry(7, 0, data(7, 0)).unwrap();
        s.put_entry(7, 1, data(7, 1)).unwrap();
        s.flush().unwrap();
        let path = only_log(&s);
        let f = RealFileSystem
            .open(&path, OpenOptions::write_create())
            .unwrap();
        let len = f.len().unwrap();
        f.set_len(len - 5).unwrap();
    }
    let s = open(&d);
    let e = s.get_entry(7, 1).unwrap_err();
    assert!(matches!(e, LedgerStoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("file ends inside the record"), "{e}");
    assert_eq!(s.get_entry(7, 0).unwrap(), Some(data(7, 0)));
}

#[test]
fn rotation_records_bytes_per_ledger_and_entries_stay_readable() {
    let payload = Bytes::from(vec![1u8; 100]);
    let rec = (crate::entry_log::format::RECORD_HEADER_LEN + 100) as u64;
    // Header (64) + 3 records (372) = 436 <= 450 < 560: three records per log.
    let d = dirs(450, 1 << 20);
    {
        let s = open(&d);
        for e in 0..4 {
            s.put_entry(1, e, payload.clone()).unwrap();
            s.put_entry(2, e, payload.clone()).unwrap();
        }
        s.flush().unwrap();
        // The flush writes in (ledger, entry) order: 1:0..3, 2:0..3.
        assert_eq!(s.entry_log_ids(), vec![0, 1, 2]);
        assert_eq!(s.entry_log_ledgers(0).unwrap(), Some(vec![(1, 3 * rec)]));
        assert_eq!(
            s.entry_log_ledgers(1).unwrap(),
            Some(vec![(1, rec), (2, 2 * rec)])
        );
        assert_eq!(s.entry_log_ledgers(2).unwrap(), None, "still open");
        s.close().unwrap();
        assert_eq!(s.entry_log_ledgers(2).unwrap(), Some(vec![(2, 2 * rec)]));
    }
    let s = open(&d);
    assert_eq!(
        s.entry_log_ledgers(1).unwrap(),
        Some(vec![(1, rec), (2, 2 * rec)])
    );
    for e in 0..4 {
        assert_eq!(s.get_entry(1, e).unwrap(), Some(payload.clone()));
        assert_eq!(s.get_entry(2, e).unwrap(), Some(payload.clone()));
    }
}

#[test]
fn deleted_ledger_disappears_and_stays_deleted() {
    let d = dirs(1 << 20, 1 << 20);
    {
        let s = open(&d);
        s.put_entry(1, 0, data(1, 0)).unwrap();
        s.put_entry(2, 0, data(2, 0)).unwrap();
        s.flush().unwrap();
        s.put_entry(1, 1, data(1, 1)).unwrap();
        s.delete_ledger(1).unwrap();
        assert_eq!(s.get_entry(1, 0).unwrap(), None);
        assert_eq!(s.get_entry(1, 1).unwrap(), None);
        assert_eq!(s.entry_ids(1).unwrap(), Vec::<i64>::new());
        assert_eq!(s.ledgers().unwrap(), vec![2]);
        s.put_entry(1, 2, data(1, 2)).unwrap(); // replay of an old put: dropped
        assert_eq!(s.get_entry(1, 2).unwrap(), None);
        s.flush().unwrap();
    }
    let s = open(&d);
    assert_eq!(s.ledgers().unwrap(), vec![2]);
    assert!(s.ledger_info(1).unwrap().unwrap().deleted);
    assert_eq!(s.get_entry(1, 0).unwrap(), None);
    assert_eq!(s.get_entry(2, 0).unwrap(), Some(data(2, 0)));
}

#[test]
fn a_full_cache_blocks_a_put_until_another_thread_flushes() {
    let d = dirs(1 << 20, 100);
    let s = Arc::new(open(&d));
    s.put_entry(1, 0, Bytes::from(vec![0u8; 60])).unwrap();
    let (waiting_tx, waiting_rx) = mpsc::channel();
    let waiting_tx = Mutex::new(waiting_tx);
    s.set_flush_requester(Arc::new(move || {
        let _ = waiting_tx.lock().send(());
    }));
    let (done_tx, done_rx) = mpsc::channel();
    let s2 = s.clone();
    let t = std::thread::spawn(move || {
        let r = s2.put_entry(1, 1, Bytes::from(vec![1u8; 60]));
        done_tx.send(r.is_ok()).unwrap();
    });
    // The put asked for a flush, so it found the cache full and is waiting.
    waiting_rx.recv_timeout(PATIENCE).unwrap();
    assert!(
        done_rx.try_recv().is_err(),
        "the put must not complete while the cache is full"
    );
    assert_eq!(
        s.write_cache_used(),
        60,
        "the cache never grows past its bound"
    );
    s.flush().unwrap();
    assert!(done_rx.recv_timeout(PATIENCE).unwrap());
    t.join().unwrap();
    assert_eq!(s.write_cache_used(), 60);
    assert_eq!(s.get_entry(1, 0).unwrap(), Some(Bytes::from(vec![0u8; 60])));
    assert_eq!(s.get_entry(1, 1).unwrap(), Some(Bytes::from(vec![1u8; 60])));
}

#[test]
fn deleting_a_ledger_frees_room_for_a_blocked_put() {
    let d = dirs(1 << 20, 100);
    let s = Arc::new(open(&d));
    s.put_entry(1, 0, Bytes::from(vec![0u8; 80])).unwrap();
    let (waiting_tx, waiting_rx) = mpsc::channel();
    let waiting_tx = Mutex::new(waiting_tx);
    s.set_flush_requester(Arc::new(move || {
        let _ = waiting_tx.lock().send(());
    }));
    let s2 = s.clone();
    let t = std::thread::spawn(move || s2.put_entry(2, 0, Bytes::from(vec![2u8; 80])));
    waiting_rx.recv_timeout(PATIENCE).unwrap();
    s.delete_ledger(1).unwrap();
    t.join().unwrap().unwrap();
    assert_eq!(s.write_cache_used(), 80);
    assert_eq!(s.get_entry(2, 0).unwrap(), Some(Bytes::from(vec![2u8; 80])));
}

/// A placement giving each ledger its own entry log (what a later issue adds).
struct LogPerLedger;

impl crate::entry_log::EntryLogPlacement for LogPerLedger {
    fn slot_for(&self, ledger: i64) -> crate::entry_log::LogSlot {
        ledger as u64
    }
}

#[test]
fn placement_decides_which_log_an_entry_goes_to() {
    let d = dirs(1 << 20, 1 << 20);
    let s =
        LedgerStore::open_with_placement(&Env::real(), d.config.clone(), Box::new(LogPerLedger))
            .unwrap();
    for e in 0..3 {
        s.put_entry(10, e, data(10, e)).unwrap();
        s.put_entry(20, e, data(20, e)).unwrap();
    }
    s.close().unwrap();
    let ids = s.entry_log_ids();
    assert_eq!(ids.len(), 2);
    let mut per_log: Vec<Vec<i64>> = ids
        .iter()
        .map(|&id| {
            let map = s.entry_log_ledgers(id).unwrap().unwrap();
            map.into_iter().map(|(l, _)| l).collect()
        })
        .collect();
    per_log.sort();
    assert_eq!(per_log, vec![vec![10], vec![20]]);
    assert_eq!(s.get_entry(20, 2).unwrap(), Some(data(20, 2)));
}

#[test]
fn an_unrotated_log_can_be_scanned_after_a_restart() {
    let d = dirs(1 << 20, 1 << 20);
    {
        let s = open(&d);
        s.put_entry(1, 0, data(1, 0)).unwrap();
        s.put_entry(2, 0, data(2, 0)).unwrap();
        s.flush().unwrap();
        // Dropped without close(): the log keeps no ledgers map, as after a crash.
    }
    let s = open(&d);
    assert_eq!(s.entry_log_ledgers(0).unwrap(), None);
    let scan = s.scan_entry_log(0).unwrap();
    let rec = |l, e| (crate::entry_log::format::RECORD_HEADER_LEN + data(l, e).len()) as u64;
    assert_eq!(scan.ledgers, vec![(1, rec(1, 0)), (2, rec(2, 0))]);
    assert_eq!(scan.records, 2);
}

/// A flush writes direct-I/O entry logs in small pieces while the write cache is at most
/// half full, in large ones once it is fuller (adds are outrunning the flush).
#[test]
fn the_flush_writes_small_pieces_while_the_write_cache_has_room() {
    use crate::entry_log::log_file::{DIRECT_PIECE_CATCHING_UP, DIRECT_PIECE_WITH_ROOM};
    let d = dirs(1 << 30, 4 << 20);
    let s = open(&d);
    assert_eq!(s.direct_piece_now(), DIRECT_PIECE_WITH_ROOM, "empty");
    let big = Bytes::from(vec![1u8; 512 << 10]);
    for e in 0..4 {
        s.put_entry(1, e, big.clone()).unwrap();
    }
    assert_eq!(s.direct_piece_now(), DIRECT_PIECE_WITH_ROOM, "half full");
    s.put_entry(1, 4, big.clone()).unwrap();
    assert_eq!(s.direct_piece_now(), DIRECT_PIECE_CATCHING_UP, "past half");
    s.flush().unwrap();
    assert_eq!(s.direct_piece_now(), DIRECT_PIECE_WITH_ROOM, "flushed");
}

#[test]
fn an_entry_larger_than_the_cache_is_taken_when_the_cache_is_empty() {
    let d = dirs(1 << 20, 10);
    let s = open(&d);
    s.put_entry(1, 0, Bytes::from(vec![5u8; 50])).unwrap();
    assert_eq!(s.write_cache_used(), 50);
    s.flush().unwrap();
    s.put_entry(1, 1, Bytes::from(vec![6u8; 50])).unwrap();
    assert_eq!(s.get_entry(1, 0).unwrap(), Some(Bytes::from(vec![5u8; 50])));
    assert_eq!(s.get_entry(1, 1).unwrap(), Some(Bytes::from(vec![6u8; 50])));
}

#[test]
fn concurrent_puts_reads_and_flushes() {
    const LEDGERS: i64 = 3;
    const ENTRIES: i64 = 300;
    // A small cache and log limit so that backpressure and rotation both happen.
    let d = dirs(4096, 2048);
    let s = Arc::new(open(&d));
    let written: Arc<Vec<AtomicI64>> = Arc::new((0..LEDGERS).map(|_| AtomicI64::new(-1)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for l in 0..LEDGERS {
        let (s, written) = (s.clone(), written.clone());
        threads.push(std::thread::spawn(move || {
            for e in 0..ENTRIES {
                s.put_entry(l, e, data(l, e)).unwrap();
                written[l as usize].store(e, Ordering::SeqCst);
            }
        }));
    }
    let mut helpers = Vec::new();
    {
        let (s, stop) = (s.clone(), stop.clone());
        helpers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                s.flush().unwrap();
                std::thread::yield_now();
            }
        }));
    }
    for r in 0..2 {
        let (s, written, stop) = (s.clone(), written.clone(), stop.clone());
        helpers.push(std::thread::spawn(move || {
            let mut i = r;
            while !stop.load(Ordering::SeqCst) {
                let l = i % LEDGERS;
                let hi = written[l as usize].load(Ordering::SeqCst);
                if hi >= 0 {
                    let e = (i * 7919) % (hi + 1);
                    assert_eq!(s.get_entry(l, e).unwrap(), Some(data(l, e)), "{l}:{e}");
                }
                i += 1;
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    for t in helpers {
        t.join().unwrap();
    }
    s.flush().unwrap();
    assert!(
        s.entry_log_ids().len() > 1,
        "the small limit forces rotation"
    );
    for l in 0..LEDGERS {
        assert_eq!(s.entry_ids(l).unwrap(), (0..ENTRIES).collect::<Vec<_>>());
        for e in 0..ENTRIES {
            assert_eq!(s.get_entry(l, e).unwrap(), Some(data(l, e)));
        }
    }
}

#[test]
fn bad_configuration_is_refused() {
    let mut d = dirs(10, 1 << 20);
    let e = LedgerStore::open(&Env::real(), d.config.clone())
        .err()
        .unwrap();
    assert!(e.to_string().contains("entry_log_size_limit"), "{e}");
    d.config.entry_log_size_limit = 1 << 20;
    d.config.write_cache_bytes = 0;
    let e = LedgerStore::open(&Env::real(), d.config.clone())
        .err()
        .unwrap();
    assert!(e.to_string().contains("write_cache_bytes"), "{e}");
    d.config.write_cache_bytes = 1 << 20;
    let twice = d.config.ledger_dirs[0].clone();
    d.config.ledger_dirs.push(twice);
    let e = LedgerStore::open(&Env::real(), d.config.clone())
        .err()
        .unwrap();
    assert!(e.to_string().contains("configured twice"), "{e}");
    d.config.ledger_dirs.clear();
    let e = LedgerStore::open(&Env::real(), d.config.clone())
        .err()
        .unwrap();
    assert!(e.to_string().contains("no ledger directories"), "{e}");
}

/// A real file system whose writes or syncs can be made to fail.
#[derive(Default)]
struct Faults {
    full: AtomicBool,
    sync_fails: AtomicBool,
    write_back_fails: AtomicBool,
    /// Bytes passed to `write_back`, call by call.
    write_backs: Mutex<Vec<u64>>,
}

struct FaultyFs(Arc<Faults>);
struct FaultyFile(Arc<dyn File>, Arc<Faults>);

impl File for FaultyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.1.full.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "injected ENOSPC",
            ));
        }
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.1.sync_fails.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected EIO"));
        }
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        self.0.allocate(len)
    }
    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        if self.1.write_back_fails.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected EIO in write-back"));
        }
        self.1.write_backs.lock().push(len);
        self.0.write_back(offset, len)
    }
}

impl FileSystem for FaultyFs {
    fn open(&self, path: &Path, opts: OpenOptions) -> io::Result<Arc<dyn File>> {
        Ok(Arc::new(FaultyFile(
            RealFileSystem.open(path, opts)?,
            self.0.clone(),
        )))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        RealFileSystem.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        RealFileSystem.list_dir(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealFileSystem.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFileSystem.rename(from, to)
    }
    fn exists(&self, path: &Path) -> bool {
        RealFileSystem.exists(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        RealFileSystem.sync_dir(path)
    }
    fn space(&self, path: &Path) -> io::Result<folio_env::DiskSpace> {
        RealFileSystem.space(path)
    }
    fn lock_exclusive(&self, path: &Path) -> io::Result<folio_env::FileLock> {
        RealFileSystem.lock_exclusive(path)
    }
}

fn faulty(d: &Dirs) -> (LedgerStore, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let mut env = Env::real();
    env.fs = Arc::new(FaultyFs(faults.clone()));
    (LedgerStore::open(&env, d.config.clone()).unwrap(), faults)
}

#[test]
fn a_full_disk_is_no_space_naming_the_directory_and_flush_retries() {
    let d = dirs(1 << 20, 1 << 20);
    let (s, faults) = faulty(&d);
    s.put_entry(1, 0, data(1, 0)).unwrap();
    s.flush().unwrap();
    // Large enough to leave the 1 MiB write buffer, so the write happens in the flush.
    let big = Bytes::from(vec![4u8; 2 << 20]);
    s.put_entry(1, 1, big.clone()).unwrap();
    faults.full.store(true, Ordering::SeqCst);
    let e = s.flush().unwrap_err();
    let dir = d.config.ledger_dirs[0].join("current");
    assert!(
        matches!(&e, LedgerStoreError::NoSpace { dir: got, .. } if *got == dir),
        "{e}"
    );
    assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
    assert_eq!(
        s.get_entry(1, 1).unwrap(),
        Some(big.clone()),
        "still cached"
    );
    faults.full.store(false, Ordering::SeqCst);
    s.flush().unwrap();
    assert_eq!(s.write_cache_used(), 0);
    drop(s);
    let s = open(&d);
    assert_eq!(s.get_entry(1, 1).unwrap(), Some(big));
    assert_eq!(s.get_entry(1, 0).unwrap(), Some(data(1, 0)));
}

#[test]
fn a_failed_fsync_poisons_writes_but_reads_go_on() {
    let d = dirs(1 << 20, 1 << 20);
    let (s, faults) = faulty(&d);
    s.put_entry(1, 0, data(1, 0)).unwrap();
    faults.sync_fails.store(true, Ordering::SeqCst);
    let e = s.flush().unwrap_err();
    assert!(matches!(e, LedgerStoreError::SyncFailed { .. }), "{e}");
    faults.sync_fails.store(false, Ordering::SeqCst);
    assert!(matches!(
        s.put_entry(1, 1, data(1, 1)),
        Err(LedgerStoreError::Poisoned(_))
    ));
    assert!(matches!(s.flush(), Err(LedgerStoreError::Poisoned(_))));
    assert_eq!(s.get_entry(1, 0).unwrap(), Some(data(1, 0)));
}

#[test]
fn a_put_waiting_for_room_gets_an_error_when_the_flush_fails() {
    let mut d = dirs(1 << 20, 1 << 20);
    d.config.write_cache_bytes = 3 << 20;
    let (s, faults) = faulty(&d);
    let s = Arc::new(s);
    // 2 MiB: more than the 1 MiB write buffer, so the flush really writes.
    s.put_entry(1, 0, Bytes::from(vec![1u8; 2 << 20])).unwrap();
    let (waiting_tx, waiting_rx) = mpsc::channel();
    let waiting_tx = Mutex::new(waiting_tx);
    s.set_flush_requester(Arc::new(move || {
        let _ = waiting_tx.lock().send(());
    }));
    let s2 = s.clone();
    let t = std::thread::spawn(move || s2.put_entry(1, 1, Bytes::from(vec![2u8; 2 << 20])));
    waiting_rx.recv_timeout(PATIENCE).unwrap();
    faults.full.store(true, Ordering::SeqCst);
    assert!(matches!(s.flush(), Err(LedgerStoreError::NoSpace { .. })));
    let e = t.join().unwrap().unwrap_err();
    assert!(matches!(e, LedgerStoreError::WriteCacheFull(_)), "{e}");
    assert!(e.to_string().contains("no space left"), "{e}");
    faults.full.store(false, Ordering::SeqCst);
    s.flush().unwrap();
    s.put_entry(1, 1, Bytes::from(vec![2u8; 2 << 20])).unwrap();
    assert_eq!(
        s.get_entry(1, 0).unwrap(),
        Some(Bytes::from(vec![1u8; 2 << 20]))
    );
}

#[test]
fn a_flush_writes_back_in_pieces_and_a_failed_write_back_poisons() {
    let d = dirs(1 << 30, 64 << 20);
    let (s, faults) = faulty(&d);
    let entry = |i: i64| Bytes::from(vec![i as u8; 64 << 10]);
    // 6 MiB of entries: the flush hands them to the device in ~1 MiB pieces, not in one
    // burst at its fdatasync.
    for i in 0..96 {
        s.put_entry(1, i, entry(i)).unwrap();
    }
    s.flush().unwrap();
    let pieces = faults.write_backs.lock().clone();
    assert!(
        (5..=6).contains(&pieces.len()) && pieces.iter().all(|&n| n >= 1 << 20),
        "write-backs of {pieces:?} bytes for 6 MiB flushed"
    );
    // A write-back that fails is treated as a failed fsync: the store stops taking
    // writes (what the kernel holds is unknown) but what it has stays readable.
    for i in 96..128 {
        s.put_entry(1, i, entry(i)).unwrap();
    }
    faults.write_back_fails.store(true, Ordering::SeqCst);
    let e = s.flush().unwrap_err();
    assert!(matches!(e, LedgerStoreError::SyncFailed { .. }), "{e}");
    assert!(e.to_string().contains("write-back before fdatasync"), "{e}");
    assert!(matches!(
        s.put_entry(2, 0, data(2, 0)),
        Err(LedgerStoreError::Poisoned(_))
    ));
    for i in [0, 95, 96, 127] {
        assert_eq!(s.get_entry(1, i).unwrap(), Some(entry(i)), "entry {i}");
    }
    drop(s);
    // The flushed entries are durable; a restart finds them.
    let s = open(&d);
    for i in 0..96 {
        assert_eq!(s.get_entry(1, i).unwrap(), Some(entry(i)), "entry {i}");
    }
}

/// The lock-free figures: `unflushed_bytes` (what decides that a checkpoint is due) counts
/// the entries the next flush writes: puts, less deleted ledgers, and not the generation
/// a running flush writes, which the cache still holds; `put_would_wait` counts both.
#[test]
fn unflushed_bytes_and_room_count_what_the_cache_holds() {
    let d = dirs(1 << 20, 1000);
    let s = Arc::new(open(&d));
    s.put_entry(1, 0, Bytes::from(vec![0u8; 60])).unwrap();
    s.put_entry(2, 0, Bytes::from(vec![0u8; 40])).unwrap();
    assert_eq!(s.unflushed_bytes(), 100);
    assert!(
        !s.put_would_wait(900) && s.put_would_wait(901),
        "the cache holds 1000"
    );
    s.delete_ledger(2).unwrap();
    assert_eq!(s.unflushed_bytes(), 60);
    assert!(!s.put_would_wait(940) && s.put_would_wait(941));
    let seen = Arc::new(Mutex::new(None));
    let (s2, seen2) = (Arc::downgrade(&s), seen.clone());
    *s.before_index_commit.lock() = Some(Box::new(move || {
        let s2 = s2.upgrade().unwrap();
        s2.put_entry(1, 1, Bytes::from(vec![1u8; 30])).unwrap();
        *seen2.lock() = Some((s2.unflushed_bytes(), s2.write_cache_used()));
    }));
    s.flush().unwrap();
    *s.before_index_commit.lock() = None;
    assert_eq!(
        *seen.lock(),
        Some((30, 90)),
        "(unflushed, cached) during the flush"
    );
    assert_eq!((s.unflushed_bytes(), s.write_cache_used()), (30, 30));
    assert!(
        !s.put_would_wait(970) && s.put_would_wait(971),
        "the flushed bytes are free"
    );
}

/// An index directory lost or moved while entry logs hold data: the store refuses to
/// start with a fresh, empty index (which would answer "no such entry" for acknowledged
/// entries), naming the directory; the same when only a journal mark shows that data was
/// flushed here. A store that never flushed starts with a new index.
#[test]
fn a_lost_index_is_refused_while_entry_logs_or_a_journal_mark_say_there_was_data() {
    let d = dirs(1 << 20, 1 << 20);
    let s = open(&d);
    drop(s);
    // Never flushed: losing the index loses nothing (the journal holds it all).
    std::fs::remove_dir_all(&d.config.index_dir).unwrap();
    let s = open(&d);
    s.put_entry(1, 0, data(1, 0)).unwrap();
    s.flush().unwrap();
    drop(s);

    let moved = d.config.index_dir.with_file_name("index-moved");
    std::fs::rename(&d.config.index_dir, &moved).unwrap();
    let err = LedgerStore::open(&Env::real(), d.config.clone())
        .err()
        .expect("a lost index must stop start-up");
    let msg = err.to_string();
    assert!(
        matches!(err, LedgerStoreError::IndexMissing { .. }),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("index directory {}", d.config.index_dir.display())),
        "{msg}"
    );
    assert!(msg.contains("entry log"), "{msg}");
    // Refused again (the failed start left no empty index behind), and an empty index
    // file counts as none.
    std::fs::create_dir_all(d.config.index_dir.join("current")).unwrap();
    std::fs::write(
        d.config
            .index_dir
            .join("current")
            .join(crate::index::INDEX_FILE),
        b"",
    )
    .unwrap();
    assert!(matches!(
        LedgerStore::open(&Env::real(), d.config.clone()),
        Err(LedgerStoreError::IndexMissing { .. })
    ));
    std::fs::remove_dir_all(&d.config.index_dir).unwrap();
    std::fs::rename(&moved, &d.config.index_dir).unwrap();
    let s = open(&d);
    assert_eq!(s.get_entry(1, 0).unwrap(), Some(data(1, 0)));
    drop(s);

    // No entry log (all collected, or the ledger directory is new) but a journal mark.
    let d2 = dirs(1 << 20, 1 << 20);
    let journal = d2.config.index_dir.with_file_name("journal");
    let current = journal.join("current");
    std::fs::create_dir_all(&current).unwrap();
    let mut config = d2.config.clone();
    config.journal_dirs = vec![journal.clone()];
    drop(LedgerStore::open(&Env::real(), config.clone()).unwrap());
    std::fs::write(
        current.join(crate::journal::format::MARK_FILE),
        crate::journal::format::encode_mark(crate::journal::Position {
            file_id: 3,
            offset: 32,
        }),
    )
    .unwrap();
    std::fs::remove_dir_all(&config.index_dir).unwrap();
    let err = LedgerStore::open(&Env::real(), config)
        .err()
        .expect("a journal mark says data was flushed");
    let msg = err.to_string();
    assert!(msg.contains(&journal.display().to_string()), "{msg}");
    assert!(msg.contains("checkpoint mark"), "{msg}");
}

/// A miss reads the ledger's following entries ahead, and the reads after it come from
/// the read cache, each the entry asked for: a gap in the entry ids, another ledger's
/// records in between and a deleted ledger all end the run or empty the cache, with
/// entry logs written through the page cache or with direct I/O.
#[test]
fn read_ahead_serves_the_next_entries_of_the_ledger_and_nothing_else() {
    for direct in [false, true] {
        let mut d = dirs(1 << 30, 64 << 20);
        d.config.entry_log_direct_io = direct;
        d.config.read_ahead_cache_bytes = 64 << 20;
        let s = open(&d);
        for e in (0..60).filter(|&e| e != 51) {
            s.put_entry(1, e, data(1, e)).unwrap();
            s.put_entry(2, e, data(2, e)).unwrap();
            if e == 30 {
                // Two flushes: ledger 1's entries are in two runs with ledger 2's between.
                s.flush().unwrap();
            }
        }
        s.flush().unwrap();
        assert_eq!(s.read_ahead_hits(), 0);
        for e in 0..51 {
            assert_eq!(
                s.get_entry(1, e).unwrap(),
                Some(data(1, e)),
                "direct {direct}"
            );
        }
        // 0 and 31 were misses (each starts a run); the rest were read ahead.
        assert_eq!(s.read_ahead_hits(), 49, "direct {direct}");
        let st = s.read_cache_stats();
        assert_eq!((st.hits, st.misses), (49, 2), "direct {direct}");
        assert!(st.read_ahead_entries >= 49 && st.entries >= 49, "{st:?}");
        assert_eq!(s.get_entry(1, 51).unwrap(), None, "the gap is not filled");
        for e in 0..60 {
            let want = (e != 51).then(|| data(2, e));
            assert_eq!(s.get_entry(2, e).unwrap(), want, "direct {direct}");
        }
        assert_eq!(s.get_entry(1, 52).unwrap(), Some(data(1, 52)));
        let hits = s.read_ahead_hits();
        s.delete_ledger(1).unwrap();
        assert_eq!(s.get_entry(1, 53).unwrap(), None, "deleted");
        assert_eq!(s.read_ahead_hits(), hits);
        s.close().unwrap();
    }
}

/// With the bound at zero nothing is read ahead, and every read still returns its entry.
#[test]
fn read_ahead_can_be_turned_off() {
    let mut d = dirs(1 << 30, 64 << 20);
    d.config.read_ahead_cache_bytes = 0;
    let s = open(&d);
    for e in 0..20 {
        s.put_entry(1, e, data(1, e)).unwrap();
    }
    s.flush().unwrap();
    for e in 0..20 {
        assert_eq!(s.get_entry(1, e).unwrap(), Some(data(1, e)));
    }
    assert_eq!(s.read_ahead_hits(), 0);
}

/// An entry put again with other bytes (as a journal replay or a second recovery may)
/// is read as the new copy: the put drops the copy read ahead, and a read ahead of the
/// old copy still in an earlier run of the log keeps only what the index points at.
#[test]
fn read_ahead_never_serves_an_older_copy_of_an_entry() {
    let mut d = dirs(1 << 30, 64 << 20);
    d.config.read_ahead_cache_bytes = 64 << 20;
    let v2 = |e: i64| Bytes::from(format!("second copy of {e}"));
    {
        let s = open(&d);
        for e in 0..10 {
            s.put_entry(1, e, data(1, e)).unwrap();
        }
        s.flush().unwrap();
        assert_eq!(s.get_entry(1, 0).unwrap(), Some(data(1, 0)));
        assert!(s.read_cache.lock().used() > 0, "1..9 read ahead");
        s.put_entry(1, 5, v2(5)).unwrap();
        s.flush().unwrap();
        assert_eq!(
            s.get_entry(1, 5).unwrap(),
            Some(v2(5)),
            "the put dropped the old copy"
        );
        s.close().unwrap();
    }
    let s = open(&d);
    assert_eq!(s.get_entry(1, 4).unwrap(), Some(data(1, 4)));
    assert_eq!(
        s.get_entry(1, 5).unwrap(),
        Some(v2(5)),
        "the log's older copy is not live"
    );
    for e in (0..10).filter(|&e| e != 5) {
        assert_eq!(s.get_entry(1, e).unwrap(), Some(data(1, e)));
    }
}

/// With read-ahead, a read that cannot wait serves the run from the page cache as the
/// blocking read would (the entries after it then come from the read cache), and keeps
/// only the copies the index points at.
#[test]
fn a_read_ahead_without_waiting_serves_the_run_and_only_live_copies() {
    let mut d = dirs(1 << 30, 64 << 20);
    // Written through the page cache, so that the logs' bytes are there to read.
    d.config.entry_log_direct_io = false;
    d.config.read_ahead_cache_bytes = 64 << 20;
    let v2 = |e: i64| Bytes::from(format!("second copy of {e}"));
    {
        let s = open(&d);
        for e in 0..50 {
            s.put_entry(1, e, data(1, e)).unwrap();
        }
        s.flush().unwrap();
        assert_eq!(s.get_entry_nowait(1, 0), Some(data(1, 0)));
        assert_eq!(s.read_ahead_hits(), 0);
        for e in 1..50 {
            assert_eq!(s.get_entry_nowait(1, e), Some(data(1, e)), "entry {e}");
        }
        assert_eq!(s.read_ahead_hits(), 49, "1..49 came with 0's run");
        s.put_entry(1, 5, v2(5)).unwrap();
        s.flush().unwrap();
        assert_eq!(
            s.get_entry_nowait(1, 5),
            Some(v2(5)),
            "the put dropped the old copy"
        );
        s.close().unwrap();
    }
    // Reopened: the run from 4 meets 5's older copy in the log, which the index no longer
    // points at; the run ends there.
    let s = open(&d);
    // A blocking read opens the log (a read that cannot wait does not `open`); 49 is
    // the last of its run.
    assert_eq!(s.get_entry(1, 49).unwrap(), Some(data(1, 49)));
    assert_eq!(s.get_entry_nowait(1, 4), Some(data(1, 4)));
    assert_eq!(s.get_entry_nowait(1, 5), Some(v2(5)));
    assert_eq!(s.read_ahead_hits(), 0, "5 was not read ahead");
    for e in (0..50).filter(|&e| e != 5) {
        assert_eq!(s.get_entry_nowait(1, e), Some(data(1, e)), "entry {e}");
    }
}

/// A blocking read inside a run that another thread is reading from the disk waits for
/// that run and is answered from the read cache, rather than reading the run again (the
/// reads a catch-up client keeps in flight miss together).
#[test]
fn a_read_inside_a_run_being_read_waits_for_it() {
    use std::sync::atomic::Ordering::Relaxed;
    let mut d = dirs(1 << 30, 64 << 20);
    d.config.read_ahead_cache_bytes = 64 << 20;
    let s = Arc::new(open(&d));
    for e in 0..50 {
        s.put_entry(1, e, data(1, e)).unwrap();
    }
    s.flush().unwrap();
    // The first run read stops until released.
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let first = std::sync::atomic::AtomicBool::new(true);
    *s.runs_in_flight.during_read.lock() = Some(Box::new(move || {
        if first.swap(false, Relaxed) {
            held_tx.send(()).unwrap();
            go_rx.lock().unwrap().recv().unwrap();
        }
    }));
    let a = {
        let s = s.clone();
        std::thread::spawn(move || s.get_entry(1, 0).unwrap())
    };
    held_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let b = {
        let s = s.clone();
        std::thread::spawn(move || s.get_entry(1, 3).unwrap())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while s.runs_in_flight.waits.load(Relaxed) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the read of entry 3 did not wait for the run from 0"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    go_tx.send(()).unwrap();
    assert_eq!(a.join().unwrap(), Some(data(1, 0)));
    assert_eq!(b.join().unwrap(), Some(data(1, 3)));
    assert_eq!(
        s.read_ahead_hits(),
        1,
        "entry 3 came from the run read ahead"
    );
}

/// A read served without waiting for the disk (a bookie answers it on the connection's
/// task) must give exactly what the blocking read gives, or nothing. On the simulated disk
/// a fixed third of the pages "would block", so both answers occur; on a real file system
/// the entries just flushed are in the page cache and every read is served.
#[test]
fn a_read_that_cannot_block_answers_as_a_blocking_read_or_not_at_all() {
    let fs = folio_env::sim::SimFileSystem::new();
    let mut env = Env::real();
    env.fs = Arc::new(fs);
    // Small logs: the entries spread over several of them.
    let d = dirs(1 << 14, 1 << 20);
    let sim = LedgerStore::open(&env, d.config.clone()).unwrap();
    let real_dirs = dirs(1 << 14, 1 << 20);
    let real = open(&real_dirs);
    for s in [&sim, &real] {
        for l in 1..=3 {
            for e in 0..200 {
                s.put_entry(l, e, data(l, e)).unwrap();
            }
        }
        // In the write cache: always served.
        assert_eq!(s.get_entry_nowait(2, 7), Some(data(2, 7)));
        assert_eq!(s.get_entry_nowait(2, -1), Some(data(2, 199)), "-1 = last");
        s.flush().unwrap();
    }
    let (mut served, mut refused) = (0, 0);
    for l in 1..=3 {
        for e in 0..200 {
            match sim.get_entry_nowait(l, e) {
                Some(got) => {
                    assert_eq!(got, data(l, e), "ledger {l} entry {e}");
                    served += 1;
                }
                None => refused += 1,
            }
            assert_eq!(sim.get_entry(l, e).unwrap(), Some(data(l, e)));
            assert_eq!(
                real.get_entry_nowait(l, e),
                Some(data(l, e)),
                "ledger {l} entry {e}, just flushed to a real file"
            );
        }
    }
    assert!(
        served > 0 && refused > 0,
        "served {served}, refused {refused}"
    );
    // Absent, unknown, invalid, deleted: left to the blocking read, which answers them.
    for s in [&sim, &real] {
        assert_eq!(s.get_entry_nowait(1, 200), None);
        assert_eq!(s.get_entry_nowait(9, 0), None);
        assert_eq!(s.get_entry_nowait(1, -2), None);
        s.delete_ledger(3).unwrap();
        assert!((0..200).all(|e| s.get_entry_nowait(3, e).is_none()));
        assert_eq!(s.get_entry(3, 5).unwrap(), None);
    }
}

/// Flushes for room commit the index once in `index_commit_flushes` when each holds many
/// entries per ledger, and `SPARSE_COMMIT_FACTOR` times less often when each holds one or
/// two entries of each of many ledgers (then a commit rewrites an index block per entry or
/// two). Every entry stays readable meanwhile and after a reopen.
#[test]
fn sparse_flushes_for_room_commit_the_index_less_often() {
    let d = dirs(1 << 20, 8 << 20);
    let d = Dirs {
        config: LedgerStoreConfig {
            index_commit_flushes: 2,
            ..d.config
        },
        ..d
    };
    let s = open(&d);
    // Which of `flushes` flushes for room committed, each of `ledgers` ledgers getting
    // `per_ledger` entries before each.
    let mut next = std::collections::HashMap::<i64, i64>::new();
    let mut run = |ledgers: i64, per_ledger: i64, flushes: usize| -> Vec<bool> {
        (0..flushes)
            .map(|_| {
                for l in 1..=ledgers {
                    for _ in 0..per_ledger {
                        let e = next.entry(l).or_default();
                        s.put_entry(l, *e, data(l, *e)).unwrap();
                        *e += 1;
                    }
                }
                s.flush_for_room().unwrap()
            })
            .collect()
    };
    // Dense: 4 ledgers, 8 entries each per flush.
    assert_eq!(run(4, 8, 4), [false, true, false, true]);
    // Sparse: 50 ledgers, one entry each per flush: 2 x 16 flushes per commit.
    let every = 2 * super::SPARSE_COMMIT_FACTOR;
    let mut expected = vec![false; every - 1];
    expected.push(true);
    assert_eq!(run(50, 1, 2 * every), expected.repeat(2));
    for (l, n) in &next {
        for e in 0..*n {
            assert_eq!(s.get_entry(*l, e).unwrap(), Some(data(*l, e)), "{l}:{e}");
        }
    }
    drop(s);
    let s = open(&d);
    for (l, n) in &next {
        assert_eq!(
            s.entry_ids(*l).unwrap(),
            (0..*n).collect::<Vec<_>>(),
            "ledger {l}"
        );
    }
}
