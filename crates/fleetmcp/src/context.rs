//! What a handler can do besides returning its result: log, report progress, notice that it
//! was cancelled, and ask the client something (sampling, elicitation, roots).
//!
//! Messages a handler sends go out on the stream of the request that runs it (the POST's
//! answer, which becomes an SSE stream the moment the first message is sent), as the
//! specification asks for messages related to a request.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::{ErrorData, encode_notification, encode_request};
use crate::server::{ServerHandle, Shared};
use crate::session::{LogLevel, Session};

/// A message on its way to the client, from a running request.
#[derive(Debug)]
pub(crate) enum Outbound {
    Message(Bytes),
    /// Close the HTTP connection without ending the stream (SSE polling); the client resumes
    /// with `Last-Event-ID`.
    EndConnection,
}

/// Why a request to the client failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientRequestError {
    #[error("the client did not declare the `{0}` capability")]
    NotSupported(&'static str),
    #[error("the client answered with an error: {} ({})", .0.message, .0.code.0)]
    Client(ErrorData),
    #[error("the request was cancelled")]
    Cancelled,
    #[error("the session ended before the client answered")]
    SessionClosed,
    #[error("the client did not answer within {0:?}")]
    Timeout(Duration),
    #[error("this request has no session to ask the client through")]
    NoSession,
}

/// Handed to every tool, resource and prompt handler. Cheap to clone.
#[derive(Clone)]
pub struct RequestContext {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    session: Option<Arc<Session>>,
    outbound: Option<mpsc::UnboundedSender<Outbound>>,
    progress_token: Option<Value>,
    cancel: CancellationToken,
}

/// How long a handler waits for the client to answer a request.
const CLIENT_REPLY_TIMEOUT: Duration = Duration::from_secs(300);

impl RequestContext {
    pub(crate) fn new(
        shared: Arc<Shared>,
        session: Option<Arc<Session>>,
        outbound: Option<mpsc::UnboundedSender<Outbound>>,
        progress_token: Option<Value>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                shared,
                session,
                outbound,
                progress_token,
                cancel,
            }),
        }
    }

    /// The server, for changing the catalog or announcing resource updates.
    pub fn server(&self) -> ServerHandle {
        ServerHandle::new(self.inner.shared.clone())
    }

    /// The session this request belongs to (session-era clients).
    pub fn session(&self) -> Option<&Arc<Session>> {
        self.inner.session.as_ref()
    }

    /// Whether the client declared a capability (`sampling`, `elicitation`, `roots`).
    pub fn client_supports(&self, capability: &str) -> bool {
        self.inner
            .session
            .as_ref()
            .is_some_and(|s| s.client_supports(capability))
    }

    /// Fires when the client cancels the request (`notifications/cancelled`) or the session
    /// ends. A handler that is cancelled is also dropped at its next `.await`.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    pub(crate) fn send(&self, message: Bytes) {
        match &self.inner.outbound {
            Some(tx) if tx.send(Outbound::Message(message.clone())).is_ok() => {}
            _ => {
                // No request stream (a batch, or the request already answered): use the
                // session's standalone stream so the message is not silently lost.
                if let Some(s) = &self.inner.session {
                    crate::server::push_standalone(&self.inner.shared, s, message);
                }
            }
        }
    }

    /// Sends `notifications/message` if the client's log level lets it through.
    pub fn log(&self, level: LogLevel, data: impl Serialize) {
        if let Some(s) = &self.inner.session
            && level < s.log_level()
        {
            return;
        }
        let data = serde_json::to_value(data).unwrap_or(Value::Null);
        self.send(encode_notification(
            "notifications/message",
            &json!({"level": level.as_str(), "data": data}),
        ));
    }

    /// Sends `notifications/progress` when the request carried a `progressToken`.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.inner.progress_token else {
            return;
        };
        let mut params = json!({"progressToken": token, "progress": progress});
        if let Some(t) = total {
            params["total"] = json!(t);
        }
        if let Some(m) = message {
            params["message"] = json!(m);
        }
        self.send(encode_notification("notifications/progress", &params));
    }

    /// Ends the current HTTP connection of this request's SSE stream without ending the
    /// stream: the client reconnects with `Last-Event-ID` after the `retry` delay and
    /// receives the rest (SSE polling, 2025-11-25).
    pub fn end_connection_for_polling(&self) {
        if let Some(tx) = &self.inner.outbound {
            let _ = tx.send(Outbound::EndConnection);
        }
    }

    /// Sends a request to the client and waits for its answer.
    pub async fn request_client(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientRequestError> {
        let session = self
            .inner
            .session
            .as_ref()
            .ok_or(ClientRequestError::NoSession)?;
        if let Some(cap) = capability_for(method)
            && !session.client_supports(cap)
        {
            return Err(ClientRequestError::NotSupported(cap));
        }
        let (id, rx) = session.expect_client_reply();
        self.send(encode_request(&id, method, &params));
        let outcome = tokio::select! {
            reply = rx => match reply {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(ClientRequestError::Client(e)),
                Err(_) => Err(ClientRequestError::SessionClosed),
            },
            _ = self.inner.cancel.cancelled() => Err(ClientRequestError::Cancelled),
            _ = session.closed.cancelled() => Err(ClientRequestError::SessionClosed),
            _ = tokio::time::sleep(CLIENT_REPLY_TIMEOUT) => Err(ClientRequestError::Timeout(CLIENT_REPLY_TIMEOUT)),
        };
        if outcome.is_err() {
            session.forget_client_request(&id);
        }
        outcome
    }

    /// `sampling/createMessage`: asks the client's model for a completion.
    pub async fn create_message(&self, params: Value) -> Result<Value, ClientRequestError> {
        self.request_client("sampling/createMessage", params).await
    }

    /// `elicitation/create`: asks the user for input through the client.
    pub async fn elicit(&self, params: Value) -> Result<Value, ClientRequestError> {
        self.request_client("elicitation/create", params).await
    }

    /// `roots/list`: the client's roots.
    pub async fn list_roots(&self) -> Result<Value, ClientRequestError> {
        self.request_client("roots/list", json!({})).await
    }
}

fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}
