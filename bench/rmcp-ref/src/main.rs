//! rmcp-ref: the reference server of `bench/run.sh`.
//!
//! One tool, `find_tickets`, served by the official Rust MCP SDK (rmcp 3.11) in its Streamable
//! HTTP server mode with sessions (`legacy_session_mode`, the default, with the in-memory
//! `LocalSessionManager`), mounted in axum 0.8 at `/mcp`, with TCP_NODELAY on every accepted
//! socket. `GET /healthz` answers 200 for readiness. The port comes from `PORT` (default 3001).

use std::net::SocketAddr;

use axum::{Router, routing::get};
use rmcp::{
    ServerHandler,
    handler::server::router::tool::ToolRouter,
    model::{ServerCapabilities, ServerConfig},
    tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;

/// What `find_tickets` answers: the same shape as help-desk's answer on an empty desk.
const TICKETS: &str = r#"{"tickets":[]}"#;

#[derive(Debug, Clone)]
struct Desk {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Desk {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Finds tickets by words in their title or description, and by status.",
        annotations(read_only_hint = true)
    )]
    fn find_tickets(&self) -> String {
        TICKETS.to_owned()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Desk {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = match std::env::var("PORT") {
        Ok(p) => p
            .parse()
            .map_err(|e| std::io::Error::other(format!("PORT={p}: {e}")))?,
        Err(_) => 3001,
    };
    let ct = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_cancellation_token(ct.child_token());
    let service: StreamableHttpService<Desk, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(Desk::new()), Default::default(), config);

    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .nest_service("/mcp", service);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("rmcp-ref: listening on http://{addr}/mcp");

    let shutdown = ct.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        shutdown.cancel();
    });
    let signal = ct.clone();
    // TCP_NODELAY on each accepted socket: without it Nagle's algorithm and delayed ACKs stall
    // the multi-chunk SSE answers (see /work/shared/reference/deps.md).
    axum::serve(
        axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        }),
        app,
    )
    .with_graceful_shutdown(async move { signal.cancelled_owned().await })
    .await
}
