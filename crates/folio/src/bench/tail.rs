//! `folio bench tail`: one writer and `--readers` tailing readers on one ledger, like
//! BookKeeper's `benchmark reads -listen`, measuring how soon a reader has each entry.
//!
//! The writer appends with `--in-flight` appends outstanding until `--entries` are
//! acknowledged or `--seconds` have passed: those are the measured entries. With `--rate`
//! it is also paced (the n-th append not before n / rate seconds), so that two clusters can
//! be compared at the same load rather than each at its own most. Each reader
//! has its own client (its own connections, as a separate process would), opens the ledger
//! without recovery before the first append, and follows it: it long-polls the bookies for
//! an LAC beyond what it has read, reads the newly confirmed entries, and stops once it has
//! every measured entry. A reader learns of entry e only once the LAC covers it, which
//! BookKeeper's protocol piggybacks on a later add; so the writer keeps appending
//! (unmeasured, at most as many entries again) until every reader has the measured ones,
//! instead of leaving the last of them to wait for the close, and closes the ledger after.
//! The delivery latency runs from the writer's acknowledgement of an entry to a reader
//! holding it verified (the tailing path alone: LAC carried by the next add, long poll,
//! read); the end-to-end latency from the `append` call. Writer and readers share one
//! process, so one clock. The ledger is deleted afterwards unless `--keep` is given.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use folio_client::{
    AppendFuture, Client, ClientConfig, CreateOptions, DigestType, LedgerHandle, OpenOptions,
    ReadHandle,
};
use folio_metadata::MetadataStore;
use folio_types::{EntryId, LedgerId};
use serde_json::{Map, json};

use super::report::{Latencies, PhaseCpu, Summary};
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
    /// Pace the writer at this many appends per second (still at most --in-flight
    /// outstanding), to compare delivery latency at the same load; unpaced without it.
    #[arg(long, value_name = "PER_SECOND")]
    pub rate: Option<f64>,
    /// Tailing readers, each with its own client.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub readers: u64,
    /// Have the writer send the LAC explicitly after this many idle milliseconds
    /// (`explicitLacInterval`); without it the last entries wait for the close.
    #[arg(long, value_name = "MS")]
    pub explicit_lac_ms: Option<u64>,
    /// Long-poll every bookie of the ensemble at once instead of one at a time (the
    /// readers' `speculative_read_lac_timeout` zero), as the Java client's
    /// `readLastAddConfirmedAndEntry(entry, timeout, parallel = true)`: the first answer
    /// wins, so a bookie that misses a wake-up costs nothing.
    #[arg(long)]
    pub parallel: bool,
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
    if let Some(r) = a.rate
        && !(r.is_finite() && r > 0.0)
    {
        bail!("--rate must be a positive number of appends per second, not {r}");
    }
    Ok(())
}

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
    let o = result?;
    let bytes = o.measured * a.shape.entry_size as u64;
    let summary = |latencies| Summary {
        entries: o.measured,
        bytes,
        elapsed: o.elapsed,
        latencies,
        cpu_seconds: o.cpu_seconds,
    };
    let (delivery, e2e, appends) = (summary(o.delivery), summary(o.e2e), summary(o.appends));
    if a.json {
        let mut extra = Map::new();
        extra.insert("bench".into(), json!("tail"));
        extra.insert("ensemble".into(), json!(a.shape.ensemble));
        extra.insert("write_quorum".into(), json!(a.shape.write_quorum));
        extra.insert("ack_quorum".into(), json!(a.shape.ack_quorum));
        extra.insert("entry_size".into(), json!(a.shape.entry_size));
        extra.insert("in_flight".into(), json!(a.in_flight));
        extra.insert("rate".into(), json!(a.rate));
        extra.insert("readers".into(), json!(a.readers));
        extra.insert("explicit_lac_ms".into(), json!(a.explicit_lac_ms));
        extra.insert("parallel".into(), json!(a.parallel));
        extra.insert("ledger_id".into(), json!(id));
        extra.insert("latency_from".into(), json!("ack"));
        extra.insert("written".into(), json!(o.written));
        extra.insert("delivered".into(), json!(o.measured * a.readers));
        // Every reader delivered exactly the measured entries (checked in `run_ledger`).
        extra.insert(
            "delivered_per_reader".into(),
            json!(vec![o.measured; a.readers as usize]),
        );
        let e2e = e2e.to_json(Map::new());
        extra.insert("e2e_latency_ms".into(), e2e["latency_ms"].clone());
        let append = appends.to_json(Map::new());
        extra.insert("append_latency_ms".into(), append["latency_ms"].clone());
        return Ok(delivery.to_json(extra).to_string());
    }
    let line = |name: &str, l: &Latencies| {
        format!(
            "{name} latency ms: p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
            l.quantile_ms(0.50),
            l.quantile_ms(0.99),
            l.quantile_ms(0.999),
            l.max_ms(),
        )
    };
    Ok(format!(
        "folio bench tail: E{} Qw{} Qa{}, {} B entries, {} in flight{}, {} tailing reader(s)\n{}\n\
         (latency: the writer's acknowledgement to delivery at a reader; {} entries written \
         in all, the measured {} and a cool-down)\n{}\n{}",
        a.shape.ensemble,
        a.shape.write_quorum,
        a.shape.ack_quorum,
        a.shape.entry_size,
        a.in_flight,
        a.rate
            .map(|r| format!(" paced at {r} per second"))
            .unwrap_or_default(),
        a.readers,
        delivery.to_text(),
        o.written,
        o.measured,
        line("end-to-end (append call to delivery)", &e2e.latencies),
        line("append", &appends.latencies),
    ))
}

/// What a run measured, over the measured entries only.
struct Outcome {
    /// Entries the writer reached its limit with: the ones measured.
    measured: u64,
    /// Entries written in all, the cool-down included.
    written: u64,
    appends: Latencies,
    delivery: Latencies,
    e2e: Latencies,
    /// First append to the last reader holding the last measured entry.
    elapsed: Duration,
    /// The process's CPU from the readers' start to the end (the writer's cool-down included).
    cpu_seconds: Option<f64>,
}

/// The writer's side of what readers need to know while the run goes on.
struct Progress {
    /// Entries measured, once the writer has reached its limit (`u64::MAX` until then).
    measured: AtomicU64,
    /// Readers that have stopped (done or failed): the writer's cool-down ends with them.
    stopped: AtomicU64,
}

/// Counts a reader as stopped however its task ends, so a failed reader cannot leave the
/// writer appending through its whole cool-down.
struct Stopped(Arc<Progress>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.stopped.fetch_add(1, Ordering::SeqCst);
    }
}

/// Starts the readers, runs the writer, closes the ledger once the readers have the
/// measured entries, and turns the instants into latencies.
async fn run_ledger(
    a: &TailBenchArgs,
    store: &Arc<dyn MetadataStore>,
    writer: Arc<LedgerHandle>,
) -> anyhow::Result<Outcome> {
    let id = writer.id();
    let progress = Arc::new(Progress {
        measured: AtomicU64::new(u64::MAX),
        stopped: AtomicU64::new(0),
    });
    let mut readers = Vec::new();
    let mut clients = Vec::new();
    let mut config = crate::client_tls::client_config()?;
    if a.parallel {
        config.speculative_read_lac_timeout = Duration::ZERO;
    }
    for _ in 0..a.readers {
        let c = Client::connect(store.clone(), config.clone())
            .await
            .context("cannot start a reader's client")?;
        let h = c
            .open_ledger(id, PASSWORD, OpenOptions::no_recovery())
            .await
            .with_context(|| format!("a reader cannot open ledger {id}"))?;
        readers.push(h);
        clients.push(c);
    }
    let cpu = PhaseCpu::start();
    let start = Instant::now();
    let tasks: Vec<_> = readers
        .into_iter()
        .map(|h| tokio::spawn(tail_loop(h, Arc::clone(&progress))))
        .collect();
    let limit = match a.seconds {
        Some(s) => Limit::Until(start + Duration::from_secs_f64(s)),
        None => Limit::Entries(a.entries.unwrap_or(10_000)),
    };
    let written = append_loop(
        &writer,
        payload(a.shape.entry_size),
        limit,
        Pace {
            window: a.in_flight,
            rate: a.rate,
        },
        a.readers,
        &progress,
    )
    .await;
    // Ends the readers' tails if the cool-down ran out before they had every entry.
    let closed = writer
        .close()
        .await
        .with_context(|| format!("cannot close ledger {id}"));
    if written.is_err() || closed.is_err() {
        for t in &tasks {
            t.abort();
        }
    }
    let w = written?;
    closed?;
    let measured = w.measured;
    let mut deliveries = Vec::new();
    for t in tasks {
        deliveries.push(t.await.context("a reader task panicked")??);
    }
    for c in clients {
        c.close();
    }
    if measured == 0 {
        bail!("no entry was appended to ledger {id}");
    }
    let (mut delivery, mut e2e) = (Latencies::new(), Latencies::new());
    let mut last = start;
    for (i, got) in deliveries.iter().enumerate() {
        if (got.len() as u64) < measured {
            bail!(
                "reader {i} delivered {} entries of ledger {id}, the writer measured {measured}",
                got.len()
            );
        }
        for (e, &at) in got.iter().take(measured as usize).enumerate() {
            // A delivery before the writer's own task saw the acknowledgement counts as 0.
            delivery.record(at.saturating_duration_since(w.acked[e]));
            e2e.record(at.saturating_duration_since(w.sent[e]));
        }
        last = last.max(got[measured as usize - 1]);
    }
    Ok(Outcome {
        measured,
        written: w.written,
        appends: w.latencies,
        delivery,
        e2e,
        elapsed: last - start,
        cpu_seconds: cpu.seconds(),
    })
}

/// What the writer did: the measured count, all appends, and each entry's instants.
struct Written {
    measured: u64,
    written: u64,
    /// When each entry was handed to `append`, by entry id.
    sent: Vec<Instant>,
    /// When the writer saw each entry acknowledged, by entry id.
    acked: Vec<Instant>,
    /// Append latencies of the measured entries.
    latencies: Latencies,
}

/// How the writer sends: at most `window` appends outstanding, and with a `rate` no more
/// appends than the pacer's ticks (the n-th at n / rate seconds after the first).
struct Pace {
    window: u64,
    rate: Option<f64>,
}

/// Ticks `rate` times a second from a thread of its own, each tick one append allowed, until
/// the receiver is dropped. A thread, not tokio's timer: that one works in whole
/// milliseconds, so a writer paced by it sends its appends in bursts, and each burst's entries
/// wait for the next burst to carry their LAC.
fn pacer(rate: f64) -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let first = Instant::now();
    std::thread::spawn(move || {
        for n in 0u64.. {
            let due = first + Duration::from_secs_f64(n as f64 / rate);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    rx
}

/// The writer: appends as `pace` allows until `limit` (the measured entries), then the
/// same until every reader has stopped or as many entries again are written.
async fn append_loop(
    ledger: &LedgerHandle,
    payload: Bytes,
    limit: Limit,
    pace: Pace,
    readers: u64,
    progress: &Progress,
) -> anyhow::Result<Written> {
    let mut w = Written {
        measured: 0,
        written: 0,
        sent: Vec::new(),
        acked: Vec::new(),
        latencies: Latencies::new(),
    };
    let mut pending: VecDeque<(Instant, EntryId, AppendFuture)> = VecDeque::new();
    let mut measured: Option<u64> = None;
    let mut ticks = pace.rate.map(pacer);
    // A tick received and not yet spent on an append.
    let mut ticked = false;
    loop {
        let n = w.sent.len() as u64;
        if measured.is_none() {
            let reached = match limit {
                Limit::Entries(total) => n >= total,
                Limit::Until(t) => Instant::now() >= t,
            };
            if reached {
                measured = Some(n);
                progress.measured.store(n, Ordering::SeqCst);
            }
        }
        let more = match measured {
            None => true,
            // The cool-down: later adds carry the LAC that makes the measured entries
            // visible to the readers.
            Some(m) => progress.stopped.load(Ordering::SeqCst) < readers && n < 2 * m,
        };
        if more && (pending.len() as u64) < pace.window {
            if let Some(ticks) = ticks.as_mut() {
                ticked = ticked || ticks.try_recv().is_ok();
                if !ticked {
                    // Not the next append's time yet: take an acknowledgement meanwhile.
                    let Some((_, _, head)) = pending.front_mut() else {
                        ticks.recv().await.context("the pacer stopped")?;
                        ticked = true;
                        continue;
                    };
                    tokio::select! {
                        biased;
                        got = head => {
                            let (t0, want, _) = pending.pop_front().expect("the head was polled");
                            w.acknowledged(ledger.id(), t0, want, got, measured)?;
                        }
                        tick = ticks.recv() => {
                            tick.context("the pacer stopped")?;
                            ticked = true;
                        }
                    }
                    continue;
                }
                ticked = false;
            }
            let t0 = Instant::now();
            w.sent.push(t0);
            pending.push_back((t0, n as EntryId, ledger.append(payload.clone())));
            continue;
        }
        let Some((t0, want, fut)) = pending.pop_front() else {
            w.measured = measured.unwrap_or(n);
            w.written = n;
            return Ok(w);
        };
        w.acknowledged(ledger.id(), t0, want, fut.await, measured)?;
    }
}

impl Written {
    /// Records append `want` (sent at `t0`) as acknowledged now, checking its entry id.
    fn acknowledged(
        &mut self,
        ledger: LedgerId,
        t0: Instant,
        want: EntryId,
        got: folio_client::Result<EntryId>,
        measured: Option<u64>,
    ) -> anyhow::Result<()> {
        let got = got.with_context(|| format!("append to ledger {ledger} failed"))?;
        if got != want {
            bail!("ledger {ledger}: append {want} was acknowledged as entry {got}");
        }
        self.acked.push(Instant::now());
        if measured.is_none_or(|m| (got as u64) < m) {
            self.latencies.record(t0.elapsed());
        }
        Ok(())
    }
}

/// One tailing reader: follows the LAC with long polls and reads every confirmed entry in
/// order until it has every measured entry (or the ledger is closed below them). Returns
/// when it held each entry it delivered, by entry id, each checked to be the next.
async fn tail_loop(reader: ReadHandle, progress: Arc<Progress>) -> anyhow::Result<Vec<Instant>> {
    let _stopped = Stopped(Arc::clone(&progress));
    let id = reader.id();
    let mut delivered = Vec::new();
    loop {
        let next = delivered.len() as i64;
        if next as u64 >= progress.measured.load(Ordering::SeqCst) {
            return Ok(delivered);
        }
        let lac = reader.last_add_confirmed();
        if lac >= next {
            let end = lac.min(next + READ_CHUNK - 1);
            let entries = reader
                .read(next, end)
                .await
                .with_context(|| format!("tailing read of ledger {id} entries {next}..={end}"))?;
            let now = Instant::now();
            for e in entries {
                if e.entry_id != delivered.len() as i64 {
                    bail!(
                        "tailing ledger {id}: expected entry {}, got {}",
                        delivered.len(),
                        e.entry_id
                    );
                }
                delivered.push(now);
            }
            continue;
        }
        if reader.is_closed() {
            return Ok(delivered);
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
            rate: None,
            readers: 1,
            explicit_lac_ms: None,
            parallel: false,
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
        for bad in [0.0, -1.0, f64::INFINITY] {
            let mut a = args();
            a.rate = Some(bad);
            assert!(validate(&a).unwrap_err().to_string().contains("--rate"));
        }
        let mut a = args();
        a.rate = Some(2000.0);
        assert!(validate(&a).is_ok());
    }
}
