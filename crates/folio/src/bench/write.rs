//! `folio bench write`: appends through folio-client to the cluster named by `--metadata`,
//! like BookKeeper's `benchmark writes`.
//!
//! Creates `--ledgers` ledgers with the given ensemble, write quorum and ack quorum (CRC32C
//! digest), then keeps `--in-flight` appends outstanding in total (split evenly over the
//! ledgers) until `--entries` appends are acknowledged or `--seconds` have passed. An
//! append's latency runs from `append` to its acknowledgement (ack quorum reached, and every
//! earlier entry of its ledger acknowledged). The ledgers are closed, then deleted unless
//! `--keep` is given.

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use folio_client::{Client, CreateOptions, DigestType, LedgerHandle};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Map, json};

use super::report::{Latencies, PhaseCpu, Summary};

/// The password of benchmark ledgers (`folio bench read --ledger` expects it by default).
pub(super) const PASSWORD: &[u8] = b"folio-bench";

#[derive(Args, Debug, Clone)]
pub struct WriteBenchArgs {
    /// Ensemble, quorums and entry size.
    #[command(flatten)]
    pub shape: LedgerShape,
    /// Appends in total (default 10000 unless --seconds is given).
    #[arg(long, value_name = "N", conflicts_with = "seconds")]
    pub entries: Option<u64>,
    /// Append for this many seconds instead of a fixed count.
    #[arg(long, value_name = "S")]
    pub seconds: Option<f64>,
    /// Appends kept outstanding in total, split evenly over the ledgers.
    #[arg(long, value_name = "K", default_value_t = 100)]
    pub in_flight: u64,
    /// Ledgers written in parallel.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub ledgers: u64,
    /// Keep the benchmark ledgers instead of deleting them.
    #[arg(long)]
    pub keep: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write each append's start and latency to this file (`start_ms latency_ms` per line,
    /// in start order), like BookKeeper's benchmark's `-latencyFile`. Every append is kept
    /// in memory until the run ends (16 bytes each).
    #[arg(long, value_name = "FILE")]
    pub latency_file: Option<PathBuf>,
}

/// When a run stops.
#[derive(Debug, Clone, Copy)]
pub(super) enum Limit {
    Entries(u64),
    Until(Instant),
}

pub fn run(a: WriteBenchArgs, metadata: Option<String>) -> anyhow::Result<()> {
    validate(&a)?;
    run_on_cluster(
        "write",
        metadata,
        |uri| async move { bench(&a, &uri).await },
    )
}

/// The shape of the ledgers a benchmark writes: BookKeeper's `-e`, `-w`, `-a` and the
/// entry size, the same flags on `bench write`, `read` and `tail`.
#[derive(Args, Debug, Clone)]
pub struct LedgerShape {
    /// Ensemble size.
    #[arg(short = 'e', long = "ensemble", value_name = "E", default_value_t = 3)]
    pub ensemble: usize,
    /// Write quorum.
    #[arg(
        short = 'w',
        long = "write-quorum",
        value_name = "Qw",
        default_value_t = 2
    )]
    pub write_quorum: usize,
    /// Ack quorum.
    #[arg(
        short = 'a',
        long = "ack-quorum",
        value_name = "Qa",
        default_value_t = 2
    )]
    pub ack_quorum: usize,
    /// Payload bytes per entry.
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    pub entry_size: usize,
}

impl LedgerShape {
    /// Refuses a quorum BookKeeper would refuse, naming the flags.
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        let (ensemble, write, ack) = (self.ensemble, self.write_quorum, self.ack_quorum);
        if !(ack >= 1 && ack <= write && write <= ensemble) {
            bail!("bad quorum -e {ensemble} -w {write} -a {ack}: need 1 <= Qa <= Qw <= E");
        }
        Ok(())
    }
}

/// Refuses a zero count, naming its flag.
pub(super) fn at_least_one(counts: &[(&str, u64)]) -> anyhow::Result<()> {
    match counts.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => bail!("{name} must be at least 1"),
        None => Ok(()),
    }
}

/// Refuses a `--seconds` that is not a positive finite number.
pub(super) fn positive_seconds(seconds: Option<f64>) -> anyhow::Result<()> {
    if let Some(s) = seconds
        && !(s > 0.0 && s.is_finite())
    {
        bail!("--seconds must be a positive number, not {s}");
    }
    Ok(())
}

/// Runs one cluster benchmark (`what`: write, read, tail) on its own runtime against the
/// cluster `metadata` names, and prints its report.
pub(super) fn run_on_cluster<F, Fut, R>(
    what: &str,
    metadata: Option<String>,
    bench: F,
) -> anyhow::Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<R>>,
    R: std::fmt::Display,
{
    let Some(uri) = metadata else {
        bail!("folio bench {what} needs --metadata URI (or FOLIO_METADATA) naming the cluster");
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let out = rt.block_on(bench(uri))?;
    println!("{out}");
    Ok(())
}

fn validate(a: &WriteBenchArgs) -> anyhow::Result<()> {
    a.shape.validate()?;
    at_least_one(&[
        ("--entries", a.entries.unwrap_or(1)),
        ("--in-flight", a.in_flight),
        ("--ledgers", a.ledgers),
    ])?;
    positive_seconds(a.seconds)?;
    if a.in_flight < a.ledgers {
        bail!(
            "--in-flight {} is less than --ledgers {}: every ledger needs one append in flight",
            a.in_flight,
            a.ledgers
        );
    }
    Ok(())
}

async fn bench(a: &WriteBenchArgs, uri: &str) -> anyhow::Result<String> {
    let store =
        crate::metadata_connect::connect(uri, crate::metadata_connect::Missing::Refuse).await?;
    let client = Client::connect(store, crate::client_tls::client_config()?)
        .await
        .context("cannot start the client")?;
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
    let payload = payload(a.shape.entry_size);
    let total = a
        .entries
        .unwrap_or(if a.seconds.is_some() { 0 } else { 10_000 });
    let progress = if std::io::stderr().is_terminal() && !a.json && a.seconds.is_none() {
        let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} appends {per_sec} eta {eta}")
                .expect("static progress template"),
        );
        pb
    } else {
        ProgressBar::hidden()
    };
    let cpu = PhaseCpu::start();
    let start = Instant::now();
    let latencies = Arc::new(Mutex::new(if a.latency_file.is_some() {
        Latencies::with_series(start)
    } else {
        Latencies::new()
    }));
    let n = a.ledgers;
    let mut tasks = Vec::new();
    for (i, ledger) in ledgers.iter().enumerate() {
        let i = i as u64;
        // Ledger i takes its share of the appends and of the in-flight window.
        let limit = match a.seconds {
            Some(s) => Limit::Until(start + Duration::from_secs_f64(s)),
            None => Limit::Entries(total / n + u64::from(i < total % n)),
        };
        let window = a.in_flight / n + u64::from(i < a.in_flight % n);
        tasks.push(tokio::spawn(append_loop(
            Arc::clone(ledger),
            payload.clone(),
            limit,
            window,
            Arc::clone(&latencies),
            progress.clone(),
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
    let cpu_seconds = cpu.seconds();
    progress.finish_and_clear();
    for l in &ledgers {
        let _ = l.close().await;
        if !a.keep {
            let _ = client.delete_ledger(l.id()).await;
        }
    }
    client.close();
    if let Some(e) = failure {
        return Err(e);
    }
    let mut latencies = std::mem::take(&mut *latencies.lock().expect("latency lock"));
    if let Some(path) = &a.latency_file {
        latencies.write_series(path)?;
    }
    let summary = Summary {
        entries,
        bytes: entries * a.shape.entry_size as u64,
        elapsed,
        latencies,
        cpu_seconds,
    };
    if a.json {
        let mut extra = Map::new();
        extra.insert("bench".into(), json!("write"));
        extra.insert("ensemble".into(), json!(a.shape.ensemble));
        extra.insert("write_quorum".into(), json!(a.shape.write_quorum));
        extra.insert("ack_quorum".into(), json!(a.shape.ack_quorum));
        extra.insert("entry_size".into(), json!(a.shape.entry_size));
        extra.insert("in_flight".into(), json!(a.in_flight));
        extra.insert("ledgers".into(), json!(a.ledgers));
        extra.insert(
            "ledger_ids".into(),
            json!(ledgers.iter().map(|l| l.id()).collect::<Vec<_>>()),
        );
        return Ok(summary.to_json(extra).to_string());
    }
    Ok(format!(
        "folio bench write: E{} Qw{} Qa{}, {} B entries, {} in flight over {} ledger(s)\n{}",
        a.shape.ensemble,
        a.shape.write_quorum,
        a.shape.ack_quorum,
        a.shape.entry_size,
        a.in_flight,
        a.ledgers,
        summary.to_text()
    ))
}

/// The payload of every benchmark entry: `size` bytes of a repeating alphabet, kept for
/// the life of the process (one buffer per benchmark run). Every append takes a copy of the
/// handle: of a static buffer that copy counts nothing, while the shared count of a
/// heap buffer was incremented and decremented per append by every ledger's task on both
/// CPUs, a cache line they fought over (2.5% of the client's samples at 10,000 ledgers,
/// perf), a cost of the harness that an application with buffers of its own does not have.
pub(super) fn payload(size: usize) -> Bytes {
    let bytes: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    Bytes::from_static(Box::leak(bytes.into_boxed_slice()))
}

/// Appends to one ledger with up to `window` outstanding until `limit`; returns how many
/// were acknowledged. Acknowledgements come in entry order, so the oldest is awaited first.
/// The clock is read once per entry when the window is full, as it mostly is: the reading
/// that ends an entry's latency starts the next one's (and checks the time limit), since
/// that entry is appended right after. The clock was 8% of the client's CPU at 1 KiB adds
/// when read four times per entry (perf).
pub(super) async fn append_loop(
    ledger: Arc<LedgerHandle>,
    payload: Bytes,
    limit: Limit,
    window: u64,
    latencies: Arc<Mutex<Latencies>>,
    progress: ProgressBar,
) -> anyhow::Result<u64> {
    let mut pending = VecDeque::new();
    let (mut sent, mut acked) = (0u64, 0u64);
    let mut now = Instant::now();
    loop {
        let more = match limit {
            Limit::Entries(n) => sent < n,
            Limit::Until(t) => now < t,
        };
        if more && (pending.len() as u64) < window {
            pending.push_back((now, ledger.append(payload.clone())));
            sent += 1;
            if (pending.len() as u64) < window {
                // Filling the window: each append gets its own start.
                now = Instant::now();
            }
            continue;
        }
        let Some((t0, fut)) = pending.pop_front() else {
            return Ok(acked);
        };
        fut.await
            .with_context(|| format!("append to ledger {} failed", ledger.id()))?;
        now = Instant::now();
        latencies
            .lock()
            .expect("latency lock")
            .record_between(t0, now);
        acked += 1;
        progress.inc(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> WriteBenchArgs {
        WriteBenchArgs {
            shape: LedgerShape {
                ensemble: 3,
                write_quorum: 2,
                ack_quorum: 2,
                entry_size: 100,
            },
            entries: Some(10),
            seconds: None,
            in_flight: 4,
            ledgers: 1,
            keep: false,
            json: true,
            latency_file: None,
        }
    }

    #[test]
    fn bad_quorums_and_counts_are_refused_by_name() {
        assert!(validate(&args()).is_ok());
        let mut a = args();
        a.shape.ack_quorum = 3;
        let e = validate(&a).unwrap_err().to_string();
        assert!(e.contains("Qa <= Qw"), "{e}");
        let mut a = args();
        a.ledgers = 8;
        let e = validate(&a).unwrap_err().to_string();
        assert!(e.contains("--ledgers"), "{e}");
        let mut a = args();
        a.entries = None;
        a.seconds = Some(-1.0);
        let e = validate(&a).unwrap_err().to_string();
        assert!(e.contains("--seconds"), "{e}");
    }
}
