//! What an operator sees of a running server: metrics ([`meters`], rendered on `/metrics`),
//! the request scope that labels them and carries the W3C trace context ([`scope`],
//! [`trace_context`]), how logs are written ([`logs`]) and, with the feature `otlp`, spans
//! exported ([`otlp`]).
//!
//! Architecture invariant: layer 0; knows nothing of HTTP routes, sessions or Redis. The layers
//! above record into a [`Meters`] they are handed; nothing here is process-global, so servers
//! sharing a process (tests, an embedding app) each count their own.

pub mod logs;
pub mod meters;
pub mod otlp;
pub mod scope;
pub mod trace_context;

pub use meters::{Limit, Meters, RelayOutcome};
pub use trace_context::TraceContext;
