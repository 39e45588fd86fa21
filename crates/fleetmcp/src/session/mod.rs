//! Sessions of session-era clients (2024-11-05 to 2025-11-25).
//!
//! - [`id`]: sealed session ids;
//! - [`store`]: the durable record behind a trait (memory now, Redis for fleets);
//! - [`live`]: what the instance holding a session keeps in memory while it serves it.

pub mod id;
pub mod live;
pub mod redis;
pub mod store;

pub use self::redis::RedisSessionStore;
pub use id::{SessionIdPayload, SessionSealer};
pub use live::{Ended, LiveSessions, LogLevel, Session};
pub use store::{MemorySessionStore, SessionRecord, SessionStore, StoreError};
