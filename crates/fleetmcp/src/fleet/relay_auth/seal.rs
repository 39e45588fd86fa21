//! The client's credentials across the hop: `Authorization`, `Proxy-Authorization` and `Cookie`
//! never travel in clear. The relaying instance takes them out of the forwarded headers and
//! seals them (XChaCha20-Poly1305, the request's nonce as associated data); the holder opens
//! them once the MAC has verified.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::XNonce;
use chacha20poly1305::aead::{Aead, Payload};
use http::{HeaderMap, HeaderName, HeaderValue, header};

use super::NONCE_LEN;
use super::keys::KeyPair;

/// Headers that never cross the hop in clear.
pub(super) const SENSITIVE: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
];

const SEAL_NONCE_LEN: usize = 24;

/// Appends `bytes`, length-prefixed, so that no two field sequences encode alike.
fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Takes the credentials out of `headers` and seals them for the request of `nonce`: the
/// sealed header's value (base64url of seal nonce ‖ ciphertext), empty when there were none.
pub(super) fn seal(
    pair: &KeyPair,
    headers: &mut HeaderMap,
    nonce: &[u8; NONCE_LEN],
) -> Result<String, &'static str> {
    let mut secrets = Vec::new();
    for name in &SENSITIVE {
        if headers.contains_key(name) {
            for value in headers.get_all(name) {
                put(&mut secrets, name.as_str().as_bytes());
                put(&mut secrets, value.as_bytes());
            }
            headers.remove(name);
        }
    }
    if secrets.is_empty() {
        return Ok(String::new());
    }
    let seal_nonce: [u8; SEAL_NONCE_LEN] = rand::random();
    let ciphertext = pair
        .seal
        .encrypt(
            &XNonce::from(seal_nonce),
            Payload {
                msg: &secrets,
                aad: nonce,
            },
        )
        .map_err(|_| "sealing the credentials failed")?;
    let mut raw = Vec::with_capacity(SEAL_NONCE_LEN + ciphertext.len());
    raw.extend_from_slice(&seal_nonce);
    raw.extend_from_slice(&ciphertext);
    Ok(URL_SAFE_NO_PAD.encode(raw))
}

/// Opens sealed credentials: `(name, value)` pairs, each a sensitive header.
pub(super) fn unseal(
    pair: &KeyPair,
    sealed: &[u8],
    nonce: &[u8; NONCE_LEN],
) -> Option<Vec<(HeaderName, HeaderValue)>> {
    let raw = URL_SAFE_NO_PAD.decode(sealed).ok()?;
    if raw.len() <= SEAL_NONCE_LEN {
        return None;
    }
    let (seal_nonce, ciphertext) = raw.split_at(SEAL_NONCE_LEN);
    let seal_nonce: [u8; SEAL_NONCE_LEN] = seal_nonce.try_into().ok()?;
    let plain = pair
        .seal
        .decrypt(
            &XNonce::from(seal_nonce),
            Payload {
                msg: ciphertext,
                aad: nonce,
            },
        )
        .ok()?;
    let mut rest = plain.as_slice();
    let mut take = || -> Option<&[u8]> {
        let (len, tail) = rest.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_be_bytes(*len)).ok()?;
        let (field, tail) = tail.split_at_checked(len)?;
        rest = tail;
        Some(field)
    };
    let mut out = Vec::new();
    while let Some(name) = take() {
        let name = HeaderName::from_bytes(name).ok()?;
        let value = HeaderValue::from_bytes(take()?).ok()?;
        if !SENSITIVE.contains(&name) {
            return None;
        }
        out.push((name, value));
    }
    Some(out)
}
