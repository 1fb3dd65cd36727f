//! BookKeeper's maintenance commands run as an operator runs them, against real `folio`
//! processes and the files they wrote: `readlogmetadata`, `activeledgers` and
//! `localconsistencycheck` on a stopped standalone bookie's entry log and index; and the
//! move of a bookie from its address-based id to its host-name-based one with
//! `updatecookie -bookieId hostname` and `updateledgers -bookieId hostname`, then
//! `updatecookie -expandstorage`, `-list` and `-delete force`.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Outcome, Proc, Standalone, entry_logs, folio, free_port, ledger_id, run};

fn shell(uri: Option<&str>, args: &[&str]) -> Outcome {
    let mut cmd = folio();
    if let Some(uri) = uri {
        cmd.args(["--metadata", uri]);
    }
    cmd.arg("shell").args(args).env("HOSTNAME", "localhost");
    run(cmd, b"")
}

#[test]
fn entry_log_metadata_active_ledgers_and_the_local_consistency_check() {
    let dir = tempfile::tempdir().unwrap();
    let bookie_dir = dir.path().join("bookie-0");
    let data_dir = bookie_dir.to_str().unwrap().to_owned();
    let sa = Standalone::start(dir.path(), 1);
    let q = ["ledger", "write", "-e", "1", "-w", "1", "-a", "1"];
    let kept = ledger_id(&sa.run(&q, b"alpha\nbeta\ngamma\n").ok().text());
    let deleted = ledger_id(&sa.run(&q, b"doomed\n").ok().text());
    let uri = sa.uri.clone();
    sa.stop();
    // Deleted from the metadata only: the stopped bookie still holds its entries.
    let mut del = folio();
    del.args(["--metadata", &uri, "ledger", "delete", &deleted.to_string()]);
    run(del, b"").ok();

    let logs = entry_logs(&bookie_dir);
    assert_eq!(logs.len(), 1, "{logs:?}");
    let hex = logs[0].file_stem().unwrap().to_str().unwrap().to_owned();
    let id = u64::from_str_radix(&hex, 16).unwrap();

    // readlogmetadata: both ledgers' bytes (records: 24-byte header + 32-byte entry header
    // + 4-byte crc32c digest + payload), by id in hex and by file.
    let out = shell(None, &["readlogmetadata", "-datadir", &data_dir, &hex])
        .ok()
        .text();
    let kept_bytes = ["alpha", "beta", "gamma"]
        .iter()
        .map(|p| 60 + p.len())
        .sum::<usize>();
    let want = format!(
        "Print entryLogMetadata of entrylog {id} ({id:x}.log)\n\
         entryLogId: {id}, total size: {}\n\
         --------- Lid={kept}, TotalSizeOfEntriesOfLedger={kept_bytes}  ---------\n\
         --------- Lid={deleted}, TotalSizeOfEntriesOfLedger={}  ---------\n",
        kept_bytes + 66,
        66
    );
    assert_eq!(out, want);
    let by_file = shell(None, &["readlogmetadata", logs[0].to_str().unwrap()])
        .ok()
        .text();
    assert_eq!(by_file, want);
    shell(None, &["readlogmetadata", "-datadir", &data_dir, "ffff"])
        .fails_with("no entry log with id 65535");

    // activeledgers: only the ledger the metadata still has.
    let out = shell(
        Some(&uri),
        &[
            "activeledgers",
            "-datadir",
            &data_dir,
            "-logId",
            &id.to_string(),
        ],
    )
    .ok()
    .text();
    let total = kept_bytes + 66;
    assert_eq!(
        out,
        format!(
            "Print active ledgers of entrylog {id} ({id:x}.log)\n\
             entryLogId: {id}, remaining size: {kept_bytes}, total size: {total}, usage: {}\n\
             --------- Lid={kept}, TotalSizeOfEntriesOfLedger={kept_bytes}  ---------\n",
            kept_bytes as f64 / total as f64
        )
    );

    // localconsistencycheck: clean, then one damaged record is named and the exit fails.
    let out = shell(None, &["localconsistencycheck", "-datadir", &data_dir])
        .ok()
        .text();
    assert!(
        out.contains("=== Check passed === (4 entries read)"),
        "{out}"
    );
    let mut bytes = std::fs::read(&logs[0]).unwrap();
    let at = find(&bytes, b"beta");
    bytes[at] ^= 0xff;
    std::fs::write(&logs[0], bytes).unwrap();
    let failed = shell(None, &["localconsistencycheck", "-datadir", &data_dir]);
    failed.fails_with("1 of 4 entries the index lists cannot be read");
    let out = failed.text();
    assert!(out.contains("=== Check returned errors: ==="), "{out}");
    let errors: Vec<&str> = out.lines().filter(|l| l.starts_with("Ledger ")).collect();
    assert_eq!(errors.len(), 1, "{out}");
    assert!(
        errors[0].starts_with(&format!("Ledger {kept}, entry 1: entry log {id} offset ")),
        "{out}"
    );
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the payload is in the entry log")
}

/// A `folio bookie` whose host name is `localhost` and whose address is 127.0.0.1, with
/// `config` (TOML, its port included) written to `<dir>/bookie.toml`.
fn bookie(dir: &Path, uri: &str, config: &str) -> Command {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("bookie.toml"), config).unwrap();
    let mut cmd = folio();
    cmd.args(["--metadata", uri, "bookie"])
        .arg("--config")
        .arg(dir.join("bookie.toml"))
        .env("HOSTNAME", "localhost");
    cmd
}

fn start(cmd: Command) -> Proc {
    let mut p = Proc::spawn(cmd);
    p.wait_line(|l| l == "ready");
    p
}

fn stop(mut p: Proc) {
    p.signal("TERM");
    assert!(p.wait().success(), "{}", p.stderr());
}

fn config(port: u16, data: &Path, host_name_id: bool, ledger_dirs: &[&str]) -> String {
    let mut c = format!(
        "port = {port}\nlisten_address = \"127.0.0.1\"\ndata_dir = \"{}\"\nuse_host_name_as_bookie_id = {host_name_id}\n\
         disk_usage_threshold = 0.999\ndisk_usage_lwm_threshold = 0.998\n",
        data.display()
    );
    if !ledger_dirs.is_empty() {
        let dirs: Vec<String> = ledger_dirs
            .iter()
            .map(|d| format!("\"{}\"", data.join(d).display()))
            .collect();
        c += &format!("ledger_dirs = [{}]\n", dirs.join(", "));
    }
    c
}

#[test]
fn a_bookie_moves_from_its_address_to_its_host_name_and_gains_a_ledger_directory() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 2);
    let uri = sa.uri.clone();
    let port = free_port();
    let home = dir.path().join("moved");
    let data = home.join("data");
    let conf = home.join("bookie.toml");
    let conf = conf.to_str().unwrap();
    let (ip_id, host_id) = (format!("127.0.0.1:{port}"), format!("localhost:{port}"));

    let b = start(bookie(&home, &uri, &config(port, &data, false, &[])));
    let w = sa
        .run(
            &["ledger", "write", "-e", "3", "-w", "3", "-a", "3"],
            b"one\ntwo\n",
        )
        .ok()
        .text();
    let ledger = ledger_id(&w).to_string();
    let meta = sa.run(&["ledger", "meta", &ledger], b"").ok().text();
    assert!(meta.contains(&ip_id), "{meta}");
    stop(b);

    // The configuration must say the new form first, as BookKeeper's useHostNameAsBookieID.
    shell(
        Some(&uri),
        &["updatecookie", "-conf", conf, "-bookieId", "hostname"],
    )
    .fails_with("expects use_host_name_as_bookie_id = true");
    std::fs::write(conf, config(port, &data, true, &[])).unwrap();
    shell(
        Some(&uri),
        &["updatecookie", "-conf", conf, "-bookieId", "sideways"],
    )
    .fails_with("-bookieId takes hostname or ip");

    let out = shell(
        Some(&uri),
        &["updatecookie", "-conf", conf, "-bookieId", "hostname"],
    )
    .ok()
    .text();
    assert_eq!(
        out,
        format!("Updated the cookie of bookie {ip_id}: it is now bookie {host_id}\n")
    );
    shell(Some(&uri), &["cookie_get", &host_id]).ok();
    shell(Some(&uri), &["cookie_get", &ip_id]).fails_with(&format!("no cookie for bookie {ip_id}"));
    let listed = shell(Some(&uri), &["updatecookie", "-conf", conf, "-list"])
        .ok()
        .text();
    assert!(
        listed.contains(&format!("Listing local Cookie Files of Bookie {host_id}\n"))
            && listed.contains(&format!(
                "{}\n",
                data.join("journal/current/VERSION").display()
            ))
            && listed.contains(&format!(
                "{}\n",
                data.join("ledgers/current/VERSION").display()
            ))
            && listed.contains(&format!("Cookie of Bookie {host_id} in the metadata store")),
        "{listed}"
    );

    let out = shell(
        Some(&uri),
        &[
            "updateledgers",
            "-bookieId",
            "hostname",
            "-conf",
            conf,
            "-updatespersec",
            "0",
            "-verbose",
            "true",
        ],
    )
    .ok()
    .text();
    assert_eq!(
        out,
        format!("Updated ledger {ledger}\nNumber of ledgers updated: 1\n")
    );
    let meta = sa.run(&["ledger", "meta", &ledger], b"").ok().text();
    assert!(meta.contains(&host_id) && !meta.contains(&ip_id), "{meta}");

    // The bookie starts under its new id with the moved cookie, and serves the ledger.
    let b = start(bookie(&home, &uri, &config(port, &data, true, &[])));
    let listed = sa.run(&["shell", "listbookies"], b"").ok().text();
    assert!(listed.contains(&host_id), "{listed}");
    let read = sa.run(&["ledger", "read", &ledger], b"").ok();
    assert_eq!(read.stdout, b"0\tone\n1\ttwo\n");
    // Refused while it runs (it holds its directories).
    shell(
        Some(&uri),
        &["updatecookie", "-conf", conf, "-delete", "force"],
    )
    .fails_with("in use by a running bookie");
    stop(b);

    // A second ledger directory: refused by the cookie check until -expandstorage adds it.
    let two = config(port, &data, true, &["ledgers", "ledgers2"]);
    let mut refused = Proc::spawn(bookie(&home, &uri, &two));
    assert!(!refused.wait().success());
    assert!(refused.stderr().contains("cookie"), "{}", refused.stderr());
    std::fs::remove_dir_all(data.join("ledgers2")).ok();
    let out = shell(
        Some(&uri),
        &["updatecookie", "-conf", conf, "-expandstorage"],
    )
    .ok()
    .text();
    assert_eq!(
        out,
        format!(
            "Expanded the storage of bookie {host_id}: added {}\n",
            data.join("ledgers2").display()
        )
    );
    let b = start(bookie(&home, &uri, &two));
    stop(b);

    // -delete force: the local cookie files and the stored one.
    let out = shell(
        Some(&uri),
        &["updatecookie", "-conf", conf, "-delete", "force"],
    )
    .ok()
    .text();
    assert!(
        out.contains(&format!("Deleted Local Cookies of Bookie {host_id}"))
            && out.contains(&format!(
                "Deleted Cookie from metadata store for Bookie {host_id}"
            )),
        "{out}"
    );
    assert!(!data.join("ledgers2/current/VERSION").exists());
    shell(Some(&uri), &["cookie_get", &host_id])
        .fails_with(&format!("no cookie for bookie {host_id}"));
    sa.stop();
}
