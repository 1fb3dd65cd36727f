//! Rounds of SIGKILL at a random moment against a real writer process, on one directory.
//!
//! The test binary re-runs itself as the writer (selected by an environment variable):
//! the writer opens `Storage` over the production `LedgerStore` in the shared
//! directory, records master keys, adds entries to several ledgers with many adds in
//! flight, writes explicit LACs and fences ledgers, and prints one line per write as
//! its completion callback reports it durable. The parent reads those lines, kills the
//! writer with SIGKILL after a seeded random number of acknowledgements plus a seeded
//! random delay, reopens the storage on the same directory and checks that every write
//! ever acknowledged, in this round or an earlier one, is still there: entries byte for
//! byte, master keys (a wrong key is refused), fences (an add is refused), LACs.
//! Checkpoints, journal file rolls and deletions run often, so kills land in all of them.
//!
//! A SIGKILL keeps the page cache, so this checks replay, marks and checkpoints on real
//! files in a real process; power loss (lost unsynced writes) is the crash tests' job.
//! `FOLIO_SIGKILL_SEED` and `FOLIO_SIGKILL_ROUNDS` repeat or extend a run.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_env::Env;
use folio_storage::ledger_store::{LedgerStore, LedgerStoreConfig};
use folio_storage::{JournalConfig, Storage, StorageConfig, StorageError};

const TEST_NAME: &str = "acknowledged_writes_survive_rounds_of_sigkill";
const WRITER_DIR_ENV: &str = "FOLIO_SIGKILL_WRITER_DIR";
const WRITER_SEED_ENV: &str = "FOLIO_SIGKILL_WRITER_SEED";
const WRITER_ROUND_ENV: &str = "FOLIO_SIGKILL_WRITER_ROUND";
/// Prefixes of the writer's lines (the test harness prints its own lines too).
const ACK: &str = "folio-ack ";
const BUG: &str = "folio-bug ";
const DEFAULT_SEED: u64 = 0x5EED_F011_0001;
const DEFAULT_ROUNDS: u64 = 24;
/// Ledgers every round's writer continues (appending after what is stored).
const LONG_LIVED: [i64; 2] = [1_000_001, 1_000_002];
/// A writer never kept alive longer than this (if the parent died, it must not linger).
const WRITER_LIFETIME: Duration = Duration::from_secs(60);

/// splitmix64: small, seedable, good enough to pick kill points and sizes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn round_seed(seed: u64, round: u64) -> u64 {
    let mut r = Rng(seed ^ round.wrapping_mul(0xA24B_AED4_963E_E407));
    r.next()
}

fn master_key(ledger: i64) -> Vec<u8> {
    let mut r = Rng(ledger as u64);
    (0..20).map(|_| r.next() as u8).collect()
}

/// The bytes of entry `e` of `ledger`, a function of the pair only (so a re-write
/// after a restart is identical and the parent can check without being told them).
fn entry_bytes(ledger: i64, e: i64) -> Bytes {
    let mut r = Rng((ledger as u64) << 20 ^ e as u64);
    let len = 32 + r.below(3000) as usize;
    let mut b = Vec::with_capacity(len);
    for v in [ledger, e, e - 1, len as i64] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    while b.len() < len {
        b.push(r.next() as u8);
    }
    Bytes::from(b)
}

fn lac_body(ledger: i64, lac: i64) -> Bytes {
    let mut b = ledger.to_be_bytes().to_vec();
    b.extend_from_slice(&lac.to_be_bytes());
    Bytes::from(b)
}

/// Write cache size: small, so a restart often replays more than the cache holds (the
/// replay must flush the store as it goes; with no checkpoint thread yet it once
/// blocked forever). Checkpoints run every 128 KiB of cache and every few ms.
fn write_cache_bytes() -> u64 {
    env_u64("FOLIO_SIGKILL_WRITE_CACHE").unwrap_or(512 * 1024)
}

fn open(dir: &Path, flush_interval: Duration) -> Storage {
    let env = Env::real();
    let mut store_cfg = LedgerStoreConfig::new(vec![dir.join("ledgers")], dir.join("index"));
    store_cfg.write_cache_bytes = write_cache_bytes();
    store_cfg.entry_log_size_limit = 1024 * 1024;
    let store = Arc::new(LedgerStore::open(&env, store_cfg).expect("open ledger store"));
    let cfg = StorageConfig {
        journal: JournalConfig {
            prealloc_size: 128 * 1024,
            max_file_size: 256 * 1024,
            ..JournalConfig::with_dirs(vec![dir.join("journal0"), dir.join("journal1")])
        },
        flush_interval,
        checkpoint_write_cache_bytes: 128 * 1024,
    };
    Storage::open(&env, cfg, store).expect("open storage")
}

/// Bounds the writer's outstanding writes.
struct InFlight {
    n: Mutex<usize>,
    cv: Condvar,
}

impl InFlight {
    fn acquire(&self, max: usize) {
        let mut n = self.n.lock().unwrap();
        while *n >= max {
            n = self.cv.wait(n).unwrap();
        }
        *n += 1;
    }

    fn release(&self) {
        *self.n.lock().unwrap() -= 1;
        self.cv.notify_one();
    }
}

/// The writer process: writes until killed (or until its lifetime ends), printing
/// "key l", "add l e", "lac l v", "fence l" per durable write (after `ACK`), and `BUG` if the
/// storage accepts an add to a ledger it fenced.
fn writer(dir: &Path, seed: u64, round: u64) -> ! {
    let started = Instant::now();
    let mut rng = Rng(seed);
    let flush_ms = 2 + rng.below(40);
    let s = open(dir, Duration::from_millis(flush_ms));
    let in_flight = Arc::new(InFlight {
        n: Mutex::new(0),
        cv: Condvar::new(),
    });
    let max_in_flight = 1 + rng.below(64) as usize;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let ack = |line: String| {
        let out = Arc::clone(&out);
        let in_flight = Arc::clone(&in_flight);
        in_flight.acquire(max_in_flight);
        Box::new(move |r: Result<(), StorageError>| {
            match r {
                Ok(()) => {
                    let mut o = out.lock().unwrap();
                    // One write per line (well under PIPE_BUF, so atomic on the pipe).
                    if o.write_all(format!("{ACK}{line}\n").as_bytes()).is_err()
                        || o.flush().is_err()
                    {
                        std::process::exit(3); // the parent is gone
                    }
                }
                Err(e) => {
                    eprintln!("writer: {line} failed: {e}");
                    std::process::exit(4);
                }
            }
            in_flight.release();
        }) as folio_storage::WriteCallback
    };

    // This round's ledgers, each with its master key made durable before any add.
    let base = (round as i64 + 1) * 100;
    let fresh: Vec<i64> = (base..base + 3).collect();
    for &l in &fresh {
        s.set_master_key(l, &master_key(l), ack(format!("key {l}")));
    }
    // Continue the long-lived ledgers after whatever they hold.
    let mut next: BTreeMap<i64, i64> = BTreeMap::new();
    for &l in LONG_LIVED.iter().chain(&fresh) {
        let last = s.entry_ids(l).unwrap().last().copied().unwrap_or(-1);
        next.insert(l, last + 1);
    }
    let fence_after = 20 + rng.below(400);
    let fenced = fresh[rng.below(fresh.len() as u64) as usize];
    let mut ops = 0u64;
    loop {
        if started.elapsed() > WRITER_LIFETIME {
            std::process::exit(5);
        }
        let ledgers: Vec<i64> = next.keys().copied().collect();
        let l = ledgers[rng.below(ledgers.len() as u64) as usize];
        let e = next[&l];
        s.add_entry(
            l,
            e,
            &master_key(l),
            entry_bytes(l, e),
            false,
            ack(format!("add {l} {e}")),
        );
        next.insert(l, e + 1);
        if rng.below(16) == 0 {
            s.write_lac(
                l,
                &master_key(l),
                lac_body(l, e),
                ack(format!("lac {l} {e}")),
            );
        }
        ops += 1;
        if ops == fence_after {
            s.fence(fenced, &master_key(fenced), ack(format!("fence {fenced}")));
            next.remove(&fenced);
            // Once fenced, a plain add must be refused, before and after a restart.
            let e = 1_000_000;
            let out = Arc::clone(&out);
            s.add_entry(
                fenced,
                e,
                &master_key(fenced),
                entry_bytes(fenced, e),
                false,
                Box::new(move |r| {
                    if !matches!(r, Err(StorageError::Fenced { .. })) {
                        let _ = writeln!(
                            out.lock().unwrap(),
                            "{BUG}add to fenced ledger {fenced} got {r:?}"
                        );
                    }
                }),
            );
        }
        if ops.is_multiple_of(32) {
            std::thread::sleep(Duration::from_micros(rng.below(2000)));
        }
    }
}

/// Kills the writer if the parent panics before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Everything acknowledged so far, across rounds.
#[derive(Default)]
struct Acked {
    keys: BTreeSet<i64>,
    adds: BTreeSet<(i64, i64)>,
    lacs: BTreeMap<i64, i64>,
    fences: BTreeSet<i64>,
}

impl Acked {
    /// Records one line of the writer: Ok(true) for an acknowledgement, Err for a
    /// line that reports a bug.
    fn take(&mut self, line: &str) -> Result<bool, String> {
        if line.starts_with(BUG) {
            return Err(format!("writer reported: {line}"));
        }
        let Some(line) = line.strip_prefix(ACK) else {
            return Ok(false); // the test harness's own output
        };
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> Result<i64, String> {
            f.get(i)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("unreadable writer line {line:?}"))
        };
        match f[0] {
            "key" => {
                self.keys.insert(num(1)?);
            }
            "add" => {
                self.adds.insert((num(1)?, num(2)?));
            }
            "lac" => {
                let m = self.lacs.entry(num(1)?).or_insert(i64::MIN);
                *m = (*m).max(num(2)?);
            }
            "fence" => {
                self.fences.insert(num(1)?);
            }
            _ => return Err(format!("unknown writer line {line:?}")),
        }
        Ok(true)
    }

    fn len(&self) -> usize {
        self.keys.len() + self.adds.len() + self.lacs.len() + self.fences.len()
    }

    /// Checks every acknowledged write against the restarted storage.
    fn check(&self, s: &Storage, what: &str) {
        for &(l, e) in &self.adds {
            assert_eq!(
                s.read_entry(l, e).unwrap(),
                Some(entry_bytes(l, e)),
                "{what}: acknowledged entry {l}/{e}"
            );
        }
        let ledgers: BTreeSet<i64> = self.adds.iter().map(|&(l, _)| l).collect();
        for &l in ledgers.iter().chain(&self.keys) {
            assert_eq!(
                s.master_key(l).unwrap().as_deref(),
                Some(master_key(l).as_slice()),
                "{what}: master key of ledger {l}"
            );
            let (tx, rx) = std::sync::mpsc::channel();
            s.add_entry(
                l,
                2_000_000,
                &[0u8; 20],
                entry_bytes(l, 2_000_000),
                false,
                Box::new(move |r| tx.send(r).unwrap()),
            );
            let r = rx.recv_timeout(Duration::from_secs(60)).unwrap();
            assert!(
                matches!(r, Err(StorageError::Unauthorized { .. })),
                "{what}: add with a wrong key to ledger {l} gave {r:?}"
            );
        }
        for &l in &self.fences {
            assert!(s.is_fenced(l).unwrap(), "{what}: fence of ledger {l} lost");
            let (tx, rx) = std::sync::mpsc::channel();
            s.add_entry(
                l,
                3_000_000,
                &master_key(l),
                entry_bytes(l, 3_000_000),
                false,
                Box::new(move |r| tx.send(r).unwrap()),
            );
            let r = rx.recv_timeout(Duration::from_secs(60)).unwrap();
            assert!(
                matches!(r, Err(StorageError::Fenced { .. })),
                "{what}: add to fenced ledger {l} gave {r:?}"
            );
        }
        for (&l, &v) in &self.lacs {
            let body = s
                .explicit_lac(l)
                .unwrap()
                .unwrap_or_else(|| panic!("{what}: explicit LAC of ledger {l} lost"));
            let got = i64::from_be_bytes(body[8..16].try_into().unwrap());
            assert!(got >= v, "{what}: ledger {l} LAC {got} < acknowledged {v}");
        }
    }
}

/// How long a restart may take before the test calls it stuck (a slow, loaded machine
/// opens in well under a second; this only turns a hang into a failure).
const OPEN_TIMEOUT: Duration = Duration::from_secs(120);

/// Opens the storage on another thread, failing if it does not open in `timeout`.
fn open_within(dir: &Path, timeout: Duration, what: &str) -> Storage {
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(open(&d, Duration::ZERO));
    });
    rx.recv_timeout(timeout).unwrap_or_else(|e| {
        panic!("{what}: the storage did not reopen within {timeout:?} ({e}): replay stuck?")
    })
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

fn spawn_writer(dir: &Path, seed: u64, round: u64, stderr: &Path) -> KillOnDrop {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(WRITER_DIR_ENV, dir)
        .env(WRITER_SEED_ENV, seed.to_string())
        .env(WRITER_ROUND_ENV, round.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("spawn the writer");
    KillOnDrop(child)
}

#[test]
fn acknowledged_writes_survive_rounds_of_sigkill() {
    if let Ok(dir) = std::env::var(WRITER_DIR_ENV) {
        let seed = env_u64(WRITER_SEED_ENV).unwrap();
        let round = env_u64(WRITER_ROUND_ENV).unwrap();
        writer(&PathBuf::from(dir), seed, round);
    }
    let seed = env_u64("FOLIO_SIGKILL_SEED").unwrap_or(DEFAULT_SEED);
    let rounds = env_u64("FOLIO_SIGKILL_ROUNDS").unwrap_or(DEFAULT_ROUNDS);
    eprintln!(
        "sigkill: seed {seed:#x}, {rounds} rounds (FOLIO_SIGKILL_SEED / FOLIO_SIGKILL_ROUNDS)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bookie");
    let started = Instant::now();
    let mut acked = Acked::default();
    for round in 0..rounds {
        let rs = round_seed(seed, round);
        let mut rng = Rng(rs ^ 0xD1CE);
        let kill_after = 1 + rng.below(600) as usize;
        let extra_delay = Duration::from_micros(rng.below(5000));
        let what = format!("seed {seed:#x} round {round}");
        let stderr = tmp.path().join(format!("writer-{round}.stderr"));
        let mut child = spawn_writer(&dir, rs, round, &stderr);
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        let writer_log = || std::fs::read_to_string(&stderr).unwrap_or_default();
        // Only whole lines count: a line is written once its write is durable.
        // Returns whether a line was an acknowledgement; None at the end of the output.
        let mut read_line = |acked: &mut Acked| -> Option<bool> {
            let mut line = String::new();
            match out.read_line(&mut line) {
                Ok(n) if n > 0 && line.ends_with('\n') => match acked.take(line.trim_end()) {
                    Ok(is_ack) => Some(is_ack),
                    Err(e) => panic!("{what}: {e}"),
                },
                _ => None,
            }
        };
        let before = acked.len();
        let mut seen = 0;
        while seen < kill_after {
            match read_line(&mut acked) {
                Some(is_ack) => seen += usize::from(is_ack),
                None => panic!(
                    "{what}: the writer stopped before being killed; its stderr:\n{}",
                    writer_log()
                ),
            }
        }
        std::thread::sleep(extra_delay);
        child.0.kill().unwrap(); // SIGKILL
        child.0.wait().unwrap();
        // What it printed between our last read and the kill was acknowledged too.
        while read_line(&mut acked).is_some() {}
        let this_round = acked.len() - before;

        let s = open_within(&dir, OPEN_TIMEOUT, &what);
        eprintln!(
            "{what}: killed after {kill_after} (+{extra_delay:?}) acks, {this_round} new records; \
             replayed {:?}; checking {} adds, {} fences",
            s.replay_stats(),
            acked.adds.len(),
            acked.fences.len()
        );
        acked.check(&s, &what);
        // Alternate a clean shutdown (final checkpoint) with a plain drop.
        if round.is_multiple_of(2) {
            s.shutdown();
        }
        drop(s);
    }
    // The rounds did real work: fences and adds on every kind of ledger.
    assert!(
        acked.adds.len() as u64 >= rounds * 10,
        "{} adds",
        acked.adds.len()
    );
    assert!(!acked.fences.is_empty());
    assert!(
        LONG_LIVED
            .iter()
            .all(|&l| acked.adds.iter().any(|&(al, _)| al == l))
    );
    eprintln!(
        "sigkill: {rounds} rounds, {} acknowledged writes checked, {:.1} s",
        acked.len(),
        started.elapsed().as_secs_f64()
    );
}
