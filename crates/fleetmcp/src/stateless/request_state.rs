//! `requestState`: what a 2026-07-28 multi-round request carries between rounds.
//!
//! The client echoes it verbatim, so it is attacker-controlled. It is sealed with
//! XChaCha20-Poly1305 (integrity and confidentiality: it carries the client's earlier answers)
//! under a key derived from `VAULT_SECRET`, else `JWT_SECRET`, else `MCP_SESSION_SECRET`, else a
//! per-process random key, and it is bound to the request it belongs to (method and a digest of
//! its parameters), to an expiry, and, with authorization on, to the principal it was sealed for
//! (the specification's multi-round guidance): replayed by another principal it is refused
//! exactly as a tampered one is. Any instance with the same secret can continue the exchange.
//!
//! From `MCP_SESSION_SECRET` the key has its own HKDF label ([`SESSION_SECRET_INFO`]), so it is
//! never the key session ids are sealed with, nor the key `VAULT_SECRET` would give for the same
//! text; the secrets in `MCP_SESSION_SECRET_PREVIOUS` still open the states they sealed (new
//! states are sealed under the current secret only), so a rotation drops no exchange, as it
//! drops no session.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::Aead;
use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

const NONCE_LEN: usize = 24;
/// States longer than this are refused before decoding.
const MAX_STATE_LEN: usize = 256 * 1024;

/// What a `requestState` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatePayload {
    /// Method of the request it belongs to.
    pub m: String,
    /// Digest of the request's salient parameters.
    pub d: String,
    /// Expiry, milliseconds since the Unix epoch.
    pub exp: u64,
    /// Answers of earlier rounds, by input-request key. Never replaced by a later round.
    pub a: Map<String, Value>,
    /// Keys of the input requests the round that sealed this state asked: the only
    /// `inputResponses` the next round accepts. (Absent in states sealed before it existed:
    /// their questions are then asked again.)
    #[serde(default)]
    pub q: Vec<String>,
    /// The fingerprint of the principal it was sealed for (authorization on); absent for an
    /// anonymous request. Only that principal's next round opens it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub o: Option<String>,
    /// The call's key (`RequestContext::call_key`), fixed by the exchange's first round (the
    /// client's own key, scoped, or a random one) and carried to every later round: a round
    /// sent again, with whatever `_meta`, names the same call, so a handler that takes its
    /// effect once per key takes it once per exchange. (Absent in states sealed before it
    /// existed: the key is then the round's own.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<String>,
}

/// Why a `requestState` was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("requestState failed verification")]
    Invalid,
    #[error("requestState has expired")]
    Expired,
    #[error("requestState belongs to another request")]
    OtherRequest,
}

/// Where the key came from, for the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    VaultSecret,
    JwtSecret,
    /// `MCP_SESSION_SECRET` (with `MCP_SESSION_SECRET_PREVIOUS` for opening).
    SessionSecret,
    PerProcess,
}

impl KeySource {
    /// Whether every instance given the same configuration gets the same key.
    pub fn is_shared(self) -> bool {
        self != KeySource::PerProcess
    }
}

/// The HKDF salt of every `requestState` key.
const SALT: &[u8] = b"fleetmcp/request-state/v1";
/// The HKDF info of a key from `VAULT_SECRET` or `JWT_SECRET`.
const SECRET_INFO: &[u8] = b"mcp-request-state";
/// The HKDF info of a key from `MCP_SESSION_SECRET`: its own label, so the requestState key
/// differs from the session-id key of the same secret (another salt and info) and from the key
/// `VAULT_SECRET` would give for the same text.
pub const SESSION_SECRET_INFO: &[u8] = b"fleetmcp requestState v1 from MCP_SESSION_SECRET";

fn cipher(ikm: &[u8], info: &[u8]) -> XChaCha20Poly1305 {
    let hk = Hkdf::<Sha256>::new(Some(SALT), ikm);
    let mut okm = [0u8; 32];
    // 32 bytes is far below HKDF-SHA256's output limit, so expand cannot fail.
    let _ = hk.expand(info, &mut okm);
    XChaCha20Poly1305::new(&Key::from(okm))
}

/// The secrets a `requestState` key may come from, in the order they are chosen.
#[derive(Debug, Default, Clone, Copy)]
pub struct StateSecrets<'a> {
    /// `VAULT_SECRET`.
    pub vault: Option<&'a str>,
    /// `JWT_SECRET`.
    pub jwt: Option<&'a str>,
    /// `MCP_SESSION_SECRET`.
    pub session: Option<&'a str>,
    /// `MCP_SESSION_SECRET_PREVIOUS`: open only, with `session`.
    pub previous_session: &'a [&'a str],
}

pub struct RequestStateSealer {
    /// The key states are sealed with first, then the keys that still open states (rotated-out
    /// session secrets).
    ciphers: Vec<XChaCha20Poly1305>,
    pub source: KeySource,
}

impl RequestStateSealer {
    /// From `VAULT_SECRET`, else `JWT_SECRET`, else a per-process key.
    #[cfg(test)]
    pub fn new(vault: Option<&str>, jwt: Option<&str>) -> Self {
        Self::from_secrets(StateSecrets {
            vault,
            jwt,
            ..StateSecrets::default()
        })
    }

    /// From `VAULT_SECRET`, else `JWT_SECRET`, else `MCP_SESSION_SECRET` (its own label; the
    /// previous session secrets open what they sealed), else a per-process key.
    pub fn from_secrets(s: StateSecrets<'_>) -> Self {
        let (ciphers, source) = match (s.vault, s.jwt, s.session) {
            (Some(v), _, _) => (
                vec![cipher(v.as_bytes(), SECRET_INFO)],
                KeySource::VaultSecret,
            ),
            (None, Some(j), _) => (
                vec![cipher(j.as_bytes(), SECRET_INFO)],
                KeySource::JwtSecret,
            ),
            (None, None, Some(current)) => (
                std::iter::once(current)
                    .chain(s.previous_session.iter().copied())
                    .map(|secret| cipher(secret.as_bytes(), SESSION_SECRET_INFO))
                    .collect(),
                KeySource::SessionSecret,
            ),
            (None, None, None) => (
                vec![cipher(&rand::random::<[u8; 32]>(), SECRET_INFO)],
                KeySource::PerProcess,
            ),
        };
        Self { ciphers, source }
    }

    pub fn seal(&self, payload: &StatePayload) -> Option<String> {
        let plain = serde_json::to_vec(payload).ok()?;
        let nonce: [u8; NONCE_LEN] = rand::random();
        let sealed = self
            .ciphers
            .first()?
            .encrypt(&XNonce::from(nonce), plain.as_slice())
            .ok()?;
        let mut raw = Vec::with_capacity(NONCE_LEN + sealed.len());
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&sealed);
        Some(URL_SAFE_NO_PAD.encode(raw))
    }

    /// Opens and checks a state for the request (`method`, `digest`) of `caller` (a principal's
    /// fingerprint; `None`: anonymous) at time `now_ms`. A state sealed for anyone else is
    /// [`StateError::Invalid`], checked before expiry and request, so the answer tells another
    /// principal nothing about it.
    pub fn open(
        &self,
        state: &str,
        method: &str,
        digest: &str,
        caller: Option<&str>,
        now_ms: u64,
    ) -> Result<StatePayload, StateError> {
        if state.len() > MAX_STATE_LEN {
            return Err(StateError::Invalid);
        }
        let raw = URL_SAFE_NO_PAD
            .decode(state)
            .map_err(|_| StateError::Invalid)?;
        if raw.len() <= NONCE_LEN {
            return Err(StateError::Invalid);
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| StateError::Invalid)?;
        // One attempt per key: the current one, then the rotated-out ones (a short list).
        let nonce = XNonce::from(nonce);
        let plain = self
            .ciphers
            .iter()
            .find_map(|c| c.decrypt(&nonce, sealed).ok())
            .ok_or(StateError::Invalid)?;
        let p: StatePayload = serde_json::from_slice(&plain).map_err(|_| StateError::Invalid)?;
        if p.o.as_deref() != caller {
            return Err(StateError::Invalid);
        }
        if p.exp < now_ms {
            return Err(StateError::Expired);
        }
        if p.m != method || p.d != digest {
            return Err(StateError::OtherRequest);
        }
        Ok(p)
    }
}

/// A digest of what makes a request itself: its method and its params without `_meta`,
/// `inputResponses` and `requestState` (which change between rounds). serde_json's maps are
/// sorted, so the text is canonical.
pub fn request_digest(method: &str, params: &Map<String, Value>) -> String {
    let mut salient = params.clone();
    salient.remove("_meta");
    salient.remove("inputResponses");
    salient.remove("requestState");
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    h.update(Value::Object(salient).to_string().as_bytes());
    URL_SAFE_NO_PAD.encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn payload(exp: u64) -> StatePayload {
        StatePayload {
            m: "tools/call".into(),
            d: "digest".into(),
            exp,
            a: json!({"step1": {"action": "accept"}})
                .as_object()
                .cloned()
                .unwrap(),
            q: vec!["step2".into()],
            o: None,
            k: None,
        }
    }

    #[test]
    fn sealed_state_opens_only_for_its_request_before_expiry() {
        let s = RequestStateSealer::new(Some("vault"), None);
        assert_eq!(s.source, KeySource::VaultSecret);
        let state = s.seal(&payload(2_000)).unwrap();
        assert_eq!(
            s.open(&state, "tools/call", "digest", None, 1_000).unwrap(),
            payload(2_000)
        );
        assert_eq!(
            s.open(&state, "tools/call", "digest", None, 3_000),
            Err(StateError::Expired)
        );
        assert_eq!(
            s.open(&state, "prompts/get", "digest", None, 1_000),
            Err(StateError::OtherRequest)
        );
        assert_eq!(
            s.open(
                &format!("{state}-TAMPERED"),
                "tools/call",
                "digest",
                None,
                1_000
            ),
            Err(StateError::Invalid)
        );
        let other = RequestStateSealer::new(None, Some("jwt"));
        assert_eq!(
            other.open(&state, "tools/call", "digest", None, 1_000),
            Err(StateError::Invalid)
        );
    }

    #[test]
    fn a_state_sealed_for_a_principal_opens_only_for_it() {
        let s = RequestStateSealer::new(Some("vault"), None);
        let mine = StatePayload {
            o: Some("fingerprint-of-p".into()),
            ..payload(2_000)
        };
        let state = s.seal(&mine).unwrap();
        assert_eq!(
            s.open(
                &state,
                "tools/call",
                "digest",
                Some("fingerprint-of-p"),
                1_000
            ),
            Ok(mine)
        );
        for stranger in [Some("fingerprint-of-q"), None] {
            // The tampered state's answer, even once expired or for another request.
            for (method, now) in [("tools/call", 1_000), ("prompts/get", 3_000)] {
                assert_eq!(
                    s.open(&state, method, "digest", stranger, now),
                    Err(StateError::Invalid),
                    "{stranger:?} {method} {now}"
                );
            }
        }
        // An anonymous state does not open for a principal.
        let anonymous = s.seal(&payload(2_000)).unwrap();
        assert_eq!(
            s.open(
                &anonymous,
                "tools/call",
                "digest",
                Some("fingerprint-of-p"),
                1_000
            ),
            Err(StateError::Invalid)
        );
    }

    /// Without `VAULT_SECRET` and `JWT_SECRET`, `MCP_SESSION_SECRET` gives every instance the
    /// same key, under its own label; the previous secrets still open what they sealed.
    #[test]
    fn the_session_secret_gives_a_shared_key_of_its_own_that_rotates() {
        const OLD: &str = "the-old-session-secret-0123456789";
        const NEW: &str = "the-new-session-secret-9876543210";
        let session = |current, previous: &'static [&'static str]| {
            RequestStateSealer::from_secrets(StateSecrets {
                session: Some(current),
                previous_session: previous,
                ..StateSecrets::default()
            })
        };
        let (a, b) = (session(OLD, &[]), session(OLD, &[]));
        assert_eq!(a.source, KeySource::SessionSecret);
        assert!(a.source.is_shared());
        let state = a.seal(&payload(2_000)).unwrap();
        // Another instance with the same secret opens it.
        assert_eq!(
            b.open(&state, "tools/call", "digest", None, 1_000),
            Ok(payload(2_000))
        );
        // Its own label: not the key VAULT_SECRET (or JWT_SECRET) of the same text gives...
        for other in [
            RequestStateSealer::new(Some(OLD), None),
            RequestStateSealer::new(None, Some(OLD)),
        ] {
            assert_eq!(
                other.open(&state, "tools/call", "digest", None, 1_000),
                Err(StateError::Invalid)
            );
        }
        // ...nor the session-id key of the same secret (session/id.rs's derivation).
        let hk = Hkdf::<Sha256>::new(Some(b"fleetmcp/session-id/v1"), OLD.as_bytes());
        let mut okm = [0u8; 32];
        hk.expand(b"mcp-session-id", &mut okm).unwrap();
        let id_key = XChaCha20Poly1305::new(&Key::from(okm));
        let raw = URL_SAFE_NO_PAD.decode(&state).unwrap();
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        assert!(
            id_key
                .decrypt(
                    &XNonce::from(<[u8; NONCE_LEN]>::try_from(nonce).unwrap()),
                    sealed
                )
                .is_err()
        );

        // A rotation: the new secret, the old one previous. Old states still open; new ones
        // are sealed under the new secret, which alone opens them once the old one is dropped.
        let rotating = session(NEW, &[OLD]);
        assert_eq!(
            rotating.open(&state, "tools/call", "digest", None, 1_000),
            Ok(payload(2_000))
        );
        assert_eq!(
            session(NEW, &[]).open(&state, "tools/call", "digest", None, 1_000),
            Err(StateError::Invalid),
            "the old secret dropped, its states no longer open"
        );
        let fresh = rotating.seal(&payload(2_000)).unwrap();
        assert_eq!(
            session(NEW, &[]).open(&fresh, "tools/call", "digest", None, 1_000),
            Ok(payload(2_000))
        );
        assert_eq!(
            a.open(&fresh, "tools/call", "digest", None, 1_000),
            Err(StateError::Invalid)
        );
    }

    /// `VAULT_SECRET`, then `JWT_SECRET`, come before the session secret; without any secret
    /// the key is the process's own.
    #[test]
    fn the_explicit_secrets_come_first() {
        const SESSION: &str = "the-session-secret-0123456789";
        let sealer = |vault, jwt| {
            RequestStateSealer::from_secrets(StateSecrets {
                vault,
                jwt,
                session: Some(SESSION),
                previous_session: &[],
            })
        };
        let by_vault = sealer(Some("vault"), Some("jwt"));
        assert_eq!(by_vault.source, KeySource::VaultSecret);
        let state = by_vault.seal(&payload(2_000)).unwrap();
        assert!(
            RequestStateSealer::new(Some("vault"), None)
                .open(&state, "tools/call", "digest", None, 1_000)
                .is_ok()
        );
        let by_jwt = sealer(None, Some("jwt"));
        assert_eq!(by_jwt.source, KeySource::JwtSecret);
        let state = by_jwt.seal(&payload(2_000)).unwrap();
        assert!(
            RequestStateSealer::new(None, Some("jwt"))
                .open(&state, "tools/call", "digest", None, 1_000)
                .is_ok()
        );
        let alone = RequestStateSealer::from_secrets(StateSecrets::default());
        assert_eq!(alone.source, KeySource::PerProcess);
        assert!(!alone.source.is_shared());
        let state = alone.seal(&payload(2_000)).unwrap();
        assert_eq!(
            RequestStateSealer::from_secrets(StateSecrets::default()).open(
                &state,
                "tools/call",
                "digest",
                None,
                1_000
            ),
            Err(StateError::Invalid)
        );
    }

    #[test]
    fn digest_ignores_round_fields_only() {
        let a = json!({"name": "t", "arguments": {"x": 1}, "_meta": {"k": 1}});
        let b =
            json!({"name": "t", "arguments": {"x": 1}, "inputResponses": {}, "requestState": "s"});
        let c = json!({"name": "t", "arguments": {"x": 2}});
        let d = |v: &Value| request_digest("tools/call", v.as_object().unwrap());
        assert_eq!(d(&a), d(&b));
        assert_ne!(d(&a), d(&c));
    }
}

/// Property tests: a `requestState` comes back from the client, so `open` must refuse
/// anything it did not seal (`Invalid`), and say `Expired` or `OtherRequest` only of states
/// it did seal.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::prop_config as config;

    fn sealer() -> RequestStateSealer {
        RequestStateSealer::new(Some("vault secret for the properties"), None)
    }

    /// Answers without floats (serde_json's default float parsing is not exact).
    fn answer() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(2, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn payload() -> impl Strategy<Value = StatePayload> {
        (
            ".{1,16}",
            "[A-Za-z0-9_-]{0,43}",
            any::<u64>(),
            prop::collection::btree_map(".{0,8}", answer(), 0..4),
            prop::collection::vec(".{0,8}", 0..3),
            prop::option::of("[A-Za-z0-9_-]{22}"),
            prop::option::of(".{1,40}"),
        )
            .prop_map(|(m, d, exp, a, q, o, k)| StatePayload {
                m,
                d,
                exp,
                a: a.into_iter().collect(),
                q,
                o,
                k,
            })
    }

    proptest! {
        #![proptest_config(config(256))]

        /// A sealed state opens to itself for its own request until it expires; after that it
        /// is `Expired`, and for another request `OtherRequest`.
        #[test]
        fn seal_then_open_round_trips(p in payload(), before in any::<u64>(), other in ".{1,8}") {
            let s = sealer();
            let state = s.seal(&p).expect("sealing plain data succeeds");
            let now = before.min(p.exp);
            prop_assert_eq!(s.open(&state, &p.m, &p.d, p.o.as_deref(), now), Ok(p.clone()));
            if p.exp < u64::MAX {
                prop_assert_eq!(s.open(&state, &p.m, &p.d, p.o.as_deref(), p.exp + 1), Err(StateError::Expired));
            }
            if other != p.m {
                prop_assert_eq!(s.open(&state, &other, &p.d, p.o.as_deref(), now), Err(StateError::OtherRequest));
            }
            if other != p.d {
                prop_assert_eq!(s.open(&state, &p.m, &other, p.o.as_deref(), now), Err(StateError::OtherRequest));
            }
            // Any other caller (anonymous included, for a state sealed for a principal), at any
            // time, for any request: Invalid, as if it had been tampered with.
            let stranger = if p.o.is_some() { None } else { Some("another principal") };
            prop_assert_eq!(s.open(&state, &p.m, &p.d, stranger, now), Err(StateError::Invalid));
            prop_assert_eq!(s.open(&state, &other, &p.d, stranger, u64::MAX), Err(StateError::Invalid));
        }

        /// Any change to a sealed state is `Invalid`, never a payload.
        #[test]
        fn a_changed_state_is_invalid(
            p in payload(),
            at in any::<prop::sample::Index>(),
            with in prop::sample::select(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".to_vec()),
        ) {
            let s = sealer();
            let state = s.seal(&p).expect("sealing plain data succeeds");
            let i = at.index(state.len());
            let mut changed = state.clone().into_bytes();
            prop_assume!(changed[i] != with);
            changed[i] = with;
            let changed = String::from_utf8(changed).expect("ASCII");
            prop_assert_eq!(s.open(&changed, &p.m, &p.d, p.o.as_deref(), 0), Err(StateError::Invalid));
            prop_assert_eq!(s.open(&state[..i], &p.m, &p.d, p.o.as_deref(), 0), Err(StateError::Invalid));
            // Another deployment's key does not open it either.
            let other = RequestStateSealer::new(None, Some("another deployment"));
            prop_assert_eq!(other.open(&state, &p.m, &p.d, p.o.as_deref(), 0), Err(StateError::Invalid));
        }

        /// Arbitrary text is `Invalid`, and never panics.
        #[test]
        fn arbitrary_states_are_invalid(
            state in prop_oneof![any::<String>(), "[A-Za-z0-9_-]{0,200}"],
            method in ".{0,8}",
            now in any::<u64>(),
        ) {
            prop_assert_eq!(sealer().open(&state, &method, "", None, now), Err(StateError::Invalid));
        }
    }

    /// The length guard: a state sealed here but longer than MAX_STATE_LEN is refused as
    /// `Invalid` (only the guard can refuse a valid seal), one just within it opens.
    #[test]
    fn states_past_the_length_limit_are_refused_before_decoding() {
        let s = sealer();
        let with_answer = |len: usize| StatePayload {
            m: "tools/call".into(),
            d: "d".into(),
            exp: u64::MAX,
            a: serde_json::json!({"k": "x".repeat(len)})
                .as_object()
                .cloned()
                .unwrap(),
            q: vec![],
            o: None,
            k: None,
        };
        // About 3/4 of the limit in plain text is just under it once sealed and encoded.
        let small = s.seal(&with_answer(MAX_STATE_LEN * 3 / 4 - 200)).unwrap();
        assert!(small.len() <= MAX_STATE_LEN);
        assert!(s.open(&small, "tools/call", "d", None, 0).is_ok());
        let big = s.seal(&with_answer(MAX_STATE_LEN * 3 / 4)).unwrap();
        assert!(big.len() > MAX_STATE_LEN);
        assert_eq!(
            s.open(&big, "tools/call", "d", None, 0),
            Err(StateError::Invalid)
        );
    }
}
