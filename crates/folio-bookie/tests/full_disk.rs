//! A bookie on a real, small file system (a tmpfs mounted with `size=`) that fills up: it
//! turns read-only (registration too) and, once the space is freed, writable again, with
//! every acknowledged entry readable. Needs root to mount; elsewhere it says so and passes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use folio_bookie::config::BookieConfig;
use folio_bookie::node::{BookieNode, MetadataAccess};
use folio_bookie::registration::RegistrationState;
use folio_metadata::BookieMode;
use folio_metadata::mem::{MemMetadataStore, unique_name};
use folio_proto::pb::StatusCode;

/// A tmpfs mounted for the test, unmounted when dropped (also when the test fails).
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    fn mount(dir: &Path, size_mib: u64) -> Option<SmallDisk> {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "skipped: cannot mount a tmpfs (needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(SmallDisk {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Writes zeroes into `path` until the file system says it is full.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 1 << 20];
    loop {
        if let Err(e) = f.write_all(&chunk) {
            assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
            return;
        }
    }
}

async fn add(c: &mut Client, entry: i64) -> i32 {
    let req = c.v3_add(1, entry, entry - 1, &payload(entry));
    c.send_v3(&req).await;
    c.recv_v3().await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_on_a_full_tmpfs_is_read_only_until_space_is_freed() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(tmp.path(), 32) else {
        return;
    };
    let cluster = unique_name("full-disk");
    let data = disk.dir.join("bookie");
    let config = BookieConfig {
        data_dir: Some(data.clone()),
        bookie_id: Some("bookie-full:3181".into()),
        listen_address: "127.0.0.1".into(),
        port: 0,
        disk_check_interval_ms: 50,
        journal_pre_alloc_size_mb: 1,
        // No checkpoint while the disk is full: only the journal and the disk checker are
        // under test here.
        flush_interval_ms: 3_600_000,
        ..BookieConfig::default()
    };
    let node = BookieNode::start(
        &folio_env::Env::real(),
        config,
        Some(MetadataAccess {
            store: Arc::new(MemMetadataStore::connect(&cluster)),
            connector: mem_connector(&cluster),
            init_cluster_if_missing: true,
        }),
    )
    .await
    .unwrap();
    let mut state = node.registrar().unwrap().watch();
    let mut c = Client::connect(node.local_addr()).await;
    assert_eq!(add(&mut c, 0).await, StatusCode::Eok as i32);

    let filler = disk.dir.join("filler");
    fill(&filler);
    tokio::time::timeout(
        PATIENCE,
        state.wait_for(|s| *s == RegistrationState::Registered(BookieMode::ReadOnly)),
    )
    .await
    .expect("read-only on a full disk")
    .unwrap();
    // Refused (read-only, or the journal's write refused for lack of space), never acked.
    assert_ne!(add(&mut c, 1).await, StatusCode::Eok as i32);

    std::fs::remove_file(&filler).unwrap();
    tokio::time::timeout(
        PATIENCE,
        state.wait_for(|s| *s == RegistrationState::Registered(BookieMode::Writable)),
    )
    .await
    .expect("writable again once space was freed")
    .unwrap();
    // The disk checker may see the space before the registrar does; adds are taken once
    // both have (generous: the machine is shared).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while add(&mut c, 1).await != StatusCode::Eok as i32 {
        assert!(tokio::time::Instant::now() < deadline, "adds never resumed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for e in 0..2 {
        let req = c.v3_read(1, e);
        c.send_v3(&req).await;
        let r = c.recv_v3().await.read_response.unwrap();
        assert_eq!(r.body.unwrap(), entry(1, e, e - 1, &payload(e)));
    }
    drop(c);
    node.shutdown().await.unwrap();
    drop(disk);
}
