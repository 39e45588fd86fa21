//! Two of the seams distributed mode plugs into, holders and relay, with stand-in
//! implementations: a request for a session that the holders seam says a live peer holds
//! reaches the relay seam exactly as received (nothing parsed), for POST, GET, DELETE and the
//! 2024-11-05 `/message` POST; a session held here never does.

use std::sync::Arc;

use async_trait::async_trait;
use axum::response::Response;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::session::{Holder, Holders, MemorySessionStore, SessionRecord, SessionStore};
use crate::transport::{Relay, RelayRequest, Relayed};
use crate::{Config, Server};

const SECRET: &str = "seams-test-secret-0123456789abcdef";

/// Says every stored session belongs to the live peer `holder-a`.
struct PeerHoldsAll;

#[async_trait]
impl Holders for PeerHoldsAll {
    async fn holder(&self, _record: &SessionRecord) -> Holder {
        Holder::Peer("holder-a".into())
    }
}

/// Records what it is handed and answers `299 relayed to <holder>`.
#[derive(Default)]
struct Recorder(Mutex<Vec<(String, RelayRequest)>>);

#[async_trait]
impl Relay for Recorder {
    async fn forward(&self, holder: &str, req: RelayRequest) -> Relayed {
        self.0.lock().push((holder.to_string(), req));
        let mut res = Response::new(axum::body::Body::from(format!("relayed to {holder}")));
        *res.status_mut() = http::StatusCode::from_u16(299).unwrap_or(http::StatusCode::OK);
        Relayed::Answered(res)
    }
}

fn config() -> Config {
    Config {
        session_secret: Some(SECRET.into()),
        ..Config::default()
    }
}

/// Serves `server` on a free loopback port until the test ends; its base URL.
async fn serve(server: Server) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let running = server.start().await.unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, running.router()).await;
    });
    url
}

async fn initialize(client: &reqwest::Client, url: &str) -> String {
    let res = client
        .post(format!("{url}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn requests_for_a_session_held_elsewhere_reach_the_relay_unparsed() {
    let store = Arc::new(MemorySessionStore::new(std::time::Duration::from_secs(60)));
    // The "holder": an instance without seams, sharing the store.
    let holder = serve(
        Server::builder("holder", "1")
            .config(config())
            .session_store(store.clone())
            .build(),
    )
    .await;
    let relay = Arc::new(Recorder::default());
    let here = serve(
        Server::builder("here", "1")
            .config(config())
            .session_store(store.clone())
            .seams(Arc::new(PeerHoldsAll), relay.clone())
            .build(),
    )
    .await;
    let client = reqwest::Client::new();
    let sid = initialize(&client, &holder).await;
    assert!(store.exists(&sid).await.unwrap());

    // POST: the body is not even JSON; it is relayed as bytes, before any parse.
    let body = "{this is not json";
    let res = client
        .post(format!("{here}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &sid)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 299);
    assert_eq!(res.text().await.unwrap(), "relayed to holder-a");
    // GET and DELETE too, and the 2024-11-05 POST, whose session is named in the query.
    let res = client
        .get(format!("{here}/mcp"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 299);
    let res = client
        .delete(format!("{here}/mcp"))
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 299);
    // A 2024-11-05 session (`/message` serves only those), opened on the holder.
    let mut stream = client
        .get(format!("{holder}/sse"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut announced = String::new();
    while !announced.contains("\n\n") {
        let chunk = stream.chunk().await.unwrap().expect("the endpoint event");
        announced.push_str(&String::from_utf8_lossy(&chunk));
    }
    let legacy = announced
        .split("sessionId=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("an endpoint naming the session")
        .to_string();
    let res = client
        .post(format!("{holder}/message?sessionId={legacy}"))
        .header("content-type", "application/json")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let res = client
        .post(format!("{here}/message?sessionId={legacy}"))
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 299);

    let seen = std::mem::take(&mut *relay.0.lock());
    let summary: Vec<(String, String, String, String)> = seen
        .iter()
        .map(|(holder, r)| {
            (
                holder.clone(),
                r.method.to_string(),
                r.uri.to_string(),
                String::from_utf8_lossy(&r.body).into_owned(),
            )
        })
        .collect();
    let h = "holder-a".to_string();
    // A pinned session's request goes to the instance that minted its id, where its stream is.
    let holder = crate::session::SessionSealer::new(SECRET.as_bytes())
        .open(&legacy)
        .expect("the id opens")
        .holder;
    assert_eq!(
        summary,
        vec![
            (h.clone(), "POST".into(), "/mcp".into(), body.into()),
            (h.clone(), "GET".into(), "/mcp".into(), String::new()),
            (h.clone(), "DELETE".into(), "/mcp".into(), String::new()),
            (
                holder,
                "POST".into(),
                format!("/message?sessionId={legacy}"),
                r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#.into()
            ),
        ]
    );
    assert_eq!(
        seen[0].1.headers["mcp-session-id"].to_str().unwrap(),
        sid,
        "headers travel as received"
    );
    // The relayed DELETE did not end the session here or in the store: the holder decides.
    assert!(store.exists(&sid).await.unwrap());
}

#[tokio::test]
async fn a_session_held_here_never_reaches_the_relay() {
    let relay = Arc::new(Recorder::default());
    let here = serve(
        Server::builder("here", "1")
            .config(config())
            .seams(Arc::new(PeerHoldsAll), relay.clone())
            .build(),
    )
    .await;
    let client = reqwest::Client::new();
    let sid = initialize(&client, &here).await;
    let res = client
        .post(format!("{here}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["result"], json!({}));
    // A forged id is refused here, before any store read or relay.
    let res = client
        .post(format!("{here}/mcp"))
        .header("content-type", "application/json")
        .header("mcp-session-id", "forged")
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    assert!(relay.0.lock().is_empty(), "nothing was relayed");
}
