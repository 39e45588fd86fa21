//! Opaque access tokens, checked by the issuer's token introspection endpoint (RFC 7662):
//! used for a token that is not a JWT, when `auth.introspection_endpoint` is set. Every call is
//! bounded by `auth.introspection_timeout_ms` and its answer by `MAX_ISSUER_BODY_BYTES`
//! (`body.rs`); an active token's answer is kept in the token cache (`cache.rs`) like a
//! verified JWT, so a token is not introspected on every request. An unknown token costs one
//! call each time.

use std::time::Duration;

use serde_json::{Map, Value};

use super::AuthError;
use crate::config::AuthConfig;

pub(super) struct Introspection {
    endpoint: String,
    client_id: String,
    client_secret: Option<String>,
    issuer: String,
    resource: String,
    leeway_s: u64,
    http: reqwest::Client,
}

impl Introspection {
    /// The introspection of `cfg`, or `None` when no endpoint is configured.
    pub(super) fn new(cfg: &AuthConfig) -> Result<Option<Self>, String> {
        if cfg.introspection_endpoint.is_empty() {
            return Ok(None);
        }
        let timeout = Duration::from_millis(cfg.introspection_timeout_ms);
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the introspection client: {e}"))?;
        Ok(Some(Self {
            endpoint: cfg.introspection_endpoint.clone(),
            client_id: cfg.introspection_client_id.clone(),
            client_secret: cfg.introspection_client_secret.clone(),
            issuer: cfg.issuer.clone(),
            resource: cfg.resource.clone(),
            leeway_s: cfg.leeway_secs,
            http,
        }))
    }

    /// The claims of active token `token` issued for this resource, or why not.
    pub(super) async fn claims(&self, token: &str) -> Result<Map<String, Value>, AuthError> {
        let claims = self.ask(token).await?;
        let now = crate::clock::unix_ms() / 1000;
        let exp = claims.get("exp").and_then(Value::as_u64);
        if exp.is_some_and(|e| e + self.leeway_s < now) {
            return Err(AuthError::Invalid("expired"));
        }
        if claims
            .get("nbf")
            .and_then(Value::as_u64)
            .is_some_and(|n| n > now + self.leeway_s)
        {
            return Err(AuthError::Invalid("not yet valid"));
        }
        if claims
            .get("iss")
            .and_then(Value::as_str)
            .is_some_and(|i| i != self.issuer)
        {
            return Err(AuthError::Invalid("issued by another issuer"));
        }
        let for_us = match claims.get("aud") {
            Some(Value::String(a)) => *a == self.resource,
            Some(Value::Array(a)) => a.iter().any(|v| v.as_str() == Some(&self.resource)),
            _ => false,
        };
        if !for_us {
            return Err(AuthError::Invalid("issued for another resource"));
        }
        Ok(claims)
    }

    /// One bounded introspection call; the answer's claims if the token is active.
    async fn ask(&self, token: &str) -> Result<Map<String, Value>, AuthError> {
        let body = format!("token={}&token_type_hint=access_token", form_encode(token));
        let mut req = self
            .http
            .post(&self.endpoint)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body);
        if !self.client_id.is_empty() {
            req = req.basic_auth(&self.client_id, self.client_secret.as_deref());
        }
        let answer = async {
            let res = req.send().await.map_err(|e| e.to_string())?;
            if !res.status().is_success() {
                return Err(format!("HTTP {}", res.status()));
            }
            let bytes = super::body::read_bounded(res, super::body::MAX_ISSUER_BODY_BYTES).await?;
            serde_json::from_slice::<Map<String, Value>>(&bytes).map_err(|e| e.to_string())
        }
        .await;
        let claims = answer.map_err(|why| {
            tracing::warn!(endpoint = %self.endpoint, error = %why, "token introspection failed");
            AuthError::Invalid("could not be introspected")
        })?;
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(AuthError::Invalid("inactive"));
        }
        Ok(claims)
    }
}

/// `application/x-www-form-urlencoded` for one value: unreserved characters as they are, the
/// rest percent-encoded.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_percent_encoded() {
        assert_eq!(form_encode("a.b-c_d~e"), "a.b-c_d~e");
        assert_eq!(form_encode("a+b/c=d &é"), "a%2Bb%2Fc%3Dd%20%26%C3%A9");
    }
}

#[cfg(test)]
mod bounded {
    use super::*;
    use crate::auth::body::{MAX_ISSUER_BODY_BYTES, serve};

    /// What an introspection endpoint answering "active" with `padding` spaces after the JSON
    /// (valid JSON whatever its size) makes of an opaque token.
    async fn claims_with(padding: usize, chunked: bool) -> Result<Map<String, Value>, AuthError> {
        let resource = "http://127.0.0.1/mcp";
        let body = format!(
            r#"{{"active":true,"aud":"{resource}","sub":"a"}}{}"#,
            " ".repeat(padding)
        );
        let base = serve(body, chunked).await;
        let cfg = AuthConfig {
            resource: resource.into(),
            introspection_endpoint: format!("{base}/introspect"),
            ..AuthConfig::default()
        };
        let i = Introspection::new(&cfg)
            .expect("a client")
            .expect("an endpoint");
        i.claims("opaque").await
    }

    #[tokio::test]
    async fn an_introspection_answer_larger_than_the_bound_refuses_the_token() {
        assert!(
            claims_with(0, false).await.is_ok(),
            "a small answer is read"
        );
        assert!(
            claims_with(0, true).await.is_ok(),
            "a small chunked answer is read"
        );
        let big = 5 * 1024 * 1024;
        assert!(big > MAX_ISSUER_BODY_BYTES);
        let refused = Err(AuthError::Invalid("could not be introspected"));
        assert_eq!(claims_with(big, false).await, refused);
        assert_eq!(claims_with(big, true).await, refused);
    }
}
