//! A connection's answers on their way to its socket.
//!
//! Answers complete on many threads: the journal's (adds, after their group's fdatasync),
//! the read threads, the connection's own task. Each is queued on the connection's
//! [`Responder`] through a [`Sender`]. Who writes them:
//! - inside a journal group's completion batch ([`folio_storage::callback_batch`]), on a
//!   plaintext connection: the completing thread itself, once per connection when the
//!   batch ends, with a non-blocking vectored write. An add's answer then reaches the socket
//!   without a wake-up of the connection's writer task: per group and connection one
//!   cross-thread wake-up and one task switch fewer, on the two CPUs every add passes
//!   through (docs/performance.md, "What makes the tail at 128 in flight");
//! - otherwise, when the socket's buffer is full, or over TLS (rustls writes on its task):
//!   the connection's writer task, woken once for whatever is queued.
//!
//! Either way every write to the socket happens under the queue's lock, so frames never
//! interleave, and an answer holds its connection's pending slot until all of it is on the
//! socket. The writer task ends once no sender is left and everything queued is written
//! (or the socket broke, after which answers are dropped).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tracing::debug;

use crate::request_metrics::RequestMetrics;

/// A response ready to write, holding its connection's pending slot until written: its
/// frame body, in two pieces when a read's entry is sent as it was read (`tail`).
pub(crate) struct Outgoing {
    /// The frame's length prefix.
    prefix: [u8; 4],
    body: Bytes,
    tail: Option<Bytes>,
    _slot: OwnedSemaphorePermit,
}

impl Outgoing {
    pub(crate) fn new(body: Bytes, tail: Option<Bytes>, slot: OwnedSemaphorePermit) -> Outgoing {
        let len = body.len() + tail.as_ref().map_or(0, Bytes::len);
        Outgoing {
            prefix: (len as u32).to_be_bytes(),
            body,
            tail,
            _slot: slot,
        }
    }

    pub(crate) fn whole(body: Bytes, slot: OwnedSemaphorePermit) -> Outgoing {
        Outgoing::new(body, None, slot)
    }

    /// The frame's bytes, length prefix included.
    fn len(&self) -> usize {
        4 + self.body.len() + self.tail.as_ref().map_or(0, Bytes::len)
    }

    fn pieces(&self) -> [&[u8]; 3] {
        [
            &self.prefix,
            &self.body,
            self.tail.as_deref().unwrap_or(&[]),
        ]
    }
}

/// How the socket is written.
pub(crate) enum Socket {
    /// Plaintext: written without blocking, from whichever thread has answers.
    Plain(OwnedWriteHalf),
    /// TLS: written by the writer task only.
    Tls(Box<dyn AsyncWrite + Unpin + Send>),
}

#[derive(Default)]
struct Queue {
    answers: VecDeque<Outgoing>,
    /// Bytes of the front answer already written (after a partial write).
    front_written: usize,
    /// Writing failed, or the connection's task is gone: answers are dropped from here on.
    broken: bool,
    /// The plaintext socket, until broken: let go then, so that the socket closes even
    /// while adds the journal has not completed still hold senders.
    sock: Option<Arc<OwnedWriteHalf>>,
}

pub(crate) struct Responder {
    queue: Mutex<Queue>,
    /// Wakes the writer task.
    wake: Notify,
    /// Senders alive: the connection's reader and every pending reply.
    senders: AtomicUsize,
    /// Plaintext: written without blocking from any thread (`Queue::sock`); else TLS.
    plain: bool,
    peer: SocketAddr,
    metrics: Arc<RequestMetrics>,
}

/// Queues answers on a connection's [`Responder`]; the writer task ends when every sender
/// is dropped and the queue is written.
pub(crate) struct Sender(Arc<Responder>);

impl Clone for Sender {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        Sender(self.0.clone())
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.wake.notify_one();
        }
    }
}

/// What a non-blocking write of the queue came to.
#[derive(Debug, PartialEq, Eq)]
enum Progress {
    /// Everything queued is on the socket.
    Written,
    /// The socket's buffer is full: the rest waits for it to drain.
    Blocked,
    /// The socket is broken.
    Broken,
}

impl Sender {
    /// Queues `out`, and has it written: at the end of the running callback batch by this
    /// thread (plaintext), or by the writer task. Dropped if the socket broke.
    pub(crate) fn send(&self, out: Outgoing) {
        let r = &self.0;
        {
            let mut q = r.queue.lock();
            if q.broken {
                return;
            }
            q.answers.push_back(out);
        }
        if r.plain
            && folio_storage::callback_batch::defer(Arc::as_ptr(r) as usize, || {
                let r = r.clone();
                Box::new(move || {
                    if r.write_queued() != Progress::Written {
                        r.wake.notify_one();
                    }
                })
            })
        {
            return;
        }
        r.wake.notify_one();
    }
}

/// A connection's writer task. Dropped before it ends (its connection's task aborted at a
/// shutdown past the drain timeout), it stops, and the answers still to come are dropped.
pub(crate) struct Writer {
    task: tokio::task::JoinHandle<()>,
    r: Arc<Responder>,
}

impl Writer {
    /// Until the writer ends: no sender left and everything queued written (or the socket
    /// broke).
    pub(crate) async fn wait(&mut self) {
        let _ = (&mut self.task).await;
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.task.abort();
        self.r.queue.lock().break_off();
    }
}

/// Starts the writer task of a connection's socket; the returned sender is the reader's.
pub(crate) fn start(
    socket: Socket,
    peer: SocketAddr,
    metrics: Arc<RequestMetrics>,
) -> (Sender, Writer) {
    let (direct, tls) = match socket {
        Socket::Plain(w) => (Some(Arc::new(w)), None),
        Socket::Tls(w) => (None, Some(w)),
    };
    let r = Arc::new(Responder {
        queue: Mutex::new(Queue {
            sock: direct,
            ..Queue::default()
        }),
        wake: Notify::new(),
        senders: AtomicUsize::new(1),
        plain: tls.is_none(),
        peer,
        metrics,
    });
    let task = match tls {
        None => tokio::spawn(write_plain(r.clone())),
        Some(w) => tokio::spawn(write_tls(r.clone(), w)),
    };
    let writer = Writer { task, r: r.clone() };
    (Sender(r), writer)
}

impl Responder {
    /// Whether the writer is done: no sender left and nothing to write. The senders are
    /// read first: with none left nothing more can be queued.
    fn finished(&self) -> bool {
        self.senders.load(Ordering::Acquire) == 0 && {
            let q = self.queue.lock();
            q.broken || q.answers.is_empty()
        }
    }

    /// Writes what is queued without blocking, under the queue's lock.
    fn write_queued(&self) -> Progress {
        let mut q = self.queue.lock();
        // Held until broken, which lets go of it (under this lock): so it is not broken.
        let Some(sock) = q.sock.clone() else {
            return Progress::Broken;
        };
        let mut written = 0u64;
        let progress = loop {
            if q.answers.is_empty() {
                break Progress::Written;
            }
            let mut skip = q.front_written;
            let mut slices = Vec::with_capacity(3 * 64);
            for out in q.answers.iter().take(64) {
                for piece in out.pieces() {
                    if skip >= piece.len() {
                        skip -= piece.len();
                        continue;
                    }
                    slices.push(IoSlice::new(&piece[skip..]));
                    skip = 0;
                }
            }
            match sock.try_write_vectored(&slices) {
                Ok(0) => {
                    debug!(peer = %self.peer, "write failed: the socket took nothing");
                    break q.break_off();
                }
                Ok(n) => {
                    written += n as u64;
                    q.advance(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break Progress::Blocked,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!(peer = %self.peer, "write failed: {e}");
                    break q.break_off();
                }
            }
        };
        drop(q);
        if written > 0 {
            self.metrics.bytes_out(written);
        }
        progress
    }
}

impl Queue {
    /// `n` more bytes are on the socket: answers wholly written are dropped, releasing
    /// their slots.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let front = self.answers.front().expect("no more written than queued");
            let left = front.len() - self.front_written;
            if n >= left {
                n -= left;
                self.answers.pop_front();
                self.front_written = 0;
            } else {
                self.front_written += n;
                n = 0;
            }
        }
    }

    fn break_off(&mut self) -> Progress {
        self.broken = true;
        self.answers.clear();
        self.sock = None;
        Progress::Broken
    }
}

/// The writer task of a plaintext socket: writes what callbacks outside a batch queued, and
/// what a full socket buffer held back.
async fn write_plain(r: Arc<Responder>) {
    loop {
        match r.write_queued() {
            Progress::Written => {
                if r.finished() {
                    break;
                }
                r.wake.notified().await;
            }
            Progress::Blocked => {
                // Held only while waiting: once broken, the queue's is the last holder.
                let Some(sock) = r.queue.lock().sock.clone() else {
                    break;
                };
                if let Err(e) = sock.writable().await {
                    debug!(peer = %r.peer, "write failed: {e}");
                    r.queue.lock().break_off();
                    break;
                }
            }
            Progress::Broken => break,
        }
    }
    // The socket's write side closes with its last holder (`OwnedWriteHalf`'s drop): the
    // queue's, let go when the connection's task drops its `Writer`.
}

/// The writer task of a TLS socket: takes what is queued and writes it through rustls.
async fn write_tls(r: Arc<Responder>, wr: Box<dyn AsyncWrite + Unpin + Send>) {
    let mut w = BufWriter::with_capacity(64 * 1024, wr);
    loop {
        let batch: Vec<Outgoing> = {
            let mut q = r.queue.lock();
            let n = q.answers.len().min(256);
            q.answers.drain(..n).collect()
        };
        if batch.is_empty() {
            if r.finished() {
                break;
            }
            r.wake.notified().await;
            continue;
        }
        let mut bytes = 0u64;
        let written = async {
            for out in &batch {
                bytes += out.len() as u64;
                for piece in out.pieces() {
                    // A piece at least the buffer's size is written past it (BufWriter's rule).
                    w.write_all(piece).await?;
                }
            }
            w.flush().await
        }
        .await;
        if let Err(e) = written {
            debug!(peer = %r.peer, "write failed: {e}");
            r.queue.lock().break_off();
            return;
        }
        r.metrics.bytes_out(bytes);
        // The slots are released only now that the responses are on the socket.
        drop(batch);
    }
    let _ = w.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::Semaphore;

    /// A connected pair: the bookie's side (split, its write half in a responder) and the
    /// client's stream.
    async fn pair() -> (Sender, Writer, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, peer) = listener.accept().await.unwrap();
        let (rd, wr) = server.into_split();
        // The read half is dropped: the responder's socket is written only.
        drop(rd);
        let (tx, task) = start(Socket::Plain(wr), peer, Arc::new(RequestMetrics::default()));
        (tx, task, client)
    }

    /// Answer `i`: a body of `len` bytes of `i`, and a tail of `tail` bytes.
    fn answer(i: u8, len: usize, tail: usize, slots: &Arc<Semaphore>) -> Outgoing {
        let slot = slots.clone().try_acquire_owned().expect("a free slot");
        let tail = (tail > 0).then(|| Bytes::from(vec![i; tail]));
        Outgoing::new(Bytes::from(vec![i; len]), tail, slot)
    }

    /// Reads `n` frames; each must be one answer's bytes, all alike. Returns their first bytes.
    async fn read_frames(client: &mut TcpStream, n: usize) -> Vec<(u8, usize)> {
        let mut got = Vec::new();
        for _ in 0..n {
            let len = client.read_u32().await.unwrap() as usize;
            let mut body = vec![0u8; len];
            client.read_exact(&mut body).await.unwrap();
            assert!(
                body.iter().all(|&b| b == body[0]),
                "frame of answer {} holds another answer's bytes",
                body[0]
            );
            got.push((body[0], len));
        }
        got
    }

    const PATIENCE: Duration = Duration::from_secs(60);

    // One runtime thread, blocked while the "journal thread" runs: the writer task cannot
    // write anything meanwhile, so what is written was written by the completing thread.
    #[tokio::test(flavor = "current_thread")]
    async fn answers_of_a_batch_are_written_by_the_completing_thread_whole_and_in_order() {
        let (tx, mut task, mut client) = pair().await;
        // The runtime's reactor sees the new socket writable (as it has long since for a
        // connection with answers to write); before that a write would wait for the task.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let slots = Arc::new(Semaphore::new(1000));
        // A journal thread completing a group: every answer queued, written at the batch's end.
        let (t, s) = (tx.clone(), slots.clone());
        std::thread::spawn(move || {
            folio_storage::callback_batch::run(|| {
                for i in 0..200u8 {
                    t.send(answer(
                        i,
                        30 + i as usize,
                        if i % 3 == 0 { 100 } else { 0 },
                        &s,
                    ));
                }
                // Nothing is written before the batch ends.
                assert_eq!(t.0.queue.lock().answers.len(), 200);
            });
            // Written by this thread (the socket's buffer takes 200 small answers).
            assert!(
                t.0.queue.lock().answers.is_empty(),
                "the completing thread left its answers to the writer task"
            );
        })
        .join()
        .unwrap();
        let got = tokio::time::timeout(PATIENCE, read_frames(&mut client, 200))
            .await
            .unwrap();
        let want: Vec<(u8, usize)> = (0..200u8)
            .map(|i| (i, 30 + i as usize + if i % 3 == 0 { 100 } else { 0 }))
            .collect();
        assert_eq!(got, want);
        assert_eq!(slots.available_permits(), 1000, "every slot released");
        drop(tx);
        tokio::time::timeout(PATIENCE, task.wait()).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_socket_buffer_holds_answers_and_their_slots_until_the_client_reads() {
        let (tx, mut task, mut client) = pair().await;
        let slots = Arc::new(Semaphore::new(1000));
        // 64 MiB: far more than the socket's buffers, so writes are partial and then blocked.
        let (t, s) = (tx.clone(), slots.clone());
        std::thread::spawn(move || {
            folio_storage::callback_batch::run(|| {
                for i in 0..64u8 {
                    t.send(answer(i, 1000 + i as usize, (1 << 20) - 1000, &s));
                }
            });
            // Outside a batch: the writer task's.
            for i in 64..128u8 {
                t.send(answer(i, 1000 + i as usize, 7, &s));
            }
        })
        .join()
        .unwrap();
        // Nothing read yet: some answers must still hold their slots.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(slots.available_permits() < 1000);
        drop(tx);
        let got = tokio::time::timeout(PATIENCE, read_frames(&mut client, 128))
            .await
            .unwrap();
        let want: Vec<(u8, usize)> = (0..64u8)
            .map(|i| (i, (1 << 20) + i as usize))
            .chain((64..128u8).map(|i| (i, 1007 + i as usize)))
            .collect();
        assert_eq!(got, want);
        // The writer ends (no sender, nothing queued); with it gone the socket closes.
        tokio::time::timeout(PATIENCE, task.wait()).await.unwrap();
        drop(task);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        assert_eq!(slots.available_permits(), 1000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_to_a_closed_client_are_dropped_with_their_slots() {
        let (tx, mut task, client) = pair().await;
        drop(client);
        let slots = Arc::new(Semaphore::new(1000));
        let deadline = tokio::time::Instant::now() + PATIENCE;
        // The first writes may still succeed (the peer's reset comes later): send until
        // the responder knows its socket is broken.
        while !tx.0.queue.lock().broken {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never saw the socket broken"
            );
            let (t, s) = (tx.clone(), slots.clone());
            std::thread::spawn(move || {
                folio_storage::callback_batch::run(|| t.send(answer(1, 100, 0, &s)));
            })
            .join()
            .unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tx.send(answer(2, 100, 0, &slots));
        assert_eq!(
            slots.available_permits(),
            1000,
            "nothing held for a dead socket"
        );
        drop(tx);
        tokio::time::timeout(PATIENCE, task.wait()).await.unwrap();
    }
}
