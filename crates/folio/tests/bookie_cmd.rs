//! `folio bookie` as a real process: starts on sqlite:// metadata, serves a v2 client, stops
//! cleanly on SIGTERM, and serves the same entry after a restart on the same directories.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::BytesMut;
use folio_proto::{FrameDecoder, Status, v2};

struct Bookie {
    child: Child,
    addr: String,
    lines: std::sync::mpsc::Receiver<String>,
}

/// A failed assertion must not leave the process running after the test.
impl Drop for Bookie {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Appended to every test bookie's config: a full host disk must never fail a test.
const ROOMY: &str = "disk_usage_threshold = 0.999\ndisk_usage_lwm_threshold = 0.998\n";

fn start(dir: &std::path::Path) -> Bookie {
    let config = dir.join("bookie.toml");
    let text = std::fs::read_to_string(&config).unwrap_or_default();
    if !text.contains("disk_usage_threshold") {
        std::fs::write(&config, format!("{text}{ROOMY}")).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .arg("--metadata")
        .arg(format!("sqlite://{}/meta.db", dir.display()))
        .args(["bookie", "--port", "0", "--config"])
        .arg(dir.join("bookie.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn folio");
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut addr = None;
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(120))
            .expect("folio bookie never said ready");
        if let Some(rest) = line.strip_prefix("bookie ") {
            let port = rest.rsplit(':').next().unwrap().to_string();
            addr = Some(format!("127.0.0.1:{port}"));
        }
        if line == "ready" {
            break;
        }
    }
    Bookie {
        child,
        addr: addr.expect("address line"),
        lines,
    }
}

fn stop(mut b: Bookie) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(b.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let exit = b.child.wait().unwrap();
    assert!(exit.success(), "folio bookie exited with {exit}");
    // Everything it printed: the reader thread ends at EOF, now that the process exited.
    let said: Vec<String> = b.lines.iter().collect();
    assert!(said.iter().any(|l| l == "stopped"), "{said:?}");
}

fn call(addr: &str, req: v2::Request) -> v2::Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut b = BytesMut::new();
    req.encode_frame(&mut b);
    s.write_all(&b).unwrap();
    let mut d = FrameDecoder::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(frame) = d.next_frame().unwrap() {
            return v2::decode_response(frame).unwrap();
        }
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed");
        d.feed(&buf[..n]);
    }
}

#[test]
fn bookie_serves_stops_on_sigterm_and_restarts_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    // A fixed bookie id, so the cookie matches across restarts on random ports.
    std::fs::write(
        dir.path().join("bookie.toml"),
        "bookieId = \"cli-test:3181\"\n",
    )
    .unwrap();
    let key = folio_proto::master_key(b"pwd");
    let entry = folio_proto::DigestManager::new(5, folio_proto::DigestType::Crc32, b"pwd")
        .compute(0, -1, 5, b"hello");
    let b = start(dir.path());
    let add = v2::Request::Add(v2::AddRequest {
        version: 2,
        flags: v2::Flags::NONE,
        master_key: key,
        ledger_id: 5,
        entry_id: 0,
        entry: entry.clone(),
    });
    match call(&b.addr, add) {
        v2::Response::Add(a) => assert_eq!(a.status, Status::Ok),
        other => panic!("{other:?}"),
    }
    stop(b);

    let b = start(dir.path());
    let read = v2::Request::Read(v2::ReadRequest {
        version: 2,
        flags: v2::Flags::NONE,
        ledger_id: 5,
        entry_id: 0,
        master_key: None,
    });
    match call(&b.addr, read) {
        v2::Response::Read(r) => {
            assert_eq!(r.status, Status::Ok);
            assert_eq!(r.body, entry);
        }
        other => panic!("{other:?}"),
    }
    stop(b);
}

#[test]
fn missing_metadata_is_a_one_line_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["bookie", "--data-dir", "/nonexistent-folio-dir"])
        .env_remove("FOLIO_METADATA")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--metadata"), "{err}");
}

#[test]
fn print_default_config_prints_a_parseable_config() {
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["bookie", "--print-default-config"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let parsed =
        folio_bookie::config::BookieConfig::from_toml(&text, std::path::Path::new("stdout"))
            .unwrap();
    assert_eq!(parsed, folio_bookie::config::BookieConfig::default());
}

/// A bookie killed (SIGKILL) and started again at once finds its previous process's
/// registration, which the sqlite session keeps until its lease runs out: the new process
/// waits for it to expire (as BookKeeper does) instead of exiting with "already exists",
/// then serves the acknowledged entry.
#[test]
fn a_bookie_killed_and_restarted_at_once_waits_for_its_old_registration() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bookie.toml"),
        "bookieId = \"cli-kill:3181\"\nmetadata_session_timeout_ms = 3000\n",
    )
    .unwrap();
    let key = folio_proto::master_key(b"pwd");
    let entry = folio_proto::DigestManager::new(6, folio_proto::DigestType::Crc32, b"pwd")
        .compute(0, -1, 5, b"kept!");
    let mut b = start(dir.path());
    let add = v2::Request::Add(v2::AddRequest {
        version: 2,
        flags: v2::Flags::NONE,
        master_key: key,
        ledger_id: 6,
        entry_id: 0,
        entry: entry.clone(),
    });
    match call(&b.addr, add) {
        v2::Response::Add(a) => assert_eq!(a.status, Status::Ok),
        other => panic!("{other:?}"),
    }
    b.child.kill().unwrap();
    b.child.wait().unwrap();

    let b = start(dir.path());
    let read = v2::Request::Read(v2::ReadRequest {
        version: 2,
        flags: v2::Flags::NONE,
        ledger_id: 6,
        entry_id: 0,
        master_key: None,
    });
    match call(&b.addr, read) {
        v2::Response::Read(r) => {
            assert_eq!(r.status, Status::Ok);
            assert_eq!(r.body, entry);
        }
        other => panic!("{other:?}"),
    }
    stop(b);
}

#[test]
fn a_bookie_with_auto_recovery_daemon_enabled_stands_as_auditor() {
    let dir = tempfile::tempdir().unwrap();
    // BookKeeper's key names, as in a bk_server.conf carried over.
    std::fs::write(
        dir.path().join("bookie.toml"),
        "bookieId = \"cli-ar:3181\"\nautoRecoveryDaemonEnabled = true\nlostBookieRecoveryDelay = 7\n",
    )
    .unwrap();
    let b = start(dir.path());
    let shell = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_folio"))
            .arg("--metadata")
            .arg(format!("sqlite://{}/meta.db", dir.path().display()))
            .arg("shell")
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if shell(&["whoisauditor"]).trim() == "Auditor: cli-ar:3181" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the bookie was never elected Auditor"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The Auditor wrote the configured delay, since the store had none.
    assert_eq!(
        shell(&["lostbookierecoverydelay", "-get"]).trim(),
        "LostBookieRecoveryDelay value: 7"
    );
    stop(b);
}
