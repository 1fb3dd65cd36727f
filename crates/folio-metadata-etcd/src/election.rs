//! The Auditor election on etcd (Folio's design; BookKeeper's etcd driver has none), the
//! usual etcd recipe: each candidate puts a vote key
//! `S/underreplication/auditorelection/<lease hex>-<n>` holding a text `AuditorVoteFormat`,
//! attached to its session lease; the vote with the lowest create revision is the Auditor.
//! A candidate that is not first watches the vote just before its own.

use async_trait::async_trait;
use folio_metadata::prelude::AuditorElection;

use crate::store::EtcdMetadataStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use etcd_client::{EventType, GetOptions, KeyValue, SortOrder, SortTarget, WatchOptions};
use folio_metadata::driver::EphemeralCandidacy;
use folio_metadata::{LeaderCandidacy, MetadataError, Result, SessionState};
use folio_types::BookieId;
use tokio::sync::watch;

use crate::keys::Keys;
use crate::session::Etcd;
use folio_metadata::text;

static CANDIDACIES: AtomicU64 = AtomicU64::new(0);

/// Votes in create-revision order, and the revision they were read at.
async fn votes(etcd: &Etcd) -> Result<(Vec<KeyValue>, i64)> {
    let dir = etcd.keys.election();
    let opts = GetOptions::new()
        .with_range(Keys::end_of(&dir))
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let mut c = etcd.client()?;
    let mut resp = etcd
        .run("the Auditor election", c.get(format!("{dir}/"), Some(opts)))
        .await?;
    let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
    Ok((resp.take_kvs(), rev))
}

fn parse_vote(kv: &KeyValue) -> Result<BookieId> {
    let name = String::from_utf8_lossy(kv.key());
    text::decode_bookie_id(&format!("Auditor vote {name}"), kv.value())
}

/// Follows the election until this vote is gone; keeps `leader` up to date.
async fn campaign(etcd: Arc<Etcd>, key: String, leader: Arc<watch::Sender<bool>>) {
    let mut state = etcd.state.subscribe();
    let mut shutdown = etcd.shutdown.subscribe();
    loop {
        if *state.borrow_and_update() != SessionState::Connected {
            leader.send_replace(false);
            match state.wait_for(|s| *s != SessionState::Disconnected).await {
                Ok(s) if *s == SessionState::Connected => continue,
                _ => return,
            }
        }
        let Ok((all, rev)) = votes(&etcd).await else {
            leader.send_replace(false);
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            continue;
        };
        let Some(pos) = all.iter().position(|kv| kv.key() == key.as_bytes()) else {
            // Our vote is gone (lease expired or resigned): no longer a candidate.
            leader.send_replace(false);
            return;
        };
        // Watch our own vote when leading (to notice its loss), else the one before it.
        let watched = if pos == 0 {
            leader.send_replace(true);
            all[0].key().to_vec()
        } else {
            leader.send_replace(false);
            all[pos - 1].key().to_vec()
        };
        let Ok(mut c) = etcd.client() else {
            leader.send_replace(false);
            return;
        };
        let opts = WatchOptions::new().with_start_revision(rev + 1);
        let mut stream = match etcd
            .run("the Auditor election", c.watch(watched, Some(opts)))
            .await
        {
            Ok(s) => s,
            Err(_) => {
                leader.send_replace(false);
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
        };
        loop {
            tokio::select! {
                m = stream.message() => match m {
                    Ok(Some(resp)) if !resp.canceled() => {
                        if resp.events().iter().any(|e| e.event_type() == EventType::Delete) {
                            break;
                        }
                    }
                    _ => { leader.send_replace(false); break; }
                },
                _ = state.changed() => break,
                _ = shutdown.wait_for(|s| *s) => {
                    leader.send_replace(false);
                    return;
                }
            }
        }
    }
}

#[async_trait]
impl AuditorElection for EtcdMetadataStore {
    async fn current_auditor(&self) -> Result<Option<BookieId>> {
        let etcd = &self.etcd;
        let (votes, _) = votes(etcd).await?;
        votes.first().map(parse_vote).transpose()
    }

    async fn join_auditor_election(
        &self,
        candidate: &BookieId,
    ) -> Result<Box<dyn LeaderCandidacy>> {
        let etcd = self.etcd.clone();
        let key = etcd
            .keys
            .vote(etcd.lease, CANDIDACIES.fetch_add(1, Ordering::Relaxed));
        let vote = text::encode_bookie_id(candidate.as_str());
        if etcd
            .create(&key, &vote, true, "the Auditor election")
            .await?
            .is_none()
        {
            return Err(MetadataError::Internal(format!(
                "Auditor vote {key} already exists"
            )));
        }
        let (leader_tx, leader_rx) = watch::channel(false);
        let leader_tx = Arc::new(leader_tx);
        let task = tokio::spawn(campaign(etcd.clone(), key.clone(), leader_tx.clone()));
        Ok(Box::new(EphemeralCandidacy::new(
            etcd, key, leader_tx, leader_rx, task,
        )))
    }
}
