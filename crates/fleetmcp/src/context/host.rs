//! What a handler's context needs of the server it runs in, as a narrow trait: the
//! configuration, the meters, the event and task stores, a session's standalone stream and the
//! user's state. `App` implements it (`app/hosts.rs`), so that `context`, which `catalog` and
//! `upstream` build on, imports nothing of `app` (no circle between them). What a handler gets
//! of the whole server (`RequestContext::server`) is added to the context by `app` itself.

use std::any::{Any, TypeId};
use std::sync::Arc;

use bytes::Bytes;

use crate::config::Config;
use crate::events::EventStore;
use crate::session::Session;
use crate::tasks::Tasks;
use crate::telemetry::Meters;

/// The server behind a [`RequestContext`](super::RequestContext). `Any`, so that `app` can
/// see the `App` it gave the context again (`App` is the one implementation).
pub(crate) trait Host: Any + Send + Sync {
    fn config(&self) -> &Config;
    fn meters(&self) -> &Meters;
    fn events(&self) -> &Arc<dyn EventStore>;
    fn tasks(&self) -> &Tasks;
    /// Appends `message` to `session`'s standalone stream, off the caller's path.
    fn push_standalone(&self, session: &Session, message: Bytes);
    /// The user's state of the type `id`, as given to the server builder.
    fn state_by_id(&self, id: TypeId) -> Option<Arc<dyn Any + Send + Sync>>;
}
