//! BookKeeper's own `conf/bk_server.conf` (4.17.4, as shipped) starts a Folio bookie on a real
//! ZooKeeper with only its directories, ports and metadata address changed; the keys Folio
//! does not implement are named in one warning; `BK_<key>` variables override the file, as
//! BookKeeper's container image uses them; a typo is refused with the key it meant.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use folio_testsvc::ZooKeeperServer;

const STOCK: &str = include_str!("../../folio-bookie/tests/data/bk_server-4.17.4.conf");

fn folio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_folio"))
}

/// The stock file with the lines starting with `key=` replaced, as an operator edits it.
fn edited(changes: &[(&str, String)]) -> String {
    STOCK
        .lines()
        .map(|line| {
            match changes
                .iter()
                .find(|(k, _)| line.starts_with(&format!("{k}=")))
            {
                Some((k, v)) => format!("{k}={v}"),
                None => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_stock_bk_server_conf_starts_a_bookie() {
    let zk = ZooKeeperServer::start().expect("ZooKeeper");
    let dir = tempfile::tempdir().unwrap();
    let uri = zk.metadata_uri("/ledgers");
    let init = folio()
        .args(["--metadata", &uri, "shell", "initnewcluster"])
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");

    let conf = dir.path().join("bk_server.conf");
    let zk_uri = uri.replacen("zk://", "zk+hierarchical://", 1);
    std::fs::write(
        &conf,
        edited(&[
            ("bookiePort", "0".into()),
            (
                "journalDirectories",
                dir.path().join("txn").display().to_string(),
            ),
            (
                "ledgerDirectories",
                dir.path().join("data").display().to_string(),
            ),
            ("metadataServiceUri", zk_uri),
            ("zkServers", zk.connect_string()),
        ]),
    )
    .unwrap();
    let mut child = folio()
        .args(["bookie", "--config"])
        .arg(&conf)
        // Overrides as BookKeeper's image takes them; roomy thresholds so that a nearly
        // full test machine does not make the bookie read-only.
        .env("BK_bookieId", "stock-conf-bookie:3181")
        .env("BK_diskUsageThreshold", "0.999")
        .env("BK_diskUsageLwmThreshold", "0.998")
        .env_remove("FOLIO_METADATA")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let tx2 = tx.clone();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send(l);
        }
    });
    let mut said = Vec::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("the bookie never said ready: {said:#?}"));
        said.push(line.clone());
        if line == "ready" {
            break;
        }
    }
    let warning = said
        .iter()
        .find(|l| l.contains("Folio does not implement"))
        .unwrap_or_else(|| panic!("no warning naming the ignored keys: {said:#?}"));
    for key in [
        "httpServerClass",
        "statsProviderClass",
        "gcEntryLogMetadataCacheEnabled",
    ] {
        assert!(warning.contains(key), "{key} not named: {warning}");
    }
    // httpServerEnabled=false: no admin HTTP, as BookKeeper.
    assert!(!said.iter().any(|l| l.starts_with("http ")), "{said:#?}");

    let listed = folio()
        .args(["--metadata", &uri, "shell", "listbookies", "-rw"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success() && stdout.contains("stock-conf-bookie:3181"),
        "{listed:?}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_typo_in_a_key_is_refused_with_the_key_it_meant() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("bk_server.conf");
    std::fs::write(
        &conf,
        format!(
            "bookiPort=3181\njournalDirectories={0}/j\nledgerDirectories={0}/l\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let out = folio()
        .args(["--metadata", "mem://typo", "bookie", "--config"])
        .arg(&conf)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("bookiPort") && stderr.contains("did you mean bookiePort?"),
        "{stderr}"
    );
    // The same through the environment.
    let out = folio()
        .args(["--metadata", "mem://typo", "bookie", "--data-dir"])
        .arg(dir.path().join("d"))
        .env("BK_journalMaxGroupWaitMsec", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("BK_journalMaxGroupWaitMsec")
            && stderr.contains("did you mean journalMaxGroupWaitMSec?"),
        "{stderr}"
    );
}
