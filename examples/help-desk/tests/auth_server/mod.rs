//! The authorization server the authorization tests start: `tools/auth/server.mjs`
//! (oauth2-mock-server, pinned and installed by `tools/setup.sh`) on a free loopback port,
//! issuing RS256 JWTs through its JWKS, and help-desk instances that trust it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::support::raw_http;
use crate::support::{Instance, TempDir, ensure_tooling, free_port, repo_root};

/// How long the authorization server may take to start.
const START_LIMIT: Duration = Duration::from_secs(20);
/// How long one exchange with it may take.
const LIMIT: Duration = Duration::from_secs(10);

/// A running `tools/auth/server.mjs`, killed on drop.
pub struct AuthServer {
    child: Child,
    issuer: String,
    port: u16,
}

impl AuthServer {
    pub fn start() -> Self {
        ensure_tooling();
        let mut child = Command::new("node")
            .arg(repo_root().join("tools/auth/server.mjs"))
            .arg("0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("node tools/auth/server.mjs: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let line = match rx.recv_timeout(START_LIMIT) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                panic!("the authorization server did not start within {START_LIMIT:?}: {e}");
            }
        };
        let issuer = line
            .strip_prefix("ready ")
            .unwrap_or_else(|| {
                panic!("unexpected first line from the authorization server: {line}")
            })
            .to_string();
        let port = issuer
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in issuer {issuer}"));
        Self {
            child,
            issuer,
            port,
        }
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn jwks_uri(&self) -> String {
        format!("{}/jwks", self.issuer)
    }

    fn post(&self, path: &str, body: &Value) -> Value {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let host = format!("127.0.0.1:{}", self.port);
        let text = body.to_string();
        let resp = raw_http::send(
            addr,
            "POST",
            path,
            &[("Host", &host), ("Content-Type", "application/json")],
            Some(&text),
            LIMIT,
        );
        assert_eq!(resp.status, 200, "{path}:\n{}", resp.describe());
        resp.json()
    }

    /// A token with `claims` (over `iss`, `iat`, `nbf` and `exp`), valid for `expires_in`
    /// seconds (negative: already expired), signed with the newest published key.
    pub fn token(&self, claims: Value, expires_in: i64) -> String {
        self.post(
            "/control/token",
            &json!({"claims": claims, "expires_in": expires_in}),
        )["access_token"]
            .as_str()
            .expect("access_token")
            .to_string()
    }

    /// The same, signed with a key the JWKS never published.
    pub fn foreign_token(&self, claims: Value) -> String {
        self.post(
            "/control/token",
            &json!({"claims": claims, "expires_in": 3600, "key": "foreign"}),
        )["access_token"]
            .as_str()
            .expect("access_token")
            .to_string()
    }

    /// An opaque (non-JWT) token whose introspection answers `claims`.
    pub fn opaque_token(&self, claims: Value) -> String {
        self.post("/control/opaque", &json!({"claims": claims}))["access_token"]
            .as_str()
            .expect("access_token")
            .to_string()
    }

    /// Its introspection endpoint (RFC 7662).
    pub fn introspection_endpoint(&self) -> String {
        format!("{}/control/introspect", self.issuer)
    }

    /// How many introspection calls it has answered.
    pub fn introspections(&self) -> u64 {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let host = format!("127.0.0.1:{}", self.port);
        let resp = raw_http::send(
            addr,
            "GET",
            "/control/introspections",
            &[("Host", &host)],
            None,
            LIMIT,
        );
        assert_eq!(resp.status, 200, "{}", resp.describe());
        resp.json()["count"].as_u64().expect("count")
    }

    /// A new signing key, published from now on; later tokens carry its `kid`.
    pub fn rotate(&self) -> String {
        self.post("/control/rotate", &json!({}))["kid"]
            .as_str()
            .expect("kid")
            .to_string()
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An unsigned token (`alg: none`) with `claims`.
pub fn unsigned_token(claims: &Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string().as_bytes());
    format!("{header}.{payload}.")
}

/// The `kid` in a token's header.
pub fn kid_of(token: &str) -> String {
    let header = token.split('.').next().unwrap_or_default();
    let bytes = URL_SAFE_NO_PAD.decode(header).unwrap_or_default();
    let v: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    v["kid"].as_str().unwrap_or_default().to_string()
}

/// A port for a help-desk, and its resource URI (the audience its tokens must name).
pub fn resource_for(port: u16) -> String {
    format!("http://127.0.0.1:{port}/mcp")
}

/// The `[auth]` settings of a help-desk of resource URI `resource` trusting `auth`, as
/// environment variables, plus a TOML file in `dir` for the settings that have none (a short
/// refetch interval, so a rotated key is picked up at once).
pub fn auth_env(auth: &AuthServer, resource: &str, dir: &TempDir) -> Vec<(String, String)> {
    let toml = dir.path().join("auth.toml");
    std::fs::write(&toml, "[auth]\njwks_min_refetch_ms = 200\n")
        .unwrap_or_else(|e| panic!("write {}: {e}", toml.display()));
    vec![
        ("FLEETMCP_AUTH_ENABLED".into(), "true".into()),
        ("FLEETMCP_AUTH_ISSUER".into(), auth.issuer().into()),
        ("FLEETMCP_AUTH_RESOURCE".into(), resource.into()),
        ("FLEETMCP_AUTH_JWKS_URI".into(), auth.jwks_uri()),
        (
            "FLEETMCP_CONFIG".into(),
            toml.to_string_lossy().into_owned(),
        ),
    ]
}

/// A help-desk with authorization on, trusting `auth`, with `extra` settings; its resource URI
/// is `resource`, else its own `/mcp` URL.
pub fn desk_with_auth(
    auth: &AuthServer,
    dir: &TempDir,
    resource: Option<&str>,
    extra: &[(&str, &str)],
) -> Instance {
    let port = free_port();
    let own = resource_for(port);
    let env = auth_env(auth, resource.unwrap_or(&own), dir);
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    all.extend_from_slice(extra);
    Instance::start_on(env!("CARGO_BIN_EXE_help-desk"), port, &all)
}
