//! The bookie over the real storage engine on a temp dir: what a client was told survives a
//! restart (fence, master key, explicit LAC, entries), with and without a clean shutdown.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use folio_bookie::config::BookieConfig;
use folio_bookie::engine::EngineStorage;
use folio_bookie::server::{BookieServer, ServerConfig, ServerHandle};
use folio_bookie::{Processor, ProcessorConfig};
use folio_proto::pb::StatusCode;
use folio_proto::{DigestManager, DigestType};

async fn start(dir: &Path) -> (ServerHandle, Arc<EngineStorage>) {
    let config = BookieConfig {
        data_dir: Some(dir.to_path_buf()),
        ..BookieConfig::default()
    };
    let storage = Arc::new(EngineStorage::open(&folio_env::Env::real(), &config).expect("open"));
    let processor = Processor::new(storage.clone(), ProcessorConfig::default());
    let server = BookieServer::bind("127.0.0.1:0", processor, ServerConfig::default())
        .await
        .expect("bind");
    (server.start(), storage)
}

const OK: i32 = StatusCode::Eok as i32;

/// Writes ledger 1 (entries), fences ledger 2, writes an explicit LAC on ledger 3.
async fn write_state(c: &mut Client) {
    for e in 0..20 {
        let add = c.v3_add(1, e, e - 1, &payload(e));
        c.send_v3(&add).await;
    }
    for _ in 0..20 {
        assert_eq!(c.recv_v3().await.status, OK);
    }
    let add = c.v3_add(2, 0, -1, b"fenced ledger");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, OK);
    let fence = c.v3_fence(2);
    c.send_v3(&fence).await;
    assert_eq!(c.recv_v3().await.status, OK);
    let add = c.v3_add(3, 0, -1, b"lac ledger");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, OK);
    let wl = c.v3_write_lac(3, 0);
    c.send_v3(&wl).await;
    assert_eq!(c.recv_v3().await.status, OK);
}

/// Checks that every answer is as before the restart.
async fn check_state(c: &mut Client) {
    for e in 0..20 {
        let read = c.v3_read(1, e);
        c.send_v3(&read).await;
        let r = c.recv_v3().await.read_response.unwrap();
        assert_eq!(r.status, OK, "entry {e}");
        assert_eq!(r.body.unwrap(), entry(1, e, e - 1, &payload(e)));
    }
    // Fence survived.
    let add = c.v3_add(2, 1, 0, b"zombie writer");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Efenced as i32);
    // Master key survived: another password is refused.
    let mut add = c.v3_add(1, 20, 19, b"intruder");
    add.add_request.as_mut().unwrap().master_key =
        bytes::Bytes::copy_from_slice(&folio_proto::master_key(b"other"));
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eua as i32);
    // Explicit LAC survived.
    let rl = c.v3_read_lac(3);
    c.send_v3(&rl).await;
    let r = c.recv_v3().await.read_lac_response.unwrap();
    assert_eq!(r.status, OK);
    let expected = DigestManager::new(3, DigestType::Crc32, PASSWORD).compute_lac(0);
    assert_eq!(r.lac_body.unwrap(), expected);
    assert_eq!(r.last_entry_body.unwrap(), entry(3, 0, -1, b"lac ledger"));
    // And the bookie still takes writes.
    let add = c.v3_add(1, 20, 19, &payload(20));
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (server, storage) = start(dir.path()).await;
    let mut c = Client::connect(server.local_addr()).await;
    write_state(&mut c).await;
    drop(c);
    server.shutdown().await;
    storage.shutdown().expect("clean shutdown with checkpoint");
    drop(storage);

    let (server, storage) = start(dir.path()).await;
    let mut c = Client::connect(server.local_addr()).await;
    check_state(&mut c).await;
    server.shutdown().await;
    storage.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_a_restart_without_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (server, storage) = start(dir.path()).await;
    let mut c = Client::connect(server.local_addr()).await;
    write_state(&mut c).await;
    drop(c);
    server.shutdown().await;
    // Journal stops, no checkpoint: the restart must replay it.
    storage.engine().shutdown();
    drop(storage);

    let (server, storage) = start(dir.path()).await;
    let mut c = Client::connect(server.local_addr()).await;
    check_state(&mut c).await;
    server.shutdown().await;
    storage.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_ledger_and_absent_entry_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (server, storage) = start(dir.path()).await;
    let mut c = Client::connect(server.local_addr()).await;
    let read = c.v3_read(9, 0);
    c.send_v3(&read).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Enoledger as i32);
    let add = c.v3_add(9, 0, -1, b"x");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, OK);
    let read = c.v3_read(9, 5);
    c.send_v3(&read).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Enoentry as i32);
    let rl = c.v3_read_lac(10);
    c.send_v3(&rl).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Enoledger as i32);
    server.shutdown().await;
    storage.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_and_piggybacked_lac_over_real_storage_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (server, storage) = start(dir.path()).await;
    let mut writer = Client::connect(server.local_addr()).await;
    let mut reader = Client::connect(server.local_addr()).await;
    for e in 0..2 {
        let add = writer.v3_add(7, e, e - 1, &payload(e));
        writer.send_v3(&add).await;
        assert_eq!(writer.recv_v3().await.status, OK);
    }
    // A read learns LAC 0; a long poll waits for it to pass 0.
    let read = reader.v3_read(7, 0);
    reader.send_v3(&read).await;
    assert_eq!(
        reader.recv_v3().await.read_response.unwrap().max_lac,
        Some(0)
    );
    let poll = reader.v3_long_poll(7, 0, 600_000);
    reader.send_v3(&poll).await;
    let add = writer.v3_add(7, 2, 1, &payload(2));
    writer.send_v3(&add).await;
    assert_eq!(writer.recv_v3().await.status, OK);
    let r = reader.recv_v3().await.read_response.unwrap();
    assert_eq!((r.status, r.entry_id, r.max_lac), (OK, 1, Some(1)));
    assert_eq!(r.body.unwrap(), entry(7, 1, 0, &payload(1)));
    // An explicit LAC past the entries' own raises the piggybacked LAC, also after a restart.
    let wl = writer.v3_write_lac(7, 2);
    writer.send_v3(&wl).await;
    assert_eq!(writer.recv_v3().await.status, OK);
    let read = reader.v3_read(7, 0);
    reader.send_v3(&read).await;
    assert_eq!(
        reader.recv_v3().await.read_response.unwrap().max_lac,
        Some(2)
    );
    drop((writer, reader));
    server.shutdown().await;
    storage.shutdown().unwrap();
    drop(storage);

    let (server, storage) = start(dir.path()).await;
    let mut c = Client::connect(server.local_addr()).await;
    let read = c.v3_read(7, 0);
    c.send_v3(&read).await;
    assert_eq!(c.recv_v3().await.read_response.unwrap().max_lac, Some(2));
    server.shutdown().await;
    storage.shutdown().unwrap();
}
