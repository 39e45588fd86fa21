//! The stateless era (MCP 2026-07-28): no session; every request carries its own metadata in
//! `params._meta`, mirrored in headers; requests to the client become `InputRequiredResult`
//! rounds (MRTR) whose `requestState` any instance can open.
//!
//! - [`request_state`]: sealing the state carried between rounds;
//! - this file: the per-request metadata and the bookkeeping of one MRTR round.
//!
//! Architecture invariant: knows nothing of sessions or HTTP; everything a request needs is in
//! it (the mirrored-header checks, which read HTTP headers, live in
//! `transport::http::stateless::mirrored`).

pub mod request_state;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use crate::protocol::LogLevel;
use crate::protocol::{ErrorData, errors};

pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// What a 2026-07-28 request says about itself.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub version: String,
    pub client_capabilities: Value,
    pub client_info: Option<Value>,
    pub log_level: Option<LogLevel>,
}

impl RequestMeta {
    /// Reads `params._meta`; a missing required field is `-32602` (HTTP 400).
    pub fn from_params(params: &Map<String, Value>) -> Result<Self, ErrorData> {
        let meta = params
            .get("_meta")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                errors::invalid_params("Invalid params: _meta is required in MCP 2026-07-28")
            })?;
        let version = meta
            .get(META_VERSION)
            .and_then(Value::as_str)
            .ok_or_else(|| {
                errors::invalid_params(format!(
                    "Invalid params: _meta[\"{META_VERSION}\"] is required"
                ))
            })?;
        let caps = meta
            .get(META_CAPABILITIES)
            .filter(|c| c.is_object())
            .ok_or_else(|| {
                errors::invalid_params(format!(
                    "Invalid params: _meta[\"{META_CAPABILITIES}\"] is required"
                ))
            })?;
        let log_level = match meta.get(META_LOG_LEVEL) {
            None | Some(Value::Null) => None,
            Some(Value::String(l)) => Some(
                LogLevel::parse(l)
                    .ok_or_else(|| errors::invalid_params(format!("Invalid log level: {l}")))?,
            ),
            Some(other) => {
                return Err(errors::invalid_params(format!(
                    "Invalid log level: {other}"
                )));
            }
        };
        Ok(Self {
            version: version.to_string(),
            client_capabilities: caps.clone(),
            client_info: meta.get(META_CLIENT_INFO).cloned(),
            log_level,
        })
    }

    pub fn supports(&self, capability: &str) -> bool {
        declares(&self.client_capabilities, capability)
    }
}

/// Whether client capabilities `capabilities` declare `capability` (present, and not `null`),
/// in either era.
pub(crate) fn declares(capabilities: &Value, capability: &str) -> bool {
    capabilities.get(capability).is_some_and(|c| !c.is_null())
}

/// One round of a stateless request: the answers the client has given so far, and the input
/// requests the handler made that have no answer yet.
pub(crate) struct Round {
    pub meta: RequestMeta,
    /// The request's method and digest, which the next `requestState` is bound to.
    pub method: String,
    pub digest: String,
    /// The fingerprint of the caller's principal (authorization on), which the next
    /// `requestState` is bound to as well; `None`: anonymous.
    pub principal: Option<String>,
    /// The request retries an earlier round (it carries `inputResponses` or `requestState`):
    /// its result carries no caching hints.
    pub retry: bool,
    /// The call's key as the `requestState` this round opened carries it (fixed by the
    /// exchange's first round): the call's key for this round, whatever its `_meta` says.
    pub sealed_key: Option<String>,
    /// The client's own key (`_meta` `io.fleetmcp/idempotency-key`), scoped as
    /// `RequestContext::call_key` scopes it: what a first round seals for the next.
    pub client_key: Option<String>,
    answers: Map<String, Value>,
    asked: Mutex<Vec<(String, Value)>>,
    /// Keys whose answers the handler used this round: only those are sealed into the next
    /// `requestState`, so answers nobody asked for never grow it.
    used: Mutex<Vec<String>>,
}

impl Round {
    pub fn new(
        meta: RequestMeta,
        method: String,
        digest: String,
        principal: Option<String>,
        answers: Map<String, Value>,
    ) -> Self {
        Self {
            meta,
            method,
            digest,
            principal,
            retry: false,
            sealed_key: None,
            client_key: None,
            answers,
            asked: Mutex::new(Vec::new()),
            used: Mutex::new(Vec::new()),
        }
    }

    /// The client's answer for `key`, checked for the shape its method returns; `Ok(None)` when
    /// there is none yet (the request is then recorded for the `InputRequiredResult`).
    pub fn answer(
        &self,
        key: &str,
        method: &str,
        params: &Value,
    ) -> Result<Option<Value>, ErrorData> {
        match self.answers.get(key) {
            Some(v) => {
                let v = in_result_shape(method, v);
                check_answer_shape(key, method, &v)?;
                let mut used = self.used.lock();
                if !used.iter().any(|k| k == key) {
                    used.push(key.to_string());
                }
                Ok(Some(v))
            }
            None => {
                let mut asked = self.asked.lock();
                if !asked.iter().any(|(k, _)| k == key) {
                    asked.push((key.to_string(), json!({"method": method, "params": params})));
                }
                Ok(None)
            }
        }
    }

    /// The call's key to seal into the next `requestState`: the one this round's state
    /// carried, else the client's own, else a new random one (128 bits: it names this exchange
    /// only, so whoever sends its rounds again, within its lifetime, sends the same key).
    pub fn key_to_seal(&self) -> String {
        use base64::Engine;
        self.sealed_key
            .clone()
            .or_else(|| self.client_key.clone())
            .unwrap_or_else(|| {
                let id: [u8; 16] = rand::random();
                format!(
                    "x/{}",
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id)
                )
            })
    }

    /// Input requests of this round, if the handler made any it has no answer for.
    pub fn take_asked(&self) -> Vec<(String, Value)> {
        std::mem::take(&mut *self.asked.lock())
    }

    /// The answers the handler used this round, carried into the next `requestState`.
    pub fn answers_to_seal(&self) -> Map<String, Value> {
        let used = self.used.lock();
        self.answers
            .iter()
            .filter(|(k, _)| used.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// The answer as its method's result: an elicitation answered with `status` instead of
/// `action` (as some clients send it, and as the reference accepts it: contract 20.5) reads as
/// one with `action`.
fn in_result_shape(method: &str, v: &Value) -> Value {
    let mut v = v.clone();
    if method == "elicitation/create"
        && let Some(answer) = v.as_object_mut()
        && !answer.contains_key("action")
        && let Some(status) = answer.get("status").cloned()
    {
        answer.insert("action".to_string(), status);
    }
    v
}

/// Rejects answers that cannot be what the method returns (`-32602`).
fn check_answer_shape(key: &str, method: &str, v: &Value) -> Result<(), ErrorData> {
    let ok = match method {
        "elicitation/create" => v
            .get("action")
            .and_then(Value::as_str)
            .is_some_and(|a| matches!(a, "accept" | "decline" | "cancel")),
        "sampling/createMessage" => v.get("content").is_some() && v.get("role").is_some(),
        "roots/list" => v.get("roots").is_some_and(Value::is_array),
        _ => v.is_object(),
    };
    if ok {
        Ok(())
    } else {
        Err(errors::invalid_params_with(
            format!("Invalid params: inputResponses[\"{key}\"] is not a valid {method} result"),
            json!({"key": key}),
        ))
    }
}
