//! A ledger open for writing, as its caller sees it: appends that return a future at
//! once, and the close. The writer behind it is `writer::Writer`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use folio_metadata::Versioned;
use folio_types::metadata::LedgerMetadata;
use folio_types::{EntryId, LedgerId};
use tokio::sync::{mpsc, oneshot};

use crate::client::Inner;
use crate::error::{ClientError, Result};
use crate::writer::{Cmd, Writer};

/// The future of one append: resolves to the entry id once the entry is acknowledged
/// (after every entry before it), or to the error that stopped the writer.
#[must_use = "an append is only known to be durable when its future resolves"]
pub struct AppendFuture {
    ledger: LedgerId,
    rx: oneshot::Receiver<Result<EntryId>>,
}

impl Future for AppendFuture {
    type Output = Result<EntryId>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let ledger = self.ledger;
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ClientError::LedgerClosed { ledger })))
    }
}

/// A ledger open for writing (made by [`crate::Client::create_ledger`]).
///
/// `append` returns at once with a future; many appends may be in flight, and their
/// futures complete in entry order. Dropping the handle without [`LedgerHandle::close`]
/// leaves the ledger open (a reader recovers it); the appends already made still go to
/// every bookie of their write quorum.
pub struct LedgerHandle {
    adv: bool,
    writer: Arc<Writer>,
    /// The queue of the writer's task (`writer::run`), which ends when this is dropped.
    cmds: mpsc::UnboundedSender<Cmd>,
}

impl std::fmt::Debug for LedgerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerHandle")
            .field("ledger", &self.id())
            .field("lac", &self.last_add_confirmed())
            .finish()
    }
}

impl LedgerHandle {
    pub(crate) fn spawn(
        inner: Arc<Inner>,
        ledger: LedgerId,
        meta: Versioned<LedgerMetadata>,
        password: Vec<u8>,
        adv: bool,
    ) -> LedgerHandle {
        let writer = Writer::new(inner, ledger, meta, &password, adv);
        let (cmds, queue) = mpsc::unbounded_channel();
        tokio::spawn(crate::writer::run(Arc::clone(&writer), queue));
        LedgerHandle { adv, writer, cmds }
    }

    pub fn id(&self) -> LedgerId {
        self.writer.ledger()
    }

    /// The last entry acknowledged (with every entry before it).
    pub fn last_add_confirmed(&self) -> EntryId {
        self.writer.last_add_confirmed()
    }

    /// Appends an entry; the future gives its entry id once acknowledged. The order of
    /// calls is the order of entries.
    pub fn append(&self, payload: impl Into<Bytes>) -> AppendFuture {
        self.send_append(None, payload.into())
    }

    /// Appends an entry with a caller-chosen id (adv ledgers only).
    pub fn append_with_id(&self, entry: EntryId, payload: impl Into<Bytes>) -> AppendFuture {
        self.send_append(Some(entry), payload.into())
    }

    /// Whether this is an adv ledger (caller-chosen entry ids).
    pub fn is_adv(&self) -> bool {
        self.adv
    }

    fn send_append(&self, entry: Option<EntryId>, payload: Bytes) -> AppendFuture {
        AppendFuture {
            ledger: self.id(),
            rx: self.writer.append(&self.cmds, entry, payload),
        }
    }

    /// Waits for every pending append, then closes the ledger in the metadata with the
    /// LAC as its last entry. Fails with [`ClientError::Fenced`] if the ledger was
    /// recovered (or closed) by someone else. Closing twice is fine.
    pub async fn close(&self) -> Result<()> {
        self.writer.close(&self.cmds).await
    }
}
