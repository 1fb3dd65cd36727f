//! Journal throughput on the real disk: `cargo run --release -p folio-storage --example
//! journal_bench -- [dir] [adds] [entry bytes] [in flight]`.
//!
//! Keeps a fixed number of adds in flight against one journal directory and reports
//! adds/s, MB/s and fdatasync-covered latency percentiles. Not a test: no assertions.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_env::Env;
use folio_storage::JournalConfig;
use folio_storage::journal::{Journal, RecordKind};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("folio-journal-bench"));
    let adds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let size: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let in_flight: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(256);
    let _ = std::fs::remove_dir_all(&dir);
    let env = Env::real();
    let cfg = JournalConfig::with_dirs(vec![dir.clone()]);
    let (journal, _) = Journal::open(&env, &cfg, &mut |_| Ok(())).expect("open journal");
    let payload = Bytes::from(vec![0xabu8; size]);
    let (tx, rx) = mpsc::channel::<Duration>();
    let start = Instant::now();
    let mut latencies = Vec::with_capacity(adds);
    let mut sent = 0;
    while latencies.len() < adds {
        while sent < adds && sent - latencies.len() < in_flight {
            let tx = tx.clone();
            let t0 = Instant::now();
            journal.append(
                RecordKind::Add,
                1,
                sent as i64,
                payload.clone(),
                Some(Box::new(move |r| {
                    r.expect("journal write failed");
                    let _ = tx.send(t0.elapsed());
                })),
            );
            sent += 1;
        }
        latencies.push(rx.recv().expect("callback"));
    }
    let secs = start.elapsed().as_secs_f64();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "{adds} adds of {size} B, {in_flight} in flight: {:.0} adds/s, {:.1} MB/s, latency p50 {:?} p99 {:?} max {:?}",
        adds as f64 / secs,
        (adds * size) as f64 / secs / 1e6,
        pct(0.5),
        pct(0.99),
        latencies.last().unwrap()
    );
    journal.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
