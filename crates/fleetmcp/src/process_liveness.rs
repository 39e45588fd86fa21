//! Whether another instance's process is gone: the seam through which work that outlives a
//! request (a background task, an SSE answer kept for resumption) learns that the process
//! doing it will never finish it.
//!
//! The fleet (`fleet/`) fills it in distributed mode (heartbeat and channel subscription,
//! bounded by the takeover grace: `fleet/heartbeat_liveness.rs`); without it (one instance, or
//! Redis without distributed mode) nothing is ever presumed abandoned.

use async_trait::async_trait;

/// Whether the process of an instance that started some work is gone.
#[async_trait]
pub trait ProcessLiveness: Send + Sync + 'static {
    /// True only when `node`'s process that started some work at `since` (Unix ms) is known
    /// to be gone; false when it lives or when that cannot be told (Redis not answering).
    async fn is_gone(&self, node: &str, since: u64) -> bool;
}
