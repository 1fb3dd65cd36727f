//! `folio bench bookie`: one bookie over the wire, like BookKeeper's `benchmark bookie`.
//!
//! Opens one v3 connection to `--bookie` and adds CRC32C-digested entries (built with
//! folio-proto's `DigestManager`, as a client would), spread round robin over `--ledgers`
//! fresh ledger ids. Two phases: a latency phase (sequential adds, one in flight) and a
//! throughput phase (`--in-flight` adds pipelined on the connection). Each add's latency runs
//! from writing its request to reading its response, which the bookie sends once the entry
//! is durable in its journal.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::{Bytes, BytesMut};
use clap::Args;
use folio_proto::pb::{self, OperationType};
use folio_proto::{DigestManager, DigestType, FrameDecoder, Status, v3};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::report::{Latencies, Summary};

/// The password every benchmark ledger uses.
const PASSWORD: &[u8] = b"folio-bench";
/// How long without any response before the benchmark gives up.
const STALL_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Args, Debug, Clone)]
pub struct BookieBenchArgs {
    /// The bookie to add to, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub bookie: String,
    /// Payload bytes per entry (the digest header comes on top).
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    pub entry_size: usize,
    /// Adds in each phase.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub entries: u64,
    /// Adds kept outstanding in the throughput phase.
    #[arg(long, value_name = "K", default_value_t = 1000)]
    pub in_flight: u64,
    /// Ledgers the adds are spread over, round robin.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub ledgers: u64,
    /// Skip the latency phase (sequential adds).
    #[arg(long)]
    pub skip_latency: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: BookieBenchArgs) -> anyhow::Result<()> {
    validate(&a)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let out = rt.block_on(bench(&a))?;
    println!("{out}");
    Ok(())
}

fn validate(a: &BookieBenchArgs) -> anyhow::Result<()> {
    for (name, v) in [
        ("--entries", a.entries),
        ("--in-flight", a.in_flight),
        ("--ledgers", a.ledgers),
    ] {
        if v == 0 {
            bail!("{name} must be at least 1");
        }
    }
    if a.entry_size > 4 * 1024 * 1024 {
        bail!(
            "--entry-size {} is over 4 MiB, more than a bookie accepts in one frame",
            a.entry_size
        );
    }
    Ok(())
}

async fn bench(a: &BookieBenchArgs) -> anyhow::Result<String> {
    let stream = tokio::time::timeout(Duration::from_secs(30), TcpStream::connect(&a.bookie))
        .await
        .map_err(|_| anyhow::anyhow!("connecting to bookie {} timed out", a.bookie))?
        .with_context(|| format!("cannot connect to bookie {}", a.bookie))?;
    stream.set_nodelay(true).ok();
    // With the global --tls-* flags, StartTLS first, as every client of a TLS bookie.
    let stream: Box<dyn folio_client::conn::Stream> = match crate::client_tls::client_tls()? {
        Some(tls) => {
            let id = folio_types::BookieId::new(a.bookie.as_str())
                .map_err(|e| anyhow::anyhow!("--bookie {}: {e}", a.bookie))?;
            tokio::time::timeout(Duration::from_secs(30), tls.upgrade(Box::new(stream), &id))
                .await
                .map_err(|_| anyhow::anyhow!("TLS with bookie {} timed out", a.bookie))?
                .with_context(|| format!("TLS with bookie {}", a.bookie))?
        }
        None => Box::new(stream),
    };
    let mut conn = Conn {
        stream,
        decoder: FrameDecoder::new(),
        buf: vec![0u8; 64 * 1024],
        next_txn: 1,
    };
    // Fresh ledger ids per run (and per phase), so reruns against one bookie never collide.
    let base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(1)
        & 0x0000_7fff_ffff_ffff;
    let payload = Bytes::from(
        (0..a.entry_size)
            .map(|i| b'a' + (i % 26) as u8)
            .collect::<Vec<u8>>(),
    );
    let latency = if a.skip_latency {
        None
    } else {
        Some(phase(&mut conn, a, base << 8, 1, &payload, "latency").await?)
    };
    let throughput = phase(
        &mut conn,
        a,
        (base << 8) + 128,
        a.in_flight,
        &payload,
        "throughput",
    )
    .await?;

    let bytes_fields = |m: &mut Map<String, Value>, in_flight: u64| {
        m.insert("entry_size".into(), json!(a.entry_size));
        m.insert("in_flight".into(), json!(in_flight));
        m.insert("ledgers".into(), json!(a.ledgers));
    };
    if a.json {
        let mut extra = Map::new();
        extra.insert("bench".into(), json!("bookie"));
        extra.insert("bookie".into(), json!(a.bookie));
        bytes_fields(&mut extra, a.in_flight);
        if let Some(l) = &latency {
            let mut m = Map::new();
            bytes_fields(&mut m, 1);
            extra.insert("latency_phase".into(), l.to_json(m));
        }
        let mut m = Map::new();
        bytes_fields(&mut m, a.in_flight);
        extra.insert("throughput_phase".into(), throughput.to_json(m));
        // The top-level figures are the throughput phase's.
        return Ok(throughput.to_json(extra).to_string());
    }
    let mut out = format!(
        "folio bench bookie: {} entries of {} B per phase to {}, {} ledger(s)\n",
        a.entries, a.entry_size, a.bookie, a.ledgers
    );
    if let Some(l) = &latency {
        out.push_str(&format!("latency phase (1 in flight):\n{}\n", l.to_text()));
    }
    out.push_str(&format!(
        "throughput phase ({} in flight):\n{}",
        a.in_flight,
        throughput.to_text()
    ));
    Ok(out)
}

struct Conn {
    stream: Box<dyn folio_client::conn::Stream>,
    decoder: FrameDecoder,
    buf: Vec<u8>,
    next_txn: u64,
}

impl Conn {
    /// The next response frame, waiting up to [`STALL_TIMEOUT`] for it.
    async fn next_response(&mut self) -> anyhow::Result<pb::Response> {
        loop {
            if let Some(frame) = self
                .decoder
                .next_frame()
                .context("bad frame from the bookie")?
            {
                return v3::decode_response(frame).context("bad response from the bookie");
            }
            let n = tokio::time::timeout(STALL_TIMEOUT, self.stream.read(&mut self.buf))
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "the bookie answered nothing for {} s",
                        STALL_TIMEOUT.as_secs()
                    )
                })?
                .context("reading from the bookie")?;
            if n == 0 {
                bail!("the bookie closed the connection");
            }
            self.decoder.feed(&self.buf[..n]);
        }
    }
}

/// `a.entries` adds with up to `in_flight` outstanding, over ledgers `first_ledger..`.
async fn phase(
    conn: &mut Conn,
    a: &BookieBenchArgs,
    first_ledger: i64,
    in_flight: u64,
    payload: &Bytes,
    name: &str,
) -> anyhow::Result<Summary> {
    let digests: Vec<DigestManager> = (0..a.ledgers)
        .map(|i| DigestManager::new(first_ledger + i as i64, DigestType::Crc32c, PASSWORD))
        .collect();
    let master_key = Bytes::copy_from_slice(&folio_proto::master_key(PASSWORD));
    let progress = progress_bar(a, name);
    let mut outstanding: HashMap<u64, (i64, i64, Instant)> = HashMap::new();
    let mut latencies = Latencies::new();
    let mut out = BytesMut::new();
    let (mut sent, mut done) = (0u64, 0u64);
    let start = Instant::now();
    while done < a.entries {
        while sent < a.entries && sent - done < in_flight {
            let l = (sent % a.ledgers) as usize;
            let entry = (sent / a.ledgers) as i64;
            let ledger = first_ledger + l as i64;
            let length = (entry + 1) * payload.len() as i64;
            let body = digests[l].compute(entry, entry - 1, length, payload);
            let txn = conn.next_txn;
            conn.next_txn += 1;
            let req = pb::Request {
                header: v3::request_header(OperationType::AddEntry, txn, None),
                add_request: Some(pb::AddRequest {
                    flag: None,
                    ledger_id: ledger,
                    entry_id: entry,
                    master_key: master_key.clone(),
                    body,
                    write_flags: None,
                }),
                ..Default::default()
            };
            v3::encode_request_frame(&req, &mut out);
            outstanding.insert(txn, (ledger, entry, Instant::now()));
            sent += 1;
        }
        if !out.is_empty() {
            conn.stream
                .write_all(&out)
                .await
                .context("writing to the bookie")?;
            out.clear();
        }
        // At least one response, then whatever else is already buffered.
        loop {
            let resp = conn.next_response().await?;
            let txn = resp.header.txn_id;
            let Some((ledger, entry, t0)) = outstanding.remove(&txn) else {
                bail!("the bookie answered txn {txn}, which was not asked");
            };
            let status = resp
                .effective_status()
                .context("bad status from the bookie")?;
            if status != Status::Ok {
                bail!("add of ledger {ledger} entry {entry} failed: {status:?}");
            }
            latencies.record(t0.elapsed());
            done += 1;
            progress.inc(1);
            if conn.decoder.buffered() == 0 || done == a.entries {
                break;
            }
        }
    }
    let elapsed = start.elapsed();
    progress.finish_and_clear();
    Ok(Summary {
        entries: a.entries,
        bytes: a.entries * payload.len() as u64,
        elapsed,
        latencies,
        cpu_seconds: None,
    })
}

fn progress_bar(a: &BookieBenchArgs, name: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() || a.json {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(a.entries), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{name} {{bar:40}} {{pos}}/{{len}} adds {{per_sec}} eta {{eta}}"
        ))
        .expect("static progress template"),
    );
    pb
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> BookieBenchArgs {
        BookieBenchArgs {
            bookie: "127.0.0.1:1".into(),
            entry_size: 100,
            entries: 10,
            in_flight: 4,
            ledgers: 1,
            skip_latency: false,
            json: true,
        }
    }

    #[test]
    fn zero_counts_are_refused_by_name() {
        let mut a = args();
        a.in_flight = 0;
        let e = validate(&a).unwrap_err().to_string();
        assert!(e.contains("--in-flight"), "{e}");
        let mut a = args();
        a.entry_size = 5 * 1024 * 1024;
        let e = validate(&a).unwrap_err().to_string();
        assert!(e.contains("--entry-size"), "{e}");
        assert!(validate(&args()).is_ok());
    }
}
