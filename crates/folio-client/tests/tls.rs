//! TLS between the Folio client and Folio bookies over real loopback sockets, with
//! certificates made here: StartTLS and the handshake, hostname verification, refusals that
//! name the certificate problem, certificate rotation without a restart, mutual TLS with
//! roles, and connections that misbehave during StartTLS while others keep working.

#[path = "common/tls_certs.rs"]
mod certs;
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use certs::{Ca, Leaf, LeafSpec};
use common::{PATIENCE, patient, test_config};
use folio_bookie::config::BookieConfig;
use folio_bookie::memory::MemoryStorage;
use folio_bookie::server::{BookieServer, ServerConfig, ServerHandle};
use folio_bookie::tls::{ServerTls, TlsSettings};
use folio_bookie::{Processor, ProcessorConfig};
use folio_client::conn::{Bookies, RpcError, TcpConnector, req};
use folio_client::{Client, ClientCertFiles, ClientConfig, ClientTls, CreateOptions, OpenOptions};
use folio_metadata::mem::{MemCluster, unique_name};
use folio_metadata::{BookieMode, BookieRegistration, BookieServiceInfo, MetadataStore};
use folio_proto::pb::{self, OperationType, StatusCode};
use folio_proto::{FrameDecoder, Status, v3};
use folio_types::BookieId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The TLS part of a bookie's configuration, over files in `dir`.
struct BookieTls {
    chain: PathBuf,
    key: PathBuf,
    trust: Option<PathBuf>,
    client_auth: bool,
    authorized_roles: Vec<String>,
    write_roles: Vec<String>,
    refresh_secs: u64,
    start_tls_timeout_secs: u64,
}

impl BookieTls {
    fn new(dir: &Path, leaf: &Leaf) -> BookieTls {
        let (chain, key) = leaf.write(dir, "bookie");
        BookieTls {
            chain,
            key,
            trust: None,
            client_auth: false,
            authorized_roles: Vec::new(),
            write_roles: Vec::new(),
            refresh_secs: 0,
            start_tls_timeout_secs: 10,
        }
    }

    fn config(&self) -> BookieConfig {
        BookieConfig {
            tls_provider_factory_class: Some("org.apache.bookkeeper.tls.TLSContextFactory".into()),
            tls_key_store_type: Some("PEM".into()),
            tls_key_store: Some(self.key.clone()),
            tls_certificate_path: Some(self.chain.clone()),
            tls_trust_store_type: Some("PEM".into()),
            tls_trust_store: self.trust.clone(),
            tls_client_authentication: self.client_auth,
            tls_cert_files_refresh_duration_seconds: self.refresh_secs,
            start_tls_timeout_secs: self.start_tls_timeout_secs,
            authorized_roles: self.authorized_roles.clone(),
            authorized_write_roles: self.write_roles.clone(),
            ..BookieConfig::default()
        }
    }

    fn load(&self) -> Arc<ServerTls> {
        let settings = TlsSettings::from_config(&self.config())
            .expect("valid TLS settings")
            .expect("TLS on");
        Arc::new(ServerTls::load(settings).expect("load TLS files"))
    }
}

struct TlsBookie {
    id: BookieId,
    server: Option<ServerHandle>,
    _registration: Box<dyn BookieRegistration>,
}

impl Drop for TlsBookie {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            tokio::spawn(s.shutdown());
        }
    }
}

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

async fn metadata() -> Arc<dyn MetadataStore> {
    init_logs();
    let m: Arc<dyn MetadataStore> = Arc::new(MemCluster::new(unique_name("tls-test")).connect());
    m.init_cluster().await.expect("init cluster");
    m
}

/// A bookie (in-memory storage) with `tls`, registered as `<host>:<port>`.
async fn start_bookie(
    metadata: &Arc<dyn MetadataStore>,
    tls: Arc<ServerTls>,
    host: &str,
) -> TlsBookie {
    let processor = Processor::new(Arc::new(MemoryStorage::new()), ProcessorConfig::default());
    let server = BookieServer::bind(
        "127.0.0.1:0",
        processor,
        ServerConfig {
            tls: Some(tls),
            ..ServerConfig::default()
        },
    )
    .await
    .expect("bind")
    .start();
    let id = BookieId::new(format!("{host}:{}", server.local_addr().port())).unwrap();
    let registration = metadata
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .expect("register");
    TlsBookie {
        id,
        server: Some(server),
        _registration: registration,
    }
}

fn client_tls(ca: &Path, cert: Option<(&Path, &Path)>) -> ClientTls {
    ClientTls::from_pem_files(ca, cert.map(|(c, k)| ClientCertFiles::new(c, k)))
        .expect("client TLS files")
}

fn tls_config(tls: ClientTls) -> ClientConfig {
    ClientConfig {
        tls: Some(tls),
        ..test_config()
    }
}

/// One request on a fresh connection pool (no backoff left from earlier attempts).
async fn one_call(
    config: ClientConfig,
    bookie: &BookieId,
    request: pb::Request,
) -> Result<pb::Response, RpcError> {
    let bookies = Bookies::new(Arc::new(TcpConnector), Arc::new(config));
    patient(bookies.call(bookie, request, Duration::from_secs(30))).await
}

fn unreachable_reason(r: Result<pb::Response, RpcError>) -> String {
    match r {
        Err(RpcError::Unreachable(reason)) => {
            eprintln!("refused: {reason}");
            reason
        }
        other => panic!("expected the connection to be refused, got {other:?}"),
    }
}

async fn write_and_read_back(client: &Client, entries: usize) {
    let writer =
        patient(client.create_ledger(CreateOptions::default().quorum(3, 2, 2).password("pw")))
            .await
            .expect("create a ledger over TLS");
    let payloads: Vec<Bytes> = (0..entries)
        .map(|i| Bytes::from(format!("tls entry {i} ").repeat(1 + i % 7)))
        .collect();
    let acks: Vec<_> = payloads.iter().map(|p| writer.append(p.clone())).collect();
    for ack in acks {
        patient(ack).await.expect("append over TLS");
    }
    patient(writer.close()).await.expect("close");
    let reader = patient(client.open_ledger(writer.id(), b"pw", OpenOptions::no_recovery()))
        .await
        .expect("open");
    let read = patient(reader.read(0, entries as i64 - 1))
        .await
        .expect("read over TLS");
    let got: Vec<Bytes> = read.into_iter().map(|e| e.payload).collect();
    assert_eq!(got, payloads);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_writes_and_reads_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("bookies CA");
    let ca_file = ca.write(dir.path(), "ca");
    let md = metadata().await;
    let mut bookies = Vec::new();
    for i in 0..3 {
        let sub = dir.path().join(format!("b{i}"));
        std::fs::create_dir(&sub).unwrap();
        bookies
            .push(start_bookie(&md, BookieTls::new(&sub, &ca.bookie()).load(), "127.0.0.1").await);
    }
    let client = Client::connect(md.clone(), tls_config(client_tls(&ca_file, None)))
        .await
        .unwrap();
    write_and_read_back(&client, 50).await;

    // The same bookies, asked for StartTLS by hand, really answer EOK (so TLS was used, not
    // skipped): and a plaintext client still works, since client authentication is off.
    let mut raw = TcpStream::connect(bookies[0].id.as_str()).await.unwrap();
    let answer = raw_call(&mut raw, &start_tls_request(5))
        .await
        .expect("an answer");
    assert_eq!(answer.status, StatusCode::Eok as i32);
    assert!(answer.start_tls_response.is_some());
    let plain = one_call(test_config(), &bookies[0].id, req::read_lac(99)).await;
    assert_eq!(plain.unwrap_err(), RpcError::Status(Status::NoLedger));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("bookies CA");
    let other = Ca::new("someone else");
    let md = metadata().await;
    let bookie = start_bookie(
        &md,
        BookieTls::new(dir.path(), &ca.bookie()).load(),
        "127.0.0.1",
    )
    .await;
    let wrong = other.write(dir.path(), "other");
    let reason = unreachable_reason(
        one_call(
            tls_config(client_tls(&wrong, None)),
            &bookie.id,
            req::read_lac(1),
        )
        .await,
    );
    assert!(reason.contains(bookie.id.as_str()), "{reason}");
    assert!(reason.contains("unknown CA"), "{reason}");

    // The right CA works against the same bookie.
    let ok_ca = ca.write(dir.path(), "ca");
    let r = one_call(
        tls_config(client_tls(&ok_ca, None)),
        &bookie.id,
        req::read_lac(1),
    )
    .await;
    assert_eq!(r.unwrap_err(), RpcError::Status(Status::NoLedger));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("bookies CA");
    let expired = ca.issue(LeafSpec {
        names: &["127.0.0.1"],
        expired: true,
        ..Default::default()
    });
    let md = metadata().await;
    let bookie = start_bookie(
        &md,
        BookieTls::new(dir.path(), &expired).load(),
        "127.0.0.1",
    )
    .await;
    let ca_file = ca.write(dir.path(), "ca");
    let reason = unreachable_reason(
        one_call(
            tls_config(client_tls(&ca_file, None)),
            &bookie.id,
            req::read_lac(1),
        )
        .await,
    );
    assert!(reason.contains("expired"), "{reason}");
    assert!(reason.contains(bookie.id.as_str()), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_host_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("bookies CA");
    let elsewhere = ca.issue(LeafSpec {
        names: &["other.example", "10.9.9.9"],
        ..Default::default()
    });
    let md = metadata().await;
    let ca_file = ca.write(dir.path(), "ca");
    // Both an IP-address id and a host-name id are checked against the certificate.
    for host in ["127.0.0.1", "localhost"] {
        let bookie = start_bookie(&md, BookieTls::new(dir.path(), &elsewhere).load(), host).await;
        let reason = unreachable_reason(
            one_call(
                tls_config(client_tls(&ca_file, None)),
                &bookie.id,
                req::read_lac(1),
            )
            .await,
        );
        assert!(reason.contains("wrong host"), "{reason}");
        assert!(
            reason.contains(&format!("not valid for {host}")),
            "{reason}"
        );
    }
    // A certificate naming localhost passes for the id localhost:port.
    let named = ca.issue(LeafSpec {
        names: &["localhost"],
        ..Default::default()
    });
    let bookie = start_bookie(&md, BookieTls::new(dir.path(), &named).load(), "localhost").await;
    let r = one_call(
        tls_config(client_tls(&ca_file, None)),
        &bookie.id,
        req::read_lac(1),
    )
    .await;
    assert_eq!(r.unwrap_err(), RpcError::Status(Status::NoLedger));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificate_files_are_used_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let old_ca = Ca::new("old CA");
    let new_ca = Ca::new("new CA");
    let new_ca_file = new_ca.write(dir.path(), "new");
    let md = metadata().await;
    let mut tls = BookieTls::new(dir.path(), &old_ca.bookie());
    tls.refresh_secs = 1;
    let bookie = start_bookie(&md, tls.load(), "127.0.0.1").await;
    let reason = unreachable_reason(
        one_call(
            tls_config(client_tls(&new_ca_file, None)),
            &bookie.id,
            req::read_lac(1),
        )
        .await,
    );
    assert!(reason.contains("unknown CA"), "{reason}");

    // A half-written rotation (garbage in the chain file) is not used: the old
    // certificate stays in force...
    std::fs::write(&tls.chain, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let old_ca_file = old_ca.write(dir.path(), "old");
    let r = one_call(
        tls_config(client_tls(&old_ca_file, None)),
        &bookie.id,
        req::read_lac(1),
    )
    .await;
    assert_eq!(
        r.unwrap_err(),
        RpcError::Status(Status::NoLedger),
        "old certificate still served"
    );

    // ...and the complete new files are, once the refresh interval has passed.
    new_ca.bookie().write(dir.path(), "bookie");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let r = one_call(
            tls_config(client_tls(&new_ca_file, None)),
            &bookie.id,
            req::read_lac(1),
        )
        .await;
        match r {
            Err(RpcError::Status(Status::NoLedger)) => break,
            // Unknown CA until the reload; a check between the two files' writes may also
            // pair the new chain with the old key for a second.
            Err(RpcError::Unreachable(_)) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the new certificate was never used"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!("{other:?}"),
        }
    }
    // The old CA no longer verifies the bookie.
    let reason = unreachable_reason(
        one_call(
            tls_config(client_tls(&old_ca_file, None)),
            &bookie.id,
            req::read_lac(1),
        )
        .await,
    );
    assert!(reason.contains("unknown CA"), "{reason}");
}

/// A bookie requiring client certificates from `clients`, roles as given.
async fn mutual_tls_bookie(
    dir: &Path,
    md: &Arc<dyn MetadataStore>,
    bookies_ca: &Ca,
    clients: &Ca,
    authorized_roles: &[&str],
    write_roles: &[&str],
) -> TlsBookie {
    let mut tls = BookieTls::new(dir, &bookies_ca.bookie());
    tls.trust = Some(clients.write(dir, "clients"));
    tls.client_auth = true;
    tls.authorized_roles = authorized_roles.iter().map(|s| s.to_string()).collect();
    tls.write_roles = write_roles.iter().map(|s| s.to_string()).collect();
    start_bookie(md, tls.load(), "127.0.0.1").await
}

/// A well-formed add of `entry` (digest and all) to `ledger`.
fn add_request(ledger: i64, entry: i64) -> pb::Request {
    let dm = folio_proto::DigestManager::new(ledger, folio_proto::DigestType::Crc32c, b"pw");
    let payload = vec![b'x'; 100];
    let body = dm.compute(entry, entry - 1, (entry + 1) * 100, &payload);
    req::add(ledger, entry, &folio_proto::master_key(b"pw"), body, false)
}

fn start_tls_request(txn: u64) -> pb::Request {
    pb::Request {
        header: v3::request_header(OperationType::StartTls, txn, None),
        start_tls_request: Some(pb::StartTlsRequest {}),
        ..Default::default()
    }
}

/// Sends one v3 request on a raw socket and reads one response; `None` if the bookie
/// closed the connection instead.
async fn raw_call(s: &mut TcpStream, request: &pb::Request) -> Option<pb::Response> {
    let mut out = BytesMut::new();
    v3::encode_request_frame(request, &mut out);
    s.write_all(&out).await.ok()?;
    let mut decoder = FrameDecoder::new();
    loop {
        if let Some(f) = decoder.next_frame().unwrap() {
            return Some(v3::decode_response(f).unwrap());
        }
        match patient(s.read_buf(&mut decoder.read_buf())).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Whether the bookie closes `s` (reads reach end of stream) within the test's patience.
async fn closed_by_bookie(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(PATIENCE, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_authentication_refuses_plaintext_and_certificateless_clients() {
    let dir = tempfile::tempdir().unwrap();
    let bookies_ca = Ca::new("bookies CA");
    let clients = Ca::new("clients CA");
    let md = metadata().await;
    let bookie = mutual_tls_bookie(dir.path(), &md, &bookies_ca, &clients, &[], &[]).await;
    let ca_file = bookies_ca.write(dir.path(), "bookies");

    // Plaintext: the first request gets EUA and the connection closes.
    let mut raw = TcpStream::connect(bookie.id.as_str()).await.unwrap();
    let answer = raw_call(&mut raw, &req::read_lac(7))
        .await
        .expect("an EUA answer");
    assert_eq!(answer.status, StatusCode::Eua as i32);
    assert!(
        closed_by_bookie(&mut raw).await,
        "the plaintext connection stays open"
    );
    let plain = one_call(test_config(), &bookie.id, req::read_lac(7)).await;
    assert_eq!(plain.unwrap_err(), RpcError::Status(Status::Unauthorized));

    // TLS without a client certificate: the handshake is refused.
    // (With TLS 1.3 the client learns it only when its first request meets the bookie's alert.)
    let r = one_call(
        tls_config(client_tls(&ca_file, None)),
        &bookie.id,
        req::read_lac(7),
    )
    .await;
    let reason = unreachable_reason(r);
    assert!(reason.contains(bookie.id.as_str()), "{reason}");
    assert!(
        reason.contains("refused this client's certificate"),
        "{reason}"
    );

    // A client certificate from another CA: refused too.
    let stranger = Ca::new("stranger")
        .client(None)
        .write(dir.path(), "stranger");
    let r = one_call(
        tls_config(client_tls(&ca_file, Some((&stranger.0, &stranger.1)))),
        &bookie.id,
        req::read_lac(7),
    )
    .await;
    assert!(matches!(r, Err(RpcError::Unreachable(_))), "{r:?}");

    // A certificate from the trust store gets in; ledgers are written and read with it.
    let (cert, key) = clients.client(None).write(dir.path(), "client");
    let tls = client_tls(&ca_file, Some((&cert, &key)));
    let r = one_call(tls_config(tls.clone()), &bookie.id, req::read_lac(7)).await;
    assert_eq!(r.unwrap_err(), RpcError::Status(Status::NoLedger));
    let sub: Vec<_> = (0..2)
        .map(|i| {
            let d = dir.path().join(format!("more{i}"));
            std::fs::create_dir(&d).unwrap();
            d
        })
        .collect();
    let _more = [
        mutual_tls_bookie(&sub[0], &md, &bookies_ca, &clients, &[], &[]).await,
        mutual_tls_bookie(&sub[1], &md, &bookies_ca, &clients, &[], &[]).await,
    ];
    let client = Client::connect(md.clone(), tls_config(tls)).await.unwrap();
    write_and_read_back(&client, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_from_the_certificate_ou_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let bookies_ca = Ca::new("bookies CA");
    let clients = Ca::new("clients CA");
    let md = metadata().await;
    // authorizedRoles admits readers and writers; only writers may write.
    let bookie = mutual_tls_bookie(
        dir.path(),
        &md,
        &bookies_ca,
        &clients,
        &["reader", "writer"],
        &["writer"],
    )
    .await;
    let ca_file = bookies_ca.write(dir.path(), "bookies");
    let config_for = |ou: Option<&str>, stem: &str| {
        let (cert, key) = clients.client(ou).write(dir.path(), stem);
        tls_config(client_tls(&ca_file, Some((&cert, &key))))
    };
    let add = || add_request(3, 0);

    // A role outside authorizedRoles: EUA, whatever the request, and the connection closes.
    let bookies = Bookies::new(
        Arc::new(TcpConnector),
        Arc::new(config_for(Some("0:intruder;1:prod"), "intruder")),
    );
    let r = patient(bookies.call(&bookie.id, req::read_lac(3), Duration::from_secs(30))).await;
    assert_eq!(r.unwrap_err(), RpcError::Status(Status::Unauthorized));
    // No OU at all: refused too.
    let r = one_call(config_for(None, "no-ou"), &bookie.id, req::read_lac(3)).await;
    assert_eq!(r.unwrap_err(), RpcError::Status(Status::Unauthorized));

    // A reader: reads pass, an add gets EUA, and the connection stays usable.
    let bookies = Bookies::new(
        Arc::new(TcpConnector),
        Arc::new(config_for(Some("0:reader"), "reader")),
    );
    let call = |r| bookies.call(&bookie.id, r, Duration::from_secs(30));
    assert_eq!(
        patient(call(req::read_lac(3))).await.unwrap_err(),
        RpcError::Status(Status::NoLedger)
    );
    assert_eq!(
        patient(call(add())).await.unwrap_err(),
        RpcError::Status(Status::Unauthorized)
    );
    assert_eq!(
        patient(call(req::read_lac(3))).await.unwrap_err(),
        RpcError::Status(Status::NoLedger)
    );

    // A writer (second role listed) may add, and read.
    let r = one_call(
        config_for(Some("0:ops, writer"), "writer"),
        &bookie.id,
        add(),
    )
    .await;
    r.expect("the writer's add is accepted");
    let r = one_call(
        config_for(Some("0:writer"), "writer2"),
        &bookie.id,
        req::read_lac(3),
    )
    .await;
    assert!(
        matches!(r, Ok(_) | Err(RpcError::Status(Status::NoEntry))),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_handshakes_do_not_disturb_other_clients() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("bookies CA");
    let ca_file = ca.write(dir.path(), "ca");
    let md = metadata().await;
    let mut tls = BookieTls::new(dir.path(), &ca.bookie());
    tls.start_tls_timeout_secs = 1;
    let bookie = start_bookie(&md, tls.load(), "127.0.0.1").await;
    let good = Arc::new(Bookies::new(
        Arc::new(TcpConnector),
        Arc::new(tls_config(client_tls(&ca_file, None))),
    ));
    // A well-behaved TLS client keeps writing the whole time.
    let writer = {
        let good = good.clone();
        let id = bookie.id.clone();
        tokio::spawn(async move {
            for entry in 0..200i64 {
                let r = add_request(1, entry);
                good.call(&id, r, Duration::from_secs(30))
                    .await
                    .expect("the good client's add");
            }
        })
    };

    // Garbage instead of a frame: closed.
    let mut garbage = TcpStream::connect(bookie.id.as_str()).await.unwrap();
    garbage
        .write_all(b"\x00\x00\x00\x10this is not bookkeeper")
        .await
        .unwrap();
    assert!(closed_by_bookie(&mut garbage).await);

    // StartTLS, then garbage instead of a ClientHello: closed.
    let mut junk = TcpStream::connect(bookie.id.as_str()).await.unwrap();
    let ok = raw_call(&mut junk, &start_tls_request(1))
        .await
        .expect("StartTLS answered");
    assert_eq!(ok.status, StatusCode::Eok as i32);
    junk.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8])
        .await
        .unwrap();
    junk.write_all(&[0xaa; 512]).await.unwrap();
    assert!(closed_by_bookie(&mut junk).await);

    // StartTLS, then half a ClientHello and silence: closed at the StartTLS timeout.
    let mut half = TcpStream::connect(bookie.id.as_str()).await.unwrap();
    raw_call(&mut half, &start_tls_request(2))
        .await
        .expect("StartTLS answered");
    half.write_all(&[
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ])
    .await
    .unwrap();
    // StartTLS and nothing after it: closed at the timeout as well.
    let mut silent = TcpStream::connect(bookie.id.as_str()).await.unwrap();
    raw_call(&mut silent, &start_tls_request(3))
        .await
        .expect("StartTLS answered");
    // StartTLS with the ClientHello sent before the answer (pipelined): closed.
    let mut pipelined = TcpStream::connect(bookie.id.as_str()).await.unwrap();
    let mut out = BytesMut::new();
    v3::encode_request_frame(&start_tls_request(4), &mut out);
    out.extend_from_slice(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]);
    pipelined.write_all(&out).await.unwrap();

    assert!(
        closed_by_bookie(&mut half).await,
        "a half-finished handshake is never closed"
    );
    assert!(
        closed_by_bookie(&mut silent).await,
        "a silent StartTLS is never closed"
    );
    assert!(closed_by_bookie(&mut pipelined).await);

    patient(writer).await.expect("the good client kept working");
    // And a new TLS client still gets in.
    let r = one_call(
        tls_config(client_tls(&ca_file, None)),
        &bookie.id,
        req::read_lac(1),
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_tls_bookie_closes_connections_that_never_start_tls() {
    let dir = tempfile::tempdir().unwrap();
    let bookies_ca = Ca::new("bookies CA");
    let clients = Ca::new("clients CA");
    let md = metadata().await;
    let mut tls = BookieTls::new(dir.path(), &bookies_ca.bookie());
    tls.trust = Some(clients.write(dir.path(), "clients"));
    tls.client_auth = true;
    tls.start_tls_timeout_secs = 1;
    let bookie = start_bookie(&md, tls.load(), "127.0.0.1").await;
    let mut idle = TcpStream::connect(bookie.id.as_str()).await.unwrap();
    assert!(
        closed_by_bookie(&mut idle).await,
        "an idle pre-TLS connection is kept"
    );
    // A frame far larger than any StartTLS is not buffered before TLS.
    let mut big = TcpStream::connect(bookie.id.as_str()).await.unwrap();
    big.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
    assert!(closed_by_bookie(&mut big).await);
}

/// BookKeeper's `tlsKeyStorePasswordPath`: a bookie whose key is an encrypted PKCS#8 file
/// serves TLS with the password from that file; a wrong password is refused, naming the key,
/// the password file and the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_key_is_decrypted_with_the_password_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("bookies CA");
    let ca_file = ca.write(dir.path(), "ca");
    let leaf = ca.bookie();
    let tls = BookieTls::new(dir.path(), &leaf);
    std::fs::write(&tls.key, leaf.encrypted_key_pem(b"correct horse")).unwrap();
    let password = dir.path().join("key.password");
    std::fs::write(&password, "correct horse\n").unwrap();
    let config = BookieConfig {
        tls_key_store_password_path: Some(password.clone()),
        ..tls.config()
    };
    let load =
        |config: &BookieConfig| ServerTls::load(TlsSettings::from_config(config).unwrap().unwrap());
    let server = Arc::new(load(&config).expect("the encrypted key, decrypted"));
    let md = metadata().await;
    let _bookie = start_bookie(&md, server, "127.0.0.1").await;
    let client = Client::connect(md.clone(), tls_config(client_tls(&ca_file, None)))
        .await
        .unwrap();
    let w = client
        .create_ledger(CreateOptions::default().quorum(1, 1, 1))
        .await
        .unwrap();
    assert_eq!(w.append(b"over TLS".to_vec()).await.unwrap(), 0);

    std::fs::write(&password, "battery staple").unwrap();
    let e = load(&config).unwrap_err().to_string();
    assert!(
        e.contains("wrong password")
            && e.contains(&password.display().to_string())
            && e.contains(&tls.key.display().to_string()),
        "{e}"
    );
    let e = load(&tls.config()).unwrap_err().to_string();
    assert!(
        e.contains("is encrypted") && e.contains("tlsKeyStorePasswordPath"),
        "{e}"
    );
}

/// The client's side of the same: an encrypted client key (`--tls-key-password-file`, as
/// BookKeeper's `clientKeyStorePasswordPath`) gets a client through a bookie requiring client
/// certificates; without its password, or with a wrong one, the configuration is refused,
/// naming the key, the password file and the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_client_key_is_decrypted_with_its_password_file() {
    let dir = tempfile::tempdir().unwrap();
    let bookies_ca = Ca::new("bookies CA");
    let clients = Ca::new("clients CA");
    let md = metadata().await;
    let _bookie = mutual_tls_bookie(dir.path(), &md, &bookies_ca, &clients, &[], &[]).await;
    let ca_file = bookies_ca.write(dir.path(), "bookies");
    let leaf = clients.client(None);
    let (cert, key) = leaf.write(dir.path(), "client");
    std::fs::write(&key, leaf.encrypted_key_pem(b"client secret")).unwrap();
    let password = dir.path().join("client.password");
    std::fs::write(&password, "client secret\n").unwrap();
    let files = |pw| ClientCertFiles {
        cert: &cert,
        key: &key,
        key_password: pw,
    };

    let e = ClientTls::from_pem_files(&ca_file, Some(files(None::<&Path>)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("is encrypted") && e.contains("--tls-key-password-file"),
        "{e}"
    );
    let tls = ClientTls::from_pem_files(&ca_file, Some(files(Some(&password))))
        .expect("the encrypted client key, decrypted");
    let client = Client::connect(md.clone(), tls_config(tls)).await.unwrap();
    let w = client
        .create_ledger(CreateOptions::default().quorum(1, 1, 1))
        .await
        .unwrap();
    assert_eq!(w.append(b"with a decrypted key".to_vec()).await.unwrap(), 0);

    std::fs::write(&password, "wrong").unwrap();
    let e = ClientTls::from_pem_files(&ca_file, Some(files(Some(&password))))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("wrong password")
            && e.contains(&password.display().to_string())
            && e.contains(&key.display().to_string()),
        "{e}"
    );
}

#[test]
fn keystores_that_are_not_pem_are_refused_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("bookies CA");
    let tls = BookieTls::new(dir.path(), &ca.bookie());
    std::fs::write(&tls.key, [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2, 0, 0]).unwrap();
    let settings = TlsSettings::from_config(&tls.config()).unwrap().unwrap();
    let e = ServerTls::load(settings).unwrap_err().to_string();
    assert!(e.contains("JKS") && e.contains("convert it to PEM"), "{e}");
    // A PKCS12 store is DER: refused the same way.
    std::fs::write(&tls.key, [0x30, 0x82, 0x09, 0x8a, 0x02, 0x01, 0x03]).unwrap();
    let settings = TlsSettings::from_config(&tls.config()).unwrap().unwrap();
    let e = ServerTls::load(settings).unwrap_err().to_string();
    assert!(
        e.contains("PKCS12") && e.contains("convert it to PEM"),
        "{e}"
    );
    let e = TlsSettings::from_config(&BookieConfig {
        tls_key_store_type: Some("JKS".into()),
        ..tls.config()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("PEM"), "{e}");
}
