//! `App` as the modules below it in its layer see it: the narrow traits `context` and
//! `upstream` declare ([`context::Host`], [`upstream::Host`]), so that neither imports `app`
//! and the four modules of layer 3 import each other in one direction only. And what a
//! handler's context gets of the `App` behind it, which `context` cannot name: the
//! [`ServerHandle`].

use std::any::{Any, TypeId};
use std::sync::Arc;

use bytes::Bytes;

use super::{App, ServerHandle};
use crate::config::Config;
use crate::context::{self, RequestContext};
use crate::events::EventStore;
use crate::session::Session;
use crate::tasks::Tasks;
use crate::telemetry::Meters;
use crate::upstream::{self, Upstream};

impl context::Host for App {
    fn config(&self) -> &Config {
        App::config(self)
    }
    fn shutdown(&self) -> &tokio_util::sync::CancellationToken {
        &self.phases().shutdown
    }
    fn meters(&self) -> &Meters {
        App::meters(self)
    }
    fn events(&self) -> &Arc<dyn EventStore> {
        App::events(self)
    }
    fn tasks(&self) -> &Tasks {
        App::tasks(self)
    }
    fn push_standalone(&self, session: &Session, message: Bytes) {
        App::push_standalone(self, session, message);
    }
    fn state_by_id(&self, id: TypeId) -> Option<Arc<dyn Any + Send + Sync>> {
        self.inner.state.get(&id).cloned()
    }
}

impl upstream::Host for App {
    fn upstream(&self) -> Option<&Arc<dyn Upstream>> {
        App::upstream(self)
    }
}

impl RequestContext {
    /// The server, for changing the catalog or announcing resource updates.
    pub fn server(&self) -> ServerHandle {
        self.app().handle()
    }

    /// The `App` this request runs in: the [`context::Host`] it was made with.
    pub(crate) fn app(&self) -> &App {
        let host: &dyn Any = self.host();
        match host.downcast_ref::<App>() {
            Some(app) => app,
            // Every context is made with an `App` (dispatch's tasks and the transport's
            // driver make them), the one type that is a `Host`: this is never reached.
            None => unreachable!("a request's context runs in an App"),
        }
    }
}
