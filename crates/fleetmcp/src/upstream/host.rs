//! What a gateway's upstream needs of the server it runs in, as a narrow trait: what a
//! handler's context needs ([`context::Host`]: the configuration, the meters, the event store)
//! and the [`Upstream`] itself. `App` implements it (`app/hosts.rs`), so that `upstream`
//! imports nothing of `app` (no circle between them).

use std::sync::Arc;

use super::Upstream;
use crate::context;

/// The server a session's upstream serves: `Clone`, for the task that reads the upstream.
pub(crate) trait Host: context::Host + Clone {
    /// The server's upstream, when it is a gateway.
    fn upstream(&self) -> Option<&Arc<dyn Upstream>>;
}
