//! Sealed session ids.
//!
//! An id is `base64url(nonce ‖ XChaCha20-Poly1305(payload))` under a key derived with
//! HKDF-SHA256 from `MCP_SESSION_SECRET`. Any instance with the same secret can open it, so an
//! id proves it was minted by this deployment before anything is looked up: an id that does not
//! open is answered `404 invalid session id` and never reaches a store.
//!
//! A minted id is shorter: `base64url(uuid ‖ XChaCha20-Poly1305(packed payload))`, where the
//! session's random uuid (16 bytes) is also the nonce (zero-extended; uuids never repeat) and the
//! rest of the payload is packed in binary (see [`pack`]): 62 characters for a short machine id,
//! instead of about 290 with a JSON payload. An id is written twice per stored session (key and
//! record), indexed and tracked in Redis, and sent with every request. Ids with a JSON payload
//! (earlier versions, or a payload the packing cannot carry) still open.
//!
//! A minted id's uuid starts with its instance's tag ([`minted_uuid`]): 3 bytes of the
//! SHA-256 of the node id, so every id an instance mints starts with the same 4 characters
//! ([`instance_tag`]). The tracking connection subscribes to the records of that prefix only
//! (`tracking.rs`): an instance is told of changes to the sessions it minted, not the fleet's.
//!
//! An id is a bearer credential: logs name a session by [`LogId`], a short digest, never the id.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::Aead;
use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

const NONCE_LEN: usize = 24;
/// Ids longer than this are refused before any decoding work.
pub const MAX_ID_LEN: usize = 2048;

/// What a session id carries (field names follow the reference implementation's payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionIdPayload {
    /// The instance that created the session: its first holder (a 2024-11-05 session's only
    /// one). `nodeId` in the contract's payload.
    #[serde(rename = "nodeId")]
    pub holder: String,
    pub uuid: String,
    /// Creation time, seconds since the Unix epoch.
    pub iat: u64,
    pub protocol: String,
    pub auth_sig: String,
    pub is_public: bool,
}

/// Seals session ids under the current key and opens them under it or a previous one.
pub struct SessionSealer {
    /// The current key first, then the keys of rotated-out secrets.
    ciphers: Vec<XChaCha20Poly1305>,
}

fn cipher_for(secret: &[u8]) -> XChaCha20Poly1305 {
    let hk = Hkdf::<Sha256>::new(Some(b"fleetmcp/session-id/v1"), secret);
    let mut okm = [0u8; 32];
    // 32 bytes is far below HKDF-SHA256's output limit, so expand cannot fail.
    let _ = hk.expand(b"mcp-session-id", &mut okm);
    XChaCha20Poly1305::new(&Key::from(okm))
}

impl SessionSealer {
    /// Derives the key from the shared secret (or, outside production, the machine id).
    pub fn new(secret: &[u8]) -> Self {
        Self::rotating(secret, &[])
    }

    /// Seals under `current`; opens ids sealed under it or any of `previous` (a rotation in
    /// progress). Opening an id no key opens costs one attempt per key, so keep the list short.
    pub fn rotating(current: &[u8], previous: &[&[u8]]) -> Self {
        let ciphers = std::iter::once(current)
            .chain(previous.iter().copied())
            .map(cipher_for)
            .collect();
        Self { ciphers }
    }

    pub fn seal(&self, payload: &SessionIdPayload) -> Option<String> {
        if let Some((uuid, packed)) = pack(payload) {
            let sealed = self
                .ciphers
                .first()?
                .encrypt(&uuid_nonce(&uuid), packed.as_slice())
                .ok()?;
            return Some(URL_SAFE_NO_PAD.encode([uuid.as_slice(), &sealed].concat()));
        }
        let plain = serde_json::to_vec(payload).ok()?;
        let nonce_bytes: [u8; NONCE_LEN] = rand::random();
        let nonce = XNonce::from(nonce_bytes);
        let sealed = self
            .ciphers
            .first()?
            .encrypt(&nonce, plain.as_slice())
            .ok()?;
        let mut raw = Vec::with_capacity(NONCE_LEN + sealed.len());
        raw.extend_from_slice(&nonce_bytes);
        raw.extend_from_slice(&sealed);
        Some(URL_SAFE_NO_PAD.encode(raw))
    }

    /// Opens an id; `None` for anything not sealed under this key.
    pub fn open(&self, id: &str) -> Option<SessionIdPayload> {
        if id.len() > MAX_ID_LEN {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(id).ok()?;
        if let Some(p) = self.open_packed(&raw) {
            return Some(p);
        }
        if raw.len() <= NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce_arr: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        let nonce = XNonce::from(nonce_arr);
        let plain = self
            .ciphers
            .iter()
            .find_map(|c| c.decrypt(&nonce, sealed).ok())?;
        serde_json::from_slice(&plain).ok()
    }

    /// Opens a minted (packed) id: the uuid in front is the nonce of the rest.
    fn open_packed(&self, raw: &[u8]) -> Option<SessionIdPayload> {
        if raw.len() <= UUID_LEN {
            return None;
        }
        let (uuid, sealed) = raw.split_at(UUID_LEN);
        let uuid: [u8; UUID_LEN] = uuid.try_into().ok()?;
        let nonce = uuid_nonce(&uuid);
        let plain = self
            .ciphers
            .iter()
            .find_map(|c| c.decrypt(&nonce, sealed).ok())?;
        unpack(&uuid, &plain)
    }
}

const UUID_LEN: usize = 16;

/// Bytes of a minted uuid that name the instance that minted it.
const TAG_LEN: usize = 3;
/// Characters of an id that carry the tag: 3 bytes are exactly 4 base64url characters.
pub const TAG_CHARS: usize = 4;

/// The tag of the instance named `machine_id`: the first [`TAG_CHARS`] characters of every id it
/// mints. Two instances may share a tag (24 bits): each is then also told of the other's
/// records, nothing worse.
pub fn instance_tag(machine_id: &str) -> String {
    URL_SAFE_NO_PAD.encode(tag_bytes(machine_id))
}

fn tag_bytes(machine_id: &str) -> [u8; TAG_LEN] {
    use sha2::Digest;
    let hash = Sha256::digest(machine_id.as_bytes());
    [hash[0], hash[1], hash[2]]
}

/// A fresh uuid for a session minted by `machine_id`: its tag, then random bytes, marked as an
/// RFC 9562 version 8 (custom) uuid, so that [`tag_of`] tells a tagged id from an id minted
/// before tags (version 4, random from its first byte). 98 random bits: the uuid is the id's
/// nonce and must never repeat under one key, and ids of one tag collide with probability
/// about n²/2⁹⁹ (10¹⁰ ids: 10⁻¹⁰).
pub fn minted_uuid(machine_id: &str) -> uuid::Uuid {
    let mut bytes: [u8; UUID_LEN] = rand::random();
    bytes[..TAG_LEN].copy_from_slice(&tag_bytes(machine_id));
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// The tag `id` starts with, when it is a minted id carrying one (its uuid is version 8); `None`
/// for an id minted before tags or with a JSON payload (their first characters are random), or
/// anything that is no id. Reads the first 12 characters only: nothing is opened.
pub fn tag_of(id: &str) -> Option<&str> {
    let head = URL_SAFE_NO_PAD.decode(id.get(..12)?).ok()?;
    // Byte 6: the version in its high nibble; byte 8: the variant in its two high bits.
    let tagged =
        head.get(6).is_some_and(|b| b >> 4 == 8) && head.get(8).is_some_and(|b| b >> 6 == 2);
    tagged.then(|| &id[..TAG_CHARS])
}

/// The nonce of a packed id: its uuid, zero-extended.
fn uuid_nonce(uuid: &[u8; UUID_LEN]) -> XNonce {
    let mut nonce = [0u8; NONCE_LEN];
    nonce[..UUID_LEN].copy_from_slice(uuid);
    XNonce::from(nonce)
}

/// The first byte of a packed payload (a JSON payload starts with `{`).
const PACKED: u8 = 2;
/// `flags`: the session is public.
const PUBLIC: u8 = 1;
/// `flags`: `auth_sig` is the literal `public` (and is not written out).
const SIG_PUBLIC: u8 = 2;
/// Transports by code; an id of any other transport keeps a JSON payload.
const PROTOCOLS: [&str; 2] = ["streamable-http", "legacy-sse"];

/// The uuid's bytes, and `[2][flags][iat: LEB128][protocol code][auth_sig: u8 length + bytes,
/// unless SIG_PUBLIC][holder: the rest]`. `None` when the payload does not fit this shape (a
/// uuid that is not canonical, an unknown transport, a long `auth_sig`): it is then sealed as
/// JSON.
fn pack(p: &SessionIdPayload) -> Option<([u8; UUID_LEN], Vec<u8>)> {
    let uuid = uuid::Uuid::parse_str(&p.uuid).ok()?;
    if uuid.hyphenated().to_string() != p.uuid {
        return None;
    }
    let protocol = PROTOCOLS.iter().position(|k| *k == p.protocol)? as u8;
    let mut out = Vec::with_capacity(32 + p.holder.len());
    let sig_public = p.auth_sig == "public";
    out.push(PACKED);
    out.push((u8::from(p.is_public) * PUBLIC) | (u8::from(sig_public) * SIG_PUBLIC));
    let mut iat = p.iat;
    loop {
        let byte = (iat & 0x7f) as u8;
        iat >>= 7;
        if iat == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.push(protocol);
    if !sig_public {
        out.push(u8::try_from(p.auth_sig.len()).ok()?);
        out.extend_from_slice(p.auth_sig.as_bytes());
    }
    out.extend_from_slice(p.holder.as_bytes());
    Some((*uuid.as_bytes(), out))
}

/// The inverse of [`pack`]; `None` for anything malformed.
fn unpack(uuid: &[u8; UUID_LEN], b: &[u8]) -> Option<SessionIdPayload> {
    if b.first() != Some(&PACKED) {
        return None;
    }
    let (&flags, mut rest) = b.get(1..)?.split_first()?;
    let mut iat: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, tail) = rest.split_first()?;
        rest = tail;
        iat |= u64::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            break;
        }
        if shift >= 63 {
            return None;
        }
    }
    let (&protocol, mut rest) = rest.split_first()?;
    let protocol = PROTOCOLS.get(usize::from(protocol))?;
    let uuid = uuid::Uuid::from_bytes(*uuid);
    let auth_sig = if flags & SIG_PUBLIC != 0 {
        "public".to_string()
    } else {
        let (&len, tail) = rest.split_first()?;
        let sig = std::str::from_utf8(tail.get(..usize::from(len))?).ok()?;
        rest = &tail[usize::from(len)..];
        sig.to_string()
    };
    Some(SessionIdPayload {
        holder: std::str::from_utf8(rest).ok()?.to_string(),
        uuid: uuid.hyphenated().to_string(),
        iat,
        protocol: (*protocol).to_string(),
        auth_sig,
        is_public: flags & PUBLIC != 0,
    })
}

/// How a session id appears in the log: a session id is a bearer credential (whoever has it
/// speaks in the session), so a log line carries the first 6 bytes of its SHA-256 in hex
/// instead: enough to follow one session through the log, nothing to present. Formatted only
/// when the line is written.
pub(crate) struct LogId<'a>(pub &'a str);

impl std::fmt::Display for LogId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use sha2::Digest;
        let hash = Sha256::digest(self.0.as_bytes());
        for b in &hash[..6] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload() -> SessionIdPayload {
        SessionIdPayload {
            holder: "desk-a".into(),
            uuid: "0b8f".into(),
            iat: 1_767_225_600,
            protocol: "streamable-http".into(),
            auth_sig: "public".into(),
            is_public: true,
        }
    }

    fn minted() -> SessionIdPayload {
        SessionIdPayload {
            uuid: "6f9619ff-8b86-4d11-b42d-00c04fc964ff".into(),
            ..payload()
        }
    }

    #[test]
    fn a_minted_payload_is_packed_short_and_json_ids_still_open() {
        let s = SessionSealer::new(b"a shared secret of some length");
        let id = s.seal(&minted()).unwrap();
        assert_eq!(s.open(&id), Some(minted()));
        // 16 uuid + 1 + 1 + 5 (iat) + 1 + 6 ("desk-a") + 16 tag = 46 bytes.
        assert_eq!(id.len(), 62, "{id}");
        // An id an earlier version sealed with a JSON payload opens to the same payload.
        let json = serde_json::to_vec(&minted()).unwrap();
        let nonce = XNonce::from([7u8; NONCE_LEN]);
        let sealed = s.ciphers[0].encrypt(&nonce, json.as_slice()).unwrap();
        let old = URL_SAFE_NO_PAD.encode([[7u8; NONCE_LEN].as_slice(), &sealed].concat());
        assert!(old.len() > 200);
        assert_eq!(s.open(&old), Some(minted()));
        // A private session's signature and any transport of ours round-trip too.
        let private = SessionIdPayload {
            auth_sig: "3f1c".into(),
            is_public: false,
            protocol: "legacy-sse".into(),
            ..minted()
        };
        assert_eq!(s.open(&s.seal(&private).unwrap()), Some(private));
    }

    /// Issue 37: every id an instance mints starts with its tag, which `tag_of` reads back;
    /// ids minted before tags (uuid v4) and JSON ids carry none, and still open.
    #[test]
    fn minted_ids_start_with_their_instances_tag_and_older_ids_have_none() {
        let s = SessionSealer::new(b"a shared secret of some length");
        let tag = instance_tag("desk-a");
        assert_eq!(tag.len(), TAG_CHARS);
        assert_ne!(tag, instance_tag("desk-b"));
        let mut uuids = std::collections::HashSet::new();
        for _ in 0..200 {
            let uuid = minted_uuid("desk-a");
            assert_eq!(uuid.get_version_num(), 8);
            assert!(uuids.insert(uuid), "a uuid repeated");
            let p = SessionIdPayload {
                uuid: uuid.hyphenated().to_string(),
                ..minted()
            };
            let id = s.seal(&p).unwrap();
            assert_eq!(id.len(), 62, "still packed: {id}");
            assert!(id.starts_with(&tag), "{id} does not start with {tag}");
            assert_eq!(tag_of(&id), Some(tag.as_str()));
            assert_eq!(s.open(&id), Some(p));
        }
        // An id minted by an earlier version: a v4 uuid, no tag.
        let old = s.seal(&minted()).unwrap();
        assert_eq!(tag_of(&old), None, "{old}");
        assert_eq!(s.open(&old), Some(minted()));
        assert_eq!(tag_of("short"), None);
        assert_eq!(tag_of("not base64 at all!!"), None);
    }

    #[test]
    fn packing_refuses_what_it_cannot_carry_and_unpacking_malformed_bytes_fails() {
        assert!(pack(&payload()).is_none(), "not a canonical uuid");
        let other = SessionIdPayload {
            protocol: "websocket".into(),
            ..minted()
        };
        assert!(pack(&other).is_none());
        let (uuid, packed) = pack(&minted()).unwrap();
        assert_eq!(unpack(&uuid, &packed), Some(minted()));
        for cut in 0..packed.len() - "desk-a".len() {
            assert_eq!(unpack(&uuid, &packed[..cut]), None, "cut at {cut}");
        }
        let endless_iat = [
            PACKED, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
        ];
        assert_eq!(unpack(&uuid, &endless_iat), None);
    }

    #[test]
    fn round_trip_and_visible_ascii() {
        let s = SessionSealer::new(b"a shared secret of some length");
        let id = s.seal(&payload()).unwrap();
        assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        assert_eq!(s.open(&id), Some(payload()));
        assert_ne!(id, s.seal(&payload()).unwrap(), "fresh nonce every time");
    }

    #[test]
    fn foreign_forged_and_tampered_ids_do_not_open() {
        let a = SessionSealer::new(b"secret number one, long enough");
        let b = SessionSealer::new(b"secret number two, long enough");
        let id = a.seal(&payload()).unwrap();
        assert_eq!(b.open(&id), None, "another deployment's id");
        assert_eq!(a.open("not-a-session"), None);
        assert_eq!(a.open(""), None);
        let mut bytes = id.into_bytes();
        let last = bytes.len() - 5;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(a.open(std::str::from_utf8(&bytes).unwrap()), None);
        assert_eq!(a.open(&"A".repeat(MAX_ID_LEN + 1)), None);
    }

    #[test]
    fn a_rotation_opens_old_ids_and_seals_new_ones_under_the_new_secret() {
        let old = SessionSealer::new(b"the secret before the rotation");
        let rotating = SessionSealer::rotating(
            b"the secret after the rotation",
            &[b"the secret before the rotation"],
        );
        let after = SessionSealer::new(b"the secret after the rotation");
        let old_id = old.seal(&payload()).unwrap();
        assert_eq!(
            rotating.open(&old_id),
            Some(payload()),
            "old ids still open"
        );
        let new_id = rotating.seal(&payload()).unwrap();
        assert_eq!(
            after.open(&new_id),
            Some(payload()),
            "minted under the new secret"
        );
        assert_eq!(old.open(&new_id), None, "not under the old one");
        assert_eq!(
            after.open(&old_id),
            None,
            "once the old secret is gone, so are its ids"
        );
    }
}

/// Property tests: `open` reads an attacker's header, so for any input it returns `None`
/// unless the id was sealed here, and refuses over-long ids by their length alone.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::prop_config as config;

    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    fn sealer() -> SessionSealer {
        SessionSealer::new(b"a shared secret of some length")
    }

    fn payload() -> impl Strategy<Value = SessionIdPayload> {
        (
            // Long enough, sometimes, that the sealed id passes MAX_ID_LEN.
            prop_oneof![".{0,24}", "[ -~]{1000,1700}"],
            // Canonical uuids and known transports, sometimes: those payloads are packed.
            prop_oneof![
                ".{0,36}",
                any::<u128>().prop_map(|n| uuid::Uuid::from_u128(n).hyphenated().to_string()),
            ],
            any::<u64>(),
            prop_oneof![
                ".{0,16}",
                Just("streamable-http".to_string()),
                Just("legacy-sse".to_string())
            ],
            prop_oneof![".{0,16}", Just("public".to_string()), ".{200,300}"],
            any::<bool>(),
        )
            .prop_map(|(holder, uuid, iat, protocol, auth_sig, is_public)| {
                SessionIdPayload {
                    holder,
                    uuid,
                    iat,
                    protocol,
                    auth_sig,
                    is_public,
                }
            })
    }

    proptest! {
        // Each case seals and opens ids of up to 2 KiB (slow-ish in a debug build).
        #![proptest_config(config(256))]

        /// Every payload opens back to itself, exactly when its id fits MAX_ID_LEN: a valid
        /// seal past the limit is refused, so only the length guard can have refused it.
        #[test]
        fn seal_then_open_round_trips_within_the_length_limit(p in payload()) {
            let s = sealer();
            let id = s.seal(&p).expect("sealing plain data succeeds");
            prop_assert!(id.bytes().all(|b| ALPHABET.contains(&b)), "a header-safe id");
            if id.len() <= MAX_ID_LEN {
                prop_assert_eq!(s.open(&id), Some(p));
            } else {
                prop_assert_eq!(s.open(&id), None);
            }
        }

        /// Any change to a sealed id (one character replaced, cut short, extended) does not
        /// open: ids are not malleable, so one session has exactly one id string.
        #[test]
        fn a_changed_id_does_not_open(
            p in payload(),
            at in any::<prop::sample::Index>(),
            with in prop::sample::select(ALPHABET.to_vec()),
            extra in "[A-Za-z0-9_-]{1,4}",
        ) {
            let s = sealer();
            let id = s.seal(&p).expect("sealing plain data succeeds");
            prop_assume!(id.len() <= MAX_ID_LEN);
            let i = at.index(id.len());
            let mut changed = id.clone().into_bytes();
            prop_assume!(changed[i] != with);
            changed[i] = with;
            let changed = String::from_utf8(changed).expect("ASCII");
            prop_assert_eq!(s.open(&changed), None, "replaced at {}", i);
            prop_assert_eq!(s.open(&id[..i]), None, "cut at {}", i);
            prop_assert_eq!(s.open(&format!("{id}{extra}")), None);
        }

        /// Arbitrary strings, and arbitrary strings of the id alphabet of any length, never
        /// open and never panic.
        #[test]
        fn arbitrary_ids_do_not_open(
            id in prop_oneof![
                any::<String>(),
                "[A-Za-z0-9_-]{0,120}",
                "[A-Za-z0-9_-]{2040,2100}",
                "[\\u{80}-\\u{10ffff}]{500,700}",
            ],
        ) {
            prop_assert_eq!(sealer().open(&id), None);
        }

        /// An id sealed under a rotated-out secret still opens during the rotation, and one
        /// sealed under an unrelated secret does not.
        #[test]
        fn rotation_opens_old_ids_only(p in payload(), other in "[a-z]{8,32}") {
            prop_assume!(other.as_bytes() != b"a shared secret of some length");
            let old = SessionSealer::new(other.as_bytes());
            let rotating = SessionSealer::rotating(b"the new secret, long enough", &[other.as_bytes()]);
            let id = old.seal(&p).expect("sealing plain data succeeds");
            prop_assume!(id.len() <= MAX_ID_LEN);
            prop_assert_eq!(rotating.open(&id), Some(p));
            prop_assert_eq!(sealer().open(&id), None);
        }
    }
}
