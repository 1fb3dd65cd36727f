//! BookKeeper's `bk_server.conf` as it is: a Java properties file, and the `BK_<key>`
//! environment overrides of BookKeeper's container image, translated into Folio's
//! configuration.
//!
//! Each key is one of: a key Folio implements with BookKeeper's meaning ([`FIELDS`], or
//! Folio's own field name); a key read here rather than mapped to one field
//! (`httpServerEnabled`, `zkServers`, `zkLedgersRootPath`); a BookKeeper key Folio does not
//! implement (listed in `bookkeeper_keys.txt`), ignored and reported once so the operator
//! sees it; or a typo, refused with the closest known name. Values are typed by what the
//! field takes (properties hold only strings); an empty value leaves the key unset, as an
//! empty `advertisedAddress=` does in BookKeeper.

use std::collections::BTreeSet;

use super::BookieConfig;

/// BookKeeper's keys (one per line, `#` comments).
const BOOKKEEPER_KEYS: &str = include_str!("bookkeeper_keys.txt");

/// BookKeeper key → Folio field, for every key Folio implements with the same meaning. The
/// TOML form accepts the same names (serde aliases); a test keeps the two in step.
pub(super) const FIELDS: &[(&str, &str)] = &[
    ("metadataServiceUri", "metadata_service_uri"),
    ("bookieId", "bookie_id"),
    ("advertisedAddress", "advertised_address"),
    ("useHostNameAsBookieID", "use_host_name_as_bookie_id"),
    ("bookiePort", "port"),
    ("httpServerPort", "http_port"),
    ("httpServerHost", "http_listen_address"),
    ("journalDirectories", "journal_dirs"),
    ("journalDirectory", "journal_dirs"),
    ("ledgerDirectories", "ledger_dirs"),
    ("indexDirectories", "index_dir"),
    ("journalMaxGroupWaitMSec", "journal_max_group_wait_ms"),
    (
        "journalBufferedWritesThreshold",
        "journal_buffered_writes_threshold",
    ),
    (
        "journalBufferedEntriesThreshold",
        "journal_buffered_entries_threshold",
    ),
    (
        "journalFlushWhenQueueEmpty",
        "journal_flush_when_queue_empty",
    ),
    ("journalSyncData", "journal_sync_data"),
    ("journalMaxSizeMB", "journal_max_size_mb"),
    ("journalPreAllocSizeMB", "journal_pre_alloc_size_mb"),
    (
        "journalRemoveFromPageCache",
        "journal_remove_pages_from_cache",
    ),
    (
        "journalRemovePagesFromCache",
        "journal_remove_pages_from_cache",
    ),
    ("flushInterval", "flush_interval_ms"),
    ("logSizeLimit", "entry_log_size_limit"),
    ("entryLogPerLedgerEnabled", "entry_log_per_ledger_enabled"),
    ("maximumNumberOfActiveEntryLogs", "max_active_entry_logs"),
    (
        "entrylogMapAccessExpiryTimeInSeconds",
        "entry_log_access_expiry_s",
    ),
    ("dbStorage_directIOEntryLogger", "entry_log_direct_io"),
    ("dbStorage_readAheadCacheBatchSize", "read_ahead_batch_size"),
    ("dbStorage_rocksDB_blockCacheSize", "index_cache_bytes"),
    ("nettyMaxFrameSizeBytes", "max_frame_size"),
    ("maxPendingAddRequestsPerThread", "max_pending_adds"),
    ("maxPendingReadRequestsPerThread", "max_pending_reads"),
    ("numReadWorkerThreads", "read_threads"),
    ("diskUsageThreshold", "disk_usage_threshold"),
    ("diskUsageLwmThreshold", "disk_usage_lwm_threshold"),
    ("diskCheckInterval", "disk_check_interval_ms"),
    ("zkTimeout", "metadata_session_timeout_ms"),
    ("gcWaitTime", "gc_wait_time_ms"),
    ("minorCompactionThreshold", "minor_compaction_threshold"),
    ("minorCompactionInterval", "minor_compaction_interval_s"),
    ("majorCompactionThreshold", "major_compaction_threshold"),
    ("majorCompactionInterval", "major_compaction_interval_s"),
    ("autoRecoveryDaemonEnabled", "auto_recovery_daemon_enabled"),
    ("lostBookieRecoveryDelay", "lost_bookie_recovery_delay"),
    (
        "auditorPeriodicCheckInterval",
        "auditor_periodic_check_interval_s",
    ),
    (
        "auditorPeriodicBookieCheckInterval",
        "auditor_periodic_bookie_check_interval_s",
    ),
    (
        "auditorReplicasCheckInterval",
        "auditor_replicas_check_interval_s",
    ),
    (
        "auditorPeriodicPlacementPolicyCheckInterval",
        "auditor_periodic_placement_policy_check_interval_s",
    ),
    ("tlsProviderFactoryClass", "tls_provider_factory_class"),
    ("tlsKeyStoreType", "tls_key_store_type"),
    ("tlsKeyStore", "tls_key_store"),
    ("tlsKeyStorePasswordPath", "tls_key_store_password_path"),
    ("tlsCertificatePath", "tls_certificate_path"),
    ("tlsTrustStoreType", "tls_trust_store_type"),
    ("tlsTrustStore", "tls_trust_store"),
    ("tlsClientAuthentication", "tls_client_authentication"),
    ("tlsEnabledProtocols", "tls_enabled_protocols"),
    ("tlsEnabledCipherSuites", "tls_enabled_cipher_suites"),
    (
        "tlsCertFilesRefreshDurationSeconds",
        "tls_cert_files_refresh_duration_seconds",
    ),
    ("startTLSTimeoutSecs", "start_tls_timeout_secs"),
    (
        "bookieAuthProviderFactoryClass",
        "bookie_auth_provider_factory_class",
    ),
    ("authorizedRoles", "authorized_roles"),
    // Folio's own per-operation roles, in BookKeeper's spelling style.
    ("authorizedReadRoles", "authorized_read_roles"),
    ("authorizedWriteRoles", "authorized_write_roles"),
    ("authorizedRecoveryRoles", "authorized_recovery_roles"),
];

/// BookKeeper's default `httpServerPort`, used when `httpServerEnabled=true` names none.
const BOOKKEEPER_HTTP_PORT: i64 = 8080;

/// One `key=value`, and where it came from (for messages).
#[derive(Debug, Clone)]
pub struct Setting {
    pub key: String,
    pub value: String,
    pub origin: String,
}

/// The translation: a table of Folio field names, and the BookKeeper keys ignored.
#[derive(Debug, Default)]
pub struct Translated {
    pub table: toml::Table,
    pub ignored: BTreeSet<String>,
}

/// Parses a Java properties file into settings, in file order.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Setting>, String> {
    let mut out = Vec::new();
    java_properties::PropertiesIter::new(text.as_bytes())
        .read_into(|key, value| {
            out.push(Setting {
                key,
                value,
                origin: origin.to_string(),
            })
        })
        .map_err(|e| format!("{origin}: not a properties file: {e}"))?;
    Ok(out)
}

/// `BK_<key>=value` variables of `env`, as settings (BookKeeper's container image applies
/// them to bk_server.conf the same way).
pub fn env_settings(env: &[(String, String)]) -> Vec<Setting> {
    env.iter()
        .filter_map(|(k, v)| {
            let key = k.strip_prefix("BK_")?;
            (!key.is_empty()).then(|| Setting {
                key: key.to_string(),
                value: v.clone(),
                origin: format!("environment variable {k}"),
            })
        })
        .collect()
}

/// Whether serde knows `key` as a field or an alias of [`BookieConfig`].
fn serde_knows(key: &str) -> bool {
    let mut t = toml::Table::new();
    t.insert(key.to_string(), toml::Value::Table(toml::Table::new()));
    match toml::Value::Table(t).try_into::<BookieConfig>() {
        Ok(_) => true,
        Err(e) => !e.to_string().contains("unknown field"),
    }
}

/// The Folio field `key` (a BookKeeper key or a Folio field name) sets, if Folio
/// implements it.
pub fn field_of(key: &str) -> Option<String> {
    if let Some((_, f)) = FIELDS.iter().find(|(k, _)| *k == key) {
        return Some(f.to_string());
    }
    serde_knows(key).then(|| key.to_string())
}

fn bookkeeper_keys() -> impl Iterator<Item = &'static str> {
    BOOKKEEPER_KEYS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// The string as the TOML value `field` takes: tried as an integer, a float, a boolean,
/// then a string, keeping the first the field accepts.
fn typed(field: &str, raw: &str, origin: &str, key: &str) -> Result<toml::Value, String> {
    let mut candidates = Vec::new();
    if let Ok(i) = raw.parse::<i64>() {
        candidates.push(toml::Value::Integer(i));
    }
    if let Ok(f) = raw.parse::<f64>() {
        candidates.push(toml::Value::Float(f));
    }
    match raw.to_ascii_lowercase().as_str() {
        "true" => candidates.push(toml::Value::Boolean(true)),
        "false" => candidates.push(toml::Value::Boolean(false)),
        _ => {}
    }
    candidates.push(toml::Value::String(raw.to_string()));
    let mut last = String::new();
    for v in candidates {
        let mut t = toml::Table::new();
        t.insert(field.to_string(), v.clone());
        match toml::Value::Table(t).try_into::<BookieConfig>() {
            Ok(_) => return Ok(v),
            Err(e) => last = e.to_string().trim().replace('\n', " "),
        }
    }
    Err(format!("{origin}: bad value {raw:?} for {key}: {last}"))
}

/// BookKeeper's name of Folio field `field`, if it has one (its first mapping).
pub fn bookkeeper_name(field: &str) -> Option<&'static str> {
    FIELDS.iter().find(|(_, f)| *f == field).map(|(k, _)| *k)
}

/// Whether `key` is one of BookKeeper's keys (implemented by Folio or not).
pub fn is_bookkeeper_key(key: &str) -> bool {
    bookkeeper_keys().any(|k| k == key)
}

/// The closest known key to `key`, if one is close enough to be the intended one.
pub fn suggestion(key: &str) -> Option<String> {
    let folio_fields = FIELDS.iter().map(|(_, f)| *f);
    let default_keys = super::DEFAULT_CONFIG_TOML.lines().filter_map(|l| {
        let l = l.trim_start_matches('#').trim();
        let (k, _) = l.split_once(" = ")?;
        k.bytes()
            .all(|b| b.is_ascii_lowercase() || b == b'_')
            .then_some(k)
    });
    bookkeeper_keys()
        .chain(FIELDS.iter().map(|(k, _)| *k))
        .chain(folio_fields)
        .chain(default_keys)
        .map(|k| {
            (
                strsim::levenshtein(&key.to_lowercase(), &k.to_lowercase()),
                k,
            )
        })
        .filter(|(d, k)| *d <= 3.max(k.len() / 5))
        .min()
        .map(|(_, k)| k.to_string())
}

/// Translates settings (later ones win) into Folio's fields.
pub fn translate(settings: &[Setting]) -> Result<Translated, String> {
    let known_bk: BTreeSet<&str> = bookkeeper_keys().collect();
    let mut out = Translated::default();
    let (mut http_enabled, mut zk_servers, mut zk_root) = (None, None, None);
    let mut http_from_bookkeeper_key = false;
    // BookKeeper reads journalDirectory only when journalDirectories is not set.
    let has_journal_dirs = settings
        .iter()
        .any(|s| s.key.trim() == "journalDirectories" && !s.value.trim().is_empty());
    for s in settings {
        let (key, raw) = (s.key.trim(), s.value.trim());
        if key == "journalDirectory" && has_journal_dirs {
            continue;
        }
        if key == "httpServerPort" {
            http_from_bookkeeper_key = true;
        }
        match key {
            "httpServerEnabled" => {
                http_enabled = match raw.to_ascii_lowercase().as_str() {
                    "" => None,
                    "true" => Some(true),
                    "false" => Some(false),
                    _ => {
                        return Err(format!(
                            "{}: bad value {raw:?} for httpServerEnabled: true or false",
                            s.origin
                        ));
                    }
                };
                continue;
            }
            "zkServers" => {
                zk_servers = (!raw.is_empty()).then(|| raw.to_string());
                continue;
            }
            "zkLedgersRootPath" => {
                zk_root = (!raw.is_empty()).then(|| raw.to_string());
                continue;
            }
            _ => {}
        }
        match field_of(key) {
            Some(field) => {
                if raw.is_empty() {
                    out.table.remove(&field);
                } else {
                    let v = typed(&field, raw, &s.origin, key)?;
                    out.table.insert(field, v);
                }
            }
            None if known_bk.contains(key) => {
                out.ignored.insert(key.to_string());
            }
            None => {
                let hint = suggestion(key)
                    .map(|k| format!("; did you mean {k}?"))
                    .unwrap_or_default();
                return Err(format!(
                    "{}: unknown key {key:?}: neither a Folio key nor one of BookKeeper's{hint}",
                    s.origin
                ));
            }
        }
    }
    // BookKeeper starts its HTTP server only when httpServerEnabled is true (its
    // httpServerPort alone does nothing); Folio's own http_port needs no switch.
    match http_enabled {
        Some(true) => {
            out.table
                .entry("http_port")
                .or_insert(toml::Value::Integer(BOOKKEEPER_HTTP_PORT));
        }
        Some(false) => {
            out.table.remove("http_port");
        }
        None if http_from_bookkeeper_key => {
            out.table.remove("http_port");
        }
        None => {}
    }
    // The pre-metadataServiceUri way of naming ZooKeeper.
    if !out.table.contains_key("metadata_service_uri")
        && let Some(servers) = zk_servers
    {
        let root = zk_root.unwrap_or_else(|| "/ledgers".to_string());
        out.table.insert(
            "metadata_service_uri".into(),
            toml::Value::String(format!("zk://{servers}{root}")),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> Vec<Setting> {
        parse(text, "t.conf").unwrap()
    }

    fn config(text: &str) -> (BookieConfig, BTreeSet<String>) {
        let t = translate(&settings(text)).unwrap();
        (toml::Value::Table(t.table).try_into().unwrap(), t.ignored)
    }

    #[test]
    fn every_mapped_key_sets_its_field_as_the_toml_alias_does() {
        for (bk, field) in FIELDS {
            assert!(
                serde_knows(bk),
                "{bk} is mapped but the TOML form refuses it"
            );
            assert!(serde_knows(field), "{field} is no field");
        }
        // A BookKeeper key serde accepts (an alias) must be mapped, or a properties file
        // and a TOML file would disagree about it.
        for bk in bookkeeper_keys() {
            if serde_knows(bk) {
                assert!(
                    FIELDS.iter().any(|(k, _)| *k == bk),
                    "{bk} is a TOML alias but missing from FIELDS"
                );
            }
        }
        // Mapped keys land on the field the alias names: same value, same result.
        let (c, _) = config("bookiePort=4000\njournalRemoveFromPageCache=false\nzkTimeout=7000");
        assert_eq!(c.port, 4000);
        assert!(!c.journal_remove_pages_from_cache);
        assert_eq!(c.metadata_session_timeout_ms, 7000);
        // The entry log per ledger keys are implemented, not ignored.
        let (c, ignored) = config(
            "entryLogPerLedgerEnabled=true\nmaximumNumberOfActiveEntryLogs=7\n\
             entrylogMapAccessExpiryTimeInSeconds=9",
        );
        assert!(c.entry_log_per_ledger_enabled);
        assert_eq!(c.max_active_entry_logs, 7);
        assert_eq!(c.entry_log_access_expiry_s, 9);
        assert!(ignored.is_empty(), "{ignored:?}");
    }

    #[test]
    fn values_are_typed_by_their_field_and_empty_means_unset() {
        let (c, ignored) = config(
            "ledgerDirectories=/a,/b\nadvertisedAddress=\ndiskUsageThreshold=0.9\n\
             diskUsageLwmThreshold=0.8\nautoRecoveryDaemonEnabled=TRUE\nbookieId=42\n\
             journalAdaptiveGroupWrites=false\nrack=/r/1",
        );
        assert_eq!(
            c.ledger_dirs,
            vec!["/a".into(), "/b".into()] as Vec<std::path::PathBuf>
        );
        assert_eq!(c.advertised_address, None);
        assert_eq!(c.disk_usage_threshold, 0.9);
        assert!(c.auto_recovery_daemon_enabled);
        assert_eq!(c.bookie_id.as_deref(), Some("42"));
        assert_eq!(
            c.rack.as_deref(),
            Some("/r/1"),
            "Folio's own names work too"
        );
        assert_eq!(
            ignored,
            BTreeSet::from(["journalAdaptiveGroupWrites".to_string()])
        );
        let e = translate(&settings("bookiePort=http")).unwrap_err();
        assert!(
            e.contains("t.conf") && e.contains("bookiePort") && e.contains("http"),
            "{e}"
        );
    }

    #[test]
    fn typos_are_refused_with_the_closest_name() {
        let e = translate(&settings("bookiPort=3181")).unwrap_err();
        assert!(
            e.contains("bookiPort") && e.contains("did you mean bookiePort?"),
            "{e}"
        );
        let e = translate(&settings("journalDirectorys=/j")).unwrap_err();
        assert!(e.contains("did you mean journalDirector"), "{e}");
        let e = translate(&settings("zzzzzzzzzzzzzzzzzzz=1")).unwrap_err();
        assert!(
            e.contains("unknown key") && !e.contains("did you mean"),
            "{e}"
        );
    }

    #[test]
    fn http_follows_http_server_enabled_and_zk_servers_is_a_fallback() {
        let (c, _) = config("httpServerEnabled=false\nhttpServerPort=8080");
        assert_eq!(c.http_port, None);
        let (c, _) = config("httpServerPort=9000");
        assert_eq!(c.http_port, None, "BookKeeper's default is off");
        let (c, _) = config("httpServerEnabled=true\nhttpServerPort=9000");
        assert_eq!(c.http_port, Some(9000));
        let (c, _) = config("httpServerEnabled=true");
        assert_eq!(c.http_port, Some(8080));
        assert_eq!(c.http_listen_address, "127.0.0.1", "loopback unless set");
        let (c, _) = config("httpServerEnabled=true\nhttpServerHost=0.0.0.0");
        assert_eq!(c.http_listen_address, "0.0.0.0");
        let (c, _) = config("zkServers=a:2181,b:2181\nzkLedgersRootPath=/bk");
        assert_eq!(
            c.metadata_service_uri.as_deref(),
            Some("zk://a:2181,b:2181/bk")
        );
        let (c, _) = config("zkServers=a:2181\nmetadataServiceUri=zk+hierarchical://b:2181/x");
        assert_eq!(
            c.metadata_service_uri.as_deref(),
            Some("zk+hierarchical://b:2181/x")
        );
    }

    #[test]
    fn bk_environment_overrides_the_file() {
        let mut s = settings("bookiePort=3181\nledgerDirectories=/d");
        s.extend(env_settings(&[
            ("BK_bookiePort".into(), "3999".into()),
            ("BK_".into(), "x".into()),
            ("PATH".into(), "/bin".into()),
        ]));
        let t = translate(&s).unwrap();
        let c: BookieConfig = toml::Value::Table(t.table).try_into().unwrap();
        assert_eq!(c.port, 3999);
        let e = translate(&env_settings(&[("BK_bookiePrt".into(), "1".into())])).unwrap_err();
        assert!(e.contains("environment variable BK_bookiePrt"), "{e}");
    }
}
