//! What the gateway's configuration adds around either kind of upstream: the OAuth scope each
//! upstream tool needs (`FLEETMCP_UPSTREAM_TOOL_SCOPES`; with `[auth]` on, fleetmcp asks it
//! before a call goes up), and SSE polling of long requests (`FLEETMCP_UPSTREAM_POLL_AFTER_MS`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fleetmcp::{Upstream, UpstreamLink};

/// `upstream`, with a scope per tool (`*`: any tool not named) and its polling interval.
pub struct Policy<U> {
    upstream: U,
    tools: Arc<BTreeMap<String, String>>,
    poll_after: Option<Duration>,
}

impl<U> Policy<U> {
    pub fn new(upstream: U, tools: BTreeMap<String, String>) -> Self {
        Self {
            upstream,
            tools: Arc::new(tools),
            poll_after: None,
        }
    }

    /// Requests still running after `after` have their client connection ended for SSE
    /// polling (see [`Upstream::poll_after`]; `None`: never).
    pub fn poll_after(mut self, after: Option<Duration>) -> Self {
        self.poll_after = after;
        self
    }
}

#[async_trait]
impl<U: Upstream> Upstream for Policy<U> {
    async fn connect(&self, session: &str, key: &str) -> Result<UpstreamLink, String> {
        self.upstream.connect(session, key).await
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

    fn poll_after(&self) -> Option<Duration> {
        self.poll_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    #[async_trait]
    impl Upstream for Nothing {
        async fn connect(&self, _: &str, _: &str) -> Result<UpstreamLink, String> {
            Err("none".into())
        }
    }

    #[test]
    fn a_named_tool_has_its_scope_and_the_others_the_default() {
        let tools = [("echo", "echo:run"), ("*", "mcp:tools")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let scoped = Policy::new(Nothing, tools);
        assert_eq!(
            scoped.required_scope("tools/call", "echo").as_deref(),
            Some("echo:run")
        );
        assert_eq!(
            scoped.required_scope("tools/call", "other").as_deref(),
            Some("mcp:tools")
        );
        assert_eq!(scoped.required_scope("prompts/get", "echo"), None);
        let none = Policy::new(Nothing, BTreeMap::new());
        assert_eq!(none.required_scope("tools/call", "echo"), None);
    }
}
