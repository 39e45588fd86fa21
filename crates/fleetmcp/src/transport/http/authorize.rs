//! Authorization at the HTTP edge (`[auth]` on): every request to `/mcp`, `/sse` and
//! `/message` must carry a valid bearer token, checked here before anything else runs (no
//! session lookup, no relay, no handler); its [`Principal`] goes into the request's extensions
//! as `Arc<Principal>`, where the handlers (and a limiter) read it. The Protected Resource
//! Metadata (RFC 9728) is served here too, open like the health routes.
//!
//! | situation | answer |
//! |---|---|
//! | no token, or one that does not verify | `401`, `WWW-Authenticate: Bearer resource_metadata="…"` (with `error="invalid_token"` for a bad one, and the scopes to ask for), JSON-RPC `-32001` `Unauthorized: …` |
//! | a token without `auth.required_scopes`, or without the scope the tool, resource or prompt declares | `403`, `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"`, JSON-RPC `-32001` `Forbidden: …` |
//!
//! The JSON-RPC id of the request is echoed when the body is a single message (and was sent:
//! not to a client waiting on `Expect: 100-continue`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;
use http::{HeaderValue, Method, StatusCode, header};
use serde_json::value::RawValue;

use super::request_headers::only;
use super::{Endpoint, EndpointState, respond};
use crate::app::App;
use crate::auth::{AuthError, Authorizer, Principal};
use crate::protocol::ErrorData;
use crate::transport::core::{REFUSED, scope_error};

/// The check around the MCP routes: passes on a request with a valid token (and the scopes
/// every request needs), its principal in its extensions, and answers the rest. Without
/// `[auth]` it passes everything untouched. Run by the one layer in front of the routes
/// (`mod.rs`), after the Host/Origin guard.
pub(super) async fn admit(ep: &Endpoint, req: Request) -> Result<Request, Response> {
    let Some(auth) = ep.app.auth() else {
        return Ok(req);
    };
    // Boxed: the check's future (a JWKS fetch, an introspection call, the body read for a
    // refusal's id) is large, and every request's future, `[auth]` on or off, would hold room
    // for it and be copied with it when axum boxes it (issue 23: 11,000 instructions of
    // memcpy per call). One allocation, only with `[auth]` on.
    Box::pin(check(ep, auth, req)).await
}

/// [`admit`] with `[auth]` on.
async fn check(ep: &Endpoint, auth: &Authorizer, mut req: Request) -> Result<Request, Response> {
    // `Authorization` twice names no one principal: which value counts would depend on who
    // reads it (this check, a proxy in front, the holder of a relayed request).
    let checked = match only(req.headers(), header::AUTHORIZATION) {
        Some(None) => Err(AuthError::Malformed("the Authorization header is repeated")),
        value => {
            auth.authenticate(value.flatten().and_then(|v| v.to_str().ok()))
                .await
        }
    };
    match checked {
        Ok(principal) => {
            if let Some(missing) = auth
                .required_scopes()
                .iter()
                .find(|s| !principal.has_scope(s))
            {
                let missing = missing.clone();
                let id = request_id(&ep.app, req).await;
                return Err(insufficient_scope(&ep.app, id.as_deref(), &missing));
            }
            req.extensions_mut().insert(principal);
            Ok(req)
        }
        Err(why) => {
            // The reason only: the token itself is never logged.
            tracing::debug!(reason = %why, "refused a request without a valid access token");
            let id = request_id(&ep.app, req).await;
            Err(unauthorized(auth, &ep.app, id.as_deref(), &why))
        }
    }
}

/// The principal the layer found for a request (`None`: authorization is off).
pub(super) fn principal(extensions: &http::Extensions) -> Option<Arc<Principal>> {
    extensions.get::<Arc<Principal>>().cloned()
}

/// Its fingerprint, what a session records of who made it.
pub(super) fn fingerprint(principal: &Option<Arc<Principal>>) -> Option<&str> {
    principal.as_deref().map(Principal::fingerprint)
}

/// `403` for a token that lacks `scope`.
pub(super) fn insufficient_scope(app: &App, id: Option<&RawValue>, scope: &str) -> Response {
    let mut res = respond::rpc_error(StatusCode::FORBIDDEN, id, &scope_error(scope));
    if let Some(auth) = app.auth() {
        let mut scopes: Vec<&str> = auth.required_scopes().iter().map(String::as_str).collect();
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
        let value = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\", error_description=\"the token lacks a required scope\"",
            scopes.join(" "),
            auth.metadata_url()
        );
        challenge(&mut res, &value);
    }
    res
}

/// `401` for a missing or invalid token (`400` for a malformed request), naming the metadata
/// and the scopes to ask for.
fn unauthorized(auth: &Authorizer, app: &App, id: Option<&RawValue>, why: &AuthError) -> Response {
    let (status, message) = match why {
        AuthError::Missing => (
            StatusCode::UNAUTHORIZED,
            "Unauthorized: a bearer access token is required".to_string(),
        ),
        AuthError::Invalid(reason) => (
            StatusCode::UNAUTHORIZED,
            format!("Unauthorized: invalid access token ({reason})"),
        ),
        AuthError::Malformed(reason) => (
            StatusCode::BAD_REQUEST,
            format!("Bad Request: invalid_request ({reason})"),
        ),
    };
    let mut res = respond::rpc_error(status, id, &ErrorData::new(REFUSED, message, None));
    let mut value = String::from("Bearer ");
    let error = match why {
        AuthError::Missing => None,
        AuthError::Invalid(reason) => Some(("invalid_token", reason)),
        AuthError::Malformed(reason) => Some(("invalid_request", reason)),
    };
    if let Some((error, reason)) = error {
        value.push_str(&format!(
            "error=\"{error}\", error_description=\"{reason}\", "
        ));
    }
    value.push_str(&format!("resource_metadata=\"{}\"", auth.metadata_url()));
    let scopes = if auth.required_scopes().is_empty() {
        app.catalog().scopes()
    } else {
        auth.required_scopes().to_vec()
    };
    if !scopes.is_empty() {
        value.push_str(&format!(", scope=\"{}\"", scopes.join(" ")));
    }
    challenge(&mut res, &value);
    res
}

fn challenge(res: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        res.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
}

/// The id of a refused POST's single JSON-RPC message, read (within `http.max_body_bytes`)
/// only to echo it in the refusal. A client that sent `Expect: 100-continue` waits to be told
/// to send its body: the refusal is its answer at once, without the body and so without an id
/// (reading the body would make the server ask for it).
async fn request_id(app: &App, req: Request) -> Option<Box<RawValue>> {
    if req.method() != Method::POST || expects_continue(req.headers()) {
        return None;
    }
    let limit = app.config().http.max_body_bytes;
    let body = axum::body::to_bytes(req.into_body(), limit).await.ok()?;
    respond::message_id(&body)
}

fn expects_continue(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`: the Protected Resource Metadata;
/// `404` when authorization is off.
pub(super) async fn metadata(State(ep): EndpointState) -> Response {
    match ep.app.auth() {
        Some(auth) => {
            let doc = auth.metadata(ep.app.catalog().scopes());
            let mut res = respond::json(
                StatusCode::OK,
                bytes::Bytes::from(doc.to_string().into_bytes()),
            );
            res.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("max-age=300"),
            );
            res
        }
        None => respond::text(StatusCode::NOT_FOUND, "Not Found"),
    }
}
