//! Ensemble changes and add timeouts on an in-process cluster of real bookies over TCP.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use folio_client::{ClientConfig, ClientError, CreateOptions, DigestType, OpenOptions};

fn opts(e: usize, w: usize, a: usize) -> CreateOptions {
    CreateOptions::default()
        .quorum(e, w, a)
        .digest(DigestType::Crc32c)
        .password("pw")
}

/// Writes entries `from..to`, all pipelined, and checks their acknowledgements.
async fn write(w: &folio_client::LedgerHandle, from: i64, to: i64) {
    let acks: Vec<_> = (from..to).map(|e| w.append(payload(e))).collect();
    for (i, ack) in acks.into_iter().enumerate() {
        assert_eq!(patient(ack).await.unwrap(), from + i as i64);
    }
}

async fn read_all(cluster: &Cluster, ledger: i64, last: i64) {
    let r = patient(
        cluster
            .client()
            .await
            .open_ledger(ledger, b"pw", OpenOptions::recovery()),
    )
    .await
    .unwrap();
    assert_eq!(r.last_add_confirmed(), last);
    let entries = patient(r.read(0, last)).await.unwrap();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.payload, Bytes::from(payload(i as i64)), "entry {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bookie_failure_changes_the_ensemble_and_loses_nothing() {
    let mut cluster = Cluster::start(4).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts(3, 2, 2))).await.unwrap();
    write(&w, 0, 10).await;
    let before = client.ledger_metadata(w.id()).await.unwrap();
    let victim = before.current_ensemble().unwrap().1[1].clone();
    cluster.kill(&victim).await;
    write(&w, 10, 30).await;
    patient(w.close()).await.unwrap();
    let meta = client.ledger_metadata(w.id()).await.unwrap();
    assert_eq!(meta.ensembles.len(), 2, "{:?}", meta.ensembles);
    let (start, ensemble) = meta.current_ensemble().unwrap();
    assert!((10..=30).contains(&start), "fragment starts at {start}");
    assert!(!ensemble.contains(&victim));
    assert_eq!(meta.last_entry_id, 29);
    read_all(&cluster, w.id(), 29).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_bookie_failures_change_the_ensemble_twice() {
    let mut cluster = Cluster::start(5).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts(3, 3, 2))).await.unwrap();
    write(&w, 0, 10).await;
    let first = client.ledger_metadata(w.id()).await.unwrap();
    let a = first.current_ensemble().unwrap().1[0].clone();
    cluster.kill(&a).await;
    write(&w, 10, 20).await;
    // Entries 10..20 may all be acknowledged by the other two before the client sees `a`
    // gone, so the change that replaces it can come after them: wait for it, and write on
    // the new ensemble before the second failure, so that the two changes start at
    // different entries (failed 1 in a full test run when `b` was killed at once).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let second = loop {
        let m = client.ledger_metadata(w.id()).await.unwrap();
        if !m.current_ensemble().unwrap().1.contains(&a) {
            break m;
        }
        assert!(tokio::time::Instant::now() < deadline, "{:?}", m.ensembles);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    write(&w, 20, 25).await;
    let b = second.current_ensemble().unwrap().1[2].clone();
    assert_ne!(a, b);
    cluster.kill(&b).await;
    write(&w, 25, 30).await;
    patient(w.close()).await.unwrap();
    let meta = client.ledger_metadata(w.id()).await.unwrap();
    assert!(meta.ensembles.len() >= 3, "{:?}", meta.ensembles);
    let (_, last) = meta.current_ensemble().unwrap();
    assert!(!last.contains(&a) && !last.contains(&b));
    read_all(&cluster, w.id(), 29).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_replacement_bookie_fails_the_writer_and_keeps_acknowledged_entries() {
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts(3, 2, 2))).await.unwrap();
    write(&w, 0, 5).await;
    let victim = cluster.bookies[0].id.clone();
    cluster.kill(&victim).await;
    // Some of the next entries have the dead bookie in their write set.
    let acks: Vec<_> = (5..8).map(|e| w.append(payload(e))).collect();
    let mut errors = Vec::new();
    let mut acked = 4;
    for ack in acks {
        match patient(ack).await {
            Ok(e) => acked = e,
            Err(e) => errors.push(e),
        }
    }
    assert!(!errors.is_empty());
    assert_eq!(
        errors[0].to_string(),
        "not enough bookies: need 3, have 2 writable",
        "{errors:?}"
    );
    // A replacement bookie appears; recovery (whose write-backs may need it, with
    // Qw = Qa = 2) keeps every acknowledged entry and leaves all of them readable.
    cluster.add_bookie(false).await;
    let r = patient(
        cluster
            .client()
            .await
            .open_ledger(w.id(), b"pw", OpenOptions::recovery()),
    )
    .await
    .unwrap();
    let last = r.last_add_confirmed();
    assert!(last >= acked, "last {last} < acknowledged {acked}");
    let entries = patient(r.read(0, last)).await.unwrap();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.payload, Bytes::from(payload(i as i64)), "entry {i}");
    }
}

/// Recovery whose write-back hits a dead bookie changes the ensemble (a new fragment in
/// the metadata of the ledger in recovery) instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_write_back_replaces_a_dead_bookie() {
    let mut cluster = Cluster::start(4).await;
    let client = cluster.client().await;
    // Qa = Qw: every write-back needs the whole write set, so the dead bookie must go.
    let w = patient(client.create_ledger(opts(3, 3, 3))).await.unwrap();
    write(&w, 0, 5).await;
    let id = w.id();
    drop(w);
    let meta = client.ledger_metadata(id).await.unwrap();
    let ensemble = meta.ensembles[&0].clone();
    // Entry 5 is on two bookies only; the third is dead.
    let raw = folio_client::conn::Bookies::new(
        std::sync::Arc::new(folio_client::conn::TcpConnector),
        std::sync::Arc::new(test_config()),
    );
    let dm = folio_proto::DigestManager::new(id, folio_proto::DigestType::Crc32c, b"pw");
    let total: usize = (0..=5).map(|e| payload(e).len()).sum();
    let body = dm.compute(5, 4, total as i64, &payload(5));
    let key = folio_proto::master_key(b"pw");
    for b in &ensemble[..2] {
        patient(raw.call(
            b,
            folio_client::conn::req::add(id, 5, &key, body.clone(), false),
            PATIENCE,
        ))
        .await
        .unwrap();
    }
    cluster.kill(&ensemble[2]).await;
    let r = patient(
        cluster
            .client()
            .await
            .open_ledger(id, b"pw", OpenOptions::recovery()),
    )
    .await
    .unwrap();
    assert_eq!(r.last_add_confirmed(), 5);
    let meta = r.metadata();
    assert!(meta.is_closed());
    assert_eq!(meta.ensembles.len(), 2, "{:?}", meta.ensembles);
    let (start, tail) = meta.current_ensemble().unwrap();
    assert_eq!(
        start, 5,
        "the write-back fragment starts at the first recovered entry"
    );
    assert!(!tail.contains(&ensemble[2]));
    let entries = patient(r.read(0, 5)).await.unwrap();
    assert_eq!(entries[5].payload, Bytes::from(payload(5)));
}

/// A bookie that never completes its writes (its journal "sleeps") holds every entry
/// below Qa = Qw = E: the add-quorum timeout fails the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_quorum_timeout_with_a_sleeping_bookie() {
    let cluster = Cluster::start_with_memory(3, &[0, 1, 2]).await;
    let client = cluster
        .client_with(ClientConfig {
            // Long enough for healthy bookies on a loaded machine; the sleeper never answers.
            add_entry_quorum_timeout: Some(Duration::from_secs(3)),
            // Long enough that the per-bookie timeout does not replace the bookie first.
            add_entry_timeout: Duration::from_secs(600),
            ..test_config()
        })
        .await;
    let w = patient(client.create_ledger(opts(3, 3, 3))).await.unwrap();
    write(&w, 0, 3).await;
    let sleeper = client.ledger_metadata(w.id()).await.unwrap().ensembles[&0][1].clone();
    cluster.bookie(&sleeper).memory().hold_completions(true);
    let err = patient(w.append("never acknowledged")).await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Timeout { what } if what.contains("entry 3")),
        "{err}"
    );
    assert_eq!(w.last_add_confirmed(), 2);
    cluster.bookie(&sleeper).memory().release_completions();
}

/// A bookie that does not answer within the per-bookie add timeout is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_bookie_is_replaced_after_the_add_timeout() {
    let cluster = Cluster::start_with_memory(4, &[0, 1, 2, 3]).await;
    let client = cluster
        .client_with(ClientConfig {
            // Long enough for healthy bookies on a loaded machine; the sleeper never answers.
            add_entry_timeout: Duration::from_secs(3),
            ..test_config()
        })
        .await;
    let w = patient(client.create_ledger(opts(3, 3, 3))).await.unwrap();
    write(&w, 0, 3).await;
    let sleeper = client.ledger_metadata(w.id()).await.unwrap().ensembles[&0][2].clone();
    cluster.bookie(&sleeper).memory().hold_completions(true);
    write(&w, 3, 6).await;
    let meta = client.ledger_metadata(w.id()).await.unwrap();
    assert!(!meta.current_ensemble().unwrap().1.contains(&sleeper));
    patient(w.close()).await.unwrap();
    cluster.bookie(&sleeper).memory().release_completions();
    read_all(&cluster, w.id(), 5).await;
}

/// Metadata changed by someone else (the ledger put in recovery) makes the writer's
/// ensemble change fail with a fenced error, overwriting nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_change_on_a_ledger_in_recovery_is_fenced() {
    let mut cluster = Cluster::start(4).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts(3, 2, 2))).await.unwrap();
    write(&w, 0, 3).await;
    let id = w.id();
    let meta = cluster.metadata.read_ledger(id).await.unwrap();
    let mut in_recovery = meta.value.clone();
    in_recovery.state = folio_types::metadata::LedgerState::InRecovery;
    cluster
        .metadata
        .write_ledger(id, &in_recovery, meta.version)
        .await
        .unwrap();
    let victim = meta.value.ensembles[&0][0].clone();
    cluster.kill(&victim).await;
    // Entries 3 and 5 have the victim (position 0) in their write set.
    let acks: Vec<_> = (3..6).map(|e| w.append(payload(e))).collect();
    let mut fenced = false;
    for ack in acks {
        if let Err(e) = patient(ack).await {
            fenced |= e.is_fenced();
        }
    }
    assert!(fenced);
    let after = cluster.metadata.read_ledger(id).await.unwrap();
    assert_eq!(after.value, in_recovery, "the metadata was not overwritten");
}

/// A reader tailing an open ledger follows the writer onto a new fragment: a read that
/// fails on the ensemble it knew re-reads the metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tailing_reader_follows_an_ensemble_change() {
    let mut cluster = Cluster::start(4).await;
    let client = cluster.client().await;
    // Qw = Qa = 1: an entry lives on one bookie only, so the old ensemble cannot serve it.
    let w = patient(client.create_ledger(opts(3, 1, 1))).await.unwrap();
    // One at a time, so that each entry carries the LAC before it.
    for e in 0..6 {
        write(&w, e, e + 1).await;
    }
    let reader_client = cluster.client().await;
    let r = patient(reader_client.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 4);
    let victim = client.ledger_metadata(w.id()).await.unwrap().ensembles[&0][0].clone();
    cluster.kill(&victim).await;
    for e in 6..12 {
        write(&w, e, e + 1).await;
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut lac = r.last_add_confirmed();
    while lac < 10 {
        assert!(tokio::time::Instant::now() < deadline, "LAC stuck at {lac}");
        lac = patient(r.wait_for_lac_beyond(lac, Duration::from_millis(200)))
            .await
            .unwrap();
    }
    // (Entries 0 and 3 lived only on the dead bookie: read from the new fragment on.)
    let entries = patient(r.read(6, lac)).await.unwrap();
    for e in &entries {
        assert_eq!(
            e.payload,
            Bytes::from(payload(e.entry_id)),
            "entry {}",
            e.entry_id
        );
    }
    assert_eq!(entries.len() as i64, lac - 5);
    assert!(
        r.metadata().ensembles.len() >= 2,
        "the reader learnt the new fragment"
    );
    patient(w.close()).await.unwrap();
}

/// With two of three bookies gone no ack quorum can be fenced: recovery fails with a
/// message saying so, and the ledger is left in recovery rather than closed at a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_without_enough_bookies_to_fence_fails_and_closes_nothing() {
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts(3, 3, 2))).await.unwrap();
    write(&w, 0, 5).await;
    let id = w.id();
    drop(w);
    let ensemble = client.ledger_metadata(id).await.unwrap().ensembles[&0].clone();
    cluster.kill(&ensemble[0]).await;
    cluster.kill(&ensemble[1]).await;
    let err = patient(
        cluster
            .client()
            .await
            .open_ledger(id, b"pw", OpenOptions::recovery()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, ClientError::RecoveryFailed { ledger, reason } if *ledger == id && reason.contains("fencing")),
        "{err}"
    );
    let meta = client.ledger_metadata(id).await.unwrap();
    assert!(meta.is_in_recovery());
    assert!(!meta.is_closed());
}

/// With a delayed ensemble change, one failure out of Qw = 3, Qa = 2 does not change the
/// ensemble; a second one does. Every acknowledged entry stays readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_ensemble_change_replaces_bookies_only_when_an_ack_quorum_is_out_of_reach() {
    let mut cluster = Cluster::start(5).await;
    let client = cluster
        .client_with(ClientConfig {
            delay_ensemble_change: true,
            ..test_config()
        })
        .await;
    let w = patient(client.create_ledger(opts(3, 3, 2))).await.unwrap();
    write(&w, 0, 5).await;
    let ensemble = client.ledger_metadata(w.id()).await.unwrap().ensembles[&0].clone();
    cluster.kill(&ensemble[0]).await;
    write(&w, 5, 10).await;
    assert_eq!(
        client
            .ledger_metadata(w.id())
            .await
            .unwrap()
            .ensembles
            .len(),
        1,
        "one failure: the ensemble is kept"
    );
    cluster.kill(&ensemble[1]).await;
    write(&w, 10, 15).await;
    patient(w.close()).await.unwrap();
    let meta = client.ledger_metadata(w.id()).await.unwrap();
    assert_eq!(meta.ensembles.len(), 2, "{:?}", meta.ensembles);
    let (_, tail) = meta.current_ensemble().unwrap();
    assert!(!tail.contains(&ensemble[0]) && !tail.contains(&ensemble[1]));
    read_all(&cluster, w.id(), 14).await;
}

/// Rack-aware placement spreads each write set over the racks bookies publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rack_aware_placement_spreads_write_sets_over_racks() {
    let mut cluster = Cluster::start(0).await;
    for rack in ["/r1", "/r1", "/r2", "/r2", "/r3", "/r3"] {
        cluster.add_bookie_on_rack(true, Some(rack)).await;
    }
    let rack_of = |id: &folio_types::BookieId| {
        let i = cluster.bookies.iter().position(|b| &b.id == id).unwrap();
        i / 2
    };
    let client = cluster
        .client_with(ClientConfig {
            rack_aware: true,
            ..test_config()
        })
        .await;
    for _ in 0..10 {
        let w = patient(client.create_ledger(opts(3, 3, 2))).await.unwrap();
        let e = client.ledger_metadata(w.id()).await.unwrap().ensembles[&0].clone();
        let racks: std::collections::BTreeSet<usize> = e.iter().map(rack_of).collect();
        assert_eq!(racks.len(), 3, "{e:?}");
        patient(w.append("x")).await.unwrap();
        patient(w.close()).await.unwrap();
    }
}

/// A bookie that restarts between appends is reconnected to without an ensemble change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_bookie_keeps_its_place_in_the_ensemble() {
    let mut cluster = Cluster::start_with_memory(3, &[0, 1, 2]).await;
    let client = cluster.client().await;
    // No spare bookie: a failure would end this writer with "not enough bookies".
    let w = patient(client.create_ledger(opts(3, 3, 3))).await.unwrap();
    write(&w, 0, 5).await;
    let first = cluster.bookies[0].id.clone();
    cluster.restart_memory_bookie(&first).await;
    write(&w, 5, 10).await;
    patient(w.close()).await.unwrap();
    assert_eq!(
        client
            .ledger_metadata(w.id())
            .await
            .unwrap()
            .ensembles
            .len(),
        1
    );
    read_all(&cluster, w.id(), 9).await;
}
