//! `folio bench tail`: one writer and `--readers` tailing readers on one ledger, like
//! BookKeeper's `benchmark reads -listen`, measuring end-to-end latency.
//!
//! The writer appends with `--in-flight` appends outstanding until `--entries` are
//! acknowledged or `--seconds` have passed, then closes the ledger. Each reader has its
//! own client (its own connections, as a separate process would), opens the ledger
//! without recovery before the first append, and follows it: it long-polls the bookies
//! for an LAC beyond what it has read, reads the newly confirmed entries, and stops once
//! the ledger is closed and it has read the last entry. An entry's end-to-end latency
//! runs from the writer's `append` call to a reader holding the verified entry; a reader
//! learns of entry e only once the LAC covers it (piggybacked on a later add, an explicit
//! LAC, or the close), so this is the latency a tailing consumer sees. The ledger is
//! deleted afterwards unless `--keep` is given.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use folio_client::{
    Client, ClientConfig, CreateOptions, DigestType, LedgerHandle, OpenOptions, ReadHandle,
};
use folio_metadata::MetadataStore;
use serde_json::{Map, json};

use super::report::{Latencies, Summary};
use super::write::{
    LedgerShape, Limit, PASSWORD, at_least_one, payload, positive_seconds, run_on_cluster,
};

/// Most entries a reader asks for in one range read (the client keeps
/// `read_parallelism` of them in flight).
const READ_CHUNK: i64 = 256;

/// How long one long poll waits before the reader looks again (a close also ends it).
const POLL: Duration = Duration::from_secs(1);

#[derive(Args, Debug, Clone)]
pub struct TailBenchArgs {
    /// Ensemble, quorums and entry size.
    #[command(flatten)]
    pub shape: LedgerShape,
    /// Appends in total (default 10000 unless --seconds is given).
    #[arg(long, value_name = "N", conflicts_with = "seconds")]
    pub entries: Option<u64>,
    /// Append for this many seconds instead of a fixed count.
    #[arg(long, value_name = "S")]
    pub seconds: Option<f64>,
    /// Appends the writer keeps outstanding.
    #[arg(long, value_name = "K", default_value_t = 100)]
    pub in_flight: u64,
    /// Tailing readers, each with its own client.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub readers: u64,
    /// Have the writer send the LAC explicitly after this many idle milliseconds
    /// (`explicitLacInterval`); without it the last entries wait for the close.
    #[arg(long, value_name = "MS")]
    pub explicit_lac_ms: Option<u64>,
    /// Keep the ledger instead of deleting it.
    #[arg(long)]
    pub keep: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: TailBenchArgs, metadata: Option<String>) -> anyhow::Result<()> {
    validate(&a)?;
    run_on_cluster("tail", metadata, |uri| async move { bench(&a, &uri).await })
}

fn validate(a: &TailBenchArgs) -> anyhow::Result<()> {
    a.shape.validate()?;
    at_least_one(&[
        ("--entries", a.entries.unwrap_or(1)),
        ("--in-flight", a.in_flight),
        ("--readers", a.readers),
    ])?;
    positive_seconds(a.seconds)?;
    Ok(())
}

/// When each entry was handed to `append`, by entry id (the writer appends in id order).
type SentAt = Arc<Mutex<Vec<Instant>>>;

async fn bench(a: &TailBenchArgs, uri: &str) -> anyhow::Result<String> {
    let store =
        crate::metadata_connect::connect(uri, crate::metadata_connect::Missing::Refuse).await?;
    let config = ClientConfig {
        explicit_lac_interval: a.explicit_lac_ms.map(Duration::from_millis),
        ..crate::client_tls::client_config()?
    };
    let client = Client::connect(store.clone(), config)
        .await
        .context("cannot start the client")?;
    let opts = CreateOptions::default()
        .quorum(a.shape.ensemble, a.shape.write_quorum, a.shape.ack_quorum)
        .digest(DigestType::Crc32c)
        .password(PASSWORD);
    let writer = Arc::new(
        client
            .create_ledger(opts)
            .await
            .context("cannot create the benchmark ledger")?,
    );
    let id = writer.id();
    let result = run_ledger(a, &store, Arc::clone(&writer)).await;
    let _ = writer.close().await;
    if !a.keep {
        let _ = client.delete_ledger(id).await;
    }
    client.close();
    let (written, append_latencies, deliveries, e2e, elapsed) = result?;
    let summary = Summary {
        entries: written,
        bytes: written * a.shape.entry_size as u64,
        elapsed,
        latencies: e2e,
    };
    let appends = Summary {
        entries: written,
        bytes: written * a.shape.entry_size as u64,
        elapsed,
        latencies: append_latencies,
    };
    let delivered: u64 = deliveries.iter().sum();
    if a.json {
        let mut extra = Map::new();
        extra.insert("bench".into(), json!("tail"));
        extra.insert("ensemble".into(), json!(a.shape.ensemble));
        extra.insert("write_quorum".into(), json!(a.shape.write_quorum));
        extra.insert("ack_quorum".into(), json!(a.shape.ack_quorum));
        extra.insert("entry_size".into(), json!(a.shape.entry_size));
        extra.insert("in_flight".into(), json!(a.in_flight));
        extra.insert("readers".into(), json!(a.readers));
        extra.insert("explicit_lac_ms".into(), json!(a.explicit_lac_ms));
        extra.insert("ledger_id".into(), json!(id));
        extra.insert("delivered".into(), json!(delivered));
        extra.insert("delivered_per_reader".into(), json!(deliveries));
        let append = appends.to_json(Map::new());
        extra.insert("append_latency_ms".into(), append["latency_ms"].clone());
        return Ok(summary.to_json(extra).to_string());
    }
    let l = &appends.latencies;
    Ok(format!(
        "folio bench tail: E{} Qw{} Qa{}, {} B entries, {} in flight, {} tailing reader(s)\n{}\n\
         (latency: append to delivery at a reader; {delivered} deliveries)\n\
         append latency ms: p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
        a.shape.ensemble,
        a.shape.write_quorum,
        a.shape.ack_quorum,
        a.shape.entry_size,
        a.in_flight,
        a.readers,
        summary.to_text(),
        l.quantile_ms(0.50),
        l.quantile_ms(0.99),
        l.quantile_ms(0.999),
        l.max_ms(),
    ))
}

type Outcome = (u64, Latencies, Vec<u64>, Latencies, Duration);

/// Starts the readers, runs the writer, closes the ledger and waits for the readers to
/// reach its end. Returns entries written, append latencies, entries each reader
/// delivered, end-to-end latencies and the elapsed time (first append to last delivery).
async fn run_ledger(
    a: &TailBenchArgs,
    store: &Arc<dyn MetadataStore>,
    writer: Arc<LedgerHandle>,
) -> anyhow::Result<Outcome> {
    let id = writer.id();
    let sent: SentAt = Arc::new(Mutex::new(Vec::new()));
    let e2e = Arc::new(Mutex::new(Latencies::new()));
    let mut readers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..a.readers {
        let c = Client::connect(store.clone(), crate::client_tls::client_config()?)
            .await
            .context("cannot start a reader's client")?;
        let h = c
            .open_ledger(id, PASSWORD, OpenOptions::no_recovery())
            .await
            .with_context(|| format!("a reader cannot open ledger {id}"))?;
        readers.push(h);
        clients.push(c);
    }
    let start = Instant::now();
    let tasks: Vec<_> = readers
        .into_iter()
        .map(|h| tokio::spawn(tail_loop(h, Arc::clone(&sent), Arc::clone(&e2e))))
        .collect();
    let limit = match a.seconds {
        Some(s) => Limit::Until(start + Duration::from_secs_f64(s)),
        None => Limit::Entries(a.entries.unwrap_or(10_000)),
    };
    let mut append_latencies = Latencies::new();
    let written = append_loop(
        &writer,
        payload(a.shape.entry_size),
        limit,
        a.in_flight,
        &sent,
        &mut append_latencies,
    )
    .await;
    // The close makes the last entries visible to the readers (and ends their tails).
    let closed = writer
        .close()
        .await
        .with_context(|| format!("cannot close ledger {id}"));
    if written.is_err() || closed.is_err() {
        for t in &tasks {
            t.abort();
        }
    }
    let written = written?;
    closed?;
    let mut deliveries = Vec::new();
    for t in tasks {
        deliveries.push(t.await.context("a reader task panicked")??);
    }
    let elapsed = start.elapsed();
    for c in clients {
        c.close();
    }
    for (i, &d) in deliveries.iter().enumerate() {
        if d != written {
            bail!("reader {i} delivered {d} entries of ledger {id}, the writer wrote {written}");
        }
    }
    let e2e = std::mem::take(&mut *e2e.lock().expect("latency lock"));
    Ok((written, append_latencies, deliveries, e2e, elapsed))
}

/// The writer: up to `window` appends outstanding until `limit`; records each entry's
/// send time before handing it to the client. Returns how many were acknowledged.
async fn append_loop(
    ledger: &LedgerHandle,
    payload: Bytes,
    limit: Limit,
    window: u64,
    sent: &SentAt,
    latencies: &mut Latencies,
) -> anyhow::Result<u64> {
    let mut pending = VecDeque::new();
    let (mut n, mut acked) = (0u64, 0u64);
    loop {
        let more = match limit {
            Limit::Entries(total) => n < total,
            Limit::Until(t) => Instant::now() < t,
        };
        if more && (pending.len() as u64) < window {
            let t0 = Instant::now();
            sent.lock().expect("send-time lock").push(t0);
            pending.push_back((t0, n as i64, ledger.append(payload.clone())));
            n += 1;
            continue;
        }
        let Some((t0, want, fut)) = pending.pop_front() else {
            return Ok(acked);
        };
        let got = fut
            .await
            .with_context(|| format!("append to ledger {} failed", ledger.id()))?;
        if got != want {
            bail!(
                "ledger {}: append {want} was acknowledged as entry {got}",
                ledger.id()
            );
        }
        latencies.record(t0.elapsed());
        acked += 1;
    }
}

/// One tailing reader: follows the LAC with long polls and reads every confirmed entry
/// in order until the ledger is closed and its last entry read. Returns how many entries
/// it delivered, each checked to be the next in sequence.
async fn tail_loop(
    reader: ReadHandle,
    sent: SentAt,
    e2e: Arc<Mutex<Latencies>>,
) -> anyhow::Result<u64> {
    let id = reader.id();
    let mut next: i64 = 0;
    loop {
        let lac = reader.last_add_confirmed();
        if lac >= next {
            let end = lac.min(next + READ_CHUNK - 1);
            let entries = reader
                .read(next, end)
                .await
                .with_context(|| format!("tailing read of ledger {id} entries {next}..={end}"))?;
            let now = Instant::now();
            let sent = sent.lock().expect("send-time lock");
            let mut e2e = e2e.lock().expect("latency lock");
            for e in entries {
                if e.entry_id != next {
                    bail!(
                        "tailing ledger {id}: expected entry {next}, got {}",
                        e.entry_id
                    );
                }
                let Some(t0) = sent.get(next as usize) else {
                    bail!("tailing ledger {id}: entry {next} was read before it was appended");
                };
                e2e.record(now.saturating_duration_since(*t0));
                next += 1;
            }
            continue;
        }
        if reader.is_closed() {
            return Ok(next as u64);
        }
        reader
            .wait_for_lac_beyond(next - 1, POLL)
            .await
            .with_context(|| format!("long poll on ledger {id}"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> TailBenchArgs {
        TailBenchArgs {
            shape: LedgerShape {
                ensemble: 3,
                write_quorum: 2,
                ack_quorum: 2,
                entry_size: 100,
            },
            entries: Some(10),
            seconds: None,
            in_flight: 4,
            readers: 1,
            explicit_lac_ms: None,
            keep: false,
            json: true,
        }
    }

    #[test]
    fn bad_arguments_are_refused_by_name() {
        assert!(validate(&args()).is_ok());
        let mut a = args();
        a.readers = 0;
        assert!(validate(&a).unwrap_err().to_string().contains("--readers"));
        let mut a = args();
        a.shape.ack_quorum = 0;
        assert!(validate(&a).unwrap_err().to_string().contains("Qa"));
        let mut a = args();
        a.entries = None;
        a.seconds = Some(f64::NAN);
        assert!(validate(&a).unwrap_err().to_string().contains("--seconds"));
    }
}
