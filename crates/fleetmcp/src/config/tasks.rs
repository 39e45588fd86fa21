//! `[tasks]`: how long background task records live and how many and how large they may be,
//! in all, per session and per caller. The bounds nest (a record inside a session's share
//! inside the total), and the check here refuses any nesting under which a finished task
//! could never be stored.

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid_value};

/// Background tasks (the 2026-07-28 tasks extension and 2025-11-25 experimental tasks): how
/// long their records are kept, and how many and how large they may be. Working tasks count
/// against the bounds but are never evicted; finished ones are, oldest first, when a new task
/// needs room. A new task that finds no room answers a JSON-RPC error.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskConfig {
    /// How long a task's record stays readable after it was created (`ttlMs`).
    pub ttl_ms: u64,
    /// Most task records kept at once, working or finished.
    pub max_tasks: usize,
    /// Most bytes of task records kept at once (records as serialised).
    pub max_bytes: usize,
    /// Most task records one session keeps (2025-11-25 tasks belong to their session).
    pub max_tasks_per_owner: usize,
    /// Most bytes of task records one session keeps.
    pub max_bytes_per_owner: usize,
    /// Largest record one task may leave; a larger result fails the task with an error that
    /// names this limit instead of being stored.
    pub max_result_bytes: usize,
    /// `FLEETMCP_MAX_TASKS_PER_CALLER`: most task records one caller (its limit key: the
    /// principal with authorization on, else the client's address) keeps, so that one client cannot fill the table for
    /// everyone else (above `max_tasks` it never binds).
    pub max_tasks_per_caller: usize,
    /// `FLEETMCP_MAX_TASK_BYTES_PER_CALLER`: most bytes of task records (plus the arguments its
    /// running handlers hold) one caller keeps (above `max_bytes` it never binds).
    pub max_bytes_per_caller: usize,
}

impl Default for TaskConfig {
    fn default() -> Self {
        Self {
            ttl_ms: 3_600_000,
            max_tasks: 1000,
            max_bytes: 128 * 1024 * 1024,
            max_tasks_per_owner: 100,
            max_bytes_per_owner: 32 * 1024 * 1024,
            max_result_bytes: 8 * 1024 * 1024,
            max_tasks_per_caller: 100,
            max_bytes_per_caller: 32 * 1024 * 1024,
        }
    }
}

impl TaskConfig {
    /// Refuses bounds that do not nest.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.ttl_ms < 1000 {
            return invalid_value(
                "tasks.ttl_ms",
                self.ttl_ms.to_string(),
                "must be at least 1000",
            );
        }
        if self.max_tasks == 0
            || self.max_tasks_per_owner == 0
            || self.max_tasks_per_owner > self.max_tasks
        {
            return invalid_value(
                "tasks.max_tasks_per_owner",
                self.max_tasks_per_owner.to_string(),
                "must be at least 1 and at most tasks.max_tasks",
            );
        }
        // A per-caller bound above the total never binds (the total does, and is named): a server
        // that lowers `max_tasks` or `max_bytes` need not lower the per-caller defaults too.
        if self.max_tasks_per_caller == 0 {
            return invalid_value(
                "tasks.max_tasks_per_caller",
                self.max_tasks_per_caller.to_string(),
                "must be at least 1",
            );
        }
        // A record must fit wherever it is kept, or a finished task could never be stored.
        if self.max_result_bytes < 1024
            || self.max_result_bytes > self.max_bytes_per_owner
            || self.max_bytes_per_owner > self.max_bytes
            || self.max_result_bytes > self.max_bytes_per_caller
        {
            return invalid_value(
                "tasks.max_result_bytes",
                self.max_result_bytes.to_string(),
                "must be at least 1024, and max_result_bytes <= max_bytes_per_owner (and max_bytes_per_caller) <= max_bytes",
            );
        }
        Ok(())
    }
}
