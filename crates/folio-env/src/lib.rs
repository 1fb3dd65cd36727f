//! The seams between Folio's logic and the world.
//!
//! Nothing in `folio-storage`, `folio-bookie`, `folio-client` or `folio-autorecovery`
//! reads the system clock, opens a file or draws randomness except through the traits
//! here, so that the simulator can run the real code on a simulated clock and a disk
//! that loses what was never synced. This crate holds the real implementations; the
//! simulated disk lives behind the `sim` feature.

pub mod aligned;
pub mod clock;
pub mod fs;
pub mod metric_label;
pub mod op_stats;
pub mod rand;
#[cfg(feature = "sim")]
pub mod sim;

pub use aligned::{AlignedBuf, DIRECT_IO_ALIGN};
pub use clock::{Clock, SystemClock};
pub use fs::{DiskSpace, File, FileLock, FileSystem, OpenOptions, RealFileSystem};
pub use rand::{Rng, SystemRng};

use std::sync::Arc;

/// The seams a component needs, bundled so they travel together.
#[derive(Clone)]
pub struct Env {
    pub clock: Arc<dyn Clock>,
    pub fs: Arc<dyn FileSystem>,
    pub rng: Arc<dyn Rng>,
}

impl Env {
    /// The real world: system clock, real files, OS-seeded randomness.
    pub fn real() -> Self {
        Env {
            clock: Arc::new(SystemClock),
            fs: Arc::new(RealFileSystem),
            rng: Arc::new(SystemRng::new()),
        }
    }
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Env")
    }
}
