//! What a handler's context needs of the server it runs in, as a narrow trait: the
//! configuration, the meters, the event and task stores, a session's standalone stream and the
//! user's state. `App` implements it (`app/hosts.rs`), so that `context`, which `catalog` and
//! `upstream` build on, imports nothing of `app` (no circle between them). What a handler gets
//! of the whole server (`RequestContext::server`) is added to the context by `app` itself;
//! what it gets of the host through this trait is here.

use std::any::{Any, TypeId};
use std::sync::Arc;

use bytes::Bytes;

use super::RequestContext;
use crate::config::Config;
use crate::events::EventStore;
use crate::protocol::{ErrorData, errors};
use crate::session::Session;
use crate::tasks::Tasks;
use crate::telemetry::Meters;

/// The server behind a [`RequestContext`]. `Any`, so that `app` can
/// see the `App` it gave the context again (`App` is the one implementation).
pub(crate) trait Host: Any + Send + Sync {
    fn config(&self) -> &Config;
    /// Fires when the server stops (its grace period over): the parent of a request's token.
    fn shutdown(&self) -> &tokio_util::sync::CancellationToken;
    fn meters(&self) -> &Meters;
    fn events(&self) -> &Arc<dyn EventStore>;
    fn tasks(&self) -> &Tasks;
    /// Appends `message` to `session`'s standalone stream, off the caller's path.
    fn push_standalone(&self, session: &Session, message: Bytes);
    /// The user's state of the type `id`, as given to the server builder.
    fn state_by_id(&self, id: TypeId) -> Option<Arc<dyn Any + Send + Sync>>;
}

impl RequestContext {
    /// The value of type `T` given to the server with
    /// [`ServerBuilder::state`](crate::ServerBuilder::state). Handlers do not call this: a
    /// declaration names its state (`tool("x").state::<T>()`) and its handler gets the value,
    /// checked when the server is built; an error here means a declaration skipped that check.
    pub(crate) fn state<T: Send + Sync + 'static>(&self) -> Result<Arc<T>, ErrorData> {
        let state = self.inner.app.state_by_id(TypeId::of::<T>());
        state.and_then(|v| v.downcast::<T>().ok()).ok_or_else(|| {
            errors::internal(format!(
                "the server was built without state of type {}",
                std::any::type_name::<T>()
            ))
        })
    }

    /// The server this request runs in (`app` sees its `App` in it: `app/hosts.rs`).
    pub(crate) fn host(&self) -> &dyn Host {
        &self.inner.app
    }
}
