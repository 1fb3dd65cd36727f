//! `folio bench journal` and `folio bench reclaim` as a user runs them: the real binary on a
//! real directory.

use std::process::Command;

fn folio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_folio"))
}

fn run_json(dir: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let out = folio()
        .args(["bench", "journal", "--dir"])
        .arg(dir)
        .args([
            "--entry-size",
            "100",
            "--entries",
            "300",
            "--in-flight",
            "8",
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "folio bench journal failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn json_reports_throughput_latency_and_fdatasyncs() {
    let tmp = tempfile::tempdir().unwrap();
    let v = run_json(tmp.path(), &[]);
    assert_eq!(v["entries"], 300);
    assert_eq!(v["entry_size"], 100);
    assert_eq!(v["in_flight"], 8);
    assert_eq!(v["sync"], true);
    for k in ["seconds", "entries_per_sec", "mb_per_sec"] {
        assert!(v[k].as_f64().unwrap() > 0.0, "{k} in {v}");
    }
    let l = &v["latency_ms"];
    let (p50, p99, p999, max) = (
        l["p50"].as_f64().unwrap(),
        l["p99"].as_f64().unwrap(),
        l["p999"].as_f64().unwrap(),
        l["max"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= p999 && p999 <= max, "{l}");
    // Every add was covered by a group commit's fdatasync, and none covered more than 8
    // adds (only 8 were ever outstanding) plus a master-key record.
    let groups = v["journal_group_fdatasyncs"].as_u64().unwrap();
    assert!(
        (300 / 8..=300 + 16).contains(&groups),
        "{groups} group commits"
    );
    let per_group = v["entries_per_group"].as_f64().unwrap();
    assert!(
        (300.0 / groups as f64 - per_group).abs() < 0.01,
        "{per_group}"
    );
    // Zero-fill and new-file syncs come on top of the group commits; 300 adds of 100 B
    // never drain half of the 16 MiB preallocation, so there is no zero fill.
    let syncs = v["journal_fdatasyncs"].as_u64().unwrap();
    let prealloc = v["journal_prealloc_fdatasyncs"].as_u64().unwrap();
    let files = v["journal_files_created"].as_u64().unwrap();
    assert_eq!(syncs, groups + prealloc + files);
    assert_eq!(prealloc, 0, "{v}");
    // 300 adds and 16 master keys, 28-byte record headers.
    assert_eq!(v["journal_records"], 316);
    assert_eq!(v["journal_bytes"].as_u64().unwrap(), 300 * 128 + 16 * 48);
    assert_eq!(v["journal_group_commits"].as_u64().unwrap(), groups);
    let per = v["entries_per_fdatasync"].as_f64().unwrap();
    assert!((300.0 / syncs as f64 - per).abs() < 0.01, "{per}");
    // The working subdirectory is gone.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn no_sync_issues_no_journal_fdatasync() {
    let tmp = tempfile::tempdir().unwrap();
    let v = run_json(tmp.path(), &["--no-sync", "--journal-dirs", "2"]);
    assert_eq!(v["sync"], false);
    assert_eq!(v["journal_dirs"], 2);
    // (The journal file headers are synced at open, before the measurement starts.)
    assert_eq!(v["journal_fdatasyncs"], 0);
    assert_eq!(v["journal_group_fdatasyncs"], 0);
    assert_eq!(v["entries"], 300);
}

#[test]
fn text_output_names_the_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let out = folio()
        .args(["bench", "journal", "--dir"])
        .arg(tmp.path())
        .args(["--entry-size", "64", "--entries", "50"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "entries/s",
        "MB/s",
        "p50",
        "p99",
        "p99.9",
        "max",
        "entries per fdatasync",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

#[test]
fn bad_arguments_are_refused_with_the_cause() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, cause) in [
        (&["--entry-size", "10"][..], "--entry-size 10 is too small"),
        (&["--in-flight", "0"][..], "--in-flight must be at least 1"),
        (&["--entries", "0"][..], "--entries must be at least 1"),
    ] {
        let out = folio()
            .args(["bench", "journal", "--dir"])
            .arg(tmp.path())
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(cause), "{args:?}: {err}");
    }
    let out = folio().args(["bench", "journal"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dir"));
}

/// `folio bench reclaim`: with a log per ledger the deleted half goes as whole files and
/// compaction rewrites nothing; interleaved, the mixed logs are compacted (their live half
/// copied). Checks what the benchmark reports, not how fast.
#[test]
fn bench_reclaim_rewrites_nothing_with_a_log_per_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let reclaim = |extra: &[&str]| -> serde_json::Value {
        let out = folio()
            .args(["bench", "reclaim", "--dir"])
            .arg(dir.path())
            .args(["--ledgers", "4", "--entries", "20", "--entry-size", "65536"])
            .args(["--log-size-mib", "1", "--json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "folio bench reclaim failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let per_ledger = reclaim(&["--entry-log-per-ledger"]);
    assert_eq!(per_ledger["mode"], "per-ledger");
    assert_eq!(per_ledger["bytes_rewritten"], 0, "{per_ledger}");
    // The two deleted ledgers' logs (each ledger rolled into two at the 1 MiB limit).
    assert!(
        per_ledger["logs_removed_whole"].as_u64().unwrap() >= 2,
        "{per_ledger}"
    );
    assert_eq!(per_ledger["logs_compacted"], 0, "{per_ledger}");
    assert!(
        per_ledger["bytes_freed"].as_u64().unwrap() > 2 * 20 * 65536,
        "{per_ledger}"
    );
    let interleaved = reclaim(&[]);
    assert_eq!(interleaved["mode"], "interleaved");
    assert!(
        interleaved["entries_copied"].as_u64().unwrap() > 0,
        "{interleaved}"
    );
    assert!(
        interleaved["bytes_rewritten"].as_u64().unwrap() > 0,
        "{interleaved}"
    );
}
