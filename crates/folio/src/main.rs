//! The `folio` binary: parses the command line (the contract of DESIGN.md section 4),
//! wires the real implementations of the seams, and runs one subcommand. Each
//! subcommand lives in its own module; this file only dispatches.

mod autorecovery_cmd;
mod bench;
mod bookie_cmd;
mod client_placement;
mod client_tls;
mod ledger_cmd;
mod metadata_connect;
mod payload;
mod progress;
mod shell;
mod shell_autorecovery;
mod shell_bookie_id;
mod shell_cookie;
mod shell_entry_logs;
mod shell_ledger;
mod shell_local;
mod standalone;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's malloc: a loaded bookie allocates and frees a few small
/// buffers and futures per request on every runtime thread, and glibc's arenas spent
/// 10-12% of both CPUs on it (`perf` of 3 bookies and `folio bench write` at 100 B and 128
/// in flight; docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "folio",
    version,
    about = "Folio: Apache BookKeeper, rebuilt in Rust"
)]
struct Cli {
    /// Metadata service URI: sqlite:///abs/path/metadata.db, zk://host:port[,host:port]/ledgers
    /// or etcd://host:port[,host:port]/prefix.
    #[arg(long, global = true, env = "FOLIO_METADATA")]
    metadata: Option<String>,

    /// TLS to bookies (DESIGN.md section 4): --tls-ca, --tls-cert, --tls-key.
    #[command(flatten)]
    tls: client_tls::TlsArgs,

    /// Rack-aware placement for every client: --rack-aware, --rack-mapping-file.
    #[command(flatten)]
    placement: client_placement::PlacementArgs,

    /// Log level on stderr (error, warn, info, debug, trace); FOLIO_LOG, a full filter such as
    /// "folio_bookie=debug,info", wins. Default: warn for servers, error for client commands.
    #[arg(long, global = true, value_name = "LEVEL", env = "FOLIO_LOG_LEVEL")]
    log_level: Option<tracing::Level>,

    /// Log format on stderr: text, or json (one object per line, for log shippers).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "FOLIO_LOG_FORMAT")]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the version and exit.
    Version,
    /// Run one bookie: --metadata URI --data-dir DIR [--port P] [--http-port P] [--config FILE].
    Bookie(bookie_cmd::BookieArgs),
    /// The Auditor and the ReplicationWorker: --metadata URI [--id HOST:PORT].
    #[command(name = "autorecovery")]
    AutoRecovery(autorecovery_cmd::AutoRecoveryArgs),
    /// A whole cluster in one process: sqlite metadata in --data-dir and N bookies.
    Standalone(standalone::StandaloneArgs),
    /// Ledgers: write, read, tail, list, meta, delete.
    Ledger(ledger_cmd::LedgerArgs),
    /// BookKeeper's shell commands (listbookies, listledgers, ledgermetadata, ...).
    Shell(shell::ShellArgs),
    /// Benchmarks: throughput and latency percentiles (DESIGN.md section 7).
    Bench(bench::BenchArgs),
    /// Print a shell completion script: folio completions bash|zsh|fish|elvish|powershell.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of folio, or of one subcommand: folio man [SUBCOMMAND].
    Man { subcommand: Option<String> },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

/// Generated from the same definition the parser uses, so they never drift.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    use clap::CommandFactory;
    clap_complete::generate(shell, &mut Cli::command(), "folio", &mut std::io::stdout());
    Ok(())
}

fn man(subcommand: Option<&str>) -> anyhow::Result<()> {
    use clap::CommandFactory;
    let root = Cli::command();
    let page = match subcommand {
        None => root,
        Some(name) => root
            .find_subcommand(name)
            .cloned()
            // The page's title; a one-shot command, so the leak is one short string.
            .map(|c| c.name(&*Box::leak(format!("folio-{name}").into_boxed_str())))
            .ok_or_else(|| anyhow::anyhow!("no subcommand {name:?} (try `folio --help`)"))?,
    };
    clap_mangen::Man::new(page).render(&mut std::io::stdout())?;
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    // Servers log warnings; client commands keep stderr for their one-line error (a client
    // retrying a bookie is not news), unless FOLIO_LOG asks for more.
    let default_level = match cli.command {
        Command::Bookie(_) | Command::Standalone(_) | Command::AutoRecovery(_) => "warn",
        _ => "error",
    };
    let level = cli
        .log_level
        .map_or(default_level.to_string(), |l| l.to_string().to_lowercase());
    let filter = tracing_subscriber::EnvFilter::try_from_env("FOLIO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    client_tls::set(cli.tls.clone());
    client_placement::set(cli.placement.clone());
    let result: anyhow::Result<()> = match cli.command {
        Command::Version => {
            println!("folio {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::Bookie(args) => bookie_cmd::run(cli.metadata, args),
        Command::Standalone(args) => standalone::run(cli.metadata.as_deref(), args),
        Command::AutoRecovery(args) => autorecovery_cmd::run(cli.metadata.as_deref(), args),
        Command::Ledger(args) => ledger_cmd::run(args, cli.metadata.as_deref()),
        Command::Shell(args) => shell::run(args, cli.metadata.as_deref()),
        Command::Bench(args) => bench::run(args, cli.metadata),
        Command::Completions { shell } => completions(shell),
        Command::Man { subcommand } => man(subcommand.as_deref()),
    };
    if let Err(e) = result {
        // One line on stderr that names the cause, and a non-zero status (DESIGN.md section 4).
        eprintln!("folio: {}", one_line(&e));
        std::process::exit(1);
    }
}

/// The error and its causes on one line, as anyhow's `{:#}` writes them, but without a
/// cause the message before it already spells out: many of the library errors name their
/// cause in their own message and give it as their source too, which printed every cause
/// two or three times ("storage: cannot open the ledger store: X: cannot open the ledger
/// store: X: X").
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if line.contains(&cause) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;
    use std::fmt;

    /// An error whose message is `text` followed (if `spell`) by its cause's, and which
    /// also gives that cause as its source, as thiserror's `#[error("...: {0}")]` with
    /// `#[from]` does.
    #[derive(Debug)]
    struct Layer {
        text: &'static str,
        spell: bool,
        cause: Option<Box<Layer>>,
    }

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.text)?;
            match &self.cause {
                Some(c) if self.spell => write!(f, ": {c}"),
                _ => Ok(()),
            }
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.cause.as_deref().map(|c| c as _)
        }
    }

    fn layer(text: &'static str, spell: bool, cause: Option<Layer>) -> Layer {
        Layer {
            text,
            spell,
            cause: cause.map(Box::new),
        }
    }

    #[test]
    fn each_cause_is_named_once() {
        let root = layer("index directory holds no index", false, None);
        let store = layer("cannot open the ledger store", true, Some(root));
        let node = layer("storage", true, Some(store));
        let e = anyhow::Error::new(node);
        assert_eq!(
            one_line(&e),
            "storage: cannot open the ledger store: index directory holds no index"
        );
        // A cause the message does not spell out is still appended, as `{:#}` does.
        let io = layer("disk gone", false, None);
        let e = anyhow::Error::new(layer("cannot read it", false, Some(io)))
            .context("cannot start the bookie");
        assert_eq!(
            one_line(&e),
            "cannot start the bookie: cannot read it: disk gone"
        );
    }
}
