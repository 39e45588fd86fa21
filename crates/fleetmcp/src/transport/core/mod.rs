//! What every transport runs: [`driver`], where any transport's request becomes a running
//! call, and [`initialize`], which opens a session; with what they share: who sent a request
//! ([`Client`]), how a refusal is carried ([`Status`]), the `-32001` of a missing scope
//! ([`scope_error`]) and a batch's answers as one array ([`json_array`]).
//!
//! Invariant: nothing here names an HTTP crate or the HTTP transport (`tests/layers.rs`,
//! `Rule::Peer`). A refusal is a `driver::Refused`, which HTTP writes with its status line
//! and headers (`http/refused.rs`) and stdio as the JSON-RPC error alone.

// A refusal is built once per refused request and returned up a call or two; boxing it would
// only add an allocation.
#![allow(clippy::result_large_err)]

pub(super) mod driver;
pub(super) mod initialize;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;

use crate::auth::Principal;
use crate::limits::LimitKey;
use crate::protocol::{ErrorCode, ErrorData};

/// Who sent a request: its principal (authorization on) and the key its limits count against.
/// Taken once by the transport that received the request (HTTP reads it from the request's
/// head, `http/client_key.rs`; stdio has no principal and one key), and carried with each of
/// its calls to the driver.
#[derive(Clone)]
pub(in crate::transport) struct Client {
    pub principal: Option<Arc<Principal>>,
    pub key: LimitKey,
}

/// How a transport with a status line (HTTP) answers a request the core refused; one without
/// (stdio) sends the JSON-RPC error alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::transport) enum Status {
    /// `200`: the error is the request's answer (an upstream's own refusal).
    Ok,
    /// `400`: the request cannot be served as sent.
    BadRequest,
    /// `429`: its caller asks for too much (a limit).
    TooManyRequests,
    /// `500`: this server cannot serve it (no session secret).
    Internal,
    /// `503`: not now (a store, an upstream or this instance's room); retry.
    Unavailable,
}

/// The JSON-RPC code of a refused caller (the deployment contract's `-32001`): HTTP's `401` and
/// `403`, and a call whose token lacks a scope.
pub(in crate::transport) const REFUSED: ErrorCode = ErrorCode(-32001);

/// The JSON-RPC error of a call refused for want of `scope`, in any transport.
pub(in crate::transport) fn scope_error(scope: &str) -> ErrorData {
    ErrorData::new(
        REFUSED,
        format!("Forbidden: insufficient_scope: this call needs the scope `{scope}`"),
        Some(json!({"error": "insufficient_scope", "scope": scope})),
    )
}

/// `[a,b,...]` of JSON texts already encoded.
pub(in crate::transport) fn json_array(parts: &[Bytes]) -> Bytes {
    let mut body = Vec::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + 2);
    body.push(b'[');
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(p);
    }
    body.push(b']');
    Bytes::from(body)
}
