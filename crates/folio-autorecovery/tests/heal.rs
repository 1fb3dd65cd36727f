//! Autorecovery on an in-process cluster (real bookies on the real storage engine, on
//! loopback ports): a bookie lost for good is healed: nothing stays queued, no ledger
//! names it, every entry has Qw copies (asked of each bookie), closed ledgers keep their
//! length, and an open ledger whose writer went quiet is closed with every acknowledged
//! entry. Then `recover` and decommission, client side.

#[path = "../../folio-client/tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Cluster, patient, payload};
use folio_autorecovery::{
    Auditor, AutoRecoveryConfig, CopyOptions, RecoverOptions, Worker, decommission, fragments,
    recover,
};
use folio_client::{Client, CreateOptions, LedgerHandle, OpenOptions, ReplicaAnswer};
use folio_proto::DigestManager;
use folio_types::{BookieId, EntryId, LedgerId};

fn fast_config() -> AutoRecoveryConfig {
    AutoRecoveryConfig {
        lost_bookie_recovery_delay: 0,
        open_ledger_grace_period: Duration::from_millis(500),
        poll_interval: Duration::from_millis(100),
        rereplicate_backoff: Duration::from_millis(200),
        failed_ledger_max_backoff: Duration::from_secs(2),
        ..AutoRecoveryConfig::default()
    }
}

/// A ledger written by the test, and what was acknowledged in it.
struct Written {
    id: LedgerId,
    acked: EntryId,
    closed_at: Option<EntryId>,
}

async fn write(
    client: &Client,
    q: (usize, usize, usize),
    n: i64,
    close: bool,
) -> (Written, LedgerHandle) {
    let w = client
        .create_ledger(
            CreateOptions::default()
                .quorum(q.0, q.1, q.2)
                .password("pw"),
        )
        .await
        .unwrap();
    let mut acked = -1;
    for e in 0..n {
        acked = w.append(payload(e)).await.unwrap();
    }
    if close {
        w.close().await.unwrap();
    }
    (
        Written {
            id: w.id(),
            acked,
            closed_at: close.then_some(acked),
        },
        w,
    )
}

/// Waits until nothing is queued and no ledger names `gone`.
async fn healed(client: &Client, gone: &BTreeSet<BookieId>) {
    patient(async {
        loop {
            let queued = client.metadata().list_underreplicated().await.unwrap();
            let naming = folio_autorecovery::ledgers_naming(client, gone)
                .await
                .unwrap();
            if queued.is_empty() && naming.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// Asks every bookie of every write set for every entry of `ledger`: each must have it.
async fn assert_qw_copies(client: &Client, ledger: LedgerId) {
    let meta = client.ledger_metadata(ledger).await.unwrap();
    assert!(meta.is_closed(), "ledger {ledger} is not closed: {meta:?}");
    let q = meta.quorum().unwrap();
    let digest = DigestManager::new(ledger, folio_proto::DigestType::Crc32, b"pw");
    for f in fragments(&meta) {
        for (position, bookie) in f.ensemble.iter().enumerate() {
            for entry in f.entries_of(&q, position) {
                assert_eq!(
                    client.probe_entry(bookie, &digest, entry).await,
                    ReplicaAnswer::Present,
                    "ledger {ledger} entry {entry} missing on {bookie} (position {position})"
                );
            }
        }
    }
}

async fn read_all(client: &Client, w: &Written) {
    let r = client
        .open_ledger(w.id, b"pw", OpenOptions::no_recovery())
        .await
        .unwrap();
    let last = r.last_add_confirmed();
    assert!(
        last >= w.acked,
        "ledger {}: last {last} < acked {}",
        w.id,
        w.acked
    );
    if let Some(c) = w.closed_at {
        assert_eq!(last, c, "closed ledger {} changed length", w.id);
    }
    if last >= 0 {
        let entries = r.read(0, last).await.unwrap();
        for e in entries.iter().filter(|e| e.entry_id <= w.acked) {
            assert_eq!(e.payload.as_ref(), payload(e.entry_id).as_slice());
        }
    }
}

/// The bookie named by the most ledgers.
async fn busiest(client: &Client, ledgers: &[LedgerId]) -> BookieId {
    let mut count: BTreeMap<BookieId, usize> = BTreeMap::new();
    for l in ledgers {
        for b in client.ledger_metadata(*l).await.unwrap().all_bookies() {
            *count.entry(b).or_default() += 1;
        }
    }
    count.into_iter().max_by_key(|(_, n)| *n).unwrap().0
}

/// The bookie of `among` named by the most ledgers.
async fn busiest_of(client: &Client, ledgers: &[LedgerId], among: &BTreeSet<BookieId>) -> BookieId {
    let mut count: BTreeMap<BookieId, usize> = among.iter().map(|b| (b.clone(), 0)).collect();
    for l in ledgers {
        for b in client.ledger_metadata(*l).await.unwrap().all_bookies() {
            if let Some(n) = count.get_mut(&b) {
                *n += 1;
            }
        }
    }
    count.into_iter().max_by_key(|(_, n)| *n).unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_bookie_is_healed_and_a_second_loss_still_reads_back() {
    let mut cluster = Cluster::start(5).await;
    let client = cluster.client().await;
    let mut written = Vec::new();
    for (q, n) in [
        ((3, 3, 2), 40),
        ((3, 2, 2), 40),
        ((3, 2, 2), 0),
        ((2, 2, 2), 25),
    ] {
        written.push(write(&client, q, n, true).await.0);
    }
    // An open ledger whose writer stays alive but quiet.
    let (open, writer) = write(&client, (3, 2, 2), 30, false).await;
    let ids: Vec<LedgerId> = written.iter().map(|w| w.id).chain([open.id]).collect();
    // The busiest bookie of the open ledger's ensemble, so the open ledger is hit too.
    let open_ensemble = client.ledger_metadata(open.id).await.unwrap().all_bookies();
    let lost = busiest_of(&client, &ids, &open_ensemble).await;

    let auditor = Auditor::start(
        cluster.client().await,
        fast_config(),
        BookieId::new("auditor-1:0".to_string()).unwrap(),
    );
    let worker = Worker::start(
        cluster.client().await,
        fast_config(),
        "worker-1".into(),
        &folio_env::SystemRng::new(),
    );
    cluster.kill(&lost).await;
    let gone = BTreeSet::from([lost.clone()]);
    healed(&client, &gone).await;

    for w in &written {
        assert_qw_copies(&client, w.id).await;
        read_all(&client, w).await;
    }
    // The open ledger was fenced and closed with every acknowledged entry.
    assert_qw_copies(&client, open.id).await;
    let meta = client.ledger_metadata(open.id).await.unwrap();
    assert!(meta.last_entry_id >= open.acked, "{meta:?}");
    assert!(writer.append("late").await.unwrap_err().is_fenced());
    assert!(
        worker
            .status()
            .ledgers_replicated
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );

    // A second bookie dies: every entry still has a copy and reads back.
    let survivors: Vec<BookieId> = cluster
        .bookies
        .iter()
        .map(|b| b.id.clone())
        .filter(|b| *b != lost)
        .collect();
    cluster.kill(&survivors[0]).await;
    let all_gone = BTreeSet::from([lost.clone(), survivors[0].clone()]);
    healed(&client, &all_gone).await;
    for w in &written {
        read_all(&client, w).await;
        assert_qw_copies(&client, w.id).await;
    }
    auditor.stop().await;
    worker.stop().await;
}

/// Copies lost on bookies that stay up (their disks lost an entry) are found by the
/// replicas check, counted in BookKeeper's gauge for entries below Qa, marked (BookKeeper's
/// check only counts), and repaired in place by the worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicas_check_marks_copies_lost_on_live_bookies_and_they_are_healed() {
    use std::sync::atomic::Ordering::Relaxed;
    let cluster = Cluster::start_with_memory(3, &[0, 1, 2]).await;
    let client = cluster.client().await;
    let (w, _) = write(&client, (3, 3, 2), 10, true).await;
    let (intact, _) = write(&client, (3, 3, 2), 10, true).await;
    let ensemble = client.ledger_metadata(w.id).await.unwrap().ensembles[&0].clone();
    // Entry 4 loses two of its three copies: one left, below Qa = 2. With Qa = 2 the
    // write returned after two acknowledgements, so a third copy may still be on its way:
    // wait for each copy to be there to lose it (it failed once in four runs otherwise).
    for b in &ensemble[..2] {
        patient(async {
            while !cluster.bookie(b).memory().lose_entry(w.id, 4) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }
    let config = AutoRecoveryConfig {
        check_all_ledgers_interval: Duration::ZERO,
        replicas_check_interval: Duration::from_secs(3600),
        placement_policy_check_interval: Duration::from_secs(3600),
        ..fast_config()
    };
    let auditor = Auditor::start(
        cluster.client().await,
        config.clone(),
        BookieId::new("auditor-1:0".to_string()).unwrap(),
    );
    let status = auditor.status().clone();
    patient(async {
        while status.replicas_checks.load(Relaxed) < 1 || status.placement_checks.load(Relaxed) < 1
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(status.ledgers_below_ack_quorum.load(Relaxed), 1);
    assert_eq!(status.ledgers_below_write_quorum.load(Relaxed), 0);
    assert_eq!(status.ledgers_with_no_replica.load(Relaxed), 0);
    // Three distinct bookies and no racks: every ensemble follows the policy.
    assert_eq!(status.ledgers_not_adhering.load(Relaxed), 0);
    let mark = client.metadata().get_underreplicated(w.id).await.unwrap();
    assert_eq!(
        mark.missing_replicas,
        ensemble[..2].iter().cloned().collect::<BTreeSet<_>>()
    );
    assert!(
        client
            .metadata()
            .get_underreplicated(intact.id)
            .await
            .is_err(),
        "an intact ledger was marked"
    );

    let worker = Worker::start(
        cluster.client().await,
        config,
        "worker-1".into(),
        &folio_env::SystemRng::new(),
    );
    healed(&client, &BTreeSet::new()).await;
    assert_qw_copies(&client, w.id).await;
    read_all(&client, &w).await;
    auditor.stop().await;
    worker.stop().await;
}

/// An Auditor whose audit waits for autorecovery to be enabled again still stops when asked
/// (a shutdown of `folio standalone` hung on it while autorecovery was disabled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auditor_waiting_on_disabled_autorecovery_stops_when_asked() {
    use std::sync::atomic::Ordering::Relaxed;
    let cluster = Cluster::start_with_memory(3, &[0, 1, 2]).await;
    let client = cluster.client().await;
    let auditor = Auditor::start(
        cluster.client().await,
        fast_config(),
        BookieId::new("auditor-1:0".to_string()).unwrap(),
    );
    let status = auditor.status().clone();
    patient(async {
        while status.audits.load(Relaxed) < 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // Disabled, then an audit asked for (triggeraudit rewrites the delay): it waits.
    let metadata = client.metadata();
    metadata.set_autorecovery_enabled(false).await.unwrap();
    let delay = metadata
        .lost_bookie_recovery_delay()
        .await
        .unwrap()
        .unwrap();
    metadata
        .set_lost_bookie_recovery_delay(delay)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        status.audits.load(Relaxed),
        1,
        "an audit ran while disabled"
    );
    patient(auditor.stop()).await;
}

/// A bookie re-addressed with its data: updateBookieInLedger is refused while the old id
/// is registered, then makes every ledger name the new id, and every entry has its Qw
/// copies at the ids the metadata names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_bookie_in_ledgers_moves_the_metadata_to_a_new_id() {
    use folio_autorecovery::{RenameOptions, update_bookie_in_ledgers};
    let mut cluster = Cluster::start_with_memory(4, &[0, 1, 2, 3]).await;
    let client = cluster.client().await;
    let mut written = Vec::new();
    for q in [(3, 3, 2), (3, 2, 2), (2, 2, 2), (4, 2, 2)] {
        written.push(write(&client, q, 12, true).await.0);
    }
    let ids: Vec<LedgerId> = written.iter().map(|w| w.id).collect();
    let old = busiest(&client, &ids).await;
    let naming_old = folio_autorecovery::ledgers_naming(&client, &BTreeSet::from([old.clone()]))
        .await
        .unwrap();
    assert!(!naming_old.is_empty());
    let options = RenameOptions {
        updates_per_sec: 0,
        limit: None,
    };
    let other = BookieId::new("10.9.9.9:3181".to_string()).unwrap();
    let e = update_bookie_in_ledgers(&client, &old, &other, &options, |_| {})
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is registered"), "{e}");

    let new = cluster.move_memory_bookie(&old).await;
    let mut told = Vec::new();
    let summary = update_bookie_in_ledgers(&client, &old, &new, &options, |l| told.push(l))
        .await
        .unwrap();
    assert_eq!(summary.updated, naming_old);
    assert_eq!(told, naming_old);
    assert!(summary.skipped.is_empty());
    let still = folio_autorecovery::ledgers_naming(&client, &BTreeSet::from([old.clone()]))
        .await
        .unwrap();
    assert!(still.is_empty(), "ledgers {still:?} still name {old}");
    for w in &written {
        assert_qw_copies(&client, w.id).await;
        read_all(&client, w).await;
    }
    // Nothing left to move: a second run updates nothing.
    let again = update_bookie_in_ledgers(&client, &old, &new, &options, |_| {})
        .await
        .unwrap();
    assert!(again.updated.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_and_decommission_move_every_replica_off_a_bookie() {
    let mut cluster = Cluster::start(4).await;
    let client = cluster.client().await;
    let mut written = Vec::new();
    for (q, n) in [((3, 3, 2), 30), ((3, 2, 2), 30), ((3, 1, 1), 20)] {
        written.push(write(&client, q, n, true).await.0);
    }
    let ids: Vec<LedgerId> = written.iter().map(|w| w.id).collect();
    let source = busiest(&client, &ids).await;
    // A writable bookie is refused: new ledgers could land on it meanwhile.
    let copy = CopyOptions::default();
    let e = decommission(&client, &source, true, &copy, &mut |_, _| {})
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("still registered as writable"),
        "{e}"
    );

    // Recover while the bookie is still up (Qw = 1 ledgers have their only copy there),
    // then with it gone decommission finds nothing left.
    let sources = BTreeSet::from([source.clone()]);
    let mut seen = 0;
    let summary = patient(recover(
        &client,
        &sources,
        &RecoverOptions::default(),
        &mut |_, r| seen += usize::from(r.is_some()),
    ))
    .await
    .unwrap();
    assert!(summary.failed.is_empty(), "{summary:?}");
    assert_eq!(seen, summary.ledgers);
    assert!(summary.entries > 0);
    assert!(
        folio_autorecovery::ledgers_naming(&client, &sources)
            .await
            .unwrap()
            .is_empty()
    );
    cluster.kill(&source).await;
    for w in &written {
        assert_qw_copies(&client, w.id).await;
        read_all(&client, w).await;
    }
    let summary = decommission(&client, &source, true, &copy, &mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(summary.ledgers, 0);
}

/// checkAllLedgers is scheduled from its ctime record, shared by every Auditor: a cluster
/// where it never ran runs it at once and records when; a new Auditor (a failover) waits out
/// the rest of the interval instead of starting over; `forceauditchecks` (the ctime moved
/// back 21 days) makes it due, and the running Auditor notices without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_of_all_ledgers_follows_its_ctime_across_auditors() {
    use folio_metadata::AuditorCheck;
    use std::sync::atomic::Ordering::Relaxed;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    write(&client, (3, 2, 2), 5, true).await;
    let metadata = client.metadata().clone();
    assert_eq!(
        metadata
            .auditor_check_ctime(AuditorCheck::CheckAllLedgers)
            .await
            .unwrap(),
        None
    );
    let config = AutoRecoveryConfig {
        check_all_ledgers_interval: Duration::from_secs(3600),
        ..fast_config()
    };
    let until = |auditor: &Auditor, n: u64| {
        let status = auditor.status().clone();
        async move {
            while status.checks_of_all_ledgers.load(Relaxed) < n {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    let first = Auditor::start(
        cluster.client().await,
        config.clone(),
        BookieId::new("auditor-1:0".to_string()).unwrap(),
    );
    patient(until(&first, 1)).await;
    let ran_at = patient(async {
        loop {
            if let Some(t) = metadata
                .auditor_check_ctime(AuditorCheck::CheckAllLedgers)
                .await
                .unwrap()
            {
                break t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(first.status().ledgers_checked.load(Relaxed) >= 1);
    first.stop().await;

    // The next Auditor finds the check done a moment ago: nothing to do for an hour.
    let second = Auditor::start(
        cluster.client().await,
        config.clone(),
        BookieId::new("auditor-2:0".to_string()).unwrap(),
    );
    patient(async {
        while !second.status().elected.load(Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // Several of its wakes (poll interval 100 ms) pass without a check.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        second.status().checks_of_all_ledgers.load(Relaxed),
        0,
        "a new Auditor ran checkAllLedgers again although it ran at {ran_at}"
    );

    // forceauditchecks: the ctime moved back 21 days makes it due at once.
    metadata
        .set_auditor_check_ctime(AuditorCheck::CheckAllLedgers, ran_at - 21 * 86_400_000)
        .await
        .unwrap();
    patient(until(&second, 1)).await;
    let now_recorded = metadata
        .auditor_check_ctime(AuditorCheck::CheckAllLedgers)
        .await
        .unwrap()
        .unwrap();
    assert!(now_recorded >= ran_at, "{now_recorded} < {ran_at}");
    second.stop().await;
}

/// BP-32 after re-replication: with an entry log per ledger, the bookie a closed ledger's
/// entries were copied to is sent a write close, so its log for the ledger rotates at its
/// next checkpoint (its only write close: the writer's close went to the others).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bookie_a_closed_ledger_was_copied_to_gets_a_write_close() {
    use std::sync::atomic::Ordering;
    let cluster = Cluster::start_per_ledger_logs(4).await;
    let client = cluster.client().await;
    let w = write(&client, (3, 3, 2), 20, true).await.0;
    let ensemble = client.ledger_metadata(w.id).await.unwrap().ensembles[&0].clone();
    let spare = cluster
        .bookies
        .iter()
        .find(|b| !ensemble.contains(&b.id))
        .expect("four bookies, three in the ensemble");
    let sources = BTreeSet::from([ensemble[0].clone()]);
    let summary = patient(recover(
        &client,
        &sources,
        &RecoverOptions::default(),
        &mut |_, _| {},
    ))
    .await
    .unwrap();
    assert!(
        summary.failed.is_empty() && summary.entries > 0,
        "{summary:?}"
    );
    let common::Store::Engine(engine) = &spare.store else {
        unreachable!("real storage only")
    };
    // The write close goes out on its own task after the copy: wait for it, generously.
    patient(async {
        loop {
            engine.engine().checkpoint().unwrap();
            if engine
                .entry_log_stats()
                .removed_by_write_close
                .load(Ordering::Relaxed)
                >= 1
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    read_all(&client, &w).await;
}
