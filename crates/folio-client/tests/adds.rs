//! A ledger writer's adds and a reader's reads, over real bookies and sockets, where
//! connections misbehave: an add or a read queued on a pooled connection that breaks
//! before its answer is sent once more on a new connection (not counted as the bookie
//! failing), and the adds still on their way when the writer stops reach their bookies
//! anyway.

mod common;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use folio_client::conn::{Bookies, ConnectFuture, Connector, Stream, TcpConnector, req};
use folio_client::{Client, CreateOptions, DigestType, OpenOptions};
use folio_env::{SystemClock, SystemRng};
use folio_types::BookieId;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

fn opts() -> CreateOptions {
    CreateOptions::default()
        .quorum(3, 3, 2)
        .digest(DigestType::Crc32c)
        .password("pw")
}

/// A TCP stream whose writes fail once `writes` of them went through: a pooled
/// connection the bookie dropped, noticed only when used.
struct Breaking {
    inner: TcpStream,
    writes: usize,
}

impl AsyncRead for Breaking {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Breaking {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.writes == 0 {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(_))) {
            self.writes -= 1;
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Connects by TCP; the first connection to `bookie` breaks after one write, and every
/// connection to it is made only after `delay`.
struct Flaky {
    bookie: BookieId,
    delay: Duration,
    breaking: bool,
    made: AtomicUsize,
}

impl Connector for Flaky {
    fn connect<'a>(&'a self, bookie: &'a BookieId) -> ConnectFuture<'a> {
        Box::pin(async move {
            let s = TcpStream::connect(bookie.as_str()).await?;
            if bookie != &self.bookie {
                return Ok(Box::new(s) as Box<dyn Stream>);
            }
            tokio::time::sleep(self.delay).await;
            if self.breaking && self.made.fetch_add(1, Ordering::SeqCst) == 0 {
                return Ok(Box::new(Breaking {
                    inner: s,
                    writes: 1,
                }) as Box<dyn Stream>);
            }
            Ok(Box::new(s) as Box<dyn Stream>)
        })
    }
}

fn client(cluster: &Cluster, connector: Arc<Flaky>) -> Client {
    Client::with_seams(
        cluster.metadata.clone(),
        test_config(),
        connector,
        Arc::new(SystemRng::new()),
        Arc::new(SystemClock),
    )
}

/// The entry ids `bookie` holds of `ledger` among `0..n`, asked over a connection of
/// its own.
async fn held(bookie: &BookieId, ledger: i64, n: i64) -> Vec<i64> {
    let raw = Bookies::new(Arc::new(TcpConnector), Arc::new(test_config()));
    let mut held = Vec::new();
    for e in 0..n {
        if raw
            .call(bookie, req::read(ledger, e, None), Duration::from_secs(30))
            .await
            .is_ok()
        {
            held.push(e);
        }
    }
    held
}

/// With no spare bookie, a bookie counted as failed would end the writer ("not enough
/// bookies"): the adds caught by the broken connection must be sent again instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_caught_by_a_broken_pooled_connection_is_sent_again() {
    let cluster = Cluster::start(3).await;
    let flaky = cluster.bookies[1].id.clone();
    let connector = Arc::new(Flaky {
        bookie: flaky.clone(),
        delay: Duration::ZERO,
        breaking: true,
        made: AtomicUsize::new(0),
    });
    let client = client(&cluster, connector.clone());
    let w = patient(client.create_ledger(opts())).await.unwrap();
    // One at a time: the first makes the connections (its write to the flaky bookie goes
    // through), the next are routed on them, and the flaky one's next write fails.
    for e in 0..5 {
        assert_eq!(patient(w.append(payload(e))).await.unwrap(), e);
    }
    patient(w.close()).await.unwrap();
    let meta = client.ledger_metadata(w.id()).await.unwrap();
    assert_eq!(meta.ensembles.len(), 1, "the bookie was replaced: {meta:?}");
    // The close needs only the ack quorum: the flaky bookie's adds may still be on their
    // way (its second write, the failure and the new connection can come after the close
    // on a busy machine), so wait for them, generously.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut on_flaky = Vec::new();
    while tokio::time::Instant::now() < deadline {
        on_flaky = patient(held(&flaky, w.id(), 5)).await;
        if on_flaky.len() == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        connector.made.load(Ordering::SeqCst) >= 2,
        "never reconnected"
    );
    assert_eq!(on_flaky, vec![0, 1, 2, 3, 4]);
}

/// The writer closes once every entry has its ack quorum (two of three), while the adds
/// to the third bookie still wait for its connection: they reach it after the writer is
/// gone, so that every entry has all three copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_still_on_their_way_when_the_writer_stops_reach_their_bookie() {
    let cluster = Cluster::start(3).await;
    let slow = cluster.bookies[2].id.clone();
    let connector = Arc::new(Flaky {
        bookie: slow.clone(),
        delay: Duration::from_secs(2),
        breaking: false,
        made: AtomicUsize::new(0),
    });
    let client = client(&cluster, connector);
    let w = patient(client.create_ledger(opts())).await.unwrap();
    let appends: Vec<_> = (0..5).map(|e| w.append(payload(e))).collect();
    for (e, a) in appends.into_iter().enumerate() {
        assert_eq!(patient(a).await.unwrap(), e as i64);
    }
    let ledger = w.id();
    patient(w.close()).await.unwrap();
    drop(w);
    // The close did not wait for the slow bookie; its copies come once it is connected.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let got = held(&slow, ledger, 5).await;
        if got == vec![0, 1, 2, 3, 4] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slow bookie holds only {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A read queued on a pooled connection that breaks before its answer is sent once more
/// on a new connection to the same bookie, as an add is: here the ledger has one replica,
/// so a read that moved on instead would find no other bookie to ask and fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_caught_by_a_broken_pooled_connection_is_sent_again() {
    let cluster = Cluster::start(1).await;
    let only = cluster.bookies[0].id.clone();
    let writer = cluster.client().await;
    let opts = CreateOptions::default()
        .quorum(1, 1, 1)
        .digest(DigestType::Crc32c)
        .password("pw");
    let w = patient(writer.create_ledger(opts)).await.unwrap();
    for e in 0..4 {
        assert_eq!(patient(w.append(payload(e))).await.unwrap(), e);
    }
    patient(w.close()).await.unwrap();
    let connector = Arc::new(Flaky {
        bookie: only,
        delay: Duration::ZERO,
        breaking: true,
        made: AtomicUsize::new(0),
    });
    let reader = client(&cluster, connector.clone());
    let r = patient(reader.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    // One at a time: the first connection takes one request, and the next one sent on
    // it (pooled by then) finds it broken.
    for e in 0..4 {
        let got = patient(r.read(e, e)).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].payload, payload(e), "entry {e}");
    }
    assert!(
        connector.made.load(Ordering::SeqCst) >= 2,
        "never reconnected"
    );
}

/// Many ledgers written at once, each from its own task with appends in flight, on two
/// worker threads: the answers of three connections race the appends for each writer's
/// lock, and those that find it held wait in its inbox for the holder. Half the ledgers
/// keep few appends in flight (taken on the caller's task), half many (queued for the
/// writer's task once 16 are pending). Every append is acknowledged with its own id in
/// order, the LAC and the close say the last entry, and every bookie of the write quorum
/// (all three) has every entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_racing_appends_on_many_ledgers_are_all_taken() {
    const LEDGERS: usize = 24;
    const ENTRIES: i64 = 150;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let mut tasks = Vec::new();
    for i in 0..LEDGERS {
        let in_flight = if i % 2 == 0 { 4 } else { 40 };
        let w = patient(client.create_ledger(opts())).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let mut window = std::collections::VecDeque::new();
            for e in 0..ENTRIES {
                window.push_back((e, w.append(payload(e))));
                if window.len() == in_flight {
                    let (want, a) = window.pop_front().unwrap();
                    assert_eq!(patient(a).await.unwrap(), want);
                }
            }
            for (want, a) in window {
                assert_eq!(patient(a).await.unwrap(), want);
            }
            assert_eq!(w.last_add_confirmed(), ENTRIES - 1);
            patient(w.close()).await.unwrap();
            w.id()
        }));
    }
    let mut ledgers = Vec::new();
    for t in tasks {
        ledgers.push(t.await.unwrap());
    }
    let all: Vec<i64> = (0..ENTRIES).collect();
    for &ledger in &ledgers {
        let meta = client.ledger_metadata(ledger).await.unwrap();
        assert_eq!(meta.last_entry_id, ENTRIES - 1, "ledger {ledger}");
        for b in &cluster.bookies {
            // The third copy of the last entries may still be on its way after the close.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            loop {
                let got = held(&b.id, ledger, ENTRIES).await;
                if got == all {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{} holds {} of ledger {ledger}'s {ENTRIES} entries",
                    b.id,
                    got.len()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
