//! Resources: fixed URIs, and URI templates (`helpdesk://tickets/{id}`) whose variables are
//! handed to the reader.
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
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rmcp::model::{Resource, ResourceContents, ResourceTemplate};

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

type Reader = dyn Fn(
        String,
        HashMap<String, String>,
        RequestContext,
    ) -> BoxFuture<'static, Result<Vec<ResourceContents>, ResourceError>>
    + Send
    + Sync;

/// Completes one variable of a template or argument of a prompt: (partial value, other
/// arguments already given) to candidate values.
pub type Completer = Arc<dyn Fn(&str, &HashMap<String, String>) -> Vec<String> + Send + Sync>;

/// A resource at a fixed URI.
pub struct ResourceDef {
    descriptor: Resource,
    reader: Box<Reader>,
    cache: CacheHint,
    scope: Option<String>,
}

/// 2026-07-28 caching hint of a read: (`ttlMs`, `cacheScope`). The default, `(0, "private")`,
/// lets no one reuse a read, which is right for content that may depend on the user.
pub type CacheHint = (u64, &'static str);
const DEFAULT_CACHE: CacheHint = (0, "private");

impl ResourceDef {
    pub fn uri(&self) -> &str {
        &self.descriptor.uri
    }
    pub fn descriptor(&self) -> &Resource {
        &self.descriptor
    }
    pub fn cache(&self) -> CacheHint {
        self.cache
    }
    /// The scope a read needs (see [`ResourceBuilder::scope`]).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
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
}

impl TemplateDef {
    /// The scope a read needs (see [`TemplateBuilder::scope`]).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }
    pub fn descriptor(&self) -> &ResourceTemplate {
        &self.descriptor
    }
    pub(crate) fn pattern(&self) -> &UriTemplate {
        &self.pattern
    }
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
    }
}

/// Builder returned by [`resource`].
pub struct ResourceBuilder {
    descriptor: Resource,
    cache: CacheHint,
    scope: Option<String>,
}

impl ResourceBuilder {
    /// The OAuth scope a caller's token must grant to use this, when authorization is on
    /// (`[auth]`); without it the call answers `403` `insufficient_scope`. Ignored when
    /// authorization is off.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.descriptor = self.descriptor.with_title(t);
        self
    }
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.descriptor = self.descriptor.with_description(d);
        self
    }
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
    /// Finishes with the reader; it gets the resource's URI.
    pub fn read<F, Fut>(self, f: F) -> Arc<ResourceDef>
    where
        F: Fn(String, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        Arc::new(ResourceDef {
            descriptor: self.descriptor,
            reader: Box::new(move |uri, _vars, ctx| Box::pin(f(uri, ctx))),
            cache: self.cache,
            scope: self.scope,
        })
    }
}

/// Starts declaring a URI template (RFC 6570 `{variable}`s): its reader gets the URI and the
/// values of the variables, and a variable may offer completions.
///
/// ```
/// use fleetmcp::model::ResourceContents;
/// use fleetmcp::{ResourceError, Server, template};
///
/// let ticket = template("helpdesk://tickets/{id}", "ticket")
///     .complete("id", |partial, _| vec![format!("{partial}1")])
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
    }
}

/// Builder returned by [`template`].
pub struct TemplateBuilder {
    descriptor: ResourceTemplate,
    pattern: UriTemplate,
    completers: HashMap<String, Completer>,
    cache: CacheHint,
    scope: Option<String>,
}

impl TemplateBuilder {
    /// The OAuth scope a caller's token must grant to use this, when authorization is on
    /// (`[auth]`); without it the call answers `403` `insufficient_scope`. Ignored when
    /// authorization is off.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.descriptor = self.descriptor.with_title(t);
        self
    }
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.descriptor = self.descriptor.with_description(d);
        self
    }
    pub fn mime_type(mut self, m: impl Into<String>) -> Self {
        self.descriptor = self.descriptor.with_mime_type(m);
        self
    }
    /// See [`ResourceBuilder::cache`].
    pub fn cache(mut self, ttl_ms: u64, public: bool) -> Self {
        self.cache = (ttl_ms, if public { "public" } else { "private" });
        self
    }
    /// Offers completions for one variable (`completion/complete` with `ref/resource`).
    pub fn complete<F>(mut self, variable: impl Into<String>, f: F) -> Self
    where
        F: Fn(&str, &HashMap<String, String>) -> Vec<String> + Send + Sync + 'static,
    {
        self.completers.insert(variable.into(), Arc::new(f));
        self
    }
    /// Finishes with the reader; it gets the URI and the values of the template's variables.
    pub fn read<F, Fut>(self, f: F) -> Arc<TemplateDef>
    where
        F: Fn(String, HashMap<String, String>, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        Arc::new(TemplateDef {
            descriptor: self.descriptor,
            pattern: self.pattern,
            reader: Box::new(move |uri, vars, ctx| Box::pin(f(uri, vars, ctx))),
            completers: self.completers,
            cache: self.cache,
            scope: self.scope,
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
    use crate::context::ClientRequestError;

    fn raise<E: std::error::Error + Send + Sync + 'static>(e: E) -> Result<(), ResourceError> {
        Err::<(), E>(e)?;
        Ok(())
    }

    #[test]
    fn question_mark_keeps_the_meaning_of_client_request_errors() {
        let io = std::io::Error::other("disk on fire");
        assert!(matches!(raise(io), Err(ResourceError::Failed(m)) if m == "disk on fire"));
        assert!(matches!(
            raise(ClientRequestError::InputRequired),
            Err(ResourceError::InputRequired)
        ));
        let bad = crate::protocol::errors::invalid_params("no such answer");
        assert!(matches!(
            raise(ClientRequestError::InvalidInput(bad)),
            Err(ResourceError::Protocol(e)) if e.code.0 == -32602
        ));
    }

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
