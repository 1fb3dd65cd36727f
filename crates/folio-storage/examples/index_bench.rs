//! Compares the two candidate ledger-index stores (fjall, an LSM tree, and redb, a
//! copy-on-write B-tree) on the ledger index's workload: inserts of (ledger, entry) ->
//! location in batches, each batch committed durably (as `LedgerStore::flush` does), then
//! point lookups in random order and one prefix scan per ledger.
//!
//! Run: `cargo run --release -p folio-storage --example index_bench [-- <entries> <batch>]`.
//! Prints one line per store and phase; nothing is asserted (figures go to
//! docs/formats/index.md).

use std::time::{Duration, Instant};

const LEDGERS: u64 = 100;

fn key(ledger: u64, entry: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = b'e';
    k[1..9].copy_from_slice(&ledger.to_be_bytes());
    k[9..17].copy_from_slice(&entry.to_be_bytes());
    k
}

fn value(i: u64) -> [u8; 20] {
    let mut v = [0u8; 20];
    v[0..8].copy_from_slice(&(i / 100_000).to_le_bytes());
    v[8..16].copy_from_slice(&(i * 1000).to_le_bytes());
    v[16..20].copy_from_slice(&1000u32.to_le_bytes());
    v
}

/// The i-th inserted entry: ledgers interleaved, as a bookie receives them.
fn nth(i: u64) -> (u64, u64) {
    (i % LEDGERS, i / LEDGERS)
}

struct Figures {
    insert: Duration,
    lookup: Duration,
    scan: Duration,
    reopen: Duration,
    disk_bytes: u64,
}

fn dir_size(p: &std::path::Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        total += if m.is_dir() {
            dir_size(&e.path())
        } else {
            m.len()
        };
    }
    total
}

fn bench_fjall(dir: &std::path::Path, n: u64, batch: u64, order: &[u64]) -> Figures {
    use fjall::{Database, KeyspaceCreateOptions, PersistMode};
    let t = Instant::now();
    {
        let db = Database::builder(dir).open().unwrap();
        let ks = db
            .keyspace("index", KeyspaceCreateOptions::default)
            .unwrap();
        let mut i = 0;
        while i < n {
            let mut b = db.batch();
            for j in i..(i + batch).min(n) {
                let (l, e) = nth(j);
                b.insert(&ks, key(l, e), value(j));
            }
            b.commit().unwrap();
            db.persist(PersistMode::SyncData).unwrap();
            i += batch;
        }
    }
    let insert = t.elapsed();
    let t = Instant::now();
    let db = Database::builder(dir).open().unwrap();
    let ks = db
        .keyspace("index", KeyspaceCreateOptions::default)
        .unwrap();
    let reopen = t.elapsed();
    let t = Instant::now();
    for &j in order {
        let (l, e) = nth(j);
        let v = ks.get(key(l, e)).unwrap().expect("present");
        assert_eq!(&v[..], &value(j)[..]);
    }
    let lookup = t.elapsed();
    let t = Instant::now();
    let mut count = 0u64;
    for l in 0..LEDGERS {
        for kv in ks.prefix(&key(l, 0)[..9]) {
            kv.into_inner().unwrap();
            count += 1;
        }
    }
    assert_eq!(count, n);
    let scan = t.elapsed();
    drop(ks);
    drop(db);
    Figures {
        insert,
        lookup,
        scan,
        reopen,
        disk_bytes: dir_size(dir),
    }
}

fn bench_redb(dir: &std::path::Path, n: u64, batch: u64, order: &[u64]) -> Figures {
    use redb::{Database, ReadableDatabase, TableDefinition};
    const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("index");
    let path = dir.join("index.redb");
    let t = Instant::now();
    {
        let db = Database::create(&path).unwrap();
        let mut i = 0;
        while i < n {
            let w = db.begin_write().unwrap();
            {
                let mut table = w.open_table(T).unwrap();
                for j in i..(i + batch).min(n) {
                    let (l, e) = nth(j);
                    table.insert(&key(l, e)[..], &value(j)[..]).unwrap();
                }
            }
            w.commit().unwrap();
            i += batch;
        }
    }
    let insert = t.elapsed();
    let t = Instant::now();
    let db = Database::create(&path).unwrap();
    let reopen = t.elapsed();
    let r = db.begin_read().unwrap();
    let table = r.open_table(T).unwrap();
    let t = Instant::now();
    for &j in order {
        let (l, e) = nth(j);
        let v = table.get(&key(l, e)[..]).unwrap().expect("present");
        assert_eq!(v.value(), &value(j)[..]);
    }
    let lookup_one_txn = t.elapsed();
    // What LedgerStore does: a read transaction per lookup.
    let t = Instant::now();
    for &j in order {
        let (l, e) = nth(j);
        let r = db.begin_read().unwrap();
        let table = r.open_table(T).unwrap();
        let v = table.get(&key(l, e)[..]).unwrap().expect("present");
        assert_eq!(v.value(), &value(j)[..]);
    }
    let lookup = t.elapsed();
    println!(
        "redb   lookups in one read transaction: {lookup_one_txn:.2?} ({:.2} us/entry)",
        lookup_one_txn.as_nanos() as f64 / n as f64 / 1000.0
    );
    let t = Instant::now();
    let mut count = 0u64;
    for l in 0..LEDGERS {
        let lo = key(l, 0);
        let hi = key(l, u64::MAX);
        for kv in table.range(&lo[..]..=&hi[..]).unwrap() {
            kv.unwrap();
            count += 1;
        }
    }
    assert_eq!(count, n);
    let scan = t.elapsed();
    drop(table);
    drop(r);
    drop(db);
    Figures {
        insert,
        lookup,
        scan,
        reopen,
        disk_bytes: dir_size(dir),
    }
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("arguments: <entries> <batch>"))
        .collect();
    let n = args.first().copied().unwrap_or(1_000_000);
    let batch = args.get(1).copied().unwrap_or(10_000);
    // A fixed pseudo-random lookup order (xorshift), the same for both stores.
    let mut order: Vec<u64> = (0..n).collect();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..order.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    println!("entries={n} batch={batch} (one durable commit per batch) ledgers={LEDGERS}");
    for (name, f) in [
        (
            "fjall",
            bench_fjall as fn(&std::path::Path, u64, u64, &[u64]) -> Figures,
        ),
        ("redb", bench_redb),
    ] {
        let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or(".".into())).unwrap();
        let r = f(dir.path(), n, batch, &order);
        let per = |d: Duration| d.as_nanos() as f64 / n as f64 / 1000.0;
        println!(
            "{name:6} insert {:8.2?} ({:6.2} us/entry)  lookup {:8.2?} ({:6.2} us/entry)  scan {:8.2?}  reopen {:8.2?}  disk {:.1} MiB",
            r.insert,
            per(r.insert),
            r.lookup,
            per(r.lookup),
            r.scan,
            r.reopen,
            r.disk_bytes as f64 / (1 << 20) as f64
        );
    }
}
