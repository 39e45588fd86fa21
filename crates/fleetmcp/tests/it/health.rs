//! `/healthz` and `/readyz` (ha-contract.md §14).

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support::*;

/// The reference `toolsHash`: lower-case hex SHA-256 of the sorted names joined with `,`.
fn expected_tools_hash(names: &[&str]) -> String {
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    Sha256::digest(sorted.join(",").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn get_json(url: &str) -> (u16, Value) {
    let res = within("health GET", http().get(url).send()).await.unwrap();
    let status = res.status().as_u16();
    assert_content_type(&res, "application/json");
    (status, res.json().await.unwrap())
}

async fn server_with_tools(names: &[&str]) -> TestServer {
    let mut b = fleetmcp::Server::builder("hash", "1.0.0");
    for n in names {
        b = b.tool(
            fleetmcp::tool(*n)
                .description("d")
                .handler(|_: fleetmcp::NoArgs, _ctx| async { Ok("x") }),
        );
    }
    serve(b, config_with(SECRET, |_| {})).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_has_the_contract_shape() {
    let srv = start().await;
    for path in ["/healthz", "/health"] {
        let (status, v) = get_json(&format!("{}{path}", srv.base)).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(v["status"], "ok");
        assert_eq!(v["server"]["name"], "fleetmcp-it");
        assert_eq!(v["server"]["version"], "9.9.9");
        assert_eq!(v["runtime"]["runtime"], "rust");
        assert_eq!(v["runtime"]["deployment"], "standalone");
        assert_eq!(v["runtime"]["env"], "development");
        assert!(v["runtime"]["platform"].is_string());
        assert!(v["uptime"].as_f64().unwrap() >= 0.0, "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reports_the_reference_tools_hash() {
    let srv = start().await;
    let (status, v) = get_json(&format!("{}/readyz", srv.base)).await;
    assert_eq!(status, 200);
    assert_eq!(v["status"], "ready");
    assert!(v["totalLatencyMs"].is_u64(), "{v}");
    let hash = v["catalog"]["toolsHash"].as_str().unwrap();
    assert_eq!(hash, expected_tools_hash(FIXTURE_TOOLS));
    assert_eq!(hash.len(), 64);
    assert!(
        hash.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_eq!(v["catalog"]["toolCount"], FIXTURE_TOOLS.len());
    assert_eq!(v["catalog"]["resourceCount"], 0);
    assert_eq!(v["catalog"]["promptCount"], 0);
    assert_eq!(v["probes"]["session-store"]["status"], "healthy");

    // A runtime change shows in the hash.
    srv.handle
        .add_tool(
            fleetmcp::tool("zzz")
                .description("d")
                .handler(|_: fleetmcp::NoArgs, _ctx| async { Ok("x") }),
        )
        .await
        .expect("no state needed");
    let (_, v) = get_json(&format!("{}/readyz", srv.base)).await;
    let mut names = FIXTURE_TOOLS.to_vec();
    names.push("zzz");
    assert_eq!(v["catalog"]["toolsHash"], expected_tools_hash(&names));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_hash_does_not_depend_on_declaration_order() {
    let a = server_with_tools(&["beta", "alpha", "gamma"]).await;
    let b = server_with_tools(&["gamma", "beta", "alpha"]).await;
    let c = server_with_tools(&["alpha", "beta"]).await;
    let (_, va) = get_json(&format!("{}/readyz", a.base)).await;
    let (_, vb) = get_json(&format!("{}/readyz", b.base)).await;
    let (_, vc) = get_json(&format!("{}/readyz", c.base)).await;
    assert_eq!(va["catalog"]["toolsHash"], vb["catalog"]["toolsHash"]);
    assert_eq!(
        va["catalog"]["toolsHash"],
        expected_tools_hash(&["alpha", "beta", "gamma"])
    );
    // Computed independently: `printf alpha,beta,gamma | sha256sum`.
    assert_eq!(
        va["catalog"]["toolsHash"],
        "5eb44ddd90abcf863056fcc7b344424553a7c159909118b850196bb51598cad1"
    );
    assert_ne!(va["catalog"]["toolsHash"], vc["catalog"]["toolsHash"]);
}
