//! `folio shell readjournal | readlog | lastmark | listfilesondisc | bookieformat`: the commands on a bookie's
//! own directories, run as a user runs them against the data of a real `folio standalone`
//! bookie, with the printed records checked against what was written.

mod common;

use std::path::Path;

use common::{Outcome, Proc, Standalone, entry_logs, folio, ledger_id, run};

fn local(args: &[&str], stdin: &[u8]) -> Outcome {
    let mut cmd = folio();
    cmd.arg("shell").args(args);
    run(cmd, stdin)
}

/// `(journal id, offset)` from a `lastmark` line.
fn mark(out: &str) -> (u64, u64) {
    let line = out.lines().next().unwrap_or_else(|| panic!("{out:?}"));
    let rest = line
        .strip_prefix("LastLogMark : Journal Id - ")
        .unwrap_or_else(|| panic!("{line:?}"));
    let (id, rest) = rest.split_once('(').unwrap();
    let pos = rest.split_once("Pos - ").unwrap().1;
    let pos = pos.split_whitespace().next().unwrap();
    (id.parse().unwrap(), pos.parse().unwrap())
}

#[test]
fn readjournal_readlog_and_lastmark_show_what_a_bookie_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let bookie_dir = dir.path().join("bookie-0");
    let data_dir = bookie_dir.to_str().unwrap().to_owned();
    let sa = Standalone::start(dir.path(), 1);

    // A fresh bookie has no mark yet: replay would start at the beginning.
    let before = mark(&local(&["lastmark", "-datadir", &data_dir], b"").ok().text());
    assert_eq!(before, (0, 0));

    let q = ["-e", "1", "-w", "1", "-a", "1"];
    let mut args = vec!["ledger", "write"];
    args.extend(q);
    let w = sa.run(&args, b"alpha\nbeta\ngamma\n").ok().text();
    let closed = ledger_id(&w);

    // A second ledger, fenced by a reader's recovery while its writer runs.
    let mut writer = Proc::spawn({
        let mut c = folio();
        c.args(["--metadata", &sa.uri]).args(&args);
        c
    });
    writer.send(b"first\n");
    let fenced = ledger_id(&writer.wait_line(|l| l.starts_with("ledger ")));
    writer.wait_line(|l| l == "acked 0");
    let r = sa.run(&["ledger", "read", &fenced.to_string()], b"").ok();
    assert_eq!(r.stdout, b"0\tfirst\n");
    writer.send(b"second\n");
    assert!(!writer.wait().success(), "the fenced writer must fail");

    // On a running bookie the reading commands work too (they only read).
    let live = local(&["readjournal", "-datadir", &data_dir], b"")
        .ok()
        .text();
    assert!(live.contains(&format!("Lid={closed}, Eid=2,")), "{live}");

    let port = sa.port;
    sa.stop();

    // The stop checkpointed: the mark moved into the journal file written.
    let after = mark(&local(&["lastmark", "-datadir", &data_dir], b"").ok().text());
    assert!(after > before && after.1 > 32, "{after:?}");

    // listfilesondisc: every journal file, entry log and the index, under BookKeeper's
    // headings; one kind with its flag.
    let files = local(&["listfilesondisc", "-datadir", &data_dir], b"")
        .ok()
        .text();
    let journal_file = bookie_dir.join(format!("journal/current/{:016x}.txn", after.0));
    let mut want = format!(
        "--------- Printing the list of Journal Files ---------\n{}\n\n",
        journal_file.display()
    );
    want += "--------- Printing the list of EntryLog/Logger Files ---------\n";
    for log in entry_logs(&bookie_dir) {
        want += &format!("{}\n", log.display());
    }
    let index = bookie_dir.join("index/current/ledger-index.redb");
    want += &format!(
        "\n--------- Printing the list of Index Files ---------\n{}\n\n",
        index.display()
    );
    assert_eq!(files, want);
    let only_logs = local(&["listfilesondisc", "-datadir", &data_dir, "-log"], b"")
        .ok()
        .text();
    assert!(only_logs.starts_with("--------- Printing the list of EntryLog/Logger Files"));
    assert!(
        !only_logs.contains(".txn") && !only_logs.contains(".redb"),
        "{only_logs}"
    );

    let journal_id = after.0.to_string();
    let out = local(
        &["readjournal", "-datadir", &data_dir, "-msg", &journal_id],
        b"",
    )
    .ok()
    .text();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with(&format!("Journal Id = {journal_id} (")),
        "{out}"
    );
    let find = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not in {out}"))
    };
    let key = find(&format!("Lid={closed}, MASTER KEY, ByteOffset="));
    assert!(
        lines[key].ends_with("EntrySize=20 ---------"),
        "{}",
        lines[key]
    );
    for (e, data) in ["alpha", "beta", "gamma"].iter().enumerate() {
        let at = find(&format!("--------- Lid={closed}, Eid={e}, ByteOffset="));
        assert!(at > key, "the master key comes first: {out}");
        // Stored entry = 32-byte header + 4-byte crc32c digest + payload.
        assert!(
            lines[at].ends_with(&format!("EntrySize={} ---------", 36 + data.len())),
            "{}",
            lines[at]
        );
        assert_eq!(lines[at + 2], format!("Data: {data}"));
    }
    let first = find(&format!("Lid={fenced}, Eid=0,"));
    let fence = find(&format!("Lid={fenced}, FENCE, ByteOffset="));
    assert!(fence > first, "{out}");
    assert!(
        !out.contains(&format!("Lid={fenced}, Eid=1,")),
        "nothing after the fence: {out}"
    );
    // Offsets: the first record sits right after the 32-byte file header.
    assert!(lines[1].contains("ByteOffset=32,"), "{out}");
    assert!(
        lines
            .last()
            .unwrap()
            .contains("records, valid up to offset"),
        "{out}"
    );

    // The same file named by its path.
    let file = bookie_dir
        .join("journal/current")
        .join(format!("{:016x}.txn", after.0));
    let by_path = local(&["readjournal", "-msg", file.to_str().unwrap()], b"")
        .ok()
        .text();
    assert_eq!(by_path, out);

    // The entry log: the stop flushed every entry (4: three of one ledger, one of the other).
    let logs = entry_logs(&bookie_dir);
    assert_eq!(logs.len(), 1, "{logs:?}");
    let log = logs[0].to_str().unwrap();
    let out = local(
        &["readlog", "-ledgerid", &closed.to_string(), "-msg", log],
        b"",
    )
    .ok()
    .text();
    let records: Vec<&str> = out.lines().filter(|l| l.starts_with("---")).collect();
    assert_eq!(records.len(), 3, "{out}");
    for (e, data) in ["alpha", "beta", "gamma"].iter().enumerate() {
        assert!(
            records[e].starts_with(&format!("--------- Lid={closed}, Eid={e}, ByteOffset=")),
            "{out}"
        );
        assert!(out.contains(&format!("Data: {data}\n")), "{out}");
    }
    assert!(
        out.lines()
            .last()
            .unwrap()
            .contains("3 printed, valid up to offset"),
        "{out}"
    );
    assert!(out.contains("Entry log 0: 4 records, 3 printed"), "{out}");
    // By id (decimal, as BookKeeper's readlog takes it), one entry.
    let name = logs[0].file_stem().unwrap().to_str().unwrap();
    let log_id = u64::from_str_radix(name, 16).unwrap().to_string();
    let out = local(
        &[
            "readlog",
            "-datadir",
            &data_dir,
            "-ledgerid",
            &fenced.to_string(),
            "-entryid",
            "0",
            &log_id,
        ],
        b"",
    )
    .ok()
    .text();
    let records: Vec<&str> = out.lines().filter(|l| l.starts_with("---")).collect();
    assert_eq!(records.len(), 1, "{out}");
    assert!(
        records[0].contains(&format!("Lid={fenced}, Eid=0,")),
        "{out}"
    );

    // A second run: a new journal file, and the mark moves on at its stop.
    let sa = Standalone::start_on(dir.path(), 1, port);
    let w = sa.run(&args, b"delta\n").ok().text();
    let third = ledger_id(&w);
    sa.stop();
    let later = mark(&local(&["lastmark", "-datadir", &data_dir], b"").ok().text());
    assert!(later.0 > after.0, "{later:?} after {after:?}");
    let all = local(&["readjournal", "-datadir", &data_dir], b"")
        .ok()
        .text();
    assert!(all.contains(&format!("Lid={third}, Eid=0,")), "{all}");

    // Bad input: one line naming the cause.
    local(&["readjournal", "-datadir", &data_dir, "999"], b"")
        .fails_with("no journal file with id 999");
    local(&["readlog", "-datadir", &data_dir, "999"], b"").fails_with("no entry log with id 999");
    local(&["readlog", "-datadir", &data_dir], b"").fails_with("name the entry log");
    local(&["readjournal", "-datadir", &data_dir, "x1"], b"")
        .fails_with("invalid journal id \"x1\"");
    local(&["readjournal", "/nonexistent/0000000000000001.txn"], b"")
        .fails_with("cannot read /nonexistent/0000000000000001.txn");
    local(&["lastmark"], b"").fails_with("pass -datadir DIR or -conf FILE");
}

/// Names of the entries left in a directory.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn bookieformat_wipes_a_stopped_bookie_which_then_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let bookie_dir = dir.path().join("bookie-0");
    let data_dir = bookie_dir.to_str().unwrap().to_owned();
    let sa = Standalone::start(dir.path(), 1);
    let uri = sa.uri.clone();
    let bookie = sa.bookies[0].clone();
    let w = sa
        .run(
            &["ledger", "write", "-e", "1", "-w", "1", "-a", "1"],
            b"kept?\n",
        )
        .ok()
        .text();
    let id = ledger_id(&w).to_string();

    // A running bookie holds its directories: refused, nothing deleted.
    local(&["bookieformat", "-datadir", &data_dir, "-force"], b"")
        .fails_with("is in use by a running bookie");
    let port = sa.port;
    sa.stop();
    assert!(!entry_logs(&bookie_dir).is_empty());

    // Data exists: -nonInteractive without -force refuses; a "no" keeps it.
    local(
        &["bookieformat", "-datadir", &data_dir, "-nonInteractive"],
        b"",
    )
    .fails_with("has data");
    local(&["bookieformat", "-datadir", &data_dir], b"n\n").fails_with("not confirmed");
    assert!(!entry_logs(&bookie_dir).is_empty());

    let mut cmd = folio();
    cmd.args([
        "--metadata",
        &uri,
        "shell",
        "bookieformat",
        "-datadir",
        &data_dir,
        "-force",
        "-deleteCookie",
    ]);
    let out = run(cmd, b"").ok().text();
    assert!(
        out.contains(&format!("Deleted the cookie of bookie {bookie}")),
        "{out}"
    );
    assert!(out.contains("Formatted bookie data in"), "{out}");
    // Only the (unlocked, meaningless) lock files are left.
    assert_eq!(names(&bookie_dir.join("journal")), vec!["LOCK.journal"]);
    assert_eq!(names(&bookie_dir.join("ledgers")), vec!["LOCK"]);
    assert_eq!(names(&bookie_dir.join("index")), vec!["LOCK"]);
    let mut cmd = folio();
    cmd.args(["--metadata", &uri, "shell", "cookie_get", &bookie]);
    run(cmd, b"").fails_with(&format!("no cookie for bookie {bookie}"));

    // The bookie starts again as a new one: a new cookie, none of the old entries.
    let sa = Standalone::start_on(dir.path(), 1, port);
    let cookie = sa.run(&["shell", "cookie_get", &bookie], b"").ok().text();
    assert!(cookie.contains(&bookie), "{cookie}");
    let local_cookie = std::fs::read_to_string(bookie_dir.join("journal/current/VERSION")).unwrap();
    assert_eq!(local_cookie, cookie);
    let r = sa.run(&["ledger", "read", &id, "--no-recovery"], b"");
    assert!(
        !r.status.success() || r.stdout.is_empty(),
        "the formatted bookie still served {:?}",
        r.text()
    );
    assert!(!r.text().contains("kept?"));
    sa.stop();
}
