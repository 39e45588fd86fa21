//! The holder's side of an authenticated relay, in front of every request (the fleet's
//! [`Gate`](crate::transport::Gate) asks it first): a request that carries any relay header is
//! served only if [`relay_auth`](super::relay_auth) verifies it (MAC under this fleet's
//! secret, for this instance, within the replay window, nonce never seen), with the client's credentials unsealed. Anything else is dropped before any handler
//! runs: `403` (`503` when too many nonces are remembered to take more) with a JSON-RPC error,
//! `id: null`, and a warning naming the claimed source and why.
//!
//! A verified request for `/.fleetmcp/self-check` is this instance checking that it reaches
//! itself at the address it advertises (`advertise.rs`): the guard answers it with this
//! process's token, and nothing behind it runs.
//!
//! A request without relay headers is a client's, and passes untouched.

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use http_body_util::{BodyExt, Limited};

use super::relay_auth::{RELAYED_BY_NAME, Unverified, Verifier, is_relayed};
use crate::transport::{PeerAddr, RELAYED_PEER_HEADER};

/// What the check needs.
pub(super) struct Guard {
    pub verifier: Verifier,
    /// `http.max_body_bytes`: the relaying instance read the body under the same limit.
    pub max_body: usize,
    /// This process's token, the answer to a verified self-check (`advertise.rs`).
    pub process: String,
    /// This instance's machine id, in that answer.
    pub machine_id: String,
}

impl Guard {
    /// Whether a request with these headers says it was relayed, and so must be checked.
    pub fn stops(&self, headers: &http::HeaderMap) -> bool {
        is_relayed(headers)
    }

    /// Checks a request that says it was relayed: the request as its client sent it, or the
    /// answer (a refusal, or a self-check's).
    pub async fn check(&self, req: Request) -> Result<Request, Response> {
        check(self, req).await
    }
}

async fn check(guard: &Guard, req: Request) -> Result<Request, Response> {
    let (mut parts, body) = req.into_parts();
    // The MAC covers the body, so it is read whole first: a relayed body is already within this
    // limit (the relaying instance read it under it).
    let body = match Limited::new(body, guard.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let source = source(&parts.headers);
            tracing::warn!(
                source = %source,
                error = %e,
                "[HA] Refused a relayed request from {source}: its body could not be read within the limit"
            );
            return Err(refuse(StatusCode::FORBIDDEN, "its body could not be read"));
        }
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let checked = guard.verifier.check(
        &parts.method,
        path,
        &mut parts.headers,
        &body,
        crate::clock::unix_ms(),
    );
    match checked {
        Ok(()) if parts.uri.path() == super::advertise::SELF_CHECK_PATH => {
            // This instance checking that it reaches itself at its advertised address: only a
            // request signed for this instance gets here, and only this process knows the token.
            let body = super::advertise::answer(&guard.machine_id, &guard.process);
            let mut res = Response::new(Body::from(body.to_string()));
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Err(res)
        }
        Ok(()) => {
            // The client's peer as the relaying instance saw it (signed, so believed): the
            // limits count the request against the client, not against that instance.
            if let Some(peer) = parts
                .headers
                .remove(RELAYED_PEER_HEADER)
                .and_then(|v| v.to_str().ok()?.parse::<std::net::SocketAddr>().ok())
            {
                parts.extensions.insert(PeerAddr(peer));
            }
            Ok(Request::from_parts(parts, Body::from(body)))
        }
        Err(unverified) => {
            // A refused request's headers are as they came (the check changes them only once
            // it passes).
            let source = source(&parts.headers);
            let why = unverified.why();
            tracing::warn!(
                source = %source,
                method = %parts.method,
                path = %parts.uri.path(),
                "[HA] Refused a relayed request from {source}: {why}"
            );
            // A hop signed before this process started is a replay, or, far more often, a
            // request that was on its way while this instance restarted (the fault soak saw
            // it): either way it does not run, and a client whose request it was retries
            // (signed anew), so it gets the documented 503, not a 403.
            let status = if matches!(unverified, Unverified::Overloaded | Unverified::BeforeStart) {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::FORBIDDEN
            };
            Err(refuse(status, why))
        }
    }
}

/// The relaying instance a request names: claimed, not proven, so for the log only (read only
/// when a request is refused).
fn source(headers: &http::HeaderMap) -> String {
    headers
        .get(&RELAYED_BY_NAME)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_else(|| "<unnamed>".into())
}

/// The refusal: a JSON-RPC error with `id: null` (the request was not read as JSON-RPC);
/// `Retry-After: 1` with a `503`.
fn refuse(status: StatusCode, why: &str) -> Response {
    let retry = (status == StatusCode::SERVICE_UNAVAILABLE).then_some(1);
    super::refusal(status, &format!("Relayed request refused: {why}"), retry)
}
