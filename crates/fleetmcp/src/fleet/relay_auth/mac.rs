//! The MAC of a relayed request: what it covers, each field length-prefixed so that no two
//! requests encode alike. The signer finalizes it and the holder verifies it, over the same
//! fields, so both sides share this one function.

use hmac::{Hmac, Mac};
use http::{HeaderMap, Method};
use sha2::Sha256;

use super::keys::KeyPair;
use super::{NONCE_LEN, VERSION};

/// What a request is, for its MAC.
pub(in crate::fleet) struct Subject<'a> {
    pub source: &'a [u8],
    pub target: &'a [u8],
    pub method: &'a Method,
    /// Path and query.
    pub path: &'a str,
    pub body: &'a [u8],
}

/// Appends `bytes` to the MAC's input, length-prefixed.
fn feed(input: &mut Vec<u8>, bytes: &[u8]) {
    input.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    input.extend_from_slice(bytes);
}

/// The MAC of a relayed request, to finalize or verify (see the module doc of `relay_auth` for
/// what it covers). Its fields are written into one buffer, then given to the MAC at once: the
/// same bytes as a field at a time, without the MAC's buffering of some two dozen small pieces
/// (a request is about a kilobyte).
pub(super) fn mac_of(
    pair: &KeyPair,
    subject: &Subject<'_>,
    ts: u64,
    nonce: &[u8; NONCE_LEN],
    names: &[&str],
    headers: &HeaderMap,
    sealed: &[u8],
) -> Hmac<Sha256> {
    let mut input = Vec::with_capacity(1024 + subject.body.len() + sealed.len());
    feed(&mut input, VERSION.as_bytes());
    feed(&mut input, subject.source);
    feed(&mut input, subject.target);
    feed(&mut input, &ts.to_be_bytes());
    feed(&mut input, nonce);
    feed(&mut input, subject.method.as_str().as_bytes());
    feed(&mut input, subject.path.as_bytes());
    feed(&mut input, &(names.len() as u64).to_be_bytes());
    for &name in names {
        feed(&mut input, name.as_bytes());
        // Looked up by `&str`: a valid name is matched as it is, nothing allocated.
        let values = headers.get_all(name);
        feed(&mut input, &(values.iter().count() as u64).to_be_bytes());
        for v in values {
            feed(&mut input, v.as_bytes());
        }
    }
    feed(&mut input, sealed);
    let mut mac = pair.mac.clone();
    mac.update(&input);
    // The body, the one field that may be large, is not copied.
    mac.update(&(subject.body.len() as u64).to_be_bytes());
    mac.update(subject.body);
    mac
}
