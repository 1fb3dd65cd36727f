//! Autorecovery with real processes: five `folio bookie` processes and two
//! `folio autorecovery` processes on `sqlite://` metadata. Closed ledgers (E3 Qw3 Qa2 and
//! E3 Qw2 Qa2, one empty) and an open one whose writer is killed; then a bookie is killed
//! for good (SIGKILL). Within a bounded time nothing is queued and no ledger names it; the
//! open ledger is closed with every acknowledged entry. Then the Auditor's process is
//! killed and a second bookie dies: the other process takes over as Auditor, heals again,
//! and every ledger reads back byte for byte (with Qw = 2, an entry whose copies were not
//! restored after the first loss could be gone after the second).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Proc, TIMEOUT, folio, free_port, run};

const SESSION_TIMEOUT_MS: u64 = 2000;

struct Cluster {
    uri: String,
    root: PathBuf,
    bookies: Vec<(u16, Option<Proc>)>,
}

impl Cluster {
    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = folio();
        c.arg("--metadata").arg(&self.uri).args(args);
        c
    }

    fn start_bookie(&mut self, i: usize) {
        let port = self.bookies[i].0;
        let dir = self.root.join(format!("bookie{i}"));
        let config = self.root.join(format!("bookie{i}.toml"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            &config,
            format!(
                "listen_address = \"127.0.0.1\"\nbookie_id = \"127.0.0.1:{port}\"\n\
                 disk_usage_threshold = 0.999\ndisk_usage_lwm_threshold = 0.998\n\
                 metadata_session_timeout_ms = {SESSION_TIMEOUT_MS}\n"
            ),
        )
        .unwrap();
        let mut c = self.cmd(&["bookie", "--port", &port.to_string()]);
        c.arg("--data-dir").arg(&dir).arg("--config").arg(&config);
        let mut p = Proc::spawn(c);
        p.wait_line(|l| l == "ready");
        self.bookies[i].1 = Some(p);
    }

    fn autorecovery(&self, n: u16) -> Proc {
        let mut p = Proc::spawn(self.cmd(&[
            "autorecovery",
            "--id",
            &format!("127.0.0.1:{}", 40000 + n),
            "--open-ledger-grace-period-ms",
            "1000",
        ]));
        p.wait_line(|l| l == "ready");
        p
    }

    fn kill_bookie(&mut self, i: usize) -> String {
        let mut p = self.bookies[i].1.take().expect("running");
        let _ = p.child.kill();
        let _ = p.child.wait();
        format!("127.0.0.1:{}", self.bookies[i].0)
    }

    fn shell(&self, args: &[&str]) -> String {
        let mut all = vec!["shell"];
        all.extend_from_slice(args);
        run(self.cmd(&all), b"").ok().text()
    }

    /// The ensembles of a ledger, from `shell ledgermetadata`.
    fn ensembles(&self, ledger: u64) -> Vec<String> {
        self.shell(&["ledgermetadata", &ledger.to_string()])
            .lines()
            .filter_map(|l| l.strip_prefix("ensemble[").and_then(|r| r.split_once(": ")))
            .map(|(_, members)| members.to_string())
            .collect()
    }

    /// Waits until nothing is queued and no ledger of `ledgers` names `gone`.
    fn wait_healed(&self, ledgers: &[u64], gone: &[String]) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let queued = self.shell(&["listunderreplicated", "-c"]);
            let naming: Vec<u64> = ledgers
                .iter()
                .copied()
                .filter(|l| {
                    self.ensembles(*l)
                        .iter()
                        .any(|e| gone.iter().any(|g| e.split(',').any(|m| m == g)))
                })
                .collect();
            if queued.trim() == "0" && naming.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not healed within {TIMEOUT:?}: queued {queued:?}, ledgers naming {gone:?}: {naming:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

fn write_closed(c: &Cluster, q: [&str; 3], lines: &[String]) -> u64 {
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let out = run(
        c.cmd(&["ledger", "write", "-e", q[0], "-w", q[1], "-a", q[2]]),
        input.as_bytes(),
    )
    .ok()
    .text();
    ledger_id(&out)
}

fn ledger_id(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("ledger "))
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ledger line in {out:?}"))
}

fn read_back(c: &Cluster, ledger: u64, want: &[String]) {
    let out = run(c.cmd(&["ledger", "read", &ledger.to_string()]), b"")
        .ok()
        .text();
    let got: Vec<&str> = out
        .lines()
        .map(|l| l.split_once('\t').map_or(l, |(_, p)| p))
        .collect();
    assert_eq!(got, want, "ledger {ledger} reads back differently");
}

#[test]
fn a_killed_bookie_is_healed_by_autorecovery_processes() {
    let dir = tempfile::tempdir().unwrap();
    let root: &Path = dir.path();
    let uri = format!("sqlite://{}", root.join("metadata.db").display());
    let mut cluster = Cluster {
        uri,
        root: root.to_path_buf(),
        bookies: (0..5).map(|_| (free_port(), None)).collect(),
    };
    run(cluster.cmd(&["shell", "initnewcluster"]), b"").ok();
    for i in 0..5 {
        cluster.start_bookie(i);
    }
    let auditor_a = cluster.autorecovery(1);
    let mut auditor_b = Some(cluster.autorecovery(2));

    let lines =
        |tag: &str, n: usize| -> Vec<String> { (0..n).map(|i| format!("{tag}-{i}")).collect() };
    let mut ledgers: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for (tag, q, n) in [
        ("qw3", ["3", "3", "2"], 60),
        ("qw2", ["3", "2", "2"], 60),
        ("qw2b", ["3", "2", "2"], 45),
        ("empty", ["3", "2", "2"], 0),
    ] {
        let l = lines(tag, n);
        ledgers.insert(write_closed(&cluster, q, &l), l);
    }
    // An open ledger: its writer is killed after its entries are acknowledged.
    let mut writer =
        Proc::spawn(cluster.cmd(&["ledger", "write", "-e", "3", "-w", "2", "-a", "2"]));
    let open_lines = lines("open", 20);
    let open = ledger_id(&writer.wait_line(|l| l.starts_with("ledger ")));
    for l in &open_lines {
        writer.send(format!("{l}\n").as_bytes());
    }
    writer.wait_line(|l| l == "acked 19");
    let _ = writer.child.kill();
    let _ = writer.child.wait();
    ledgers.insert(open, open_lines);
    let ids: Vec<u64> = ledgers.keys().copied().collect();

    // The bookie named by the most ledgers dies for good.
    let mut count: BTreeMap<usize, usize> = BTreeMap::new();
    for l in &ids {
        for e in cluster.ensembles(*l) {
            for (i, (port, _)) in cluster.bookies.iter().enumerate() {
                if e.split(',').any(|m| m == format!("127.0.0.1:{port}")) {
                    *count.entry(i).or_default() += 1;
                }
            }
        }
    }
    let first = *count.iter().max_by_key(|(_, n)| **n).unwrap().0;
    let gone1 = cluster.kill_bookie(first);
    cluster.wait_healed(&ids, std::slice::from_ref(&gone1));
    let who = cluster.shell(&["whoisauditor"]);
    assert!(who.starts_with("Auditor: 127.0.0.1:4000"), "{who:?}");

    // The open ledger was closed with every acknowledged entry; all read back.
    for (l, want) in &ledgers {
        read_back(&cluster, *l, want);
    }

    // The Auditor's process dies, then a second bookie: the other process takes over.
    let auditor_port = who
        .trim()
        .trim_start_matches("Auditor: 127.0.0.1:")
        .to_string();
    let mut survivor = if auditor_port == "40001" {
        drop(auditor_a);
        auditor_b.take().unwrap()
    } else {
        drop(auditor_b.take());
        auditor_a
    };
    let second = (0..5).find(|i| *i != first).unwrap();
    let gone2 = cluster.kill_bookie(second);
    cluster.wait_healed(&ids, &[gone1, gone2]);
    for (l, want) in &ledgers {
        read_back(&cluster, *l, want);
    }
    survivor.terminate();
    survivor.wait_line(|l| l == "stopped");
}
