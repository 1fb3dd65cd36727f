//! The znodes a Folio cluster leaves in ZooKeeper are exactly BookKeeper's layout
//! (spec/bookkeeper-protocol.md §5): paths, LAYOUT and INSTANCEID contents, ephemeral
//! registrations, the metadata header line and protobuf fields, the under-replication
//! records. Checked with a raw ZooKeeper client against a real server.

use folio_metadata::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

use folio_metadata::format::dataformats::{BookieServiceInfoFormat, LedgerMetadataFormat};
use folio_metadata::{BookieMode, BookieServiceInfo, Endpoint, MetadataStore};
use folio_metadata_zk::ZkMetadataStore;
use folio_testsvc::ZooKeeperServer;
use folio_types::BookieId;
use folio_types::metadata::{DigestType, LedgerMetadata};
use folio_types::quorum::QuorumConfig;
use prost::Message;
use zookeeper_client as zk;

fn bookie(s: &str) -> BookieId {
    BookieId::new(s).unwrap()
}

fn metadata() -> LedgerMetadata {
    let mut m = LedgerMetadata::new_open(
        QuorumConfig::new(3, 2, 2).unwrap(),
        vec![
            bookie("10.0.0.1:3181"),
            bookie("10.0.0.2:3181"),
            bookie("10.0.0.3:3181"),
        ],
        DigestType::Crc32c,
        b"secret".to_vec(),
    );
    m.c_token = 42;
    m
}

async fn raw(server: &ZooKeeperServer) -> zk::Client {
    zk::Client::connect(&server.connect_string()).await.unwrap()
}

async fn data(c: &zk::Client, path: &str) -> (Vec<u8>, zk::Stat) {
    c.get_data(path)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

async fn children(c: &zk::Client, path: &str) -> Vec<String> {
    let mut v = c
        .list_children(path)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_bookies_and_ledgers_use_bookkeepers_znodes() {
    let server = ZooKeeperServer::start().unwrap();
    let store = ZkMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    let c = raw(&server).await;

    // Cluster init: root, available, available/readonly, INSTANCEID, LAYOUT.
    let info = store.init_cluster().await.unwrap();
    assert_eq!(data(&c, "/ledgers").await.0, b"");
    assert_eq!(
        data(&c, "/ledgers/LAYOUT").await.0,
        b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
    );
    let instance_id = String::from_utf8(data(&c, "/ledgers/INSTANCEID").await.0).unwrap();
    assert_eq!(instance_id, info.instance_id);
    assert_eq!(instance_id.len(), 36, "{instance_id}");
    assert_eq!(children(&c, "/ledgers/available").await, vec!["readonly"]);
    assert!(children(&c, "/ledgers/available/readonly").await.is_empty());

    // Registration: an ephemeral znode of this session holding BookieServiceInfoFormat.
    let service = BookieServiceInfo {
        endpoints: vec![Endpoint {
            id: "bookie".into(),
            host: "10.0.0.1".into(),
            port: 3181,
            protocol: "bookie-rpc".into(),
            auth: vec![],
            extensions: vec![],
        }],
        properties: BTreeMap::new(),
    };
    let mut reg = store
        .register_bookie(&bookie("10.0.0.1:3181"), BookieMode::Writable, &service)
        .await
        .unwrap();
    let (bytes, stat) = data(&c, "/ledgers/available/10.0.0.1:3181").await;
    assert_eq!(stat.ephemeral_owner, store.session_id());
    let decoded = BookieServiceInfoFormat::decode(bytes.as_slice()).unwrap();
    assert_eq!(decoded.endpoints.len(), 1);
    let e = &decoded.endpoints[0];
    assert_eq!(
        (e.id.as_str(), e.host.as_str(), e.port),
        ("bookie", "10.0.0.1", 3181)
    );
    assert_eq!(e.protocol, "bookie-rpc");

    // Read-only: the node moves under available/readonly.
    reg.set_mode(BookieMode::ReadOnly).await.unwrap();
    assert_eq!(children(&c, "/ledgers/available").await, vec!["readonly"]);
    let (_, stat) = data(&c, "/ledgers/available/readonly/10.0.0.1:3181").await;
    assert_eq!(stat.ephemeral_owner, store.session_id());

    // Cookies are plain persistent znodes under cookies/.
    let v = store
        .write_cookie(
            &bookie("10.0.0.1:3181"),
            b"5\nbookieHost: \"10.0.0.1:3181\"\n",
            None,
        )
        .await
        .unwrap();
    let (bytes, stat) = data(&c, "/ledgers/cookies/10.0.0.1:3181").await;
    assert_eq!(bytes, b"5\nbookieHost: \"10.0.0.1:3181\"\n");
    assert_eq!(stat.ephemeral_owner, 0);
    assert_eq!(v.raw(), stat.version as i64);

    // Ledger ids come from idgen/ID- ephemeral-sequential znodes, deleted afterwards.
    let a = store.generate_ledger_id().await.unwrap();
    let b = store.generate_ledger_id().await.unwrap();
    assert!(b > a && a >= 0, "{a} {b}");
    let mut left = children(&c, "/ledgers/idgen").await;
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = children(&c, "/ledgers/idgen").await;
    }
    assert!(left.is_empty(), "id generation znodes left: {left:?}");

    // Ledger metadata at the hierarchical path, format version 3.
    let m = metadata();
    let version = store.create_ledger(1, &m).await.unwrap();
    let (bytes, stat) = data(&c, "/ledgers/00/0000/L0001").await;
    assert_eq!(version.raw(), stat.version as i64);
    let header = b"BookieMetadataFormatVersion\t3\n";
    assert_eq!(&bytes[..header.len()], header);
    let f = LedgerMetadataFormat::decode_length_delimited(&bytes[header.len()..]).unwrap();
    assert_eq!(
        (f.quorum_size, f.ensemble_size, f.ack_quorum_size),
        (2, 3, Some(2))
    );
    assert_eq!(f.state, 1, "OPEN");
    assert_eq!(f.last_entry_id, Some(-1));
    assert_eq!(f.length, 0);
    assert_eq!(f.digest_type, Some(3), "CRC32C");
    assert_eq!(f.password.as_deref(), Some(&b"secret"[..]));
    assert_eq!(f.c_token, Some(42));
    assert_eq!(f.segment.len(), 1);
    assert_eq!(f.segment[0].first_entry_id, 0);
    assert_eq!(
        f.segment[0].ensemble_member,
        vec!["10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"]
    );
    // The same bytes as the shared serializer: every driver stores the same record.
    assert_eq!(
        bytes,
        folio_metadata::format::encode_ledger_metadata(&m).unwrap()
    );

    store.create_ledger(123456789, &m).await.unwrap();
    data(&c, "/ledgers/01/2345/L6789").await;
    // Ids from 2^31-1 on use the long 3-4-4-4-4 form.
    store.create_ledger(2147483647, &m).await.unwrap();
    data(&c, "/ledgers/000/0000/0021/4748/L3647").await;
    assert_eq!(
        store.list_ledgers(None, 10).await.unwrap().ledgers,
        vec![1, 123456789, 2147483647]
    );

    // Deleting a ledger removes the znode and its now-empty parents.
    store.delete_ledger(123456789, None).await.unwrap();
    assert!(c.check_stat("/ledgers/01").await.unwrap().is_none());

    reg.unregister().await.unwrap();
    assert!(children(&c, "/ledgers/available/readonly").await.is_empty());
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn underreplication_and_auditor_use_bookkeepers_znodes() {
    let server = ZooKeeperServer::start().unwrap();
    let store = ZkMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    store.init_cluster().await.unwrap();
    let c = raw(&server).await;

    store
        .mark_underreplicated(7, &[bookie("10.0.0.9:3181")])
        .await
        .unwrap();
    assert_eq!(
        data(&c, "/ledgers/underreplication/LAYOUT").await.0,
        b"type: \"BASIC\"\nversion: 1\n"
    );
    let path = "/ledgers/underreplication/ledgers/0000/0000/0000/0007/urL0000000007";
    let text = String::from_utf8(data(&c, path).await.0).unwrap();
    assert!(
        text.starts_with("replica: \"10.0.0.9:3181\"\nctime: "),
        "{text:?}"
    );

    let lock = store
        .try_lock_underreplicated(7, "10.0.0.1:3181")
        .await
        .unwrap()
        .expect("lock");
    let (bytes, stat) = data(&c, "/ledgers/underreplication/locks/urL0000000007").await;
    assert_eq!(bytes, b"bookieId: \"10.0.0.1:3181\"\n");
    assert_eq!(stat.ephemeral_owner, store.session_id());
    lock.mark_replicated().await.unwrap();
    assert!(c.check_stat(path).await.unwrap().is_none());
    assert!(
        children(&c, "/ledgers/underreplication/locks")
            .await
            .is_empty(),
        "lock left behind"
    );

    store.set_autorecovery_enabled(false).await.unwrap();
    data(&c, "/ledgers/underreplication/disable").await;
    store.set_lost_bookie_recovery_delay(30).await.unwrap();
    assert_eq!(
        data(&c, "/ledgers/underreplication/lostBookieRecoveryDelay")
            .await
            .0,
        b"30"
    );

    // The Auditor checks' ctimes: binary `{1: int64}` (field 1, varint), as BookKeeper's
    // LightProto writes them; written by BookKeeper, read by Folio.
    use folio_metadata::AuditorCheck;
    store
        .set_auditor_check_ctime(AuditorCheck::CheckAllLedgers, 1_700_000_000_123)
        .await
        .unwrap();
    assert_eq!(
        data(&c, "/ledgers/underreplication/checkallledgersctime")
            .await
            .0,
        [0x08, 0xfb, 0xd0, 0x95, 0xff, 0xbc, 0x31]
    );
    c.create(
        "/ledgers/underreplication/replicascheckctime",
        &[0x08, 0x96, 0x01],
        &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .unwrap();
    assert_eq!(
        store
            .auditor_check_ctime(AuditorCheck::Replicas)
            .await
            .unwrap(),
        Some(150)
    );
    assert_eq!(
        store
            .auditor_check_ctime(AuditorCheck::PlacementPolicy)
            .await
            .unwrap(),
        None
    );

    // Auditor election: ephemeral-sequential V_ votes; the winner's vote is also written
    // into the election znode.
    let candidacy = store
        .join_auditor_election(&bookie("10.0.0.1:3181"))
        .await
        .unwrap();
    let mut leader = candidacy.leadership();
    tokio::time::timeout(Duration::from_secs(30), leader.wait_for(|l| *l))
        .await
        .expect("never elected")
        .unwrap();
    let votes = children(&c, "/ledgers/underreplication/auditorelection").await;
    assert_eq!(votes.len(), 1);
    assert!(
        votes[0].starts_with("V_") && votes[0].len() == 12,
        "{votes:?}"
    );
    let vote_path = format!("/ledgers/underreplication/auditorelection/{}", votes[0]);
    assert_eq!(
        data(&c, &vote_path).await.0,
        b"bookieId: \"10.0.0.1:3181\"\n"
    );
    assert_eq!(
        data(&c, "/ledgers/underreplication/auditorelection")
            .await
            .0,
        b"bookieId: \"10.0.0.1:3181\"\n"
    );
    assert_eq!(
        store.current_auditor().await.unwrap(),
        Some(bookie("10.0.0.1:3181"))
    );
    candidacy.resign().await.unwrap();
    assert!(
        children(&c, "/ledgers/underreplication/auditorelection")
            .await
            .is_empty()
    );
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_written_by_a_java_style_client_are_read() {
    // Znodes created directly, the way BookKeeper's Java code writes them, are understood.
    let server = ZooKeeperServer::start().unwrap();
    let c = raw(&server).await;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    c.mkdir("/bk/ledgers/00/0000", &open).await.unwrap();
    c.create(
        "/bk/ledgers/LAYOUT",
        b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1",
        &open,
    )
    .await
    .unwrap();
    c.create(
        "/bk/ledgers/INSTANCEID",
        b"0d7fd2c0-0000-4000-8000-000000000001",
        &open,
    )
    .await
    .unwrap();
    let bytes = folio_metadata::format::encode_ledger_metadata(&metadata()).unwrap();
    c.create("/bk/ledgers/00/0000/L0042", &bytes, &open)
        .await
        .unwrap();
    c.mkdir("/bk/ledgers/available/readonly", &open)
        .await
        .unwrap();
    // A legacy registration: empty data, id host:port.
    let eph = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    c.create("/bk/ledgers/available/10.0.0.5:3181", b"", &eph)
        .await
        .unwrap();

    let store = ZkMetadataStore::connect(&server.metadata_uri("/bk/ledgers"))
        .await
        .unwrap();
    let cluster = store.read_cluster().await.unwrap();
    assert_eq!(cluster.instance_id, "0d7fd2c0-0000-4000-8000-000000000001");
    assert_eq!(store.read_ledger(42).await.unwrap().value, metadata());
    assert_eq!(
        store.list_ledgers(None, 100).await.unwrap().ledgers,
        vec![42]
    );
    let bookies = store.list_bookies().await.unwrap();
    assert_eq!(
        bookies.writable.into_iter().collect::<Vec<_>>(),
        vec![bookie("10.0.0.5:3181")]
    );
    assert!(bookies.readonly.is_empty());
    assert_eq!(
        store
            .bookie_service_info(&bookie("10.0.0.5:3181"))
            .await
            .unwrap(),
        BookieServiceInfo::default()
    );
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_ledger_ids_come_from_idgen_long_hob_blocks() {
    // Once `idgen-long` exists (BookKeeper creates it when 31-bit ids run out), ids are
    // (HOB number << 32) | sequence, from ephemeral-sequential znodes under the newest HOB.
    let server = ZooKeeperServer::start().unwrap();
    let store = ZkMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    store.init_cluster().await.unwrap();
    let c = raw(&server).await;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    c.create("/ledgers/idgen-long", b"", &open).await.unwrap();
    let a = store.generate_ledger_id().await.unwrap();
    let b = store.generate_ledger_id().await.unwrap();
    assert_eq!(a >> 32, 1, "{a:#x}");
    assert_eq!(b >> 32, 1, "{b:#x}");
    assert!(b > a);
    assert_eq!(
        children(&c, "/ledgers/idgen-long").await,
        vec!["HOB-0000000001"]
    );
    // A newer block is used as soon as it exists.
    c.create("/ledgers/idgen-long/HOB-0000000005", b"", &open)
        .await
        .unwrap();
    let d = store.generate_ledger_id().await.unwrap();
    assert_eq!(d >> 32, 5, "{d:#x}");
    // Such ids are stored in the long 3-4-4-4-4 form.
    store.create_ledger(d, &metadata()).await.unwrap();
    assert_eq!(store.read_ledger(d).await.unwrap().value, metadata());
    assert!(
        c.check_stat(&folio_metadata_zk::ledger_path("/ledgers", d))
            .await
            .unwrap()
            .is_some()
    );
    assert!(folio_metadata_zk::ledger_path("/ledgers", d).starts_with("/ledgers/000/0000/0214/"));
    store.close().await.unwrap();
}
