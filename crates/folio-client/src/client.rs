//! The client: a metadata store session plus connections to bookies. It creates, opens
//! (with or without recovery), deletes and lists ledgers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use folio_env::{Clock, Rng, SystemClock, SystemRng};
use folio_metadata::{MetadataStore, Versioned};
use folio_proto::{DigestManager, master_key};
use folio_types::metadata::{DigestType, LedgerMetadata};
use folio_types::quorum::QuorumConfig;
use folio_types::{EntryId, LedgerId};

use crate::config::ClientConfig;
use crate::conn::{Bookies, Connector, TcpConnector};
use crate::ensemble::{RACK_PROPERTY, Racks, choose_ensemble, parse_rack_mapping};
use crate::error::{ClientError, Result};
use crate::ledger::LedgerHandle;
use crate::reader::ReadHandle;
use crate::recover::recover;

/// What a new ledger looks like. Defaults: ensemble 3, write quorum 2, ack quorum 2,
/// CRC32 digest (BookKeeper's defaults), empty password, no custom metadata.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub ensemble_size: usize,
    pub write_quorum: usize,
    pub ack_quorum: usize,
    pub digest_type: DigestType,
    pub password: Vec<u8>,
    pub custom_metadata: BTreeMap<String, Vec<u8>>,
    /// Caller-chosen entry ids (BookKeeper's `createLedgerAdv`): append with
    /// [`LedgerHandle::append_with_id`]; the LAC advances over the contiguous prefix.
    pub adv: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            ensemble_size: 3,
            write_quorum: 2,
            ack_quorum: 2,
            digest_type: DigestType::Crc32,
            password: Vec::new(),
            custom_metadata: BTreeMap::new(),
            adv: false,
        }
    }
}

impl CreateOptions {
    /// Ensemble, write quorum and ack quorum sizes.
    pub fn quorum(mut self, ensemble: usize, write: usize, ack: usize) -> Self {
        self.ensemble_size = ensemble;
        self.write_quorum = write;
        self.ack_quorum = ack;
        self
    }

    pub fn digest(mut self, digest_type: DigestType) -> Self {
        self.digest_type = digest_type;
        self
    }

    pub fn password(mut self, password: impl Into<Vec<u8>>) -> Self {
        self.password = password.into();
        self
    }

    pub fn custom(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.custom_metadata.insert(key.into(), value.into());
        self
    }

    pub fn adv(mut self, adv: bool) -> Self {
        self.adv = adv;
        self
    }
}

/// Shared by the client and every handle it made.
pub(crate) struct Inner {
    pub metadata: Arc<dyn MetadataStore>,
    pub bookies: Bookies,
    pub config: Arc<ClientConfig>,
    pub rng: Arc<dyn Rng>,
    pub clock: Arc<dyn Clock>,
    pub stats: Stats,
    /// The last rack mapping file that read and parsed well (see [`Inner::racks`]).
    pub rack_mapping: parking_lot::Mutex<Racks>,
    /// Bookies that are not Folio bookies and left a GetListOfEntriesOfLedger unanswered,
    /// with when to ask them again (see `Client::entries_on_bookie`).
    pub no_entry_lists:
        parking_lot::Mutex<std::collections::BTreeMap<folio_types::BookieId, std::time::Instant>>,
}

/// Counters kept by a client (read with [`Client::stats`]).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub speculative_reads: AtomicU64,
    pub speculative_read_wins: AtomicU64,
    pub speculative_long_polls: AtomicU64,
    pub unanswered_long_polls: AtomicU64,
}

/// What a client has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Reads sent to a further replica because the previous one had not answered within
    /// [`ClientConfig::speculative_read_timeout`].
    pub speculative_reads: u64,
    /// Entries whose verified answer came from a replica asked speculatively.
    pub speculative_read_wins: u64,
    /// Long polls sent to a further bookie because the previous one had not answered
    /// within [`ClientConfig::speculative_read_lac_timeout`].
    ///
    /// [`ClientConfig::speculative_read_lac_timeout`]: crate::ClientConfig::speculative_read_lac_timeout
    pub speculative_long_polls: u64,
    /// Long polls that no bookie answered with an LAC: each one asked failed (all of
    /// them down, or, on a ledger none of them holds an entry of yet, NoLedger: at once
    /// from BookKeeper's bookies, at the wait's end from Folio's). After one that ends
    /// before the wait does, the reader pauses, longer while it lasts (up to 100 ms),
    /// rather than asking again at once.
    pub unanswered_long_polls: u64,
}

impl Inner {
    /// The ledger's metadata and its version, a metadata error said as the client's.
    pub(crate) async fn read_ledger(
        &self,
        ledger: LedgerId,
    ) -> Result<folio_metadata::Versioned<folio_types::metadata::LedgerMetadata>> {
        self.metadata
            .read_ledger(ledger)
            .await
            .map_err(|e| ClientError::from_metadata(ledger, e))
    }

    /// `ensemble` with its `failed` positions given to writable bookies now, neither in
    /// the ensemble nor in `excluded`, by the placement policy (rack-aware when the
    /// client is): the one choice of replacements for a writer's ensemble change,
    /// recovery's and autorecovery's.
    pub(crate) async fn replacements(
        &self,
        ensemble: &[folio_types::BookieId],
        write_quorum: usize,
        failed: &std::collections::BTreeMap<usize, folio_types::BookieId>,
        excluded: &std::collections::BTreeSet<folio_types::BookieId>,
    ) -> Result<Vec<folio_types::BookieId>> {
        let bookies = self.metadata.list_bookies().await?;
        let racks = self.racks(&bookies.writable).await?;
        crate::ensemble::replace_bookies(
            ensemble,
            write_quorum,
            failed,
            &bookies.writable,
            excluded,
            &racks,
            self.rng.as_ref(),
        )
        .map_err(|e| e.counting_read_only(&bookies))
    }

    /// The racks of `bookies`, when rack-aware placement is on: from the rack mapping
    /// file for the bookies it names, else from the `rack` property of their registration
    /// (bookies with neither, or whose registration cannot be read, have none).
    ///
    /// The file is re-read at every placement so that an operator's edit takes effect; a
    /// file that cannot be read or parsed now (say, half written) is logged and the last
    /// good mapping is used, as BookKeeper falls back rather than failing a writer over
    /// its topology. A bad file at [`Client::connect`] is an error.
    pub(crate) async fn racks(
        &self,
        bookies: &std::collections::BTreeSet<folio_types::BookieId>,
    ) -> Result<Racks> {
        let mut racks = Racks::new();
        if !self.config.rack_aware {
            return Ok(racks);
        }
        let mapped = match &self.config.rack_mapping_file {
            Some(path) => match load_rack_mapping(path) {
                Ok(m) => {
                    *self.rack_mapping.lock() = m.clone();
                    m
                }
                Err(e) => {
                    tracing::warn!("{e}; placing with the last good rack mapping");
                    self.rack_mapping.lock().clone()
                }
            },
            None => Racks::new(),
        };
        for b in bookies {
            if let Some(rack) = mapped.get(b) {
                racks.insert(b.clone(), rack.clone());
            } else if let Ok(info) = self.metadata.bookie_service_info(b).await
                && let Some(rack) = info.properties.get(RACK_PROPERTY)
            {
                racks.insert(b.clone(), rack.clone());
            }
        }
        Ok(racks)
    }
}

/// Reads and parses a rack mapping file; the error names the file (and the line).
fn load_rack_mapping(path: &std::path::Path) -> Result<Racks> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ClientError::InvalidArgument(format!(
            "cannot read the rack mapping file {}: {e}",
            path.display()
        ))
    })?;
    parse_rack_mapping(&text).map_err(|e| {
        ClientError::InvalidArgument(format!("bad rack mapping file {}: {e}", path.display()))
    })
}

/// A Folio (BookKeeper) client.
///
/// ```no_run
/// # async fn demo(metadata: std::sync::Arc<dyn folio_metadata::MetadataStore>) -> folio_client::Result<()> {
/// use folio_client::{Client, ClientConfig, CreateOptions, OpenOptions};
///
/// let client = Client::connect(metadata, ClientConfig::default()).await?;
/// let writer = client
///     .create_ledger(CreateOptions::default().quorum(3, 2, 2).password("secret"))
///     .await?;
/// // Appends pipeline: start many, then await them; they complete in entry order.
/// let first = writer.append("hello");
/// let second = writer.append("world");
/// assert_eq!((first.await?, second.await?), (0, 1));
/// writer.close().await?;
///
/// let reader = client
///     .open_ledger(writer.id(), b"secret", OpenOptions::recovery())
///     .await?;
/// for entry in reader.read(0, reader.last_add_confirmed()).await? {
///     println!("{}: {:?}", entry.entry_id, entry.payload);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("metadata", &self.inner.metadata.uri())
            .finish()
    }
}

/// How to open a ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// Fence and recover the ledger (and close it) if it is not closed. Without it the
    /// ledger is read as it is: only up to the LAC known when asked.
    pub recovery: bool,
}

impl OpenOptions {
    /// Open with recovery: fences the writer, recovers the tail and closes the ledger.
    pub fn recovery() -> Self {
        OpenOptions { recovery: true }
    }

    /// Open without recovery, for tailing a ledger that is still being written.
    pub fn no_recovery() -> Self {
        OpenOptions { recovery: false }
    }
}

/// The wire layer's name for a ledger's digest type.
pub fn proto_digest(d: DigestType) -> folio_proto::DigestType {
    match d {
        DigestType::Crc32 => folio_proto::DigestType::Crc32,
        DigestType::Mac => folio_proto::DigestType::Mac,
        DigestType::Crc32c => folio_proto::DigestType::Crc32c,
        DigestType::Dummy => folio_proto::DigestType::Dummy,
    }
}

impl Client {
    /// A client over `metadata`, reaching bookies by TCP, with the system clock and
    /// OS-seeded randomness.
    pub async fn connect(metadata: Arc<dyn MetadataStore>, config: ClientConfig) -> Result<Client> {
        // A rack mapping file that is wrong from the start is the caller's error, said now.
        let mapping = match &config.rack_mapping_file {
            Some(path) if config.rack_aware => load_rack_mapping(path)?,
            _ => Racks::new(),
        };
        let client = Client::with_seams(
            metadata,
            config,
            Arc::new(TcpConnector),
            Arc::new(SystemRng::new()),
            Arc::new(SystemClock),
        );
        *client.inner.rack_mapping.lock() = mapping;
        Ok(client)
    }

    /// A client over the metadata service at `uri` (`sqlite:///path.db`, `zk://host:2181/ledgers`,
    /// `etcd://host:2379/prefix`, `mem://name`), connected through the one URI-to-driver
    /// registry (`folio_metadata::registry`). The embedded drivers are built in; for `zk://`
    /// and `etcd://` call `folio_metadata_zk::register()` / `folio_metadata_etcd::register()`
    /// once first (an unregistered scheme is an error saying so).
    pub async fn from_uri(uri: &str, config: ClientConfig) -> Result<Client> {
        let metadata = folio_metadata::registry::connect(
            uri,
            folio_metadata::registry::ConnectOptions::default(),
        )
        .await?;
        Client::connect(metadata, config).await
    }

    /// A client with explicit seams (network, randomness, clock), for simulation.
    pub fn with_seams(
        metadata: Arc<dyn MetadataStore>,
        config: ClientConfig,
        connector: Arc<dyn Connector>,
        rng: Arc<dyn Rng>,
        clock: Arc<dyn Clock>,
    ) -> Client {
        let config = Arc::new(config);
        Client {
            inner: Arc::new(Inner {
                metadata,
                bookies: Bookies::new(connector, config.clone()),
                config,
                rng,
                clock,
                stats: Stats::default(),
                rack_mapping: parking_lot::Mutex::new(Racks::new()),
                no_entry_lists: parking_lot::Mutex::default(),
            }),
        }
    }

    /// What this client has done so far (speculative reads).
    pub fn stats(&self) -> ClientStats {
        let s = &self.inner.stats;
        ClientStats {
            speculative_reads: s.speculative_reads.load(Ordering::Relaxed),
            speculative_read_wins: s.speculative_read_wins.load(Ordering::Relaxed),
            speculative_long_polls: s.speculative_long_polls.load(Ordering::Relaxed),
            unanswered_long_polls: s.unanswered_long_polls.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The shared state, for work that outlives the call (a spawned task).
    pub(crate) fn inner_arc(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// The metadata store this client uses.
    pub fn metadata(&self) -> &Arc<dyn MetadataStore> {
        &self.inner.metadata
    }

    /// The clock this client stamps ledgers with (simulated under the simulator): also
    /// for the wall-clock times its users write into the metadata store.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The racks this client places `bookies` by (empty unless rack-aware placement is
    /// on): for the Auditor's placement policy check.
    pub async fn racks_of(
        &self,
        bookies: &std::collections::BTreeSet<folio_types::BookieId>,
    ) -> Result<crate::ensemble::Racks> {
        self.inner.racks(bookies).await
    }

    /// Creates a ledger on a random ensemble of writable bookies and returns its writer.
    /// Fails with [`ClientError::NotEnoughBookies`] if fewer than E bookies are writable.
    pub async fn create_ledger(&self, opts: CreateOptions) -> Result<LedgerHandle> {
        let quorum = QuorumConfig::new(opts.ensemble_size, opts.write_quorum, opts.ack_quorum)
            .map_err(ClientError::InvalidArgument)?;
        let inner = &self.inner;
        let bookies = inner.metadata.list_bookies().await?;
        let racks = inner.racks(&bookies.writable).await?;
        let ensemble = choose_ensemble(
            quorum.ensemble_size,
            quorum.write_quorum,
            &bookies.writable,
            &racks,
            inner.rng.as_ref(),
        )
        .map_err(|e| e.counting_read_only(&bookies))?;
        let mut meta =
            LedgerMetadata::new_open(quorum, ensemble, opts.digest_type, opts.password.clone());
        meta.custom_metadata = opts.custom_metadata.clone();
        meta.ctime = Some(inner.clock.unix_millis() as i64);
        meta.c_token = (inner.rng.next_u64() >> 1) as i64;
        let mut attempts = 0;
        let (ledger, version) = loop {
            let id = inner.metadata.generate_ledger_id().await?;
            match inner.metadata.create_ledger(id, &meta).await {
                Ok(v) => break (id, v),
                // Someone holds this id (e.g. one created by hand): take another.
                Err(e) if e.is_already_exists() && attempts < inner.config.metadata_retries => {
                    attempts += 1;
                }
                Err(e) => return Err(e.into()),
            }
        };
        tracing::debug!(ledger, ensemble = ?meta.ensembles, "created ledger");
        Ok(LedgerHandle::spawn(
            self.inner.clone(),
            ledger,
            Versioned {
                value: meta,
                version,
            },
            opts.password,
            opts.adv,
        ))
    }

    /// Opens a ledger for reading. With [`OpenOptions::recovery`] an open ledger is
    /// fenced, its tail recovered and the ledger closed (anyone writing it then fails with
    /// [`ClientError::Fenced`]); a wrong password fails before anything is fenced.
    pub async fn open_ledger(
        &self,
        ledger: LedgerId,
        password: &[u8],
        opts: OpenOptions,
    ) -> Result<ReadHandle> {
        let inner = &self.inner;
        let mut meta = inner.read_ledger(ledger).await?;
        meta.value
            .validate()
            .map_err(|reason| ClientError::MetadataConflict { ledger, reason })?;
        if let Some(pw) = &meta.value.password
            && pw.as_slice() != password
        {
            return Err(ClientError::Unauthorized {
                ledger,
                bookie: None,
            });
        }
        let digest = DigestManager::new(ledger, proto_digest(meta.value.digest_type), password);
        let key = master_key(password);
        if opts.recovery && !meta.value.is_closed() {
            meta = recover(inner, ledger, &digest, &key).await?;
            // Recovery closed it: the bookies' logs for it may rotate (best effort).
            crate::write_close::send(inner, ledger, key, &meta.value);
        }
        let handle = ReadHandle::new(self.inner.clone(), ledger, meta, digest);
        if !handle.is_closed() {
            // Without recovery the reader starts at the LAC the bookies know now. Where too
            // few answer to cover every ack quorum it starts at what the metadata proves
            // (before the last fragment) and may ask again: BookKeeper fails the open
            // instead, which leaves a reader nothing to read even the entries it could.
            let _ = handle.read_last_add_confirmed().await;
        }
        Ok(handle)
    }

    /// Deletes a ledger's metadata (bookies garbage-collect its entries later).
    pub async fn delete_ledger(&self, ledger: LedgerId) -> Result<()> {
        self.inner
            .metadata
            .delete_ledger(ledger, None)
            .await
            .map_err(|e| ClientError::from_metadata(ledger, e))
    }

    /// Every ledger id, ascending.
    pub async fn list_ledgers(&self) -> Result<Vec<LedgerId>> {
        Ok(folio_metadata::all_ledger_ids(self.inner.metadata.as_ref()).await?)
    }

    /// A ledger's metadata as stored now.
    pub async fn ledger_metadata(&self, ledger: LedgerId) -> Result<LedgerMetadata> {
        Ok(self.inner.read_ledger(ledger).await?.value)
    }

    /// Drops every bookie connection. Handles made by this client fail afterwards
    /// only if they need a connection again (they reconnect).
    pub fn close(&self) {
        self.inner.bookies.close_all();
    }
}

/// The highest entry id every reader may trust without asking bookies: the last entry of
/// a closed ledger, or the entry before the last fragment of an open one (the writer
/// started that fragment at its LAC + 1).
pub(crate) fn metadata_lac(meta: &LedgerMetadata) -> EntryId {
    if meta.is_closed() {
        return meta.last_entry_id;
    }
    meta.current_ensemble()
        .map(|(start, _)| start - 1)
        .unwrap_or(-1)
}
