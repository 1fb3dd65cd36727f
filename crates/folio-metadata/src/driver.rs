//! Small rules every metadata driver applies the same way (mem://, sqlite://, and the zk://
//! and etcd:// crates): argument checks, the ledger-list page, the ledger-metadata bytes with
//! the ledger named in errors, and the wall clock of under-replication marks. One copy here
//! so the drivers cannot drift apart in what they accept or how they say no.

use folio_types::LedgerId;
use folio_types::metadata::LedgerMetadata;

use crate::{LedgerPage, MetadataError, Result, format};

/// Milliseconds since the Unix epoch (ctime of under-replication marks, leases).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Ledger ids are non-negative (BookKeeper's ids are Java longs, only `>= 0` are valid).
pub fn check_ledger_id(ledger: LedgerId) -> Result<()> {
    if ledger < 0 {
        return Err(MetadataError::InvalidArgument(format!(
            "ledger id {ledger} is negative"
        )));
    }
    Ok(())
}

/// A ledger list page needs room for at least one ledger.
pub fn check_page_limit(limit: usize) -> Result<()> {
    if limit == 0 {
        return Err(MetadataError::InvalidArgument(
            "list_ledgers needs a limit of at least 1".into(),
        ));
    }
    Ok(())
}

/// Builds a page from up to `limit + 1` ascending ids (the extra one says "more").
pub fn page(mut ids: Vec<LedgerId>, limit: usize) -> LedgerPage {
    let more = ids.len() > limit;
    ids.truncate(limit);
    let next = if more { ids.last().copied() } else { None };
    LedgerPage { ledgers: ids, next }
}

/// [`format::encode_ledger_metadata`], with the ledger named when the metadata is refused.
pub fn encode_ledger_metadata(ledger: LedgerId, metadata: &LedgerMetadata) -> Result<Vec<u8>> {
    format::encode_ledger_metadata(metadata).map_err(|e| match e {
        MetadataError::InvalidArgument(m) => {
            MetadataError::InvalidArgument(format!("metadata of ledger {ledger}: {m}"))
        }
        e => e,
    })
}

/// Publishes `value` to a watch unless it equals what the watchers already have (a
/// re-read after a reconnect must not wake them for nothing).
pub fn publish_if_changed<T: PartialEq>(tx: &tokio::sync::watch::Sender<T>, value: T) {
    tx.send_if_modified(|current| {
        let changed = *current != value;
        if changed {
            *current = value;
        }
        changed
    });
}

/// What an under-replication mark is called in errors.
pub fn underreplicated_what(ledger: LedgerId) -> String {
    format!("under-replication mark of ledger {ledger}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_cause() {
        let e = check_ledger_id(-3).unwrap_err();
        assert!(e.to_string().contains("-3"), "{e}");
        assert!(check_ledger_id(0).is_ok());
        assert!(matches!(
            check_page_limit(0),
            Err(MetadataError::InvalidArgument(_))
        ));
        assert!(check_page_limit(1).is_ok());
    }

    #[test]
    fn unchanged_values_wake_no_watcher() {
        let (tx, mut rx) = tokio::sync::watch::channel(1);
        rx.mark_unchanged();
        publish_if_changed(&tx, 1);
        assert!(!rx.has_changed().unwrap());
        publish_if_changed(&tx, 2);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 2);
    }

    #[test]
    fn pages_say_whether_more_follow() {
        let p = page(vec![1, 2, 3], 2);
        assert_eq!((p.ledgers, p.next), (vec![1, 2], Some(2)));
        let p = page(vec![1, 2], 2);
        assert_eq!((p.ledgers, p.next), (vec![1, 2], None));
    }
}
