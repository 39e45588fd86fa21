//! A request's cancellation token, made when first asked for: most calls finish in their first
//! poll, and neither the token (a child of the server's shutdown token, made and dropped under
//! that token's lock) nor an entry in the session's in-flight table is made for them (issue 40).

use tokio_util::sync::CancellationToken;

use super::{Caller, RequestContext};

impl RequestContext {
    /// Fires when the client cancels the request (`notifications/cancelled`, or closing the
    /// stream in 2026-07-28) or the session ends. A cancelled handler is also dropped at its
    /// next `.await`.
    pub fn cancellation(&self) -> &CancellationToken {
        match self.inner.cancel.get_or_init(|| Some(self.make_token())) {
            Some(token) => token,
            // Asked after the request ended (work the handler spawned): the server's stop
            // still reaches it, as it reached the request's own token.
            None => self
                .inner
                .late
                .get_or_init(|| self.inner.app.shutdown().child_token()),
        }
    }
    /// Whether the request was cancelled already (see [`RequestContext::cancellation`]).
    pub fn is_cancelled(&self) -> bool {
        self.cancellation().is_cancelled()
    }

    /// The request's token, made now: a session's request is entered in its in-flight table
    /// (see `Session::enter_request`), any other's token is a child of the server's.
    fn make_token(&self) -> CancellationToken {
        match (&self.inner.caller, &self.inner.call_key_parts) {
            (Caller::Session(s), Some(parts)) => s.enter_request(&parts.raw_id),
            _ => self.inner.app.shutdown().child_token(),
        }
    }

    /// Whether the request was cancelled, asked without making its token: before the token
    /// is made, only the session's end can have reached it (a `notifications/cancelled` is
    /// kept for it until it is entered, and the server's stop reaches the token made then).
    pub(crate) fn cancelled_yet(&self) -> bool {
        match self.inner.cancel.get() {
            Some(Some(token)) => token.is_cancelled(),
            Some(None) => false,
            None => matches!(&self.inner.caller, Caller::Session(s) if s.is_closed()),
        }
    }

    /// The request's id as received, for a context its driver made.
    pub(crate) fn raw_id(&self) -> Option<&str> {
        self.inner.call_key_parts.as_ref().map(|p| &*p.raw_id)
    }

    /// The driver ends the request: whether its token was made (a session's request was
    /// entered in its table then, and leaves it now). A context asked for its token from now on
    /// gets one of its own (see `late`).
    pub(crate) fn end_token(&self) -> bool {
        self.inner.cancel.get_or_init(|| None).is_some()
    }
}
