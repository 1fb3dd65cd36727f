//! A whole bookie (real storage on a temp dir, `mem://` metadata): cookie check, registration and
//! its upkeep, clean shutdown (the admin HTTP endpoint's tests are folio-http's).

mod common;

use folio_metadata::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use folio_bookie::config::BookieConfig;
use folio_bookie::node::{BookieNode, MetadataAccess, NodeError};
use folio_bookie::registration::{Registrar, RegistrationState};
use folio_metadata::mem::{MemMetadataStore, unique_name};
use folio_metadata::{BookieMode, BookieServiceInfo, MetadataStore};
use folio_proto::pb::StatusCode;
use folio_types::BookieId;

fn access(cluster: &str, store: Arc<MemMetadataStore>) -> MetadataAccess {
    MetadataAccess {
        store,
        connector: mem_connector(cluster),
        init_cluster_if_missing: true,
    }
}

/// Starts a real bookie with `config` on the in-memory metadata cluster `cluster`.
async fn start_on_mem(cluster: &str, config: BookieConfig) -> Result<BookieNode, NodeError> {
    BookieNode::start(
        &folio_env::Env::real(),
        config,
        Some(access(
            cluster,
            Arc::new(MemMetadataStore::connect(cluster)),
        )),
    )
    .await
}

fn config(dir: &std::path::Path, id: &str) -> BookieConfig {
    BookieConfig {
        data_dir: Some(dir.to_path_buf()),
        bookie_id: Some(id.to_string()),
        listen_address: "127.0.0.1".into(),
        port: 0,
        // A nearly full host disk must not make these bookies read-only.
        disk_usage_threshold: 0.999,
        disk_usage_lwm_threshold: 0.998,
        ..BookieConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_serves_and_unregisters_then_restarts_with_its_cookie() {
    let cluster = unique_name("node");
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemMetadataStore::connect(&cluster));
    let node = BookieNode::start(
        &folio_env::Env::real(),
        config(dir.path(), "bookie-a:3181"),
        Some(access(&cluster, store)),
    )
    .await
    .expect("start");
    assert_eq!(node.bookie_id().as_str(), "bookie-a:3181");
    assert_eq!(
        registered(&cluster).await,
        (vec!["bookie-a:3181".into()], vec![])
    );
    let mut c = Client::connect(node.local_addr()).await;
    let add = c.v3_add(1, 0, -1, b"hello");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    drop(c);
    node.shutdown().await.expect("clean shutdown");
    assert_eq!(registered(&cluster).await, (vec![], vec![]));

    // Same directories, same id: the cookie matches and the data is there.
    let store = Arc::new(MemMetadataStore::connect(&cluster));
    let node = BookieNode::start(
        &folio_env::Env::real(),
        config(dir.path(), "bookie-a:3181"),
        Some(access(&cluster, store)),
    )
    .await
    .expect("restart");
    let mut c = Client::connect(node.local_addr()).await;
    let read = c.v3_read(1, 0);
    c.send_v3(&read).await;
    let r = c.recv_v3().await.read_response.unwrap();
    assert_eq!(r.body.unwrap(), entry(1, 0, -1, b"hello"));
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_disk_or_another_bookie_id_is_refused() {
    let cluster = unique_name("node");
    let dir = tempfile::tempdir().unwrap();
    let node = start_on_mem(&cluster, config(dir.path(), "bookie-b:3181"))
        .await
        .unwrap();
    node.shutdown().await.unwrap();

    let wiped = tempfile::tempdir().unwrap();
    let err = start_on_mem(&cluster, config(wiped.path(), "bookie-b:3181"))
        .await
        .err()
        .expect("a wiped disk must not join as the old bookie");
    assert!(matches!(err, NodeError::Cookie(_)), "{err}");
    assert!(err.to_string().contains("bookie-b:3181"), "{err}");

    let err = start_on_mem(&cluster, config(dir.path(), "bookie-c:3181"))
        .await
        .err()
        .expect("another bookie's directories are refused");
    assert!(matches!(err, NodeError::Cookie(_)), "{err}");
    // Nothing was registered by the refused starts.
    assert_eq!(registered(&cluster).await, (vec![], vec![]));
}

/// Writes one entry through a started bookie and stops it cleanly (the entry is then in the
/// entry logs and the index, the journal before the mark is gone).
async fn write_one_and_stop(node: BookieNode) {
    let mut c = Client::connect(node.local_addr()).await;
    let add = c.v3_add(1, 0, -1, b"kept");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    drop(c);
    node.shutdown().await.unwrap();
}

/// The cookie covers the index directory (BookKeeper's `indexDirs`): a bookie whose index is
/// lost or moved must not start with a fresh, empty index and answer "no such entry" for the
/// entries it acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_or_moved_index_directory_is_refused_by_the_cookie() {
    let cluster = unique_name("node");
    let dir = tempfile::tempdir().unwrap();
    let node = start_on_mem(&cluster, config(dir.path(), "bookie-i:3181"))
        .await
        .unwrap();
    write_one_and_stop(node).await;
    let observer = MemMetadataStore::connect(&cluster);
    let remote = observer
        .read_cookie(&BookieId::new("bookie-i:3181").unwrap())
        .await
        .unwrap();
    let index = dir.path().join("index");
    let text = String::from_utf8(remote.value).unwrap();
    assert!(
        text.contains(&format!("indexDirs: \"1\\t{}\"", index.display())),
        "{text}"
    );

    let moved = dir.path().join("index-moved");
    std::fs::rename(&index, &moved).unwrap();
    let err = start_on_mem(&cluster, config(dir.path(), "bookie-i:3181"))
        .await
        .err()
        .expect("a lost index directory must stop start-up");
    assert!(matches!(err, NodeError::Cookie(_)), "{err}");
    assert!(
        err.to_string().contains(&index.display().to_string()),
        "{err}"
    );
    // Pointed at the moved index, the cookie says where the index was.
    let mut cfg = config(dir.path(), "bookie-i:3181");
    cfg.index_dir = Some(moved.clone());
    let err = start_on_mem(&cluster, cfg)
        .await
        .err()
        .expect("a moved index directory must stop start-up");
    assert!(
        err.to_string()
            .contains("cookie mismatch in field indexDirs"),
        "{err}"
    );
    std::fs::rename(&moved, &index).unwrap();
    let node = start_on_mem(&cluster, config(dir.path(), "bookie-i:3181"))
        .await
        .unwrap();
    let mut c = Client::connect(node.local_addr()).await;
    let read = c.v3_read(1, 0);
    c.send_v3(&read).await;
    let r = c.recv_v3().await.read_response.unwrap();
    assert_eq!(r.body.unwrap(), entry(1, 0, -1, b"kept"));
    drop(c);
    node.shutdown().await.unwrap();
}

/// A cookie written before index directories were recorded (no `indexDirs`) is upgraded in
/// place at start when everything else matches; the entries are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_without_index_dirs_is_upgraded_at_start() {
    use folio_storage::cookie::Cookie;
    let cluster = unique_name("node");
    let dir = tempfile::tempdir().unwrap();
    let node = start_on_mem(&cluster, config(dir.path(), "bookie-j:3181"))
        .await
        .unwrap();
    write_one_and_stop(node).await;
    let id = BookieId::new("bookie-j:3181").unwrap();
    let store = MemMetadataStore::connect(&cluster);
    let remote = store.read_cookie(&id).await.unwrap();
    let mut old = Cookie::parse(&remote.value).unwrap();
    assert!(old.index_dirs.is_some());
    old.index_dirs = None;
    store
        .write_cookie(&id, &old.to_bytes(), Some(remote.version))
        .await
        .unwrap();
    let fs = folio_env::RealFileSystem;
    for d in ["journal", "ledgers"] {
        old.write_to_dir(&fs, &dir.path().join(d)).unwrap();
    }
    std::fs::remove_file(Cookie::path_in(&dir.path().join("index"))).unwrap();

    let node = start_on_mem(&cluster, config(dir.path(), "bookie-j:3181"))
        .await
        .expect("the old cookie is upgraded");
    let upgraded = Cookie::parse(&store.read_cookie(&id).await.unwrap().value).unwrap();
    let index = dir.path().join("index").display().to_string();
    assert_eq!(upgraded.index_dirs, Some(vec![index]));
    for d in ["journal", "ledgers", "index"] {
        let local = Cookie::read_from_dir(&fs, &dir.path().join(d)).unwrap();
        assert_eq!(local.as_ref(), Some(&upgraded), "{d}");
    }
    let mut c = Client::connect(node.local_addr()).await;
    let read = c.v3_read(1, 0);
    c.send_v3(&read).await;
    let r = c.recv_v3().await.read_response.unwrap();
    assert_eq!(r.body.unwrap(), entry(1, 0, -1, b"kept"));
    drop(c);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_again_after_the_session_expires() {
    let cluster = unique_name("node");
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemMetadataStore::connect(&cluster));
    let node = BookieNode::start(
        &folio_env::Env::real(),
        config(dir.path(), "bookie-d:3181"),
        Some(access(&cluster, store.clone())),
    )
    .await
    .unwrap();
    store.expire_session();
    // The expired session's registration is gone at once (mem:// removes it synchronously), so
    // seeing the bookie listed again means it registered through a new session.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while registered(&cluster).await != (vec!["bookie-d:3181".to_string()], vec![]) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never registered again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        node.registrar().unwrap().state(),
        RegistrationState::Registered(BookieMode::Writable)
    );
    assert_eq!(
        registered(&cluster).await,
        (vec!["bookie-d:3181".into()], vec![])
    );
    node.shutdown().await.unwrap();
    assert_eq!(registered(&cluster).await, (vec![], vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_bookie_moves_its_registration() {
    let cluster = unique_name("node");
    let store: Arc<dyn MetadataStore> = Arc::new(MemMetadataStore::connect(&cluster));
    let read_only = Arc::new(AtomicBool::new(false));
    let probe = read_only.clone();
    let registrar = Registrar::start(
        store,
        mem_connector(&cluster),
        BookieId::new("bookie-e:3181").unwrap(),
        BookieServiceInfo::default(),
        Arc::new(move || probe.load(Ordering::Acquire)),
        Duration::from_millis(20),
    )
    .await
    .unwrap();
    assert_eq!(
        registered(&cluster).await,
        (vec!["bookie-e:3181".into()], vec![])
    );
    read_only.store(true, Ordering::Release);
    let mut state = registrar.watch();
    tokio::time::timeout(
        PATIENCE,
        state.wait_for(|s| *s == RegistrationState::Registered(BookieMode::ReadOnly)),
    )
    .await
    .expect("moved to read-only")
    .unwrap();
    assert_eq!(
        registered(&cluster).await,
        (vec![], vec!["bookie-e:3181".into()])
    );
    registrar.shutdown().await;
    assert_eq!(registered(&cluster).await, (vec![], vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_registration_of_a_live_bookie_id_is_refused() {
    let cluster = unique_name("node");
    let dir = tempfile::tempdir().unwrap();
    let first = start_on_mem(&cluster, config(dir.path(), "bookie-f:3181"))
        .await
        .unwrap();
    // What a second process with this id would do once past its cookie check.
    let err = Registrar::start(
        Arc::new(MemMetadataStore::connect(&cluster)),
        mem_connector(&cluster),
        BookieId::new("bookie-f:3181").unwrap(),
        BookieServiceInfo::default(),
        Arc::new(|| false),
        Duration::from_secs(1),
    )
    .await
    .err()
    .expect("two live bookies with one id");
    // After waiting (bounded by the session timeout) for the registration to expire.
    assert!(
        err.to_string()
            .contains("bookie bookie-f:3181 is registered by another live bookie"),
        "{err}"
    );
    // The first is still registered, and leaves cleanly.
    assert_eq!(
        registered(&cluster).await,
        (vec!["bookie-f:3181".into()], vec![])
    );
    first.shutdown().await.unwrap();
    assert_eq!(registered(&cluster).await, (vec![], vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_makes_the_bookie_read_only() {
    let cluster = unique_name("node");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), "bookie-h:3181");
    // Any disk in use counts as "full" at this threshold.
    cfg.disk_usage_threshold = 1e-9;
    cfg.disk_usage_lwm_threshold = 1e-9;
    cfg.disk_check_interval_ms = 20;
    let node = BookieNode::start(
        &folio_env::Env::real(),
        cfg,
        Some(access(
            &cluster,
            Arc::new(MemMetadataStore::connect(&cluster)),
        )),
    )
    .await
    .unwrap();
    let mut state = node.registrar().unwrap().watch();
    tokio::time::timeout(
        PATIENCE,
        state.wait_for(|s| *s == RegistrationState::Registered(BookieMode::ReadOnly)),
    )
    .await
    .expect("registered read-only")
    .unwrap();
    assert_eq!(
        registered(&cluster).await,
        (vec![], vec!["bookie-h:3181".into()])
    );
    let mut c = Client::connect(node.local_addr()).await;
    let add = c.v3_add(1, 0, -1, b"refused");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Ereadonly as i32);
    // A recovery add (high priority) is still taken, as BookKeeper does.
    let mut add = c.v3_add(1, 0, -1, b"recovered");
    add.header.priority = Some(folio_proto::v3::HIGH_PRIORITY);
    add.add_request.as_mut().unwrap().flag =
        Some(folio_proto::pb::add_request::Flag::RecoveryAdd as i32);
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    node.shutdown().await.unwrap();
}

/// A journal write refused by a full disk turns the bookie read-only (registration too), and it
/// stays so while usage is over the low-water mark (though under the threshold); once space is
/// freed under the mark the disk checker makes it writable again, registration too, and it takes
/// adds. The disk is simulated (its capacity, and ENOSPC on every write until cleared); the index
/// and the network are real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_read_only_for_a_full_disk_is_writable_again_once_space_is_freed() {
    use folio_env::FileSystem as _;
    use folio_env::sim::{Fault, SimFileSystem};
    let cluster = unique_name("node");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("index/current")).unwrap();
    let fs = SimFileSystem::with_capacity(10 << 20);
    let env = folio_env::Env {
        fs: Arc::new(fs.clone()),
        ..folio_env::Env::real()
    };
    let mut cfg = config(dir.path(), "bookie-k:3181");
    cfg.disk_check_interval_ms = 20;
    cfg.disk_usage_threshold = 0.5;
    cfg.disk_usage_lwm_threshold = 0.3;
    cfg.journal_pre_alloc_size_mb = 0;
    let node = BookieNode::start(
        &env,
        cfg,
        Some(access(
            &cluster,
            Arc::new(MemMetadataStore::connect(&cluster)),
        )),
    )
    .await
    .unwrap();
    let mut state = node.registrar().unwrap().watch();
    let mut c = Client::connect(node.local_addr()).await;
    let add = c.v3_add(1, 0, -1, b"before");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);

    // Something else takes 40% of the disk (under the threshold), then the disk refuses
    // the journal's next write.
    let filler = dir.path().join("filler");
    let f = fs
        .open(&filler, folio_env::OpenOptions::write_create())
        .unwrap();
    f.set_len(4 << 20).unwrap();
    fs.inject(Fault::WriteEnospc { after_ops: 0 });
    let add = c.v3_add(1, 1, 0, b"refused");
    c.send_v3(&add).await;
    assert_ne!(c.recv_v3().await.status, StatusCode::Eok as i32);
    fs.clear_faults();
    tokio::time::timeout(
        PATIENCE,
        state.wait_for(|s| *s == RegistrationState::Registered(BookieMode::ReadOnly)),
    )
    .await
    .expect("registered read-only")
    .unwrap();

    f.set_len(1 << 20).unwrap();
    tokio::time::timeout(
        PATIENCE,
        state.wait_for(|s| *s == RegistrationState::Registered(BookieMode::Writable)),
    )
    .await
    .expect("registered writable again once space was freed")
    .unwrap();
    assert_eq!(
        registered(&cluster).await,
        (vec!["bookie-k:3181".into()], vec![])
    );
    let add = c.v3_add(1, 1, 0, b"after");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    drop(c);
    node.shutdown().await.unwrap();
}

/// The admin endpoint is folio-http's: a node asked for an HTTP port without one refuses to
/// start rather than run without the endpoint its config names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_port_without_an_admin_server_is_a_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), "bookie-n:3181");
    cfg.http_port = Some(0);
    match BookieNode::start(&folio_env::Env::real(), cfg, None).await {
        Ok(_) => panic!("started with http_port and no admin endpoint"),
        Err(e) => assert!(matches!(e, NodeError::NoAdminServer), "{e}"),
    }
}
