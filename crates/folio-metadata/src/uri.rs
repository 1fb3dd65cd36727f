//! The metadata service URI (`--metadata`, `FOLIO_METADATA`): which store, where.
//!
//! - `sqlite:///abs/path/metadata.db`: the embedded database (an absolute path).
//! - `zk://host:port[,host:port...]/ledgers`: ZooKeeper in BookKeeper's layout; also
//!   BookKeeper's `zk+hierarchical://`, `zk+null://` spellings and `;` between hosts.
//! - `etcd://host:port[,host:port...]/prefix`: etcd, keys under the prefix.
//! - `mem://name`: an in-process store shared by every connection with the same name.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::MetadataError;

/// The default root of BookKeeper's metadata in ZooKeeper (and Folio's etcd prefix).
pub const DEFAULT_ROOT: &str = "/ledgers";
pub const DEFAULT_ZK_PORT: u16 = 2181;
pub const DEFAULT_ETCD_PORT: u16 = 2379;

/// A parsed metadata service URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataUri {
    /// The embedded sqlite database file (absolute path).
    Sqlite { path: PathBuf },
    /// ZooKeeper: `host:port` servers and the ledgers root path (e.g. `/ledgers`).
    Zk { hosts: Vec<String>, root: String },
    /// etcd: `host:port` endpoints (no `http://`) and the key prefix (e.g. `/ledgers`).
    Etcd {
        endpoints: Vec<String>,
        prefix: String,
    },
    /// The in-process store named `name`.
    Mem { name: String },
}

impl MetadataUri {
    /// Parses a URI; the error says what is wrong and what a good one looks like.
    pub fn parse(uri: &str) -> Result<Self, MetadataError> {
        let err = |reason: String| MetadataError::InvalidUri {
            uri: uri.to_owned(),
            reason,
        };
        let Some((scheme, rest)) = uri.split_once("://") else {
            return Err(err(
                "expected scheme://..., e.g. sqlite:///abs/path/metadata.db, zk://host:2181/ledgers, etcd://host:2379/ledgers or mem://name".into(),
            ));
        };
        if rest.contains(['?', '#']) {
            return Err(err("query strings and fragments are not supported".into()));
        }
        match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => {
                if !rest.starts_with('/') {
                    return Err(err(format!(
                        "the sqlite path must be absolute: write sqlite:///abs/path/metadata.db (three slashes), not sqlite://{rest}"
                    )));
                }
                if rest.len() == 1 || rest.ends_with('/') {
                    return Err(err(
                        "the sqlite URI names a directory, not a database file".into()
                    ));
                }
                Ok(MetadataUri::Sqlite {
                    path: PathBuf::from(rest),
                })
            }
            "mem" => {
                if rest.contains('/') {
                    return Err(err("a mem:// name cannot contain '/'".into()));
                }
                let name = if rest.is_empty() { "default" } else { rest };
                Ok(MetadataUri::Mem {
                    name: name.to_owned(),
                })
            }
            "zk" | "zk+hierarchical" | "zk+null" => {
                let (hosts, root) = split_hosts_and_root(rest, DEFAULT_ZK_PORT).map_err(err)?;
                Ok(MetadataUri::Zk { hosts, root })
            }
            s if s.starts_with("zk+") => Err(err(format!(
                "ledger manager type {:?} is not supported: Folio uses the hierarchical layout (zk:// or zk+hierarchical://)",
                &s[3..]
            ))),
            "etcd" => {
                let (endpoints, prefix) =
                    split_hosts_and_root(rest, DEFAULT_ETCD_PORT).map_err(err)?;
                Ok(MetadataUri::Etcd { endpoints, prefix })
            }
            other => Err(err(format!(
                "unknown scheme {other:?}: expected sqlite, zk, etcd or mem"
            ))),
        }
    }

    /// The scheme, for messages ("sqlite", "zk", "etcd", "mem").
    pub fn scheme(&self) -> &'static str {
        match self {
            MetadataUri::Sqlite { .. } => "sqlite",
            MetadataUri::Zk { .. } => "zk",
            MetadataUri::Etcd { .. } => "etcd",
            MetadataUri::Mem { .. } => "mem",
        }
    }
}

/// Splits `h1:p1,h2:p2/root` into hosts (with default ports filled in) and a root path.
fn split_hosts_and_root(rest: &str, default_port: u16) -> Result<(Vec<String>, String), String> {
    let (hosts, root) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, DEFAULT_ROOT),
    };
    if hosts.is_empty() {
        return Err("no host given: expected host:port[,host:port...]".into());
    }
    let mut out = Vec::new();
    for host in hosts.split([',', ';']) {
        if host.is_empty() {
            return Err(format!("empty host in {hosts:?}"));
        }
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port)) => {
                let port: u16 = port
                    .parse()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| format!("bad port {port:?} in {host:?}"))?;
                (name, port)
            }
            None => (host, default_port),
        };
        let valid = !name.is_empty()
            && name.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':')
            });
        if !valid {
            return Err(format!("bad host name {name:?}"));
        }
        out.push(format!("{name}:{port}"));
    }
    let root = root.trim_end_matches('/');
    if root.is_empty() {
        return Err(
            "the root path must not be / (BookKeeper needs its own root, e.g. /ledgers)".into(),
        );
    }
    if root.split('/').skip(1).any(str::is_empty) {
        return Err(format!("bad root path {root:?}: empty path segment"));
    }
    if root.split('/').any(|c| c == "." || c == "..") {
        return Err(format!("bad root path {root:?}: '.' or '..' segment"));
    }
    Ok((out, root.to_owned()))
}

/// A `zk://` or `etcd://` URI taken apart for a driver: the servers (`host:port`, default
/// ports filled in) and the root path (ZooKeeper's ledgers root, etcd's key prefix; never
/// `/`, never ending with `/`). One parser for both drivers and the `folio` binary, so
/// whatever one accepts the others accept too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceUri {
    pub hosts: Vec<String>,
    pub root: String,
}

impl ServiceUri {
    /// Parses a URI of the driver for `scheme` (`"zk"` or `"etcd"`); a URI of another
    /// scheme is refused, saying what was expected (`usage`).
    pub fn parse(uri: &str, scheme: &str, usage: &str) -> Result<Self, MetadataError> {
        let (hosts, root) = match MetadataUri::parse(uri)? {
            MetadataUri::Zk { hosts, root } if scheme == "zk" => (hosts, root),
            MetadataUri::Etcd { endpoints, prefix } if scheme == "etcd" => (endpoints, prefix),
            other => {
                return Err(MetadataError::InvalidUri {
                    uri: uri.to_owned(),
                    reason: format!(
                        "expected {usage}: this is the {scheme} driver, not {}",
                        other.scheme()
                    ),
                });
            }
        };
        Ok(ServiceUri { hosts, root })
    }
}

impl FromStr for MetadataUri {
    type Err = MetadataError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MetadataUri::parse(s)
    }
}

impl fmt::Display for MetadataUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetadataUri::Sqlite { path } => write!(f, "sqlite://{}", path.display()),
            MetadataUri::Zk { hosts, root } => write!(f, "zk://{}{}", hosts.join(","), root),
            MetadataUri::Etcd { endpoints, prefix } => {
                write!(f, "etcd://{}{}", endpoints.join(","), prefix)
            }
            MetadataUri::Mem { name } => write!(f, "mem://{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme() {
        assert_eq!(
            MetadataUri::parse("sqlite:///tmp/x/metadata.db").unwrap(),
            MetadataUri::Sqlite {
                path: "/tmp/x/metadata.db".into()
            }
        );
        assert_eq!(
            MetadataUri::parse("zk://a:2181,b:2182/ledgers").unwrap(),
            MetadataUri::Zk {
                hosts: vec!["a:2181".into(), "b:2182".into()],
                root: "/ledgers".into()
            }
        );
        assert_eq!(
            MetadataUri::parse("zk+hierarchical://a;b:1/x/y/").unwrap(),
            MetadataUri::Zk {
                hosts: vec!["a:2181".into(), "b:1".into()],
                root: "/x/y".into()
            }
        );
        assert_eq!(
            MetadataUri::parse("etcd://e1:2379").unwrap(),
            MetadataUri::Etcd {
                endpoints: vec!["e1:2379".into()],
                prefix: "/ledgers".into()
            }
        );
        assert_eq!(
            MetadataUri::parse("mem://t1").unwrap(),
            MetadataUri::Mem { name: "t1".into() }
        );
        for s in [
            "sqlite:///tmp/m.db",
            "zk://a:1,b:2/ledgers",
            "etcd://e:2379/p",
            "mem://n",
        ] {
            assert_eq!(MetadataUri::parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn driver_uris_are_split_into_hosts_and_root() {
        let u = ServiceUri::parse("zk+null://a;b:1/x/y/", "zk", "zk://...").unwrap();
        assert_eq!(u.hosts, vec!["a:2181", "b:1"]);
        assert_eq!(u.root, "/x/y");
        let u = ServiceUri::parse("etcd://e", "etcd", "etcd://...").unwrap();
        assert_eq!(
            (u.hosts, u.root),
            (vec!["e:2379".to_string()], "/ledgers".to_string())
        );
        let e = ServiceUri::parse("etcd://e:1/x", "zk", "zk://host:port/ledgers")
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected zk://host:port/ledgers"), "{e}");
        assert!(e.contains("etcd://e:1/x"), "{e}");
        let e = ServiceUri::parse("mem://x", "etcd", "etcd://...").unwrap_err();
        assert!(matches!(e, MetadataError::InvalidUri { .. }), "{e:?}");
    }

    #[test]
    fn arbitrary_strings_never_panic() {
        let alphabet: Vec<char> = "sqlitezketcdm:/,;.?#[]0123456789+ab é".chars().collect();
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let s: String = (0..rng.usize(0..24))
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            if let Ok(uri) = MetadataUri::parse(&s) {
                // Whatever parses prints back to something that parses the same.
                assert_eq!(MetadataUri::parse(&uri.to_string()).unwrap(), uri, "{s:?}");
            }
        }
    }

    #[test]
    fn malformed_uris_name_the_problem() {
        let cases = [
            ("metadata.db", "scheme://"),
            ("sqlite://rel/metadata.db", "absolute"),
            ("sqlite:///", "directory"),
            ("zk:///ledgers", "no host"),
            ("zk://a:x/ledgers", "bad port"),
            ("zk://a:0/ledgers", "bad port"),
            ("zk://a,,b/ledgers", "empty host"),
            ("zk://a b:1/ledgers", "bad host name"),
            ("zk://a:1//ledgers", "empty path segment"),
            ("zk://a:1/", "must not be /"),
            ("etcd://a:1/x/../y", "'..' segment"),
            ("zk+flat://a:1/ledgers", "not supported"),
            ("etcd://a:99999/p", "bad port"),
            ("http://a/b", "unknown scheme"),
            ("mem://a/b", "cannot contain"),
            ("sqlite:///tmp/m.db?mode=ro", "query"),
        ];
        for (uri, needle) in cases {
            let e = MetadataUri::parse(uri).unwrap_err().to_string();
            assert!(e.contains(needle), "{uri}: {e}");
            assert!(e.contains(uri), "{uri}: {e}");
        }
    }
}
