//! Recovery resuming after an earlier recovery attempt that changed the ensemble and then
//! failed, on an in-process cluster of real bookies over TCP (simulator seeds 1659, 6753).

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use folio_client::conn::{Bookies, TcpConnector, req};
use folio_client::{CreateOptions, DigestType, OpenOptions};
use folio_proto::DigestManager;
use folio_types::metadata::LedgerState;

/// Written by an earlier recovery's write-back ensemble change (folio-client's
/// `recover::WRITER_FRAGMENT_KEY`): where the writer's last fragment was.
const WRITER_FRAGMENT_KEY: &str = "folio.recovery.writer-fragment";

/// The writer put entries 0-7 on w0 w1 w2 (their piggybacked LAC is -1: nothing was
/// confirmed to the bookies). An earlier recovery found entries 0-5, had 0-4 on an ack
/// quorum, failed to write 5 back to w2 and recorded a write-back fragment {5: w0 w1 s0};
/// then it stopped. Now w1 is gone for good. Before the fix every later recovery started
/// again at entry 0 (LAC -1), wrote entry 0 back to the last fragment's w1, failed
/// "before the last fragment" and left the ledger IN_RECOVERY forever, though a spare
/// bookie was free. Recovery must start at the last fragment (entry 5), replace w1 there,
/// and close at entry 7 with every entry readable. The ack quorum is the write quorum,
/// so a write-back needs w1's position: the outcome does not depend on answer order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_resumes_at_an_earlier_recoverys_write_back_fragment() {
    let mut cluster = Cluster::start(5).await;
    let client = cluster.client().await;
    let w = patient(
        client.create_ledger(
            CreateOptions::default()
                .quorum(3, 3, 3)
                .digest(DigestType::Crc32c)
                .password("pw"),
        ),
    )
    .await
    .unwrap();
    let id = w.id();
    drop(w);
    let versioned = patient(cluster.metadata.read_ledger(id)).await.unwrap();
    let writer = versioned.value.ensembles[&0].clone();
    let spares: Vec<_> = cluster
        .bookies
        .iter()
        .map(|b| b.id.clone())
        .filter(|b| !writer.contains(b))
        .collect();
    assert_eq!(spares.len(), 2);

    // The writer's entries, on every bookie of its ensemble, each carrying LAC -1.
    let raw = Bookies::new(Arc::new(TcpConnector), Arc::new(test_config()));
    let dm = DigestManager::new(id, folio_proto::DigestType::Crc32c, b"pw");
    let key = folio_proto::master_key(b"pw");
    let mut length = 0i64;
    for entry in 0..=7 {
        length += payload(entry).len() as i64;
        let body = dm.compute(entry, -1, length, &payload(entry));
        for bookie in &writer {
            patient(raw.call(
                bookie,
                req::add(id, entry, &key, body.clone(), false),
                PATIENCE,
            ))
            .await
            .unwrap();
        }
    }

    // What the earlier recovery left in the metadata.
    let mut meta = versioned.value.clone();
    meta.state = LedgerState::InRecovery;
    meta.ensembles.insert(
        5,
        vec![writer[0].clone(), writer[1].clone(), spares[0].clone()],
    );
    let names: Vec<&str> = writer.iter().map(|b| b.as_str()).collect();
    meta.custom_metadata.insert(
        WRITER_FRAGMENT_KEY.to_string(),
        format!("0|{}", names.join(",")).into_bytes(),
    );
    patient(cluster.metadata.write_ledger(id, &meta, versioned.version))
        .await
        .unwrap();

    cluster.kill(&writer[1]).await;

    let r = patient(
        cluster
            .client()
            .await
            .open_ledger(id, b"pw", OpenOptions::recovery()),
    )
    .await
    .expect("recovery completes while a spare bookie is free");
    let closed = r.metadata();
    assert!(closed.is_closed());
    assert_eq!(closed.last_entry_id, 7, "no entry lost");
    assert_eq!(closed.length, length as u64, "recovered length");
    // Nothing was rewritten below the last fragment: its ensemble is the writer's.
    assert_eq!(closed.ensembles[&0], writer);
    let last = closed.ensembles[&5].clone();
    assert!(!last.contains(&writer[1]), "the gone bookie is replaced");
    assert_eq!(last[0], writer[0]);
    let entries = patient(r.read(0, 7)).await.unwrap();
    for (e, got) in entries.iter().enumerate() {
        assert_eq!(got.payload, Bytes::from(payload(e as i64)), "entry {e}");
    }
}

/// Simulator seed 6753: an earlier recovery (which saw no LAC) recorded a write-back
/// fragment {3: w0 w1 s0} and stopped before writing anything back to s0. The writer's
/// entries 0-7 carry LAC up to 6, all confirmed on w2. A later recovery must still write
/// entries 3-7 back to s0, where the metadata puts them: starting after the LAC left 3-6
/// with a copy missing in their fragment. With Qa = Qw the close waits for every copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_fills_an_earlier_recoverys_write_back_fragment_below_the_lac() {
    let cluster = Cluster::start(4).await;
    let client = cluster.client().await;
    let w = patient(
        client.create_ledger(
            CreateOptions::default()
                .quorum(3, 3, 3)
                .digest(DigestType::Crc32c)
                .password("pw"),
        ),
    )
    .await
    .unwrap();
    let id = w.id();
    drop(w);
    let versioned = patient(cluster.metadata.read_ledger(id)).await.unwrap();
    let writer = versioned.value.ensembles[&0].clone();
    let spare = cluster
        .bookies
        .iter()
        .map(|b| b.id.clone())
        .find(|b| !writer.contains(b))
        .unwrap();

    let raw = Bookies::new(Arc::new(TcpConnector), Arc::new(test_config()));
    let dm = DigestManager::new(id, folio_proto::DigestType::Crc32c, b"pw");
    let key = folio_proto::master_key(b"pw");
    let mut length = 0i64;
    for entry in 0..=7 {
        length += payload(entry).len() as i64;
        // Each entry carries the previous one as confirmed, as a sequential writer's do.
        let body = dm.compute(entry, entry - 1, length, &payload(entry));
        for bookie in &writer {
            patient(raw.call(
                bookie,
                req::add(id, entry, &key, body.clone(), false),
                PATIENCE,
            ))
            .await
            .unwrap();
        }
    }

    let mut meta = versioned.value.clone();
    meta.state = LedgerState::InRecovery;
    let fragment = vec![writer[0].clone(), writer[1].clone(), spare.clone()];
    meta.ensembles.insert(3, fragment.clone());
    let names: Vec<&str> = writer.iter().map(|b| b.as_str()).collect();
    meta.custom_metadata.insert(
        WRITER_FRAGMENT_KEY.to_string(),
        format!("0|{}", names.join(",")).into_bytes(),
    );
    patient(cluster.metadata.write_ledger(id, &meta, versioned.version))
        .await
        .unwrap();

    let r = patient(
        cluster
            .client()
            .await
            .open_ledger(id, b"pw", OpenOptions::recovery()),
    )
    .await
    .unwrap();
    assert_eq!(r.metadata().last_entry_id, 7);
    assert_eq!(r.metadata().ensembles[&3], fragment);
    // Every entry of the write-back fragment is on its new bookie.
    for entry in 3..=7 {
        let resp = patient(raw.call(&spare, req::read(id, entry, None), PATIENCE))
            .await
            .unwrap_or_else(|e| panic!("entry {entry} is missing on {spare}: {e}"));
        let body = resp.read_response.unwrap().body.unwrap();
        assert_eq!(
            dm.verify(&body, entry).unwrap().payload,
            Bytes::from(payload(entry))
        );
    }
}
