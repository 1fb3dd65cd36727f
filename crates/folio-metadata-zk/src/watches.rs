//! Watches with ZooKeeper's one-shot watchers: bookie membership (children of `available`
//! and `available/readonly`) and one ledger's metadata. Each is a task that re-reads and
//! re-arms after every event and publishes into a `tokio::sync::watch` channel; it stops
//! when the receiver is dropped, the store is closed or the session ends.

use std::sync::Arc;

use folio_metadata::{BookieSet, MetadataError, Result, Versioned};
use folio_types::LedgerId;
use folio_types::metadata::LedgerMetadata;
use tokio::sync::watch;
use zookeeper_client as zk;

use crate::paths::{AVAILABLE, READONLY};
use crate::session::Zk;
use crate::store::bookie_ids;

pub(crate) async fn read_bookies(zk: &Zk) -> Result<BookieSet> {
    Ok(BookieSet {
        writable: bookie_ids(zk.children(AVAILABLE, "the writable bookie list").await?),
        readonly: bookie_ids(
            zk.children(
                &format!("{AVAILABLE}/{READONLY}"),
                "the read-only bookie list",
            )
            .await?,
        ),
    })
}

/// Children of `rel` with a one-shot watch armed; an absent node gives no children and an
/// existence watch instead, so its creation is seen too.
async fn children_and_watch(
    zk: &Zk,
    client: &zk::Client,
    rel: &str,
    what: &str,
) -> Result<(Vec<String>, zk::OneshotWatcher)> {
    let path = zk.abs(rel);
    loop {
        match zk.run(client.list_and_watch_children(&path)).await? {
            Ok(v) => return Ok(v),
            Err(zk::Error::NoNode) => match zk.run(client.check_and_watch_stat(&path)).await? {
                Ok((None, w)) => return Ok((Vec::new(), w)),
                Ok((Some(_), _)) => continue, // created in between: list it
                Err(e) => return Err(zk.err(e, what, None)),
            },
            Err(e) => return Err(zk.err(e, what, None)),
        }
    }
}

pub(crate) async fn watch_bookies(zk: Arc<Zk>) -> Result<watch::Receiver<BookieSet>> {
    let client = zk.client()?;
    let readonly = format!("{AVAILABLE}/{READONLY}");
    let (w, w_watch) = children_and_watch(&zk, &client, AVAILABLE, "the bookie list").await?;
    let (r, r_watch) = children_and_watch(&zk, &client, &readonly, "the bookie list").await?;
    let (tx, rx) = watch::channel(BookieSet {
        writable: bookie_ids(w),
        readonly: bookie_ids(r),
    });
    let mut shutdown = zk.shutdown.subscribe();
    tokio::spawn(async move {
        let (mut w_watch, mut r_watch) = (w_watch, r_watch);
        loop {
            let w_fut = w_watch.changed();
            let r_fut = r_watch.changed();
            tokio::pin!(w_fut, r_fut);
            let event = tokio::select! {
                e = &mut w_fut => e,
                e = &mut r_fut => e,
                _ = tx.closed() => return,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            if event.event_type == zk::EventType::Session {
                return;
            }
            // The watch that did not fire is dropped with its future: re-arm both, then
            // re-read, so no change between the event and now is missed. A failed read (a
            // connection blip) is retried until the session ends.
            let rearm = || async {
                let w = children_and_watch(&zk, &client, AVAILABLE, "the bookie list").await?;
                let r = children_and_watch(&zk, &client, &readonly, "the bookie list").await?;
                Ok::<_, MetadataError>((w, r))
            };
            let Some(((w, ww), (r, rw))) = retry(&zk, || tx.is_closed(), rearm).await else {
                return;
            };
            w_watch = ww;
            r_watch = rw;
            let set = BookieSet {
                writable: bookie_ids(w),
                readonly: bookie_ids(r),
            };
            folio_metadata::driver::publish_if_changed(&tx, set);
        }
    });
    Ok(rx)
}

/// Retries `op` every half second until it works; `None` when the watch should stop
/// (receiver gone, store closed, session expired, record corrupt).
async fn retry<T, F, Fut>(zk: &Zk, receiver_gone: impl Fn() -> bool, mut op: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    loop {
        match op().await {
            Ok(v) => return Some(v),
            Err(MetadataError::SessionExpired) | Err(MetadataError::Corrupt { .. }) => {
                return None;
            }
            Err(_) => {}
        }
        if receiver_gone() || *zk.shutdown.borrow() {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

type LedgerValue = Option<Versioned<LedgerMetadata>>;

async fn ledger_and_watch(
    zk: &Zk,
    client: &zk::Client,
    ledger: LedgerId,
) -> Result<(LedgerValue, zk::OneshotWatcher)> {
    let path = zk.abs(&crate::paths::ledger_rel(ledger));
    let what = format!("ledger {ledger}");
    loop {
        match zk.run(client.get_and_watch_data(&path)).await? {
            Ok((data, stat, w)) => {
                let value = folio_metadata::format::decode_ledger_metadata(ledger, &data)?;
                return Ok((
                    Some(Versioned {
                        value,
                        version: folio_metadata::Version::from_raw(stat.version as i64),
                    }),
                    w,
                ));
            }
            Err(zk::Error::NoNode) => match zk.run(client.check_and_watch_stat(&path)).await? {
                Ok((None, w)) => return Ok((None, w)),
                Ok((Some(_), _)) => continue,
                Err(e) => return Err(zk.err(e, &what, None)),
            },
            Err(e) => return Err(zk.err(e, &what, None)),
        }
    }
}

pub(crate) async fn watch_ledger(
    zk: Arc<Zk>,
    ledger: LedgerId,
) -> Result<watch::Receiver<LedgerValue>> {
    let client = zk.client()?;
    let (value, first) = ledger_and_watch(&zk, &client, ledger).await?;
    let (tx, rx) = watch::channel(value);
    let mut shutdown = zk.shutdown.subscribe();
    tokio::spawn(async move {
        let mut watcher = first;
        loop {
            tokio::select! {
                e = watcher.changed() => {
                    if e.event_type == zk::EventType::Session { return }
                }
                _ = tx.closed() => return,
                _ = shutdown.wait_for(|s| *s) => return,
            }
            let Some((value, w)) = retry(
                &zk,
                || tx.is_closed(),
                || ledger_and_watch(&zk, &client, ledger),
            )
            .await
            else {
                return;
            };
            watcher = w;
            tx.send_replace(value);
        }
    });
    Ok(rx)
}
