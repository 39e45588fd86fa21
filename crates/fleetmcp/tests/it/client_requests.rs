//! Requests from the server to the client during a tool call: sampling and elicitation, sent
//! on the call's SSE stream and answered by a separate POST.

use serde_json::{Value, json};

use crate::support::*;

/// Starts `tool`, waits for its request to the client, answers it with `answer` (a JSON-RPC
/// `result` or `error` member), and returns (the server's request, the tool's response).
async fn round_trip(c: &Client, id: i64, tool: &str, answer: Value) -> (Value, Value) {
    let res = c.start_tool(id, tool, json!({})).await;
    let mut s = SseStream::new(res);
    let (before, request) = s.until_server_request().await;
    assert!(
        before.iter().all(SseEvent::is_priming),
        "only the priming event precedes the request: {before:?}"
    );
    assert_eq!(request["jsonrpc"], "2.0");
    let rid = request["id"].clone();
    assert!(rid.is_string() || rid.is_number(), "{request}");
    let mut reply = json!({"jsonrpc": "2.0", "id": rid});
    for (k, v) in answer.as_object().unwrap() {
        reply[k] = v.clone();
    }
    let res = c.send(&reply).await;
    assert_eq!(res.status(), 202, "the client's answer is accepted");
    assert!(res.bytes().await.unwrap().is_empty());
    let (between, response) = s.until_response(&json!(id)).await;
    assert!(between.is_empty(), "{between:?}");
    assert!(
        s.next().await.is_none(),
        "the stream ends after the response"
    );
    (request, response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_round_trip() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let (request, response) = round_trip(
        &c,
        3,
        "sample",
        json!({"result": {
            "role": "assistant",
            "content": {"type": "text", "text": "hi there"},
            "model": "test-model",
            "stopReason": "endTurn"
        }}),
    )
    .await;
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(request["params"]["maxTokens"], 20);
    assert_eq!(
        request["params"]["messages"][0]["content"]["text"],
        "Say hi"
    );
    assert_ne!(response["result"]["isError"], true, "{response}");
    assert_eq!(result_text(&response["result"]), "sampled: hi there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_round_trip() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let (request, response) = round_trip(
        &c,
        4,
        "elicit",
        json!({"result": {"action": "accept", "content": {"name": "Ada"}}}),
    )
    .await;
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Your name?");
    assert_eq!(
        request["params"]["requestedSchema"]["required"],
        json!(["name"])
    );
    assert_ne!(response["result"]["isError"], true, "{response}");
    assert_eq!(result_text(&response["result"]), "elicited: accept Ada");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_error_answer_becomes_a_tool_error() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let (_, response) = round_trip(
        &c,
        5,
        "sample",
        json!({"error": {"code": -1, "message": "User rejected sampling request"}}),
    )
    .await;
    assert_eq!(response["result"]["isError"], true, "{response}");
    let text = result_text(&response["result"]);
    assert!(text.contains("User rejected sampling request"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_request_gets_its_own_id() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let answer = json!({"result": {"action": "decline"}});
    let (r1, _) = round_trip(&c, 10, "elicit", answer.clone()).await;
    let (r2, resp) = round_trip(&c, 11, "elicit", answer).await;
    assert_ne!(r1["id"], r2["id"]);
    assert_eq!(result_text(&resp["result"]), "elicited: decline <no name>");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_capability_gets_an_is_error_result() {
    let srv = start().await;
    let c = Client::connect_with(&srv.mcp, LATEST, json!({})).await;
    for (tool, capability) in [("sample", "sampling"), ("elicit", "elicitation")] {
        // Nothing is sent to the client, so the answer is plain JSON.
        let result = c.call_tool_json(tool, json!({})).await;
        assert_eq!(result["isError"], true, "{result}");
        let text = result_text(&result);
        assert!(text.contains(capability), "{tool}: {text}");
    }
    // Declaring only one capability enables only that one.
    let c = Client::connect_with(&srv.mcp, LATEST, json!({"elicitation": {}})).await;
    let result = c.call_tool_json("sample", json!({})).await;
    assert_eq!(result["isError"], true);
    assert!(result_text(&result).contains("sampling"));
}

/// A form asked with `elicit_form`: its fields are the form's.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct TicketForm {
    /// What is wrong.
    title: String,
    priority: Priority,
    urgent: Option<bool>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Priority {
    Low,
    High,
}

/// Not a flat form: `elicit_form` refuses it before asking.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct NestedForm {
    ticket: TicketForm,
}

/// The fixture with tools that ask through the typed elicitation.
async fn start_typed() -> TestServer {
    use fleetmcp::{Elicited, NoArgs, tool};
    let builder = fixture_builder(std::sync::Arc::default())
        .tool(tool("ticket_form").handler(|_: NoArgs, ctx| async move {
            Ok(
                match ctx.elicit_form::<TicketForm>("Open a ticket?").await? {
                    Elicited::Accepted(t) => {
                        format!(
                            "accepted {} {:?} urgent={:?}",
                            t.title, t.priority, t.urgent
                        )
                    }
                    Elicited::Declined => "declined".to_string(),
                    Elicited::Cancelled => "cancelled".to_string(),
                },
            )
        }))
        .tool(tool("confirm").handler(|_: NoArgs, ctx| async move {
            Ok(format!("confirmed={}", ctx.confirm("Delete it?").await?))
        }))
        .tool(tool("nested_form").handler(|_: NoArgs, ctx| async move {
            ctx.elicit_form::<NestedForm>("Nested?").await?;
            Ok("asked")
        }));
    serve(builder, config_with(SECRET, |_| {})).await
}

/// Issue 41: `elicit_form::<T>` sends the specification's flat form made from `T` and gives
/// the answer back as a `T`, or says the user declined or cancelled; `confirm` is a yes or no.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_form_is_asked_flat_and_answered_as_its_type() {
    let srv = start_typed().await;
    let c = Client::connect(&srv).await;
    let accept = json!({"result": {"action": "accept",
        "content": {"title": "printer on fire", "priority": "high"}}});
    let (request, response) = round_trip(&c, 20, "ticket_form", accept).await;
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Open a ticket?");
    assert_eq!(
        request["params"]["requestedSchema"],
        json!({"type": "object", "required": ["title", "priority"], "properties": {
            "title": {"type": "string", "description": "What is wrong."},
            "priority": {"type": "string", "enum": ["low", "high"]},
            "urgent": {"type": "boolean"}}})
    );
    assert_eq!(
        result_text(&response["result"]),
        "accepted printer on fire High urgent=None"
    );
    for (action, text) in [("decline", "declined"), ("cancel", "cancelled")] {
        let answer = json!({"result": {"action": action}});
        let (_, response) = round_trip(&c, 21, "ticket_form", answer).await;
        assert_eq!(result_text(&response["result"]), text, "{response}");
    }
    // An answer that is not a `TicketForm` is refused, not taken.
    let wrong =
        json!({"result": {"action": "accept", "content": {"title": "x", "priority": "urgent"}}});
    let (_, response) = round_trip(&c, 22, "ticket_form", wrong).await;
    assert_eq!(response["error"]["code"], -32602, "{response}");

    let yes = json!({"result": {"action": "accept", "content": {}}});
    let (request, response) = round_trip(&c, 23, "confirm", yes).await;
    assert_eq!(
        request["params"]["requestedSchema"],
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(result_text(&response["result"]), "confirmed=true");
    let no = json!({"result": {"action": "decline"}});
    let (_, response) = round_trip(&c, 24, "confirm", no).await;
    assert_eq!(result_text(&response["result"]), "confirmed=false");

    // A type that cannot be a form is the server's mistake: nothing is sent, and the error
    // names the type and the field.
    let v = c
        .call_json(
            "tools/call",
            json!({"name": "nested_form", "arguments": {}}),
        )
        .await;
    assert_eq!(v["error"]["code"], -32603, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("NestedForm") && message.contains("`ticket`"),
        "{message}"
    );

    // Without the capability, the client is not asked.
    let bare = Client::connect_with(&srv.mcp, LATEST, json!({})).await;
    for tool in ["ticket_form", "confirm"] {
        let result = bare.call_tool_json(tool, json!({})).await;
        assert_eq!(result["isError"], true, "{result}");
        assert!(result_text(&result).contains("elicitation"), "{result}");
    }
}
