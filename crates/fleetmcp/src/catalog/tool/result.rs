//! What a tool's handler may return, made into the `tools/call` result: text, content blocks,
//! a full result, or a [`Structured`] value sent as `structuredContent`, whose type is also the
//! tool's `outputSchema`.

use std::collections::BTreeMap;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::value::RawValue;

use super::schema::{NullForm, RESULT_KEY, generate};

/// What a handler may return.
pub trait IntoToolResult {
    /// The `tools/call` result.
    fn into_tool_result(self) -> CallToolResult;

    /// The schema of the `structuredContent` this type's results carry, published as the
    /// tool's `outputSchema`; `None` (the default) for results without one.
    fn output_schema() -> Option<JsonObject>
    where
        Self: Sized,
    {
        None
    }

    /// What the server sends: the result, or for [`Structured`] its value written once as JSON
    /// (the answer is written from that text, not from a `CallToolResult`). Not for
    /// implementors: the default is [`IntoToolResult::into_tool_result`]'s result.
    #[doc(hidden)]
    fn into_tool_output(self) -> ToolOutput
    where
        Self: Sized,
    {
        ToolOutput(Output::Result(self.into_tool_result()))
    }
}

/// A handler's result as the server keeps it until it answers. Hidden: only the crate makes
/// and reads one (it is public because [`IntoToolResult::into_tool_output`] returns it).
#[doc(hidden)]
pub struct ToolOutput(pub(crate) Output);

pub(crate) enum Output {
    Result(CallToolResult),
    /// A [`Structured`] value, serialised once: the `session`-era answer is written from this
    /// text (its `structuredContent`, and escaped, its text content), without the
    /// `serde_json::Value` and the `CallToolResult` the other results go through (issue 23).
    Structured(Box<RawValue>),
}

impl ToolOutput {
    /// The result as a `CallToolResult`, for the paths that keep or reshape one (a task's
    /// record, a 2026-07-28 answer). A structured value reads back as it was written; one that
    /// cannot (deeper than the parser's nesting limit) is a failed result, as a value that does
    /// not serialise is.
    pub(crate) fn into_result(self) -> CallToolResult {
        match self.0 {
            Output::Result(r) => r,
            Output::Structured(raw) => match serde_json::from_str(raw.get()) {
                Ok(value) => structured(raw.get().to_owned(), value),
                Err(e) => not_serialised(&e),
            },
        }
    }
    /// The result of a tool whose output schema was not an object (see
    /// [`wrap_non_object`](super::schema::wrap_non_object)): its structured value, held under
    /// [`RESULT_KEY`] (`[1, 2]` is sent as `{"result": [1, 2]}`, and so is its text). A result
    /// without one (a failure) is left as it is.
    pub(crate) fn wrapped(self) -> Self {
        match self.0 {
            Output::Structured(raw) => {
                // Written around the text as it is: the value is not parsed again.
                let held = [(RESULT_KEY, &*raw)]
                    .into_iter()
                    .collect::<BTreeMap<_, _>>();
                match serde_json::value::to_raw_value(&held) {
                    Ok(held) => ToolOutput(Output::Structured(held)),
                    Err(e) => ToolOutput(Output::Result(not_serialised(&e))),
                }
            }
            Output::Result(mut r) => {
                if let Some(value) = r.structured_content.take() {
                    r.structured_content = Some(serde_json::json!({ RESULT_KEY: value }));
                }
                ToolOutput(Output::Result(r))
            }
        }
    }
}

/// The `CallToolResult` of a structured value: the value, and its JSON text for older clients.
fn structured(text: String, value: serde_json::Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(value);
    r
}

fn not_serialised(e: &serde_json::Error) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "the tool's result could not be serialised: {e}"
    ))])
}

impl IntoToolResult for CallToolResult {
    fn into_tool_result(self) -> CallToolResult {
        self
    }
}
impl IntoToolResult for String {
    fn into_tool_result(self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(self)])
    }
}
impl IntoToolResult for &'static str {
    fn into_tool_result(self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(self)])
    }
}
impl IntoToolResult for Vec<ContentBlock> {
    fn into_tool_result(self) -> CallToolResult {
        CallToolResult::success(self)
    }
}

/// A structured result: sent as `structuredContent`, and as JSON text for older clients. A tool
/// whose handler returns it publishes the JSON Schema of `T` as its `outputSchema` (an
/// `Option` field written `"anyOf": [{..}, {"type": "null"}]` rather than with a type array,
/// since a `None` is sent as `null`).
///
/// MCP (up to 2025-11-25) wants `structuredContent` to be an object and the `outputSchema` to
/// say so. A `T` whose schema is not an object (a `Vec`, a string or number, an enum of
/// strings, an `Option`, a `serde_json::Value`) is sent held in one, under `"result"`:
/// `Structured(vec![1, 2])` is sent as `{"result": [1, 2]}` (its text too), and the published
/// `outputSchema` is an object with one required property, `result`, of `T`'s schema. (For an
/// object of any shape, return a `serde_json::Map`, whose schema is an object.)
///
/// ```
/// use fleetmcp::{Structured, tool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add { a: i64, b: i64 }
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Sum { sum: i64 }
///
/// let add = tool("add").handler(|args: Add, _ctx| async move {
///     Ok(Structured(Sum { sum: args.a + args.b }))
/// });
/// let output = add.descriptor().output_schema.as_ref().map(|s| s["properties"].clone());
/// assert_eq!(output, Some(serde_json::json!({"sum": {"type": "integer"}})));
///
/// // A list is not an object: it is sent as `{"result": [..]}`, as the schema says.
/// let evens = tool("evens").handler(|_: fleetmcp::NoArgs, _ctx| async move {
///     Ok(Structured(vec![2, 4, 6]))
/// });
/// let output = serde_json::Value::Object((*evens.descriptor().output_schema.clone().unwrap()).clone());
/// assert_eq!(output["type"], "object");
/// assert_eq!(output["required"], serde_json::json!(["result"]));
/// assert_eq!(output["properties"]["result"]["type"], "array");
/// ```
pub struct Structured<T>(pub T);

impl<T: Serialize + JsonSchema> IntoToolResult for Structured<T> {
    fn output_schema() -> Option<JsonObject> {
        Some(generate::<T>(Some(NullForm::AnyOf)))
    }

    fn into_tool_result(self) -> CallToolResult {
        match serde_json::to_value(&self.0) {
            Ok(value) => structured(value.to_string(), value),
            Err(e) => not_serialised(&e),
        }
    }

    /// Written once, straight from `T`: no `Value` tree, no second writing of it as text.
    fn into_tool_output(self) -> ToolOutput {
        match serde_json::value::to_raw_value(&self.0) {
            Ok(raw) => ToolOutput(Output::Structured(raw)),
            Err(e) => ToolOutput(Output::Result(not_serialised(&e))),
        }
    }
}
