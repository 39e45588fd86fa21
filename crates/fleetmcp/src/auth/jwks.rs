//! The issuer's signing keys (JWKS): fetched once, cached, fetched again when they are old or
//! a token names a key not in them (at most once per `auth.jwks_min_refetch_ms`, so a flood of
//! tokens with made-up `kid`s cannot hammer the issuer), every fetch bounded by
//! `auth.jwks_timeout_ms`. One fetch at a time; a failed fetch keeps the keys already known.

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
        let body = res.bytes().await.map_err(|e| e.to_string())?;
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
