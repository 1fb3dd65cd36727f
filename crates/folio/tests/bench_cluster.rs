//! `folio bench bookie` and `folio bench write` as real processes against real `folio bookie`
//! processes on free ports over sqlite:// metadata in a temp dir. The checks are on the
//! shape and consistency of the JSON (entry counts, positive rates, ordered percentiles),
//! never on speed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A `folio bookie` process, stopped with SIGTERM when dropped.
struct Bookie {
    child: Child,
    addr: String,
    /// The id it registered under, as it printed it.
    id: String,
}

impl Drop for Bookie {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn metadata_uri(dir: &Path) -> String {
    format!("sqlite://{}/meta.db", dir.display())
}

fn init_cluster(dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["--metadata", &metadata_uri(dir), "shell", "initnewcluster"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "initnewcluster: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn start_bookie(dir: &Path, n: usize) -> Bookie {
    start_bookie_with(dir, n, &[])
}

fn start_bookie_with(dir: &Path, n: usize, extra: &[&str]) -> Bookie {
    // A full host disk must never fail a test: the bookie may fill it to 99.9%.
    let config = dir.join(format!("bookie{n}.toml"));
    std::fs::write(
        &config,
        "disk_usage_threshold = 0.999\ndisk_usage_lwm_threshold = 0.998\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .arg("--metadata")
        .arg(metadata_uri(dir))
        .args(["bookie", "--port", "0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.join(format!("bookie{n}")))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn folio bookie");
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut addr = None;
    let mut id = None;
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(120))
            .expect("folio bookie never said ready");
        if let Some(rest) = line.strip_prefix("bookie ") {
            let port = rest.rsplit(':').next().unwrap().trim().to_string();
            addr = Some(format!("127.0.0.1:{port}"));
            id = rest
                .split(" listening on ")
                .next()
                .map(|s| s.trim().to_string());
        }
        if line == "ready" {
            break;
        }
    }
    Bookie {
        child,
        addr: addr.expect("an address line before ready"),
        id: id.expect("an address line before ready"),
    }
}

/// A command line's words (the benchmark flags read better on one line).
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// A fresh cluster of three bookie processes on sqlite metadata in a temp dir.
fn three_bookies() -> (tempfile::TempDir, Vec<Bookie>, String) {
    let dir = tempfile::tempdir().unwrap();
    init_cluster(dir.path());
    let bookies: Vec<Bookie> = (0..3).map(|i| start_bookie(dir.path(), i)).collect();
    let uri = metadata_uri(dir.path());
    (dir, bookies, uri)
}

fn bench_json(metadata: Option<&str>, args: &[&str]) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_folio"));
    if let Some(uri) = metadata {
        cmd.args(["--metadata", uri]);
    }
    let out = cmd.arg("bench").args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "folio bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim().lines().count(),
        1,
        "one JSON object: {stdout}"
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The fields of DESIGN.md section 7, consistent with each other.
fn check_summary(v: &Value, entries: u64, entry_size: u64) {
    assert_eq!(v["entries"].as_u64(), Some(entries), "{v}");
    let seconds = v["seconds"].as_f64().unwrap();
    let eps = v["entries_per_sec"].as_f64().unwrap();
    let mbps = v["mb_per_sec"].as_f64().unwrap();
    assert!(seconds > 0.0 && eps > 0.0 && mbps > 0.0, "{v}");
    // entries_per_sec is entries / seconds, both rounded in the output: seconds to 3
    // decimals, so a fast run's rate may differ from entries / seconds by the rounding.
    let lo = entries as f64 / (seconds + 0.0005);
    let hi = entries as f64 / (seconds - 0.0005).max(1e-9);
    assert!(eps >= lo * 0.99 - 1.0 && eps <= hi * 1.01 + 1.0, "{v}");
    let expect_mb = eps * entry_size as f64 / 1e6;
    assert!((mbps - expect_mb).abs() <= expect_mb * 0.01 + 0.01, "{v}");
    let l = &v["latency_ms"];
    let (p50, p99, p999, max) = (
        l["p50"].as_f64().unwrap(),
        l["p99"].as_f64().unwrap(),
        l["p999"].as_f64().unwrap(),
        l["max"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max, "{v}");
}

#[test]
fn bench_bookie_reports_both_phases_against_a_real_bookie() {
    let dir = tempfile::tempdir().unwrap();
    init_cluster(dir.path());
    let b = start_bookie(dir.path(), 0);
    let v = bench_json(
        None,
        &[
            "bookie",
            "--bookie",
            &b.addr,
            "--entry-size",
            "100",
            "--entries",
            "200",
            "--in-flight",
            "16",
            "--ledgers",
            "2",
            "--json",
        ],
    );
    assert_eq!(v["bench"], "bookie");
    check_summary(&v, 200, 100);
    check_summary(&v["latency_phase"], 200, 100);
    check_summary(&v["throughput_phase"], 200, 100);
    assert_eq!(v["latency_phase"]["in_flight"], 1);
    assert_eq!(v["throughput_phase"]["in_flight"], 16);
    // The top-level figures are the throughput phase's.
    assert_eq!(v["seconds"], v["throughput_phase"]["seconds"]);
}

#[test]
fn bench_bookie_names_an_unreachable_bookie() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["bench", "bookie", "--entries", "5", "--bookie"])
        .arg(format!("127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}

#[test]
fn bench_write_appends_through_the_client_to_three_bookies() {
    let (_dir, bookies, uri) = three_bookies();
    let v = bench_json(
        Some(&uri),
        &words(
            "write -e 3 -w 2 -a 2 --entry-size 100 --entries 200 --in-flight 20 --ledgers 2 --json",
        ),
    );
    assert_eq!(v["bench"], "write");
    check_summary(&v, 200, 100);
    assert_eq!(v["ensemble"], 3);
    assert_eq!(v["write_quorum"], 2);
    assert_eq!(v["ack_quorum"], 2);
    assert_eq!(v["ledger_ids"].as_array().unwrap().len(), 2);
    drop(bookies);
}

#[test]
fn bench_write_without_metadata_is_a_one_line_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["bench", "write", "--entries", "5"])
        .env_remove("FOLIO_METADATA")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--metadata"), "{err}");
}

#[test]
fn bench_read_reads_back_every_entry_it_wrote_then_reads_kept_ledgers_by_id() {
    let (_dir, bookies, uri) = three_bookies();
    // 301 entries over 2 ledgers (151 + 150), read 7 at a time with 10 reads in flight.
    let v = bench_json(
        Some(&uri),
        &words(
            "read -e 3 -w 2 -a 2 --entry-size 100 --entries 301 --ledgers 2 --in-flight 10 --batch 7 --keep --json",
        ),
    );
    assert_eq!(v["bench"], "read");
    check_summary(&v, 301, 100);
    check_summary(&v["write_phase"], 301, 100);
    assert_eq!(v["batch"], 7);
    assert_eq!(v["entries_per_ledger"], serde_json::json!([151, 150]));
    let ids: Vec<String> = v["ledger_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    // The kept ledgers, read again by id: the same counts, no write phase.
    let v = bench_json(
        Some(&uri),
        &[
            "read",
            "--ledger",
            &ids[0],
            "--ledger",
            &ids[1],
            "--in-flight",
            "4",
            "--json",
        ],
    );
    check_summary(&v, 301, 100);
    assert!(v["write_phase"].is_null(), "{v}");
    assert_eq!(v["entries_per_ledger"], serde_json::json!([151, 150]));
    // A wrong password is refused, naming the ledger.
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["--metadata", &uri, "bench", "read", "--ledger", &ids[0]])
        .args(["--password", "wrong"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&ids[0]), "{err}");
    drop(bookies);
}

#[test]
fn bench_tail_delivers_every_entry_to_every_tailing_reader() {
    let (_dir, bookies, uri) = three_bookies();
    let v = bench_json(
        Some(&uri),
        &words(
            "tail -e 3 -w 2 -a 2 --entry-size 100 --entries 250 --in-flight 8 --readers 2 --json",
        ),
    );
    assert_eq!(v["bench"], "tail");
    check_summary(&v, 250, 100);
    assert_eq!(v["readers"], 2);
    assert_eq!(v["delivered"], 500);
    assert_eq!(v["delivered_per_reader"], serde_json::json!([250, 250]));
    // The writer kept appending past the measured entries until the readers had them all.
    assert!(v["written"].as_u64().unwrap() >= 250, "{v}");
    assert!(v["written"].as_u64().unwrap() <= 500, "{v}");
    assert_eq!(v["latency_from"], "ack");
    // Each entry's end-to-end latency is its append latency plus its delivery latency.
    for p in ["p50", "p99", "max"] {
        let (d, e) = (&v["latency_ms"][p], &v["e2e_latency_ms"][p]);
        assert!(d.as_f64().unwrap() <= e.as_f64().unwrap(), "{p}: {v}");
    }
    let a = &v["append_latency_ms"];
    assert!(a["p50"].as_f64().unwrap() > 0.0, "{v}");
    assert!(
        a["p50"].as_f64().unwrap() <= a["max"].as_f64().unwrap(),
        "{v}"
    );
    // Paced at 400 appends per second, the 120 measured entries take at least the 119
    // intervals between their sends (a slow machine only makes it longer).
    let v = bench_json(
        Some(&uri),
        &words("tail --entry-size 100 --entries 120 --in-flight 8 --rate 400 --json"),
    );
    check_summary(&v, 120, 100);
    assert_eq!(v["rate"], 400.0);
    assert_eq!(v["delivered"], 120);
    assert!(v["seconds"].as_f64().unwrap() >= 119.0 / 400.0, "{v}");
    assert_eq!(v["parallel"], false);
    // Each long poll sent to every bookie at once: still every entry, once.
    let v = bench_json(
        Some(&uri),
        &words("tail --entry-size 100 --entries 120 --in-flight 8 --parallel --json"),
    );
    check_summary(&v, 120, 100);
    assert_eq!(v["parallel"], true);
    assert_eq!(v["delivered"], 120);
    drop(bookies);
}

#[test]
fn a_bookie_started_with_rack_publishes_it_in_its_registration() {
    let dir = tempfile::tempdir().unwrap();
    init_cluster(dir.path());
    let b = start_bookie_with(dir.path(), 0, &["--rack", "/region-a/rack-7"]);
    let uri = metadata_uri(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rack = rt.block_on(async {
        let store = folio_metadata::connect_embedded(&uri).await.unwrap();
        let id = folio_types::BookieId::new(b.id.clone()).unwrap();
        let info = store.bookie_service_info(&id).await.unwrap();
        info.properties.get("rack").cloned()
    });
    assert_eq!(rack.as_deref(), Some("/region-a/rack-7"));
    drop(b);
    // A rack that is not a network location is refused, naming it.
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args([
            "--metadata",
            &uri,
            "bookie",
            "--port",
            "0",
            "--rack",
            "rack7",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("bad"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rack7"), "{err}");
}

#[test]
fn bench_rereplicate_restores_every_replica_of_a_stopped_bookie() {
    let dir = tempfile::tempdir().unwrap();
    init_cluster(dir.path());
    let mut bookies: Vec<Bookie> = (0..4).map(|i| start_bookie(dir.path(), i)).collect();
    let uri = metadata_uri(dir.path());
    let w = bench_json(
        Some(&uri),
        &words(
            "write -e 3 -w 3 -a 2 --entry-size 1000 --entries 600 --in-flight 30 --ledgers 6 --keep --json",
        ),
    );
    let ledgers: Vec<u64> = w["ledger_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    // E3 on four bookies: every ledger names three of them; stop one (SIGTERM, unregistered).
    let gone = bookies.remove(0);
    let gone_id = gone.id.clone();
    drop(gone);
    let v = bench_json(
        Some(&uri),
        &[
            "rereplicate",
            "--bookie",
            &gone_id,
            "--concurrency",
            "3",
            "--json",
        ],
    );
    let named = |id: u64| {
        let out = Command::new(env!("CARGO_BIN_EXE_folio"))
            .args([
                "--metadata",
                &uri,
                "shell",
                "ledgermetadata",
                &id.to_string(),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains(&gone_id)
    };
    let naming = ledgers.iter().filter(|l| named(**l)).count() as u64;
    assert_eq!(naming, 0, "ledgers still name {gone_id}: {v}");
    let restored = v["ledgers"].as_u64().unwrap();
    assert!((1..=6).contains(&restored), "{v}");
    // Every entry of a restored ledger was copied once (Qw = 3 on 3 of 4 bookies: the lost
    // bookie held all of each of its ledgers' entries).
    assert_eq!(v["entries"].as_u64().unwrap(), restored * 100, "{v}");
    assert!(v["bytes"].as_u64().unwrap() > restored * 100 * 1000, "{v}");
    assert!(v["mb_per_sec"].as_f64().unwrap() > 0.0, "{v}");
    drop(bookies);
}
