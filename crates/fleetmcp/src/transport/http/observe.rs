//! The outer step of the one layer around the MCP routes (`/mcp`, `/sse`, `/message`; the
//! layer is `around_mcp` in `mod.rs`, which hands this step the guard and the token check to
//! run first): each request runs in a
//! `request` span carrying its W3C trace id (the client's `traceparent` header when valid, else
//! the `traceparent` of its `_meta` when valid (SEP-414), else a new trace;
//! [`crate::telemetry::trace_context`]), with request-local state where the layers below note its MCP
//! method and era ([`crate::telemetry::labels`]); when its answer's head is ready it is counted
//! and timed by method, era and status, and an SSE answer counts as an open stream until its
//! body is dropped. A relayed request carries the trace on to its holder
//! ([`super::relay::request`]), so both instances' log lines share the trace id, and with the
//! feature `otlp` their exported spans form one tree ([`crate::telemetry::otlp`]).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use futures_util::{FutureExt, StreamExt, stream};
use http::{Method as HttpMethod, header};
use http_body_util::BodyExt;
use memchr::memmem;
use serde::Deserialize;
use tracing::Instrument;

use super::Endpoint;
use crate::telemetry::TraceContext;
use crate::telemetry::labels::{Era, Labels, Method, RequestLocal};
use crate::telemetry::meters::Open;
use crate::telemetry::otlp;
use crate::telemetry::trace_context::TRACEPARENT;

/// `traceparent`, ready to look up: every request asks for it, and a lookup by `&str` parses
/// the name each time (issue 23).
static TRACEPARENT_NAME: http::HeaderName = http::HeaderName::from_static(TRACEPARENT);

/// The target of the request's span and of its access line: the module's path before it
/// moved into `transport/http/`, which operators' `RUST_LOG` filters name to turn the access
/// log on (`fleetmcp::transport::observe=debug`).
const LOG_TARGET: &str = "fleetmcp::transport::observe";

/// Serves `req`: `admit` (the Host/Origin guard and the token check, `mod.rs`), then, for a
/// request it lets through, `route`, in the request's span and request-local state; counts
/// the answer. The span's parent must be known before the span is entered, and for a POST
/// without a valid `traceparent` header it may be in the body, which only an admitted request
/// has read ([`meta_trace`]): such a request is admitted first, outside the span (a refused
/// one is answered in a span of a new trace, as nothing links it to another).
///
/// A span nobody records (`RUST_LOG` leaves it out and nothing exports it) gets no trace
/// context at all: nothing reads a header or a body for one, or makes one (issue 40: about
/// 1,000 instructions a POST, its body read and handed on again). A request this instance
/// relays then carries no `traceparent` of this hop, and the holder finds the client's, in
/// the header or in `_meta`, as it would had the client called it directly.
pub(super) async fn request<A, AF, R, RF>(
    ep: &Endpoint,
    req: Request,
    admit: A,
    route: R,
) -> Response
where
    A: FnOnce(Request) -> AF,
    AF: Future<Output = Result<Request, Response>>,
    R: FnOnce(Request) -> RF,
    RF: Future<Output = Response>,
{
    let began = Instant::now();
    let start = first_labels(req.method(), req.uri().path());
    // Made first, so whether anything records it is known before its parent is looked for;
    // it starts only when entered, after `in_span` has joined it to its trace. `known`:
    // `Some(trace)` when the trace is settled before the body (none when nothing records the
    // span), `None` when it may be in the body's `_meta`.
    let span = tracing::info_span!(target: LOG_TARGET, "request", trace_id = tracing::field::Empty);
    let known = if span.is_disabled() {
        Some(None)
    } else {
        req.headers()
            .get(&TRACEPARENT_NAME)
            .and_then(|v| TraceContext::from_traceparent(v.as_bytes()))
            .or_else(|| (req.method() != HttpMethod::POST).then(TraceContext::new_trace))
            .map(Some)
    };
    // The request's future is pinned here, where it stays, and the span's layers wrap a
    // reference to it: each layer that took it by value moved it whole (a future of the size
    // of its largest state: it has not started yet, but every byte is copied), five copies
    // before its first poll (issue 40).
    let (res, labels) = match known {
        Some(trace) => {
            let serve = std::pin::pin!(async {
                match admit(req).await {
                    Ok(req) => route(req).await,
                    Err(refused) => refused,
                }
            });
            in_span(began, start, span, trace, serve).await
        }
        None => match admit(req).await {
            Err(refused) => {
                let trace = Some(TraceContext::new_trace());
                in_span(began, start, span, trace, async { refused }).await
            }
            Ok(req) => {
                let limit = ep.app.config().http.max_body_bytes;
                let (req, meta) = meta_trace(req, limit).await;
                let trace = Some(meta.unwrap_or_else(TraceContext::new_trace));
                let routed = std::pin::pin!(route(req));
                in_span(began, start, span, trace, routed).await
            }
        },
    };
    let meters = ep.app.meters();
    meters.request(
        labels.method,
        labels.era,
        res.status().as_u16(),
        began.elapsed(),
    );
    if meters.enabled() && is_sse(&res) {
        let open = meters.sse_opened();
        return res.map(|body| Body::new(Counted { body, _open: open }));
    }
    res
}

/// Runs `serve` in `span`, joined to `trace` (none when nothing records the span), and with
/// request-local state that starts with `start`: its answer, and the labels noted meanwhile.
/// Built around `serve` rather than awaiting it, so `serve` is held once (see
/// [`RequestLocal::run`]).
fn in_span<F>(
    began: Instant,
    start: Labels,
    span: tracing::Span,
    mut trace: Option<TraceContext>,
    serve: F,
) -> impl Future<Output = (Response, Labels)>
where
    F: Future<Output = Response>,
{
    // The trace id is recorded once the span has joined its exported trace (feature `otlp`),
    // which may have given it the exporter's ids.
    if let Some(trace) = &mut trace {
        otlp::join(&span, trace);
        span.record("trace_id", tracing::field::display(trace.trace_id()));
    }
    RequestLocal::run(start, trace, serve)
        .map(move |(res, labels)| {
            tracing::debug!(
                target: LOG_TARGET,
                method = labels.method.as_str(),
                era = labels.era.as_str(),
                status = res.status().as_u16(),
                ms = began.elapsed().as_secs_f64() * 1000.0,
                "request answered"
            );
            (res, labels)
        })
        .instrument(span)
}

/// The trace context of an admitted POST's JSON-RPC request in its `_meta`
/// (`params._meta.traceparent`, SEP-414), for a request without a valid `traceparent` header:
/// the span must have its parent before it is entered, so the body is read here, once, and
/// handed on as it came. A body declared or found longer than `limit` is handed on unparsed
/// (the handler answers `413`), as is one that failed to arrive (its error is handed on too:
/// `408`, `400`).
///
/// The header wins when both are valid: it names the caller's own hop (its HTTP client's
/// span, or the instance that relayed the request, whose span is the holder's parent), a child
/// in the same trace of the context the MCP client put in `_meta`.
///
/// Only a request the guard and the token check let through gets here: one they refuse is
/// answered without its body being read (a client that sent `Expect: 100-continue` is never
/// asked for it), and a body is parsed only if it names `traceparent`.
async fn meta_trace(req: Request, limit: usize) -> (Request, Option<TraceContext>) {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return (req, None);
    }
    let (parts, body) = req.into_parts();
    let (body, whole) = read_up_to(body, limit).await;
    let trace = whole.as_deref().and_then(traceparent_in_meta);
    (Request::from_parts(parts, body), trace)
}

/// Reads `body` whole if it is at most `limit` bytes: a body that gives the same bytes, and
/// the bytes. Past `limit`, or on an error, a body that gives what was read, then the rest or
/// the error, and no bytes.
async fn read_up_to(mut body: Body, limit: usize) -> (Body, Option<Bytes>) {
    // Nearly every body is one frame: kept as it is, with no list of frames (issue 40).
    let first = match body.frame().await {
        None => return (Body::empty(), Some(Bytes::new())),
        Some(Ok(frame)) => frame.into_data().ok(),
        Some(Err(e)) => {
            return (
                Body::from_stream(stream::once(async { Err::<Bytes, _>(e) })),
                None,
            );
        }
    };
    if let Some(data) = &first
        && data.len() <= limit
        && http_body::Body::is_end_stream(&body)
    {
        return (Body::from(data.clone()), Some(data.clone()));
    }
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    if let Some(data) = first {
        len = data.len();
        chunks.push(data);
        if len > limit {
            let read = stream::iter(chunks.into_iter().map(Ok::<_, axum::Error>));
            return (Body::from_stream(read.chain(body.into_data_stream())), None);
        }
    }
    loop {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                // Trailers carry nothing a JSON-RPC request uses.
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                len = len.saturating_add(data.len());
                chunks.push(data);
                if len > limit {
                    let read = stream::iter(chunks.into_iter().map(Ok::<_, axum::Error>));
                    return (Body::from_stream(read.chain(body.into_data_stream())), None);
                }
            }
            Some(Err(e)) => {
                let read = stream::iter(chunks.into_iter().map(Ok));
                return (
                    Body::from_stream(read.chain(stream::once(async { Err(e) }))),
                    None,
                );
            }
        }
    }
    let whole = match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => Bytes::from(chunks.concat()),
    };
    (Body::from(whole.clone()), Some(whole))
}

/// `params._meta.traceparent` of one JSON-RPC message, when it is a valid `traceparent`. Only
/// a body that names the key is parsed (a batch has no single `_meta`, and is not).
fn traceparent_in_meta(body: &[u8]) -> Option<TraceContext> {
    // Every POST without the header passes here: a vectorised search, not a byte-by-byte
    // window comparison (a 4 MiB body cost tens of milliseconds that way), with its searcher
    // built once: `memmem::find` builds one (its prefilter chosen for the needle) per call
    // (issue 23).
    static TRACEPARENT_KEY: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(b"\"traceparent\""));
    TRACEPARENT_KEY.find(body)?;
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow, rename = "_meta")]
        meta: Option<Meta<'a>>,
    }
    #[derive(Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        traceparent: Option<Cow<'a, str>>,
    }
    let envelope: Envelope<'_> = serde_json::from_slice(body).ok()?;
    let value = envelope.params?.meta?.traceparent?;
    TraceContext::from_traceparent(value.as_bytes())
}

/// What is known of a request from its route alone; the layers below refine it.
fn first_labels(method: &HttpMethod, path: &str) -> Labels {
    let era = if path == "/mcp" {
        Era::Unknown
    } else {
        Era::Legacy
    };
    let method = match *method {
        HttpMethod::GET => Method::STREAM,
        HttpMethod::DELETE => Method::DELETE,
        _ => Method::UNPARSED,
    };
    let era = match (era, method) {
        // Only the session era has a GET stream or a DELETE on `/mcp`.
        (Era::Unknown, Method::STREAM | Method::DELETE) => Era::Session,
        (era, _) => era,
    };
    Labels { method, era }
}

fn is_sse(res: &Response) -> bool {
    res.headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// An SSE body that counts as open while it exists.
struct Counted {
    body: Body,
    _open: Open,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn chunked(parts: &[&'static str]) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> = parts
            .iter()
            .map(|p| Ok(Bytes::from_static(p.as_bytes())))
            .collect();
        Body::from_stream(stream::iter(chunks))
    }

    async fn all(body: Body) -> Result<Bytes, axum::Error> {
        Ok(body.collect().await?.to_bytes())
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_once_and_handed_on_unchanged() {
        let (body, whole) = read_up_to(chunked(&["{\"a\":", "1}"]), 16).await;
        assert_eq!(whole.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(all(body).await.unwrap(), Bytes::from_static(b"{\"a\":1}"));
        let (body, whole) = read_up_to(Body::empty(), 16).await;
        assert_eq!(whole.as_deref(), Some(&b""[..]));
        assert!(all(body).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_handed_on_whole_and_unparsed() {
        let (body, whole) = read_up_to(chunked(&["0123", "4567", "89"]), 5).await;
        assert_eq!(whole, None);
        assert_eq!(all(body).await.unwrap(), Bytes::from_static(b"0123456789"));
    }

    #[tokio::test]
    async fn an_error_is_handed_on_after_what_was_read() {
        let failing = Body::from_stream(stream::iter(vec![
            Ok(Bytes::from_static(b"{\"par")),
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "too slow",
            )),
        ]));
        let (body, whole) = read_up_to(failing, 1024).await;
        assert_eq!(whole, None);
        let mut body = body;
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, Bytes::from_static(b"{\"par"));
        let err = body.frame().await.unwrap().unwrap_err();
        // The cause is still there for the handler's 408 (it walks the sources).
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
        let mut timed_out = false;
        while let Some(c) = cause {
            timed_out |= c
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut);
            cause = c.source();
        }
        assert!(timed_out, "{err}");
    }

    #[test]
    fn the_trace_context_is_read_from_params_meta_only() {
        let call = |meta: serde_json::Value| {
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "t", "_meta": meta}})
            .to_string()
        };
        let t = traceparent_in_meta(call(serde_json::json!({"traceparent": VALID})).as_bytes())
            .expect("a valid traceparent in _meta");
        assert_eq!(t.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id, Some(0x00f0_67aa_0ba9_02b7));
        // Escaped JSON text is read as its value.
        let escaped = call(serde_json::json!({})).replace(
            "\"_meta\":{}",
            &format!(
                "\"_meta\":{{\"traceparent\":\"{}\"}}",
                VALID.replace('-', "\\u002d")
            ),
        );
        assert!(
            traceparent_in_meta(escaped.as_bytes()).is_some(),
            "{escaped}"
        );
        for (what, body) in [
            (
                "invalid",
                call(serde_json::json!({"traceparent": VALID.to_uppercase()})),
            ),
            ("not a string", call(serde_json::json!({"traceparent": 7}))),
            (
                "outside _meta",
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "m",
                    "params": {"traceparent": VALID}})
                .to_string(),
            ),
            (
                "a batch",
                format!("[{}]", call(serde_json::json!({"traceparent": VALID}))),
            ),
            ("not JSON", format!("\"traceparent\": \"{VALID}\"")),
        ] {
            assert_eq!(traceparent_in_meta(body.as_bytes()), None, "{what}: {body}");
        }
    }
}
