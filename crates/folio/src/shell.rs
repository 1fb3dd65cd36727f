//! `folio shell <command>`: BookKeeper's shell commands, under their BookKeeper
//! names. This module holds the metadata commands (`initnewcluster`, `listbookies`,
//! `listledgers`, `ledgermetadata`, `whatisinstanceid`, `listunderreplicated`,
//! `whoisauditor`, `lostbookierecoverydelay`, `autorecovery`, `cookie_get`); output
//! lines follow BookKeeper's shell where it has a fixed shape (`ledgerID: 7`).
//!
//! The ledger data commands (`readledger`, `simpletest`, `deleteledger`, `bookiesanity`)
//! live in `shell_ledger`; the commands on a bookie's local directories (`readjournal`,
//! `readlog`, `lastmark`, `bookieformat`) in `shell_local`; `updatecookie` and
//! `updateledgers` in `shell_bookie_id`; `readlogmetadata`, `activeledgers` and
//! `localconsistencycheck` in `shell_entry_logs`. The metadata store is reached through `metadata_connect`, so
//! every scheme works here.

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use folio_metadata::{MetadataError, MetadataStore};
use folio_types::LedgerId;
use folio_types::metadata::LedgerMetadata;

use crate::metadata_connect::{self, Missing};
use crate::{
    shell_autorecovery, shell_bookie_id, shell_cookie, shell_entry_logs, shell_ledger, shell_local,
};

#[derive(Args, Debug)]
pub struct ShellArgs {
    #[command(subcommand)]
    command: ShellCommand,
}

#[derive(Subcommand, Debug)]
enum ShellCommand {
    /// Initialise a new cluster's metadata (layout and instance id).
    #[command(name = "initnewcluster")]
    InitNewCluster,
    /// List the registered bookies (writable by default).
    #[command(name = "listbookies")]
    ListBookies {
        /// List read-only bookies instead (BookKeeper: -ro).
        #[arg(long, visible_alias = "ro", conflicts_with = "all")]
        readonly: bool,
        /// List writable and read-only bookies (BookKeeper: -a).
        #[arg(long, visible_alias = "a")]
        all: bool,
        /// Writable bookies (the default; BookKeeper: -rw).
        #[arg(long, visible_alias = "rw", hide = true)]
        readwrite: bool,
        /// BookKeeper's single-dash spellings: -rw, -ro, -a (also -readwrite, -readonly, -all).
        #[arg(allow_hyphen_values = true, hide = true)]
        bookkeeper_flags: Vec<String>,
    },
    /// List every ledger id.
    #[command(name = "listledgers")]
    ListLedgers,
    /// Print a ledger's metadata: `ledgermetadata <id>` or `ledgermetadata -ledgerid <id>`.
    #[command(name = "ledgermetadata")]
    LedgerMetadata {
        /// The ledger id, alone or after -ledgerid / --ledgerid / -l.
        #[arg(allow_hyphen_values = true, num_args = 1..=2, required = true)]
        args: Vec<String>,
    },
    /// Print the cluster's instance id.
    #[command(name = "whatisinstanceid")]
    WhatIsInstanceId,
    /// List under-replicated ledgers: [-mr BOOKIE] [-emr BOOKIE] [-pmr] [-prw] [-c].
    #[command(name = "listunderreplicated")]
    ListUnderreplicated {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Print the elected Auditor.
    #[command(name = "whoisauditor")]
    WhoIsAuditor,
    /// The cluster at a glance, as BookKeeper's cluster-info prints it (JSON).
    #[command(name = "clusterinfo")]
    ClusterInfo,
    /// What a bookie published in its registration: -bookieid <id>.
    #[command(name = "endpointinfo")]
    EndpointInfo {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Ask the Auditor for an audit now.
    #[command(name = "triggeraudit")]
    TriggerAudit,
    /// Make the Auditor's periodic checks due now: [-calc] [-ppc] [-rc] (checkAllLedgers,
    /// placement policy, replicas).
    #[command(name = "forceauditchecks")]
    ForceAuditChecks {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Which under-replicated ledgers are being repaired now: [-v].
    #[command(name = "queryautorecoverystatus")]
    QueryAutoRecoveryStatus {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Copy every replica held by bookies elsewhere: [-l L] [-sk] [-d] [-rate N] <bookie[,bookie...]>.
    #[command(name = "recover")]
    Recover {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Move every replica off a stopped bookie and delete its cookie: -bookieid <id>.
    #[command(name = "decommissionbookie")]
    DecommissionBookie {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Make every ledger naming a stopped bookie name another id instead (metadata only):
    /// -srcBookie B -destBookie B [-updatespersec N] [-limit N] [-verbose].
    #[command(name = "updateBookieInLedger", alias = "updatebookieinledger")]
    UpdateBookieInLedger {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Get (-get) or set (-set <seconds>) the delay before lost bookies' ledgers are re-replicated.
    #[command(name = "lostbookierecoverydelay")]
    LostBookieRecoveryDelay {
        #[arg(allow_hyphen_values = true, required = true)]
        flags: Vec<String>,
    },
    /// Enable (-enable), disable (-disable) or show (-status) autorecovery cluster-wide.
    #[command(name = "autorecovery")]
    AutoRecovery {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Print a ledger's entries: -ledgerid <id> [-firstentryid N] [-lastentryid N] [-force-recovery] [-msg].
    #[command(name = "readledger")]
    ReadLedger {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Write entries to a new ledger and read them back: [-ensemble E] [-writeQuorum Qw] [-ackQuorum Qa] [-numEntries N].
    #[command(name = "simpletest")]
    SimpleTest {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Delete a ledger: -ledgerid <id> [-force].
    #[command(name = "deleteledger")]
    DeleteLedger {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Every bookie's free and total disk space and the cluster's totals.
    #[command(name = "bookieinfo")]
    BookieInfo {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Write and read entries on one bookie: [-bookie host:port] [-entries N] [-timeout S].
    #[command(name = "bookiesanity")]
    BookieSanity {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Print the records of a bookie's journal files: [-datadir DIR | -conf FILE | -dir JOURNALDIR] [-msg] [<journal id> | <file>].
    #[command(name = "readjournal")]
    ReadJournal {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Print the records of an entry log: [-datadir DIR | -conf FILE] [-ledgerid L] [-entryid E] [-msg] <entry log id | file>.
    #[command(name = "readlog")]
    ReadLog {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// List the bookie's journal, entry log and index files: [-datadir DIR | -conf FILE] [-txn] [-log] [-idx].
    #[command(name = "listfilesondisc")]
    ListFilesOnDisc {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Print each journal directory's last log mark: [-datadir DIR | -conf FILE].
    #[command(name = "lastmark")]
    LastMark {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Delete a stopped bookie's data: [-datadir DIR | -conf FILE] [-nonInteractive] [-force] [-deleteCookie].
    #[command(name = "bookieformat")]
    BookieFormat {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Move a stopped bookie's cookie between its address- and host-name-based ids
    /// (-bookieId hostname|ip), add new ledger/index directories to it (-expandstorage),
    /// list it (-list) or delete it (-delete [force]): [-datadir DIR | -conf FILE].
    #[command(name = "updatecookie")]
    UpdateCookie {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Make every ledger name a bookie by its host-name-based (-bookieId hostname) or
    /// address-based (-bookieId ip) id: [-updatespersec N] [-limit N] [-verbose] [-printprogress S] [-conf FILE].
    #[command(name = "updateledgers")]
    UpdateLedgers {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Read back every entry the bookie's index lists from its entry log; name those that
    /// fail: [-datadir DIR | -conf FILE].
    #[command(name = "localconsistencycheck")]
    LocalConsistencyCheck {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// The ledgers of an entry log that still exist in the metadata: -logId ID [-timeout MS] [-datadir DIR | -conf FILE].
    #[command(name = "activeledgers")]
    ActiveLedgers {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// An entry log's ledgers map: <entry log id (hex) | file> [-datadir DIR | -conf FILE].
    #[command(name = "readlogmetadata")]
    ReadLogMetadata {
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Print a bookie's cookie as stored in the metadata service.
    #[command(name = "cookie_get")]
    CookieGet {
        /// The bookie id (host:port).
        bookie: String,
    },
    /// Delete a bookie's cookie from the metadata store: cookie_delete <bookie> [-f]. Refused
    /// while the bookie is registered unless -f (a running bookie would not restart).
    #[command(name = "cookie_delete")]
    CookieDelete {
        /// The bookie id (host:port).
        bookie: String,
        #[arg(allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Write the cookie a bookie with these directories would have to a file:
    /// cookie_generate <bookie> -j DIRS -l DIRS [-ix DIRS] [-i INSTANCE_ID] -o FILE.
    #[command(name = "cookie_generate")]
    CookieGenerate {
        #[arg(allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Store a cookie file as a bookie's cookie (it must have none): cookie_create <bookie> -cf FILE.
    #[command(name = "cookie_create")]
    CookieCreate {
        #[arg(allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Replace a bookie's cookie with a cookie file: cookie_update <bookie> -cf FILE.
    #[command(name = "cookie_update")]
    CookieUpdate {
        #[arg(allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Runs one shell command against the metadata service `metadata`.
pub fn run(args: ShellArgs, metadata: Option<&str>) -> anyhow::Result<()> {
    // The commands on a bookie's local directories need no metadata service (bookieformat
    // only with -deleteCookie).
    let args = match args.command {
        ShellCommand::ReadJournal { flags } => return shell_local::readjournal(&flags),
        ShellCommand::ReadLog { flags } => return shell_local::readlog(&flags),
        ShellCommand::LastMark { flags } => return shell_local::lastmark(&flags),
        ShellCommand::ListFilesOnDisc { flags } => return shell_local::listfilesondisc(&flags),
        ShellCommand::BookieFormat { flags } => {
            return shell_local::bookieformat(&flags, metadata);
        }
        ShellCommand::UpdateCookie { flags } => {
            return shell_bookie_id::updatecookie(&flags, metadata);
        }
        ShellCommand::LocalConsistencyCheck { flags } => {
            return shell_entry_logs::localconsistencycheck(&flags);
        }
        ShellCommand::ActiveLedgers { flags } => {
            return shell_entry_logs::activeledgers(&flags, metadata);
        }
        ShellCommand::ReadLogMetadata { flags } => {
            return shell_entry_logs::readlogmetadata(&flags);
        }
        command => ShellArgs { command },
    };
    let uri = metadata_connect::require_uri(metadata)?;
    metadata_connect::with_store(uri, Missing::Create, async |store| match args.command {
        ShellCommand::ReadLedger { flags } => shell_ledger::readledger(store.clone(), &flags).await,
        ShellCommand::SimpleTest { flags } => shell_ledger::simpletest(store.clone(), &flags).await,
        ShellCommand::DeleteLedger { flags } => {
            shell_ledger::deleteledger(store.clone(), &flags).await
        }
        ShellCommand::BookieSanity { flags } => {
            shell_ledger::bookiesanity(store.clone(), &flags).await
        }
        ShellCommand::BookieInfo { flags } => shell_ledger::bookieinfo(store.clone(), &flags).await,
        ShellCommand::Recover { flags } => {
            shell_autorecovery::recover_cmd(store.clone(), &flags).await
        }
        ShellCommand::DecommissionBookie { flags } => {
            shell_autorecovery::decommissionbookie(store.clone(), &flags).await
        }
        ShellCommand::UpdateBookieInLedger { flags } => {
            shell_autorecovery::update_bookie_in_ledger(store.clone(), &flags).await
        }
        ShellCommand::UpdateLedgers { flags } => {
            shell_bookie_id::updateledgers(store.clone(), &flags).await
        }
        command => execute(command, store.as_ref()).await,
    })
}

async fn execute(command: ShellCommand, store: &dyn MetadataStore) -> anyhow::Result<()> {
    match command {
        ShellCommand::InitNewCluster => match store.init_cluster().await {
            Ok(info) => {
                println!("Initialized new cluster: instance id {}", info.instance_id);
                Ok(())
            }
            Err(MetadataError::AlreadyExists { .. }) => {
                bail!("cluster already initialised at {}", store.uri())
            }
            Err(e) => Err(e.into()),
        },
        ShellCommand::ListBookies {
            mut readonly,
            mut all,
            bookkeeper_flags,
            ..
        } => {
            for f in &bookkeeper_flags {
                match f.as_str() {
                    "-rw" | "-readwrite" => {}
                    "-ro" | "-readonly" => readonly = true,
                    "-a" | "-all" => all = true,
                    other => bail!("listbookies: unknown flag {other:?} (use -rw, -ro or -a)"),
                }
            }
            let set = store.list_bookies().await?;
            let mut printed = false;
            if !readonly || all {
                println!("ReadWrite Bookies :");
                for b in &set.writable {
                    println!("{b}");
                    printed = true;
                }
            }
            if readonly || all {
                println!("Readonly Bookies :");
                for b in &set.readonly {
                    println!("{b}");
                    printed = true;
                }
            }
            if !printed {
                eprintln!("No bookie exists!");
            }
            Ok(())
        }
        ShellCommand::ListLedgers => {
            let mut start = None;
            loop {
                let page = store.list_ledgers(start, 1000).await?;
                for id in &page.ledgers {
                    println!("ledgerID: {id}");
                }
                match page.next {
                    Some(n) => start = Some(n),
                    None => return Ok(()),
                }
            }
        }
        ShellCommand::LedgerMetadata { args } => {
            let id = parse_ledger_id_args(&args)?;
            let m = match store.read_ledger(id).await {
                Ok(m) => m,
                Err(MetadataError::NotFound { .. }) => bail!("no such ledger {id}"),
                Err(e) => return Err(e.into()),
            };
            println!("ledgerID: {id}");
            print!("{}", describe(&m.value));
            println!("version: {}", m.version);
            Ok(())
        }
        ShellCommand::ListUnderreplicated { flags } => {
            shell_autorecovery::listunderreplicated(store, &flags).await
        }
        ShellCommand::TriggerAudit => shell_autorecovery::triggeraudit(store).await,
        ShellCommand::ForceAuditChecks { flags } => {
            shell_autorecovery::forceauditchecks(store, &flags).await
        }
        ShellCommand::QueryAutoRecoveryStatus { flags } => {
            shell_autorecovery::queryautorecoverystatus(store, &flags).await
        }
        ShellCommand::ClusterInfo => {
            let info = folio_http::cluster_info_json(store).await?;
            println!("{}", serde_json::to_string_pretty(&info)?);
            Ok(())
        }
        ShellCommand::EndpointInfo { flags } => {
            let id = match flags.as_slice() {
                [f, id] if f == "-bookieid" || f == "-b" || f == "--bookieid" => id,
                _ => bail!("endpointinfo: give the bookie: -bookieid <id>"),
            };
            let bookie = folio_types::BookieId::new(id.clone())?;
            let all = store.list_cookies().await?;
            if !all.contains(&bookie) {
                let known: Vec<String> = all.iter().map(|b| b.to_string()).collect();
                bail!(
                    "bookie {bookie} does not exist (bookies: {})",
                    known.join(", ")
                );
            }
            let info = store.bookie_service_info(&bookie).await.map_err(|e| {
                anyhow::anyhow!("bookie {bookie} published no endpoint info (is it down?): {e}")
            })?;
            println!("BookieId: {bookie}");
            if !info.properties.is_empty() {
                println!("Properties");
                for (k, v) in &info.properties {
                    println!("{k} : {v}");
                }
            }
            if info.endpoints.is_empty() {
                bail!("bookie {bookie} did not publish any endpoint info; maybe it is down");
            }
            for e in &info.endpoints {
                println!("Endpoint: {}", e.id);
                println!("Protocol: {}", e.protocol);
                println!("Address: {} : {}", e.host, e.port);
                println!("Auth: {:?}", e.auth);
                println!("Extensions: {:?}", e.extensions);
            }
            Ok(())
        }
        ShellCommand::WhoIsAuditor => match store.current_auditor().await? {
            Some(auditor) => {
                println!("Auditor: {auditor}");
                Ok(())
            }
            None => bail!("no Auditor is elected"),
        },
        ShellCommand::LostBookieRecoveryDelay { flags } => {
            match flags.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                ["-get" | "--get" | "-g"] => match store.lost_bookie_recovery_delay().await? {
                    Some(v) => println!("LostBookieRecoveryDelay value: {v}"),
                    None => println!(
                        "LostBookieRecoveryDelay value: not set (the configured default applies)"
                    ),
                },
                ["-set" | "--set" | "-s", value] => {
                    let seconds: u32 = value.parse().map_err(|_| {
                        anyhow!("invalid delay {value:?}: expected a number of seconds")
                    })?;
                    store.set_lost_bookie_recovery_delay(seconds).await?;
                    println!("Successfully set LostBookieRecoveryDelay value to: {seconds}");
                }
                _ => bail!("usage: lostbookierecoverydelay -get | -set <seconds>, got {flags:?}"),
            }
            Ok(())
        }
        ShellCommand::AutoRecovery { flags } => {
            match flags.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                ["-enable" | "--enable" | "-e"] => store.set_autorecovery_enabled(true).await?,
                ["-disable" | "--disable" | "-d"] => store.set_autorecovery_enabled(false).await?,
                [] | ["-status" | "--status" | "-s"] => {}
                _ => bail!("usage: autorecovery [-enable | -disable | -status], got {flags:?}"),
            }
            let enabled = store.is_autorecovery_enabled().await?;
            println!(
                "AutoRecovery is {}",
                if enabled { "enabled" } else { "disabled" }
            );
            Ok(())
        }
        ShellCommand::CookieGet { bookie } => shell_cookie::cookie_get(store, &bookie).await,
        ShellCommand::CookieDelete { bookie, flags } => {
            shell_cookie::cookie_delete(store, &bookie, &flags).await
        }
        ShellCommand::CookieGenerate { args } => shell_cookie::cookie_generate(store, &args).await,
        ShellCommand::CookieCreate { args } => {
            shell_cookie::cookie_store(store, &args, false).await
        }
        ShellCommand::CookieUpdate { args } => shell_cookie::cookie_store(store, &args, true).await,
        // The ledger data commands need a client; `run` sends them to `shell_ledger`.
        ShellCommand::ReadLedger { .. }
        | ShellCommand::SimpleTest { .. }
        | ShellCommand::DeleteLedger { .. }
        | ShellCommand::BookieSanity { .. }
        | ShellCommand::BookieInfo { .. }
        | ShellCommand::Recover { .. }
        | ShellCommand::DecommissionBookie { .. }
        | ShellCommand::UpdateBookieInLedger { .. }
        | ShellCommand::UpdateLedgers { .. }
        | ShellCommand::UpdateCookie { .. }
        | ShellCommand::LocalConsistencyCheck { .. }
        | ShellCommand::ActiveLedgers { .. }
        | ShellCommand::ReadLogMetadata { .. }
        | ShellCommand::ReadJournal { .. }
        | ShellCommand::ReadLog { .. }
        | ShellCommand::LastMark { .. }
        | ShellCommand::ListFilesOnDisc { .. }
        | ShellCommand::BookieFormat { .. } => {
            bail!("this shell command is run by shell::run")
        }
        ShellCommand::WhatIsInstanceId => {
            let info = store.read_cluster().await?;
            println!(
                "Metadata Service Uri: {} InstanceId: {}",
                store.uri(),
                info.instance_id
            );
            Ok(())
        }
    }
}

/// `<id>`, `-ledgerid <id>`, `--ledgerid <id>` or `-l <id>`.
fn parse_ledger_id_args(args: &[String]) -> anyhow::Result<LedgerId> {
    let value = match args {
        [id] => id,
        [flag, id] if matches!(flag.as_str(), "-ledgerid" | "--ledgerid" | "-l") => id,
        _ => bail!("usage: ledgermetadata <ledger id> (or -ledgerid <ledger id>), got {args:?}"),
    };
    let id: LedgerId = value
        .parse()
        .map_err(|_| anyhow!("invalid ledger id {value:?}: expected a non-negative integer"))?;
    if id < 0 {
        bail!("invalid ledger id {id}: ledger ids are non-negative");
    }
    Ok(id)
}

/// A readable rendering of ledger metadata, one `key: value` per line.
fn describe(m: &LedgerMetadata) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| {
        out.push_str(k);
        out.push_str(": ");
        out.push_str(&v);
        out.push('\n');
    };
    line("formatVersion", m.metadata_format_version.to_string());
    line("state", m.state.to_string());
    line("ensembleSize", m.ensemble_size.to_string());
    line("writeQuorumSize", m.write_quorum.to_string());
    line("ackQuorumSize", m.ack_quorum.to_string());
    line("lastEntryId", m.last_entry_id.to_string());
    line("length", m.length.to_string());
    line("digestType", m.digest_type.to_string());
    line(
        "password",
        match &m.password {
            Some(p) if p.is_empty() => "(empty)".into(),
            Some(_) => "(set)".into(),
            None => "(none)".into(),
        },
    );
    line("ctime", m.ctime.map_or("(unset)".into(), |c| c.to_string()));
    for (first, ensemble) in &m.ensembles {
        let members: Vec<_> = ensemble.iter().map(|b| b.to_string()).collect();
        line(&format!("ensemble[{first}]"), members.join(","));
    }
    for (k, v) in &m.custom_metadata {
        line(
            &format!("customMetadata[{k}]"),
            String::from_utf8_lossy(v).into_owned(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_id_arguments_in_both_spellings() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(parse_ledger_id_args(&s(&["7"])).unwrap(), 7);
        assert_eq!(parse_ledger_id_args(&s(&["-ledgerid", "8"])).unwrap(), 8);
        assert_eq!(parse_ledger_id_args(&s(&["--ledgerid", "9"])).unwrap(), 9);
        let e = parse_ledger_id_args(&s(&["x"])).unwrap_err().to_string();
        assert!(e.contains("invalid ledger id \"x\""), "{e}");
        assert!(parse_ledger_id_args(&s(&["-5"])).is_err());
        assert!(parse_ledger_id_args(&s(&["-bogus", "5"])).is_err());
    }
}
