//! The adds a ledger writer has sent, and their answers.
//!
//! An add to a bookie with a live connection is routed: the connection's reader puts the
//! answer straight into the writer's queue, with no future, channel or timer of its own
//! (the per-add future, oneshot and timer were about 15% of a writer's CPU). The writer's
//! tick times out the routed adds whose deadline passed. An add that finds no live
//! connection, and a routed add whose pooled connection broke before its answer (sent
//! once more, on a new connection), take the slow path: a future of its own that makes
//! the connection.
//!
//! The writer stops once every entry has its ack quorum, when adds to the rest of a write
//! quorum may still be unanswered, and some not yet written (no connection yet, or a
//! stale one to make again): [`Adds::finish_in_background`] carries them on, so that
//! every entry still reaches every bookie of its write quorum, as it would have had the
//! writer lived on.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use folio_proto::Status;
use folio_types::{BookieId, EntryId, LedgerId};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;

use crate::client::Inner;
use crate::conn::{AddAnswer, AddAnswers, RpcError, Started, req};
use crate::pending::AddOutcome;

/// A bookie's answer to an add.
pub(crate) struct AddDone {
    pub entry: EntryId,
    pub bookie: BookieId,
    pub outcome: AddOutcome,
}

type Unrouted = FuturesUnordered<Pin<Box<dyn Future<Output = AddDone> + Send>>>;

pub(crate) struct Adds {
    inner: Arc<Inner>,
    answers_tx: AddAnswers,
    answers: mpsc::UnboundedReceiver<AddAnswer>,
    /// Routed adds not answered yet: each gets exactly one answer (the bookie's, a
    /// timeout from the client's sweeper, or `Unreachable`).
    routed: usize,
    unrouted: Unrouted,
    /// Bookies with adds queued but not yet flushed: flushed once per turn of the
    /// writer's loop, so that the adds of a burst of appends leave in one write each.
    unflushed: Vec<BookieId>,
}

impl Adds {
    pub fn new(inner: Arc<Inner>) -> Adds {
        let (answers_tx, answers) = mpsc::unbounded_channel();
        Adds {
            inner,
            answers_tx,
            answers,
            routed: 0,
            unrouted: FuturesUnordered::new(),
            unflushed: Vec::new(),
        }
    }

    /// No add waits for an answer.
    pub fn is_empty(&self) -> bool {
        self.routed == 0 && self.unrouted.is_empty()
    }

    /// Queues the add of `entry` to `bookie` (written at the next [`Adds::flush`]).
    pub fn send(
        &mut self,
        ledger: LedgerId,
        key: &Bytes,
        entry: EntryId,
        bookie: &BookieId,
        body: Bytes,
    ) {
        let request = req::add_keyed(ledger, entry, key.clone(), body, false);
        let timeout = self.inner.config.add_entry_timeout;
        let bookies = &self.inner.bookies;
        match bookies.start_add(bookie, request, timeout, &self.answers_tx, entry) {
            None => self.routed += 1,
            Some(started) => self.push_unrouted(entry, bookie.clone(), started),
        }
        if !self.unflushed.contains(bookie) {
            self.unflushed.push(bookie.clone());
        }
    }

    fn push_unrouted(&mut self, entry: EntryId, bookie: BookieId, started: Started) {
        let inner = self.inner.clone();
        self.unrouted.push(Box::pin(async move {
            let result = inner.bookies.finish(started).await.map(drop);
            AddDone {
                entry,
                bookie,
                outcome: outcome(result),
            }
        }));
    }

    /// Writes the adds queued on each connection since the last flush.
    pub fn flush(&mut self) {
        for bookie in self.unflushed.drain(..) {
            self.inner.bookies.flush(&bookie);
        }
    }

    /// The next answer. Cancel-safe: nothing is lost if the future is dropped before it
    /// resolves (it is one branch of the writer's `select!`).
    pub async fn next(&mut self) -> Option<AddDone> {
        loop {
            tokio::select! {
                biased;
                Some(a) = self.answers.recv(), if self.routed > 0 => {
                    self.routed -= 1;
                    if let Some(retry) = a.retry {
                        // A stale pooled connection: once more, on a new one.
                        self.push_unrouted(a.entry, a.bookie, retry);
                        continue;
                    }
                    return Some(AddDone {
                        entry: a.entry,
                        bookie: a.bookie,
                        outcome: outcome(a.result),
                    });
                }
                Some(done) = self.unrouted.next(), if !self.unrouted.is_empty() => {
                    return Some(done);
                }
                else => return None,
            }
        }
    }

    /// Carries on the adds still unanswered after the writer stopped, until each has its
    /// answer (which no longer matters): so that they still reach their bookies, including
    /// those to send again on a new connection.
    pub fn finish_in_background(mut self) {
        self.flush();
        if self.is_empty() {
            return;
        }
        tokio::spawn(async move {
            while !self.is_empty() {
                self.next().await;
                self.flush();
            }
        });
    }
}

/// What an add's result means to the writer.
fn outcome(result: Result<(), RpcError>) -> AddOutcome {
    match result {
        Ok(()) => AddOutcome::Ok,
        Err(RpcError::Status(Status::Fenced)) => AddOutcome::Fenced,
        Err(RpcError::Status(Status::Unauthorized)) => AddOutcome::Unauthorized,
        Err(e) => AddOutcome::Failed(e.to_string()),
    }
}
