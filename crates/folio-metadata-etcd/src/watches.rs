//! Watches on etcd: bookie membership (the `bookies/` directory) and one ledger's key. Each
//! reads the current value, then follows an etcd watch from the next revision (so no change
//! in between is missed) and publishes into a `tokio::sync::watch` channel. When the watch
//! stream breaks (etcd restarted, the connection dropped) the task reads the value again and
//! re-watches, every half second, until it succeeds; it stops when the receiver is dropped,
//! the store is closed or its session has expired.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, WatchOptions, WatchStream};
use folio_metadata::driver::publish_if_changed;
use folio_metadata::{BookieSet, MetadataError, Result, Version, Versioned};
use folio_types::LedgerId;
use folio_types::metadata::LedgerMetadata;
use tokio::sync::watch;

use crate::keys::Keys;
use crate::session::Etcd;
use crate::store::read_bookies;

const RETRY: Duration = Duration::from_millis(500);

/// The membership now and a watch on `bookies/` from just after the revision it was read at.
async fn bookies_and_watch(etcd: &Etcd) -> Result<(BookieSet, WatchStream)> {
    let what = "the bookie list";
    let dir = etcd.keys.bookies();
    let mut c = etcd.client()?;
    // Any change after this revision is replayed by the watch (a harmless re-read).
    let rev = etcd
        .run(what, c.get(etcd.keys.scope.as_str(), None))
        .await?
        .header()
        .map(|h| h.revision())
        .unwrap_or(0);
    let set = read_bookies(etcd).await?;
    let opts = WatchOptions::new()
        .with_range(Keys::end_of(&dir))
        .with_start_revision(rev + 1);
    let stream = etcd
        .run(what, c.watch(format!("{dir}/"), Some(opts)))
        .await?;
    Ok((set, stream))
}

/// Waits out a broken watch: retries `again` until it works, or returns `None` when the
/// watch should stop (receiver gone, store closed, session expired).
async fn reestablish<T, F, Fut>(
    etcd: &Etcd,
    receiver_gone: impl Fn() -> bool,
    mut again: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    loop {
        if receiver_gone() || *etcd.shutdown.borrow() {
            return None;
        }
        tokio::time::sleep(RETRY).await;
        match again().await {
            Ok(v) => return Some(v),
            Err(MetadataError::SessionExpired) | Err(MetadataError::Corrupt { .. }) => {
                return None;
            }
            Err(_) => continue,
        }
    }
}

pub(crate) async fn watch_bookies(etcd: Arc<Etcd>) -> Result<watch::Receiver<BookieSet>> {
    let (set, mut stream) = bookies_and_watch(&etcd).await?;
    let (tx, rx) = watch::channel(set);
    let mut shutdown = etcd.shutdown.subscribe();
    tokio::spawn(async move {
        loop {
            let msg = tokio::select! {
                m = stream.message() => m,
                _ = tx.closed() => return,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let reread = match msg {
                Ok(Some(resp)) if !resp.canceled() => {
                    if resp.events().is_empty() {
                        continue;
                    }
                    read_bookies(&etcd).await.ok()
                }
                _ => None,
            };
            match reread {
                Some(set) => publish_if_changed(&tx, set),
                None => {
                    let Some((set, s)) =
                        reestablish(&etcd, || tx.is_closed(), || bookies_and_watch(&etcd)).await
                    else {
                        return;
                    };
                    publish_if_changed(&tx, set);
                    stream = s;
                }
            }
        }
    });
    Ok(rx)
}

type LedgerValue = Option<Versioned<LedgerMetadata>>;

/// A ledger's metadata now and a watch on its key from just after that revision.
async fn ledger_and_watch(etcd: &Etcd, ledger: LedgerId) -> Result<(LedgerValue, WatchStream)> {
    let what = format!("ledger {ledger}");
    let key = etcd.keys.ledger(ledger);
    let mut c = etcd.client()?;
    let mut resp = etcd.run(&what, c.get(key.as_str(), None)).await?;
    let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
    let value = match resp.take_kvs().into_iter().next() {
        Some(kv) => Some(Versioned {
            value: folio_metadata::format::decode_ledger_metadata(ledger, kv.value())?,
            version: Version::from_raw(kv.mod_revision()),
        }),
        None => None,
    };
    let opts = WatchOptions::new().with_start_revision(rev + 1);
    let stream = etcd.run(&what, c.watch(key.as_str(), Some(opts))).await?;
    Ok((value, stream))
}

pub(crate) async fn watch_ledger(
    etcd: Arc<Etcd>,
    ledger: LedgerId,
) -> Result<watch::Receiver<LedgerValue>> {
    let (value, mut stream) = ledger_and_watch(&etcd, ledger).await?;
    let (tx, rx) = watch::channel(value);
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
                    for event in resp.events() {
                        let value = match (event.event_type(), event.kv()) {
                            (EventType::Put, Some(kv)) => {
                                match folio_metadata::format::decode_ledger_metadata(
                                    ledger,
                                    kv.value(),
                                ) {
                                    Ok(value) => Some(Versioned {
                                        value,
                                        version: Version::from_raw(kv.mod_revision()),
                                    }),
                                    // A corrupt record cannot be published: stop following.
                                    Err(_) => return,
                                }
                            }
                            _ => None,
                        };
                        tx.send_replace(value);
                    }
                }
                _ => {
                    let Some((value, s)) =
                        reestablish(&etcd, || tx.is_closed(), || ledger_and_watch(&etcd, ledger))
                            .await
                    else {
                        return;
                    };
                    tx.send_if_modified(|cur| {
                        let changed =
                            cur.as_ref().map(|v| v.version) != value.as_ref().map(|v| v.version);
                        if changed {
                            *cur = value;
                        }
                        changed
                    });
                    stream = s;
                }
            }
        }
    });
    Ok(rx)
}
