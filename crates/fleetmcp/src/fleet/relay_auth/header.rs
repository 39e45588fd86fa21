//! The relay header, [`RELAY_AUTH`](super::RELAY_AUTH):
//! `v1;<unix ms>;<nonce>;<signed header names>;<mac>`, base64url nonce and MAC, names lower
//! case, sorted, comma-separated. It has one spelling: the signer writes it and the holder
//! refuses anything else, so what the MAC covers is never open to two readings.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::seal::SENSITIVE;
use super::{NONCE_LEN, VERSION, hop_by_hop_name, is_relay_header};

const MAC_LEN: usize = 32;
/// More signed headers than this is not a request the relay made.
const MAX_NAMES: usize = 128;

/// The parsed relay header. Its signed header names are slices of the header's value, not
/// `HeaderName`s: made one by one (an allocation for each that is not a standard header), they
/// were most of what the holder spent parsing it.
pub(super) struct Auth<'a> {
    pub ts: u64,
    pub nonce: [u8; NONCE_LEN],
    pub names: Vec<&'a str>,
    pub mac: [u8; MAC_LEN],
}

/// The relay header's value; `names` sorted, as the MAC covered them. Written into one
/// string, sized once (it is made for every relayed request).
pub(super) fn render(ts: u64, nonce: &[u8; NONCE_LEN], names: &[&str], mac: &[u8]) -> String {
    use std::fmt::Write;
    let names_len: usize = names.iter().map(|n| n.len() + 1).sum();
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
        out.push_str(name);
    }
    out.push(';');
    URL_SAFE_NO_PAD.encode_string(mac, &mut out);
    out
}

pub(super) fn parse_auth(raw: &[u8]) -> Option<Auth<'_>> {
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
    let nonce: [u8; NONCE_LEN] = decode_exact(nonce)?;
    let mac: [u8; MAC_LEN] = decode_exact(mac)?;
    let mut parsed: Vec<&str> = Vec::with_capacity(names.split(',').count().min(MAX_NAMES));
    if !names.is_empty() {
        for name in names.split(',') {
            // One spelling per request: a header name in lower case, sorted, no repeats, and
            // never a header that is not signed by design.
            let in_order = parsed.last().is_none_or(|p| *p < name);
            if !is_lower_case_name(name)
                || !in_order
                || hop_by_hop_name(name)
                || is_relay_header(name)
                || is_sensitive(name)
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

/// `N` bytes from their base64url (no padding), into an array: no allocation.
fn decode_exact<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut out = [0u8; 64];
    // Longer than 64 bytes' base64 is none of the header's fields.
    if text.len() > 86 {
        return None;
    }
    let n = URL_SAFE_NO_PAD.decode_slice(text, &mut out).ok()?;
    if n != N {
        return None;
    }
    out[..N].try_into().ok()
}

/// Whether `name` (lower case) is a credential, which is sealed and never signed in clear.
fn is_sensitive(name: &str) -> bool {
    SENSITIVE.iter().any(|s| s.as_str() == name)
}

/// The bytes a header name may hold as `HeaderName` spells it: the token characters
/// (RFC 9110 5.6.2) other than upper-case letters. A table, as every signed name of every
/// relayed request is checked byte by byte.
static NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    table
};

/// Whether `name` is a header name as `HeaderName` spells it: not empty, and every byte a token
/// character other than an upper-case letter.
fn is_lower_case_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| NAME_BYTES[usize::from(b)])
}

#[cfg(test)]
mod tests {
    use super::is_lower_case_name;

    #[test]
    fn a_signed_name_is_valid_lower_case_exactly_when_header_name_agrees() {
        for b in 0u8..=255 {
            for name in [vec![b], vec![b'x', b, b'y']] {
                let ours = std::str::from_utf8(&name).is_ok_and(is_lower_case_name);
                let http = http::HeaderName::from_bytes(&name)
                    .is_ok_and(|n| n.as_str().as_bytes() == name.as_slice());
                assert_eq!(ours, http, "{name:?}");
            }
        }
        assert!(!is_lower_case_name(""));
    }
}
