// Two handlers of the wrong shape for `handler_fn`: one without the `RequestContext`, one
// that takes the state as an `Arc<T>` (what `.state::<T>().handler` gives) rather than a
// `State<T>`. Each is refused with the note saying what a handler takes.
use std::sync::Arc;

use fleetmcp::{State, ToolError, tool};

struct Notes;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    text: String,
}

async fn without_ctx(args: Add, _notes: State<Notes>) -> Result<String, ToolError> {
    Ok(args.text)
}

async fn with_arc(
    args: Add,
    _ctx: fleetmcp::RequestContext,
    _notes: Arc<Notes>,
) -> Result<String, ToolError> {
    Ok(args.text)
}

fn main() {
    let _ = tool("without_ctx").handler_fn(without_ctx);
    let _ = tool("with_arc").handler_fn(with_arc);
}
