//! Who writes a stream, as its reader sees it: whether the reader must look in Redis for
//! events no append of this process announces (and how often), and whether a writer elsewhere
//! is gone, so that the reader ends its stream for it.
//!
//! - A request's answer stream names its writer in its first entry (machine id, when that
//!   process started writing, the request's id). Written here: every event is announced by the
//!   local append, and the reader waits without reading Redis. Written elsewhere (a resume on
//!   another instance, or Redis without distributed mode): the reader looks in Redis, first
//!   after [`POLL`], then less often while nothing comes, up to [`MAX_POLL`].
//! - A standalone stream is written by whichever instance holds the session: in distributed
//!   mode that is where its reader is (the stream's requests go to the holder), so nothing is
//!   read but what is announced; otherwise any instance may write, and the reader looks.
//! - In distributed mode a reader of another process's unfinished stream, read to its end,
//!   asks every [`WRITER_CHECK`] whether that process is gone
//!   (`process_liveness::ProcessLiveness`); gone twice in a row, it ends the stream for it: an error answer for the request
//!   ([`WRITER_GONE_MESSAGE`]) and the end marker, written only if nothing was appended since
//!   (one script). Without it a client that resumes the answer of a call whose instance was
//!   killed would wait forever.
//! - A request's stream that is not in Redis at all, while this process does not write it,
//!   ends its reader once it has been missing for a while: nothing names a writer to wait for.
//!   A resume is accepted without its stream when Redis cannot say whether it exists (an
//!   outage), and a stream can be lost (a failover). One never seen stored (a resume from its
//!   start) is waited for [`UNSTORED_WAIT`], as long as a writer elsewhere may still store it;
//!   one that was stored (the reader's place is past an event of it) is lost, and ends after
//!   [`LOST_AFTER`]. The client that resumes again is answered that the stream is lost. The
//!   fault harness saw such a resume, accepted while Redis was paused, carry keep-alives for
//!   25 s.

use std::sync::Arc;
use std::time::Duration;

use redis::Value as RedisValue;

use super::{RawEntry, field, newest_entry, parse_raw_entries};
use crate::events::{UNSTORED_WAIT, WRITER_GONE_MESSAGE};
use crate::process_liveness::ProcessLiveness;
use crate::redis_conn::RedisConn;

/// The first wait before a reader looks in Redis for events written elsewhere, and the wait
/// after a read that found something.
pub(super) const POLL: Duration = Duration::from_millis(50);
/// The longest wait between two looks while nothing comes: an idle stream written elsewhere
/// costs two reads a second.
pub(super) const MAX_POLL: Duration = Duration::from_millis(500);
/// How often a reader that has read everything of another process's unfinished stream asks
/// whether that process is gone.
const WRITER_CHECK: Duration = Duration::from_secs(1);
/// How long a stream that was stored may be found missing before its reader ends (long enough
/// for a look across a failover's second, short enough that a resume stays within a client's
/// patience).
const LOST_AFTER: Duration = Duration::from_secs(2);

/// Ends a stream whose writer is gone: appends the error answer (when given) and the end
/// marker, only if the newest entry is still the one the reader saw (the writer, or another
/// reader, appended nothing since).
const END_FOR_WRITER: &str = r#"
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #newest == 0 or newest[1][1] ~= ARGV[1] then return 0 end
if ARGV[3] ~= '' then
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'd', ARGV[3])
end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'end', '')
return 1
"#;

/// This process as a writer, and how to tell when another writer's process is gone.
pub(super) struct Writers {
    /// This instance's machine id.
    pub node: String,
    /// When this process's store was made (Unix ms): a stream stamped by this machine id
    /// before it was written by an earlier process under the same id.
    since: u64,
    /// Distributed mode: whether another process is gone. Also what says that only a
    /// session's holder writes its standalone stream.
    liveness: Option<Arc<dyn ProcessLiveness>>,
    end_for_writer: redis::Script,
}

impl Writers {
    pub fn new(node: &str, liveness: Option<Arc<dyn ProcessLiveness>>) -> Self {
        Self {
            node: node.to_string(),
            since: crate::clock::unix_ms(),
            liveness,
            end_for_writer: redis::Script::new(END_FOR_WRITER),
        }
    }
}

/// The writer a stream's first entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    node: String,
    since: u64,
    request_id: String,
}

/// What a reader knows of its stream's writer.
enum Known {
    /// Not read yet (or the stream was empty).
    Unknown,
    /// This process: it ends what it writes, and announces every event.
    Here,
    /// Another process (or an earlier one under this machine id).
    Elsewhere(Origin),
    /// The stream names no writer (a standalone stream, or one written before writers were
    /// named): the reader looks in Redis, and never ends it.
    Unnamed,
}

/// What a reader's check of a stream's writer decided.
pub(super) enum Verdict {
    /// Keep reading as before.
    Keep,
    /// The stream changed or was ended for its gone writer: read it again now.
    ReadAgain,
    /// The stream is not in Redis and nothing here writes it: the reader ends.
    Missing,
}

/// One reader's view of who writes its stream.
pub(super) struct WriterView {
    writers: Option<Arc<Writers>>,
    known: Known,
    next_check: tokio::time::Instant,
    /// Checks in a row that found the writer gone.
    gone: u8,
    /// The wait before the next look in Redis while nothing is announced.
    poll: Duration,
    /// Since when the stream has been found missing from Redis, if it is.
    missing_since: Option<tokio::time::Instant>,
    /// The stream was stored: the reader read from it, or started past an event of it.
    stored: bool,
}

impl WriterView {
    /// The view of a reader of a request's stream (`standalone` false) or of the session's
    /// standalone stream; `stored`: the reader starts past an event of it.
    pub fn new(writers: Option<Arc<Writers>>, standalone: bool, stored: bool) -> Self {
        let known = if standalone {
            Known::Unnamed
        } else {
            Known::Unknown
        };
        Self {
            writers,
            known,
            // The first check as soon as the reader has read everything there is.
            next_check: tokio::time::Instant::now(),
            gone: 0,
            poll: POLL,
            missing_since: None,
            stored,
        }
    }

    /// The stream was found missing from Redis: whether its reader ends now (it has been
    /// missing for [`LOST_AFTER`] if it was stored, [`UNSTORED_WAIT`] if not, and this
    /// process, which would store it, does not write it).
    fn missing(&mut self, written_here: bool) -> Verdict {
        let since = *self
            .missing_since
            .get_or_insert_with(tokio::time::Instant::now);
        let wait = if self.stored {
            LOST_AFTER
        } else {
            UNSTORED_WAIT
        };
        if written_here || since.elapsed() < wait {
            return Verdict::Keep;
        }
        Verdict::Missing
    }

    /// How long to wait for an announcement before looking in Redis again; `None`: only
    /// announcements (every event comes from this process).
    pub fn wait(&self) -> Option<Duration> {
        let distributed = self.writers.as_ref().is_some_and(|w| w.liveness.is_some());
        match self.known {
            Known::Here => None,
            Known::Unnamed if distributed => None,
            _ => Some(self.poll),
        }
    }

    /// A read found events: the next look comes soon.
    pub fn found(&mut self) {
        self.poll = POLL;
        self.stored = true;
        self.missing_since = None;
    }

    /// A read found nothing: the next look comes later.
    pub fn found_nothing(&mut self) {
        self.poll = (self.poll * 2).min(MAX_POLL);
    }

    /// Learns the writer from the stream's first entry, when a read returned it.
    pub fn first_entry(&mut self, entry: &RawEntry) {
        if matches!(self.known, Known::Unknown) {
            self.known = self.classify(origin_of(&entry.1));
        }
    }

    fn classify(&self, origin: Option<Origin>) -> Known {
        match (origin, &self.writers) {
            (Some(o), Some(w)) if o.node == w.node && o.since >= w.since => Known::Here,
            (Some(o), _) => Known::Elsewhere(o),
            (None, _) => Known::Unnamed,
        }
    }

    /// Called when the reader has read everything of an unfinished stream: learns who writes
    /// it if not known yet, and, in distributed mode, ends it for a writer that is gone.
    /// `written_here`: this process writes the stream (or tried to).
    pub async fn caught_up(
        &mut self,
        redis: &RedisConn,
        key: &str,
        max_len: usize,
        written_here: bool,
    ) -> Verdict {
        if matches!(self.known, Known::Unknown) {
            let first: Result<RedisValue, _> = redis
                .run(
                    redis::cmd("XRANGE")
                        .arg(key)
                        .arg("-")
                        .arg("+")
                        .arg("COUNT")
                        .arg(1)
                        .clone(),
                )
                .await;
            match first.map(|v| parse_raw_entries(v).pop()) {
                Ok(Some(entry)) => self.first_entry(&entry),
                Ok(None) => return self.missing(written_here),
                // Redis did not answer: the next look asks again.
                Err(_) => {}
            }
        }
        let Known::Elsewhere(origin) = &self.known else {
            return Verdict::Keep;
        };
        let Some(writers) = self.writers.clone() else {
            return Verdict::Keep;
        };
        let Some(liveness) = &writers.liveness else {
            return Verdict::Keep;
        };
        if tokio::time::Instant::now() < self.next_check {
            return Verdict::Keep;
        }
        self.next_check = tokio::time::Instant::now() + WRITER_CHECK;
        if !liveness.is_gone(&origin.node, origin.since).await {
            self.gone = 0;
            return Verdict::Keep;
        }
        // Twice in a row, a check apart: a subscription that is only reconnecting is not taken
        // for a dead process.
        self.gone += 1;
        if self.gone < 2 {
            return Verdict::Keep;
        }
        match end_for_writer(redis, &writers, key, max_len, origin).await {
            // Gone with its writer (expired, or lost in a failover): nothing will end it.
            Verdict::Missing => self.missing(written_here),
            verdict => verdict,
        }
    }
}

/// Ends the stream at `key` for its gone writer `origin`: its answer, if missing, as an error,
/// then the end marker.
async fn end_for_writer(
    redis: &RedisConn,
    writers: &Writers,
    key: &str,
    max_len: usize,
    origin: &Origin,
) -> Verdict {
    let (newest_id, fields) = match newest_entry(redis, key).await {
        Ok(Some(newest)) => newest,
        Ok(None) => return Verdict::Missing,
        Err(_) => return Verdict::Keep,
    };
    let Some(data) = field(&fields, b"d") else {
        // Already ended.
        return Verdict::ReadAgain;
    };
    // The answer is there but not the end marker (killed between the two): only the end.
    let answer = if is_response(data) {
        String::new()
    } else {
        writer_gone_answer(&origin.request_id)
    };
    let mut invocation = writers.end_for_writer.prepare_invoke();
    invocation
        .key(key)
        .arg(&newest_id)
        .arg(max_len)
        .arg(&answer);
    match redis.eval::<i64>(invocation).await {
        Ok(1) => tracing::warn!(
            writer = %origin.node,
            answered = answer.is_empty(),
            "[HA] an SSE answer's writer is gone before it finished; the stream was ended for it"
        ),
        Ok(_) => {}
        Err(e) => {
            tracing::debug!(error = %e, "could not end a gone writer's stream; trying again");
            return Verdict::Keep;
        }
    }
    Verdict::ReadAgain
}

/// The writer a stream's first entry names, if it names one.
fn origin_of(fields: &[(Vec<u8>, Vec<u8>)]) -> Option<Origin> {
    let text = |name: &[u8]| std::str::from_utf8(field(fields, name)?).ok();
    Some(Origin {
        node: text(b"w")?.to_string(),
        since: text(b"t")?.parse().ok()?,
        request_id: text(b"r")?.to_string(),
    })
}

/// Whether an event is a JSON-RPC response (the request's answer), not a notification or a
/// request to the client.
fn is_response(data: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(data).is_ok_and(|v| {
        v.get("method").is_none() && (v.get("result").is_some() || v.get("error").is_some())
    })
}

/// The error answer for request `request_id` (raw JSON) whose writer is gone.
fn writer_gone_answer(request_id: &str) -> String {
    let id =
        serde_json::from_str::<serde_json::Value>(request_id).unwrap_or(serde_json::Value::Null);
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32603, "message": WRITER_GONE_MESSAGE},
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_answer_is_a_response() {
        assert!(is_response(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#));
        assert!(is_response(
            br#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}"#
        ));
        assert!(!is_response(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#
        ));
        assert!(!is_response(
            br#"{"jsonrpc":"2.0","id":9,"method":"elicitation/create"}"#
        ));
        assert!(!is_response(b""));
    }

    #[test]
    fn the_error_answer_keeps_the_request_id() {
        let v: serde_json::Value = serde_json::from_str(&writer_gone_answer(r#""a-7""#)).unwrap();
        assert_eq!(v["id"], "a-7");
        assert_eq!(v["error"]["message"], WRITER_GONE_MESSAGE);
        let v: serde_json::Value = serde_json::from_str(&writer_gone_answer("12")).unwrap();
        assert_eq!(v["id"], 12);
    }

    #[test]
    fn a_stream_written_here_is_read_only_when_announced() {
        let here = Arc::new(Writers::new("desk-a", None));
        let mut view = WriterView::new(Some(here.clone()), false, false);
        assert_eq!(view.wait(), Some(POLL), "unknown writer: look");
        let fields = |node: &str, since: u64| -> RawEntry {
            (
                "1-0".into(),
                vec![
                    (b"d".to_vec(), b"".to_vec()),
                    (b"w".to_vec(), node.as_bytes().to_vec()),
                    (b"t".to_vec(), since.to_string().into_bytes()),
                    (b"r".to_vec(), b"1".to_vec()),
                ],
            )
        };
        view.first_entry(&fields("desk-a", here.since));
        assert_eq!(view.wait(), None);
        let mut earlier = WriterView::new(Some(here.clone()), false, false);
        earlier.first_entry(&fields("desk-a", here.since - 1));
        assert_eq!(
            earlier.wait(),
            Some(POLL),
            "an earlier process under this id"
        );
        let mut other = WriterView::new(Some(here.clone()), false, false);
        other.first_entry(&fields("desk-b", here.since));
        for _ in 0..10 {
            other.found_nothing();
        }
        assert_eq!(
            other.wait(),
            Some(MAX_POLL),
            "written elsewhere: looks, less often"
        );
        other.found();
        assert_eq!(other.wait(), Some(POLL));
        // A standalone stream: looked for unless only the holder writes it.
        assert_eq!(WriterView::new(Some(here), true, false).wait(), Some(POLL));
    }
}
