//! Watches on etcd: bookie membership (the `bookies/` directory) and one ledger's key. Each
//! reads the current value, then follows an etcd watch from the next revision (so no change
//! in between is missed) and publishes into a `tokio::sync::watch` channel; the task stops
//! when the receiver is dropped, the store is closed or the watch stream ends.

use std::sync::Arc;

use etcd_client::{EventType, WatchOptions};
use folio_metadata::{BookieSet, Result, Version, Versioned};
use folio_types::LedgerId;
use folio_types::metadata::LedgerMetadata;
use tokio::sync::watch;

use crate::keys::Keys;
use crate::session::Etcd;
use crate::store::read_bookies;

pub(crate) async fn watch_bookies(etcd: Arc<Etcd>) -> Result<watch::Receiver<BookieSet>> {
    let what = "the bookie list";
    let dir = etcd.keys.bookies();
    // The revision to watch from: read it with the set, in one request.
    let mut c = etcd.client()?;
    let header_rev = etcd
        .run(what, c.get(etcd.keys.scope.as_str(), None))
        .await?
        .header()
        .map(|h| h.revision())
        .unwrap_or(0);
    let set = read_bookies(&etcd).await?;
    let opts = WatchOptions::new()
        .with_range(Keys::end_of(&dir))
        .with_start_revision(header_rev + 1);
    let mut stream = etcd
        .run(what, c.watch(format!("{dir}/"), Some(opts)))
        .await?;
    let (tx, rx) = watch::channel(set);
    let mut shutdown = etcd.shutdown.subscribe();
    tokio::spawn(async move {
        loop {
            let msg = tokio::select! {
                m = stream.message() => m,
                _ = tx.closed() => return,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            match msg {
                Ok(Some(resp)) if !resp.canceled() => {
                    if resp.events().is_empty() {
                        continue;
                    }
                    let Ok(set) = read_bookies(&etcd).await else {
                        return;
                    };
                    tx.send_if_modified(|cur| {
                        if *cur != set {
                            *cur = set;
                            true
                        } else {
                            false
                        }
                    });
                }
                _ => return,
            }
        }
    });
    Ok(rx)
}

type LedgerValue = Option<Versioned<LedgerMetadata>>;

pub(crate) async fn watch_ledger(
    etcd: Arc<Etcd>,
    ledger: LedgerId,
) -> Result<watch::Receiver<LedgerValue>> {
    let what = format!("ledger {ledger}");
    let key = etcd.keys.ledger(ledger);
    let mut c = etcd.client()?;
    let mut resp = etcd.run(&what, c.get(key.as_str(), None)).await?;
    let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
    let value = match resp.take_kvs().into_iter().next() {
        Some(kv) => Some(Versioned {
            value: crate::codec::decode_ledger(ledger, kv.value())?,
            version: Version::from_raw(kv.mod_revision()),
        }),
        None => None,
    };
    let opts = WatchOptions::new().with_start_revision(rev + 1);
    let mut stream = etcd.run(&what, c.watch(key.as_str(), Some(opts))).await?;
    let (tx, rx) = watch::channel(value);
    let mut shutdown = etcd.shutdown.subscribe();
    tokio::spawn(async move {
        loop {
            let msg = tokio::select! {
                m = stream.message() => m,
                _ = tx.closed() => return,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let resp = match msg {
                Ok(Some(resp)) if !resp.canceled() => resp,
                _ => return,
            };
            for event in resp.events() {
                let value = match (event.event_type(), event.kv()) {
                    (EventType::Put, Some(kv)) => {
                        match crate::codec::decode_ledger(ledger, kv.value()) {
                            Ok(value) => Some(Versioned {
                                value,
                                version: Version::from_raw(kv.mod_revision()),
                            }),
                            // A corrupt record cannot be published: stop following it.
                            Err(_) => return,
                        }
                    }
                    _ => None,
                };
                tx.send_replace(value);
            }
        }
    });
    Ok(rx)
}
