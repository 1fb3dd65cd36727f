//! `folio shell` commands that move a bookie between its address-based and host-name-based
//! ids, and keep its cookie in step with its directories, under BookKeeper's names and flags:
//! `updatecookie` (exactly one of `-bookieId hostname|ip`, `-expandstorage`, `-list`,
//! `-delete [force]`) and `updateledgers -bookieId hostname|ip` (the ledgers' metadata, through
//! updateBookieInLedger's path in folio-autorecovery).
//!
//! BookKeeper's procedure, kept: set `useHostNameAsBookieID` (Folio:
//! `use_host_name_as_bookie_id`) in the bookie's configuration to the form wanted, stop the
//! bookie, run `updatecookie -bookieId hostname` (or `ip`; the value must agree with the
//! configuration), then `updateledgers -bookieId hostname`, and start the bookie. The bookie's
//! directories come from `-datadir DIR` / `-conf FILE`; the commands that change the cookie
//! take the directories' locks, so they refuse while a bookie runs there.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use folio_bookie::bookie_address;
use folio_bookie::config::BookieConfig;
use folio_bookie::registration::{cookie_dirs, expected_cookie};
use folio_env::RealFileSystem;
use folio_metadata::{MetadataError, MetadataStore};
use folio_storage::cookie::Cookie;
use folio_types::BookieId;

use crate::metadata_connect::{self, Missing};
use crate::shell_ledger::Flags;
use crate::shell_local::{bookie_config, confirm, contents, lock_bookie_dirs, show_dirs, spec};

/// The bookie's (old, new) ids for `-bookieId hostname|ip`, checked against the
/// configuration as BookKeeper checks `useHostNameAsBookieID`.
fn id_change(cmd: &str, config: &BookieConfig, form: &str) -> anyhow::Result<(BookieId, BookieId)> {
    let to_host_name = match form {
        "hostname" => true,
        "ip" => false,
        other => bail!("{cmd}: -bookieId takes hostname or ip, not {other:?}"),
    };
    if config.use_host_name_as_bookie_id != to_host_name {
        bail!(
            "{cmd}: -bookieId {form} expects use_host_name_as_bookie_id = {to_host_name} (BookKeeper: \
             useHostNameAsBookieID={to_host_name}) in the bookie's configuration: set it first, \
             so that the bookie starts under the new id"
        );
    }
    let (ip, host) = bookie_address::id_forms(config).map_err(|e| anyhow!("{cmd}: {e}"))?;
    let (old, new) = if to_host_name { (ip, host) } else { (host, ip) };
    Ok((BookieId::new(old)?, BookieId::new(new)?))
}

/// Runs `f` on a session with the metadata store named by `--metadata` or the configuration.
fn with_store<T>(
    cmd: &str,
    metadata: Option<&str>,
    config: &BookieConfig,
    f: impl AsyncFnOnce(Arc<dyn MetadataStore>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let uri = metadata
        .map(str::to_owned)
        .or_else(|| config.metadata_service_uri.clone())
        .ok_or_else(|| anyhow!("{cmd}: needs the metadata service: pass --metadata URI"))?;
    metadata_connect::with_store(&uri, Missing::Refuse, f)
}

/// The bookie's directories the cookie covers, each once (journal, ledger, index).
fn config_dirs(config: &BookieConfig) -> Vec<PathBuf> {
    let ledger_dirs = config.effective_ledger_dirs();
    let index: Vec<PathBuf> = config.effective_index_dir().into_iter().collect();
    cookie_dirs(&expected_cookie(
        &BookieId::new("x:1").expect("a valid id"),
        "",
        &config.effective_journal_dirs(),
        &ledger_dirs,
        &index,
    ))
}

/// `updatecookie [-datadir DIR | -conf FILE] (-bookieId hostname|ip | -expandstorage |
/// -list | -delete [force])`.
pub fn updatecookie(args: &[String], metadata: Option<&str>) -> anyhow::Result<()> {
    const CMD: &str = "updatecookie";
    let flags = Flags::parse_with_positional(
        CMD,
        args,
        &spec(&[
            ("bookieId", &["b", "bookieid"], true),
            ("expandstorage", &["e"], false),
            ("list", &["l"], false),
            ("delete", &["d"], false),
        ]),
        1,
    )?;
    let config = bookie_config(CMD, &flags)?;
    let form = flags.get::<String>(CMD, "bookieId")?;
    let chosen = [
        form.is_some(),
        flags.has("expandstorage"),
        flags.has("list"),
        flags.has("delete"),
    ];
    if chosen.iter().filter(|c| **c).count() != 1 {
        bail!(
            "{CMD}: give exactly one of -bookieId hostname|ip, -expandstorage, -list, -delete [force]"
        );
    }
    let force = match flags.positional.first().map(String::as_str) {
        None => false,
        Some("force") if flags.has("delete") => true,
        Some(other) => bail!("{CMD}: unexpected argument {other:?} (only -delete takes force)"),
    };
    if flags.has("list") {
        return with_store(CMD, metadata, &config, async |store| {
            list(&*store, &config).await
        });
    }
    // Everything else changes the cookie: not under a running bookie.
    let (_dirs, _locks) = lock_bookie_dirs(CMD, &config)?;
    with_store(CMD, metadata, &config, async |store| {
        if let Some(form) = &form {
            change_id(&*store, &config, form).await
        } else if flags.has("expandstorage") {
            expand_storage(&*store, &config).await
        } else {
            delete(&*store, &config, force).await
        }
    })
}

/// The bookie's id as it would start now.
fn current_id(config: &BookieConfig) -> anyhow::Result<BookieId> {
    Ok(BookieId::new(bookie_address::bookie_id_text(
        config,
        config.port,
    ))?)
}

async fn read_remote(
    store: &dyn MetadataStore,
    id: &BookieId,
) -> anyhow::Result<Option<(Cookie, folio_metadata::Version)>> {
    match store.read_cookie(id).await {
        Ok(v) => Ok(Some((
            Cookie::parse(&v.value).with_context(|| format!("the cookie of bookie {id}"))?,
            v.version,
        ))),
        Err(MetadataError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `-bookieId hostname|ip`: the cookie moves from the old id to the new one, in every
/// directory and in the metadata store. Written locally first, then stored under the new
/// id, then removed under the old one, so that a run stopped half-way can be run again.
async fn change_id(
    store: &dyn MetadataStore,
    config: &BookieConfig,
    form: &str,
) -> anyhow::Result<()> {
    const CMD: &str = "updatecookie";
    let (old, new) = id_change(CMD, config, form)?;
    let Some((cookie, version)) = read_remote(store, &old).await? else {
        bail!(
            "{CMD}: no cookie for bookie {old} in the metadata store: either it was already moved \
             to {new} (use_host_name_as_bookie_id = {}) or the bookie has none",
            form == "hostname"
        );
    };
    let moved = Cookie {
        bookie_host: new.to_string(),
        ..cookie.clone()
    };
    let fs = RealFileSystem;
    for dir in config_dirs(config) {
        match Cookie::read_from_dir(&fs, &dir)? {
            Some(local) if local == cookie || local == moved => {}
            Some(local) => bail!(
                "{CMD}: the cookie in {} is of bookie {}, not {old}: is this the bookie's configuration?",
                dir.display(),
                local.bookie_host
            ),
            None => bail!(
                "{CMD}: {} has no cookie: not a formatted directory of bookie {old}",
                dir.display()
            ),
        }
        moved.write_to_dir(&fs, &dir)?;
    }
    match store.write_cookie(&new, &moved.to_bytes(), None).await {
        Ok(_) => {}
        // A run stopped after storing it: the stored one must be this very cookie.
        Err(e) if e.is_already_exists() => match read_remote(store, &new).await? {
            Some((stored, _)) if stored == moved => {}
            _ => bail!("{CMD}: bookie {new} already has another cookie in the metadata store"),
        },
        Err(e) => return Err(e.into()),
    }
    store.delete_cookie(&old, version).await?;
    println!("Updated the cookie of bookie {old}: it is now bookie {new}");
    Ok(())
}

/// `-expandstorage`: ledger or index directories added to the configuration (new and
/// empty) join the cookie, in the metadata store (by version) and in every directory. The
/// journal directories and the existing ones must be unchanged.
async fn expand_storage(store: &dyn MetadataStore, config: &BookieConfig) -> anyhow::Result<()> {
    const CMD: &str = "updatecookie";
    let id = current_id(config)?;
    let Some((remote, version)) = read_remote(store, &id).await? else {
        bail!("{CMD}: no cookie for bookie {id} in the metadata store: nothing to expand");
    };
    let index: Vec<PathBuf> = config.effective_index_dir().into_iter().collect();
    let expanded = expected_cookie(
        &id,
        remote.instance_id.as_deref().unwrap_or_default(),
        &config.effective_journal_dirs(),
        &config.effective_ledger_dirs(),
        &index,
    );
    if remote.verify(&expanded).is_ok() {
        println!("The cookie of bookie {id} already covers every directory: nothing to expand");
        return Ok(());
    }
    if remote.journal_dirs != expanded.journal_dirs {
        bail!(
            "{CMD}: the journal directories changed ({} in the cookie, {} configured): only ledger and index directories can be added",
            remote.journal_dirs.join(","),
            expanded.journal_dirs.join(",")
        );
    }
    let old_dirs = cookie_dirs(&remote);
    let new_dirs = cookie_dirs(&expanded);
    if let Some(gone) = old_dirs.iter().find(|d| !new_dirs.contains(d)) {
        bail!(
            "{CMD}: {} is in the cookie but no longer configured: directories can only be added",
            gone.display()
        );
    }
    let fs = RealFileSystem;
    let mut added = Vec::new();
    for dir in new_dirs.iter().cloned() {
        if old_dirs.contains(&dir) {
            let local = Cookie::read_from_dir(&fs, &dir)?;
            if local.as_ref() != Some(&remote) {
                bail!(
                    "{CMD}: {} does not hold bookie {id}'s cookie: fix it before expanding",
                    dir.display()
                );
            }
        } else {
            if dir.is_dir() && !contents(&dir)?.is_empty() {
                bail!(
                    "{CMD}: {} is not empty: only new, empty directories can be added",
                    dir.display()
                );
            }
            added.push(dir);
        }
    }
    store
        .write_cookie(&id, &expanded.to_bytes(), Some(version))
        .await?;
    for dir in &new_dirs {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{CMD}: cannot create {}", dir.display()))?;
        expanded.write_to_dir(&fs, dir)?;
    }
    println!(
        "Expanded the storage of bookie {id}: added {}",
        show_dirs(&added)
    );
    Ok(())
}

/// `-list`: the local cookie files and the cookie in the metadata store.
async fn list(store: &dyn MetadataStore, config: &BookieConfig) -> anyhow::Result<()> {
    let id = current_id(config)?;
    let local: Vec<PathBuf> = config_dirs(config)
        .into_iter()
        .map(|d| Cookie::path_in(&d))
        .filter(|p| p.is_file())
        .collect();
    if local.is_empty() {
        println!("No local cookies for Bookie {id}");
    } else {
        println!("Listing local Cookie Files of Bookie {id}");
        for p in &local {
            println!("{}", p.display());
        }
    }
    match store.read_cookie(&id).await {
        Ok(v) => println!(
            "Cookie of Bookie {id} in the metadata store {} (version {})",
            store.uri(),
            v.version
        ),
        Err(MetadataError::NotFound { .. }) => println!(
            "No cookie for Bookie {id} in the metadata store {}",
            store.uri()
        ),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// `-delete [force]`: the local cookie files and the stored cookie (asked first unless
/// `force`).
async fn delete(
    store: &dyn MetadataStore,
    config: &BookieConfig,
    force: bool,
) -> anyhow::Result<()> {
    const CMD: &str = "updatecookie";
    let id = current_id(config)?;
    let set = store.list_bookies().await?;
    if set.writable.contains(&id) || set.readonly.contains(&id) {
        bail!("{CMD}: bookie {id} is registered (running): stop it first");
    }
    let local: Vec<PathBuf> = config_dirs(config)
        .into_iter()
        .map(|d| Cookie::path_in(&d))
        .filter(|p| p.is_file())
        .collect();
    if !local.is_empty() {
        if force || confirm("Are you sure you want to delete Cookies locally?")? {
            for p in &local {
                std::fs::remove_file(p)
                    .with_context(|| format!("{CMD}: cannot delete {}", p.display()))?;
            }
            println!("Deleted Local Cookies of Bookie {id}");
        } else {
            println!("Skipping deleting local Cookies of Bookie {id}");
        }
    } else {
        println!("No local cookies for Bookie {id}");
    }
    match read_remote(store, &id).await? {
        None => println!("No cookie for Bookie {id} in the metadata store"),
        Some((_, version)) => {
            if force || confirm("Are you sure you want to delete Cookies from metadata store?")? {
                store.delete_cookie(&id, version).await?;
                println!("Deleted Cookie from metadata store for Bookie {id}");
            } else {
                println!("Skipping deleting cookie from metadata store for Bookie {id}");
            }
        }
    }
    Ok(())
}

/// `updateledgers -bookieId hostname|ip [-updatespersec N] [-maxOutstandingReads N]
/// [-limit N] [-verbose [true|false]] [-printprogress S] [-datadir DIR | -conf FILE]`.
pub async fn updateledgers(store: Arc<dyn MetadataStore>, args: &[String]) -> anyhow::Result<()> {
    const CMD: &str = "updateledgers";
    // BookKeeper's -verbose takes a value (true or false); a bare -verbose means true.
    let mut folded = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let verbose = matches!(a.trim_start_matches('-'), "verbose" | "v");
        match it.peek().map(|v| v.as_str()) {
            Some("true") if verbose => {
                it.next();
                folded.push(a.clone());
            }
            Some("false") if verbose => {
                it.next();
            }
            _ => folded.push(a.clone()),
        }
    }
    let flags = Flags::parse(
        CMD,
        &folded,
        &spec(&[
            ("bookieId", &["b", "bookieid"], true),
            ("updatespersec", &["s"], true),
            ("maxOutstandingReads", &["r"], true),
            ("limit", &["l"], true),
            ("verbose", &["v"], false),
            ("printprogress", &["p"], true),
        ]),
    )?;
    let Some(form) = flags.get::<String>(CMD, "bookieId")? else {
        bail!(
            "usage: {CMD} -bookieId hostname|ip [-updatespersec N] [-limit N] [-verbose] [-printprogress S] [-conf FILE]"
        );
    };
    // The ids need only the configuration's port and host settings, not its directories.
    let config = match flags.get::<PathBuf>(CMD, "conf")? {
        Some(path) => BookieConfig::load(&path)?,
        None => BookieConfig::default(),
    };
    let (old, new) = id_change(CMD, &config, &form)?;
    let options = folio_autorecovery::RenameOptions {
        updates_per_sec: flags.get(CMD, "updatespersec")?.unwrap_or(5),
        limit: flags.get(CMD, "limit")?,
    };
    let verbose = flags.has("verbose");
    // BookKeeper: progress every 10 s by default, and only when verbose.
    let progress = verbose
        .then(|| flags.get::<u64>(CMD, "printprogress"))
        .transpose()?
        .map(|p| p.unwrap_or(10));
    crate::shell_autorecovery::rename_ledgers(store, CMD, &old, &new, &options, verbose, progress)
        .await
}
