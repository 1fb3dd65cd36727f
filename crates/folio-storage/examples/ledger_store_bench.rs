//! End-to-end figures for `LedgerStore` on the real disk: puts of N entries spread over
//! several ledgers with a flush every `batch` entries (as checkpoints do), then reads of
//! every entry in random order (from the entry logs through the index, the cache being
//! empty), then a reopen.
//!
//! Run: `cargo run --release -p folio-storage --example ledger_store_bench
//! [-- <entries> <entry bytes> <batch>]` (defaults 200000, 1024, 10000). Set `BENCH_DIR` to
//! choose the disk. Prints figures; asserts only that every entry reads back intact.

use std::time::Instant;

use bytes::Bytes;
use folio_env::Env;
use folio_storage::ledger_store::{LedgerStore, LedgerStoreConfig};

const LEDGERS: u64 = 100;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .expect("arguments: <entries> <entry bytes> <batch>")
        })
        .collect();
    let n = args.first().copied().unwrap_or(200_000);
    let size = args.get(1).copied().unwrap_or(1024) as usize;
    let batch = args.get(2).copied().unwrap_or(10_000);
    let tmp = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or(".".into())).unwrap();
    let config = LedgerStoreConfig::new(vec![tmp.path().join("ledgers")], tmp.path().join("index"));
    let payload = |i: u64| {
        let mut v = vec![(i % 251) as u8; size];
        v[..8].copy_from_slice(&i.to_le_bytes());
        Bytes::from(v)
    };
    let nth = |i: u64| ((i % LEDGERS) as i64, (i / LEDGERS) as i64);
    let env = Env::real();
    let store = LedgerStore::open(&env, config.clone()).unwrap();
    let t = Instant::now();
    let mut flush_time = std::time::Duration::ZERO;
    for i in 0..n {
        let (l, e) = nth(i);
        store.put_entry(l, e, payload(i)).unwrap();
        if (i + 1) % batch == 0 {
            let f = Instant::now();
            store.flush().unwrap();
            flush_time += f.elapsed();
        }
    }
    store.flush().unwrap();
    let put = t.elapsed();
    let mut order: Vec<u64> = (0..n).collect();
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..order.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let t = Instant::now();
    for &i in &order {
        let (l, e) = nth(i);
        assert_eq!(store.get_entry(l, e).unwrap(), Some(payload(i)));
    }
    let read = t.elapsed();
    store.close().unwrap();
    drop(store);
    let t = Instant::now();
    let store = LedgerStore::open(&env, config).unwrap();
    let reopen = t.elapsed();
    assert_eq!(store.ledgers().unwrap().len() as u64, LEDGERS.min(n));
    let mb = (n * size as u64) as f64 / (1 << 20) as f64;
    println!(
        "entries={n} size={size} B flush every {batch}: put+flush {put:.2?} ({:.0} entries/s, {:.1} MiB/s; {flush_time:.2?} in flush), \
         random reads {read:.2?} ({:.1} us/entry), reopen {reopen:.2?}",
        n as f64 / put.as_secs_f64(),
        mb / put.as_secs_f64(),
        read.as_nanos() as f64 / n as f64 / 1000.0,
    );
}
