//! `folio shell` metadata commands, run as the built binary against a real sqlite
//! metadata database in a temporary directory. Ledgers and bookies are put there
//! through the folio-metadata API (the bookie's registration stays alive while this
//! test's session does).

use folio_metadata::prelude::*;
use std::process::{Command, Output};

use folio_metadata::sqlite::{SqliteMetadataStore, SqliteOptions};
use folio_metadata::{BookieMode, BookieServiceInfo, MetadataStore};
use folio_types::BookieId;
use folio_types::metadata::{DigestType, LedgerMetadata};
use folio_types::quorum::QuorumConfig;

fn folio(uri: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_folio"))
        .arg("--metadata")
        .arg(uri)
        .args(args)
        .env_remove("FOLIO_METADATA")
        .output()
        .expect("running folio")
}

fn ok_stdout(uri: &str, args: &[&str]) -> String {
    let out = folio(uri, args);
    assert!(
        out.status.success(),
        "folio {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn failure(uri: &str, args: &[&str]) -> String {
    let out = folio(uri, args);
    assert!(!out.status.success(), "folio {args:?} should have failed");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "errors are one line: {stderr:?}"
    );
    stderr
}

fn bookie(s: &str) -> BookieId {
    BookieId::new(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_metadata_commands_against_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("metadata.db");
    let uri = format!("sqlite://{}", db.display());

    // Before initialisation.
    let e = failure(&uri, &["shell", "whatisinstanceid"]);
    assert!(e.contains("not initialised"), "{e}");

    let out = ok_stdout(&uri, &["shell", "initnewcluster"]);
    let instance = out.trim().rsplit(' ').next().unwrap().to_owned();
    assert_eq!(instance.len(), 36, "not a UUID: {out}");
    let e = failure(&uri, &["shell", "initnewcluster"]);
    assert!(e.contains("already initialised"), "{e}");
    let out = ok_stdout(&uri, &["shell", "whatisinstanceid"]);
    assert_eq!(
        out.trim(),
        format!("Metadata Service Uri: {uri} InstanceId: {instance}")
    );

    // Content through the library.
    let store = SqliteMetadataStore::open(&db, SqliteOptions::default())
        .await
        .unwrap();
    let ensemble = vec![
        bookie("10.0.0.1:3181"),
        bookie("10.0.0.2:3181"),
        bookie("10.0.0.3:3181"),
    ];
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = store.generate_ledger_id().await.unwrap();
        let m = LedgerMetadata::new_open(
            QuorumConfig::new(3, 2, 2).unwrap(),
            ensemble.clone(),
            DigestType::Crc32c,
            b"pw".to_vec(),
        );
        store.create_ledger(id, &m).await.unwrap();
        ids.push(id);
    }
    let _w = store
        .register_bookie(
            &bookie("10.0.0.1:3181"),
            BookieMode::Writable,
            &BookieServiceInfo::default(),
        )
        .await
        .unwrap();
    let _r = store
        .register_bookie(
            &bookie("10.0.0.9:3181"),
            BookieMode::ReadOnly,
            &BookieServiceInfo::default(),
        )
        .await
        .unwrap();

    let out = ok_stdout(&uri, &["shell", "listledgers"]);
    let want: Vec<String> = ids.iter().map(|id| format!("ledgerID: {id}")).collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), want);

    for args in [
        vec!["shell", "ledgermetadata", &*ids[1].to_string()],
        vec!["shell", "ledgermetadata", "-ledgerid", &*ids[1].to_string()],
    ] {
        let out = ok_stdout(&uri, &args);
        assert!(out.starts_with(&format!("ledgerID: {}\n", ids[1])), "{out}");
        assert!(out.contains("state: OPEN"), "{out}");
        assert!(
            out.contains("ensemble[0]: 10.0.0.1:3181,10.0.0.2:3181,10.0.0.3:3181"),
            "{out}"
        );
        assert!(out.contains("digestType: CRC32C"), "{out}");
    }
    let e = failure(&uri, &["shell", "ledgermetadata", "999999"]);
    assert!(e.contains("no such ledger 999999"), "{e}");
    let e = failure(&uri, &["shell", "ledgermetadata", "abc"]);
    assert!(e.contains("invalid ledger id"), "{e}");

    let out = ok_stdout(&uri, &["shell", "listbookies"]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["ReadWrite Bookies :", "10.0.0.1:3181"]
    );
    let out = ok_stdout(&uri, &["shell", "listbookies", "--readonly"]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["Readonly Bookies :", "10.0.0.9:3181"]
    );
    let out = ok_stdout(&uri, &["shell", "listbookies", "--all"]);
    assert!(
        out.contains("10.0.0.1:3181") && out.contains("10.0.0.9:3181"),
        "{out}"
    );
    // BookKeeper's single-dash spellings.
    let out = ok_stdout(&uri, &["shell", "listbookies", "-ro"]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["Readonly Bookies :", "10.0.0.9:3181"]
    );
    let out = ok_stdout(&uri, &["shell", "listbookies", "-a"]);
    assert!(
        out.contains("10.0.0.1:3181") && out.contains("10.0.0.9:3181"),
        "{out}"
    );
    let out = ok_stdout(&uri, &["shell", "listbookies", "-rw"]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["ReadWrite Bookies :", "10.0.0.1:3181"]
    );
    let e = failure(&uri, &["shell", "listbookies", "-x"]);
    assert!(e.contains("unknown flag"), "{e}");

    // Autorecovery settings, under-replication and the Auditor.
    let out = ok_stdout(&uri, &["shell", "autorecovery", "-status"]);
    assert_eq!(out.trim(), "AutoRecovery is enabled");
    let out = ok_stdout(&uri, &["shell", "autorecovery", "-disable"]);
    assert_eq!(out.trim(), "AutoRecovery is disabled");
    assert!(!store.is_autorecovery_enabled().await.unwrap());
    ok_stdout(&uri, &["shell", "autorecovery", "-enable"]);
    assert!(store.is_autorecovery_enabled().await.unwrap());
    ok_stdout(&uri, &["shell", "lostbookierecoverydelay", "-set", "45"]);
    let out = ok_stdout(&uri, &["shell", "lostbookierecoverydelay", "-get"]);
    assert_eq!(out.trim(), "LostBookieRecoveryDelay value: 45");
    let e = failure(&uri, &["shell", "lostbookierecoverydelay", "-set", "soon"]);
    assert!(e.contains("invalid delay"), "{e}");

    // forceauditchecks moves the chosen checks' ctimes 21 days back, and no others.
    use folio_metadata::AuditorCheck;
    let e = failure(&uri, &["shell", "forceauditchecks"]);
    assert!(e.contains("at least one check"), "{e}");
    let e = failure(&uri, &["shell", "forceauditchecks", "-xyz"]);
    assert!(e.contains("unknown flag"), "{e}");
    let before = folio_metadata::driver::now_ms();
    let out = ok_stdout(&uri, &["shell", "forceauditchecks", "-calc", "-rc"]);
    assert!(out.contains("checkallledgersctime"), "{out}");
    for check in [AuditorCheck::CheckAllLedgers, AuditorCheck::Replicas] {
        let t = store.auditor_check_ctime(check).await.unwrap().unwrap();
        let back = before - t;
        assert!(
            (21 * 86_400_000 - 60_000..=21 * 86_400_000 + 60_000).contains(&back),
            "{check:?} moved back {back} ms"
        );
    }
    assert_eq!(
        store
            .auditor_check_ctime(AuditorCheck::PlacementPolicy)
            .await
            .unwrap(),
        None
    );

    store
        .mark_underreplicated(ids[2], &[bookie("10.0.0.2:3181")])
        .await
        .unwrap();
    let out = ok_stdout(
        &uri,
        &["shell", "listunderreplicated", "-printmissingreplica"],
    );
    assert_eq!(
        out,
        format!("{}\n\tMissingReplica : [10.0.0.2:3181]\n", ids[2])
    );

    let e = failure(&uri, &["shell", "whoisauditor"]);
    assert!(e.contains("no Auditor"), "{e}");
    let _vote = store
        .join_auditor_election(&bookie("10.0.0.1:3181"))
        .await
        .unwrap();
    let out = ok_stdout(&uri, &["shell", "whoisauditor"]);
    assert_eq!(out.trim(), "Auditor: 10.0.0.1:3181");

    let e = failure(&uri, &["shell", "cookie_get", "10.0.0.1:3181"]);
    assert!(e.contains("no cookie for bookie 10.0.0.1:3181"), "{e}");
    store
        .write_cookie(
            &bookie("10.0.0.1:3181"),
            b"5\nbookieHost: \"10.0.0.1:3181\"\n",
            None,
        )
        .await
        .unwrap();
    let out = ok_stdout(&uri, &["shell", "cookie_get", "10.0.0.1:3181"]);
    assert_eq!(out, "5\nbookieHost: \"10.0.0.1:3181\"\n");
    store.close().await.unwrap();
}

/// cookie_generate writes the cookie a bookie with given directories would have (the
/// cluster's instance id by default); cookie_create stores it only where there is none,
/// cookie_update only over an existing one, and neither takes another bookie's cookie or
/// a file that is not a cookie.
#[test]
fn cookie_files_are_generated_created_and_updated() {
    let dir = tempfile::tempdir().unwrap();
    let uri = format!("sqlite://{}", dir.path().join("metadata.db").display());
    let out = ok_stdout(&uri, &["shell", "initnewcluster"]);
    let instance = out.trim().rsplit(' ').next().unwrap().to_owned();
    let file = |name: &str| dir.path().join(name).display().to_string();
    let (first, second, junk) = (file("first"), file("second"), file("junk"));
    let b = "10.0.0.2:3181";
    // `folio shell <line>`, split at spaces (no argument here has one).
    let ok = |line: String| ok_stdout(&uri, &line.split(' ').collect::<Vec<_>>());
    let fails = |line: String| failure(&uri, &line.split(' ').collect::<Vec<_>>());

    let e = fails(format!("shell cookie_generate {b} -j /j1 -o {first}"));
    assert!(e.contains("-l LEDGER_DIRS"), "{e}");
    ok(format!(
        "shell cookie_generate {b} -j /j1 -l /l1,/l2 -o {first}"
    ));
    let text = std::fs::read_to_string(&first).unwrap();
    assert!(text.starts_with("5\n"), "{text}");
    for want in [
        format!("bookieHost: \"{b}\""),
        "journalDir: \"/j1\"".to_string(),
        "ledgerDirs: \"2\\t/l1\\t/l2\"".to_string(),
        format!("instanceId: \"{instance}\""),
    ] {
        assert!(text.contains(&want), "{want} not in {text}");
    }

    let e = fails(format!("shell cookie_update {b} -cf {first}"));
    assert!(e.contains("no cookie for bookie"), "{e}");
    ok(format!("shell cookie_create {b} -cf {first}"));
    assert_eq!(ok(format!("shell cookie_get {b}")), text);
    let e = fails(format!("shell cookie_create {b} -cf {first}"));
    assert!(e.contains("already has a cookie"), "{e}");

    // New ledger directories, an explicit instance id: the update replaces the cookie.
    ok(format!(
        "shell cookie_generate {b} -j /j1 -l /l3 -i other -o {second}"
    ));
    ok(format!("shell cookie_update {b} --cookie-file {second}"));
    let now = ok(format!("shell cookie_get {b}"));
    assert!(
        now.contains("/l3") && now.contains("instanceId: \"other\""),
        "{now}"
    );

    let e = fails(format!("shell cookie_create 10.0.0.3:3181 -cf {second}"));
    assert!(e.contains("is the cookie of bookie 10.0.0.2:3181"), "{e}");
    std::fs::write(&junk, "not a cookie").unwrap();
    let e = fails(format!("shell cookie_create 10.0.0.3:3181 -cf {junk}"));
    assert!(e.contains("bad cookie"), "{e}");
    let e = fails("shell cookie_create 10.0.0.3:3181".to_string());
    assert!(e.contains("-cf COOKIE_FILE is required"), "{e}");
}

#[test]
fn shell_refuses_bad_uris_and_unreachable_stores() {
    let e = failure("sqlite://relative/metadata.db", &["shell", "listledgers"]);
    assert!(e.contains("absolute"), "{e}");
    // zk:// and etcd:// go to their drivers; with nothing listening, one line says so.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let zk = format!("zk://127.0.0.1:{closed}/ledgers");
    let e = failure(&zk, &["shell", "listbookies"]);
    assert!(
        e.contains(&format!("cannot connect to metadata service {zk}")),
        "{e}"
    );
    let etcd = format!("etcd://127.0.0.1:{closed}/ledgers");
    let e = failure(&etcd, &["shell", "listbookies"]);
    assert!(
        e.contains(&format!("cannot connect to metadata service {etcd}")),
        "{e}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["shell", "listledgers"])
        .env_remove("FOLIO_METADATA")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--metadata"));
}
