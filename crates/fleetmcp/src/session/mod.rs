//! Sessions of session-era clients (2024-11-05 to 2025-11-25).
//!
//! - [`lifecycle`]: [`Sessions`], the one place that decides whether a session exists: mint,
//!   open, find (typed [`Lookup`]), recreate, refresh, take over, end;
//! - [`holder`]: the seam distributed mode plugs into (who serves a stored session this
//!   instance does not hold), and the [`Lease`] its heartbeat renews;
//! - [`id`]: sealed session ids;
//! - [`index`]: the holder index in buckets (which sessions an instance holds, for the orphan
//!   scanner);
//! - [`store`]: the durable record behind a trait, in memory or in Redis ([`redis`]);
//! - [`tracking`]: client-side caching of the Redis records of held sessions, so a held
//!   session's request needs no round trip;
//! - [`live`]: what the instance holding a session keeps in memory while it serves it, and
//!   [`running`]: its client's running requests;
//! - [`unread`]: what a 2024-11-05 stream holds that its client has not read;
//! - [`lossy`]: the bounded channel that carries the store's [`Invalidation`](lossy::Invalidation)s.
//!
//! A session found held by a live peer is remembered for a second, so its next requests read
//! nothing from Redis; when the store does not answer, a holder seen in the last five minutes
//! still gets the request, after `sessions.check_timeout_ms` rather than the whole store wait
//! (`lifecycle/mod.rs`).
//!
//! # 2024-11-05 sessions are pinned
//!
//! [`Sessions`] also keeps the 2024-11-05 streams open here, each with a direct line for its
//! requests' messages and answers (never through Redis: the stream is here, and a stored answer
//! would be a write a failover could lose) and its [`unread`] bound. Such a session's id names
//! the transport and the instance that minted it, where its stream is for its whole life: so
//! `find_pinned` sends a request for one minted elsewhere there without reading the store,
//! nothing takes one over (neither the orphan scanner nor `find` or `take_over`), and each
//! transport serves only its own (`find`, for `/mcp`, never a pinned session; `find_pinned`,
//! for `/message`, nothing else). Its stream ends when the session ends any other way, and
//! with the process that has it: once the relay finds that process gone
//! ([`Holders::process_gone`]), a `/message` elsewhere is answered as for an expired session.
//! A holder cut off from Redis looks gone to the others too, so it ends its streams first, once
//! it has been absent as long as they wait ([`Lease::absent_for`],
//! [`Sessions::end_pinned_streams`], called by the fleet's heartbeat task).
//! Each stream tracks its session's running requests, so a graceful stop ends it only once they
//! answered on it.
//!
//! # Binding (authorization on)
//!
//! A session records the fingerprint of the principal that opened it ([`Session::principal`]; in
//! the stored record the contract's `authorizationId` field, absent without authorization).
//! [`Sessions::find`] answers a held session asked for by anyone else as an unknown one
//! (`Sessions::stranger`: `Missing::Unknown`, which `transport/http/locate.rs` answers `404`
//! `session not initialized`, logged `[TransportService] Session token mismatch during
//! lookup`); a session held elsewhere is checked by its holder, which gets the request's token
//! through the relay. Issuer and subject, not the token: a refreshed token keeps the session.
//!
//! # What a held session costs, and when its work stops
//!
//! An idle session costs under 768 bytes of heap (`bench/memory.sh`): `clientInfo` and the
//! capabilities are kept as text and parsed on first use, what only some sessions use is made
//! on first use, and the running requests are kept by [`running`] (one in place; a table only
//! while several run). Two tokens say when work stops, both made on first use:
//! [`Session::closed`] when the session ends (deleted, expired, the server stopped), which also
//! cancels its running requests; [`Session::leaving`] also when the session moves to another
//! holder, which ends only what needs the holder (the standalone stream, requests waiting on the
//! client): admitted requests finish, and their answers reach the shared event store. A
//! session's POST answers get stream ids counted from a random base per incarnation, never from
//! 1, since several instances may serve the session in turn and a reused stream id would replay
//! an older answer from the shared store.
//!
//! Architecture invariant: knows nothing of HTTP; nothing outside this module decides whether a
//! session exists, or names `LiveSessions`.

mod holder;
mod id;
#[cfg(feature = "redis")]
pub(crate) mod index;
mod lifecycle;
mod live;
mod lossy;
#[cfg(feature = "redis")]
mod redis;
mod running;
mod store;
#[cfg(feature = "redis")]
mod tracking;
mod unread;

#[cfg(feature = "redis")]
pub(crate) use self::redis::RecordForm;
#[cfg(feature = "redis")]
pub use self::redis::RedisSessionStore;
pub use holder::{Holder, Holders, Lease};
#[cfg(any(test, feature = "testkit"))]
pub use id::minted_uuid;
pub(crate) use id::{LogId, SessionSealer};
#[cfg(feature = "redis")]
pub(crate) use index::Buckets as IndexBuckets;
pub(crate) use lifecycle::{
    LEGACY_SSE_PROTOCOL, LegacyStream, Lookup, Missing, OpenError, Sessions, Timing,
};
pub use live::Session;
pub(crate) use live::SubscribeRefusal;
#[cfg(any(test, feature = "testkit"))]
pub use lossy::Invalidation;
pub use store::{Claim, MemorySessionStore, SessionRecord, SessionStore, StoreError};
#[cfg(any(test, feature = "testkit"))]
pub use store::{Fence, Standing};
pub(crate) use unread::{Full as UnreadFull, Unread};
