//! The persistence property over real sockets: a writer appending as fast as it can while
//! readers open the ledger with recovery. Every acknowledged entry must be at or below the
//! sealed end and read back with the bytes that were written; two concurrent recoveries
//! agree on the end.

mod common;

use bytes::Bytes;
use common::*;
use folio_client::{CreateOptions, DigestType, OpenOptions};

async fn race(e: usize, w: usize, a: usize, ack_before_recovery: i64) {
    let cluster = Cluster::start(e.max(3)).await;
    let client = cluster.client().await;
    let writer = patient(
        client.create_ledger(
            CreateOptions::default()
                .quorum(e, w, a)
                .digest(DigestType::Crc32c)
                .password("pw"),
        ),
    )
    .await
    .unwrap();
    let id = writer.id();
    let writer_task = tokio::spawn(async move {
        // Keep up to 64 appends in flight until the ledger is fenced.
        let mut in_flight = std::collections::VecDeque::new();
        let mut acked = -1;
        let mut next = 0i64;
        loop {
            while in_flight.len() < 64 && next < 100_000 {
                in_flight.push_back(writer.append(payload(next)));
                next += 1;
            }
            let Some(f) = in_flight.pop_front() else {
                break;
            };
            match f.await {
                Ok(entry) => {
                    assert_eq!(entry, acked + 1, "acknowledgements in entry order");
                    acked = entry;
                }
                Err(err) => {
                    assert!(err.is_fenced(), "{err}");
                    // Everything after a fenced entry fails too.
                    for f in in_flight {
                        assert!(f.await.is_err());
                    }
                    break;
                }
            }
        }
        acked
    });
    // Let the writer get going, then recover twice at once.
    let probe = patient(client.open_ledger(id, b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    let mut lac = probe.last_add_confirmed();
    while lac < ack_before_recovery {
        lac = patient(probe.wait_for_lac_beyond(lac, std::time::Duration::from_secs(5)))
            .await
            .unwrap();
    }
    let (c1, c2) = (cluster.client().await, cluster.client().await);
    let (r1, r2) = patient(async {
        tokio::join!(
            c1.open_ledger(id, b"pw", OpenOptions::recovery()),
            c2.open_ledger(id, b"pw", OpenOptions::recovery()),
        )
    })
    .await;
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    let acked = patient(writer_task).await.unwrap();
    let last = r1.last_add_confirmed();
    assert_eq!(last, r2.last_add_confirmed(), "two recoveries agree");
    assert!(
        acked <= last,
        "acknowledged entry {acked} beyond the sealed end {last}"
    );
    let entries = patient(r2.read(0, last)).await.unwrap();
    assert_eq!(entries.len() as i64, last + 1);
    for e in &entries {
        assert_eq!(
            e.payload,
            Bytes::from(payload(e.entry_id)),
            "entry {}",
            e.entry_id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_recovery_keeps_every_acknowledged_entry_e3_w2_a2() {
    race(3, 2, 2, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_recovery_keeps_every_acknowledged_entry_e3_w3_a2() {
    race(3, 3, 2, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_recovery_keeps_every_acknowledged_entry_e5_w3_a2() {
    race(5, 3, 2, 20).await;
}
