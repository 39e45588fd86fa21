//! [`Server::serve`] when the configuration asks for stdio: what HTTP's `start` runs that one
//! local session needs (no listener, no fleet, no idle sweeper: the session lasts as long as
//! its client's pipe), then the transport until stdin closes or a signal comes.

use super::{Server, shutdown_signal};
use crate::config::DeploymentMode;

impl Server {
    /// Serves one session on the process's stdin and stdout; returns once it ended (stdin
    /// closed, stdout closed, or SIGTERM/SIGINT) and everything it sent is flushed. An `Err`
    /// only for a configuration that cannot serve stdio (built in code past the checks
    /// `Config::load` makes).
    pub(super) async fn serve_stdio(self) -> std::io::Result<()> {
        let app = self.app;
        let refused = |why: String| {
            tracing::error!("{why}");
            Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why))
        };
        if let Some(why) = self.auth_error {
            return refused(why);
        }
        if app.config().deployment_mode == DeploymentMode::Distributed || app.auth().is_some() {
            return refused(
                "FLEETMCP_TRANSPORT=stdio serves one local session: not in distributed mode, not with [auth]"
                    .into(),
            );
        }
        tokio::spawn(app.meters().clone().upkeep(app.phases().shutdown.clone()));
        let cat = app.catalog();
        tracing::info!(
            server = %app.info().name,
            version = %app.info().version,
            tools = cat.tool_count(),
            "serving MCP on stdio (JSON-RPC on stdin and stdout, logs on stderr)"
        );
        let input = crate::transport::process_stdin();
        let output = tokio::io::stdout();
        // The second signal is listened for only once the first came (or stdin closed): a
        // listener made earlier would take the first one too.
        crate::transport::serve_stdio(app.clone(), input, output, shutdown_signal(), async {
            shutdown_signal().await
        })
        .await;
        app.phases().shutdown.cancel();
        tracing::info!("stopped");
        Ok(())
    }
}
