//! Authorization as an OAuth 2.1 resource server (the MCP authorization rules): which token a
//! request carries, whether it is valid, and who it names.
//!
//! A token is a JWT signed by one of the issuer's keys ([`jwks`]), with `iss` the configured
//! issuer, `aud` this server's resource URI (RFC 8707: a token minted for another server is
//! refused), `exp` and `nbf` checked with `auth.leeway_secs`, and an algorithm from
//! `auth.algorithms` (`none` and shared-secret algorithms never); or, with
//! `auth.introspection_endpoint` set, an opaque token the issuer says is active for this
//! resource (`introspection.rs`, RFC 7662). A valid token becomes a
//! [`Principal`]. The token itself is never logged, stored or passed on: only hashes of it
//! leave this module.
//!
//! A [`Principal`] (`principal.rs`) carries issuer, subject, client id, scopes and claims, a
//! stable `key()` (issuer and subject, else a hash of the token: what a limiter counts by) and
//! its `fingerprint()` (16 bytes of SHA-256 of the key, base64url: what a session and a task
//! record). A token that checked out is kept by its hash (`cache.rs`), so a request with a
//! token seen before costs a hash and a lookup. This module also gives the Protected Resource
//! Metadata document (RFC 9728) and its URL, which `transport/http/authorize.rs` serves.
//!
//! Architecture invariant: knows nothing of HTTP routes, sessions or handlers; the transport
//! asks it, and decides the answer.

mod body;
mod cache;
mod introspection;
mod jwks;
mod principal;

use std::collections::HashSet;
use std::sync::Arc;

use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value, json};

pub use principal::Principal;

use crate::config::AuthConfig;

/// Why a request's token was refused (never naming the token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header.
    #[error("a bearer token is required")]
    Missing,
    /// A token that does not verify, for the reason given.
    #[error("invalid token: {0}")]
    Invalid(&'static str),
    /// A request that does not carry one token in one way (RFC 6750 3.1 `invalid_request`),
    /// for the reason given: answered `400`, not `401`.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

/// Checks access tokens for one server (`[auth]`); built once at start.
pub struct Authorizer {
    cfg: AuthConfig,
    algorithms: Vec<Algorithm>,
    jwks: jwks::Jwks,
    introspection: Option<introspection::Introspection>,
    checked: cache::TokenCache,
    metadata_url: String,
}

impl Authorizer {
    /// The authorizer of `cfg`, or `None` when authorization is off. `cfg` was validated with
    /// the rest of the configuration.
    pub fn new(cfg: &AuthConfig) -> Result<Option<Arc<Self>>, String> {
        if !cfg.enabled {
            return Ok(None);
        }
        let algorithms = cfg
            .algorithms
            .iter()
            .map(|a| {
                a.parse::<Algorithm>()
                    .map_err(|_| format!("auth.algorithms: unknown algorithm {a}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Arc::new(Self {
            metadata_url: metadata_url(&cfg.resource)?,
            jwks: jwks::Jwks::new(cfg)?,
            introspection: introspection::Introspection::new(cfg)?,
            checked: cache::TokenCache::new(
                cfg.token_cache_max,
                std::time::Duration::from_millis(cfg.token_cache_ttl_ms),
            ),
            algorithms,
            cfg: cfg.clone(),
        })))
    }

    /// The URL of this server's Protected Resource Metadata (RFC 9728 section 3.1: the
    /// well-known path inserted before the resource's path), for `WWW-Authenticate`.
    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// Scopes every request needs.
    pub fn required_scopes(&self) -> &[String] {
        &self.cfg.required_scopes
    }

    /// The Protected Resource Metadata document; `declared` are the scopes the catalog's
    /// tools, resources and prompts name (used when `auth.scopes_supported` is unset).
    pub fn metadata(&self, declared: impl IntoIterator<Item = String>) -> Value {
        let servers = if self.cfg.authorization_servers.is_empty() {
            vec![self.cfg.issuer.clone()]
        } else {
            self.cfg.authorization_servers.clone()
        };
        let scopes: Vec<String> = if self.cfg.scopes_supported.is_empty() {
            let mut all: Vec<String> = self.cfg.required_scopes.clone();
            all.extend(declared);
            all.sort();
            all.dedup();
            all
        } else {
            self.cfg.scopes_supported.clone()
        };
        json!({
            "resource": self.cfg.resource,
            "authorization_servers": servers,
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
        })
    }

    /// The principal of `authorization` (the header's value), or why not. A token checked
    /// before is found in the token cache; any other is checked in full, and kept if valid.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
    ) -> Result<Arc<Principal>, AuthError> {
        let token = bearer(authorization).ok_or(AuthError::Missing)?;
        let key = cache::TokenCache::key(token);
        if let Some(p) = self.checked.get(&key) {
            return Ok(p);
        }
        let claims = self.check(token).await?;
        let exp = claims.get("exp").and_then(Value::as_u64);
        let principal = Arc::new(Principal::from_claims(claims, token));
        self.checked.put(key, principal.clone(), exp);
        Ok(principal)
    }

    /// The claims of `token` once its signature and claims (or its introspection) check out.
    async fn check(&self, token: &str) -> Result<Map<String, Value>, AuthError> {
        let header = match jsonwebtoken::decode_header(token) {
            Ok(h) => h,
            // Not a JWT: an opaque token, if the issuer can be asked about it.
            Err(_) => {
                let Some(i) = &self.introspection else {
                    return Err(AuthError::Invalid("malformed"));
                };
                return i.claims(token).await;
            }
        };
        if !self.algorithms.contains(&header.alg) {
            return Err(AuthError::Invalid("algorithm not allowed"));
        }
        let key = self
            .jwks
            .key(header.kid.as_deref())
            .await
            .ok_or(AuthError::Invalid("unknown signing key"))?;
        let mut v = Validation::new(header.alg);
        v.leeway = self.cfg.leeway_secs;
        v.validate_nbf = true;
        v.set_issuer(&[&self.cfg.issuer]);
        v.set_audience(&[&self.cfg.resource]);
        v.required_spec_claims = HashSet::from(["exp".into(), "iss".into(), "aud".into()]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            AuthError::Invalid(match e.kind() {
                K::ExpiredSignature => "expired",
                K::ImmatureSignature => "not yet valid",
                K::InvalidAudience => "issued for another resource",
                K::InvalidIssuer => "issued by another issuer",
                K::InvalidSignature => "bad signature",
                K::MissingRequiredClaim(_) => "a required claim is missing",
                _ => "does not verify",
            })
        })?;
        Ok(data.claims)
    }
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is case-insensitive).
fn bearer(authorization: Option<&str>) -> Option<&str> {
    let v = authorization?.trim();
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// `https://host/mcp` → `https://host/.well-known/oauth-protected-resource/mcp`.
fn metadata_url(resource: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(resource).map_err(|e| format!("auth.resource: {e}"))?;
    let path = url.path().trim_end_matches('/');
    let mut origin = url.origin().ascii_serialization();
    origin.push_str("/.well-known/oauth-protected-resource");
    origin.push_str(path);
    Ok(origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_inserts_the_well_known_path() {
        assert_eq!(
            metadata_url("http://127.0.0.1:3000/mcp").as_deref(),
            Ok("http://127.0.0.1:3000/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            metadata_url("https://mcp.example.com").as_deref(),
            Ok("https://mcp.example.com/.well-known/oauth-protected-resource")
        );
    }

    #[test]
    fn only_bearer_headers_carry_a_token() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }
}
