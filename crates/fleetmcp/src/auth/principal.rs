//! Who made a request: the identity a verified access token names.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The caller of a request, from its verified access token. A handler reads it with
/// [`RequestContext::principal`](crate::RequestContext::principal); the transport keeps it in the
/// request's extensions (`Arc<Principal>`), where a limiter reads [`Principal::key`].
#[derive(Debug, Clone)]
pub struct Principal {
    issuer: String,
    subject: Option<String>,
    client_id: Option<String>,
    scopes: Vec<String>,
    claims: Map<String, Value>,
    key: String,
    fingerprint: String,
}

impl Principal {
    /// The principal of a token whose signature and registered claims were checked; `token` is
    /// only hashed, for a principal without a subject.
    pub(crate) fn from_claims(claims: Map<String, Value>, token: &str) -> Self {
        let text = |name: &str| claims.get(name).and_then(Value::as_str).map(String::from);
        let issuer = text("iss").unwrap_or_default();
        let subject = text("sub").filter(|s| !s.is_empty());
        let client_id = text("client_id").or_else(|| text("azp"));
        let scopes = match claims.get("scope").or_else(|| claims.get("scp")) {
            // RFC 6749 3.3: scopes are separated by the space character (0x20) only; a tab, a
            // newline or a no-break space is part of a scope, never a separator (else
            // `read\u{a0}write` would grant `write`).
            Some(Value::String(s)) => s
                .split(' ')
                .filter(|scope| !scope.is_empty())
                .map(String::from)
                .collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            _ => Vec::new(),
        };
        // Issuer and subject, so a refreshed token keeps its sessions; without a subject, the
        // token itself (hashed: the key may be logged or stored).
        let key = match &subject {
            Some(sub) => format!("sub:{}:{issuer}{sub}", issuer.len()),
            None => format!("tok:{}", digest(token)),
        };
        let fingerprint = digest(&key);
        Self {
            issuer,
            subject,
            client_id,
            scopes,
            claims,
            key,
            fingerprint,
        }
    }

    /// `iss`.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// `sub`, when the token names one.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// `client_id` (else `azp`): the OAuth client the token was issued to.
    pub fn client_id(&self) -> Option<&str> {
        self.client_id.as_deref()
    }

    /// The granted scopes (`scope`, space-separated, or `scp`).
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// Whether the token grants `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }

    /// Every claim of the token.
    pub fn claims(&self) -> &Map<String, Value> {
        &self.claims
    }

    /// A stable key for this principal: the same for every token of one issuer and subject
    /// (so for a refreshed token too); for a token without a subject, a hash of the token.
    /// Never contains the token. For per-caller limits and logs.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// A short digest of [`Principal::key`] (16 bytes of SHA-256, base64url: 22 characters),
    /// what a session records of who made it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// 16 bytes of SHA-256 of `text`, base64url without padding.
fn digest(text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    URL_SAFE_NO_PAD.encode(&hash[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn a_refreshed_token_of_one_subject_has_the_same_key() {
        let a = Principal::from_claims(
            claims(json!({"iss": "https://as", "sub": "u1", "scope": "a b"})),
            "t1",
        );
        let b = Principal::from_claims(claims(json!({"iss": "https://as", "sub": "u1"})), "t2");
        let c = Principal::from_claims(claims(json!({"iss": "https://as", "sub": "u2"})), "t1");
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_eq!(a.fingerprint().len(), 22);
        assert_eq!(a.scopes(), ["a", "b"]);
        assert!(a.has_scope("b") && !b.has_scope("b"));
    }

    #[test]
    fn without_a_subject_the_key_is_the_token_hashed() {
        let a = Principal::from_claims(
            claims(json!({"iss": "https://as", "scp": ["x"], "azp": "c"})),
            "secret-token",
        );
        assert!(a.key().starts_with("tok:") && !a.key().contains("secret-token"));
        assert_eq!(a.client_id(), Some("c"));
        assert!(a.has_scope("x"));
        let b = Principal::from_claims(claims(json!({"iss": "https://as"})), "other-token");
        assert_ne!(a.key(), b.key());
    }

    #[test]
    fn an_issuer_cannot_pose_as_another_by_its_subject() {
        let a = Principal::from_claims(claims(json!({"iss": "https://a", "sub": "b:x"})), "t");
        let b = Principal::from_claims(claims(json!({"iss": "https://a:b", "sub": "x"})), "t");
        assert_ne!(a.key(), b.key());
    }
}
