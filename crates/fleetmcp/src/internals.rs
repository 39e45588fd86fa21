//! **Not API.** What the crate's own integration tests and the example binaries reach beyond
//! the documented API: the stores behind their traits and their records (tests drive them
//! directly, and plug one into [`ServerBuilder`](crate::ServerBuilder)'s hidden
//! `session_store`, `event_store` and `task_store`), the task limits, the listen streams'
//! snapshot, the list of environment variables the deployment files are checked against, and the
//! operator's command that `fleetmcp-ctl` runs (a server binary's `fleet` subcommand reaches it
//! through `fleetmcp::run`).
//!
//! Hidden from the documentation and outside any compatibility promise: anything here may change
//! or go in any release. The one door for such names, so the documented API stays what
//! tests/public_api.rs lists; a name moves out of here only by becoming API on purpose.

pub use crate::config::env::environment_variables;
pub use crate::events::{EventStore, RedisEventStore};
pub use crate::limits::HoldingsSnapshot;
pub use crate::session::{
    Claim, Fence, Held, MemorySessionStore, RedisSessionStore, SessionRecord, SessionStore,
    StoreError,
};
pub use crate::tasks::{
    Executor, RedisTaskStore, TaskLimits, TaskRecord, TaskStatus, TaskStore, TaskStoreError,
};

/// The operator's command (`status`, `drain <machine-id>`; see `src/ops.rs`): runs `args`
/// (without the program name) with the configuration from the environment, prints its result
/// and returns the exit code (0 done, 1 failed, 2 bad usage or configuration).
pub async fn operator_command(args: &[String]) -> i32 {
    crate::ops::main(args).await
}
