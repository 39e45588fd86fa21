//! Events in Redis Streams, so that a stream broken on one instance can be resumed with
//! `Last-Event-ID` on another.
//!
//! One Redis stream per SSE stream, at `<prefix>events:{<session>}:<stream>` (the braces keep
//! a session's keys in one Cluster slot), trimmed to the configured length and expiring with
//! the session's activity; the set `<prefix>events:{<session>}` lists them so that ending the
//! session deletes them all. A completed stream ends with an entry that carries no data.
//!
//! Redis entry ids (`<ms>-<n>`) become the sequence part of our event ids as `ms << 20 | n`.
//!
//! A reader is woken by the appends of this process. It reads Redis when woken, and, when its
//! stream may be written by another process, also from time to time ([`writer`]): an idle
//! stream that only this process writes costs no Redis command.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use parking_lot::Mutex;
use redis::Value as RedisValue;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::budget::{Bounds, Budget, ReaderMark};
use super::{
    Cursor, EventStore, EventStoreError, STANDALONE_STREAM, StoredEvent, StreamId, UNSTORED_WAIT,
    Unresolved, event_id, parse_event_id, session_tag,
};
use crate::process_liveness::ProcessLiveness;
use crate::redis_conn::{CommandError, RedisConn};

mod bounds;
mod writer;

use writer::{POLL, Verdict, WriterView, Writers};

/// Entries read per `XRANGE`.
const BATCH: usize = 100;
/// Stores a request's final answer (`ARGV[1]`) unless one of the stream's newest entries
/// carries it, then the end marker; nothing if the stream has ended. The stream is indexed and
/// given its expiry as on a first append (its earlier appends may all have failed).
const FINISH: &str = r#"
local recent = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 16)
local present = false
for _, e in ipairs(recent) do
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'end' then return 0 end
    if f[i] == 'd' and f[i + 1] == ARGV[1] then present = true end
  end
end
if not present then
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'd', ARGV[1])
end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'end', '')
redis.call('SADD', KEYS[2], KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"#;

/// An [`EventStore`] on Redis Streams, sharing the instance's Redis connection.
pub struct RedisEventStore {
    redis: RedisConn,
    prefix: String,
    max_len: usize,
    ttl_ms: u64,
    /// A reader that cannot read its stream for this long ends (the client resumes it later
    /// with `Last-Event-ID`), rather than waiting on a store that does not answer.
    read_outage: Duration,
    /// Wakes readers in this process when this process appends, and ends superseded readers.
    local: Mutex<HashMap<String, Arc<LocalStream>>>,
    finish: redis::Script,
    /// Who writes here: streams name their writer, so that readers know when to look in
    /// Redis, and (in distributed mode) end a gone writer's stream.
    writers: Option<Arc<Writers>>,
    /// What this process wrote and Redis still keeps, in bytes ([`super::budget`]).
    budget: Arc<Mutex<Budget>>,
}

#[derive(Default)]
struct LocalStream {
    notify: Notify,
    /// When this process last pushed the stream's expiry out (None: never, so the stream is
    /// not yet in the session's index either).
    expiry_pushed: Mutex<Option<std::time::Instant>>,
    generation: Mutex<u64>,
    /// `end_reader`: the reader of this generation ends once past this sequence number.
    cut: Mutex<Option<(u64, u64)>>,
    /// This process appended to the stream (or tried to): it writes it, and while it lives
    /// a resume of the stream waits for what it stores, however long Redis refuses it.
    written: std::sync::atomic::AtomicBool,
}

fn seq_of(entry_id: &str) -> Option<u64> {
    let (ms, n) = entry_id.split_once('-')?;
    let ms: u64 = ms.parse().ok()?;
    let n: u64 = n.parse().ok()?;
    (n < (1 << 20)).then_some((ms << 20) | n)
}

fn entry_of(seq: u64) -> String {
    format!("{}-{}", seq >> 20, seq & ((1 << 20) - 1))
}

impl RedisEventStore {
    /// `max_len`: entries kept per stream; `ttl_ms`: how long a stream outlives its last append;
    /// `read_outage`: how long a reader waits on a store it cannot read before it ends.
    pub fn new(redis: RedisConn, max_len: usize, ttl_ms: u64, read_outage: Duration) -> Self {
        let prefix = redis.config().key_prefix.clone();
        let bounds = Bounds {
            per_session: usize::MAX,
            per_instance: usize::MAX,
            streams_per_session: usize::MAX,
            events_per_stream: max_len,
            ttl: Some(Duration::from_millis(ttl_ms)),
        };
        Self {
            budget: Arc::new(Mutex::new(Budget::new(bounds))),
            redis,
            prefix,
            max_len,
            ttl_ms,
            read_outage,
            local: Mutex::new(HashMap::new()),
            finish: redis::Script::new(FINISH),
            writers: None,
        }
    }

    /// Names this instance (machine id `node`) as the writer of the answer streams it starts,
    /// so that their readers here wait for its announcements instead of reading Redis. In
    /// distributed mode, `liveness` also lets a reader end a stream whose writer is gone, and
    /// says that only a session's holder writes its standalone stream.
    pub fn with_writers(mut self, node: &str, liveness: Option<Arc<dyn ProcessLiveness>>) -> Self {
        self.writers = Some(Arc::new(Writers::new(node, liveness)));
        self
    }

    fn stream_key(&self, session: &str, stream: StreamId) -> String {
        format!("{}events:{{{session}}}:{stream}", self.prefix)
    }
    fn index_key(&self, session: &str) -> String {
        format!("{}events:{{{session}}}", self.prefix)
    }
    fn local(&self, key: &str) -> Arc<LocalStream> {
        self.local
            .lock()
            .entry(key.to_string())
            .or_default()
            .clone()
    }

    /// `origin`: the request the stream answers, named with the writer in its first entry.
    /// `confirm`: the entry must survive a failover (a stream's first entry, a priming event,
    /// an end): when the connection writes durably (`wait_replicas`), it is sent with the
    /// stream's index and expiry in one pipeline and confirmed by the replicas, and an entry
    /// they do not confirm is an error.
    async fn append_raw(
        &self,
        session: &str,
        stream: StreamId,
        field: &str,
        data: &[u8],
        origin: Option<&str>,
        confirm: bool,
    ) -> Result<String, EventStoreError> {
        let key = self.stream_key(session, stream);
        let err = |e: CommandError| EventStoreError(e.to_string());
        let mut xadd = redis::cmd("XADD");
        xadd.arg(&key)
            .arg("MAXLEN")
            .arg("~")
            .arg(self.max_len)
            .arg("*")
            .arg(field)
            .arg(data);
        if let (Some(request_id), Some(w)) = (origin, &self.writers) {
            xadd.arg("w")
                .arg(&w.node)
                .arg("t")
                .arg(crate::clock::unix_ms())
                .arg("r")
                .arg(request_id);
        }
        let local = self.local(&key);
        local.written.store(true, Relaxed);
        if confirm && self.redis.writes_durably() {
            let appended = self.append_durably(session, &key, xadd).await;
            // Unconfirmed, the entry may be on the master all the same: readers here look.
            local.notify.notify_waiters();
            let id = appended.map_err(err)?;
            *local.expiry_pushed.lock() = Some(std::time::Instant::now());
            self.spent(session, stream, data.len()).await;
            return Ok(id);
        }
        let id: String = self.redis.run(xadd).await.map_err(err)?;
        // Index the stream and push its expiry out on the first append, then at most once per
        // quarter of the TTL: a busy stream costs one XADD per event.
        let due = {
            let pushed = *local.expiry_pushed.lock();
            pushed.is_none_or(|t| t.elapsed() >= Duration::from_millis(self.ttl_ms / 4))
        };
        if due {
            let index = self.index_key(session);
            let _: i64 = self
                .redis
                .run(redis::cmd("SADD").arg(&index).arg(&key).clone())
                .await
                .map_err(err)?;
            for k in [&key, &index] {
                let _: i64 = self
                    .redis
                    .run(redis::cmd("PEXPIRE").arg(k).arg(self.ttl_ms).clone())
                    .await
                    .map_err(err)?;
            }
            *local.expiry_pushed.lock() = Some(std::time::Instant::now());
        }
        local.notify.notify_waiters();
        self.spent(session, stream, data.len()).await;
        Ok(id)
    }

    async fn exists(&self, key: &str) -> Result<bool, CommandError> {
        let n: i64 = self
            .redis
            .run(redis::cmd("EXISTS").arg(key).clone())
            .await?;
        Ok(n == 1)
    }

    /// A resume from the start of `stream` (at `key`), which Redis does not have: accepted
    /// once the stream is there, or at once when this process writes it (it is alive, and
    /// stores the answer when Redis lets it) or Redis stops answering (the reader waits out the
    /// outage). Otherwise its writer is elsewhere, and nothing names it (its first entry,
    /// which would, is what is missing): one that lives and reaches Redis stores its answer
    /// within its retry interval, so a stream still missing after [`UNSTORED_WAIT`] is lost
    /// with its writer. Without this the resume would be accepted and wait forever.
    async fn await_unstored(
        &self,
        key: &str,
        stream: StreamId,
    ) -> Result<(StreamId, Cursor), Unresolved> {
        let accepted = Ok((stream, Cursor::After(0)));
        let until = tokio::time::Instant::now() + UNSTORED_WAIT;
        loop {
            let written_here = self
                .local
                .lock()
                .get(key)
                .is_some_and(|l| l.written.load(Relaxed));
            if written_here {
                return accepted;
            }
            match self.exists(key).await {
                Ok(false) => {}
                Ok(true) | Err(_) => return accepted,
            }
            if tokio::time::Instant::now() >= until {
                tracing::warn!(
                    "a resumed SSE stream was never stored and its writer is not here; refused as lost"
                );
                return Err(Unresolved::Lost);
            }
            tokio::time::sleep(writer::MAX_POLL).await;
        }
    }

    /// `xadd` with the stream's index and expiry, in one pipeline confirmed by the replicas
    /// ([`RedisConn::pipe_durably`]): the entry id.
    async fn append_durably(
        &self,
        session: &str,
        key: &str,
        xadd: redis::Cmd,
    ) -> Result<String, CommandError> {
        let index = self.index_key(session);
        let mut pipe = redis::pipe();
        pipe.add_command(xadd)
            .add_command(redis::cmd("SADD").arg(&index).arg(key).clone())
            .ignore();
        for k in [key, index.as_str()] {
            pipe.add_command(redis::cmd("PEXPIRE").arg(k).arg(self.ttl_ms).clone())
                .ignore();
        }
        let (id,): (String,) = self.redis.pipe_durably(pipe).await?;
        Ok(id)
    }
}

/// Our event id for the Redis entry `entry_id` of a session's stream.
fn our_event_id(
    session: &str,
    stream: StreamId,
    entry_id: &str,
) -> Result<String, EventStoreError> {
    let seq = seq_of(entry_id)
        .ok_or_else(|| EventStoreError(format!("unexpected stream entry id {entry_id}")))?;
    Ok(event_id(&session_tag(session), stream, seq))
}

/// One `XRANGE` entry: its id, and its data (`None` for the end marker).
type Entry = (String, Option<Bytes>);

/// One entry with all its fields, as `XRANGE` and `XREVRANGE` answer.
type RawEntry = (String, Vec<(Vec<u8>, Vec<u8>)>);

fn parse_raw_entries(v: RedisValue) -> Vec<RawEntry> {
    let RedisValue::Array(items) = v else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| {
            let RedisValue::Array(mut parts) = item else {
                return None;
            };
            if parts.len() != 2 {
                return None;
            }
            let fields = parts.pop()?;
            let id = match parts.pop()? {
                RedisValue::BulkString(b) => String::from_utf8(b).ok()?,
                RedisValue::SimpleString(s) => s,
                _ => return None,
            };
            let RedisValue::Array(fields) = fields else {
                return None;
            };
            let mut pairs = Vec::with_capacity(fields.len() / 2);
            let mut it = fields.into_iter();
            while let (Some(name), Some(value)) = (it.next(), it.next()) {
                if let (RedisValue::BulkString(n), RedisValue::BulkString(v)) = (name, value) {
                    pairs.push((n, v));
                }
            }
            Some((id, pairs))
        })
        .collect()
}

/// The newest entry of the stream at `key`, if it has one (the error if Redis did not answer).
async fn newest_entry(redis: &RedisConn, key: &str) -> Result<Option<RawEntry>, CommandError> {
    let newest: RedisValue = redis
        .run(
            redis::cmd("XREVRANGE")
                .arg(key)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(1)
                .clone(),
        )
        .await?;
    Ok(parse_raw_entries(newest).pop())
}

fn field<'a>(fields: &'a [(Vec<u8>, Vec<u8>)], name: &[u8]) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
}

/// An entry's id and its data (`None` for the end marker).
fn data_of((id, mut fields): RawEntry) -> Entry {
    let data = fields
        .iter()
        .position(|(n, _)| n == b"d")
        .map(|i| Bytes::from(fields.swap_remove(i).1));
    (id, data)
}

/// One reader of a stream ([`EventStore::tail`]): delivers what its [`Source`] reads, until a
/// newer reader of the stream supersedes it, `end_reader` cuts it, the stream ends or `stop`.
struct Reader {
    /// Keeps the stream from being dropped for its bytes while this reader delivers it.
    mark: ReaderMark,
    local: Arc<LocalStream>,
    /// The stream's generation this reader belongs to.
    generation: u64,
    stop: CancellationToken,
    tag: String,
    stream: StreamId,
    source: Source,
}

impl Reader {
    /// Whether the reader is over before anything more: superseded, or past its cut.
    fn cut_off(&self) -> bool {
        if *self.local.generation.lock() != self.generation {
            return true;
        }
        let cut = *self.local.cut.lock();
        matches!(
            (cut, self.source.after),
            (Some((g, seq)), Some(after)) if g == self.generation && after >= seq
        )
    }
}

/// Where a reader reads: the stream in Redis, its place in it and what it read ahead.
struct Source {
    redis: RedisConn,
    key: String,
    /// Exclusive lower bound for the next XRANGE; `None`: from now on.
    after: Option<u64>,
    buffered: std::collections::VecDeque<(u64, Bytes)>,
    ended: bool,
    /// Since when every read failed (Redis down), if they do.
    failing_since: Option<tokio::time::Instant>,
    read_outage: Duration,
    max_len: usize,
    /// Who writes the stream, so when to look in Redis.
    writer: WriterView,
}

/// What one read of a stream leads to.
enum Read {
    /// Something to deliver, or to look at again at once.
    Again,
    /// Nothing new: wait for an announcement, at most this long before reading again (`None`:
    /// no reading until announced).
    Wait(Option<Duration>),
    /// Redis did not answer for the read outage, or the stream is missing from it with no
    /// writer here (`writer.rs`): the reader ends.
    GiveUp,
}

impl Source {
    /// Reads the next batch after [`Source::after`] into the buffer (`written_here`: this
    /// process writes the stream).
    ///
    /// The reader boxes this future while it runs: it (the Redis command's future, the
    /// writer's check) is several times the size of the reader's wait, and inline it would be
    /// part of every idle stream's state for the stream's whole life.
    async fn read(&mut self, written_here: bool) -> Read {
        let start = match self.after {
            Some(0) => "-".to_string(),
            Some(seq) => format!("({}", entry_of(seq)),
            None => {
                // "From now": the newest entry is the starting point.
                let last = newest_entry(&self.redis, &self.key).await.ok().flatten();
                self.after = Some(last.and_then(|(id, _)| seq_of(&id)).unwrap_or(0));
                return Read::Again;
            }
        };
        let read: Result<RedisValue, _> = self
            .redis
            .run(
                redis::cmd("XRANGE")
                    .arg(&self.key)
                    .arg(&start)
                    .arg("+")
                    .arg("COUNT")
                    .arg(BATCH)
                    .clone(),
            )
            .await;
        match read {
            Ok(v) => {
                self.failing_since = None;
                self.take(parse_raw_entries(v), start == "-", written_here)
                    .await
            }
            Err(e) => self.failed(&e),
        }
    }

    /// Buffers the entries read (`from_start`: the stream's first ones); when there are none,
    /// asks the writer whether and when to read again.
    async fn take(&mut self, entries: Vec<RawEntry>, from_start: bool, written_here: bool) -> Read {
        if from_start && let Some(first) = entries.first() {
            self.writer.first_entry(first);
        }
        for (id, data) in entries.into_iter().map(data_of) {
            let Some(seq) = seq_of(&id) else { continue };
            match data {
                Some(d) => self.buffered.push_back((seq, d)),
                None => {
                    self.ended = true;
                    break;
                }
            }
        }
        if !self.buffered.is_empty() || self.ended {
            self.writer.found();
            return Read::Again;
        }
        // Read to the end of an unfinished stream: who writes it, and is that writer still
        // there?
        match self
            .writer
            .caught_up(&self.redis, &self.key, self.max_len, written_here)
            .await
        {
            Verdict::ReadAgain => return Read::Again,
            Verdict::Missing => {
                tracing::warn!(
                    "a resumed SSE stream is not in Redis (never stored, or lost) and nothing here writes it; ending its reader"
                );
                return Read::GiveUp;
            }
            Verdict::Keep => {}
        }
        let wait = self.writer.wait();
        self.writer.found_nothing();
        Read::Wait(wait)
    }

    /// A read Redis did not answer: retried every [`POLL`], for the read outage at most.
    fn failed(&mut self, e: &CommandError) -> Read {
        let since = *self
            .failing_since
            .get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= self.read_outage {
            tracing::warn!(
                error = %e,
                "an SSE stream could not be read from Redis for {} ms; ending this reader",
                self.read_outage.as_millis()
            );
            return Read::GiveUp;
        }
        tracing::debug!(error = %e, "reading an SSE stream from Redis failed; retrying");
        Read::Wait(Some(POLL))
    }
}

#[async_trait]
impl EventStore for RedisEventStore {
    async fn append(
        &self,
        session: &str,
        stream: StreamId,
        data: Bytes,
    ) -> Result<String, EventStoreError> {
        let id = self
            .append_raw(session, stream, "d", &data, None, false)
            .await?;
        our_event_id(session, stream, &id)
    }

    async fn append_first(
        &self,
        session: &str,
        stream: StreamId,
        request_id: &str,
        data: Bytes,
    ) -> Result<String, EventStoreError> {
        let id = self
            .append_raw(session, stream, "d", &data, Some(request_id), true)
            .await?;
        our_event_id(session, stream, &id)
    }

    async fn prime(&self, session: &str, stream: StreamId) -> Result<String, EventStoreError> {
        let id = self
            .append_raw(session, stream, "d", b"", None, true)
            .await?;
        our_event_id(session, stream, &id)
    }

    async fn close(&self, session: &str, stream: StreamId) -> Result<(), EventStoreError> {
        // Closed in the ledger first: the end marker never makes the stream's answer trimmed.
        self.budget.lock().closed(session, stream);
        self.append_raw(session, stream, "end", b"", None, true)
            .await
            .map(|_| ())
    }

    fn confirms_on_replicas(&self) -> bool {
        self.redis.writes_durably()
    }

    async fn finish(
        &self,
        session: &str,
        stream: StreamId,
        answer: Bytes,
    ) -> Result<(), EventStoreError> {
        let key = self.stream_key(session, stream);
        let index = self.index_key(session);
        self.local(&key).written.store(true, Relaxed);
        self.budget.lock().closed(session, stream);
        let stored = if self.redis.writes_durably() {
            // The script's text, not its digest: a pipeline confirmed by the replicas cannot
            // load a script the server does not know and send the pipeline again.
            let mut eval = redis::cmd("EVAL");
            eval.arg(FINISH)
                .arg(2)
                .arg(&key)
                .arg(&index)
                .arg(answer.as_ref())
                .arg(self.max_len)
                .arg(self.ttl_ms);
            let mut pipe = redis::pipe();
            pipe.add_command(eval);
            self.redis.pipe_durably::<(i64,)>(pipe).await.map(|(n,)| n)
        } else {
            let mut invocation = self.finish.prepare_invoke();
            invocation
                .key(&key)
                .key(&index)
                .arg(answer.as_ref())
                .arg(self.max_len)
                .arg(self.ttl_ms);
            self.redis.eval::<i64>(invocation).await
        };
        // Readers here look whatever came of it: an answer the replicas did not confirm is on
        // the master all the same, and a reader of a stream this process writes reads only
        // when told (a resumed client would wait for the confirmation, seconds, for nothing).
        self.local(&key).notify.notify_waiters();
        stored.map_err(|e| EventStoreError(e.to_string()))?;
        self.spent(session, stream, answer.len()).await;
        Ok(())
    }

    async fn end_reader(&self, session: &str, stream: StreamId) {
        let key = self.stream_key(session, stream);
        let local = self.local(&key);
        // The cut is the newest entry now: everything written before it is still delivered.
        let last = newest_entry(&self.redis, &key)
            .await
            .ok()
            .flatten()
            .and_then(|(id, _)| seq_of(&id))
            .unwrap_or(0);
        let generation = *local.generation.lock();
        *local.cut.lock() = Some((generation, last));
        local.notify.notify_waiters();
    }

    fn tail(
        &self,
        session: &str,
        stream: StreamId,
        from: Cursor,
        stop: CancellationToken,
    ) -> BoxStream<'static, StoredEvent> {
        let key = self.stream_key(session, stream);
        let local = self.local(&key);
        let generation = {
            let mut g = local.generation.lock();
            *g += 1;
            *g
        };
        local.notify.notify_waiters();
        let after = match from {
            Cursor::Start => Some(0),
            Cursor::After(seq) => Some(seq),
            Cursor::Now => None,
        };
        let reader = Reader {
            mark: ReaderMark::new(&self.budget, session, stream),
            local,
            generation,
            stop,
            tag: session_tag(session),
            stream,
            source: Source {
                redis: self.redis.clone(),
                key,
                after,
                buffered: Default::default(),
                ended: false,
                failing_since: None,
                read_outage: self.read_outage,
                max_len: self.max_len,
                writer: WriterView::new(
                    self.writers.clone(),
                    stream == STANDALONE_STREAM,
                    after.is_some_and(|seq| seq > 0),
                ),
            },
        };
        stream::unfold(reader, |mut r| async move {
            loop {
                if r.cut_off() {
                    return None;
                }
                if let Some((seq, data)) = r.source.buffered.pop_front() {
                    r.source.after = Some(seq);
                    let ev = StoredEvent {
                        id: event_id(&r.tag, r.stream, seq),
                        data,
                    };
                    return Some((ev, r));
                }
                if r.source.ended {
                    return r.mark.read_to_the_end();
                }
                let notified = r.local.notify.notified();
                let wait = match Box::pin(r.source.read(r.local.written.load(Relaxed))).await {
                    Read::Again => continue,
                    Read::Wait(wait) => wait,
                    Read::GiveUp => return None,
                };
                let looked_for = async {
                    match wait {
                        Some(w) => tokio::time::sleep(w).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = notified => {}
                    _ = looked_for => {}
                    _ = r.stop.cancelled() => return None,
                }
            }
        })
        .boxed()
    }

    async fn resolve(
        &self,
        session: &str,
        last_event_id: &str,
    ) -> Result<(StreamId, Cursor), Unresolved> {
        let (tag, stream, seq) = parse_event_id(last_event_id).ok_or(Unresolved::NotAnEvent)?;
        if tag != session_tag(session) {
            return Err(Unresolved::NotAnEvent);
        }
        let key = self.stream_key(session, stream);
        match self.exists(&key).await {
            Ok(true) => Ok((stream, Cursor::After(seq))),
            Ok(false) if seq != 0 => Err(Unresolved::NotAnEvent),
            // The start of a stream not stored yet: an answer whose store failed before its
            // first event sent it, and stores it once Redis takes writes again.
            Ok(false) => self.await_unstored(&key, stream).await,
            // Redis cannot say now: the id names this session, so the reader starts, and if
            // Redis stays out of reach it ends after `read_outage` and the client resumes
            // again. Answering "no such event" would make the client give the answer up.
            Err(e) => {
                tracing::debug!(error = %e, "resuming a stream Redis could not confirm");
                Ok((stream, Cursor::After(seq)))
            }
        }
    }

    async fn release(&self, session: &str) {
        // Only this process's wake-up state; the streams stay for whoever holds the session.
        // A stream a reader still tails keeps its state: a request still running here (it
        // finishes after the session moved) announces its events to that reader through it,
        // and the reader may wait for nothing else.
        self.budget.lock().forget(session);
        let marker = format!("{{{session}}}");
        self.local
            .lock()
            .retain(|key, l| !key.contains(&marker) || Arc::strong_count(l) > 1);
    }

    async fn forget(&self, session: &str) {
        self.budget.lock().forget(session);
        let index = self.index_key(session);
        let keys: Vec<String> = self
            .redis
            .run(redis::cmd("SMEMBERS").arg(&index).clone())
            .await
            .unwrap_or_default();
        let mut del = redis::cmd("DEL");
        del.arg(&index);
        for k in &keys {
            del.arg(k);
        }
        let _: Result<i64, _> = self.redis.run(del).await;
        let mut local = self.local.lock();
        for k in keys {
            if let Some(l) = local.remove(&k) {
                *l.generation.lock() += 1;
                l.notify.notify_waiters();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_round_trip_through_sequence_numbers() {
        let seq = seq_of("1767225600123-7").unwrap();
        assert_eq!(entry_of(seq), "1767225600123-7");
        assert!(seq_of("1-2") < seq_of("1-3") && seq_of("1-3") < seq_of("2-0"));
        assert_eq!(seq_of("garbage"), None);
        assert_eq!(seq_of("5-2000000"), None, "n beyond 20 bits does not fit");
    }

    /// What an idle stream's reader holds for as long as the stream is open (10,000 open
    /// streams hold 10,000 of these): its state and the wait, not a read's future, which is
    /// boxed while it runs (inline it was 1,784 B of every idle stream's heap in a release
    /// build: docs/CAPACITY.md, "RSS per idle stream"). Sizes of a debug build.
    #[tokio::test]
    async fn an_idle_readers_state_holds_no_read() {
        let conn = RedisConn::new(crate::redis_config::RedisConfig::from_url(
            "redis://127.0.0.1:1",
        ))
        .expect("a valid configuration");
        let store = RedisEventStore::new(conn, 100, 60_000, Duration::from_secs(10));
        let tail = store.tail("s1", 1, Cursor::Now, Default::default());
        let size = std::mem::size_of_val(&*tail);
        eprintln!("an idle reader: {size} B");
        assert!(size <= READER_MAX, "an idle reader: {size} B");
    }

    const READER_MAX: usize = 1024;
}
