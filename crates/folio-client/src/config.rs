//! Client settings, with BookKeeper's `ClientConfiguration` defaults where one exists
//! (spec/bookkeeper-protocol.md section 7.1).

use std::time::Duration;

/// Settings of a [`crate::Client`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// How long a bookie may take to answer one add before it is replaced by an ensemble
    /// change (`addEntryTimeoutSec`). Default: 5 s.
    pub add_entry_timeout: Duration,
    /// How long an entry may wait for its ack quorum before the writer fails with a
    /// timeout (`addEntryQuorumTimeoutSec`). Default: none.
    pub add_entry_quorum_timeout: Option<Duration>,
    /// How long a bookie may take to answer a read (`readEntryTimeoutSec`). Default: 5 s.
    pub read_timeout: Duration,
    /// When a replica has not answered a read of an entry for this long, the same read
    /// also goes to the next replica of the entry's write set and the first valid answer
    /// wins (`speculativeReadTimeout`). Zero disables speculative reads. Default: 2 s.
    pub speculative_read_timeout: Duration,
    /// A long poll (`ReadHandle::wait_for_lac_beyond`) asks one bookie; when it has not
    /// answered for this long, the next bookie is asked too and the first answer that moves
    /// the LAC wins (`firstSpeculativeReadLACTimeout`). A bookie that fails is followed by
    /// the next at once. Zero asks every bookie of the ensemble at once. Default: 1.5 s.
    pub speculative_read_lac_timeout: Duration,
    /// TCP connect timeout (`clientConnectTimeoutMillis`). Default: 10 s.
    pub connect_timeout: Duration,
    /// After a failed connection, requests to that bookie fail at once for this long
    /// before the next attempt, doubling up to [`ClientConfig::max_reconnect_backoff`].
    /// Default: 100 ms.
    pub reconnect_backoff: Duration,
    /// Upper bound of the reconnect backoff. Default: 5 s.
    pub max_reconnect_backoff: Duration,
    /// When the writer has been idle this long with an LAC the bookies have not seen
    /// piggybacked, it sends the LAC explicitly (`explicitLacInterval`). Default: none.
    pub explicit_lac_interval: Option<Duration>,
    /// How many ensemble changes one writer may make. Default: 50.
    pub max_ensemble_changes: u32,
    /// Keep writing to the surviving bookies of the ensemble while every entry can still
    /// reach its ack quorum, and replace failed bookies only when one cannot
    /// (`delayEnsembleChange`). Entries acknowledged meanwhile have `Qa` copies, not `Qw`.
    /// Default: false.
    pub delay_ensemble_change: bool,
    /// Rack-aware placement: read each writable bookie's `rack` property (from its
    /// registration) and spread write sets over racks. Default: false (random placement).
    pub rack_aware: bool,
    /// With rack-aware placement, a file mapping bookies to racks, one `host:port rack`
    /// per line (see [`crate::ensemble::parse_rack_mapping`]); read at every placement, and
    /// a bookie it names gets its rack from here rather than from the `rack` property of
    /// its registration. BookKeeper's analogue is `networkTopologyScriptFileName` (a
    /// script). Default: none.
    pub rack_mapping_file: Option<std::path::PathBuf>,
    /// Largest frame accepted from a bookie (`nettyMaxFrameSizeBytes`). Default: 5 MiB.
    pub max_frame_size: usize,
    /// Entries read in parallel by a range read. Default: 32.
    pub read_parallelism: usize,
    /// Attempts at a metadata compare-and-set that keeps losing to unrelated updates.
    /// Default: 10.
    pub metadata_retries: u32,
    /// TLS to every bookie (StartTLS, hostname verification always on); `None`: plaintext.
    /// Default: none.
    pub tls: Option<crate::tls::ClientTls>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            add_entry_timeout: Duration::from_secs(5),
            add_entry_quorum_timeout: None,
            read_timeout: Duration::from_secs(5),
            speculative_read_timeout: Duration::from_millis(2000),
            speculative_read_lac_timeout: Duration::from_millis(1500),
            connect_timeout: Duration::from_secs(10),
            reconnect_backoff: Duration::from_millis(100),
            max_reconnect_backoff: Duration::from_secs(5),
            explicit_lac_interval: None,
            max_ensemble_changes: 50,
            delay_ensemble_change: false,
            rack_aware: false,
            rack_mapping_file: None,
            max_frame_size: folio_proto::DEFAULT_MAX_FRAME_SIZE,
            read_parallelism: 32,
            metadata_retries: 10,
            tls: None,
        }
    }
}
