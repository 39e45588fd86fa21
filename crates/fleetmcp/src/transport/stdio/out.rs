//! The one writer of a stdio connection's output: every message any task sends (an answer, a
//! notification, a request to the client) is queued here whole and written by this one task as
//! one line, so two messages never share a line or interleave their bytes, whichever tasks
//! produced them at once.
//!
//! The queue is bounded in messages and in bytes (`http.max_unread_bytes`): a client that
//! stops reading holds up the tasks that write to it (each waits on its send), and the reader
//! of the input, which waits for room before it reads on ([`Out::room`]).

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Messages queued and not yet written.
const QUEUE: usize = 256;

/// A handle on the writer: cheap to clone, one per task that sends.
#[derive(Clone)]
pub(super) struct Out {
    /// Each message with its bytes' permits of `bytes`, given back once it is written.
    tx: mpsc::Sender<(Bytes, OwnedSemaphorePermit)>,
    /// Permits for the bytes queued: `max_bytes` of them. Fair, so messages keep the order
    /// their senders asked in.
    bytes: Arc<Semaphore>,
    max_bytes: u32,
    gone: CancellationToken,
}

impl Out {
    /// Queues one JSON-RPC message (without its newline), once the queue has room for its
    /// bytes (a message larger than the whole bound waits for an empty queue); `false` once
    /// the output is closed (the client stopped reading, or the connection is over): the
    /// message is dropped.
    pub async fn send(&self, message: Bytes) -> bool {
        let n = u32::try_from(message.len()).map_or(self.max_bytes, |n| n.min(self.max_bytes));
        let Ok(permit) = self.bytes.clone().acquire_many_owned(n).await else {
            return false;
        };
        self.tx.send((message, permit)).await.is_ok()
    }

    /// Completes once the queue has room (for one byte, behind those already waiting): what
    /// the input's reader waits for, so that a client that does not read its answers stops
    /// being read. At once when the output is closed.
    pub async fn room(&self) {
        let _ = self.bytes.acquire().await;
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

/// Starts the writer on `output`, with at most `max_bytes` queued. It ends once every [`Out`]
/// is dropped and what they queued is written, or at the first write that fails.
pub(super) fn start<W>(output: W, max_bytes: usize) -> (Out, JoinHandle<()>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(QUEUE);
    let max_bytes = u32::try_from(max_bytes).unwrap_or(u32::MAX).max(1);
    let bytes = Arc::new(Semaphore::new(max_bytes as usize));
    let gone = CancellationToken::new();
    let task = tokio::spawn(write(output, rx, bytes.clone(), gone.clone()));
    let out = Out {
        tx,
        bytes,
        max_bytes,
        gone,
    };
    (out, task)
}

async fn write<W>(
    mut output: W,
    mut rx: mpsc::Receiver<(Bytes, OwnedSemaphorePermit)>,
    bytes: Arc<Semaphore>,
    gone: CancellationToken,
) where
    W: AsyncWrite + Unpin,
{
    let mut buf = Vec::new();
    // The message's permits go back once it is written (at the end of each turn).
    while let Some((message, _permit)) = rx.recv().await {
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
            // Whoever waits for room learns at once that nothing more can be sent.
            bytes.close();
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
