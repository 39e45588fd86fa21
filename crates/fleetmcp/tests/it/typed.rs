//! The library as a user meets it: handler state named by type and checked when the server is
//! built (or a declaration added), the output schema taken from the returned type, typed prompt
//! arguments, and completers that get the request's context, state and the arguments given.

use std::collections::BTreeMap;
use std::sync::Arc;

use fleetmcp::model::{PromptMessage, ResourceContents, Role};
use fleetmcp::{
    NoArgs, PromptError, ResourceError, Server, ServerBuilder, Structured, prompt, resource,
    template, tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::*;

/// The handlers' state: tickets by team.
struct Desk {
    tickets: BTreeMap<u64, &'static str>,
}

/// Another type of state, which no server here is given.
struct Pager;

#[derive(Deserialize, JsonSchema)]
struct Find {
    team: String,
}

/// What `find` answers.
#[derive(Serialize, JsonSchema)]
struct Found {
    /// The ids of the team's tickets.
    ids: Vec<u64>,
    /// The first one, if any.
    first: Option<u64>,
}

#[derive(Deserialize, JsonSchema)]
struct Triage {
    /// The ticket to triage.
    ticket_id: u64,
    /// Whether to page someone.
    urgent: Option<bool>,
}

fn desk() -> Desk {
    let tickets = [(7, "a"), (12, "a"), (15, "b"), (120, "a")];
    Desk {
        tickets: tickets.into_iter().collect(),
    }
}

/// A tool, a resource, a template and a prompt that each need `Desk`.
fn desk_builder() -> ServerBuilder {
    let find = tool("find")
        .state::<Desk>()
        .handler(|a: Find, _ctx, desk| async move {
            let ids: Vec<u64> = (desk.tickets.iter())
                .filter(|(_, team)| **team == a.team)
                .map(|(id, _)| *id)
                .collect();
            Ok(Structured(Found {
                first: ids.first().copied(),
                ids,
            }))
        });
    let count =
        resource("desk://count", "count")
            .state::<Desk>()
            .read(|uri, _ctx, desk| async move {
                Ok(vec![ResourceContents::text(
                    desk.tickets.len().to_string(),
                    uri,
                )])
            });
    let ticket = template("desk://{team}/tickets/{id}", "ticket")
        .state::<Desk>()
        .complete("id", |partial, given, ctx, desk| {
            // What the client said about itself reaches the completer, as the state and the
            // variables already given do.
            let client = ctx.client_info().and_then(|i| i["name"].as_str());
            let team = given.get("team").map(String::as_str);
            (desk.tickets.iter())
                .filter(|(_, t)| Some(**t) == team && client == Some("fleetmcp-it"))
                .map(|(id, _)| id.to_string())
                .filter(|id| id.starts_with(partial))
                .collect()
        })
        .read(|uri, vars, _ctx, desk| async move {
            let id: u64 = vars["id"]
                .parse()
                .map_err(|_| ResourceError::NotFound(uri.clone()))?;
            let team = desk
                .tickets
                .get(&id)
                .ok_or_else(|| ResourceError::NotFound(uri.clone()))?;
            Ok(vec![ResourceContents::text(
                format!("ticket {id} of {team}"),
                uri,
            )])
        });
    let triage = prompt("triage")
        .state::<Desk>()
        .get(|a: Triage, _ctx, desk| async move {
            let team = (desk.tickets.get(&a.ticket_id)).ok_or_else(|| {
                PromptError::InvalidArguments(format!("no ticket {}", a.ticket_id))
            })?;
            let urgency = if a.urgent == Some(true) {
                "urgently"
            } else {
                "calmly"
            };
            Ok(vec![PromptMessage::new_text(
                Role::User,
                format!("Triage ticket {} of team {team}, {urgency}.", a.ticket_id),
            )])
        });
    Server::builder("desk", "1.0.0")
        .tool(find)
        .resource(count)
        .template(ticket)
        .prompt(triage)
}

#[test]
fn a_server_without_the_state_its_handlers_need_is_refused_naming_each_and_the_type() {
    let refused = desk_builder().try_build().err().expect("refused");
    let why = refused.to_string();
    let desk_type = std::any::type_name::<Desk>();
    for what in [
        "tool `find`",
        "resource `desk://count`",
        "resource template `desk://{team}/tickets/{id}`",
        "prompt `triage`",
    ] {
        let line = format!("{what} needs state of type `{desk_type}`");
        assert!(why.contains(&line), "{line:?} in {why:?}");
    }
    assert!(
        why.ends_with("(give it with `ServerBuilder::state`)"),
        "{why}"
    );

    // `build` panics with the same message; with the state given, both build.
    let panicked = std::panic::catch_unwind(|| desk_builder().build()).err();
    let message = panicked.and_then(|p| p.downcast_ref::<String>().cloned());
    assert_eq!(message, Some(why));
    assert!(desk_builder().state(desk()).try_build().is_ok());

    // Another type than the one given is still missing.
    let wrong = (desk_builder().state(desk()))
        .tool(
            tool("page")
                .state::<Pager>()
                .handler(|_: NoArgs, _, _| async { Ok("paged") }),
        )
        .try_build()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let pager = std::any::type_name::<Pager>();
    assert_eq!(
        wrong,
        format!(
            "tool `page` needs state of type `{pager}`, which the server was not given (give it \
             with `ServerBuilder::state`)"
        )
    );
}

async fn desk_server() -> TestServer {
    serve(desk_builder().state(desk()), config_with(SECRET, |_| {})).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declaration_added_at_runtime_is_refused_without_its_state() {
    let srv = desk_server().await;
    let page = tool("page")
        .state::<Pager>()
        .handler(|_: NoArgs, _, _| async { Ok("paged") });
    let refused = srv.handle.add_tool(page).await.err().map(|e| e.to_string());
    assert!(
        refused.is_some_and(|e| e.starts_with("tool `page` needs state of type `")),
        "refused"
    );
    assert!(!srv.handle.has_tool("page"));
    let with_desk = tool("count_tickets")
        .state::<Desk>()
        .handler(|_: NoArgs, _, desk| async move { Ok(desk.tickets.len().to_string()) });
    srv.handle
        .add_tool(with_desk)
        .await
        .expect("its state is given");
    let c = Client::connect(&srv).await;
    let result = c.call_tool_json("count_tickets", json!({})).await;
    assert_eq!(result_text(&result), "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_output_schema_is_the_returned_types_and_the_state_reaches_the_handler() {
    let srv = desk_server().await;
    let c = Client::connect(&srv).await;
    let v = c.call_json("tools/list", json!({})).await;
    let find = &v["result"]["tools"][0];
    assert_eq!(find["name"], "find");
    let output = &find["outputSchema"];
    assert_eq!(output["type"], "object", "{find}");
    assert_eq!(output["required"], json!(["ids"]), "{output}");
    assert_eq!(
        output["properties"]["ids"],
        json!({"type": "array", "items": {"type": "integer", "minimum": 0},
               "description": "The ids of the team's tickets."})
    );
    assert_eq!(
        output["properties"]["first"]["anyOf"],
        json!([{"type": "integer"}, {"type": "null"}]),
        "{output}"
    );

    let result = c.call_tool_json("find", json!({"team": "a"})).await;
    assert_eq!(
        result["structuredContent"],
        json!({"ids": [7, 12, 120], "first": 7})
    );
    let read = c
        .call_json("resources/read", json!({"uri": "desk://a/tickets/12"}))
        .await;
    assert_eq!(read["result"]["contents"][0]["text"], "ticket 12 of a");
    let read = c
        .call_json("resources/read", json!({"uri": "desk://count"}))
        .await;
    assert_eq!(read["result"]["contents"][0]["text"], "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_arguments_are_listed_and_parsed_from_the_type() {
    let srv = desk_server().await;
    let c = Client::connect(&srv).await;
    let v = c.call_json("prompts/list", json!({})).await;
    assert_eq!(
        v["result"]["prompts"][0]["arguments"],
        json!([
            {"name": "ticket_id", "description": "The ticket to triage.", "required": true},
            {"name": "urgent", "description": "Whether to page someone.", "required": false},
        ])
    );

    let get = |arguments: serde_json::Value| {
        let params = json!({"name": "triage", "arguments": arguments});
        c.request_with_id(json!(9), "prompts/get", params)
    };
    let ok = get(json!({"ticket_id": "12", "urgent": "true"})).await;
    let v: serde_json::Value = ok.json().await.unwrap();
    assert_eq!(
        v["result"]["messages"][0]["content"]["text"], "Triage ticket 12 of team a, urgently.",
        "{v}"
    );
    for (arguments, message) in [
        (
            json!({"ticket_id": "twelve"}),
            "Invalid argument `ticket_id` for prompt triage: expected an integer, got \"twelve\"",
        ),
        (
            json!({"ticket_id": "12", "urgent": "very"}),
            "Invalid argument `urgent` for prompt triage: expected `true` or `false`, got \"very\"",
        ),
        (
            json!({"urgent": "true"}),
            "Missing required argument `ticket_id` for prompt triage",
        ),
    ] {
        let v = expect_rpc_error(get(arguments).await, 200, -32602, json!(9)).await;
        assert_eq!(v["error"]["message"], message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completers_get_the_state_the_arguments_given_and_the_context() {
    let srv = desk_server().await;
    let c = Client::connect(&srv).await;
    let complete = |team: Option<&str>, partial: &str| {
        let mut params = json!({
            "ref": {"type": "ref/resource", "uri": "desk://{team}/tickets/{id}"},
            "argument": {"name": "id", "value": partial},
        });
        if let Some(team) = team {
            params["context"] = json!({"arguments": {"team": team}});
        }
        let c = &c;
        async move {
            let v = c.call_json("completion/complete", params).await;
            v["result"]["completion"]["values"].clone()
        }
    };
    assert_eq!(complete(Some("a"), "1").await, json!(["12", "120"]));
    assert_eq!(complete(Some("b"), "").await, json!(["15"]));
    assert_eq!(complete(None, "").await, json!([]));
}

/// The state shared with the program: the handle kept outside sees what handlers did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_state_is_the_programs_own_value() {
    let seen = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let note = tool("note")
        .state::<parking_lot::Mutex<Vec<String>>>()
        .handler(|a: Find, _ctx, seen| async move {
            seen.lock().push(a.team);
            Ok("noted")
        });
    let builder = Server::builder("notes", "1.0.0")
        .shared_state(seen.clone())
        .tool(note);
    let srv = serve(builder, config_with(SECRET, |_| {})).await;
    let c = Client::connect(&srv).await;
    c.call_tool_json("note", json!({"team": "a"})).await;
    assert_eq!(*seen.lock(), ["a"]);
}

/// A ticket's state, a `$ref` in the published schema.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Status {
    Open,
    Closed,
}

#[derive(Deserialize, JsonSchema)]
struct Filter {
    /// Only tickets in this state.
    status: Option<Status>,
}

/// Arguments are checked against the schema `tools/list` publishes, no wider one (issue 38:
/// `{"status": null}` passed where the published schema, a `$ref` to `Status`, allows no
/// `null`, and errors named an `anyOf` the client never saw): a client that follows the
/// published schema and one that does not meet the same rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_meet_the_published_schema_and_no_wider_one() {
    let filter = tool("filter").handler(|f: Filter, _ctx| async move {
        Ok(match f.status {
            Some(Status::Open) => "open",
            Some(Status::Closed) => "closed",
            None => "any",
        })
    });
    let srv = serve(
        fleetmcp::Server::builder("filter", "1.0.0").tool(filter),
        config_with(SECRET, |_| {}),
    )
    .await;
    let c = Client::connect(&srv).await;
    let listed = c.call_json("tools/list", json!({})).await;
    let schema = listed["result"]["tools"][0]["inputSchema"].clone();
    let validator = jsonschema::validator_for(&schema).expect("the published schema compiles");
    for (arguments, answer) in [
        (json!({}), Some("any")),
        (json!({"status": "open"}), Some("open")),
        (json!({"status": null}), None),
        (json!({"status": "pending"}), None),
    ] {
        let published_accepts = validator.is_valid(&arguments);
        let v = c
            .call_json(
                "tools/call",
                json!({"name": "filter", "arguments": arguments}),
            )
            .await;
        let served = v["result"]["isError"] != true;
        assert_eq!(published_accepts, served, "{arguments}: {v}");
        match answer {
            Some(text) => assert_eq!(result_text(&v["result"]), text, "{v}"),
            None => {
                let text = result_text(&v["result"]);
                assert!(text.contains("status"), "{text}");
                assert!(!text.contains("anyOf"), "{text}");
            }
        }
    }
}

/// Issue 41: MCP (to 2025-11-25) wants an object as `structuredContent` and an object schema
/// as `outputSchema`; a tool returning a list publishes and sends it under `result` of one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_list_is_sent_and_published_inside_an_object() {
    let list = tool("list").handler(|_: NoArgs, _ctx| async move {
        Ok(Structured(vec![Found {
            ids: vec![7],
            first: Some(7),
        }]))
    });
    let srv = serve(
        Server::builder("lists", "1.0.0").tool(list),
        config_with(SECRET, |_| {}),
    )
    .await;
    let c = Client::connect(&srv).await;
    let v = c.call_json("tools/list", json!({})).await;
    let output = &v["result"]["tools"][0]["outputSchema"];
    assert_eq!(output["type"], "object", "{output}");
    assert_eq!(output["required"], json!(["result"]), "{output}");
    assert_eq!(output["properties"]["result"]["type"], "array", "{output}");

    let result = c.call_tool_json("list", json!({})).await;
    let sent = json!({"result": [{"ids": [7], "first": 7}]});
    assert_eq!(result["structuredContent"], sent, "{result}");
    let text: serde_json::Value = serde_json::from_str(&result_text(&result)).unwrap();
    assert_eq!(text, sent, "the text is the same JSON");
    let validator = jsonschema::validator_for(output).unwrap();
    assert!(validator.is_valid(&result["structuredContent"]), "{output}");
}
