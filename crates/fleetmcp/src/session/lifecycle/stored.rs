//! A session against its stored record: the store's copy is what says a session exists, so
//! this is where this instance reads it (waiting for a store that does not answer), confirms
//! that a session it holds is still stored and still its own, claims or recreates a session it
//! does not hold, and writes records back. Apart from the lookups in `mod.rs` so that every
//! decision the store's answer drives is read in one place.

use std::sync::Arc;
use std::time::Duration;

use super::{Lookup, Missing, Sessions};
use crate::clock::unix_ms;
use crate::protocol::ProtocolVersion;
use crate::session::LogId;
use crate::session::live::{Ended, Session};
use crate::session::store::{Checked, Claim, Fence, SessionRecord, Standing, StoreError};

/// Pause between attempts to read a session from a store that did not answer.
const STORE_RETRY: Duration = Duration::from_millis(100);

impl Sessions {
    /// Reads a record this instance does not hold. The store is its only copy, so this waits
    /// for it (a paused or restarting Redis), retrying, until `sessions.store_wait_ms`.
    pub(super) async fn read(&self, id: &str) -> Result<Option<SessionRecord>, String> {
        self.read_within(id, self.timing.store_wait).await
    }

    /// [`Sessions::read`], waiting at most `bound`.
    pub(super) async fn read_within(
        &self,
        id: &str,
        bound: Duration,
    ) -> Result<Option<SessionRecord>, String> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.store.get(id)).await {
                Ok(Ok(found)) => return Ok(found),
                Ok(Err(e)) if tokio::time::Instant::now() + STORE_RETRY < deadline => {
                    tracing::debug!(error = %e, "the session store did not answer; retrying");
                    tokio::time::sleep(STORE_RETRY).await;
                }
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err(format!("no answer within {} ms", bound.as_millis())),
            }
        }
    }

    /// A held session is served only while its stored record exists (and, in distributed mode,
    /// still names this instance under the epoch it holds it by).
    ///
    /// No round trip when the store confirmed it before and tracks it (it reports any change:
    /// see `tracking.rs`), unless the record is due for its refresh, or, in distributed mode,
    /// the heartbeat lease ran out. Otherwise one check, bounded by `sessions.check_timeout_ms`,
    /// which also refreshes the record when due. A session another instance claimed meanwhile
    /// (this one was cut off from Redis long enough to be presumed gone) is dropped here and its
    /// request goes to the new holder. When the store cannot answer in time the session is
    /// served from memory, in distributed mode only while the lease holds.
    pub(super) async fn still_stored(&self, session: Arc<Session>) -> Lookup {
        let every = self.timing.refresh_every_ms;
        let fenced = self.fenced();
        // In distributed mode, confirmed in this lease term: a lease that ran out (this process
        // paused, or cut off from Redis) may have let another instance take the session over,
        // which the tracking connection may not have reported (it may be on an old master).
        let term = self.lease.term();
        let this_term = session.was_confirmed_in(term);
        if session.is_confirmed()
            && !session.refresh_due(every)
            && (!fenced || (self.lease.valid() && this_term))
        {
            return Lookup::Held(session);
        }
        // Boxed: the store's check is most of this future's size, and every request's future
        // would hold room for it, copied whenever that future moves into a box (issue 23);
        // only a session due for its check pays the allocation.
        Box::pin(self.confirm_stored(session, fenced, term, this_term)).await
    }

    /// [`Self::still_stored`] for a session due for its check against the store (`term`: the
    /// lease's when the request came; `this_term`: whether the session was confirmed in it).
    async fn confirm_stored(
        &self,
        session: Arc<Session>,
        fenced: bool,
        term: u32,
        this_term: bool,
    ) -> Lookup {
        let every = self.timing.refresh_every_ms;
        let limit = self.timing.check_timeout;
        let fence = fenced.then(|| Fence {
            holder: self.machine_id.clone(),
            epoch: session.epoch(),
        });
        session.begin_confirm();
        let refresh = session.due_for_touch(every);
        // With the lease out (or renewed since it ran out), the store's word counts only from
        // the server in charge now: one that a failover replaced while this process slept still
        // names it holder.
        let after_lapse = fenced && !(this_term && self.lease.valid());
        let checked = tokio::time::timeout(limit, async {
            if after_lapse {
                self.store.confirm_current().await?;
            }
            self.store.check(&session.id, fence.as_ref(), refresh).await
        })
        .await;
        let why = match checked {
            Ok(Ok(checked)) => return self.checked(session, checked, term).await,
            Ok(Err(e)) => e,
            Err(_) => StoreError::Timeout(limit.as_millis() as u64),
        };
        if matches!(why, StoreError::Timeout(_)) {
            tracing::warn!(
                "The session store did not answer within {} ms",
                limit.as_millis()
            );
        }
        if !fenced {
            tracing::warn!(error = %why, "[TransportService] Could not confirm the session is still stored — serving it here");
            return Lookup::Held(session);
        }
        // A lease that ran out since the store last confirmed the session (a new term) may
        // have let another instance take it over: only the store can say it did not.
        if self.lease.valid() && session.was_confirmed_in(self.lease.term()) {
            tracing::warn!(error = %why, "[HA] Could not confirm this node still owns the session — serving it here");
            return Lookup::Held(session);
        }
        tracing::warn!(error = %why, "[HA] Could not confirm this node still owns the session, and its heartbeat lease ran out — not serving it");
        Lookup::Missing(Missing::Unconfirmed)
    }

    /// What the store's answer on a held session means (asked in lease `term`): still this
    /// instance's, never stored (stored now), gone, or taken over by another instance.
    async fn checked(&self, session: Arc<Session>, checked: Checked, term: u32) -> Lookup {
        match checked {
            Checked {
                standing: Standing::Mine,
                tracked,
            } => {
                session.confirmed_in(term);
                if tracked {
                    session.finish_confirm();
                }
                Lookup::Held(session)
            }
            Checked {
                standing: Standing::Gone,
                ..
            } if !session.is_persisted() => {
                // Created while the store was unreachable: it was never stored, so it is not
                // gone. Store it now that the store answers.
                if self.create(&self.record_of(&session)).await.is_ok() {
                    session.mark_persisted();
                }
                Lookup::Held(session)
            }
            Checked {
                standing: Standing::Gone,
                ..
            } => {
                tracing::info!(
                    "[TransportService] The stored session is gone — dropping its transport here"
                );
                self.live.remove(&session.id, Ended::Expired);
                self.end_legacy_stream(&session.id);
                self.events.forget(&session.id).await;
                Lookup::Missing(Missing::Expired)
            }
            Checked {
                standing: Standing::Lost { holder, epoch },
                ..
            } => {
                tracing::warn!(session_id = %LogId(&session.id), owner_node_id = %holder, owner_epoch = epoch, held_epoch = session.epoch(), "[HA] Another node took this session over while this node was unreachable — dropping it here");
                self.live.release(&session.id);
                self.events.release(&session.id).await;
                if holder == self.machine_id {
                    // Claimed again under this very id (a restart reusing it): read it anew.
                    return Lookup::Missing(Missing::StoreUnavailable);
                }
                self.remember_elsewhere(&session.id, &holder);
                Lookup::HeldElsewhere(holder)
            }
        }
    }

    /// Makes this instance the holder of a stored session (distributed mode): a compare-and-set
    /// on the holder and epoch read, so that of two instances claiming one session at once
    /// exactly one wins; the other serves it through the winner. The claim comes before the
    /// session is held here: nothing is served under a claim that was lost.
    pub(super) async fn claim(&self, record: SessionRecord, previous: Option<String>) -> Lookup {
        // Doubled when the store waits for replicas, as for a new session's record.
        let limit = if self.store.waits_for_replicas() {
            self.timing.check_timeout * 2
        } else {
            self.timing.check_timeout
        };
        let term = self.lease.term();
        let claimed =
            tokio::time::timeout(limit, self.store.claim(&record, &self.machine_id)).await;
        let epoch = match claimed {
            Ok(Ok(Claim::Won(epoch))) => epoch,
            Ok(Ok(Claim::Lost { holder, epoch })) if holder == self.machine_id => {
                // Another request for it on this instance claimed it a moment ago (it is held
                // here in a moment), or this instance's orphan scanner did, which claims in the
                // store only: then it is held here now, at the epoch the store gave it (it was
                // answered `503` until the next request, found under the full suite's load).
                match self.claimed_here(&record.id).await {
                    Some(session) => return Lookup::Held(session),
                    None => epoch,
                }
            }
            Ok(Ok(Claim::Lost { holder, epoch })) => {
                tracing::info!(session_id = %LogId(&record.id), winner = %holder, winner_epoch = epoch, "[HA] Another node claimed this session first — relaying to it");
                self.remember_elsewhere(&record.id, &holder);
                return Lookup::HeldElsewhere(holder);
            }
            Ok(Ok(Claim::Gone)) => return Lookup::Missing(Missing::Unknown),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the session could not be claimed");
                return Lookup::Missing(Missing::StoreUnavailable);
            }
            Err(_) => {
                tracing::warn!(
                    "the session could not be claimed: no answer within {} ms",
                    limit.as_millis()
                );
                return Lookup::Missing(Missing::StoreUnavailable);
            }
        };
        let session = self.session_of(&record);
        session.set_epoch(epoch);
        session.confirmed_in(term);
        let Some((session, created)) = self.live.insert_if_absent(session) else {
            return Lookup::Missing(Missing::Full);
        };
        if created {
            tracing::info!(session_node = %record.holder, epoch, "[TransportService] Recreating transport from stored session");
            tracing::info!(
                "[StreamableHttpAdapter] Marked transport as pre-initialized for session recreation"
            );
            if let Some(previous) = previous {
                tracing::info!(session_id = %LogId(&session.id), previous_node_id = %previous, "[HA] Took over session from a stopped node");
            }
        }
        Lookup::Held(session)
    }

    /// The session another request on this instance just claimed, once it is held here
    /// (`None` when it is not within a tenth of a second: no request of this instance claimed
    /// it).
    async fn claimed_here(&self, id: &str) -> Option<Arc<Session>> {
        for _ in 0..50 {
            if let Some(s) = self.live.get(id) {
                return Some(s);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        None
    }

    /// Serves a stored session this instance does not hold: it becomes the holder. `None`
    /// when this instance is full.
    pub(super) async fn recreate(&self, record: SessionRecord) -> Option<Arc<Session>> {
        let session = self.session_of(&record);
        // Concurrent requests for the same session may all read the record; the first to
        // register it recreates it, the others serve the session it registered.
        let (session, created) = self.live.insert_if_absent(session)?;
        if !created {
            return Some(session);
        }
        tracing::info!(session_node = %record.holder, "[TransportService] Recreating transport from stored session");
        tracing::info!(
            "[StreamableHttpAdapter] Marked transport as pre-initialized for session recreation"
        );
        // Written back before the request is served, not in the background: a write landing
        // after a DELETE of the same session would bring it back to life.
        let record = SessionRecord {
            holder: self.machine_id.clone(),
            ..record
        };
        if let Err(why) = self.write(&record).await {
            tracing::warn!(error = %why, "Failed to update session in Redis");
        }
        Some(session)
    }

    /// A session held here from its stored record.
    fn session_of(&self, record: &SessionRecord) -> Arc<Session> {
        let version =
            ProtocolVersion::parse(&record.protocol_version).unwrap_or(ProtocolVersion::LATEST);
        let session = Arc::new(Session::new(
            record.id.as_str().into(),
            version,
            record.client_info.clone(),
            record.client_capabilities.clone(),
            self.shutdown.clone(),
            record.principal.as_deref(),
        ));
        session.set_epoch(record.epoch);
        session.mark_persisted();
        session
    }

    /// The record of a held session, naming this instance as its holder.
    pub(super) fn record_of(&self, session: &Session) -> SessionRecord {
        let (client_info, client_capabilities) = session.client_values();
        SessionRecord {
            id: session.id.to_string(),
            holder: self.machine_id.clone(),
            protocol_version: session.version.as_str().into(),
            client_info,
            client_capabilities,
            created_at: unix_ms(),
            epoch: session.epoch(),
            principal: session.principal().map(String::from),
        }
    }

    /// Writes a new session's record, bounded by `sessions.check_timeout_ms` (doubled when the
    /// store waits for replicas). In distributed mode the store also indexes it under its
    /// holder (for the orphan scanner, which only runs there; the heartbeat prunes the index,
    /// so it is not kept elsewhere).
    /// Deletes the stored record of a session held here and, in distributed mode (where
    /// [`Sessions::create`] indexed it under this instance), its index entry with it.
    pub(super) async fn delete_record(&self, id: &str) -> Result<(), StoreError> {
        if self.fenced() {
            self.store.delete_indexed(id, &self.machine_id).await
        } else {
            self.store.delete(id).await
        }
    }

    pub(super) async fn create(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let bound = self.timing.check_timeout * 2;
        match tokio::time::timeout(bound, self.store.create(record, self.fenced())).await {
            Ok(done) => done,
            Err(_) if self.store.waits_for_replicas() => Err(StoreError::NotDurable(format!(
                "not confirmed within {} ms",
                bound.as_millis()
            ))),
            Err(_) => Err(StoreError::Timeout(bound.as_millis() as u64)),
        }
    }

    /// Writes a record, bounded by `sessions.check_timeout_ms`.
    async fn write(&self, record: &SessionRecord) -> Result<(), String> {
        let bound = self.timing.check_timeout;
        match tokio::time::timeout(bound, self.store.put(record)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", bound.as_millis())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use async_trait::async_trait;
    use tokio_util::sync::CancellationToken;

    use super::super::{Lookup, Sessions, Timing};
    use crate::events::MemoryEventStore;
    use crate::session::{Claim, Holder, Holders, MemorySessionStore, SessionRecord, SessionStore};

    /// Distributed mode's seam as it answers a record naming a holder that is gone.
    struct HolderGone;

    #[async_trait]
    impl Holders for HolderGone {
        async fn holder(&self, record: &SessionRecord) -> Holder {
            Holder::TakeOver(record.holder.clone())
        }
    }

    /// Found under the full suite's load (`fleet_takeover::a_session_taken_over_in_an_earlier_
    /// outage_is_not_served_from_memory_in_the_next`): a request read a session's record
    /// naming a holder that is gone; before its claim, this instance's orphan scanner claimed
    /// the session, in the store only. The request's claim loses to this very instance: the
    /// session is held here at the store's epoch, not refused `503` as no request of this
    /// instance held it.
    #[tokio::test]
    async fn a_session_this_instances_scanner_claimed_is_held_by_the_request_that_found_it() {
        let store = Arc::new(MemorySessionStore::new(Duration::from_secs(60)));
        let read = crate::session::store::test_record("s", "gone");
        store.create(&read, true).await.unwrap();
        let sessions = Sessions::new(
            "me".into(),
            None,
            10,
            store.clone(),
            Arc::new(MemoryEventStore::new(10, 10)),
            Some(Arc::new(HolderGone)),
            Timing {
                check_timeout: Duration::from_millis(500),
                store_wait: Duration::from_secs(1),
                refresh_every_ms: 1000,
            },
            CancellationToken::new(),
        );
        assert_eq!(store.claim(&read, "me").await.unwrap(), Claim::Won(2));
        match sessions.claim(read, Some("gone".into())).await {
            Lookup::Held(s) => assert_eq!(s.epoch(), 2),
            Lookup::Missing(why) => panic!("refused: {why:?}"),
            Lookup::HeldElsewhere(holder) => panic!("sent to {holder}"),
        }
    }
}
