//! Prompts: named message templates with string arguments.
//!
//! ```
//! use fleetmcp::prompt;
//! use fleetmcp::model::{PromptMessage, Role};
//!
//! let triage = prompt("triage_ticket")
//!     .description("Triage a ticket")
//!     .argument("ticket_id", "The ticket to triage", true)
//!     .get(|args, _ctx| async move {
//!         Ok(vec![PromptMessage::new_text(Role::User, format!("Triage ticket {}", args["ticket_id"]))])
//!     });
//! assert_eq!(triage.name(), "triage_ticket");
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rmcp::model::{GetPromptResult, Prompt, PromptArgument, PromptMessage};

use super::resource::Completer;
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
}

impl PromptDef {
    /// The scope a `prompts/get` needs (see [`PromptBuilder::scope`]).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }
    pub fn name(&self) -> &str {
        &self.descriptor.name
    }
    pub fn descriptor(&self) -> &Prompt {
        &self.descriptor
    }
    pub(crate) fn completer(&self, argument: &str) -> Option<&Completer> {
        self.completers.get(argument)
    }

    /// Checks required arguments, then runs the handler.
    pub(crate) fn get(
        &self,
        args: HashMap<String, String>,
        ctx: RequestContext,
    ) -> BoxFuture<'static, Result<GetPromptResult, PromptError>> {
        if let Some(declared) = &self.descriptor.arguments {
            for a in declared {
                if a.required == Some(true) && !args.contains_key(&a.name) {
                    let msg = format!(
                        "Missing required argument `{}` for prompt {}",
                        a.name, self.descriptor.name
                    );
                    return Box::pin(async move { Err(PromptError::InvalidArguments(msg)) });
                }
            }
        }
        (self.getter)(args, ctx)
    }
}

/// Starts declaring a prompt: its arguments, then the handler that gets them by name and
/// answers with the messages.
///
/// ```
/// use fleetmcp::model::{PromptMessage, Role};
/// use fleetmcp::{Server, prompt};
///
/// let triage = prompt("triage")
///     .argument("ticket", "The ticket to triage", true)
///     .get(|args, _ctx| async move {
///         let ticket = args.get("ticket").cloned().unwrap_or_default();
///         Ok(vec![PromptMessage::new_text(Role::User, format!("Triage ticket {ticket}"))])
///     });
/// let server = Server::builder("desk", "1.0.0").prompt(triage).build();
/// # drop(server);
/// ```
pub fn prompt(name: impl Into<String>) -> PromptBuilder {
    PromptBuilder {
        name: name.into(),
        title: None,
        description: None,
        arguments: Vec::new(),
        completers: HashMap::new(),
        scope: None,
    }
}

/// Builder returned by [`prompt`].
pub struct PromptBuilder {
    name: String,
    title: Option<String>,
    description: Option<String>,
    arguments: Vec<PromptArgument>,
    completers: HashMap<String, Completer>,
    scope: Option<String>,
}

impl PromptBuilder {
    /// The OAuth scope a caller's token must grant to use this, when authorization is on
    /// (`[auth]`); without it the call answers `403` `insufficient_scope`. Ignored when
    /// authorization is off.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.title = Some(t.into());
        self
    }
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = Some(d.into());
        self
    }
    pub fn argument(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        required: bool,
    ) -> Self {
        self.arguments.push(
            PromptArgument::new(name)
                .with_description(description)
                .with_required(required),
        );
        self
    }
    /// Offers completions for one argument (`completion/complete` with `ref/prompt`).
    pub fn complete<F>(mut self, argument: impl Into<String>, f: F) -> Self
    where
        F: Fn(&str, &HashMap<String, String>) -> Vec<String> + Send + Sync + 'static,
    {
        self.completers.insert(argument.into(), Arc::new(f));
        self
    }
    /// Finishes with the handler; it gets the arguments by name.
    pub fn get<F, Fut, R>(self, f: F) -> Arc<PromptDef>
    where
        F: Fn(HashMap<String, String>, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, PromptError>> + Send + 'static,
        R: IntoPromptResult + 'static,
    {
        let args = (!self.arguments.is_empty()).then_some(self.arguments);
        let mut descriptor = Prompt::new(self.name, self.description, args);
        if let Some(t) = self.title {
            descriptor = descriptor.with_title(t);
        }
        let f = Arc::new(f);
        Arc::new(PromptDef {
            descriptor,
            getter: Box::new(move |args, ctx| {
                let f = f.clone();
                Box::pin(
                    async move { f(args, ctx).await.map(IntoPromptResult::into_prompt_result) },
                )
            }),
            completers: self.completers,
            scope: self.scope,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::ClientRequestError;

    fn raise<E: std::error::Error + Send + Sync + 'static>(e: E) -> Result<(), PromptError> {
        Err::<(), E>(e)?;
        Ok(())
    }

    #[test]
    fn question_mark_keeps_the_meaning_of_client_request_errors() {
        let io = std::io::Error::other("disk on fire");
        assert!(matches!(raise(io), Err(PromptError::Failed(m)) if m == "disk on fire"));
        assert!(matches!(
            raise(ClientRequestError::InputRequired),
            Err(PromptError::InputRequired)
        ));
        let bad = crate::protocol::errors::invalid_params("no such answer");
        assert!(matches!(
            raise(ClientRequestError::InvalidInput(bad)),
            Err(PromptError::Protocol(e)) if e.code.0 == -32602
        ));
    }
}
