//! What a server offers: tools, resources, resource templates and prompts, declared with the
//! builders that [`tool`](crate::tool), [`resource`](crate::resource),
//! [`template`](crate::template) and [`prompt`](crate::prompt) start, and collected into the
//! server's catalog (internal: a server is built from them with
//! [`ServerBuilder`](crate::ServerBuilder)).
//!
//! The public names here are the builders and the definitions they build (what
//! [`ServerBuilder`](crate::ServerBuilder) and [`ServerHandle`](crate::ServerHandle) take), and
//! the traits a handler's return value implements. The functions that start a declaration and
//! the types a handler names (its arguments, its errors) are at the crate root.
//!
//! The catalog is immutable; a change at runtime builds a new one and swaps it in (see
//! [`crate::ServerHandle`]), so a request reads a consistent snapshot without locking
//! (`arc-swap`).
//!
//! Arguments are validated against the tool's JSON Schema 2020-12 before the handler runs;
//! published schemas have no type arrays (an `Option<T>` field is an optional property), while
//! validation still accepts an explicit `null` (`protocol/schema.rs`). A tool's `outputSchema` is
//! the one its handler's result type declares (`Structured<T>` gives `T`'s); one whose root is
//! not an object, which MCP up to 2025-11-25 refuses, is wrapped as an object with `T`'s schema
//! under `result`, and the tool's values with it (`protocol/schema.rs`, `tool/result.rs`). A
//! `Structured<T>` is written as JSON once, and the answer is written from that text, never
//! through a `serde_json::Value`. A prompt's arguments are a Rust type (`prompt/args.rs`).
//! Handler state is typed (`state.rs`): a builder's `.state::<T>()` makes its handler take an
//! `Arc<T>`, or a function given to a `*_fn` finishing method takes a [`State<T>`](crate::State)
//! (`handler.rs`: handlers as functions, [`HandlerFn`], implemented per arity); either way a
//! declaration whose state the server was not given is refused, as a `BuildError`
//! naming it (`Catalog::check_state` from `ServerBuilder::try_build`, the same check from
//! `ServerHandle::add_*`). Without `.description(..)`, a tool or a prompt is described by its
//! arguments type's doc comment.
//!
//! ```
//! use std::sync::Arc;
//! use fleetmcp::catalog::ToolDef;
//! use fleetmcp::{NoArgs, tool};
//!
//! fn tools() -> Vec<Arc<ToolDef>> {
//!     let ping = tool("ping").description("Answers pong");
//!     vec![ping.handler(|_: NoArgs, _ctx| async { Ok("pong") })]
//! }
//! # assert_eq!(tools().len(), 1);
//! ```

/// `From<E: Error>` for a handler's error type through the one [`tool::classify`], so `?` works
/// on any error in a tool, resource or prompt handler and means the same in all three.
macro_rules! from_any_error {
    ($ty:ident) => {
        impl<E> From<E> for $ty
        where
            E: std::error::Error + Send + Sync + 'static,
        {
            fn from(e: E) -> Self {
                match $crate::catalog::tool::classify(e) {
                    $crate::catalog::tool::Classified::InputRequired => Self::InputRequired,
                    $crate::catalog::tool::Classified::Protocol(e) => Self::Protocol(e),
                    $crate::catalog::tool::Classified::Failed(msg) => Self::Failed(msg),
                }
            }
        }
    };
}

pub(crate) mod handler;
pub(crate) mod prompt;
pub(crate) mod resource;
pub(crate) mod state;
pub(crate) mod tool;

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

pub use handler::HandlerFn;
pub use prompt::{IntoPromptResult, PromptBuilder, PromptDef};
pub use resource::{ResourceBuilder, ResourceDef, TemplateBuilder, TemplateDef};
pub use tool::{IntoToolResult, ToolBuilder, ToolDef};
// The crate's own paths to what the root makes public.
pub(crate) use prompt::PromptError;
pub(crate) use resource::ResourceError;
pub(crate) use state::BuildError;
pub(crate) use tool::ToolError;
#[cfg(test)]
pub(crate) use tool::tool;

/// A consistent snapshot of everything a server offers.
#[derive(Clone, Default)]
pub(crate) struct Catalog {
    pub(crate) tools: Vec<Arc<ToolDef>>,
    tool_index: HashMap<String, usize>,
    pub(crate) resources: Vec<Arc<ResourceDef>>,
    resource_index: HashMap<String, usize>,
    pub(crate) templates: Vec<Arc<TemplateDef>>,
    pub(crate) prompts: Vec<Arc<PromptDef>>,
    prompt_index: HashMap<String, usize>,
    tools_hash: String,
    catalog_hash: String,
}

impl Catalog {
    pub fn new(
        tools: Vec<Arc<ToolDef>>,
        resources: Vec<Arc<ResourceDef>>,
        templates: Vec<Arc<TemplateDef>>,
        prompts: Vec<Arc<PromptDef>>,
    ) -> Self {
        let mut c = Catalog {
            tools,
            resources,
            templates,
            prompts,
            ..Default::default()
        };
        c.reindex();
        c
    }

    fn reindex(&mut self) {
        self.tool_index = index(self.tools.iter().map(|t| t.name().to_string()));
        self.resource_index = index(self.resources.iter().map(|r| r.uri().to_string()));
        self.prompt_index = index(self.prompts.iter().map(|p| p.name().to_string()));
        self.tools_hash = tools_hash(self.tools.iter().map(|t| t.name()));
        self.catalog_hash = self.compute_catalog_hash();
    }

    /// Checks that `has` every type of state the declarations need (see `state.rs`).
    pub fn check_state(&self, has: impl Fn(TypeId) -> bool) -> Result<(), BuildError> {
        let needs = (self.tools.iter().filter_map(|t| t.needs()))
            .chain(self.resources.iter().filter_map(|r| r.needs()))
            .chain(self.templates.iter().filter_map(|t| t.needs()))
            .chain(self.prompts.iter().filter_map(|p| p.needs()));
        BuildError::check(needs, has)
    }

    /// Every scope a tool, resource, template or prompt declares, sorted, once each.
    pub fn scopes(&self) -> Vec<String> {
        let mut all: Vec<String> = (self.tools.iter().map(|t| t.scope()))
            .chain(self.resources.iter().map(|r| r.scope()))
            .chain(self.templates.iter().map(|t| t.scope()))
            .chain(self.prompts.iter().map(|p| p.scope()))
            .flatten()
            .map(String::from)
            .collect();
        all.sort();
        all.dedup();
        all
    }

    pub fn tool(&self, name: &str) -> Option<&Arc<ToolDef>> {
        self.tool_index.get(name).map(|&i| &self.tools[i])
    }
    pub fn resource(&self, uri: &str) -> Option<&Arc<ResourceDef>> {
        self.resource_index.get(uri).map(|&i| &self.resources[i])
    }
    pub fn prompt(&self, name: &str) -> Option<&Arc<PromptDef>> {
        self.prompt_index.get(name).map(|&i| &self.prompts[i])
    }
    /// The first template whose pattern matches `uri`, with the values of its variables.
    pub fn match_template(
        &self,
        uri: &str,
    ) -> Option<(&Arc<TemplateDef>, HashMap<String, String>)> {
        self.templates
            .iter()
            .find_map(|t| t.pattern().matches(uri).map(|vars| (t, vars)))
    }
    pub fn template_by_uri(&self, uri_template: &str) -> Option<&Arc<TemplateDef>> {
        self.templates
            .iter()
            .find(|t| t.pattern().as_str() == uri_template)
    }

    /// A copy with a tool added (replacing one of the same name).
    pub fn with_tool(&self, def: Arc<ToolDef>) -> Self {
        let mut c = self.clone();
        c.tools.retain(|t| t.name() != def.name());
        c.tools.push(def);
        c.reindex();
        c
    }
    /// A copy without the named tool.
    pub fn without_tool(&self, name: &str) -> Self {
        let mut c = self.clone();
        c.tools.retain(|t| t.name() != name);
        c.reindex();
        c
    }
    pub fn with_prompt(&self, def: Arc<PromptDef>) -> Self {
        let mut c = self.clone();
        c.prompts.retain(|p| p.name() != def.name());
        c.prompts.push(def);
        c.reindex();
        c
    }
    pub fn without_prompt(&self, name: &str) -> Self {
        let mut c = self.clone();
        c.prompts.retain(|p| p.name() != name);
        c.reindex();
        c
    }
    pub fn with_resource(&self, def: Arc<ResourceDef>) -> Self {
        let mut c = self.clone();
        c.resources.retain(|r| r.uri() != def.uri());
        c.resources.push(def);
        c.reindex();
        c
    }
    pub fn without_resource(&self, uri: &str) -> Self {
        let mut c = self.clone();
        c.resources.retain(|r| r.uri() != uri);
        c.reindex();
        c
    }

    /// `catalog.toolsHash` of `/readyz`: lower-case hex SHA-256 of the sorted tool names joined
    /// with `,`, the reference definition, so mixed fleets can be compared.
    pub fn tools_hash(&self) -> &str {
        &self.tools_hash
    }

    /// A stricter hash that also covers schemas, resources and prompts: two builds that differ
    /// only in a tool's arguments have the same `toolsHash` but not the same `catalogHash`.
    pub fn catalog_hash(&self) -> &str {
        &self.catalog_hash
    }

    fn compute_catalog_hash(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        for t in &self.tools {
            parts.push(format!(
                "tool:{}",
                serde_json::to_string(t.descriptor()).unwrap_or_default()
            ));
        }
        for r in &self.resources {
            parts.push(format!(
                "resource:{}",
                serde_json::to_string(r.descriptor()).unwrap_or_default()
            ));
        }
        for t in &self.templates {
            parts.push(format!(
                "template:{}",
                serde_json::to_string(t.descriptor()).unwrap_or_default()
            ));
        }
        for p in &self.prompts {
            parts.push(format!(
                "prompt:{}",
                serde_json::to_string(p.descriptor()).unwrap_or_default()
            ));
        }
        parts.sort();
        hex(&Sha256::digest(parts.join("\n").as_bytes()))
    }

    pub fn tool_count(&self) -> usize {
        self.tools.len()
    }
    pub fn resource_count(&self) -> usize {
        self.resources.len() + self.templates.len()
    }
    pub fn prompt_count(&self) -> usize {
        self.prompts.len()
    }
}

fn index(keys: impl Iterator<Item = String>) -> HashMap<String, usize> {
    keys.enumerate().map(|(i, k)| (k, i)).collect()
}

fn tools_hash<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut names: Vec<&str> = names.collect();
    names.sort_unstable();
    hex(&Sha256::digest(names.join(",").as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoArgs;

    #[test]
    fn tools_hash_matches_the_reference_definition() {
        // sha256("a,b") — names sorted and joined with a comma.
        assert_eq!(
            tools_hash(["b", "a"].into_iter()),
            hex(&Sha256::digest(b"a,b"))
        );
        let t = |n: &'static str| {
            tool(n)
                .description("d")
                .handler(|_: NoArgs, _ctx| async { Ok("x") })
        };
        let a = Catalog::new(vec![t("a"), t("b")], vec![], vec![], vec![]);
        let b = Catalog::new(vec![t("b"), t("a")], vec![], vec![], vec![]);
        assert_eq!(a.tools_hash(), b.tools_hash(), "order does not matter");
        assert_eq!(a.catalog_hash(), b.catalog_hash());
        let c = a.without_tool("b");
        assert_ne!(a.tools_hash(), c.tools_hash());
        assert!(c.tool("b").is_none() && c.tool("a").is_some());
    }
}

#[cfg(test)]
mod from_any_error_tests {
    use super::prompt::PromptError;
    use super::resource::ResourceError;
    use crate::context::ClientRequestError;

    /// `?` on `e` in a handler returning a `T` error.
    fn raise<T: From<E>, E>(e: E) -> Result<(), T> {
        Err(e)?;
        Ok(())
    }

    #[test]
    fn question_mark_keeps_the_meaning_of_client_request_errors() {
        // Every error `from_any_error!` converts into, alike (tools: `tool/error.rs`).
        macro_rules! check {
            ($ty:ident) => {
                let io = std::io::Error::other("disk on fire");
                assert!(matches!(raise::<$ty, _>(io), Err($ty::Failed(m)) if m == "disk on fire"));
                assert!(matches!(
                    raise::<$ty, _>(ClientRequestError::InputRequired),
                    Err($ty::InputRequired)
                ));
                let bad = crate::protocol::errors::invalid_params("no such answer");
                assert!(matches!(
                    raise::<$ty, _>(ClientRequestError::InvalidInput(bad)),
                    Err($ty::Protocol(e)) if e.code.0 == -32602
                ));
            };
        }
        check!(PromptError);
        check!(ResourceError);
    }
}
