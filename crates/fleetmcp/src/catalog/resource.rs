//! Resources: fixed URIs, and URI templates (`helpdesk://tickets/{id}`) whose variables are
//! handed to the reader. After `.state::<T>()` the reader (and a template's completers) also
//! get the server's state of type `T`, as a tool's handler does.
//!
//! ```
//! use fleetmcp::{resource, template};
//! use fleetmcp::model::ResourceContents;
//!
//! let sla = resource("helpdesk://policies/sla", "sla")
//!     .mime_type("text/markdown")
//!     .read(|uri, _ctx| async move { Ok(vec![ResourceContents::text("Four hours.", uri)]) });
//! let ticket = template("helpdesk://tickets/{id}", "ticket")
//!     .read(|uri, vars, _ctx| async move {
//!         Ok(vec![ResourceContents::text(format!("ticket {}", vars["id"]), uri)])
//!     });
//! assert_eq!(sla.uri(), "helpdesk://policies/sla");
//! # let _ = ticket;
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rmcp::model::{Resource, ResourceContents, ResourceTemplate};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::handler::{HandlerFn, needs_of};
use super::prompt::args::Arguments;
use super::state::{
    Completer, Needs, StateArg, async_completer, completer, completion_methods,
    completion_methods_with_state,
};
use crate::context::RequestContext;

/// Why a read failed.
///
/// `?` converts any error into it, as for [`crate::ToolError`]: a
/// [`crate::context::ClientRequestError`] keeps its meaning, an [`crate::protocol::ErrorData`]
/// becomes [`ResourceError::Protocol`], any other error [`ResourceError::Failed`]. For the same
/// reason as `ToolError` it does not implement [`std::error::Error`].
#[derive(Debug)]
pub enum ResourceError {
    /// No such resource: `-32002` in the session era.
    NotFound(String),
    /// The reader failed (an internal error, `-32603`, with this message).
    Failed(String),
    /// A protocol error raised by the handler.
    Protocol(crate::protocol::ErrorData),
    /// Answers from the client are needed first (see [`crate::ToolError::InputRequired`]).
    InputRequired,
}

impl std::fmt::Display for ResourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound(uri) => write!(f, "Resource not found: {uri}"),
            Self::Failed(msg) => f.write_str(msg),
            Self::Protocol(e) => f.write_str(&e.message),
            Self::InputRequired => f.write_str("input required from the client"),
        }
    }
}

from_any_error!(ResourceError);

/// What a reader's call gives: the contents, once read.
type Reading = BoxFuture<'static, Result<Vec<ResourceContents>, ResourceError>>;

type Reader = dyn Fn(
        String,
        HashMap<String, String>,
        RequestContext,
    ) -> BoxFuture<'static, Result<Vec<ResourceContents>, ResourceError>>
    + Send
    + Sync;

/// A resource at a fixed URI.
pub struct ResourceDef {
    descriptor: Resource,
    reader: Box<Reader>,
    cache: CacheHint,
    scope: Option<String>,
    needs: Option<Needs>,
}

/// 2026-07-28 caching hint of a read: (`ttlMs`, `cacheScope`). The default, `(0, "private")`,
/// lets no one reuse a read, which is right for content that may depend on the user.
pub type CacheHint = (u64, &'static str);
const DEFAULT_CACHE: CacheHint = (0, "private");

impl ResourceDef {
    /// The resource's URI.
    pub fn uri(&self) -> &str {
        &self.descriptor.uri
    }
    /// The resource as `resources/list` shows it.
    pub fn descriptor(&self) -> &Resource {
        &self.descriptor
    }
    /// How long a 2026-07-28 client may reuse a read, and for whom (see
    /// [`ResourceBuilder::cache`]).
    pub fn cache(&self) -> CacheHint {
        self.cache
    }
    /// The scope a read needs (see [`ResourceBuilder::scope`]).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }
    /// The state its reader needs, named for the check when it enters a server.
    pub(crate) fn needs(&self) -> Option<(String, Needs)> {
        Needs::named(|| format!("resource `{}`", self.uri()), self.needs)
    }
    pub(crate) fn read(
        &self,
        ctx: RequestContext,
    ) -> BoxFuture<'static, Result<Vec<ResourceContents>, ResourceError>> {
        (self.reader)(self.descriptor.uri.clone(), HashMap::new(), ctx)
    }
}

/// A family of resources named by a URI template.
pub struct TemplateDef {
    descriptor: ResourceTemplate,
    pattern: UriTemplate,
    reader: Box<Reader>,
    completers: HashMap<String, Completer>,
    cache: CacheHint,
    scope: Option<String>,
    needs: Option<Needs>,
}

impl TemplateDef {
    /// The scope a read needs (see [`TemplateBuilder::scope`]).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }
    /// The state its reader and completers need, named for the check when it enters a
    /// server.
    pub(crate) fn needs(&self) -> Option<(String, Needs)> {
        let what = || format!("resource template `{}`", self.pattern.as_str());
        Needs::named(what, self.needs)
    }
    /// The template as `resources/templates/list` shows it.
    pub fn descriptor(&self) -> &ResourceTemplate {
        &self.descriptor
    }
    pub(crate) fn pattern(&self) -> &UriTemplate {
        &self.pattern
    }
    /// How long a 2026-07-28 client may reuse a read, and for whom (see
    /// [`TemplateBuilder::cache`]).
    pub fn cache(&self) -> CacheHint {
        self.cache
    }
    pub(crate) fn completer(&self, variable: &str) -> Option<&Completer> {
        self.completers.get(variable)
    }
    pub(crate) fn read(
        &self,
        uri: String,
        vars: HashMap<String, String>,
        ctx: RequestContext,
    ) -> BoxFuture<'static, Result<Vec<ResourceContents>, ResourceError>> {
        (self.reader)(uri, vars, ctx)
    }
}

/// Starts declaring a resource at a fixed URI, read by the function given to
/// [`ResourceBuilder::read`].
///
/// ```
/// use fleetmcp::model::ResourceContents;
/// use fleetmcp::{Server, resource};
///
/// let sla = resource("helpdesk://policies/sla", "sla")
///     .mime_type("text/markdown")
///     .read(|uri, _ctx| async move { Ok(vec![ResourceContents::text("# Service levels", uri)]) });
/// let server = Server::builder("desk", "1.0.0").resource(sla).build();
/// # drop(server);
/// ```
pub fn resource(uri: impl Into<String>, name: impl Into<String>) -> ResourceBuilder {
    ResourceBuilder {
        descriptor: Resource::new(uri, name),
        cache: DEFAULT_CACHE,
        scope: None,
        state: PhantomData,
    }
}

/// The setters a resource's and a template's builders share (both keep a `descriptor` with
/// rmcp's `with_*` methods, a `scope` and a `cache` hint), written once.
macro_rules! descriptor_setters {
    () => {
        /// The OAuth scope a caller's token must grant to use this, when authorization is on
        /// (`[auth]`); without it the call answers `403` `insufficient_scope`. Ignored when
        /// authorization is off. Set once: a second call replaces the first.
        pub fn scope(mut self, scope: impl Into<String>) -> Self {
            self.scope = Some(scope.into());
            self
        }
        /// A human-readable name for clients to show.
        pub fn title(mut self, t: impl Into<String>) -> Self {
            self.descriptor = self.descriptor.with_title(t);
            self
        }
        /// What it holds, for the model and the user.
        pub fn description(mut self, d: impl Into<String>) -> Self {
            self.descriptor = self.descriptor.with_description(d);
            self
        }
        /// The MIME type of its contents.
        pub fn mime_type(mut self, m: impl Into<String>) -> Self {
            self.descriptor = self.descriptor.with_mime_type(m);
            self
        }
        /// How long a 2026-07-28 client may reuse a read, and whether shared caches may
        /// (`public`: the content is the same for every user).
        pub fn cache(mut self, ttl_ms: u64, public: bool) -> Self {
            self.cache = (ttl_ms, if public { "public" } else { "private" });
            self
        }
    };
}

/// Builder returned by [`resource`]. `S` is what the reader gets after its context: nothing,
/// or the state named with [`ResourceBuilder::state`] (`Arc<T>`).
pub struct ResourceBuilder<S = ()> {
    descriptor: Resource,
    cache: CacheHint,
    scope: Option<String>,
    state: PhantomData<fn() -> S>,
}

impl<S> ResourceBuilder<S> {
    descriptor_setters!();
}

impl ResourceBuilder {
    /// Gives the reader the server's value of type `T` as its third argument (see
    /// [`ToolBuilder::state`](super::ToolBuilder::state)).
    pub fn state<T: Send + Sync + 'static>(self) -> ResourceBuilder<Arc<T>> {
        ResourceBuilder {
            descriptor: self.descriptor,
            cache: self.cache,
            scope: self.scope,
            state: PhantomData,
        }
    }
    /// Finishes with the reader; it gets the resource's URI.
    pub fn read<F, Fut>(self, f: F) -> Arc<ResourceDef>
    where
        F: Fn(String, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        self.finish(None, move |uri, ctx, ()| f(uri, ctx))
    }
    /// Finishes with a function (an `async fn`, or a closure with its arguments' types
    /// written) taking the URI, the [`RequestContext`] and, optionally, the server's state
    /// as a [`State<T>`](crate::State), found from that argument (see
    /// [`ToolBuilder::handler_fn`](super::ToolBuilder::handler_fn)).
    ///
    /// ```
    /// use fleetmcp::model::ResourceContents;
    /// use fleetmcp::{RequestContext, ResourceError, Server, State, resource};
    ///
    /// struct Policy(String);
    ///
    /// async fn sla(uri: String, _ctx: RequestContext, policy: State<Policy>) -> Result<Vec<ResourceContents>, ResourceError> {
    ///     Ok(vec![ResourceContents::text(policy.0.clone(), uri)])
    /// }
    ///
    /// let server = Server::builder("desk", "1.0.0")
    ///     .state(Policy("Four hours.".into()))
    ///     .resource(resource("helpdesk://policies/sla", "sla").read_fn(sla))
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn read_fn<S, H>(self, f: H) -> Arc<ResourceDef>
    where
        H: HandlerFn<(String,), S, Output = Result<Vec<ResourceContents>, ResourceError>>,
    {
        let f = Arc::new(f);
        self.finish(needs_of::<H, _, _>(), move |uri, ctx, ()| {
            let call = f.call((uri,), ctx);
            async move { call.await.map_err(ResourceError::Protocol)? }
        })
    }
}

impl<T: Send + Sync + 'static> ResourceBuilder<Arc<T>> {
    /// Finishes with the reader; it gets the resource's URI and the state.
    pub fn read<F, Fut>(self, f: F) -> Arc<ResourceDef>
    where
        F: Fn(String, RequestContext, Arc<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        self.finish(None, f)
    }
}

/// The finishing steps, for either kind of handler (`S: StateArg` on each: the trait is
/// crate-private).
impl<S> ResourceBuilder<S> {
    /// `needs`: the state a function taking a [`State<T>`](crate::State) needs, besides the
    /// builder's own `S`.
    fn finish<F, Fut>(self, needs: Option<Needs>, f: F) -> Arc<ResourceDef>
    where
        S: StateArg,
        F: Fn(String, RequestContext, S) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        Arc::new(ResourceDef {
            descriptor: self.descriptor,
            reader: reader(move |uri, _vars, ctx, state| f(uri, ctx, state)),
            cache: self.cache,
            scope: self.scope,
            needs: needs.or_else(S::needs),
        })
    }
}

/// A [`Reader`] from a function that also gets the declaration's state `S`, fetched first.
fn reader<S, F, Fut>(f: F) -> Box<Reader>
where
    S: StateArg,
    F: Fn(String, HashMap<String, String>, RequestContext, S) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
{
    let f = Arc::new(f);
    Box::new(move |uri, vars, ctx| {
        let f = f.clone();
        Box::pin(async move {
            let state = S::fetch(&ctx).map_err(ResourceError::Protocol)?;
            f(uri, vars, ctx, state).await
        })
    })
}

/// Starts declaring a URI template (RFC 6570 `{variable}`s): its reader gets the URI and the
/// values of the variables, and a variable may offer completions.
///
/// ```
/// use fleetmcp::model::ResourceContents;
/// use fleetmcp::{ResourceError, Server, template};
///
/// let ticket = template("helpdesk://tickets/{id}", "ticket")
///     .complete("id", |partial, _given, _ctx| vec![format!("{partial}1")])
///     .read(|uri, vars, _ctx| async move {
///         let id = vars.get("id").ok_or_else(|| ResourceError::NotFound(uri.clone()))?;
///         Ok(vec![ResourceContents::text(format!("ticket {id}"), uri)])
///     });
/// let server = Server::builder("desk", "1.0.0").template(ticket).build();
/// # drop(server);
/// ```
pub fn template(uri_template: impl Into<String>, name: impl Into<String>) -> TemplateBuilder {
    let uri_template = uri_template.into();
    TemplateBuilder {
        pattern: UriTemplate::parse(&uri_template),
        descriptor: ResourceTemplate::new(uri_template, name),
        completers: HashMap::new(),
        cache: DEFAULT_CACHE,
        scope: None,
        state: PhantomData,
    }
}

/// Builder returned by [`template`]. `S` is what the reader and the completers get after the
/// context: nothing, or the state named with [`TemplateBuilder::state`] (`Arc<T>`).
pub struct TemplateBuilder<S = ()> {
    descriptor: ResourceTemplate,
    pattern: UriTemplate,
    completers: HashMap<String, Completer>,
    cache: CacheHint,
    scope: Option<String>,
    state: PhantomData<fn() -> S>,
}

impl<S> TemplateBuilder<S> {
    descriptor_setters!();
}

impl TemplateBuilder {
    /// Gives the reader and the completers the server's value of type `T` as their last
    /// argument (see [`ToolBuilder::state`](super::ToolBuilder::state)).
    ///
    /// ```
    /// use fleetmcp::model::ResourceContents;
    /// use fleetmcp::{Server, template};
    ///
    /// struct Desk { ids: Vec<u64> }
    ///
    /// let ticket = template("helpdesk://tickets/{id}", "ticket")
    ///     .state::<Desk>()
    ///     .complete("id", |partial, _given, _ctx, desk| {
    ///         desk.ids.iter().map(u64::to_string).filter(|id| id.starts_with(partial)).collect()
    ///     })
    ///     .read(|uri, vars, _ctx, desk| async move {
    ///         let known = vars["id"].parse().is_ok_and(|id| desk.ids.contains(&id));
    ///         Ok(vec![ResourceContents::text(format!("known: {known}"), uri)])
    ///     });
    /// let server = Server::builder("desk", "1.0.0")
    ///     .state(Desk { ids: vec![7, 12] })
    ///     .template(ticket)
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn state<T: Send + Sync + 'static>(self) -> TemplateBuilder<Arc<T>> {
        TemplateBuilder {
            descriptor: self.descriptor,
            pattern: self.pattern,
            completers: self.completers,
            cache: self.cache,
            scope: self.scope,
            state: PhantomData,
        }
    }
    completion_methods! {
        /// [`TemplateBuilder::complete`], for an async function (one that asks a database): it gets
        /// the partial value, the other variables already given and the request's context, owned.
        ///
        /// ```
        /// use fleetmcp::model::ResourceContents;
        /// use fleetmcp::{Server, template};
        ///
        /// let ticket = template("helpdesk://tickets/{id}", "ticket")
        ///     .complete_async("id", |partial, _given, _ctx| async move {
        ///         // An `.await` on the database would go here.
        ///         ["12", "17"].into_iter().filter(|id| id.starts_with(&partial)).map(String::from).collect()
        ///     })
        ///     .read(|uri, _vars, _ctx| async move { Ok(vec![ResourceContents::text("a ticket", uri)]) });
        /// let server = Server::builder("desk", "1.0.0").template(ticket).build();
        /// # drop(server);
        /// ```
        variable, "ref/resource"
    }
    /// Finishes with the reader; it gets the URI and the values of the template's variables.
    pub fn read<F, Fut>(self, f: F) -> Arc<TemplateDef>
    where
        F: Fn(String, HashMap<String, String>, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        self.finish(None, move |uri, vars, ctx, ()| f(uri, vars, ctx))
    }
    /// Finishes with a reader that gets the template's variables as a `V` rather than as
    /// strings: a struct whose fields are the variables, parsed as a prompt's arguments are
    /// (an integer, float or `bool` field from its text). A URI whose variables do not make a
    /// `V` (`notes://abc` for an integer `id`) is a resource not found, and the reader does
    /// not run.
    ///
    /// ```
    /// use fleetmcp::model::ResourceContents;
    /// use fleetmcp::{Server, template};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct NoteRef {
    ///     id: u64,
    /// }
    ///
    /// let note = template("notes://{id}", "note").read_as(|uri, note: NoteRef, _ctx| async move {
    ///     Ok(vec![ResourceContents::text(format!("note number {}", note.id), uri)])
    /// });
    /// let server = Server::builder("notes", "1.0.0").template(note).build();
    /// # drop(server);
    /// ```
    pub fn read_as<V, F, Fut>(self, f: F) -> Arc<TemplateDef>
    where
        V: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(String, V, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        self.finish(None, typed(move |uri, vars, ctx, ()| f(uri, vars, ctx)))
    }
    /// Finishes with a function (an `async fn`, or a closure with its arguments' types
    /// written) taking the URI, the variables as a `V` (as [`TemplateBuilder::read_as`] gives
    /// them; a `HashMap<String, String>` takes them as strings), the [`RequestContext`] and,
    /// optionally, the server's state as a [`State<T>`](crate::State), found from that
    /// argument (see [`ToolBuilder::handler_fn`](super::ToolBuilder::handler_fn)).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use fleetmcp::model::ResourceContents;
    /// use fleetmcp::{RequestContext, ResourceError, Server, State, template};
    ///
    /// struct Notes(BTreeMap<u64, String>);
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct NoteId {
    ///     id: u64,
    /// }
    ///
    /// async fn note(uri: String, note: NoteId, _ctx: RequestContext, notes: State<Notes>) -> Result<Vec<ResourceContents>, ResourceError> {
    ///     let text = notes.0.get(&note.id).cloned().ok_or_else(|| ResourceError::NotFound(uri.clone()))?;
    ///     Ok(vec![ResourceContents::text(text, uri)])
    /// }
    ///
    /// let server = Server::builder("notes", "1.0.0")
    ///     .state(Notes(BTreeMap::from([(1, "milk".to_string())])))
    ///     .template(template("notes://{id}", "note").read_fn(note))
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn read_fn<V, S, H>(self, f: H) -> Arc<TemplateDef>
    where
        V: DeserializeOwned + JsonSchema + Send + 'static,
        H: HandlerFn<(String, V), S, Output = Result<Vec<ResourceContents>, ResourceError>>,
    {
        let f = Arc::new(f);
        let needs = needs_of::<H, _, _>();
        self.finish(
            needs,
            typed(move |uri, vars: V, ctx, ()| {
                let call = f.call((uri, vars), ctx);
                async move { call.await.map_err(ResourceError::Protocol)? }
            }),
        )
    }
}

impl<T: Send + Sync + 'static> TemplateBuilder<Arc<T>> {
    completion_methods_with_state!("TemplateBuilder", variable);
    /// Finishes with the reader; it gets the URI, the values of the template's variables and
    /// the state.
    pub fn read<F, Fut>(self, f: F) -> Arc<TemplateDef>
    where
        F: Fn(String, HashMap<String, String>, RequestContext, Arc<T>) -> Fut
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        self.finish(None, f)
    }
    /// [`TemplateBuilder::read_as`], for a reader that also gets the state.
    pub fn read_as<V, F, Fut>(self, f: F) -> Arc<TemplateDef>
    where
        V: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(String, V, RequestContext, Arc<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        self.finish(None, typed(f))
    }
}

/// A template's reader of variables as strings, from one that takes them as a `V` (see
/// [`TemplateBuilder::read_as`]).
fn typed<V, S, F, Fut>(
    f: F,
) -> impl Fn(String, HashMap<String, String>, RequestContext, S) -> Reading + Send + Sync + 'static
where
    V: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(String, V, RequestContext, S) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
{
    let variables = Arguments::of::<V>();
    move |uri, given, ctx, state| match variables.parse::<V>(&uri, given) {
        Ok(vars) => Box::pin(f(uri, vars, ctx, state)),
        // The URI matched the template's shape but names nothing of this type.
        Err(_) => Box::pin(std::future::ready(Err(ResourceError::NotFound(uri)))),
    }
}

/// The finishing steps, for either kind of handler (`S: StateArg` on each: the trait is
/// crate-private).
impl<S> TemplateBuilder<S> {
    /// `needs`: as [`ResourceBuilder`]'s.
    fn finish<F, Fut>(self, needs: Option<Needs>, f: F) -> Arc<TemplateDef>
    where
        S: StateArg,
        F: Fn(String, HashMap<String, String>, RequestContext, S) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        Arc::new(TemplateDef {
            descriptor: self.descriptor,
            pattern: self.pattern,
            reader: reader(f),
            completers: self.completers,
            cache: self.cache,
            scope: self.scope,
            needs: needs.or_else(S::needs),
        })
    }
}

/// A level-1 URI template (RFC 6570 simple `{var}` expansions). A variable matches one or
/// more characters up to the next literal, and never crosses a `/`.
#[derive(Debug, Clone)]
pub struct UriTemplate {
    source: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Var(String),
}

impl UriTemplate {
    pub fn parse(source: &str) -> Self {
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_string()));
            }
            match rest[open..].find('}') {
                Some(close) => {
                    parts.push(Part::Var(rest[open + 1..open + close].to_string()));
                    rest = &rest[open + close + 1..];
                }
                None => {
                    parts.push(Part::Literal(rest[open..].to_string()));
                    rest = "";
                }
            }
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_string()));
        }
        Self {
            source: source.to_string(),
            parts,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The variables' values when `uri` matches.
    pub fn matches(&self, uri: &str) -> Option<HashMap<String, String>> {
        let mut vars = HashMap::new();
        let mut rest = uri;
        let mut i = 0;
        while i < self.parts.len() {
            match &self.parts[i] {
                Part::Literal(lit) => rest = rest.strip_prefix(lit.as_str())?,
                Part::Var(name) => {
                    let end = match self.parts.get(i + 1) {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let value = &rest[..end];
                    if value.is_empty() || value.contains('/') {
                        return None;
                    }
                    vars.insert(name.clone(), value.to_string());
                    rest = &rest[end..];
                }
            }
            i += 1;
        }
        rest.is_empty().then_some(vars)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn templates_match_whole_segments() {
        let t = UriTemplate::parse("test://template/{id}/data");
        assert_eq!(t.matches("test://template/123/data").unwrap()["id"], "123");
        assert!(t.matches("test://template//data").is_none());
        assert!(t.matches("test://template/1/2/data").is_none());
        assert!(t.matches("test://template/123/datax").is_none());
        let t = UriTemplate::parse("helpdesk://tickets/{id}");
        assert_eq!(t.matches("helpdesk://tickets/7").unwrap()["id"], "7");
        assert!(t.matches("helpdesk://tickets/").is_none());
        let t = UriTemplate::parse("x://{a}-{b}");
        let v = t.matches("x://1-2").unwrap();
        assert_eq!((v["a"].as_str(), v["b"].as_str()), ("1", "2"));
    }
}
