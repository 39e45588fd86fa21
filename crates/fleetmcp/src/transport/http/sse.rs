//! The SSE frames this server writes, and the one keep-alive stream around them. One frame
//! is written elsewhere: the 2024-11-05 stream's first event, `endpoint`, in `legacy_sse.rs`.
//!
//! Frames are written by hand rather than with axum's `Sse` so that the body is plain bytes
//! that a relay can pass through unchanged.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt};
use http::{HeaderValue, StatusCode, header};

use crate::events::StoredEvent;

/// One SSE frame. An event with no data is a priming event: it carries the `retry` hint.
pub(crate) fn frame(ev: &StoredEvent, retry_ms: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(ev.data.len() + 48);
    b.put_slice(b"id: ");
    b.put_slice(ev.id.as_bytes());
    if ev.data.is_empty() {
        b.put_slice(b"\nretry: ");
        b.put_slice(retry_ms.to_string().as_bytes());
        b.put_slice(b"\ndata: \n\n");
    } else {
        // Our JSON is compact, so it never contains a raw newline.
        b.put_slice(b"\nevent: message\ndata: ");
        b.put_slice(&ev.data);
        b.put_slice(b"\n\n");
    }
    b.freeze()
}

/// An SSE response that streams a session's stored `events` until they end.
pub(crate) fn response(
    events: BoxStream<'static, StoredEvent>,
    retry_ms: u64,
    keepalive: Duration,
) -> Response {
    streaming(events.map(move |ev| frame(&ev, retry_ms)), keepalive)
}

/// A `200` SSE response of `frames`, with a keep-alive comment whenever nothing was sent for
/// `every`; it ends when `frames` does.
pub(crate) fn streaming(
    frames: impl Stream<Item = Bytes> + Send + 'static,
    every: Duration,
) -> Response {
    let tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let body = stream::unfold(
        (frames.boxed(), tick),
        |(mut frames, mut tick)| async move {
            tokio::select! {
                f = frames.next() => {
                    tick.reset();
                    f.map(|f| (f, (frames, tick)))
                }
                _ = tick.tick() => Some((Bytes::from_static(b": keepalive\n\n"), (frames, tick))),
            }
        },
    )
    .map(Ok::<_, Infallible>);
    sse_response(Body::from_stream(body))
}

/// A `200` SSE response of the frames `rx` carries (a stream written straight to its
/// connection), with keep-alive comments as `http` asks.
pub(crate) fn channel(
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    http: &crate::config::HttpConfig,
) -> Response {
    streaming(
        tokio_stream::wrappers::ReceiverStream::new(rx),
        keepalive_every(http),
    )
}

/// The keep-alive interval the configuration asks for (at least a second).
pub(crate) fn keepalive_every(http: &crate::config::HttpConfig) -> Duration {
    Duration::from_secs(http.sse_keepalive_secs.max(1))
}

/// A `200` SSE response around `body`.
fn sse_response(body: Body) -> Response {
    let mut res = Response::new(body);
    *res.status_mut() = StatusCode::OK;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Stops nginx and similar proxies from buffering the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    res
}

/// An SSE frame with no id (2026-07-28 streams are not resumable).
pub(crate) fn message_frame(data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(data.len() + 24);
    b.put_slice(b"event: message\ndata: ");
    b.put_slice(data);
    b.put_slice(b"\n\n");
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let p = frame(
            &StoredEvent {
                id: "1-1".into(),
                data: Bytes::new(),
            },
            3000,
        );
        assert_eq!(&p[..], b"id: 1-1\nretry: 3000\ndata: \n\n");
        let m = frame(
            &StoredEvent {
                id: "1-2".into(),
                data: Bytes::from_static(b"{}"),
            },
            3000,
        );
        assert_eq!(&m[..], b"id: 1-2\nevent: message\ndata: {}\n\n");
    }
}
