//! `folio shell` commands that touch ledger data, under BookKeeper's names and flags:
//! `readledger`, `simpletest`, `deleteledger`, `bookieinfo` (through the client library) and
//! `bookiesanity` (adds and reads straight to one bookie over the v3 protocol, like
//! BookKeeper's, which checks the local bookie without going through placement).
//! Flags are BookKeeper's single-dash ones (`-ledgerid 7`); `--ledgerid` works too.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail, ensure};
use bytes::Bytes;
use folio_client::conn::{Bookies, TcpConnector, req};
use folio_client::{Client, CreateOptions, OpenOptions};
use folio_metadata::MetadataStore;
use folio_proto::digest::{DigestManager, master_key};
use folio_types::{BookieId, EntryId, LedgerId};

use crate::ledger_cmd::Stdout;
use crate::progress;

/// BookKeeper-style flags: `-name value` pairs and bare `-switch`es, each known by its
/// aliases, and (for commands that take them) up to a given number of positional
/// arguments; anything else is an error naming it.
pub(crate) struct Flags {
    values: HashMap<&'static str, String>,
    switches: Vec<&'static str>,
    pub(crate) positional: Vec<String>,
}

/// (canonical name, aliases, takes a value)
pub(crate) type Spec = (&'static str, &'static [&'static str], bool);

impl Flags {
    pub(crate) fn parse(command: &str, args: &[String], spec: &[Spec]) -> anyhow::Result<Flags> {
        Flags::parse_with_positional(command, args, spec, 0)
    }

    /// Like `parse`, also taking up to `max_positional` arguments that are not flags.
    pub(crate) fn parse_with_positional(
        command: &str,
        args: &[String],
        spec: &[Spec],
        max_positional: usize,
    ) -> anyhow::Result<Flags> {
        let mut flags = Flags {
            values: HashMap::new(),
            switches: Vec::new(),
            positional: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if !a.starts_with('-') && flags.positional.len() < max_positional {
                flags.positional.push(a.clone());
                continue;
            }
            let name = a.trim_start_matches('-');
            let Some((canonical, _, takes_value)) = spec
                .iter()
                .find(|(c, aliases, _)| *c == name || aliases.contains(&name))
                .filter(|_| a.starts_with('-'))
            else {
                bail!("{command}: unknown argument {a:?}");
            };
            if *takes_value {
                let v = it
                    .next()
                    .ok_or_else(|| anyhow!("{command}: {a} needs a value"))?;
                flags.values.insert(canonical, v.clone());
            } else {
                flags.switches.push(canonical);
            }
        }
        Ok(flags)
    }

    pub(crate) fn get<T: std::str::FromStr>(
        &self,
        command: &str,
        name: &str,
    ) -> anyhow::Result<Option<T>> {
        self.values
            .get(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| anyhow!("{command}: invalid -{name} {v:?}"))
            })
            .transpose()
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.switches.contains(&name)
    }
}

fn ledger_id(command: &str, flags: &Flags) -> anyhow::Result<LedgerId> {
    let id: LedgerId = flags
        .get(command, "ledgerid")?
        .ok_or_else(|| anyhow!("{command}: give the ledger with -ledgerid <id>"))?;
    ensure!(
        id >= 0,
        "{command}: invalid ledger id {id}: ledger ids are non-negative"
    );
    Ok(id)
}

async fn client(store: Arc<dyn MetadataStore>) -> anyhow::Result<Client> {
    Ok(Client::connect(store, crate::client_tls::client_config()?).await?)
}

/// `readledger -ledgerid <id> [-firstentryid N] [-lastentryid N] [-force-recovery] [-msg]`.
pub async fn readledger(store: Arc<dyn MetadataStore>, args: &[String]) -> anyhow::Result<()> {
    const C: &str = "readledger";
    let flags = Flags::parse(
        C,
        args,
        &[
            ("ledgerid", &["l"], true),
            ("firstentryid", &["fe"], true),
            ("lastentryid", &["le"], true),
            ("force-recovery", &["r", "forcerecovery"], false),
            ("msg", &["m"], false),
        ],
    )?;
    let id = ledger_id(C, &flags)?;
    let first: EntryId = flags.get(C, "firstentryid")?.unwrap_or(0);
    ensure!(first >= 0, "{C}: invalid -firstentryid {first}");
    let client = client(store).await?;
    let opts = if flags.has("force-recovery") {
        OpenOptions::recovery()
    } else {
        OpenOptions::no_recovery()
    };
    let h = client.open_ledger(id, b"", opts).await?;
    let lac = h.last_add_confirmed();
    let last = flags
        .get::<EntryId>(C, "lastentryid")?
        .map_or(lac, |l| if l < 0 { lac } else { l.min(lac) });
    let bar = progress::bar((last - first + 1).max(0) as u64, "reading");
    let mut out = Stdout::new();
    let mut next = first;
    while next <= last {
        let end = last.min(next + 99);
        for e in h.read(next, end).await? {
            bar.suspend(|| -> anyhow::Result<()> {
                out.line(
                    format!(
                        "--------- Lid={id}, Eid={}, EntrySize={} ---------",
                        e.entry_id,
                        e.payload.len()
                    )
                    .as_bytes(),
                )?;
                if flags.has("msg") {
                    let mut line = b"Data: ".to_vec();
                    line.extend_from_slice(&e.payload);
                    out.line(&line)?;
                }
                Ok(())
            })?;
            bar.inc(1);
        }
        next = end + 1;
    }
    bar.finish_and_clear();
    client.close();
    Ok(())
}

/// `simpletest [-ensemble E] [-writeQuorum Qw] [-ackQuorum Qa] [-numEntries N]`: writes N
/// entries to a new ledger across the ensemble, reads them back, compares, deletes it.
/// `bookieinfo`: every registered bookie's free and total disk space, then the cluster's
/// totals, in BookKeeper's format (bytes, then SI units in parentheses). A bookie that does
/// not answer is named on stderr and left out of the totals; the command fails only if no
/// bookie answers. Totals count each host once, as BookKeeper 4.15+ does, since bookies on
/// one host share its disks.
pub async fn bookieinfo(store: Arc<dyn MetadataStore>, args: &[String]) -> anyhow::Result<()> {
    Flags::parse("bookieinfo", args, &[])?;
    let set = store.list_bookies().await?;
    let client = client(store).await?;
    let mut answers = Vec::new();
    for bookie in set.writable.union(&set.readonly) {
        match client.bookie_info(bookie).await {
            Ok(info) => answers.push((bookie.clone(), info)),
            Err(e) => eprintln!("bookieinfo: {bookie}: {e}"),
        }
    }
    ensure!(
        !answers.is_empty(),
        "Failed to retrieve bookie information from any of the bookies"
    );
    let mut out = Stdout::new();
    out.line(b"Free disk space info:")?;
    let mut by_host = std::collections::BTreeMap::new();
    for (bookie, info) in &answers {
        out.line(
            format!(
                "{bookie}:\tFree: {}{}\tTotal: {}{}",
                info.free_disk_space,
                readable(info.free_disk_space),
                info.total_disk_capacity,
                readable(info.total_disk_capacity)
            )
            .as_bytes(),
        )?;
        let host = bookie
            .as_str()
            .rsplit_once(':')
            .map_or(bookie.as_str(), |(h, _)| h);
        by_host.insert(host.to_string(), *info);
    }
    let free: u64 = by_host.values().map(|i| i.free_disk_space).sum();
    let total: u64 = by_host.values().map(|i| i.total_disk_capacity).sum();
    out.line(
        format!(
            "Total free disk space in the cluster:\t{free}{}",
            readable(free)
        )
        .as_bytes(),
    )?;
    out.line(
        format!(
            "Total disk capacity in the cluster:\t{total}{}",
            readable(total)
        )
        .as_bytes(),
    )?;
    Ok(())
}

/// BookKeeper's `getReadable`: SI units of 1000, at most three decimals rounded down and
/// no trailing zeros, in parentheses; nothing below 1000.
fn readable(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["", "KB", "MB", "GB", "TB"];
    let mut unit = 0;
    let mut scale = 1u64;
    while bytes / scale >= 1000 && unit < UNITS.len() - 1 {
        scale *= 1000;
        unit += 1;
    }
    if unit == 0 {
        return String::new();
    }
    let whole = bytes / scale;
    // Three decimals, rounded down.
    let frac = (bytes % scale) / (scale / 1000);
    let frac = format!("{frac:03}");
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("({whole}{})", UNITS[unit])
    } else {
        format!("({whole}.{frac}{})", UNITS[unit])
    }
}

pub async fn simpletest(store: Arc<dyn MetadataStore>, args: &[String]) -> anyhow::Result<()> {
    const C: &str = "simpletest";
    let flags = Flags::parse(
        C,
        args,
        &[
            ("ensemble", &["e"], true),
            ("writeQuorum", &["w", "writequorum"], true),
            ("ackQuorum", &["a", "ackquorum"], true),
            ("numEntries", &["n", "numentries"], true),
        ],
    )?;
    let e: usize = flags.get(C, "ensemble")?.unwrap_or(3);
    let w: usize = flags.get(C, "writeQuorum")?.unwrap_or(2);
    let a: usize = flags.get(C, "ackQuorum")?.unwrap_or(2);
    let n: u64 = flags.get(C, "numEntries")?.unwrap_or(1000);
    let client = client(store).await?;
    let writer = client
        .create_ledger(CreateOptions::default().quorum(e, w, a))
        .await?;
    let id = writer.id();
    let mut out = Stdout::new();
    out.line(format!("Ledger ID: {id}").as_bytes())?;
    let payload = |i: u64| Bytes::from(format!("simpletest {id} entry {i}"));

    let bar = progress::bar(n, "writing");
    // Pipelined: keep up to 1000 appends in flight.
    let mut pending = std::collections::VecDeque::new();
    for i in 0..n {
        pending.push_back(writer.append(payload(i)));
        if pending.len() >= 1000
            && let Some(ack) = pending.pop_front()
        {
            ack.await?;
            bar.inc(1);
        }
    }
    while let Some(ack) = pending.pop_front() {
        ack.await?;
        bar.inc(1);
    }
    writer.close().await?;
    bar.finish_and_clear();
    out.line(format!("Wrote {n} entries to ledger {id}").as_bytes())?;

    let h = client
        .open_ledger(id, b"", OpenOptions::no_recovery())
        .await?;
    let last = h.last_add_confirmed();
    ensure!(
        last + 1 == n as EntryId,
        "ledger {id} has {} entries, wrote {n}",
        last + 1
    );
    let bar = progress::bar(n, "reading");
    let mut next: EntryId = 0;
    while next <= last {
        let end = last.min(next + 99);
        for entry in h.read(next, end).await? {
            let want = payload(entry.entry_id as u64);
            ensure!(
                entry.payload == want,
                "ledger {id} entry {} reads back different bytes",
                entry.entry_id
            );
            bar.inc(1);
        }
        next = end + 1;
    }
    bar.finish_and_clear();
    out.line(format!("Read {n} entries back from ledger {id}: all match").as_bytes())?;
    client.delete_ledger(id).await?;
    out.line(format!("Deleted ledger {id}").as_bytes())?;
    client.close();
    Ok(())
}

/// `deleteledger -ledgerid <id> [-force]` (no prompt: `-force` is accepted for scripts
/// written for BookKeeper).
pub async fn deleteledger(store: Arc<dyn MetadataStore>, args: &[String]) -> anyhow::Result<()> {
    const C: &str = "deleteledger";
    let flags = Flags::parse(
        C,
        args,
        &[("ledgerid", &["l"], true), ("force", &["f"], false)],
    )?;
    let id = ledger_id(C, &flags)?;
    let client = client(store).await?;
    client.delete_ledger(id).await?;
    client.close();
    Stdout::new().line(format!("Deleted ledger {id}").as_bytes())
}

/// `bookiesanity [-bookie host:port] [-entries N] [-timeout S]`: writes N entries of a new
/// ledger id straight to one bookie (default 127.0.0.1:3181) and reads them back. No
/// ledger metadata is written: the bookie's garbage collector removes the entries.
pub async fn bookiesanity(store: Arc<dyn MetadataStore>, args: &[String]) -> anyhow::Result<()> {
    const C: &str = "bookiesanity";
    let flags = Flags::parse(
        C,
        args,
        &[
            ("bookie", &["b"], true),
            ("entries", &["e"], true),
            ("timeout", &["t"], true),
        ],
    )?;
    let bookie_text = flags
        .values
        .get("bookie")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:3181".into());
    let bookie = BookieId::new(bookie_text.as_str())
        .map_err(|e| anyhow!("{C}: invalid -bookie {bookie_text:?}: {e}"))?;
    let n: i64 = flags.get(C, "entries")?.unwrap_or(10);
    ensure!(n >= 1, "{C}: -entries must be at least 1");
    let timeout = Duration::from_secs(flags.get(C, "timeout")?.unwrap_or(10));

    let bar = progress::bar(n as u64 * 2, "checking");
    sanity_check(store, &bookie, n, timeout, || bar.inc(1)).await?;
    bar.finish_and_clear();
    Stdout::new()
        .line(format!("Bookie sanity test succeeded ({n} entries, bookie {bookie})").as_bytes())
}

/// BookKeeper's bookie sanity test: `n` entries of a fresh ledger id written to `bookie`
/// alone, then read back and compared (`step` is called after each add and each read);
/// `Err` says which entry failed and how. The entries are of a ledger without metadata,
/// which the bookie's garbage collection removes.
pub(crate) async fn sanity_check(
    store: Arc<dyn MetadataStore>,
    bookie: &BookieId,
    n: i64,
    timeout: Duration,
    mut step: impl FnMut(),
) -> anyhow::Result<()> {
    let ledger = store
        .generate_ledger_id()
        .await
        .context("cannot allocate a ledger id")?;
    let password = b"bookiesanity";
    let key = master_key(password);
    let digest = DigestManager::new(ledger, folio_proto::DigestType::Crc32c, password);
    let config = Arc::new(crate::client_tls::client_config()?);
    let bookies = Bookies::new(Arc::new(TcpConnector), config);
    let payload = |i: i64| format!("bookiesanity {ledger} entry {i}").into_bytes();
    let mut length = 0i64;
    for i in 0..n {
        length += payload(i).len() as i64;
        let body = digest.compute(i, i - 1, length, &payload(i));
        bookies
            .call(bookie, req::add(ledger, i, &key, body, false), timeout)
            .await
            .map_err(|e| {
                anyhow!("bookie {bookie} failed to add entry {i} of ledger {ledger}: {e}")
            })?;
        step();
    }
    for i in 0..n {
        let resp = bookies
            .call(bookie, req::read(ledger, i, None), timeout)
            .await
            .map_err(|e| {
                anyhow!("bookie {bookie} failed to read entry {i} of ledger {ledger}: {e}")
            })?;
        let body = resp.read_response.and_then(|r| r.body).ok_or_else(|| {
            anyhow!("bookie {bookie} returned no body for entry {i} of ledger {ledger}")
        })?;
        let entry = digest.verify(&body, i).map_err(|e| {
            anyhow!("bookie {bookie} returned a bad entry {i} of ledger {ledger}: {e}")
        })?;
        ensure!(
            entry.payload.as_ref() == payload(i).as_slice(),
            "bookie {bookie} returned different bytes for entry {i} of ledger {ledger}"
        );
        step();
    }
    bookies.close_all();
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_bookkeeper_prints_them() {
        assert_eq!(super::readable(999), "");
        assert_eq!(super::readable(1000), "(1KB)");
        assert_eq!(super::readable(35_576_426_496), "(35.576GB)");
        assert_eq!(super::readable(40_193_699_840), "(40.193GB)");
        assert_eq!(super::readable(1_500_000), "(1.5MB)");
        assert_eq!(super::readable(1_999_999), "(1.999MB)");
        assert_eq!(super::readable(5_000_000_000_000_000), "(5000TB)");
    }
}
