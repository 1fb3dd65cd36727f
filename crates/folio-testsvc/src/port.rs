//! Picking free loopback ports: bind port 0, note what the kernel chose, release it.
//!
//! There is a window between releasing the port and the server binding it; callers retry the
//! whole start when the server then fails to bind. Ports handed out once are never handed out
//! again by this process, so two servers started in parallel by one test binary do not collide.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback TCP port that was free a moment ago and was not returned before by this process.
pub(crate) fn free_port() -> std::io::Result<u16> {
    for _ in 0..100 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let mut seen = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        if seen.get_or_insert_with(HashSet::new).insert(port) {
            return Ok(port);
        }
    }
    Err(std::io::Error::other(
        "the kernel kept returning ports this process already used",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_bindable() {
        let a = free_port().unwrap();
        let b = free_port().unwrap();
        assert_ne!(a, b);
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, a)).unwrap();
        assert_eq!(l.local_addr().unwrap().port(), a);
    }
}
