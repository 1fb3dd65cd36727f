//! Journal tests on real files (tempdir) and on the simulated disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use folio_env::sim::{Fault, SimFileSystem};
use folio_env::{Env, FileSystem, OpenOptions, SystemClock, SystemRng};

use super::*;
use crate::error::StorageError;

fn sim_env(fs: &SimFileSystem) -> Env {
    Env {
        clock: Arc::new(SystemClock),
        fs: Arc::new(fs.clone()),
        rng: Arc::new(SystemRng::with_seed(1)),
    }
}

fn cfg(dirs: Vec<PathBuf>) -> JournalConfig {
    JournalConfig {
        prealloc_size: 4096,
        ..JournalConfig::with_dirs(dirs)
    }
}

fn open(env: &Env, c: &JournalConfig) -> Result<(Journal, Vec<ReplayRecord>), StorageError> {
    let mut seen = Vec::new();
    let (j, _) = Journal::open(env, c, &mut |r| {
        seen.push(r);
        Ok(())
    })?;
    Ok((j, seen))
}

type Done = mpsc::Receiver<Result<(), StorageError>>;

fn append(j: &Journal, ledger: i64, entry: i64, payload: &[u8]) -> Done {
    let (tx, rx) = mpsc::channel();
    j.append(
        RecordKind::Add,
        ledger,
        entry,
        Bytes::copy_from_slice(payload),
        Some(Box::new(move |r| {
            let _ = tx.send(r);
        })),
    );
    rx
}

fn wait(rx: Done) -> Result<(), StorageError> {
    rx.recv_timeout(Duration::from_secs(60))
        .expect("callback never ran")
}

/// Forces `ledger`'s journal directory and waits: everything queued before, and the
/// writer's work after it (a zero fill follows a group's callbacks), is done.
fn force(j: &Journal, ledger: i64) -> Result<(), StorageError> {
    let (tx, rx) = mpsc::channel();
    j.force(ledger, Box::new(move |r| tx.send(r).unwrap()));
    wait(rx)
}

fn payload(ledger: i64, entry: i64) -> Vec<u8> {
    format!("ledger {ledger} entry {entry} ")
        .repeat((entry as usize % 7) + 1)
        .into_bytes()
}

fn journal_files(fs: &dyn FileSystem, dir: &Path) -> Vec<PathBuf> {
    fs.list_dir(&dir.join("current"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".txn"))
        .map(|n| dir.join("current").join(n))
        .collect()
}

#[test]
fn acknowledged_records_replay_byte_for_byte_on_real_files() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::real();
    let c = cfg(vec![tmp.path().join("j1"), tmp.path().join("j2")]);
    let (j, seen) = open(&env, &c).unwrap();
    assert!(seen.is_empty());
    let rxs: Vec<_> = (0..50)
        .map(|i| append(&j, i % 5, i / 5, &payload(i % 5, i / 5)))
        .collect();
    for rx in rxs {
        wait(rx).unwrap();
    }
    j.shutdown();
    drop(j);
    let (j2, seen) = open(&env, &c).unwrap();
    assert_eq!(seen.len(), 50);
    for l in 0..5 {
        let mine: Vec<_> = seen.iter().filter(|r| r.ledger == l).collect();
        assert_eq!(mine.len(), 10, "ledger {l}");
        for (e, r) in mine.iter().enumerate() {
            assert_eq!(r.entry, e as i64, "a ledger's records keep their order");
            assert_eq!(r.payload.as_ref(), payload(l, e as i64).as_slice());
        }
    }
    // Each directory got some ledgers, and a restart starts new files.
    assert!(journal_files(&RealFileSystem, &tmp.path().join("j1")).len() == 2);
    assert!(journal_files(&RealFileSystem, &tmp.path().join("j2")).len() == 2);
    drop(j2);
}

use folio_env::RealFileSystem;

#[test]
fn group_commit_shares_one_fdatasync() {
    let fs = SimFileSystem::new();
    let env = sim_env(&fs);
    let c = JournalConfig {
        max_group_wait: Duration::from_secs(600),
        flush_when_queue_empty: false, // the timer forms the groups
        max_group_entries: 100,
        prealloc_size: 0, // no preallocation syncs in the count
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&env, &c).unwrap();
    let (syncs_before, _) = fs.sync_counts();
    let rxs: Vec<_> = (0..100).map(|i| append(&j, 1, i, b"x")).collect();
    for rx in rxs {
        wait(rx).unwrap();
    }
    let (syncs_after, _) = fs.sync_counts();
    assert_eq!(
        syncs_after - syncs_before,
        1,
        "100 adds, one group, one fdatasync"
    );
}

/// By default a group is written as soon as the queue is empty: a lone add does not wait
/// for BookKeeper's group timer (here an hour), and adds queued while a group is on disk
/// share the next group's fdatasync.
#[test]
fn by_default_a_lone_add_does_not_wait_for_the_group_timer() {
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        max_group_wait: Duration::from_secs(3600),
        prealloc_size: 0, // no preallocation syncs in the count
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    for i in 0..3 {
        let rx = append(&j, 1, i, b"x");
        let r = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| {
                panic!("add {i} still waits after 120 s: the group waited for the timer")
            });
        r.unwrap();
    }
    let st = j.stats();
    assert_eq!(st.group_commits, 3, "three lone adds, three groups");
}

/// However busy the journal, with `flush_when_queue_empty` no add waits for a timer: after
/// a group of 40 records (many adds at once), a lone add is written at once, the timer
/// being an hour. (Until 2026-12-04 a group of 32 or more made the next one wait to fill,
/// which over the network cost a third of the throughput once the bookies' CPU was no
/// longer the bound: docs/performance.md, "Group commit at once under load".)
#[test]
fn after_a_busy_group_a_lone_add_is_written_at_once() {
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        max_group_wait: Duration::from_secs(3600),
        prealloc_size: 0, // no preallocation syncs in the count
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    j.hold_writers(true);
    let busy: Vec<_> = (0..40).map(|i| append(&j, 1, i, b"x")).collect();
    j.hold_writers(false);
    for rx in busy {
        wait(rx).unwrap();
    }
    assert_eq!(j.stats().group_commits, 1, "forty held records, one group");
    let lone = append(&j, 1, 40, b"x");
    lone.recv_timeout(Duration::from_secs(30))
        .expect("the lone add after a busy group waited for the timer")
        .unwrap();
    assert_eq!(j.stats().group_commits, 2);
}

/// Records queued while the writers are held form one group once released (the
/// simulator's way to put several requests into one group commit).
#[test]
fn records_queued_while_held_share_one_group() {
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        prealloc_size: 0, // no preallocation syncs in the count
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    j.hold_writers(true);
    let rxs: Vec<_> = (0..5).map(|i| append(&j, 1, i, b"x")).collect();
    // Give an unheld writer every chance to take the first record alone.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(j.stats().group_commits, 0, "nothing written while held");
    j.hold_writers(false);
    for rx in rxs {
        wait(rx).unwrap();
    }
    assert_eq!(j.stats().group_commits, 1, "five records, one group");
    assert_eq!(j.stats().records, 5);
}

#[test]
fn groups_are_bounded_by_entries_and_bytes() {
    for (entries, bytes, expect) in [(10, u64::MAX, 10), (0, 10 * 29, 10)] {
        let fs = SimFileSystem::new();
        let c = JournalConfig {
            max_group_wait: Duration::from_secs(600),
            flush_when_queue_empty: false, // the timer forms the groups
            max_group_entries: entries,
            max_group_bytes: bytes,
            prealloc_size: 0, // no preallocation syncs in the count
            ..cfg(vec![PathBuf::from("/j")])
        };
        let (j, _) = open(&sim_env(&fs), &c).unwrap();
        let (before, _) = fs.sync_counts();
        // 29-byte records (28-byte header + 1): ten make a group either way.
        let rxs: Vec<_> = (0..100).map(|i| append(&j, 1, i, b"x")).collect();
        for rx in rxs {
            wait(rx).unwrap();
        }
        let st = j.stats();
        assert_eq!(st.group_commits, expect, "entries {entries} bytes {bytes}");
        // The force-write thread may cover several written groups with one fdatasync.
        let syncs = fs.sync_counts().0 - before;
        assert!((1..=expect).contains(&syncs), "{syncs} fdatasyncs");
        assert_eq!(st.group_fdatasyncs, syncs);
    }
}

#[test]
fn callbacks_wait_for_the_fdatasync_and_a_failed_one_poisons() {
    let fs = SimFileSystem::new();
    let env = sim_env(&fs);
    // No preallocation: the writer does nothing between groups, so the injected fault
    // lands on the next group's fdatasync.
    let c = JournalConfig {
        prealloc_size: 0,
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&env, &c).unwrap();
    wait(append(&j, 1, 0, b"ok")).unwrap();
    // The next record's ops are: write, fdatasync.
    fs.inject(Fault::SyncEio { after_ops: 1 });
    let e = wait(append(&j, 1, 1, b"lost")).unwrap_err();
    assert!(
        matches!(e, StorageError::Io { .. }) && e.to_string().contains("/j/current/"),
        "{e}"
    );
    assert!(j.read_only_reason().unwrap().contains("fdatasync"));
    // Every later write fails at once, even though the disk works again.
    let e = wait(append(&j, 1, 2, b"later")).unwrap_err();
    assert!(matches!(e, StorageError::ReadOnly { .. }), "{e}");
    assert!(force(&j, 1).is_err());
    drop(j);
    // After a restart only the acknowledged record is certain to be there.
    let (_, seen) = open(&sim_env(&fs.crash(folio_env::sim::CrashMode::Clean)), &c).unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].payload.as_ref(), b"ok");
}

#[test]
fn a_full_disk_fails_the_write_naming_the_directory() {
    let fs = SimFileSystem::with_capacity(64 * 1024);
    let env = sim_env(&fs);
    let c = cfg(vec![PathBuf::from("/jfull")]);
    let (j, _) = open(&env, &c).unwrap();
    let big = vec![7u8; 8000];
    let mut acked = 0;
    let err = loop {
        match wait(append(&j, 1, acked, &big)) {
            Ok(()) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 100, "the disk never filled");
    };
    match &err {
        StorageError::NoSpace { dir, .. } => assert_eq!(dir, Path::new("/jfull/current")),
        other => panic!("expected NoSpace, got {other:?}"),
    }
    assert!(err.to_string().contains("/jfull/current"), "{err}");
    drop(j);
    // What a restart would replay, read without opening (opening starts a new file,
    // which a disk this full may have no room for).
    let after = fs.crash(folio_env::sim::CrashMode::Clean);
    let current = Path::new("/jfull/current");
    let mut seen = Vec::new();
    for id in list_files(&after, current).unwrap() {
        scan_file(&after, &current.join(format::file_name(id)), &mut |_, r| {
            seen.push(r.clone())
        })
        .unwrap();
    }
    assert!(seen.len() as i64 >= acked, "acknowledged records lost");
    for (i, r) in seen.iter().enumerate().take(acked as usize) {
        assert_eq!((r.entry, r.payload.len()), (i as i64, big.len()));
    }
}

/// Writes `n` acknowledged records to a fresh journal in `/j` and returns the file.
fn journal_with_records(fs: &SimFileSystem, n: i64) -> PathBuf {
    let c = cfg(vec![PathBuf::from("/j")]);
    let (j, _) = open(&sim_env(fs), &c).unwrap();
    for i in 0..n {
        wait(append(&j, 3, i, &payload(3, i))).unwrap();
    }
    drop(j);
    journal_files(fs, Path::new("/j"))[0].clone()
}

fn record_offsets(n: i64) -> Vec<u64> {
    let mut at = format::HEADER_LEN;
    (0..n)
        .map(|i| {
            let o = at;
            at += (format::RECORD_HEADER_LEN + payload(3, i).len()) as u64;
            o
        })
        .collect()
}

#[test]
fn a_truncated_journal_drops_only_the_cut_record() {
    for cut in [1usize, 10, 27, 28, 40] {
        let fs = SimFileSystem::new();
        let file = journal_with_records(&fs, 5);
        let offs = record_offsets(5);
        let f = fs.open(&file, OpenOptions::write_create()).unwrap();
        f.set_len(offs[4] + cut as u64).unwrap();
        let (_, seen) = open(&sim_env(&fs), &cfg(vec![PathBuf::from("/j")])).unwrap();
        assert_eq!(seen.len(), 4, "cut {cut}");
        assert_eq!(seen[3].payload.as_ref(), payload(3, 3).as_slice());
    }
}

#[test]
fn a_torn_record_before_preallocated_zeroes_is_dropped() {
    let fs = SimFileSystem::new();
    let file = journal_with_records(&fs, 5);
    let offs = record_offsets(5);
    let f = fs.open(&file, OpenOptions::write_create()).unwrap();
    // Zero the second half of the last record, as if its write was torn.
    let end = offs[4] + (format::RECORD_HEADER_LEN + payload(3, 4).len()) as u64;
    let mid = offs[4] + 20;
    f.write_all_at(&vec![0; (end - mid) as usize], mid).unwrap();
    let (_, seen) = open(&sim_env(&fs), &cfg(vec![PathBuf::from("/j")])).unwrap();
    assert_eq!(seen.len(), 4);
}

#[test]
fn junk_in_the_middle_stops_start_up_naming_file_and_offset() {
    let fs = SimFileSystem::new();
    let file = journal_with_records(&fs, 5);
    let offs = record_offsets(5);
    let f = fs.open(&file, OpenOptions::write_create()).unwrap();
    f.write_all_at(&[0xff], offs[2] + 30).unwrap();
    let err = open(&sim_env(&fs), &cfg(vec![PathBuf::from("/j")]))
        .err()
        .unwrap();
    match &err {
        StorageError::CorruptJournal {
            file: ef,
            offset,
            reason,
        } => {
            assert_eq!(ef, &file);
            assert_eq!(*offset, offs[2]);
            assert!(reason.contains(&format!("{}", offs[3])), "{reason}");
        }
        other => panic!("expected CorruptJournal, got {other:?}"),
    }
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_bad_header_or_mark_is_an_error() {
    let fs = SimFileSystem::new();
    let file = journal_with_records(&fs, 2);
    let f = fs.open(&file, OpenOptions::write_create()).unwrap();
    f.write_all_at(b"NOTAJRNL", 0).unwrap();
    let err = open(&sim_env(&fs), &cfg(vec![PathBuf::from("/j")]))
        .err()
        .unwrap();
    assert!(err.to_string().contains("bad magic"), "{err}");

    let fs = SimFileSystem::new();
    journal_with_records(&fs, 2);
    fs.write_file_atomic(Path::new("/j/current/lastMark"), b"garbage")
        .unwrap();
    let err = open(&sim_env(&fs), &cfg(vec![PathBuf::from("/j")]))
        .err()
        .unwrap();
    assert!(err.to_string().contains("lastMark"), "{err}");
}

#[test]
fn files_roll_at_the_size_limit_and_marks_delete_old_files() {
    let fs = SimFileSystem::new();
    let env = sim_env(&fs);
    let c = JournalConfig {
        max_file_size: 1024,
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&env, &c).unwrap();
    for i in 0..40 {
        wait(append(&j, 1, i, &[i as u8; 100])).unwrap();
    }
    let files = journal_files(&fs, Path::new("/j"));
    assert!(files.len() >= 3, "{files:?}");
    let mark = j.synced_positions()[0];
    j.persist_mark(0, mark).unwrap();
    assert_eq!(journal_files(&fs, Path::new("/j")).len(), 1);
    assert_eq!(j.marks()[0], mark);
    // Marks only move forward.
    j.persist_mark(0, Position::default()).unwrap();
    assert_eq!(j.marks()[0], mark);
    drop(j);
    // Replay from the mark: nothing before it comes back.
    let (_, seen) = open(&env, &c).unwrap();
    assert!(seen.is_empty(), "{} records replayed", seen.len());
}

/// Files larger than a truncation step go to the reaper thread; a checkpoint while it
/// works neither fails nor touches them; they are gone soon after, and the current file
/// stays.
#[test]
fn large_files_before_the_mark_are_deleted_in_the_background() {
    let fs = SimFileSystem::new();
    let env = sim_env(&fs);
    let c = JournalConfig {
        max_file_size: super::reaper::STEP * 3,
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&env, &c).unwrap();
    let payload = vec![7u8; 1 << 20];
    for i in 0..60 {
        wait(append(&j, 1, i, &payload)).unwrap();
    }
    assert_eq!(journal_files(&fs, Path::new("/j")).len(), 2);
    j.persist_mark(0, j.synced_positions()[0]).unwrap();
    wait(append(&j, 1, 60, b"x")).unwrap();
    j.persist_mark(0, j.synced_positions()[0]).unwrap();
    let start = std::time::Instant::now();
    while journal_files(&fs, Path::new("/j")).len() != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the old file was never deleted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(j);
    let (_, seen) = open(&env, &c).unwrap();
    assert!(seen.is_empty(), "{} records replayed", seen.len());
}

#[test]
fn a_missing_file_named_by_the_mark_is_an_error() {
    let fs = SimFileSystem::new();
    let env = sim_env(&fs);
    let c = cfg(vec![PathBuf::from("/j")]);
    let (j, _) = open(&env, &c).unwrap();
    wait(append(&j, 1, 0, b"x")).unwrap();
    let mark = j.synced_positions()[0];
    j.persist_mark(0, mark).unwrap();
    drop(j);
    fs.remove_file(&Path::new("/j/current").join(format::file_name(mark.file_id)))
        .unwrap();
    let err = open(&env, &c).err().unwrap();
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn unsafe_no_sync_mode_still_writes_records() {
    let fs = SimFileSystem::new();
    let env = sim_env(&fs);
    let c = JournalConfig {
        sync_data: false,
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&env, &c).unwrap();
    let (s0, _) = fs.sync_counts();
    wait(append(&j, 1, 0, b"fast")).unwrap();
    assert_eq!(
        fs.sync_counts().0,
        s0,
        "no fdatasync with sync_data = false"
    );
    drop(j);
    let (_, seen) = open(&env, &c).unwrap();
    assert_eq!(seen.len(), 1);
}

#[test]
fn a_valid_record_far_behind_the_damage_is_still_found() {
    let fs = SimFileSystem::new();
    let file = journal_with_records(&fs, 3);
    let offs = record_offsets(3);
    let f = fs.open(&file, OpenOptions::write_create()).unwrap();
    // Damage record 1, zero the rest, and put one valid record 3 MiB further on.
    f.write_all_at(&vec![0; 4 << 20], offs[1] + 4).unwrap();
    let mut rec = Vec::new();
    let id = format::parse_file_name(file.file_name().unwrap().to_str().unwrap()).unwrap();
    format::encode_record(&mut rec, id, RecordKind::Fence, 3, 0, b"", None);
    let far = offs[1] + (3 << 20) + 7;
    f.write_all_at(&rec, far).unwrap();
    let err = open(&sim_env(&fs), &cfg(vec![PathBuf::from("/j")]))
        .err()
        .unwrap();
    match &err {
        StorageError::CorruptJournal { offset, reason, .. } => {
            assert_eq!(*offset, offs[1]);
            assert!(reason.contains(&far.to_string()), "{reason}");
        }
        other => panic!("expected CorruptJournal, got {other:?}"),
    }
    // Without that record, the same damage is a torn tail: two records back.
    f.write_all_at(&vec![0; rec.len()], far).unwrap();
    let (_, seen) = open(&sim_env(&fs), &cfg(vec![PathBuf::from("/j")])).unwrap();
    assert_eq!(seen.len(), 1, "only the record before the damage");
}

#[test]
fn the_same_directory_twice_is_refused() {
    let fs = SimFileSystem::new();
    let err = open(
        &sim_env(&fs),
        &cfg(vec![PathBuf::from("/j"), PathBuf::from("/j")]),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("/j is configured twice"), "{err}");
}

#[test]
fn random_damage_never_panics_and_never_invents_records() {
    use folio_env::Rng;
    let n = 12;
    let fs = SimFileSystem::new();
    let file = journal_with_records(&fs, n);
    let pristine = fs.read_file(&file).unwrap();
    let offs = record_offsets(n);
    let end = offs[n as usize - 1] + (format::RECORD_HEADER_LEN + payload(3, n - 1).len()) as u64;
    for seed in 0..300u64 {
        let rng = SystemRng::with_seed(seed);
        let mut bytes = pristine.clone();
        let first_damage = match rng.below(3) {
            0 => {
                let at = rng.below(bytes.len() as u64) as usize;
                bytes[at] ^= 1 + rng.below(255) as u8;
                at as u64
            }
            1 => {
                let at = rng.below(bytes.len() as u64);
                bytes.truncate(at as usize);
                at
            }
            _ => {
                let at = rng.below(bytes.len() as u64) as usize;
                let junk: Vec<u8> = (0..1 + rng.below(64))
                    .map(|_| rng.next_u64() as u8)
                    .collect();
                let stop = (at + junk.len()).min(bytes.len());
                bytes[at..stop].copy_from_slice(&junk[..stop - at]);
                at as u64
            }
        };
        let img = SimFileSystem::new();
        img.create_dir_all(Path::new("/j/current")).unwrap();
        img.write_file_atomic(&file, &bytes).unwrap();
        match open(&sim_env(&img), &cfg(vec![PathBuf::from("/j")])) {
            Ok((_, seen)) => {
                for (i, r) in seen.iter().enumerate() {
                    assert_eq!(r.entry, i as i64, "seed {seed}");
                    assert_eq!(
                        r.payload.as_ref(),
                        payload(3, i as i64).as_slice(),
                        "seed {seed}"
                    );
                }
                // Every record wholly before the damage is back.
                let intact = offs
                    .iter()
                    .enumerate()
                    .filter(|(i, o)| {
                        let len = (format::RECORD_HEADER_LEN + payload(3, *i as i64).len()) as u64;
                        **o + len <= first_damage
                    })
                    .count();
                assert!(
                    seen.len() >= intact,
                    "seed {seed}: {} < {intact}",
                    seen.len()
                );
            }
            Err(e) => {
                // Only damage before the last record may stop start-up (a valid record
                // follows it), and the error says where.
                assert!(first_damage < end, "seed {seed}: {e}");
                assert!(
                    matches!(e, StorageError::CorruptJournal { .. }),
                    "seed {seed}: {e}"
                );
            }
        }
    }
}

#[test]
fn preallocation_keeps_zeroes_ahead_of_the_writes() {
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        prealloc_size: 8192,
        direct_io: false, // exact byte counts below; direct_io_journal_... covers direct
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    let file = journal_files(&fs, Path::new("/j"))[0].clone();
    // At creation: header + 8 KiB of zeroes, durable.
    let durable = fs.crash(folio_env::sim::CrashMode::Clean);
    assert_eq!(durable.read_file(&file).unwrap().len(), 32 + 8192);
    let mut written = 32;
    for i in 0..20 {
        wait(append(&j, 1, i, &[9; 500])).unwrap();
        written += 528;
        // The top-up after each group runs after its callback; force a later group
        // through so the previous top-up has finished (a force writes nothing, so it
        // has no top-up of its own to race with).
        force(&j, 1).unwrap();
        let len = fs.read_file(&file).unwrap().len() as u64;
        assert!(len >= written, "{len} < {written}");
        assert!(
            len <= written + 8192 + 8192,
            "zeroes far beyond the headroom: {len}"
        );
    }
    drop(j);
    let (_, seen) = open(&sim_env(&fs), &c).unwrap();
    assert_eq!(seen.len(), 20);
}

/// Sequential single adds: each is its own group, so each needs one fdatasync; the
/// zero-fill top-up must not add a second one per group (it did: two per add).
#[test]
fn a_single_add_costs_one_fdatasync_not_two() {
    // Default 16 MiB headroom: 100 adds of 1 KiB never drain half of it.
    let n = 100;
    let fs = SimFileSystem::new();
    let c = JournalConfig::with_dirs(vec![PathBuf::from("/j")]);
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    let (before, _) = fs.sync_counts();
    for i in 0..n {
        wait(append(&j, 1, i, &[5; 1024])).unwrap();
    }
    let syncs = fs.sync_counts().0 - before;
    assert!(
        (n as u64..=n as u64 + 1).contains(&syncs),
        "{n} sequential adds took {syncs} fdatasyncs"
    );
    // The journal's own counters agree (the open made the header and the first zero
    // fill durable, before `before`).
    let st = j.stats();
    assert_eq!(
        (
            st.group_commits,
            st.group_fdatasyncs,
            st.records,
            st.files_created
        ),
        (n as u64, n as u64, n as u64, 1)
    );
    assert_eq!(
        st.bytes,
        n as u64 * (format::RECORD_HEADER_LEN as u64 + 1024)
    );
    assert_eq!(st.group_fdatasyncs + st.prealloc_fdatasyncs - 1, syncs);
    assert_eq!(st.fdatasyncs(), syncs + 2);
    drop(j);
    let (_, seen) = open(&sim_env(&fs), &c).unwrap();
    assert_eq!(seen.len(), n as usize);

    // A small headroom drained many times over: it is topped up a piece at a time with
    // no fdatasync of its own (each group's fdatasync covers the zeroes written before
    // it), so adds still cost one fdatasync each, and the records still replay.
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        prealloc_size: 64 * 1024,
        ..JournalConfig::with_dirs(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    let (before, _) = fs.sync_counts();
    let n = 300i64;
    let record = (format::RECORD_HEADER_LEN + 1024) as u64;
    for i in 0..n {
        wait(append(&j, 1, i, &[6; 1024])).unwrap();
    }
    let syncs = fs.sync_counts().0 - before;
    let st = j.stats();
    assert_eq!(syncs, n as u64, "{n} adds took {syncs} fdatasyncs: {st:?}");
    assert_eq!(st.group_fdatasyncs, syncs);
    assert_eq!(
        st.prealloc_fdatasyncs, 1,
        "only the new file's fill: {st:?}"
    );
    assert!(st.prealloc_bytes >= n as u64 * record, "{st:?}");
    let file = journal_files(&fs, Path::new("/j"))[0].clone();
    let len = fs.read_file(&file).unwrap().len() as u64;
    let written = format::HEADER_LEN + n as u64 * record;
    assert!(
        len >= written + c.prealloc_size / 2 && len <= written + c.prealloc_size,
        "headroom out of bounds: file {len}, records end at {written}"
    );
    drop(j);
    let (_, seen) = open(&sim_env(&fs.crash(folio_env::sim::CrashMode::Clean)), &c).unwrap();
    assert_eq!(seen.len(), n as usize);
}

/// The zeroes ahead of the writes are written in pieces of about 1 MiB, never
/// as one large fill: a large fill before the next group held that group for 10-20 ms.
#[test]
fn zeroes_are_topped_up_in_small_pieces() {
    for direct_io in [false, true] {
        zeroes_are_topped_up_in_small_pieces_with(direct_io);
    }
}

fn zeroes_are_topped_up_in_small_pieces_with(direct_io: bool) {
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        prealloc_size: 16 << 20,
        direct_io,
        ..JournalConfig::with_dirs(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    let file = journal_files(&fs, Path::new("/j"))[0].clone();
    let len0 = fs.read_file(&file).unwrap().len() as u64;
    // Direct I/O writes whole 4 KiB blocks, so the fill ends on a block boundary.
    let align = if direct_io { 4096 } else { 1 };
    assert_eq!(
        len0,
        (format::HEADER_LEN + (16 << 20)).next_multiple_of(align),
        "a new file is filled at once"
    );
    let record = (format::RECORD_HEADER_LEN + (64 << 10)) as u64;
    let mut last = len0;
    let mut grew = 0;
    for i in 0..200 {
        wait(append(&j, 1, i, &[3; 64 << 10])).unwrap();
        force(&j, 1).unwrap();
        let len = fs.read_file(&file).unwrap().len() as u64;
        // About what the group consumed: a piece once a piece is missing.
        assert!(
            len - last <= (1 << 20) + record + align,
            "one group grew the zeroes by {} bytes",
            len - last
        );
        if len > last {
            grew += 1;
        }
        last = len;
        let written = format::HEADER_LEN + (i as u64 + 1) * record;
        assert!(
            len >= written + (15 << 20),
            "headroom fell to {}",
            len - written
        );
    }
    assert!(
        grew >= 10,
        "the zeroes were topped up {grew} times for 12.5 MiB"
    );
    assert_eq!(j.stats().prealloc_fdatasyncs, 1);
}

#[test]
fn tools_scan_a_file_with_offsets_list_files_and_read_the_mark() {
    let fs = SimFileSystem::new();
    let file = journal_with_records(&fs, 5);
    let mut seen = Vec::new();
    let r = scan_file(&fs, &file, &mut |off, rec| seen.push((off, rec.clone()))).unwrap();
    assert_eq!(r.records, 5);
    let offsets: Vec<u64> = seen.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, record_offsets(5));
    for (i, (_, rec)) in seen.iter().enumerate() {
        assert_eq!(
            (rec.kind, rec.ledger, rec.entry),
            (RecordKind::Add, 3, i as i64)
        );
        assert_eq!(rec.payload.as_ref(), payload(3, i as i64).as_slice());
    }
    let current = Path::new("/j/current");
    let ids = list_files(&fs, current).unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(current.join(format::file_name(ids[0])), file);
    assert_eq!(read_mark(&fs, current).unwrap(), Position::default());
    let mark = Position {
        file_id: ids[0],
        offset: offsets[2],
    };
    fs.write_file_atomic(&current.join(format::MARK_FILE), &format::encode_mark(mark))
        .unwrap();
    assert_eq!(read_mark(&fs, current).unwrap(), mark);
    // A file not named like a journal file is refused, naming it.
    let e = scan_file(&fs, Path::new("/j/current/lastMark"), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("not a journal file"), "{e}");
}

/// Durable journal pages are dropped from the page cache (BookKeeper's
/// journalRemovePagesFromCache), and only durable ones: never the page the next group
/// writes into, never a page whose records are not yet synced.
#[test]
fn durable_journal_pages_leave_the_page_cache() {
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        flush_when_queue_empty: true, // no group wait: 3000 groups quickly
        direct_io: false,             // with direct I/O there are no pages to drop
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    let record = (format::RECORD_HEADER_LEN + 1000) as u64;
    let n = 3000u64; // ~3 MiB of records, one group each
    for i in 0..n {
        wait(append(&j, 1, i as i64, &[1; 1000])).unwrap();
    }
    let file = journal_files(&fs, Path::new("/j"))[0].clone();
    let dropped = fs.dropped_ranges();
    assert!(
        dropped.len() >= 2,
        "{} drops for 3 MiB of records",
        dropped.len()
    );
    let records_end = format::HEADER_LEN + n * record;
    let mut next = 0;
    for d in &dropped {
        assert_eq!(d.path, file);
        assert!(d.durable, "dropped pages that were not durable: {d:?}");
        assert_eq!(d.offset, next, "ranges follow each other: {dropped:?}");
        assert_eq!((d.offset + d.len) % 4096, 0, "{d:?}");
        assert!(d.offset + d.len <= records_end, "{d:?}");
        next = d.offset + d.len;
    }
    assert!(
        next >= records_end - (1 << 20) - 4096,
        "only {next} of {records_end} dropped"
    );
    drop(j);

    // Off: nothing is dropped.
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        remove_pages_from_cache: false,
        ..c
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    for i in 0..1500 {
        wait(append(&j, 1, i, &[1; 1000])).unwrap();
    }
    assert!(fs.dropped_ranges().is_empty());
}

/// Direct I/O (the default): every write is whole aligned blocks (the simulated disk
/// refuses anything else, as Linux does, and a refused write would fail its adds), the
/// block holding the previous group's end is rewritten with the same bytes in front, and
/// every acknowledged record replays byte for byte: after a clean shutdown, after a
/// crash that keeps only what was synced, and after crashes that tear the unsynced
/// writes anywhere, across file rolls.
#[test]
fn direct_io_journal_writes_whole_blocks_and_replays_every_record() {
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        prealloc_size: 8192,
        max_file_size: 96 * 1024, // several rolls
        ..cfg(vec![PathBuf::from("/j")])
    };
    assert!(c.direct_io, "direct I/O is the default");
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    use folio_env::Rng;
    let rng = SystemRng::with_seed(7);
    let between = |lo: u64, hi: u64| (lo + rng.below(hi - lo)) as usize;
    let mut acked: Vec<(i64, Vec<u8>)> = Vec::new();
    let mut entry = 0i64;
    let mut crashes = Vec::new();
    for round in 0..60 {
        // A few adds in flight at once, so groups hold one to several records of
        // sizes that leave the write offset anywhere inside a block.
        let batch: Vec<(i64, Vec<u8>, Done)> = (0..between(1, 5))
            .map(|_| {
                let len = match rng.below(4) {
                    0 => between(0, 40),
                    1 => between(40, 4200),
                    _ => between(4200, 20_000),
                };
                let p: Vec<u8> = (0..len).map(|_| between(1, 256) as u8).collect();
                entry += 1;
                let rx = append(&j, 9, entry, &p);
                (entry, p, rx)
            })
            .collect();
        for (e, p, rx) in batch {
            wait(rx).unwrap_or_else(|err| panic!("round {round} entry {e}: {err}"));
            acked.push((e, p));
        }
        if round % 6 == 5 {
            // Crash images now: everything acknowledged so far must survive them.
            crashes.push((
                acked.len(),
                fs.crash(folio_env::sim::CrashMode::Torn { seed: round }),
            ));
            crashes.push((acked.len(), fs.crash(folio_env::sim::CrashMode::Clean)));
        }
    }
    assert!(
        fs.direct_writes() >= 60,
        "{} direct writes",
        fs.direct_writes()
    );
    assert!(fs.dropped_ranges().is_empty(), "no page cache to drop");
    assert!(
        journal_files(&fs, Path::new("/j")).len() >= 3,
        "expected rolls"
    );
    drop(j);
    let check = |what: &str, fs: &SimFileSystem, n: usize| {
        let (j, seen) = open(&sim_env(fs), &c).unwrap_or_else(|e| panic!("{what}: {e}"));
        drop(j);
        assert!(
            seen.len() >= n,
            "{what}: {} records, {n} acknowledged",
            seen.len()
        );
        for ((e, p), r) in acked.iter().take(n).zip(&seen) {
            assert_eq!((r.ledger, r.entry), (9, *e), "{what}");
            assert!(
                r.payload.as_ref() == p.as_slice(),
                "{what}: entry {e} differs"
            );
        }
    };
    for (i, (n, image)) in crashes.iter().enumerate() {
        check(&format!("crash image {i}"), image, *n);
    }
    check("clean shutdown", &fs, acked.len());
}

/// A file system without direct I/O (tmpfs refuses O_DIRECT opens) gets the buffered
/// journal, with nothing lost and nothing refused.
#[test]
fn without_direct_io_support_the_journal_writes_buffered() {
    let fs = SimFileSystem::new();
    fs.refuse_direct_io();
    let c = JournalConfig {
        max_file_size: 32 * 1024,
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    for i in 0..40 {
        wait(append(&j, 4, i, &payload(4, i))).unwrap();
    }
    assert_eq!(fs.direct_writes(), 0);
    drop(j);
    let (_, seen) = open(&sim_env(&fs.crash(folio_env::sim::CrashMode::Clean)), &c).unwrap();
    assert_eq!(seen.len(), 40);
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r.payload.as_ref(), payload(4, i as i64).as_slice());
    }
}

/// The force-write thread: while a (slow) fdatasync runs, the writer writes
/// the next groups, and one fdatasync then covers several of them. Every add it
/// acknowledges is in a crash image taken at any later point, across file rolls, with
/// direct I/O and without.
#[test]
fn the_force_write_thread_acknowledges_only_what_an_fdatasync_covered() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for direct_io in [true, false] {
        let fs = SimFileSystem::new();
        // Long enough that the writer gets to write more groups during each fdatasync
        // even on a loaded machine (2 ms failed once while other tests ran).
        fs.set_sync_delay(Duration::from_millis(25));
        fs.capture_every_op(folio_env::sim::CrashMode::Clean);
        let c = JournalConfig {
            max_group_entries: 2,
            max_file_size: 8 * 1024, // rolls while groups wait for their fdatasync
            direct_io,
            force_write_thread: true,
            ..cfg(vec![PathBuf::from("/j")])
        };
        let (j, _) = open(&sim_env(&fs), &c).unwrap();
        let n = 200usize;
        let acked = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let answered = Arc::new(AtomicUsize::new(0));
        // In waves of 20 adds (10 groups), each answered before the next: every wave's
        // groups queue up behind one fdatasync, and later waves' crash images must hold
        // the earlier waves' acknowledged adds.
        for wave in 0..n / 20 {
            for i in (wave * 20) as i64..((wave + 1) * 20) as i64 {
                let (acked, answered, ops) = (acked.clone(), answered.clone(), fs.clone());
                j.append(
                    RecordKind::Add,
                    2,
                    i,
                    Bytes::from(payload(2, i)),
                    Some(Box::new(move |r| {
                        if r.is_ok() {
                            acked.lock().push((i, ops.ops()));
                        }
                        answered.fetch_add(1, Ordering::SeqCst);
                    })),
                );
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while answered.load(Ordering::SeqCst) < (wave + 1) * 20 {
                assert!(std::time::Instant::now() < deadline, "callbacks never ran");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let st = j.stats();
        drop(j);
        assert_eq!(acked.lock().len(), n, "every add acknowledged");
        assert!(
            st.group_fdatasyncs * 2 < st.group_commits,
            "groups were not made durable together: {st:?}"
        );
        let acked = acked.lock();
        let captures = fs.take_captures();
        let mut checked = 0;
        for (at, image) in captures.iter().step_by(7) {
            let (j, seen) = open(&sim_env(image), &c).unwrap_or_else(|e| panic!("op {at}: {e}"));
            drop(j);
            let seen: std::collections::HashSet<i64> = seen.iter().map(|r| r.entry).collect();
            for &(e, ops) in acked.iter().filter(|(_, ops)| ops <= at) {
                assert!(
                    seen.contains(&e),
                    "direct {direct_io}: entry {e} acknowledged at op {ops} missing from the image at op {at}"
                );
                checked += 1;
            }
        }
        assert!(checked > n, "only {checked} acknowledged records checked");
    }
}

/// The force-write path stepped by the caller (`force_write_by_caller`, the simulator's):
/// groups are written but nothing is acknowledged until a step; a crash before it keeps
/// none of them (none was fdatasynced), and a step makes every written group durable
/// with one fdatasync and runs their callbacks in order.
#[test]
fn a_stepped_force_write_acknowledges_only_at_the_step() {
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        max_group_entries: 1,
        force_write_thread: true,
        force_write_by_caller: true,
        direct_io: false,
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    let acked = Arc::new(parking_lot::Mutex::new(Vec::new()));
    for i in 0..3i64 {
        let acked = acked.clone();
        j.append(
            RecordKind::Add,
            5,
            i,
            Bytes::from(payload(5, i)),
            Some(Box::new(move |r| acked.lock().push((i, r.is_ok())))),
        );
    }
    assert!(j.wait_writers_idle());
    assert!(acked.lock().is_empty(), "acknowledged before any fdatasync");
    assert_eq!(
        j.force_write_queue_len(),
        3,
        "three groups written, waiting"
    );
    // Power lost now: the written groups were never synced.
    let (j2, seen) = open(&sim_env(&fs.crash(folio_env::sim::CrashMode::Clean)), &c).unwrap();
    drop(j2);
    assert!(
        seen.is_empty(),
        "unsynced groups survived a crash: {}",
        seen.len()
    );

    let syncs = j.stats().group_fdatasyncs;
    assert_eq!(j.force_write_step(), 3);
    assert_eq!(
        j.stats().group_fdatasyncs,
        syncs + 1,
        "one fdatasync for the three"
    );
    assert_eq!(*acked.lock(), vec![(0, true), (1, true), (2, true)]);
    assert_eq!(j.force_write_queue_len(), 0);
    let (j2, seen) = open(&sim_env(&fs.crash(folio_env::sim::CrashMode::Clean)), &c).unwrap();
    drop(j2);
    assert_eq!(
        seen.iter().map(|r| r.entry).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    // What is written when the journal shuts down is made durable and answered.
    let last = acked.clone();
    j.append(
        RecordKind::Add,
        5,
        3,
        Bytes::from(payload(5, 3)),
        Some(Box::new(move |r| last.lock().push((3, r.is_ok())))),
    );
    drop(j);
    assert_eq!(acked.lock().last(), Some(&(3, true)));
}

/// One batch of the force-write thread can hold groups of two files (the writer rolled
/// while an fdatasync ran): each file is synced, the older first, before any callback.
#[test]
fn a_batch_spanning_a_roll_syncs_both_files_before_any_callback() {
    use super::force::{SyncJob, Syncer};
    use super::writer::{DirShared, Request, RequestKind};
    let fs = SimFileSystem::new();
    fs.create_dir_all(Path::new("/j/current")).unwrap();
    let shared = Arc::new(DirShared::new(
        PathBuf::from("/j/current"),
        Position::default(),
        Arc::new(super::writer::PoisonSlot::default()),
    ));
    let mut syncer = Syncer::new(shared.clone(), Arc::new(SystemClock), true, false);
    let (tx, rx) = mpsc::channel();
    let mut jobs = Vec::new();
    for (id, name) in [(1u64, "/j/current/a"), (2, "/j/current/b")] {
        let file = fs.open(Path::new(name), OpenOptions::create_new()).unwrap();
        file.write_all_at(name.as_bytes(), 0).unwrap();
        let tx = tx.clone();
        // What the callback sees durable when it runs.
        let probe = fs.clone();
        jobs.push(SyncJob {
            file,
            path: PathBuf::from(name),
            direct: false,
            end: Position {
                file_id: id,
                offset: name.len() as u64,
            },
            wrote: true,
            batch: vec![Request {
                kind: RequestKind::Record(RecordKind::Add),
                ledger: 1,
                entry: id as i64,
                payload: Bytes::new(),
                payload_crc: None,
                done: Some(Box::new(move |r| {
                    fs_sync_dir_then_send(&probe, &tx, r);
                })),
                enqueued: std::time::Instant::now(),
            }],
        });
    }
    syncer.complete(jobs);
    drop(tx);
    let seen: Vec<Seen> = rx.iter().collect();
    assert_eq!(seen.len(), 2);
    for (r, durable) in &seen {
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(
            durable,
            &vec![b"/j/current/a".to_vec(), b"/j/current/b".to_vec()],
            "a callback ran before both files were durable"
        );
    }
    assert_eq!(shared.synced().file_id, 2);
}

/// A callback's result and the durable contents of both files when it ran.
type Seen = (Result<(), String>, Vec<Vec<u8>>);

/// Makes the directory durable (the test's files were never synced into it), then sends
/// the callback's result and both files' durable contents.
fn fs_sync_dir_then_send(fs: &SimFileSystem, tx: &mpsc::Sender<Seen>, r: Result<(), StorageError>) {
    fs.sync_dir(Path::new("/j/current")).unwrap();
    let image = fs.crash(folio_env::sim::CrashMode::Clean);
    let durable = ["/j/current/a", "/j/current/b"]
        .iter()
        .map(|p| image.read_file(Path::new(p)).unwrap_or_default())
        .collect();
    tx.send((r.map_err(|e| e.to_string()), durable)).unwrap();
}

/// With direct I/O, zero fills (synchronous device writes on the writer thread) wait
/// while adds are queued: a burst is written without them, extending the file, and the
/// headroom is refilled once the queue is empty. Every record still replays.
#[test]
fn direct_io_zero_fills_wait_while_adds_are_queued() {
    let fs = SimFileSystem::new();
    fs.set_sync_delay(Duration::from_millis(1)); // so that the adds pile up
    let c = JournalConfig {
        prealloc_size: 64 * 1024,
        max_group_entries: 1,
        ..cfg(vec![PathBuf::from("/j")])
    };
    assert!(c.direct_io);
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    let at_open = j.stats().prealloc_bytes;
    let n = 60i64;
    // Queued while the writer is held: on a loaded machine the writer could otherwise
    // drain the queue between two appends and refill the headroom mid-burst.
    j.hold_writers(true);
    let rxs: Vec<_> = (0..n).map(|i| append(&j, 5, i, &[7; 4096])).collect();
    j.hold_writers(false);
    for rx in rxs {
        wait(rx).unwrap();
    }
    // The top-up after the last group runs after its callback: a force queued now is
    // taken only once it is done.
    force(&j, 5).unwrap();
    let st = j.stats();
    let records = n as u64 * (format::RECORD_HEADER_LEN as u64 + 4096);
    let during = st.prealloc_bytes - at_open;
    // Only after the last group (queue empty) may the headroom be refilled: at most
    // what it holds, plus a block of alignment. Filled as it drained, it would take
    // about as many zeroes as records.
    assert!(
        during <= c.prealloc_size + 4096,
        "{during} bytes of zeroes written during a burst of {records} bytes: {st:?}"
    );
    assert!(
        during > 0,
        "the headroom was refilled once the queue emptied"
    );
    let file = journal_files(&fs, Path::new("/j"))[0].clone();
    let len = fs.read_file(&file).unwrap().len() as u64;
    assert!(
        len >= format::HEADER_LEN + records + c.prealloc_size / 2,
        "{len}"
    );
    drop(j);
    let (_, seen) = open(&sim_env(&fs.crash(folio_env::sim::CrashMode::Clean)), &c).unwrap();
    assert_eq!(seen.len(), n as usize);
}

/// With direct I/O a group is followed by at most one zero-fill piece (each piece is a
/// synchronous device write the next group waits for), even when the burst before it
/// left several pieces missing; the headroom comes back a piece per group.
#[test]
fn direct_io_refills_the_headroom_one_piece_per_group() {
    let fs = SimFileSystem::new();
    fs.set_sync_delay(Duration::from_millis(1)); // so that the adds pile up
    let c = JournalConfig {
        prealloc_size: 8 << 20, // pieces of 1 MiB
        max_group_entries: 1,
        // Groups of up to one piece: one piece may follow each (the default 2 MiB
        // groups allow two).
        max_group_bytes: 1 << 20,
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    let at_open = j.stats().prealloc_bytes;
    // 48 x 64 KiB = 3 MiB queued at once: no zero fill while they are queued.
    // (Held while queued, as in the test above.)
    j.hold_writers(true);
    let rxs: Vec<_> = (0..48).map(|i| append(&j, 6, i, &[3; 64 << 10])).collect();
    j.hold_writers(false);
    for rx in rxs {
        wait(rx).unwrap();
    }
    // Waits for the top-up after the last add (one piece), then adds one more. The
    // force's callback runs before the writer's top-up after it: wait for that too.
    force(&j, 6).unwrap();
    assert!(j.wait_writers_idle());
    let after_two = j.stats().prealloc_bytes - at_open;
    assert!(
        after_two <= (2 << 20) + 8192,
        "{after_two} bytes of zeroes after two groups"
    );
    assert!(
        after_two >= 2 << 20,
        "{after_two}: the headroom is refilled a piece per group"
    );
    // More idle groups bring the whole headroom back.
    for _ in 0..4 {
        force(&j, 6).unwrap();
    }
    let file = journal_files(&fs, Path::new("/j"))[0].clone();
    let len = fs.read_file(&file).unwrap().len() as u64;
    let records = 48 * (format::RECORD_HEADER_LEN as u64 + (64 << 10));
    assert!(len >= format::HEADER_LEN + records + (5 << 20), "{len}");
}

/// Opens the journal in `/j` again (which starts a new file), appends `n` records of
/// ledger 4 and closes it: the files before the new one are then older files.
/// A journal written before format version 2 (its records checksummed over their bytes,
/// version 1) is replayed after the upgrade, torn tail and all, and the files written
/// after it (version 2) are replayed with it at the next start.
#[test]
fn a_version_1_journal_from_before_the_upgrade_replays() {
    let fs = SimFileSystem::new();
    let file = journal_with_records(&fs, 6);
    let id = format::parse_file_name(file.file_name().unwrap().to_str().unwrap()).unwrap();
    let mut v1 = format::encode_header_v1(id).to_vec();
    for i in 0..6 {
        format::encode_record_v1(&mut v1, id, RecordKind::Add, 3, i, &payload(3, i));
    }
    let mut torn = Vec::new();
    format::encode_record_v1(&mut torn, id, RecordKind::Add, 3, 6, &payload(3, 6));
    v1.extend_from_slice(&torn[..torn.len() - 3]);
    let f = fs.open(&file, OpenOptions::write_create()).unwrap();
    f.set_len(0).unwrap();
    f.write_all_at(&v1, 0).unwrap();
    drop(f);
    let seen = one_more_run(&fs, 2);
    let got: Vec<_> = seen.iter().map(|r| (r.ledger, r.entry)).collect();
    assert_eq!(got, (0..6).map(|i| (3, i)).collect::<Vec<_>>());
    for r in &seen {
        assert_eq!(r.payload.as_ref(), payload(3, r.entry).as_slice());
    }
    let (_, seen) = open(&sim_env(&fs), &cfg(vec![PathBuf::from("/j")])).unwrap();
    let got: Vec<_> = seen.iter().map(|r| (r.ledger, r.entry)).collect();
    let mut want: Vec<_> = (0..6).map(|i| (3, i)).collect();
    want.extend([(4, 0), (4, 1)]);
    assert_eq!(got, want, "the version 1 file, then the version 2 one");
}

fn one_more_run(fs: &SimFileSystem, n: i64) -> Vec<ReplayRecord> {
    let (j, seen) = open(&sim_env(fs), &cfg(vec![PathBuf::from("/j")])).unwrap();
    for i in 0..n {
        wait(append(&j, 4, i, &payload(4, i))).unwrap();
    }
    seen
}

fn expect_corrupt(fs: &SimFileSystem, file: &Path, at: u64) -> String {
    let err = open(&sim_env(fs), &cfg(vec![PathBuf::from("/j")]))
        .err()
        .expect("start-up must refuse the damaged journal");
    match &err {
        StorageError::CorruptJournal {
            file: f, offset, ..
        } => {
            assert_eq!((f.as_path(), *offset), (file, at), "{err}");
        }
        other => panic!("expected CorruptJournal, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&file.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("offset {at}")), "{msg}");
    msg
}

/// A file that a later file follows was complete and every record in it acknowledged:
/// a damaged last record there is lost data, not a torn tail. Its preallocated zeroes
/// are not damage.
#[test]
fn damage_at_the_end_of_an_older_file_is_corruption_not_a_torn_tail() {
    let offs = record_offsets(5);
    let last_end = offs[4] + (format::RECORD_HEADER_LEN + payload(3, 4).len()) as u64;
    // Cut inside the last record, a flipped byte in it, and junk after the zeroes.
    for damage in ["cut", "flip", "junk after zeroes"] {
        let fs = SimFileSystem::new();
        let file = journal_with_records(&fs, 5);
        one_more_run(&fs, 2);
        // Intact, the older file's zero tail is fine and everything replays.
        let seen = one_more_run(&fs, 0);
        assert_eq!(seen.len(), 7, "{damage}");
        let f = fs.open(&file, OpenOptions::write_create()).unwrap();
        assert!(
            f.len().unwrap() > last_end,
            "the file has preallocated zeroes"
        );
        let at = match damage {
            "cut" => {
                f.set_len(offs[4] + 30).unwrap();
                offs[4]
            }
            "flip" => {
                f.write_all_at(&[0xAA], offs[4] + 35).unwrap();
                offs[4]
            }
            _ => {
                f.write_all_at(&[1], last_end + 100).unwrap();
                last_end
            }
        };
        let msg = expect_corrupt(&fs, &file, at);
        assert!(
            msg.contains("later journal files follow"),
            "{damage}: {msg}"
        );
    }
}

/// The newest file's torn tail is dropped at start-up and cut off, so that the next
/// start (when a later file follows it) finds it complete; the same for a file whose
/// header never became durable.
#[test]
fn a_torn_newest_file_is_sealed_so_later_starts_accept_it() {
    let offs = record_offsets(5);
    let fs = SimFileSystem::new();
    let file = journal_with_records(&fs, 5);
    let f = fs.open(&file, OpenOptions::write_create()).unwrap();
    f.set_len(offs[4] + 30).unwrap(); // the last group cut by a crash
    assert_eq!(one_more_run(&fs, 2).len(), 4, "the torn record is dropped");
    assert_eq!(f.len().unwrap(), offs[4], "the torn bytes are cut off");
    // A crash right after the next file was created, before its header was durable.
    let next = Path::new("/j/current").join(format::file_name(3));
    fs.open(&next, OpenOptions::create_new())
        .unwrap()
        .write_all_at(&[0; 10], 0)
        .unwrap();
    assert_eq!(one_more_run(&fs, 1).len(), 4 + 2);
    let seen = one_more_run(&fs, 0);
    assert_eq!(seen.len(), 4 + 2 + 1);
    assert_eq!(fs.read_file(&next).unwrap(), format::encode_header(3));
}

/// The files from the mark's file on must be consecutive: a missing one (lost, or
/// moved away) stops start-up naming it. Files before the mark may be gone (deleted
/// after a checkpoint, the reaper may not have finished).
#[test]
fn a_missing_journal_file_after_the_mark_stops_start_up() {
    let fs = SimFileSystem::new();
    let env = sim_env(&fs);
    let c = JournalConfig {
        max_file_size: 1024,
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&env, &c).unwrap();
    for i in 0..40 {
        wait(append(&j, 1, i, &[i as u8; 100])).unwrap();
    }
    drop(j);
    let ids = list_files(&fs, Path::new("/j/current")).unwrap();
    assert!(ids.len() >= 4, "{ids:?}");
    let dir = Path::new("/j/current");
    let path = |id: u64| dir.join(format::file_name(id));
    let hidden = Path::new("/j/hidden");

    // No mark: nothing was ever deleted, so even the first file must be there.
    fs.rename(&path(1), hidden).unwrap();
    let err = open(&env, &c).err().expect("a missing first file");
    assert!(
        err.to_string().contains(&format!("{}", path(1).display())),
        "{err}"
    );
    assert!(
        err.to_string().contains("journal file 1 is missing"),
        "{err}"
    );
    fs.rename(hidden, &path(1)).unwrap();

    // A file in the middle.
    fs.rename(&path(2), hidden).unwrap();
    let err = open(&env, &c).err().expect("a missing middle file");
    assert!(
        matches!(&err, StorageError::CorruptJournal { file, .. } if *file == path(2)),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("journal file 2 is missing, yet file 3 exists"),
        "{err}"
    );
    fs.rename(hidden, &path(2)).unwrap();

    // With the mark in file 3: files 1 and 2 may go, file 4 may not.
    fs.write_file_atomic(
        &dir.join(format::MARK_FILE),
        &format::encode_mark(Position {
            file_id: 3,
            offset: format::HEADER_LEN,
        }),
    )
    .unwrap();
    fs.remove_file(&path(1)).unwrap();
    fs.remove_file(&path(2)).unwrap();
    let (j, _) = open(&env, &c).expect("files before the mark may be deleted");
    drop(j);
    fs.rename(&path(4), hidden).unwrap();
    let err = open(&env, &c).err().expect("a missing file after the mark");
    assert!(
        err.to_string().contains(
            "journal file 4 is missing, yet file 5 exists (every file from the mark's file 3 on"
        ),
        "{err}"
    );
}

/// With the force-write thread the writer rolls to a new file while the old file's last
/// groups may still wait for their fdatasync; a crash then must not leave the older
/// file torn (replay would take that for lost data). So no torn crash image, at any
/// point, across rolls, may stop start-up.
#[test]
fn no_torn_crash_image_with_the_force_write_thread_stops_start_up() {
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        max_group_entries: 1,
        max_file_size: 2 * 1024,
        direct_io: false,
        force_write_thread: true,
        ..cfg(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    // Long enough that the writer writes many groups (and rolls) during each fdatasync.
    fs.set_sync_delay(Duration::from_millis(20));
    fs.capture_every_op(folio_env::sim::CrashMode::Torn { seed: 7 });
    // Adds in waves without waiting for each: groups queue behind the fdatasyncs.
    for wave in 0..10i64 {
        let rxs: Vec<Done> = (0..20)
            .map(|i| append(&j, 2, wave * 20 + i, &[7; 200]))
            .collect();
        for rx in rxs {
            wait(rx).unwrap();
        }
    }
    drop(j);
    let captures = fs.take_captures();
    assert!(list_files(&fs, Path::new("/j/current")).unwrap().len() >= 4);
    for (at, image) in &captures {
        if let Err(e) = open(&sim_env(image), &c) {
            panic!("the crash image at op {at} does not start: {e}");
        }
    }
}

/// A write refused by a full disk stops the journal until space is freed (the refused
/// bytes are cut off the file); a failed fdatasync stops it for good (invariant 9), and
/// replaces a full disk's stop.
#[test]
fn a_full_disk_stops_writes_until_space_is_freed_a_failed_fsync_for_good() {
    use folio_env::sim::Fault;
    let fs = SimFileSystem::new();
    let env = sim_env(&fs);
    let c = cfg(vec![PathBuf::from("/j")]);
    let (j, _) = open(&env, &c).unwrap();
    wait(append(&j, 1, 0, b"before")).unwrap();
    let file = journal_files(&fs, Path::new("/j"))[0].clone();
    let end = format::HEADER_LEN + (format::RECORD_HEADER_LEN + 6) as u64;
    fs.inject(Fault::WriteEnospc { after_ops: 0 });
    let e = wait(append(&j, 1, 1, b"refused")).unwrap_err();
    assert!(matches!(e, StorageError::NoSpace { .. }), "{e}");
    assert!(j.read_only_reason().is_some());
    assert_eq!(j.fatal_reason(), None, "a full disk is not a failed fsync");
    // Nothing after the last record: the refused write (and the zeroes) are cut off.
    assert_eq!(
        fs.open(&file, OpenOptions::read()).unwrap().len().unwrap(),
        end
    );
    // Still stopped until told that space was freed.
    fs.clear_faults();
    assert!(wait(append(&j, 1, 2, b"still refused")).is_err());
    assert!(j.resume_after_space_freed());
    assert_eq!(j.read_only_reason(), None);
    wait(append(&j, 1, 3, b"after")).unwrap();

    // A failed fdatasync: for good, even on a disk with room.
    fs.inject(Fault::SyncEio { after_ops: 0 });
    assert!(wait(append(&j, 1, 4, b"unsynced")).is_err());
    let reason = j.fatal_reason().expect("poisoned for good");
    assert!(reason.contains("fdatasync"), "{reason}");
    assert!(!j.resume_after_space_freed());
    assert!(wait(append(&j, 1, 5, b"after the fsync")).is_err());
    // A full disk's stop does not hide one for good either.
    j.poison_no_space(
        "checkpoint",
        PathBuf::new(),
        &std::io::Error::from(std::io::ErrorKind::StorageFull),
    );
    assert!(!j.resume_after_space_freed());
    drop(j);
    let (_, seen) = open(&env, &c).unwrap();
    let entries: Vec<i64> = seen.iter().map(|r| r.entry).collect();
    assert_eq!(&entries[..2], &[0, 3], "the acknowledged records, in order");
}

/// A group's list comes back from the force-write thread, emptied, for a later group,
/// instead of being dropped there and built afresh (a large allocation per group with
/// thousands of adds in flight); at most a few are kept.
#[test]
fn group_lists_come_back_for_later_groups_and_few_are_kept() {
    use writer::SPARE_BATCHES;
    let fs = SimFileSystem::new();
    let c = JournalConfig {
        force_write_thread: true,
        ..JournalConfig::with_dirs(vec![PathBuf::from("/j")])
    };
    let (j, _) = open(&sim_env(&fs), &c).unwrap();
    for round in 0..20 {
        let pending: Vec<Done> = (0..50)
            .map(|i| append(&j, 1, round * 50 + i, &[7; 100]))
            .collect();
        for rx in pending {
            wait(rx).unwrap();
        }
        // The force step hands the list back after the group's callbacks have run.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while j.dirs[0].spare_batches.lock().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: no list came back"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let spare = j.dirs[0].spare_batches.lock();
        assert!(
            (1..=SPARE_BATCHES).contains(&spare.len()),
            "round {round}: {} lists kept",
            spare.len()
        );
        assert!(
            spare.iter().all(Vec::is_empty),
            "kept lists hold no request"
        );
    }
    assert!(j.stats().group_commits > 1);
}
