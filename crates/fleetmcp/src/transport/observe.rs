//! One layer around the MCP routes (`/mcp`, `/sse`, `/message`): each request runs in a
//! `request` span carrying its W3C trace id (the client's `traceparent` when valid, else a new
//! trace; [`crate::telemetry::trace_context`]), in a scope where the layers below note its MCP
//! method and era ([`crate::telemetry::scope`]); when its answer's head is ready it is counted
//! and timed by method, era and status, and an SSE answer counts as an open stream until its
//! body is dropped. A relayed request carries the trace on to its holder
//! ([`super::relay_request`]), so both instances' log lines share the trace id, and with the
//! feature `otlp` their exported spans form one tree ([`crate::telemetry::otlp`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http::{Method as HttpMethod, header};
use tracing::Instrument;

use super::Endpoint;
use crate::telemetry::TraceContext;
use crate::telemetry::meters::SseOpen;
use crate::telemetry::otlp;
use crate::telemetry::scope::{Era, Labels, Method, Scope};
use crate::telemetry::trace_context::TRACEPARENT;

pub(super) async fn request(State(ep): State<Arc<Endpoint>>, req: Request, next: Next) -> Response {
    let began = Instant::now();
    let mut trace = TraceContext::from_header(req.headers().get(TRACEPARENT).map(|v| v.as_bytes()));
    let start = first_labels(req.method(), req.uri().path());
    // The trace id is recorded once the span has joined its exported trace (feature `otlp`),
    // which may have given it the exporter's ids.
    let span = tracing::info_span!("request", trace_id = tracing::field::Empty);
    otlp::join(&span, &mut trace);
    span.record("trace_id", tracing::field::display(trace.trace_id()));
    let serve = async {
        let (res, labels) = Scope::run(start, trace, next.run(req)).await;
        tracing::debug!(
            method = labels.method.as_str(),
            era = labels.era.as_str(),
            status = res.status().as_u16(),
            ms = began.elapsed().as_secs_f64() * 1000.0,
            "request answered"
        );
        (res, labels)
    };
    let (res, labels) = serve.instrument(span).await;
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
    _open: SseOpen,
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
