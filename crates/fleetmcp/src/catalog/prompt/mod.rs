//! Prompts: named message templates whose arguments are a Rust type (`args.rs` lists and
//! parses them).
//!
//! ```
//! use fleetmcp::prompt;
//! use fleetmcp::model::{PromptMessage, Role};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Triage {
//!     /// The ticket to triage.
//!     ticket_id: u64,
//! }
//!
//! let triage = prompt("triage_ticket")
//!     .description("Triage a ticket")
//!     .get(|args: Triage, _ctx| async move {
//!         Ok(vec![PromptMessage::new_text(Role::User, format!("Triage ticket {}", args.ticket_id))])
//!     });
//! assert_eq!(triage.name(), "triage_ticket");
//! ```

// Also how a template reads its variables into a type (`TemplateBuilder::read_as`).
pub(in crate::catalog) mod args;

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rmcp::model::{GetPromptResult, Prompt, PromptMessage};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::handler::{HandlerFn, needs_of};
use super::state::{
    Completer, Needs, StateArg, async_completer, completer, completion_methods,
    completion_methods_with_state,
};
use crate::context::RequestContext;

/// Why a prompt could not be produced.
///
/// `?` converts any error into it, as for [`crate::ToolError`]: a
/// [`crate::context::ClientRequestError`] keeps its meaning, an [`crate::protocol::ErrorData`]
/// becomes [`PromptError::Protocol`], any other error [`PromptError::Failed`]. For the same
/// reason as `ToolError` it does not implement [`std::error::Error`].
#[derive(Debug)]
pub enum PromptError {
    /// Bad or missing arguments (`-32602`).
    InvalidArguments(String),
    /// The handler failed (an internal error, `-32603`, with this message).
    Failed(String),
    /// A protocol error raised by the handler.
    Protocol(crate::protocol::ErrorData),
    /// Answers from the client are needed first (see [`crate::ToolError::InputRequired`]).
    InputRequired,
}

impl std::fmt::Display for PromptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidArguments(msg) | Self::Failed(msg) => f.write_str(msg),
            Self::Protocol(e) => f.write_str(&e.message),
            Self::InputRequired => f.write_str("input required from the client"),
        }
    }
}

from_any_error!(PromptError);

/// What a prompt handler may return.
pub trait IntoPromptResult {
    /// The `prompts/get` result.
    fn into_prompt_result(self) -> GetPromptResult;
}
impl IntoPromptResult for GetPromptResult {
    fn into_prompt_result(self) -> GetPromptResult {
        self
    }
}
impl IntoPromptResult for Vec<PromptMessage> {
    fn into_prompt_result(self) -> GetPromptResult {
        GetPromptResult::new(self)
    }
}

type Getter = dyn Fn(
        HashMap<String, String>,
        RequestContext,
    ) -> BoxFuture<'static, Result<GetPromptResult, PromptError>>
    + Send
    + Sync;

/// A declared prompt.
pub struct PromptDef {
    descriptor: Prompt,
    getter: Box<Getter>,
    completers: HashMap<String, Completer>,
    scope: Option<String>,
    needs: Option<Needs>,
}

impl PromptDef {
    /// The scope a `prompts/get` needs (see [`PromptBuilder::scope`]).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }
    /// The prompt's name, as `prompts/get` names it.
    pub fn name(&self) -> &str {
        &self.descriptor.name
    }
    /// The prompt as `prompts/list` shows it.
    pub fn descriptor(&self) -> &Prompt {
        &self.descriptor
    }
    pub(crate) fn completer(&self, argument: &str) -> Option<&Completer> {
        self.completers.get(argument)
    }
    /// The state its handler and completers need, named for the check when it enters a
    /// server.
    pub(crate) fn needs(&self) -> Option<(String, Needs)> {
        Needs::named(|| format!("prompt `{}`", self.name()), self.needs)
    }

    /// Parses the arguments into the handler's type, then runs the handler.
    pub(crate) fn get(
        &self,
        args: HashMap<String, String>,
        ctx: RequestContext,
    ) -> BoxFuture<'static, Result<GetPromptResult, PromptError>> {
        (self.getter)(args, ctx)
    }
}

/// Starts declaring a prompt: its handler gets the arguments as a type of its own (any
/// `Deserialize + JsonSchema` type; [`NoArgs`](crate::NoArgs) for none) and answers with the
/// messages.
///
/// `prompts/list` lists the type's fields as the arguments, each with its doc comment as the
/// description, required unless it is an `Option` or has a serde default. MCP sends arguments as
/// strings: a field of a Rust integer, float or `bool` type is parsed from its string (`"42"`
/// for a `u64`), so declare it with its real type. Arguments that are missing, do not parse or
/// that serde refuses are answered as invalid params (`-32602`) naming the argument, before the
/// handler runs. (A `HashMap<String, String>` takes any arguments and lists none.)
///
/// ```
/// use fleetmcp::model::{PromptMessage, Role};
/// use fleetmcp::{Server, prompt};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Triage {
///     /// The ticket to triage.
///     ticket: u64,
///     /// Who is asking.
///     asked_by: Option<String>,
/// }
///
/// let triage = prompt("triage").get(|args: Triage, _ctx| async move {
///     let by = args.asked_by.unwrap_or_else(|| "someone".into());
///     Ok(vec![PromptMessage::new_text(Role::User, format!("{by} asks to triage {}", args.ticket))])
/// });
/// let listed = triage.descriptor().arguments.clone().unwrap_or_default();
/// assert_eq!(listed[1].name, "ticket");
/// assert_eq!(listed[1].description.as_deref(), Some("The ticket to triage."));
/// assert_eq!(listed[1].required, Some(true));
/// let server = Server::builder("desk", "1.0.0").prompt(triage).build();
/// # drop(server);
/// ```
pub fn prompt(name: impl Into<String>) -> PromptBuilder {
    PromptBuilder {
        name: name.into(),
        title: None,
        description: None,
        completers: HashMap::new(),
        scope: None,
        state: PhantomData,
    }
}

/// Builder returned by [`prompt`]. `S` is what the handler and the completers get after the
/// context: nothing, or the state named with [`PromptBuilder::state`] (`Arc<T>`).
pub struct PromptBuilder<S = ()> {
    name: String,
    title: Option<String>,
    description: Option<String>,
    completers: HashMap<String, Completer>,
    scope: Option<String>,
    state: PhantomData<fn() -> S>,
}

impl<S> PromptBuilder<S> {
    /// The OAuth scope a caller's token must grant to get it, when authorization is on
    /// (`[auth]`); without it the call answers `403` `insufficient_scope`. Ignored when
    /// authorization is off. Set once: a second call replaces the first.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }
    /// A human-readable name for clients to show (the `name` stays the identifier).
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.title = Some(t.into());
        self
    }
    /// What the prompt is for, as `prompts/list` shows it. Without it, the prompt is
    /// described by the doc comment of its arguments type.
    ///
    /// ```
    /// use fleetmcp::model::{PromptMessage, Role};
    /// use fleetmcp::prompt;
    ///
    /// /// Asks the model to triage a ticket.
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Triage { ticket: u64 }
    ///
    /// let triage = prompt("triage").get(|args: Triage, _ctx| async move {
    ///     Ok(vec![PromptMessage::new_text(Role::User, format!("Triage {}", args.ticket))])
    /// });
    /// assert_eq!(triage.descriptor().description.as_deref(), Some("Asks the model to triage a ticket."));
    /// ```
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = Some(d.into());
        self
    }
}

impl PromptBuilder {
    /// Gives the handler and the completers the server's value of type `T` as their last
    /// argument (see [`ToolBuilder::state`](super::ToolBuilder::state)).
    pub fn state<T: Send + Sync + 'static>(self) -> PromptBuilder<Arc<T>> {
        PromptBuilder {
            name: self.name,
            title: self.title,
            description: self.description,
            completers: self.completers,
            scope: self.scope,
            state: PhantomData,
        }
    }
    completion_methods! {
        /// [`PromptBuilder::complete`], for an async function (one that asks a database): it gets
        /// the partial value, the other arguments already given and the request's context, owned.
        ///
        /// ```
        /// use fleetmcp::model::PromptMessage;
        /// use fleetmcp::{Server, prompt};
        ///
        /// #[derive(serde::Deserialize, schemars::JsonSchema)]
        /// struct Triage {
        ///     ticket: String,
        /// }
        ///
        /// let triage = prompt("triage")
        ///     .complete_async("ticket", |partial, _given, _ctx| async move { vec![format!("{partial}7")] })
        ///     .get(|args: Triage, _ctx| async move {
        ///         Ok(vec![PromptMessage::new_text(fleetmcp::model::Role::User, args.ticket)])
        ///     });
        /// let server = Server::builder("desk", "1.0.0").prompt(triage).build();
        /// # drop(server);
        /// ```
        argument, "ref/prompt"
    }
    /// Finishes with the handler; it gets the arguments as an `A` (see [`prompt`]).
    pub fn get<A, F, Fut, R>(self, f: F) -> Arc<PromptDef>
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, PromptError>> + Send + 'static,
        R: IntoPromptResult + 'static,
    {
        self.finish(None, move |args, ctx, ()| f(args, ctx))
    }
    /// Finishes with a function (an `async fn`, or a closure with its arguments' types
    /// written) taking the arguments as an `A`, the [`RequestContext`] and, optionally, the
    /// server's state as a [`State<T>`](crate::State), found from that argument (see
    /// [`ToolBuilder::handler_fn`](super::ToolBuilder::handler_fn)).
    ///
    /// ```
    /// use fleetmcp::model::{PromptMessage, Role};
    /// use fleetmcp::{PromptError, RequestContext, Server, State, prompt};
    ///
    /// struct House(String);
    ///
    /// /// Asks for a summary in the house style.
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Summarize {
    ///     topic: String,
    /// }
    ///
    /// async fn summarize(args: Summarize, _ctx: RequestContext, house: State<House>) -> Result<Vec<PromptMessage>, PromptError> {
    ///     Ok(vec![PromptMessage::new_text(Role::User, format!("Summarize {} ({})", args.topic, house.0))])
    /// }
    ///
    /// let summary = prompt("summarize").get_fn(summarize);
    /// assert_eq!(summary.descriptor().description.as_deref(), Some("Asks for a summary in the house style."));
    /// let server = Server::builder("desk", "1.0.0").state(House("terse".into())).prompt(summary).build();
    /// # drop(server);
    /// ```
    pub fn get_fn<A, S, H, R>(self, f: H) -> Arc<PromptDef>
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        H: HandlerFn<(A,), S, Output = Result<R, PromptError>>,
        R: IntoPromptResult + 'static,
    {
        let f = Arc::new(f);
        self.finish(needs_of::<H, _, _>(), move |args: A, ctx, ()| {
            let call = f.call((args,), ctx);
            async move { call.await.map_err(PromptError::Protocol)? }
        })
    }
}

impl<T: Send + Sync + 'static> PromptBuilder<Arc<T>> {
    completion_methods_with_state!("PromptBuilder", argument);
    /// Finishes with the handler; it gets the arguments as an `A` and the state.
    pub fn get<A, F, Fut, R>(self, f: F) -> Arc<PromptDef>
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, RequestContext, Arc<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, PromptError>> + Send + 'static,
        R: IntoPromptResult + 'static,
    {
        self.finish(None, f)
    }
}

/// The finishing steps, for either kind of handler (`S: StateArg` on each: the trait is
/// crate-private).
impl<S> PromptBuilder<S> {
    /// `needs`: the state a function taking a [`State<T>`](crate::State) needs, besides the
    /// builder's own `S`.
    fn finish<A, F, Fut, R>(self, needs: Option<Needs>, f: F) -> Arc<PromptDef>
    where
        S: StateArg,
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, RequestContext, S) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, PromptError>> + Send + 'static,
        R: IntoPromptResult + 'static,
    {
        let arguments = Arc::new(args::Arguments::of::<A>());
        let listed = (!arguments.listed.is_empty()).then(|| arguments.listed.clone());
        // No `.description(..)`: the arguments type's doc comment describes the prompt.
        let description = self.description.or_else(|| arguments.description.clone());
        let mut descriptor = Prompt::new(self.name, description, listed);
        if let Some(t) = self.title {
            descriptor = descriptor.with_title(t);
        }
        let name: Arc<str> = descriptor.name.as_str().into();
        let f = Arc::new(f);
        Arc::new(PromptDef {
            descriptor,
            getter: Box::new(move |given, ctx| {
                let (f, arguments, name) = (f.clone(), arguments.clone(), name.clone());
                Box::pin(async move {
                    let args: A = arguments.parse(&name, given)?;
                    let state = S::fetch(&ctx).map_err(PromptError::Protocol)?;
                    let messages = f(args, ctx, state).await?;
                    Ok(messages.into_prompt_result())
                })
            }),
            completers: self.completers,
            scope: self.scope,
            needs: needs.or_else(S::needs),
        })
    }
}
