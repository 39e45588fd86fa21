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

fn feed(mac: &mut Hmac<Sha256>, bytes: &[u8]) {
    mac.update(&(bytes.len() as u64).to_be_bytes());
    mac.update(bytes);
}

/// The MAC of a relayed request, to finalize or verify (see the module doc of `relay_auth` for
/// what it covers).
pub(super) fn mac_of(
    pair: &KeyPair,
    subject: &Subject<'_>,
    ts: u64,
    nonce: &[u8; NONCE_LEN],
    names: &[&str],
    headers: &HeaderMap,
    sealed: &[u8],
) -> Hmac<Sha256> {
    let mut mac = pair.mac.clone();
    feed(&mut mac, VERSION.as_bytes());
    feed(&mut mac, subject.source);
    feed(&mut mac, subject.target);
    feed(&mut mac, &ts.to_be_bytes());
    feed(&mut mac, nonce);
    feed(&mut mac, subject.method.as_str().as_bytes());
    feed(&mut mac, subject.path.as_bytes());
    feed(&mut mac, &(names.len() as u64).to_be_bytes());
    for &name in names {
        feed(&mut mac, name.as_bytes());
        // Looked up by `&str`: a valid name is matched as it is, nothing allocated.
        let values = headers.get_all(name);
        feed(&mut mac, &(values.iter().count() as u64).to_be_bytes());
        for v in values {
            feed(&mut mac, v.as_bytes());
        }
    }
    feed(&mut mac, sealed);
    feed(&mut mac, subject.body);
    mac
}
