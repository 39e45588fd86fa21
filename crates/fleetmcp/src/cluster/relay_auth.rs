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

use std::collections::HashSet;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use sha2::Sha256;

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
static RELAY_AUTH_NAME: HeaderName = HeaderName::from_static(RELAY_AUTH);
static RELAY_SEALED_NAME: HeaderName = HeaderName::from_static(RELAY_SEALED);
pub(super) static RELAY_HOST_NAME: HeaderName = HeaderName::from_static(RELAY_HOST);

/// Headers that never cross the hop in clear.
const SENSITIVE: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
];

const VERSION: &str = "v1";
const NONCE_LEN: usize = 16;
const SEAL_NONCE_LEN: usize = 24;
const MAC_LEN: usize = 32;
/// More signed headers than this is not a request the relay made.
const MAX_NAMES: usize = 128;
/// Nonces remembered at most. A nonce is kept about 1.25 windows (see [`SeenNonces`]), so at
/// the default 30 s window a holder takes about 28,000 relayed requests a second before it
/// refuses more (fail closed, `503`) rather than forget nonces that could still be replayed.
/// About 20 MB when full.
const MAX_NONCES: usize = 1 << 20;

/// Headers that belong to one connection, not to the request (RFC 9110 7.6.1), plus the ones
/// the client library sets itself: neither forwarded nor signed.
pub(super) fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
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

fn is_relay_header(name: &HeaderName) -> bool {
    matches!(name.as_str(), RELAYED_BY | RELAY_AUTH | RELAY_SEALED)
}

/// Whether a request carries any relay header: such a request is verified, whatever else it is.
pub(super) fn is_relayed(headers: &HeaderMap) -> bool {
    headers.contains_key(&RELAYED_BY_NAME)
        || headers.contains_key(&RELAY_AUTH_NAME)
        || headers.contains_key(&RELAY_SEALED_NAME)
}

/// The keys made from one secret.
#[derive(Clone)]
struct KeyPair {
    /// Keyed once; cloned per request (cheaper than keying again).
    mac: Hmac<Sha256>,
    seal: XChaCha20Poly1305,
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
pub(super) struct RelayKeys {
    pairs: Vec<KeyPair>,
}

/// What a request is, for its MAC.
pub(super) struct Subject<'a> {
    pub source: &'a [u8],
    pub target: &'a [u8],
    pub method: &'a Method,
    /// Path and query.
    pub path: &'a str,
    pub body: &'a [u8],
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
        for name in [RELAYED_BY, RELAY_AUTH, RELAY_SEALED] {
            headers.remove(name);
        }
        // The HTTP client adds `Accept: */*` to a request without one, outside the signature;
        // sending it signed keeps the holder's view what it was before relays were signed.
        if !headers.contains_key(header::ACCEPT) {
            headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        }
        let nonce: [u8; NONCE_LEN] = rand::random();
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
        let sealed = if secrets.is_empty() {
            String::new()
        } else {
            let seal_nonce: [u8; SEAL_NONCE_LEN] = rand::random();
            let ciphertext = pair
                .seal
                .encrypt(
                    &XNonce::from(seal_nonce),
                    Payload {
                        msg: &secrets,
                        aad: &nonce,
                    },
                )
                .map_err(|_| "sealing the credentials failed")?;
            let mut raw = Vec::with_capacity(SEAL_NONCE_LEN + ciphertext.len());
            raw.extend_from_slice(&seal_nonce);
            raw.extend_from_slice(&ciphertext);
            URL_SAFE_NO_PAD.encode(raw)
        };
        let mut names: Vec<HeaderName> = headers.keys().cloned().collect();
        names.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
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
        let names: Vec<&str> = names.iter().map(HeaderName::as_str).collect();
        let auth = format!(
            "{VERSION};{now_ms};{};{};{}",
            URL_SAFE_NO_PAD.encode(nonce),
            names.join(","),
            URL_SAFE_NO_PAD.encode(mac)
        );
        headers.insert(
            RELAY_AUTH,
            HeaderValue::from_str(&auth).map_err(|_| "the relay header is not a header value")?,
        );
        if !sealed.is_empty() {
            headers.insert(
                RELAY_SEALED,
                HeaderValue::from_str(&sealed)
                    .map_err(|_| "the sealed header is not a header value")?,
            );
        }
        headers.insert(
            RELAYED_BY,
            HeaderValue::from_bytes(subject.source)
                .map_err(|_| "the machine id is not a header value")?,
        );
        Ok(())
    }
}

/// Appends `bytes`, length-prefixed, so that no two field sequences encode alike.
fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn feed(mac: &mut Hmac<Sha256>, bytes: &[u8]) {
    mac.update(&(bytes.len() as u64).to_be_bytes());
    mac.update(bytes);
}

/// The MAC of a relayed request, to finalize or verify (see the module doc for what it covers).
fn mac_of(
    pair: &KeyPair,
    subject: &Subject<'_>,
    ts: u64,
    nonce: &[u8; NONCE_LEN],
    names: &[HeaderName],
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
    for name in names {
        feed(&mut mac, name.as_str().as_bytes());
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

/// Why a relayed request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Some relay headers but not all that are needed.
    Incomplete,
    /// The relay header does not parse.
    Malformed,
    /// The MAC does not verify under any key.
    BadMac,
    /// Its timestamp is outside the replay window.
    Stale,
    /// Its nonce was seen within the window.
    Replayed,
    /// Too many nonces to remember: refused rather than risk accepting a replay.
    Overloaded,
    /// The sealed credentials do not open (only a signer with the key could make this).
    BadSeal,
    /// Stamped before this process started: a hop recorded before a restart, replayed.
    BeforeStart,
}

impl Refusal {
    /// For the log and the error message.
    pub fn why(self) -> &'static str {
        match self {
            Self::Incomplete => "relay headers are missing",
            Self::Malformed => "its relay authentication header does not parse",
            Self::BadMac => "its MAC does not verify under this fleet's secrets",
            Self::Stale => "its timestamp is outside the replay window",
            Self::Replayed => "its nonce was already used (a replay)",
            Self::Overloaded => "too many relayed requests to remember their nonces",
            Self::BadSeal => "its sealed credentials do not open",
            Self::BeforeStart => {
                "it was signed before this instance started (a replay, or a request that crossed a restart: retry)"
            }
        }
    }
}

/// The parsed relay header.
struct Auth {
    ts: u64,
    nonce: [u8; NONCE_LEN],
    names: Vec<HeaderName>,
    mac: [u8; MAC_LEN],
}

fn parse_auth(raw: &[u8]) -> Option<Auth> {
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

/// Opens sealed credentials: `(name, value)` pairs, each a sensitive header.
fn unseal(
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

/// The nonces of the relayed requests accepted lately, in buckets by their request's timestamp
/// (a quarter window wide): a request is replayable only while its timestamp is within the
/// window of now, so a bucket whose every timestamp is older than that is dropped whole. Keys
/// are a nonce's first 8 bytes: among at most [`MAX_NONCES`], a genuine request mistaken for a
/// replay has odds of about 2^-44.
#[derive(Default)]
struct SeenNonces {
    buckets: std::collections::BTreeMap<u64, HashSet<u64>>,
    total: usize,
    /// The latest clock reading seen: buckets expire against it, so a clock stepped back
    /// cannot make a forgotten nonce acceptable again.
    high_ms: u64,
}

impl SeenNonces {
    /// Remembers the nonce of a request stamped `ts`, accepted at `now_ms` (within `window_ms`
    /// of it): refused if it is already there (a replay), older than the window at the latest
    /// clock reading, or if there is no room left.
    fn remember(
        &mut self,
        nonce: u64,
        ts: u64,
        now_ms: u64,
        window_ms: u64,
    ) -> Result<(), Refusal> {
        self.high_ms = self.high_ms.max(now_ms);
        let oldest = self.high_ms.saturating_sub(window_ms);
        if ts < oldest {
            return Err(Refusal::Stale);
        }
        let width = (window_ms / 4).max(1);
        // Buckets below `oldest`'s hold only timestamps before it: none is acceptable again.
        let kept = self.buckets.split_off(&(oldest / width));
        for gone in std::mem::replace(&mut self.buckets, kept).into_values() {
            self.total -= gone.len();
        }
        let bucket = self.buckets.entry(ts / width).or_default();
        if bucket.contains(&nonce) {
            return Err(Refusal::Replayed);
        }
        if self.total >= MAX_NONCES {
            return Err(Refusal::Overloaded);
        }
        bucket.insert(nonce);
        self.total += 1;
        Ok(())
    }
}

/// Checks relayed requests on the instance they were relayed to.
pub(super) struct Verifier {
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

    /// Verifies a relayed request (one [`is_relayed`]) and, when it is genuine, leaves in
    /// `headers` what the client sent (signed headers, credentials unsealed) plus
    /// [`RELAYED_BY`]; a refused request's headers are left in any state.
    pub fn check(
        &self,
        method: &Method,
        path: &str,
        headers: &mut HeaderMap,
        body: &[u8],
        now_ms: u64,
    ) -> Result<(), Refusal> {
        let (Some(source), Some(auth)) =
            (headers.get(&RELAYED_BY_NAME), headers.get(&RELAY_AUTH_NAME))
        else {
            return Err(Refusal::Incomplete);
        };
        let auth = parse_auth(auth.as_bytes()).ok_or(Refusal::Malformed)?;
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
        let pair = self
            .keys
            .pairs
            .iter()
            .find(|pair| {
                // `verify_slice` compares in constant time.
                mac_of(
                    pair,
                    &subject,
                    auth.ts,
                    &auth.nonce,
                    &auth.names,
                    headers,
                    sealed,
                )
                .verify_slice(&auth.mac)
                .is_ok()
            })
            .ok_or(Refusal::BadMac)?;
        if now_ms.abs_diff(auth.ts) > self.window_ms {
            return Err(Refusal::Stale);
        }
        if auth.ts < self.started_ms {
            return Err(Refusal::BeforeStart);
        }
        let [a, b, c, d, e, f, g, h, ..] = auth.nonce;
        self.seen.lock().remember(
            u64::from_be_bytes([a, b, c, d, e, f, g, h]),
            auth.ts,
            now_ms,
            self.window_ms,
        )?;
        let credentials = if sealed.is_empty() {
            Vec::new()
        } else {
            unseal(pair, sealed, &auth.nonce).ok_or(Refusal::BadSeal)?
        };
        // Only what was signed goes on: a header added on the way (or a credential in clear)
        // is dropped.
        let unsigned: Vec<HeaderName> = headers
            .keys()
            .filter(|k| !hop_by_hop(k) && **k != RELAYED_BY_NAME && !auth.names.contains(k))
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"the fleet's current secret";
    const OLD: &[u8] = b"the fleet's previous secret";
    const TOKEN: &str = "Bearer very-secret-token-42";
    const NOW: u64 = 1_800_000_000_000;
    const WINDOW: u64 = 30_000;
    const BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#;

    fn client_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        h.insert("mcp-session-id", HeaderValue::from_static("sid-1"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static(TOKEN));
        h.append(header::COOKIE, HeaderValue::from_static("a=1"));
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        h
    }

    fn subject<'a>(source: &'a str, target: &'a str, path: &'a str, body: &'a [u8]) -> Subject<'a> {
        Subject {
            source: source.as_bytes(),
            target: target.as_bytes(),
            method: &Method::POST,
            path,
            body,
        }
    }

    /// A request from `desk-b` to `desk-a`, signed under `keys` at `at`, as it arrives.
    fn signed_with(keys: &RelayKeys, at: u64) -> HeaderMap {
        let mut h = client_headers();
        keys.sign(&subject("desk-b", "desk-a", "/mcp?x=1", BODY), &mut h, at)
            .unwrap();
        h
    }

    fn signed() -> HeaderMap {
        signed_with(&RelayKeys::new(SECRET, &[]), NOW)
    }

    fn verifier(current: &[u8], previous: &[&[u8]]) -> Verifier {
        Verifier::new(RelayKeys::new(current, previous), "desk-a", WINDOW)
    }

    fn check(v: &Verifier, h: &mut HeaderMap) -> Result<(), Refusal> {
        v.check(&Method::POST, "/mcp?x=1", h, BODY, NOW)
    }

    /// A change made to a request on the way.
    type Tamper = Box<dyn Fn(&mut HeaderMap)>;

    /// Replaces one `;` field of the relay header.
    fn with_auth_field(h: &mut HeaderMap, index: usize, value: &str) {
        let auth = h.get(RELAY_AUTH).unwrap().to_str().unwrap().to_string();
        let mut fields: Vec<&str> = auth.split(';').collect();
        fields[index] = value;
        h.insert(
            RELAY_AUTH,
            HeaderValue::from_str(&fields.join(";")).unwrap(),
        );
    }

    #[test]
    fn round_trip_restores_the_clients_headers_and_seals_its_credentials() {
        let mut h = signed();
        // On the wire: no credential in clear, anywhere.
        assert!(h.get(header::AUTHORIZATION).is_none());
        assert!(h.get(header::COOKIE).is_none());
        for (_, v) in &h {
            let v = String::from_utf8_lossy(v.as_bytes());
            assert!(!v.contains("very-secret-token"), "{v}");
            assert!(!v.contains("a=1"), "{v}");
        }
        assert_eq!(h.get(RELAYED_BY).unwrap(), "desk-b");
        assert!(h.contains_key(RELAY_SEALED));

        check(&verifier(SECRET, &[]), &mut h).unwrap();
        let mut want = client_headers();
        want.insert(RELAYED_BY, HeaderValue::from_static("desk-b"));
        assert_eq!(
            h, want,
            "the holder sees what the client sent, plus the marker"
        );
        let cookies: Vec<_> = h.get_all(header::COOKIE).iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"], "repeated values keep their order");
    }

    #[test]
    fn a_request_without_credentials_or_accept_verifies_and_gets_the_clients_default_accept() {
        let keys = RelayKeys::new(SECRET, &[]);
        let mut h = HeaderMap::new();
        h.insert("mcp-session-id", HeaderValue::from_static("sid-1"));
        keys.sign(&subject("desk-b", "desk-a", "/mcp", b""), &mut h, NOW)
            .unwrap();
        assert!(!h.contains_key(RELAY_SEALED));
        let v = verifier(SECRET, &[]);
        v.check(&Method::POST, "/mcp", &mut h, b"", NOW).unwrap();
        assert_eq!(h.get(header::ACCEPT).unwrap(), "*/*");
        assert_eq!(h.len(), 3, "{h:?}");
    }

    #[test]
    fn anything_changed_on_the_way_does_not_verify() {
        let v = verifier(SECRET, &[]);
        let cases: Vec<(&str, Tamper)> = vec![
            (
                "a signed header's value",
                Box::new(|h| {
                    h.insert("mcp-session-id", HeaderValue::from_static("sid-2"));
                }),
            ),
            (
                "a value added to a signed header",
                Box::new(|h| {
                    h.append(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                }),
            ),
            (
                "a signed header removed",
                Box::new(|h| {
                    h.remove(header::CONTENT_TYPE);
                }),
            ),
            (
                "the source",
                Box::new(|h| {
                    h.insert(RELAYED_BY, HeaderValue::from_static("desk-c"));
                }),
            ),
            (
                "the timestamp",
                Box::new(|h| with_auth_field(h, 1, &(NOW + 1).to_string())),
            ),
            (
                "the nonce",
                Box::new(|h| with_auth_field(h, 2, &URL_SAFE_NO_PAD.encode([7u8; 16]))),
            ),
            (
                "the list of signed headers",
                Box::new(|h| with_auth_field(h, 3, "accept,content-type")),
            ),
            (
                "the MAC",
                Box::new(|h| with_auth_field(h, 4, &URL_SAFE_NO_PAD.encode([7u8; 32]))),
            ),
            (
                "the sealed credentials",
                Box::new(|h| {
                    let other = signed();
                    h.insert(RELAY_SEALED, other.get(RELAY_SEALED).unwrap().clone());
                }),
            ),
            (
                "the sealed credentials dropped",
                Box::new(|h| {
                    h.remove(RELAY_SEALED);
                }),
            ),
        ];
        for (what, tamper) in cases {
            let mut h = signed();
            tamper(&mut h);
            assert_eq!(check(&v, &mut h), Err(Refusal::BadMac), "{what}");
        }
        let mut h = signed();
        let tampered_body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert_eq!(
            v.check(&Method::POST, "/mcp?x=1", &mut h, tampered_body, NOW),
            Err(Refusal::BadMac),
            "the body"
        );
        let mut h = signed();
        assert_eq!(
            v.check(&Method::POST, "/mcp?x=2", &mut h, BODY, NOW),
            Err(Refusal::BadMac),
            "the query"
        );
        let mut h = signed();
        assert_eq!(
            v.check(&Method::DELETE, "/mcp?x=1", &mut h, BODY, NOW),
            Err(Refusal::BadMac),
            "the method"
        );
        // Signed for desk-a; desk-c is not its target.
        let other = Verifier::new(RelayKeys::new(SECRET, &[]), "desk-c", WINDOW);
        assert_eq!(
            check(&other, &mut signed()),
            Err(Refusal::BadMac),
            "the target"
        );
        // Untouched, it still verifies (each case above failed for its change alone).
        check(&v, &mut signed()).unwrap();
    }

    #[test]
    fn a_header_injected_on_the_way_is_dropped_and_a_clear_credential_is_not_trusted() {
        let v = verifier(SECRET, &[]);
        let mut h = signed();
        h.insert("x-injected", HeaderValue::from_static("1"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer forged"),
        );
        check(&v, &mut h).unwrap();
        assert!(!h.contains_key("x-injected"));
        let auth: Vec<_> = h.get_all(header::AUTHORIZATION).iter().collect();
        assert_eq!(auth, [TOKEN], "only the sealed credential");
    }

    #[test]
    fn sealed_credentials_that_do_not_open_are_refused_even_under_a_valid_mac() {
        let keys = RelayKeys::new(SECRET, &[]);
        let mut h = signed();
        let auth = parse_auth(h.get(RELAY_AUTH).unwrap().as_bytes()).unwrap();
        // Only a holder of the key could do this: a MAC over a sealed blob that is not one.
        let junk = URL_SAFE_NO_PAD.encode([9u8; 40]);
        h.insert(RELAY_SEALED, HeaderValue::from_str(&junk).unwrap());
        let mac = mac_of(
            &keys.pairs[0],
            &subject("desk-b", "desk-a", "/mcp?x=1", BODY),
            auth.ts,
            &auth.nonce,
            &auth.names,
            &h,
            junk.as_bytes(),
        )
        .finalize()
        .into_bytes();
        with_auth_field(&mut h, 4, &URL_SAFE_NO_PAD.encode(mac));
        assert_eq!(check(&verifier(SECRET, &[]), &mut h), Err(Refusal::BadSeal));
    }

    #[test]
    fn missing_or_malformed_relay_headers_are_refused() {
        let v = verifier(SECRET, &[]);
        let mut h = client_headers();
        h.insert(RELAYED_BY, HeaderValue::from_static("desk-b"));
        assert_eq!(check(&v, &mut h), Err(Refusal::Incomplete), "no MAC at all");
        let mut h = signed();
        h.remove(RELAYED_BY);
        assert_eq!(check(&v, &mut h), Err(Refusal::Incomplete), "no source");
        for bad in [
            "",
            "v1",
            "v2;1;AAAAAAAAAAAAAAAAAAAAAA;;AAAA",
            "v1;now;AAAAAAAAAAAAAAAAAAAAAA;;AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            let mut h = signed();
            h.insert(RELAY_AUTH, HeaderValue::from_static(bad));
            assert_eq!(check(&v, &mut h), Err(Refusal::Malformed), "{bad:?}");
        }
        for names in [
            "content-type,accept",
            "accept,accept",
            "Accept",
            "accept,authorization",
            "accept,host",
        ] {
            let mut h = signed();
            with_auth_field(&mut h, 3, names);
            assert_eq!(check(&v, &mut h), Err(Refusal::Malformed), "{names:?}");
        }
    }

    #[test]
    fn a_stale_or_future_timestamp_is_refused() {
        let v = verifier(SECRET, &[]);
        let keys = RelayKeys::new(SECRET, &[]);
        for at in [NOW - WINDOW - 1, NOW + WINDOW + 1] {
            let mut h = signed_with(&keys, at);
            assert_eq!(check(&v, &mut h), Err(Refusal::Stale), "signed at {at}");
        }
        for at in [NOW - WINDOW, NOW + WINDOW] {
            let mut h = signed_with(&keys, at);
            assert_eq!(check(&v, &mut h), Ok(()), "signed at {at}");
        }
    }

    #[test]
    fn another_secret_is_refused_and_a_previous_one_accepted() {
        let mut h = signed();
        assert_eq!(
            check(&verifier(b"another fleet's secret", &[]), &mut h),
            Err(Refusal::BadMac)
        );
        // Signed under OLD (an instance not yet rotated), checked by one rotating to SECRET.
        let mut h = signed_with(&RelayKeys::new(OLD, &[]), NOW);
        check(&verifier(SECRET, &[OLD]), &mut h).unwrap();
        assert_eq!(h.get(header::AUTHORIZATION).unwrap(), TOKEN, "unsealed too");
        // A rotating instance signs under the current secret only.
        let rotating = RelayKeys::new(SECRET, &[OLD]);
        assert_eq!(
            check(&verifier(OLD, &[]), &mut signed_with(&rotating, NOW)),
            Err(Refusal::BadMac)
        );
        check(&verifier(SECRET, &[]), &mut signed_with(&rotating, NOW)).unwrap();
    }

    #[test]
    fn a_replay_is_refused_within_the_window_and_a_fresh_request_is_not() {
        let v = verifier(SECRET, &[]);
        let first = signed();
        check(&v, &mut first.clone()).unwrap();
        assert_eq!(check(&v, &mut first.clone()), Err(Refusal::Replayed));
        // A replay later, still within the window of its timestamp: still refused.
        assert_eq!(
            v.check(
                &Method::POST,
                "/mcp?x=1",
                &mut first.clone(),
                BODY,
                NOW + WINDOW
            ),
            Err(Refusal::Replayed)
        );
        check(&v, &mut signed()).unwrap();
    }

    #[test]
    fn nonces_are_kept_as_long_as_their_request_is_within_the_window() {
        let mut seen = SeenNonces::default();
        let w = 1000;
        // Stamped 10 000, accepted at 9 500 (a clock ahead): replayable until 11 000.
        seen.remember(1, 10_000, 9_500, w).unwrap();
        for at in [9_500, 10_000, 10_999, 11_000] {
            assert_eq!(
                seen.remember(1, 10_000, at, w),
                Err(Refusal::Replayed),
                "at {at}"
            );
        }
        // Past it, the bucket goes (and its timestamp is stale anyway).
        seen.remember(2, 11_500, 11_500, w).unwrap();
        assert_eq!(seen.remember(1, 10_000, 11_500, w), Err(Refusal::Stale));
        assert_eq!(seen.total, 1, "only nonce 2 is kept: {:?}", seen.buckets);
        // A clock stepped back does not bring a forgotten timestamp back.
        assert_eq!(seen.remember(1, 10_000, 10_500, w), Err(Refusal::Stale));
        // The same nonce under another timestamp is another bucket: still one request's.
        seen.remember(3, 11_400, 11_500, w).unwrap();
        assert_eq!(seen.remember(3, 11_400, 11_600, w), Err(Refusal::Replayed));
    }

    #[test]
    fn a_full_nonce_memory_refuses_rather_than_forgets() {
        let w = 1000;
        let mut seen = SeenNonces::default();
        for n in 0..MAX_NONCES as u64 {
            seen.remember(n, 1_000, 1_000, w).unwrap();
        }
        assert_eq!(
            seen.remember(u64::MAX, 1_000, 1_000, w),
            Err(Refusal::Overloaded)
        );
        // Once those timestamps are out of the window, there is room again.
        seen.remember(u64::MAX, 2_500, 2_500, w).unwrap();
        assert_eq!(seen.total, 1);
    }

    #[test]
    fn the_clients_host_replaces_the_hops_and_an_unsigned_one_is_dropped() {
        let v = verifier(SECRET, &[]);
        let keys = RelayKeys::new(SECRET, &[]);
        let mut h = client_headers();
        h.insert(RELAY_HOST, HeaderValue::from_static("mcp.example.com"));
        keys.sign(&subject("desk-b", "desk-a", "/mcp?x=1", BODY), &mut h, NOW)
            .unwrap();
        // The connection's own Host: the holder's advertised address.
        h.insert(header::HOST, HeaderValue::from_static("desk-a.peers:3000"));
        check(&v, &mut h).unwrap();
        let hosts: Vec<_> = h.get_all(header::HOST).iter().collect();
        assert_eq!(hosts, ["mcp.example.com"]);
        assert!(!h.contains_key(RELAY_HOST));

        // The client sent none: the holder sees none, not the hop's.
        let mut h = signed();
        h.insert(header::HOST, HeaderValue::from_static("desk-a.peers:3000"));
        check(&v, &mut h).unwrap();
        assert!(!h.contains_key(header::HOST), "{h:?}");

        // One added on the way is not signed: dropped like any other.
        let mut h = signed();
        h.insert(RELAY_HOST, HeaderValue::from_static("evil.example"));
        check(&v, &mut h).unwrap();
        assert!(!h.contains_key(header::HOST) && !h.contains_key(RELAY_HOST));
    }

    #[test]
    fn a_hop_stamped_before_the_process_started_is_refused() {
        let v = verifier(SECRET, &[]).started_at(NOW - 1000);
        let keys = RelayKeys::new(SECRET, &[]);
        let mut before = signed_with(&keys, NOW - 1001);
        assert_eq!(check(&v, &mut before), Err(Refusal::BeforeStart));
        check(&v, &mut signed_with(&keys, NOW - 1000)).unwrap();
    }

    #[test]
    fn signing_without_a_secret_fails() {
        let keys = RelayKeys { pairs: Vec::new() };
        let mut h = client_headers();
        assert!(
            keys.sign(&subject("desk-b", "desk-a", "/mcp", BODY), &mut h, NOW)
                .is_err()
        );
        let v = Verifier::new(RelayKeys { pairs: Vec::new() }, "desk-a", WINDOW);
        assert_eq!(check(&v, &mut signed()), Err(Refusal::BadMac));
    }
}
