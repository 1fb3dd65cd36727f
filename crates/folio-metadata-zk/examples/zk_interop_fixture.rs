//! The Folio side of `interop/java-shell-check.sh` (Java BookKeeper's shell against a
//! Folio-made ZooKeeper cluster). Two modes:
//!
//! * `zk_interop_fixture populate <uri>`: initialises the cluster, registers a writable
//!   bookie (127.0.0.1:3181, with service info) and a read-only one (127.0.0.1:3182), writes
//!   a cookie, creates a closed ledger and a long-id ledger, marks the first under-replicated,
//!   wins the Auditor election, sets lostBookieRecoveryDelay to 17; prints `ledger <id>` and
//!   `ready`, then holds its session until stdin closes.
//! * `zk_interop_fixture check-java-writes <uri> <java-initialised-uri>`: checks what the Java
//!   shell wrote (autorecovery disabled, delay 5, a cluster it initialised); exits non-zero
//!   with the mismatch otherwise.

use folio_metadata::prelude::*;
use std::process::ExitCode;

use folio_metadata::{BookieMode, BookieServiceInfo, Endpoint, MetadataStore};
use folio_metadata_zk::ZkMetadataStore;
use folio_types::BookieId;
use folio_types::metadata::{DigestType, LedgerMetadata, LedgerState};
use folio_types::quorum::QuorumConfig;

fn bookie(s: &str) -> BookieId {
    BookieId::new(s).expect("valid bookie id")
}

async fn populate(uri: &str) -> Result<(), String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err: folio_metadata::MetadataError| format!("{what}: {err}")
    };
    let s = ZkMetadataStore::connect(uri).await.map_err(e("connect"))?;
    s.init_cluster().await.map_err(e("init_cluster"))?;
    let info = BookieServiceInfo {
        endpoints: vec![Endpoint {
            id: "bookie".into(),
            host: "127.0.0.1".into(),
            port: 3181,
            protocol: "bookie-rpc".into(),
            auth: vec![],
            extensions: vec![],
        }],
        properties: Default::default(),
    };
    let _w = s
        .register_bookie(&bookie("127.0.0.1:3181"), BookieMode::Writable, &info)
        .await
        .map_err(e("register writable"))?;
    let _r = s
        .register_bookie(
            &bookie("127.0.0.1:3182"),
            BookieMode::ReadOnly,
            &BookieServiceInfo::default(),
        )
        .await
        .map_err(e("register read-only"))?;
    let cookie =
        "5\nbookieHost: \"127.0.0.1:3181\"\njournalDir: \"/tmp/j\"\nledgerDirs: \"1\\t/tmp/l\"\n";
    s.write_cookie(&bookie("127.0.0.1:3181"), cookie.as_bytes(), None)
        .await
        .map_err(e("write_cookie"))?;
    let id = s
        .generate_ledger_id()
        .await
        .map_err(e("generate_ledger_id"))?;
    let mut m = LedgerMetadata::new_open(
        QuorumConfig::new(2, 2, 1).map_err(|x| x.to_string())?,
        vec![bookie("127.0.0.1:3181"), bookie("127.0.0.1:3182")],
        DigestType::Crc32c,
        b"pw".to_vec(),
    );
    m.c_token = 99;
    m.custom_metadata.insert("app".into(), b"folio".to_vec());
    let v = s.create_ledger(id, &m).await.map_err(e("create_ledger"))?;
    let mut closed = m.clone();
    closed.state = LedgerState::Closed;
    closed.last_entry_id = 9;
    closed.length = 100;
    s.write_ledger(id, &closed, v)
        .await
        .map_err(e("write_ledger"))?;
    s.create_ledger(2147483650, &m)
        .await
        .map_err(e("create long ledger"))?;
    s.mark_underreplicated(id, &[bookie("127.0.0.1:3182")])
        .await
        .map_err(e("mark_underreplicated"))?;
    let candidacy = s
        .join_auditor_election(&bookie("127.0.0.1:3181"))
        .await
        .map_err(e("join_auditor_election"))?;
    let mut leader = candidacy.leadership();
    leader
        .wait_for(|l| *l)
        .await
        .map_err(|_| "the election ended".to_string())?;
    s.set_lost_bookie_recovery_delay(17)
        .await
        .map_err(e("set delay"))?;
    println!("ledger {id}");
    println!("ready");
    // Hold the session (and so the ephemeral registrations and vote) until stdin closes.
    tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
    })
    .await
    .map_err(|x| x.to_string())?;
    s.close().await.map_err(e("close"))
}

async fn check_java_writes(uri: &str, java_uri: &str) -> Result<(), String> {
    let s = ZkMetadataStore::connect(uri)
        .await
        .map_err(|x| x.to_string())?;
    let enabled = s
        .is_autorecovery_enabled()
        .await
        .map_err(|x| x.to_string())?;
    if enabled {
        return Err("Java disabled autorecovery, Folio reads it as enabled".into());
    }
    let delay = s
        .lost_bookie_recovery_delay()
        .await
        .map_err(|x| x.to_string())?;
    if delay != Some(5) {
        return Err(format!(
            "Java set lostBookieRecoveryDelay 5, Folio reads {delay:?}"
        ));
    }
    let j = ZkMetadataStore::connect(java_uri)
        .await
        .map_err(|x| x.to_string())?;
    let cluster = j.read_cluster().await.map_err(|x| x.to_string())?;
    if cluster.layout != folio_metadata_zk::DEFAULT_LAYOUT || cluster.instance_id.len() != 36 {
        return Err(format!("unexpected Java-initialised cluster {cluster:?}"));
    }
    if !j.init_cluster().await.is_err_and(|x| x.is_already_exists()) {
        return Err("init_cluster on a Java-initialised cluster did not say AlreadyExists".into());
    }
    println!(
        "java writes read back: autorecovery disabled, delay 5, cluster {}",
        cluster.instance_id
    );
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let r = match (args.get(1).map(String::as_str), args.get(2), args.get(3)) {
        (Some("populate"), Some(uri), None) => populate(uri).await,
        (Some("check-java-writes"), Some(uri), Some(java)) => check_java_writes(uri, java).await,
        _ => Err("usage: zk_interop_fixture populate URI | check-java-writes URI JAVA_URI".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zk_interop_fixture: {e}");
            ExitCode::FAILURE
        }
    }
}
