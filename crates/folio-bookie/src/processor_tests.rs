//! Unit tests of the processor over the in-memory storage: every status path of every operation.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;

use crate::memory::MemoryStorage;
use crate::processor::{ConnectionId, LongPollTimer, Processor, ProcessorConfig, Reply};
use crate::request::{AddRequest, AuthMessage, ReadRequest, Request, Response, Status};
use folio_proto::availability::AvailabilityOfEntries;

const KEY: &[u8; 20] = b"0123456789abcdefghij";
const OTHER_KEY: &[u8; 20] = b"ZZZZZZZZZZZZZZZZZZZZ";

fn processor() -> (Processor<Arc<MemoryStorage>>, Arc<MemoryStorage>) {
    processor_with(ProcessorConfig::default())
}

fn processor_with(config: ProcessorConfig) -> (Processor<Arc<MemoryStorage>>, Arc<MemoryStorage>) {
    let storage = Arc::new(MemoryStorage::new());
    (Processor::new(storage.clone(), config), storage)
}

/// An "entry with digest" as a client builds it (8-byte zero digest: bookies do not check it).
fn entry_body(ledger: i64, entry: i64, lac: i64, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i64(ledger);
    b.put_i64(entry);
    b.put_i64(lac);
    b.put_i64(payload.len() as i64);
    b.put_u64(0);
    b.put_slice(payload);
    b.freeze()
}

fn add(ledger: i64, entry: i64, lac: i64, key: &[u8]) -> Request {
    Request::Add(AddRequest {
        ledger,
        entry,
        master_key: Bytes::copy_from_slice(key),
        body: entry_body(ledger, entry, lac, format!("payload {entry}").as_bytes()),
        recovery: false,
        high_priority: false,
        deferred_sync: false,
    })
}

fn recovery_add(ledger: i64, entry: i64, key: &[u8]) -> Request {
    match add(ledger, entry, -1, key) {
        Request::Add(a) => Request::Add(AddRequest {
            recovery: true,
            high_priority: true,
            ..a
        }),
        _ => unreachable!(),
    }
}

fn fence_read(ledger: i64, entry: i64, key: Option<&[u8]>) -> Request {
    Request::Read(ReadRequest {
        fence: true,
        master_key: key.map(Bytes::copy_from_slice),
        ..ReadRequest::entry(ledger, entry)
    })
}

fn long_poll(ledger: i64, previous_lac: i64, timeout_ms: i64) -> Request {
    Request::Read(ReadRequest {
        piggyback: true,
        previous_lac: Some(previous_lac),
        timeout_ms: Some(timeout_ms),
        ..ReadRequest::entry(ledger, -1)
    })
}

/// Collects responses; `process` returns the collector so tests can look later (held completions).
#[derive(Clone, Default)]
struct Replies(Arc<Mutex<Vec<Response>>>);

impl Replies {
    fn send(&self, p: &Processor<Arc<MemoryStorage>>, request: Request) -> Option<LongPollTimer> {
        let sink = self.0.clone();
        p.process(request, Box::new(move |r| sink.lock().push(r)))
    }
    fn take(&self) -> Vec<Response> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// Sends one request that must be answered at once; returns the answer.
fn call(p: &Processor<Arc<MemoryStorage>>, request: Request) -> Response {
    let replies = Replies::default();
    assert_eq!(
        replies.send(p, request.clone()),
        None,
        "{request:?} should not wait"
    );
    let mut got = replies.take();
    assert_eq!(got.len(), 1, "{request:?} answered {got:?}");
    got.pop().unwrap()
}

fn read_body(r: &Response) -> Option<Bytes> {
    match r {
        Response::Read { body, .. } => body.clone(),
        other => panic!("not a read response: {other:?}"),
    }
}

#[test]
fn add_then_read_back_byte_for_byte() {
    let (p, _) = processor();
    for e in 0..5 {
        let r = call(&p, add(7, e, e - 1, KEY));
        assert_eq!(
            r,
            Response::Add {
                status: Status::Ok,
                ledger: 7,
                entry: e
            }
        );
    }
    for e in 0..5 {
        let r = call(&p, Request::Read(ReadRequest::entry(7, e)));
        assert_eq!(r.status(), Status::Ok);
        assert_eq!(
            read_body(&r).unwrap(),
            entry_body(7, e, e - 1, format!("payload {e}").as_bytes())
        );
        match r {
            Response::Read { entry, max_lac, .. } => {
                assert_eq!(entry, e);
                assert_eq!(max_lac, Some(3), "piggybacked LAC is the highest LAC seen");
            }
            _ => unreachable!(),
        }
    }
    // -1 reads the last entry.
    let r = call(&p, Request::Read(ReadRequest::entry(7, -1)));
    assert_eq!(read_body(&r).unwrap(), entry_body(7, 4, 3, b"payload 4"));
}

#[test]
fn add_is_answered_only_once_journaled() {
    let (p, storage) = processor();
    storage.hold_completions(true);
    let replies = Replies::default();
    replies.send(&p, add(1, 0, -1, KEY));
    assert!(
        replies.take().is_empty(),
        "answered before the journal synced"
    );
    assert_eq!(p.pending_adds(), 1);
    assert_eq!(storage.release_completions(), 1);
    assert_eq!(replies.take()[0].status(), Status::Ok);
    assert_eq!(p.pending_adds(), 0);
}

#[test]
fn wrong_master_key_is_eua() {
    let (p, _) = processor();
    assert_eq!(call(&p, add(1, 0, -1, KEY)).status(), Status::Ok);
    assert_eq!(
        call(&p, add(1, 1, -1, OTHER_KEY)).status(),
        Status::Unauthorized
    );
    assert_eq!(call(&p, add(1, 1, -1, b"")).status(), Status::Unauthorized);
    // The refused entry was not stored.
    assert_eq!(
        call(&p, Request::Read(ReadRequest::entry(1, 1))).status(),
        Status::NoEntry
    );
    assert_eq!(
        call(&p, fence_read(1, -1, Some(OTHER_KEY))).status(),
        Status::Unauthorized
    );
    let wl = Request::WriteLac {
        ledger: 1,
        lac: 0,
        master_key: Bytes::from_static(OTHER_KEY),
        body: Bytes::from_static(b"lac"),
    };
    assert_eq!(call(&p, wl).status(), Status::Unauthorized);
}

#[test]
fn fence_read_without_master_key_is_eua() {
    let (p, storage) = processor();
    call(&p, add(1, 0, -1, KEY));
    assert_eq!(
        call(&p, fence_read(1, -1, None)).status(),
        Status::Unauthorized
    );
    assert!(!storage.is_fenced(1));
}

#[test]
fn add_to_fenced_ledger_is_efenced_but_recovery_add_passes() {
    let (p, storage) = processor();
    call(&p, add(3, 0, -1, KEY));
    let r = call(&p, fence_read(3, -1, Some(KEY)));
    assert_eq!(r.status(), Status::Ok);
    assert_eq!(read_body(&r).unwrap(), entry_body(3, 0, -1, b"payload 0"));
    assert!(storage.is_fenced(3));
    assert_eq!(call(&p, add(3, 1, 0, KEY)).status(), Status::Fenced);
    assert_eq!(call(&p, recovery_add(3, 1, KEY)).status(), Status::Ok);
    // A recovery add still checks the master key.
    assert_eq!(
        call(&p, recovery_add(3, 2, OTHER_KEY)).status(),
        Status::Unauthorized
    );
}

#[test]
fn fence_read_of_unknown_ledger_fences_it_and_says_no_ledger_entry() {
    let (p, storage) = processor();
    // The fence creates the ledger state; the read then finds no entry.
    assert_eq!(
        call(&p, fence_read(9, -1, Some(KEY))).status(),
        Status::NoEntry
    );
    assert!(storage.is_fenced(9));
    assert_eq!(call(&p, add(9, 0, -1, KEY)).status(), Status::Fenced);
}

#[test]
fn fence_read_is_answered_only_once_the_fence_is_durable() {
    let (p, storage) = processor();
    call(&p, add(3, 0, -1, KEY));
    storage.hold_completions(true);
    let replies = Replies::default();
    replies.send(&p, fence_read(3, 0, Some(KEY)));
    assert!(replies.take().is_empty());
    storage.release_completions();
    assert_eq!(replies.take()[0].status(), Status::Ok);
}

#[test]
fn read_only_bookie_refuses_adds_but_not_high_priority_ones() {
    let (p, storage) = processor();
    storage.set_read_only(true);
    assert_eq!(call(&p, add(1, 0, -1, KEY)).status(), Status::ReadOnly);
    assert_eq!(call(&p, recovery_add(1, 0, KEY)).status(), Status::Ok);
    // Reads still work.
    assert_eq!(
        call(&p, Request::Read(ReadRequest::entry(1, 0))).status(),
        Status::Ok
    );
    storage.set_read_only(false);
    assert_eq!(call(&p, add(1, 1, -1, KEY)).status(), Status::Ok);
}

#[test]
fn no_such_ledger_and_no_such_entry() {
    let (p, _) = processor();
    assert_eq!(
        call(&p, Request::Read(ReadRequest::entry(5, 0))).status(),
        Status::NoLedger
    );
    call(&p, add(5, 0, -1, KEY));
    assert_eq!(
        call(&p, Request::Read(ReadRequest::entry(5, 1))).status(),
        Status::NoEntry
    );
    assert_eq!(
        call(&p, Request::ReadLac { ledger: 6 }).status(),
        Status::NoLedger
    );
    assert_eq!(
        call(&p, Request::GetListOfEntriesOfLedger { ledger: 6 }).status(),
        Status::NoLedger
    );
    // A long poll without a wait is a plain LAC read.
    assert_eq!(call(&p, long_poll(6, 0, 0)).status(), Status::NoLedger);
}

#[test]
fn a_long_poll_on_a_ledger_not_here_yet_waits_for_its_first_adds() {
    let (p, _) = processor();
    let replies = Replies::default();
    let timer = replies
        .send(&p, long_poll(6, -1, 60_000))
        .expect("waits for the ledger's first add, not NoLedger at once");
    assert!(replies.take().is_empty());
    assert_eq!(p.waiting_long_polls(), 1);
    // A wait that times out with the ledger still unknown: NoLedger then.
    let other = Replies::default();
    let expired = other.send(&p, long_poll(7, -1, 10)).expect("waits");
    p.expire_long_poll(expired.id);
    let got = other.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status(), Status::NoLedger);
    // Entry 0 carries LAC -1, which does not pass -1; entry 1 carries LAC 0 and wakes the
    // poll with entry 0.
    call(&p, add(6, 0, -1, KEY));
    assert!(replies.take().is_empty());
    call(&p, add(6, 1, 0, KEY));
    assert_eq!(
        replies.take(),
        vec![Response::Read {
            status: Status::Ok,
            ledger: 6,
            entry: 0,
            body: Some(entry_body(6, 0, -1, b"payload 0")),
            max_lac: Some(0),
        }]
    );
    assert_eq!(p.waiting_long_polls(), 0);
    p.expire_long_poll(timer.id);
    assert!(replies.take().is_empty());
}

#[test]
fn too_many_pending_adds_is_etoomanyrequests() {
    let (p, storage) = processor_with(ProcessorConfig {
        max_pending_adds: 2,
        max_pending_reads: 10,
        ..ProcessorConfig::default()
    });
    storage.hold_completions(true);
    let replies = Replies::default();
    replies.send(&p, add(1, 0, -1, KEY));
    replies.send(&p, add(1, 1, -1, KEY));
    replies.send(&p, add(1, 2, -1, KEY));
    let refused = replies.take();
    assert_eq!(refused.len(), 1);
    assert_eq!(
        refused[0],
        Response::Add {
            status: Status::TooManyRequests,
            ledger: 1,
            entry: 2
        }
    );
    storage.release_completions();
    assert!(replies.take().iter().all(|r| r.status() == Status::Ok));
    // Slots were released: the next add goes through.
    storage.hold_completions(false);
    assert_eq!(call(&p, add(1, 2, -1, KEY)).status(), Status::Ok);
}

#[test]
fn too_many_pending_reads_is_etoomanyrequests_and_waiting_long_polls_hold_no_slot() {
    let (p, storage) = processor_with(ProcessorConfig {
        max_pending_adds: 10,
        max_pending_reads: 1,
        ..ProcessorConfig::default()
    });
    call(&p, add(1, 0, -1, KEY));
    let replies = Replies::default();
    // A waiting long poll does not hold the only read slot: reads still go through.
    let timer = replies.send(&p, long_poll(1, 5, 60_000)).expect("waits");
    assert_eq!(p.pending_reads(), 0);
    assert_eq!(p.waiting_long_polls(), 1);
    assert_eq!(
        call(&p, Request::Read(ReadRequest::entry(1, 0))).status(),
        Status::Ok
    );
    // A read in progress does: a fence read held at its durability callback.
    storage.hold_completions(true);
    let fenced = Replies::default();
    fenced.send(&p, fence_read(1, 0, Some(KEY)));
    assert_eq!(p.pending_reads(), 1);
    assert_eq!(
        call(&p, Request::Read(ReadRequest::entry(1, 0))).status(),
        Status::TooManyRequests
    );
    assert_eq!(
        call(&p, Request::ReadLac { ledger: 1 }).status(),
        Status::TooManyRequests
    );
    storage.release_completions();
    storage.hold_completions(false);
    assert_eq!(fenced.take().len(), 1);
    p.expire_long_poll(timer.id);
    assert_eq!(replies.take().len(), 1);
    assert_eq!(
        call(&p, Request::Read(ReadRequest::entry(1, 0))).status(),
        Status::Ok
    );
}

#[test]
fn long_polls_are_bounded_per_connection_capped_in_time_and_dropped_with_it() {
    let (p, _) = processor_with(ProcessorConfig {
        max_long_poll_timeout: std::time::Duration::from_millis(1500),
        max_long_polls_per_connection: 3,
        ..ProcessorConfig::default()
    });
    call(&p, add(1, 0, -1, KEY));
    let conn = p.connection();
    let other = p.connection();
    let replies = Replies::default();
    let send = |c: crate::processor::ConnectionId, r: &Replies| {
        let sink = r.0.clone();
        p.process_on(
            c,
            long_poll(1, 0, i64::MAX),
            Box::new(move |x| sink.lock().push(x)),
        )
    };
    for _ in 0..3 {
        let timer = send(conn.id(), &replies).expect("waits");
        assert_eq!(
            timer.timeout,
            std::time::Duration::from_millis(1500),
            "capped"
        );
    }
    // The fourth of the same connection is refused; another connection still waits.
    assert_eq!(send(conn.id(), &replies), None);
    let refused = replies.take();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].status(), Status::TooManyRequests);
    let theirs = Replies::default();
    assert!(send(other.id(), &theirs).is_some());
    assert_eq!(p.waiting_long_polls(), 4);
    // Closing the connection drops its long polls unanswered; the other's stays.
    drop(conn);
    assert_eq!(p.waiting_long_polls(), 1);
    assert!(replies.take().is_empty());
    // A closed connection's late long poll is not registered (nobody would read it).
    let closed = {
        let c = p.connection();
        c.id()
    };
    assert_eq!(send(closed, &replies), None);
    assert_eq!(p.waiting_long_polls(), 1);
    // At shutdown a connection's long polls are answered instead.
    other.answer_waiting();
    assert_eq!(p.waiting_long_polls(), 0);
    let answered = theirs.take();
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].status(), Status::Ok);
    assert_eq!(p.pending_reads(), 0);
}

#[test]
fn storage_errors_are_eio_never_a_negative_answer() {
    let (p, storage) = processor();
    call(&p, add(1, 0, -1, KEY));
    storage.set_fail_io(Some("disk on fire"));
    assert_eq!(
        call(&p, Request::Read(ReadRequest::entry(1, 0))).status(),
        Status::Io
    );
    assert_eq!(call(&p, add(1, 1, -1, KEY)).status(), Status::Io);
    assert_eq!(call(&p, fence_read(1, 0, Some(KEY))).status(), Status::Io);
    assert_eq!(
        call(&p, Request::ReadLac { ledger: 1 }).status(),
        Status::Io
    );
    assert_eq!(
        call(&p, Request::ForceLedger { ledger: 1 }).status(),
        Status::Io
    );
    assert_eq!(
        call(&p, Request::GetBookieInfo { requested: 3 }).status(),
        Status::Io
    );
    assert_eq!(
        call(&p, Request::GetListOfEntriesOfLedger { ledger: 1 }).status(),
        Status::Io
    );
    storage.set_fail_io(None);
    assert!(!storage.is_fenced(1));
}

#[test]
fn bad_add_body_is_ebadreq() {
    let (p, _) = processor();
    let mut r = match add(1, 0, -1, KEY) {
        Request::Add(a) => a,
        _ => unreachable!(),
    };
    r.body = Bytes::from_static(b"short");
    assert_eq!(
        call(&p, Request::Add(r.clone())).status(),
        Status::BadRequest
    );
    r.body = entry_body(2, 0, -1, b"x"); // body of another ledger
    assert_eq!(call(&p, Request::Add(r)).status(), Status::BadRequest);
    assert_eq!(
        call(&p, Request::Read(ReadRequest::entry(1, 0))).status(),
        Status::NoLedger
    );
}

#[test]
fn long_poll_wakes_as_soon_as_the_lac_passes() {
    let (p, _) = processor();
    call(&p, add(4, 0, -1, KEY));
    call(&p, add(4, 1, 0, KEY)); // LAC is now 0
    let replies = Replies::default();
    let timer = replies
        .send(&p, long_poll(4, 0, 60_000))
        .expect("LAC 0 has not passed 0: waits");
    assert_eq!(timer.timeout.as_millis(), 60_000);
    assert_eq!(p.waiting_long_polls(), 1);
    // An add that does not move the LAC past 0 does not wake it.
    call(&p, add(4, 2, 0, KEY));
    assert!(replies.take().is_empty());
    // An add carrying LAC 1 does; the answer piggybacks entry 1.
    call(&p, add(4, 3, 1, KEY));
    let got = replies.take();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0],
        Response::Read {
            status: Status::Ok,
            ledger: 4,
            entry: 1,
            body: Some(entry_body(4, 1, 0, b"payload 1")),
            max_lac: Some(1),
        }
    );
    assert_eq!(p.waiting_long_polls(), 0);
    assert_eq!(p.pending_reads(), 0);
    // The timer firing later is harmless.
    p.expire_long_poll(timer.id);
    assert!(replies.take().is_empty());
}

#[test]
fn long_poll_wakes_when_the_add_is_stored_before_it_is_durable() {
    let (p, storage) = processor();
    call(&p, add(4, 0, -1, KEY));
    call(&p, add(4, 1, 0, KEY));
    let polls = Replies::default();
    polls
        .send(&p, long_poll(4, 0, 60_000))
        .expect("LAC 0 has not passed 0: waits");
    // The journal has not made entry 2 durable yet (its completion is held), but the LAC
    // it carries is the writer's, confirmed by an ack quorum: the poll wakes now.
    storage.hold_completions(true);
    let adds = Replies::default();
    adds.send(&p, add(4, 2, 1, KEY));
    assert!(
        adds.take().is_empty(),
        "the add is not answered before it is durable"
    );
    let got = polls.take();
    assert_eq!(
        got.len(),
        1,
        "the long poll wakes on the stored add: {got:?}"
    );
    assert!(matches!(
        got[0],
        Response::Read {
            status: Status::Ok,
            entry: 1,
            max_lac: Some(1),
            ..
        }
    ));
    storage.hold_completions(false);
    assert_eq!(storage.release_completions(), 1);
    assert_eq!(adds.take().len(), 1, "the add is answered once durable");
    // An add refused (wrong master key) carries no LAC to anyone.
    polls
        .send(&p, long_poll(4, 1, 60_000))
        .expect("LAC 1 has not passed 1: waits");
    assert!(matches!(
        call(&p, add(4, 3, 2, b"another key")),
        Response::Add {
            status: Status::Unauthorized,
            ..
        }
    ));
    assert!(polls.take().is_empty(), "a refused add woke a long poll");
    assert_eq!(p.waiting_long_polls(), 1);
}

#[test]
fn long_poll_times_out_with_the_current_lac() {
    let (p, _) = processor();
    call(&p, add(4, 0, -1, KEY));
    call(&p, add(4, 1, 0, KEY));
    let replies = Replies::default();
    let timer = replies.send(&p, long_poll(4, 0, 10)).expect("waits");
    p.expire_long_poll(timer.id);
    assert_eq!(
        replies.take(),
        vec![Response::Read {
            status: Status::Ok,
            ledger: 4,
            entry: -1,
            body: None,
            max_lac: Some(0),
        }]
    );
}

#[test]
fn long_poll_answers_at_once_when_the_lac_already_passed() {
    let (p, _) = processor();
    call(&p, add(4, 0, -1, KEY));
    call(&p, add(4, 1, 0, KEY));
    call(&p, add(4, 2, 1, KEY));
    let r = call(&p, long_poll(4, 0, 60_000));
    assert_eq!(r.status(), Status::Ok);
    assert_eq!(read_body(&r).unwrap(), entry_body(4, 1, 0, b"payload 1"));
    // The next entry is not on this bookie: EOK with the LAC and no body.
    let (p, _) = processor();
    call(&p, add(4, 0, -1, KEY));
    call(&p, add(4, 5, 3, KEY));
    let r = call(&p, long_poll(4, 0, 60_000));
    assert_eq!(
        r,
        Response::Read {
            status: Status::Ok,
            ledger: 4,
            entry: 1,
            body: None,
            max_lac: Some(3)
        }
    );
}

#[test]
fn explicit_lac_wakes_long_polls() {
    let (p, _) = processor();
    call(&p, add(4, 0, -1, KEY));
    call(&p, add(4, 1, -1, KEY));
    let replies = Replies::default();
    replies.send(&p, long_poll(4, -1, 60_000)).expect("waits");
    let wl = Request::WriteLac {
        ledger: 4,
        lac: 1,
        master_key: Bytes::from_static(KEY),
        body: Bytes::from_static(b"lac body"),
    };
    assert_eq!(call(&p, wl).status(), Status::Ok);
    let got = replies.take();
    assert_eq!(got.len(), 1);
    assert_eq!(
        read_body(&got[0]).unwrap(),
        entry_body(4, 0, -1, b"payload 0")
    );
}

#[test]
fn piggyback_without_previous_lac_or_with_an_entry_id_is_ebadreq() {
    let (p, _) = processor();
    call(&p, add(4, 0, -1, KEY));
    let no_prev = Request::Read(ReadRequest {
        piggyback: true,
        ..ReadRequest::entry(4, -1)
    });
    assert_eq!(call(&p, no_prev).status(), Status::BadRequest);
    let with_entry = Request::Read(ReadRequest {
        piggyback: true,
        previous_lac: Some(0),
        timeout_ms: Some(100),
        ..ReadRequest::entry(4, 3)
    });
    assert_eq!(call(&p, with_entry).status(), Status::BadRequest);
    assert_eq!(p.pending_reads(), 0);
}

#[test]
fn expire_all_answers_every_waiting_long_poll() {
    let (p, _) = processor();
    call(&p, add(4, 0, -1, KEY));
    let replies = Replies::default();
    replies.send(&p, long_poll(4, 3, 60_000)).expect("waits");
    replies.send(&p, long_poll(4, 5, 60_000)).expect("waits");
    p.expire_all_long_polls();
    let got = replies.take();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|r| r.status() == Status::Ok));
    assert_eq!(p.pending_reads(), 0);
}

#[test]
fn read_lac_returns_explicit_lac_and_last_entry() {
    let (p, _) = processor();
    call(&p, fence_read(2, -1, Some(KEY))); // creates the ledger with no entry
    assert_eq!(
        call(&p, Request::ReadLac { ledger: 2 }).status(),
        Status::NoEntry
    );
    call(&p, recovery_add(2, 0, KEY));
    assert_eq!(
        call(&p, Request::ReadLac { ledger: 2 }),
        Response::ReadLac {
            status: Status::Ok,
            ledger: 2,
            lac_body: None,
            last_entry_body: Some(entry_body(2, 0, -1, b"payload 0")),
        }
    );
    let wl = Request::WriteLac {
        ledger: 2,
        lac: 0,
        master_key: Bytes::from_static(KEY),
        body: Bytes::from_static(b"explicit"),
    };
    assert_eq!(
        call(&p, wl),
        Response::WriteLac {
            status: Status::Ok,
            ledger: 2
        }
    );
    match call(&p, Request::ReadLac { ledger: 2 }) {
        Response::ReadLac {
            status, lac_body, ..
        } => {
            assert_eq!(status, Status::Ok);
            assert_eq!(lac_body.as_deref(), Some(&b"explicit"[..]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn force_ledger_completes_when_durable() {
    let (p, storage) = processor();
    storage.hold_completions(true);
    let replies = Replies::default();
    replies.send(&p, Request::ForceLedger { ledger: 8 });
    assert!(replies.take().is_empty());
    storage.release_completions();
    assert_eq!(
        replies.take(),
        vec![Response::ForceLedger {
            status: Status::Ok,
            ledger: 8
        }]
    );
}

#[test]
fn bookie_info_fills_the_requested_fields() {
    let (p, storage) = processor();
    storage.set_space(folio_env::DiskSpace {
        free: 100,
        total: 1000,
    });
    let info = |requested| call(&p, Request::GetBookieInfo { requested });
    assert_eq!(
        info(3),
        Response::BookieInfo {
            status: Status::Ok,
            total_disk_capacity: Some(1000),
            free_disk_space: Some(100)
        }
    );
    assert_eq!(
        info(2),
        Response::BookieInfo {
            status: Status::Ok,
            total_disk_capacity: None,
            free_disk_space: Some(100)
        }
    );
    assert_eq!(
        info(0),
        Response::BookieInfo {
            status: Status::Ok,
            total_disk_capacity: None,
            free_disk_space: None
        }
    );
}

#[test]
fn list_of_entries_uses_the_availability_encoding() {
    let (p, _) = processor();
    for e in [0, 1, 2, 5, 9, 10] {
        call(&p, add(6, e, -1, KEY));
    }
    match call(&p, Request::GetListOfEntriesOfLedger { ledger: 6 }) {
        Response::ListOfEntries {
            status,
            ledger,
            availability: Some(bytes),
        } => {
            assert_eq!((status, ledger), (Status::Ok, 6));
            let decoded = AvailabilityOfEntries::decode(&bytes).unwrap();
            assert_eq!(
                decoded.entries().collect::<Vec<_>>(),
                vec![0, 1, 2, 5, 9, 10]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn auth_answers_as_auth_disabled_and_start_tls_is_ebadreq() {
    let (p, _) = processor();
    let r = call(
        &p,
        Request::Auth(AuthMessage {
            plugin_name: "SASL".into(),
            payload: Bytes::from_static(b"hello"),
        }),
    );
    assert_eq!(
        r,
        Response::Auth {
            status: Status::Ok,
            message: AuthMessage {
                plugin_name: "AuthDisabledPlugin".into(),
                payload: Bytes::new()
            }
        }
    );
    assert_eq!(
        call(&p, Request::StartTls),
        Response::StartTls {
            status: Status::BadRequest
        }
    );
}

fn batch(ledger: i64, start: i64, max_count: i32, max_size: i64) -> Request {
    Request::BatchRead {
        ledger,
        start_entry: start,
        max_count,
        max_size,
        fence: false,
        master_key: None,
    }
}

fn batch_entries(r: Response) -> (Status, Vec<Bytes>) {
    match r {
        Response::BatchRead {
            status, entries, ..
        } => (status, entries),
        other => panic!("{other:?}"),
    }
}

#[test]
fn batch_read_stops_at_count_size_or_first_missing_entry() {
    let (p, _) = processor();
    for e in [0, 1, 2, 3, 5] {
        call(&p, add(2, e, -1, KEY));
    }
    let (status, entries) = batch_entries(call(&p, batch(2, 0, 0, 0)));
    assert_eq!(status, Status::Ok);
    assert_eq!(entries.len(), 4, "stops before the missing entry 4");
    assert_eq!(entries[2], entry_body(2, 2, -1, b"payload 2"));
    let (_, entries) = batch_entries(call(&p, batch(2, 1, 2, 0)));
    assert_eq!(
        entries,
        vec![
            entry_body(2, 1, -1, b"payload 1"),
            entry_body(2, 2, -1, b"payload 2")
        ]
    );
    // Size: one entry is 32 + 8 + 9 = 49 bytes; 36 fixed + 53 per entry: 150 fits two.
    let (_, entries) = batch_entries(call(&p, batch(2, 0, 0, 150)));
    assert_eq!(entries.len(), 2);
    // The first entry alone is always returned, even over the size.
    let (_, entries) = batch_entries(call(&p, batch(2, 0, 0, 1)));
    assert_eq!(entries.len(), 1);
    assert_eq!(
        batch_entries(call(&p, batch(2, 4, 0, 0))).0,
        Status::NoEntry
    );
    assert_eq!(
        batch_entries(call(&p, batch(3, 0, 0, 0))).0,
        Status::NoLedger
    );
}

#[test]
fn fencing_batch_read_fences_first() {
    let (p, storage) = processor();
    call(&p, add(2, 0, -1, KEY));
    let fenced = |key: Option<&[u8]>| Request::BatchRead {
        ledger: 2,
        start_entry: 0,
        max_count: 0,
        max_size: 0,
        fence: true,
        master_key: key.map(Bytes::copy_from_slice),
    };
    assert_eq!(call(&p, fenced(None)).status(), Status::Unauthorized);
    assert!(!storage.is_fenced(2));
    assert_eq!(call(&p, fenced(Some(KEY))).status(), Status::Ok);
    assert!(storage.is_fenced(2));
}

#[test]
fn reads_after_a_completion_run_on_the_offload_executor() {
    let (p, _) = processor();
    type Jobs = Mutex<Vec<Box<dyn FnOnce() + Send>>>;
    let jobs: Arc<Jobs> = Arc::default();
    let queue = jobs.clone();
    assert!(p.set_offload(Arc::new(move |job| queue.lock().push(job))));
    call(&p, add(3, 0, -1, KEY));
    // A fence read: the fence completes, the read waits for the executor.
    let replies = Replies::default();
    replies.send(&p, fence_read(3, 0, Some(KEY)));
    assert!(replies.take().is_empty());
    let pending: Vec<_> = std::mem::take(&mut *jobs.lock());
    assert_eq!(pending.len(), 1);
    pending.into_iter().for_each(|job| job());
    assert_eq!(replies.take()[0].status(), Status::Ok);
    // A long poll woken by an add: the wake-up runs on the executor too.
    call(&p, recovery_add(3, 1, KEY));
    replies.send(&p, long_poll(3, -1, 60_000)).expect("waits");
    call(&p, recovery_add(3, 2, KEY)); // carries LAC -1: no wake-up needed, but a check
    let mut r = match add(3, 3, 1, KEY) {
        Request::Add(a) => a,
        _ => unreachable!(),
    };
    r.recovery = true;
    call(&p, Request::Add(r));
    assert!(replies.take().is_empty());
    let pending: Vec<_> = std::mem::take(&mut *jobs.lock());
    assert!(!pending.is_empty());
    pending.into_iter().for_each(|job| job());
    let got = replies.take();
    assert_eq!(got.len(), 1);
    assert_eq!(
        read_body(&got[0]).unwrap(),
        entry_body(3, 0, -1, b"payload 0")
    );
}

type Jobs = Arc<Mutex<Vec<Box<dyn FnOnce() + Send>>>>;

/// A processor whose offloaded jobs queue up until the test runs them, on storage that
/// serves entries and LACs from memory without waiting.
fn processor_with_held_offload() -> (Processor<Arc<MemoryStorage>>, Jobs) {
    let (p, storage) = processor();
    storage.serve_without_waiting(true);
    let jobs: Jobs = Arc::default();
    let queue = jobs.clone();
    assert!(p.set_offload(Arc::new(move |job| queue.lock().push(job))));
    (p, jobs)
}

fn max_lac(r: &Response) -> Option<i64> {
    match r {
        Response::Read { max_lac, .. } => *max_lac,
        other => panic!("not a read response: {other:?}"),
    }
}

#[test]
fn a_long_poll_whose_entry_is_in_memory_is_answered_by_the_add_that_moves_the_lac() {
    let (p, jobs) = processor_with_held_offload();
    call(&p, add(4, 0, -1, KEY));
    let replies = Replies::default();
    replies.send(&p, long_poll(4, -1, 60_000)).expect("waits");
    assert!(replies.take().is_empty());
    // Entry 1 carries LAC 0: the poll is answered at once, on this thread, with entry 0.
    call(&p, add(4, 1, 0, KEY));
    let got = replies.take();
    assert_eq!(got.len(), 1, "answered without the read threads");
    assert_eq!(
        read_body(&got[0]).unwrap(),
        entry_body(4, 0, -1, b"payload 0")
    );
    assert_eq!(max_lac(&got[0]), Some(0));
    assert!(
        jobs.lock().is_empty(),
        "nothing was left for the read threads"
    );
}

#[test]
fn long_polls_past_the_inline_few_or_needing_a_read_that_waits_go_to_the_read_threads() {
    let (p, jobs) = processor_with_held_offload();
    call(&p, add(5, 0, -1, KEY));
    let replies = Replies::default();
    for _ in 0..10 {
        replies.send(&p, long_poll(5, -1, 60_000)).expect("waits");
    }
    call(&p, add(5, 1, 0, KEY));
    // Eight answered by the add, two by the read threads.
    assert_eq!(replies.take().len(), 8);
    let pending: Vec<_> = std::mem::take(&mut *jobs.lock());
    assert_eq!(pending.len(), 1);
    pending.into_iter().for_each(|job| job());
    let got = replies.take();
    assert_eq!(got.len(), 2);
    for r in &got {
        assert_eq!(read_body(r).unwrap(), entry_body(5, 0, -1, b"payload 0"));
        assert_eq!(max_lac(r), Some(0));
    }
    // A poll past entry 1 wants entry 2, which this bookie does not hold (entry 3 carries
    // LAC 2): not in memory, so the read threads answer, with the new LAC alone.
    replies.send(&p, long_poll(5, 1, 60_000)).expect("waits");
    call(&p, add(5, 3, 2, KEY));
    assert!(replies.take().is_empty());
    let pending: Vec<_> = std::mem::take(&mut *jobs.lock());
    pending.into_iter().for_each(|job| job());
    let got = replies.take();
    assert_eq!(got.len(), 1);
    assert_eq!(read_body(&got[0]), None);
    assert_eq!(max_lac(&got[0]), Some(2));
}

impl Replies {
    /// Sends a long poll as a bookie's connection task does: taken there if the processor
    /// can, otherwise `Err` with the request given back.
    fn poll_without_blocking(
        &self,
        p: &Processor<Arc<MemoryStorage>>,
        request: Request,
    ) -> Result<Option<LongPollTimer>, Request> {
        let sink = self.0.clone();
        let reply: Reply = Box::new(move |r| sink.lock().push(r));
        p.long_poll_without_blocking(ConnectionId::NONE, request, reply)
            .map_err(|(request, _)| request)
    }
}

#[test]
fn a_long_poll_whose_lac_is_in_memory_is_taken_without_the_read_threads() {
    let (p, jobs) = processor_with_held_offload();
    call(&p, add(4, 0, -1, KEY));
    let replies = Replies::default();
    // Waits: registered on the caller's thread, nothing for the read threads.
    let timer = replies
        .poll_without_blocking(&p, long_poll(4, 0, 60_000))
        .expect("taken")
        .expect("waits");
    assert_eq!(timer.timeout, std::time::Duration::from_secs(60));
    assert_eq!(p.waiting_long_polls(), 1);
    assert!(replies.take().is_empty());
    // Woken by the add that carries LAC 1, answered with entry 1.
    call(&p, add(4, 1, 0, KEY));
    call(&p, add(4, 2, 1, KEY));
    let got = replies.take();
    assert_eq!(got.len(), 1);
    assert_eq!(
        read_body(&got[0]).unwrap(),
        entry_body(4, 1, 0, b"payload 1")
    );
    assert_eq!(max_lac(&got[0]), Some(1));
    // A poll the LAC already passed is answered at once, from memory.
    let at_once = replies.poll_without_blocking(&p, long_poll(4, -1, 60_000));
    assert!(matches!(at_once, Ok(None)), "{at_once:?}");
    let got = replies.take();
    assert_eq!(got.len(), 1);
    assert_eq!(
        read_body(&got[0]).unwrap(),
        entry_body(4, 0, -1, b"payload 0")
    );
    assert_eq!(p.waiting_long_polls(), 0);
    assert_eq!(p.pending_reads(), 0);
    assert!(
        jobs.lock().is_empty(),
        "nothing was left for the read threads"
    );
}

#[test]
fn a_long_poll_not_servable_from_memory_is_given_back_or_answered_by_the_read_threads() {
    let (p, jobs) = processor_with_held_offload();
    // An unknown ledger's LAC is not in memory: given back, untouched.
    let poll = long_poll(7, 0, 60_000);
    let replies = Replies::default();
    assert_eq!(replies.poll_without_blocking(&p, poll.clone()), Err(poll));
    // Nor is anything that is not a long poll.
    call(&p, add(5, 0, -1, KEY));
    for request in [
        Request::Read(ReadRequest::entry(5, 0)),
        fence_read(5, 0, Some(KEY)),
        Request::ReadLac { ledger: 5 },
    ] {
        assert_eq!(
            replies.poll_without_blocking(&p, request.clone()),
            Err(request)
        );
    }
    // The LAC passed entry 1, which this bookie does not hold (entry 3 carries LAC 2): the
    // answer needs a read that may wait, so the read threads give it, with the LAC alone.
    call(&p, add(5, 3, 2, KEY));
    let taken = replies.poll_without_blocking(&p, long_poll(5, 0, 60_000));
    assert!(matches!(taken, Ok(None)), "{taken:?}");
    assert!(replies.take().is_empty());
    let pending: Vec<_> = std::mem::take(&mut *jobs.lock());
    assert_eq!(pending.len(), 1);
    pending.into_iter().for_each(|job| job());
    let got = replies.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status(), Status::Ok);
    assert_eq!(read_body(&got[0]), None);
    assert_eq!(max_lac(&got[0]), Some(2));
    assert_eq!(p.waiting_long_polls(), 0);
    // Storage that serves nothing from memory: every long poll is given back.
    let (p, _) = processor();
    call(&p, add(6, 0, -1, KEY));
    let poll = long_poll(6, 0, 60_000);
    assert_eq!(replies.poll_without_blocking(&p, poll.clone()), Err(poll));
}

#[test]
fn no_long_poll_misses_its_wake_up_under_concurrent_adds() {
    // Woken on the read threads' path, answered by the adds themselves, and registered by
    // the connection's task as well.
    no_long_poll_misses_its_wake_up(false, false);
    no_long_poll_misses_its_wake_up(true, false);
    no_long_poll_misses_its_wake_up(true, true);
}

fn no_long_poll_misses_its_wake_up(without_waiting: bool, polls_without_blocking: bool) {
    let (p, storage) = processor();
    storage.serve_without_waiting(without_waiting);
    call(&p, add(9, 0, -1, KEY));
    let replies = Replies::default();
    let polls = 200;
    std::thread::scope(|s| {
        let adder = s.spawn(|| {
            for e in 1..=polls + 1 {
                assert_eq!(call(&p, add(9, e, e - 1, KEY)).status(), Status::Ok);
            }
        });
        for prev in 0..polls {
            let (p, replies) = (&p, &replies);
            s.spawn(move || {
                let poll = long_poll(9, prev, 600_000);
                if polls_without_blocking {
                    let taken = replies.poll_without_blocking(p, poll);
                    assert!(taken.is_ok(), "ledger 9's LAC is in memory: {taken:?}");
                } else {
                    let _ = replies.send(p, poll);
                }
            });
        }
        adder.join().unwrap();
    });
    // The LAC is now `polls`, past every previous LAC: all were answered by wake-ups (or at
    // once), none by a timer, since no timer was ever fired here.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while replies.0.lock().len() < polls as usize {
        assert!(
            std::time::Instant::now() < deadline,
            "{} long polls still waiting",
            p.waiting_long_polls()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(p.waiting_long_polls(), 0);
    assert!(replies.take().iter().all(|r| r.status() == Status::Ok));
}

#[test]
fn a_long_poll_racing_the_last_add_is_answered() {
    // No later add would wake a poll that missed this one's wake-up.
    a_long_poll_racing_the_last_add(false);
    a_long_poll_racing_the_last_add(true);
}

fn a_long_poll_racing_the_last_add(polls_without_blocking: bool) {
    let (p, storage) = processor();
    storage.serve_without_waiting(true);
    call(&p, add(10, 0, -1, KEY));
    let replies = Replies::default();
    let rounds = 300;
    for e in 1..=rounds {
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                assert_eq!(call(&p, add(10, e, e - 1, KEY)).status(), Status::Ok);
            });
            start.wait();
            let poll = long_poll(10, e - 2, 600_000);
            if polls_without_blocking {
                assert!(replies.poll_without_blocking(&p, poll).is_ok());
            } else {
                let _ = replies.send(&p, poll);
            }
        });
        // The LAC is now e - 1, past the poll's e - 2: answered, with no timer fired.
        assert_eq!(
            replies.take().len(),
            1,
            "round {e}: the poll missed the add's wake-up"
        );
        assert_eq!(p.waiting_long_polls(), 0);
    }
}

/// One random request over a small space of ledgers, entries and keys.
fn arbitrary_request() -> impl proptest::strategy::Strategy<Value = Request> {
    use proptest::prelude::*;
    let key = prop_oneof![Just(&KEY[..]), Just(&OTHER_KEY[..])];
    prop_oneof![
        (0i64..3, 0i64..6, -1i64..5, key.clone(), any::<bool>()).prop_map(|(l, e, lac, k, rec)| {
            match add(l, e, lac, k) {
                Request::Add(a) => Request::Add(AddRequest {
                    recovery: rec,
                    high_priority: rec,
                    ..a
                }),
                _ => unreachable!(),
            }
        }),
        (0i64..3, -1i64..6).prop_map(|(l, e)| Request::Read(ReadRequest::entry(l, e))),
        (0i64..3, key.clone()).prop_map(|(l, k)| fence_read(l, -1, Some(k))),
        (0i64..3, -1i64..5, 0i64..3).prop_map(|(l, prev, t)| long_poll(l, prev, t * 1000)),
        (0i64..3).prop_map(|l| Request::ReadLac { ledger: l }),
        (0i64..3, 0i64..5, key).prop_map(|(l, lac, k)| Request::WriteLac {
            ledger: l,
            lac,
            master_key: Bytes::copy_from_slice(k),
            body: Bytes::from_static(b"lac"),
        }),
        (0i64..3).prop_map(|l| Request::ForceLedger { ledger: l }),
        (0i64..3).prop_map(|l| Request::GetListOfEntriesOfLedger { ledger: l }),
        (0i64..3, 0i64..6).prop_map(|(l, s)| batch(l, s, 3, 0)),
    ]
}

proptest::proptest! {
    /// Every request is answered exactly once (long polls at the latest when expired), and a
    /// ledger fenced by an answered fence read never again takes a non-recovery add.
    #[test]
    fn every_request_is_answered_once_and_fences_hold(
        requests in proptest::collection::vec(arbitrary_request(), 1..60)
    ) {
        let (p, _) = processor();
        let replies = Replies::default();
        let mut fenced = std::collections::HashSet::new();
        for request in &requests {
            let before = replies.0.lock().len();
            replies.send(&p, request.clone());
            let answers = replies.0.lock()[before..].to_vec();
            if let (Request::Read(r), [Response::Read { status, .. }]) = (request, &answers[..])
                && r.fence
                && matches!(status, Status::Ok | Status::NoEntry)
            {
                fenced.insert(r.ledger);
            }
            // An add may also wake long polls: its own answer is the one Add response.
            let add_status = answers.iter().find_map(|r| match r {
                Response::Add { status, .. } => Some(*status),
                _ => None,
            });
            if let (Request::Add(a), Some(status)) = (request, add_status)
                && fenced.contains(&a.ledger)
                && !a.recovery
            {
                proptest::prop_assert_ne!(status, Status::Ok, "add to fenced ledger {} accepted", a.ledger);
            }
        }
        p.expire_all_long_polls();
        proptest::prop_assert_eq!(replies.take().len(), requests.len());
        proptest::prop_assert_eq!(p.pending_reads(), 0);
        proptest::prop_assert_eq!(p.pending_adds(), 0);
    }
}
