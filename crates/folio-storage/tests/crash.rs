//! Crash tests on the simulated disk.
//!
//! A seeded workload (adds to several ledgers, fences, recovery adds, explicit LACs,
//! wrong master keys, checkpoints) runs against `Storage` on a `SimFileSystem` that
//! takes a crash image before every disk operation. Each image is restarted and
//! checked: every write whose callback said Ok before the image was taken must be
//! back (adds byte for byte, fences, master keys, explicit LACs). The ledger store
//! under the journal is the production `LedgerStore` (entry logs of 2 KiB, so they roll
//! often, and the redb index), all on the same simulated disk, so one image captures
//! journal, marks, entry logs and index consistently.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use folio_env::sim::{CrashMode, Fault, SimFileSystem};
use folio_env::{Env, FileSystem, Rng, SystemClock, SystemRng};
use folio_storage::ledger_store::{LedgerStore, LedgerStoreConfig};
use folio_storage::{
    JournalConfig, LedgerBackend, NegativeControls, Storage, StorageConfig, StorageError,
};
use parking_lot::Mutex;

const LEDGERS: i64 = 4;

fn env(fs: &SimFileSystem) -> Env {
    Env {
        clock: Arc::new(SystemClock),
        fs: Arc::new(fs.clone()),
        rng: Arc::new(SystemRng::with_seed(7)),
    }
}

fn config(unsafe_ack: bool, flush_interval: Duration) -> StorageConfig {
    config_io(unsafe_ack, flush_interval, true)
}

/// `direct_io`: the journal's and the entry logs' direct-I/O writers (whole blocks, the
/// last one rewritten) or their buffered ones.
fn config_io(unsafe_ack: bool, flush_interval: Duration, direct_io: bool) -> StorageConfig {
    StorageConfig {
        journal: JournalConfig {
            dirs: vec![PathBuf::from("/j0"), PathBuf::from("/j1")],
            prealloc_size: 1024,
            max_file_size: 4096,
            unsafe_ack_before_sync: unsafe_ack,
            direct_io,
            ..JournalConfig::default()
        },
        flush_interval,
        // Only the test with periodic checkpoints also checkpoints on cache size.
        checkpoint_write_cache_bytes: if flush_interval.is_zero() {
            u64::MAX
        } else {
            4096
        },
    }
}

/// How the ledger store lays out its entry logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// One log shared by all ledgers (the default).
    Shared,
    /// A log per ledger, at most two open (the workload writes four ledgers, so logs
    /// are evicted), broken by `controls` if set.
    PerLedger(NegativeControls),
}

fn open(fs: &SimFileSystem, cfg: StorageConfig) -> Result<Storage, String> {
    open_as(fs, cfg, Layout::Shared).map(|(s, _)| s)
}

fn open_as(
    fs: &SimFileSystem,
    cfg: StorageConfig,
    layout: Layout,
) -> Result<(Storage, Arc<LedgerStore>), String> {
    fs.create_dir_all(Path::new("/data"))
        .map_err(|e| e.to_string())?;
    let mut store_cfg =
        LedgerStoreConfig::new(vec![PathBuf::from("/data")], PathBuf::from("/data/index"));
    store_cfg.journal_dirs = cfg.journal.dirs.clone();
    store_cfg.entry_log_size_limit = 2048;
    store_cfg.write_cache_bytes = 1 << 20;
    store_cfg.entry_log_per_ledger = matches!(layout, Layout::PerLedger(_));
    store_cfg.max_active_entry_logs = 2;
    // The entry logs follow the journal: direct I/O (whole blocks, the last partial one
    // rewritten at the next flush, here with logs smaller than a block) or buffered.
    store_cfg.entry_log_direct_io = cfg.journal.direct_io;
    let store = LedgerStore::open(&env(fs), store_cfg).map_err(|e| format!("store: {e}"))?;
    let store = Arc::new(store);
    if let Layout::PerLedger(c) = layout {
        store.set_negative_controls_for_tests(c);
    }
    let storage = Storage::open(&env(fs), cfg, store.clone() as Arc<dyn LedgerBackend>)
        .map_err(|e| format!("storage: {e}"))?;
    Ok((storage, store))
}

fn key(ledger: i64) -> [u8; 20] {
    [(ledger % 200) as u8 + 1; 20]
}

/// Mostly small entries; one in 16 is large enough (16 KiB and more) to be kept in its own
/// buffer and checksummed once as it is put, for the journal and the entry log alike.
fn entry_bytes(ledger: i64, entry: i64, rng: &SystemRng) -> Bytes {
    let n = if rng.below(16) == 0 {
        16 * 1024 + rng.below(4096) as usize
    } else {
        rng.below(200) as usize
    };
    let mut b = Vec::with_capacity(32 + n);
    b.extend_from_slice(&ledger.to_be_bytes());
    b.extend_from_slice(&entry.to_be_bytes());
    b.extend_from_slice(&(entry - 1).to_be_bytes());
    b.extend_from_slice(&(n as i64).to_be_bytes());
    b.extend((0..n).map(|_| rng.next_u64() as u8));
    Bytes::from(b)
}

fn lac_body(ledger: i64, lac: i64) -> Bytes {
    let mut b = ledger.to_be_bytes().to_vec();
    b.extend_from_slice(&lac.to_be_bytes());
    b.extend_from_slice(&[0; 4]);
    Bytes::from(b)
}

#[derive(Debug, Clone)]
enum Op {
    Add {
        ledger: i64,
        entry: i64,
        data: Bytes,
    },
    Fence {
        ledger: i64,
    },
    Lac {
        ledger: i64,
        lac: i64,
    },
}

impl Op {
    fn ledger(&self) -> i64 {
        match self {
            Op::Add { ledger, .. } | Op::Fence { ledger } | Op::Lac { ledger, .. } => *ledger,
        }
    }
}

#[derive(Debug)]
struct Ack {
    op: Op,
    /// Disk operations completed when the callback ran (after its fdatasync).
    ops_at: u64,
    result: Result<(), String>,
}

type Acks = Arc<Mutex<Vec<Ack>>>;

struct Run {
    fs: SimFileSystem,
    storage: Storage,
    store: Arc<LedgerStore>,
    acks: Acks,
    pending: Vec<mpsc::Receiver<()>>,
}

impl Run {
    fn callback(&mut self, op: Op) -> folio_storage::WriteCallback {
        let (tx, rx) = mpsc::channel();
        self.pending.push(rx);
        let (acks, fs) = (Arc::clone(&self.acks), self.fs.clone());
        Box::new(move |r: Result<(), StorageError>| {
            let ops_at = fs.ops();
            acks.lock().push(Ack {
                op,
                ops_at,
                result: r.map_err(|e| e.to_string()),
            });
            let _ = tx.send(());
        })
    }

    /// A ForceLedger of `ledger`: once it answers, `covered` (its deferred adds made
    /// before) are acknowledged as of then.
    fn force(&mut self, ledger: i64, covered: Vec<Op>) {
        let (tx, rx) = mpsc::channel();
        self.pending.push(rx);
        let (acks, fs) = (Arc::clone(&self.acks), self.fs.clone());
        self.storage.force_ledger(
            ledger,
            Box::new(move |r: Result<(), StorageError>| {
                let ops_at = fs.ops();
                let result = r.map_err(|e| e.to_string());
                acks.lock().extend(covered.into_iter().map(|op| Ack {
                    op,
                    ops_at,
                    result: result.clone(),
                }));
                let _ = tx.send(());
            }),
        );
    }

    fn wait_all(&mut self) {
        for rx in self.pending.drain(..) {
            rx.recv_timeout(Duration::from_secs(120))
                .expect("a write callback never ran");
        }
    }
}

/// Runs the seeded workload; returns the run (storage still open).
/// How many disk operations a fault-free workload takes (up to its last answer, not
/// counting the shutdown's final checkpoint), to aim faults inside it. The count varies
/// a little from run to run (how adds share group commits depends on thread timing), so
/// callers aim well inside it.
fn workload_ops(seed: u64, steps: usize) -> u64 {
    let fs = SimFileSystem::new();
    let run = workload(&fs, seed, steps, config(false, Duration::ZERO));
    let ops = fs.ops();
    run.storage.shutdown();
    ops
}

fn workload(fs: &SimFileSystem, seed: u64, steps: usize, cfg: StorageConfig) -> Run {
    workload_on(fs, seed, steps, cfg, 0)
}

/// The workload on ledgers `base .. base + LEDGERS`.
fn workload_on(fs: &SimFileSystem, seed: u64, steps: usize, cfg: StorageConfig, base: i64) -> Run {
    workload_as(fs, seed, steps, cfg, base, Layout::Shared)
}

/// The workload on a store laid out as `layout`. With a log per ledger it also
/// write-closes ledgers (BP-32), some while a checkpoint runs on another thread.
fn workload_as(
    fs: &SimFileSystem,
    seed: u64,
    steps: usize,
    cfg: StorageConfig,
    base: i64,
    layout: Layout,
) -> Run {
    workload_with(
        fs,
        seed,
        steps,
        cfg,
        base,
        layout,
        NegativeControls::default(),
    )
}

/// [`workload_as`] with the engine's `controls` set.
fn workload_with(
    fs: &SimFileSystem,
    seed: u64,
    steps: usize,
    cfg: StorageConfig,
    base: i64,
    layout: Layout,
    controls: NegativeControls,
) -> Run {
    let (storage, store) = open_as(fs, cfg, layout).unwrap();
    if controls != NegativeControls::default() {
        // (Also sets the store's, which `open_as` may have set for the layout.)
        storage.set_negative_controls_for_tests(controls);
    }
    let per_ledger = layout != Layout::Shared;
    let mut run = Run {
        fs: fs.clone(),
        storage,
        store,
        acks: Arc::new(Mutex::new(Vec::new())),
        pending: Vec::new(),
    };
    let rng = SystemRng::with_seed(seed);
    let mut next_entry = [0i64; LEDGERS as usize];
    let mut fenced = [false; LEDGERS as usize];
    let mut lac = [0i64; LEDGERS as usize];
    // Deferred-sync recovery adds per ledger not yet covered by a ForceLedger: they count
    // as acknowledged only once a force asked after them answers Ok.
    let mut deferred: Vec<Vec<Op>> = vec![Vec::new(); LEDGERS as usize];
    // Their choices come from a second generator, so the rest of each seed's workload
    // (which the negative controls' seeds were picked on) stays as it was.
    let copies = SystemRng::with_seed(seed ^ 0xdef0);
    // Whether a checkpoint is one for room (it may stage the index), from a third.
    let for_room = SystemRng::with_seed(seed ^ 0x57a6);
    for _ in 0..steps {
        let li = rng.below(LEDGERS as u64) as usize;
        let l = base + li as i64;
        match rng.below(100) {
            0..70 => {
                let e = next_entry[li];
                next_entry[li] += 1;
                let data = entry_bytes(l, e, &rng);
                let recovery = fenced[li] && rng.below(2) == 0;
                let op = Op::Add {
                    ledger: l,
                    entry: e,
                    data: data.clone(),
                };
                if fenced[li] && !recovery {
                    let (tx, rx) = mpsc::channel();
                    run.storage.add_entry(
                        l,
                        e,
                        &key(l),
                        data,
                        false,
                        Box::new(move |r| tx.send(r).unwrap()),
                    );
                    let r = rx.recv_timeout(Duration::from_secs(60)).unwrap();
                    assert!(
                        matches!(
                            r,
                            Err(StorageError::Fenced { .. }) | Err(StorageError::ReadOnly { .. })
                        ),
                        "{r:?}"
                    );
                    continue;
                }
                if recovery && copies.below(3) == 0 {
                    // A re-replicating copy: no journal record; durable at a force.
                    let (tx, rx) = mpsc::channel();
                    run.storage.add_recovery_entry_deferred(
                        l,
                        e,
                        &key(l),
                        data,
                        Box::new(move |r| tx.send(r).unwrap()),
                    );
                    match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
                        Ok(()) => deferred[li].push(op),
                        Err(StorageError::ReadOnly { .. }) => {}
                        Err(e) => panic!("deferred add {l}/{e}: {e}"),
                    }
                    if copies.below(3) == 0 {
                        run.force(l, std::mem::take(&mut deferred[li]));
                    }
                    continue;
                }
                let cb = run.callback(op);
                run.storage.add_entry(l, e, &key(l), data, recovery, cb);
            }
            70..78 => {
                fenced[li] = true;
                let cb = run.callback(Op::Fence { ledger: l });
                run.storage.fence(l, &key(l), cb);
            }
            78..88 => {
                lac[li] += 1;
                let cb = run.callback(Op::Lac {
                    ledger: l,
                    lac: lac[li],
                });
                run.storage.write_lac(l, &key(l), lac_body(l, lac[li]), cb);
            }
            88..93 => {
                let result = if per_ledger && rng.below(2) == 0 {
                    // Write closes racing the checkpoint: each lands in this flush or
                    // the next, and either way nothing acknowledged may go.
                    std::thread::scope(|scope| {
                        let cp = scope.spawn(|| run.storage.checkpoint());
                        for k in 0..LEDGERS {
                            let _ = run.storage.write_close(base + k, &key(base + k));
                        }
                        cp.join().unwrap()
                    })
                } else if for_room.below(3) > 0 {
                    run.storage.checkpoint_for_room()
                } else {
                    run.storage.checkpoint()
                };
                if let Err(e) = result {
                    // Allowed only once the disk failed under us.
                    assert!(
                        run.storage.is_read_only() || matches!(e, StorageError::NoSpace { .. }),
                        "checkpoint failed: {e}"
                    );
                }
            }
            93..95 if per_ledger => {
                // BP-32: the writer is done, for now (later adds open a new log).
                match run.storage.write_close(l, &key(l)) {
                    Ok(_) | Err(StorageError::ReadOnly { .. }) => {}
                    Err(e) => panic!("write close of {l}: {e}"),
                }
            }
            93..98 => run.wait_all(),
            _ => {
                // A wrong master key is refused and never acknowledged.
                if next_entry[li] == 0 && !fenced[li] && lac[li] == 0 {
                    continue; // the wrong key would become the ledger's key
                }
                let (tx, rx) = mpsc::channel();
                let data = entry_bytes(l, next_entry[li], &rng);
                run.storage.add_entry(
                    l,
                    next_entry[li],
                    &[0xEE; 20],
                    data,
                    true,
                    Box::new(move |r| tx.send(r).unwrap()),
                );
                let r = rx.recv_timeout(Duration::from_secs(60)).unwrap();
                assert!(
                    matches!(
                        r,
                        Err(StorageError::Unauthorized { .. }) | Err(StorageError::ReadOnly { .. })
                    ),
                    "{r:?}"
                );
            }
        }
    }
    for (li, covered) in deferred.into_iter().enumerate() {
        if !covered.is_empty() {
            run.force(base + li as i64, covered);
        }
    }
    run.wait_all();
    run
}

/// Restarts `image` and lists what acknowledged by `ops` completed operations is missing.
fn check_image(image: &SimFileSystem, n: u64, acks: &[Ack]) -> Vec<String> {
    check_image_as(image, n, acks, Layout::Shared)
}

/// [`check_image`], the store reopened laid out as `layout`.
fn check_image_as(image: &SimFileSystem, n: u64, acks: &[Ack], layout: Layout) -> Vec<String> {
    let mut bad = Vec::new();
    let layout = match layout {
        // The restarted bookie runs unbroken.
        Layout::PerLedger(_) => Layout::PerLedger(NegativeControls::default()),
        l => l,
    };
    let storage = match open_as(image, config(false, Duration::ZERO), layout) {
        Ok((s, _)) => s,
        Err(e) => return vec![format!("op {n}: restart failed: {e}")],
    };
    let mut max_lac = std::collections::BTreeMap::new();
    for a in acks.iter().filter(|a| a.result.is_ok() && a.ops_at <= n) {
        let l = a.op.ledger();
        match storage.master_key(l) {
            Ok(Some(k)) if k.as_ref() == key(l) => {}
            other => bad.push(format!("op {n}: ledger {l} master key {other:?}")),
        }
        match &a.op {
            Op::Add {
                ledger,
                entry,
                data,
            } => match storage.read_entry(*ledger, *entry) {
                Ok(Some(got)) if got == data => {}
                other => bad.push(format!(
                    "op {n}: acknowledged entry {ledger}/{entry} reads back as {:?}",
                    other.map(|o| o.map(|b| b.len()))
                )),
            },
            Op::Fence { ledger } => {
                if !storage.is_fenced(*ledger).unwrap_or(false) {
                    bad.push(format!("op {n}: acknowledged fence of {ledger} lost"));
                }
            }
            Op::Lac { ledger, lac } => {
                let m = max_lac.entry(*ledger).or_insert(0);
                *m = (*m).max(*lac);
            }
        }
    }
    for (&l, &want) in &max_lac {
        let got = storage
            .explicit_lac(l)
            .ok()
            .flatten()
            .map(|b| i64::from_be_bytes(b[8..16].try_into().unwrap()));
        if got.is_none_or(|g| g < want) {
            bad.push(format!(
                "op {n}: ledger {l} explicit LAC {got:?}, acknowledged up to {want}"
            ));
        }
    }
    storage.shutdown();
    bad
}

/// Runs the workload capturing an image before every disk operation; returns the
/// violations found over all images. Odd seeds run the journal with direct I/O, even
/// seeds buffered; the seed also picks the force-write thread or inline fdatasyncs.
fn crash_everywhere(seed: u64, steps: usize, mode: CrashMode, unsafe_ack: bool) -> Vec<String> {
    crash_everywhere_as(seed, steps, mode, unsafe_ack, Layout::Shared)
}

/// [`crash_everywhere`] on a store laid out as `layout`.
fn crash_everywhere_as(
    seed: u64,
    steps: usize,
    mode: CrashMode,
    unsafe_ack: bool,
    layout: Layout,
) -> Vec<String> {
    crash_everywhere_with(
        seed,
        steps,
        mode,
        unsafe_ack,
        layout,
        NegativeControls::default(),
    )
}

/// [`crash_everywhere_as`] with the engine's `controls` set during the workload.
fn crash_everywhere_with(
    seed: u64,
    steps: usize,
    mode: CrashMode,
    unsafe_ack: bool,
    layout: Layout,
    controls: NegativeControls,
) -> Vec<String> {
    let fs = SimFileSystem::new();
    fs.capture_every_op(mode);
    let direct_io = seed % 2 == 1;
    let mut cfg = config_io(unsafe_ack, Duration::ZERO, direct_io);
    // Seeds 2, 3, 6, 7, 10, 11, 14, 15: the writer fdatasyncs inline; the others
    // through the force-write thread.
    cfg.journal.force_write_thread = (seed / 2) % 2 == 1;
    let run = workload_with(&fs, seed, steps, cfg, 0, layout, controls);
    assert_eq!(fs.direct_writes() > 0, direct_io, "seed {seed}");
    run.storage.shutdown();
    if layout != Layout::Shared {
        // The workload must have rotated logs every way a log per ledger does.
        let st = run.store.entry_log_stats();
        let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            n(&st.removed_by_max_size) > 0 && n(&st.removed_by_write_close) > 0,
            "seed {seed}: evictions {}, write-close rotations {}",
            n(&st.removed_by_max_size),
            n(&st.removed_by_write_close)
        );
    }
    let captures = fs.take_captures();
    let acks = run.acks.lock();
    assert!(
        acks.iter().filter(|a| a.result.is_ok()).count() > steps / 2,
        "the workload acknowledged too little to test anything"
    );
    assert!(captures.len() > 100, "only {} crash points", captures.len());
    eprintln!(
        "seed {seed}: {} crash points, {} writes acknowledged",
        captures.len(),
        acks.iter().filter(|a| a.result.is_ok()).count()
    );
    let mut bad = Vec::new();
    for (n, image) in &captures {
        bad.extend(check_image_as(image, *n, &acks, layout));
    }
    // And the final disk itself.
    bad.extend(check_image_as(&fs.crash(mode), fs.ops(), &acks, layout));
    bad
}

/// Fails with the first violations of `seed`, if any.
fn assert_clean(seed: u64, bad: &[String]) {
    assert!(
        bad.is_empty(),
        "seed {seed}: {} violations: {:#?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
}

#[test]
fn every_acknowledged_write_survives_a_crash_at_every_step() {
    for seed in 1..=6 {
        let bad = crash_everywhere(seed, 300, CrashMode::Clean, false);
        assert_clean(seed, &bad);
    }
}

#[test]
fn every_acknowledged_write_survives_torn_writes() {
    for seed in 10..=15 {
        let bad = crash_everywhere(seed, 300, CrashMode::Torn { seed }, false);
        assert_clean(seed, &bad);
    }
}

#[test]
fn the_checker_catches_acknowledging_before_the_fdatasync() {
    let bad = crash_everywhere(1, 150, CrashMode::Clean, true);
    assert!(
        !bad.is_empty(),
        "acknowledging before fdatasync must lose acknowledged writes at some crash point"
    );
}

#[test]
fn the_checker_catches_a_force_that_does_not_wait_for_the_flush() {
    // Deferred-sync recovery adds are durable only through a ledger-store flush: a
    // ForceLedger that answers after the journal alone acknowledges them too early.
    let broken = NegativeControls {
        deferred_force_skips_flush: true,
        ..NegativeControls::default()
    };
    assert!(
        seeds_losing_an_acknowledged_entry(broken) > 0,
        "a force that skips the flush must lose a forced copy"
    );
}

/// Of seeds 1-4 with `broken`, how many lose an acknowledged entry at some crash point.
fn seeds_losing_an_acknowledged_entry(broken: NegativeControls) -> usize {
    (1..=4)
        .map(|seed| {
            crash_everywhere_with(seed, 300, CrashMode::Clean, false, Layout::Shared, broken)
        })
        .filter(|bad| bad.iter().any(|b| b.contains("acknowledged entry")))
        .count()
}

#[test]
fn the_checker_catches_journal_marks_moved_past_a_staged_index() {
    // A checkpoint for room may only stage the index: the journal must keep its records
    // until a later checkpoint commits them.
    let broken = NegativeControls {
        marks_past_a_staged_index: true,
        ..NegativeControls::default()
    };
    assert!(
        seeds_losing_an_acknowledged_entry(broken) > 0,
        "marks moved past a staged index must lose an entry"
    );
}

#[test]
fn periodic_checkpoints_during_the_workload_keep_everything() {
    let fs = SimFileSystem::new();
    fs.capture_every_op(CrashMode::Torn { seed: 99 });
    let run = workload(&fs, 5, 150, config(false, Duration::from_millis(1)));
    run.storage.shutdown();
    let captures = fs.take_captures();
    let acks = run.acks.lock();
    let mut bad = Vec::new();
    for (n, image) in &captures {
        bad.extend(check_image(image, *n, &acks));
    }
    assert!(bad.is_empty(), "{:#?}", &bad[..bad.len().min(10)]);
}

#[test]
fn after_a_failed_fsync_nothing_more_is_acknowledged() {
    // The fewest operations of a few runs (they vary by 15% or more on a loaded machine:
    // the faults below once landed past a shorter run's end and never hit).
    let total = (0..5)
        .map(|_| workload_ops(3, 150))
        .min()
        .expect("five runs");
    // Aimed inside the workload, past the open (creating the index takes syncs too).
    let opened = {
        let fs = SimFileSystem::new();
        open(&fs, config(false, Duration::ZERO)).unwrap().shutdown();
        fs.ops()
    };
    let work = total - opened;
    for after in [opened + work / 10, opened + work / 3, opened + work / 2] {
        let fs = SimFileSystem::new();
        fs.capture_every_op(CrashMode::Torn { seed: after });
        fs.inject(Fault::SyncEio { after_ops: after });
        let mut run = workload(&fs, 3, 150, config(false, Duration::ZERO));
        let acks_len = run.acks.lock().len();
        let failed_at = {
            let acks = run.acks.lock();
            acks.iter()
                .position(|a| a.result.is_err())
                .unwrap_or_else(|| panic!("fault after {after} ops never hit ({acks_len} acks)"))
        };
        assert!(run.storage.is_read_only());
        let reason = run.storage.read_only_reason().unwrap();
        assert!(
            reason.contains("fdatasync") || reason.contains("fsync"),
            "{reason}"
        );
        // Every write submitted after the failure was seen fails.
        let acks_before = run.acks.lock().len();
        let cb = run.callback(Op::Fence { ledger: 0 });
        run.storage.fence(0, &key(0), cb);
        run.wait_all();
        let acks = run.acks.lock();
        assert!(
            acks[acks_before..].iter().all(|a| a.result.is_err()),
            "a write after the failed fsync was acknowledged"
        );
        // Each request got exactly one answer.
        assert!(acks.len() > failed_at);
        drop(acks);
        run.storage.shutdown();
        let acks = run.acks.lock();
        for (n, image) in fs.take_captures() {
            let bad = check_image(&image, n, &acks);
            assert!(bad.is_empty(), "after {after}: {bad:#?}");
        }
    }
}

/// Once read-only, the engine skips its periodic checkpoints; its checkpoint thread must
/// still sleep a whole interval between them (it once woke without pause).
#[test]
fn a_read_only_engine_does_not_spin_its_checkpoint_thread() {
    let total = workload_ops(3, 150);
    let fs = SimFileSystem::new();
    fs.inject(Fault::SyncEio {
        after_ops: total / 3,
    });
    let run = workload(&fs, 3, 150, config(false, Duration::from_millis(20)));
    assert!(run.storage.is_read_only());
    let before = run.storage.checkpoint_thread_wakeups();
    std::thread::sleep(Duration::from_millis(500));
    let woke = run.storage.checkpoint_thread_wakeups() - before;
    // About 25 (one per 20 ms interval); a busy loop makes millions.
    assert!(
        woke <= 200,
        "the checkpoint thread woke {woke} times in 500 ms"
    );
    run.storage.shutdown();
}

#[test]
fn a_full_disk_is_an_error_naming_the_directory_and_loses_nothing() {
    let total = workload_ops(4, 150);
    let fs = SimFileSystem::new();
    fs.inject(Fault::WriteEnospc {
        after_ops: total / 2,
    });
    let run = workload(&fs, 4, 150, config(false, Duration::ZERO));
    let acks = run.acks.lock();
    let err = acks
        .iter()
        .find_map(|a| a.result.as_ref().err())
        .expect("the disk never filled");
    // The first failure is the journal's write, or the ledger store's flush in a
    // checkpoint (which makes the storage read-only); either way it names the directory.
    assert!(
        ["/j0/current", "/j1/current", "/data"]
            .iter()
            .any(|d| err.contains(&format!("no space left in {d}"))),
        "{err}"
    );
    assert!(run.storage.is_read_only());
    drop(acks);
    run.storage.shutdown();
    fs.clear_faults();
    let acks = run.acks.lock();
    let bad = check_image(&fs.crash(CrashMode::Clean), fs.ops(), &acks);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Ends a round: shuts `run` down, picks the crash image of a seeded disk operation in
/// the second half of the captures (so each round leaves something behind), and adds to
/// `required` what was acknowledged before it. Returns the operation and the image.
fn crash_in_second_half(
    run: &Run,
    fs: &SimFileSystem,
    round: u64,
    required: &mut Vec<Ack>,
) -> (u64, SimFileSystem) {
    run.storage.shutdown();
    let mut captures = fs.take_captures();
    assert!(captures.len() > 20);
    let half = captures.len() / 2;
    let pick = half + SystemRng::with_seed(round).below((captures.len() - half) as u64) as usize;
    let (n, image) = captures.swap_remove(pick);
    let acks = std::mem::take(&mut *run.acks.lock());
    required.extend(
        acks.into_iter()
            .filter(|a| a.result.is_ok() && a.ops_at <= n),
    );
    (n, image)
}

#[test]
fn repeated_torn_crashes_and_restarts_keep_every_acknowledged_write() {
    // Each round restarts from a torn crash image taken at a seeded point of the
    // previous round, writes to new ledgers, and crashes again. What was required
    // after one crash stays required after every later one.
    let mut fs = SimFileSystem::new();
    let mut required: Vec<Ack> = Vec::new();
    for round in 0..4u64 {
        fs.capture_every_op(CrashMode::Torn { seed: 1000 + round });
        let run = workload_on(
            &fs,
            20 + round,
            120,
            config(false, Duration::ZERO),
            round as i64 * 10,
        );
        let (n, image) = crash_in_second_half(&run, &fs, round, &mut required);
        // Check everything required so far against the new image (ops_at is not
        // comparable across rounds, so use a bound that admits them all).
        let all: Vec<Ack> = required
            .iter()
            .map(|a| Ack {
                op: a.op.clone(),
                ops_at: 0,
                result: Ok(()),
            })
            .collect();
        let bad = check_image(&image, 0, &all);
        assert!(bad.is_empty(), "round {round} (crash at op {n}): {bad:#?}");
        for a in &mut required {
            a.ops_at = 0;
        }
        fs = image;
    }
    assert!(
        required.len() > 50,
        "only {} writes checked",
        required.len()
    );
}

/// A log per ledger (two open at most for four ledgers, so evictions; write closes,
/// some racing a checkpoint; 2 KiB logs, so size rotations): a crash before any disk
/// operation, clean or torn, loses nothing acknowledged. Covers a crash between a log's
/// rotation (its map and fdatasync) and the index commit that follows it.
#[test]
fn with_a_log_per_ledger_every_acknowledged_write_survives_a_crash_at_every_step() {
    for seed in [1, 2, 3, 12, 13] {
        let mode = if seed > 10 {
            CrashMode::Torn { seed }
        } else {
            CrashMode::Clean
        };
        let layout = Layout::PerLedger(NegativeControls::default());
        let bad = crash_everywhere_as(seed, 300, mode, false, layout);
        assert_clean(seed, &bad);
    }
}

/// The negative control of the test above: rotated logs not fdatasync'd lose
/// acknowledged entries at some crash point, and the checker sees it.
#[test]
fn the_checker_catches_a_rotated_log_per_ledger_left_unsynced() {
    let broken = Layout::PerLedger(NegativeControls {
        skip_rotated_entry_log_sync: true,
        ..NegativeControls::default()
    });
    let bad: usize = [1, 2, 3]
        .into_iter()
        .map(|seed| crash_everywhere_as(seed, 300, CrashMode::Clean, false, broken).len())
        .sum();
    assert!(
        bad > 0,
        "skipping the rotated logs' fdatasync must lose acknowledged entries at some crash point"
    );
}

/// A bookie switched between a shared log and a log per ledger (each round restarts from
/// a torn crash image of the previous one, in the other mode) keeps every acknowledged
/// write of every earlier round, read through logs of both kinds.
#[test]
fn switching_between_shared_and_per_ledger_logs_across_crashes_loses_nothing() {
    let bad = switch_modes(NegativeControls::default());
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The negative control: the same rounds with unsynced rotated per-ledger logs lose
/// something (so the test above would see it).
#[test]
fn switching_modes_with_unsynced_rotated_logs_is_caught() {
    let bad = switch_modes(NegativeControls {
        skip_rotated_entry_log_sync: true,
        ..NegativeControls::default()
    });
    assert!(!bad.is_empty(), "the broken rounds lost nothing");
}

/// Runs the rounds; the violations of the first round that had some (none: all kept).
fn switch_modes(broken: NegativeControls) -> Vec<String> {
    let mut fs = SimFileSystem::new();
    let mut required: Vec<Ack> = Vec::new();
    let layouts = [
        Layout::Shared,
        Layout::PerLedger(broken),
        Layout::Shared,
        Layout::PerLedger(broken),
    ];
    for (round, layout) in layouts.into_iter().enumerate() {
        let round = round as u64;
        fs.capture_every_op(CrashMode::Torn { seed: 2000 + round });
        let run = workload_as(
            &fs,
            40 + round,
            150,
            config(false, Duration::ZERO),
            round as i64 * 10,
            layout,
        );
        let (n, image) = crash_in_second_half(&run, &fs, round, &mut required);
        for a in &mut required {
            a.ops_at = 0;
        }
        // Checked in the mode of the round that follows (the last one: the first mode).
        let next = layouts[(round as usize + 1) % layouts.len()];
        let bad = check_image_as(&image, 0, &required, next);
        if !bad.is_empty() {
            return bad
                .into_iter()
                .map(|b| format!("round {round} (crash at op {n}): {b}"))
                .collect();
        }
        fs = image;
    }
    assert!(
        required.len() > 50,
        "only {} writes checked",
        required.len()
    );
    Vec::new()
}
