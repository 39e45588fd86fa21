//! The HTTP transport: Streamable HTTP on `/mcp`, with its two parts of other eras (the
//! 2024-11-05 pair `/sse` + `/message`, [`legacy_sse`]; the 2026-07-28 edge, [`stateless`]),
//! and the routes beside it: `/healthz`, `/readyz`, `/metrics` and the OAuth
//! protected-resource metadata. Requests run through the core every transport shares
//! ([`driver`](super::core::driver), [`initialize`](super::core::initialize)); this folder is
//! what HTTP adds around it, and the only part of layers 0 to 5 that names an HTTP crate.
//!
//! # A request, step by step
//!
//! 0. The listener (`server/listener.rs`) hands each request to [`Routes`]: a `POST` to `/mcp`
//!    goes through the same gate, layer, extractor and handler the axum routes run for it,
//!    called in place; anything else through the router (`server/routes_test.rs` sends the
//!    same requests both ways and compares the answers).
//! 1. Distributed mode's [`Gate`] first (the relay guard, then the machine id on every answer).
//!    Then the one layer around `/mcp`, `/sse` and `/message` ([`around_mcp`]): [`observe`]
//!    (span, request-local labels, the answer counted) → [`guard`] (`Host`, `Origin`: `403`)
//!    → [`authorize`] (with `[auth]` on: `401`/`403` before any session lookup, relay or
//!    handler). No body is read before the guard and the token check let the request through:
//!    a POST without a `traceparent` header has its body read for `_meta.traceparent` only
//!    then, and only when its span is recorded. A header that names one thing (`Host`,
//!    `Origin`, `Authorization`, `Mcp-Session-Id`, `MCP-Protocol-Version`, the mirrored
//!    `Mcp-*` headers) is not read at all when repeated, as if unusable (`request_headers.rs`'s
//!    `only`): which copy counts could differ between this instance, a proxy in front and a
//!    relayed request's holder.
//! 2. The route's extractors ([`edge`]) do the edge work once: the [`request_headers`] read once,
//!    [`checks`] (415, 406, the body under `http.max_body_bytes`: 413, 408), whom it counts
//!    against ([`client_key`]), a batch its version header forbids ([`batch`]), the era its
//!    headers say ([`era`]).
//! 3. [`locate`] decides from the session header alone, before the body is parsed, where the
//!    request is served: `session::Sessions::find` answers a typed `Lookup` (`Held`,
//!    `HeldElsewhere(node)`: handed as received to the [`relay`] seam, whose answer is the
//!    request's; `Missing(why)`: the contract's answer). A held session is one hash-map read
//!    and, usually, nothing else (client-side caching: `session/tracking.rs`). `locate.rs`
//!    counts the relays by outcome (answered, holder gone, failed) and the takeovers, with
//!    their durations.
//! 4. The handler ([`post`], [`get`], [`delete`], [`legacy_sse`]) parses the body once into
//!    `protocol::Incoming` and settles the era once (`era::decide`): a 2026-07-28 request goes
//!    to [`stateless`] (its mirrored headers checked there), `initialize` to
//!    [`initialize`](super::core::initialize), a batch to [`batch`].
//! 5. [`driver`](super::core::driver)'s `start` is the one place any route's request becomes
//!    a running call (a POST of either era, a batch's item, a 2024-11-05 message, a stdio
//!    line): it builds the `RequestContext`, counts it in its session (entered in the
//!    session's in-flight table only when its cancellation token is asked for),
//!    applies the limits of its key (`limits::Limits::admit`), calls `dispatch::request`, and
//!    tells its caller whether the answer is plain JSON or a stream. A request it does not run
//!    (a limit, a missing scope) is answered the same way by every route (`NotRun`, written as
//!    HTTP by [`refused`]): a limit's refusal is `429` `-32010` with `Retry-After`, `data.retryAfterMs` and the request id in both eras (a
//!    rate's also with `RateLimit-Policy` and `RateLimit`, `respond::with_rate_limit`), `503`
//!    `-32603` when the counters cannot be read and `limits.on_store_error = closed`.
//! 6. A session-era SSE answer is never written to the socket directly: the driver's messages
//!    are appended to the event store and the response tails that stream, so a broken
//!    connection loses nothing. [`sse`] writes the frames (all but the 2024-11-05 stream's
//!    `endpoint` event, which [`legacy_sse`] writes itself) and the keep-alive stream, by hand,
//!    so that a body is plain bytes a relay can pass through unchanged.
//!
//! Along this path the futures stay small (issue 23: axum boxes the layer's future and the
//! handler's on every request, and a future is as large as its largest state): what is large
//! and rarely taken (the relay hop, a session not held here, `initialize`, a batch, a
//! 2026-07-28 request, a streamed answer, the limit store's and the token's checks) is boxed
//! where it is awaited; the test `future_sizes` bounds both.
//!
//! A `tools/call` on a held session costs: the header checks, one body read, one hash-map read
//! for the session, one parse of the envelope and one of the params, the handler, one
//! serialisation, and usually no store command (`docs/BENCHMARKS.md` measures 0.00 Redis round
//! trips per call); limits counted in Redis add their one script. No decryption, no seam call,
//! no spawn unless the handler streams.
//!
//! The other files: [`respond`] (HTTP answers), [`health`] (`/healthz` with no I/O; `/readyz`
//! probes the session store plus the [`Probe`]s the layers above add; no limit applies to
//! them), [`scrape`] (`GET /metrics`).
//!
//! Architecture invariant: of other instances HTTP knows machine ids and the seams it defines
//! ([`Relay`], [`Probe`], [`Gate`]), never `fleet` itself; nothing below transport, nor the
//! core or stdio beside it, knows HTTP (`tests/layers.rs`, `Rule::Peer`).

// An error answer here is the HTTP response itself, built once per request and returned up a
// call or two; boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

mod authorize;
mod batch;
mod checks;
mod client_key;
mod delete;
mod edge;
mod era;
mod get;
mod guard;
mod health;
mod legacy_sse;
mod locate;
mod observe;
mod post;
mod refused;
mod relay;
mod request_headers;
mod respond;
mod scrape;
mod sse;
mod stateless;

use std::sync::Arc;

use axum::Router;
use axum::http::HeaderValue;
use axum::middleware;
use axum::response::Response;
use axum::routing::get as get_route;

pub use client_key::{PeerAddr, RELAYED_PEER_HEADER, with_peer};
pub use health::{Probe, ProbeReport};
pub use relay::{Relay, RelayRequest, Relayed};
pub(crate) use sse::keepalive_every as sse_keepalive;

use crate::app::App;

/// The header that names the instance that served a response (distributed mode).
pub const MACHINE_ID_HEADER: &str = "x-frontmcp-machine-id";
/// The session header (names are case-insensitive).
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol version header.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// The path of the 2024-11-05 transport's POSTs, named in its `endpoint` event.
pub const MESSAGE_PATH: &str = "/message";

/// What the layers above transport plug into it.
#[derive(Default, Clone)]
pub(crate) struct Seams {
    /// Serves requests whose session another instance holds (distributed mode).
    pub relay: Option<Arc<dyn Relay>>,
    /// Stands in front of every request (distributed mode).
    pub gate: Option<Arc<dyn Gate>>,
    /// Extra readiness probes for `/readyz` (distributed mode's heartbeat and advertised
    /// address).
    pub probes: Vec<Arc<dyn Probe>>,
}

/// What distributed mode puts in front of every request and on every answer (`fleet`'s relay
/// guard and the instance's name), as the outermost layer of the routes and on the direct way
/// of a POST to `/mcp` alike.
#[async_trait::async_trait]
pub trait Gate: Send + Sync {
    /// Whether a request with these headers must be checked before anything else runs (one
    /// that says it was relayed). Any other passes untouched, at the cost of this call.
    fn stops(&self, headers: &http::HeaderMap) -> bool;

    /// Checks a request [`Gate::stops`] named: the request to serve, or the gate's own answer
    /// (a refusal, or one it gives itself).
    async fn check(&self, req: axum::extract::Request) -> Result<axum::extract::Request, Response>;

    /// Marks every answer, the gate's own included; `opens_stream`: the request opened a
    /// 2024-11-05 stream (`GET /sse`).
    fn mark(&self, opens_stream: bool, res: &mut Response);
}

/// `serve(req)` behind `gate`.
async fn gated<F: Future<Output = Response>>(
    gate: &dyn Gate,
    req: axum::extract::Request,
    serve: impl FnOnce(axum::extract::Request) -> F,
) -> Response {
    let opens_stream = req.uri().path() == "/sse";
    let mut res = if gate.stops(req.headers()) {
        match gate.check(req).await {
            Ok(req) => serve(req).await,
            Err(answer) => answer,
        }
    } else {
        serve(req).await
    };
    gate.mark(opens_stream, &mut res);
    res
}

/// The gate as a layer around the routes.
async fn gate_layer(
    axum::extract::State(gate): axum::extract::State<Arc<dyn Gate>>,
    req: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    gated(&*gate, req, |req| next.run(req)).await
}

/// The state every HTTP handler gets: the app and the seams.
pub(crate) struct Endpoint {
    app: App,
    seams: Seams,
}

impl Endpoint {
    fn relay(&self) -> Option<&dyn Relay> {
        self.seams.relay.as_deref()
    }
}

type EndpointState = axum::extract::State<Arc<Endpoint>>;

/// What answers a server's HTTP requests: its routes, and a direct way for a POST to `/mcp`,
/// nearly every request a server answers.
///
/// That POST runs through the same gate (distributed mode's), layer ([`around_mcp`]'s),
/// extractor and handler the routes run for it, called in place (issue 23): through axum, the
/// router clones boxed services and inserts extensions no handler reads, and the layers and
/// the handler each box the request's future, about fifteen allocations and 7,800
/// instructions a call.
#[derive(Clone)]
pub(crate) struct Routes {
    router: Router,
    /// The endpoint a POST to `/mcp` is served by directly; `None` to send every request
    /// through the router (a test compares the two ways).
    direct: Option<Arc<Endpoint>>,
}

impl Routes {
    /// The routes, for a server that embeds them (every request through them).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// These routes, with every request sent through the router.
    #[cfg(test)]
    pub fn routed_only(self) -> Self {
        Self {
            router: self.router,
            direct: None,
        }
    }

    /// Answers one request.
    pub async fn serve(&self, req: axum::extract::Request) -> Response {
        if let Some(ep) = &self.direct
            && req.method() == http::Method::POST
            && req.uri().path() == "/mcp"
        {
            return match &ep.seams.gate {
                None => post_mcp(ep, req).await,
                Some(gate) => gated(&**gate, req, |req| post_mcp(ep, req)).await,
            };
        }
        match tower::ServiceExt::oneshot(self.router.clone(), req).await {
            Ok(res) => res,
            Err(never) => match never {},
        }
    }
}

/// A POST to `/mcp`, as the routes serve it behind the gate: the layer, then `Post`'s
/// extraction and [`post::handle`].
async fn post_mcp(ep: &Arc<Endpoint>, req: axum::extract::Request) -> Response {
    use axum::extract::FromRequest;
    around(ep, req, |req| async move {
        match edge::Post::from_request(req, ep).await {
            Ok(post) => post::handle(axum::extract::State(ep.clone()), post).await,
            Err(refused) => refused,
        }
    })
    .await
}

/// The routes of one server.
pub(crate) fn routes(app: App, seams: Seams) -> Routes {
    let ep = Arc::new(Endpoint { app, seams });
    Routes {
        router: router(ep.clone()),
        direct: Some(ep),
    }
}

fn router(ep: Arc<Endpoint>) -> Router {
    let mcp = Router::new()
        .route(
            "/mcp",
            axum::routing::post(post::handle)
                .get(get::handle)
                .delete(delete::handle)
                .fallback(method_not_allowed),
        )
        .route("/sse", get_route(legacy_sse::open))
        .route(MESSAGE_PATH, axum::routing::post(legacy_sse::post))
        .layer(middleware::from_fn_with_state(ep.clone(), around_mcp));
    // Off the MCP path (not counted, no span), behind the same checks.
    let mcp = if ep.app.meters().enabled() {
        mcp.merge(
            Router::new()
                .route("/metrics", get_route(scrape::metrics))
                .layer(middleware::from_fn_with_state(ep.clone(), guard::check)),
        )
    } else {
        mcp
    };
    let health = Router::new()
        .route("/healthz", get_route(health::healthz))
        .route("/health", get_route(health::healthz))
        .route("/readyz", get_route(health::readyz))
        .route(
            "/.well-known/oauth-protected-resource",
            get_route(authorize::metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get_route(authorize::metadata),
        );
    let gate = ep.seams.gate.clone();
    let router = mcp.merge(health).with_state(ep);
    match gate {
        Some(gate) => router.layer(middleware::from_fn_with_state(gate, gate_layer)),
        None => router,
    }
}

/// The one layer around the MCP routes: [`observe`] (span, request-local labels, metrics)
/// outermost, so a refused Host or Origin is counted too; then [`guard`], so a foreign origin
/// is refused before a token is read; then [`authorize`]; only then is a body read (for its
/// trace context, by `observe`). One layer, not three: each axum `from_fn` layer clones and
/// boxes the services under it and boxes its future on every request (issue 23: about 15
/// allocations of the 88 a call made).
async fn around_mcp(
    axum::extract::State(ep): EndpointState,
    req: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    around(&ep, req, |req| next.run(req)).await
}

/// [`around_mcp`]'s work around `route`, the request's handler.
async fn around<F: Future<Output = Response>>(
    ep: &Arc<Endpoint>,
    req: axum::extract::Request,
    route: impl FnOnce(axum::extract::Request) -> F,
) -> Response {
    let admit = |req: axum::extract::Request| async {
        guard::admit(ep, req.uri(), req.headers())?;
        authorize::admit(ep, req).await
    };
    observe::request(ep, req, admit, route).await
}

/// Any other method on `/mcp`: a JSON-RPC error, like every other error answer.
async fn method_not_allowed() -> Response {
    let mut res = respond::rpc_error(
        http::StatusCode::METHOD_NOT_ALLOWED,
        None,
        &crate::protocol::errors::server("Method Not Allowed: use POST, GET or DELETE"),
    );
    res.headers_mut().insert(
        http::header::ALLOW,
        HeaderValue::from_static("GET, POST, DELETE"),
    );
    res
}

/// The futures every request on `/mcp` builds stay small (issue 23): axum copies the layer's
/// future and the handler's whole into boxes on every request, and a future is as large as
/// its largest state, taken or not. The relay's hop, a session's recreation, a limit store's
/// check, the token check and the rarer answers are boxed where they are awaited; a change
/// that puts a large future back on this path fails here. (Sizes of a debug build, which lays
/// futures out larger than a release build does.)
#[cfg(test)]
mod future_sizes {
    use super::*;
    use crate::testing::{ret2, ret3};
    use axum::extract::FromRequest;

    #[test]
    fn a_calls_futures_stay_small() {
        let layer = ret3(&around_mcp);
        let extract = ret2(&<edge::Post as FromRequest<Arc<Endpoint>>>::from_request);
        let handle = ret2(&post::handle);
        let whole = ret2(&post_mcp);
        eprintln!(
            "around_mcp {layer} B, Post {extract} B, post::handle {handle} B, post_mcp {whole} B"
        );
        assert!(layer <= LAYER_MAX, "around_mcp's future: {layer} B");
        // The extraction is not the call's largest state: what it holds across the body read
        // and the session lookup (the request's head, lent to them, not moved in) stays smaller
        // than the handler's (issue 40: 1,880 B against 1,432 B, which made `post_mcp`'s
        // future, copied whole into the listener's box, 4,336 B; 3,888 B since).
        assert!(
            extract <= handle,
            "Post's future ({extract} B) larger than post::handle's ({handle} B)"
        );
        assert!(
            extract + handle <= HANDLER_MAX,
            "POST's handler futures: {extract} + {handle} B"
        );
    }

    const LAYER_MAX: usize = 3 * 1024;
    const HANDLER_MAX: usize = 4 * 1024;
}
