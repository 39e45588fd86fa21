//! Integration tests of fleetmcp over real HTTP: in-process servers on loopback ports, a raw
//! MCP client (reqwest, plus raw TCP where reqwest cannot express a request), and an SSE
//! reader.
//!
//! Every test starts its own server, so tests run in parallel without sharing state.

mod batches;
mod bodies;
mod cancellation;
mod client_requests;
mod drain;
mod fleet;
mod health;
mod sessions;
mod sse_resume;
mod status_codes;
#[path = "../support/mod.rs"]
mod support;
mod tools;
mod typed;
mod upstream;
