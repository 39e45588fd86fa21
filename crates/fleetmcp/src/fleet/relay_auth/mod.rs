//! Authenticated relay hops: the crypto of a relayed request, kept apart from HTTP plumbing.
//!
//! Keys come from `MCP_SESSION_SECRET` through HKDF-SHA256 (salt `fleetmcp/relay/v1`), one for
//! the MAC (HMAC-SHA256) and one, separate, for sealing (XChaCha20-Poly1305, the AEAD session
//! ids use). The relaying instance signs with the current secret; the holder accepts the
//! current one and every `MCP_SESSION_SECRET_PREVIOUS` (a rotation in progress).
//!
//! A relayed request carries, besides the headers it forwards:
//!
//! - [`RELAYED_BY`]: the relaying instance's machine id (the one-hop marker);
//! - [`RELAY_AUTH`]: `v1;<unix ms>;<nonce>;<signed header names>;<mac>` (base64url nonce and
//!   MAC, names lower case, sorted, comma-separated);
//! - [`RELAY_SEALED`], when the client sent any: `Authorization`, `Proxy-Authorization` and
//!   `Cookie`, removed from the clear headers and sealed (base64url of nonce ‖ ciphertext, the
//!   request's nonce as associated data);
//! - [`RELAY_HOST`], a signed header like any forwarded one: the client's `Host` (the hop's own
//!   names the holder's advertised address).
//!
//! The MAC covers, each field length-prefixed: source and target machine ids, timestamp, nonce,
//! method, path and query, every signed header with all its values in order, the sealed blob
//! and the body. The target is not sent: the holder puts its own machine id in, so a request
//! signed for another instance does not verify there.
//!
//! The holder ([`Verifier::check`]) refuses a request whose MAC does not verify under any key,
//! whose timestamp is more than the replay window away from its clock or before its process
//! started (its nonce memory starts empty: a hop recorded before a restart is not replayed after
//! it), or whose nonce it has seen within that window; it then drops every header that was not
//! signed (a header injected on the way is not trusted), restores the sealed ones, and puts the
//! client's `Host` back (none if the client sent none), so the holder's Host check judges what
//! the client sent, as the relaying instance did.
//!
//! One idea a file: `keys.rs` derives the keys from the secrets, `mac.rs` is what the MAC
//! covers, `seal.rs` the credentials' sealing, `header.rs` the relay header's one spelling,
//! `sign.rs` the relaying instance's side, `verify.rs` the holder's, `nonces.rs` its memory
//! of the nonces it accepted and `unverified.rs` why it refuses a request. This file holds
//! what both sides name: the headers, the version.

mod header;
mod keys;
mod mac;
mod nonces;
mod seal;
mod sign;
mod unverified;
mod verify;

#[cfg(test)]
mod tests;

pub(super) use keys::RelayKeys;
pub(super) use mac::Subject;
pub(super) use unverified::Unverified;
pub(super) use verify::Verifier;

use http::{HeaderMap, HeaderName};

/// Marks a relayed request with the instance that relayed it.
pub(super) const RELAYED_BY: &str = "x-fleetmcp-relayed-by";
/// The relayed request's timestamp, nonce, signed header names and MAC.
pub(super) const RELAY_AUTH: &str = "x-fleetmcp-relay-auth";
/// The client's credentials, sealed.
pub(super) const RELAY_SEALED: &str = "x-fleetmcp-relay-sealed";
/// The client's `Host`, signed with the other headers and restored as `Host` on the holder.
pub(super) const RELAY_HOST: &str = "x-fleetmcp-relay-host";

// The same names parsed once: looking a header up by `&str` parses the name each time, and
// `is_relayed` runs on every request.
pub(super) static RELAYED_BY_NAME: HeaderName = HeaderName::from_static(RELAYED_BY);
pub(super) static RELAY_AUTH_NAME: HeaderName = HeaderName::from_static(RELAY_AUTH);
pub(super) static RELAY_SEALED_NAME: HeaderName = HeaderName::from_static(RELAY_SEALED);
pub(super) static RELAY_HOST_NAME: HeaderName = HeaderName::from_static(RELAY_HOST);

const VERSION: &str = "v1";
const NONCE_LEN: usize = 16;

/// Headers that belong to one connection, not to the request (RFC 9110 7.6.1), plus the ones
/// the client library sets itself: neither forwarded nor signed.
pub(super) fn hop_by_hop(name: &HeaderName) -> bool {
    hop_by_hop_name(name.as_str())
}

/// [`hop_by_hop`], for a name in lower case.
fn hop_by_hop_name(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

fn is_relay_header(name: &str) -> bool {
    matches!(name, RELAYED_BY | RELAY_AUTH | RELAY_SEALED)
}

/// Whether a request carries any relay header: such a request is verified, whatever else it is.
pub(super) fn is_relayed(headers: &HeaderMap) -> bool {
    headers.contains_key(&RELAYED_BY_NAME)
        || headers.contains_key(&RELAY_AUTH_NAME)
        || headers.contains_key(&RELAY_SEALED_NAME)
}
