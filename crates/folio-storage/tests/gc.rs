//! Garbage collection through the engine (`Storage`) on real files: a deleted ledger leaves
//! reads, the engine's state and, once the deletion is checkpointed, the disk; a ledger
//! sharing its entry logs stays readable byte for byte, also after a restart that replays
//! the journal.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use folio_env::Env;
use folio_storage::ledger_store::{LedgerStore, LedgerStoreConfig};
use folio_storage::{JournalConfig, Storage, StorageConfig, StorageError};

const KEY: &[u8] = &[9; 20];

fn open(dir: &Path) -> Storage {
    let env = Env::real();
    let config = StorageConfig {
        journal: JournalConfig {
            prealloc_size: 64 * 1024,
            ..JournalConfig::with_dirs(vec![dir.join("journal")])
        },
        // Checkpoints only when the test asks.
        flush_interval: Duration::ZERO,
        ..StorageConfig::default()
    };
    let mut store = LedgerStoreConfig::new(vec![dir.join("ledgers")], dir.join("index"));
    // A few entries per entry log, so that ledgers get logs of their own.
    store.entry_log_size_limit = 2048;
    let store = Arc::new(LedgerStore::open(&env, store).unwrap());
    Storage::open(&env, config, store).unwrap()
}

/// An entry as the engine stores it: ledger, entry, LAC, length, then the payload.
fn entry(ledger: i64, e: i64) -> Bytes {
    let mut payload = format!("ledger {ledger} entry {e} ").into_bytes();
    payload.resize(300, b'0' + (e % 10) as u8);
    let mut b = Vec::new();
    for v in [ledger, e, e - 1, payload.len() as i64] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(&payload);
    Bytes::from(b)
}

fn add(s: &Storage, ledger: i64, e: i64) -> Result<(), StorageError> {
    let (tx, rx) = mpsc::channel();
    s.add_entry(
        ledger,
        e,
        KEY,
        entry(ledger, e),
        false,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.recv_timeout(Duration::from_secs(60))
        .expect("no completion")
}

fn log_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("ledgers/current"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_deleted_ledgers_logs_are_removed_after_the_checkpoint_and_the_live_one_survives() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    // Ledger 1 first, checkpointed: its entries fill logs of their own; then ledger 2.
    for e in 0..20 {
        add(&s, 1, e).unwrap();
    }
    s.checkpoint().unwrap();
    for e in 0..20 {
        add(&s, 2, e).unwrap();
    }
    s.checkpoint().unwrap();
    assert_eq!(s.ledgers().unwrap(), vec![1, 2]);
    let before = log_files(tmp.path());
    assert!(before.len() >= 4, "{before:?}");

    s.delete_ledger(1).unwrap();
    assert_eq!(s.ledgers().unwrap(), vec![2]);
    assert_eq!(s.read_entry(1, 0).unwrap(), None);
    assert!(!s.ledger_exists(1).unwrap());
    // The deletion is not durable yet: no log may go.
    let stats = s.remove_dead_entry_logs().unwrap();
    assert!(stats.logs_removed.is_empty(), "{stats:?}");
    assert_eq!(log_files(tmp.path()), before);

    s.checkpoint().unwrap();
    let stats = s.remove_dead_entry_logs().unwrap();
    assert!(!stats.logs_removed.is_empty(), "{stats:?}");
    assert!(stats.bytes_reclaimed > 0);
    assert!(stats.failures.is_empty(), "{stats:?}");
    assert_eq!(
        log_files(tmp.path()).len(),
        before.len() - stats.logs_removed.len()
    );
    for e in 0..20 {
        assert_eq!(s.read_entry(2, e).unwrap(), Some(entry(2, e)), "entry {e}");
    }
    // One more add of ledger 2 that only the journal holds at the restart.
    add(&s, 2, 20).unwrap();
    drop(s);

    let s = open(tmp.path());
    assert_eq!(s.ledgers().unwrap(), vec![2]);
    for e in 0..21 {
        assert_eq!(s.read_entry(2, e).unwrap(), Some(entry(2, e)), "entry {e}");
    }
    assert_eq!(s.read_entry(1, 0).unwrap(), None);
    assert!(add(&s, 1, 20).is_err(), "a deleted ledger takes no writes");
    assert!(s.remove_dead_entry_logs().unwrap().failures.is_empty());
    for e in 0..21 {
        assert_eq!(s.read_entry(2, e).unwrap(), Some(entry(2, e)), "entry {e}");
    }
}
