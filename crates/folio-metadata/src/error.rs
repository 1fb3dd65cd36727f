//! The one error type of the metadata contract. Every driver maps its own failures
//! onto these variants, so callers (client, bookie, autorecovery) can react to the
//! cause (a lost CAS race, a missing record, an unreachable service) without knowing
//! which store is behind the `Arc<dyn MetadataStore>`. Every message names the cause.

/// Errors of every [`crate::MetadataStore`] operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// The record does not exist. `what` names it: "ledger 7", "cookie of bookie
    /// 10.0.0.1:3181", "cluster (not initialised)".
    #[error("no such {what}")]
    NotFound { what: String },

    /// A compare-and-set lost: the record's version is not the expected one (somebody
    /// else wrote it in between). Carries no value: re-read to learn the current one.
    #[error(
        "version conflict on {what}: it was changed by someone else (expected version {expected})"
    )]
    BadVersion { what: String, expected: String },

    /// A create found the record already there.
    #[error("{what} already exists")]
    AlreadyExists { what: String },

    /// The metadata service cannot be reached (connection refused, timed out, the
    /// database file cannot be opened).
    #[error("metadata service at {address} is unreachable: {reason}")]
    Unreachable { address: String, reason: String },

    /// A stored record could not be decoded. `what` names the record ("metadata of ledger 7").
    #[error("corrupt {what}: {reason}")]
    Corrupt { what: String, reason: String },

    /// A metadata service URI that cannot be parsed.
    #[error("invalid metadata URI {uri:?}: {reason}")]
    InvalidUri { uri: String, reason: String },

    /// An argument the store refuses (an invalid ledger id, metadata breaking its own
    /// invariants, an empty bookie list).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The session (ZooKeeper session, etcd lease, sqlite lease) this client holds has
    /// expired or was closed: its registrations, locks and votes are gone.
    #[error("metadata session expired or closed")]
    SessionExpired,

    /// This driver does not provide the operation (e.g. BookKeeper's etcd driver has
    /// no under-replication manager).
    #[error("{what} is not supported by the {driver} metadata driver")]
    Unsupported { what: String, driver: String },

    /// Any other failure of the underlying store, with its own message.
    #[error("metadata store error: {0}")]
    Internal(String),
}

impl MetadataError {
    pub fn not_found(what: impl Into<String>) -> Self {
        MetadataError::NotFound { what: what.into() }
    }

    pub fn already_exists(what: impl Into<String>) -> Self {
        MetadataError::AlreadyExists { what: what.into() }
    }

    pub fn bad_version(what: impl Into<String>, expected: crate::Version) -> Self {
        MetadataError::BadVersion {
            what: what.into(),
            expected: expected.to_string(),
        }
    }

    pub fn corrupt(what: impl Into<String>, reason: impl Into<String>) -> Self {
        MetadataError::Corrupt {
            what: what.into(),
            reason: reason.into(),
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, MetadataError::NotFound { .. })
    }

    pub fn is_bad_version(&self) -> bool {
        matches!(self, MetadataError::BadVersion { .. })
    }

    pub fn is_already_exists(&self) -> bool {
        matches!(self, MetadataError::AlreadyExists { .. })
    }
}

/// The result of every metadata operation.
pub type Result<T, E = MetadataError> = std::result::Result<T, E>;
