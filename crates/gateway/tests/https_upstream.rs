//! An `https://` upstream (`FLEETMCP_UPSTREAM_URL`): our `everything` over Streamable HTTP
//! behind nginx terminating TLS with a certificate of a private CA made by `openssl` here, the
//! gateway trusting that CA through `FLEETMCP_UPSTREAM_CA_FILE`. Certificates are verified: the
//! same server is refused without the CA, and under a name its certificate does not carry, and
//! `/readyz` says why.
//!
//! Needs `openssl`, nginx and `cargo build -p everything`.

#[path = "../../../examples/e2e_support.rs"]
mod support;

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::json;
use support::{Instance, Nginx, TempDir, free_port};

/// A private CA and a server certificate it signed, for `IP:127.0.0.1` only.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new() -> Self {
        let dir = TempDir::new("upstream-pki");
        let d = dir.path();
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write the extensions");
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        openssl(
            d,
            &[
                &["req", "-x509", "-nodes"],
                &ec[..],
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=fleetmcp test CA",
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ],
            ]
            .concat(),
        );
        openssl(
            d,
            &[
                &["req", "-nodes"],
                &ec[..],
                &[
                    "-keyout",
                    "server.key",
                    "-out",
                    "server.csr",
                    "-subj",
                    "/CN=127.0.0.1",
                ],
            ]
            .concat(),
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        );
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// nginx on `port` terminating TLS with `pki`'s server certificate, in front of `upstream`.
fn tls_front(pki: &Pki, upstream: u16, port: u16) -> Nginx {
    let plain = format!("    listen 127.0.0.1:{port};");
    let conf = Nginx::fleet_conf(&[upstream], port);
    assert!(conf.contains(&plain), "{conf}");
    let tls = format!(
        "    listen 127.0.0.1:{port} ssl;\n    ssl_certificate {};\n    ssl_certificate_key {};",
        pki.path("server.pem").display(),
        pki.path("server.key").display()
    );
    Nginx::start(&conf.replace(&plain, &tls), port)
}

/// A gateway whose upstream is `url`, trusting `ca` if given.
fn https_gateway(url: &str, ca: Option<&Path>) -> Instance {
    let ca = ca.map(|p| p.display().to_string()).unwrap_or_default();
    gateway(&[
        ("FLEETMCP_UPSTREAM_COMMAND", ""),
        ("FLEETMCP_UPSTREAM_URL", url),
        ("FLEETMCP_UPSTREAM_CA_FILE", &ca),
    ])
}

/// `/readyz` once it answers `503` naming `why`; fails the test after 20 s.
fn unready_because(gw: &Instance, why: &str) {
    let start = std::time::Instant::now();
    loop {
        let ready = http(gw.port(), "GET", "/readyz", &[], None);
        if ready.status == 503 && ready.body.contains(why) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "/readyz never said {why:?}:\n{}\n{}",
            ready.describe(),
            gw.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_https_upstream_signed_by_the_configured_ca_serves_sessions() {
    let pki = Pki::new();
    let upstream = everything_over_http(&[]);
    let port = free_port();
    let _front = tls_front(&pki, upstream.port(), port);
    let url = format!("https://127.0.0.1:{port}/mcp");
    let mut gw = https_gateway(&url, Some(&pki.path("ca.pem")));
    gw.wait_ready(Duration::from_secs(20));
    let sid = open_session(gw.port());
    let resp = call(gw.port(), &sid, "greet", json!({"name": "over TLS"}));
    assert_eq!(tool_text(&resp), "Hello, over TLS!");
    // A streamed answer (progress, then the result) comes through TLS too.
    let msg = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p"}}});
    let resp = post(gw.port(), Some(&sid), &msg);
    assert_eq!(resp.status, 200, "{}", resp.describe());
    assert_eq!(
        resp.body.matches("notifications/progress").count(),
        3,
        "{}",
        resp.describe()
    );
    assert!(
        resp.body.contains("Progress test completed"),
        "{}",
        resp.describe()
    );
    gw.assert_no_panic_logged();
}

#[test]
fn an_https_upstream_is_refused_without_its_ca_or_under_another_name() {
    let pki = Pki::new();
    let upstream = everything_over_http(&[]);
    let port = free_port();
    let _front = tls_front(&pki, upstream.port(), port);

    // The system's roots do not know the private CA.
    let url = format!("https://127.0.0.1:{port}/mcp");
    let gw = https_gateway(&url, None);
    unready_because(&gw, "UnknownIssuer");
    // A client's initialize gets the upstream's failure as its error; no session opens.
    let resp = post(gw.port(), None, &initialize_message());
    let error = &resp.json()["error"];
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("invalid peer certificate: UnknownIssuer")),
        "{}",
        resp.describe()
    );
    assert!(
        resp.header("mcp-session-id").is_none(),
        "{}",
        resp.describe()
    );

    // Trusted, but `localhost` is not a name the certificate carries (only IP 127.0.0.1).
    let url = format!("https://localhost:{port}/mcp");
    let gw = https_gateway(&url, Some(&pki.path("ca.pem")));
    unready_because(&gw, "certificate not valid for name");

    // A CA file that holds no certificate stops the gateway at start.
    let empty = pki.path("empty.pem");
    std::fs::write(&empty, "").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_fleetmcp-gateway"))
        .env("FLEETMCP_UPSTREAM_URL", &url)
        .env("FLEETMCP_UPSTREAM_CA_FILE", &empty)
        .env("FLEETMCP_UPSTREAM_COMMAND", "")
        .output()
        .expect("the gateway runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no PEM certificate"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
