//! The stdio transport in process: a server's connection on two in-memory pipes, driven line by
//! line as a client would drive its child's stdin and stdout. The edge cases are here (before
//! `initialize`, malformed lines, batches, interleaving, EOF with work in flight); the official
//! clients drive the real binaries in `examples/*/tests/stdio*.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::task::JoinHandle;

use crate::{Config, LogLevel, NoArgs, Server, tool};

/// How long any one expected line may take.
const WAIT: Duration = Duration::from_secs(10);

/// Sets its flag when dropped: a handler that holds one was dropped (cancelled) or finished.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A server with tools that stream, ask the client, change the catalog, wait, and never end.
fn server(slow_dropped: Arc<AtomicBool>) -> Server {
    let config = Config {
        transport: crate::config::Transport::Stdio,
        http: crate::config::HttpConfig {
            shutdown_grace_ms: 3000,
            ..Default::default()
        },
        ..Config::default()
    };
    Server::builder("stdio-test", "1.0.0")
        .tool(tool("progress").handler(|_: NoArgs, ctx| async move {
            for i in 0..20 {
                ctx.progress(f64::from(i), Some(20.0), None);
                ctx.log(LogLevel::Info, format!("step {i}"));
                tokio::task::yield_now().await;
            }
            Ok("done")
        }))
        .tool(tool("ask").handler(|_: NoArgs, ctx| async move {
            let roots = ctx.ask("q", "roots/list", json!({})).await?;
            Ok(roots.to_string())
        }))
        .tool(tool("change").handler(|_: NoArgs, ctx| async move {
            let added = tool("added").handler(|_: NoArgs, _| async { Ok("hi") });
            ctx.server()
                .add_tool(added)
                .await
                .map_err(|e| crate::ToolError::failed(e.to_string()))?;
            Ok("changed")
        }))
        .tool(tool("wait").handler(|_: NoArgs, _| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok("late")
        }))
        .tool(tool("slow").handler(move |_: NoArgs, _| {
            let flag = Dropped(slow_dropped.clone());
            async move {
                let _flag = flag;
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok("too late")
            }
        }))
        .config(config)
        .build()
}

/// The client's ends of the pipes, and the connection being served.
struct Client {
    input: Option<DuplexStream>,
    output: Lines<BufReader<DuplexStream>>,
    served: JoinHandle<()>,
}

impl Client {
    fn start(server: Server) -> Self {
        let (input, server_in) = tokio::io::duplex(64 * 1024);
        let (server_out, output) = tokio::io::duplex(64 * 1024);
        let stop = std::future::pending();
        let served = tokio::spawn(crate::transport::serve_stdio(
            server.app,
            server_in,
            server_out,
            stop,
            std::future::pending(),
        ));
        Self {
            input: Some(input),
            output: BufReader::new(output).lines(),
            served,
        }
    }

    async fn line(&mut self, raw: &str) {
        let input = self.input.as_mut().expect("input open");
        input
            .write_all(format!("{raw}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn send(&mut self, message: Value) {
        self.line(&message.to_string()).await;
    }

    async fn call(&mut self, id: u64, name: &str, meta: Value) {
        let params = json!({"name": name, "arguments": {}, "_meta": meta});
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
            .await;
    }

    /// The next line, which must be one JSON object.
    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.output.next_line())
            .await
            .expect("a line within the wait")
            .unwrap()
            .expect("the output is open");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert!(v.is_object() || v.is_array(), "{line}");
        v
    }

    /// Writes `raw` and reads its answer, which must be one: its id and its error's code.
    async fn error_of(&mut self, raw: &str) -> (Value, Value) {
        self.line(raw).await;
        let v = self.recv().await;
        (v["id"].clone(), v["error"]["code"].clone())
    }

    /// Everything up to the answer to `id`, and that answer.
    async fn answer(&mut self, id: u64) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let v = self.recv().await;
            if v["id"] == json!(id) && v.get("method").is_none() {
                return (before, v);
            }
            before.push(v);
        }
    }

    async fn initialize(&mut self, version: &str) -> Value {
        let params = json!({"protocolVersion": version, "capabilities": {"roots": {}},
            "clientInfo": {"name": "pipes", "version": "1"}});
        self.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}))
            .await;
        let (before, answer) = self.answer(0).await;
        assert!(before.is_empty(), "{before:?}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        answer
    }

    /// Closes the input (EOF); the connection must end within `within`. What it wrote
    /// meanwhile.
    async fn close(mut self, within: Duration) -> Vec<Value> {
        drop(self.input.take());
        let mut rest = Vec::new();
        while let Ok(Ok(Some(line))) = tokio::time::timeout(WAIT, self.output.next_line()).await {
            rest.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}")));
        }
        tokio::time::timeout(within, self.served)
            .await
            .expect("the connection ended")
            .unwrap();
        rest
    }
}

fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("")
}

/// An `initialize` the core refuses (its params unreadable) is answered with its JSON-RPC error
/// alone, on one line with its id, and opens nothing: the refusal is the core's, with no HTTP
/// answer in between to read back.
#[tokio::test]
async fn a_refused_initialize_is_its_error_line_and_opens_no_session() {
    let mut c = Client::start(server(Arc::new(AtomicBool::new(false))));
    let params = json!({"capabilities": {}, "clientInfo": {"name": "pipes", "version": "1"}});
    c.send(json!({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": params}))
        .await;
    let v = c.recv().await;
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(v["id"], json!(7), "{v}");
    assert_eq!(v["error"]["code"], json!(-32602), "{v}");
    assert!(v.get("result").is_none(), "{v}");
    // No session: a request is still refused as before `initialize`.
    assert_eq!(
        c.error_of(r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#)
            .await,
        (json!(8), json!(-32600))
    );
    let init = c.initialize("2025-11-25").await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert!(c.close(WAIT).await.is_empty());
}

#[tokio::test]
async fn a_session_over_pipes_serves_everything_and_ends_at_eof() {
    let slow_dropped = Arc::new(AtomicBool::new(false));
    let mut c = Client::start(server(slow_dropped.clone()));
    // Before initialize: a request is refused, ping answered, a bad line is a parse error.
    assert_eq!(
        c.error_of(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
            .await,
        (json!(1), json!(-32600))
    );
    c.line(r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#)
        .await;
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc": "2.0", "id": "p", "result": {}})
    );
    for bad in ["{not json", "42", "[1,2]"] {
        c.line(bad).await;
        let v = c.recv().await;
        assert_eq!(v["id"], Value::Null, "{bad}: {v}");
        let code = if bad.starts_with('[') { -32600 } else { -32700 };
        assert_eq!(v["error"]["code"], json!(code), "{bad}: {v}");
    }
    c.line("   ").await;
    let init = c.initialize("2025-11-25").await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["result"]["serverInfo"]["name"], "stdio-test");
    c.line(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#)
        .await;
    let (_, tools) = c.answer(2).await;
    assert_eq!(tools["result"]["tools"].as_array().map(Vec::len), Some(5));
    // Progress and logging on the way, in order, before the answer.
    c.call(3, "progress", json!({"progressToken": "t"})).await;
    let (before, answer) = c.answer(3).await;
    assert_eq!(text(&answer), "done");
    let progress: Vec<f64> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap_or(-1.0))
        .collect();
    assert_eq!(progress, (0..20).map(f64::from).collect::<Vec<_>>());
    assert_eq!(
        before.len(),
        40,
        "20 progress and 20 log messages: {before:?}"
    );
    c.line(r#"{"jsonrpc":"2.0","id":4,"method":"logging/setLevel","params":{"level":"error"}}"#)
        .await;
    c.answer(4).await;
    c.call(5, "progress", json!({})).await;
    let (before, _) = c.answer(5).await;
    assert!(before.is_empty(), "no token, no log at info: {before:?}");
    // A request to the client, answered on the input.
    c.call(6, "ask", json!({})).await;
    let ask = c.recv().await;
    assert_eq!(ask["method"], "roots/list");
    let roots = json!({"roots": [{"uri": "file:///desk"}]});
    c.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": roots}))
        .await;
    let (_, answer) = c.answer(6).await;
    assert!(text(&answer).contains("file:///desk"), "{answer}");
    // A list change reaches the session through its standalone stream.
    c.call(7, "change", json!({})).await;
    let mut seen = (false, false);
    while seen != (true, true) {
        let v = c.recv().await;
        seen.0 |= v["method"] == "notifications/tools/list_changed";
        seen.1 |= v["id"] == json!(7);
    }
    // Cancelled: the handler is dropped, and nothing answers it.
    c.call(8, "slow", json!({})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cancel = json!({"requestId": 8, "reason": "changed my mind"});
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}))
        .await;
    for _ in 0..100 {
        if slow_dropped.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        slow_dropped.load(Ordering::SeqCst),
        "the cancelled handler was dropped"
    );
    let rest = c.close(Duration::from_secs(5)).await;
    assert!(rest.iter().all(|m| m["id"] != json!(8)), "{rest:?}");
}

#[tokio::test]
async fn concurrent_answers_and_their_messages_stay_whole_lines_in_order() {
    let mut c = Client::start(server(Arc::default()));
    c.initialize("2025-06-18").await;
    for id in 1..=8 {
        c.call(id, "progress", json!({"progressToken": id})).await;
    }
    let mut next = [0.0f64; 9];
    let mut answered = 0;
    while answered < 8 {
        let v = c.recv().await;
        if v["method"] == "notifications/progress" {
            let token = v["params"]["progressToken"].as_u64().unwrap_or(0) as usize;
            assert_eq!(v["params"]["progress"].as_f64(), Some(next[token]), "{v}");
            next[token] += 1.0;
        } else if let Some(id) = v["id"].as_u64() {
            assert_eq!(
                next[id as usize], 20.0,
                "every progress before the answer: {v}"
            );
            assert_eq!(text(&v), "done");
            answered += 1;
        }
    }
    c.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn eof_fails_what_waits_on_the_client_and_lets_the_rest_finish() {
    let mut c = Client::start(server(Arc::default()));
    c.initialize("2025-11-25").await;
    c.call(1, "ask", json!({})).await;
    assert_eq!(c.recv().await["method"], "roots/list");
    c.call(2, "wait", json!({})).await;
    let started = std::time::Instant::now();
    let rest = c.close(Duration::from_secs(5)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "within the grace"
    );
    let ask = rest
        .iter()
        .find(|m| m["id"] == json!(1))
        .expect("ask answered");
    assert_eq!(ask["result"]["isError"], true, "{ask}");
    let wait = rest
        .iter()
        .find(|m| m["id"] == json!(2))
        .expect("wait answered");
    assert_eq!(text(wait), "late");
}

#[tokio::test]
async fn batches_exist_only_in_2025_03_26() {
    let mut c = Client::start(server(Arc::default()));
    c.initialize("2025-03-26").await;
    c.line(
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":2,"method":"tools/list"},{"id":3}]"#,
    )
    .await;
    let v = c.recv().await;
    let answers = v.as_array().expect("one array");
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [&json!(1), &json!(2), &json!(3)], "{v}");
    assert_eq!(answers[2]["error"]["code"], -32600);
    c.close(Duration::from_secs(5)).await;

    let mut c = Client::start(server(Arc::default()));
    c.initialize("2025-11-25").await;
    assert_eq!(
        c.error_of(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#)
            .await,
        (Value::Null, json!(-32600))
    );
    c.close(Duration::from_secs(5)).await;
}
