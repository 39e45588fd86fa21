//! **Not API.** What the crate's own integration tests and the example binaries reach beyond
//! the documented API: the stores behind their traits and their records (tests drive them
//! directly, and plug one into [`ServerBuilder`](crate::ServerBuilder)'s hidden
//! `session_store`, `event_store` and `task_store`), the task limits, the listen streams'
//! snapshot, and the list of environment variables the deployment files are checked against.
//! Only with the feature `testkit`, which the crate's own tests turn on.
//!
//! Hidden from the documentation and outside any compatibility promise: anything here may change
//! or go in any release. The one door for such names, so the documented API stays what
//! tests/public_api.rs lists; a name moves out of here only by becoming API on purpose.

pub use crate::config::env::environment_variables;
pub use crate::events::{Cursor, EventStore, UNSTORED_WAIT, Unresolved};
pub use crate::limits::PlacesSnapshot;
pub use crate::session::{
    Claim, Fence, Invalidation, MemorySessionStore, SessionRecord, SessionStore, Standing,
    StoreError, minted_uuid,
};
pub use crate::tasks::{Executor, TaskLimits, TaskRecord, TaskStatus, TaskStore, TaskStoreError};
// The stores in Redis, with the `redis` feature.
#[cfg(feature = "redis")]
pub use crate::{events::RedisEventStore, session::RedisSessionStore, tasks::RedisTaskStore};
