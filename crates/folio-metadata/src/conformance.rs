//! The conformance suite of the metadata contract: the properties every driver
//! (`mem://`, `sqlite://`, `zk://`, `etcd://`) must have, written once against
//! [`MetadataStore`] so every driver runs the very same tests.
//!
//! A driver's test provides a [`Harness`] (how to open another session on the cluster
//! under test, and how to plant a raw record) and calls [`run_all`], or one property
//! function per `#[tokio::test]`. Each function panics with a message naming the
//! broken property. Tests use fresh ledger ids and random bookie ids, so a cluster
//! may hold other data; but cluster-wide state (the election, the autorecovery flag)
//! means two properties should not run on one cluster at the same time, and
//! [`format_cluster_wipes_everything`] destroys the cluster's data.
//! Waits are generous (the machine is slow and shared); nothing asserts on speed.

pub mod outages;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use folio_types::metadata::{DigestType, LedgerMetadata, LedgerState};
use folio_types::quorum::QuorumConfig;
use folio_types::{BookieId, LedgerId};

use crate::format;
use crate::store::*;
use crate::{MetadataError, Result};

/// How long to wait for an eventual effect (session expiry, a watch firing).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How a driver's tests give the suite access to the cluster under test.
#[async_trait]
pub trait Harness: Send + Sync {
    /// Opens a new session (a new client) on the cluster under test.
    async fn connect(&self) -> Result<Arc<dyn MetadataStore>>;

    /// Stores `bytes` as ledger `ledger`'s metadata record as is, bypassing the
    /// encoder (the suite plants corrupt records with it).
    async fn put_raw_ledger_record(&self, ledger: LedgerId, bytes: &[u8]) -> Result<()>;
}

/// A property of the suite, by name (for `run_all`'s messages).
type Property =
    for<'a> fn(&'a dyn Harness) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Calls the macro `[$m]` with every property's name, `[$args]` first and the
/// destructive [`format_cluster_wipes_everything`] last: the one list of the suite, which
/// [`ALL`] and [`conformance_suite!`](crate::conformance_suite) both expand.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conformance_properties {
    ([$($m:tt)*] $($args:tt)*) => {
        $($m)*! {
            [$($args)*]
            cluster_init_and_read,
            ledger_create_read_update_delete_with_cas,
            concurrent_cas_has_one_winner,
            ledger_ids_are_unique_under_concurrency,
            list_ledgers_pages_through_everything,
            cookies_use_version_cas,
            registration_visible_until_session_closed,
            registration_removed_on_unregister_and_drop,
            bookie_watch_fires,
            ledger_watch_fires,
            exactly_one_leader_and_failover,
            underreplication_lock_is_exclusive_and_dies_with_session,
            a_remark_during_the_repair_survives_mark_replicated,
            auditor_check_ctimes_are_shared,
            operation_records_are_shared_and_die_with_their_session,
            autorecovery_settings_are_shared,
            corrupt_record_is_an_error_naming_the_ledger,
            bad_input_is_refused_with_clear_errors;
            format_cluster_wipes_everything
        }
    };
}

macro_rules! properties {
    ([] $($name:ident),*; $destructive:ident) => {
        /// Every property, in the order [`run_all`] runs them (the destructive
        /// [`format_cluster_wipes_everything`] is not included).
        pub const ALL: &[(&str, Property)] = &[$((stringify!($name), |h| Box::pin($name(h)))),*];
    };
}

__with_conformance_properties!([properties]);

/// One `#[tokio::test]` per property, each on a fresh harness, plus
/// `run_all_on_one_cluster` ([`run_all`] on one harness). `$make` is a closure from the
/// test's name to the [`Harness`] (a driver's test file calls this once):
/// `folio_metadata::conformance_suite!(|_name| MyHarness::new());`
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::__with_conformance_properties!([$crate::__conformance_tests] $make);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ([$make:expr] $($name:ident),*; $destructive:ident) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let h = ($make)(stringify!($name));
                $crate::conformance::$name(&h).await;
            }
        )*

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $destructive() {
            let h = ($make)(stringify!($destructive));
            $crate::conformance::$destructive(&h).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn run_all_on_one_cluster() {
            let h = ($make)("run_all");
            $crate::conformance::run_all(&h).await;
        }
    };
}

/// Runs every property of [`ALL`] in turn, each under a generous timeout, so a
/// hang fails the test instead of stalling it.
pub async fn run_all(h: &dyn Harness) {
    for (name, property) in ALL {
        tracing::info!("metadata conformance: {name}");
        if tokio::time::timeout(PATIENCE * 3, property(h))
            .await
            .is_err()
        {
            panic!(
                "metadata conformance property {name} did not finish within {:?}",
                PATIENCE * 3
            );
        }
    }
}

// ---- helpers ----------------------------------------------------------------------

async fn connect(h: &dyn Harness) -> Arc<dyn MetadataStore> {
    h.connect()
        .await
        .expect("connecting to the cluster under test")
}

/// Initialises the cluster unless it already is.
async fn ensure_cluster(s: &dyn MetadataStore) -> ClusterInfo {
    match s.init_cluster().await {
        Ok(info) => info,
        Err(e) if e.is_already_exists() => s.read_cluster().await.expect("reading the cluster"),
        Err(e) => panic!("init_cluster failed: {e}"),
    }
}

fn random_bookie(tag: &str) -> BookieId {
    BookieId::new(format!("conf-{tag}-{:08x}.example:3181", fastrand::u32(..))).unwrap()
}

fn sample_metadata() -> LedgerMetadata {
    let ensemble = (1..=3)
        .map(|i| BookieId::new(format!("192.0.2.{i}:3181")).unwrap())
        .collect();
    let mut m = LedgerMetadata::new_open(
        QuorumConfig::new(3, 2, 2).unwrap(),
        ensemble,
        DigestType::Crc32c,
        b"secret".to_vec(),
    );
    m.c_token = fastrand::i64(1..);
    m.custom_metadata
        .insert("suite".into(), b"conformance".to_vec());
    m
}

/// A fresh ledger with sample metadata; returns its id and version.
async fn new_ledger(s: &dyn MetadataStore) -> (LedgerId, LedgerMetadata, Version) {
    let id = s.generate_ledger_id().await.expect("generate_ledger_id");
    let m = sample_metadata();
    let v = s.create_ledger(id, &m).await.expect("create_ledger");
    (id, m, v)
}

/// Polls `check` until it holds, failing with `what` after [`PATIENCE`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if check().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {PATIENCE:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until a watch's value satisfies `pred`.
async fn watch_until<T: Clone>(
    what: &str,
    rx: &mut tokio::sync::watch::Receiver<T>,
    pred: impl Fn(&T) -> bool,
) {
    let r = tokio::time::timeout(PATIENCE, rx.wait_for(|v| pred(v))).await;
    match r {
        Ok(Ok(_)) => {}
        Ok(Err(_)) => panic!("the watch closed before {what}"),
        Err(_) => panic!("timed out after {PATIENCE:?} waiting for a watch to show {what}"),
    }
}

// ---- properties -------------------------------------------------------------------

/// Initialising twice fails with `AlreadyExists`; every session reads the same identity.
pub async fn cluster_init_and_read(h: &dyn Harness) {
    let a = connect(h).await;
    let b = connect(h).await;
    let info = ensure_cluster(a.as_ref()).await;
    assert!(!info.instance_id.is_empty(), "empty instance id");
    assert!(!info.layout.is_empty(), "empty layout");
    let err = b
        .init_cluster()
        .await
        .expect_err("a second init_cluster must fail");
    assert!(
        err.is_already_exists(),
        "second init_cluster: expected AlreadyExists, got {err}"
    );
    assert_eq!(
        b.read_cluster().await.unwrap(),
        info,
        "sessions disagree on the cluster identity"
    );
}

/// Create, read, CAS update, stale update refused, delete with CAS, retried create.
pub async fn ledger_create_read_update_delete_with_cas(h: &dyn Harness) {
    let s = connect(h).await;
    ensure_cluster(s.as_ref()).await;
    let (id, m, v1) = new_ledger(s.as_ref()).await;
    let read = s.read_ledger(id).await.unwrap();
    assert_eq!(read.value, m, "read back different metadata");
    assert_eq!(
        read.version, v1,
        "read back a different version than create returned"
    );

    // The same create retried (same cToken) succeeds; a different one is refused.
    assert_eq!(
        s.create_ledger(id, &m).await.unwrap(),
        v1,
        "a retried create must return the record's version"
    );
    let other = sample_metadata();
    let err = s
        .create_ledger(id, &other)
        .await
        .expect_err("create over an existing ledger");
    assert!(err.is_already_exists(), "expected AlreadyExists, got {err}");

    let mut closed = m.clone();
    closed.state = LedgerState::Closed;
    closed.last_entry_id = 9;
    closed.length = 100;
    let v2 = s.write_ledger(id, &closed, v1).await.unwrap();
    assert_ne!(v1, v2, "an update must change the version");
    let err = s
        .write_ledger(id, &m, v1)
        .await
        .expect_err("a stale write must fail");
    assert!(
        err.is_bad_version(),
        "stale write: expected BadVersion, got {err}"
    );
    let read = s.read_ledger(id).await.unwrap();
    assert_eq!(
        (read.value, read.version),
        (closed, v2),
        "a failed CAS changed the record"
    );

    let err = s
        .delete_ledger(id, Some(v1))
        .await
        .expect_err("a stale delete must fail");
    assert!(
        err.is_bad_version(),
        "stale delete: expected BadVersion, got {err}"
    );
    s.delete_ledger(id, Some(v2)).await.unwrap();
    let err = s
        .read_ledger(id)
        .await
        .expect_err("reading a deleted ledger");
    assert!(err.is_not_found(), "expected NotFound, got {err}");
    assert!(
        err.to_string().contains(&format!("ledger {id}")),
        "message does not name the ledger: {err}"
    );
    let err = s
        .write_ledger(id, &m, v2)
        .await
        .expect_err("writing a deleted ledger");
    assert!(err.is_not_found(), "expected NotFound, got {err}");
    let err = s
        .delete_ledger(id, None)
        .await
        .expect_err("deleting a deleted ledger");
    assert!(err.is_not_found(), "expected NotFound, got {err}");
}

/// Eight sessions race to update one ledger from the same version: exactly one wins.
pub async fn concurrent_cas_has_one_winner(h: &dyn Harness) {
    let s = connect(h).await;
    ensure_cluster(s.as_ref()).await;
    let (id, m, v) = new_ledger(s.as_ref()).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let c = connect(h).await;
        let mut mine = m.clone();
        mine.custom_metadata.insert("writer".into(), vec![i]);
        tasks.push(tokio::spawn(async move {
            c.write_ledger(id, &mine, v).await.map(|_| i)
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.expect("task panicked") {
            Ok(i) => winners.push(i),
            Err(e) => assert!(
                e.is_bad_version(),
                "a losing CAS must be BadVersion, got {e}"
            ),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one concurrent CAS must win, winners: {winners:?}"
    );
    let stored = s.read_ledger(id).await.unwrap().value;
    assert_eq!(
        stored.custom_metadata["writer"],
        vec![winners[0]],
        "the stored value is not the winner's"
    );
}

/// Sixteen tasks on four sessions generate ids concurrently: no duplicates.
pub async fn ledger_ids_are_unique_under_concurrency(h: &dyn Harness) {
    let sessions: Vec<_> = futures_join(4, || connect(h)).await;
    let mut tasks = Vec::new();
    for t in 0..16 {
        let s = sessions[t % sessions.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..20 {
                ids.push(s.generate_ledger_id().await.expect("generate_ledger_id"));
            }
            ids
        }));
    }
    let mut all = BTreeSet::new();
    let mut count = 0;
    for t in tasks {
        for id in t.await.expect("task panicked") {
            assert!(id >= 0, "negative ledger id {id}");
            all.insert(id);
            count += 1;
        }
    }
    assert_eq!(
        all.len(),
        count,
        "{} duplicate ledger ids among {count}",
        count - all.len()
    );
}

async fn futures_join<T, F, Fut>(n: usize, f: F) -> Vec<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = T>,
{
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(f().await);
    }
    out
}

/// Paging with a small limit visits every ledger once, in ascending order.
pub async fn list_ledgers_pages_through_everything(h: &dyn Harness) {
    let s = connect(h).await;
    ensure_cluster(s.as_ref()).await;
    let mut created = BTreeSet::new();
    for _ in 0..23 {
        created.insert(new_ledger(s.as_ref()).await.0);
    }
    let mut seen = Vec::new();
    let mut start = None;
    loop {
        let page = s.list_ledgers(start, 7).await.unwrap();
        assert!(
            page.ledgers.len() <= 7,
            "a page exceeded its limit: {}",
            page.ledgers.len()
        );
        seen.extend(&page.ledgers);
        match page.next {
            Some(n) => {
                assert_eq!(
                    Some(&n),
                    page.ledgers.last(),
                    "next must be the page's last id"
                );
                start = Some(n);
            }
            None => break,
        }
    }
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "listing is not strictly ascending"
    );
    let all = crate::all_ledger_ids(s.as_ref()).await.unwrap();
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "all_ledger_ids is not strictly ascending"
    );
    let seen: BTreeSet<_> = seen.into_iter().collect();
    assert!(
        created.is_subset(&seen),
        "listing missed ledgers {:?}",
        created.difference(&seen).collect::<Vec<_>>()
    );
    let all: BTreeSet<_> = all.into_iter().collect();
    assert!(
        created.is_subset(&all),
        "all_ledger_ids missed ledgers {:?}",
        created.difference(&all).collect::<Vec<_>>()
    );
}

/// Cookies: create only if absent, replace and delete only at the expected version.
pub async fn cookies_use_version_cas(h: &dyn Harness) {
    let s = connect(h).await;
    ensure_cluster(s.as_ref()).await;
    let b = random_bookie("cookie");
    let err = s.read_cookie(&b).await.expect_err("no cookie yet");
    assert!(err.is_not_found(), "expected NotFound, got {err}");
    let v1 = s
        .write_cookie(&b, b"5\nbookieHost: \"x\"\n", None)
        .await
        .unwrap();
    let err = s
        .write_cookie(&b, b"other", None)
        .await
        .expect_err("creating a cookie twice");
    assert!(err.is_already_exists(), "expected AlreadyExists, got {err}");
    let v2 = s.write_cookie(&b, b"second", Some(v1)).await.unwrap();
    assert_ne!(v1, v2);
    let err = s
        .write_cookie(&b, b"third", Some(v1))
        .await
        .expect_err("stale cookie write");
    assert!(err.is_bad_version(), "expected BadVersion, got {err}");
    let read = s.read_cookie(&b).await.unwrap();
    assert_eq!((read.value.as_slice(), read.version), (&b"second"[..], v2));
    assert!(
        s.list_cookies().await.unwrap().contains(&b),
        "list_cookies misses {b}"
    );
    let err = s
        .delete_cookie(&b, v1)
        .await
        .expect_err("stale cookie delete");
    assert!(err.is_bad_version(), "expected BadVersion, got {err}");
    s.delete_cookie(&b, v2).await.unwrap();
    assert!(s.read_cookie(&b).await.unwrap_err().is_not_found());
    assert!(
        !s.list_cookies().await.unwrap().contains(&b),
        "deleted cookie still listed"
    );
}

fn sample_info(b: &BookieId) -> BookieServiceInfo {
    let mut info = BookieServiceInfo::default();
    info.endpoints.push(Endpoint {
        id: "bookie".into(),
        host: b.as_str().rsplit_once(':').unwrap().0.into(),
        port: 3181,
        protocol: "bookie-rpc".into(),
        auth: vec![],
        extensions: vec![],
    });
    info
}

/// A registration is seen by other sessions, can move to read-only, refuses a
/// duplicate, and vanishes when its session is closed.
pub async fn registration_visible_until_session_closed(h: &dyn Harness) {
    let a = connect(h).await;
    let b = connect(h).await;
    ensure_cluster(a.as_ref()).await;
    let id = random_bookie("reg");
    let info = sample_info(&id);
    let mut reg = a
        .register_bookie(&id, BookieMode::Writable, &info)
        .await
        .unwrap();
    assert_eq!(reg.bookie_id(), &id);
    let set = b.list_bookies().await.unwrap();
    assert!(
        set.writable.contains(&id) && !set.readonly.contains(&id),
        "{id} not listed writable: {set:?}"
    );
    assert_eq!(b.bookie_service_info(&id).await.unwrap(), info);
    let err = b
        .register_bookie(&id, BookieMode::Writable, &info)
        .await
        .expect_err("registering a live bookie id twice");
    assert!(err.is_already_exists(), "expected AlreadyExists, got {err}");

    reg.set_mode(BookieMode::ReadOnly).await.unwrap();
    assert_eq!(reg.mode(), BookieMode::ReadOnly);
    let set = b.list_bookies().await.unwrap();
    assert!(
        set.readonly.contains(&id) && !set.writable.contains(&id),
        "{id} not listed read-only: {set:?}"
    );

    a.close().await.unwrap();
    eventually(
        &format!("{id} disappears after its session closed"),
        || async {
            let set = b.list_bookies().await.unwrap();
            !set.writable.contains(&id) && !set.readonly.contains(&id)
        },
    )
    .await;
    let err = a
        .list_bookies()
        .await
        .expect_err("a closed session must refuse calls");
    assert_eq!(err, MetadataError::SessionExpired);
    drop(reg);
    // The id is free again.
    let again = b
        .register_bookie(&id, BookieMode::Writable, &info)
        .await
        .unwrap();
    again.unregister().await.unwrap();
}

/// Explicit unregister removes at once; dropping the handle removes too.
pub async fn registration_removed_on_unregister_and_drop(h: &dyn Harness) {
    let a = connect(h).await;
    ensure_cluster(a.as_ref()).await;
    let id = random_bookie("unreg");
    let reg = a
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .unwrap();
    assert_eq!(
        a.bookie_service_info(&id).await.unwrap(),
        BookieServiceInfo::default()
    );
    reg.unregister().await.unwrap();
    assert!(
        !a.list_bookies().await.unwrap().writable.contains(&id),
        "unregister left {id} behind"
    );
    let err = a
        .bookie_service_info(&id)
        .await
        .expect_err("info of an unregistered bookie");
    assert!(err.is_not_found(), "expected NotFound, got {err}");

    let reg = a
        .register_bookie(&id, BookieMode::ReadOnly, &BookieServiceInfo::default())
        .await
        .unwrap();
    assert!(a.list_bookies().await.unwrap().readonly.contains(&id));
    drop(reg);
    eventually(
        &format!("{id} disappears after its handle is dropped"),
        || async { !a.list_bookies().await.unwrap().readonly.contains(&id) },
    )
    .await;
}

/// A membership watch sees a bookie arrive and leave.
pub async fn bookie_watch_fires(h: &dyn Harness) {
    let a = connect(h).await;
    let b = connect(h).await;
    ensure_cluster(a.as_ref()).await;
    let id = random_bookie("watch");
    let mut rx = b.watch_bookies().await.unwrap();
    assert!(!rx.borrow().writable.contains(&id));
    let reg = a
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .unwrap();
    watch_until(&format!("{id} registered"), &mut rx, |s| {
        s.writable.contains(&id)
    })
    .await;
    reg.unregister().await.unwrap();
    watch_until(&format!("{id} gone"), &mut rx, |s| {
        !s.writable.contains(&id)
    })
    .await;
}

/// A ledger watch sees updates (with their versions) and the deletion.
pub async fn ledger_watch_fires(h: &dyn Harness) {
    let a = connect(h).await;
    let b = connect(h).await;
    ensure_cluster(a.as_ref()).await;
    let (id, m, v1) = new_ledger(a.as_ref()).await;
    let mut rx = b.watch_ledger(id).await.unwrap();
    assert_eq!(
        rx.borrow().as_ref().map(|v| v.version),
        Some(v1),
        "the watch must start at the current value"
    );
    let mut recovering = m.clone();
    recovering.state = LedgerState::InRecovery;
    let v2 = a.write_ledger(id, &recovering, v1).await.unwrap();
    watch_until("the ledger in recovery", &mut rx, |v| {
        v.as_ref()
            .is_some_and(|v| v.version == v2 && v.value.state == LedgerState::InRecovery)
    })
    .await;
    a.delete_ledger(id, None).await.unwrap();
    watch_until("the ledger deleted", &mut rx, Option::is_none).await;
}

/// Three candidates: exactly one leads; when its session closes another takes over.
pub async fn exactly_one_leader_and_failover(h: &dyn Harness) {
    let mut sessions = Vec::new();
    let mut candidacies = Vec::new();
    let mut names = Vec::new();
    for i in 0..3 {
        let s = connect(h).await;
        ensure_cluster(s.as_ref()).await;
        let name = random_bookie(&format!("auditor{i}"));
        candidacies.push(s.join_auditor_election(&name).await.unwrap());
        sessions.push(s);
        names.push(name);
    }
    let leaders = |c: &[Box<dyn LeaderCandidacy>]| -> Vec<usize> {
        c.iter()
            .enumerate()
            .filter(|(_, c)| *c.leadership().borrow())
            .map(|(i, _)| i)
            .collect()
    };
    eventually("one of three candidates leads", || {
        let l = leaders(&candidacies);
        async move { l.len() == 1 }
    })
    .await;
    let first = leaders(&candidacies)[0];
    assert_eq!(
        sessions[0].current_auditor().await.unwrap(),
        Some(names[first].clone())
    );

    sessions[first].close().await.unwrap();
    eventually("another candidate takes over", || {
        let l = leaders(&candidacies);
        async move { l.len() == 1 && l[0] != first }
    })
    .await;
    let second = leaders(&candidacies)[0];
    let other = (0..3).find(|i| *i != first).unwrap();
    assert_eq!(
        sessions[other].current_auditor().await.unwrap(),
        Some(names[second].clone())
    );
    assert!(
        !*candidacies[first].leadership().borrow(),
        "the closed session still believes it leads"
    );

    // Resigning hands over too.
    let c = candidacies.remove(second);
    c.resign().await.unwrap();
    let remaining = (0..3).find(|i| *i != first && *i != second).unwrap();
    let idx = if remaining > second {
        remaining - 1
    } else {
        remaining
    };
    let mut rx = candidacies[idx].leadership();
    watch_until("the last candidate leads", &mut rx, |l| *l).await;
}

/// One worker at a time holds a ledger's re-replication lock; it is freed on
/// release and when its holder's session ends; marks merge missing bookies.
pub async fn underreplication_lock_is_exclusive_and_dies_with_session(h: &dyn Harness) {
    let a = connect(h).await;
    let b = connect(h).await;
    ensure_cluster(a.as_ref()).await;
    let ledger = a.generate_ledger_id().await.unwrap();
    let (x, y) = (random_bookie("lost1"), random_bookie("lost2"));
    let err = a
        .try_lock_underreplicated(ledger, "w")
        .await
        .expect_err("locking an unmarked ledger");
    assert!(err.is_not_found(), "expected NotFound, got {err}");
    a.mark_underreplicated(ledger, std::slice::from_ref(&x))
        .await
        .unwrap();
    a.mark_underreplicated(ledger, std::slice::from_ref(&y))
        .await
        .unwrap();
    let ur = b.get_underreplicated(ledger).await.unwrap();
    assert_eq!(
        ur.missing_replicas,
        [x.clone(), y.clone()].into(),
        "marks must merge the missing bookies"
    );
    assert!(
        b.list_underreplicated()
            .await
            .unwrap()
            .iter()
            .any(|u| u.ledger_id == ledger)
    );

    let lock = a
        .try_lock_underreplicated(ledger, "worker-a")
        .await
        .unwrap()
        .expect("the first lock must succeed");
    assert_eq!(lock.ledger_id(), ledger);
    // Who holds it is readable from another session (BookKeeper's
    // getReplicationWorkerIdRereplicatingLedger), nobody once released.
    assert_eq!(
        b.underreplicated_lock_holder(ledger)
            .await
            .unwrap()
            .as_deref(),
        Some("worker-a")
    );
    assert!(
        b.try_lock_underreplicated(ledger, "worker-b")
            .await
            .unwrap()
            .is_none(),
        "two workers hold one ledger"
    );
    if let Some((ur, other)) = b.lock_next_underreplicated("worker-b").await.unwrap() {
        assert_ne!(ur.ledger_id, ledger, "lock_next handed out a held ledger");
        other.release().await.unwrap();
    }
    lock.release().await.unwrap();
    assert_eq!(b.underreplicated_lock_holder(ledger).await.unwrap(), None);
    let lock_b = b
        .try_lock_underreplicated(ledger, "worker-b")
        .await
        .unwrap()
        .expect("released lock must be free");
    assert!(
        a.try_lock_underreplicated(ledger, "worker-a")
            .await
            .unwrap()
            .is_none()
    );
    drop(lock_b);
    let _lock_a = loop_until_locked(a.as_ref(), ledger).await;

    // The holder dies: the lock is freed, the mark stays.
    a.close().await.unwrap();
    let lock_b = loop_until_locked(b.as_ref(), ledger).await;
    lock_b.mark_replicated().await.unwrap();
    let err = b
        .get_underreplicated(ledger)
        .await
        .expect_err("mark_replicated must remove the mark");
    assert!(err.is_not_found(), "expected NotFound, got {err}");
    b.remove_underreplicated(ledger).await.unwrap();
}

/// `mark_replicated` deletes the mark only at the version seen when the lock was taken
/// (BookKeeper's `markLedgerReplicated`): a bookie lost while the repair ran, re-marked by
/// the Auditor meanwhile, must not be forgotten. Also: a re-mark that adds a bookie resets
/// ctime, one that adds nothing writes nothing, and `lock_next` hands out the same version.
pub async fn a_remark_during_the_repair_survives_mark_replicated(h: &dyn Harness) {
    let a = connect(h).await;
    let b = connect(h).await;
    ensure_cluster(a.as_ref()).await;
    let ledger = a.generate_ledger_id().await.unwrap();
    let (x, y) = (random_bookie("lost1"), random_bookie("lost2"));
    a.mark_underreplicated(ledger, std::slice::from_ref(&x))
        .await
        .unwrap();
    let first = a.get_underreplicated(ledger).await.unwrap();
    let lock = a
        .try_lock_underreplicated(ledger, "worker-a")
        .await
        .unwrap()
        .expect("the mark is free");
    // Marking again with nothing new changes nothing (the lock's version stays good).
    b.mark_underreplicated(ledger, std::slice::from_ref(&x))
        .await
        .unwrap();
    assert_eq!(b.get_underreplicated(ledger).await.unwrap(), first);
    // The ctime clock is milliseconds: let one pass so that a reset is visible.
    tokio::time::sleep(Duration::from_millis(20)).await;
    b.mark_underreplicated(ledger, std::slice::from_ref(&y))
        .await
        .unwrap();
    let grown = b.get_underreplicated(ledger).await.unwrap();
    assert_eq!(grown.missing_replicas, [x.clone(), y.clone()].into());
    assert!(
        grown.ctime > first.ctime,
        "a re-mark that adds a bookie resets ctime: {:?} then {:?}",
        first.ctime,
        grown.ctime
    );
    lock.mark_replicated().await.unwrap();
    assert_eq!(
        b.get_underreplicated(ledger).await.unwrap(),
        grown,
        "mark_replicated deleted a mark re-marked after the lock was taken"
    );
    assert_eq!(b.underreplicated_lock_holder(ledger).await.unwrap(), None);

    // Unchanged since the lock (taken by lock_next this time): the mark goes.
    let mut others = Vec::new(); // other properties' marks, held so lock_next skips them
    let lock = loop {
        match b.lock_next_underreplicated("worker-b").await.unwrap() {
            Some((ur, l)) if ur.ledger_id == ledger => break l,
            Some((_, other)) => others.push(other),
            None => panic!("lock_next did not find ledger {ledger}"),
        }
    };
    lock.mark_replicated().await.unwrap();
    for other in others {
        other.release().await.unwrap();
    }
    let err = b.get_underreplicated(ledger).await.expect_err("mark gone");
    assert!(err.is_not_found(), "expected NotFound, got {err}");
}

/// The Auditor checks' last-run times are cluster-wide records, one per check.
pub async fn auditor_check_ctimes_are_shared(h: &dyn Harness) {
    use crate::AuditorCheck;
    let a = connect(h).await;
    let b = connect(h).await;
    ensure_cluster(a.as_ref()).await;
    let base = crate::now_ms();
    for (i, check) in AuditorCheck::ALL.into_iter().enumerate() {
        a.set_auditor_check_ctime(check, base + i as i64)
            .await
            .unwrap();
    }
    for (i, check) in AuditorCheck::ALL.into_iter().enumerate() {
        assert_eq!(
            b.auditor_check_ctime(check).await.unwrap(),
            Some(base + i as i64),
            "{check:?}"
        );
    }
    // forceauditchecks moves them back; rewriting is allowed.
    b.set_auditor_check_ctime(AuditorCheck::CheckAllLedgers, base - 21 * 86_400_000)
        .await
        .unwrap();
    assert_eq!(
        a.auditor_check_ctime(AuditorCheck::CheckAllLedgers)
            .await
            .unwrap(),
        Some(base - 21 * 86_400_000)
    );
}

/// Folio's operation records: what one session publishes another lists, a republish
/// replaces it, a removal or the end of the publishing session removes it; bad names are
/// refused.
pub async fn operation_records_are_shared_and_die_with_their_session(h: &dyn Harness) {
    let a = connect(h).await;
    let b = connect(h).await;
    ensure_cluster(a.as_ref()).await;
    let tag = random_bookie("op").to_string().replace(':', "-");
    let (one, two) = (format!("{tag}-1"), format!("{tag}-2"));
    let mine = |list: Vec<(String, Vec<u8>)>| -> Vec<(String, Vec<u8>)> {
        list.into_iter()
            .filter(|(n, _)| n.starts_with(&tag))
            .collect()
    };
    a.publish_operation(&one, b"{\"done\":0}").await.unwrap();
    a.publish_operation(&two, b"second").await.unwrap();
    a.publish_operation(&one, b"{\"done\":1}").await.unwrap();
    assert_eq!(
        mine(b.list_operations().await.unwrap()),
        vec![
            (one.clone(), b"{\"done\":1}".to_vec()),
            (two.clone(), b"second".to_vec())
        ],
        "a republished record must replace the first, both listed by another session"
    );
    a.remove_operation(&two).await.unwrap();
    a.remove_operation(&two).await.unwrap();
    assert_eq!(
        mine(b.list_operations().await.unwrap()),
        vec![(one.clone(), b"{\"done\":1}".to_vec())]
    );
    for bad in ["", "a/b", "..", &"x".repeat(101)] {
        let e = a.publish_operation(bad, b"x").await.unwrap_err();
        assert!(
            matches!(e, MetadataError::InvalidArgument(_)),
            "{bad:?}: {e}"
        );
    }
    a.close().await.unwrap();
    eventually("the operation record goes with its session", || async {
        mine(b.list_operations().await.unwrap()).is_empty()
    })
    .await;
}

async fn loop_until_locked(
    s: &dyn MetadataStore,
    ledger: LedgerId,
) -> Box<dyn UnderreplicationLock> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(l) = s.try_lock_underreplicated(ledger, "waiter").await.unwrap() {
            return l;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lock of ledger {ledger} never freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The autorecovery flag and lost-bookie delay are cluster-wide.
pub async fn autorecovery_settings_are_shared(h: &dyn Harness) {
    let a = connect(h).await;
    let b = connect(h).await;
    ensure_cluster(a.as_ref()).await;
    a.set_autorecovery_enabled(false).await.unwrap();
    assert!(!b.is_autorecovery_enabled().await.unwrap());
    a.set_autorecovery_enabled(true).await.unwrap();
    assert!(b.is_autorecovery_enabled().await.unwrap());
    a.set_lost_bookie_recovery_delay(37).await.unwrap();
    assert_eq!(b.lost_bookie_recovery_delay().await.unwrap(), Some(37));
    a.set_lost_bookie_recovery_delay(0).await.unwrap();
    assert_eq!(b.lost_bookie_recovery_delay().await.unwrap(), Some(0));
    // Rewriting the same value is seen by its version (BookKeeper's triggeraudit).
    let before = b
        .lost_bookie_recovery_delay_versioned()
        .await
        .unwrap()
        .unwrap();
    a.set_lost_bookie_recovery_delay(0).await.unwrap();
    let after = b
        .lost_bookie_recovery_delay_versioned()
        .await
        .unwrap()
        .unwrap();
    assert_eq!((before.value, after.value), (0, 0));
    assert_ne!(
        before.version, after.version,
        "a rewrite must change the version"
    );
}

/// A record that does not decode is a `Corrupt` error naming the ledger, never a panic.
pub async fn corrupt_record_is_an_error_naming_the_ledger(h: &dyn Harness) {
    let s = connect(h).await;
    ensure_cluster(s.as_ref()).await;
    let good = format::encode_ledger_metadata(&sample_metadata()).unwrap();
    let cases: [&[u8]; 4] = [
        b"not metadata at all",
        &good[..good.len() - 3],
        b"",
        b"BookieMetadataFormatVersion\t3\n\x05\x08",
    ];
    for bytes in cases {
        let id = s.generate_ledger_id().await.unwrap();
        h.put_raw_ledger_record(id, bytes).await.unwrap();
        match s.read_ledger(id).await {
            Err(MetadataError::Corrupt { what, .. }) => {
                assert!(
                    what.contains(&format!("ledger {id}")),
                    "corrupt error does not name ledger {id}: {what}"
                )
            }
            other => panic!("reading corrupt record {bytes:?}: expected Corrupt, got {other:?}"),
        }
        s.delete_ledger(id, None).await.unwrap();
    }
}

/// Bad arguments are refused with errors that say why.
pub async fn bad_input_is_refused_with_clear_errors(h: &dyn Harness) {
    let s = connect(h).await;
    ensure_cluster(s.as_ref()).await;
    let m = sample_metadata();
    assert!(
        matches!(
            s.create_ledger(-5, &m).await,
            Err(MetadataError::InvalidArgument(_))
        ),
        "negative ledger id accepted"
    );
    let mut broken = m.clone();
    broken.ensembles.clear();
    let id = s.generate_ledger_id().await.unwrap();
    match s.create_ledger(id, &broken).await {
        Err(MetadataError::InvalidArgument(msg)) => {
            assert!(msg.contains("ensemble"), "unclear message: {msg}")
        }
        other => panic!("metadata without an ensemble: expected InvalidArgument, got {other:?}"),
    }
    assert!(
        s.read_ledger(id).await.unwrap_err().is_not_found(),
        "a refused create left a record"
    );
    assert!(
        matches!(
            s.list_ledgers(None, 0).await,
            Err(MetadataError::InvalidArgument(_))
        ),
        "limit 0 accepted"
    );
    let err = crate::MetadataUri::parse("zk://host:notaport/ledgers").unwrap_err();
    assert!(
        err.to_string().contains("notaport"),
        "URI error does not name the bad part: {err}"
    );
}

/// Destructive: `format_cluster` wipes ledgers and cookies and changes the instance id.
pub async fn format_cluster_wipes_everything(h: &dyn Harness) {
    let s = connect(h).await;
    let before = ensure_cluster(s.as_ref()).await;
    let (id, _, _) = new_ledger(s.as_ref()).await;
    let b = random_bookie("fmt");
    s.write_cookie(&b, b"c", None).await.unwrap();
    let after = s.format_cluster().await.unwrap();
    assert_ne!(
        before.instance_id, after.instance_id,
        "format must pick a new instance id"
    );
    assert_eq!(s.read_cluster().await.unwrap(), after);
    assert!(
        s.read_ledger(id).await.unwrap_err().is_not_found(),
        "format left ledger {id}"
    );
    assert!(
        s.read_cookie(&b).await.unwrap_err().is_not_found(),
        "format left the cookie of {b}"
    );
}
