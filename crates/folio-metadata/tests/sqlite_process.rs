//! The `sqlite://` driver across processes: a child process (this test binary
//! re-executed, running only `child_process_entry`) registers a bookie, holds an
//! under-replication lock and leads the Auditor election on a shared database file;
//! when it is killed with SIGKILL, its session lease runs out and all three are freed
//! for the survivors.

use folio_metadata::prelude::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use folio_metadata::sqlite::{SqliteMetadataStore, SqliteOptions};
use folio_metadata::{BookieMode, BookieServiceInfo};
use folio_types::BookieId;

const CHILD_DB: &str = "FOLIO_METADATA_TEST_CHILD_DB";
const READY: &str = "FOLIO-CHILD-READY";
const UR_LEDGER: i64 = 42;
const PATIENCE: Duration = Duration::from_secs(60);

fn options() -> SqliteOptions {
    SqliteOptions {
        session_timeout: Duration::from_secs(6),
        poll_interval: Duration::from_millis(50),
        ..SqliteOptions::default()
    }
}

fn child_bookie() -> BookieId {
    BookieId::new("child.example:3181").unwrap()
}

/// Not a test of its own: the body of the child process. Without the environment
/// variable (a normal test run) it has nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_process_entry() {
    let Ok(db) = std::env::var(CHILD_DB) else {
        return;
    };
    let store = SqliteMetadataStore::open(db.as_ref(), options())
        .await
        .unwrap();
    let _reg = store
        .register_bookie(
            &child_bookie(),
            BookieMode::Writable,
            &BookieServiceInfo::default(),
        )
        .await
        .unwrap();
    let _lock = store
        .try_lock_underreplicated(UR_LEDGER, "child")
        .await
        .unwrap()
        .expect("the child locks the ledger first");
    let candidacy = store.join_auditor_election(&child_bookie()).await.unwrap();
    candidacy.leadership().wait_for(|l| *l).await.unwrap();
    println!("{READY}");
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_loses_its_registration_lock_and_leadership() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("metadata.db");
    let store = SqliteMetadataStore::open(&db, options()).await.unwrap();
    store.init_cluster().await.unwrap();
    store
        .mark_underreplicated(UR_LEDGER, &[BookieId::new("gone:3181").unwrap()])
        .await
        .unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
            .any(|l| l.contains(READY))
    });
    let ready = tokio::time::timeout(PATIENCE, ready).await;
    if !matches!(ready, Ok(Ok(true))) {
        let _ = child.kill();
        panic!("the child process never became ready: {ready:?}");
    }

    // The child's records are visible and effective.
    assert!(
        store
            .list_bookies()
            .await
            .unwrap()
            .writable
            .contains(&child_bookie())
    );
    assert_eq!(store.current_auditor().await.unwrap(), Some(child_bookie()));
    assert!(
        store
            .try_lock_underreplicated(UR_LEDGER, "parent")
            .await
            .unwrap()
            .is_none()
    );
    let me = BookieId::new("parent.example:3181").unwrap();
    let candidacy = store.join_auditor_election(&me).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !*candidacy.leadership().borrow(),
        "two leaders while the child lives"
    );

    child.kill().unwrap();
    child.wait().unwrap();

    eventually("the killed bookie's registration expires", || async {
        !store
            .list_bookies()
            .await
            .unwrap()
            .writable
            .contains(&child_bookie())
    })
    .await;
    let mut leadership = candidacy.leadership();
    tokio::time::timeout(PATIENCE, leadership.wait_for(|l| *l))
        .await
        .expect("the survivor never became the Auditor")
        .unwrap();
    assert_eq!(store.current_auditor().await.unwrap(), Some(me));
    let lock = store
        .try_lock_underreplicated(UR_LEDGER, "parent")
        .await
        .unwrap()
        .expect("the dead child's lock must be free");
    lock.mark_replicated().await.unwrap();
}

const IDGEN_DB: &str = "FOLIO_METADATA_TEST_IDGEN_DB";
const IDS_PER_PROCESS: usize = 200;

/// Not a test of its own: the body of an id-generating child process. (libtest may
/// print its own text on the same line as the first id, hence the marker.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idgen_child_entry() {
    let Ok(db) = std::env::var(IDGEN_DB) else {
        return;
    };
    let store = SqliteMetadataStore::open(db.as_ref(), options())
        .await
        .unwrap();
    for _ in 0..IDS_PER_PROCESS {
        println!("FOLIO-ID:{}", store.generate_ledger_id().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_sharing_a_database_never_get_the_same_ledger_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("metadata.db");
    let store = SqliteMetadataStore::open(&db, options()).await.unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "idgen_child_entry",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(IDGEN_DB, &db)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ids = Vec::new();
    for _ in 0..IDS_PER_PROCESS {
        ids.push(store.generate_ledger_id().await.unwrap());
    }
    for child in children {
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        assert!(out.status.success(), "an id-generating child failed");
        let stdout = String::from_utf8(out.stdout).unwrap();
        let before = ids.len();
        ids.extend(
            stdout
                .lines()
                .filter_map(|l| l.split_once("FOLIO-ID:").map(|(_, n)| n))
                .map(|n| n.parse::<i64>().unwrap()),
        );
        assert_eq!(
            ids.len() - before,
            IDS_PER_PROCESS,
            "a child printed the wrong number of ids"
        );
    }
    let unique: std::collections::BTreeSet<_> = ids.iter().copied().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "{} duplicate ids across processes",
        ids.len() - unique.len()
    );
}
