//! `folio standalone` and `folio ledger ...` as a user runs them: the real binary, a
//! cluster of real bookies on free localhost ports with sqlite metadata in a temporary
//! directory, and the line formats of DESIGN.md section 4 checked byte for byte.

mod common;

use common::{Proc, Standalone, folio, free_port, run};

/// `ledger <id>` from a writer's output.
fn ledger_id(out: &str) -> i64 {
    out.lines()
        .find_map(|l| l.strip_prefix("ledger "))
        .unwrap_or_else(|| panic!("no ledger line in {out:?}"))
        .parse()
        .unwrap()
}

#[test]
fn standalone_serves_and_a_restart_finds_every_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 3);
    assert!(
        sa.uri.starts_with("sqlite:///") && sa.uri.ends_with("/metadata.db"),
        "{}",
        sa.uri
    );
    let want: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", sa.port + i))
        .collect();
    assert_eq!(sa.bookies, want);
    let listed = sa.run(&["shell", "listbookies"], b"").ok().text();
    for b in &want {
        assert!(listed.contains(b.as_str()), "{listed}");
    }

    let w = sa.run(&["ledger", "write"], b"alpha\nbeta\n").ok().text();
    let id = ledger_id(&w);
    assert_eq!(
        w,
        format!("ledger {id}\nacked 0\nacked 1\nclosed 1\n"),
        "writer output"
    );
    // A second ledger left open (its writer killed): recovery must find it after restart.
    let mut open_writer = Proc::spawn({
        let mut c = folio();
        c.args([
            "--metadata",
            &sa.uri,
            "ledger",
            "write",
            "-e",
            "2",
            "-w",
            "2",
            "-a",
            "2",
        ]);
        c
    });
    open_writer.send(b"gamma\n");
    let open_id: i64 = open_writer
        .wait_line(|l| l.starts_with("ledger "))
        .trim_start_matches("ledger ")
        .parse()
        .unwrap();
    open_writer.wait_line(|l| l == "acked 0");
    let _ = open_writer.child.kill();
    let _ = open_writer.child.wait();

    let port = sa.port;
    sa.stop();
    let sa = Standalone::start_on(dir.path(), 3, port);
    let r = sa.run(&["ledger", "read", &id.to_string()], b"").ok();
    assert_eq!(r.stdout, b"0\talpha\n1\tbeta\n");
    let r = sa.run(&["ledger", "read", &open_id.to_string()], b"").ok();
    assert_eq!(r.stdout, b"0\tgamma\n");
    let list = sa.run(&["ledger", "list"], b"").ok().text();
    assert_eq!(list, format!("{id}\n{open_id}\n"));
    sa.stop();
}

#[test]
fn write_then_read_round_trips_bytes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 3);

    // Raw lines, an empty one among them, and bytes that are not UTF-8.
    let input = b"one\n\n\xff\xfe not utf-8\nlast without newline";
    let w = sa.run(&["ledger", "write"], input).ok().text();
    let id = ledger_id(&w).to_string();
    assert!(w.ends_with("closed 3\n"), "{w}");
    let r = sa.run(&["ledger", "read", &id], b"").ok();
    assert_eq!(
        r.stdout,
        b"0\tone\n1\t\n2\t\xff\xfe not utf-8\n3\tlast without newline\n".to_vec()
    );
    let r = sa
        .run(
            &["ledger", "read", &id, "--from", "1", "--to", "2", "--hex"],
            b"",
        )
        .ok();
    assert_eq!(r.text(), "1\t\n2\tfffe206e6f74207574662d38\n");

    // Hex and base64 carry any byte, newlines included.
    let payloads: [&[u8]; 4] = [b"", b"\n", b"\x00\x01\x02\xff", b"line\r\nbreak"];
    for (flag, enc) in [
        ("--hex", hex as fn(&[u8]) -> String),
        ("--base64", base64 as fn(&[u8]) -> String),
    ] {
        let input: String = payloads.iter().map(|p| enc(p) + "\n").collect();
        let w = sa
            .run(&["ledger", "write", flag], input.as_bytes())
            .ok()
            .text();
        let id = ledger_id(&w).to_string();
        let r = sa.run(&["ledger", "read", &id, flag], b"").ok().text();
        let want: String = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{i}\t{}\n", enc(p)))
            .collect();
        assert_eq!(r, want, "{flag}");
    }

    // Metadata as JSON, then deletion.
    let meta = sa.run(&["ledger", "meta", &id], b"").ok().text();
    let v: serde_json::Value = serde_json::from_str(&meta).unwrap();
    assert_eq!(v["state"], "CLOSED");
    assert_eq!(v["lastEntryId"], 3);
    assert_eq!(v["ensembleSize"], 3);
    assert_eq!(v["writeQuorumSize"], 2);
    assert_eq!(v["digestType"], "CRC32C");
    assert_eq!(v["ensembles"]["0"].as_array().unwrap().len(), 3);
    let d = sa.run(&["ledger", "delete", &id], b"").ok().text();
    assert_eq!(d, format!("deleted {id}\n"));
    sa.run(&["ledger", "read", &id], b"")
        .fails_with(&format!("no such ledger {id}"));
    sa.stop();
}

fn hex(p: &[u8]) -> String {
    p.iter().map(|b| format!("{b:02x}")).collect()
}

/// Base64 written independently of the binary's encoder (bit by bit).
fn base64(p: &[u8]) -> String {
    let alphabet: Vec<char> = ('A'..='Z')
        .chain('a'..='z')
        .chain('0'..='9')
        .chain(['+', '/'])
        .collect();
    let bits: Vec<u8> = p
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    let mut out: String = bits
        .chunks(6)
        .map(|c| {
            let v = c.iter().fold(0usize, |a, &b| a << 1 | b as usize) << (6 - c.len());
            alphabet[v]
        })
        .collect();
    while !out.len().is_multiple_of(4) {
        out.push('=');
    }
    out
}

#[test]
fn tail_follows_a_writer_until_the_ledger_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 3);
    let mut writer = Proc::spawn({
        let mut c = folio();
        c.args(["--metadata", &sa.uri, "ledger", "write"]);
        c
    });
    let id = writer
        .wait_line(|l| l.starts_with("ledger "))
        .trim_start_matches("ledger ")
        .to_owned();
    let mut tail = Proc::spawn({
        let mut c = folio();
        c.args(["ledger", "tail", &id])
            .env("FOLIO_METADATA", &sa.uri);
        c
    });
    for i in 0..5 {
        writer.send(format!("entry {i}\n").as_bytes());
        writer.wait_line(|l| l == format!("acked {i}"));
        // The tail sees each entry while the ledger is still open.
        tail.wait_line(|l| l == format!("{i}\tentry {i}"));
    }
    assert!(tail.child.try_wait().unwrap().is_none(), "tail ended early");
    writer.close_stdin();
    assert!(writer.wait().success(), "{}", writer.stderr());
    assert_eq!(writer.seen.last().map(String::as_str), Some("closed 4"));
    let status = tail.wait();
    assert!(status.success(), "tail: {}", tail.stderr());
    let want: Vec<String> = (0..5).map(|i| format!("{i}\tentry {i}")).collect();
    assert_eq!(tail.seen, want);
    // Ctrl-C stops the cluster as cleanly as SIGTERM.
    sa.stop_with("INT");
}

#[test]
fn recovery_by_a_reader_fences_a_running_writer() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 3);
    let mut writer = Proc::spawn({
        let mut c = folio();
        c.args(["--metadata", &sa.uri, "ledger", "write"]);
        c
    });
    writer.send(b"first\nsecond\n");
    let id = writer
        .wait_line(|l| l.starts_with("ledger "))
        .trim_start_matches("ledger ")
        .to_owned();
    writer.wait_line(|l| l == "acked 1");

    // Reading with recovery fences the ledger and closes it at what was acknowledged.
    let r = sa.run(&["ledger", "read", &id], b"").ok();
    assert_eq!(r.stdout, b"0\tfirst\n1\tsecond\n");

    // The writer learns it is fenced (from the metadata, or from this append) and exits.
    writer.send(b"third\n");
    let status = writer.wait();
    assert!(!status.success(), "a fenced writer must fail");
    let err = writer.stderr();
    assert!(err.contains(&format!("ledger {id} is fenced")), "{err:?}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        !writer
            .seen
            .iter()
            .any(|l| l == "acked 2" || l.starts_with("closed")),
        "{:?}",
        writer.seen
    );
    // The recovered ledger stays as the reader found it.
    let meta = sa.run(&["ledger", "meta", &id], b"").ok().text();
    let v: serde_json::Value = serde_json::from_str(&meta).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["lastEntryId"].as_i64()),
        (Some("CLOSED"), Some(1))
    );
    sa.stop();
}

#[test]
fn bad_input_fails_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 3);

    sa.run(&["ledger", "read", "999999"], b"")
        .fails_with("no such ledger 999999");
    sa.run(&["ledger", "tail", "999999"], b"")
        .fails_with("no such ledger 999999");
    sa.run(&["ledger", "meta", "999999"], b"")
        .fails_with("no such ledger 999999");

    let w = sa
        .run(&["ledger", "write", "--password", "right"], b"secret\n")
        .ok()
        .text();
    let id = ledger_id(&w).to_string();
    sa.run(&["ledger", "read", &id, "--password", "wrong"], b"")
        .fails_with(&format!("unauthorized access to ledger {id}"));
    let r = sa
        .run(&["ledger", "read", &id, "--password", "right"], b"")
        .ok();
    assert_eq!(r.stdout, b"0\tsecret\n");

    sa.run(
        &["ledger", "write", "-e", "4", "-w", "2", "-a", "2"],
        b"x\n",
    )
    .fails_with("not enough bookies: need 4, have 3");
    sa.run(&["ledger", "write", "--hex"], b"abc\n")
        .fails_with("invalid hex payload");

    let mut cmd = folio();
    cmd.args(["ledger", "list", "--metadata", "bogus://nowhere"]);
    run(cmd, b"").fails_with("invalid metadata URI");

    let missing = dir.path().join("no-such-dir/metadata.db");
    let mut cmd = folio();
    cmd.args(["ledger", "list", "--metadata"])
        .arg(format!("sqlite://{}", missing.display()));
    run(cmd, b"").fails_with("unreachable");

    let mut cmd = folio();
    cmd.args(["ledger", "list"]);
    run(cmd, b"").fails_with("no metadata service given");

    // Nothing listens there: the ZooKeeper driver gives up and says so.
    let mut cmd = folio();
    cmd.args(["ledger", "read", "0", "--metadata"])
        .arg(format!("zk://127.0.0.1:{}/ledgers", free_port()));
    run(cmd, b"").fails_with("is unreachable");

    // A port already taken: the standalone names it and stops the bookies it started.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let other = tempfile::tempdir().unwrap();
    let mut cmd = folio();
    cmd.arg("standalone")
        .arg("--data-dir")
        .arg(other.path())
        .args(["--bookies", "1", "--port", &port.to_string()])
        .args(["--http-port", &free_port().to_string()]);
    let out = run(cmd, b"");
    out.fails_with(&format!("cannot listen on 127.0.0.1:{port}"));
    assert!(!out.text().contains("ready"), "{}", out.text());
    sa.stop();
}

/// `--rack-mapping-file` makes every client of a command rack-aware: with three of five
/// bookies on one rack and the other two on racks of their own, every E3/Qw3 ledger takes
/// both lone bookies (random placement takes both in 3 of 10 ensembles); a file with a bad
/// line fails the command, naming the file and the line.
#[test]
fn a_rack_mapping_file_spreads_ensembles_over_racks() {
    let dir = tempfile::tempdir().unwrap();
    let sa = Standalone::start(dir.path(), 5);
    let map = dir.path().join("racks.txt");
    let mut text = String::from("# bookie rack\n");
    for (i, b) in sa.bookies.iter().enumerate() {
        let rack = match i {
            3 => "/dc/rack-2",
            4 => "/dc/rack-3",
            _ => "/dc/rack-1",
        };
        text.push_str(&format!("{b} {rack}\n"));
    }
    std::fs::write(&map, text).unwrap();
    let lone = [&sa.bookies[3], &sa.bookies[4]];
    let ensemble_of = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["-e", "3", "-w", "3", "-a", "2"];
        all.extend_from_slice(args);
        let (_, meta) = sa.write_ledger(&all, b"x\n");
        let ensembles = meta["ensembles"].as_object().expect("ensembles").clone();
        let first = ensembles.values().next().expect("one ensemble").clone();
        first
            .as_array()
            .expect("an array")
            .iter()
            .map(|b| b.as_str().expect("a bookie id").to_owned())
            .collect()
    };
    let map_arg = map.to_str().unwrap();
    for _ in 0..6 {
        let e = ensemble_of(&["--rack-mapping-file", map_arg]);
        assert!(
            lone.iter().all(|b| e.contains(b)),
            "rack-aware ensemble {e:?} lacks one of the lone racks' bookies {lone:?}"
        );
    }
    // Without the flag placement is random: some of 12 ensembles lack one of them (all 12
    // having both by chance: 0.3^12, about 5 in 10 million).
    let random = (0..12)
        .filter(|_| {
            let e = ensemble_of(&[]);
            !lone.iter().all(|b| e.contains(b))
        })
        .count();
    assert!(random > 0, "12 random ensembles all took both lone bookies");

    std::fs::write(&map, format!("{} not-a-rack\n", sa.bookies[0])).unwrap();
    sa.run(&["ledger", "write", "--rack-mapping-file", map_arg], b"x\n")
        .fails_with("line 1");
    sa.stop();
}
