//! The admin HTTP endpoint of a `folio standalone` bookie, asked over a real socket with
//! plain HTTP/1.1: BookKeeper's paths for ledgers, bookies, the journal mark and the disk
//! files, JSON bodies, and JSON errors with a status that fits.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::Standalone;

/// (status, body) of one request.
fn http(addr: &str, method: &str, path: &str) -> (u16, String) {
    http_body(addr, method, path, "")
}

/// (status, body) of one request with a body.
fn http_body(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(common::TIMEOUT)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (
        head.split_whitespace().nth(1).unwrap().parse().unwrap(),
        body.to_owned(),
    )
}

fn get_json(addr: &str, path: &str) -> serde_json::Value {
    let (status, body) = http(addr, "GET", path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// Asserts a JSON error naming `cause` with `status`.
fn fails(addr: &str, method: &str, path: &str, status: u16, cause: &str) {
    let (got, body) = http(addr, method, path);
    assert_eq!(got, status, "{path}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let e = v["error"].as_str().unwrap_or_else(|| panic!("{body}"));
    assert!(e.contains(cause), "{path}: {e:?} should name {cause:?}");
}

#[test]
fn admin_http_serves_bookkeepers_ledger_and_bookie_paths() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 3);
    let addr = sa.http_addr();

    let w = sa
        .run(&["ledger", "write"], b"one\ntwo\nthree\n")
        .ok()
        .text();
    let id: i64 = w
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("ledger ")
        .parse()
        .unwrap();
    let key = id.to_string();

    let list = get_json(&addr, "/api/v1/ledger/list");
    assert_eq!(list, serde_json::json!({ key.clone(): null }));
    let list = get_json(&addr, "/api/v1/ledger/list?print_metadata=true");
    assert_eq!(list[&key]["state"], "CLOSED");
    assert_eq!(list[&key]["lastEntryId"], 2);

    let meta = get_json(&addr, &format!("/api/v1/ledger/metadata?ledger_id={id}"));
    assert_eq!(meta[&key]["ledgerId"], id);
    assert_eq!(meta[&key]["ensembleSize"], 3);
    assert_eq!(meta[&key]["writeQuorumSize"], 2);
    // The same object `folio ledger meta` prints.
    let cli: serde_json::Value =
        serde_json::from_str(&sa.run(&["ledger", "meta", &key], b"").ok().text()).unwrap();
    assert_eq!(meta[&key], cli);
    fails(
        &addr,
        "GET",
        "/api/v1/ledger/metadata?ledger_id=999999",
        404,
        "999999",
    );
    fails(
        &addr,
        "GET",
        "/api/v1/ledger/metadata?ledger_id=abc",
        400,
        "ledger_id",
    );
    fails(
        &addr,
        "GET",
        "/api/v1/ledger/metadata",
        400,
        "missing parameter ledger_id",
    );

    let read = get_json(&addr, &format!("/api/v1/ledger/read?ledger_id={id}"));
    assert_eq!(
        read,
        serde_json::json!({"0": "one", "1": "two", "2": "three"})
    );
    let read = get_json(
        &addr,
        &format!("/api/v1/ledger/read?ledger_id={id}&start_entry_id=1&end_entry_id=1"),
    );
    assert_eq!(read, serde_json::json!({"1": "two"}));
    fails(
        &addr,
        "GET",
        "/api/v1/ledger/read?ledger_id=999999",
        404,
        "999999",
    );
    fails(
        &addr,
        "GET",
        &format!("/api/v1/ledger/read?ledger_id={id}&start_entry_id=2&end_entry_id=1"),
        400,
        "before start_entry_id",
    );
    // The widest range there is: refused as too large (no arithmetic overflow, no panic).
    fails(
        &addr,
        "GET",
        &format!(
            "/api/v1/ledger/read?ledger_id={id}&start_entry_id=0&end_entry_id={}",
            i64::MAX
        ),
        400,
        "too large",
    );

    let rw = get_json(&addr, "/api/v1/bookie/list_bookies?type=rw");
    let want: serde_json::Map<String, serde_json::Value> = sa
        .bookies
        .iter()
        .map(|b| (b.clone(), serde_json::Value::Null))
        .collect();
    assert_eq!(rw, serde_json::Value::Object(want));
    let rw = get_json(
        &addr,
        "/api/v1/bookie/list_bookies?type=rw&print_hostnames=true",
    );
    assert_eq!(rw[&sa.bookies[1]], "127.0.0.1");
    assert_eq!(
        get_json(&addr, "/api/v1/bookie/list_bookies?type=ro"),
        serde_json::json!({})
    );
    // BookKeeper's cluster_info: the standalone's bookies all writable, none lost.
    let info = get_json(&addr, "/api/v1/bookie/cluster_info");
    assert_eq!(info["totalBookiesCount"], sa.bookies.len(), "{info}");
    assert_eq!(info["writableBookiesCount"], sa.bookies.len(), "{info}");
    assert_eq!(info["unavailableBookiesCount"], 0, "{info}");
    assert_eq!(info["ledgerReplicationEnabled"], true, "{info}");
    fails(
        &addr,
        "GET",
        "/api/v1/bookie/list_bookies?type=xx",
        400,
        "expected rw or ro",
    );

    let info = get_json(&addr, "/api/v1/bookie/list_bookie_info");
    let own = &info[&sa.bookies[0]];
    let free = own["freeSpace"]
        .as_u64()
        .unwrap_or_else(|| panic!("{info}"));
    let total = own["totalSpace"].as_u64().unwrap();
    assert!(free > 0 && free <= total, "{info}");
    // Every standalone bookie serves HTTP: the others' space comes from their own endpoints.
    let mut sum = 0;
    for b in &sa.bookies {
        let t = info[b]["totalSpace"]
            .as_u64()
            .unwrap_or_else(|| panic!("{b}: {info}"));
        sum += t;
    }
    assert_eq!(info["ClusterInfo"]["totalSpace"].as_u64(), Some(sum));

    let marks = get_json(&addr, "/api/v1/bookie/last_log_mark");
    let marks = marks.as_object().unwrap();
    assert_eq!(marks.len(), 1, "{marks:?}");
    let (jdir, mark) = marks.iter().next().unwrap();
    assert!(jdir.ends_with("bookie-0/journal"), "{jdir}");
    assert!(
        mark["logFileId"].is_u64() && mark["logFileOffset"].is_u64(),
        "{mark}"
    );

    let files = get_json(&addr, "/api/v1/bookie/list_disk_file");
    let journal = files["journal files"].as_str().unwrap();
    assert!(journal.ends_with(".txn"), "{files}");
    assert!(
        files["entrylog files"].is_string() && files["index files"].is_string(),
        "{files}"
    );
    let only = get_json(&addr, "/api/v1/bookie/list_disk_file?file_type=journal");
    assert_eq!(only.as_object().unwrap().len(), 1, "{only}");
    fails(
        &addr,
        "GET",
        "/api/v1/bookie/list_disk_file?file_type=x",
        400,
        "file_type",
    );

    // Garbage collection starts in the background and answers at once.
    let (status, body) = http(&addr, "PUT", "/api/v1/bookie/gc");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Triggered GC on BookieServer"), "{body}");
    let gc = get_json(&addr, "/api/v1/bookie/gc");
    assert!(gc["is_in_force_gc"].is_string(), "{gc}");

    // The monitoring routes still answer.
    let (status, body) = http(&addr, "GET", "/heartbeat");
    assert_eq!((status, body.as_str()), (200, "OK\n"));
    sa.stop();
}

#[test]
fn autorecovery_routes_and_metrics_under_bookkeepers_names() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 4);
    let addr = sa.http_addr();
    assert_eq!(
        get_json(&addr, "/api/v1/autorecovery/status"),
        serde_json::json!({ "enabled": true })
    );
    // Standalone runs autorecovery: an Auditor is elected (soon).
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    loop {
        let (status, body) = http(&addr, "GET", "/api/v1/autorecovery/who_is_auditor");
        if status == 200 {
            assert!(body.starts_with("Auditor: localhost:"), "{body}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no Auditor: {body}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    fails(
        &addr,
        "GET",
        "/api/v1/autorecovery/list_under_replicated_ledger",
        404,
        "No under replicated ledgers found",
    );
    let (status, body) = http(&addr, "PUT", "/api/v1/autorecovery/trigger_audit");
    assert_eq!(
        (status, body.as_str()),
        (200, "Successfully triggered audit\n")
    );
    // The Auditor's metrics under BookKeeper's embedded names, and Folio's gauge. Waited
    // for before autorecovery is disabled below: a triggered audit that has not started
    // by then waits for it to be enabled again, and records nothing.
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    loop {
        let (_, metrics) = http(&addr, "GET", "/metrics");
        if metrics.contains("replication_auditor_election_attempts")
            && metrics.contains("replication_auditor_AUDIT_BOOKIES_TIME")
            && metrics.contains("folio_autorecovery_under_replicated_ledgers 0")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "metrics missing: {metrics}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    fails(
        &addr,
        "PUT",
        "/api/v1/autorecovery/status?enabled=maybe",
        400,
        "enabled",
    );
    let (status, _) = http(&addr, "PUT", "/api/v1/autorecovery/status?enabled=false");
    assert_eq!(status, 200);
    assert_eq!(
        get_json(&addr, "/api/v1/autorecovery/status"),
        serde_json::json!({ "enabled": false })
    );
    fails(
        &addr,
        "PUT",
        "/api/v1/autorecovery/trigger_audit",
        409,
        "disabled",
    );
    let (_, body) = http(
        &addr,
        "GET",
        "/api/v1/autorecovery/lost_bookie_recovery_delay",
    );
    assert_eq!(body, "lostBookieRecoveryDelay value: 0\n");

    sa.stop();
}

/// `folio autorecovery --http-port` serves the cluster's routes and the dashboard without
/// being a bookie (its bookie routes say so); a standalone's dashboard JSON asks the bookies,
/// through the client, for an open ledger's LAC, and shows a recover's progress and failures.
#[test]
fn autorecovery_serves_the_dashboard_and_an_open_ledger_shows_its_lac() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 3);
    let bookie_http = sa.http_addr();
    let mut cmd = common::folio();
    cmd.arg("--metadata").arg(&sa.uri).args([
        "autorecovery",
        "--id",
        "127.0.0.1:49999",
        "--http-port",
        &common::free_port().to_string(),
    ]);
    let mut ar = common::Proc::spawn(cmd);
    ar.wait_line(|l| l == "ready");
    let addr = ar.printed("http ");
    let (status, page) = http(&addr, "GET", "/");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("/ui/app.js"), "{page}");
    let cluster = get_json(&addr, "/ui/api/cluster");
    let states: Vec<&str> = cluster["bookies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["writable"; 3], "{cluster}");
    // Every standalone bookie publishes an endpoint of its own: each one's facts are there.
    for b in cluster["bookies"].as_array().unwrap() {
        assert_eq!(b["facts"]["id"], b["id"], "{cluster}");
    }
    let r = get_json(&addr, "/ui/api/autorecovery");
    assert!(r["lostBookieRecoveryDelaySeconds"].is_u64(), "{r}");
    assert!(r["worker"].is_object(), "{r}");
    get_json(&addr, "/api/v1/autorecovery/status");
    fails(&addr, "GET", "/api/v1/bookie/state", 404, "is not a bookie");

    // A writer that stays open: its ledger's LAC comes from the bookies.
    let mut cmd = common::folio();
    cmd.arg("--metadata")
        .arg(&sa.uri)
        .args(["ledger", "write", "-e", "3", "-w", "3", "-a", "3"]);
    let mut writer = common::Proc::spawn(cmd);
    let ledger = writer.wait_line(|l| l.starts_with("ledger "));
    let ledger = ledger.strip_prefix("ledger ").unwrap().to_owned();
    // One at a time: entry 1 is sent after entry 0 was acknowledged, so it carries LAC 0 to
    // the bookies (sent together, both would carry -1).
    writer.send(b"first\n");
    writer.wait_line(|l| l == "acked 0");
    writer.send(b"second\n");
    writer.wait_line(|l| l == "acked 1");
    let d = get_json(&bookie_http, &format!("/ui/api/ledger?ledger_id={ledger}"));
    assert_eq!(d["metadata"]["state"], "OPEN", "{d}");
    assert!(d["lacError"].is_null(), "{d}");
    // The bookies that hold entry 1 have seen entry 0 confirmed (piggybacked on entry 1).
    assert!(d["lac"].as_i64().is_some_and(|lac| lac >= 0), "{d}");
    assert_eq!(
        d["fragments"][0]["lastEntry"],
        serde_json::Value::Null,
        "{d}"
    );
    writer.close_stdin();
    assert!(writer.wait().success(), "{}", writer.stderr());

    // A recover started over HTTP shows its progress; with no spare bookie for an ensemble
    // of all three, the ledger is left as it was, with why.
    let r = get_json(&bookie_http, "/ui/api/autorecovery");
    assert!(
        r["worker"].is_object(),
        "standalone's worker runs in-process: {r}"
    );
    assert_eq!(r["operations"], serde_json::json!([]), "{r}");
    let body = format!("{{\"bookie_src\": [\"{}\"]}}", sa.bookies[0]);
    let (status, text) = http_body(&bookie_http, "PUT", "/api/v1/autorecovery/bookie", &body);
    assert_eq!(status, 200, "{text}");
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    let op = loop {
        let r = get_json(&bookie_http, "/ui/api/autorecovery");
        let op = r["operations"][0].clone();
        if op["running"] == false {
            // Its operation record is not shown a second time next to it.
            assert_eq!(r["operations"].as_array().unwrap().len(), 1, "{r}");
            break op;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the recover never ended: {r}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(op["kind"], "recover", "{op}");
    assert_eq!(op["bookies"], serde_json::json!([sa.bookies[0]]), "{op}");
    assert_eq!(
        (op["ledgers"].clone(), op["done"].clone()),
        (1.into(), 1.into()),
        "{op}"
    );
    assert_eq!(op["failed"][0]["ledgerId"].to_string(), ledger, "{op}");
    assert!(
        op["failed"][0]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{op}"
    );
    assert!(op["result"]["error"].is_string(), "{op}");
    ar.terminate();
    assert!(ar.wait().success(), "{}", ar.stderr());
    sa.stop();
}

/// BookKeeper's `bookie/sanity` (a ledger written to this bookie and read back through the
/// client; a read-only bookie is not tested) and `ledger/delete`, over HTTP on a real
/// standalone cluster.
#[test]
fn bookie_sanity_and_ledger_delete_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 1);
    let addr = sa.http_addr();
    let sanity = "/api/v1/bookie/sanity";
    assert_eq!(
        get_json(&addr, sanity),
        serde_json::json!({"passed": true, "readOnly": false})
    );
    let (code, body) = http_body(
        &addr,
        "PUT",
        "/api/v1/bookie/state/readonly",
        r#"{"readOnly": true}"#,
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        get_json(&addr, sanity),
        serde_json::json!({"passed": false, "readOnly": true})
    );
    let (code, body) = http_body(
        &addr,
        "PUT",
        "/api/v1/bookie/state/readonly",
        r#"{"readOnly": false}"#,
    );
    assert_eq!(code, 200, "{body}");

    let w = sa
        .run(
            &["ledger", "write", "-e", "1", "-w", "1", "-a", "1"],
            b"gone soon\n",
        )
        .ok()
        .text();
    let id = common::ledger_id(&w);
    let path = format!("/api/v1/ledger/delete?ledger_id={id}");
    let (code, body) = http(&addr, "DELETE", &path);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        serde_json::json!(format!("Deleted ledger: {id}"))
    );
    sa.run(&["ledger", "meta", &id.to_string()], b"")
        .fails_with(&format!("no such ledger {id}"));
    fails(&addr, "DELETE", &path, 404, &id.to_string());
    fails(
        &addr,
        "DELETE",
        "/api/v1/ledger/delete",
        400,
        "missing parameter ledger_id",
    );
    assert_eq!(
        http(&addr, "GET", "/api/v1/ledger/delete?ledger_id=1").0,
        405
    );
    sa.stop();
}

/// A recover run by `folio shell recover` in a process of its own shows on the dashboard of
/// another process (the standalone's), from its operation record: who runs it, on which
/// bookie, how many ledgers; killed, its record goes with its metadata session.
#[test]
fn a_recover_run_elsewhere_shows_its_progress_and_goes_with_its_process() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 3);
    let addr = sa.http_addr();
    // A ledger on two of the three bookies, so that the third can take a copy; entries of a
    // kilobyte, so that at a byte a second the copy of the first one takes many minutes.
    let entries = format!("{}\n{}\n", "a".repeat(1000), "b".repeat(1000));
    let (_, meta) = sa.write_ledger(&["-e", "2", "-w", "2", "-a", "2"], entries.as_bytes());
    let source = meta["ensembles"]["0"][0].as_str().unwrap().to_owned();
    let mut cmd = common::folio();
    cmd.arg("--metadata")
        .arg(&sa.uri)
        .args(["shell", "recover", "-rate", "1", &source]);
    let mut recover = common::Proc::spawn(cmd);
    let pid = recover.child.id();

    let deadline = std::time::Instant::now() + common::TIMEOUT;
    let op = loop {
        let r = get_json(&addr, "/ui/api/autorecovery");
        let found = r["operations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|op| op["startedBy"]["pid"] == pid && op["ledgers"] == 1)
            .cloned();
        if let Some(op) = found {
            break op;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the recover of {source} never showed: {r}; its stderr: {}",
            recover.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(op["kind"], "recover", "{op}");
    assert_eq!(op["startedHere"], false, "{op}");
    assert_eq!(op["bookies"], serde_json::json!([source]), "{op}");
    assert_eq!(
        (op["done"].clone(), op["running"].clone()),
        (0.into(), true.into()),
        "{op}"
    );
    assert!(
        op["startedBy"]["host"]
            .as_str()
            .is_some_and(|h| !h.is_empty()),
        "{op}"
    );
    let record = op["record"].as_str().unwrap();
    assert!(record.starts_with("recover-"), "{op}");

    // Killed mid-copy (no chance to remove its record): the record goes with its session.
    recover.child.kill().unwrap();
    recover.child.wait().unwrap();
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    loop {
        let r = get_json(&addr, "/ui/api/autorecovery");
        if r["operations"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the killed recover's record stayed: {r}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    sa.stop();
}

/// Each `bookie <id>` line standalone printed with the `http <addr>` line after it.
fn bookie_endpoints(sa: &Standalone) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut id = None;
    for line in &sa.proc.seen {
        if let Some(b) = line.strip_prefix("bookie ") {
            id = Some(b.to_owned());
        } else if let (Some(h), Some(b)) = (line.strip_prefix("http "), id.take()) {
            out.push((b, h.to_owned()));
        }
    }
    out
}

/// The successful adds a `/metrics` text counts under BookKeeper's name for `bookie`.
fn adds_of(metrics: &str, bookie: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("bookkeeper_server_ADD_ENTRY_REQUEST_count{"))
        .filter(|l| l.contains(&format!("bookie=\"{bookie}\"")) && l.contains("success=\"true\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn each_standalone_bookie_shows_its_own_metrics_under_its_label() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 2);
    let endpoints = bookie_endpoints(&sa);
    assert_eq!(endpoints.len(), 2, "{:?}", sa.proc.seen);
    // Three entries on one bookie only.
    let (_, meta) = sa.write_ledger(&["-e", "1", "-w", "1", "-a", "1"], b"one\ntwo\nthree\n");
    let (_, ensemble) = meta["ensembles"]
        .as_object()
        .and_then(|e| e.iter().next())
        .unwrap_or_else(|| panic!("{meta}"));
    let writer = ensemble[0].as_str().unwrap().to_owned();
    for (bookie, addr) in &endpoints {
        let (status, metrics) = http(addr, "GET", "/metrics");
        assert_eq!(status, 200, "{metrics}");
        // Its own series only, each under its label (from its runtime's threads and from
        // the threads it starts, such as the journal's); unlabelled are only the process's
        // in-process autorecovery's.
        for line in metrics
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            if line.contains("bookie=\"") {
                assert!(
                    line.contains(&format!("bookie=\"{bookie}\"")),
                    "bookie {bookie}'s /metrics shows another's series: {line}"
                );
            } else {
                assert!(
                    line.starts_with("replication_") || line.starts_with("folio_autorecovery_"),
                    "bookie {bookie}'s /metrics has an unlabelled series: {line}"
                );
            }
        }
        assert!(
            metrics.contains(&format!("bookie_SERVER_STATUS{{bookie=\"{bookie}\"}} 1")),
            "bookie {bookie}: no labelled server status in {metrics}"
        );
        let adds = adds_of(&metrics, bookie);
        if *bookie == writer {
            assert_eq!(adds, 3, "bookie {bookie} took the ledger's adds: {metrics}");
            // Recorded on its journal thread.
            assert!(
                metrics
                    .lines()
                    .any(|l| l.starts_with("bookie_journal_JOURNAL_ADD_ENTRY_count{")
                        && l.contains(&format!("bookie=\"{bookie}\""))),
                "bookie {bookie}: no labelled journal adds in {metrics}"
            );
        } else {
            assert_eq!(adds, 0, "bookie {bookie} took no add: {metrics}");
        }
    }
    sa.stop();
}
