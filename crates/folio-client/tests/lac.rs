//! The LAC seen by readers: piggybacked, explicit, long-polled; and adv ledgers, whose
//! LAC advances over the contiguous prefix only. Real bookies over TCP.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use folio_client::{ClientConfig, ClientError, CreateOptions, DigestType, OpenOptions};

fn opts() -> CreateOptions {
    CreateOptions::default()
        .quorum(3, 2, 2)
        .digest(DigestType::Crc32c)
        .password("pw")
}

/// A ledger with entries 0 and 1 (LAC 0 on the bookies), a reader opened without recovery
/// long-polling beyond LAC 0, and entry 2 appended: it carries LAC 1 to its bookies, which
/// wakes the poll (whose answer piggybacks entry 1). Returns the writer and the reader.
async fn long_poll_woken_by_entry_2(
    client: &folio_client::Client,
    opts: CreateOptions,
) -> (
    folio_client::LedgerHandle,
    std::sync::Arc<folio_client::ReadHandle>,
) {
    let w = patient(client.create_ledger(opts)).await.unwrap();
    patient(w.append(payload(0))).await.unwrap();
    patient(w.append(payload(1))).await.unwrap();
    let r = patient(client.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 0);
    let r = std::sync::Arc::new(r);
    let poller = {
        let r = r.clone();
        tokio::spawn(async move { r.wait_for_lac_beyond(0, PATIENCE).await })
    };
    patient(w.append(payload(2))).await.unwrap();
    let lac = patient(poller).await.unwrap().unwrap();
    assert!(lac >= 1, "lac {lac}");
    (w, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_wakes_on_a_new_entry() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let (w, r) = long_poll_woken_by_entry_2(&client, opts()).await;
    assert_eq!(
        patient(r.read(1, 1)).await.unwrap()[0].payload,
        Bytes::from(payload(1))
    );
    // A poll with nothing new returns the current LAC after its timeout.
    let same = patient(r.wait_for_lac_beyond(r.last_add_confirmed(), Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(same, r.last_add_confirmed());
    // Closing the ledger ends tailing at its last entry.
    patient(w.close()).await.unwrap();
    let end = patient(r.wait_for_lac_beyond(2, Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(end, 2);
    assert!(r.is_closed());
}

async fn lac_seen_by_reader_after_idle_writer(explicit: Option<Duration>) -> i64 {
    let cluster = Cluster::start(3).await;
    let client = cluster
        .client_with(ClientConfig {
            explicit_lac_interval: explicit,
            ..test_config()
        })
        .await;
    let w = patient(client.create_ledger(opts())).await.unwrap();
    patient(w.append(payload(0))).await.unwrap();
    let reader = cluster.client().await;
    let r = patient(reader.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    // The only entry carries LAC -1; only an explicit LAC tells the bookies about 0.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut lac = -1;
    while lac < 0 && tokio::time::Instant::now() < deadline {
        lac = patient(r.read_last_add_confirmed()).await.unwrap();
        if explicit.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    patient(w.close()).await.unwrap();
    lac
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_lac_reaches_readers_of_an_idle_writer() {
    assert_eq!(
        lac_seen_by_reader_after_idle_writer(Some(Duration::from_millis(100))).await,
        0
    );
    // Control: without explicit LAC the reader cannot know entry 0 is confirmed.
    assert_eq!(lac_seen_by_reader_after_idle_writer(None).await, -1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_answer_lac_read() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts().quorum(3, 3, 3)))
        .await
        .unwrap();
    for e in 0..4 {
        patient(w.append(payload(e))).await.unwrap();
    }
    let r = patient(client.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    // With Qw = E every bookie has entry 3 carrying LAC 2.
    assert_eq!(patient(r.try_read_last_add_confirmed()).await.unwrap(), 2);
    assert_eq!(patient(r.read_last_add_confirmed()).await.unwrap(), 2);
    patient(w.close()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv_ledger_lac_advances_over_the_contiguous_prefix() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts().adv(true)))
        .await
        .unwrap();
    assert!(w.is_adv());
    let three = w.append_with_id(3, payload(3));
    let zero = w.append_with_id(0, payload(0));
    let two = w.append_with_id(2, payload(2));
    assert_eq!(patient(zero).await.unwrap(), 0);
    assert_eq!(w.last_add_confirmed(), 0);
    let one = w.append_with_id(1, payload(1));
    for (f, e) in [(one, 1), (two, 2), (three, 3)] {
        assert_eq!(patient(f).await.unwrap(), e);
    }
    assert_eq!(w.last_add_confirmed(), 3);
    assert!(matches!(
        patient(w.append_with_id(2, "again")).await,
        Err(ClientError::DuplicateEntry { entry: 2, .. })
    ));
    assert!(matches!(
        patient(w.append("no id")).await,
        Err(ClientError::InvalidArgument(_))
    ));
    patient(w.close()).await.unwrap();
    let r = patient(client.open_ledger(w.id(), b"pw", OpenOptions::recovery()))
        .await
        .unwrap();
    let entries = patient(r.read(0, 3)).await.unwrap();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.payload, Bytes::from(payload(i as i64)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_entry_returns_it_once_confirmed_or_none_after_the_timeout() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts())).await.unwrap();
    patient(w.append(payload(0))).await.unwrap();
    let r = std::sync::Arc::new(
        patient(client.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
            .await
            .unwrap(),
    );
    assert_eq!(
        patient(r.wait_for_entry(0, Duration::from_millis(200)))
            .await
            .unwrap(),
        None,
        "entry 0 is not confirmed yet (no later entry carried its LAC)"
    );
    let waiter = {
        let r = r.clone();
        tokio::spawn(async move { r.wait_for_entry(1, PATIENCE).await })
    };
    for e in 1..3 {
        patient(w.append(payload(e))).await.unwrap();
    }
    let got = patient(waiter).await.unwrap().unwrap().unwrap();
    assert_eq!((got.entry_id, got.payload), (1, Bytes::from(payload(1))));
    patient(w.close()).await.unwrap();
    assert_eq!(patient(r.wait_for_entry(3, PATIENCE)).await.unwrap(), None);
}

/// A long poll brings the entry after the LAC it waited beyond (ENTRY_PIGGYBACK): the
/// tailing reader's next read of it asks no bookie. Shown by stopping every bookie before
/// that read: it still returns the entry, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_entry_a_long_poll_piggybacks_is_read_without_asking_a_bookie() {
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    // Every bookie holds every entry and acknowledges it (E3 Qw3 Qa3): whichever answers
    // the poll first holds entry 1 (a bookie outside an entry's write set answers with the
    // LAC alone).
    let (_w, r) = long_poll_woken_by_entry_2(&client, opts().quorum(3, 3, 3)).await;
    let ids: Vec<_> = cluster.bookies.iter().map(|b| b.id.clone()).collect();
    for id in ids {
        cluster.kill(&id).await;
    }
    let got = patient(r.read(1, 1)).await.unwrap();
    assert_eq!(got[0].payload, Bytes::from(payload(1)));
    // Delivered once: asked again, it needs a bookie, and none is up.
    assert!(patient(r.read(1, 1)).await.is_err());
}

/// BookKeeper's `ReadLastConfirmedOp`: the LAC read from the bookies stands only when the
/// answers cover every ack quorum (`Qw - Qa + 1` of a write set); with fewer the read fails
/// with the last bookie's error, since the highest LAC heard may be older than an entry
/// already acknowledged. `try_read_last_add_confirmed` takes the first answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_lac_read_fails_when_the_answers_cover_no_ack_quorum() {
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts().quorum(3, 3, 2)))
        .await
        .unwrap();
    for e in 0..4 {
        patient(w.append(payload(e))).await.unwrap();
    }
    let reader = cluster.client().await;
    let r = patient(reader.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 2);
    let meta = client.ledger_metadata(w.id()).await.unwrap();
    let ensemble = meta.current_ensemble().unwrap().1.to_vec();
    // Two of three answer: every write set has Qw - Qa + 1 = 2 answers.
    cluster.kill(&ensemble[0]).await;
    assert_eq!(patient(r.read_last_add_confirmed()).await.unwrap(), 2);
    // One of three: not enough to know the LAC is as recent as the last acknowledged entry.
    cluster.kill(&ensemble[1]).await;
    let e = patient(r.read_last_add_confirmed()).await.unwrap_err();
    assert!(
        matches!(e, ClientError::BookieUnreachable { ref bookie, .. } if ensemble[..2].contains(bookie)),
        "{e}"
    );
    // The first answer is enough for tryReadLastAddConfirmed.
    assert_eq!(patient(r.try_read_last_add_confirmed()).await.unwrap(), 2);
    // The open without recovery still succeeds, at the LAC the metadata proves (-1: the
    // ledger's only fragment is its last), as BookKeeper's would not.
    let again = patient(reader.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    assert_eq!(again.last_add_confirmed(), -1);
}

/// A client of its own whose long polls ask one bookie at a time without speculation
/// (each poll is the one bookie's to answer), and its reader of `ledger`, opened without
/// recovery.
async fn reader_without_speculation(
    cluster: &Cluster,
    ledger: i64,
) -> (
    folio_client::Client,
    std::sync::Arc<folio_client::ReadHandle>,
) {
    let reader = cluster
        .client_with(ClientConfig {
            speculative_read_lac_timeout: Duration::from_secs(3600),
            ..test_config()
        })
        .await;
    let r = patient(reader.open_ledger(ledger, b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    (reader, std::sync::Arc::new(r))
}

/// A tailing reader's long poll asks one bookie while that bookie answers, not every
/// bookie of the ensemble: each asked bookie reads the piggybacked entry and sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tailing_long_poll_asks_one_bookie() {
    let cluster = Cluster::start_with_memory(3, &[0, 1, 2]).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(CreateOptions::default().quorum(3, 3, 2).password("pw")))
        .await
        .unwrap();
    patient(w.append(payload(0))).await.unwrap();
    let (reader, r) = reader_without_speculation(&cluster, w.id()).await;
    let reads = || -> u64 { cluster.bookies.iter().map(|b| b.memory().reads()).sum() };
    let before = reads();
    let polls = 20;
    for e in 1..=polls {
        let lac = r.last_add_confirmed();
        let poller = {
            let r = r.clone();
            tokio::spawn(async move { r.wait_for_lac_beyond(lac, PATIENCE).await })
        };
        patient(w.append(payload(e))).await.unwrap();
        let moved = patient(poller).await.unwrap().unwrap();
        assert!(moved > lac, "poll {e}: LAC {moved} after {lac}");
        // Delivered from the poll's answer.
        let got = patient(r.read(lac + 1, moved)).await.unwrap();
        assert_eq!(got[0].payload, Bytes::from(payload(lac + 1)));
    }
    // One read per poll (its piggybacked entry), a few more if a poll's LAC moved past
    // the entry it carried; asking all three bookies would be three per poll.
    let read = reads() - before;
    assert!(
        read >= polls as u64 && read < 2 * polls as u64,
        "{read} entry reads for {polls} polls"
    );
    assert_eq!(reader.stats().speculative_long_polls, 0);
}

/// A bookie that fails a long poll (here: it is gone) is followed by the next at once,
/// not after the speculative timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_moves_past_a_failed_bookie_at_once() {
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(CreateOptions::default().quorum(3, 3, 2).password("pw")))
        .await
        .unwrap();
    patient(w.append(payload(0))).await.unwrap();
    patient(w.append(payload(1))).await.unwrap();
    let reader = cluster
        .client_with(ClientConfig {
            speculative_read_lac_timeout: Duration::from_secs(3600),
            ..test_config()
        })
        .await;
    let r = patient(reader.open_ledger(w.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 0);
    // Entry 2 carries LAC 1 to the bookies. A poll beyond LAC 0 asks the replicas of
    // entry 1 first, position 1 of the ensemble first of all: gone.
    patient(w.append(payload(2))).await.unwrap();
    let first = client.ledger_metadata(w.id()).await.unwrap().ensembles[&0][1].clone();
    cluster.kill(&first).await;
    let lac = patient(r.wait_for_lac_beyond(0, PATIENCE)).await.unwrap();
    assert_eq!(lac, 1);
    assert_eq!(reader.stats().speculative_long_polls, 0);
}

/// A long poll on a ledger none of whose entries has reached the bookies yet is held by
/// the bookie until the first adds (or the poll's end), not answered NoLedger at once:
/// a reader tailing a new or idle empty ledger waits instead of asking again in a loop,
/// and a NoLedger at the poll's end does not start the wait over at the next bookie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_an_empty_ledger_waits_for_its_first_entries() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts())).await.unwrap();
    let (_reader, r) = reader_without_speculation(&cluster, w.id()).await;
    assert_eq!(r.last_add_confirmed(), -1);
    let wait = Duration::from_secs(2);
    let started = std::time::Instant::now();
    let lac = patient(r.wait_for_lac_beyond(-1, wait)).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(lac, -1);
    // Answered NoLedger at once, the poll returned within milliseconds.
    assert!(
        waited >= wait * 9 / 10,
        "the poll returned after {waited:?}"
    );
    // Asking the next bookie after the first one's NoLedger at the end would wait again.
    assert!(waited < wait * 5 / 2, "the poll returned after {waited:?}");
    // Held, the poll is woken by the first entries.
    let poller = {
        let r = r.clone();
        tokio::spawn(async move { r.wait_for_entry(0, PATIENCE).await })
    };
    patient(w.append(payload(0))).await.unwrap();
    patient(w.append(payload(1))).await.unwrap();
    let got = patient(poller).await.unwrap().unwrap().expect("entry 0");
    assert_eq!(got.payload, Bytes::from(payload(0)));
}

/// A reader whose bookies are all gone gets no answer to its long polls: it pauses after
/// each (1 ms doubling to 100 ms) rather than asking again at once, so a loop of
/// `wait_for_entry` does not spin, and it still returns at the wait's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_whose_bookies_are_all_gone_pauses_between_long_polls() {
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let w = patient(client.create_ledger(opts())).await.unwrap();
    patient(w.append(payload(0))).await.unwrap();
    patient(w.append(payload(1))).await.unwrap();
    let (reader, r) = reader_without_speculation(&cluster, w.id()).await;
    assert_eq!(r.last_add_confirmed(), 0);
    let ensemble = client.ledger_metadata(w.id()).await.unwrap().ensembles[&0].clone();
    for bookie in &ensemble {
        cluster.kill(bookie).await;
    }
    let wait = Duration::from_secs(2);
    let started = std::time::Instant::now();
    let got = patient(r.wait_for_entry(1, wait)).await.unwrap();
    assert!(
        got.is_none(),
        "entry 1 read with every bookie gone: {got:?}"
    );
    assert!(
        started.elapsed() >= wait,
        "returned after {:?}",
        started.elapsed()
    );
    // 2 s of 1, 2, 4 ... 64 ms pauses, then 100 ms ones: about 25 polls. Asked again at
    // once, a poll that fails in under a millisecond makes thousands.
    let polls = reader.stats().unanswered_long_polls;
    assert!(
        (5..=40).contains(&polls),
        "{polls} unanswered long polls in {wait:?}"
    );
}
