//! The notes server (the crate README's getting-started, built without fleetmcp's `redis`
//! feature) as a client starts it: the real binary over stdio (`FLEETMCP_TRANSPORT=stdio`),
//! line by line on its pipes: `initialize`, a note added (structured output), found again with
//! progress before the answer, read through the template, and the server exiting 0 at EOF.

#[path = "../../stdio_support.rs"]
mod stdio;
#[path = "../../e2e_support.rs"]
mod support;

use std::time::Duration;

use serde_json::{Value, json};
use stdio::RawServer;
use support::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_notes");

/// Sends request `id` of `method` with `params`; the lines before its answer, and the answer.
fn call(server: &mut RawServer, id: i64, method: &str, params: Value) -> (Vec<Value>, Value) {
    let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    server.send(&request.to_string());
    server.answer(&Value::from(id))
}

#[test]
fn a_note_is_added_found_with_progress_and_read_over_stdio() {
    let scratch = TempDir::new("notes-stdio");
    let mut server = RawServer::start(BIN, &[("FLEETMCP_TRANSPORT", "stdio")], scratch.path());
    let init = server.initialize();
    assert_eq!(init["result"]["serverInfo"]["name"], "notes", "{init}");

    let (_, added) = call(
        &mut server,
        1,
        "tools/call",
        json!({"name": "add_note", "arguments": {"text": "buy milk"}}),
    );
    assert_eq!(
        added["result"]["structuredContent"],
        json!({"id": 1}),
        "{added}"
    );

    let (before, found) = call(
        &mut server,
        2,
        "tools/call",
        json!({"name": "search_notes", "arguments": {"query": "milk"}, "_meta": {"progressToken": "p"}}),
    );
    assert_eq!(
        found["result"]["content"][0]["text"], "1: buy milk",
        "{found}"
    );
    let progress: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 1, "one note, one progress step: {before:?}");
    assert_eq!(progress[0]["params"]["progressToken"], "p");

    let (_, read) = call(
        &mut server,
        3,
        "resources/read",
        json!({"uri": "notes://1"}),
    );
    assert_eq!(read["result"]["contents"][0]["text"], "buy milk", "{read}");

    server.close_stdin();
    let status = server.wait(Duration::from_secs(20));
    assert!(
        status.success(),
        "exit {status:?}; stderr:\n{}",
        server.stderr()
    );
}
