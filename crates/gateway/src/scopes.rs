//! The OAuth scope each upstream tool needs (`FLEETMCP_UPSTREAM_TOOL_SCOPES`), around either
//! kind of upstream: with `[auth]` on, fleetmcp asks it before a call goes up.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use fleetmcp::{Upstream, UpstreamLink};

/// `upstream`, with a scope per tool (`*`: any tool not named).
pub struct Scoped<U> {
    upstream: U,
    tools: Arc<BTreeMap<String, String>>,
}

impl<U> Scoped<U> {
    pub fn new(upstream: U, tools: BTreeMap<String, String>) -> Self {
        Self {
            upstream,
            tools: Arc::new(tools),
        }
    }
}

#[async_trait]
impl<U: Upstream> Upstream for Scoped<U> {
    async fn connect(&self, session: &str) -> Result<UpstreamLink, String> {
        self.upstream.connect(session).await
    }

    fn ready(&self) -> Result<(), String> {
        self.upstream.ready()
    }

    fn required_scope(&self, method: &str, name: &str) -> Option<String> {
        if method != "tools/call" {
            return None;
        }
        self.tools
            .get(name)
            .or_else(|| self.tools.get("*"))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    #[async_trait]
    impl Upstream for Nothing {
        async fn connect(&self, _: &str) -> Result<UpstreamLink, String> {
            Err("none".into())
        }
    }

    #[test]
    fn a_named_tool_has_its_scope_and_the_others_the_default() {
        let tools = [("echo", "echo:run"), ("*", "mcp:tools")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let scoped = Scoped::new(Nothing, tools);
        assert_eq!(
            scoped.required_scope("tools/call", "echo").as_deref(),
            Some("echo:run")
        );
        assert_eq!(
            scoped.required_scope("tools/call", "other").as_deref(),
            Some("mcp:tools")
        );
        assert_eq!(scoped.required_scope("prompts/get", "echo"), None);
        let none = Scoped::new(Nothing, BTreeMap::new());
        assert_eq!(none.required_scope("tools/call", "echo"), None);
    }
}
