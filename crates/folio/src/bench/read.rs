//! `folio bench read`: reads ledgers back through folio-client, like BookKeeper's
//! `benchmark reads`.
//!
//! Either writes `--ledgers` ledgers of `--entries` entries in total first (the same way
//! `folio bench write` does, and reported as the `write_phase`), or reads the existing
//! ledgers named by `--ledger ID` (opened without recovery, so a ledger still being
//! written is read up to its LAC and its writer is not fenced). Then keeps `--in-flight`
//! read requests outstanding in total (split evenly over the ledgers), each for `--batch`
//! consecutive entries, until every entry up to each ledger's last entry is read. A read's
//! latency runs from the request to its verified entries (digest checked on every entry).
//! Ledgers this command wrote are deleted afterwards unless `--keep` is given; ledgers
//! named with `--ledger` are never deleted.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use folio_client::{Client, CreateOptions, DigestType, OpenOptions, ReadHandle};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::{Map, Value, json};

use super::report::{Latencies, PhaseCpu, Summary};
use super::write::{
    LedgerShape, Limit, PASSWORD, append_loop, at_least_one, payload, run_on_cluster,
};

#[derive(Args, Debug, Clone)]
pub struct ReadBenchArgs {
    /// Ensemble, quorums and entry size.
    #[command(flatten)]
    pub shape: LedgerShape,
    /// Entries written in total over the ledgers, then read back.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub entries: u64,
    /// Ledgers written (and then read) in parallel.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub ledgers: u64,
    /// Read this existing ledger instead of writing new ones (repeatable).
    #[arg(long = "ledger", value_name = "ID", conflicts_with_all = ["entries", "ledgers"])]
    pub ledger_ids: Vec<i64>,
    /// Password of the ledgers named with --ledger.
    #[arg(long, default_value = "folio-bench")]
    pub password: String,
    /// Read requests kept outstanding in total, split evenly over the ledgers (the
    /// write phase uses the same number of appends in flight).
    #[arg(long, value_name = "K", default_value_t = 100)]
    pub in_flight: u64,
    /// Consecutive entries per read request.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub batch: u64,
    /// Keep the ledgers written by the benchmark instead of deleting them.
    #[arg(long)]
    pub keep: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ReadBenchArgs, metadata: Option<String>) -> anyhow::Result<()> {
    validate(&a)?;
    run_on_cluster("read", metadata, |uri| async move { bench(&a, &uri).await })
}

fn validate(a: &ReadBenchArgs) -> anyhow::Result<()> {
    a.shape.validate()?;
    let ledgers = if a.ledger_ids.is_empty() {
        a.ledgers
    } else {
        a.ledger_ids.len() as u64
    };
    at_least_one(&[
        ("--entries", a.entries),
        ("--in-flight", a.in_flight),
        ("--ledgers", a.ledgers),
        ("--batch", a.batch),
    ])?;
    if a.in_flight < ledgers {
        bail!(
            "--in-flight {} is less than the {ledgers} ledger(s) read: every ledger needs one read in flight",
            a.in_flight
        );
    }
    if let Some(bad) = a.ledger_ids.iter().find(|&&id| id < 0) {
        bail!("--ledger {bad}: a ledger id is not negative");
    }
    Ok(())
}

/// The share of `total` that part `i` of `n` gets (the first `total % n` get one more).
fn share(total: u64, n: u64, i: u64) -> u64 {
    total / n + u64::from(i < total % n)
}

async fn bench(a: &ReadBenchArgs, uri: &str) -> anyhow::Result<String> {
    let store =
        crate::metadata_connect::connect(uri, crate::metadata_connect::Missing::Refuse).await?;
    let client = Client::connect(store, crate::client_tls::client_config()?)
        .await
        .context("cannot start the client")?;
    let result = phases(a, &client).await;
    client.close();
    result
}

async fn phases(a: &ReadBenchArgs, client: &Client) -> anyhow::Result<String> {
    let (ids, password, written) = if a.ledger_ids.is_empty() {
        let (ids, summary) = write_phase(a, client).await?;
        (ids, PASSWORD.to_vec(), Some(summary))
    } else {
        (a.ledger_ids.clone(), a.password.clone().into_bytes(), None)
    };
    let read = read_phase(a, client, &ids, &password).await;
    if written.is_some() && !a.keep {
        for &id in &ids {
            let _ = client.delete_ledger(id).await;
        }
    }
    let (summary, per_ledger) = read?;
    let n = ids.len() as u64;
    if a.json {
        let mut extra = Map::new();
        extra.insert("bench".into(), json!("read"));
        extra.insert("ledgers".into(), json!(n));
        extra.insert("ledger_ids".into(), json!(ids));
        extra.insert("entries_per_ledger".into(), json!(per_ledger));
        extra.insert("in_flight".into(), json!(a.in_flight));
        extra.insert("batch".into(), json!(a.batch));
        let entry_size = match &written {
            Some(_) => a.shape.entry_size as u64,
            None => summary.bytes.checked_div(summary.entries).unwrap_or(0),
        };
        extra.insert("entry_size".into(), json!(entry_size));
        if let Some(w) = &written {
            let mut wx = Map::new();
            wx.insert("ensemble".into(), json!(a.shape.ensemble));
            wx.insert("write_quorum".into(), json!(a.shape.write_quorum));
            wx.insert("ack_quorum".into(), json!(a.shape.ack_quorum));
            wx.insert("in_flight".into(), json!(a.in_flight));
            extra.insert("ensemble".into(), json!(a.shape.ensemble));
            extra.insert("write_quorum".into(), json!(a.shape.write_quorum));
            extra.insert("ack_quorum".into(), json!(a.shape.ack_quorum));
            extra.insert("write_phase".into(), w.to_json(wx));
        } else {
            extra.insert("write_phase".into(), Value::Null);
        }
        return Ok(summary.to_json(extra).to_string());
    }
    let mut out = String::new();
    if let Some(w) = &written {
        out.push_str(&format!(
            "write phase: E{} Qw{} Qa{}, {} B entries, {} in flight over {n} ledger(s)\n{}\n",
            a.shape.ensemble,
            a.shape.write_quorum,
            a.shape.ack_quorum,
            a.shape.entry_size,
            a.in_flight,
            w.to_text()
        ));
    }
    out.push_str(&format!(
        "folio bench read: {n} ledger(s), {} read(s) of {} entr{} in flight\n{}",
        a.in_flight,
        a.batch,
        if a.batch == 1 { "y" } else { "ies" },
        summary.to_text()
    ));
    Ok(out)
}

/// Writes the ledgers to read and closes them; returns their ids and the write figures.
async fn write_phase(a: &ReadBenchArgs, client: &Client) -> anyhow::Result<(Vec<i64>, Summary)> {
    let mut ledgers = Vec::new();
    for _ in 0..a.ledgers {
        let opts = CreateOptions::default()
            .quorum(a.shape.ensemble, a.shape.write_quorum, a.shape.ack_quorum)
            .digest(DigestType::Crc32c)
            .password(PASSWORD);
        let l = client
            .create_ledger(opts)
            .await
            .context("cannot create a benchmark ledger")?;
        ledgers.push(Arc::new(l));
    }
    let ids: Vec<i64> = ledgers.iter().map(|l| l.id()).collect();
    let payload = payload(a.shape.entry_size);
    let latencies = Arc::new(Mutex::new(Latencies::new()));
    let start = Instant::now();
    let n = a.ledgers;
    let mut tasks = Vec::new();
    for (i, ledger) in ledgers.iter().enumerate() {
        let i = i as u64;
        tasks.push(tokio::spawn(append_loop(
            Arc::clone(ledger),
            payload.clone(),
            Limit::Entries(share(a.entries, n, i)),
            share(a.in_flight, n, i),
            Arc::clone(&latencies),
            indicatif::ProgressBar::hidden(),
        )));
    }
    let mut entries = 0;
    let mut failure = None;
    for t in tasks {
        match t.await.context("an append task panicked")? {
            Ok(k) => entries += k,
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    let elapsed = start.elapsed();
    let mut close_failure = None;
    for l in &ledgers {
        if let Err(e) = l.close().await {
            close_failure.get_or_insert(
                anyhow::Error::new(e).context(format!("cannot close ledger {}", l.id())),
            );
        }
    }
    if let Some(e) = failure.or(close_failure) {
        for &id in &ids {
            let _ = client.delete_ledger(id).await;
        }
        return Err(e);
    }
    let latencies = std::mem::take(&mut *latencies.lock().expect("latency lock"));
    Ok((
        ids,
        Summary {
            entries,
            bytes: entries * a.shape.entry_size as u64,
            elapsed,
            latencies,
            cpu_seconds: None,
        },
    ))
}

/// Opens every ledger without recovery and reads it to its last entry (its LAC if still
/// open); returns the figures and how many entries each ledger gave.
async fn read_phase(
    a: &ReadBenchArgs,
    client: &Client,
    ids: &[i64],
    password: &[u8],
) -> anyhow::Result<(Summary, Vec<u64>)> {
    let mut handles = Vec::new();
    for &id in ids {
        let h = client
            .open_ledger(id, password, OpenOptions::no_recovery())
            .await
            .with_context(|| format!("cannot open ledger {id}"))?;
        handles.push(Arc::new(h));
    }
    let latencies = Arc::new(Mutex::new(Latencies::new()));
    let cpu = PhaseCpu::start();
    let start = Instant::now();
    let n = ids.len() as u64;
    let mut tasks = Vec::new();
    for (i, h) in handles.iter().enumerate() {
        tasks.push(tokio::spawn(read_loop(
            Arc::clone(h),
            share(a.in_flight, n, i as u64),
            a.batch,
            Arc::clone(&latencies),
        )));
    }
    let (mut entries, mut bytes, mut per_ledger, mut failure) = (0, 0, Vec::new(), None);
    for t in tasks {
        match t.await.context("a read task panicked")? {
            Ok((k, b)) => {
                entries += k;
                bytes += b;
                per_ledger.push(k);
            }
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    let elapsed = start.elapsed();
    let cpu_seconds = cpu.seconds();
    if let Some(e) = failure {
        return Err(e);
    }
    let latencies = std::mem::take(&mut *latencies.lock().expect("latency lock"));
    Ok((
        Summary {
            entries,
            bytes,
            elapsed,
            latencies,
            cpu_seconds,
        },
        per_ledger,
    ))
}

/// Reads entries `0..=LAC` of one ledger with up to `window` requests of `batch` entries
/// outstanding; returns the entries and payload bytes read. Each answer must hold exactly
/// the entries asked for. The requests are futures polled by this task, as a Rust reader
/// would keep them (not a task each: spawning was a tenth of the reader's CPU).
async fn read_loop(
    ledger: Arc<ReadHandle>,
    window: u64,
    batch: u64,
    latencies: Arc<Mutex<Latencies>>,
) -> anyhow::Result<(u64, u64)> {
    let last = ledger.last_add_confirmed();
    let id = ledger.id();
    let read = |first: i64, end: i64| {
        let h = &ledger;
        async move {
            let t0 = Instant::now();
            let got = h
                .read(first, end)
                .await
                .with_context(|| format!("read of ledger {id} entries {first}..={end}"))?;
            let took = t0.elapsed();
            if got.len() as i64 != end - first + 1
                || got.iter().zip(first..).any(|(e, want)| e.entry_id != want)
            {
                let ids: Vec<i64> = got.iter().map(|e| e.entry_id).collect();
                bail!("ledger {id}: asked for entries {first}..={end}, got {ids:?}");
            }
            let b: u64 = got.iter().map(|e| e.payload.len() as u64).sum();
            anyhow::Ok((got.len() as u64, b, took))
        }
    };
    let mut pending = FuturesUnordered::new();
    let (mut next, mut entries, mut bytes) = (0i64, 0u64, 0u64);
    loop {
        if next <= last && (pending.len() as u64) < window {
            let first = next;
            let end = (first + batch as i64 - 1).min(last);
            next = end + 1;
            pending.push(read(first, end));
            continue;
        }
        let Some(done) = pending.next().await else {
            return Ok((entries, bytes));
        };
        let (k, b, took) = done?;
        latencies.lock().expect("latency lock").record(took);
        entries += k;
        bytes += b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ReadBenchArgs {
        ReadBenchArgs {
            shape: LedgerShape {
                ensemble: 3,
                write_quorum: 2,
                ack_quorum: 2,
                entry_size: 100,
            },
            entries: 10,
            ledgers: 1,
            ledger_ids: Vec::new(),
            password: "folio-bench".into(),
            in_flight: 4,
            batch: 1,
            keep: false,
            json: true,
        }
    }

    #[test]
    fn bad_arguments_are_refused_by_name() {
        assert!(validate(&args()).is_ok());
        let mut a = args();
        a.shape.write_quorum = 4;
        assert!(validate(&a).unwrap_err().to_string().contains("Qw <= E"));
        let mut a = args();
        a.batch = 0;
        assert!(validate(&a).unwrap_err().to_string().contains("--batch"));
        let mut a = args();
        a.ledger_ids = vec![1, 2, 3, 4, 5];
        let e = validate(&a).unwrap_err().to_string();
        assert!(e.contains("--in-flight 4") && e.contains("5 ledger"), "{e}");
        let mut a = args();
        a.ledger_ids = vec![-3];
        assert!(
            validate(&a)
                .unwrap_err()
                .to_string()
                .contains("--ledger -3")
        );
    }

    #[test]
    fn shares_add_up_to_the_total() {
        for (total, n) in [(10, 3), (7, 7), (100, 1), (5, 8)] {
            let sum: u64 = (0..n).map(|i| share(total, n, i)).sum();
            assert_eq!(sum, total, "{total} over {n}");
        }
    }
}
