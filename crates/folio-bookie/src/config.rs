//! The bookie's configuration file (TOML).
//!
//! Every key is optional (`serde(default)`); [`DEFAULT_CONFIG_TOML`] lists them all with their
//! defaults and what they mean (`folio bookie --print-default-config` prints it). Where a key means
//! the same as one of BookKeeper's `bk_server.conf` keys, BookKeeper's name is accepted too
//! (`bookiePort`, `journalDirectory`, `ledgerDirectories`, `journalMaxGroupWaitMSec`, ...), so an
//! existing configuration carries over; directory lists accept BookKeeper's comma-separated
//! strings as well as TOML arrays.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

mod properties;

pub use properties::{bookkeeper_name, field_of, is_bookkeeper_key, suggestion};

/// See the module comment and [`DEFAULT_CONFIG_TOML`] for each key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BookieConfig {
    #[serde(alias = "metadataServiceUri")]
    pub metadata_service_uri: Option<String>,
    #[serde(alias = "bookieId")]
    pub bookie_id: Option<String>,
    #[serde(alias = "advertisedAddress")]
    pub advertised_address: Option<String>,
    /// Without `advertised_address`: the id's host is this machine's host name rather than
    /// its address. [useHostNameAsBookieID]
    #[serde(alias = "useHostNameAsBookieID")]
    pub use_host_name_as_bookie_id: bool,
    pub listen_address: String,
    #[serde(alias = "bookiePort")]
    pub port: u16,
    #[serde(alias = "httpServerPort")]
    pub http_port: Option<u16>,
    /// Address the admin HTTP endpoint listens on (loopback unless set). [httpServerHost]
    #[serde(alias = "httpServerHost")]
    pub http_listen_address: String,
    /// Folio's own: a file holding the bearer token that mutating admin requests and ledger
    /// reads must carry; unset: no token asked.
    pub http_auth_token_file: Option<PathBuf>,
    /// Folio's own: serve `/api/v1/ledger/read` (any ledger's payloads, opened with the
    /// password kept in the metadata). Off unless set.
    pub http_ledger_read_enabled: bool,
    /// Folio's own: PEM private key of the admin endpoint; with the certificate, HTTPS.
    pub http_tls_key_file: Option<PathBuf>,
    /// Folio's own: PEM certificate chain (leaf first) of the admin endpoint.
    pub http_tls_certificate_file: Option<PathBuf>,
    /// Folio's own: PEM CA bundle the dashboard trusts when it reads other bookies' HTTPS
    /// admin endpoints (their host names verified); unset: `tls_trust_store`, if set.
    pub http_tls_ca_file: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    #[serde(
        alias = "journalDirectory",
        alias = "journalDirectories",
        deserialize_with = "dir_list"
    )]
    pub journal_dirs: Vec<PathBuf>,
    #[serde(alias = "ledgerDirectories", deserialize_with = "dir_list")]
    pub ledger_dirs: Vec<PathBuf>,
    #[serde(alias = "indexDirectories", deserialize_with = "opt_first_dir")]
    pub index_dir: Option<PathBuf>,
    #[serde(alias = "journalMaxGroupWaitMSec")]
    pub journal_max_group_wait_ms: u64,
    #[serde(alias = "journalBufferedWritesThreshold")]
    pub journal_buffered_writes_threshold: u64,
    #[serde(alias = "journalBufferedEntriesThreshold")]
    pub journal_buffered_entries_threshold: u64,
    /// Folio's default is true (BookKeeper's false): `folio_storage::JournalConfig`
    /// says why.
    #[serde(alias = "journalFlushWhenQueueEmpty")]
    pub journal_flush_when_queue_empty: bool,
    #[serde(alias = "journalMaxSizeMB")]
    pub journal_max_size_mb: u64,
    #[serde(alias = "journalPreAllocSizeMB")]
    pub journal_pre_alloc_size_mb: u64,
    #[serde(
        alias = "journalRemoveFromPageCache",
        alias = "journalRemovePagesFromCache"
    )]
    pub journal_remove_pages_from_cache: bool,
    /// Folio's own key: write the journal with direct I/O (O_DIRECT) where the file
    /// system allows it.
    pub journal_direct_io: bool,
    /// Folio's own key: a force-write thread per journal directory (BookKeeper always
    /// has one); off, the journal thread fdatasyncs after each group itself.
    pub journal_force_write_thread: bool,
    /// **Unsafe when false** (BookKeeper's `journalSyncData`): adds are acknowledged
    /// without an fdatasync, so a power loss loses acknowledged entries. For tests and
    /// benchmarks only; the bookie warns at start-up.
    #[serde(alias = "journalSyncData")]
    pub journal_sync_data: bool,
    #[serde(alias = "flushInterval")]
    pub flush_interval_ms: u64,
    #[serde(alias = "logSizeLimit")]
    pub entry_log_size_limit: u64,
    /// An entry log per ledger instead of one shared by all (deleted ledgers' logs then
    /// go whole, nothing compacted).
    #[serde(alias = "entryLogPerLedgerEnabled")]
    pub entry_log_per_ledger_enabled: bool,
    /// With a log per ledger: how many are open for writing at once.
    #[serde(alias = "maximumNumberOfActiveEntryLogs")]
    pub max_active_entry_logs: usize,
    /// With a log per ledger: a log not appended to for this long (s) is rotated.
    #[serde(alias = "entrylogMapAccessExpiryTimeInSeconds")]
    pub entry_log_access_expiry_s: u64,
    /// Entry logs written with direct I/O, past the page cache.
    #[serde(alias = "dbStorage_directIOEntryLogger")]
    pub entry_log_direct_io: bool,
    /// Bound on entries read ahead of catch-up readers (0: no read-ahead).
    pub read_ahead_cache_bytes: u64,
    /// Entries read ahead after a read that missed every cache.
    #[serde(alias = "dbStorage_readAheadCacheBatchSize")]
    pub read_ahead_batch_size: usize,
    pub write_cache_bytes: u64,
    /// Memory the index keeps of its pages (redb's cache).
    #[serde(alias = "dbStorage_rocksDB_blockCacheSize")]
    pub index_cache_bytes: u64,
    /// Flushes for room per index commit (Folio's own; at least 1): the flushes between
    /// commits stage their locations in memory.
    pub index_commit_flushes: usize,
    #[serde(alias = "nettyMaxFrameSizeBytes")]
    pub max_frame_size: usize,
    #[serde(alias = "maxPendingAddRequestsPerThread")]
    pub max_pending_adds: usize,
    #[serde(alias = "maxPendingReadRequestsPerThread")]
    pub max_pending_reads: usize,
    pub max_pending_requests_per_connection: usize,
    /// Folio's own: longest a long poll waits, whatever its request asks (ms).
    pub max_long_poll_timeout_ms: u64,
    /// Folio's own: long polls one connection may have waiting; beyond, ETOOMANYREQUESTS.
    pub max_long_polls_per_connection: usize,
    pub max_connections: usize,
    #[serde(alias = "numReadWorkerThreads")]
    pub read_threads: usize,
    #[serde(alias = "diskUsageThreshold")]
    pub disk_usage_threshold: f64,
    #[serde(alias = "diskUsageLwmThreshold")]
    pub disk_usage_lwm_threshold: f64,
    #[serde(alias = "diskCheckInterval")]
    pub disk_check_interval_ms: u64,
    #[serde(alias = "zkTimeout")]
    pub metadata_session_timeout_ms: u64,
    #[serde(alias = "gcWaitTime")]
    pub gc_wait_time_ms: u64,
    #[serde(alias = "minorCompactionThreshold")]
    pub minor_compaction_threshold: f64,
    #[serde(alias = "minorCompactionInterval")]
    pub minor_compaction_interval_s: u64,
    #[serde(alias = "majorCompactionThreshold")]
    pub major_compaction_threshold: f64,
    #[serde(alias = "majorCompactionInterval")]
    pub major_compaction_interval_s: u64,
    /// Run the Auditor candidate and a ReplicationWorker inside the bookie process (as
    /// `folio autorecovery` would). [autoRecoveryDaemonEnabled]
    #[serde(alias = "autoRecoveryDaemonEnabled")]
    pub auto_recovery_daemon_enabled: bool,
    /// Seconds between a bookie's loss and the audit of its ledgers, when the metadata
    /// store has no value yet. [lostBookieRecoveryDelay]
    #[serde(alias = "lostBookieRecoveryDelay")]
    pub lost_bookie_recovery_delay: u32,
    /// The embedded Auditor's periodic checks, in seconds (0 turns one off):
    /// checkAllLedgers [auditorPeriodicCheckInterval], the bookie check
    /// [auditorPeriodicBookieCheckInterval], the replicas check [auditorReplicasCheckInterval]
    /// and the placement policy check [auditorPeriodicPlacementPolicyCheckInterval].
    #[serde(alias = "auditorPeriodicCheckInterval")]
    pub auditor_periodic_check_interval_s: u64,
    #[serde(alias = "auditorPeriodicBookieCheckInterval")]
    pub auditor_periodic_bookie_check_interval_s: u64,
    #[serde(alias = "auditorReplicasCheckInterval")]
    pub auditor_replicas_check_interval_s: u64,
    #[serde(alias = "auditorPeriodicPlacementPolicyCheckInterval")]
    pub auditor_periodic_placement_policy_check_interval_s: u64,
    /// The network location published in the registration (property `rack`) for
    /// rack-aware placement by clients. BookKeeper has no such bookie key (its clients
    /// resolve racks with a script or DNS); Folio's clients read this property.
    pub rack: Option<String>,
    /// TLS on the bookie port (StartTLS) when set, whatever the class named (Folio always
    /// uses rustls). [tlsProviderFactoryClass]
    #[serde(alias = "tlsProviderFactoryClass")]
    pub tls_provider_factory_class: Option<String>,
    /// "PEM" (the only type Folio reads; JKS and PKCS12 are refused). [tlsKeyStoreType]
    #[serde(alias = "tlsKeyStoreType")]
    pub tls_key_store_type: Option<String>,
    /// PEM private key. [tlsKeyStore]
    #[serde(alias = "tlsKeyStore")]
    pub tls_key_store: Option<PathBuf>,
    /// The file holding the password of an encrypted (PKCS#8) private key.
    /// [tlsKeyStorePasswordPath]
    #[serde(alias = "tlsKeyStorePasswordPath")]
    pub tls_key_store_password_path: Option<PathBuf>,
    /// PEM certificate chain, leaf first. [tlsCertificatePath]
    #[serde(alias = "tlsCertificatePath")]
    pub tls_certificate_path: Option<PathBuf>,
    /// "PEM". [tlsTrustStoreType]
    #[serde(alias = "tlsTrustStoreType")]
    pub tls_trust_store_type: Option<String>,
    /// PEM CA bundle for client certificates. [tlsTrustStore]
    #[serde(alias = "tlsTrustStore")]
    pub tls_trust_store: Option<PathBuf>,
    /// Require client certificates (and refuse plaintext). [tlsClientAuthentication]
    #[serde(alias = "tlsClientAuthentication")]
    pub tls_client_authentication: bool,
    /// Comma-separated, of TLSv1.2 and TLSv1.3. [tlsEnabledProtocols]
    #[serde(alias = "tlsEnabledProtocols")]
    pub tls_enabled_protocols: Option<String>,
    /// Comma-separated cipher suite names. [tlsEnabledCipherSuites]
    #[serde(alias = "tlsEnabledCipherSuites")]
    pub tls_enabled_cipher_suites: Option<String>,
    /// Seconds between checks of the TLS files for changes; 0: never. [tlsCertFilesRefreshDurationSeconds]
    #[serde(alias = "tlsCertFilesRefreshDurationSeconds")]
    pub tls_cert_files_refresh_duration_seconds: u64,
    /// Seconds a connection may take to finish StartTLS. [startTLSTimeoutSecs]
    #[serde(alias = "startTLSTimeoutSecs")]
    pub start_tls_timeout_secs: u64,
    /// Only BookKeeper's BookieAuthZFactory is supported. [bookieAuthProviderFactoryClass]
    #[serde(alias = "bookieAuthProviderFactoryClass")]
    pub bookie_auth_provider_factory_class: Option<String>,
    /// Roles (client certificate OU) admitted at all. [authorizedRoles]
    #[serde(alias = "authorizedRoles", deserialize_with = "string_list")]
    pub authorized_roles: Vec<String>,
    /// Folio's own: roles allowed to read (reads, LAC, long polls, entry lists).
    #[serde(alias = "authorizedReadRoles", deserialize_with = "string_list")]
    pub authorized_read_roles: Vec<String>,
    /// Folio's own: roles allowed to add entries, write the LAC, force.
    #[serde(alias = "authorizedWriteRoles", deserialize_with = "string_list")]
    pub authorized_write_roles: Vec<String>,
    /// Folio's own: roles allowed to fence and to make recovery adds.
    #[serde(alias = "authorizedRecoveryRoles", deserialize_with = "string_list")]
    pub authorized_recovery_roles: Vec<String>,
}

impl Default for BookieConfig {
    fn default() -> Self {
        BookieConfig {
            metadata_service_uri: None,
            bookie_id: None,
            advertised_address: None,
            use_host_name_as_bookie_id: false,
            listen_address: "0.0.0.0".to_string(),
            port: 3181,
            http_port: None,
            http_listen_address: "127.0.0.1".to_string(),
            http_auth_token_file: None,
            http_ledger_read_enabled: false,
            http_tls_key_file: None,
            http_tls_certificate_file: None,
            http_tls_ca_file: None,
            data_dir: None,
            journal_dirs: Vec::new(),
            ledger_dirs: Vec::new(),
            index_dir: None,
            journal_max_group_wait_ms: 2,
            journal_buffered_writes_threshold: 2 * 1024 * 1024,
            journal_buffered_entries_threshold: 0,
            journal_flush_when_queue_empty: true,
            journal_max_size_mb: 2048,
            journal_pre_alloc_size_mb: 16,
            journal_remove_pages_from_cache: true,
            journal_direct_io: true,
            journal_force_write_thread: false,
            journal_sync_data: true,
            flush_interval_ms: 10_000,
            entry_log_size_limit: 1 << 30,
            entry_log_per_ledger_enabled: false,
            max_active_entry_logs: 500,
            entry_log_access_expiry_s: 300,
            entry_log_direct_io: true,
            read_ahead_cache_bytes: folio_storage::ledger_store::DEFAULT_READ_AHEAD_CACHE_BYTES,
            read_ahead_batch_size: 100,
            write_cache_bytes: 64 << 20,
            index_cache_bytes: folio_storage::index::DEFAULT_INDEX_CACHE_BYTES,
            index_commit_flushes: folio_storage::ledger_store::DEFAULT_INDEX_COMMIT_FLUSHES,
            max_frame_size: 5 * 1024 * 1024,
            max_pending_adds: 10_000,
            max_pending_reads: 10_000,
            max_pending_requests_per_connection: 1_000,
            max_long_poll_timeout_ms: 60_000,
            max_long_polls_per_connection: 500,
            max_connections: 4_096,
            read_threads: 8,
            disk_usage_threshold: 0.95,
            disk_usage_lwm_threshold: 0.90,
            disk_check_interval_ms: 10_000,
            metadata_session_timeout_ms: 10_000,
            gc_wait_time_ms: 600_000,
            minor_compaction_threshold: 0.2,
            minor_compaction_interval_s: 3600,
            major_compaction_threshold: 0.8,
            major_compaction_interval_s: 86_400,
            auto_recovery_daemon_enabled: false,
            lost_bookie_recovery_delay: 0,
            auditor_periodic_check_interval_s: 604_800,
            auditor_periodic_bookie_check_interval_s: 86_400,
            auditor_replicas_check_interval_s: 0,
            auditor_periodic_placement_policy_check_interval_s: 0,
            rack: None,
            tls_provider_factory_class: None,
            tls_key_store_type: None,
            tls_key_store: None,
            tls_key_store_password_path: None,
            tls_certificate_path: None,
            tls_trust_store_type: None,
            tls_trust_store: None,
            tls_client_authentication: false,
            tls_enabled_protocols: None,
            tls_enabled_cipher_suites: None,
            tls_cert_files_refresh_duration_seconds: 0,
            start_tls_timeout_secs: 10,
            bookie_auth_provider_factory_class: None,
            authorized_roles: Vec::new(),
            authorized_read_roles: Vec::new(),
            authorized_write_roles: Vec::new(),
            authorized_recovery_roles: Vec::new(),
        }
    }
}

/// Every key with its default, as `folio bookie --print-default-config` prints it. A test checks
/// that this text parses to exactly [`BookieConfig::default`].
pub const DEFAULT_CONFIG_TOML: &str = r#"# Folio bookie configuration. Every key is optional; the values shown are the defaults.
# BookKeeper's bk_server.conf names are accepted where the meaning is the same (in brackets).

# Metadata service URI (sqlite:///abs/path.db, zk://host:port/ledgers, etcd://host:port/prefix).
# The --metadata flag overrides it. [metadataServiceUri]
# metadata_service_uri = "zk://127.0.0.1:2181/ledgers"

# The bookie's id in the metadata store; default "<advertised address>:<port>". [bookieId]
# bookie_id = "bookie-1:3181"

# Host name or IP clients should connect to; default: this machine's host name. [advertisedAddress]
# advertised_address = "10.0.0.5"

# Without advertised_address, the id's host is this machine's host name instead of its
# address (`folio shell updatecookie -bookieId hostname|ip` and `updateledgers` move a
# bookie from one to the other). [useHostNameAsBookieID]
use_host_name_as_bookie_id = false

# Address the bookie port listens on.
listen_address = "0.0.0.0"

# The bookie port: BookKeeper's v3 and v2 wire protocols on one port. [bookiePort]
port = 3181

# Admin HTTP port (/heartbeat, /metrics, /api/v1/bookie/...); unset = no HTTP server. [httpServerPort]
# http_port = 8000

# Address the admin HTTP endpoint listens on: loopback unless set ("0.0.0.0" for every
# interface; then set http_auth_token_file, docs/security.md). [httpServerHost]
http_listen_address = "127.0.0.1"

# A file holding a bearer token (read at start; surrounding whitespace ignored; an empty or
# missing file is a start-up error). When set, every PUT/POST/DELETE and /api/v1/ledger/read
# need "Authorization: Bearer <token>", else 401; /heartbeat, /metrics and the status routes
# stay open.
# http_auth_token_file = "/etc/folio/admin-token"

# Serve /api/v1/ledger/read, which returns any ledger's payloads (opened with the password
# kept in the metadata store). Off: 403.
http_ledger_read_enabled = false

# HTTPS on the admin endpoint: its PEM private key and certificate chain (leaf first), both or
# neither; reloaded like the bookie port's files (tls_cert_files_refresh_duration_seconds).
# http_tls_key_file = "/etc/folio/tls/admin.key.pem"
# http_tls_certificate_file = "/etc/folio/tls/admin.chain.pem"
# The CA bundle (PEM) the dashboard trusts to read other bookies' HTTPS admin endpoints
# (host names verified); unset: tls_trust_store, if set.
# http_tls_ca_file = "/etc/folio/tls/ca.pem"

# One directory for everything: journal in DIR/journal, entry logs in DIR/ledgers, index in
# DIR/index. The --data-dir flag overrides it. Explicit directories below win over it.
# data_dir = "/var/lib/folio"

# Journal directories (one journal per directory; string or list). [journalDirectory]
journal_dirs = []

# Entry log directories (comma-separated string or list). [ledgerDirectories]
ledger_dirs = []

# Index directory; default: the first ledger directory's "index". [indexDirectories]
# index_dir = "/var/lib/folio/index"

# Write a journal group as soon as nothing else is queued: what arrives while a group is
# written and fdatasynced forms the next group, so groups grow with the load and no add
# waits for a timer. Folio's default is true, BookKeeper's false (its timer below).
# [journalFlushWhenQueueEmpty]
journal_flush_when_queue_empty = true

# With journal_flush_when_queue_empty = false: the longest a journal write waits for more
# writes to share its fdatasync (group commit), in ms. [journalMaxGroupWaitMSec]
journal_max_group_wait_ms = 2

# Bytes queued in the journal that close a group (written and synced at once). Folio's
# default is 2 MiB, BookKeeper's 512 KiB (docs/performance.md). [journalBufferedWritesThreshold]
journal_buffered_writes_threshold = 2097152

# Records queued in the journal that force a sync without waiting; 0 = no limit.
# [journalBufferedEntriesThreshold]
journal_buffered_entries_threshold = 0

# Journal file size at which a new file starts, in MiB. [journalMaxSizeMB]
journal_max_size_mb = 2048

# Zeroes written ahead of the journal's write offset, in MiB, so that group commits
# overwrite allocated blocks; 0 turns it off. [journalPreAllocSizeMB]
journal_pre_alloc_size_mb = 16

# Drop the journal's pages from the page cache once they are durable (it is read only at
# start-up). [journalRemovePagesFromCache]
journal_remove_pages_from_cache = true

# Write the journal with direct I/O (O_DIRECT, whole 4 KiB blocks), bypassing the page
# cache, where the file system supports it (tmpfs does not: then buffered, with a
# warning). Folio's own key; BookKeeper writes its journal through the page cache.
journal_direct_io = true

# A force-write thread per journal directory, as in BookKeeper: it fdatasyncs while the
# journal thread writes the next groups, and one fdatasync covers every group written
# meanwhile. Off (the default), the journal thread fdatasyncs after each group itself.
# Folio's own key; docs/performance.md says when it helped and when not.
journal_force_write_thread = false

# UNSAFE when false: acknowledge adds without an fdatasync of the journal (a power loss then
# loses acknowledged entries). For tests and benchmarks only. [journalSyncData]
journal_sync_data = true

# Interval between checkpoints (ledger store flush, journal mark), in ms. [flushInterval]
flush_interval_ms = 10000

# Entry log size at which a new entry log starts, in bytes. [logSizeLimit]
entry_log_size_limit = 1073741824

# An entry log per ledger instead of one shared by all ledgers: a deleted ledger's logs are then
# removed whole, with nothing for compaction to copy, at the price of an fdatasync per ledger
# written in each checkpoint. A ledger's log rotates when the client closes the ledger (BP-32
# write close), when it is fenced, after the access expiry below, or when more logs than the
# bound below are open. Logs written in either mode stay readable after a switch.
# [entryLogPerLedgerEnabled]
entry_log_per_ledger_enabled = false

# With a log per ledger: how many logs are open for writing at once; a new one rotates the least
# recently written. [maximumNumberOfActiveEntryLogs]
max_active_entry_logs = 500

# With a log per ledger: a log not written for this many seconds is rotated at the next
# checkpoint. [entrylogMapAccessExpiryTimeInSeconds]
entry_log_access_expiry_s = 300

# Write entry logs with direct I/O: a checkpoint's records go to the device from one aligned
# buffer instead of being copied into the page cache and written back from there (the larger
# part of a checkpoint's CPU: about half of the bookies' CPU per 64 KiB entry in a cluster, see
# docs/performance.md); reads of flushed entries then come from the device, not the page cache,
# the first time. On by default, unlike BookKeeper; off where the file system refuses direct
# I/O (tmpfs), with a warning. [dbStorage_directIOEntryLogger]
entry_log_direct_io = true

# Bound on entries read ahead of catch-up readers: a read that misses the caches also reads the
# ledger's following entries in the same read of the entry log (at most 128 KiB: entries of
# 64 KiB and more are read alone) and keeps them here for the reads that follow. 0 turns
# read-ahead off. A bookie that only serves writes and tailing reads never fills it.
# (BookKeeper's dbStorage_readAheadCacheMaxSizeMb, in bytes.)
read_ahead_cache_bytes = 16777216

# Entries read ahead after such a miss. [dbStorage_readAheadCacheBatchSize]
read_ahead_batch_size = 100

# Bound on entry bytes held in memory before they are flushed to the entry logs. A checkpoint
# starts when a quarter of it is unflushed (BookKeeper's flushes at half), so that what a bookie
# holds between checkpoints stays small and a burst has the rest while a slow flush runs.
write_cache_bytes = 67108864

# Memory the index keeps of its pages: those read, and those a flush is writing (redb's cache;
# the index file stays in the OS page cache besides). [dbStorage_rocksDB_blockCacheSize]
index_cache_bytes = 16777216

# Flushes of the write cache for room per index commit (Folio's own, no BookKeeper key): the
# flushes in between keep their entries' locations in memory (at most about 10 MiB of them,
# 40 MiB after sparse flushes) and
# the next commit writes them all, so that a bookie writing thousands of ledgers at once rewrites
# each ledger's index block once per several flushes rather than every flush. Reads find staged
# locations as they find committed ones. A staged flush is not durable: the journal's mark moves
# only at a commit, so a restart replays up to this many flushes more. Sparse flushes (fewer than
# 4 entries per ledger: thousands of ledgers written at once) commit 16 times less often, and a
# restart may replay 16 times as many (the periodic checkpoint, every flush_interval_ms, commits
# sooner). 1 commits every flush.
index_commit_flushes = 4

# Largest frame accepted on the bookie port, in bytes; a longer frame closes the connection.
# [nettyMaxFrameSizeBytes]
max_frame_size = 5242880

# Adds in flight in the whole bookie before new ones get ETOOMANYREQUESTS.
# [maxPendingAddRequestsPerThread]
max_pending_adds = 10000

# Reads in flight (long polls included) before new ones get ETOOMANYREQUESTS.
# [maxPendingReadRequestsPerThread]
max_pending_reads = 10000

# Requests one connection may have unanswered; beyond it the bookie stops reading that socket
# until responses drain (backpressure, not an error).
max_pending_requests_per_connection = 1000

# Longest a long poll (a read with a previous LAC and a timeout, as tailing readers send) waits,
# in ms, whatever timeout it asks for; then it is answered with the current LAC, as at its own
# timeout, and the client polls again. A waiting long poll holds no read slot.
max_long_poll_timeout_ms = 60000

# Long polls one connection may have waiting; more get ETOOMANYREQUESTS. Must be below
# max_pending_requests_per_connection (each waiting long poll is an unanswered request too).
# A closed connection's waiting long polls are dropped at once.
max_long_polls_per_connection = 500

# Connections served at once; further connections are closed at accept.
max_connections = 4096

# Threads serving reads, which may wait on disk. [numReadWorkerThreads]
read_threads = 8

# Fraction of a journal or ledger disk in use above which the bookie turns read-only (it keeps
# serving reads and recovery adds). [diskUsageThreshold]
disk_usage_threshold = 0.95

# Fraction in use below which a bookie read-only for a full disk becomes writable again (also
# after a journal write refused for lack of space; never after a failed fsync).
# [diskUsageLwmThreshold]
disk_usage_lwm_threshold = 0.90

# Interval between disk usage checks, in ms. [diskCheckInterval]
disk_check_interval_ms = 10000

# Metadata store session timeout, in ms. [zkTimeout]
metadata_session_timeout_ms = 10000

# Interval between garbage collection rounds, in ms: ledgers whose metadata is gone are deleted
# from this bookie, then entry logs holding only deleted ledgers are removed. A round can also be
# started with PUT /api/v1/bookie/gc. [gcWaitTime]
gc_wait_time_ms = 600000

# Entry logs whose live data is below this fraction are compacted (live entries copied out,
# the log removed) every minor_compaction_interval_s seconds, checked at a garbage collection
# round; 0 turns minor compaction off. [minorCompactionThreshold, minorCompactionInterval]
minor_compaction_threshold = 0.2
minor_compaction_interval_s = 3600

# The same with a higher threshold, less often; a forced round (PUT /api/v1/bookie/gc) runs it.
# [majorCompactionThreshold, majorCompactionInterval]
major_compaction_threshold = 0.8
major_compaction_interval_s = 86400

# Run autorecovery (an Auditor candidate and a ReplicationWorker) in this bookie's process, as
# `folio autorecovery` does on its own. [autoRecoveryDaemonEnabled]
auto_recovery_daemon_enabled = false

# Seconds the Auditor waits after one bookie disappears before marking its ledgers, used when
# the metadata store holds no value yet (`folio shell lostbookierecoverydelay -set` changes
# the cluster's). [lostBookieRecoveryDelay]
lost_bookie_recovery_delay = 0

# The embedded Auditor's periodic checks, in seconds (0 turns one off): checkAllLedgers asks
# the bookies for every ledger's copies and marks the missing ones; the bookie check audits
# the registered bookies; the replicas check does checkAllLedgers' work for closed ledgers
# and publishes BookKeeper's gauges of ledgers short of copies (Folio marks what it finds
# too); the placement policy check counts closed ledgers whose ensembles break rack-aware
# placement. [auditorPeriodicCheckInterval, auditorPeriodicBookieCheckInterval,
# auditorReplicasCheckInterval, auditorPeriodicPlacementPolicyCheckInterval]
auditor_periodic_check_interval_s = 604800
auditor_periodic_bookie_check_interval_s = 86400
auditor_replicas_check_interval_s = 0
auditor_periodic_placement_policy_check_interval_s = 0

# The bookie's network location, "/region/rack" (or "/rack"), published in its registration
# (property "rack") for clients doing rack-aware placement. The --rack flag overrides it.
# Folio-only: BookKeeper's bookies have no such key (its clients map addresses to racks with
# networkTopologyScriptFileName or DNS); a Folio client's rack_mapping_file wins over it.
# rack = "/region-a/rack-1"

# --- TLS (docs/security.md). The bookie port speaks BookKeeper's StartTLS: a client's v3
# START_TLS request upgrades the same connection. Files are PEM only (a JKS or PKCS12 store
# is refused: convert it to PEM).

# Setting this turns TLS on, whatever class it names. [tlsProviderFactoryClass]
# tls_provider_factory_class = "org.apache.bookkeeper.tls.TLSContextFactory"

# "PEM" (Folio's only type; unset means PEM). [tlsKeyStoreType, tlsTrustStoreType]
# tls_key_store_type = "PEM"
# tls_trust_store_type = "PEM"

# The bookie's private key and its certificate chain, leaf first. [tlsKeyStore, tlsCertificatePath]
# tls_key_store = "/etc/folio/tls/bookie.key.pem"
# tls_certificate_path = "/etc/folio/tls/bookie.chain.pem"

# The password of an encrypted private key (PKCS#8, "ENCRYPTED PRIVATE KEY"): the file's
# content, a trailing line ending ignored. [tlsKeyStorePasswordPath]
# tls_key_store_password_path = "/etc/folio/tls/bookie.key.password"

# CA bundle that client certificates must chain to. [tlsTrustStore]
# tls_trust_store = "/etc/folio/tls/clients-ca.pem"

# Require a client certificate from the trust store; then every request before a finished
# TLS handshake gets EUA and its connection closes (plaintext is refused). [tlsClientAuthentication]
tls_client_authentication = false

# Comma-separated; default both. [tlsEnabledProtocols]
# tls_enabled_protocols = "TLSv1.3,TLSv1.2"

# Comma-separated IANA (or Java) names; default rustls' set. [tlsEnabledCipherSuites]
# tls_enabled_cipher_suites = "TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"

# Every this many seconds (checked when a connection starts TLS) the key, chain and trust
# store are read again and, if they changed and are usable, used for new connections
# without a restart; 0 = never. [tlsCertFilesRefreshDurationSeconds]
tls_cert_files_refresh_duration_seconds = 0

# A connection that asked for StartTLS (or, with tls_client_authentication, any connection)
# and has not finished the handshake this many seconds later is closed. [startTLSTimeoutSecs]
start_tls_timeout_secs = 10

# Authorization by client certificate (needs tls_client_authentication). The roles of a
# certificate are in its subject's OU, BookKeeper's way: "0:role1,role2;1:cluster".
# Only "org.apache.bookkeeper.tls.BookieAuthZFactory" is supported. [bookieAuthProviderFactoryClass]
# bookie_auth_provider_factory_class = "org.apache.bookkeeper.tls.BookieAuthZFactory"

# A connection whose certificate has none of these roles is refused (EUA, closed);
# comma-separated string or list; empty: any certificate from the trust store. [authorizedRoles]
authorized_roles = []

# Folio's own, per kind of operation (empty: no further check): reads (reads, LAC, long
# polls, entry lists), writes (adds, explicit LAC, force), recovery (fencing reads and
# recovery adds; autorecovery needs it). A request whose kind the certificate lacks gets EUA;
# the connection stays open.
authorized_read_roles = []
authorized_write_roles = []
authorized_recovery_roles = []
"#;

/// A configuration as loaded, with the BookKeeper keys it set that Folio does not
/// implement (ignored; the caller warns once, naming them).
#[derive(Debug)]
pub struct LoadedConfig {
    pub config: BookieConfig,
    pub ignored: Vec<String>,
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid config file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl BookieConfig {
    /// Parses TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_path_buf(),
            message: e.to_string().trim().replace('\n', " "),
        })
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        Self::from_toml(&text, path)
    }

    /// Loads the configuration of `folio bookie`: `path` if given, as TOML or as
    /// BookKeeper's `bk_server.conf` (a Java properties file: by the extension `.conf`,
    /// `.properties` or `.cfg`, else when the text is not TOML), then the `BK_<key>`
    /// variables of `env` over it, as BookKeeper's container image applies them.
    pub fn load_with_env(
        path: Option<&Path>,
        env: &[(String, String)],
    ) -> Result<LoadedConfig, ConfigError> {
        let origin = path.unwrap_or(Path::new("environment"));
        let parse_err = |message: String| ConfigError::Parse {
            path: origin.to_path_buf(),
            message,
        };
        let mut settings = Vec::new();
        let mut table = toml::Table::new();
        if let Some(path) = path {
            let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
                path: path.to_path_buf(),
                error,
            })?;
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            let toml_table = match ext {
                "conf" | "properties" | "cfg" => None,
                "toml" => Some(
                    text.parse::<toml::Table>()
                        .map_err(|e| parse_err(e.to_string().trim().replace('\n', " ")))?,
                ),
                _ => text.parse::<toml::Table>().ok(),
            };
            match toml_table {
                // BookKeeper's names are accepted in TOML too; one name per field, so that
                // an environment override replaces whichever spelling the file used.
                Some(t) => {
                    for (k, v) in t {
                        let field = properties::FIELDS
                            .iter()
                            .find(|(bk, _)| *bk == k)
                            .map_or(k, |(_, f)| f.to_string());
                        table.insert(field, v);
                    }
                }
                None => {
                    settings =
                        properties::parse(&text, &path.display().to_string()).map_err(parse_err)?;
                }
            }
        }
        settings.extend(properties::env_settings(env));
        let translated = properties::translate(&settings).map_err(parse_err)?;
        table.extend(translated.table);
        let config: BookieConfig = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| parse_err(e.to_string().trim().replace('\n', " ")))?;
        Ok(LoadedConfig {
            config,
            ignored: translated.ignored.into_iter().collect(),
        })
    }

    /// The journal directories in effect (explicit ones, else `data_dir/journal`).
    pub fn effective_journal_dirs(&self) -> Vec<PathBuf> {
        match (&self.journal_dirs[..], &self.data_dir) {
            ([], Some(d)) => vec![d.join("journal")],
            (dirs, _) => dirs.to_vec(),
        }
    }

    /// The ledger directories in effect (explicit ones, else `data_dir/ledgers`).
    pub fn effective_ledger_dirs(&self) -> Vec<PathBuf> {
        match (&self.ledger_dirs[..], &self.data_dir) {
            ([], Some(d)) => vec![d.join("ledgers")],
            (dirs, _) => dirs.to_vec(),
        }
    }

    /// The index directory in effect.
    pub fn effective_index_dir(&self) -> Option<PathBuf> {
        if let Some(d) = &self.index_dir {
            return Some(d.clone());
        }
        if let Some(d) = &self.data_dir {
            return Some(d.join("index"));
        }
        self.effective_ledger_dirs()
            .first()
            .map(|d| d.join("index"))
    }

    /// Rejects impossible combinations, naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.effective_journal_dirs().is_empty() {
            return Err(ConfigError::Invalid(
                "no journal directory: set data_dir (--data-dir) or journal_dirs".into(),
            ));
        }
        if self.effective_ledger_dirs().is_empty() {
            return Err(ConfigError::Invalid(
                "no ledger directory: set data_dir (--data-dir) or ledger_dirs".into(),
            ));
        }
        if self.http_port.is_some_and(|h| h == self.port && h != 0) {
            return Err(ConfigError::Invalid(format!(
                "port and http_port are both {}: the bookie port and the admin HTTP port must differ",
                self.port
            )));
        }
        if self.write_cache_bytes < self.max_frame_size as u64 {
            return Err(ConfigError::Invalid(format!(
                "write_cache_bytes ({}) is below max_frame_size ({}): the largest entry the bookie \
                 accepts must fit in its write cache",
                self.write_cache_bytes, self.max_frame_size
            )));
        }
        if self.index_commit_flushes == 0 {
            return Err(ConfigError::Invalid(
                "index_commit_flushes is 0: at least 1 (1 commits the index at every flush)".into(),
            ));
        }
        if self.max_frame_size < 1024 {
            return Err(ConfigError::Invalid(format!(
                "max_frame_size {} is below 1024 bytes",
                self.max_frame_size
            )));
        }
        if self.http_tls_key_file.is_some() != self.http_tls_certificate_file.is_some() {
            return Err(ConfigError::Invalid(
                "http_tls_key_file and http_tls_certificate_file go together: set both for \
                 HTTPS on the admin endpoint, or neither"
                    .into(),
            ));
        }
        if self.max_long_polls_per_connection >= self.max_pending_requests_per_connection {
            return Err(ConfigError::Invalid(format!(
                "max_long_polls_per_connection ({}) must be below \
                 max_pending_requests_per_connection ({}): a connection whose unanswered \
                 requests are all waiting long polls would stop being read before any is refused",
                self.max_long_polls_per_connection, self.max_pending_requests_per_connection
            )));
        }
        let (t, lwm) = (self.disk_usage_threshold, self.disk_usage_lwm_threshold);
        if !(t > 0.0 && t <= 1.0 && lwm > 0.0 && lwm <= t) {
            return Err(ConfigError::Invalid(format!(
                "disk usage thresholds must satisfy 0 < disk_usage_lwm_threshold ({lwm}) <= \
                 disk_usage_threshold ({t}) <= 1"
            )));
        }
        if let Some(rack) = &self.rack
            && !valid_rack(rack)
        {
            return Err(ConfigError::Invalid(format!(
                "rack {rack:?} is not a network location like \"/region/rack\": it must start \
                 with '/' and hold no whitespace or empty segment"
            )));
        }
        for (key, v) in [
            ("max_pending_adds", self.max_pending_adds),
            ("max_pending_reads", self.max_pending_reads),
            (
                "max_pending_requests_per_connection",
                self.max_pending_requests_per_connection,
            ),
            ("max_connections", self.max_connections),
            (
                "max_long_polls_per_connection",
                self.max_long_polls_per_connection,
            ),
            (
                "max_long_poll_timeout_ms",
                self.max_long_poll_timeout_ms.min(usize::MAX as u64) as usize,
            ),
            ("read_threads", self.read_threads),
            ("gc_wait_time_ms", self.gc_wait_time_ms as usize),
            ("max_active_entry_logs", self.max_active_entry_logs),
        ] {
            if v == 0 {
                return Err(ConfigError::Invalid(format!("{key} must be at least 1")));
            }
        }
        for (key, v) in [
            (
                "minor_compaction_threshold",
                self.minor_compaction_threshold,
            ),
            (
                "major_compaction_threshold",
                self.major_compaction_threshold,
            ),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(ConfigError::Invalid(format!(
                    "{key} must be between 0 and 1 (a fraction of an entry log's bytes), not {v}"
                )));
            }
        }
        crate::tls::TlsSettings::from_config(self)
            .map_err(|e| ConfigError::Invalid(format!("TLS: {e}")))?;
        Ok(())
    }
}

pub use folio_types::rack::valid_rack;

/// A directory list: a TOML array, or BookKeeper's comma-separated string.
fn dir_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Dirs {
        One(String),
        Many(Vec<PathBuf>),
    }
    Ok(match Dirs::deserialize(d)? {
        Dirs::One(s) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect(),
        Dirs::Many(v) => v,
    })
}

/// A list of names: a TOML array, or BookKeeper's comma-separated string.
fn string_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Names {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Names::deserialize(d)? {
        Names::One(s) => crate::tls::split_list(&s),
        Names::Many(v) => v
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    })
}

/// One directory, also accepting a list (BookKeeper's indexDirectories) of which the first is used.
fn opt_first_dir<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    Ok(dir_list(d)?.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_defaults_are_the_defaults() {
        let parsed = BookieConfig::from_toml(DEFAULT_CONFIG_TOML, Path::new("default")).unwrap();
        assert_eq!(parsed, BookieConfig::default());
        assert_eq!(
            BookieConfig::from_toml("", Path::new("empty")).unwrap(),
            BookieConfig::default()
        );
    }

    #[test]
    fn every_key_is_documented() {
        let value = toml::Value::try_from(BookieConfig::default()).unwrap();
        for key in value.as_table().unwrap().keys() {
            assert!(
                DEFAULT_CONFIG_TOML.contains(&format!("{key} =")),
                "{key} is not in DEFAULT_CONFIG_TOML"
            );
        }
        // Keys without a default value (None) are documented as commented examples.
        for key in [
            "metadata_service_uri",
            "bookie_id",
            "advertised_address",
            "http_port",
            "http_auth_token_file",
            "http_tls_key_file",
            "http_tls_certificate_file",
            "http_tls_ca_file",
            "data_dir",
            "index_dir",
            "rack",
            "tls_provider_factory_class",
            "tls_key_store_type",
            "tls_key_store",
            "tls_key_store_password_path",
            "tls_certificate_path",
            "tls_trust_store_type",
            "tls_trust_store",
            "tls_enabled_protocols",
            "tls_enabled_cipher_suites",
            "bookie_auth_provider_factory_class",
        ] {
            assert!(DEFAULT_CONFIG_TOML.contains(&format!("# {key} =")), "{key}");
        }
    }

    #[test]
    fn a_rack_is_a_network_location() {
        let c = BookieConfig::from_toml("rack = \"/eu-1/r7\"", Path::new("r.toml")).unwrap();
        assert_eq!(c.rack.as_deref(), Some("/eu-1/r7"));
        for good in ["/r1", "/eu-1/r7"] {
            assert!(valid_rack(good), "{good}");
        }
        for bad in ["", "/", "r1", "/a//b", "/a/", "/a b"] {
            assert!(!valid_rack(bad), "{bad:?}");
            let c = BookieConfig {
                data_dir: Some("/d".into()),
                rack: Some(bad.into()),
                ..BookieConfig::default()
            };
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("rack"), "{e}");
        }
    }

    #[test]
    fn bookkeeper_names_are_accepted() {
        let text = r#"
            bookiePort = 4181
            journalDirectory = "/j"
            ledgerDirectories = "/l1, /l2"
            journalMaxGroupWaitMSec = 5
            journalFlushWhenQueueEmpty = false
            journalBufferedEntriesThreshold = 100
            journalPreAllocSizeMB = 4
            journalRemovePagesFromCache = false
            nettyMaxFrameSizeBytes = 1048576
            httpServerPort = 8080
            gcWaitTime = 30000
        "#;
        let c = BookieConfig::from_toml(text, Path::new("bk.toml")).unwrap();
        assert_eq!(c.port, 4181);
        assert_eq!(c.journal_dirs, vec![PathBuf::from("/j")]);
        assert_eq!(
            c.ledger_dirs,
            vec![PathBuf::from("/l1"), PathBuf::from("/l2")]
        );
        assert_eq!(c.journal_max_group_wait_ms, 5);
        assert!(
            !c.journal_flush_when_queue_empty,
            "BookKeeper's timer asked for"
        );
        assert_eq!(c.journal_buffered_entries_threshold, 100);
        assert!(BookieConfig::default().journal_flush_when_queue_empty);
        assert_eq!(c.journal_pre_alloc_size_mb, 4);
        assert!(!c.journal_remove_pages_from_cache);
        assert!(c.journal_direct_io, "on unless turned off");
        assert!(crate::engine::storage_config(&c).0.journal.direct_io);
        let off = BookieConfig::from_toml(
            "journal_direct_io = false\njournal_force_write_thread = true",
            Path::new("d.toml"),
        )
        .unwrap();
        let journal = |c: &BookieConfig| crate::engine::storage_config(c).0.journal;
        assert!(!journal(&off).direct_io);
        assert!(journal(&off).force_write_thread);
        assert!(!journal(&c).force_write_thread, "off unless turned on");
        assert!(
            !crate::engine::storage_config(&c)
                .0
                .journal
                .remove_pages_from_cache
        );
        assert_eq!(
            crate::engine::storage_config(&c).0.journal.prealloc_size,
            4 << 20
        );
        assert_eq!(c.max_frame_size, 1 << 20);
        assert_eq!(c.http_port, Some(8080));
        assert_eq!(c.gc_wait_time_ms, 30_000);
    }

    #[test]
    fn tls_keys_take_bookkeeper_names_and_role_lists() {
        let text = r#"
            data_dir = "/d"
            tlsProviderFactoryClass = "org.apache.bookkeeper.tls.TLSContextFactory"
            tlsKeyStoreType = "PEM"
            tlsKeyStore = "/tls/key.pem"
            tlsCertificatePath = "/tls/chain.pem"
            tlsTrustStoreType = "PEM"
            tlsTrustStore = "/tls/ca.pem"
            tlsClientAuthentication = true
            tlsEnabledProtocols = "TLSv1.3"
            tlsCertFilesRefreshDurationSeconds = 60
            startTLSTimeoutSecs = 3
            authorizedRoles = "app, ops"
            authorized_recovery_roles = ["ops"]
        "#;
        let c = BookieConfig::from_toml(text, Path::new("bk.toml")).unwrap();
        c.validate().unwrap();
        assert_eq!(c.authorized_roles, ["app", "ops"]);
        assert_eq!(c.authorized_recovery_roles, ["ops"]);
        let s = crate::tls::TlsSettings::from_config(&c).unwrap().unwrap();
        assert!(s.client_auth);
        assert_eq!(s.refresh, Some(std::time::Duration::from_secs(60)));
        assert_eq!(s.start_tls_timeout, std::time::Duration::from_secs(3));
        assert_eq!(s.protocols.len(), 1);
        assert_eq!(s.trust.as_deref(), Some(Path::new("/tls/ca.pem")));
        let jks = BookieConfig {
            tls_key_store_type: Some("JKS".into()),
            ..c
        };
        let e = jks.validate().unwrap_err().to_string();
        assert!(e.contains("tlsKeyStoreType") && e.contains("PEM"), "{e}");
    }

    #[test]
    fn compaction_keys_take_bookkeeper_names_and_thresholds_are_fractions() {
        let text = r#"
            minorCompactionThreshold = 0.1
            minorCompactionInterval = 60
            majorCompactionThreshold = 0.5
            majorCompactionInterval = 600
        "#;
        let c = BookieConfig::from_toml(text, Path::new("bk.toml")).unwrap();
        let p = crate::gc::CompactionPolicy::from_config(&c);
        assert_eq!((p.minor_threshold, p.minor_interval.as_secs()), (0.1, 60));
        assert_eq!((p.major_threshold, p.major_interval.as_secs()), (0.5, 600));
        let bad = BookieConfig {
            major_compaction_threshold: 80.0,
            data_dir: Some("/d".into()),
            ..BookieConfig::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("major_compaction_threshold"), "{e}");
    }

    #[test]
    fn cross_field_checks_name_both_keys() {
        let base = BookieConfig {
            data_dir: Some("/d".into()),
            ..BookieConfig::default()
        };
        let e = BookieConfig {
            http_port: Some(3181),
            ..base.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("port and http_port"), "{e}");
        let e = BookieConfig {
            write_cache_bytes: 1 << 20,
            ..base.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("write_cache_bytes") && e.contains("max_frame_size"),
            "{e}"
        );
        let e = BookieConfig {
            max_long_polls_per_connection: 1000,
            ..base.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("max_long_polls_per_connection")
                && e.contains("max_pending_requests_per_connection"),
            "{e}"
        );
        let e = BookieConfig {
            max_long_poll_timeout_ms: 0,
            ..base.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("max_long_poll_timeout_ms"), "{e}");
        let e = BookieConfig {
            index_commit_flushes: 0,
            ..base.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("index_commit_flushes is 0"), "{e}");
        base.validate().unwrap();
    }

    #[test]
    fn index_commit_flushes_reaches_the_ledger_store() {
        let c = BookieConfig::from_toml("index_commit_flushes = 2", Path::new("x.toml")).unwrap();
        assert_eq!(crate::engine::storage_config(&c).1.index_commit_flushes, 2);
        assert_eq!(
            crate::engine::storage_config(&BookieConfig::default())
                .1
                .index_commit_flushes,
            folio_storage::ledger_store::DEFAULT_INDEX_COMMIT_FLUSHES
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = BookieConfig::from_toml("prot = 1", Path::new("x.toml")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("x.toml") && msg.contains("prot"), "{msg}");
        let e = BookieConfig::from_toml("port = \"abc\"", Path::new("x.toml")).unwrap_err();
        assert!(e.to_string().contains("port"), "{e}");
    }

    #[test]
    fn data_dir_gives_the_directories_and_validation_names_what_is_missing() {
        let c = BookieConfig::default();
        assert!(c.validate().unwrap_err().to_string().contains("journal"));
        let c = BookieConfig {
            data_dir: Some("/data".into()),
            ..BookieConfig::default()
        };
        c.validate().unwrap();
        assert_eq!(
            c.effective_journal_dirs(),
            vec![PathBuf::from("/data/journal")]
        );
        assert_eq!(
            c.effective_ledger_dirs(),
            vec![PathBuf::from("/data/ledgers")]
        );
        assert_eq!(c.effective_index_dir(), Some(PathBuf::from("/data/index")));
        let c = BookieConfig {
            max_connections: 0,
            ..c
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("max_connections")
        );
    }
}
