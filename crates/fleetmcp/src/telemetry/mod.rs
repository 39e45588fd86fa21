//! What an operator sees of a running server: metrics ([`meters`], rendered on `/metrics`),
//! what is request-local: the labels they are counted under and the W3C trace context
//! ([`labels`], [`trace_context`]), how logs are written ([`logs`]) and, with the feature `otlp`, spans
//! exported ([`otlp`]).
//!
//! Architecture invariant: layer 0; imports nothing of HTTP, sessions or Redis. The layers
//! above record into a [`Meters`] they are handed (the Redis connection its commands' outcomes,
//! transport its requests'); no meter is process-global, so servers sharing a process (tests, an
//! embedding app) each count their own. The only process-global things are the log subscriber
//! [`logs::init_tracing`] installs and, with `otlp`, its span exporter; and, as stdout is, the
//! switch that sends log lines to stderr once stdout carries the stdio transport
//! ([`logs::keep_stdout_for_messages`]: set by `init_tracing` for `FLEETMCP_TRANSPORT=stdio`,
//! by `Config::load` and by the server's build (`server/parts.rs`) for a configuration that
//! says stdio; never cleared).
//!
//! `http.metrics = false` makes every recording a no-op. The span exporter (`otlp.rs`, feature
//! `otlp`, off by default) sends batches over OTLP/HTTP with protobuf, on reqwest's blocking
//! client on the batch processor's own thread (no gRPC, no TLS); [`logs::flush_traces`] sends
//! what is batched at shutdown.

pub mod labels;
pub mod logs;
pub mod meters;
pub mod otlp;
pub mod trace_context;

pub use meters::{Limit, Meters, RelayOutcome};
pub use trace_context::TraceContext;
