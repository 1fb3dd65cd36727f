//! A loopback TCP proxy a test can cut: `TcpProxy::start(target)` forwards every connection
//! made to its own port to `target`; `block()` drops every open connection and refuses new
//! ones (a network partition between one client and the server, while the server and other
//! clients carry on), `unblock()` lets traffic through again.
//!
//! Plain threads, so it works under any runtime and outside of one.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{Error, Result};

#[derive(Default)]
struct Shared {
    blocked: AtomicBool,
    stopped: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn cut_all(&self) {
        for s in self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// A running proxy; stops (and cuts every connection) on drop.
pub struct TcpProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl TcpProxy {
    pub fn start(target: SocketAddr) -> Result<Self> {
        let io = |context: &str| {
            let context = context.to_string();
            move |source| Error::Io {
                server: "proxy",
                context,
                source,
            }
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("bind"))?;
        let addr = listener.local_addr().map_err(io("local_addr"))?;
        listener
            .set_nonblocking(true)
            .map_err(io("set_nonblocking"))?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::Builder::new()
            .name("folio-testsvc-proxy".into())
            .spawn(move || accept_loop(listener, target, s))
            .map_err(io("spawn the accept thread"))?;
        Ok(TcpProxy { addr, shared })
    }

    /// The address clients connect to instead of the target.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts every open connection and refuses new ones until [`TcpProxy::unblock`].
    pub fn block(&self) {
        self.shared.blocked.store(true, Ordering::SeqCst);
        self.shared.cut_all();
    }

    pub fn unblock(&self) {
        self.shared.blocked.store(false, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.cut_all();
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    while !shared.stopped.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(_) => continue,
        };
        if shared.blocked.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        let _ = client.set_nonblocking(false);
        let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(5)) else {
            continue;
        };
        let pairs = [
            (client.try_clone(), server.try_clone()),
            (server.try_clone(), client.try_clone()),
        ];
        {
            let mut open = shared.open.lock().unwrap_or_else(|p| p.into_inner());
            open.push(client);
            open.push(server);
        }
        for pair in pairs {
            if let (Ok(from), Ok(to)) = pair {
                let _ = std::thread::Builder::new()
                    .name("folio-testsvc-proxy-copy".into())
                    .spawn(move || copy(from, to));
            }
        }
    }
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
