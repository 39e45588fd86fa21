//! What a tool's handler may return, made into the `tools/call` result: text, content blocks,
//! a full result, or a [`Structured`] value sent as `structuredContent`.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

/// What a handler may return.
pub trait IntoToolResult {
    fn into_tool_result(self) -> CallToolResult;
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

/// A structured result: sent as `structuredContent`, and as JSON text for older clients.
pub struct Structured<T>(pub T);

impl<T: Serialize> IntoToolResult for Structured<T> {
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
