// The getting-started, the same page as the crate's README (crates.io) and, in the
// repository's README, "Use the library"; its examples are doctests.
#![doc = include_str!("../README.md")]
// Every public item is documented (issue 41); `cargo doc` with warnings denied checks the
// links in CI.
#![deny(missing_docs)]
// Without the `redis` feature the layers below the fleet keep the seams, records and errors
// that only the fleet and the Redis stores use (they do not know the feature), unused there;
// the default build checks them.
#![cfg_attr(not(feature = "redis"), allow(dead_code, unused_imports))]
//!
//! ## The API
//!
//! One path per name:
//!
//! - this page: [`tool`], [`resource`], [`template`] and [`prompt`] start a declaration;
//!   [`Server`] and its [`ServerBuilder`] build a server (refused with a [`BuildError`] when a
//!   handler needs state it was not given), [`run`] serves one as a binary's `main`,
//!   [`Running`] and [`ServerHandle`] run and change it; a handler gets a [`RequestContext`]
//!   (and, as a function, the server's state as a [`State`]) and fails with [`ToolError`],
//!   [`ResourceError`] or [`PromptError`]; [`Config`] is the
//!   configuration; and the constants a client sees;
//! - [`catalog`]: the builders those functions return and the definitions they build;
//! - [`config`]: the sections of [`Config`];
//! - [`redis_conn`]: the bounded Redis connection, for an application's own keys;
//! - [`model`]: the MCP message types (rmcp's).
//!
//! `lib.rs` makes every other module private. `crates/fleetmcp/tests/public_api.rs` parses the
//! tree, follows `pub mod` and `pub use` from here, leaves out what `#[doc(hidden)]` marks, and
//! checks the surface against its list (at most 69 items, no name with two paths): a new public
//! name fails it until it is listed on purpose. What the crate's own tests and the example
//! binaries need beyond it is behind `internals` (feature `testkit`), which is not API. The
//! operator's command is API ([`Server::operator_command`], which `fleetmcp-ctl` runs).
//!
//! [ARCHITECTURE.md](https://github.com/fleetmcp/fleetmcp/blob/main/docs/ARCHITECTURE.md) is
//! the map (the layers, a request's walk, the invariants, where to change what); each module's
//! documentation here is the reference for its part.
//!
//! ## Words the deployment contract keeps
//!
//! The code says one word per idea. The deployment contract (FrontMCP's: environment variables,
//! headers, stored records, messages between instances, log lines) keeps its own words where an
//! operator or an older instance meets them, verbatim, even where the code says another
//! (`serde` renames and constants map them, in one place each):
//!
//! | the code says | the contract keeps |
//! |---|---|
//! | *fleet* (instances sharing sessions through Redis) | *distributed mode*: `FRONTMCP_DEPLOYMENT_MODE=distributed`; `[ha]` and `FRONTMCP_HA_*` its tuning; `[HA]` its log prefix |
//! | *holder*, the instance that serves a session (`holder`, `Holder`, `Lookup::HeldElsewhere`) | `session.nodeId` of a stored session record, `nodeId` of a session id's payload, the index keys `node:<id>:sessions`; the log fields `owner_node_id`, `previous_node_id`, `dead_node_id`, `session_node` and lines such as `[HA] Session owner is gone` |
//! | *machine id*, an instance's own id (`machine_id`) | `MACHINE_ID`, the header `x-frontmcp-machine-id`, `nodeId` of a heartbeat and of a task's `executor`, `sourceNodeId` and `targetNodeId` of the messages between instances, the log field `source_node_id` |
//! | *principal*, who made a session or task (its fingerprint: `principal`) | `authorizationId` of a stored session record |
//! | the session a task is filed under (`owner` of a task record) | `owner` of a stored task record, `tasks.max_tasks_per_owner`, `tasks.max_bytes_per_owner` |
//! | the 2024-11-05 transport (`/sse` + `/message`, `LEGACY_SSE_PROTOCOL`) | `legacy-sse`, the protocol in its session ids' payload |
//!
//! *Cluster* means Redis Cluster only.

// The layers, lowest first. A module imports only from layers below it (and its own layer);
// tests/layers.rs checks it, docs/ARCHITECTURE.md explains each.
//
// What a user of the library can name is this file's `pub` items and the three public modules
// (`catalog`, `config`, `redis_conn`), one path each: tests/public_api.rs lists it and fails when
// it grows unlisted. What the crate's own tests and the examples' binaries need beyond that is
// behind `internals` (feature `testkit`), hidden from the documentation and not API.
//
// Feature `redis` (default) gates whole modules: `redis_conn`, `fleet` and `ops` here, the Redis
// stores in their modules (`session/redis/`, `events/redis/`, `tasks/redis/`, `limits/redis.rs`);
// `server/features.rs` refuses a configuration that needs them in a build without it.
// 0. foundation
mod clock;
pub mod config;
mod machine_id;
mod process_liveness;
mod protocol;
mod redis_config;
#[cfg(feature = "redis")]
pub mod redis_conn;
mod telemetry;
#[cfg(test)]
mod testing;
// 1. state that is not a session's
mod auth;
mod events;
mod limits;
mod stateless;
mod tasks;
// 2. sessions
mod session;
// 3. the application: shared state, what a server offers, what a handler sees
mod app;
pub mod catalog;
mod context;
mod upstream;
// 4. method dispatch
mod dispatch;
// 5. HTTP
mod transport;
// 6. other instances
#[cfg(feature = "redis")]
mod fleet;
// 7. wiring
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod internals;
#[cfg(feature = "redis")]
mod ops;
mod server;

/// The repository's README, whose Rust examples ("Use the library", "Writing a server") are
/// compiled as this crate's doctests, so what a new user copies from it builds. (Not in the
/// published package: only `cargo test --doc` in the repository reads it.)
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct RepositoryReadme;

pub use app::ServerHandle;
pub use auth::Principal;
pub use catalog::handler::State;
pub use catalog::prompt::{PromptError, prompt};
pub use catalog::resource::{ResourceError, resource, template};
pub use catalog::state::BuildError;
pub use catalog::tool::{NoArgs, Structured, ToolError, tool};
pub use config::load::{Config, ConfigError};
pub use context::{
    ClientRequestError, Elicited, IDEMPOTENCY_KEY_META, MAX_IDEMPOTENCY_KEY, RequestContext,
};
pub use events::{STREAM_LOST_MESSAGE, WRITER_GONE_MESSAGE};
pub use protocol::LogLevel;
/// The MCP message types (tools, content blocks, prompts' messages, results, errors): the
/// official SDK's `rmcp::model`, which handlers build their answers from.
pub use rmcp::model;
pub use server::{
    Running, Server, ServerBuilder, TestClient, TestClientBuilder, run, shutdown_signal,
};
pub use tasks::{EXECUTOR_GONE_MESSAGE, TaskSupport};
pub use telemetry::logs::{flush_traces, init_tracing};
pub use transport::{MACHINE_ID_HEADER, PROTOCOL_VERSION_HEADER, SESSION_HEADER};
pub use upstream::{MessageReceiver, MessageSender, Upstream, UpstreamLink};
