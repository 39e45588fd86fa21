//! The startup probe: the command is run once and initialized before the gateway counts as
//! ready, so a command that cannot start (not installed, a typo, a crash at start) makes
//! `/readyz` answer `503` naming the reason, instead of failing each client's `initialize`.
//! Ready means the last probe's `initialize` was answered: not yet probed, or a probe still
//! waiting for its answer, is not ready (a server that answers late, or never, is `503` until
//! it answers). While it fails, it is tried again every [`RETRY`]; and again whenever a
//! session's process cannot be started, so `/readyz` follows the command's health both ways.

use std::time::Duration;

use bytes::Bytes;
use fleetmcp::Upstream;
use serde_json::{Value, json};

use crate::child::Children;
use crate::http_upstream::HttpUpstream;

/// An upstream the probe can check: what to call it in the log, and where its finding goes.
pub trait Probed: Upstream + Clone {
    fn describe(&self) -> String;
    fn set_health(&self, health: Result<(), String>);
    /// Notified when the upstream fails a session after the probe succeeded (it marked
    /// itself unhealthy): the probe runs again. `None`: it never does.
    fn failures(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        None
    }
}

impl Probed for Children {
    fn describe(&self) -> String {
        format!("the upstream command `{}`", self.command_line())
    }
    fn set_health(&self, health: Result<(), String>) {
        Children::set_health(self, health);
    }
    fn failures(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        Some(Children::failures(self))
    }
}

impl Probed for HttpUpstream {
    fn describe(&self) -> String {
        format!("the upstream server at {}", self.url())
    }
    fn set_health(&self, health: Result<(), String>) {
        HttpUpstream::set_health(self, health);
    }
}

/// What `/readyz` says before the first probe answered.
pub const NOT_YET: &str = "the upstream has not answered initialize yet";

/// How long the probe's process has to answer `initialize`.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);
/// How often a failed probe is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// Probes now, and again every [`RETRY`] while the upstream fails; notes each finding. Once it
/// succeeds, waits for the upstream to fail a session, then probes again.
pub async fn watch(upstream: impl Probed) {
    let failures = upstream.failures();
    loop {
        let found = probe(&upstream).await;
        let what = upstream.describe();
        match &found {
            Ok(()) => tracing::info!("[gateway] {what} answers initialize"),
            Err(why) => tracing::error!(
                "[gateway] {what} cannot serve: {why}; /readyz answers 503 until it can"
            ),
        }
        let ok = found.is_ok();
        upstream.set_health(found);
        if ok {
            match &failures {
                Some(failed) => failed.notified().await,
                None => return,
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Starts the upstream, initializes it, and stops it.
async fn probe(upstream: &impl Probed) -> Result<(), String> {
    // Its own key: no client's places are taken by it.
    let mut link = upstream.connect("startup-probe", "startup-probe").await?;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "fleetmcp-gateway-probe", "version": env!("CARGO_PKG_VERSION")},
        },
    });
    link.to_upstream
        .send(Bytes::from(initialize.to_string()))
        .await
        .map_err(|_| "it stopped at once".to_string())?;
    let answer = async {
        while let Some(message) = link.from_upstream.recv().await {
            let Ok(v) = serde_json::from_slice::<Value>(&message) else {
                continue;
            };
            if v.get("id") == Some(&json!(1)) {
                return match v.get("error") {
                    Some(e) => Err(format!("it answered initialize with an error: {e}")),
                    None => Ok(()),
                };
            }
        }
        Err("it stopped before answering initialize (see the log)".to_string())
    };
    tokio::time::timeout(ANSWER_WITHIN, answer)
        .await
        .map_err(|_| format!("it did not answer initialize within {ANSWER_WITHIN:?}"))?
}
