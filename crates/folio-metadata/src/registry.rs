//! The one URI-to-driver registry: a metadata service URI (`sqlite://`, `mem://`, `zk://`,
//! `etcd://`) to a session of its driver. The embedded drivers are always there; the
//! ZooKeeper and etcd drivers live in their own crates (their dependencies build only where
//! needed), which cannot be named from here, so each registers itself
//! (`folio_metadata_zk::register()`, `folio_metadata_etcd::register()`). The `folio` binary
//! registers both at start; a library user registers the ones it links. Every command, the
//! bookie, autorecovery and `folio_client::Client::from_uri` connect through [`connect`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::{MetadataError, MetadataStore, MetadataUri, Result, mem, sqlite};

/// How to open a session, whatever the driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// How long the session's ephemeral records (registrations, locks, votes) outlive a
    /// dead process (BookKeeper's `zkTimeout`); `None`: the driver's default.
    pub session_timeout: Option<Duration>,
}

/// A session being opened.
pub type Connecting = Pin<Box<dyn Future<Output = Result<Arc<dyn MetadataStore>>> + Send>>;

/// Opens a session of one driver: `uri` is the whole URI, `parsed` its parse.
pub type Driver = Arc<dyn Fn(&str, MetadataUri, ConnectOptions) -> Connecting + Send + Sync>;

fn drivers() -> &'static RwLock<HashMap<&'static str, Driver>> {
    static DRIVERS: std::sync::OnceLock<RwLock<HashMap<&'static str, Driver>>> =
        std::sync::OnceLock::new();
    DRIVERS.get_or_init(|| RwLock::new(HashMap::new()))
}

/// Registers the driver of `scheme` (`"zk"` or `"etcd"`: [`MetadataUri::scheme`]),
/// replacing any earlier one. Idempotent for the same driver.
pub fn register(scheme: &'static str, driver: Driver) {
    drivers()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(scheme, driver);
}

/// Opens a session to the metadata service at `uri`.
pub async fn connect(uri: &str, options: ConnectOptions) -> Result<Arc<dyn MetadataStore>> {
    let parsed = MetadataUri::parse(uri)?;
    match parsed {
        MetadataUri::Mem { name } => Ok(Arc::new(mem::MemMetadataStore::connect(&name))),
        MetadataUri::Sqlite { path } => {
            let mut opts = sqlite::SqliteOptions::default();
            if let Some(t) = options.session_timeout {
                opts.session_timeout = t;
            }
            Ok(Arc::new(
                sqlite::SqliteMetadataStore::open(&path, opts).await?,
            ))
        }
        other => {
            let scheme = other.scheme();
            let driver = drivers()
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(scheme)
                .cloned();
            match driver {
                Some(d) => d(uri, other, options).await,
                None => Err(MetadataError::Unsupported {
                    what: format!(
                        "{uri}: no {scheme}:// driver is registered in this program (link the \
                         folio-metadata-{scheme} crate and call folio_metadata_{scheme}::register())"
                    ),
                    driver: "registry".into(),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn embedded_drivers_are_built_in_and_others_must_register() {
        let s = connect("mem://registry-test", ConnectOptions::default())
            .await
            .unwrap();
        s.init_cluster().await.unwrap();
        let e = connect("etcd://127.0.0.1:1/x", ConnectOptions::default())
            .await
            .expect_err("no etcd driver registered in this test")
            .to_string();
        assert!(e.contains("folio_metadata_etcd::register()"), "{e}");
        // A registered driver gets the URI, its parse and the options.
        register(
            "etcd",
            Arc::new(|uri, parsed, options| {
                let said = format!("{uri} {} {:?}", parsed.scheme(), options.session_timeout);
                Box::pin(async move { Err(MetadataError::Internal(said)) })
            }),
        );
        let options = ConnectOptions {
            session_timeout: Some(Duration::from_secs(3)),
        };
        let e = connect("etcd://127.0.0.1:1/x", options)
            .await
            .expect_err("the test driver fails")
            .to_string();
        assert!(e.contains("etcd://127.0.0.1:1/x etcd Some(3s)"), "{e}");
    }
}
