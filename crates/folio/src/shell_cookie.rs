//! `folio shell` cookie commands, under BookKeeper's names and flags: `cookie_get`,
//! `cookie_delete`, `cookie_generate` (a cookie file for given directories),
//! `cookie_create` and `cookie_update` (a cookie file into the metadata store). Operators
//! use them to move a bookie to new disks or a new id without re-formatting it.
//!
//! The text is checked to be a cookie before it is stored, and the bookie id in it must be
//! the one the command names: a cookie stored under the wrong id would make the bookie
//! refuse to start.

use anyhow::{Context, bail};
use folio_metadata::{MetadataError, MetadataStore};
use folio_storage::cookie::Cookie;
use folio_types::BookieId;

use crate::shell_ledger::{Flags, Spec};

pub async fn cookie_get(store: &dyn MetadataStore, bookie: &str) -> anyhow::Result<()> {
    let id = BookieId::new(bookie)?;
    let cookie = read(store, &id).await?;
    print!("{}", String::from_utf8_lossy(&cookie.value));
    Ok(())
}

pub async fn cookie_delete(
    store: &dyn MetadataStore,
    bookie: &str,
    flags: &[String],
) -> anyhow::Result<()> {
    const SPEC: &[Spec] = &[("f", &["force"], false)];
    let force = Flags::parse("cookie_delete", flags, SPEC)?.has("f");
    let id = BookieId::new(bookie)?;
    let set = store.list_bookies().await?;
    if !force && (set.writable.contains(&id) || set.readonly.contains(&id)) {
        bail!(
            "bookie {id} is registered (running): stop it first, or pass -f (it will then refuse to restart until re-formatted)"
        );
    }
    let cookie = read(store, &id).await?;
    store.delete_cookie(&id, cookie.version).await?;
    println!("Deleted cookie of bookie {id}");
    Ok(())
}

/// `cookie_generate <bookie-id> -j DIRS -l DIRS [-ix DIRS] [-i INSTANCE] -o FILE`: writes
/// the cookie a bookie with these directories would have; the instance id defaults to the
/// cluster's.
pub async fn cookie_generate(store: &dyn MetadataStore, args: &[String]) -> anyhow::Result<()> {
    const SPEC: &[Spec] = &[
        ("j", &["journal-dirs"], true),
        ("l", &["ledger-dirs"], true),
        ("ix", &["index-dirs"], true),
        ("i", &["instance-id"], true),
        ("o", &["output-file"], true),
    ];
    let cmd = "cookie_generate";
    let flags = Flags::parse_with_positional(cmd, args, SPEC, 1)?;
    let id = bookie_arg(cmd, &flags)?;
    let dirs = |name: &str| -> anyhow::Result<Option<Vec<String>>> {
        Ok(flags.get::<String>(cmd, name)?.map(|v| {
            v.split(',')
                .filter(|d| !d.is_empty())
                .map(str::to_string)
                .collect()
        }))
    };
    let (Some(journal_dirs), Some(ledger_dirs)) = (dirs("j")?, dirs("l")?) else {
        bail!("{cmd}: -j JOURNAL_DIRS and -l LEDGER_DIRS are required");
    };
    let Some(output) = flags.get::<String>(cmd, "o")? else {
        bail!("{cmd}: -o OUTPUT_FILE is required");
    };
    let instance_id = match flags.get::<String>(cmd, "i")? {
        Some(i) => Some(i).filter(|i| !i.is_empty()),
        None => Some(store.read_cluster().await?.instance_id),
    };
    let cookie = Cookie {
        bookie_host: id.to_string(),
        journal_dirs,
        ledger_dirs,
        instance_id,
        index_dirs: dirs("ix")?,
    };
    std::fs::write(&output, cookie.to_bytes())
        .with_context(|| format!("{cmd}: cannot write {output}"))?;
    println!("Successfully saved the generated cookie to {output}");
    Ok(())
}

/// `cookie_create <bookie-id> -cf FILE` (refused if the bookie has a cookie) and
/// `cookie_update <bookie-id> -cf FILE` (refused if it has none).
pub async fn cookie_store(
    store: &dyn MetadataStore,
    args: &[String],
    update: bool,
) -> anyhow::Result<()> {
    const SPEC: &[Spec] = &[("cf", &["cookie-file"], true)];
    let cmd = if update {
        "cookie_update"
    } else {
        "cookie_create"
    };
    let flags = Flags::parse_with_positional(cmd, args, SPEC, 1)?;
    let id = bookie_arg(cmd, &flags)?;
    let Some(file) = flags.get::<String>(cmd, "cf")? else {
        bail!("{cmd}: -cf COOKIE_FILE is required");
    };
    let bytes = std::fs::read(&file).with_context(|| format!("{cmd}: cannot read {file}"))?;
    let cookie = Cookie::parse(&bytes).with_context(|| format!("{cmd}: {file}"))?;
    if cookie.bookie_host != id.as_str() {
        bail!(
            "{cmd}: {file} is the cookie of bookie {}, not of {id}",
            cookie.bookie_host
        );
    }
    if update {
        let current = read(store, &id).await?;
        store
            .write_cookie(&id, &bytes, Some(current.version))
            .await?;
        println!("Successfully updated cookie of bookie {id} from {file}");
    } else {
        match store.write_cookie(&id, &bytes, None).await {
            Err(e) if e.is_already_exists() => {
                bail!("{cmd}: bookie {id} already has a cookie (cookie_update replaces it)")
            }
            r => r?,
        };
        println!("Successfully created cookie of bookie {id} from {file}");
    }
    Ok(())
}

fn bookie_arg(cmd: &str, flags: &Flags) -> anyhow::Result<BookieId> {
    let [bookie] = flags.positional.as_slice() else {
        bail!("{cmd}: the bookie id is required");
    };
    Ok(BookieId::new(bookie.as_str())?)
}

async fn read(
    store: &dyn MetadataStore,
    id: &BookieId,
) -> anyhow::Result<folio_metadata::Versioned<Vec<u8>>> {
    match store.read_cookie(id).await {
        Ok(c) => Ok(c),
        Err(MetadataError::NotFound { .. }) => bail!("no cookie for bookie {id}"),
        Err(e) => Err(e.into()),
    }
}
