//! The relay keys: two per secret, derived by HKDF-SHA256 (salt `fleetmcp/relay/v1`), one for
//! the MAC and one, separate, for sealing. Apart from their use so that rotating a secret
//! (`MCP_SESSION_SECRET_PREVIOUS`) is read in one place.

use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305};
use hkdf::Hkdf;
use hmac::Hmac;
use sha2::Sha256;

/// The keys made from one secret.
#[derive(Clone)]
pub(super) struct KeyPair {
    /// Keyed once; cloned per request (cheaper than keying again).
    pub mac: Hmac<Sha256>,
    pub seal: XChaCha20Poly1305,
}

fn derive(secret: &[u8]) -> Option<KeyPair> {
    let hk = Hkdf::<Sha256>::new(Some(b"fleetmcp/relay/v1"), secret);
    let (mut mac_key, mut seal_key) = ([0u8; 32], [0u8; 32]);
    // 32 bytes is far below HKDF-SHA256's output limit, so expand cannot fail.
    let _ = hk.expand(b"relay-mac", &mut mac_key);
    let _ = hk.expand(b"relay-seal", &mut seal_key);
    Some(KeyPair {
        mac: <Hmac<Sha256> as KeyInit>::new_from_slice(&mac_key).ok()?,
        seal: XChaCha20Poly1305::new(&Key::from(seal_key)),
    })
}

/// The relay keys of one instance: the current secret's first, then the previous secrets'.
#[derive(Clone)]
pub(in crate::fleet) struct RelayKeys {
    /// The current secret's pair signs; every pair verifies.
    pub(super) pairs: Vec<KeyPair>,
}

impl RelayKeys {
    /// Keys from `current` (signs and verifies) and `previous` (verify only).
    pub fn new(current: &[u8], previous: &[&[u8]]) -> Self {
        let pairs = std::iter::once(current)
            .chain(previous.iter().copied())
            .filter_map(derive)
            .collect();
        Self { pairs }
    }

    /// The keys of `MCP_SESSION_SECRET` and `MCP_SESSION_SECRET_PREVIOUS`; none without a secret
    /// (distributed mode refuses to start then), so nothing signs and nothing verifies.
    pub fn from_config(cfg: &crate::config::Config) -> Self {
        let Some(current) = &cfg.session_secret else {
            return Self { pairs: Vec::new() };
        };
        let previous: Vec<&[u8]> = cfg
            .previous_session_secrets
            .iter()
            .map(|s| s.as_bytes())
            .collect();
        Self::new(current.as_bytes(), &previous)
    }
}
