//! everything: the surface the official conformance suite calls (tools, resources, prompts
//! with fixed names and texts), plus a few tools our own integration tests use.
//!
//! Test surface, not a product: see ../../shared/reference/conformance.md, section 8.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[allow(deprecated)] // sampling (SEP-2577): the conformance suite still exercises it
use fleetmcp::model::{
    CallToolResult, ContentBlock, CreateMessageRequestParams, ElicitResult, ErrorData,
    PromptMessage, ResourceContents, Role, SamplingMessage,
};
use fleetmcp::{
    BuildError, Config, LogLevel, NoArgs, ResourceError, Server, TaskSupport, ToolError, prompt,
    resource, template, tool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// A WAV header with no samples.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

#[derive(Deserialize, JsonSchema)]
struct SamplingArgs {
    /// The prompt to send to the client's model.
    prompt: String,
}

#[derive(Deserialize, JsonSchema)]
struct ElicitationArgs {
    /// The message to show the user.
    message: String,
}

#[derive(Deserialize, JsonSchema)]
struct GreetArgs {
    name: String,
}

#[derive(Deserialize, JsonSchema)]
struct SlowArgs {
    #[serde(default)]
    seconds: f64,
    label: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct CancellableArgs {
    /// How long the tool works if nobody cancels it, in milliseconds.
    #[serde(default = "default_work_ms")]
    work_ms: u64,
}
fn default_work_ms() -> u64 {
    10_000
}

/// Arguments of `test_prompt_with_arguments`.
#[derive(Deserialize, JsonSchema)]
struct TwoArgs {
    /// First argument
    arg1: String,
    /// Second argument
    arg2: String,
}

/// Arguments of `test_prompt_with_embedded_resource`.
#[derive(Deserialize, JsonSchema)]
struct EmbedArgs {
    /// URI of the resource to embed
    #[serde(rename = "resourceUri")]
    resource_uri: String,
}

/// Counters of `test_cancellable` and `test_cancellable_task`, the server's state.
#[derive(Default)]
struct Stats {
    started: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
}

/// Counts a cancelled call: the handler future is dropped before it finishes.
struct CancelGuard(Arc<Stats>, bool);
impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn text(t: impl Into<String>) -> ContentBlock {
    ContentBlock::text(t)
}

fn tools() -> Vec<Arc<fleetmcp::catalog::ToolDef>> {
    let mut v = vec![
        tool("test_simple_text")
            .description("Returns a simple text response")
            .handler(|_: NoArgs, _| async { Ok("This is a simple text response for testing.") }),
        tool("test_image_content")
            .description("Returns an image")
            .handler(|_: NoArgs, _| async { Ok(vec![ContentBlock::image(PNG, "image/png")]) }),
        tool("test_audio_content")
            .description("Returns audio")
            .handler(|_: NoArgs, _| async { Ok(vec![ContentBlock::audio(WAV, "audio/wav")]) }),
        tool("test_embedded_resource")
            .description("Returns an embedded resource")
            .handler(|_: NoArgs, _| async {
                Ok(vec![ContentBlock::resource(
                    ResourceContents::text("This is an embedded resource content.", "test://embedded-resource")
                        .with_mime_type("text/plain"),
                )])
            }),
        tool("test_multiple_content_types")
            .description("Returns text, an image and a resource")
            .handler(|_: NoArgs, _| async {
                Ok(vec![
                    text("Multiple content types test:"),
                    ContentBlock::image(PNG, "image/png"),
                    ContentBlock::resource(
                        ResourceContents::text(r#"{"test":"data","value":123}"#, "test://mixed-content-resource")
                            .with_mime_type("application/json"),
                    ),
                ])
            }),
        tool("test_tool_with_logging")
            .description("Sends three log messages while it runs")
            .handler(|_: NoArgs, ctx| async move {
                for (i, m) in ["Tool execution started", "Tool processing data", "Tool execution completed"]
                    .into_iter()
                    .enumerate()
                {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    ctx.log(LogLevel::Info, m);
                }
                Ok("Logging test completed")
            }),
        tool("test_tool_with_progress")
            .description("Reports progress 0, 50, 100 of 100")
            .handler(|_: NoArgs, ctx| async move {
                for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    ctx.progress(p, Some(100.0), None);
                }
                Ok("Progress test completed")
            }),
        tool("test_error_handling")
            .description("Always fails, as a tool result")
            .handler(|_: NoArgs, _| async {
                Err::<&str, _>(ToolError::failed("This tool intentionally returns an error for testing"))
            }),
        tool("test_sampling")
            .description("Asks the client's model to answer a prompt")
            .handler(|a: SamplingArgs, ctx| async move {
                let answer = sample(&ctx, a.prompt).await?;
                Ok(format!("LLM response: {answer}"))
            }),
        tool("test_elicitation")
            .description("Asks the user for a username and an email")
            .handler(|a: ElicitationArgs, ctx| async move {
                let r = ctx
                    .elicit(serde_json::from_value(json!({
                        "message": a.message,
                        "requestedSchema": {
                            "type": "object",
                            "properties": {
                                "username": {"type": "string", "description": "User's response"},
                                "email": {"type": "string", "description": "User's email address"}
                            },
                            "required": ["username", "email"]
                        }
                    }))?)
                    .await?;
                Ok(format!("User response: action={}, content={}", elicit_action(&r), elicit_content(&r)))
            }),
        tool("test_elicitation_sep1034_defaults")
            .description("Elicitation whose schema has defaults for every primitive type")
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx
                    .elicit(serde_json::from_value(json!({
                        "message": "Please review and update the form fields with defaults",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                                "age": {"type": "integer", "description": "User age", "default": 30},
                                "score": {"type": "number", "description": "User score", "default": 95.5},
                                "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
                                "verified": {"type": "boolean", "description": "Verification status", "default": true}
                            }
                        }
                    }))?)
                    .await?;
                Ok(format!("Elicitation completed: action={}, content={}", elicit_action(&r), elicit_content(&r)))
            }),
        tool("test_elicitation_sep1330_enums")
            .description("Elicitation with every enum shape")
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx
                    .elicit(serde_json::from_value(json!({
                        "message": "Please select options from the enum fields",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {
                                "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
                                "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": [
                                    {"const": "value1", "title": "First Option"},
                                    {"const": "value2", "title": "Second Option"},
                                    {"const": "value3", "title": "Third Option"}
                                ]},
                                "legacyEnum": {"type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                                "untitledMulti": {"type": "array", "description": "Select multiple options", "minItems": 1, "maxItems": 3, "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                                "titledMulti": {"type": "array", "description": "Select multiple options with titles", "minItems": 1, "maxItems": 3, "items": {"anyOf": [
                                    {"const": "value1", "title": "First Choice"},
                                    {"const": "value2", "title": "Second Choice"},
                                    {"const": "value3", "title": "Third Choice"}
                                ]}}
                            },
                            "required": []
                        }
                    }))?)
                    .await?;
                Ok(format!("Elicitation completed: action={}, content={}", elicit_action(&r), elicit_content(&r)))
            }),
        tool("test_reconnection")
            .description("Closes its SSE connection mid-call; the result arrives after the client resumes")
            .handler(|_: NoArgs, ctx| async move {
                ctx.log(LogLevel::Info, "Reconnection test started");
                tokio::time::sleep(Duration::from_millis(100)).await;
                ctx.end_connection_for_polling();
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok("Reconnection test completed successfully")
            }),
        tool("json_schema_2020_12_tool")
            .description("A tool whose input schema uses JSON Schema 2020-12 features")
            .input_schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {
                    "address": {
                        "$anchor": "address",
                        "type": "object",
                        "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
                    }
                },
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "kind": {"type": "string", "enum": ["home", "work"]}
                },
                "allOf": [{"anyOf": [{"required": ["name"]}, {"required": ["address"]}]}],
                "if": {"properties": {"kind": {"const": "work"}}, "required": ["kind"]},
                "then": {"required": ["address"]},
                "else": {"properties": {"kind": {"const": "home"}}},
                "additionalProperties": false
            }))
            .raw_handler(|_args: Value, _| async { Ok("ok") }),
        tool("test_trigger_tool_change")
            .description("Adds or removes the tool `test_dynamic_tool`, so clients see tools/list_changed")
            .handler(|_: NoArgs, ctx| async move {
                let server = ctx.server();
                if server_has_dynamic(&ctx) {
                    server.remove_tool("test_dynamic_tool").await;
                    Ok("removed test_dynamic_tool")
                } else {
                    server
                        .add_tool(
                            tool("test_dynamic_tool")
                                .description("Added at runtime")
                                .handler(|_: NoArgs, _| async { Ok("dynamic") }),
                        )
                        .await?;
                    Ok("added test_dynamic_tool")
                }
            }),
        tool("test_notify_resource_updated")
            .description("Announces an update of test://watched-resource to its subscribers")
            .handler(|_: NoArgs, ctx| async move {
                ctx.server().notify_resource_updated("test://watched-resource").await;
                Ok("notified")
            }),
        // 2026-07-28 fixtures (conformance.md 8.5 and 11.3).
        tool("test_missing_capability")
            .description("Needs the client's sampling capability")
            .requires_client_capability("sampling")
            .handler(|_: NoArgs, _| async { Ok("sampling is available") }),
        tool("test_logging_tool")
            .description("Logs three messages, only if the request asked for log messages")
            .handler(|_: NoArgs, ctx| async move {
                for m in ["Logging tool started", "Logging tool working", "Logging tool finished"] {
                    ctx.log(LogLevel::Info, m);
                }
                Ok("Logging tool completed")
            }),
        tool("test_streaming_elicitation")
            .description("Streams a notification, then asks the user for a name")
            .handler(|_: NoArgs, ctx| async move {
                ctx.progress(0.0, Some(1.0), Some("about to ask"));
                ctx.log(LogLevel::Info, "about to ask for a name");
                let r = ctx
                    .ask("user_name", "elicitation/create", name_question("What is your name?", "name"))
                    .await?;
                Ok(format!("Hello, {}!", r["content"]["name"].as_str().unwrap_or("?")))
            }),
        tool("test_trigger_prompt_change")
            .description("Adds or removes the prompt `test_dynamic_prompt`, so clients see prompts/list_changed")
            .handler(|_: NoArgs, ctx| async move {
                let server = ctx.server();
                if server.has_prompt("test_dynamic_prompt") {
                    server.remove_prompt("test_dynamic_prompt").await;
                    Ok("removed test_dynamic_prompt")
                } else {
                    server
                        .add_prompt(prompt("test_dynamic_prompt").description("Added at runtime").get(|_: NoArgs, _| async {
                            Ok(vec![PromptMessage::new_text(Role::User, "dynamic")])
                        }))
                        .await?;
                    Ok("added test_dynamic_prompt")
                }
            }),
        tool("test_input_required_result_elicitation")
            .description("Asks the user's name (MRTR)")
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx
                    .ask("user_name", "elicitation/create", name_question("What is your name?", "name"))
                    .await?;
                Ok(format!("Hello, {}!", r["content"]["name"].as_str().unwrap_or("stranger")))
            }),
        tool("test_input_required_result_sampling")
            .description("Asks the client's model a question (MRTR)")
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx
                    .ask("capital_question", "sampling/createMessage", sampling_question("What is the capital of France?", 100))
                    .await?;
                Ok(format!("The model said: {}", r["content"]["text"].as_str().unwrap_or("")))
            }),
        tool("test_input_required_result_list_roots")
            .description("Asks the client for its roots (MRTR)")
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx.ask("client_roots", "roots/list", json!({})).await?;
                Ok(format!("Client roots: {}", roots_text(&r)))
            }),
        tool("test_input_required_result_request_state")
            .description("Asks for a confirmation and checks the state round trip (MRTR)")
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx
                    .ask(
                        "confirm",
                        "elicitation/create",
                        json!({"mode": "form", "message": "Please confirm", "requestedSchema": {
                            "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}),
                    )
                    .await?;
                Ok(format!("Confirmed ({}): state-ok", r["action"].as_str().unwrap_or("?")))
            }),
        tool("test_input_required_result_multiple_inputs")
            .description("Asks three questions at once (MRTR)")
            .handler(|_: NoArgs, ctx| async move {
                let answers = ctx
                    .ask_all(vec![
                        ("user_name".into(), "elicitation/create".into(), name_question("What is your name?", "name")),
                        ("greeting".into(), "sampling/createMessage".into(), sampling_question("Generate a greeting", 50)),
                        ("client_roots".into(), "roots/list".into(), json!({})),
                    ])
                    .await?;
                Ok(format!(
                    "name={}, greeting={}, roots={}",
                    answers[0]["content"]["name"].as_str().unwrap_or("?"),
                    answers[1]["content"]["text"].as_str().unwrap_or("?"),
                    roots_text(&answers[2])
                ))
            }),
        tool("test_input_required_result_multi_round")
            .description("Asks two questions one after the other (MRTR, two rounds)")
            .handler(|_: NoArgs, ctx| async move {
                let name = ctx
                    .ask("step1", "elicitation/create", name_question("Step 1: What is your name?", "name"))
                    .await?;
                let color = ctx
                    .ask("step2", "elicitation/create", name_question("Step 2: What is your favorite color?", "color"))
                    .await?;
                Ok(format!(
                    "{} likes {}",
                    name["content"]["name"].as_str().unwrap_or("?"),
                    color["content"]["color"].as_str().unwrap_or("?")
                ))
            }),
        tool("test_input_required_result_tampered_state")
            .description("Asks a question; a retry with a modified requestState is refused")
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx
                    .ask("confirm", "elicitation/create", name_question("Please confirm your name", "name"))
                    .await?;
                Ok(format!("Accepted: {}", r["action"].as_str().unwrap_or("?")))
            }),
        tool("test_input_required_result_capabilities")
            .description("Asks only with what the client declared in this request")
            .handler(|_: NoArgs, ctx| async move {
                let (key, method, params) = if ctx.client_supports("elicitation") {
                    ("user_name", "elicitation/create", name_question("What is your name?", "name"))
                } else if ctx.client_supports("sampling") {
                    ("capital_question", "sampling/createMessage", sampling_question("What is the capital of France?", 100))
                } else if ctx.client_supports("roots") {
                    ("client_roots", "roots/list", json!({}))
                } else {
                    return Ok("The client declared no capability to ask with".to_string());
                };
                let r = ctx.ask(key, method, params).await?;
                Ok(format!("Answered: {r}"))
            }),
        tool("test_header_param")
            .description("Echoes its region, which clients mirror in the Mcp-Param-Region header")
            .input_schema(json!({
                "type": "object",
                "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
                "required": ["region"]
            }))
            .raw_handler(|args: Value, _| async move { Ok(format!("region={}", args["region"].as_str().unwrap_or(""))) }),
        // Tasks extension fixtures (SEP-2663 scenarios of the conformance suite).
        tool("greet")
            .description("Greets synchronously")
            .handler(|a: GreetArgs, _| async move { Ok(format!("Hello, {}!", a.name)) }),
        tool("slow_compute")
            .description("Sleeps `seconds`, then answers; runs as a task")
            .task_support(TaskSupport::Optional)
            .handler(|a: SlowArgs, _| async move {
                tokio::time::sleep(Duration::from_secs_f64(a.seconds.max(0.0))).await;
                Ok(format!("computed {} after {}s", a.label.unwrap_or_default(), a.seconds))
            }),
        tool("failing_job")
            .description("Fails as a tool after about a second; only as a task")
            .task_support(TaskSupport::Required)
            .handler(|_: NoArgs, _| async move {
                tokio::time::sleep(Duration::from_millis(800)).await;
                Err::<&str, _>(ToolError::failed("the job failed"))
            }),
        tool("protocol_error_job")
            .description("Ends in a protocol error; runs as a task")
            .task_support(TaskSupport::Optional)
            .handler(|_: NoArgs, _| async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Err::<&str, _>(ToolError::Protocol(ErrorData::internal_error("the job crashed", None)))
            }),
        tool("confirm_delete")
            .description("Asks for a confirmation, then deletes; runs as a task")
            .task_support(TaskSupport::Optional)
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx
                    .ask(
                        "confirm",
                        "elicitation/create",
                        json!({"mode": "form", "message": "Delete the file?", "requestedSchema": {
                            "type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}}),
                    )
                    .await?;
                Ok(format!("delete: {}", r["action"].as_str().unwrap_or("?")))
            }),
        tool("multi_input")
            .description("Asks two questions at once; runs as a task")
            .task_support(TaskSupport::Optional)
            .handler(|_: NoArgs, ctx| async move {
                let answers = ctx
                    .ask_all(vec![
                        ("first".into(), "elicitation/create".into(), name_question("First name?", "name")),
                        ("second".into(), "elicitation/create".into(), name_question("Last name?", "name")),
                    ])
                    .await?;
                Ok(format!(
                    "{} {}",
                    answers[0]["content"]["name"].as_str().unwrap_or("?"),
                    answers[1]["content"]["name"].as_str().unwrap_or("?")
                ))
            }),
        tool("test_tool_with_task")
            .description("Asks for a name (MRTR), then finishes as a background task")
            .task_support(TaskSupport::Required)
            .escalates_to_task()
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx
                    .ask("user_name", "elicitation/create", name_question("What is your name?", "name"))
                    .await?;
                let name = r["content"]["name"].as_str().unwrap_or("stranger").to_string();
                ctx.escalate();
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(format!("Hello, {name}! (finished as a task)"))
            }),
        tool("test_roots")
            .description("Asks the client for its roots")
            .handler(|_: NoArgs, ctx| async move {
                let r = ctx.list_roots().await?;
                Ok(CallToolResult::success(vec![text(serde_json::to_string(&r)?)]))
            }),
    ];
    v.push(
        tool("test_cancellable")
            .description("Works for `work_ms` with progress; counts how often it was cancelled")
            .state::<Stats>()
            .handler(|a: CancellableArgs, ctx, s| cancellable(s, a, ctx)),
    );
    // The same work as a background task (the fleet tests cancel it through another instance
    // and read this instance's counters to see that its handler stopped).
    v.push(
        tool("test_cancellable_task")
            .description(
                "test_cancellable as a background task; counts in the same test://stats counters",
            )
            .task_support(TaskSupport::Optional)
            .state::<Stats>()
            .handler(|a: CancellableArgs, ctx, s| cancellable(s, a, ctx)),
    );
    v
}

/// Works for `a.work_ms` with progress, counting starts, completions and cancellations (a
/// handler dropped before it finished).
async fn cancellable(
    s: Arc<Stats>,
    a: CancellableArgs,
    ctx: fleetmcp::RequestContext,
) -> Result<&'static str, ToolError> {
    s.started.fetch_add(1, Ordering::SeqCst);
    let mut guard = CancelGuard(s.clone(), false);
    let steps = (a.work_ms / 50).max(1);
    for i in 0..steps {
        ctx.progress(i as f64, Some(steps as f64), None);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    guard.1 = true;
    s.completed.fetch_add(1, Ordering::SeqCst);
    Ok("finished")
}

/// Asks the client's model to answer `prompt`; the text of its answer.
#[allow(deprecated)] // sampling (SEP-2577): the conformance suite still exercises it
async fn sample(ctx: &fleetmcp::RequestContext, prompt: String) -> Result<String, ToolError> {
    let params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], 100);
    let r = ctx.create_message(params).await?;
    Ok(r.message
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default())
}

/// The action of an elicitation answer as the conformance suite expects to read it.
fn elicit_action(r: &ElicitResult) -> String {
    serde_json::to_value(&r.action)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| "?".into())
}

/// The content of an elicitation answer (`null` when the user gave none).
fn elicit_content(r: &ElicitResult) -> Value {
    r.content.clone().unwrap_or(Value::Null)
}

/// An elicitation asking for one string field.
fn name_question(message: &str, field: &str) -> Value {
    json!({"mode": "form", "message": message, "requestedSchema": {
        "type": "object", "properties": {field: {"type": "string"}}, "required": [field]}})
}

fn sampling_question(text: &str, max_tokens: u32) -> Value {
    json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens})
}

fn roots_text(r: &Value) -> String {
    r["roots"]
        .as_array()
        .map(|roots| {
            roots
                .iter()
                .filter_map(|x| x["uri"].as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn server_has_dynamic(ctx: &fleetmcp::RequestContext) -> bool {
    ctx.server().has_tool("test_dynamic_tool")
}

fn build(config: Config) -> Result<Server, BuildError> {
    let mut b = Server::builder("everything", env!("CARGO_PKG_VERSION"))
        .config(config)
        .state(Stats::default());
    for t in tools() {
        b = b.tool(t);
    }
    b.resource(
        resource("test://static-text", "static-text")
            .description("A static text resource")
            .mime_type("text/plain")
            .read(|uri, _| async move {
                Ok(vec![
                    ResourceContents::text("This is the content of the static text resource.", uri)
                        .with_mime_type("text/plain"),
                ])
            }),
    )
    .resource(
        resource("test://static-binary", "static-binary")
            .description("A static binary resource (a PNG)")
            .mime_type("image/png")
            .read(|uri, _| async move {
                Ok(vec![
                    ResourceContents::blob(PNG, uri).with_mime_type("image/png"),
                ])
            }),
    )
    .resource(
        resource("test://watched-resource", "watched-resource")
            .description("A resource to subscribe to")
            .mime_type("text/plain")
            .read(|uri, _| async move {
                Ok(vec![
                    ResourceContents::text("Watched resource content", uri)
                        .with_mime_type("text/plain"),
                ])
            }),
    )
    .resource(
        resource("test://stats", "stats")
            .description("Counters of test_cancellable and test_cancellable_task: started, completed, cancelled")
            .mime_type("application/json")
            .state::<Stats>()
            .read(|uri, _, s| async move {
                let v = json!({
                    "started": s.started.load(Ordering::SeqCst),
                    "completed": s.completed.load(Ordering::SeqCst),
                    "cancelled": s.cancelled.load(Ordering::SeqCst),
                });
                Ok(vec![
                    ResourceContents::text(v.to_string(), uri).with_mime_type("application/json"),
                ])
            }),
    )
    .template(
        template("test://template/{id}/data", "template")
            .description("A resource template")
            .mime_type("application/json")
            .complete("id", |partial, _, _| {
                ["123", "124", "200"]
                    .iter()
                    .filter(|v| v.starts_with(partial))
                    .map(|v| v.to_string())
                    .collect()
            })
            .read(|uri, vars, _| async move {
                let id = vars
                    .get("id")
                    .cloned()
                    .ok_or_else(|| ResourceError::NotFound(uri.clone()))?;
                let body =
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                Ok(vec![
                    ResourceContents::text(body.to_string(), uri)
                        .with_mime_type("application/json"),
                ])
            }),
    )
    .prompt(
        prompt("test_simple_prompt")
            .description("A simple prompt")
            .get(|_: NoArgs, _| async {
                Ok(vec![PromptMessage::new_text(
                    Role::User,
                    "This is a simple prompt for testing.",
                )])
            }),
    )
    .prompt(
        prompt("test_prompt_with_arguments")
            .description("A prompt with arguments")
            .complete("arg1", |partial, _, _| {
                ["paris", "park", "party"]
                    .iter()
                    .filter(|v| v.starts_with(partial))
                    .map(|v| v.to_string())
                    .collect()
            })
            .get(|args: TwoArgs, _| async move {
                Ok(vec![PromptMessage::new_text(
                    Role::User,
                    format!(
                        "Prompt with arguments: arg1='{}', arg2='{}'",
                        args.arg1, args.arg2
                    ),
                )])
            }),
    )
    .prompt(
        prompt("test_prompt_with_embedded_resource")
            .description("A prompt with an embedded resource")
            .get(|args: EmbedArgs, _| async move {
                let uri = args.resource_uri;
                Ok(vec![
                    PromptMessage::new(
                        Role::User,
                        ContentBlock::resource(
                            ResourceContents::text("Embedded resource content for testing.", uri)
                                .with_mime_type("text/plain"),
                        ),
                    ),
                    PromptMessage::new_text(
                        Role::User,
                        "Please process the embedded resource above.",
                    ),
                ])
            }),
    )
    .prompt(
        prompt("test_input_required_result_prompt")
            .description("Asks the user for context before producing its messages (MRTR)")
            .get(|_: NoArgs, ctx| async move {
                let r = ctx
                    .ask(
                        "user_context",
                        "elicitation/create",
                        name_question("What context should the prompt use?", "context"),
                    )
                    .await?;
                Ok(vec![PromptMessage::new_text(
                    Role::User,
                    format!(
                        "Use this context: {}",
                        r["content"]["context"].as_str().unwrap_or("none")
                    ),
                )])
            }),
    )
    .prompt(
        prompt("test_prompt_with_image")
            .description("A prompt with an image")
            .get(|_: NoArgs, _| async {
                Ok(vec![
                    PromptMessage::new(Role::User, ContentBlock::image(PNG, "image/png")),
                    PromptMessage::new_text(Role::User, "Please analyze the image above."),
                ])
            }),
    )
    .try_build()
}

#[tokio::main]
async fn main() {
    // `everything fleet status|drain <machine-id>` is the operator's command.
    fleetmcp::run(|config| async move { Ok(build(config)?) }).await
}
