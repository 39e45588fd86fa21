//! `ServerBuilder::upstream`: a session served by an upstream MCP server (here a fake one on
//! channels, which records everything it receives) instead of the catalog. The client's
//! `initialize` is the upstream's; requests go up under ids of the server's own and come back
//! unchanged; progress goes on the request's stream; the upstream's request to the client is
//! asked on that stream and answered back up; a cancelled request is cancelled upstream; an
//! unsolicited notification reaches the GET stream; the session's end drops the link; and an
//! instance that did not open the session starts a new upstream for it, initialized from the
//! stored session.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fleetmcp::internals::{MemorySessionStore, SessionStore};
use fleetmcp::{MessageReceiver, MessageSender, Server, Upstream, UpstreamLink};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::support::*;

/// A fake upstream: what it received, per connection, and whether each link was dropped.
#[derive(Clone, Default)]
struct Fake {
    seen: Arc<Mutex<Vec<Vec<Value>>>>,
    dropped: Arc<Mutex<Vec<bool>>>,
}

impl Fake {
    fn received(&self, connection: usize) -> Vec<Value> {
        self.seen
            .lock()
            .get(connection)
            .cloned()
            .unwrap_or_default()
    }
    fn connections(&self) -> usize {
        self.seen.lock().len()
    }
}

#[async_trait::async_trait]
impl Upstream for Fake {
    async fn connect(&self, _session: &str, _key: &str) -> Result<UpstreamLink, String> {
        let (to_upstream, rx) = UpstreamLink::channel(16, 1 << 20);
        let (tx, from_upstream) = UpstreamLink::channel(16, 1 << 20);
        let n = {
            let mut seen = self.seen.lock();
            seen.push(Vec::new());
            self.dropped.lock().push(false);
            seen.len() - 1
        };
        tokio::spawn(serve_fake(self.clone(), n, rx, tx));
        Ok(UpstreamLink {
            to_upstream,
            from_upstream,
        })
    }
}

fn text_result(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// The fake server: records each message, and answers as its tool names say.
async fn serve_fake(fake: Fake, n: usize, mut rx: MessageReceiver, tx: MessageSender) {
    let send = |v: Value| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Bytes::from(v.to_string())).await;
        }
    };
    // The call waiting for the client's answer to our sampling request.
    let mut asking: Option<Value> = None;
    while let Some(bytes) = rx.recv().await {
        let msg: Value = serde_json::from_slice(&bytes).expect("the gateway sends JSON");
        fake.seen.lock()[n].push(msg.clone());
        let id = msg["id"].clone();
        match (msg["method"].as_str(), msg["params"]["name"].as_str()) {
            (Some("initialize"), _) => {
                let version = msg["params"]["protocolVersion"].clone();
                let result = json!({"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "fake-upstream", "version": "9"}});
                send(json!({"jsonrpc": "2.0", "id": id, "result": result})).await;
            }
            (Some("tools/call"), Some("echo")) => {
                if let Some(token) = msg.pointer("/params/_meta/progressToken") {
                    send(json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 1, "total": 2}})).await;
                }
                let text = json!({"upstreamId": id, "arguments": msg["params"]["arguments"]});
                send(json!({"jsonrpc": "2.0", "id": id, "result": text_result(text.to_string())}))
                    .await;
            }
            (Some("tools/call"), Some("fail")) => {
                let error =
                    json!({"code": -32099, "message": "upstream says no", "data": {"why": "test"}});
                send(json!({"jsonrpc": "2.0", "id": id, "error": error})).await;
            }
            (Some("tools/call"), Some("ask")) => {
                asking = Some(id);
                let params = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5});
                send(json!({"jsonrpc": "2.0", "id": "up-1", "method": "sampling/createMessage", "params": params})).await;
            }
            (Some("tools/call"), Some("notify")) => {
                send(json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "fake://x"}})).await;
                send(json!({"jsonrpc": "2.0", "id": id, "result": text_result("notified".into())}))
                    .await;
            }
            (None, _) if id == json!("up-1") => {
                if let Some(call) = asking.take() {
                    let answer = msg["result"]["content"]["text"]
                        .as_str()
                        .unwrap_or("?")
                        .to_string();
                    send(json!({"jsonrpc": "2.0", "id": call, "result": text_result(format!("sampled: {answer}"))})).await;
                }
            }
            // "hang", notifications: recorded only.
            _ => {}
        }
    }
    fake.dropped.lock()[n] = true;
}

async fn gateway(fake: Fake, store: Option<Arc<dyn SessionStore>>) -> TestServer {
    let mut builder = Server::builder("gateway", "0").upstream(fake);
    if let Some(store) = store {
        builder = builder.session_store(store);
    }
    serve(builder, config_with(SECRET, |_| {})).await
}

fn methods(seen: &[Value]) -> Vec<String> {
    seen.iter()
        .filter_map(|m| m["method"].as_str().map(String::from))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_up_with_ids_of_ours_and_answers_come_back_unchanged() {
    let fake = Fake::default();
    let srv = gateway(fake.clone(), None).await;
    let mut c = Client::bare(&srv.mcp, LATEST);
    let init = c.initialize(full_capabilities()).await;
    assert_eq!(
        init["result"]["serverInfo"]["name"], "fake-upstream",
        "{init}"
    );
    assert_eq!(
        init["result"]["capabilities"],
        json!({"tools": {}}),
        "{init}"
    );
    assert_eq!(
        c.notify("notifications/initialized", json!({}))
            .await
            .status(),
        202
    );

    let res = c
        .request_with_id(
            json!("client-7"),
            "tools/call",
            json!({"name": "echo", "arguments": {"a": 1}}),
        )
        .await;
    let body: Value = res.json().await.expect("json");
    assert_eq!(body["id"], "client-7", "{body}");
    let text: Value = serde_json::from_str(&result_text(&body["result"])).expect("echo");
    assert_eq!(text["arguments"], json!({"a": 1}));
    assert_ne!(
        text["upstreamId"],
        json!("client-7"),
        "the upstream sees an id of ours"
    );

    let failed = c
        .call_json("tools/call", json!({"name": "fail", "arguments": {}}))
        .await;
    assert_eq!(
        failed["error"],
        json!({"code": -32099, "message": "upstream says no", "data": {"why": "test"}}),
        "{failed}"
    );

    let seen = fake.received(0);
    assert_eq!(
        methods(&seen),
        [
            "initialize",
            "notifications/initialized",
            "tools/call",
            "tools/call"
        ]
    );
    assert_eq!(
        seen[0]["params"]["clientInfo"]["name"], "fleetmcp-it",
        "the client's own initialize"
    );
    assert_eq!(fake.connections(), 1);

    let res = c.delete().send().await.expect("DELETE");
    assert_eq!(res.status(), 204);
    eventually("the link is dropped", Duration::from_secs(5), || {
        fake.dropped.lock()[0]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_the_upstreams_request_to_the_client_go_on_the_requests_stream() {
    let fake = Fake::default();
    let srv = gateway(fake.clone(), None).await;
    let c = Client::connect(&srv).await;
    let res = c
        .post()
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {}, "_meta": {"progressToken": "tok"}}}))
        .send()
        .await
        .expect("call");
    let mut s = SseStream::new(res);
    let (before, answer) = s.until_response(&json!(3)).await;
    let progress: Vec<Value> = before.iter().filter_map(SseEvent::json).collect();
    assert_eq!(progress.len(), 1, "{before:?}");
    assert_eq!(progress[0]["params"]["progressToken"], "tok");
    assert!(answer["result"].is_object(), "{answer}");

    let res = c.start_tool(4, "ask", json!({})).await;
    let mut s = SseStream::new(res);
    let (_, request) = s.until_server_request().await;
    assert_eq!(request["method"], "sampling/createMessage");
    let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "yes"}, "model": "m"}});
    assert_eq!(c.send(&reply).await.status(), 202);
    let (_, answer) = s.until_response(&json!(4)).await;
    assert_eq!(result_text(&answer["result"]), "sampled: yes", "{answer}");
    let seen = fake.received(0);
    assert!(
        seen.iter()
            .any(|m| m["id"] == "up-1" && m["result"]["content"]["text"] == "yes"),
        "the answer went up under the upstream's id: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_is_cancelled_upstream_and_notifications_reach_the_get_stream() {
    let fake = Fake::default();
    let srv = gateway(fake.clone(), None).await;
    let c = Client::connect(&srv).await;
    let hang = tokio::spawn({
        let req = c.post().json(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "hang", "arguments": {}}}));
        async move { req.send().await }
    });
    eventually(
        "the call reached the upstream",
        Duration::from_secs(5),
        || {
            fake.received(0)
                .iter()
                .any(|m| m["params"]["name"] == "hang")
        },
    )
    .await;
    c.notify(
        "notifications/cancelled",
        json!({"requestId": 5, "reason": "test"}),
    )
    .await;
    eventually("the upstream is told", Duration::from_secs(5), || {
        methods(&fake.received(0)).contains(&"notifications/cancelled".to_string())
    })
    .await;
    let seen = fake.received(0);
    let upstream_id = seen
        .iter()
        .find(|m| m["params"]["name"] == "hang")
        .map(|m| m["id"].clone());
    let cancel = seen
        .iter()
        .find(|m| m["method"] == "notifications/cancelled")
        .cloned();
    assert_eq!(
        cancel.map(|m| m["params"]["requestId"].clone()),
        upstream_id,
        "{seen:?}"
    );
    hang.abort();

    let mut get = SseStream::new(c.get().send().await.expect("GET"));
    c.call_tool_json("notify", json!({})).await;
    let got = get
        .messages_until(|m| m["method"] == "notifications/resources/updated")
        .await;
    assert_eq!(
        got.last().map(|m| m["params"]["uri"].clone()),
        Some(json!("fake://x"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_did_not_open_the_session_starts_and_initializes_a_new_upstream() {
    let store: Arc<dyn SessionStore> = Arc::new(MemorySessionStore::new(Duration::from_secs(60)));
    let (fa, fb) = (Fake::default(), Fake::default());
    let a = gateway(fa.clone(), Some(store.clone())).await;
    let b = gateway(fb.clone(), Some(store)).await;
    let mut c = Client::connect(&a).await;
    c.call_tool_json("echo", json!({"on": "a"})).await;
    c.url = b.mcp.clone();
    let body = c.call_tool_json("echo", json!({"on": "b"})).await;
    assert!(result_text(&body).contains("\"on\":\"b\""), "{body}");
    let seen = fb.received(0);
    assert_eq!(
        methods(&seen),
        ["initialize", "notifications/initialized", "tools/call"],
        "{seen:?}"
    );
    let init = &seen[0]["params"];
    assert_eq!(
        init["clientInfo"]["name"], "fleetmcp-it",
        "the stored clientInfo: {init}"
    );
    assert_eq!(init["protocolVersion"], LATEST);
    assert_eq!(init["capabilities"], full_capabilities());
    assert_eq!(fa.connections(), 1);
    assert_eq!(fb.connections(), 1);
}
