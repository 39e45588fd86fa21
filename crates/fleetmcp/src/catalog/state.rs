//! Handler state, typed and checked before anything runs: a declaration names the type of
//! state its handler needs (`tool("x").state::<Desk>()`), its handler and completers get that
//! value as their last argument, and the server refuses to be built (or a declaration to be
//! added to a running one) when it was not given a value of that type
//! ([`ServerBuilder::state`](crate::ServerBuilder::state)). A call never finds it missing.
//! A function given to a `*_fn` finishing method names its state by its type instead, taking
//! a [`State<T>`](crate::State) (`handler.rs`); the same check applies.

use std::any::TypeId;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::context::RequestContext;
use crate::protocol::ErrorData;

/// The type of state a declaration needs, by its id (what the server's state is keyed by) and
/// its name (what an error says).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Needs {
    id: TypeId,
    name: &'static str,
}

impl Needs {
    pub(crate) fn new(id: TypeId, name: &'static str) -> Self {
        Self { id, name }
    }
    /// Its type's id and name.
    pub(crate) fn parts(self) -> (TypeId, &'static str) {
        (self.id, self.name)
    }
    /// `(what, needs)` for a declaration that needs state (`what` names it in an error).
    pub(crate) fn named(
        what: impl FnOnce() -> String,
        needs: Option<Needs>,
    ) -> Option<(String, Needs)> {
        needs.map(|n| (what(), n))
    }
}

/// What a handler gets after its input and context: nothing (`()`, a declaration without
/// `.state::<T>()`), or the server's value of type `T` (`Arc<T>`). The builders' handler
/// methods for each case wrap the user's function into one of this shape.
pub(crate) trait StateArg: Send + Sync + Sized + 'static {
    /// The state type to check for when the server is built.
    fn needs() -> Option<Needs>;
    /// The value, for one call. Cannot fail once the check passed (every way into a server
    /// checks); an internal error, never a panic, if it ever does.
    fn fetch(ctx: &RequestContext) -> Result<Self, ErrorData>;
}

impl StateArg for () {
    fn needs() -> Option<Needs> {
        None
    }
    fn fetch(_: &RequestContext) -> Result<Self, ErrorData> {
        Ok(())
    }
}

impl<T: Send + Sync + 'static> StateArg for Arc<T> {
    fn needs() -> Option<Needs> {
        Some(Needs {
            id: TypeId::of::<T>(),
            name: std::any::type_name::<T>(),
        })
    }
    fn fetch(ctx: &RequestContext) -> Result<Self, ErrorData> {
        ctx.state::<T>()
    }
}

/// Completes one variable of a template or argument of a prompt: (partial value, the other
/// arguments already given, the request's context) to candidate values, computed at once or
/// awaited (a completer that asks a database).
pub(crate) type Completer = Arc<
    dyn Fn(
            String,
            HashMap<String, String>,
            RequestContext,
        ) -> BoxFuture<'static, Result<Vec<String>, ErrorData>>
        + Send
        + Sync,
>;

/// A [`Completer`] from a function that also gets the declaration's state `S`.
pub(crate) fn completer<S, F>(f: F) -> Completer
where
    S: StateArg,
    F: Fn(&str, &HashMap<String, String>, &RequestContext, &S) -> Vec<String>
        + Send
        + Sync
        + 'static,
{
    Arc::new(move |partial, given, ctx| {
        let values = S::fetch(&ctx).map(|state| f(&partial, &given, &ctx, &state));
        Box::pin(std::future::ready(values))
    })
}

/// A [`Completer`] from an async function that also gets the declaration's state `S`.
pub(crate) fn async_completer<S, F, Fut>(f: F) -> Completer
where
    S: StateArg,
    F: Fn(String, HashMap<String, String>, RequestContext, S) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<String>> + Send + 'static,
{
    Arc::new(move |partial, given, ctx| match S::fetch(&ctx) {
        Ok(state) => Box::pin(f(partial, given, ctx, state).map(Ok)),
        Err(e) => Box::pin(std::future::ready(Err(e))),
    })
}

/// `complete` and `complete_async` for a template's or a prompt's builder without state (the
/// same methods on both): `$what` names their parameter, `$reference` the reference of
/// `completion/complete` they answer; the attributes given document `complete_async`.
macro_rules! completion_methods {
    ($(#[$doc:meta])* $what:ident, $reference:literal) => {
        #[doc = concat!("Offers completions for one ", stringify!($what), " (`completion/complete` with `", $reference, "`): the")]
        #[doc = concat!("function gets the partial value, the other ", stringify!($what), "s the client already gave")]
        /// (`context.arguments`) and the request's context.
        pub fn complete<F>(mut self, $what: impl Into<String>, f: F) -> Self
        where
            F: Fn(&str, &HashMap<String, String>, &RequestContext) -> Vec<String>
                + Send
                + Sync
                + 'static,
        {
            let f = completer(move |partial, given, ctx, _: &()| f(partial, given, ctx));
            self.completers.insert($what.into(), f);
            self
        }
        $(#[$doc])*
        pub fn complete_async<F, Fut>(mut self, $what: impl Into<String>, f: F) -> Self
        where
            F: Fn(String, HashMap<String, String>, RequestContext) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Vec<String>> + Send + 'static,
        {
            let f = async_completer(move |partial, given, ctx, ()| f(partial, given, ctx));
            self.completers.insert($what.into(), f);
            self
        }
    };
}
pub(crate) use completion_methods;

/// `complete` and `complete_async` for a template's or a prompt's builder after
/// `.state::<T>()` (the same methods on both; `$builder` names the one they document, `$what`
/// their parameter).
macro_rules! completion_methods_with_state {
    ($builder:literal, $what:ident) => {
        #[doc = concat!("[`", $builder, "::complete`], for a function that also gets the state.")]
        pub fn complete<F>(mut self, $what: impl Into<String>, f: F) -> Self
        where
            F: Fn(&str, &HashMap<String, String>, &RequestContext, &T) -> Vec<String>
                + Send
                + Sync
                + 'static,
        {
            let f = completer(move |partial, given, ctx, state: &Arc<T>| f(partial, given, ctx, state));
            self.completers.insert($what.into(), f);
            self
        }
        #[doc = concat!("[`", $builder, "::complete_async`], for a function that also gets the state.")]
        pub fn complete_async<F, Fut>(mut self, $what: impl Into<String>, f: F) -> Self
        where
            F: Fn(String, HashMap<String, String>, RequestContext, Arc<T>) -> Fut
                + Send
                + Sync
                + 'static,
            Fut: Future<Output = Vec<String>> + Send + 'static,
        {
            self.completers.insert($what.into(), async_completer(f));
            self
        }
    };
}
pub(crate) use completion_methods_with_state;

/// Why a server could not be built, or a declaration added to a running one: handlers need
/// state of a type the server was not given with
/// [`ServerBuilder::state`](crate::ServerBuilder::state). The message names each declaration
/// and the type it needs.
///
/// ```
/// use fleetmcp::{NoArgs, Server, tool};
///
/// struct Desk;
/// let open = tool("open_ticket")
///     .state::<Desk>()
///     .handler(|_: NoArgs, _ctx, _desk| async { Ok("opened") });
/// let refused = Server::builder("desk", "1.0.0").tool(open).try_build();
/// let why = refused.err().map(|e| e.to_string()).unwrap_or_default();
/// assert!(why.starts_with("tool `open_ticket` needs state of type `"), "{why}");
/// assert!(why.contains("Desk`, which the server was not given"), "{why}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError {
    /// One line per declaration: what it is and the type it needs.
    missing: Vec<String>,
}

impl BuildError {
    /// Checks each `(declaration, the state it needs)` against the types `has` says the
    /// server was given; an error listing every one missing.
    pub(crate) fn check(
        needs: impl IntoIterator<Item = (String, Needs)>,
        has: impl Fn(TypeId) -> bool,
    ) -> Result<(), BuildError> {
        let missing: Vec<String> = (needs.into_iter())
            .filter(|(_, needs)| !has(needs.id))
            .map(|(what, needs)| format!("{what} needs state of type `{}`", needs.name))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(BuildError { missing })
        }
    }
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, which the server was not given (give it with `ServerBuilder::state`)",
            self.missing.join("; ")
        )
    }
}

impl std::error::Error for BuildError {}
