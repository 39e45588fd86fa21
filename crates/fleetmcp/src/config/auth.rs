//! `[auth]`: this server as an OAuth 2.1 resource server, and the algorithms a token may be
//! signed with. Checked only when switched on, but then in full at start: a typo in an issuer
//! or a JWKS URL would otherwise surface as every request refused, long after the deploy.

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid_value};

/// Authorization (`[auth]`): this server as an OAuth 2.1 resource server (MCP authorization,
/// RFC 9728 metadata, RFC 8707 audience). Off unless `enabled`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// `FLEETMCP_AUTH_ENABLED`: require a bearer token on every MCP request.
    pub enabled: bool,
    /// `FLEETMCP_AUTH_ISSUER`: the `iss` every token must carry.
    pub issuer: String,
    /// `FLEETMCP_AUTH_RESOURCE`: this server's resource URI (e.g. `https://mcp.example.com/mcp`),
    /// the `aud` every token must carry (RFC 8707) and the `resource` of the metadata.
    pub resource: String,
    /// `FLEETMCP_AUTH_JWKS_URI`: where the issuer publishes its signing keys.
    pub jwks_uri: String,
    /// The authorization servers named in the metadata (unset: the issuer).
    pub authorization_servers: Vec<String>,
    /// Signature algorithms accepted (public-key ones only; `none` never is).
    pub algorithms: Vec<String>,
    /// Scopes every request needs, whatever it calls (besides a tool's own).
    pub required_scopes: Vec<String>,
    /// `scopes_supported` of the metadata (unset: every scope the catalog declares, plus
    /// `required_scopes`).
    pub scopes_supported: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// Bound on one JWKS fetch.
    pub jwks_timeout_ms: u64,
    /// How long fetched keys are used before they are fetched again.
    pub jwks_ttl_ms: u64,
    /// Least time between two fetches caused by a token with an unknown `kid`, so a flood of
    /// forged kids cannot hammer the issuer.
    pub jwks_min_refetch_ms: u64,
    /// `FLEETMCP_AUTH_INTROSPECTION_ENDPOINT`: the issuer's token introspection endpoint
    /// (RFC 7662), for opaque (non-JWT) tokens. Unset: only JWTs are accepted.
    pub introspection_endpoint: String,
    /// `FLEETMCP_AUTH_INTROSPECTION_CLIENT_ID`: this server's client id at the endpoint (HTTP
    /// Basic; unset: no client authentication).
    pub introspection_client_id: String,
    /// `FLEETMCP_AUTH_INTROSPECTION_CLIENT_SECRET`: its secret.
    pub introspection_client_secret: Option<String>,
    /// Bound on one introspection call.
    pub introspection_timeout_ms: u64,
    /// How long a checked token (a verified JWT, an introspected opaque token) is accepted
    /// again without being checked in full (never past its `exp`).
    pub token_cache_ttl_ms: u64,
    /// Most checked tokens kept (0: every request's token is checked in full).
    pub token_cache_max: usize,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            issuer: String::new(),
            resource: String::new(),
            jwks_uri: String::new(),
            authorization_servers: Vec::new(),
            algorithms: [
                "RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA",
            ]
            .map(String::from)
            .to_vec(),
            required_scopes: Vec::new(),
            scopes_supported: Vec::new(),
            leeway_secs: 30,
            jwks_timeout_ms: 3000,
            jwks_ttl_ms: 600_000,
            jwks_min_refetch_ms: 10_000,
            introspection_endpoint: String::new(),
            introspection_client_id: String::new(),
            introspection_client_secret: None,
            introspection_timeout_ms: 3000,
            token_cache_ttl_ms: 60_000,
            token_cache_max: 10_000,
        }
    }
}

/// The algorithms `[auth] algorithms` may name: signatures by a key the issuer publishes.
/// Shared-secret (`HS*`) algorithms are left out: a JWKS public key must never be usable as
/// an HMAC secret.
pub const AUTH_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

impl AuthConfig {
    /// Checked only when enabled: the URLs parse, the algorithms are allowed, the bounds on
    /// calls and clock skew are sane.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        self.check_urls()?;
        self.check_algorithms()?;
        self.check_introspection()?;
        self.check_timing()
    }

    /// The issuer, this server's resource URI, the JWKS and the named authorization servers.
    fn check_urls(&self) -> Result<(), ConfigError> {
        if !is_url(&self.issuer) {
            return invalid_value(
                "auth.issuer (FLEETMCP_AUTH_ISSUER)",
                self.issuer.clone(),
                "expected the issuer's http(s) URL",
            );
        }
        if !is_url(&self.resource) || self.resource.contains('#') {
            return invalid_value(
                "auth.resource (FLEETMCP_AUTH_RESOURCE)",
                self.resource.clone(),
                "expected this server's http(s) resource URI, without a fragment",
            );
        }
        if !is_url(&self.jwks_uri) {
            return invalid_value(
                "auth.jwks_uri (FLEETMCP_AUTH_JWKS_URI)",
                self.jwks_uri.clone(),
                "expected the http(s) URL of the issuer's JWKS",
            );
        }
        if let Some(bad) = self.authorization_servers.iter().find(|s| !is_url(s)) {
            return invalid_value(
                "auth.authorization_servers",
                bad.clone(),
                "expected http(s) URLs",
            );
        }
        Ok(())
    }

    /// At least one algorithm, each of [`AUTH_ALGORITHMS`].
    fn check_algorithms(&self) -> Result<(), ConfigError> {
        if self.algorithms.is_empty() {
            return invalid_value(
                "auth.algorithms",
                "[]".into(),
                "name at least one algorithm",
            );
        }
        if let Some(bad) = self
            .algorithms
            .iter()
            .find(|alg| !AUTH_ALGORITHMS.contains(&alg.as_str()))
        {
            return invalid_value(
                "auth.algorithms",
                bad.clone(),
                "expected public-key algorithms: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA",
            );
        }
        Ok(())
    }

    /// The introspection endpoint, when set, and the bound on one call to it.
    fn check_introspection(&self) -> Result<(), ConfigError> {
        if !self.introspection_endpoint.is_empty() && !is_url(&self.introspection_endpoint) {
            return invalid_value(
                "auth.introspection_endpoint (FLEETMCP_AUTH_INTROSPECTION_ENDPOINT)",
                self.introspection_endpoint.clone(),
                "expected the http(s) URL of the issuer's introspection endpoint",
            );
        }
        if self.introspection_timeout_ms < 100 {
            return invalid_value(
                "auth.introspection_timeout_ms",
                self.introspection_timeout_ms.to_string(),
                "must be at least 100",
            );
        }
        Ok(())
    }

    /// The clock skew allowed on tokens and the bounds on fetching the JWKS.
    fn check_timing(&self) -> Result<(), ConfigError> {
        if self.leeway_secs > 300 {
            return invalid_value(
                "auth.leeway_secs",
                self.leeway_secs.to_string(),
                "must be at most 300",
            );
        }
        if self.jwks_timeout_ms < 100 || self.jwks_ttl_ms < 1000 {
            return invalid_value(
                "auth.jwks_timeout_ms",
                self.jwks_timeout_ms.to_string(),
                "must be at least 100 (and auth.jwks_ttl_ms at least 1000)",
            );
        }
        Ok(())
    }
}

/// An absolute `http` or `https` URL.
fn is_url(v: &str) -> bool {
    reqwest::Url::parse(v).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn auth_is_off_by_default_and_checked_once_on() {
        let cfg = Config::from_sources(None, Vec::<(String, String)>::new()).unwrap();
        assert!(!cfg.auth.enabled);
        let on = [
            ("FLEETMCP_AUTH_ENABLED", "true"),
            ("FLEETMCP_AUTH_ISSUER", "https://as.example.com"),
            ("FLEETMCP_AUTH_RESOURCE", "https://mcp.example.com/mcp"),
            ("FLEETMCP_AUTH_JWKS_URI", "https://as.example.com/jwks"),
        ];
        let cfg = Config::from_sources(None, on).unwrap();
        assert!(cfg.auth.enabled);
        assert_eq!(cfg.auth.resource, "https://mcp.example.com/mcp");
        // Each required value missing, or not a URL, stops the start naming it.
        for i in 1..on.len() {
            let mut env = on.to_vec();
            env[i].1 = "not a url";
            let err = Config::from_sources(None, env).unwrap_err().to_string();
            assert!(err.contains(on[i].0), "{err}");
        }
        let err = Config::from_sources(None, [("FLEETMCP_AUTH_ENABLED", "maybe")]).unwrap_err();
        assert!(err.to_string().contains("FLEETMCP_AUTH_ENABLED"), "{err}");
    }

    #[test]
    fn shared_secret_algorithms_are_refused() {
        let mut cfg = Config {
            auth: AuthConfig {
                enabled: true,
                issuer: "https://as".into(),
                resource: "https://mcp/mcp".into(),
                jwks_uri: "https://as/jwks".into(),
                algorithms: vec!["RS256".into(), "HS256".into()],
                ..AuthConfig::default()
            },
            ..Config::default()
        };
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("auth.algorithms") && err.contains("HS256"),
            "{err}"
        );
        cfg.auth.algorithms = vec!["none".into()];
        assert!(cfg.validate().is_err());
        cfg.auth.algorithms = vec!["ES256".into()];
        assert!(cfg.validate().is_ok());
    }
}
