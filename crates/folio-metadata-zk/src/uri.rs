//! Parsing `zk://host:port[,host:port]/ledgers` (and BookKeeper's `zk+hierarchical://`,
//! `zk+null://` forms, hosts separated by `,` or `;`, spec §5.1) into a ZooKeeper connect
//! string and the ledgers root path.

use folio_metadata::{MetadataError, ServiceUri};

/// A parsed `zk://` metadata URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkUri {
    /// `host:port,host:port`, as ZooKeeper clients take it.
    pub connect_string: String,
    /// The ledgers root, e.g. `/ledgers`; never ends with `/`.
    pub root: String,
}

impl ZkUri {
    /// Parses with `folio_metadata`'s URI parser (the one the `folio` binary uses), so the
    /// driver accepts exactly what the binary does; only `zk://` URIs are this driver's.
    pub fn parse(uri: &str) -> Result<ZkUri, MetadataError> {
        let ServiceUri { hosts, root } =
            ServiceUri::parse(uri, "zk", "zk://host:port[,host:port]/ledgers")?;
        Ok(ZkUri {
            connect_string: hosts.join(","),
            root,
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
            ("etcd://a:1/x", "expected zk://"),
            ("zk+flat://a:1/x", "not supported"),
            ("zk://a:b/x", "bad port"),
            ("zk:///x", "no host"),
            ("zk://a:1/", "must not be /"),
            ("zk://a:1/x//y", "empty"),
            ("zk://a:1/x/./y", "'.'"),
            ("nonsense", "scheme://"),
        ] {
            let e = ZkUri::parse(uri).unwrap_err().to_string();
            assert!(e.contains(cause), "{uri}: {e}");
            assert!(e.contains(uri), "{uri}: {e}");
        }
    }
}
