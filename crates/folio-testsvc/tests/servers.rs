//! Starting, probing and stopping real servers.

use std::net::TcpStream;
use std::time::Duration;

use folio_testsvc::{EtcdServer, ZooKeeperServer};

fn connects(addr: std::net::SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

#[test]
fn zookeeper_starts_answers_and_stops() {
    let mut zk = ZooKeeperServer::start().unwrap();
    assert!(zk.connect_string().starts_with("127.0.0.1:"));
    assert_eq!(
        zk.metadata_uri("/ledgers"),
        format!("zk://{}/ledgers", zk.addr())
    );
    assert!(zk.is_running());
    assert!(connects(zk.addr()));
    let dir = zk.dir();
    assert!(dir.join("zoo.cfg").exists());
    zk.stop();
    assert!(!zk.is_running());
    assert!(!connects(zk.addr()), "port still accepts after stop");
    drop(zk);
    assert!(!dir.exists(), "temp dir left behind");
}

#[test]
fn etcd_starts_answers_and_stops() {
    let mut etcd = EtcdServer::start().unwrap();
    assert!(etcd.endpoint().starts_with("127.0.0.1:"));
    assert_eq!(
        etcd.metadata_uri("/ledgers"),
        format!("etcd://{}/ledgers", etcd.addr())
    );
    assert!(connects(etcd.addr()));
    let dir = etcd.dir();
    etcd.kill();
    assert!(!etcd.is_running());
    assert!(!connects(etcd.addr()), "port still accepts after stop");
    drop(etcd);
    assert!(!dir.exists(), "temp dir left behind");
}

#[test]
fn two_servers_of_each_kind_run_side_by_side() {
    let a = ZooKeeperServer::start().unwrap();
    let b = ZooKeeperServer::start().unwrap();
    let c = EtcdServer::start().unwrap();
    let d = EtcdServer::start().unwrap();
    assert_ne!(a.addr(), b.addr());
    assert_ne!(c.addr(), d.addr());
    for addr in [a.addr(), b.addr(), c.addr(), d.addr()] {
        assert!(connects(addr));
    }
}

#[test]
fn a_missing_binary_is_named_with_the_packages_to_install() {
    let err = EtcdServer::start_with_binary(std::path::Path::new("/nonexistent/etcd"))
        .err()
        .expect("start with a missing binary succeeded");
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/etcd"), "{msg}");
    assert!(
        msg.contains("etcd-server") && msg.contains("scripts/test"),
        "{msg}"
    );
}

#[test]
fn a_proxy_forwards_until_blocked() {
    use std::io::{Read, Write};
    let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = echo.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in echo.incoming().flatten() {
            std::thread::spawn(move || {
                let mut b = [0u8; 64];
                while let Ok(n) = s.read(&mut b) {
                    if n == 0 || s.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let proxy = folio_testsvc::TcpProxy::start(target).unwrap();
    let mut c = TcpStream::connect(proxy.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
    proxy.block();
    // The open connection is cut: a read ends (EOF or error) instead of echoing.
    let _ = c.write_all(b"more");
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(rest.is_empty(), "data crossed a blocked proxy: {rest:?}");
    proxy.unblock();
    let mut c = TcpStream::connect(proxy.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"pong").unwrap();
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"pong");
}

#[test]
fn servers_restart_on_the_same_address() {
    let mut zk = ZooKeeperServer::start().unwrap();
    let mut etcd = EtcdServer::start().unwrap();
    let (za, ea) = (zk.addr(), etcd.addr());
    zk.kill();
    etcd.stop();
    assert!(!connects(za) && !connects(ea));
    zk.restart().unwrap();
    etcd.restart().unwrap();
    assert_eq!((zk.addr(), etcd.addr()), (za, ea));
    assert!(zk.is_running() && etcd.is_running());
    assert!(connects(za) && connects(ea));
    // Restarting a running server works too.
    zk.restart().unwrap();
    assert!(connects(za));
}
