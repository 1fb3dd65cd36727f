//! GetListOfEntriesOfLedger against a bookie that never answers it (BookKeeper's
//! DbLedgerStorage leaves it unanswered): a bookie whose registration does not say it is a
//! Folio bookie is asked once, then not again for `NO_ENTRY_LISTS_FOR` (the caller falls
//! back to probes at once instead of waiting the read timeout on every ledger); a Folio
//! bookie, or one whose registration cannot be read, is asked every time, so a lost answer
//! never weakens the check of its replicas.
//! The silent bookie is a real listening socket that counts the connections and bytes it
//! gets; the metadata is a real `mem://` store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use folio_client::{Client, ClientConfig};
use folio_metadata::mem::{MemCluster, unique_name};
use folio_metadata::{BookieMode, BookieServiceInfo, MetadataStore};
use folio_types::BookieId;
use tokio::io::AsyncReadExt;

/// A socket that accepts connections and reads what comes without ever answering;
/// returns its address and the number of bytes read so far.
async fn silent_bookie() -> (BookieId, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let id = BookieId::new(listener.local_addr().unwrap().to_string()).unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let counter = read.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    counter.fetch_add(n, Ordering::SeqCst);
                }
            });
        }
    });
    (id, read)
}

/// How the silent bookie is registered.
#[derive(Clone, Copy, PartialEq)]
enum Registered {
    AsFolio,
    AsBookKeeper,
    /// Not at all (between two sessions, or the metadata store unreachable): nothing is
    /// known of what it is.
    Not,
}

/// Asks the silent bookie for ledger 1's entries three times; returns how many bytes it
/// got after the first ask and after all three.
async fn ask_three_times(registered: Registered) -> (usize, usize) {
    let store: Arc<dyn MetadataStore> =
        Arc::new(MemCluster::new(unique_name("entry-lists")).connect());
    store.init_cluster().await.unwrap();
    let (id, read) = silent_bookie().await;
    let mut info = BookieServiceInfo::default();
    if registered == Registered::AsFolio {
        info.properties.insert(
            folio_types::service::FOLIO_VERSION_PROPERTY.into(),
            "0.1.0".into(),
        );
    }
    let _registration = match registered {
        Registered::Not => None,
        _ => Some(
            store
                .register_bookie(&id, BookieMode::Writable, &info)
                .await
                .unwrap(),
        ),
    };
    let client = Client::connect(
        store,
        ClientConfig {
            read_timeout: Duration::from_millis(300),
            ..ClientConfig::default()
        },
    )
    .await
    .unwrap();
    assert!(client.entries_on_bookie(&id, 1).await.is_err());
    // The request reached the socket before the timeout (it is a few dozen bytes).
    let after_first = read.load(Ordering::SeqCst);
    for _ in 0..2 {
        assert!(client.entries_on_bookie(&id, 1).await.is_err());
    }
    // Give bytes in flight time to arrive.
    tokio::time::sleep(Duration::from_millis(200)).await;
    (after_first, read.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_that_is_not_folio_is_not_asked_again_after_a_timeout() {
    let (first, all) = ask_three_times(Registered::AsBookKeeper).await;
    assert!(first > 0, "the first ask never reached the bookie");
    assert_eq!(
        first, all,
        "asked again after it left the first ask unanswered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folio_bookie_is_asked_every_time() {
    let (first, all) = ask_three_times(Registered::AsFolio).await;
    assert!(first > 0, "the first ask never reached the bookie");
    assert!(
        all >= 3 * first,
        "a Folio bookie must be asked every time: {first} bytes after one ask, {all} after three"
    );
}

/// Not knowing what a bookie is is not knowing it is BookKeeper's: asked every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_whose_registration_cannot_be_read_is_asked_every_time() {
    let (first, all) = ask_three_times(Registered::Not).await;
    assert!(first > 0, "the first ask never reached the bookie");
    assert!(
        all >= 3 * first,
        "an unknown bookie must be asked every time: {first} bytes after one ask, {all} after three"
    );
}
