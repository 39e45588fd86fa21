//! The issuer's signing keys (JWKS): fetched once, cached, fetched again when they are old or
//! a token names a key not in them (at most once per `auth.jwks_min_refetch_ms`, so a flood of
//! tokens with made-up `kid`s cannot hammer the issuer), every fetch bounded by
//! `auth.jwks_timeout_ms` and its answer by `MAX_ISSUER_BODY_BYTES` (`body.rs`). One fetch at a
//! time; a failed fetch keeps the keys already known.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::DecodingKey;
use jsonwebtoken::jwk::JwkSet;
use parking_lot::RwLock;

use crate::config::AuthConfig;

/// The keys known, and when they were fetched.
#[derive(Default)]
struct Known {
    /// By `kid`; keys without one under the empty string.
    keys: HashMap<String, Arc<DecodingKey>>,
    /// When the keys were last fetched successfully.
    fetched: Option<Instant>,
    /// When a fetch was last tried (successful or not).
    tried: Option<Instant>,
}

/// The JWKS of one issuer.
pub(super) struct Jwks {
    uri: String,
    http: reqwest::Client,
    ttl: Duration,
    min_refetch: Duration,
    known: RwLock<Known>,
    /// Held while a fetch runs: concurrent misses wait for it instead of fetching again.
    fetching: tokio::sync::Mutex<()>,
}

impl Jwks {
    pub(super) fn new(cfg: &AuthConfig) -> Result<Self, String> {
        let timeout = Duration::from_millis(cfg.jwks_timeout_ms);
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // The issuer's keys are public, but a redirect could lead anywhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the JWKS client: {e}"))?;
        Ok(Self {
            uri: cfg.jwks_uri.clone(),
            http,
            ttl: Duration::from_millis(cfg.jwks_ttl_ms),
            min_refetch: Duration::from_millis(cfg.jwks_min_refetch_ms),
            known: RwLock::new(Known::default()),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// The key `kid` names (a token without `kid`: the issuer's only key), fetching the keys
    /// again when they are stale or the key is unknown and the last fetch is old enough.
    pub(super) async fn key(&self, kid: Option<&str>) -> Option<Arc<DecodingKey>> {
        let (found, stale, may_fetch) = self.look(kid);
        if let Some(k) = &found
            && !stale
        {
            return Some(k.clone());
        }
        if !may_fetch && !stale {
            return found;
        }
        let _one = self.fetching.lock().await;
        // Another request may have fetched while this one waited.
        let (again, stale, may_fetch) = self.look(kid);
        if (again.is_some() && !stale) || !may_fetch {
            return again.or(found);
        }
        self.fetch().await;
        self.look(kid).0.or(found)
    }

    /// The key, whether the keys are past their lifetime, and whether a fetch may be tried now.
    fn look(&self, kid: Option<&str>) -> (Option<Arc<DecodingKey>>, bool, bool) {
        let k = self.known.read();
        let found = match kid {
            Some(kid) => k.keys.get(kid).cloned(),
            None if k.keys.len() == 1 => k.keys.values().next().cloned(),
            None => None,
        };
        let stale = k.fetched.is_none_or(|t| t.elapsed() >= self.ttl);
        let may_fetch = k.tried.is_none_or(|t| t.elapsed() >= self.min_refetch);
        (found, stale, may_fetch)
    }

    /// One bounded fetch; on failure the keys known stay.
    async fn fetch(&self) {
        self.known.write().tried = Some(Instant::now());
        match self.download().await {
            Ok(keys) => {
                tracing::debug!(keys = keys.len(), "fetched the issuer's JWKS");
                let mut k = self.known.write();
                k.keys = keys;
                k.fetched = Some(Instant::now());
            }
            Err(why) => {
                tracing::warn!(jwks_uri = %self.uri, error = %why, "the issuer's JWKS could not be fetched; the keys already known stay in use")
            }
        }
    }

    async fn download(&self) -> Result<HashMap<String, Arc<DecodingKey>>, String> {
        let res = self
            .http
            .get(&self.uri)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !res.status().is_success() {
            return Err(format!("HTTP {}", res.status()));
        }
        let body = super::body::read_bounded(res, super::body::MAX_ISSUER_BODY_BYTES).await?;
        let set: JwkSet = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            // A key of a kind this crate cannot use (or a shared secret) is skipped, not fatal.
            if matches!(
                jwk.algorithm,
                jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)
            ) {
                continue;
            }
            match DecodingKey::from_jwk(jwk) {
                Ok(key) => {
                    let kid = jwk.common.key_id.clone().unwrap_or_default();
                    keys.insert(kid, Arc::new(key));
                }
                Err(e) => tracing::debug!(error = %e, "skipped a JWKS key"),
            }
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::body::{MAX_ISSUER_BODY_BYTES, serve};

    /// RFC 7517 appendix A.1's RSA public key.
    const KEY: &str = r#"{"kty":"RSA","alg":"RS256","kid":"2011-04-29","e":"AQAB","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"}"#;

    /// The key of the JWKS served at a test issuer, `padding` spaces after the JSON (valid
    /// JSON whatever its size, so only the byte bound can refuse it).
    async fn key_served_with(padding: usize, chunked: bool) -> Option<Arc<DecodingKey>> {
        let body = format!(r#"{{"keys":[{KEY}]}}{}"#, " ".repeat(padding));
        let base = serve(body, chunked).await;
        let cfg = AuthConfig {
            jwks_uri: format!("{base}/jwks"),
            ..AuthConfig::default()
        };
        Jwks::new(&cfg)
            .expect("a JWKS client")
            .key(Some("2011-04-29"))
            .await
    }

    #[tokio::test]
    async fn a_jwks_larger_than_the_bound_is_not_read() {
        assert!(
            key_served_with(0, false).await.is_some(),
            "a small JWKS is read"
        );
        assert!(
            key_served_with(0, true).await.is_some(),
            "a small chunked JWKS is read"
        );
        // 5 MB: refused from its Content-Length, and while reading when it has none.
        let big = 5 * 1024 * 1024;
        assert!(big > MAX_ISSUER_BODY_BYTES);
        assert!(key_served_with(big, false).await.is_none());
        assert!(key_served_with(big, true).await.is_none());
    }
}
