//! What a tool's handler may return, made into the `tools/call` result: text, content blocks,
//! a full result, or a [`Structured`] value sent as `structuredContent`, whose type is also the
//! tool's `outputSchema`.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use schemars::JsonSchema;
use serde::Serialize;

use super::schema::{NullForm, generate};

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
/// ```
pub struct Structured<T>(pub T);

impl<T: Serialize + JsonSchema> IntoToolResult for Structured<T> {
    fn output_schema() -> Option<JsonObject> {
        Some(generate::<T>(Some(NullForm::AnyOf)))
    }

    fn into_tool_result(self) -> CallToolResult {
        match serde_json::to_value(&self.0) {
            Ok(value) => {
                let text = value.to_string();
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = Some(value);
                r
            }
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                "the tool's result could not be serialised: {e}"
            ))]),
        }
    }
}
