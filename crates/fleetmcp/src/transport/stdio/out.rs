//! The one writer of a stdio connection's output: every message any task sends (an answer, a
//! notification, a request to the client) is queued here whole and written by this one task as
//! one line, so two messages never share a line or interleave their bytes, whichever tasks
//! produced them at once.

use std::borrow::Cow;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Messages queued and not yet written. Bounded, so a client that stops reading holds up the
/// tasks that write to it (each waits on its send) instead of growing the queue without end.
const QUEUE: usize = 256;

/// A handle on the writer: cheap to clone, one per task that sends.
#[derive(Clone)]
pub(super) struct Out {
    tx: mpsc::Sender<Bytes>,
    gone: CancellationToken,
}

impl Out {
    /// Queues one JSON-RPC message (without its newline); `false` once the output is closed
    /// (the client stopped reading, or the connection is over): the message is dropped.
    pub async fn send(&self, message: Bytes) -> bool {
        self.tx.send(message).await.is_ok()
    }

    /// Completes when a write failed: nobody reads the output any more.
    pub async fn gone(&self) {
        self.gone.cancelled().await
    }

    /// The token [`Out::gone`] waits on, for a future that must own it.
    pub fn gone_token(&self) -> CancellationToken {
        self.gone.clone()
    }
}

/// Starts the writer on `output`. It ends once every [`Out`] is dropped and what they queued is
/// written, or at the first write that fails.
pub(super) fn start<W>(output: W) -> (Out, JoinHandle<()>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(QUEUE);
    let gone = CancellationToken::new();
    let task = tokio::spawn(write(output, rx, gone.clone()));
    (Out { tx, gone }, task)
}

async fn write<W>(mut output: W, mut rx: mpsc::Receiver<Bytes>, gone: CancellationToken)
where
    W: AsyncWrite + Unpin,
{
    let mut buf = Vec::new();
    while let Some(message) = rx.recv().await {
        let Some(line) = one_line(&message) else {
            continue;
        };
        buf.clear();
        buf.extend_from_slice(&line);
        buf.push(b'\n');
        // Each message its own write, flushed, as the SDKs' own stdio servers write them: a
        // client that reads a progress notification and the answer after it in one chunk
        // (the TypeScript SDK) may handle the answer first and drop the notification.
        let mut written = output.write_all(&buf).await;
        if written.is_ok() {
            written = output.flush().await;
        }
        if let Err(e) = written {
            tracing::info!(error = %e, "stdio: the output is closed; nothing more can reach the client");
            gone.cancel();
            return;
        }
    }
}

/// `message` as one line. What we send is compact JSON, which has no raw newline (one inside a
/// string is escaped), so this is the message itself; a message that had one anyway would be
/// read as two broken ones, so it is written again compactly, or dropped if it is not JSON.
fn one_line(message: &Bytes) -> Option<Cow<'_, [u8]>> {
    if memchr::memchr2(b'\n', b'\r', message).is_none() {
        return Some(Cow::Borrowed(message));
    }
    match serde_json::from_slice::<serde_json::Value>(message).map(|v| serde_json::to_vec(&v)) {
        Ok(Ok(compact)) => Some(Cow::Owned(compact)),
        _ => {
            tracing::error!("stdio: a message that is not JSON was dropped instead of sent");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_always_one_line() {
        let plain = Bytes::from_static(br#"{"a":"x\ny"}"#);
        assert_eq!(one_line(&plain).as_deref(), Some(&plain[..]));
        let spread = Bytes::from_static(b"{\n  \"a\": 1\r\n}");
        assert_eq!(one_line(&spread).as_deref(), Some(&br#"{"a":1}"#[..]));
        assert_eq!(one_line(&Bytes::from_static(b"not\njson")), None);
    }
}
