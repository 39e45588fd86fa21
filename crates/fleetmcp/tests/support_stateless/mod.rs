//! The 2026-07-28 tests' fixture (`stateless.rs`, `stateless_rounds.rs`): a server with the
//! tools they call, and requests of that era with their mirrored headers. Included next to
//! `mod support;`, which it builds on.

#![allow(dead_code)] // each test crate uses a different part of this module

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fleetmcp::{Config, Elicited, LogLevel, NoArgs, Server, prompt, resource, tool};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{SECRET, TestServer, config_with, mcp_post, serve, within};

/// How many `log_then_wait` handlers were dropped before they finished.
pub static DROPPED_WAITING: AtomicUsize = AtomicUsize::new(0);

/// Counts a handler dropped before it finished.
struct CountIfDropped(bool);

impl Drop for CountIfDropped {
    fn drop(&mut self) {
        if !self.0 {
            DROPPED_WAITING.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The form `typed_form` asks for.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NameForm {
    /// Your name.
    name: String,
}

/// A 2026-07-28-capable server on loopback with the tools, the prompt and the resource these
/// tests call, its configuration `tweak`ed.
pub async fn start(tweak: impl FnOnce(&mut Config)) -> TestServer {
    let builder = Server::builder("stateless-test", "1.0.0")
        .tool(tool("echo").description("Echoes").raw_handler(|a: Value, _| async move { Ok(a.to_string()) }))
        .tool(
            tool("regional")
                .description("Takes a region mirrored in a header")
                .input_schema(json!({"type": "object", "properties": {
                    "region": {"type": "string", "x-mcp-header": "Region"},
                    "count": {"type": "integer", "x-mcp-header": "Count"}}}))
                .raw_handler(|a: Value, _| async move { Ok(format!("region={}", a["region"])) }),
        )
        .tool(
            tool("count")
                .description("Takes a count")
                .input_schema(json!({"type": "object", "required": ["count"],
                    "properties": {"count": {"type": "integer"}}}))
                .raw_handler(|a: Value, _| async move { Ok(format!("count={}", a["count"])) }),
        )
        .tool(
            tool("needs_sampling")
                .description("Needs sampling")
                .requires_client_capability("sampling")
                .handler(|_: NoArgs, _| async { Ok("ok") }),
        )
        .tool(tool("chatty").description("Logs").handler(|_: NoArgs, ctx| async move {
            ctx.log(LogLevel::Info, "hello from the tool");
            Ok("done")
        }))
        .tool(tool("log_then_wait").description("Logs once, then works silently for 20 s").handler(|_: NoArgs, ctx| async move {
            let mut guard = CountIfDropped(false);
            ctx.log(LogLevel::Info, "started");
            tokio::time::sleep(Duration::from_secs(20)).await;
            guard.0 = true;
            Ok("finished")
        }))
        .tool(tool("two_questions").description("Asks twice").handler(|_: NoArgs, ctx| async move {
            let q = |m: &str, f: &str| {
                json!({"message": m, "requestedSchema": {"type": "object", "properties": {f: {"type": "string"}}}})
            };
            let name = ctx.ask("name", "elicitation/create", q("Name?", "name")).await?;
            let color = ctx.ask("color", "elicitation/create", q("Color?", "color")).await?;
            Ok(format!("{} likes {}", name["content"]["name"].as_str().unwrap_or("?"), color["content"]["color"].as_str().unwrap_or("?")))
        }))
        .tool(tool("confirm_key").description("Asks to confirm, then names its call's key").handler(|_: NoArgs, ctx| async move {
            let q = json!({"message": "Sure?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}});
            ctx.ask("ok", "elicitation/create", q).await?;
            Ok(ctx.call_key().unwrap_or("null").to_string())
        }))
        .tool(tool("typed_form").description("Asks for a typed form, then to confirm").handler(|_: NoArgs, ctx| async move {
            let Elicited::Accepted(form) = ctx.elicit_form::<NameForm>("Who?").await? else {
                return Ok("no name".to_string());
            };
            let sure = ctx.confirm(format!("Sign as {}?", form.name)).await?;
            Ok(format!("{} signed={sure}", form.name))
        }))
        .prompt(prompt("p").description("A prompt").get(|_: NoArgs, _| async { Ok(Vec::<fleetmcp::model::PromptMessage>::new()) }))
        .resource(resource("test://asks", "asks").description("Asks who reads it").read(|uri, ctx| async move {
            let q = json!({"message": "Who?", "requestedSchema": {"type": "object", "properties": {"who": {"type": "string"}}}});
            let who = ctx.ask("who", "elicitation/create", q).await?;
            let text = format!("for {}", who["content"]["who"].as_str().unwrap_or("?"));
            Ok(vec![fleetmcp::model::ResourceContents::text(text, uri)])
        }));
    serve(builder, config_with(SECRET, tweak)).await
}

/// The `_meta` of a 2026-07-28 request: its protocol version, no client capabilities.
pub fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}})
}

/// A well-formed 2026 request: the body and its mirrored headers.
pub fn modern(method: &str, mut params: Value) -> (Vec<(String, String)>, Value) {
    if params.get("_meta").is_none() {
        params["_meta"] = meta();
    }
    let mut headers = vec![
        ("MCP-Protocol-Version".to_string(), "2026-07-28".to_string()),
        ("Mcp-Method".to_string(), method.to_string()),
    ];
    if let Some(n) = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
    {
        headers.push(("Mcp-Name".into(), n.into()));
    }
    (
        headers,
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
    )
}

/// POSTs `body` with the conforming headers and `headers`.
pub fn request(url: &str, headers: &[(String, String)], body: &Value) -> reqwest::RequestBuilder {
    let mut req = mcp_post(url).body(body.to_string());
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    req
}

/// Sends [`request`] and reads its answer: status, headers and body.
pub async fn post(
    url: &str,
    headers: &[(String, String)],
    body: &Value,
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let res = within("POST", request(url, headers, body).send())
        .await
        .unwrap();
    let status = res.status();
    let h = res.headers().clone();
    (status, h, within("POST body", res.text()).await.unwrap())
}

/// The JSON-RPC error code of an answer to request 7 (the id [`modern`] gives).
pub fn error_code(body: &str) -> i64 {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    assert_eq!(v["id"], 7, "errors name the request: {body}");
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {body}"))
}

/// The `result` of a JSON-RPC answer.
pub fn result(body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    v.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("not a result: {body}"))
}
