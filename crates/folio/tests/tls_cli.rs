//! TLS through the command line: three `folio bookie` processes configured with BookKeeper's
//! TLS keys (PEM files, client authentication, authorizedRoles), and `folio ledger` with the
//! global `--tls-ca`/`--tls-cert`/`--tls-key`/`--tls-key-password-file` flags (and their
//! FOLIO_TLS_* variables); and
//! `folio autorecovery` healing a lost bookie over the same mutual TLS.

#[path = "../../folio-client/tests/common/tls_certs.rs"]
mod certs;
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use certs::Ca;
use common::{Proc, folio, run};

/// A cluster's directory and metadata URI, with a CA for the bookies' certificates and one
/// for the clients'.
struct Pki {
    root: tempfile::TempDir,
    uri: String,
    bookies_ca: Ca,
    clients: Ca,
    bookies_ca_file: std::path::PathBuf,
    clients_ca_file: std::path::PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let root = tempfile::tempdir().unwrap();
        let uri = format!("sqlite://{}/meta.db", root.path().display());
        let bookies_ca = Ca::new("bookies CA");
        let clients = Ca::new("clients CA");
        let bookies_ca_file = bookies_ca.write(root.path(), "bookies");
        let clients_ca_file = clients.write(root.path(), "clients");
        Pki {
            root,
            uri,
            bookies_ca,
            clients,
            bookies_ca_file,
            clients_ca_file,
        }
    }

    /// The directory, the metadata URI, the clients' CA and the bookies' CA file.
    fn parts(&self) -> (&Path, &str, &Ca, &Path) {
        (
            self.root.path(),
            &self.uri,
            &self.clients,
            &self.bookies_ca_file,
        )
    }

    /// `n` bookies requiring client certificates, with `extra` configuration lines.
    fn start_bookies(&self, n: usize, extra: &str) -> Vec<Proc> {
        (0..n)
            .map(|i| {
                start_bookie(
                    self.root.path(),
                    i,
                    &self.uri,
                    &self.bookies_ca,
                    &self.clients_ca_file,
                    extra,
                )
            })
            .collect()
    }
}

/// A `folio bookie` on loopback with TLS required, its certificate for 127.0.0.1.
fn start_bookie(
    root: &Path,
    i: usize,
    uri: &str,
    bookies: &Ca,
    clients_ca: &Path,
    extra: &str,
) -> Proc {
    let dir = root.join(format!("bookie{i}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (chain, key) = bookies.bookie().write(&dir, "bookie");
    let config = format!(
        r#"listen_address = "127.0.0.1"
advertisedAddress = "127.0.0.1"
disk_usage_threshold = 0.999
disk_usage_lwm_threshold = 0.998
tlsProviderFactoryClass = "org.apache.bookkeeper.tls.TLSContextFactory"
tlsKeyStoreType = "PEM"
tlsKeyStore = "{}"
tlsCertificatePath = "{}"
tlsTrustStoreType = "PEM"
tlsTrustStore = "{}"
tlsClientAuthentication = true
bookieAuthProviderFactoryClass = "org.apache.bookkeeper.tls.BookieAuthZFactory"
authorizedRoles = "app,ops,autorecovery"
{extra}
"#,
        key.display(),
        chain.display(),
        clients_ca.display()
    );
    common::bookie_process(&dir, uri, &config)
}

#[test]
fn ledgers_are_written_and_read_over_mutual_tls_from_the_command_line() {
    let pki = Pki::new();
    let _bookies = pki.start_bookies(3, "");
    let (root, uri, clients, bookies_ca_file) = pki.parts();
    let (cert, key) = clients.client(Some("0:app")).write(root, "app");

    // Flags on the command line.
    let mut write = folio();
    write
        .arg("--metadata")
        .arg(uri)
        .arg("--tls-ca")
        .arg(bookies_ca_file)
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .args(["ledger", "write", "-e", "3", "-w", "2", "-a", "2"]);
    let out = run(write, b"alpha\nbeta\ngamma\n").ok().text();
    assert!(out.contains("closed 2"), "{out}");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("ledger "))
        .expect("a ledger line")
        .to_string();

    // The same through the environment, after the subcommand.
    let mut read = folio();
    read.arg("--metadata")
        .arg(uri)
        .args(["ledger", "read", &id])
        .env("FOLIO_TLS_CA", bookies_ca_file)
        .env("FOLIO_TLS_CERT", &cert)
        .env("FOLIO_TLS_KEY", &key);
    let text = run(read, b"").ok().text();
    assert_eq!(text, "0\talpha\n1\tbeta\n2\tgamma\n");

    // BookKeeper's bookieinfo asks each bookie (GetBookieInfo) over the same TLS.
    let mut info = folio();
    info.arg("--metadata")
        .arg(uri)
        .args(["shell", "bookieinfo"])
        .env("FOLIO_TLS_CA", bookies_ca_file)
        .env("FOLIO_TLS_CERT", &cert)
        .env("FOLIO_TLS_KEY", &key);
    let o = run(info, b"").ok();
    let text = o.text();
    assert_eq!(text.matches("\tFree: ").count(), 3, "{text}");
    assert!(o.stderr.is_empty(), "{}", o.stderr);
    let mut plain_info = folio();
    plain_info
        .arg("--metadata")
        .arg(uri)
        .args(["shell", "bookieinfo"]);
    let o = run(plain_info, b"");
    assert!(!o.status.success(), "plaintext bookieinfo: {}", o.text());
    assert!(o.stderr.contains("unauthorized access"), "{}", o.stderr);

    // Without TLS the bookies refuse the client (EUA); with a certificate whose role is not
    // authorized too; each a clean one-line failure.
    let mut plain = folio();
    plain
        .arg("--metadata")
        .arg(uri)
        .args(["ledger", "read", &id, "--no-recovery"]);
    let o = run(plain, b"");
    assert!(
        !o.status.success(),
        "a plaintext read succeeded: {}",
        o.text()
    );
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert!(o.stderr.contains("unauthorized access"), "{}", o.stderr);

    let (bad_cert, bad_key) = clients.client(Some("0:guest")).write(root, "guest");
    let mut guest = folio();
    guest
        .arg("--metadata")
        .arg(uri)
        .arg("--tls-ca")
        .arg(bookies_ca_file)
        .arg("--tls-cert")
        .arg(&bad_cert)
        .arg("--tls-key")
        .arg(&bad_key)
        .args(["ledger", "read", &id, "--no-recovery"]);
    let o = run(guest, b"");
    assert!(
        !o.status.success(),
        "an unauthorized role read: {}",
        o.text()
    );
    assert!(o.stderr.contains("unauthorized access"), "{}", o.stderr);

    // An encrypted client key (PKCS#8) with its password file, as BookKeeper's
    // clientKeyStorePasswordPath; without the password file the command says what is missing.
    let app = clients.client(Some("0:app"));
    let (enc_cert, enc_key) = app.write(root, "app-encrypted");
    std::fs::write(&enc_key, app.encrypted_key_pem(b"app secret")).unwrap();
    let password = root.join("app.password");
    std::fs::write(&password, "app secret\n").unwrap();
    let encrypted = |with_password: bool| {
        let mut c = folio();
        c.arg("--metadata")
            .arg(uri)
            .args(["ledger", "read", &id, "--no-recovery"])
            .env("FOLIO_TLS_CA", bookies_ca_file)
            .env("FOLIO_TLS_CERT", &enc_cert)
            .env("FOLIO_TLS_KEY", &enc_key);
        if with_password {
            c.arg("--tls-key-password-file").arg(&password);
        }
        c
    };
    let text = run(encrypted(true), b"").ok().text();
    assert_eq!(text, "0\talpha\n1\tbeta\n2\tgamma\n");
    run(encrypted(false), b"").fails_with("--tls-key-password-file");

    // A CA file that does not exist is named.
    let mut missing = folio();
    missing
        .arg("--metadata")
        .arg(uri)
        .arg("--tls-ca")
        .arg(root.join("nope.pem"))
        .args(["ledger", "read", &id]);
    run(missing, b"").fails_with("nope.pem");
}

/// `--tls-*` flags for a client certificate of `ca` with role `role`.
fn tls_flags(root: &Path, bookies_ca: &Path, ca: &Ca, role: &str) -> Vec<String> {
    let (cert, key) = ca.client(Some(&format!("0:{role}"))).write(root, role);
    ["--tls-ca", &bookies_ca.display().to_string()]
        .into_iter()
        .map(str::to_string)
        .chain(["--tls-cert".into(), cert.display().to_string()])
        .chain(["--tls-key".into(), key.display().to_string()])
        .collect()
}

/// Autorecovery over mutual TLS: a lost bookie's replicas are copied (recovery adds and
/// reads, all over TLS with the autorecovery certificate's role) and every entry reads back.
#[test]
fn autorecovery_heals_a_lost_bookie_over_mutual_tls() {
    let pki = Pki::new();
    // A short session, so that the loss is noticed soon.
    let mut bookies = pki.start_bookies(4, "metadata_session_timeout_ms = 3000");
    let (root, uri, clients, bookies_ca_file) = pki.parts();
    let id_of = |p: &Proc| {
        p.seen
            .iter()
            .find_map(|l| l.strip_prefix("bookie ")?.split(' ').next())
            .expect("a listening line")
            .to_string()
    };
    let app = tls_flags(root, bookies_ca_file, clients, "app");
    let with = |flags: &[String], args: &[&str]| {
        let mut c = folio();
        c.arg("--metadata").arg(uri).args(flags).args(args);
        c
    };
    let input: String = (0..50).map(|i| format!("entry {i}\n")).collect();
    let out = run(
        with(&app, &["ledger", "write", "-e", "3", "-w", "3", "-a", "2"]),
        input.as_bytes(),
    )
    .ok()
    .text();
    assert!(out.contains("closed 49"), "{out}");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("ledger "))
        .expect("a ledger line")
        .to_string();
    let ensemble = || {
        run(with(&[], &["shell", "ledgermetadata", &id]), b"")
            .ok()
            .text()
    };

    let ar_flags = tls_flags(root, bookies_ca_file, clients, "autorecovery");
    let _autorecovery =
        common::Proc::spawn(with(&ar_flags, &["autorecovery", "--id", "127.0.0.1:1"]));
    let victim = bookies
        .iter()
        .position(|p| ensemble().contains(&id_of(p)))
        .expect("a bookie of the ensemble");
    let lost = id_of(&bookies[victim]);
    let mut p = bookies.remove(victim);
    let _ = p.child.kill();
    let _ = p.child.wait();

    let deadline = Instant::now() + common::TIMEOUT;
    loop {
        let queued = run(with(&[], &["shell", "listunderreplicated", "-c"]), b"")
            .ok()
            .text();
        if !ensemble().contains(&lost) && queued.trim() == "0" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not healed: {} still named or queued {queued:?}",
            lost
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let text = run(with(&app, &["ledger", "read", &id]), b"").ok().text();
    let want: String = (0..50).map(|i| format!("{i}\tentry {i}\n")).collect();
    assert_eq!(text, want);
}

/// `GET path` of a plain HTTP endpoint, as JSON.
fn get_json(addr: &str, path: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(common::TIMEOUT)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {response}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// `folio autorecovery --http-port`'s dashboard reads bookies whose admin endpoints are HTTPS,
/// trusting the CA of the global `--tls-ca`.
#[test]
fn autorecoverys_dashboard_reads_https_bookies_with_the_tls_ca() {
    let pki = Pki::new();
    let (root, uri, clients, bookies_ca_file) = pki.parts();
    let (chain, key) = pki.bookies_ca.bookie().write(root, "admin");
    let extra = format!(
        "http_port = 0\nhttp_tls_key_file = \"{}\"\nhttp_tls_certificate_file = \"{}\"",
        key.display(),
        chain.display()
    );
    let bookies = pki.start_bookies(2, &extra);
    let ids: Vec<String> = bookies
        .iter()
        .map(|p| {
            p.seen
                .iter()
                .find_map(|l| l.strip_prefix("bookie ")?.split(' ').next())
                .expect("a listening line")
                .to_string()
        })
        .collect();
    let mut cmd = folio();
    cmd.arg("--metadata")
        .arg(uri)
        .args(tls_flags(root, bookies_ca_file, clients, "autorecovery"))
        .args(["autorecovery", "--id", "127.0.0.1:1", "--http-port"])
        .arg(common::free_port().to_string());
    let mut ar = Proc::spawn(cmd);
    ar.wait_line(|l| l == "ready");
    let addr = ar.printed("http ");
    let c = get_json(&addr, "/ui/api/cluster");
    for id in &ids {
        let row = c["bookies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no {id} in {c}"));
        assert_eq!(row["facts"]["id"], id.as_str(), "{c}");
    }
    ar.terminate();
    assert!(ar.wait().success(), "{}", ar.stderr());
}
