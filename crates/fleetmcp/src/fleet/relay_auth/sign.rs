//! The relaying instance's side of the hop: a forwarded request made into one the holder can
//! verify, with the credentials sealed, the source named and the MAC added.

use bytes::Bytes;
use hmac::Mac;
use http::{HeaderMap, HeaderName, HeaderValue, header};

use super::header::render;
use super::keys::RelayKeys;
use super::mac::{Subject, mac_of};
use super::seal::seal;
use super::{NONCE_LEN, RELAY_AUTH_NAME, RELAY_SEALED_NAME, RELAYED_BY_NAME};

impl RelayKeys {
    /// Prepares `headers` (the forwarded ones, hop-by-hop headers already left out) for the hop
    /// to `subject.target`: seals the credentials, names the source and adds the MAC.
    pub fn sign(
        &self,
        subject: &Subject<'_>,
        headers: &mut HeaderMap,
        now_ms: u64,
    ) -> Result<(), &'static str> {
        let pair = self
            .pairs
            .first()
            .ok_or("no MCP_SESSION_SECRET to sign it with")?;
        // By the names parsed once (a `&str` is parsed again at every use).
        for name in [&RELAYED_BY_NAME, &RELAY_AUTH_NAME, &RELAY_SEALED_NAME] {
            headers.remove(name);
        }
        // The HTTP client adds `Accept: */*` to a request without one, outside the signature;
        // sending it signed keeps the holder's view what it was before relays were signed.
        if !headers.contains_key(header::ACCEPT) {
            headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        }
        let nonce: [u8; NONCE_LEN] = rand::random();
        let sealed = seal(pair, headers, &nonce)?;
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        let mac = mac_of(
            pair,
            subject,
            now_ms,
            &nonce,
            &names,
            headers,
            sealed.as_bytes(),
        )
        .finalize()
        .into_bytes();
        // The strings become the header values as they are (checked, not copied).
        let auth = render(now_ms, &nonce, &names, &mac);
        headers.insert(
            RELAY_AUTH_NAME.clone(),
            HeaderValue::from_maybe_shared(Bytes::from(auth))
                .map_err(|_| "the relay header is not a header value")?,
        );
        if !sealed.is_empty() {
            headers.insert(
                RELAY_SEALED_NAME.clone(),
                HeaderValue::from_maybe_shared(Bytes::from(sealed))
                    .map_err(|_| "the sealed header is not a header value")?,
            );
        }
        headers.insert(
            RELAYED_BY_NAME.clone(),
            HeaderValue::from_bytes(subject.source)
                .map_err(|_| "the machine id is not a header value")?,
        );
        Ok(())
    }
}
