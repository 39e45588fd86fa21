//! The holder's side of the hop: a relayed request is served only if its MAC verifies under one
//! of the fleet's keys, it is fresh and not a replay; then the holder sees what the client sent
//! and nothing added on the way.

use hmac::Mac;
use http::{HeaderMap, HeaderName, HeaderValue, Method, header};

use super::header::{Auth, parse_auth};
use super::keys::{KeyPair, RelayKeys};
use super::mac::{Subject, mac_of};
use super::nonces::SeenNonces;
use super::seal::unseal;
use super::unverified::Unverified;
use super::{RELAY_AUTH_NAME, RELAY_HOST_NAME, RELAY_SEALED_NAME, RELAYED_BY_NAME, hop_by_hop};

/// Checks relayed requests on the instance they were relayed to.
pub(in crate::fleet) struct Verifier {
    keys: RelayKeys,
    /// This instance's machine id: the target every request must have been signed for.
    me: Vec<u8>,
    window_ms: u64,
    /// When this process started (Unix ms): no hop stamped earlier is accepted.
    started_ms: u64,
    seen: parking_lot::Mutex<SeenNonces>,
}

impl Verifier {
    /// A verifier for instance `me`, accepting timestamps up to `window_ms` away from its clock.
    pub fn new(keys: RelayKeys, me: &str, window_ms: u64) -> Self {
        Self {
            keys,
            me: me.as_bytes().to_vec(),
            window_ms,
            started_ms: 0,
            seen: parking_lot::Mutex::new(SeenNonces::default()),
        }
    }

    /// Refuses requests stamped before `started_ms` (this process's start, Unix ms). The nonces
    /// seen are remembered in this process only, so without it a hop recorded before a restart
    /// (same machine id) could be replayed after it, within the window. A relaying instance
    /// whose clock is behind this one's has its hops refused for that lag right after the start.
    pub fn started_at(mut self, started_ms: u64) -> Self {
        self.started_ms = started_ms;
        self
    }

    /// Verifies a relayed request (one [`is_relayed`](super::is_relayed)) and, when it is
    /// genuine, leaves in `headers` what the client sent (signed headers, credentials unsealed)
    /// plus [`RELAYED_BY`](super::RELAYED_BY); a refused request's headers are left in any
    /// state.
    pub fn check(
        &self,
        method: &Method,
        path: &str,
        headers: &mut HeaderMap,
        body: &[u8],
        now_ms: u64,
    ) -> Result<(), Unverified> {
        // The relay header's own (a count's increment, not a copy): what is parsed out of it
        // borrows it, not `headers`, which the check changes once it passes.
        let (Some(source), Some(raw)) = (
            headers.get(&RELAYED_BY_NAME),
            headers.get(&RELAY_AUTH_NAME).cloned(),
        ) else {
            return Err(Unverified::Incomplete);
        };
        let auth = parse_auth(raw.as_bytes()).ok_or(Unverified::Malformed)?;
        let sealed = headers
            .get(&RELAY_SEALED_NAME)
            .map_or(&b""[..], HeaderValue::as_bytes);
        let subject = Subject {
            source: source.as_bytes(),
            target: &self.me,
            method,
            path,
            body,
        };
        let pair = self.signing_pair(&subject, &auth, headers, sealed)?;
        self.admit(&auth, now_ms)?;
        let credentials = if sealed.is_empty() {
            Vec::new()
        } else {
            unseal(pair, sealed, &auth.nonce).ok_or(Unverified::BadSeal)?
        };
        restore(headers, &auth.names, credentials);
        Ok(())
    }

    /// The key pair the request's MAC verifies under.
    fn signing_pair(
        &self,
        subject: &Subject<'_>,
        auth: &Auth<'_>,
        headers: &HeaderMap,
        sealed: &[u8],
    ) -> Result<&KeyPair, Unverified> {
        self.keys
            .pairs
            .iter()
            .find(|pair| {
                // `verify_slice` compares in constant time.
                mac_of(
                    pair,
                    subject,
                    auth.ts,
                    &auth.nonce,
                    &auth.names,
                    headers,
                    sealed,
                )
                .verify_slice(&auth.mac)
                .is_ok()
            })
            .ok_or(Unverified::BadMac)
    }

    /// Whether a genuine request may be served now: stamped within the window, after this
    /// process started, with a nonce not seen (which is then remembered).
    fn admit(&self, auth: &Auth<'_>, now_ms: u64) -> Result<(), Unverified> {
        if now_ms.abs_diff(auth.ts) > self.window_ms {
            return Err(Unverified::Stale);
        }
        if auth.ts < self.started_ms {
            return Err(Unverified::BeforeStart);
        }
        let [a, b, c, d, e, f, g, h, ..] = auth.nonce;
        self.seen.lock().remember(
            u64::from_be_bytes([a, b, c, d, e, f, g, h]),
            auth.ts,
            now_ms,
            self.window_ms,
        )
    }
}

/// Leaves in the headers of a verified request what the client sent: the `signed` headers, the
/// unsealed `credentials` and the client's `Host`, plus the relay marker.
fn restore(headers: &mut HeaderMap, signed: &[&str], credentials: Vec<(HeaderName, HeaderValue)>) {
    // Only what was signed goes on: a header added on the way (or a credential in clear)
    // is dropped.
    let unsigned: Vec<HeaderName> = headers
        .keys()
        .filter(|k| !hop_by_hop(k) && **k != RELAYED_BY_NAME && !signed.contains(&k.as_str()))
        .cloned()
        .collect();
    for name in unsigned {
        headers.remove(name);
    }
    for (name, value) in credentials {
        headers.append(name, value);
    }
    // The client's `Host` replaces the hop's (signed, so believed); none when it sent none.
    let host: Vec<HeaderValue> = headers.get_all(&RELAY_HOST_NAME).iter().cloned().collect();
    headers.remove(&RELAY_HOST_NAME);
    headers.remove(header::HOST);
    for value in host {
        headers.append(header::HOST, value);
    }
}
