//! TLS through the command line: three `folio bookie` processes configured with BookKeeper's
//! TLS keys (PEM files, client authentication, authorizedRoles), and `folio ledger` with the
//! global `--tls-ca`/`--tls-cert`/`--tls-key` flags (and their FOLIO_TLS_* variables).

#[path = "../../folio-client/tests/common/tls_certs.rs"]
mod certs;
mod common;

use std::path::Path;

use certs::Ca;
use common::{Proc, folio, run};

/// A `folio bookie` on loopback with TLS required, its certificate for 127.0.0.1.
fn start_bookie(root: &Path, i: usize, uri: &str, bookies: &Ca, clients_ca: &Path) -> Proc {
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
authorizedRoles = "app,ops"
"#,
        key.display(),
        chain.display(),
        clients_ca.display()
    );
    common::bookie_process(&dir, uri, &config)
}

#[test]
fn ledgers_are_written_and_read_over_mutual_tls_from_the_command_line() {
    let root = tempfile::tempdir().unwrap();
    let uri = format!("sqlite://{}/meta.db", root.path().display());
    let bookies_ca = Ca::new("bookies CA");
    let clients = Ca::new("clients CA");
    let bookies_ca_file = bookies_ca.write(root.path(), "bookies");
    let clients_ca_file = clients.write(root.path(), "clients");
    let _bookies: Vec<Proc> = (0..3)
        .map(|i| start_bookie(root.path(), i, &uri, &bookies_ca, &clients_ca_file))
        .collect();
    let (cert, key) = clients.client(Some("0:app")).write(root.path(), "app");

    // Flags on the command line.
    let mut write = folio();
    write
        .arg("--metadata")
        .arg(&uri)
        .arg("--tls-ca")
        .arg(&bookies_ca_file)
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
        .arg(&uri)
        .args(["ledger", "read", &id])
        .env("FOLIO_TLS_CA", &bookies_ca_file)
        .env("FOLIO_TLS_CERT", &cert)
        .env("FOLIO_TLS_KEY", &key);
    let text = run(read, b"").ok().text();
    assert_eq!(text, "0\talpha\n1\tbeta\n2\tgamma\n");

    // Without TLS the bookies refuse the client (EUA); with a certificate whose role is not
    // authorized too; each a clean one-line failure.
    let mut plain = folio();
    plain
        .arg("--metadata")
        .arg(&uri)
        .args(["ledger", "read", &id, "--no-recovery"]);
    let o = run(plain, b"");
    assert!(
        !o.status.success(),
        "a plaintext read succeeded: {}",
        o.text()
    );
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert!(o.stderr.contains("unauthorized access"), "{}", o.stderr);

    let (bad_cert, bad_key) = clients.client(Some("0:guest")).write(root.path(), "guest");
    let mut guest = folio();
    guest
        .arg("--metadata")
        .arg(&uri)
        .arg("--tls-ca")
        .arg(&bookies_ca_file)
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

    // A CA file that does not exist is named.
    let mut missing = folio();
    missing
        .arg("--metadata")
        .arg(&uri)
        .arg("--tls-ca")
        .arg(root.path().join("nope.pem"))
        .args(["ledger", "read", &id]);
    run(missing, b"").fails_with("nope.pem");
}
