//! BP-32's advisory write close (seed 001), sent by the client when a ledger is closed by
//! its writer or by recovery, and by autorecovery to the bookie it copied a closed
//! ledger's entries to (`Client::write_close_in_background`): every bookie of the ledger
//! may then rotate its entry log for the ledger at the next checkpoint, instead of waiting
//! for the access expiry. Only bookies the client is connected to are told
//! (`Bookies::write_close` makes no connection).
//!
//! Best effort, always: the messages go out on a task of their own, after the close has
//! succeeded, and nothing waits for them; an error is logged at debug level and forgotten.
//! A bookie that does not know the operation (a Java bookie answers EBADREQ) is remembered
//! per connection (`Bookies::write_close`) and not asked again on it.

use std::collections::BTreeSet;
use std::sync::Arc;

use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, LedgerId};

use crate::client::Inner;

/// Sends a write close of `ledger` to every bookie of every fragment of `meta`, in the
/// background. Returns at once.
pub(crate) fn send(inner: &Arc<Inner>, ledger: LedgerId, key: [u8; 20], meta: &LedgerMetadata) {
    send_to(inner, ledger, key, meta.all_bookies());
}

/// Sends a write close of `ledger` to `bookies`, in the background. Returns at once.
pub(crate) fn send_to(
    inner: &Arc<Inner>,
    ledger: LedgerId,
    key: [u8; 20],
    bookies: BTreeSet<BookieId>,
) {
    let inner = inner.clone();
    tokio::spawn(async move {
        let timeout = inner.config.add_entry_timeout;
        for bookie in bookies {
            match inner
                .bookies
                .write_close(&bookie, ledger, &key, timeout)
                .await
            {
                Ok(true) => tracing::trace!(ledger, %bookie, "write close sent"),
                Ok(false) => tracing::trace!(ledger, %bookie, "bookie without write close"),
                Err(e) => tracing::debug!(ledger, %bookie, "write close failed (ignored): {e}"),
            }
        }
    });
}
