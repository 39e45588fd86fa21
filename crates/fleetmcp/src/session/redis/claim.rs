//! Claims: making another instance the holder of a session, fenced on the holder and epoch
//! the claimer read (`SessionStore::claim`, one record, for an on-demand takeover), or many at
//! once (`RedisSessionStore::claim_many`, for the orphan scanner: one script per batch on one
//! server, one per master and batch on a cluster). The claims that win move their sessions
//! between the holders' indexes.

use super::{RedisSessionStore, StoredRecord};
use crate::clock::unix_ms;
use crate::redis_conn::CommandError;
use crate::session::store::{Claim, SessionRecord, StoreError};

/// Claims the record at `KEYS[1]` if it names holder `ARGV[1]` under epoch `ARGV[2]`: writes
/// `ARGV[3]` (the record naming the new holder) with expiry `ARGV[4]` ms (the caller then moves
/// the session between the holders' indexes). Answers like [`CHECK`](super::CHECK).
pub(super) const CLAIM: &str = concat!(
    holder_of_record!(),
    r#"
if node ~= ARGV[1] or epoch ~= tonumber(ARGV[2]) then return {2, tostring(node), epoch} end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return {1, node, epoch}
"#
);

/// [`CLAIM`] for many records in one call, on one server (the keys must share a slot on a
/// cluster): `KEYS` the records, `ARGV[1]` the expiry in ms, then per record its expected holder,
/// its expected epoch and the record naming the new holder (`ARGV[3i-1..3i+1]`). Answers one
/// `{code, holder, epoch}` like [`CLAIM`]'s per record, in order. One `MGET` for them all and one
/// `SET` per claim won: commands inside a script count as Redis's own work, and the orphan
/// scanner's recovery of a dead instance's sessions costs about one command per session so.
const CLAIM_MANY: &str = r#"
local values = redis.call('MGET', unpack(KEYS))
local out = {}
for i, key in ipairs(KEYS) do
  local node, epoch, code = '', 0, 0
  local v = values[i]
  if v then
    local ok, r = pcall(cjson.decode, v)
    if ok and type(r) == 'table' then
      node = (type(r.session) == 'table' and r.session.nodeId) or r.nodeId or ''
      epoch = tonumber(r.epoch) or 1
      local at = 3 * i - 1
      if node == ARGV[at] and epoch == tonumber(ARGV[at + 1]) then
        redis.call('SET', key, ARGV[at + 2], 'PX', ARGV[1])
        code = 1
      else
        code = 2
      end
    end
  end
  out[i] = {code, tostring(node), epoch}
end
return out
"#;

/// [`CLAIM`] for many records of one Redis Cluster master, in any of its slots (Redis 7's
/// `allow-cross-slot-keys`; `KEYS[1]`, one of them, routes it there): `ARGV[1]` the expiry in
/// ms, then per record its key, its expected holder, its expected epoch and the record naming
/// the new holder (`ARGV[4i-2..4i+1]`). One `SET ... GET` per record, the read and the write in
/// one command: the answer of [`CLAIM`] when the old record named holder and epoch, else the
/// old record is put back at once (the script is atomic: nobody sees the new one), with its
/// expiry reset to a full one (a claim that loses a race, rare: the scanner read the record a
/// moment before), and a record that was gone is deleted again. A key this master does not
/// serve (the slot moved) answers `{3}`, claimed again by [`CLAIM`]. About one command per
/// record, where [`CLAIM_MANY`] on one slot costs an `EVALSHA` and an `MGET` more a slot: the
/// records of a dead instance are one or a few a slot.
const CLAIM_SPREAD: &str = r#"#!lua flags=allow-cross-slot-keys
local out = {}
for i = 1, (#ARGV - 1) / 4 do
  local at = 4 * i - 2
  local key = ARGV[at]
  local old = redis.pcall('SET', key, ARGV[at + 3], 'PX', ARGV[1], 'GET')
  if type(old) == 'table' then
    out[i] = {3, '', 0}
  else
    local node, epoch, code = '', 0, 0
    if old then
      local ok, r = pcall(cjson.decode, old)
      if ok and type(r) == 'table' then
        node = (type(r.session) == 'table' and r.session.nodeId) or r.nodeId or ''
        epoch = tonumber(r.epoch) or 1
        code = 2
        if node == ARGV[at + 1] and epoch == tonumber(ARGV[at + 2]) then code = 1 end
      end
      if code ~= 1 then redis.call('SET', key, old, 'PX', ARGV[1]) end
    else
      redis.call('DEL', key)
    end
    out[i] = {code, tostring(node), epoch}
  end
end
return out
"#;

/// A fenced script's answer for one record: `{code, holder, epoch}` (see [`CHECK`](super::CHECK)).
type Answer = (i64, String, u64);

/// [`CLAIM_SPREAD`] batches in flight at once.
const SPREAD_AT_ONCE: usize = 4;

/// The answer of [`CLAIM_SPREAD`] for a record whose key its master does not serve.
const NOT_HERE: i64 = 3;

/// Records claimed per [`CLAIM_MANY`] call: its arguments (about 300 bytes a record) and the
/// time Redis runs it for (well under a millisecond) stay small.
const CLAIM_MANY_BATCH: usize = 500;

impl RedisSessionStore {
    /// Claims every record of `records` for `to` (see [`SessionStore::claim`](crate::session::SessionStore::claim)), all sent at
    /// once; the answers come in the same order. For the orphan scanner, which claims a dead
    /// instance's sessions in batches. The won sessions then move between the indexes in one
    /// command per index.
    pub async fn claim_many(
        &self,
        records: &[SessionRecord],
        to: &str,
    ) -> Result<Vec<Claim>, StoreError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let now = unix_ms();
        let answers = if !self.conn.config().is_cluster() {
            // One server: one script per batch, confirmed by the replicas before any claim
            // counts when `writes_durably` (a claim a failover throws away would be served,
            // then undone: F8).
            let mut answers = Vec::with_capacity(records.len());
            for batch in records.chunks(CLAIM_MANY_BATCH) {
                let mut pipe = redis::pipe();
                pipe.add_command(self.claim_many_command(batch, to, now)?);
                let (got,): (Vec<(i64, String, u64)>,) = self.conn.pipe_durably(pipe).await?;
                if got.len() != batch.len() {
                    return Err(StoreError::Unavailable(format!(
                        "the claim script answered {} of {} records",
                        got.len(),
                        batch.len()
                    )));
                }
                answers.extend(got.into_iter().map(Ok));
            }
            answers
        } else {
            self.claim_spread(records, to, now).await?
        };
        let claims: Vec<Result<Claim, CommandError>> = records
            .iter()
            .zip(answers)
            .map(|(record, answer)| answer.map(|a| Self::claim_answer(record, a)))
            .collect();
        // The claims that won move between the indexes even if another failed.
        let won: Vec<&SessionRecord> = records
            .iter()
            .zip(&claims)
            .filter(|(_, c)| matches!(c, Ok(Claim::Won(_))))
            .map(|(r, _)| r)
            .collect();
        self.index_moved(&won, to, now).await;
        Ok(claims.into_iter().collect::<Result<_, _>>()?)
    }

    /// [`RedisSessionStore::claim_many`] on a cluster: the records grouped by the master that
    /// serves their slot (one `CLUSTER SLOTS`), one [`CLAIM_SPREAD`] per master and batch, sent
    /// together; a record left out (its master unknown, a batch that failed, a slot that moved,
    /// a server older than Redis 7) is claimed by its own [`CLAIM`] script.
    async fn claim_spread(
        &self,
        records: &[SessionRecord],
        to: &str,
        now: u64,
    ) -> Result<Vec<Result<Answer, CommandError>>, StoreError> {
        let mut answers: Vec<Option<Result<Answer, CommandError>>> =
            (0..records.len()).map(|_| None).collect();
        let masters = match self.conn.slot_masters().await {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::debug!(error = %e, "the slot map was not read; claiming one record a script");
                None
            }
        };
        let mut by_master: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
        for (i, r) in records.iter().enumerate() {
            let slot = crate::redis_conn::slot_of(self.key(&r.id).as_bytes());
            if let Some(master) = masters.as_ref().and_then(|m| m.of(slot)) {
                by_master.entry(master).or_default().push(i);
            }
        }
        let mut batches = Vec::new();
        for group in by_master.values() {
            for batch in group.chunks(CLAIM_MANY_BATCH) {
                batches.push((batch, self.claim_spread_command(records, batch, to, now)?));
            }
        }
        // A few at once: each is bounded by the command timeout from when it is sent.
        let mut sent = Vec::with_capacity(batches.len());
        for some in batches.chunks(SPREAD_AT_ONCE) {
            let runs = some.iter().map(|(batch, cmd)| async move {
                (*batch, self.conn.run::<Vec<Answer>>(cmd.clone()).await)
            });
            sent.extend(futures_util::future::join_all(runs).await);
        }
        for (batch, got) in sent {
            match got {
                Ok(got) if got.len() == batch.len() => {
                    for (&i, answer) in batch.iter().zip(got) {
                        if answer.0 != NOT_HERE {
                            answers[i] = Some(Ok(answer));
                        }
                    }
                }
                Ok(_) => tracing::debug!(
                    "a claim script answered for other records; claiming one record a script"
                ),
                Err(e) => {
                    tracing::debug!(error = %e, "a claim script failed; claiming one record a script")
                }
            }
        }
        // The rest one script each (three commands with the `GET` and `SET` inside), sent
        // together. A batch that failed may have claimed some already (a timeout): a record
        // this instance already holds at the next epoch is a claim won.
        let mut rest = Vec::new();
        for (i, r) in records.iter().enumerate() {
            if answers[i].is_none() {
                rest.push((i, self.claim_record(r, to, now)?));
            }
        }
        let claimed = rest
            .into_iter()
            .map(|(i, inv)| async move { (i, self.conn.eval::<(i64, String, u64)>(inv).await) });
        for (i, got) in futures_util::future::join_all(claimed).await {
            let mine = |(_, node, epoch): &(i64, String, u64)| {
                node == to && *epoch == records[i].epoch + 1
            };
            answers[i] = Some(got.map(|a| if mine(&a) { (1, a.1, a.2) } else { a }));
        }
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(CommandError::Unavailable("not claimed".into()))))
            .collect())
    }

    /// [`CLAIM_SPREAD`] for the records `batch` (indexes into `records`), one master's.
    fn claim_spread_command(
        &self,
        records: &[SessionRecord],
        batch: &[usize],
        to: &str,
        now: u64,
    ) -> Result<redis::Cmd, StoreError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(CLAIM_SPREAD).arg(1);
        if let Some(&first) = batch.first() {
            cmd.arg(self.key(&records[first].id));
        }
        cmd.arg(self.ttl_ms);
        for &i in batch {
            let record = &records[i];
            cmd.arg(self.key(&record.id))
                .arg(&record.holder)
                .arg(record.epoch)
                .arg(Self::encode(&self.claimed_wire(record, to, now))?);
        }
        Ok(cmd)
    }

    /// The fenced script that makes `to` the holder of `record` at `now` (the record it becomes
    /// is encoded here).
    fn claim_record(
        &self,
        record: &SessionRecord,
        to: &str,
        now: u64,
    ) -> Result<redis::ScriptInvocation<'_>, StoreError> {
        let mut inv = self.claim.prepare_invoke();
        inv.key(self.key(&record.id))
            .arg(&record.holder)
            .arg(record.epoch)
            .arg(Self::encode(&self.claimed_wire(record, to, now))?)
            .arg(self.ttl_ms);
        Ok(inv)
    }

    /// [`RedisSessionStore::claim_record`] as a plain `EVAL`, which a pipeline can carry (with
    /// the `WAIT` that confirms it on the same connection).
    fn claim_command(
        &self,
        record: &SessionRecord,
        to: &str,
        now: u64,
    ) -> Result<redis::Cmd, StoreError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(CLAIM)
            .arg(1)
            .arg(self.key(&record.id))
            .arg(&record.holder)
            .arg(record.epoch)
            .arg(Self::encode(&self.claimed_wire(record, to, now))?)
            .arg(self.ttl_ms);
        Ok(cmd)
    }

    /// [`CLAIM_MANY`] for `records` (one server), as a plain `EVAL` a pipeline can carry.
    fn claim_many_command(
        &self,
        records: &[SessionRecord],
        to: &str,
        now: u64,
    ) -> Result<redis::Cmd, StoreError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(CLAIM_MANY).arg(records.len());
        for record in records {
            cmd.arg(self.key(&record.id));
        }
        cmd.arg(self.ttl_ms);
        for record in records {
            cmd.arg(&record.holder)
                .arg(record.epoch)
                .arg(Self::encode(&self.claimed_wire(record, to, now))?);
        }
        Ok(cmd)
    }

    /// The record `record` becomes when `to` claims it at `now`.
    fn claimed_wire(&self, record: &SessionRecord, to: &str, now: u64) -> StoredRecord {
        let mut wire = self.wire(&SessionRecord {
            holder: to.to_string(),
            epoch: record.epoch + 1,
            ..record.clone()
        });
        wire.reassigned_at = Some(now);
        wire.reassigned_from = Some(record.holder.clone());
        wire
    }

    /// After claims won: the sessions of `won` leave their former holders' indexes and join
    /// `to`'s, scored `now`. Best effort (the record is the truth, see the module
    /// documentation): a failure is logged, and `to`'s next refresh of each writes it again.
    async fn index_moved(&self, won: &[&SessionRecord], to: &str, now: u64) {
        if won.is_empty() {
            return;
        }
        // Sessions taken over count as sessions opened here: the claimer's index grows first.
        let grow = won
            .iter()
            .filter_map(|_| {
                self.conn
                    .shared::<crate::session::IndexBuckets>()
                    .created(to)
            })
            .max();
        if let Some(holds) = grow
            && let Err(e) = crate::session::index::grow(&self.conn, to, holds).await
        {
            tracing::debug!(error = %e, "the session index's bucket count was not grown");
        }
        // One command per bucket: the scanner claims a dead instance's bucket at a time, whose
        // sessions fall in few of the claimer's buckets (the same hash, counts powers of two).
        let mut to_buckets: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
        for r in won {
            to_buckets
                .entry(self.index_key(to, &r.id))
                .or_default()
                .push(r.id.as_str());
        }
        let mut from: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
        // A claim from itself (a holder taking back what its own scanner adopted) stays put.
        for r in won.iter().filter(|r| r.holder != to) {
            from.entry(self.index_key(&r.holder, &r.id))
                .or_default()
                .push(r.id.as_str());
        }
        let adds = to_buckets.into_iter().map(|(key, ids)| {
            let mut add = redis::cmd("ZADD");
            add.arg(key);
            for id in ids {
                add.arg(now).arg(id);
            }
            self.conn.run::<i64>(add)
        });
        let removes = from.into_iter().map(|(key, ids)| {
            let mut rem = redis::cmd("ZREM");
            rem.arg(key).arg(ids);
            self.conn.run::<i64>(rem)
        });
        let (added, removed) = futures_util::join!(
            futures_util::future::join_all(adds),
            futures_util::future::join_all(removes)
        );
        if let Some(e) = added.into_iter().chain(removed).find_map(Result::err) {
            tracing::debug!(error = %e, "claimed sessions: an index was not updated (the next refresh writes it)");
        }
    }

    fn claim_answer(record: &SessionRecord, (code, holder, epoch): (i64, String, u64)) -> Claim {
        match code {
            1 => Claim::Won(record.epoch + 1),
            2 => Claim::Lost { holder, epoch },
            _ => Claim::Gone,
        }
    }

    /// [`SessionStore::claim`](crate::session::SessionStore::claim): one record, confirmed by
    /// the replicas when the connection writes durably.
    pub(super) async fn claim_one(
        &self,
        record: &SessionRecord,
        to: &str,
    ) -> Result<Claim, StoreError> {
        let now = unix_ms();
        let answer = if self.conn.writes_durably() {
            // A takeover is served only once the replicas `wait_replicas` asks for have it: one
            // written to a master in the second before a failover demotes it is thrown away,
            // and the session's epoch goes back (two holders, RELIABILITY F8).
            let mut pipe = redis::pipe();
            pipe.add_command(self.claim_command(record, to, now)?);
            let (answer,): ((i64, String, u64),) = self.conn.pipe_durably(pipe).await?;
            answer
        } else {
            self.conn.eval(self.claim_record(record, to, now)?).await?
        };
        let claim = Self::claim_answer(record, answer);
        if matches!(claim, Claim::Won(_)) {
            self.index_moved(&[record], to, now).await;
        }
        Ok(claim)
    }
}
