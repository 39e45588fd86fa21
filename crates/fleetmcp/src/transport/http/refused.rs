//! The core's refusals as HTTP answers: the status line, `Retry-After` and the rate's quota
//! headers around the JSON-RPC error the core gives (`core/driver.rs`'s `Refused` and `NotRun`),
//! so the core itself names nothing of HTTP.

use axum::response::Response;
use http::StatusCode;
use serde_json::value::RawValue;

use super::{authorize, respond};
use crate::app::App;
use crate::transport::core::Status;
use crate::transport::core::driver::{NotRun, Refused};

impl Refused {
    /// The HTTP answer, in either era: over a limit `429` (the deployment contract's rate-limit
    /// answer) with `Retry-After` and the request's id. `429` rather than `503` over a limit:
    /// the server is fine, this one caller asks for too much, and a load balancer must not
    /// take a `503` as a sign that the instance is unhealthy. A rate's refusal also names its
    /// quota policy and what is left of it (`RateLimit-Policy`, `RateLimit`:
    /// draft-ietf-httpapi-ratelimit-headers).
    pub fn response(&self, id: &RawValue) -> Response {
        self.response_to(Some(id))
    }

    /// The answer, to a request with `id`, or to none (a stream that is not a request).
    pub fn response_to(&self, id: Option<&RawValue>) -> Response {
        let res = respond::rpc_error(status_code(self.status), id, &self.error);
        let Some(retry_after_s) = self.retry_after_s else {
            return res;
        };
        let res = respond::with_retry_after(res, retry_after_s);
        match &self.policy {
            Some((name, rate)) => respond::with_rate_limit(res, name, rate, retry_after_s),
            None => res,
        }
    }
}

impl NotRun {
    /// The HTTP answer to request `id`, in either era: [`Refused::response`] (`429`, or `503`),
    /// or [`authorize::insufficient_scope`] (`403`).
    pub fn response(&self, app: &App, id: &RawValue) -> Response {
        match self {
            NotRun::Refused(r) => r.response(id),
            NotRun::Forbidden(scope) => authorize::insufficient_scope(app, Some(id), scope),
        }
    }
}

fn status_code(status: Status) -> StatusCode {
    match status {
        Status::Ok => StatusCode::OK,
        Status::BadRequest => StatusCode::BAD_REQUEST,
        Status::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        Status::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        Status::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
}
