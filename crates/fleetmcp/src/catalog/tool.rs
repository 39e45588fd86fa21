//! Tools: a name, a JSON Schema for the arguments, and an async handler.
//!
//! ```
//! use fleetmcp::{tool, Structured};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Add { a: i64, b: i64 }
//! #[derive(Serialize, JsonSchema)]
//! struct Sum { sum: i64 }
//!
//! let add = tool("add")
//!     .description("Adds two integers")
//!     .output_schema::<Sum>()
//!     .handler(|args: Add, _ctx| async move { Ok(Structured(Sum { sum: args.a + args.b })) });
//! assert_eq!(add.name(), "add");
//! ```

use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::context::{ClientRequestError, RequestContext};
use crate::protocol::ErrorData;

/// Arguments of a tool that takes none.
#[derive(Debug, Default, serde::Deserialize, JsonSchema)]
pub struct NoArgs {}

/// Why a tool call failed.
///
/// `?` converts any error into it: a [`ClientRequestError`] keeps its meaning (see
/// [`ToolError::InputRequired`]), an [`ErrorData`] becomes [`ToolError::Protocol`], and every
/// other error becomes [`ToolError::Failed`] with the error's message.
///
/// It deliberately does not implement [`std::error::Error`]: that would make the blanket
/// `From<E: Error>` conversion overlap with `From<ToolError> for ToolError`.
#[derive(Debug)]
pub enum ToolError {
    /// The tool ran and failed: the client gets a result with `isError: true`, which the model
    /// can read and act on.
    Failed(String),
    /// A protocol error (`-32602` for bad arguments, and so on).
    Protocol(ErrorData),
    /// The handler needs answers from the client first (2026-07-28: the result becomes an
    /// `InputRequiredResult`). Produced by `?` on [`RequestContext`]'s client requests.
    InputRequired,
}

impl ToolError {
    /// A [`ToolError::Failed`] with this message.
    pub fn failed(msg: impl Into<String>) -> Self {
        Self::Failed(msg.into())
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Failed(msg) => f.write_str(msg),
            Self::Protocol(e) => f.write_str(&e.message),
            Self::InputRequired => f.write_str("input required from the client"),
        }
    }
}

from_any_error!(ToolError);

/// What an error raised with `?` in a handler means to the client; shared by the conversions
/// into [`ToolError`], [`crate::PromptError`] and [`crate::ResourceError`].
pub(super) enum Classified {
    InputRequired,
    Protocol(ErrorData),
    Failed(String),
}

/// Sorts an arbitrary error. The blanket `From<E>` impls cannot have a second, more specific
/// impl for [`ClientRequestError`] beside them (they would overlap), so the specific errors are
/// recognised here at run time by downcasting.
pub(super) fn classify<E>(e: E) -> Classified
where
    E: std::error::Error + Send + Sync + 'static,
{
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    let boxed = match boxed.downcast::<ClientRequestError>() {
        Ok(e) => {
            return match *e {
                ClientRequestError::InputRequired => Classified::InputRequired,
                ClientRequestError::InvalidInput(e) => Classified::Protocol(e),
                other => Classified::Failed(other.to_string()),
            };
        }
        Err(other) => other,
    };
    // An `ErrorData` is already a protocol error with its code: keep it rather than flattening
    // it into an `isError` result.
    match boxed.downcast::<ErrorData>() {
        Ok(e) => Classified::Protocol(*e),
        Err(other) => Classified::Failed(other.to_string()),
    }
}

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

type Handler = dyn Fn(Value, RequestContext) -> BoxFuture<'static, Result<CallToolResult, ToolError>>
    + Send
    + Sync;

/// A declared tool.
pub struct ToolDef {
    descriptor: Tool,
    validator: Option<jsonschema::Validator>,
    handler: Box<Handler>,
    /// `Mcp-Param-{Name}` header name → argument, from `x-mcp-header` annotations.
    header_params: Vec<(String, String)>,
    /// Client capabilities a call needs (2026-07-28 answers `-32021` without them).
    required_capabilities: Option<serde_json::Map<String, Value>>,
    task_support: crate::tasks::TaskSupport,
    escalates: bool,
    scope: Option<String>,
}

impl ToolDef {
    /// The scope a call needs (see [`ToolBuilder::scope`]).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }
    pub fn name(&self) -> &str {
        &self.descriptor.name
    }
    /// The entry of `tools/list`.
    pub fn descriptor(&self) -> &Tool {
        &self.descriptor
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
    ) -> BoxFuture<'static, Result<CallToolResult, ToolError>> {
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

/// Starts declaring a tool.
pub fn tool(name: impl Into<String>) -> ToolBuilder {
    ToolBuilder {
        name: name.into(),
        title: None,
        description: None,
        annotations: None,
        input_schema: None,
        output_schema: None,
        meta: None,
        required_capabilities: None,
        task_support: crate::tasks::TaskSupport::Forbidden,
        escalates: false,
        scope: None,
    }
}

/// Builder returned by [`tool`].
pub struct ToolBuilder {
    name: String,
    title: Option<String>,
    description: Option<String>,
    annotations: Option<ToolAnnotations>,
    input_schema: Option<JsonObject>,
    output_schema: Option<JsonObject>,
    meta: Option<rmcp::model::MetaObject>,
    required_capabilities: Option<serde_json::Map<String, Value>>,
    task_support: crate::tasks::TaskSupport,
    escalates: bool,
    scope: Option<String>,
}

/// The JSON Schema (2020-12) of a Rust type, as an object: exactly what serde accepts, so an
/// `Option` field allows `null` (`"type": ["string", "null"]`). Tools validate arguments
/// against this form; `tools/list` shows the form without type arrays (see
/// [`ToolBuilder::handler`]).
pub fn schema_of<T: JsonSchema>() -> JsonObject {
    generate::<T>(None)
}

/// How the published schemas show the `null` that schemars adds for `Option<T>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NullForm {
    /// Arguments: an optional property is simply left out of `required`, with the inner
    /// schema alone. Clients never need to send `null`, and the single-type schema dialects of
    /// several model providers reject `"type": [.., "null"]`.
    Omit,
    /// Results: serde writes `None` as `null`, so the schema must keep allowing it or clients
    /// that check `structuredContent` reject the result; it is spelled `anyOf` instead of a
    /// type array.
    AnyOf,
}

/// The schema of `T`, with `null` rewritten as `form` says (`None`: as schemars writes it).
fn generate<T: JsonSchema>(form: Option<NullForm>) -> JsonObject {
    let mut schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    if let Some(form) = form {
        schemars::transform::Transform::transform(&mut NoTypeArrays(form), &mut schema);
    }
    match schema.to_value() {
        Value::Object(mut map) => {
            strip_rust_formats(&mut map);
            map
        }
        // A schema that is `true`/`false` (a type accepting anything or nothing): publish it
        // as an open object, which is what MCP requires of an input schema's root.
        _ => {
            let mut m = JsonObject::new();
            m.insert("type".into(), Value::String("object".into()));
            m
        }
    }
}

/// Removes `"type": [..]` arrays from a schema and its subschemas (`$defs` included), and
/// with [`NullForm::Omit`] the `null` alternative schemars adds for `Option<T>`. A schema
/// that allows nothing but `null` (the unit type) is left alone.
#[derive(Debug, Clone)]
struct NoTypeArrays(NullForm);

impl schemars::transform::Transform for NoTypeArrays {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        schemars::transform::transform_subschemas(self, schema);
        let Some(obj) = schema.as_object_mut() else {
            return;
        };
        if self.0 == NullForm::Omit {
            drop_null_alternative(obj);
        }
        split_type_array(obj);
    }
}

/// Whether `v` is the schema schemars writes for `null` (`{"type": "null"}`).
fn is_null_schema(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.len() == 1 && o.get("type").and_then(Value::as_str) == Some("null"))
}

/// Keywords that only annotate a schema; when an `anyOf` of one schema is folded into its
/// parent, the parent's (a field's doc comment, say) win over the inner schema's.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Takes `null` out of what `allow_null` in schemars produces: `"type": [T, "null"]` (with
/// `null` in `enum`), or `"anyOf": [S, {"type": "null"}]` for a `$ref` or composite `S`.
fn drop_null_alternative(obj: &mut JsonObject) {
    if let Some(Value::Array(types)) = obj.get_mut("type")
        && types.len() > 1
        && types.iter().any(|t| t == "null")
    {
        types.retain(|t| t != "null");
        if let Some(Value::Array(values)) = obj.get_mut("enum") {
            values.retain(|v| !v.is_null());
        }
    }
    let Some(Value::Array(alternatives)) = obj.get_mut("anyOf") else {
        return;
    };
    if alternatives.len() < 2
        || !alternatives.iter().any(is_null_schema)
        || alternatives.iter().all(is_null_schema)
    {
        return;
    }
    alternatives.retain(|v| !is_null_schema(v));
    if alternatives.len() != 1 {
        return;
    }
    // One schema left: fold it into the parent, unless they disagree on a keyword that is
    // more than an annotation (then `"anyOf": [S]` stays, which means the same).
    let clash = match obj.get("anyOf").and_then(|a| a.get(0)) {
        Some(Value::Object(inner)) => inner
            .keys()
            .any(|k| obj.contains_key(k) && !ANNOTATIONS.contains(&k.as_str())),
        _ => true,
    };
    if clash {
        return;
    }
    let Some(Value::Array(mut alternatives)) = obj.remove("anyOf") else {
        return;
    };
    if let Some(Value::Object(inner)) = alternatives.pop() {
        for (k, v) in inner {
            obj.entry(k).or_insert(v);
        }
    }
}

/// `"type": [A]` becomes `"type": A`, and `"type": [A, B, ..]` an `anyOf` of one type each
/// (the other keywords stay beside it: each applies only to instances of its own type).
fn split_type_array(obj: &mut JsonObject) {
    let Some(Value::Array(types)) = obj.get("type") else {
        return;
    };
    if types.len() == 1 {
        let only = types[0].clone();
        obj.insert("type".into(), only);
        return;
    }
    let Some(Value::Array(types)) = obj.remove("type") else {
        return;
    };
    let one_each: Vec<Value> = types.into_iter().map(|t| json!({ "type": t })).collect();
    if obj.contains_key("anyOf") {
        // Already an `anyOf` here: both must hold, so the new one goes under `allOf`.
        let all_of = obj
            .entry("allOf")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(all_of) = all_of {
            all_of.push(json!({ "anyOf": one_each }));
        }
    } else {
        obj.insert("anyOf".into(), Value::Array(one_each));
    }
}

/// Removes the `format` values schemars derives from Rust number types (`uint64`, `int32`,
/// `double`, ...). They are not JSON Schema formats, so validators in clients warn about them
/// on every call; `minimum` and `type: integer` already carry what matters.
fn strip_rust_formats(map: &mut JsonObject) {
    const RUST_FORMATS: &[&str] = &[
        "uint", "uint8", "uint16", "uint32", "uint64", "uint128", "int", "int8", "int16", "int32",
        "int64", "int128", "float", "double",
    ];
    if map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| RUST_FORMATS.contains(&f))
    {
        map.remove("format");
    }
    for v in map.values_mut() {
        match v {
            Value::Object(m) => strip_rust_formats(m),
            Value::Array(items) => {
                for item in items {
                    if let Value::Object(m) = item {
                        strip_rust_formats(m);
                    }
                }
            }
            _ => {}
        }
    }
}

impl ToolBuilder {
    /// The OAuth scope a caller's token must grant to use this, when authorization is on
    /// (`[auth]`); without it the call answers `403` `insufficient_scope`. Ignored when
    /// authorization is off.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }
    /// Declares the shape of `structuredContent` (see [`Structured`]). An `Option` field is
    /// written `"anyOf": [{..}, {"type": "null"}]` rather than with a type array, since a
    /// `None` is sent as `null`.
    pub fn output_schema<T: JsonSchema>(mut self) -> Self {
        self.output_schema = Some(generate::<T>(Some(NullForm::AnyOf)));
        self
    }
    /// Uses this schema verbatim instead of one derived from the argument type.
    pub fn input_schema(mut self, schema: Value) -> Self {
        if let Value::Object(map) = schema {
            self.input_schema = Some(map);
        }
        self
    }
    /// Declares a client capability every call needs (`"sampling"`, `"elicitation"`, ...). A
    /// 2026-07-28 request that does not declare it is answered `-32021` before the handler runs.
    pub fn requires_client_capability(mut self, capability: impl Into<String>) -> Self {
        self.required_capabilities
            .get_or_insert_with(serde_json::Map::new)
            .insert(capability.into(), json!({}));
        self
    }

    /// Lets the tool run as a background task for clients of the tasks extension: `tools/call`
    /// answers at once with a task the client polls with `tasks/get`.
    pub fn task_support(mut self, support: crate::tasks::TaskSupport) -> Self {
        self.task_support = support;
        self
    }

    /// Makes the tool a task only from the moment its handler calls
    /// [`RequestContext::escalate`]: before that it is a plain request, so it can gather input
    /// through `InputRequiredResult` rounds first (the MRTR-then-task composition).
    pub fn escalates_to_task(mut self) -> Self {
        self.escalates = true;
        if self.task_support == crate::tasks::TaskSupport::Forbidden {
            self.task_support = crate::tasks::TaskSupport::Optional;
        }
        self
    }

    /// `_meta` of the tool's descriptor.
    pub fn meta(mut self, meta: rmcp::model::MetaObject) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Finishes the tool with a handler taking typed arguments. The arguments are validated
    /// against the schema before the handler runs; a client that omits `arguments` sends `{}`.
    ///
    /// `tools/list` shows the schema of `A` without type arrays: an `Option` field is an
    /// optional property of its inner type (`"type": "string"`, not in `required`). An explicit
    /// `null` for it is still accepted, as serde accepts it.
    pub fn handler<A, F, Fut, R>(self, f: F) -> Arc<ToolDef>
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolResult + 'static,
    {
        // Validation uses the exact schema, which still allows `null` where serde does; the
        // published one leaves it out. A schema given verbatim serves as both.
        let (published, exact) = match self.input_schema.clone() {
            Some(given) => (given.clone(), given),
            None => (generate::<A>(Some(NullForm::Omit)), schema_of::<A>()),
        };
        let f = Arc::new(f);
        self.finish(
            published,
            exact,
            Box::new(move |args, ctx| {
                let f = f.clone();
                Box::pin(async move {
                    let args: A = serde_json::from_value(args).map_err(|e| {
                        ToolError::Protocol(crate::protocol::errors::invalid_params(format!(
                            "Invalid arguments: {e}"
                        )))
                    })?;
                    f(args, ctx).await.map(IntoToolResult::into_tool_result)
                })
            }),
        )
    }

    /// Finishes the tool with a handler taking the raw JSON arguments; the schema comes from
    /// [`ToolBuilder::input_schema`] (an empty object schema if none was given).
    pub fn raw_handler<F, Fut, R>(self, f: F) -> Arc<ToolDef>
    where
        F: Fn(Value, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolResult + 'static,
    {
        let schema = self.input_schema.clone().unwrap_or_else(|| {
            let mut m = JsonObject::new();
            m.insert("type".into(), Value::String("object".into()));
            m
        });
        let f = Arc::new(f);
        self.finish(
            schema.clone(),
            schema,
            Box::new(move |args, ctx| {
                let f = f.clone();
                Box::pin(async move { f(args, ctx).await.map(IntoToolResult::into_tool_result) })
            }),
        )
    }

    /// `schema` is the input schema of `tools/list`; arguments are validated against
    /// `validation`, which may accept more (an explicit `null` for an optional field).
    fn finish(
        self,
        schema: JsonObject,
        validation: JsonObject,
        handler: Box<Handler>,
    ) -> Arc<ToolDef> {
        // Clients decide which arguments to mirror into headers from the published schema.
        let header_params = header_params_of(&schema);
        let validation = Value::Object(validation);
        let validator = match jsonschema::validator_for(&validation) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(tool = %self.name, error = %e, "input schema does not compile; arguments will not be validated");
                None
            }
        };
        let mut descriptor = Tool::new_with_raw(
            self.name,
            self.description.map(Into::into),
            Arc::new(schema),
        );
        if let Some(title) = self.title {
            descriptor = descriptor.with_title(title);
        }
        if let Some(out) = self.output_schema {
            descriptor = descriptor.with_raw_output_schema(Arc::new(out));
        }
        if let Some(a) = self.annotations {
            descriptor = descriptor.with_annotations(a);
        }
        if let Some(m) = self.meta {
            descriptor = descriptor.with_meta(m);
        }
        Arc::new(ToolDef {
            descriptor,
            validator,
            handler,
            header_params,
            required_capabilities: self.required_capabilities,
            task_support: self.task_support,
            escalates: self.escalates,
            scope: self.scope,
        })
    }
}

/// Top-level properties of primitive type annotated `"x-mcp-header": "Name"`.
fn header_params_of(schema: &JsonObject) -> Vec<(String, String)> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .filter_map(|(prop, def)| {
            let header = def.get("x-mcp-header")?.as_str()?;
            let primitive = matches!(
                def.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "boolean")
            );
            primitive.then(|| (header.to_string(), prop.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Close {
        id: u64,
        resolution: String,
    }

    fn raise<E: std::error::Error + Send + Sync + 'static>(e: E) -> Result<(), ToolError> {
        Err::<(), E>(e)?;
        Ok(())
    }

    #[test]
    fn question_mark_turns_any_error_into_a_failure_the_model_reads() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file: notes.txt");
        assert!(matches!(raise(io), Err(ToolError::Failed(m)) if m == "no such file: notes.txt"));
        let Err(json) = serde_json::from_str::<Value>("{") else {
            panic!("`{{` is not JSON");
        };
        let msg = json.to_string();
        assert!(matches!(raise(json), Err(ToolError::Failed(m)) if m == msg));
    }

    #[test]
    fn question_mark_keeps_the_meaning_of_client_request_errors() {
        assert!(matches!(
            raise(ClientRequestError::InputRequired),
            Err(ToolError::InputRequired)
        ));
        let bad = crate::protocol::errors::invalid_params("no such answer");
        assert!(matches!(
            raise(ClientRequestError::InvalidInput(bad)),
            Err(ToolError::Protocol(e)) if e.code.0 == -32602 && e.message == "no such answer"
        ));
        assert!(matches!(
            raise(ClientRequestError::Cancelled),
            Err(ToolError::Failed(m)) if m == "the request was cancelled"
        ));
        let internal = crate::protocol::errors::internal("store down");
        assert!(matches!(
            raise(internal),
            Err(ToolError::Protocol(e)) if e.code.0 == -32603
        ));
    }

    /// Field names are chosen to show each shape schemars gives an `Option`.
    #[derive(serde::Deserialize, serde::Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Search {
        /// What to look for.
        query: String,
        /// Only tickets with this label.
        label: Option<String>,
        limit: Option<u32>,
        /// Only tickets in this state.
        state: Option<State>,
        tags: Option<Vec<String>>,
    }

    #[derive(serde::Deserialize, serde::Serialize, JsonSchema)]
    #[allow(dead_code)]
    #[serde(rename_all = "lowercase")]
    enum State {
        Open,
        Closed,
    }

    /// Every `"type"` in `v` whose value is an array, by JSON pointer.
    fn type_arrays(v: &Value, at: &str, found: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    if k == "type" && child.is_array() {
                        found.push(at.to_string());
                    }
                    type_arrays(child, &format!("{at}/{k}"), found);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    type_arrays(child, &format!("{at}/{i}"), found);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn optional_fields_are_published_without_type_arrays() {
        let t = tool("search")
            .output_schema::<Search>()
            .handler(|_: Search, _ctx| async { Ok("ok") });
        let input = Value::Object((*t.descriptor().input_schema).clone());
        let mut found = Vec::new();
        type_arrays(&input, "", &mut found);
        assert!(found.is_empty(), "type arrays at {found:?} in {input:#}");
        assert_eq!(input["required"], json!(["query"]));
        let props = &input["properties"];
        assert_eq!(
            props["label"],
            json!({"type": "string", "description": "Only tickets with this label."})
        );
        assert_eq!(props["limit"], json!({"type": "integer", "minimum": 0}));
        assert_eq!(
            props["state"],
            json!({"$ref": "#/$defs/State", "description": "Only tickets in this state."})
        );
        assert_eq!(
            props["tags"],
            json!({"type": "array", "items": {"type": "string"}})
        );
        assert!(!input.to_string().contains("null"), "{input:#}");

        // The output schema keeps `null` (serde writes `None` as `null`), as `anyOf`.
        let output = Value::Object((*t.descriptor().output_schema.clone().unwrap()).clone());
        let mut found = Vec::new();
        type_arrays(&output, "", &mut found);
        assert!(found.is_empty(), "type arrays at {found:?} in {output:#}");
        assert_eq!(
            output["properties"]["limit"],
            json!({"anyOf": [{"type": "integer"}, {"type": "null"}], "minimum": 0})
        );
        let sent = serde_json::to_value(Search {
            query: "printer".into(),
            label: None,
            limit: None,
            state: None,
            tags: None,
        })
        .unwrap();
        let validator = jsonschema::validator_for(&output).unwrap();
        assert!(validator.is_valid(&sent), "{sent} against {output:#}");
    }

    #[test]
    fn optional_fields_still_accept_null_and_required_ones_are_still_required() {
        let t = tool("search").handler(|_: Search, _ctx| async { Ok("ok") });
        assert!(t.validate(&json!({"query": "printer"})).is_ok());
        let nulls =
            json!({"query": "printer", "label": null, "limit": null, "state": null, "tags": null});
        assert!(t.validate(&nulls).is_ok(), "{:?}", t.validate(&nulls));
        assert!(serde_json::from_value::<Search>(nulls).is_ok());
        let e = t.validate(&json!({"label": null})).unwrap_err();
        assert_eq!(e.code.0, -32602);
        assert!(e.message.contains("query"), "{}", e.message);
        assert_eq!(e.data.unwrap()["errors"][0]["field"], "query");
        let e = t
            .validate(&json!({"query": "printer", "limit": "ten"}))
            .unwrap_err();
        assert!(e.message.contains("limit"), "{}", e.message);
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
