//! Parsing `zk://host:port[,host:port]/ledgers` (and BookKeeper's `zk+hierarchical://`,
//! `zk+null://` forms, hosts separated by `,` or `;`, spec §5.1) into a ZooKeeper connect
//! string and the ledgers root path.

use folio_metadata::MetadataError;

/// A parsed `zk://` metadata URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkUri {
    /// `host:port,host:port`, as ZooKeeper clients take it.
    pub connect_string: String,
    /// The ledgers root, e.g. `/ledgers`; never ends with `/`.
    pub root: String,
}

/// Ledger manager types of `zk+<type>://` this driver can serve: it always uses BookKeeper's
/// default hierarchical layout.
const ACCEPTED_TYPES: &[&str] = &["", "null", "hierarchical"];

impl ZkUri {
    pub fn parse(uri: &str) -> Result<ZkUri, MetadataError> {
        let bad = |reason: &str| MetadataError::InvalidUri {
            uri: uri.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| bad("expected zk://host:port[,host:port]/ledgers"))?;
        let kind = match scheme {
            "zk" => "",
            s => s
                .strip_prefix("zk+")
                .ok_or_else(|| bad("the scheme must be zk (or zk+hierarchical)"))?,
        };
        if !ACCEPTED_TYPES.contains(&kind) {
            return Err(bad(&format!(
                "ledger manager type {kind:?} is not supported; Folio uses the hierarchical layout"
            )));
        }
        let (hosts, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/ledgers"),
        };
        let mut servers = Vec::new();
        for host in hosts.split([',', ';']) {
            let host = host.trim();
            if host.is_empty() {
                continue;
            }
            // A host without a port gets the service's default port (2181).
            let host = match host.rsplit_once(':') {
                Some((name, port)) => {
                    if name.is_empty() {
                        return Err(bad(&format!("server {host:?} has no host name")));
                    }
                    port.parse::<u16>()
                        .map_err(|_| bad(&format!("server {host:?} has an invalid port")))?;
                    host.to_string()
                }
                None => format!("{host}:2181"),
            };
            servers.push(host.to_string());
        }
        if servers.is_empty() {
            return Err(bad("no ZooKeeper server given"));
        }
        let root = path.trim_end_matches('/');
        if root.is_empty() {
            return Err(bad(
                "the ledgers root must not be / (BookKeeper needs its own root, e.g. /ledgers)",
            ));
        }
        if root
            .split('/')
            .skip(1)
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(bad(
                "the ledgers root path has an empty, '.' or '..' component",
            ));
        }
        if root.contains('?') || root.contains('#') {
            return Err(bad("query strings and fragments are not supported"));
        }
        Ok(ZkUri {
            connect_string: servers.join(","),
            root: root.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_and_root() {
        let u = ZkUri::parse("zk://a:2181,b:2182/ledgers").unwrap();
        assert_eq!(u.connect_string, "a:2181,b:2182");
        assert_eq!(u.root, "/ledgers");
        let u = ZkUri::parse("zk+hierarchical://a:2181;b:2182/x/y/").unwrap();
        assert_eq!(u.connect_string, "a:2181,b:2182");
        assert_eq!(u.root, "/x/y");
        assert_eq!(ZkUri::parse("zk://127.0.0.1:1").unwrap().root, "/ledgers");
        assert_eq!(
            ZkUri::parse("zk://a,b:1/x").unwrap().connect_string,
            "a:2181,b:1"
        );
    }

    #[test]
    fn rejects_bad_uris_with_the_cause() {
        for (uri, cause) in [
            ("etcd://a:1/x", "scheme"),
            ("zk+flat://a:1/x", "not supported"),
            ("zk://a:b/x", "invalid port"),
            ("zk:///x", "no ZooKeeper server"),
            ("zk://a:1/", "must not be /"),
            ("zk://a:1/x//y", "empty"),
            ("nonsense", "expected zk://"),
        ] {
            let e = ZkUri::parse(uri).unwrap_err().to_string();
            assert!(e.contains(cause), "{uri}: {e}");
            assert!(e.contains(uri), "{uri}: {e}");
        }
    }
}
