//! Handlers as functions, taken the way axum takes them: a declaration's `*_fn` finishing
//! method ([`ToolBuilder::handler_fn`](super::ToolBuilder::handler_fn),
//! [`PromptBuilder::get_fn`](super::PromptBuilder::get_fn),
//! [`ResourceBuilder::read_fn`](super::ResourceBuilder::read_fn),
//! [`TemplateBuilder::read_fn`](super::TemplateBuilder::read_fn)) takes any function that
//! implements [`HandlerFn`]: what the declaration gives (a tool's or a prompt's arguments, a
//! resource's URI, a template's URI and variables), then the [`RequestContext`], then, if it
//! wants the server's state, a [`State<T>`]. The state's type is found from that argument, so
//! no `.state::<T>()` is needed, and it is checked when the server is built as `.state::<T>()`
//! is (`state.rs`).
//!
//! Why separate methods rather than one `.handler` taking both shapes: rustc types a closure's
//! unannotated arguments only from an `Fn(..)` bound, which fixes how many arguments it takes.
//! A trait with an implementation per arity (this one) accepts either shape, but then a
//! closure's `ctx` must have its type written where the closure calls a method on it. The
//! closure methods (`.handler`, `.get`, `.read`) keep inferring everything; these take
//! `async fn`s and annotated closures, and a function of the wrong shape is refused with
//! the note of [`HandlerFn`]'s `#[diagnostic::on_unimplemented]`, where an `Fn` bound gives
//! only E0593 ("expected closure that takes 2 arguments").

use std::any::TypeId;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::state::{Needs, StateArg};
use crate::context::RequestContext;
use crate::protocol::ErrorData;

/// The server's value of type `T`, given with
/// [`ServerBuilder::state`](crate::ServerBuilder::state), as a handler's last argument: a
/// function given to a `*_fn` finishing method that takes a `State<T>` gets it, and the
/// server refuses to be built without a `T` (naming the declaration), as after
/// `.state::<T>()`. It dereferences to `T` (its own field is private, so `state.0` is `T`'s
/// first field), and clones as the `Arc<T>` it holds.
///
/// ```
/// use fleetmcp::{RequestContext, Server, State, ToolError, tool};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// #[derive(Default)]
/// struct Counter(AtomicU64);
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Bump {
///     by: u64,
/// }
///
/// async fn bump(args: Bump, _ctx: RequestContext, counter: State<Counter>) -> Result<String, ToolError> {
///     Ok((counter.0.fetch_add(args.by, Ordering::Relaxed) + args.by).to_string())
/// }
///
/// let server = Server::builder("counter", "1.0.0")
///     .state(Counter::default())
///     .tool(tool("bump").handler_fn(bump))
///     .build();
/// # drop(server);
/// let refused = Server::builder("counter", "1.0.0").tool(tool("bump").handler_fn(bump)).try_build();
/// assert!(refused.is_err(), "no Counter given");
/// ```
pub struct State<T>(Arc<T>);

impl<T> Deref for State<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Clone for State<T> {
    fn clone(&self) -> Self {
        State(self.0.clone())
    }
}

impl<T: Send + Sync + 'static> StateArg for State<T> {
    fn needs() -> Option<Needs> {
        <Arc<T> as StateArg>::needs()
    }
    fn fetch(ctx: &RequestContext) -> Result<Self, ErrorData> {
        <Arc<T> as StateArg>::fetch(ctx).map(State)
    }
}

/// A function that can be a declaration's handler: it takes the declaration's inputs `In`
/// (a tuple: `(A,)` for a tool's or a prompt's arguments of type `A`, `(String,)` for a
/// resource's URI, `(String, V)` for a template's URI and variables), then the
/// [`RequestContext`], then `S`: nothing (`()`) or the server's state as a [`State<T>`].
/// Implemented for every such `Fn` returning a future; not to be implemented by hand.
///
/// ```
/// use fleetmcp::model::{PromptMessage, ResourceContents, Role};
/// use fleetmcp::{PromptError, RequestContext, ResourceError, Server, State, prompt, resource};
///
/// struct Motd(String);
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Greet {
///     name: String,
/// }
///
/// async fn greet(args: Greet, _ctx: RequestContext, motd: State<Motd>) -> Result<Vec<PromptMessage>, PromptError> {
///     Ok(vec![PromptMessage::new_text(Role::User, format!("Greet {}: {}", args.name, motd.0))])
/// }
///
/// async fn read_motd(uri: String, _ctx: RequestContext, motd: State<Motd>) -> Result<Vec<ResourceContents>, ResourceError> {
///     Ok(vec![ResourceContents::text(motd.0.clone(), uri)])
/// }
///
/// let server = Server::builder("motd", "1.0.0")
///     .state(Motd("Welcome".into()))
///     .prompt(prompt("greet").get_fn(greet))
///     .resource(resource("motd://today", "motd").read_fn(read_motd))
///     .build();
/// # drop(server);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be this declaration's handler",
    label = "not a function of the declaration's inputs, then `RequestContext`, then optionally `State<T>`",
    note = "a handler takes what its declaration gives (a tool's or a prompt's arguments type; a resource's URI `String`; a template's URI `String` and variables type), then `ctx: RequestContext`, then, for the server's state, a `State<T>` (given with `ServerBuilder::state`), and returns a future of the declaration's `Result`",
    note = "e.g. `async fn add(args: Add, ctx: RequestContext, notes: State<Notes>) -> Result<String, ToolError>`; a closure needs its arguments' types written; for closures that infer them, use `.handler`/`.get`/`.read` (after `.state::<T>()` for a third argument `Arc<T>`)"
)]
pub trait HandlerFn<In, S>: Send + Sync + 'static {
    /// What the function's future gives (the declaration's `Result`).
    #[doc(hidden)]
    type Output: Send + 'static;
    /// Calls the function, its state fetched first (an error when the server has none of
    /// that type, which the build check rules out).
    #[doc(hidden)]
    fn call(
        &self,
        input: In,
        ctx: RequestContext,
    ) -> BoxFuture<'static, Result<Self::Output, ErrorData>>;
    /// The type of state it takes, by id and name, if any.
    #[doc(hidden)]
    fn state_type() -> Option<(TypeId, &'static str)>;
}

/// The needs of a [`HandlerFn`], for the check when its declaration enters a server.
pub(crate) fn needs_of<H: HandlerFn<In, S>, In, S>() -> Option<Needs> {
    H::state_type().map(|(id, name)| Needs::new(id, name))
}

/// The two implementations (without and with state) for functions whose leading inputs are
/// `$in`.
macro_rules! handler_fn {
    ($($in:ident),+) => {
        #[allow(non_snake_case)] // the inputs are bound by their type parameters' names
        impl<F, Fut, $($in,)+> HandlerFn<($($in,)+), ()> for F
        where
            F: Fn($($in,)+ RequestContext) -> Fut + Send + Sync + 'static,
            Fut: Future + Send + 'static,
            Fut::Output: Send + 'static,
        {
            type Output = Fut::Output;
            fn call(
                &self,
                ($($in,)+): ($($in,)+),
                ctx: RequestContext,
            ) -> BoxFuture<'static, Result<Fut::Output, ErrorData>> {
                self($($in,)+ ctx).map(Ok).boxed()
            }
            fn state_type() -> Option<(TypeId, &'static str)> {
                None
            }
        }

        #[allow(non_snake_case)] // as above
        impl<F, Fut, T, $($in,)+> HandlerFn<($($in,)+), State<T>> for F
        where
            F: Fn($($in,)+ RequestContext, State<T>) -> Fut + Send + Sync + 'static,
            Fut: Future + Send + 'static,
            Fut::Output: Send + 'static,
            T: Send + Sync + 'static,
        {
            type Output = Fut::Output;
            fn call(
                &self,
                ($($in,)+): ($($in,)+),
                ctx: RequestContext,
            ) -> BoxFuture<'static, Result<Fut::Output, ErrorData>> {
                match State::<T>::fetch(&ctx) {
                    Ok(state) => self($($in,)+ ctx, state).map(Ok).boxed(),
                    Err(e) => std::future::ready(Err(e)).boxed(),
                }
            }
            fn state_type() -> Option<(TypeId, &'static str)> {
                <State<T> as StateArg>::needs().map(Needs::parts)
            }
        }
    };
}

handler_fn!(I1);
handler_fn!(I1, I2);
