//! Folio's metadata layer: the contract every metadata service driver implements
//! ([`MetadataStore`]), BookKeeper's serialization of the records it holds
//! ([`format`]), the metadata service URI ([`MetadataUri`]), and the embedded drivers.

pub mod error;
pub mod store;

pub use error::{MetadataError, Result};
pub use store::*;
