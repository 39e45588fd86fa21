//! The wire format: JSON-RPC envelopes, protocol versions and error codes.
//!
//! Message *payload* types (tools, content blocks, results, capabilities) come from
//! [`rmcp::model`], the official SDK's model module with its transport and service layers
//! switched off. The envelope is our own: it keeps `id`, `params` and `result` as raw JSON so
//! that a request is routed without building a typed tree for it, and so that an answer
//! echoes the request id byte for byte.
//!
//! Architecture invariant: nothing here knows about HTTP, sessions or Redis.

mod jsonrpc;
mod log_level;
pub(crate) mod schema;
mod version;

pub use jsonrpc::{
    Incoming, Message, encode_error, encode_notification, encode_raw_result, encode_request,
    encode_result,
};
pub use log_level::LogLevel;
pub use rmcp::model;
pub use rmcp::model::{ErrorCode, ErrorData};
pub use version::{ProtocolVersion, STATELESS_VERSIONS};

/// The answer to a request: its result, already serialised, or its error. What a method's
/// handler returns (`dispatch`) and what an upstream server answered (`upstream`), before the
/// envelope that echoes the request's id is written around it.
pub type Reply = Result<Box<serde_json::value::RawValue>, ErrorData>;

/// JSON-RPC error helpers with the messages this server uses everywhere.
pub mod errors {
    use super::{ErrorCode, ErrorData};
    use serde_json::Value;

    pub fn parse_error(detail: impl std::fmt::Display) -> ErrorData {
        ErrorData::new(
            ErrorCode::PARSE_ERROR,
            format!("Parse error: {detail}"),
            None,
        )
    }
    pub fn invalid_request(message: impl Into<String>) -> ErrorData {
        ErrorData::new(ErrorCode::INVALID_REQUEST, message.into(), None)
    }
    pub fn method_not_found(method: &str) -> ErrorData {
        ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
            None,
        )
    }
    /// `-32601` with a message of our own (a method that exists but not in this form).
    pub fn method_not_found_msg(message: impl Into<String>) -> ErrorData {
        ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message.into(), None)
    }
    pub fn invalid_params(message: impl Into<String>) -> ErrorData {
        ErrorData::new(ErrorCode::INVALID_PARAMS, message.into(), None)
    }
    pub fn invalid_params_with(message: impl Into<String>, data: Value) -> ErrorData {
        ErrorData::new(ErrorCode::INVALID_PARAMS, message.into(), Some(data))
    }
    pub fn internal(message: impl Into<String>) -> ErrorData {
        ErrorData::new(ErrorCode::INTERNAL_ERROR, message.into(), None)
    }
    /// The code of [`rate_limited`]: `-32010`, in the range `-32000..-32019` that MCP
    /// 2026-07-28 leaves to implementations. The deployment contract's `-32029` lies in the
    /// range the specification reserves for itself (ha-contract.md, section 25 item 29).
    pub const RATE_LIMITED: ErrorCode = ErrorCode(-32010);

    /// "Rate limit exceeded" (answered with `429`): the caller sent more than a limit allows
    /// and may retry after `retry_after`; `data` says which limit. It also carries `retryAfterMs`, the wait in milliseconds (the message and
    /// `Retry-After` round it up to whole seconds).
    pub fn rate_limited(retry_after: std::time::Duration, mut data: Value) -> ErrorData {
        let ms = u64::try_from(retry_after.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        if let Value::Object(map) = &mut data {
            map.insert("retryAfterMs".into(), Value::from(ms));
        }
        ErrorData::new(
            RATE_LIMITED,
            format!(
                "Rate limit exceeded. Retry after {} seconds",
                retry_after_secs(retry_after)
            ),
            Some(data),
        )
    }
    /// A wait as `Retry-After` says it: whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(wait: std::time::Duration) -> u64 {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        ms.div_ceil(1000).max(1)
    }
    /// `-32603` (answered with `503`) when the shared rate-limit counters do not answer and
    /// the server is configured to refuse rather than serve uncounted: the contract's message.
    pub fn rate_limit_store_unavailable() -> ErrorData {
        internal("Service temporarily unavailable: the rate-limit store cannot be reached")
    }
    /// `-32603` for a handler that panicked: the client learns only that the request failed;
    /// the panic's message stays in the server's log.
    pub fn handler_panicked() -> ErrorData {
        internal("Internal error: the handler failed unexpectedly")
    }
    /// Implementation-defined server error (`-32000`), used by the session contract.
    pub fn server(message: impl Into<String>) -> ErrorData {
        ErrorData::new(ErrorCode(-32000), message.into(), None)
    }
    /// `-32000` for a request refused because a store it needs did not answer (Redis down,
    /// paused, cut off): nothing was done, and the same request may be sent again after
    /// `retry_after`, which `data.retryAfterMs` carries. A plain HTTP answer with it is `503`
    /// with `Retry-After` ([`unavailable_retry_after`]), the refusal every store outage gets.
    pub fn unavailable(message: impl Into<String>, retry_after: std::time::Duration) -> ErrorData {
        let ms = u64::try_from(retry_after.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        ErrorData::new(
            ErrorCode(-32000),
            message.into(),
            Some(serde_json::json!({ "retryAfterMs": ms })),
        )
    }
    /// The wait, in whole seconds, of an [`unavailable`] error; `None` for any other error.
    pub fn unavailable_retry_after(e: &ErrorData) -> Option<u64> {
        if e.code != ErrorCode(-32000) {
            return None;
        }
        let ms = e.data.as_ref()?.get("retryAfterMs")?.as_u64()?;
        Some(retry_after_secs(std::time::Duration::from_millis(ms)))
    }
}
