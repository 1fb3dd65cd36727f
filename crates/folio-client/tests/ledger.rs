//! Create, append, close, open (with and without recovery), read, fencing and recovery,
//! on an in-process cluster of real bookies over TCP.

mod common;

use bytes::Bytes;
use common::*;
use folio_client::conn::{Bookies, TcpConnector, req};
use folio_client::{ClientError, CreateOptions, DigestType, OpenOptions};
use folio_proto::DigestManager;
use std::sync::Arc;

fn opts() -> CreateOptions {
    CreateOptions::default()
        .quorum(3, 2, 2)
        .digest(DigestType::Crc32c)
        .password("pw")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_appends_close_and_read_back() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts().custom("app", "test")))
        .await
        .unwrap();
    let acks: Vec<_> = (0..50).map(|e| w.append(payload(e))).collect();
    for (i, ack) in acks.into_iter().enumerate() {
        assert_eq!(patient(ack).await.unwrap(), i as i64);
    }
    assert_eq!(w.last_add_confirmed(), 49);
    patient(w.close()).await.unwrap();
    patient(w.close()).await.unwrap();
    assert!(matches!(
        patient(w.append("after close")).await,
        Err(ClientError::LedgerClosed { .. })
    ));

    let meta = client.ledger_metadata(w.id()).await.unwrap();
    assert!(meta.is_closed());
    assert_eq!(meta.last_entry_id, 49);
    let total: usize = (0..50).map(|e| payload(e).len()).sum();
    assert_eq!(meta.length, total as u64);
    assert_eq!(
        meta.custom_metadata.get("app").map(|v| &v[..]),
        Some(&b"test"[..])
    );

    let r = patient(client.open_ledger(w.id(), b"pw", OpenOptions::recovery()))
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 49);
    let entries = patient(r.read(0, 49)).await.unwrap();
    assert_eq!(entries.len(), 50);
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.entry_id, i as i64);
        assert_eq!(e.payload, Bytes::from(payload(i as i64)));
    }
    assert!(matches!(
        patient(r.read(40, 50)).await,
        Err(ClientError::ReadBeyondLac {
            entry: 50,
            lac: 49,
            ..
        })
    ));
    assert!(client.list_ledgers().await.unwrap().contains(&w.id()));
    client.delete_ledger(w.id()).await.unwrap();
    assert!(!client.list_ledgers().await.unwrap().contains(&w.id()));
    assert_eq!(
        client
            .open_ledger(w.id(), b"pw", OpenOptions::recovery())
            .await
            .unwrap_err(),
        ClientError::NoSuchLedger { ledger: w.id() }
    );
}

/// Seed 000: a writer writes 10 entries, a reader opens with recovery, the writer's next
/// append fails fenced, the reader sees last entry 9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_with_recovery_fences_the_writer() {
    let cluster = Cluster::start(3).await;
    let writer_client = cluster.client().await;
    let reader_client = cluster.client().await;
    let w = patient(writer_client.create_ledger(opts())).await.unwrap();
    for e in 0..10 {
        assert_eq!(patient(w.append(payload(e))).await.unwrap(), e);
    }
    let r = patient(reader_client.open_ledger(w.id(), b"pw", OpenOptions::recovery()))
        .await
        .unwrap();
    assert!(r.is_closed());
    assert_eq!(r.last_add_confirmed(), 9);
    let err = patient(w.append("too late")).await.unwrap_err();
    assert!(err.is_fenced(), "{err}");
    assert_eq!(err.to_string(), format!("ledger {} is fenced", w.id()));
    assert!(patient(w.close()).await.unwrap_err().is_fenced());
    assert!(
        patient(w.close()).await.unwrap_err().is_fenced(),
        "a second close says the same"
    );
    let entries = patient(r.read(0, 9)).await.unwrap();
    assert_eq!(entries[9].payload, Bytes::from(payload(9)));
    assert_eq!(
        reader_client
            .ledger_metadata(w.id())
            .await
            .unwrap()
            .last_entry_id,
        9
    );
}

async fn recover_ledger_with(n: i64) {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts().quorum(3, 3, 2)))
        .await
        .unwrap();
    let acks: Vec<_> = (0..n).map(|e| w.append(payload(e))).collect();
    for ack in acks {
        patient(ack).await.unwrap();
    }
    // The writer "crashes": its handle is dropped without closing.
    let id = w.id();
    drop(w);
    let r = patient(
        cluster
            .client()
            .await
            .open_ledger(id, b"pw", OpenOptions::recovery()),
    )
    .await
    .unwrap();
    assert_eq!(r.last_add_confirmed(), n - 1);
    let meta = r.metadata();
    assert!(meta.is_closed());
    assert_eq!(meta.last_entry_id, n - 1);
    let total: usize = (0..n).map(|e| payload(e).len()).sum();
    assert_eq!(meta.length, total as u64, "recovered length");
    if n > 0 {
        let entries = patient(r.read(0, n - 1)).await.unwrap();
        assert_eq!(entries.len() as i64, n);
        assert_eq!(
            entries[(n - 1) as usize].payload,
            Bytes::from(payload(n - 1))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_of_an_empty_ledger() {
    recover_ledger_with(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_of_a_one_entry_ledger() {
    recover_ledger_with(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_of_a_hundred_entry_ledger() {
    recover_ledger_with(100).await;
}

/// A last entry written to fewer than Qa bookies is either recovered onto its whole write
/// set or absent, and every reader agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partially_written_last_entry_is_recovered_everywhere_or_nowhere() {
    for round in 0..3 {
        let cluster = Cluster::start(3).await;
        let client = cluster.client().await;
        let w = patient(client.create_ledger(opts().quorum(3, 3, 2)))
            .await
            .unwrap();
        for e in 0..5 {
            patient(w.append(payload(e))).await.unwrap();
        }
        let id = w.id();
        drop(w);
        // Entry 5 reaches one bookie only (a writer that died while sending it).
        let meta = client.ledger_metadata(id).await.unwrap();
        let ensemble = meta.current_ensemble().unwrap().1.to_vec();
        let raw = Bookies::new(Arc::new(TcpConnector), Arc::new(test_config()));
        let dm = DigestManager::new(id, folio_proto::DigestType::Crc32c, b"pw");
        let total: usize = (0..=5).map(|e| payload(e).len()).sum();
        let body = dm.compute(5, 4, total as i64, &payload(5));
        let key = folio_proto::master_key(b"pw");
        let target = &ensemble[round % 3];
        patient(raw.call(target, req::add(id, 5, &key, body, false), PATIENCE))
            .await
            .unwrap();

        let (ca, cb) = (cluster.client().await, cluster.client().await);
        let (a, b) = patient(async {
            tokio::join!(
                ca.open_ledger(id, b"pw", OpenOptions::recovery()),
                cb.open_ledger(id, b"pw", OpenOptions::recovery()),
            )
        })
        .await;
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.last_add_confirmed(), b.last_add_confirmed());
        let last = a.last_add_confirmed();
        assert!(last == 4 || last == 5, "last entry {last}");
        let third = patient(cluster.client().await.open_ledger(
            id,
            b"pw",
            OpenOptions::no_recovery(),
        ))
        .await
        .unwrap();
        assert_eq!(third.last_add_confirmed(), last);
        if last == 5 {
            // Recovered: every bookie of the write set holds it now.
            for bookie in &ensemble {
                let resp = patient(raw.call(bookie, req::read(id, 5, None), PATIENCE))
                    .await
                    .unwrap();
                let body = resp.read_response.unwrap().body.unwrap();
                assert_eq!(
                    dm.verify(&body, 5).unwrap().payload,
                    Bytes::from(payload(5))
                );
            }
            assert_eq!(
                patient(b.read(5, 5)).await.unwrap()[0].payload,
                Bytes::from(payload(5))
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_without_fencing() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts())).await.unwrap();
    patient(w.append("a")).await.unwrap();
    let err = patient(client.open_ledger(w.id(), b"wrong", OpenOptions::recovery()))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ClientError::Unauthorized {
            ledger: w.id(),
            bookie: None
        }
    );
    // Nothing was fenced or marked: the writer goes on.
    assert_eq!(patient(w.append("b")).await.unwrap(), 1);
    assert!(
        !client
            .ledger_metadata(w.id())
            .await
            .unwrap()
            .is_in_recovery()
    );
    patient(w.close()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_beyond_the_lac_needs_unconfirmed_reads() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts())).await.unwrap();
    for e in 0..5 {
        patient(w.append(payload(e))).await.unwrap();
    }
    // Bookies know LAC 3 (piggybacked on entry 4).
    let r = patient(client.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    assert!(!r.is_closed());
    assert_eq!(r.last_add_confirmed(), 3);
    let err = patient(r.read(0, 4)).await.unwrap_err();
    assert_eq!(
        err,
        ClientError::ReadBeyondLac {
            ledger: w.id(),
            entry: 4,
            lac: 3
        }
    );
    let got = patient(r.read_unconfirmed(4, 4)).await.unwrap();
    assert_eq!(got[0].payload, Bytes::from(payload(4)));
    assert_eq!(
        patient(r.read_unconfirmed(5, 5)).await.unwrap_err(),
        ClientError::NoSuchEntry {
            ledger: w.id(),
            entry: 5
        }
    );
    // Opening without recovery did not fence.
    assert_eq!(patient(w.append(payload(5))).await.unwrap(), 5);
    assert_eq!(patient(r.read_last_add_confirmed()).await.unwrap(), 4);
    patient(w.close()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creation_checks_quorums_and_bookie_count() {
    let cluster = Cluster::start(2).await;
    let client = cluster.client().await;
    let too_few = || async {
        client
            .create_ledger(opts().quorum(3, 2, 2))
            .await
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        too_few().await,
        "not enough bookies: need 3, have 2 writable"
    );
    // A read-only bookie (say, its disk full) does not count, and the error says it is there.
    let readonly = folio_types::BookieId::new("127.0.0.1:1".to_string()).unwrap();
    let _registration = cluster
        .metadata
        .register_bookie(
            &readonly,
            folio_metadata::BookieMode::ReadOnly,
            &Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        too_few().await,
        "not enough bookies: need 3, have 2 writable (1 more registered read-only)"
    );
    for (e, w, a) in [(2, 3, 2), (2, 2, 3), (2, 2, 0)] {
        assert!(matches!(
            client.create_ledger(opts().quorum(e, w, a)).await,
            Err(ClientError::InvalidArgument(_))
        ));
    }
    let w = patient(client.create_ledger(opts().quorum(2, 2, 1)))
        .await
        .unwrap();
    let huge = vec![0u8; folio_proto::DEFAULT_MAX_FRAME_SIZE];
    assert!(matches!(
        patient(w.append(huge)).await,
        Err(ClientError::InvalidArgument(m)) if m.contains("exceeds")
    ));
    assert_eq!(patient(w.append("x")).await.unwrap(), 0);
    patient(w.close()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_digest_type_round_trips() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    for d in [
        DigestType::Crc32,
        DigestType::Crc32c,
        DigestType::Mac,
        DigestType::Dummy,
    ] {
        let w = patient(client.create_ledger(opts().digest(d)))
            .await
            .unwrap();
        patient(w.append("payload")).await.unwrap();
        patient(w.close()).await.unwrap();
        let r = patient(client.open_ledger(w.id(), b"pw", OpenOptions::recovery()))
            .await
            .unwrap();
        assert_eq!(
            &patient(r.read(0, 0)).await.unwrap()[0].payload[..],
            b"payload"
        );
    }
}

/// A replica with a bad digest is skipped for the next one; when every replica is bad the
/// error names the ledger, the entry and a bookie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_mismatch_tries_the_next_replica() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts())).await.unwrap();
    let id = w.id();
    let meta = client.ledger_metadata(id).await.unwrap();
    let ensemble = meta.ensembles[&0].clone();
    let raw = Bookies::new(Arc::new(TcpConnector), Arc::new(test_config()));
    let key = folio_proto::master_key(b"pw");
    let good = DigestManager::new(id, folio_proto::DigestType::Crc32c, b"pw");
    // A copy damaged after its digest was computed (one payload byte flipped).
    let bad = |entry: i64, length: i64, payload: &[u8]| {
        let mut b = good.compute(entry, -1, length, payload).to_vec();
        *b.last_mut().unwrap() ^= 0x55;
        Bytes::from(b)
    };
    // Entry 0 (write set: positions 0 and 1): a bad copy first, a good one second.
    // Entry 1 (positions 1 and 2): bad everywhere.
    let copies = [
        (0, &ensemble[0], bad(0, 5, b"hello")),
        (0, &ensemble[1], good.compute(0, -1, 5, b"hello")),
        (1, &ensemble[1], bad(1, 10, b"world")),
        (1, &ensemble[2], bad(1, 10, b"world")),
    ];
    for (entry, bookie, body) in copies {
        patient(raw.call(bookie, req::add(id, entry, &key, body, false), PATIENCE))
            .await
            .unwrap();
    }
    let r = patient(client.open_ledger(id, b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    let got = patient(r.read_unconfirmed(0, 0)).await.unwrap();
    assert_eq!(&got[0].payload[..], b"hello");
    let err = patient(r.read_unconfirmed(1, 1)).await.unwrap_err();
    match &err {
        ClientError::DigestMismatch {
            ledger,
            entry,
            bookie,
        } => {
            assert_eq!((*ledger, *entry), (id, 1));
            assert!(ensemble[1..].contains(bookie));
        }
        other => panic!("expected a digest mismatch, got {other}"),
    }
    drop(w);
}

/// The same life cycle with `sqlite://` metadata: write, fence by recovery, read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_with_sqlite_metadata() {
    let cluster = Cluster::start_sqlite(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts())).await.unwrap();
    for e in 0..10 {
        patient(w.append(payload(e))).await.unwrap();
    }
    let r = patient(
        cluster
            .client()
            .await
            .open_ledger(w.id(), b"pw", OpenOptions::recovery()),
    )
    .await
    .unwrap();
    assert_eq!(r.last_add_confirmed(), 9);
    assert!(patient(w.append("late")).await.unwrap_err().is_fenced());
    let entries = patient(r.read(0, 9)).await.unwrap();
    assert_eq!(entries[3].payload, Bytes::from(payload(3)));
    assert_eq!(client.list_ledgers().await.unwrap(), vec![w.id()]);
}

/// A bookie that restarts is reconnected to: reads go on through the new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_reconnect_to_a_restarted_bookie() {
    let mut cluster = Cluster::start_with_memory(3, &[0, 1, 2]).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts().quorum(3, 1, 1)))
        .await
        .unwrap();
    for e in 0..6 {
        patient(w.append(payload(e))).await.unwrap();
    }
    patient(w.close()).await.unwrap();
    let r = patient(client.open_ledger(w.id(), b"pw", OpenOptions::recovery()))
        .await
        .unwrap();
    assert_eq!(patient(r.read(0, 5)).await.unwrap().len(), 6);
    // With Qw = 1 every entry has one copy: the restarted bookie must be reached again.
    for b in cluster
        .bookies
        .iter()
        .map(|b| b.id.clone())
        .collect::<Vec<_>>()
    {
        cluster.restart_memory_bookie(&b).await;
        let entries = patient(r.read(0, 5)).await.unwrap();
        for e in &entries {
            assert_eq!(e.payload, Bytes::from(payload(e.entry_id)));
        }
    }
}
