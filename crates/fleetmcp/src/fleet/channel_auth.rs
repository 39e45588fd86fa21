//! Messages on an instance's channel (`<prefix>notify:<nodeId>`) authenticated like a relayed
//! request (`relay_auth/`): an HMAC, under a key derived from the fleet's secret, over the
//! message's source, its target, a timestamp, a nonce, a path naming its kind, and its body.
//! Anyone who can publish on Redis cannot forge one; the receiver drops one that does not
//! verify for it, is outside the replay window, or repeats a nonce.

use http::{HeaderMap, HeaderValue, Method, header};

use super::relay_auth::{RELAY_AUTH, RELAYED_BY, RelayKeys, Subject, Verifier};

/// The `auth` value of a message from `source` to `target` of kind `path` with `body`, at
/// `now_ms`: `v1;<unix ms>;<nonce>;<names>;<mac>`.
pub(super) fn sign(
    keys: &RelayKeys,
    source: &str,
    target: &str,
    path: &str,
    body: &[u8],
    now_ms: u64,
) -> Result<String, &'static str> {
    let mut headers = HeaderMap::new();
    let subject = Subject {
        source: source.as_bytes(),
        target: target.as_bytes(),
        method: &Method::POST,
        path,
        body,
    };
    keys.sign(&subject, &mut headers, now_ms)?;
    headers
        .get(RELAY_AUTH)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
        .ok_or("signing gave no authentication")
}

/// Whether `auth` authenticates a message from `source` of kind `path` with `body` for this
/// instance (the verifier's), recently, and not seen before.
pub(super) fn verify(
    verifier: &Verifier,
    source: &str,
    path: &str,
    body: &[u8],
    auth: Option<&str>,
    now_ms: u64,
) -> Result<(), &'static str> {
    let auth = auth.ok_or("it is not authenticated")?;
    let mut headers = HeaderMap::new();
    // What the signing side's headers were: `sign` adds `Accept: */*` when there is none.
    headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
    headers.insert(
        RELAYED_BY,
        HeaderValue::from_str(source).map_err(|_| "its source is not valid")?,
    );
    headers.insert(
        RELAY_AUTH,
        HeaderValue::from_str(auth).map_err(|_| "its authentication is not valid")?,
    );
    verifier
        .check(&Method::POST, path, &mut headers, body, now_ms)
        .map_err(|r| r.why())
}
