//! What an operator sees of a running server: metrics ([`meters`], rendered on `/metrics`),
//! what is request-local: the labels they are counted under and the W3C trace context
//! ([`labels`], [`trace_context`]), how logs are written ([`logs`]) and, with the feature `otlp`, spans
//! exported ([`otlp`]).
//!
//! Architecture invariant: layer 0; imports nothing of HTTP, sessions or Redis. The layers
//! above record into a [`Meters`] they are handed (the Redis connection its commands' outcomes,
//! transport its requests'); no meter is process-global, so servers sharing a process (tests, an
//! embedding app) each count their own. The only process-global things are the log subscriber
//! [`logs::init_tracing`] installs and, with `otlp`, its span exporter.

pub mod labels;
pub mod logs;
pub mod meters;
pub mod otlp;
pub mod trace_context;

pub use meters::{Limit, Meters, RelayOutcome};
pub use trace_context::TraceContext;
