//! Sealed session ids.
//!
//! An id is `base64url(nonce ‖ XChaCha20-Poly1305(payload))` under a key derived with
//! HKDF-SHA256 from `MCP_SESSION_SECRET`. Any instance with the same secret can open it, so an
//! id proves it was minted by this deployment before anything is looked up: an id that does not
//! open is answered `404 invalid session id` and never reaches a store.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::Aead;
use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

const NONCE_LEN: usize = 24;
/// Ids longer than this are refused before any decoding work.
pub const MAX_ID_LEN: usize = 2048;

/// What a session id carries (field names follow the reference implementation's payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionIdPayload {
    /// The instance that created the session.
    pub node_id: String,
    pub uuid: String,
    /// Creation time, seconds since the Unix epoch.
    pub iat: u64,
    pub protocol: String,
    pub auth_sig: String,
    pub is_public: bool,
}

/// Seals session ids under the current key and opens them under it or a previous one.
pub struct SessionSealer {
    /// The current key first, then the keys of rotated-out secrets.
    ciphers: Vec<XChaCha20Poly1305>,
}

fn cipher_for(secret: &[u8]) -> XChaCha20Poly1305 {
    let hk = Hkdf::<Sha256>::new(Some(b"fleetmcp/session-id/v1"), secret);
    let mut okm = [0u8; 32];
    // 32 bytes is far below HKDF-SHA256's output limit, so expand cannot fail.
    let _ = hk.expand(b"mcp-session-id", &mut okm);
    XChaCha20Poly1305::new(&Key::from(okm))
}

impl SessionSealer {
    /// Derives the key from the shared secret (or, outside production, the machine id).
    pub fn new(secret: &[u8]) -> Self {
        Self::rotating(secret, &[])
    }

    /// Seals under `current`; opens ids sealed under it or any of `previous` (a rotation in
    /// progress). Opening an id no key opens costs one attempt per key, so keep the list short.
    pub fn rotating(current: &[u8], previous: &[&[u8]]) -> Self {
        let ciphers = std::iter::once(current)
            .chain(previous.iter().copied())
            .map(cipher_for)
            .collect();
        Self { ciphers }
    }

    pub fn seal(&self, payload: &SessionIdPayload) -> Option<String> {
        let plain = serde_json::to_vec(payload).ok()?;
        let nonce_bytes: [u8; NONCE_LEN] = rand::random();
        let nonce = XNonce::from(nonce_bytes);
        let sealed = self
            .ciphers
            .first()?
            .encrypt(&nonce, plain.as_slice())
            .ok()?;
        let mut raw = Vec::with_capacity(NONCE_LEN + sealed.len());
        raw.extend_from_slice(&nonce_bytes);
        raw.extend_from_slice(&sealed);
        Some(URL_SAFE_NO_PAD.encode(raw))
    }

    /// Opens an id; `None` for anything not sealed under this key.
    pub fn open(&self, id: &str) -> Option<SessionIdPayload> {
        if id.len() > MAX_ID_LEN {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(id).ok()?;
        if raw.len() <= NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce_arr: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        let nonce = XNonce::from(nonce_arr);
        let plain = self
            .ciphers
            .iter()
            .find_map(|c| c.decrypt(&nonce, sealed).ok())?;
        serde_json::from_slice(&plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload() -> SessionIdPayload {
        SessionIdPayload {
            node_id: "desk-a".into(),
            uuid: "0b8f".into(),
            iat: 1_767_225_600,
            protocol: "streamable-http".into(),
            auth_sig: "public".into(),
            is_public: true,
        }
    }

    #[test]
    fn round_trip_and_visible_ascii() {
        let s = SessionSealer::new(b"a shared secret of some length");
        let id = s.seal(&payload()).unwrap();
        assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        assert_eq!(s.open(&id), Some(payload()));
        assert_ne!(id, s.seal(&payload()).unwrap(), "fresh nonce every time");
    }

    #[test]
    fn foreign_forged_and_tampered_ids_do_not_open() {
        let a = SessionSealer::new(b"secret number one, long enough");
        let b = SessionSealer::new(b"secret number two, long enough");
        let id = a.seal(&payload()).unwrap();
        assert_eq!(b.open(&id), None, "another deployment's id");
        assert_eq!(a.open("not-a-session"), None);
        assert_eq!(a.open(""), None);
        let mut bytes = id.into_bytes();
        let last = bytes.len() - 5;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(a.open(std::str::from_utf8(&bytes).unwrap()), None);
        assert_eq!(a.open(&"A".repeat(MAX_ID_LEN + 1)), None);
    }

    #[test]
    fn a_rotation_opens_old_ids_and_seals_new_ones_under_the_new_secret() {
        let old = SessionSealer::new(b"the secret before the rotation");
        let rotating = SessionSealer::rotating(
            b"the secret after the rotation",
            &[b"the secret before the rotation"],
        );
        let after = SessionSealer::new(b"the secret after the rotation");
        let old_id = old.seal(&payload()).unwrap();
        assert_eq!(
            rotating.open(&old_id),
            Some(payload()),
            "old ids still open"
        );
        let new_id = rotating.seal(&payload()).unwrap();
        assert_eq!(
            after.open(&new_id),
            Some(payload()),
            "minted under the new secret"
        );
        assert_eq!(old.open(&new_id), None, "not under the old one");
        assert_eq!(
            after.open(&old_id),
            None,
            "once the old secret is gone, so are its ids"
        );
    }
}
