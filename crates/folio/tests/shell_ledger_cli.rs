//! `folio shell readledger | simpletest | deleteledger | bookiesanity | bookieinfo` against a real
//! `folio standalone` cluster, with BookKeeper's single-dash flags.

mod common;

use common::Standalone;

#[test]
fn shell_ledger_commands_against_a_standalone_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 3);

    let out = sa
        .run(
            &["shell", "simpletest", "-numEntries", "50", "-ensemble", "3"],
            b"",
        )
        .ok()
        .text();
    let id: i64 = out
        .lines()
        .find_map(|l| l.strip_prefix("Ledger ID: "))
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap();
    assert!(
        out.contains(&format!("Wrote 50 entries to ledger {id}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("Read 50 entries back from ledger {id}: all match")),
        "{out}"
    );
    // simpletest cleans up after itself.
    sa.run(&["ledger", "meta", &id.to_string()], b"")
        .fails_with(&format!("no such ledger {id}"));

    let w = sa.run(&["ledger", "write"], b"a\nbb\nccc\n").ok().text();
    let id: String = w
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("ledger ")
        .to_owned();
    let out = sa
        .run(
            &[
                "shell",
                "readledger",
                "-ledgerid",
                &id,
                "-firstentryid",
                "1",
                "-msg",
            ],
            b"",
        )
        .ok()
        .text();
    assert_eq!(
        out,
        format!(
            "--------- Lid={id}, Eid=1, EntrySize=2 ---------\nData: bb\n\
             --------- Lid={id}, Eid=2, EntrySize=3 ---------\nData: ccc\n"
        )
    );
    let out = sa
        .run(&["shell", "deleteledger", "-ledgerid", &id, "-force"], b"")
        .ok()
        .text();
    assert_eq!(out, format!("Deleted ledger {id}\n"));
    sa.run(&["shell", "readledger", "-ledgerid", &id], b"")
        .fails_with(&format!("no such ledger {id}"));
    sa.run(&["shell", "readledger", "-bogus", "1"], b"")
        .fails_with("unknown argument \"-bogus\"");

    let bookie = &sa.bookies[1];
    let out = sa
        .run(
            &["shell", "bookiesanity", "-bookie", bookie, "-entries", "20"],
            b"",
        )
        .ok()
        .text();
    assert_eq!(
        out,
        format!("Bookie sanity test succeeded (20 entries, bookie {bookie})\n")
    );
    // A bookie that is not there: one line naming it.
    let gone = format!("127.0.0.1:{}", common::free_port());
    sa.run(
        &["shell", "bookiesanity", "-bookie", &gone, "-timeout", "20"],
        b"",
    )
    .fails_with(&format!("bookie {gone} failed to add entry 0"));

    // bookieinfo: each bookie's space as it answers GetBookieInfo, BookKeeper's format;
    // the three share one host (and disk), which the totals count once.
    let out = sa.run(&["shell", "bookieinfo"], b"").ok().text();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    assert_eq!(lines[0], "Free disk space info:");
    let number = |field: &str| -> u64 {
        field
            .split(|c: char| !c.is_ascii_digit())
            .find(|d| !d.is_empty())
            .unwrap()
            .parse()
            .unwrap()
    };
    let mut totals = Vec::new();
    for bookie in &sa.bookies {
        let prefix = format!("{bookie}:\tFree: ");
        let line = lines[1..4]
            .iter()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no line for {bookie}: {out}"));
        let rest = &line[prefix.len()..];
        let (free, total) = rest.split_once("\tTotal: ").unwrap();
        let (free, total) = (number(free), number(total));
        assert!(total > 0 && free <= total, "{line}");
        totals.push(total);
    }
    let cluster_total = number(
        lines[5]
            .strip_prefix("Total disk capacity in the cluster:\t")
            .unwrap(),
    );
    assert!(totals.contains(&cluster_total), "{out}");
    assert!(
        lines[4].starts_with("Total free disk space in the cluster:\t"),
        "{out}"
    );

    // updateBookieInLedger refuses a running source bookie; a stopped id no ledger names
    // moves nothing.
    let src = &sa.bookies[0];
    sa.run(
        &[
            "shell",
            "updateBookieInLedger",
            "-srcBookie",
            src,
            "-destBookie",
            "10.0.0.9:3181",
        ],
        b"",
    )
    .fails_with(&format!("bookie {src} is registered"));
    let out = sa
        .run(
            &[
                "shell",
                "updateBookieInLedger",
                "-sb",
                "10.0.0.8:3181",
                "-db",
                src,
                "-s",
                "0",
            ],
            b"",
        )
        .ok()
        .text();
    assert_eq!(out, "Number of ledgers updated: 0\n");
    sa.run(&["shell", "updateBookieInLedger", "-srcBookie", src], b"")
        .fails_with("usage: updateBookieInLedger");
    sa.stop();
}
