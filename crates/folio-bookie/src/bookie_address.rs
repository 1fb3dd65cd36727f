//! A bookie's id when `bookie_id` is not configured: `<host>:<port>`, the host being
//! `advertised_address`, else (with `use_host_name_as_bookie_id`, BookKeeper's
//! `useHostNameAsBookieID`) this machine's host name, else the listen address when it is a
//! specific one, else the host name resolved to an address. [`id_forms`] gives both the
//! address-based and the host-name-based id, for the shell commands that move a bookie from
//! one to the other (`updatecookie -bookieId`, `updateledgers -bookieId`).

use std::net::{IpAddr, ToSocketAddrs};

use crate::config::BookieConfig;

/// This machine's host name (`HOSTNAME`, else `/etc/hostname`), if it has one.
pub fn host_name() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The address-based host: the listen address when specific, else the host name resolved
/// (IPv4 first; BookKeeper uses the local host's address), else loopback.
fn address_host(config: &BookieConfig) -> String {
    if let Ok(ip) = config.listen_address.parse::<IpAddr>()
        && !ip.is_unspecified()
    {
        return ip.to_string();
    }
    if let Some(name) = host_name()
        && let Ok(mut addrs) = (name.as_str(), 0).to_socket_addrs()
        && let Some(addr) = addrs.find(|a| a.is_ipv4())
    {
        return addr.ip().to_string();
    }
    "127.0.0.1".to_string()
}

/// The host clients should dial (see the module comment).
pub fn advertised_host(config: &BookieConfig) -> String {
    if let Some(a) = &config.advertised_address {
        return a.clone();
    }
    if config.use_host_name_as_bookie_id
        && let Some(name) = host_name()
    {
        return name;
    }
    address_host(config)
}

/// The bookie's id text: `bookie_id`, else `<advertised host>:<port>`.
pub fn bookie_id_text(config: &BookieConfig, port: u16) -> String {
    config
        .bookie_id
        .clone()
        .unwrap_or_else(|| format!("{}:{port}", advertised_host(config)))
}

/// The bookie's address-based and host-name-based ids (`(ip, hostname)`), for a bookie whose
/// id is derived (neither `bookie_id` nor `advertised_address` set, which fix the id).
pub fn id_forms(config: &BookieConfig) -> Result<(String, String), String> {
    if let Some(id) = &config.bookie_id {
        return Err(format!(
            "the bookie's id is configured (bookie_id = {id:?}): it is neither address- nor host-name-based"
        ));
    }
    if let Some(a) = &config.advertised_address {
        return Err(format!(
            "the bookie's host is configured (advertised_address = {a:?}): it is neither address- nor host-name-based"
        ));
    }
    let name = host_name().ok_or("this machine has no host name (HOSTNAME, /etc/hostname)")?;
    let port = config.port;
    Ok((
        format!("{}:{port}", address_host(config)),
        format!("{name}:{port}"),
    ))
}
