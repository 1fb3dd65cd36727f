//! Parsing `etcd://host:port[,host:port]/prefix` (hosts separated by `,` or `;`, spec §6)
//! into client endpoints and the key scope.

use folio_metadata::{MetadataError, ServiceUri};

/// A parsed `etcd://` metadata URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUri {
    /// `http://host:port` for each server.
    pub endpoints: Vec<String>,
    /// The key prefix (BookKeeper's scope), e.g. `/ledgers`; never ends with `/`.
    pub scope: String,
}

impl EtcdUri {
    /// Parses with `folio_metadata`'s URI parser (the one the `folio` binary uses), so the
    /// driver accepts exactly what the binary does; only `etcd://` URIs are this driver's.
    pub fn parse(uri: &str) -> Result<EtcdUri, MetadataError> {
        let ServiceUri { hosts, root } =
            ServiceUri::parse(uri, "etcd", "etcd://host:port[,host:port]/prefix")?;
        Ok(EtcdUri {
            endpoints: hosts.iter().map(|h| format!("http://{h}")).collect(),
            scope: root,
        })
    }

    /// `host:port,host:port`, for messages.
    pub fn address(&self) -> String {
        self.endpoints
            .iter()
            .map(|e| e.trim_start_matches("http://"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints_and_scope() {
        let u = EtcdUri::parse("etcd://a:2379,b:2380/ledgers").unwrap();
        assert_eq!(u.endpoints, vec!["http://a:2379", "http://b:2380"]);
        assert_eq!(u.scope, "/ledgers");
        assert_eq!(u.address(), "a:2379,b:2380");
        assert_eq!(EtcdUri::parse("etcd://a:1;b:2/x/y/").unwrap().scope, "/x/y");
        assert_eq!(EtcdUri::parse("etcd://a:1").unwrap().scope, "/ledgers");
        assert_eq!(EtcdUri::parse("etcd://a/x").unwrap().address(), "a:2379");
    }

    #[test]
    fn rejects_bad_uris_with_the_cause() {
        for (uri, cause) in [
            ("zk://a:1/x", "expected etcd://"),
            ("etcd://a:x/x", "bad port"),
            ("etcd:///x", "no host"),
            ("etcd://a:1/", "must not be /"),
            ("etcd://a:1/x//y", "empty path segment"),
        ] {
            let e = EtcdUri::parse(uri).unwrap_err().to_string();
            assert!(e.contains(cause), "{uri}: {e}");
        }
    }
}
