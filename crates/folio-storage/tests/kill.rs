//! A real process killed with SIGKILL in the middle of writing, on real files.
//!
//! The test re-runs its own binary as a child (selected by an environment variable)
//! that writes adds, fences and explicit LACs through `Storage` over the production
//! `LedgerStore`, with frequent checkpoints, and prints each write as its callback
//! reports it durable. The parent kills the child after a number of acknowledgements,
//! restarts the storage from the same directory and checks every acknowledged write.
//! (A process kill keeps the page cache, so this checks replay and the checkpoint
//! protocol on real files; power loss is covered by the crash tests.)

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use folio_env::Env;
use folio_storage::ledger_store::{LedgerStore, LedgerStoreConfig};
use folio_storage::{JournalConfig, Storage, StorageConfig};

const CHILD_ENV: &str = "FOLIO_STORAGE_KILL_CHILD_DIR";
const ROUND_ENV: &str = "FOLIO_STORAGE_KILL_ROUND";

fn open(dir: &Path, flush_interval: Duration) -> Storage {
    let env = Env::real();
    let mut store_cfg = LedgerStoreConfig::new(vec![dir.join("ledgers")], dir.join("index"));
    store_cfg.write_cache_bytes = 256 * 1024;
    let store = Arc::new(LedgerStore::open(&env, store_cfg).unwrap());
    let cfg = StorageConfig {
        journal: JournalConfig {
            prealloc_size: 256 * 1024,
            max_file_size: 512 * 1024,
            ..JournalConfig::with_dirs(vec![dir.join("journal0"), dir.join("journal1")])
        },
        flush_interval,
        checkpoint_write_cache_bytes: 64 * 1024,
    };
    Storage::open(&env, cfg, store).unwrap()
}

fn key(ledger: i64) -> Vec<u8> {
    vec![ledger as u8; 20]
}

fn entry(ledger: i64, e: i64) -> Bytes {
    let mut b = Vec::new();
    for v in [ledger, e, e - 1, 0] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend((0..(e % 13) * 100).map(|i| (i as u8) ^ (e as u8)));
    Bytes::from(b)
}

/// The child: writes until killed, printing "add l e" / "lac l n" / "fence l" per ack.
fn child(dir: &Path, round: i64) -> ! {
    let s = open(dir, Duration::from_millis(5));
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let say = move |line: String| {
        let out = Arc::clone(&out);
        Box::new(move |r: Result<(), folio_storage::StorageError>| {
            let mut o = out.lock().unwrap();
            match r {
                Ok(()) => {
                    let _ = writeln!(o, "{line}");
                    let _ = o.flush();
                }
                Err(e) => {
                    let _ = writeln!(o, "error {line}: {e}");
                    let _ = o.flush();
                    std::process::exit(1);
                }
            }
        })
    };
    let base = round * 100;
    let mut e = 0i64;
    loop {
        for l in base..base + 4 {
            if l == base + 3 && e > 50 {
                continue; // fenced at entry 50
            }
            s.add_entry(
                l,
                e,
                &key(l),
                entry(l, e),
                false,
                say(format!("add {l} {e}")),
            );
            if e % 10 == 9 {
                let mut body = l.to_be_bytes().to_vec();
                body.extend_from_slice(&e.to_be_bytes());
                s.write_lac(l, &key(l), Bytes::from(body), say(format!("lac {l} {e}")));
            }
        }
        if e == 50 {
            s.fence(base + 3, &key(base + 3), say(format!("fence {}", base + 3)));
        }
        e += 1;
        if e % 8 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn acknowledged_writes_survive_sigkill_of_the_process() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let round = std::env::var(ROUND_ENV).unwrap().parse().unwrap();
        child(Path::new(&dir), round);
    }
    // A hang (a child that stops acknowledging, a restart that never finishes) must
    // fail the test, not stall the suite.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(600));
        eprintln!("acknowledged_writes_survive_sigkill_of_the_process: no progress in 600 s");
        std::process::abort();
    });
    let tmp = tempfile::tempdir().unwrap();
    let mut acked: Vec<String> = Vec::new();
    for round in 0..3i64 {
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "acknowledged_writes_survive_sigkill_of_the_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, tmp.path())
            .env(ROUND_ENV, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = c.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let target = 300 + 200 * round as usize;
        let mut n = 0;
        while n < target {
            let line = match lines.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => line,
                Err(e) => {
                    let _ = c.kill();
                    panic!("round {round}: the child stopped acknowledging after {n} writes ({e})");
                }
            };
            if line.starts_with("add ") || line.starts_with("lac ") || line.starts_with("fence ") {
                acked.push(line);
                n += 1;
            } else if line.starts_with("error ") {
                let _ = c.kill();
                panic!("round {round}: the child says: {line}");
            }
        }
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
        // Lines printed between our last read and the kill are acknowledged too.
        reader.join().unwrap();
        for line in lines.try_iter() {
            if line.starts_with("add ") || line.starts_with("lac ") || line.starts_with("fence ") {
                acked.push(line);
            }
        }

        let s = open(tmp.path(), Duration::ZERO);
        eprintln!(
            "round {round}: {} acknowledged so far, replayed {:?}",
            acked.len(),
            s.replay_stats()
        );
        let mut max_lac = std::collections::HashMap::new();
        for line in &acked {
            let f: Vec<&str> = line.split(' ').collect();
            let l: i64 = f[1].parse().unwrap();
            match f[0] {
                "add" => {
                    let e: i64 = f[2].parse().unwrap();
                    assert_eq!(
                        s.read_entry(l, e).unwrap(),
                        Some(entry(l, e)),
                        "round {round}: acknowledged entry {l}/{e}"
                    );
                }
                "lac" => {
                    let v: i64 = f[2].parse().unwrap();
                    let m = max_lac.entry(l).or_insert(v);
                    *m = (*m).max(v);
                }
                _ => assert!(s.is_fenced(l).unwrap(), "round {round}: fence of {l} lost"),
            }
            assert_eq!(
                s.master_key(l).unwrap().unwrap().as_ref(),
                key(l).as_slice()
            );
        }
        for (l, v) in max_lac {
            let body = s.explicit_lac(l).unwrap().expect("explicit LAC lost");
            let got = i64::from_be_bytes(body[8..16].try_into().unwrap());
            assert!(
                got >= v,
                "round {round}: ledger {l} LAC {got} < acknowledged {v}"
            );
        }
        drop(s);
    }
    assert!(acked.len() >= 1200);
}
