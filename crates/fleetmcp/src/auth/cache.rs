//! Tokens already checked: a token is immutable, so once its signature and claims (or its
//! introspection) checked out, the next request with the same token needs only a hash and a
//! lookup instead of a signature verification (tens of µs for RS256, more than a whole call
//! costs otherwise). Keyed by SHA-256 of the token (the token itself is not kept); an entry
//! lasts until the token's `exp` or `auth.token_cache_ttl_ms`, whichever is first, so a key
//! removed from the JWKS or a revoked opaque token stops working within that time; at most
//! `auth.token_cache_max` entries (0: every request is verified in full).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use sha2::{Digest, Sha256};

use super::Principal;

/// The cache key of a token.
pub(super) type Key = [u8; 32];

pub(super) struct TokenCache {
    max: usize,
    ttl: Duration,
    entries: RwLock<HashMap<Key, (Arc<Principal>, Instant)>>,
}

impl TokenCache {
    pub(super) fn new(max: usize, ttl: Duration) -> Self {
        Self {
            max,
            ttl,
            entries: RwLock::new(HashMap::new()),
        }
    }

    pub(super) fn key(token: &str) -> Key {
        let mut key = [0u8; 32];
        key.copy_from_slice(&Sha256::digest(token.as_bytes()));
        key
    }

    /// The principal of a token checked before, while its entry lasts.
    pub(super) fn get(&self, key: &Key) -> Option<Arc<Principal>> {
        if self.max == 0 {
            return None;
        }
        let entries = self.entries.read();
        let (p, until) = entries.get(key)?;
        (*until > Instant::now()).then(|| p.clone())
    }

    /// Keeps a checked token's principal; `exp` is the token's expiry (Unix seconds), if any.
    pub(super) fn put(&self, key: Key, principal: Arc<Principal>, exp: Option<u64>) {
        if self.max == 0 {
            return;
        }
        let mut life = self.ttl;
        if let Some(exp) = exp {
            let now = crate::clock::unix_ms() / 1000;
            life = life.min(Duration::from_secs(exp.saturating_sub(now)));
        }
        let now = Instant::now();
        let mut entries = self.entries.write();
        if entries.len() >= self.max {
            entries.retain(|_, (_, until)| *until > now);
            if entries.len() >= self.max {
                entries.clear();
            }
        }
        entries.insert(key, (principal, now + life));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    fn principal(sub: &str) -> Arc<Principal> {
        let Some(claims) = json!({"iss": "https://as", "sub": sub})
            .as_object()
            .cloned()
        else {
            return Arc::new(Principal::from_claims(Map::new(), "t"));
        };
        Arc::new(Principal::from_claims(claims, "t"))
    }

    #[test]
    fn a_checked_token_is_found_until_it_expires_and_the_cache_stays_bounded() {
        let cache = TokenCache::new(2, Duration::from_secs(60));
        let far = crate::clock::unix_ms() / 1000 + 3600;
        let (a, b, c) = (
            TokenCache::key("a"),
            TokenCache::key("b"),
            TokenCache::key("c"),
        );
        cache.put(a, principal("a"), Some(far));
        assert_eq!(
            cache.get(&a).map(|p| p.subject().map(String::from)),
            Some(Some("a".into()))
        );
        assert!(cache.get(&b).is_none());
        // Already expired: never served from the cache.
        cache.put(b, principal("b"), Some(1));
        assert!(cache.get(&b).is_none());
        // Full: expired entries go first, then everything; the newest is always kept.
        cache.put(c, principal("c"), None);
        assert!(cache.get(&c).is_some());
        assert!(cache.entries.read().len() <= 2);
        let off = TokenCache::new(0, Duration::from_secs(60));
        off.put(a, principal("a"), None);
        assert!(off.get(&a).is_none());
    }
}
