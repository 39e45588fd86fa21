//! `Server::test_client`: a server's tools, resources and prompts called in process, in both
//! eras, through the same checks and dispatch a client over HTTP meets: typed arguments
//! refused, structured output, progress, a template read and completed, a static resource, a
//! prompt, and elicitation answered (the session era asks on the request's stream, 2026-07-28
//! with `InputRequiredResult` rounds that run the handler again).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fleetmcp::model::{ElicitResult, ElicitationAction, PromptMessage, ResourceContents, Role};
use fleetmcp::{
    Elicited, NoArgs, ResourceError, Server, Structured, TestClient, prompt, resource, template,
    tool,
};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Sum {
    sum: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Reason {
    /// Why.
    reason: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Greet {
    /// Who to greet.
    name: String,
}

/// How often `delete` ran to its end (in 2026-07-28 it runs once per round).
#[derive(Default)]
struct Runs(AtomicUsize);

fn server(runs: Arc<Runs>) -> Server {
    Server::builder("test-client", "1.0.0")
        .shared_state(runs)
        .tool(tool("add").handler(|args: Add, _ctx| async move {
            Ok(Structured(Sum {
                sum: args.a + args.b,
            }))
        }))
        .tool(tool("count").handler(|_: NoArgs, ctx| async move {
            for i in 0..3 {
                ctx.progress(f64::from(i), Some(3.0), None);
            }
            Ok("counted")
        }))
        .tool(
            tool("delete")
                .state::<Runs>()
                .handler(|_: NoArgs, ctx, runs| async move {
                    runs.0.fetch_add(1, Ordering::SeqCst);
                    if !ctx.confirm("Delete?").await? {
                        return Ok("kept".to_string());
                    }
                    Ok(match ctx.elicit_form::<Reason>("Why?").await? {
                        Elicited::Accepted(r) => format!("deleted: {}", r.reason),
                        Elicited::Declined | Elicited::Cancelled => "deleted".to_string(),
                    })
                }),
        )
        .template(
            template("notes://{id}", "note")
                .complete("id", |partial, _, _| vec![format!("{partial}7")])
                .read(|uri, vars, _ctx| async move {
                    match vars.get("id").map(String::as_str) {
                        Some("7") => Ok(vec![ResourceContents::text("seven", uri)]),
                        _ => Err(ResourceError::NotFound(uri)),
                    }
                }),
        )
        .resource(
            resource("about://notes", "about").read(|uri, _ctx| async move {
                Ok(vec![ResourceContents::text("about the notes", uri)])
            }),
        )
        .prompt(prompt("greet").get(|args: Greet, _ctx| async move {
            Ok(vec![PromptMessage::new_text(
                Role::User,
                format!("Hello, {}!", args.name),
            )])
        }))
        .build()
}

/// Answers the confirmation with yes and the form with a reason.
fn answer(message: &str, _schema: &Value) -> ElicitResult {
    match message {
        "Why?" => {
            ElicitResult::new(ElicitationAction::Accept).with_content(json!({"reason": "stale"}))
        }
        _ => ElicitResult::new(ElicitationAction::Accept),
    }
}

/// Every kind of declaration, called through a client of `version`.
async fn every_declaration(version: &str) {
    let runs = Arc::new(Runs::default());
    let client = server(runs.clone())
        .test_client()
        .protocol_version(version)
        .elicitation(answer)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{version}: {e}"));

    let sum = client
        .call_tool("add", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert_eq!(sum.structured_content, Some(json!({"sum": 5})), "{version}");
    assert_eq!(sum.is_error, Some(false), "{version}");
    // The arguments are validated before the handler, as over HTTP: a result with
    // `isError` naming the field.
    let bad = client
        .call_tool("add", json!({"a": "two", "b": 3}))
        .await
        .unwrap();
    assert_eq!(bad.is_error, Some(true), "{version}");
    assert!(TestClient::text(&bad).contains("a"), "{version}: {bad:?}");
    let unknown = client.call_tool("nope", json!({})).await;
    assert!(
        unknown.is_err(),
        "{version}: an unknown tool is a protocol error"
    );

    let deleted = client.call_tool("delete", NoArgs {}).await.unwrap();
    assert_eq!(TestClient::text(&deleted), "deleted: stale", "{version}");
    // The session era asks while the handler waits; 2026-07-28 runs it again per answer.
    let rounds = if version == "2026-07-28" { 3 } else { 1 };
    assert_eq!(runs.0.load(Ordering::SeqCst), rounds, "{version}");

    let note = client.read_resource("notes://7").await.unwrap();
    assert_eq!(
        serde_json::to_value(&note.contents).unwrap()[0]["text"],
        "seven",
        "{version}"
    );
    let missing = client.read_resource("notes://8").await.unwrap_err();
    // Resource not found: -32002 in the session era, -32602 in 2026-07-28 (SEP-2164).
    let not_found = if version == "2026-07-28" {
        -32602
    } else {
        -32002
    };
    assert_eq!(missing.code.0, not_found, "{version}: {missing:?}");
    let about = client.read_resource("about://notes").await.unwrap();
    assert_eq!(
        serde_json::to_value(&about.contents).unwrap()[0]["text"],
        "about the notes",
        "{version}"
    );
    let completed = client
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": "notes://{id}"},
                   "argument": {"name": "id", "value": "1"}}),
        )
        .await
        .unwrap();
    assert_eq!(
        completed["completion"]["values"],
        json!(["17"]),
        "{version}"
    );

    let greeting = client
        .get_prompt("greet", json!({"name": "Ada"}))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&greeting.messages).unwrap()[0]["content"]["text"],
        "Hello, Ada!",
        "{version}"
    );
    let refused = client.get_prompt("greet", json!({})).await.unwrap_err();
    assert_eq!(refused.code.0, -32602, "{version}: a missing argument");

    let listed = client.request("tools/list", json!({})).await.unwrap();
    assert_eq!(
        listed["tools"].as_array().map(Vec::len),
        Some(3),
        "{version}"
    );
    client.stop().await;
}

#[tokio::test]
async fn a_session_era_client_calls_every_kind_of_declaration() {
    every_declaration("2025-11-25").await;
}

#[tokio::test]
async fn a_2026_client_calls_every_kind_of_declaration_answering_in_rounds() {
    every_declaration("2026-07-28").await;
}

#[tokio::test]
async fn progress_reaches_the_client_and_an_unanswered_question_fails_the_call() {
    let client = server(Arc::default())
        .test_client()
        .connect()
        .await
        .unwrap();
    let counted = client
        .request(
            "tools/call",
            json!({"name": "count", "arguments": {}, "_meta": {"progressToken": "p"}}),
        )
        .await
        .unwrap();
    assert_eq!(counted["content"][0]["text"], "counted");
    let progress: Vec<Value> = client
        .notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| n["params"]["progress"].clone())
        .collect();
    assert_eq!(progress, [json!(0.0), json!(1.0), json!(2.0)]);
    // No `.elicitation(..)`: the client declares no elicitation, so the server does not ask
    // and the tool fails, as with a client that cannot show forms.
    let deleted = client.call_tool("delete", NoArgs {}).await.unwrap();
    assert_eq!(deleted.is_error, Some(true), "{deleted:?}");
    client.stop().await;
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoteRef {
    shelf: String,
    id: u64,
}

/// The ids a completer looks up, behind an `.await` (as a database would be).
struct Ids(tokio::sync::Mutex<Vec<u64>>);

/// Issue 41: a template's variables as a typed struct (`read_as`, parsed as a prompt's
/// arguments are), and completers that await (`complete_async`), with and without state.
#[tokio::test]
async fn typed_template_variables_and_async_completers() {
    let ids = Arc::new(Ids(tokio::sync::Mutex::new(vec![7, 12, 17])));
    let server = Server::builder("typed", "1.0.0")
        .shared_state(ids)
        .template(
            template("shelves://{shelf}/{id}", "note")
                .complete_async("shelf", |partial, _given, _ctx| async move {
                    tokio::task::yield_now().await;
                    vec![format!("{partial}-shelf")]
                })
                .read_as(|uri, note: NoteRef, _ctx| async move {
                    let text = format!("{} #{}", note.shelf, note.id + 1);
                    Ok(vec![ResourceContents::text(text, uri)])
                }),
        )
        .template(
            template("ids://{id}", "id")
                .state::<Ids>()
                .complete_async("id", |partial, _given, _ctx, ids| async move {
                    let ids = ids.0.lock().await;
                    ids.iter()
                        .map(u64::to_string)
                        .filter(|id| id.starts_with(&partial))
                        .collect()
                })
                .read_as(|uri, note: NoteRef2, _ctx, ids| async move {
                    let known = ids.0.lock().await.contains(&note.id);
                    Ok(vec![ResourceContents::text(format!("known: {known}"), uri)])
                }),
        )
        .prompt(
            prompt("greet")
                .state::<Ids>()
                .complete_async("name", |partial, given, _ctx, ids| async move {
                    let n = ids.0.lock().await.len();
                    vec![format!(
                        "{partial}{n}{}",
                        given.get("x").map_or("", String::as_str)
                    )]
                })
                .get(|args: Greet, _ctx, _ids| async move {
                    Ok(vec![PromptMessage::new_text(Role::User, args.name)])
                }),
        )
        .build();
    let client = server.test_client().connect().await.unwrap();
    let text = |r: &fleetmcp::model::ReadResourceResult| {
        serde_json::to_value(&r.contents).unwrap()[0]["text"].clone()
    };
    let read = client.read_resource("shelves://kitchen/41").await.unwrap();
    assert_eq!(text(&read), "kitchen #42", "the id arrives as a u64");
    let not_a_number = client
        .read_resource("shelves://kitchen/abc")
        .await
        .unwrap_err();
    assert_eq!(not_a_number.code.0, -32002, "{not_a_number:?}");
    let read = client.read_resource("ids://12").await.unwrap();
    assert_eq!(text(&read), "known: true");

    let complete = |reference: Value, name: &str, value: &str| {
        let params = json!({"ref": reference, "argument": {"name": name, "value": value},
                            "context": {"arguments": {"x": "!"}}});
        let client = &client;
        async move {
            let r = client.request("completion/complete", params).await.unwrap();
            r["completion"]["values"].clone()
        }
    };
    let shelves = json!({"type": "ref/resource", "uri": "shelves://{shelf}/{id}"});
    assert_eq!(complete(shelves, "shelf", "ki").await, json!(["ki-shelf"]));
    let ids_ref = json!({"type": "ref/resource", "uri": "ids://{id}"});
    assert_eq!(complete(ids_ref, "id", "1").await, json!(["12", "17"]));
    let greet = json!({"type": "ref/prompt", "name": "greet"});
    assert_eq!(complete(greet, "name", "Ada").await, json!(["Ada3!"]));
    client.stop().await;
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoteRef2 {
    id: u64,
}

/// A 2026-07-28 call repeats in headers what its body says, `Mcp-Param-*` for the arguments a
/// tool's schema marks `x-mcp-header` included (the server refuses the call with `-32020`
/// otherwise); values with spaces or non-ASCII go base64-wrapped.
#[tokio::test]
async fn a_2026_call_sends_the_headers_its_arguments_mirror() {
    let schema = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"}}});
    let server = Server::builder("mirrored", "1.0.0")
        .tool(
            tool("régional")
                .input_schema(schema)
                .raw_handler(|a: Value, _| async move {
                    Ok(format!("{} x{}", a["region"], a["count"]))
                }),
        )
        .build();
    let client = server
        .test_client()
        .protocol_version("2026-07-28")
        .connect()
        .await
        .unwrap();
    let args = json!({"region": "eu west ü", "count": 3});
    let called = client.call_tool("régional", args).await.unwrap();
    assert_eq!(TestClient::text(&called), "\"eu west ü\" x3", "{called:?}");
    client.stop().await;
}

/// Adds two integers (this doc comment describes the tool `sum`).
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Described {
    a: i64,
}

/// Asks the model to greet someone.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DescribedGreet {
    /// Who to greet.
    name: String,
}

/// Issue 41: without `.description(..)`, a tool and a prompt are described by their arguments
/// type's doc comment; a description given wins; a tool without arguments gets none (not the
/// doc comment of `NoArgs`).
#[tokio::test]
async fn descriptions_come_from_the_arguments_doc_comment() {
    let server = Server::builder("described", "1.0.0")
        .tool(tool("sum").handler(|a: Described, _ctx| async move { Ok(a.a.to_string()) }))
        .tool(
            tool("given")
                .description("Given")
                .handler(|a: Described, _ctx| async move { Ok(a.a.to_string()) }),
        )
        .tool(tool("bare").handler(|_: NoArgs, _ctx| async { Ok("bare") }))
        .prompt(
            prompt("hello").get(|args: DescribedGreet, _ctx| async move {
                Ok(vec![PromptMessage::new_text(Role::User, args.name)])
            }),
        )
        .prompt(prompt("undescribed").get(|args: Greet, _ctx| async move {
            Ok(vec![PromptMessage::new_text(Role::User, args.name)])
        }))
        .build();
    let client = server.test_client().connect().await.unwrap();
    let tools = client.request("tools/list", json!({})).await.unwrap();
    let described = |list: &Value, key: &str, name: &str| {
        let found = list[key].as_array().into_iter().flatten();
        let found = found.filter(|t| t["name"] == name).collect::<Vec<_>>();
        assert_eq!(found.len(), 1, "{name} in {list}");
        found[0].get("description").cloned()
    };
    assert_eq!(
        described(&tools, "tools", "sum"),
        Some(json!(
            "Adds two integers (this doc comment describes the tool `sum`)."
        ))
    );
    assert_eq!(described(&tools, "tools", "given"), Some(json!("Given")));
    assert_eq!(described(&tools, "tools", "bare"), None);
    let prompts = client.request("prompts/list", json!({})).await.unwrap();
    assert_eq!(
        described(&prompts, "prompts", "hello"),
        Some(json!("Asks the model to greet someone."))
    );
    assert_eq!(described(&prompts, "prompts", "undescribed"), None);
    client.stop().await;
}

/// A tool that asks the client's model (sampling) and lists the client's roots.
// rmcp marks sampling's and roots' types deprecated (SEP-2577); clients of every era still
// answer them.
#[allow(deprecated)]
fn asking_server() -> Server {
    fn ask() -> fleetmcp::model::CreateMessageRequestParams {
        use fleetmcp::model::{CreateMessageRequestParams, SamplingMessage};
        CreateMessageRequestParams::new(vec![SamplingMessage::user_text("Name a colour")], 20)
    }
    Server::builder("asking", "1.0.0")
        .tool(tool("colour").handler(|_: NoArgs, ctx| async move {
            let answer = ctx.create_message(ask()).await?;
            let text = serde_json::to_value(&answer.message.content)?;
            Ok(format!("{} said {}", answer.model, text["text"]))
        }))
        .tool(tool("roots").handler(|_: NoArgs, ctx| async move {
            let listed = ctx.list_roots().await?;
            let uris: Vec<String> = listed.roots.into_iter().map(|r| r.uri).collect();
            Ok(uris.join(" "))
        }))
        .build()
}

/// Issue 41: the test client answers `sampling/createMessage` and `roots/list` when given a
/// way to, in both eras (the session era on the request's stream, 2026-07-28 in rounds), and
/// declares neither otherwise, so the server does not ask and the call fails.
#[tokio::test]
async fn the_test_client_answers_sampling_and_roots_in_both_eras() {
    for version in ["2025-11-25", "2026-07-28"] {
        let client = asking_server()
            .test_client()
            .protocol_version(version)
            .sampling(|request| {
                let asked = &request["messages"][0]["content"]["text"];
                json!({"role": "assistant", "model": "m1",
                       "content": {"type": "text", "text": format!("red, to {asked}")}})
            })
            .roots(["file:///work", "file:///tmp"])
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{version}: {e}"));
        let colour = client.call_tool("colour", NoArgs {}).await.unwrap();
        assert_eq!(
            TestClient::text(&colour),
            "m1 said \"red, to \\\"Name a colour\\\"\"",
            "{version}"
        );
        let roots = client.call_tool("roots", NoArgs {}).await.unwrap();
        assert_eq!(
            TestClient::text(&roots),
            "file:///work file:///tmp",
            "{version}"
        );
        client.stop().await;

        let silent = asking_server()
            .test_client()
            .protocol_version(version)
            .connect()
            .await
            .unwrap();
        for name in ["colour", "roots"] {
            let refused = silent.call_tool(name, NoArgs {}).await;
            let failed = refused.map_or(true, |r| r.is_error == Some(true));
            assert!(failed, "{version}: {name} without the capability");
        }
        silent.stop().await;
    }
}

/// Issue 41: a tool called as a task gives its result through the test client in both eras,
/// including a task that asks the client a question while it runs (2026-07-28: the task waits
/// in `input_required` until `tasks/update` answers; the session era asks on the stream of
/// `tasks/result`); a tool without task support is an error, not a result.
#[tokio::test]
async fn the_test_client_runs_a_task_augmented_tool_to_its_result() {
    let server = || {
        Server::builder("tasks", "1.0.0")
            .tool(
                tool("report")
                    .task_support(fleetmcp::TaskSupport::Optional)
                    .handler(|_: NoArgs, _ctx| async {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        Ok("12 pages")
                    }),
            )
            .tool(
                tool("confirm_report")
                    .task_support(fleetmcp::TaskSupport::Required)
                    .handler(|_: NoArgs, ctx| async move {
                        Ok(if ctx.confirm("Print it?").await? {
                            "printed"
                        } else {
                            "kept"
                        })
                    }),
            )
            .tool(tool("quick").handler(|_: NoArgs, _ctx| async { Ok("quick") }))
            .build()
    };
    for version in ["2025-11-25", "2026-07-28"] {
        let client = server()
            .test_client()
            .protocol_version(version)
            .elicitation(|_, _| ElicitResult::new(ElicitationAction::Accept))
            .connect()
            .await
            .unwrap();
        let report = client.call_tool_as_task("report", NoArgs {}).await;
        let report = report.unwrap_or_else(|e| panic!("{version}: {e:?}"));
        assert_eq!(TestClient::text(&report), "12 pages", "{version}");
        let asked = client.call_tool_as_task("confirm_report", NoArgs {}).await;
        let asked = asked.unwrap_or_else(|e| panic!("{version}: {e:?}"));
        assert_eq!(TestClient::text(&asked), "printed", "{version}");
        let quick = client.call_tool_as_task("quick", NoArgs {}).await;
        assert!(quick.is_err(), "{version}: {quick:?}");
        client.stop().await;
    }
}

/// The notes of the `*_fn` handlers below, by id.
struct Shelf(std::collections::BTreeMap<u64, String>);

async fn shelf_count(
    _: NoArgs,
    _ctx: fleetmcp::RequestContext,
    shelf: fleetmcp::State<Shelf>,
) -> Result<String, fleetmcp::ToolError> {
    Ok(shelf.0.len().to_string())
}

async fn echo(args: Greet, ctx: fleetmcp::RequestContext) -> Result<String, fleetmcp::ToolError> {
    Ok(format!("{} (stateless: {})", args.name, ctx.is_stateless()))
}

async fn shelf_prompt(
    args: Greet,
    _ctx: fleetmcp::RequestContext,
    shelf: fleetmcp::State<Shelf>,
) -> Result<Vec<PromptMessage>, fleetmcp::PromptError> {
    let text = format!("{}: {} notes", args.name, shelf.0.len());
    Ok(vec![PromptMessage::new_text(Role::User, text)])
}

async fn shelf_about(
    uri: String,
    _ctx: fleetmcp::RequestContext,
    shelf: fleetmcp::State<Shelf>,
) -> Result<Vec<ResourceContents>, ResourceError> {
    Ok(vec![ResourceContents::text(
        format!("{} notes", shelf.0.len()),
        uri,
    )])
}

async fn shelf_note(
    uri: String,
    note: NoteRef2,
    _ctx: fleetmcp::RequestContext,
    shelf: fleetmcp::State<Shelf>,
) -> Result<Vec<ResourceContents>, ResourceError> {
    let text = shelf.0.get(&note.id).cloned();
    let text = text.ok_or_else(|| ResourceError::NotFound(uri.clone()))?;
    Ok(vec![ResourceContents::text(text, uri)])
}

/// Every kind of declaration, finished with a function that takes the state as `State<Shelf>`
/// (no `.state::<Shelf>()`), and one tool whose function takes none.
fn shelf_declarations(builder: fleetmcp::ServerBuilder) -> fleetmcp::ServerBuilder {
    builder
        .tool(tool("count").handler_fn(shelf_count))
        .tool(tool("echo").handler_fn(echo))
        .prompt(prompt("shelf").get_fn(shelf_prompt))
        .resource(resource("shelf://about", "about").read_fn(shelf_about))
        .template(template("shelf://{id}", "note").read_fn(shelf_note))
}

/// Issue 41: handlers as functions (`handler_fn`, `get_fn`, `read_fn`) get the server's state
/// from a `State<T>` argument, its type found from that argument; a server without that state
/// is refused at build, naming every declaration that takes it, as after `.state::<T>()`.
#[tokio::test]
async fn handler_functions_get_the_state_their_argument_names() {
    let refused = shelf_declarations(Server::builder("shelf", "1.0.0")).try_build();
    let why = refused.err().map(|e| e.to_string()).unwrap_or_default();
    for what in [
        "tool `count`",
        "prompt `shelf`",
        "resource `shelf://about`",
        "resource template `shelf://{id}`",
    ] {
        assert!(
            why.contains(&format!("{what} needs state of type `")),
            "{what}: {why}"
        );
    }
    assert!(!why.contains("`echo`"), "echo takes no state: {why}");

    let notes = [(1, "milk".to_string()), (2, "eggs".to_string())];
    for version in ["2025-11-25", "2026-07-28"] {
        let client = shelf_declarations(Server::builder("shelf", "1.0.0"))
            .state(Shelf(notes.iter().cloned().collect()))
            .build()
            .test_client()
            .protocol_version(version)
            .connect()
            .await
            .unwrap();
        let count = client.call_tool("count", NoArgs {}).await.unwrap();
        assert_eq!(TestClient::text(&count), "2", "{version}");
        let echoed = client
            .call_tool("echo", json!({"name": "Ada"}))
            .await
            .unwrap();
        let stateless = version == "2026-07-28";
        assert_eq!(
            TestClient::text(&echoed),
            format!("Ada (stateless: {stateless})")
        );
        let got = client
            .get_prompt("shelf", json!({"name": "Ada"}))
            .await
            .unwrap();
        assert_eq!(
            serde_json::to_value(&got.messages).unwrap()[0]["content"]["text"],
            "Ada: 2 notes"
        );
        let about = client.read_resource("shelf://about").await.unwrap();
        assert_eq!(
            serde_json::to_value(&about.contents).unwrap()[0]["text"],
            "2 notes"
        );
        let note = client.read_resource("shelf://2").await.unwrap();
        assert_eq!(
            serde_json::to_value(&note.contents).unwrap()[0]["text"],
            "eggs"
        );
        client.stop().await;
    }
}
