//! The transports, peers around one request core: [`http`] (Streamable HTTP on `/mcp`, with
//! the 2024-11-05 pair and the 2026-07-28 edge as its parts, and the health and metrics
//! routes) and [`stdio`] (one session over stdin and stdout). Each turns what it receives
//! into requests for [`core`], which runs them the same way whatever carried them.

mod core;
mod http;
mod stdio;

pub use self::http::{
    Gate, MACHINE_ID_HEADER, PROTOCOL_VERSION_HEADER, PeerAddr, Probe, ProbeReport,
    RELAYED_PEER_HEADER, Relay, RelayRequest, Relayed, SESSION_HEADER, with_peer,
};
pub(crate) use self::http::{Routes, Seams, routes, sse_keepalive};
pub(crate) use stdio::{process_stdin, serve as serve_stdio};
