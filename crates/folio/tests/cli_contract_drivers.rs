//! The command-line contract (DESIGN.md section 4; `../shared/acceptance/cli-contract` runs it
//! on `folio standalone`'s sqlite://) on the other two drivers: a whole cluster on a real
//! ZooKeeper and on a real etcd: `shell initnewcluster`, three `folio bookie` processes,
//! `ledger write` with its line formats, `ledger read`, a reader's recovery fencing a running
//! writer, and the shell listing the bookies and the ledgers (`clusterinfo`, `endpointinfo`).

mod common;

use common::{Proc, folio, run};

fn start_bookie(root: &std::path::Path, i: usize, uri: &str) -> Proc {
    common::bookie_process(
        &root.join(format!("bookie{i}")),
        uri,
        "listen_address = \"127.0.0.1\"\nadvertisedAddress = \"127.0.0.1\"\n\
         disk_usage_threshold = 0.999\ndisk_usage_lwm_threshold = 0.998\n",
    )
}

fn folio_at(uri: &str, args: &[&str], stdin: &[u8]) -> common::Outcome {
    let mut cmd = folio();
    cmd.arg("--metadata").arg(uri).args(args);
    run(cmd, stdin)
}

fn contract(uri: &str) {
    let root = tempfile::tempdir().unwrap();
    folio_at(uri, &["shell", "initnewcluster"], b"").ok();
    let bookies: Vec<Proc> = (0..3).map(|i| start_bookie(root.path(), i, uri)).collect();

    // ledger write: "ledger <id>", one "acked <entryId>" per line, "closed <last>".
    let w = folio_at(
        uri,
        &["ledger", "write", "-e", "3", "-w", "2", "-a", "2"],
        b"one\ntwo\nthree\n",
    )
    .ok();
    let out = w.text();
    let lines: Vec<&str> = out.lines().collect();
    let id = lines[0]
        .strip_prefix("ledger ")
        .unwrap_or_else(|| panic!("{uri}: {out}"))
        .to_string();
    assert_eq!(
        &lines[1..],
        ["acked 0", "acked 1", "acked 2", "closed 2"],
        "{uri}"
    );
    let r = folio_at(uri, &["ledger", "read", &id], b"").ok();
    assert_eq!(r.stdout, b"0\tone\n1\ttwo\n2\tthree\n", "{uri}");
    let missing = folio_at(uri, &["ledger", "read", "999999"], b"");
    assert!(
        !missing.status.success() && !missing.stderr.is_empty(),
        "{uri}"
    );

    // A reader's recovery fences a running writer at what it acknowledged.
    let mut writer = Proc::spawn({
        let mut c = folio();
        c.args(["--metadata", uri, "ledger", "write"]);
        c
    });
    writer.send(b"first\nsecond\n");
    let open = writer
        .wait_line(|l| l.starts_with("ledger "))
        .trim_start_matches("ledger ")
        .to_owned();
    writer.wait_line(|l| l == "acked 1");
    let r = folio_at(uri, &["ledger", "read", &open], b"").ok();
    assert_eq!(r.stdout, b"0\tfirst\n1\tsecond\n", "{uri}");
    writer.send(b"third\n");
    assert!(!writer.wait().success(), "{uri}: a fenced writer must fail");
    assert!(
        writer
            .stderr()
            .contains(&format!("ledger {open} is fenced")),
        "{uri}: {}",
        writer.stderr()
    );

    // The shell sees the cluster.
    let listed = folio_at(uri, &["shell", "listbookies", "-rw"], b"")
        .ok()
        .text();
    assert_eq!(listed.lines().count(), 4, "{uri}: {listed}");
    let ledgers = folio_at(uri, &["shell", "listledgers"], b"").ok().text();
    for l in [&id, &open] {
        assert!(
            ledgers.lines().any(|x| x.contains(l.as_str())),
            "{uri}: {ledgers}"
        );
    }
    let info: serde_json::Value =
        serde_json::from_str(&folio_at(uri, &["shell", "clusterinfo"], b"").ok().text()).unwrap();
    assert_eq!(info["totalBookiesCount"], 3, "{uri}: {info}");
    assert_eq!(info["writableBookiesCount"], 3, "{uri}: {info}");
    assert_eq!(info["unavailableBookiesCount"], 0, "{uri}: {info}");
    assert_eq!(info["auditorElected"], false, "{uri}: {info}");
    assert_eq!(info["ledgerReplicationEnabled"], true, "{uri}: {info}");
    let first = listed.lines().nth(1).unwrap().trim().to_string();
    let ep = folio_at(uri, &["shell", "endpointinfo", "-bookieid", &first], b"")
        .ok()
        .text();
    assert!(
        ep.contains(&format!("BookieId: {first}")) && ep.contains("Protocol: bookie-rpc"),
        "{uri}: {ep}"
    );
    folio_at(
        uri,
        &["shell", "endpointinfo", "-bookieid", "nobody:1"],
        b"",
    )
    .fails_with("does not exist");
    // cookie_delete refuses a running bookie's cookie without -f, and deletes a stopped one's.
    folio_at(uri, &["shell", "cookie_delete", &first], b"").fails_with("is registered");
    folio_at(uri, &["shell", "cookie_get", &first], b"").ok();
    folio_at(uri, &["shell", "cookie_delete", "nobody:1"], b"").fails_with("no cookie");
    let meta = folio_at(uri, &["shell", "ledgermetadata", &open], b"")
        .ok()
        .text();
    assert!(meta.contains(&format!("ledgerID: {open}")), "{uri}: {meta}");
    let mut bookies = bookies;
    let mut last = bookies.pop().unwrap();
    for b in &bookies {
        b.terminate();
    }
    last.terminate();
    last.wait();
    // Once its registration is gone (the bookie unregisters on SIGTERM), the cookie goes.
    let last_id = listed.lines().nth(3).unwrap().trim().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = folio_at(uri, &["shell", "cookie_delete", &last_id], b"");
        if out.status.success() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{uri}: {}",
            out.stderr
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    folio_at(uri, &["shell", "cookie_get", &last_id], b"").fails_with("no cookie");
}

#[test]
fn the_cli_contract_holds_on_zookeeper_and_etcd() {
    let zk = folio_testsvc::ZooKeeperServer::start().expect("ZooKeeper");
    contract(&zk.metadata_uri("/ledgers"));
    let etcd = folio_testsvc::EtcdServer::start().expect("etcd");
    contract(&etcd.metadata_uri("/folio-cli"));
}
