//! The transports, peers around one request core:
//!
//! * [`core`]: what every transport runs. [`core::driver`]'s `start` is where any transport's
//!   request becomes a running call (context, in-flight table, limits, `dispatch::request`),
//!   and [`core::initialize`] opens a session; a request the core refuses is a `Refused` (its
//!   JSON-RPC error, and what a status line adds to it), which each transport answers its
//!   own way.
//! * [`http`]: Streamable HTTP on `/mcp`, with the 2024-11-05 pair (`/sse` + `/message`) and
//!   the 2026-07-28 edge as its parts, the health and metrics routes, and the seams distributed
//!   mode fills ([`Relay`], [`Probe`], [`Gate`]).
//! * [`stdio`]: one session over stdin and stdout, for a client that starts the server as its
//!   child process.
//!
//! [`Server::serve`](crate::Server::serve) chooses one by `config::Transport`. A new transport
//! is a folder here that turns what it receives into calls of the core (as `stdio/` does), a
//! variant of that setting, and one arm in `Server::serve`'s match. The core and every
//! transport but HTTP name nothing of HTTP, and none imports another transport
//! (`tests/layers.rs`, `Rule::Peer`; no two folders here import each other: its circle rule).

mod core;
mod http;
mod stdio;

pub use self::http::{
    Gate, MACHINE_ID_HEADER, PROTOCOL_VERSION_HEADER, PeerAddr, Probe, ProbeReport,
    RELAYED_PEER_HEADER, Relay, RelayRequest, Relayed, SESSION_HEADER, with_peer,
};
pub(crate) use self::http::{Routes, Seams, routes, sse_keepalive};
pub(crate) use stdio::{process_stdin, serve as serve_stdio};
