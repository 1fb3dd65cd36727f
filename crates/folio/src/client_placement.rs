//! The global `--rack-aware` and `--rack-mapping-file` flags (or `FOLIO_RACK_AWARE`,
//! `FOLIO_RACK_MAPPING_FILE`): rack-aware placement for every client a command builds, so
//! that new ledgers, a writer's ensemble changes and the replacement bookies that
//! autorecovery, `recover` and `decommissionbookie` pick spread each write set over racks,
//! as BookKeeper's `RackawareEnsemblePlacementPolicy` does (its rack source being a script,
//! `networkTopologyScriptFileName`; Folio's a mapping file, or the rack each bookie
//! publishes in its registration). `main` records the flags;
//! [`crate::client_tls::client_config`] applies them.

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Context;
use folio_client::ClientConfig;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct PlacementArgs {
    /// Rack-aware placement: spread every write set over racks, each bookie's rack being
    /// the one it publishes (its `rack` setting or `--rack`).
    #[arg(long = "rack-aware", global = true, env = "FOLIO_RACK_AWARE")]
    pub rack_aware: bool,
    /// A file mapping bookies to racks, one `host:port /region/rack` per line (re-read at
    /// every placement; a bookie it names gets its rack from here, the others from their
    /// registration); turns rack-aware placement on.
    #[arg(
        long = "rack-mapping-file",
        global = true,
        env = "FOLIO_RACK_MAPPING_FILE",
        value_name = "FILE"
    )]
    pub rack_mapping_file: Option<PathBuf>,
}

static ARGS: OnceLock<PlacementArgs> = OnceLock::new();

/// Records the flags (once, from `main`).
pub fn set(args: PlacementArgs) {
    let _ = ARGS.set(args);
}

/// `config` with the placement flags applied. A mapping file that cannot be read or
/// parsed is an error here, naming the file and the line, rather than a warning at each
/// placement (which goes on with the last good mapping) in a command just started.
pub fn apply(config: ClientConfig) -> anyhow::Result<ClientConfig> {
    let Some(args) = ARGS.get() else {
        return Ok(config);
    };
    if let Some(path) = &args.rack_mapping_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--rack-mapping-file: cannot read {}", path.display()))?;
        folio_client::ensemble::parse_rack_mapping(&text)
            .map_err(|e| anyhow::anyhow!("--rack-mapping-file {}: {e}", path.display()))?;
    }
    Ok(ClientConfig {
        rack_aware: config.rack_aware || args.rack_aware || args.rack_mapping_file.is_some(),
        rack_mapping_file: args.rack_mapping_file.clone().or(config.rack_mapping_file),
        ..config
    })
}
