//! What distributed mode puts in front of every request and on every answer, as transport's
//! [`Gate`]: the relay guard first (a request that says it was relayed runs only once verified),
//! then this instance's name on the answer, refusals included.

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::Request;
use axum::response::Response;

use super::identity::Identity;
use super::relay_guard::Guard;
use crate::transport::Gate;

pub(super) struct FleetGate {
    pub guard: Arc<Guard>,
    /// `None` when the machine id is no valid header value (answers then name no instance).
    pub identity: Option<Identity>,
}

#[async_trait]
impl Gate for FleetGate {
    fn stops(&self, headers: &http::HeaderMap) -> bool {
        self.guard.stops(headers)
    }

    async fn check(&self, req: Request) -> Result<Request, Response> {
        self.guard.check(req).await
    }

    fn mark(&self, opens_stream: bool, res: &mut Response) {
        if let Some(identity) = &self.identity {
            identity.mark(opens_stream, res);
        }
    }
}
