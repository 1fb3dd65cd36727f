//! Speculative reads: a replica that accepts the connection but never answers (its
//! connections lead to a socket nobody reads) does not hold a read up until the read
//! timeout; after `speculative_read_timeout` the next replica is asked too and answers.
//! Real bookies over TCP; the silent replica is a real listening socket.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use folio_client::conn::{ConnectFuture, Connector, Stream};
use folio_client::{Client, ClientConfig, OpenOptions};
use folio_env::{SystemClock, SystemRng};
use folio_types::BookieId;

/// Connects to bookies by TCP, except that `silent` is reached at a socket that accepts
/// connections and never answers (a bookie stuck in a long GC pause or a full disk).
struct SilentConnector {
    silent: BookieId,
    hole: std::net::SocketAddr,
}

impl Connector for SilentConnector {
    fn connect<'a>(&'a self, bookie: &'a BookieId) -> ConnectFuture<'a> {
        Box::pin(async move {
            let addr = if bookie == &self.silent {
                self.hole.to_string()
            } else {
                bookie.as_str().to_string()
            };
            let s = tokio::net::TcpStream::connect(addr).await?;
            Ok(Box::new(s) as Box<dyn Stream>)
        })
    }
}

/// A socket that accepts connections and holds them open without reading a byte.
async fn black_hole() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    addr
}

/// Writes 10 entries at E3 Qw2 Qa2, closes the ledger; returns it and its first bookie.
async fn closed_ledger(cluster: &Cluster) -> (i64, BookieId) {
    let client = cluster.client().await;
    let id = write_closed_ledger(&client, (3, 2, 2), 10).await;
    let first = client.ledger_metadata(id).await.unwrap().ensembles[&0][0].clone();
    (id, first)
}

fn reader(
    cluster: &Cluster,
    silent: BookieId,
    hole: std::net::SocketAddr,
    config: ClientConfig,
) -> Client {
    Client::with_seams(
        cluster.metadata.clone(),
        config,
        Arc::new(SilentConnector { silent, hole }),
        Arc::new(SystemRng::new()),
        Arc::new(SystemClock),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_replica_is_overtaken_by_a_speculative_read() {
    let cluster = Cluster::start(3).await;
    let (ledger, silent) = closed_ledger(&cluster).await;
    let hole = black_hole().await;
    // The read timeout is far beyond the test's patience: only speculation can finish
    // the reads of the entries whose first replica is the silent one.
    let client = reader(
        &cluster,
        silent.clone(),
        hole,
        ClientConfig {
            read_timeout: Duration::from_secs(3600),
            speculative_read_timeout: Duration::from_millis(100),
            ..test_config()
        },
    );
    let r = patient(client.open_ledger(ledger, b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    let entries = patient(r.read(0, 9)).await.unwrap();
    let got: Vec<(i64, Bytes)> = entries
        .into_iter()
        .map(|e| (e.entry_id, e.payload))
        .collect();
    let want: Vec<(i64, Bytes)> = (0..10).map(|e| (e, Bytes::from(payload(e)))).collect();
    assert_eq!(got, want);
    // With E3 Qw2 the silent bookie (position 0) is the first replica of entries 0, 3, 6
    // and 9: each of them was answered by the replica asked speculatively.
    let stats = client.stats();
    assert!(stats.speculative_read_wins >= 4, "{stats:?}");
    assert!(
        stats.speculative_reads >= stats.speculative_read_wins,
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_speculation_a_silent_replica_costs_a_timeout_then_the_next_answers() {
    let cluster = Cluster::start(3).await;
    let (ledger, silent) = closed_ledger(&cluster).await;
    let hole = black_hole().await;
    let client = reader(
        &cluster,
        silent,
        hole,
        ClientConfig {
            // Long enough for a healthy bookie on a loaded machine.
            read_timeout: Duration::from_secs(5),
            speculative_read_timeout: Duration::ZERO,
            ..test_config()
        },
    );
    let r = patient(client.open_ledger(ledger, b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    let entries = patient(r.read(0, 3)).await.unwrap();
    assert_eq!(entries.len(), 4);
    assert_eq!(entries[3].payload, Bytes::from(payload(3)));
    // Again, now on the pooled connection to the silent bookie (a request queued on a
    // live connection has no timer of its own: the read's keeps its time).
    let again = patient(r.read(3, 3)).await.unwrap();
    assert_eq!(again[0].payload, Bytes::from(payload(3)));
    assert_eq!(client.stats().speculative_reads, 0);
    assert_eq!(client.stats().speculative_read_wins, 0);
}

/// A ledger at E3 Qw3 Qa2 with entries 0-4 written (LAC 3 on the bookies, carried by
/// entry 4), and a reader opened at LAC 2 whose client reaches the ledger's first bookie,
/// the first asked about entry 3, at a socket that never answers. The writer's client and
/// ledger are returned too: they stay open for the test.
async fn a_reader_behind_a_silent_first_bookie(
    cluster: &Cluster,
    speculative_read_lac_timeout: Duration,
) -> (
    Client,
    folio_client::LedgerHandle,
    Client,
    folio_client::ReadHandle,
) {
    let writer = cluster.client().await;
    let opts = folio_client::CreateOptions::default()
        .quorum(3, 3, 2)
        .digest(folio_client::DigestType::Crc32c)
        .password("pw");
    let w = patient(writer.create_ledger(opts)).await.unwrap();
    for e in 0..4 {
        patient(w.append(payload(e))).await.unwrap();
    }
    let silent = writer.ledger_metadata(w.id()).await.unwrap().ensembles[&0][0].clone();
    let hole = black_hole().await;
    let client = reader(
        cluster,
        silent,
        hole,
        ClientConfig {
            read_timeout: Duration::from_secs(3600),
            speculative_read_lac_timeout,
            ..test_config()
        },
    );
    let r = patient(client.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 2);
    patient(w.append(payload(4))).await.unwrap();
    (writer, w, client, r)
}

/// A long poll whose first bookie never answers gets its answer from the next bookie once
/// `speculative_read_lac_timeout` passes (the poll's own wait is far longer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_bookie_is_overtaken_by_a_speculative_long_poll() {
    let cluster = Cluster::start(3).await;
    let (_writer, _ledger, client, r) =
        a_reader_behind_a_silent_first_bookie(&cluster, Duration::from_millis(100)).await;
    let lac = patient(r.wait_for_lac_beyond(2, Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(lac, 3);
    assert!(
        client.stats().speculative_long_polls >= 1,
        "{:?}",
        client.stats()
    );
}

/// With `speculative_read_lac_timeout` zero a long poll goes to every bookie at once (the
/// Java client's `parallel` long poll, `folio bench tail --parallel`): a silent first bookie
/// costs nothing (asked alone, it would hold the poll for its hour), and nothing is counted
/// as speculation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_without_a_speculation_delay_asks_every_bookie_at_once() {
    let cluster = Cluster::start(3).await;
    let (_writer, _ledger, client, r) =
        a_reader_behind_a_silent_first_bookie(&cluster, Duration::ZERO).await;
    let lac = patient(r.wait_for_lac_beyond(2, Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(lac, 3);
    assert_eq!(
        client.stats().speculative_long_polls,
        0,
        "{:?}",
        client.stats()
    );
}
