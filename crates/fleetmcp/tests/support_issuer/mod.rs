//! An authorization server for tests that need principals: an introspection endpoint
//! (RFC 7662) on loopback, for which the opaque token `tok-<name>` is active for subject
//! `<name>` (so a test names its principals freely), and the variables that point a server at
//! it. Used by `task_principals.rs` and by help-desk's fault harness.

use serde_json::json;

/// The resource URI every token is issued for (`aud`).
pub const RESOURCE: &str = "http://127.0.0.1/mcp";

/// Starts the introspection endpoint on loopback, on the current runtime (it lives as long as
/// the runtime); its base URL, the issuer. Active tokens carry `scope` when given.
pub async fn start(scope: Option<&'static str>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the issuer");
    let base = format!(
        "http://{}",
        listener.local_addr().expect("the issuer's address")
    );
    let app = axum::Router::new().route(
        "/introspect",
        axum::routing::post(move |body: String| async move {
            // `token=<token>&token_type_hint=access_token`; test tokens need no decoding.
            let token = body
                .split('&')
                .find_map(|kv| kv.strip_prefix("token="))
                .unwrap_or("");
            axum::Json(match token.strip_prefix("tok-") {
                Some(sub) => {
                    let mut v = json!({"active": true, "aud": RESOURCE, "sub": sub});
                    if let Some(scope) = scope {
                        v["scope"] = json!(scope);
                    }
                    v
                }
                None => json!({"active": false}),
            })
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// The variables that turn authorization on against `issuer`.
pub fn env(issuer: &str) -> Vec<(&'static str, String)> {
    vec![
        ("FLEETMCP_AUTH_ENABLED", "true".to_string()),
        ("FLEETMCP_AUTH_ISSUER", issuer.to_string()),
        ("FLEETMCP_AUTH_RESOURCE", RESOURCE.to_string()),
        ("FLEETMCP_AUTH_JWKS_URI", format!("{issuer}/jwks")),
        (
            "FLEETMCP_AUTH_INTROSPECTION_ENDPOINT",
            format!("{issuer}/introspect"),
        ),
    ]
}
