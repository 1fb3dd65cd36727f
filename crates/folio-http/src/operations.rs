//! Progress of a recover or decommission for every dashboard of the cluster, wherever the
//! operation runs (`folio shell recover`, `decommissionbookie`, or the admin endpoint's PUT):
//! the process running it publishes a Folio operation record in the metadata store
//! (`MetadataStore::publish_operation`, ephemeral: it goes with the process's session), at
//! most once a [`PUBLISH_INTERVAL`], and removes it when the operation ends. The record is
//! the JSON of docs/formats/operations.md; [`RecoverProgress::from_record`] reads it back.

use std::sync::Arc;
use std::time::Duration;

use folio_autorecovery::{LedgerOutcome, LedgerReport};
use folio_metadata::MetadataStore;
use folio_metadata::driver::now_ms;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::bk_api::RecoverProgress;

/// The most often a running operation rewrites its record.
pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);
/// The record format's version (docs/formats/operations.md).
const FORMAT_VERSION: u64 = 1;

impl RecoverProgress {
    /// A new operation on `bookies`, started now by this process.
    pub fn begin(bookies: &[folio_types::BookieId], decommission: bool) -> RecoverProgress {
        let started_ms = now_ms();
        let kind = if decommission {
            "decommission"
        } else {
            "recover"
        };
        RecoverProgress {
            bookies: bookies.iter().map(|b| b.to_string()).collect(),
            decommission,
            started_ms,
            origin: Some(Origin::here()),
            record: Some(record_name(kind, started_ms)),
            ..Default::default()
        }
    }

    /// Counts what `recover`'s callback reports: the number of ledgers first (`None`),
    /// then each ledger as it ends.
    pub fn count(&mut self, total: usize, report: Option<&LedgerReport>) {
        let Some(r) = report else {
            self.total = Some(total);
            return;
        };
        self.done += 1;
        match &r.outcome {
            LedgerOutcome::Failed(why) => self.failed.push((r.ledger, why.clone())),
            LedgerOutcome::OpenFragmentDamaged(_) => self
                .failed
                .push((r.ledger, "its open fragment lost a bookie".into())),
            LedgerOutcome::Replicated { .. } | LedgerOutcome::Deleted => {}
        }
    }

    /// The record's bytes (docs/formats/operations.md).
    pub fn to_record(&self) -> Vec<u8> {
        let origin = self.origin.clone().unwrap_or_else(Origin::here);
        let failed: Vec<Value> = self
            .failed
            .iter()
            .map(|(l, why)| json!({ "ledgerId": l, "reason": why }))
            .collect();
        json!({
            "version": FORMAT_VERSION,
            "kind": if self.decommission { "decommission" } else { "recover" },
            "bookies": self.bookies,
            "host": origin.host,
            "pid": origin.pid,
            "startedAt": self.started_ms,
            "updatedAt": now_ms(),
            "ledgers": self.total,
            "done": self.done,
            "failed": failed,
        })
        .to_string()
        .into_bytes()
    }

    /// Reads the record `name` back; the error says what is wrong with it.
    pub fn from_record(name: &str, data: &[u8]) -> Result<RecoverProgress, String> {
        let v: Value = serde_json::from_slice(data)
            .map_err(|e| format!("operation record {name} is not JSON: {e}"))?;
        let field = |k: &str| {
            v.get(k)
                .ok_or_else(|| format!("operation record {name} has no {k:?}"))
        };
        if field("version")?.as_u64() != Some(FORMAT_VERSION) {
            return Err(format!(
                "operation record {name} has version {}, not {FORMAT_VERSION}",
                v["version"]
            ));
        }
        let bad = |k: &str| format!("operation record {name}: bad {k:?}");
        let decommission = match field("kind")?.as_str() {
            Some("recover") => false,
            Some("decommission") => true,
            _ => return Err(bad("kind")),
        };
        let strings = |k: &str| -> Result<Vec<String>, String> {
            field(k)?
                .as_array()
                .ok_or_else(|| bad(k))?
                .iter()
                .map(|b| b.as_str().map(str::to_string).ok_or_else(|| bad(k)))
                .collect()
        };
        let failed = field("failed")?
            .as_array()
            .ok_or_else(|| bad("failed"))?
            .iter()
            .map(|f| match (f["ledgerId"].as_i64(), f["reason"].as_str()) {
                (Some(l), Some(why)) => Ok((l, why.to_string())),
                _ => Err(bad("failed")),
            })
            .collect::<Result<_, _>>()?;
        let total = match field("ledgers")? {
            Value::Null => None,
            n => Some(n.as_u64().ok_or_else(|| bad("ledgers"))? as usize),
        };
        Ok(RecoverProgress {
            bookies: strings("bookies")?,
            decommission,
            started_ms: field("startedAt")?
                .as_i64()
                .ok_or_else(|| bad("startedAt"))?,
            total,
            done: field("done")?.as_u64().ok_or_else(|| bad("done"))? as usize,
            failed,
            finished: None,
            origin: Some(Origin {
                host: field("host")?.as_str().ok_or_else(|| bad("host"))?.into(),
                pid: field("pid")?.as_u64().ok_or_else(|| bad("pid"))? as u32,
            }),
            record: Some(name.to_string()),
        })
    }
}

/// The process an operation runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub host: String,
    pub pid: u32,
}

impl Origin {
    fn here() -> Origin {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into());
        Origin {
            host,
            pid: std::process::id(),
        }
    }
}

/// `<kind>-<host>-<pid>-<start ms>-<n>` (`n` counts this process's operations, so two
/// started in one millisecond differ), with what a record name may not hold replaced by `_`.
fn record_name(kind: &str, started_ms: i64) -> String {
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let o = Origin::here();
    let host: String = o
        .host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{kind}-{host}-{}-{started_ms}-{n}", o.pid)
}

/// Publishes one operation's progress until [`Publisher::finish`]: the record is written at
/// once, then again after each change, at most once a [`PUBLISH_INTERVAL`], and removed at
/// the end. A metadata error is logged and retried with the next change: the operation itself
/// goes on.
pub struct Publisher {
    progress: watch::Sender<RecoverProgress>,
    task: tokio::task::JoinHandle<()>,
}

impl Publisher {
    /// Starts publishing `progress` (made by [`RecoverProgress::begin`]) in `store`.
    pub fn start(store: Arc<dyn MetadataStore>, progress: RecoverProgress) -> Publisher {
        let name = progress
            .record
            .clone()
            .unwrap_or_else(|| record_name("recover", progress.started_ms));
        let (tx, mut rx) = watch::channel(progress);
        let task = tokio::spawn(async move {
            let mut warned = false;
            loop {
                let data = rx.borrow_and_update().to_record();
                if let Err(e) = store.publish_operation(&name, &data).await
                    && !std::mem::replace(&mut warned, true)
                {
                    tracing::warn!("publishing operation record {name}: {e}");
                }
                tokio::time::sleep(PUBLISH_INTERVAL).await;
                if rx.changed().await.is_err() {
                    break;
                }
            }
            if let Err(e) = store.remove_operation(&name).await {
                tracing::warn!("removing operation record {name}: {e}");
            }
        });
        Publisher { progress: tx, task }
    }

    /// Changes the published progress.
    pub fn update(&self, f: impl FnOnce(&mut RecoverProgress)) {
        self.progress.send_modify(f);
    }

    /// The operation ended: its record is removed (waits for that).
    pub async fn finish(self) {
        let Publisher { progress, task } = self;
        drop(progress);
        let _ = task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_metadata::mem::{MemCluster, unique_name};
    use folio_types::BookieId;

    #[test]
    fn a_record_reads_back_and_a_bad_one_says_why() {
        let b = BookieId::new("10.0.0.1:3181").unwrap();
        let mut p = RecoverProgress::begin(std::slice::from_ref(&b), true);
        p.total = Some(3);
        p.done = 2;
        p.failed.push((7, "no bookie".into()));
        let name = p.record.clone().unwrap();
        assert!(name.starts_with("decommission-"), "{name}");
        // Two started in the same millisecond have records of their own.
        let again = RecoverProgress::begin(std::slice::from_ref(&b), true);
        assert_ne!(again.record, p.record);
        folio_metadata::driver::check_operation_name(&name).unwrap();
        let back = RecoverProgress::from_record(&name, &p.to_record()).unwrap();
        assert_eq!(back, p);
        let e = RecoverProgress::from_record("x", b"{\"version\": 2}").unwrap_err();
        assert!(e.contains("version 2"), "{e}");
        let e = RecoverProgress::from_record("x", b"[").unwrap_err();
        assert!(e.contains("operation record x is not JSON"), "{e}");
    }

    #[tokio::test]
    async fn the_record_follows_the_progress_and_goes_at_the_end() {
        let store: Arc<dyn MetadataStore> =
            Arc::new(MemCluster::new(unique_name("operations")).connect());
        let b = BookieId::new("10.0.0.1:3181").unwrap();
        let p = RecoverProgress::begin(&[b], false);
        let publisher = Publisher::start(store.clone(), p.clone());
        let read = || async {
            let list = store.list_operations().await.unwrap();
            list.iter()
                .map(|(n, d)| RecoverProgress::from_record(n, d).unwrap())
                .collect::<Vec<_>>()
        };
        publisher.update(|p| p.count(2, None));
        let counted = async {
            loop {
                let list = read().await;
                if list.first().is_some_and(|op| op.total == Some(2)) {
                    return list;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let list = tokio::time::timeout(Duration::from_secs(60), counted)
            .await
            .expect("the count is published");
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0].record, p.record);
        publisher.finish().await;
        assert_eq!(read().await, vec![]);
    }
}
