//! `requestState`: what a 2026-07-28 multi-round request carries between rounds.
//!
//! The client echoes it verbatim, so it is attacker-controlled. It is sealed with
//! XChaCha20-Poly1305 (integrity and confidentiality: it carries the client's earlier answers)
//! under a key derived from `VAULT_SECRET`, else `JWT_SECRET`, else a per-process random key,
//! and it is bound to the request it belongs to (method and a digest of its parameters) and to
//! an expiry. Any instance with the same secret can continue the exchange.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::Aead;
use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

const NONCE_LEN: usize = 24;
/// States longer than this are refused before decoding.
const MAX_STATE_LEN: usize = 256 * 1024;

/// What a `requestState` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatePayload {
    /// Method of the request it belongs to.
    pub m: String,
    /// Digest of the request's salient parameters.
    pub d: String,
    /// Expiry, milliseconds since the Unix epoch.
    pub exp: u64,
    /// Answers of earlier rounds, by input-request key. Never replaced by a later round.
    pub a: Map<String, Value>,
    /// Keys of the input requests the round that sealed this state asked: the only
    /// `inputResponses` the next round accepts. (Absent in states sealed before it existed:
    /// their questions are then asked again.)
    #[serde(default)]
    pub q: Vec<String>,
}

/// Why a `requestState` was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("requestState failed verification")]
    Invalid,
    #[error("requestState has expired")]
    Expired,
    #[error("requestState belongs to another request")]
    OtherRequest,
}

/// Where the key came from, for the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    VaultSecret,
    JwtSecret,
    PerProcess,
}

pub struct RequestStateSealer {
    cipher: XChaCha20Poly1305,
    pub source: KeySource,
}

impl RequestStateSealer {
    pub fn new(vault: Option<&str>, jwt: Option<&str>) -> Self {
        let (ikm, source): (Vec<u8>, KeySource) = match (vault, jwt) {
            (Some(v), _) => (v.as_bytes().to_vec(), KeySource::VaultSecret),
            (None, Some(j)) => (j.as_bytes().to_vec(), KeySource::JwtSecret),
            (None, None) => (rand::random::<[u8; 32]>().to_vec(), KeySource::PerProcess),
        };
        let hk = Hkdf::<Sha256>::new(Some(b"fleetmcp/request-state/v1"), &ikm);
        let mut okm = [0u8; 32];
        let _ = hk.expand(b"mcp-request-state", &mut okm);
        Self {
            cipher: XChaCha20Poly1305::new(&Key::from(okm)),
            source,
        }
    }

    pub fn seal(&self, payload: &StatePayload) -> Option<String> {
        let plain = serde_json::to_vec(payload).ok()?;
        let nonce: [u8; NONCE_LEN] = rand::random();
        let sealed = self
            .cipher
            .encrypt(&XNonce::from(nonce), plain.as_slice())
            .ok()?;
        let mut raw = Vec::with_capacity(NONCE_LEN + sealed.len());
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&sealed);
        Some(URL_SAFE_NO_PAD.encode(raw))
    }

    /// Opens and checks a state for the request (`method`, `digest`) at time `now_ms`.
    pub fn open(
        &self,
        state: &str,
        method: &str,
        digest: &str,
        now_ms: u64,
    ) -> Result<StatePayload, StateError> {
        if state.len() > MAX_STATE_LEN {
            return Err(StateError::Invalid);
        }
        let raw = URL_SAFE_NO_PAD
            .decode(state)
            .map_err(|_| StateError::Invalid)?;
        if raw.len() <= NONCE_LEN {
            return Err(StateError::Invalid);
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| StateError::Invalid)?;
        let plain = self
            .cipher
            .decrypt(&XNonce::from(nonce), sealed)
            .map_err(|_| StateError::Invalid)?;
        let p: StatePayload = serde_json::from_slice(&plain).map_err(|_| StateError::Invalid)?;
        if p.exp < now_ms {
            return Err(StateError::Expired);
        }
        if p.m != method || p.d != digest {
            return Err(StateError::OtherRequest);
        }
        Ok(p)
    }
}

/// A digest of what makes a request itself: its method and its params without `_meta`,
/// `inputResponses` and `requestState` (which change between rounds). serde_json's maps are
/// sorted, so the text is canonical.
pub fn request_digest(method: &str, params: &Map<String, Value>) -> String {
    let mut salient = params.clone();
    salient.remove("_meta");
    salient.remove("inputResponses");
    salient.remove("requestState");
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    h.update(Value::Object(salient).to_string().as_bytes());
    URL_SAFE_NO_PAD.encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn payload(exp: u64) -> StatePayload {
        StatePayload {
            m: "tools/call".into(),
            d: "digest".into(),
            exp,
            a: json!({"step1": {"action": "accept"}})
                .as_object()
                .cloned()
                .unwrap(),
            q: vec!["step2".into()],
        }
    }

    #[test]
    fn sealed_state_opens_only_for_its_request_before_expiry() {
        let s = RequestStateSealer::new(Some("vault"), None);
        assert_eq!(s.source, KeySource::VaultSecret);
        let state = s.seal(&payload(2_000)).unwrap();
        assert_eq!(
            s.open(&state, "tools/call", "digest", 1_000).unwrap(),
            payload(2_000)
        );
        assert_eq!(
            s.open(&state, "tools/call", "digest", 3_000),
            Err(StateError::Expired)
        );
        assert_eq!(
            s.open(&state, "prompts/get", "digest", 1_000),
            Err(StateError::OtherRequest)
        );
        assert_eq!(
            s.open(&format!("{state}-TAMPERED"), "tools/call", "digest", 1_000),
            Err(StateError::Invalid)
        );
        let other = RequestStateSealer::new(None, Some("jwt"));
        assert_eq!(
            other.open(&state, "tools/call", "digest", 1_000),
            Err(StateError::Invalid)
        );
    }

    #[test]
    fn digest_ignores_round_fields_only() {
        let a = json!({"name": "t", "arguments": {"x": 1}, "_meta": {"k": 1}});
        let b =
            json!({"name": "t", "arguments": {"x": 1}, "inputResponses": {}, "requestState": "s"});
        let c = json!({"name": "t", "arguments": {"x": 2}});
        let d = |v: &Value| request_digest("tools/call", v.as_object().unwrap());
        assert_eq!(d(&a), d(&b));
        assert_ne!(d(&a), d(&c));
    }
}
