//! Small rules every metadata driver applies the same way (mem://, sqlite://, and the zk://
//! and etcd:// crates): argument checks, the ledger-list page, the ledger-metadata bytes with
//! the ledger named in errors, the wall clock of under-replication marks, the
//! `lostBookieRecoveryDelay` text; and, for the networked drivers, the handles of a
//! session's ephemeral records ([`Ephemeral`], [`EphemeralRegistration`], [`EphemeralLock`],
//! [`EphemeralCandidacy`]). The rules on the contract's own methods are provided methods of
//! the manager traits (`crate::store`). One copy here
//! so the drivers cannot drift apart in what they accept or how they say no.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use folio_types::LedgerId;
use folio_types::metadata::LedgerMetadata;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use folio_types::BookieId;

use crate::{
    BookieMode, BookieRegistration, LeaderCandidacy, LedgerPage, MetadataError, Result,
    UnderreplicatedLedger, UnderreplicationLock, Version, Versioned, format,
};

/// Milliseconds since the Unix epoch (ctime of under-replication marks, leases).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Ledger ids are non-negative (BookKeeper's ids are Java longs, only `>= 0` are valid).
pub fn check_ledger_id(ledger: LedgerId) -> Result<()> {
    if ledger < 0 {
        return Err(MetadataError::InvalidArgument(format!(
            "ledger id {ledger} is negative"
        )));
    }
    Ok(())
}

/// An operation record's name: 1 to 100 of `[A-Za-z0-9._-]` (a znode, key or row name
/// in every driver), not `.` or `..`.
pub fn check_operation_name(name: &str) -> Result<()> {
    let ok = (1..=100).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name != "."
        && name != "..";
    if !ok {
        return Err(MetadataError::InvalidArgument(format!(
            "operation record name {name:?} must be 1 to 100 of A-Z a-z 0-9 . _ -"
        )));
    }
    Ok(())
}

/// A ledger list page needs room for at least one ledger.
pub fn check_page_limit(limit: usize) -> Result<()> {
    if limit == 0 {
        return Err(MetadataError::InvalidArgument(
            "list_ledgers needs a limit of at least 1".into(),
        ));
    }
    Ok(())
}

/// Builds a page from up to `limit + 1` ascending ids (the extra one says "more").
pub fn page(mut ids: Vec<LedgerId>, limit: usize) -> LedgerPage {
    let more = ids.len() > limit;
    ids.truncate(limit);
    let next = if more { ids.last().copied() } else { None };
    LedgerPage { ledgers: ids, next }
}

/// [`format::encode_ledger_metadata`], with the ledger named when the metadata is refused.
pub fn encode_ledger_metadata(ledger: LedgerId, metadata: &LedgerMetadata) -> Result<Vec<u8>> {
    format::encode_ledger_metadata(metadata).map_err(|e| match e {
        MetadataError::InvalidArgument(m) => {
            MetadataError::InvalidArgument(format!("metadata of ledger {ledger}: {m}"))
        }
        e => e,
    })
}

/// Publishes `value` to a watch unless it equals what the watchers already have (a
/// re-read after a reconnect must not wake them for nothing).
pub fn publish_if_changed<T: PartialEq>(tx: &tokio::sync::watch::Sender<T>, value: T) {
    tx.send_if_modified(|current| {
        let changed = *current != value;
        if changed {
            *current = value;
        }
        changed
    });
}

/// `lock_next_underreplicated` for a driver that lists the marks and then locks them one
/// at a time: the first of `marked` it can lock whose mark is still there once locked.
/// Marks locked by someone else, or replicated meanwhile, are skipped.
pub async fn lock_first_marked<L, LF, G, GF>(
    marked: Vec<LedgerId>,
    try_lock: L,
    get: G,
) -> Result<Option<(UnderreplicatedLedger, Box<dyn UnderreplicationLock>)>>
where
    L: Fn(LedgerId) -> LF,
    LF: Future<Output = Result<Option<Box<dyn UnderreplicationLock>>>>,
    G: Fn(LedgerId) -> GF,
    GF: Future<Output = Result<Option<UnderreplicatedLedger>>>,
{
    for id in marked {
        let lock = match try_lock(id).await {
            Ok(Some(lock)) => lock,
            Ok(None) | Err(MetadataError::NotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        match get(id).await? {
            Some(mark) => return Ok(Some((mark, lock))),
            // Replicated by someone else between the listing and our lock.
            None => lock.release().await?,
        }
    }
    Ok(None)
}

/// What an under-replication mark is called in errors.
pub fn underreplicated_what(ledger: LedgerId) -> String {
    format!("under-replication mark of ledger {ledger}")
}

/// How a networked driver deletes the ephemeral records of its own session (bookie
/// registrations, under-replication locks, Auditor votes), for [`Ephemeral`] and the
/// lock and candidacy built on it.
#[async_trait]
pub trait EphemeralOwner: Send + Sync + std::fmt::Debug + 'static {
    /// Deletes `name` now if it is still this session's; one already gone is fine.
    async fn delete_ephemeral(&self, name: &str, what: &str) -> Result<()>;

    /// Deletes `name` without waiting (from a `Drop`); failures are ignored, since the
    /// session's end deletes it anyway.
    fn delete_ephemeral_later(self: Arc<Self>, name: String);

    /// Removes the under-replication mark of `ledger` if it is still at `seen`, the version
    /// its lock's holder read when it took the lock (what the holder does once the ledger is
    /// replicated). A mark changed since (re-marked with another lost bookie while the
    /// repair ran) or already gone is left alone, without an error: BookKeeper's
    /// `markLedgerReplicated` deletes with the version seen at lock time and ignores
    /// BadVersion and NoNode, so that a re-mark made during the work survives.
    async fn remove_underreplicated_at(&self, ledger: LedgerId, seen: Version) -> Result<()>;
}

/// One ephemeral record of a session: deleted by [`Ephemeral::delete`], or in the
/// background when dropped undeleted.
#[derive(Debug)]
pub struct Ephemeral<O: EphemeralOwner> {
    owner: Arc<O>,
    name: Option<String>,
}

impl<O: EphemeralOwner> Ephemeral<O> {
    pub fn new(owner: Arc<O>, name: String) -> Self {
        Ephemeral {
            owner,
            name: Some(name),
        }
    }

    pub fn owner(&self) -> &Arc<O> {
        &self.owner
    }

    /// Makes `name` the record this handle deletes, returning the one it held (the caller
    /// deletes that itself, e.g. after creating its replacement).
    pub fn replace(&mut self, name: String) -> Option<String> {
        self.name.replace(name)
    }

    /// Deletes the record now (once; later calls do nothing).
    pub async fn delete(&mut self, what: &str) -> Result<()> {
        match self.name.take() {
            Some(name) => self.owner.delete_ephemeral(&name, what).await,
            None => Ok(()),
        }
    }
}

impl<O: EphemeralOwner> Drop for Ephemeral<O> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            self.owner.clone().delete_ephemeral_later(name);
        }
    }
}

/// Parses BookKeeper's `lostBookieRecoveryDelay` record (seconds as decimal text), read at
/// `version`.
pub fn decode_recovery_delay(data: &[u8], version: Version) -> Result<Versioned<u32>> {
    let s = String::from_utf8_lossy(data);
    s.trim()
        .parse::<u32>()
        .map(|value| Versioned { value, version })
        .map_err(|_| {
            MetadataError::corrupt(
                "lostBookieRecoveryDelay",
                format!("{s:?} is not a number of seconds"),
            )
        })
}

/// How a networked driver writes a bookie's registration as an ephemeral record of its
/// session, for [`EphemeralRegistration`].
#[async_trait]
pub trait RegistrationOwner: EphemeralOwner {
    /// Writes the registration of `bookie` in `mode` (BookKeeper's `available/<id>` or
    /// `available/readonly/<id>`) holding `data`, ephemeral; returns the record's name as
    /// [`EphemeralOwner::delete_ephemeral`] takes it.
    async fn put_registration(
        &self,
        bookie: &BookieId,
        mode: BookieMode,
        data: &[u8],
    ) -> Result<String>;
}

/// A bookie's registration held as an ephemeral record of the session.
#[derive(Debug)]
pub struct EphemeralRegistration<O: RegistrationOwner> {
    bookie: BookieId,
    mode: BookieMode,
    data: Vec<u8>,
    node: Ephemeral<O>,
}

impl<O: RegistrationOwner> EphemeralRegistration<O> {
    /// The registration `name` (written by the driver) of `bookie` in `mode`, holding `data`.
    pub fn new(
        owner: Arc<O>,
        bookie: BookieId,
        mode: BookieMode,
        data: Vec<u8>,
        name: String,
    ) -> Self {
        EphemeralRegistration {
            bookie,
            mode,
            data,
            node: Ephemeral::new(owner, name),
        }
    }

    fn what(&self) -> String {
        format!("registration of bookie {}", self.bookie)
    }
}

#[async_trait]
impl<O: RegistrationOwner> BookieRegistration for EphemeralRegistration<O> {
    fn bookie_id(&self) -> &BookieId {
        &self.bookie
    }

    fn mode(&self) -> BookieMode {
        self.mode
    }

    async fn set_mode(&mut self, mode: BookieMode) -> Result<()> {
        if mode == self.mode {
            return Ok(());
        }
        let owner = self.node.owner().clone();
        // The new record first, then the old one deleted: never absent (BookKeeper's order).
        let name = owner
            .put_registration(&self.bookie, mode, &self.data)
            .await?;
        if let Some(old) = self.node.replace(name) {
            owner.delete_ephemeral(&old, &self.what()).await?;
        }
        self.mode = mode;
        Ok(())
    }

    async fn unregister(mut self: Box<Self>) -> Result<()> {
        let what = self.what();
        self.node.delete(&what).await
    }
}

/// An under-replication lock held as an ephemeral record of the session, with the version
/// of the mark seen when it was taken.
#[derive(Debug)]
pub struct EphemeralLock<O: EphemeralOwner> {
    ledger: LedgerId,
    mark_version: Version,
    node: Ephemeral<O>,
}

impl<O: EphemeralOwner> EphemeralLock<O> {
    /// `mark_version` is the mark's version read before the lock record was created
    /// (BookKeeper reads it with `exists` before `create`): a re-mark between the two makes
    /// `mark_replicated` keep the mark, which costs one more repair and loses nothing.
    pub fn new(owner: Arc<O>, ledger: LedgerId, mark_version: Version, name: String) -> Self {
        EphemeralLock {
            ledger,
            mark_version,
            node: Ephemeral::new(owner, name),
        }
    }

    async fn unlock(&mut self) -> Result<()> {
        let what = format!("under-replication lock of ledger {}", self.ledger);
        self.node.delete(&what).await
    }
}

#[async_trait]
impl<O: EphemeralOwner> UnderreplicationLock for EphemeralLock<O> {
    fn ledger_id(&self) -> LedgerId {
        self.ledger
    }

    async fn release(mut self: Box<Self>) -> Result<()> {
        self.unlock().await
    }

    async fn mark_replicated(mut self: Box<Self>) -> Result<()> {
        self.node
            .owner()
            .remove_underreplicated_at(self.ledger, self.mark_version)
            .await?;
        self.unlock().await
    }
}

/// A vote in the Auditor election held as an ephemeral record of the session, with the
/// task that follows the election and publishes `leadership`.
#[derive(Debug)]
pub struct EphemeralCandidacy<O: EphemeralOwner> {
    vote: Ephemeral<O>,
    leader_tx: Arc<watch::Sender<bool>>,
    leader_rx: watch::Receiver<bool>,
    campaign: JoinHandle<()>,
}

impl<O: EphemeralOwner> EphemeralCandidacy<O> {
    /// `campaign` follows the election and sends on `leader_tx` (its receiver is
    /// `leader_rx`); it is stopped when the candidacy resigns or is dropped.
    pub fn new(
        owner: Arc<O>,
        vote: String,
        leader_tx: Arc<watch::Sender<bool>>,
        leader_rx: watch::Receiver<bool>,
        campaign: JoinHandle<()>,
    ) -> Self {
        EphemeralCandidacy {
            vote: Ephemeral::new(owner, vote),
            leader_tx,
            leader_rx,
            campaign,
        }
    }

    fn stop_campaign(&self) {
        self.campaign.abort();
        self.leader_tx.send_replace(false);
    }
}

#[async_trait]
impl<O: EphemeralOwner> LeaderCandidacy for EphemeralCandidacy<O> {
    fn leadership(&self) -> watch::Receiver<bool> {
        self.leader_rx.clone()
    }

    async fn resign(mut self: Box<Self>) -> Result<()> {
        self.stop_campaign();
        self.vote.delete("the Auditor vote").await
    }
}

impl<O: EphemeralOwner> Drop for EphemeralCandidacy<O> {
    fn drop(&mut self) {
        // The vote itself is deleted when `self.vote` drops, right after this.
        self.stop_campaign();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_cause() {
        let e = check_ledger_id(-3).unwrap_err();
        assert!(e.to_string().contains("-3"), "{e}");
        assert!(check_ledger_id(0).is_ok());
        assert!(matches!(
            check_page_limit(0),
            Err(MetadataError::InvalidArgument(_))
        ));
        assert!(check_page_limit(1).is_ok());
    }

    /// Records what the handles ask of their session.
    #[derive(Debug, Default)]
    struct Recorder(parking_lot::Mutex<Vec<String>>);

    #[async_trait]
    impl EphemeralOwner for Recorder {
        async fn delete_ephemeral(&self, name: &str, what: &str) -> Result<()> {
            self.0.lock().push(format!("delete {name} ({what})"));
            Ok(())
        }

        fn delete_ephemeral_later(self: Arc<Self>, name: String) {
            self.0.lock().push(format!("delete later {name}"));
        }

        async fn remove_underreplicated_at(&self, ledger: LedgerId, seen: Version) -> Result<()> {
            self.0
                .lock()
                .push(format!("remove mark {ledger} at {}", seen.raw()));
            Ok(())
        }
    }

    #[tokio::test]
    async fn ephemerals_are_deleted_once_now_or_on_drop() {
        let owner = Arc::new(Recorder::default());
        let mut e = Ephemeral::new(owner.clone(), "a".into());
        e.delete("x").await.unwrap();
        e.delete("x").await.unwrap();
        drop(e);
        let mut e = Ephemeral::new(owner.clone(), "b".into());
        assert_eq!(e.replace("c".into()).as_deref(), Some("b"));
        drop(e);
        let lock: Box<dyn UnderreplicationLock> = Box::new(EphemeralLock::new(
            owner.clone(),
            7,
            Version::from_raw(3),
            "l".into(),
        ));
        assert_eq!(lock.ledger_id(), 7);
        lock.mark_replicated().await.unwrap();
        let (tx, rx) = watch::channel(true);
        let vote = EphemeralCandidacy::new(
            owner.clone(),
            "v".into(),
            Arc::new(tx),
            rx,
            tokio::spawn(std::future::pending()),
        );
        let leadership = vote.leadership();
        drop(vote);
        assert!(!*leadership.borrow());
        assert_eq!(
            *owner.0.lock(),
            [
                "delete a (x)",
                "delete later c",
                "remove mark 7 at 3",
                "delete l (under-replication lock of ledger 7)",
                "delete later v",
            ]
        );
    }

    #[test]
    fn unchanged_values_wake_no_watcher() {
        let (tx, mut rx) = tokio::sync::watch::channel(1);
        rx.mark_unchanged();
        publish_if_changed(&tx, 1);
        assert!(!rx.has_changed().unwrap());
        publish_if_changed(&tx, 2);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 2);
    }

    #[test]
    fn pages_say_whether_more_follow() {
        let p = page(vec![1, 2, 3], 2);
        assert_eq!((p.ledgers, p.next), (vec![1, 2], Some(2)));
        let p = page(vec![1, 2], 2);
        assert_eq!((p.ledgers, p.next), (vec![1, 2], None));
    }
}
