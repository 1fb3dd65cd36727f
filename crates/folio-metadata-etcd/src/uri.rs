//! Parsing `etcd://host:port[,host:port]/prefix` (hosts separated by `,` or `;`, spec §6)
//! into client endpoints and the key scope.

use folio_metadata::MetadataError;

/// A parsed `etcd://` metadata URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUri {
    /// `http://host:port` for each server.
    pub endpoints: Vec<String>,
    /// The key prefix (BookKeeper's scope), e.g. `/ledgers`; never ends with `/`.
    pub scope: String,
}

impl EtcdUri {
    pub fn parse(uri: &str) -> Result<EtcdUri, MetadataError> {
        let bad = |reason: &str| MetadataError::InvalidUri {
            uri: uri.to_string(),
            reason: reason.to_string(),
        };
        let rest = uri
            .strip_prefix("etcd://")
            .ok_or_else(|| bad("expected etcd://host:port[,host:port]/prefix"))?;
        let (hosts, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/ledgers"),
        };
        let mut endpoints = Vec::new();
        for host in hosts.split([',', ';']) {
            let host = host.trim();
            if host.is_empty() {
                continue;
            }
            // A host without a port gets the service's default port (2379).
            let host = match host.rsplit_once(':') {
                Some((name, port)) => {
                    if name.is_empty() {
                        return Err(bad(&format!("server {host:?} has no host name")));
                    }
                    port.parse::<u16>()
                        .map_err(|_| bad(&format!("server {host:?} has an invalid port")))?;
                    host.to_string()
                }
                None => format!("{host}:2379"),
            };
            endpoints.push(format!("http://{host}"));
        }
        if endpoints.is_empty() {
            return Err(bad("no etcd server given"));
        }
        let scope = path.trim_end_matches('/');
        if scope.is_empty() {
            return Err(bad("the key prefix must not be / (use e.g. /ledgers)"));
        }
        if scope.contains("//") || scope.contains('?') || scope.contains('#') {
            return Err(bad(
                "the key prefix has an empty component, a query or a fragment",
            ));
        }
        Ok(EtcdUri {
            endpoints,
            scope: scope.to_string(),
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
            ("etcd://a:x/x", "invalid port"),
            ("etcd:///x", "no etcd server"),
            ("etcd://a:1/", "must not be /"),
            ("etcd://a:1/x//y", "empty component"),
        ] {
            let e = EtcdUri::parse(uri).unwrap_err().to_string();
            assert!(e.contains(cause), "{uri}: {e}");
        }
    }
}
