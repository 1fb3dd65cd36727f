//! What the command line generates about itself (shell completions, man pages) and how it
//! logs: `--log-level` and `--log-format json`.

mod common;

use common::{Outcome, folio, run};

fn folio_with(args: &[&str]) -> Outcome {
    let mut c = folio();
    c.args(args);
    run(c, b"")
}

#[test]
fn completions_and_man_pages_come_from_the_parser() {
    let bash = folio_with(&["completions", "bash"]).ok().text();
    assert!(
        bash.contains("_folio()") && bash.contains("listunderreplicated"),
        "{bash}"
    );
    let man = folio_with(&["man"]).ok().text();
    assert!(man.starts_with(".ie") || man.contains(".TH folio"), "{man}");
    let ledger = folio_with(&["man", "ledger"]).ok().text();
    assert!(ledger.contains(".TH folio-ledger"), "{ledger}");
    folio_with(&["man", "nosuch"]).fails_with("no subcommand \"nosuch\"");
}

#[test]
fn logs_can_be_json_at_the_level_asked() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("bk_server.conf");
    // One BookKeeper key Folio ignores (a warning), and no metadata service (an error after it).
    std::fs::write(&conf, "journalAdaptiveGroupWrites=false\n").unwrap();
    let out = run(
        {
            let mut c = folio();
            c.args([
                "--log-format",
                "json",
                "--log-level",
                "info",
                "bookie",
                "--config",
            ])
            .arg(&conf)
            .arg("--data-dir")
            .arg(dir.path().join("d"))
            .env_remove("FOLIO_METADATA")
            .env_remove("FOLIO_LOG");
            c
        },
        b"",
    );
    assert!(!out.status.success());
    let json: Vec<serde_json::Value> = out
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let warning = json
        .iter()
        .find(|v| v["level"] == "WARN")
        .unwrap_or_else(|| panic!("no JSON warning in {:?}", out.stderr));
    assert!(
        warning["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("journalAdaptiveGroupWrites")),
        "{warning}"
    );
    // --log-level error hides that warning.
    let quiet = run(
        {
            let mut c = folio();
            c.args(["--log-level", "error", "bookie", "--config"])
                .arg(&conf)
                .arg("--data-dir")
                .arg(dir.path().join("d"))
                .env_remove("FOLIO_METADATA")
                .env_remove("FOLIO_LOG");
            c
        },
        b"",
    );
    assert!(
        !quiet.stderr.contains("journalAdaptiveGroupWrites"),
        "{}",
        quiet.stderr
    );
}
