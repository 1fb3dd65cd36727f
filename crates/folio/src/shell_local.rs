//! `folio shell` commands that work on one bookie's local directories, under BookKeeper's
//! names and flags: `readjournal` (the records of a journal file), `readlog` (the records
//! of an entry log), `lastmark` (each journal directory's checkpoint mark), `listfilesondisc`
//! (the journal, entry log and index files) and
//! `bookieformat` (wipe the bookie's data, optionally its cookie in the metadata store).
//!
//! The directories come from the bookie's configuration: `-datadir DIR` (as `folio bookie
//! --data-dir`) and/or `-conf FILE` (its TOML file). The reading commands use
//! folio-storage's read-only scanning functions, so they are safe on a running bookie
//! (they see what is on disk so far); `bookieformat` takes every directory's lock, so it
//! refuses while a bookie runs there.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use folio_bookie::config::BookieConfig;
use folio_env::{FileLock, FileSystem, RealFileSystem};
use folio_metadata::MetadataError;
use folio_proto::digest::DigestType;
use folio_storage::cookie::Cookie;
use folio_storage::dir_lock::{JOURNAL_LOCK_FILE, LOCK_FILE};
use folio_storage::entry_log::log_file;
use folio_storage::journal::{self, RecordKind, ReplayRecord};

use crate::ledger_cmd::Stdout;
use crate::metadata_connect::{self, Missing};
use crate::shell_ledger::{Flags, Spec};

/// The flags that say which bookie's directories to use.
const DIR_FLAGS: [Spec; 2] = [
    ("datadir", &["data-dir", "data_dir"], true),
    ("conf", &["config", "c"], true),
];

pub(crate) fn spec(extra: &[Spec]) -> Vec<Spec> {
    let mut s = DIR_FLAGS.to_vec();
    s.extend_from_slice(extra);
    s
}

/// The bookie configuration named by `-conf` and `-datadir` (the flag overrides the file).
pub(crate) fn bookie_config(command: &str, flags: &Flags) -> anyhow::Result<BookieConfig> {
    let conf: Option<PathBuf> = flags.get(command, "conf")?;
    let mut config = match &conf {
        Some(path) => BookieConfig::load(path)?,
        None => BookieConfig::default(),
    };
    if let Some(d) = flags.get::<PathBuf>(command, "datadir")? {
        config.data_dir = Some(d);
    }
    if config.effective_journal_dirs().is_empty() && config.effective_ledger_dirs().is_empty() {
        bail!("{command}: which bookie? pass -datadir DIR or -conf FILE");
    }
    Ok(config)
}

fn digest_len(command: &str, flags: &Flags) -> anyhow::Result<usize> {
    let name: String = flags
        .get(command, "digest")?
        .unwrap_or_else(|| "crc32c".into());
    let t = match name.to_ascii_lowercase().as_str() {
        "crc32c" => DigestType::Crc32c,
        "crc32" => DigestType::Crc32,
        "mac" | "hmac" => DigestType::Mac,
        "dummy" => DigestType::Dummy,
        _ => bail!("{command}: unknown digest {name:?}: expected crc32c, crc32, mac or dummy"),
    };
    Ok(t.digest_len())
}

/// Bytes of the header every stored entry starts with (ledger, entry, LAC, length).
const ENTRY_HEADER_LEN: usize = 32;

/// `Data: <payload>` of a stored entry (header and a `digest_len`-byte digest skipped),
/// and the writer's LAC carried in its header.
fn entry_lines(stored: &[u8], digest_len: usize, out: &mut Stdout) -> anyhow::Result<()> {
    match folio_proto::digest::EntryHeader::peek(stored) {
        Some(h) if stored.len() >= ENTRY_HEADER_LEN + digest_len => {
            out.line(format!("LastConfirmed: {}", h.lac).as_bytes())?;
            let mut line = b"Data: ".to_vec();
            line.extend_from_slice(&stored[ENTRY_HEADER_LEN + digest_len..]);
            out.line(&line)
        }
        _ => out.line(
            format!(
                "Data: ({} bytes, too short for an entry header)",
                stored.len()
            )
            .as_bytes(),
        ),
    }
}

/// `listfilesondisc [-txn] [-log] [-idx]`: the bookie's journal files, entry logs and index
/// files, each kind under BookKeeper's heading, paths sorted by name; all three kinds when
/// no flag picks some.
pub fn listfilesondisc(args: &[String]) -> anyhow::Result<()> {
    const CMD: &str = "listfilesondisc";
    let flags = Flags::parse(
        CMD,
        args,
        &spec(&[
            ("txn", &["journal"], false),
            ("log", &["entrylog"], false),
            ("idx", &["index"], false),
        ]),
    )?;
    let config = bookie_config(CMD, &flags)?;
    let all = !(flags.has("txn") || flags.has("log") || flags.has("idx"));
    let index_dirs: Vec<PathBuf> = config.effective_index_dir().into_iter().collect();
    let kinds: [(&str, &str, Vec<PathBuf>, &str); 3] = [
        ("txn", "Journal", config.effective_journal_dirs(), ".txn"),
        (
            "log",
            "EntryLog/Logger",
            config.effective_ledger_dirs(),
            ".log",
        ),
        ("idx", "Index", index_dirs, ""),
    ];
    let mut out = Stdout::new();
    for (flag, heading, dirs, suffix) in kinds {
        if !all && !flags.has(flag) {
            continue;
        }
        out.line(format!("--------- Printing the list of {heading} Files ---------").as_bytes())?;
        let mut files = Vec::new();
        for d in dirs {
            let current = d.join("current");
            let Ok(entries) = std::fs::read_dir(&current) else {
                continue;
            };
            for e in entries {
                let path = e
                    .with_context(|| format!("{CMD}: reading {}", current.display()))?
                    .path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                // The index directory holds the index and its cookie; the others their
                // kind's files only.
                let wanted = if suffix.is_empty() {
                    path.is_file() && name != "VERSION"
                } else {
                    name.ends_with(suffix)
                };
                if wanted {
                    files.push(path);
                }
            }
        }
        files.sort();
        for f in files {
            out.line(f.display().to_string().as_bytes())?;
        }
        out.line(b"")?;
    }
    Ok(())
}

/// `readjournal [-dir DIR] [-msg] [-digest D] [<journal id> | <journal file>]`: every
/// journal file of the bookie when no file is named.
pub fn readjournal(args: &[String]) -> anyhow::Result<()> {
    const CMD: &str = "readjournal";
    let flags = Flags::parse_with_positional(
        CMD,
        args,
        &spec(&[
            ("dir", &["journaldir", "d"], true),
            ("msg", &["m"], false),
            ("digest", &[], true),
        ]),
        1,
    )?;
    let digest = digest_len(CMD, &flags)?;
    let fs = RealFileSystem;
    let files = match flags.positional.first() {
        Some(a) if looks_like_path(a, ".txn") => vec![PathBuf::from(a)],
        named => {
            let dirs: Vec<PathBuf> = match flags.get::<PathBuf>(CMD, "dir")? {
                Some(d) => vec![d],
                None => bookie_config(CMD, &flags)?.effective_journal_dirs(),
            };
            let want = named
                .map(|a| {
                    a.parse::<u64>().map_err(|_| {
                        anyhow!("{CMD}: invalid journal id {a:?}: expected a number or a file path")
                    })
                })
                .transpose()?;
            let mut files = Vec::new();
            for d in &dirs {
                let current = d.join("current");
                if !current.is_dir() {
                    continue;
                }
                for id in journal::list_files(&fs, &current)? {
                    if want.is_none_or(|w| w == id) {
                        files.push(current.join(journal::format::file_name(id)));
                    }
                }
            }
            if let Some(id) = want
                && files.is_empty()
            {
                bail!(
                    "{CMD}: no journal file with id {id} in {}",
                    show_dirs(&dirs)
                );
            }
            files
        }
    };
    let mut out = Stdout::new();
    for path in files {
        let id = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(journal::format::parse_file_name);
        out.line(
            format!(
                "Journal Id = {} ({})",
                id.map_or("?".into(), |i| i.to_string()),
                path.display()
            )
            .as_bytes(),
        )?;
        let mut failed = None;
        let r = journal::scan_file(&fs, &path, &mut |offset, rec: &ReplayRecord| {
            if failed.is_some() {
                return;
            }
            if let Err(e) = journal_record(offset, rec, flags.has("msg"), digest, &mut out) {
                failed = Some(e);
            }
        })
        .with_context(|| format!("{CMD}: cannot read {}", path.display()))?;
        if let Some(e) = failed {
            return Err(e);
        }
        out.line(format!("{} records, valid up to offset {}", r.records, r.end).as_bytes())?;
    }
    Ok(())
}

fn journal_record(
    offset: u64,
    rec: &ReplayRecord,
    msg: bool,
    digest: usize,
    out: &mut Stdout,
) -> anyhow::Result<()> {
    let what = match rec.kind {
        RecordKind::Add => format!("Eid={}", rec.entry),
        RecordKind::MasterKey => "MASTER KEY".into(),
        RecordKind::Fence => "FENCE".into(),
        RecordKind::ExplicitLac => "EXPLICIT LAC".into(),
    };
    out.line(
        format!(
            "--------- Lid={}, {what}, ByteOffset={offset}, EntrySize={} ---------",
            rec.ledger,
            rec.payload.len()
        )
        .as_bytes(),
    )?;
    if msg && rec.kind == RecordKind::Add {
        entry_lines(&rec.payload, digest, out)?;
    }
    Ok(())
}

/// `readlog [-ledgerid L] [-entryid E] [-msg] [-digest D] <entry log id | entry log file>`.
pub fn readlog(args: &[String]) -> anyhow::Result<()> {
    const CMD: &str = "readlog";
    let flags = Flags::parse_with_positional(
        CMD,
        args,
        &spec(&[
            ("ledgerid", &["l"], true),
            ("entryid", &["e"], true),
            ("msg", &["m"], false),
            ("digest", &[], true),
        ]),
        1,
    )?;
    let digest = digest_len(CMD, &flags)?;
    let ledger: Option<i64> = flags.get(CMD, "ledgerid")?;
    let entry: Option<i64> = flags.get(CMD, "entryid")?;
    let Some(arg) = flags.positional.first() else {
        bail!("{CMD}: name the entry log: readlog <entry log id | entry log file>");
    };
    let path = if looks_like_path(arg, ".log") {
        PathBuf::from(arg)
    } else {
        let id: u64 = arg.parse().map_err(|_| {
            anyhow!("{CMD}: invalid entry log id {arg:?}: expected a number or a file path")
        })?;
        entry_log_path(CMD, &flags, id)?
    };
    let mut out = Stdout::new();
    out.line(format!("Scan entry log {}", path.display()).as_bytes())?;
    let mut failed = None;
    let mut printed = 0u64;
    let (header, scan) = log_file::scan_file(&RealFileSystem, &path, &mut |r| {
        if failed.is_some()
            || ledger.is_some_and(|l| l != r.ledger)
            || entry.is_some_and(|e| e != r.entry)
        {
            return;
        }
        let result = (|| {
            out.line(
                format!(
                    "--------- Lid={}, Eid={}, ByteOffset={}, EntrySize={} ---------",
                    r.ledger,
                    r.entry,
                    r.offset,
                    r.payload.len()
                )
                .as_bytes(),
            )?;
            if flags.has("msg") {
                entry_lines(&r.payload, digest, &mut out)?;
            }
            anyhow::Ok(())
        })();
        printed += 1;
        if let Err(e) = result {
            failed = Some(e);
        }
    })
    .with_context(|| format!("{CMD}: cannot read {}", path.display()))?;
    if let Some(e) = failed {
        return Err(e);
    }
    out.line(
        format!(
            "Entry log {}: {} records, {printed} printed, valid up to offset {}{}",
            header.log_id,
            scan.records,
            scan.end,
            if header.map.is_some() {
                " (rotated: has its ledgers map)"
            } else {
                ""
            }
        )
        .as_bytes(),
    )
}

/// `lastmark`: each journal directory's last log mark (where replay would start).
pub fn lastmark(args: &[String]) -> anyhow::Result<()> {
    const CMD: &str = "lastmark";
    let flags = Flags::parse(CMD, args, &spec(&[]))?;
    let dirs = bookie_config(CMD, &flags)?.effective_journal_dirs();
    let fs = RealFileSystem;
    let mut out = Stdout::new();
    for d in &dirs {
        let current = d.join("current");
        if !current.is_dir() {
            bail!(
                "{CMD}: {} is not a journal directory (no current/ in it)",
                d.display()
            );
        }
        let mark = journal::read_mark(&fs, &current)?;
        out.line(
            format!(
                "LastLogMark : Journal Id - {}({}), Pos - {} ({})",
                mark.file_id,
                journal::format::file_name(mark.file_id),
                mark.offset,
                d.display()
            )
            .as_bytes(),
        )?;
    }
    Ok(())
}

/// `bookieformat [-nonInteractive] [-force] [-deleteCookie]`: deletes the bookie's journal,
/// entry logs, index and local cookie. Asks first when data exists, unless `-force`
/// (`-nonInteractive` without `-force` refuses instead of asking, like BookKeeper).
/// With `-deleteCookie` the cookie in the metadata store goes first, so that a failure
/// there leaves the bookie as it was.
pub fn bookieformat(args: &[String], metadata: Option<&str>) -> anyhow::Result<()> {
    const CMD: &str = "bookieformat";
    let flags = Flags::parse(
        CMD,
        args,
        &spec(&[
            ("force", &["f"], false),
            ("nonInteractive", &["noninteractive", "n"], false),
            ("deleteCookie", &["deletecookie", "d"], false),
        ]),
    )?;
    let config = bookie_config(CMD, &flags)?;
    let fs = RealFileSystem;

    let (dirs, locks) = lock_bookie_dirs(CMD, &config)?;

    let has_data = dirs
        .iter()
        .any(|(d, _)| !contents(d).unwrap_or_default().is_empty());
    if has_data && !flags.has("force") {
        if flags.has("nonInteractive") {
            bail!("{CMD}: the bookie has data and -nonInteractive was given without -force");
        }
        let question = format!(
            "Are you sure to format the bookie data in {}?",
            show_dirs(&dirs.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>())
        );
        if !confirm(&question)? {
            bail!("{CMD}: not confirmed, nothing deleted (pass -force to format without asking)");
        }
    }

    if flags.has("deleteCookie") {
        let cookie = dirs
            .iter()
            .find_map(|(d, _)| Cookie::read_from_dir(&fs, d).ok().flatten());
        let bookie = match (&cookie, &config.bookie_id) {
            (Some(c), _) => c.bookie_host.clone(),
            (None, Some(id)) => id.clone(),
            (None, None) => bail!(
                "{CMD}: -deleteCookie: no local cookie names the bookie (give bookie_id in -conf)"
            ),
        };
        let uri = metadata
            .map(str::to_owned)
            .or_else(|| config.metadata_service_uri.clone())
            .ok_or_else(|| {
                anyhow!("{CMD}: -deleteCookie needs the metadata service: pass --metadata URI")
            })?;
        delete_remote_cookie(&uri, &bookie)?;
        println!("Deleted the cookie of bookie {bookie} from {uri}");
    }

    for (d, _) in &dirs {
        if !d.is_dir() {
            continue;
        }
        for name in contents(d)? {
            let p = d.join(&name);
            let removed = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            removed.with_context(|| format!("{CMD}: cannot delete {}", p.display()))?;
        }
    }
    drop(locks);
    println!(
        "Formatted bookie data in {}",
        show_dirs(&dirs.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>())
    );
    Ok(())
}

/// A bookie directory and the name of the lock file a bookie holds in it.
pub(crate) type LockedDir = (PathBuf, &'static str);

/// Every directory of the bookie, each with the lock a bookie holds on it (one lock per
/// file, even if a directory plays two parts), locked: refused while a bookie runs there.
/// Directories that do not exist are listed but not locked.
pub(crate) fn lock_bookie_dirs(
    cmd: &str,
    config: &BookieConfig,
) -> anyhow::Result<(Vec<LockedDir>, Vec<FileLock>)> {
    let fs = RealFileSystem;
    let mut dirs: Vec<LockedDir> = Vec::new();
    for d in config.effective_journal_dirs() {
        dirs.push((d, JOURNAL_LOCK_FILE));
    }
    for d in config
        .effective_ledger_dirs()
        .into_iter()
        .chain(config.effective_index_dir())
    {
        dirs.push((d, LOCK_FILE));
    }
    let mut seen = Vec::new();
    dirs.retain(|d| {
        let new = !seen.contains(d);
        seen.push(d.clone());
        new
    });
    let mut locks: Vec<FileLock> = Vec::new();
    for (d, name) in &dirs {
        if !d.is_dir() {
            continue;
        }
        match fs.lock_exclusive(&d.join(name)) {
            Ok(l) => locks.push(l),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => bail!(
                "{cmd}: directory {} is in use by a running bookie: stop it first",
                d.display()
            ),
            Err(e) => bail!("{cmd}: cannot lock {}: {e}", d.join(name).display()),
        }
    }
    Ok((dirs, locks))
}

/// Asks `question` on stderr and reads the answer from stdin: true for y or yes.
pub(crate) fn confirm(question: &str) -> anyhow::Result<bool> {
    eprint!("{question} (Y or N) ");
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}

fn delete_remote_cookie(uri: &str, bookie: &str) -> anyhow::Result<()> {
    let id = folio_types::BookieId::new(bookie)?;
    metadata_connect::with_store(uri, Missing::Refuse, async |store| {
        match store.read_cookie(&id).await {
            Ok(c) => match store.delete_cookie(&id, c.version).await {
                Ok(()) | Err(MetadataError::NotFound { .. }) => Ok(()),
                Err(e) => Err(anyhow::Error::new(e)
                    .context(format!("cannot delete the cookie of bookie {id}"))),
            },
            Err(MetadataError::NotFound { .. }) => Ok(()),
            Err(e) => {
                Err(anyhow::Error::new(e).context(format!("cannot read the cookie of bookie {id}")))
            }
        }
    })
}

/// The entries of `dir` other than the lock files (which stay: they mean nothing
/// unlocked, and removing one a bookie is about to lock would race).
pub(crate) fn contents(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name != LOCK_FILE && name != JOURNAL_LOCK_FILE {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The file of entry log `id` in the ledger directories of the bookie `flags` name.
pub(crate) fn entry_log_path(cmd: &str, flags: &Flags, id: u64) -> anyhow::Result<PathBuf> {
    let dirs = bookie_config(cmd, flags)?.effective_ledger_dirs();
    dirs.iter()
        .map(|d| d.join("current").join(log_file::file_name(id)))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("{cmd}: no entry log with id {id} in {}", show_dirs(&dirs)))
}

/// A path argument rather than an id: it has a separator or the file suffix.
pub(crate) fn looks_like_path(arg: &str, suffix: &str) -> bool {
    arg.contains('/') || arg.ends_with(suffix)
}

pub(crate) fn show_dirs(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
