//! A declared tool as the server holds it: its `tools/list` entry, what a call needs, the check
//! of its arguments against the input schema, and its handler.

use futures_util::future::BoxFuture;
use rmcp::model::Tool;
use serde_json::{Value, json};

use super::{ToolError, ToolOutput};
use crate::catalog::state::Needs;
use crate::context::RequestContext;
use crate::protocol::ErrorData;

pub(super) type Handler = dyn Fn(Value, RequestContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>>
    + Send
    + Sync;

/// A declared tool.
pub struct ToolDef {
    pub(super) descriptor: Tool,
    pub(super) validator: Option<jsonschema::Validator>,
    pub(super) handler: Box<Handler>,
    /// `Mcp-Param-{Name}` header name → argument, from `x-mcp-header` annotations.
    pub(super) header_params: Vec<(String, String)>,
    /// Client capabilities a call needs (2026-07-28 answers `-32021` without them).
    pub(super) required_capabilities: Option<serde_json::Map<String, Value>>,
    pub(super) task_support: crate::tasks::TaskSupport,
    pub(super) escalates: bool,
    pub(super) scope: Option<String>,
    /// The state its handler gets, checked when it enters a server.
    pub(super) needs: Option<Needs>,
}

impl ToolDef {
    /// The scope a call needs (see [`ToolBuilder::scope`](super::ToolBuilder::scope)).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }
    /// The tool's name, as `tools/call` names it.
    pub fn name(&self) -> &str {
        &self.descriptor.name
    }
    /// The entry of `tools/list`.
    pub fn descriptor(&self) -> &Tool {
        &self.descriptor
    }

    /// The state its handler needs, named for the check when it enters a server.
    pub(crate) fn needs(&self) -> Option<(String, Needs)> {
        Needs::named(|| format!("tool `{}`", self.name()), self.needs)
    }

    /// `(header name, argument)` pairs of the arguments annotated `x-mcp-header`.
    pub fn header_params(&self) -> &[(String, String)] {
        &self.header_params
    }

    /// Whether the tool runs as a background task (2026-07-28 tasks extension).
    pub fn task_support(&self) -> crate::tasks::TaskSupport {
        self.task_support
    }

    /// Whether the tool starts as a plain request and becomes a task when its handler calls
    /// [`RequestContext::escalate`].
    pub fn escalates(&self) -> bool {
        self.escalates
    }

    /// Capabilities the client must declare to call this tool.
    pub fn required_capabilities(&self) -> Option<&serde_json::Map<String, Value>> {
        self.required_capabilities.as_ref()
    }

    /// Checks the arguments against the input schema, naming the offending field.
    pub fn validate(&self, args: &Value) -> Result<(), ErrorData> {
        let Some(v) = &self.validator else {
            return Ok(());
        };
        // Nearly every call's arguments are valid: `is_valid` answers that without the boxed
        // iterator and the error values `iter_errors` makes (issue 40); the errors are
        // collected only for arguments that fail.
        if v.is_valid(args) {
            return Ok(());
        }
        let errors: Vec<(String, String)> = v
            .iter_errors(args)
            .map(|e| (e.instance_path().to_string(), e.to_string()))
            .collect();
        if errors.is_empty() {
            return Ok(());
        }
        let details: Vec<Value> = errors
            .iter()
            .map(
                |(path, msg)| json!({"field": field_name(path, msg), "path": path, "message": msg}),
            )
            .collect();
        let (path, msg) = &errors[0];
        let field = field_name(path, msg);
        Err(ErrorData::new(
            rmcp::model::ErrorCode::INVALID_PARAMS,
            format!("Invalid arguments for tool {}: {field}: {msg}", self.name()),
            Some(json!({"tool": self.name(), "errors": details})),
        ))
    }

    pub(crate) fn call(
        &self,
        args: Value,
        ctx: RequestContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        (self.handler)(args, ctx)
    }
}

/// The field an error is about: the instance path, or for a missing property its name.
fn field_name(path: &str, msg: &str) -> String {
    if path.is_empty() || path == "/" {
        // "\"resolution\" is a required property" names the field in quotes.
        if let Some(rest) = msg.strip_prefix('"')
            && let Some(end) = rest.find('"')
        {
            return rest[..end].to_string();
        }
        return "arguments".to_string();
    }
    path.trim_start_matches('/').replace('/', ".")
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde_json::{Value, json};

    use crate::catalog::tool;

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Close {
        id: u64,
        resolution: String,
    }

    #[test]
    fn validation_names_the_wrong_field() {
        let t = tool("close").handler(|_: Close, _ctx| async { Ok("ok") });
        assert!(t.validate(&json!({"id": 1, "resolution": "fixed"})).is_ok());
        let e = t.validate(&json!({"id": 1})).unwrap_err();
        assert_eq!(e.code.0, -32602);
        assert!(e.message.contains("resolution"), "{}", e.message);
        let e = t
            .validate(&json!({"id": "one", "resolution": "x"}))
            .unwrap_err();
        assert!(e.message.contains("id"), "{}", e.message);
        let schema = Value::Object((*t.descriptor().input_schema).clone());
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
    }
}
