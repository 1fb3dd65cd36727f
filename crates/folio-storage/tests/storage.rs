//! The engine's semantics through its public API, on real files in a temp directory,
//! over the production `LedgerStore`.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_env::{Env, FileSystem};
use folio_storage::journal::Position;
use folio_storage::ledger_store::{LedgerStore, LedgerStoreConfig};
use folio_storage::{JournalConfig, Storage, StorageConfig, StorageError};

const KEY: &[u8] = &[5; 20];

fn config(dir: &Path) -> StorageConfig {
    StorageConfig {
        journal: JournalConfig {
            prealloc_size: 64 * 1024,
            ..JournalConfig::with_dirs(vec![dir.join("journal0"), dir.join("journal1")])
        },
        flush_interval: Duration::ZERO,
        ..StorageConfig::default()
    }
}

/// The production ledger store (entry logs + index) in `dir`.
fn ledger_store(env: &Env, dir: &Path) -> Arc<LedgerStore> {
    let cfg = LedgerStoreConfig::new(vec![dir.join("ledgers")], dir.join("index"));
    Arc::new(LedgerStore::open(env, cfg).unwrap())
}

fn open(dir: &Path, cfg: StorageConfig) -> Storage {
    let env = Env::real();
    Storage::open(&env, cfg, ledger_store(&env, dir)).unwrap()
}

fn entry(ledger: i64, entry: i64, lac: i64, payload: &[u8]) -> Bytes {
    let mut b = Vec::new();
    for v in [ledger, entry, lac, payload.len() as i64] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(payload);
    Bytes::from(b)
}

fn done() -> (
    folio_storage::WriteCallback,
    mpsc::Receiver<Result<(), StorageError>>,
) {
    let (tx, rx) = mpsc::channel();
    (
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
        rx,
    )
}

fn wait(rx: mpsc::Receiver<Result<(), StorageError>>) -> Result<(), StorageError> {
    rx.recv_timeout(Duration::from_secs(60))
        .expect("no completion")
}

fn add(s: &Storage, ledger: i64, e: i64, key: &[u8], recovery: bool) -> Result<(), StorageError> {
    let (cb, rx) = done();
    s.add_entry(
        ledger,
        e,
        key,
        entry(ledger, e, e - 1, b"data"),
        recovery,
        cb,
    );
    wait(rx)
}

fn fence(s: &Storage, ledger: i64) -> Result<(), StorageError> {
    let (cb, rx) = done();
    s.fence(ledger, KEY, cb);
    wait(rx)
}

fn write_lac(s: &Storage, ledger: i64, lac: i64) -> Result<(), StorageError> {
    let mut body = ledger.to_be_bytes().to_vec();
    body.extend_from_slice(&lac.to_be_bytes());
    let (cb, rx) = done();
    s.write_lac(ledger, KEY, Bytes::from(body), cb);
    wait(rx)
}

/// Polls `cond` (no timing assertion: only a generous upper bound).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never happened: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn adds_reads_last_entry_and_entry_list() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path(), config(tmp.path()));
    for e in [0, 1, 2, 5] {
        add(&s, 7, e, KEY, false).unwrap();
    }
    assert_eq!(
        s.read_entry(7, 2).unwrap().unwrap(),
        entry(7, 2, 1, b"data")
    );
    assert_eq!(
        s.read_entry(7, -1).unwrap().unwrap(),
        entry(7, 5, 4, b"data")
    );
    assert_eq!(s.read_entry(7, 3).unwrap(), None);
    assert_eq!(s.read_entry(8, 0).unwrap(), None);
    assert_eq!(s.entry_ids(7).unwrap(), vec![0, 1, 2, 5]);
    assert!(s.ledger_exists(7).unwrap());
    assert!(!s.ledger_exists(8).unwrap());
    assert_eq!(s.master_key(7).unwrap().unwrap().as_ref(), KEY);
    let (cb, rx) = done();
    s.force_ledger(7, cb);
    wait(rx).unwrap();
}

#[test]
fn a_wrong_master_key_or_malformed_entry_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path(), config(tmp.path()));
    add(&s, 1, 0, KEY, false).unwrap();
    let e = add(&s, 1, 1, &[9; 20], false).unwrap_err();
    assert!(matches!(e, StorageError::Unauthorized { ledger: 1 }), "{e}");
    assert_eq!(
        s.read_entry(1, 1).unwrap(),
        None,
        "refused add must not be stored"
    );
    let (cb, rx) = done();
    s.fence(1, &[9; 20], cb);
    assert!(matches!(wait(rx), Err(StorageError::Unauthorized { .. })));

    let (cb, rx) = done();
    s.add_entry(1, 2, KEY, Bytes::from_static(b"short"), false, cb);
    assert!(matches!(wait(rx), Err(StorageError::BadRequest(_))));
    let (cb, rx) = done();
    s.add_entry(1, 3, KEY, entry(1, 4, 0, b"x"), false, cb);
    let e = wait(rx).unwrap_err();
    assert!(e.to_string().contains("entry Some(4)"), "{e}");
}

/// Keys of BookKeeper's usual 20 bytes are kept inline and others as they came: each is
/// checked whole (not by a prefix or its length), before and after a restart.
#[test]
fn master_keys_of_any_length_are_checked_whole_across_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let short: &[u8] = b"short key";
    let mut near = KEY.to_vec();
    near[19] ^= 1;
    let refused = |s: &Storage, ledger: i64, e: i64, key: &[u8]| {
        let r = add(s, ledger, e, key, false);
        assert!(
            matches!(r, Err(StorageError::Unauthorized { .. })),
            "ledger {ledger} took key {key:?}: {r:?}"
        );
    };
    for restart in [false, true] {
        let s = open(tmp.path(), config(tmp.path()));
        let first = if restart { 2 } else { 0 };
        add(&s, 1, first, KEY, false).unwrap();
        add(&s, 2, first, short, false).unwrap();
        refused(&s, 1, first + 1, &near);
        refused(&s, 1, first + 1, &KEY[..19]);
        refused(&s, 1, first + 1, short);
        refused(&s, 2, first + 1, b"short kez");
        refused(&s, 2, first + 1, b"short");
        refused(&s, 2, first + 1, KEY);
        assert!(s.write_close(1, &near).is_err());
        assert!(s.write_close(2, KEY).is_err());
        add(&s, 1, first + 1, KEY, false).unwrap();
        add(&s, 2, first + 1, short, false).unwrap();
        s.checkpoint().unwrap();
    }
}

#[test]
fn fencing_survives_restarts_and_admits_only_recovery_adds() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path());
    {
        let s = open(tmp.path(), cfg.clone());
        add(&s, 3, 0, KEY, false).unwrap();
        fence(&s, 3).unwrap();
        assert!(matches!(
            add(&s, 3, 1, KEY, false),
            Err(StorageError::Fenced { ledger: 3 })
        ));
        add(&s, 3, 1, KEY, true).unwrap();
        fence(&s, 3).unwrap(); // fencing twice is fine
        // A fence of an unknown ledger creates it with the key.
        fence(&s, 4).unwrap();
        drop(s); // no final checkpoint: the restart must replay the journal
    }
    {
        // Restart without a checkpoint: the journal brings the fence back.
        let s = open(tmp.path(), cfg.clone());
        assert!(s.replay_stats().records >= 5, "{:?}", s.replay_stats());
        assert!(s.is_fenced(3).unwrap());
        assert!(s.is_fenced(4).unwrap());
        assert_eq!(s.master_key(4).unwrap().unwrap().as_ref(), KEY);
        assert!(matches!(
            add(&s, 3, 2, KEY, false),
            Err(StorageError::Fenced { .. })
        ));
        assert!(s.read_entry(3, 1).unwrap().is_some());
        s.checkpoint().unwrap();
        s.shutdown();
    }
    // Restart after a checkpoint: the ledger store brings it back.
    let s = open(tmp.path(), cfg);
    assert_eq!(s.replay_stats().records, 0, "{:?}", s.replay_stats());
    assert!(s.is_fenced(3).unwrap());
    assert!(matches!(
        add(&s, 3, 2, KEY, false),
        Err(StorageError::Fenced { .. })
    ));
}

#[test]
fn read_lac_combines_last_entry_and_explicit_lac() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path(), config(tmp.path()));
    let r = s.read_lac(2).unwrap();
    assert_eq!((r.lac, r.last_entry, r.explicit_lac), (None, None, None));
    add(&s, 2, 0, KEY, false).unwrap();
    add(&s, 2, 1, KEY, false).unwrap(); // carries LAC 0
    assert_eq!(s.read_lac(2).unwrap().lac, Some(0));
    write_lac(&s, 2, 1).unwrap();
    let r = s.read_lac(2).unwrap();
    assert_eq!(r.lac, Some(1));
    assert!(r.last_entry.is_some() && r.explicit_lac.is_some());
    drop(s); // releases the ledger store (its index is locked while open)
    let s = open(tmp.path(), config(tmp.path()));
    assert_eq!(s.read_lac(2).unwrap().lac, Some(1), "explicit LAC replayed");
}

fn journal_files(dir: &Path) -> usize {
    ["journal0", "journal1"]
        .iter()
        .map(|j| {
            folio_env::RealFileSystem
                .list_dir(&dir.join(j).join("current"))
                .unwrap()
                .iter()
                .filter(|n| n.ends_with(".txn"))
                .count()
        })
        .sum()
}

#[test]
fn checkpoints_move_each_mark_and_delete_old_journal_files() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path());
    for _ in 0..3 {
        let s = open(tmp.path(), cfg.clone());
        for l in 0..6 {
            add(&s, l, s.entry_ids(l).unwrap().len() as i64, KEY, false).unwrap();
        }
        drop(s); // no final checkpoint
    }
    assert_eq!(journal_files(tmp.path()), 6, "three runs, two directories");
    let s = open(tmp.path(), cfg.clone());
    assert_eq!(s.replay_stats().records, 3 * 6 + 6, "entries + master keys");
    let before = s.journal_marks();
    s.checkpoint().unwrap();
    let after = s.journal_marks();
    assert!(
        after.iter().zip(&before).all(|(a, b)| a > b),
        "{before:?} -> {after:?}"
    );
    assert_eq!(
        journal_files(tmp.path()),
        2,
        "only the current files remain"
    );
    drop(s); // releases the ledger store (its index is locked while open)
    let s = open(tmp.path(), cfg);
    assert_eq!(s.replay_stats().records, 0);
    for l in 0..6 {
        assert_eq!(s.entry_ids(l).unwrap(), vec![0, 1, 2]);
    }
}

#[test]
fn the_checkpoint_thread_runs_on_its_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StorageConfig {
        flush_interval: Duration::from_millis(20),
        ..config(tmp.path())
    };
    let s = open(tmp.path(), cfg);
    add(&s, 1, 0, KEY, false).unwrap();
    let start = s.journal_marks();
    eventually("a periodic checkpoint moves the mark", || {
        s.journal_marks() != start
    });
}

/// The add that passes the threshold asks for the checkpoint itself: the thread does not
/// poll the cache (with a one-hour interval nothing else would start one).
#[test]
fn a_full_write_cache_triggers_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StorageConfig {
        flush_interval: Duration::from_secs(3600),
        checkpoint_write_cache_bytes: 100,
        ..config(tmp.path())
    };
    let s = open(tmp.path(), cfg);
    let zero = vec![Position::default(); 2];
    assert_eq!(s.journal_marks(), zero);
    for e in 0..4 {
        add(&s, 1, e, KEY, false).unwrap();
    }
    eventually("the write cache threshold triggers a checkpoint", || {
        s.checkpoints() > 0
    });
    // Checkpoints for room may stage the index (then the marks stay); one in
    // `index_commit_flushes` commits, and the marks move.
    let mut e = 4;
    eventually("checkpoints for room move the journal marks", || {
        add(&s, 1, e, KEY, false).unwrap();
        e += 1;
        s.journal_marks() != zero
    });
    assert!(
        s.checkpoints() >= 2,
        "the first checkpoint for room stages the index, so it cannot have moved the marks"
    );
}

fn only_journal_file(dir: &Path) -> std::path::PathBuf {
    let mut files = Vec::new();
    for j in ["journal0", "journal1"] {
        let cur = dir.join(j).join("current");
        for n in folio_env::RealFileSystem.list_dir(&cur).unwrap() {
            let p = cur.join(&n);
            if n.ends_with(".txn") && std::fs::metadata(&p).unwrap().len() > 32 {
                files.push(p);
            }
        }
    }
    assert_eq!(files.len(), 1, "{files:?}");
    files.pop().unwrap()
}

#[test]
fn real_journal_files_truncated_or_corrupted() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StorageConfig {
        journal: JournalConfig {
            prealloc_size: 0,
            ..config(tmp.path()).journal
        },
        ..config(tmp.path())
    };
    {
        let s = open(tmp.path(), cfg.clone());
        for e in 0..4 {
            add(&s, 9, e, KEY, false).unwrap();
        }
        drop(s); // no final checkpoint: the journal keeps the records
    }
    let file = only_journal_file(tmp.path());
    let len = std::fs::metadata(&file).unwrap().len();
    // Records: master key (28 + 20), then 4 adds of 28 + 36 bytes; with direct I/O (the
    // default, on a file system that has it) zeroes pad the file to a 4 KiB block.
    let records_end = 32 + 48 + 4 * 64;
    assert!(len == records_end || len == 4096, "{len}");
    let pristine = std::fs::read(&file).unwrap();
    assert!(pristine[records_end as usize..].iter().all(|&b| b == 0));

    // Cut in the middle of the last add: the three before it come back.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(records_end - 10)
        .unwrap();
    {
        let s = open(tmp.path(), cfg.clone());
        assert_eq!(s.entry_ids(9).unwrap(), vec![0, 1, 2]);
        assert_eq!(s.replay_stats().torn_tails, 1);
        drop(s);
    }

    // A flipped byte in the second add, with valid records after it: refuse to start.
    let mut bad = pristine.clone();
    bad[32 + 48 + 64 + 40] ^= 0x55;
    std::fs::write(&file, &bad).unwrap();
    let env = Env::real();
    let err = Storage::open(&env, cfg, ledger_store(&env, tmp.path()))
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(
        matches!(err, StorageError::CorruptJournal { offset, .. } if offset == 32 + 48 + 64),
        "{msg}"
    );
    assert!(msg.contains(&file.display().to_string()), "{msg}");
}

#[test]
fn a_full_write_cache_asks_for_a_checkpoint_instead_of_blocking_forever() {
    // A tiny write cache, no periodic checkpoint, no size threshold: only the ledger
    // store's request for room can free the cache.
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::real();
    let mut store_cfg =
        LedgerStoreConfig::new(vec![tmp.path().join("ledgers")], tmp.path().join("index"));
    store_cfg.write_cache_bytes = 16 * 1024;
    let store = Arc::new(LedgerStore::open(&env, store_cfg).unwrap());
    let cfg = StorageConfig {
        checkpoint_write_cache_bytes: u64::MAX,
        ..config(tmp.path())
    };
    let s = Storage::open(&env, cfg, store).unwrap();
    let payload = vec![1u8; 2000];
    let mut rxs = Vec::new();
    for e in 0..100 {
        let (cb, rx) = done();
        s.add_entry(1, e, KEY, entry(1, e, e - 1, &payload), false, cb);
        rxs.push(rx);
    }
    for rx in rxs {
        wait(rx).unwrap();
    }
    assert_eq!(s.entry_ids(1).unwrap().len(), 100);
    assert!(
        s.journal_marks().iter().any(|m| *m != Position::default()),
        "a checkpoint must have run to make room"
    );
    drop(s);
    let s = open(tmp.path(), config(tmp.path()));
    assert_eq!(
        s.read_entry(1, 99).unwrap().unwrap(),
        entry(1, 99, 98, &payload)
    );
}

#[test]
fn shutdown_checkpoints_so_the_next_start_replays_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path(), config(tmp.path()));
    for e in 0..5 {
        add(&s, 2, e, KEY, false).unwrap();
    }
    write_lac(&s, 2, 3).unwrap();
    s.shutdown();
    drop(s);
    let s = open(tmp.path(), config(tmp.path()));
    assert_eq!(s.replay_stats().records, 0, "{:?}", s.replay_stats());
    assert_eq!(s.entry_ids(2).unwrap(), vec![0, 1, 2, 3, 4]);
    assert_eq!(s.read_lac(2).unwrap().lac, Some(3));
}

#[test]
fn replay_larger_than_the_write_cache_does_not_block() {
    // Regression: replay used to block forever on a full write cache (no checkpoint
    // thread runs during replay).
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::real();
    let store = |env: &Env, cache: u64| {
        let mut c =
            LedgerStoreConfig::new(vec![tmp.path().join("ledgers")], tmp.path().join("index"));
        c.write_cache_bytes = cache;
        Arc::new(LedgerStore::open(env, c).unwrap())
    };
    let payload = vec![3u8; 1000];
    {
        // A roomy cache, no threshold, no periodic checkpoint: no checkpoint runs, the
        // journal keeps all 60 KB.
        let cfg = StorageConfig {
            checkpoint_write_cache_bytes: u64::MAX,
            ..config(tmp.path())
        };
        let s = Storage::open(&env, cfg, store(&env, 1 << 20)).unwrap();
        for e in 0..60 {
            let (cb, rx) = done();
            s.add_entry(4, e, KEY, entry(4, e, e - 1, &payload), false, cb);
            wait(rx).unwrap();
        }
        assert_eq!(s.journal_marks(), vec![Position::default(); 2]);
        drop(s);
    }
    for threshold in [u64::MAX, 8 * 1024] {
        let cfg = StorageConfig {
            checkpoint_write_cache_bytes: threshold,
            ..config(tmp.path())
        };
        // Replay 60 KB into a 16 KiB write cache.
        let s = Storage::open(&env, cfg, store(&env, 16 * 1024)).unwrap();
        assert!(s.replay_stats().records > 60, "{:?}", s.replay_stats());
        assert_eq!(s.entry_ids(4).unwrap().len(), 60);
        drop(s);
    }
}

#[test]
fn a_second_open_of_the_same_directories_fails_naming_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::real();
    let first = open(tmp.path(), config(tmp.path()));
    add(&first, 1, 0, KEY, false).unwrap();

    // The ledger store's directories are locked by the first store.
    let cfg = LedgerStoreConfig::new(vec![tmp.path().join("ledgers")], tmp.path().join("index"));
    let err = LedgerStore::open(&env, cfg)
        .err()
        .expect("second ledger store opened");
    match &err {
        folio_storage::ledger_store::LedgerStoreError::DirInUse { dir } => {
            assert_eq!(dir, &tmp.path().join("index"))
        }
        e => panic!("expected DirInUse, got {e:?}"),
    }
    assert!(err.to_string().contains("is in use"), "{err}");

    // The journal directories too, even with another ledger store under them.
    let other = tmp.path().join("other");
    let err = Storage::open(&env, config(tmp.path()), ledger_store(&env, &other))
        .err()
        .expect("second storage opened");
    match &err {
        StorageError::DirInUse { dir } => assert_eq!(dir, &tmp.path().join("journal0")),
        e => panic!("expected DirInUse, got {e:?}"),
    }
    assert!(
        err.to_string().contains(&format!(
            "{} is in use",
            tmp.path().join("journal0").display()
        )),
        "{err}"
    );
    // The failed open released what it had locked (the other store's directories).
    drop(first);
    let again = open(tmp.path(), config(tmp.path()));
    assert!(again.read_entry(1, 0).unwrap().is_some());
    drop(again);
    let third = Storage::open(&env, config(tmp.path()), ledger_store(&env, &other)).unwrap();
    drop(third);

    // One directory serving as both journal and ledger directory is not "in use".
    let shared = tmp.path().join("shared");
    let cfg = StorageConfig {
        journal: JournalConfig::with_dirs(vec![shared.clone()]),
        ..config(tmp.path())
    };
    let store = LedgerStoreConfig::new(vec![shared.clone()], shared.join("index"));
    let s = Storage::open(&env, cfg, Arc::new(LedgerStore::open(&env, store).unwrap())).unwrap();
    add(&s, 2, 0, KEY, false).unwrap();
}

#[test]
fn a_deleted_ledger_is_gone_and_stays_gone_after_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path(), config(tmp.path()));
    for e in 0..5 {
        add(&s, 7, e, KEY, false).unwrap();
        add(&s, 8, e, KEY, false).unwrap();
    }
    fence(&s, 7).unwrap();
    s.delete_ledger(7).unwrap();
    assert_eq!(s.read_entry(7, 0).unwrap(), None);
    assert_eq!(s.read_entry(7, -1).unwrap(), None);
    assert!(s.entry_ids(7).unwrap().is_empty());
    assert!(!s.ledger_exists(7).unwrap());
    assert!(!s.is_fenced(7).unwrap());
    assert_eq!(s.master_key(7).unwrap(), None);
    // Writes to it are refused, naming it; the other ledger is untouched.
    let e = add(&s, 7, 5, KEY, false).unwrap_err();
    assert!(
        matches!(e, StorageError::BadRequest(_)) && e.to_string().contains("ledger 7 was deleted"),
        "{e}"
    );
    assert_eq!(s.entry_ids(8).unwrap(), vec![0, 1, 2, 3, 4]);
    // Durable at the checkpoint: a restart (replaying nothing before the mark, and
    // dropping replayed puts to the deleted ledger) does not bring it back.
    s.checkpoint().unwrap();
    add(&s, 8, 5, KEY, false).unwrap();
    drop(s); // no final checkpoint: ledger 8's last add is replayed
    let s = open(tmp.path(), config(tmp.path()));
    assert_eq!(s.read_entry(7, 0).unwrap(), None);
    assert!(!s.ledger_exists(7).unwrap());
    assert!(add(&s, 7, 6, KEY, false).is_err());
    assert_eq!(s.entry_ids(8).unwrap(), vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn compaction_through_the_engine_reclaims_a_deleted_ledgers_space_and_survives_restart() {
    use folio_storage::ledger_store::CompactionLimits;
    let tmp = tempfile::tempdir().unwrap();
    let store = |env: &Env| {
        let mut cfg =
            LedgerStoreConfig::new(vec![tmp.path().join("ledgers")], tmp.path().join("index"));
        cfg.entry_log_size_limit = 2048;
        Arc::new(LedgerStore::open(env, cfg).unwrap())
    };
    let env = Env::real();
    let s = Storage::open(&env, config(tmp.path()), store(&env)).unwrap();
    for e in 0..60 {
        add(&s, 1, e, KEY, false).unwrap();
        add(&s, 2, e, KEY, false).unwrap();
        if e % 5 == 4 {
            s.checkpoint().unwrap();
        }
    }
    s.delete_ledger(2).unwrap();
    s.checkpoint().unwrap();
    let stats = s.compact(0.8, CompactionLimits::UNLIMITED).unwrap();
    assert!(stats.failures.is_empty(), "{stats:?}");
    assert!(
        stats.logs_compacted + stats.logs_deleted >= 2 && stats.bytes_reclaimed > 0,
        "{stats:?}"
    );
    let check = |s: &Storage| {
        for e in 0..60 {
            assert_eq!(
                s.read_entry(1, e).unwrap().unwrap(),
                entry(1, e, e - 1, b"data")
            );
            assert_eq!(s.read_entry(2, e).unwrap(), None);
        }
    };
    check(&s);
    s.shutdown();
    drop(s);
    let s = Storage::open(&env, config(tmp.path()), store(&env)).unwrap();
    check(&s);
    assert_eq!(s.entry_ids(1).unwrap(), (0..60).collect::<Vec<_>>());
}
