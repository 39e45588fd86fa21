//! fleetmcp: an MCP server runtime that runs as one process, or as a fleet of instances
//! behind a load balancer sharing state through Redis.
//!
//! Declare tools, resources and prompts, build a [`Server`], serve it:
//!
//! ```no_run
//! use fleetmcp::{Config, Server, tool, NoArgs};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let server = Server::builder("hello", "1.0.0")
//!     .tool(tool("hello").description("Says hello").handler(|_: NoArgs, _ctx| async { Ok("Hello!") }))
//!     .config(Config::load()?)
//!     .build();
//! server.serve().await?;
//! # Ok(()) }
//! ```
//!
//! See `docs/ARCHITECTURE.md` for how the parts fit together.

// The layers, lowest first. A module imports only from layers below it (and its own layer);
// tests/layers.rs checks it, docs/ARCHITECTURE.md explains each.
// 0. foundation
mod clock;
pub mod config;
mod liveness;
mod machine_id;
pub mod protocol;
pub mod redis_config;
pub mod redis_conn;
mod telemetry;
#[cfg(test)]
mod testing;
// 1. state that is not a session's
pub mod auth;
pub mod events;
mod limits;
mod stateless;
mod tasks;
// 2. sessions
pub mod session;
// 3. the application: shared state, what a server offers, what a handler sees
mod app;
pub mod catalog;
mod context;
// 4. method dispatch
mod dispatch;
// 5. HTTP
mod transport;
// 6. other instances
mod fleet;
// 7. wiring
pub mod ops;
mod server;

pub use app::{ServerHandle, ServerInfo};
pub use auth::{AuthError, Principal};
pub use catalog::{
    Catalog, IntoToolResult, NoArgs, PromptError, ResourceError, Structured, ToolError, prompt,
    resource, template, tool,
};
pub use config::{BindAddress, Config, ConfigError, DeploymentMode};
pub use context::{ClientRequestError, IDEMPOTENCY_KEY_META, MAX_IDEMPOTENCY_KEY, RequestContext};
pub use limits::HoldingsSnapshot;
pub use protocol::LogLevel;
pub use server::{Running, Server, ServerBuilder, shutdown_signal};
pub use tasks::{
    EXECUTOR_GONE_MESSAGE, Executor, MemoryTaskStore, RedisTaskStore, TaskLimits, TaskQuota,
    TaskRecord, TaskStatus, TaskStore, TaskStoreError, TaskStoreFull, TaskSupport,
};
pub use transport::{MACHINE_ID_HEADER, PROTOCOL_VERSION_HEADER, SESSION_HEADER};

pub use telemetry::logs::{flush_traces, init_tracing};
