//! `folio shell readledger | simpletest | deleteledger | bookiesanity` against a real
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
    sa.stop();
}
