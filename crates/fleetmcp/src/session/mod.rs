//! Sessions of session-era clients (2024-11-05 to 2025-11-25).
//!
//! - [`lifecycle`]: [`Sessions`], the one place that decides whether a session exists: mint,
//!   open, find (typed [`Lookup`]), recreate, refresh, take over, end;
//! - [`ownership`]: the seam distributed mode plugs into (who serves a stored session this
//!   instance does not hold), and the [`Lease`] its heartbeat renews;
//! - [`id`]: sealed session ids;
//! - [`index`]: the holder index in buckets (which sessions an instance holds, for the orphan
//!   scanner);
//! - [`store`]: the durable record behind a trait, in memory or in Redis ([`redis`]);
//! - [`tracking`]: client-side caching of the Redis records of held sessions, so a held
//!   session's request needs no round trip;
//! - [`live`]: what the instance holding a session keeps in memory while it serves it, and
//!   [`running`]: its client's running requests;
//! - [`unread`]: what a 2024-11-05 stream holds that its client has not read.
//!
//! Architecture invariant: knows nothing of HTTP; nothing outside this module decides whether a
//! session exists, or names `LiveSessions`.

mod id;
pub(crate) mod index;
mod lifecycle;
mod live;
mod lossy;
mod ownership;
mod redis;
mod running;
mod store;
mod tracking;
mod unread;

pub use self::redis::RedisSessionStore;
#[cfg(any(test, feature = "testkit"))]
pub use id::minted_uuid;
pub(crate) use id::{LogId, SessionSealer};
pub(crate) use index::Buckets as IndexBuckets;
pub(crate) use lifecycle::{
    LegacyStream, Lookup, Missing, OpenError, PINNED_PROTOCOL, Sessions, Timing,
};
pub use live::Session;
pub(crate) use live::SubscribeRefusal;
#[cfg(any(test, feature = "testkit"))]
pub use lossy::Invalidation;
pub use ownership::{Lease, Owner, Ownership};
pub use store::{Claim, MemorySessionStore, SessionRecord, SessionStore, StoreError};
#[cfg(any(test, feature = "testkit"))]
pub use store::{Fence, Hold};
pub(crate) use unread::{Full as UnreadFull, Unread};
