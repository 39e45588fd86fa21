//! [`Server::test_client`]: a server's tools, resources and prompts called from a test, in
//! process. No socket and no listener: each request is handed to the server's own routes (what
//! [`Running::router`] serves), so it meets the same checks, dispatch and answers a client over
//! the network meets, in either era. What the network adds (connection limits, timeouts) is
//! not there.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use parking_lot::Mutex;
use rmcp::model::{CallToolResult, ElicitResult, GetPromptResult, ReadResourceResult};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::{Running, Server};
use crate::app::ServerHandle;
use crate::protocol::{ErrorData, STATELESS_VERSIONS, errors};
use crate::stateless::{META_CAPABILITIES, META_CLIENT_INFO, META_VERSION};
use crate::tasks::TASKS_EXTENSION;
use crate::transport::{PROTOCOL_VERSION_HEADER, SESSION_HEADER};

/// What a request of the test client's gives: the result, or the error the server answered
/// (or the client's own, `-32603`, when the answer could not be read).
type Answer<T> = Result<T, ErrorData>;

/// How the test client answers the server's elicitation: gets the question's message and its
/// `requestedSchema`, returns what the user did.
type Answerer = dyn Fn(&str, &Value) -> ElicitResult + Send + Sync;

/// How the test client answers the server's `sampling/createMessage`: gets the request's
/// params, returns the result.
type Sampler = dyn Fn(&Value) -> Value + Send + Sync;

/// How long [`TestClient::call_tool_as_task`] waits for a task to end before it fails the
/// call (as long as a session-era question waits for its answer).
const TASK_WAIT: Duration = Duration::from_secs(300);

/// The most rounds one 2026-07-28 request may take (each answers the server's questions): a
/// handler that asks without end fails the call rather than hang the test.
const MAX_ROUNDS: usize = 32;

/// Sets up a [`TestClient`]: returned by [`Server::test_client`].
pub struct TestClientBuilder {
    server: Server,
    version: String,
    answers: Answers,
}

/// What the client answers the server's requests with, and so the capabilities it declares.
#[derive(Clone, Default)]
struct Answers {
    elicitation: Option<Arc<Answerer>>,
    sampling: Option<Arc<Sampler>>,
    /// The roots' URIs, when the client declares `roots`.
    roots: Option<Vec<String>>,
}

impl Server {
    /// A client for tests that calls this server's tools, resources and prompts in process,
    /// without a socket: each request goes through the server's own routes, as a client's
    /// over HTTP does, so it is validated, dispatched and answered the same way. It speaks
    /// protocol 2025-11-25 (a session) unless
    /// [`protocol_version`](TestClientBuilder::protocol_version) says otherwise, and declares
    /// elicitation when given a way to answer it
    /// ([`elicitation`](TestClientBuilder::elicitation)).
    ///
    /// ```
    /// use fleetmcp::model::{ElicitResult, ElicitationAction};
    /// use fleetmcp::{NoArgs, Server, TestClient, tool};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Add {
    ///     a: i64,
    ///     b: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = Server::builder("calc", "1.0.0")
    ///     .tool(tool("add").handler(|args: Add, _ctx| async move { Ok((args.a + args.b).to_string()) }))
    ///     .tool(tool("reset").handler(|_: NoArgs, ctx| async move {
    ///         Ok(if ctx.confirm("Reset?").await? { "reset" } else { "kept" })
    ///     }))
    ///     .build();
    /// let client = server
    ///     .test_client()
    ///     .elicitation(|_message, _schema| ElicitResult::new(ElicitationAction::Accept))
    ///     .connect()
    ///     .await?;
    ///
    /// let sum = client.call_tool("add", serde_json::json!({"a": 2, "b": 3})).await?;
    /// assert_eq!(TestClient::text(&sum), "5");
    /// let reset = client.call_tool("reset", NoArgs {}).await?;
    /// assert_eq!(TestClient::text(&reset), "reset");
    /// client.stop().await;
    /// # Ok(()) }
    /// ```
    pub fn test_client(self) -> TestClientBuilder {
        TestClientBuilder {
            server: self,
            version: "2025-11-25".into(),
            answers: Answers::default(),
        }
    }
}

impl TestClientBuilder {
    /// The protocol version the client speaks: `2026-07-28` for the stateless era (each
    /// request carries its metadata; the server's questions come back as
    /// `InputRequiredResult`s, which the client answers and retries, as a 2026-07-28 client
    /// does), or a session-era one (`2025-03-26`, `2025-06-18`, `2025-11-25`, the default:
    /// `connect` opens a session with `initialize`).
    pub fn protocol_version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Declares the `elicitation` capability and answers each question
    /// (`elicitation/create`, from [`RequestContext::elicit_form`](crate::RequestContext::elicit_form),
    /// [`confirm`](crate::RequestContext::confirm) or `elicit`) with `answer`, which gets the
    /// question's message and `requestedSchema`. Without it the server does not ask: the
    /// handler's question fails, as with a client that cannot show forms.
    pub fn elicitation<F>(mut self, answer: F) -> Self
    where
        F: Fn(&str, &Value) -> ElicitResult + Send + Sync + 'static,
    {
        self.answers.elicitation = Some(Arc::new(answer));
        self
    }

    /// Declares the `sampling` capability and answers each `sampling/createMessage` (from
    /// [`RequestContext::create_message`](crate::RequestContext::create_message)) with what
    /// `answer` makes of the request's params (`messages`, `maxTokens`, ...): the result, a
    /// JSON object with `role`, `content` and `model`. Without it the server does not ask.
    ///
    /// ```
    /// # #![allow(deprecated)]
    /// use fleetmcp::model::{CreateMessageRequestParams, SamplingMessage};
    /// use fleetmcp::{NoArgs, Server, TestClient, tool};
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let haiku = tool("haiku").handler(|_: NoArgs, ctx| async move {
    ///     let ask = CreateMessageRequestParams::new(vec![SamplingMessage::user_text("A haiku")], 50);
    ///     let answer = ctx.create_message(ask).await?;
    ///     Ok(answer.model)
    /// });
    /// let client = Server::builder("poet", "1.0.0")
    ///     .tool(haiku)
    ///     .build()
    ///     .test_client()
    ///     .sampling(|request| {
    ///         assert_eq!(request["maxTokens"], 50);
    ///         json!({"role": "assistant", "content": {"type": "text", "text": "old pond"},
    ///                "model": "test-model"})
    ///     })
    ///     .connect()
    ///     .await?;
    /// let called = client.call_tool("haiku", NoArgs {}).await?;
    /// assert_eq!(TestClient::text(&called), "test-model");
    /// client.stop().await;
    /// # Ok(()) }
    /// ```
    pub fn sampling<F>(mut self, answer: F) -> Self
    where
        F: Fn(&Value) -> Value + Send + Sync + 'static,
    {
        self.answers.sampling = Some(Arc::new(answer));
        self
    }

    /// Declares the `roots` capability and answers `roots/list` (from
    /// [`RequestContext::list_roots`](crate::RequestContext::list_roots)) with these URIs.
    /// Without it the server does not ask.
    ///
    /// ```
    /// use fleetmcp::{NoArgs, Server, TestClient, tool};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let roots = tool("roots").handler(|_: NoArgs, ctx| async move {
    ///     let listed = ctx.list_roots().await?;
    ///     Ok(listed.roots.into_iter().map(|r| r.uri).collect::<Vec<_>>().join(" "))
    /// });
    /// let client = Server::builder("files", "1.0.0")
    ///     .tool(roots)
    ///     .build()
    ///     .test_client()
    ///     .roots(["file:///work", "file:///tmp"])
    ///     .connect()
    ///     .await?;
    /// let called = client.call_tool("roots", NoArgs {}).await?;
    /// assert_eq!(TestClient::text(&called), "file:///work file:///tmp");
    /// client.stop().await;
    /// # Ok(()) }
    /// ```
    pub fn roots<I>(mut self, uris: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.answers.roots = Some(uris.into_iter().map(Into::into).collect());
        self
    }

    /// Starts the server (as [`Server::start`], binding nothing) and, in the session era,
    /// opens a session. Fails as `start` fails, or when `initialize` is refused (a version
    /// the server does not speak).
    pub async fn connect(self) -> std::io::Result<TestClient> {
        let running = self.server.start().await?;
        let mut client = TestClient {
            running,
            stateless: STATELESS_VERSIONS.contains(&self.version.as_str()),
            version: self.version,
            answers: self.answers,
            session: None,
            next_id: AtomicU64::new(1),
            notifications: Mutex::new(Vec::new()),
        };
        if !client.stateless {
            let refused = |e: ErrorData| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("initialize: {}", e.message),
                )
            };
            client.session = Some(client.initialize().await.map_err(refused)?);
            client
                .notify("notifications/initialized")
                .await
                .map_err(refused)?;
        }
        Ok(client)
    }
}

/// A client for tests, in process: see [`Server::test_client`]. Its calls may run
/// concurrently; [`TestClient::stop`] ends the session and stops the server.
pub struct TestClient {
    running: Running,
    version: String,
    stateless: bool,
    answers: Answers,
    /// The session's id (session era), once `initialize` answered.
    session: Option<String>,
    next_id: AtomicU64,
    /// What the server sent besides answers, in order.
    notifications: Mutex<Vec<Value>>,
}

impl TestClient {
    /// `tools/call`: calls the tool `name` with `args` (anything that serializes to a
    /// JSON object: a `json!({..})`, the tool's own argument type, [`NoArgs`](crate::NoArgs)).
    /// A tool that failed is `Ok` with `is_error` set, as the client sees it; `Err` is a
    /// protocol error (an unknown tool, arguments refused before 2025-11-25).
    pub async fn call_tool(&self, name: &str, args: impl Serialize) -> Answer<CallToolResult> {
        self.named("tools/call", name, args).await
    }

    /// `resources/read`: reads a resource, or a template's resource, at `uri`.
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, ErrorData> {
        from_value(self.request("resources/read", json!({"uri": uri})).await?)
    }

    /// `prompts/get`: the prompt `name` with `args`, a JSON object of strings as MCP
    /// sends them (`json!({"n": "42"})`; the server parses numbers from them).
    pub async fn get_prompt(&self, name: &str, args: impl Serialize) -> Answer<GetPromptResult> {
        self.named("prompts/get", name, args).await
    }

    /// A request naming what it calls, with its arguments; the result read as a `T`.
    async fn named<T: DeserializeOwned>(
        &self,
        method: &str,
        name: &str,
        arguments: impl Serialize,
    ) -> Result<T, ErrorData> {
        let arguments = serde_json::to_value(arguments)
            .map_err(|e| errors::invalid_params(format!("arguments: {e}")))?;
        let params = json!({"name": name, "arguments": arguments});
        from_value(self.request(method, params).await?)
    }

    /// Any request (`tools/list`, `completion/complete`, ...): its `result`, or its error.
    /// In 2026-07-28 the request's `_meta` is added, and the server's questions are answered
    /// and the request sent again until it completes.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ErrorData> {
        self.request_with(method, params, false).await
    }

    /// [`request`](Self::request); in 2026-07-28 declaring the tasks extension when `tasks`.
    async fn request_with(
        &self,
        method: &str,
        params: Value,
        tasks: bool,
    ) -> Result<Value, ErrorData> {
        if !self.stateless {
            return self.exchange(method, params, tasks).await;
        }
        let mut params = match params {
            Value::Object(p) => p,
            Value::Null => Map::new(),
            other => {
                return Err(errors::invalid_params(format!(
                    "params must be an object, not {other}"
                )));
            }
        };
        for _ in 0..MAX_ROUNDS {
            let result = (self.exchange(method, Value::Object(params.clone()), tasks)).await?;
            if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
                return Ok(result);
            }
            // Answers every question and sends the request again with the answers and the
            // state the server sealed, as a 2026-07-28 client does.
            params.insert("inputResponses".into(), self.answer_all(&result)?);
            match result.get("requestState") {
                Some(state) => params.insert("requestState".into(), state.clone()),
                None => params.remove("requestState"),
            };
        }
        Err(errors::internal(format!(
            "test client: {method} still asked for input after {MAX_ROUNDS} rounds"
        )))
    }

    /// `tools/call` as a task, for a tool declared with
    /// [`task_support`](crate::catalog::ToolBuilder::task_support): the call answers at once
    /// with a task, which the client follows to its end as a client of that era does, and
    /// gives the tool's result. In the session era (2025-11-25) the call carries `task` and
    /// the client waits with `tasks/result`; in 2026-07-28 it declares the tasks extension,
    /// polls `tasks/get` and answers the task's questions with `tasks/update`. `Err` when the
    /// server did not make a task (a tool without task support, an era without tasks), when
    /// the task failed or was cancelled, or when it ran past 300 s.
    ///
    /// ```
    /// use fleetmcp::{NoArgs, Server, TaskSupport, TestClient, tool};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let report = tool("report")
    ///     .task_support(TaskSupport::Optional)
    ///     .handler(|_: NoArgs, _ctx| async { Ok("12 pages") });
    /// let server = || Server::builder("reports", "1.0.0").tool(report.clone()).build();
    /// for version in ["2025-11-25", "2026-07-28"] {
    ///     let client = server().test_client().protocol_version(version).connect().await?;
    ///     let done = client.call_tool_as_task("report", NoArgs {}).await?;
    ///     assert_eq!(TestClient::text(&done), "12 pages");
    ///     client.stop().await;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn call_tool_as_task(
        &self,
        name: &str,
        args: impl Serialize,
    ) -> Answer<CallToolResult> {
        let arguments = serde_json::to_value(args)
            .map_err(|e| errors::invalid_params(format!("arguments: {e}")))?;
        if self.stateless {
            return self.run_task(name, arguments).await;
        }
        // A session's task asks its questions on the session's standalone stream: the client
        // listens there (answering them) while the task runs.
        let standalone = self.open_standalone().await?;
        let listen = async {
            // Its end says nothing: the task's answer comes through `tasks/result`.
            let _ = self.answer_of(standalone, &Value::Null).await;
            std::future::pending().await
        };
        tokio::select! {
            ran = self.run_task(name, arguments) => ran,
            never = listen => never,
        }
    }

    /// Calls the tool `name` as a task and follows the task to its result.
    async fn run_task(&self, name: &str, arguments: Value) -> Answer<CallToolResult> {
        let mut params = json!({"name": name, "arguments": arguments});
        if !self.stateless {
            params["task"] = json!({});
        }
        let created = self.request_with("tools/call", params, true).await?;
        // 2025-11-25 nests the task (`{"task": {..}}`), 2026-07-28 answers it flat.
        let task = created.get("task").unwrap_or(&created);
        let Some(id) = task.get("taskId").and_then(Value::as_str) else {
            return Err(errors::internal(format!(
                "test client: {name} did not run as a task: {created}"
            )));
        };
        let ended = tokio::time::timeout(TASK_WAIT, self.follow_task(id, &created)).await;
        ended.unwrap_or_else(|_| {
            Err(errors::internal(format!(
                "test client: task {id} still running after {} s",
                TASK_WAIT.as_secs()
            )))
        })
    }

    /// Follows the task `id` (made by a call that answered `created`) to its end: its result.
    async fn follow_task(&self, id: &str, created: &Value) -> Answer<CallToolResult> {
        if !self.stateless {
            // `tasks/result` waits for the end, answering the task's questions on its stream.
            let result = self.request("tasks/result", json!({"taskId": id})).await?;
            return from_value(result);
        }
        let interval = created.get("pollIntervalMs").and_then(Value::as_u64);
        // The server's interval, kept short: a test waits no longer than it must.
        let interval = Duration::from_millis(interval.unwrap_or(50).clamp(5, 100));
        loop {
            let task = (self.request_with("tasks/get", json!({"taskId": id}), true)).await?;
            match task.get("status").and_then(Value::as_str) {
                Some("completed") => {
                    return from_value(task.get("result").cloned().unwrap_or(Value::Null));
                }
                Some("failed" | "cancelled") => {
                    let error = task.get("error").cloned().unwrap_or(Value::Null);
                    return Err(serde_json::from_value(error).unwrap_or_else(|_| {
                        errors::internal(format!("test client: task {id} ended: {task}"))
                    }));
                }
                Some("input_required") => {
                    let answers = self.answer_all(&task)?;
                    let update = json!({"taskId": id, "inputResponses": answers});
                    self.request_with("tasks/update", update, true).await?;
                }
                _ => tokio::time::sleep(interval).await,
            }
        }
    }

    /// The answers to every question of an `InputRequiredResult` (or of a task waiting for
    /// input), by the key each was asked under.
    fn answer_all(&self, asked: &Value) -> Result<Value, ErrorData> {
        let questions = asked.get("inputRequests").and_then(Value::as_object);
        let mut answers = Map::new();
        for (key, question) in questions.into_iter().flatten() {
            answers.insert(key.clone(), self.answer(question)?);
        }
        Ok(Value::Object(answers))
    }

    /// What the server sent besides answers so far (progress, log messages, list changes),
    /// each a whole JSON-RPC notification, oldest first.
    pub fn notifications(&self) -> Vec<Value> {
        self.notifications.lock().clone()
    }

    /// The text of a tool result's text blocks, joined with newlines: what most assertions
    /// compare.
    pub fn text(result: &CallToolResult) -> String {
        let texts: Vec<&str> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect();
        texts.join("\n")
    }

    /// The server's handle, to change it while the test runs (add a tool, announce an update).
    pub fn handle(&self) -> ServerHandle {
        self.running.handle()
    }

    /// Ends the session (session era) and stops the server (see [`Running::stop`]).
    pub async fn stop(self) {
        if let Some(session) = &self.session {
            let req = Request::delete("/mcp")
                .header(SESSION_HEADER, session.as_str())
                .header(PROTOCOL_VERSION_HEADER, self.version.as_str())
                .body(Body::empty());
            if let Ok(req) = req {
                // Its answer says nothing the test needs: the server stops next either way.
                let _ = self.running.routes.serve(req).await;
            }
        }
        self.running.stop().await;
    }

    /// Opens the session: returns its id.
    async fn initialize(&self) -> Result<String, ErrorData> {
        let params = json!({
            "protocolVersion": self.version,
            "capabilities": self.capabilities(false),
            "clientInfo": client_info(),
        });
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params});
        let res = self.running.routes.serve(self.post(&body, &[])?).await;
        let session = res
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        self.answer_of(res, &json!(0)).await?;
        session.ok_or_else(|| errors::internal("test client: initialize opened no session"))
    }

    /// Opens the session's standalone stream (`GET /mcp`), on which the server sends what is
    /// not tied to a request of the client's (a task's questions, list changes).
    async fn open_standalone(&self) -> Result<axum::response::Response, ErrorData> {
        let mut req = Request::get("/mcp")
            .header(http::header::ACCEPT, "text/event-stream")
            .header(PROTOCOL_VERSION_HEADER, self.version.as_str());
        if let Some(session) = &self.session {
            req = req.header(SESSION_HEADER, session.as_str());
        }
        let req = (req.body(Body::empty())).map_err(|e| errors::internal(format!("{e}")))?;
        let res = self.running.routes.serve(req).await;
        if !res.status().is_success() {
            return Err(errors::internal(format!(
                "test client: the standalone stream got HTTP {}",
                res.status()
            )));
        }
        Ok(res)
    }

    /// Sends a notification (session era).
    async fn notify(&self, method: &str) -> Result<(), ErrorData> {
        let body = json!({"jsonrpc": "2.0", "method": method});
        let res = self.running.routes.serve(self.post(&body, &[])?).await;
        match res.status() {
            StatusCode::ACCEPTED | StatusCode::OK => Ok(()),
            other => Err(errors::internal(format!(
                "test client: {method} got HTTP {other}"
            ))),
        }
    }

    /// One request and its answer: a result, or the error. In 2026-07-28 it declares the
    /// tasks extension when `tasks`.
    async fn exchange(
        &self,
        method: &str,
        mut params: Value,
        tasks: bool,
    ) -> Result<Value, ErrorData> {
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        let mut headers = Vec::new();
        if self.stateless {
            params["_meta"] = json!({
                META_VERSION: self.version,
                META_CAPABILITIES: self.capabilities(tasks),
                META_CLIENT_INFO: client_info(),
            });
            headers = self.mirrored(method, &params);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let res = self.running.routes.serve(self.post(&body, &headers)?).await;
        self.answer_of(res, &id).await
    }

    /// The 2026-07-28 headers that repeat the body (`Mcp-Method`, `Mcp-Name`,
    /// `Mcp-Param-*`), each value base64-wrapped so any value fits in a header.
    fn mirrored(&self, method: &str, params: &Value) -> Vec<(String, String)> {
        let wrap = |v: &str| format!("=?base64?{}?=", STANDARD.encode(v));
        let mut headers = vec![("mcp-method".to_string(), method.to_string())];
        let named = match method {
            "tools/call" | "prompts/get" => params.get("name"),
            "resources/read" => params.get("uri"),
            "tasks/get" | "tasks/update" | "tasks/cancel" => params.get("taskId"),
            _ => None,
        };
        if let Some(name) = named.and_then(Value::as_str) {
            headers.push(("mcp-name".into(), wrap(name)));
        }
        let tool = (method == "tools/call")
            .then(|| params.get("name").and_then(Value::as_str))
            .flatten()
            .and_then(|name| self.running.app.catalog().tool(name).cloned());
        for (header, property) in tool.iter().flat_map(|t| t.header_params()) {
            let text = match params.get("arguments").and_then(|a| a.get(property)) {
                Some(Value::String(s)) => s.clone(),
                Some(v @ (Value::Bool(_) | Value::Number(_))) => v.to_string(),
                _ => continue,
            };
            headers.push((format!("mcp-param-{header}"), wrap(&text)));
        }
        headers
    }

    /// A POST to `/mcp` of `body`, with the session's headers (or `extra`).
    fn post(&self, body: &Value, extra: &[(String, String)]) -> Result<Request<Body>, ErrorData> {
        let mut req = Request::post("/mcp")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream");
        if self.stateless || self.session.is_some() {
            req = req.header(PROTOCOL_VERSION_HEADER, self.version.as_str());
        }
        if let Some(session) = &self.session {
            req = req.header(SESSION_HEADER, session.as_str());
        }
        for (k, v) in extra {
            req = req.header(k.as_str(), v.as_str());
        }
        req.body(Body::from(body.to_string()))
            .map_err(|e| errors::internal(format!("test client: {e}")))
    }

    /// Reads an answer to the request `id`: a JSON body, or an SSE stream whose other
    /// messages are kept (notifications) or answered (the server's requests) on the way.
    async fn answer_of(
        &self,
        res: axum::response::Response,
        id: &Value,
    ) -> Result<Value, ErrorData> {
        let status = res.status();
        let sse = res
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let mut body = res.into_body();
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let frame = match body.frame().await {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Err(errors::internal(format!("test client: {e}"))),
                None => break,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buf.extend_from_slice(&data);
            if !sse {
                continue;
            }
            // Each complete event: its `data:` lines are one message.
            while let Some(end) = find(&buf, b"\n\n") {
                let event: Vec<u8> = buf.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&event);
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                // An event without data (the stream's priming event, which only carries the
                // id to resume from) is no message.
                if data.iter().all(|d| d.is_empty()) {
                    continue;
                }
                let message: Value = serde_json::from_str(&data.join("\n")).map_err(|e| {
                    errors::internal(format!("test client: an event is not JSON: {e}"))
                })?;
                if let Some(answer) = self.take(message, id).await? {
                    return answer;
                }
            }
        }
        if sse {
            return Err(errors::internal(format!(
                "test client: the stream ended without the answer (HTTP {status})"
            )));
        }
        let message: Value = serde_json::from_slice(&buf).map_err(|_| {
            errors::internal(format!(
                "test client: HTTP {status}: {}",
                String::from_utf8_lossy(&buf)
            ))
        })?;
        match self.take(message, id).await? {
            Some(answer) => answer,
            None => Err(errors::internal(format!(
                "test client: HTTP {status} without the answer"
            ))),
        }
    }

    /// One message from the server while waiting for the answer to `id`: `Some` when it is
    /// that answer. A request of the server's is answered here (session era).
    async fn take(
        &self,
        message: Value,
        id: &Value,
    ) -> Result<Option<Result<Value, ErrorData>>, ErrorData> {
        if let Some(method) = message.get("method").and_then(Value::as_str) {
            match message.get("id") {
                Some(asked) => {
                    let reply = match self.answer(&message) {
                        Ok(result) => json!({"jsonrpc": "2.0", "id": asked, "result": result}),
                        Err(e) => json!({"jsonrpc": "2.0", "id": asked, "error": e}),
                    };
                    let res = self.running.routes.serve(self.post(&reply, &[])?).await;
                    if !res.status().is_success() {
                        return Err(errors::internal(format!(
                            "test client: the answer to {method} got HTTP {}",
                            res.status()
                        )));
                    }
                }
                None => self.notifications.lock().push(message),
            }
            return Ok(None);
        }
        if message.get("id") != Some(id) {
            return Ok(None);
        }
        if let Some(e) = message.get("error") {
            let e: ErrorData = serde_json::from_value(e.clone()).map_err(|e| {
                errors::internal(format!("test client: an error that is not one: {e}"))
            })?;
            return Ok(Some(Err(e)));
        }
        Ok(Some(Ok(message
            .get("result")
            .cloned()
            .unwrap_or(Value::Null))))
    }

    /// The client's answer to one of the server's requests (`method` and `params`):
    /// elicitation, sampling and roots, each when the test gave a way to answer it.
    fn answer(&self, request: &Value) -> Result<Value, ErrorData> {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        let params = request.get("params").unwrap_or(&Value::Null);
        let answers = &self.answers;
        match (
            method,
            &answers.elicitation,
            &answers.sampling,
            &answers.roots,
        ) {
            ("elicitation/create", Some(answer), _, _) => {
                let message = params.get("message").and_then(Value::as_str).unwrap_or("");
                let schema = params.get("requestedSchema").unwrap_or(&Value::Null);
                serde_json::to_value(answer(message, schema))
                    .map_err(|e| errors::internal(format!("test client: {e}")))
            }
            ("sampling/createMessage", _, Some(answer), _) => Ok(answer(params)),
            ("roots/list", _, _, Some(roots)) => {
                let roots: Vec<Value> = roots.iter().map(|uri| json!({"uri": uri})).collect();
                Ok(json!({"roots": roots}))
            }
            _ => Err(errors::method_not_found_msg(format!(
                "the test client does not answer {method}"
            ))),
        }
    }

    /// The capabilities the client declares: what it answers, and in 2026-07-28 the tasks
    /// extension when `tasks`.
    fn capabilities(&self, tasks: bool) -> Value {
        let mut declared = Map::new();
        let answers = &self.answers;
        for (capability, answered) in [
            ("elicitation", answers.elicitation.is_some()),
            ("sampling", answers.sampling.is_some()),
            ("roots", answers.roots.is_some()),
        ] {
            if answered {
                declared.insert(capability.into(), json!({}));
            }
        }
        if tasks {
            declared.insert("extensions".into(), json!({TASKS_EXTENSION: {}}));
        }
        Value::Object(declared)
    }
}

fn client_info() -> Value {
    json!({"name": "fleetmcp-test-client", "version": env!("CARGO_PKG_VERSION")})
}

fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v)
        .map_err(|e| errors::internal(format!("test client: an unexpected result: {e}")))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
