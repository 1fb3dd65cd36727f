//! The Auditor election as BookKeeper's `AuditorElector` / `ZkLedgerAuditorManager` runs it
//! (spec §5.8, seed 003): each candidate creates an ephemeral-sequential vote
//! `underreplication/auditorelection/V_<seq>` holding a text `AuditorVoteFormat`; the lowest
//! sequence number is the Auditor, which also writes its vote into the
//! `auditorelection` znode itself. Others watch the vote just before theirs.

use async_trait::async_trait;
use folio_metadata::prelude::AuditorElection;

use crate::store::ZkMetadataStore;
use std::sync::Arc;

use folio_metadata::driver::EphemeralCandidacy;
use folio_metadata::{LeaderCandidacy, Result, SessionState};
use folio_types::BookieId;
use tokio::sync::watch;
use zookeeper_client as zk;

use crate::paths::UNDERREPLICATION;
use crate::session::{Zk, ephemeral_sequential};
use folio_metadata::text;

fn election_rel() -> String {
    format!("{UNDERREPLICATION}/auditorelection")
}

/// Votes sorted by sequence number: (name, sequence).
async fn votes(zk: &Zk) -> Result<Vec<(String, i64)>> {
    let mut v: Vec<(String, i64)> = zk
        .children(&election_rel(), "the Auditor election")
        .await?
        .into_iter()
        .filter_map(|c| {
            let seq = c.strip_prefix("V_")?.parse().ok()?;
            Some((c, seq))
        })
        .collect();
    v.sort_by_key(|(_, seq)| *seq);
    Ok(v)
}

/// Follows the election until this vote is gone; keeps `leader` up to date.
async fn campaign(zk: Arc<Zk>, name: String, vote: Vec<u8>, leader: Arc<watch::Sender<bool>>) {
    let mut state = zk.state.subscribe();
    let mut shutdown = zk.shutdown.subscribe();
    let Ok(client) = zk.client() else {
        leader.send_replace(false);
        return;
    };
    let dir = zk.abs(&election_rel());
    loop {
        if *state.borrow_and_update() != SessionState::Connected {
            // Disconnected: stop acting until the session is back; expired/closed: done.
            leader.send_replace(false);
            match state.wait_for(|s| *s != SessionState::Disconnected).await {
                Ok(s) if *s == SessionState::Connected => continue,
                _ => return,
            }
        }
        let Ok(all) = votes(&zk).await else {
            // A failed read (a connection blip): stop acting, look again shortly.
            leader.send_replace(false);
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => continue,
                _ = shutdown.wait_for(|s| *s) => return,
            }
        };
        let Some(pos) = all.iter().position(|(n, _)| *n == name) else {
            // Our vote is gone (session expired, or resigned): no longer a candidate.
            leader.send_replace(false);
            return;
        };
        let watch_path = if pos == 0 {
            // Elected: publish the vote in the election node, as BookKeeper's Auditor does.
            let _ = zk.run(client.set_data(&dir, &vote, None)).await;
            leader.send_replace(true);
            format!("{dir}/{name}")
        } else {
            leader.send_replace(false);
            format!("{dir}/{}", all[pos - 1].0)
        };
        let watcher = match zk.run(client.check_and_watch_stat(&watch_path)).await {
            Ok(Ok((Some(_), w))) => w,
            Ok(Ok((None, _))) => continue, // the predecessor just left: look again
            _ => {
                leader.send_replace(false);
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
        };
        tokio::select! {
            e = watcher.changed() => {
                if e.event_type == zk::EventType::Session {
                    leader.send_replace(false);
                }
            }
            _ = state.changed() => {}
            _ = shutdown.wait_for(|s| *s) => {
                leader.send_replace(false);
                return;
            }
        }
    }
}

#[async_trait]
impl AuditorElection for ZkMetadataStore {
    async fn current_auditor(&self) -> Result<Option<BookieId>> {
        let zk = &self.zk;
        for (name, _) in votes(zk).await? {
            let rel = format!("{}/{name}", election_rel());
            // The lowest vote may vanish while we read it: then the next one is the Auditor.
            let Some((data, _)) = zk.get(&rel, "the Auditor vote").await? else {
                continue;
            };
            return text::decode_bookie_id(&format!("Auditor vote {name}"), &data).map(Some);
        }
        Ok(None)
    }

    async fn join_auditor_election(
        &self,
        candidate: &BookieId,
    ) -> Result<Box<dyn LeaderCandidacy>> {
        let zk = self.zk.clone();
        let what = "the Auditor election";
        let vote = text::encode_bookie_id(candidate.as_str());
        let rel = format!("{}/V_", election_rel());
        let (_, seq) = zk
            .create_with_parents(&rel, &vote, &ephemeral_sequential())
            .await?
            .map_err(|e| zk.err(e, what, None))?;
        let name = format!("V_{seq}");
        let path = zk.abs(&format!("{}/{name}", election_rel()));
        zk.own(&path);
        let (leader_tx, leader_rx) = watch::channel(false);
        let leader_tx = Arc::new(leader_tx);
        let task = tokio::spawn(campaign(zk.clone(), name, vote, leader_tx.clone()));
        Ok(Box::new(EphemeralCandidacy::new(
            zk, path, leader_tx, leader_rx, task,
        )))
    }
}
