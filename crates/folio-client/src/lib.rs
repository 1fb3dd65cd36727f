//! Folio's client.
pub mod coverage;
pub mod error;
pub mod pending;
pub mod recovery;
