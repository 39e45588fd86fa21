//! Declaring a tool: [`tool`] starts a [`ToolBuilder`], whose handler methods finish it into a
//! [`ToolDef`] with its schemas compiled and its handler typed.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::def::Handler;
use super::schema::{NullForm, doc_description, generate, wrap_non_object};
use super::{IntoToolResult, ToolDef, ToolError, ToolOutput};
use crate::catalog::handler::{HandlerFn, needs_of};
use crate::catalog::state::{Needs, StateArg};
use crate::context::RequestContext;

/// Starts declaring a tool: name it, describe it, then give its handler, which gets the
/// arguments (any `Deserialize + JsonSchema` type; [`NoArgs`](crate::NoArgs) for none), the
/// [`RequestContext`] and, after [`ToolBuilder::state`], the server's state.
///
/// ```
/// use fleetmcp::{Server, ToolError, tool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add { a: i64, b: i64 }
///
/// let add = tool("add")
///     .description("Adds two integers")
///     .handler(|args: Add, _ctx| async move {
///         let sum = args.a.checked_add(args.b).ok_or_else(|| ToolError::failed("overflow"))?;
///         Ok(sum.to_string())
///     });
/// let server = Server::builder("calculator", "1.0.0").tool(add).build();
/// # drop(server);
/// ```
pub fn tool(name: impl Into<String>) -> ToolBuilder {
    ToolBuilder {
        name: name.into(),
        title: None,
        description: None,
        annotations: None,
        input_schema: None,
        meta: None,
        required_capabilities: None,
        task_support: crate::tasks::TaskSupport::Forbidden,
        escalates: false,
        scope: None,
        state: PhantomData,
    }
}

/// Builder returned by [`tool`]. `S` is what the handler gets after its context: nothing, or
/// the state named with [`ToolBuilder::state`] (`Arc<T>`).
pub struct ToolBuilder<S = ()> {
    name: String,
    title: Option<String>,
    description: Option<String>,
    annotations: Option<ToolAnnotations>,
    input_schema: Option<JsonObject>,
    meta: Option<rmcp::model::MetaObject>,
    required_capabilities: Option<serde_json::Map<String, Value>>,
    task_support: crate::tasks::TaskSupport,
    escalates: bool,
    scope: Option<String>,
    state: PhantomData<fn() -> S>,
}

impl<S> ToolBuilder<S> {
    /// The OAuth scope a caller's token must grant to call it, when authorization is on
    /// (`[auth]`); without it the call answers `403` `insufficient_scope`. Ignored when
    /// authorization is off. Set once: a second call replaces the first.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }
    /// A human-readable name for clients to show (the `name` stays the identifier).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }
    /// What the tool does, for the model that chooses it: `tools/list` shows it. Without it,
    /// a tool whose handler takes typed arguments is described by the doc comment of their
    /// type (schemars makes it the schema's `description`).
    ///
    /// ```
    /// use fleetmcp::tool;
    ///
    /// /// Adds two integers.
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Add { a: i64, b: i64 }
    ///
    /// let add = tool("add").handler(|args: Add, _ctx| async move { Ok((args.a + args.b).to_string()) });
    /// assert_eq!(add.descriptor().description.as_deref(), Some("Adds two integers."));
    /// let plus = tool("plus")
    ///     .description("Sums a and b")
    ///     .handler(|args: Add, _ctx| async move { Ok((args.a + args.b).to_string()) });
    /// assert_eq!(plus.descriptor().description.as_deref(), Some("Sums a and b"));
    /// ```
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
    /// Hints for the client about the tool's behaviour (read-only, destructive, idempotent,
    /// open-world), as `tools/list` shows them. Hints only: a client must not trust them from
    /// a server it does not trust.
    ///
    /// ```
    /// use fleetmcp::model::ToolAnnotations;
    /// use fleetmcp::{NoArgs, tool};
    ///
    /// let count = tool("count_notes")
    ///     .annotations(ToolAnnotations::new().read_only(true))
    ///     .handler(|_: NoArgs, _ctx| async { Ok("3") });
    /// # drop(count);
    /// ```
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
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
}

impl ToolBuilder {
    /// Gives the handler the server's value of type `T` (see
    /// [`ServerBuilder::state`](crate::ServerBuilder::state)) as its third argument, an
    /// `Arc<T>`. The server refuses to be built without one, naming this tool and `T`. One
    /// type per handler: state of several parts is one struct.
    ///
    /// ```
    /// use fleetmcp::{NoArgs, Server, tool};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// #[derive(Default)]
    /// struct Counter(AtomicU64);
    ///
    /// let bump = tool("bump").state::<Counter>().handler(|_: NoArgs, _ctx, counter| async move {
    ///     Ok((counter.0.fetch_add(1, Ordering::Relaxed) + 1).to_string())
    /// });
    /// let server = Server::builder("counter", "1.0.0").state(Counter::default()).tool(bump).build();
    /// # drop(server);
    /// ```
    pub fn state<T: Send + Sync + 'static>(self) -> ToolBuilder<Arc<T>> {
        ToolBuilder {
            name: self.name,
            title: self.title,
            description: self.description,
            annotations: self.annotations,
            input_schema: self.input_schema,
            meta: self.meta,
            required_capabilities: self.required_capabilities,
            task_support: self.task_support,
            escalates: self.escalates,
            scope: self.scope,
            state: PhantomData,
        }
    }

    /// Finishes the tool with a handler taking typed arguments. The arguments are validated
    /// against the schema before the handler runs; a client that omits `arguments` sends `{}`.
    ///
    /// `tools/list` shows the schema of `A` without type arrays: an `Option` field is an
    /// optional property of its inner type (`"type": "string"`, not in `required`). An explicit
    /// `null` for it is still accepted, as serde accepts it. A handler returning
    /// [`Structured<T>`](crate::Structured) publishes the schema of `T` as the tool's
    /// `outputSchema` (a `T` that is not an object is sent, and published, under `"result"`
    /// of one: see [`Structured`](crate::Structured)).
    ///
    /// The closure takes two arguments, whose types it need not write (the arguments type
    /// aside). One that also takes the server's state comes after [`ToolBuilder::state`]; a
    /// closure of three arguments here is refused as E0593 ("expected closure that takes 2
    /// arguments"). [`ToolBuilder::handler_fn`] takes functions of either shape, the state as
    /// a [`State<T>`](crate::State).
    pub fn handler<A, F, Fut, R>(self, f: F) -> Arc<ToolDef>
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolResult + 'static,
    {
        self.typed(None, move |args, ctx, ()| f(args, ctx))
    }

    /// Finishes the tool with a function (an `async fn`, or a closure with its arguments'
    /// types written) taking the arguments, the [`RequestContext`] and, optionally, the
    /// server's state as a [`State<T>`](crate::State): the state's type is found from that
    /// argument, no [`ToolBuilder::state`] needed, and checked when the server is built.
    /// Arguments and schemas as for [`ToolBuilder::handler`]. A function of another shape is
    /// refused at compile time with a note saying what a handler takes (see
    /// [`HandlerFn`]).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use std::sync::Mutex;
    /// use fleetmcp::{RequestContext, Server, State, ToolError, tool};
    ///
    /// #[derive(Default)]
    /// struct Notes(Mutex<BTreeMap<u64, String>>);
    ///
    /// /// Adds a note.
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Add {
    ///     text: String,
    /// }
    ///
    /// async fn add(args: Add, ctx: RequestContext, notes: State<Notes>) -> Result<String, ToolError> {
    ///     ctx.progress(1.0, None, None);
    ///     let mut notes = notes.0.lock().map_err(|_| ToolError::failed("poisoned"))?;
    ///     let id = notes.len() as u64 + 1;
    ///     notes.insert(id, args.text);
    ///     Ok(id.to_string())
    /// }
    ///
    /// let server = Server::builder("notes", "1.0.0")
    ///     .state(Notes::default())
    ///     .tool(tool("add_note").handler_fn(add))
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn handler_fn<A, S, H, R>(self, f: H) -> Arc<ToolDef>
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        H: HandlerFn<(A,), S, Output = Result<R, ToolError>>,
        R: IntoToolResult + 'static,
    {
        let f = Arc::new(f);
        self.typed(needs_of::<H, _, _>(), move |args: A, ctx, ()| {
            let call = f.call((args,), ctx);
            async move { call.await.map_err(ToolError::Protocol)? }
        })
    }

    /// Finishes the tool with a handler taking the raw JSON arguments; the schema comes from
    /// [`ToolBuilder::input_schema`] (an empty object schema if none was given).
    pub fn raw_handler<F, Fut, R>(self, f: F) -> Arc<ToolDef>
    where
        F: Fn(Value, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolResult + 'static,
    {
        self.with_handler(move |args, ctx, ()| f(args, ctx))
    }
}

impl<T: Send + Sync + 'static> ToolBuilder<Arc<T>> {
    /// [`ToolBuilder::handler`], for a handler that also gets the state named with
    /// [`ToolBuilder::state`].
    pub fn handler<A, F, Fut, R>(self, f: F) -> Arc<ToolDef>
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, RequestContext, Arc<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolResult + 'static,
    {
        self.typed(None, f)
    }

    /// [`ToolBuilder::raw_handler`], for a handler that also gets the state.
    pub fn raw_handler<F, Fut, R>(self, f: F) -> Arc<ToolDef>
    where
        F: Fn(Value, RequestContext, Arc<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolResult + 'static,
    {
        self.with_handler(f)
    }
}

/// The finishing steps, for either kind of handler (`S: StateArg` on each: the trait is
/// crate-private).
impl<S> ToolBuilder<S> {
    /// `needs`: the state a handler taking a [`State<T>`](crate::State) needs, besides the
    /// builder's own `S`.
    fn typed<A, F, Fut, R>(self, needs: Option<Needs>, f: F) -> Arc<ToolDef>
    where
        S: StateArg,
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, RequestContext, S) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolResult + 'static,
    {
        // Arguments are checked against the schema clients see (issue 38: checked against
        // schemars' exact one, an optional field took a `null` the published schema refuses,
        // and errors named an `anyOf` no client was shown): a client that follows the
        // published schema and one that does not meet the same rule.
        let generated = generate::<A>(Some(NullForm::Omit));
        let mut this = self;
        // No `.description(..)`: the arguments type's doc comment describes the tool.
        if this.description.is_none() {
            this.description = doc_description(&generated);
        }
        let published = this.input_schema.clone().unwrap_or(generated);
        let f = Arc::new(f);
        this.finish::<R>(
            needs,
            published,
            Box::new(move |args, ctx| {
                let f = f.clone();
                Box::pin(async move {
                    let args: A = serde_json::from_value(args).map_err(|e| {
                        ToolError::Protocol(crate::protocol::errors::invalid_params(format!(
                            "Invalid arguments: {e}"
                        )))
                    })?;
                    let state = S::fetch(&ctx).map_err(ToolError::Protocol)?;
                    f(args, ctx, state)
                        .await
                        .map(IntoToolResult::into_tool_output)
                })
            }),
        )
    }

    fn with_handler<F, Fut, R>(self, f: F) -> Arc<ToolDef>
    where
        S: StateArg,
        F: Fn(Value, RequestContext, S) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolResult + 'static,
    {
        let schema = self.input_schema.clone().unwrap_or_else(|| {
            let mut m = JsonObject::new();
            m.insert("type".into(), Value::String("object".into()));
            m
        });
        let f = Arc::new(f);
        self.finish::<R>(
            None,
            schema,
            Box::new(move |args, ctx| {
                let f = f.clone();
                Box::pin(async move {
                    let state = S::fetch(&ctx).map_err(ToolError::Protocol)?;
                    f(args, ctx, state)
                        .await
                        .map(IntoToolResult::into_tool_output)
                })
            }),
        )
    }

    /// `schema` is the input schema of `tools/list`, which arguments are validated against.
    /// The output schema is the one the handler's result type `R` declares.
    fn finish<R: IntoToolResult>(
        self,
        needs: Option<Needs>,
        schema: JsonObject,
        handler: Box<Handler>,
    ) -> Arc<ToolDef>
    where
        S: StateArg,
    {
        // Clients decide which arguments to mirror into headers from the published schema.
        let header_params = header_params_of(&schema);
        let validation = Value::Object(schema.clone());
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
        let mut handler = handler;
        if let Some(mut out) = R::output_schema() {
            if wrap_non_object(&mut out) {
                // Its values go out held as the schema now says.
                let inner = handler;
                handler = Box::new(move |args, ctx| {
                    let call = inner(args, ctx);
                    Box::pin(async move { call.await.map(ToolOutput::wrapped) })
                });
            }
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
            needs: needs.or_else(S::needs),
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
