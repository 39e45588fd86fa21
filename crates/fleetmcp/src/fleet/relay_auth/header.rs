//! The relay header, [`RELAY_AUTH`](super::RELAY_AUTH):
//! `v1;<unix ms>;<nonce>;<signed header names>;<mac>`, base64url nonce and MAC, names lower
//! case, sorted, comma-separated. It has one spelling: the signer writes it and the holder
//! refuses anything else, so what the MAC covers is never open to two readings.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderName;

use super::seal::SENSITIVE;
use super::{NONCE_LEN, VERSION, hop_by_hop, is_relay_header};

const MAC_LEN: usize = 32;
/// More signed headers than this is not a request the relay made.
const MAX_NAMES: usize = 128;

/// The parsed relay header.
pub(super) struct Auth {
    pub ts: u64,
    pub nonce: [u8; NONCE_LEN],
    pub names: Vec<HeaderName>,
    pub mac: [u8; MAC_LEN],
}

/// The relay header's value; `names` sorted, as the MAC covered them. Written into one
/// string, sized once (it is made for every relayed request).
pub(super) fn render(ts: u64, nonce: &[u8; NONCE_LEN], names: &[HeaderName], mac: &[u8]) -> String {
    use std::fmt::Write;
    let names_len: usize = names.iter().map(|n| n.as_str().len() + 1).sum();
    // Version, timestamp and separators, then the base64 of the nonce (22) and MAC (43).
    let mut out = String::with_capacity(32 + 22 + names_len + 44);
    // Writing into a String cannot fail.
    let _ = write!(out, "{VERSION};{ts};");
    URL_SAFE_NO_PAD.encode_string(nonce, &mut out);
    out.push(';');
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name.as_str());
    }
    out.push(';');
    URL_SAFE_NO_PAD.encode_string(mac, &mut out);
    out
}

pub(super) fn parse_auth(raw: &[u8]) -> Option<Auth> {
    let raw = std::str::from_utf8(raw).ok()?;
    let mut fields = raw.split(';');
    let (version, ts, nonce, names, mac) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    if version != VERSION || fields.next().is_some() {
        return None;
    }
    let nonce: [u8; NONCE_LEN] = URL_SAFE_NO_PAD.decode(nonce).ok()?.try_into().ok()?;
    let mac: [u8; MAC_LEN] = URL_SAFE_NO_PAD.decode(mac).ok()?.try_into().ok()?;
    let mut parsed: Vec<HeaderName> = Vec::new();
    if !names.is_empty() {
        for n in names.split(',') {
            let name = HeaderName::from_bytes(n.as_bytes()).ok()?;
            // One spelling per request: lower case, sorted, no repeats, and never a header that
            // is not signed by design.
            let in_order = parsed.last().is_none_or(|p| p.as_str() < name.as_str());
            if name.as_str() != n
                || !in_order
                || hop_by_hop(&name)
                || is_relay_header(&name)
                || SENSITIVE.contains(&name)
                || parsed.len() >= MAX_NAMES
            {
                return None;
            }
            parsed.push(name);
        }
    }
    Some(Auth {
        ts: ts.parse().ok()?,
        nonce,
        names: parsed,
        mac,
    })
}
