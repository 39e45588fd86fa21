//! What a stdio connection does with each message: `initialize` opens its one session (with
//! `initialize::open`, as on HTTP), every later request runs through the driver in that
//! session, notifications and the client's answers go to dispatch as a POST's do, and the
//! session's standalone stream (list changes, resource updates, pages) is forwarded to the
//! output.

use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::batch;
use super::out::Out;
use super::request::run;
use crate::app::App;
use crate::dispatch;
use crate::events::{Cursor, STANDALONE_STREAM};
use crate::limits::LimitKey;
use crate::protocol::{ErrorData, Incoming, Message, encode_error, encode_result, errors};
use crate::session::Session;
use crate::transport::core::driver;
use crate::transport::core::initialize;

/// One line of input, read: a message, or a batch's items.
pub(super) enum Item {
    Message(Message),
    Batch(Vec<Box<RawValue>>),
}

/// One stdio connection: its session once initialized, and the requests running in it.
pub(super) struct Connection {
    app: App,
    out: Out,
    session: Option<Arc<Session>>,
    /// Every request still running (each its own task, so the input is read on meanwhile: the
    /// client's answers to our requests and its cancellations arrive while a tool runs).
    running: TaskTracker,
    /// Places in flight (`limits.max_inflight_per_session`): a request holds one until its
    /// answer is queued on the output, so requests whose answers are not taken hold them all
    /// and the reader, waiting for one, stops reading.
    places: Arc<Semaphore>,
    max_places: usize,
    /// The forwarder of the session's standalone stream, and what stops it.
    standalone: Option<(JoinHandle<()>, CancellationToken)>,
}

impl Connection {
    pub fn new(app: App, out: Out) -> Self {
        let max_places = app.config().limits.max_inflight_per_session.max(1);
        Self {
            app,
            out,
            session: None,
            running: TaskTracker::new(),
            places: Arc::new(Semaphore::new(max_places)),
            max_places,
            standalone: None,
        }
    }

    pub fn app(&self) -> &App {
        &self.app
    }

    pub fn session(&self) -> Option<&Arc<Session>> {
        self.session.as_ref()
    }

    pub fn running(&self) -> &TaskTracker {
        &self.running
    }

    /// Answers an unreadable message: `id` when one could be read, else `null`.
    pub async fn refuse(&self, id: Option<&RawValue>, error: &ErrorData) {
        self.out.send(encode_error(id, error)).await;
    }

    /// Reads one line: `None` when it is blank, or refused (and answered).
    pub async fn parse(&self, line: &[u8]) -> Option<Item> {
        let first = line.iter().find(|b| !b.is_ascii_whitespace())?;
        if *first == b'[' {
            // `initialize` must not be part of a batch, so none can come first.
            let Some(session) = &self.session else {
                let e = errors::invalid_request(
                    "Invalid Request: the session is not initialized; send initialize first, alone",
                );
                self.refuse(None, &e).await;
                return None;
            };
            return match batch::parse(&self.app, session, line) {
                Ok(items) => Some(Item::Batch(items)),
                Err(e) => {
                    self.refuse(None, &e).await;
                    None
                }
            };
        }
        let refusal = match serde_json::from_slice::<Incoming>(line) {
            Ok(m) => match m.classify() {
                Ok(m) => return Some(Item::Message(m)),
                Err((id, e)) => (id, e),
            },
            Err(e) => (None, errors::parse_error(e)),
        };
        self.refuse(refusal.0.as_deref(), &refusal.1).await;
        None
    }

    /// The places in flight `item` runs in: one per request (a batch's items all count, as
    /// they run at once), none for the rest and before `initialize` (answered in turn).
    pub fn places_for(&self, item: &Item) -> u32 {
        let n = match item {
            _ if self.session.is_none() => 0,
            Item::Message(Message::Request { .. }) => 1,
            Item::Message(_) => 0,
            Item::Batch(items) => items.len().min(self.max_places),
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Waits for `n` places in flight.
    pub async fn place(&self, n: u32) -> Option<OwnedSemaphorePermit> {
        self.places.clone().acquire_many_owned(n).await.ok()
    }

    /// Handles one item, in `place` ([`Connection::places_for`]).
    pub async fn take(&mut self, item: Item, place: Option<OwnedSemaphorePermit>) {
        let message = match item {
            Item::Message(message) => message,
            Item::Batch(items) => {
                let Some(session) = self.session.clone() else {
                    return;
                };
                let (app, out) = (self.app.clone(), self.out.clone());
                self.running.spawn(async move {
                    batch::serve(app, out, session, items).await;
                    drop(place);
                });
                return;
            }
        };
        let Some(session) = self.session.clone() else {
            return self.before_initialize(message).await;
        };
        match message {
            Message::Request { id, method, params } => {
                let (app, out) = (self.app.clone(), self.out.clone());
                self.running.spawn(async move {
                    if let Some(answer) = run(&app, &out, session, &id, method, params).await {
                        out.send(answer).await;
                    }
                    // Given back once the answer is queued, not before.
                    drop(place);
                });
            }
            Message::Notification { method, params } => {
                dispatch::notification(&session, &method, params.as_deref())
            }
            Message::Response { id, outcome } => dispatch::client_response(&session, &id, outcome),
        }
    }

    /// A message before the session exists: `initialize` opens it, `ping` is answered (the
    /// one request a client may send before), any other request is refused, and notifications
    /// and answers have nothing to go to.
    async fn before_initialize(&mut self, message: Message) {
        match message {
            Message::Request { id, method, params } if method == "initialize" => {
                self.initialize(&id, params.as_deref()).await
            }
            Message::Request { id, method, .. } if method == "ping" => {
                self.out
                    .send(encode_result(&id, &serde_json::json!({})))
                    .await;
            }
            Message::Request { id, .. } => {
                let e = errors::invalid_request(
                    "Invalid Request: the session is not initialized; send initialize first",
                );
                self.refuse(Some(&id), &e).await
            }
            Message::Notification { method, .. } => {
                tracing::debug!(
                    method,
                    "stdio: a notification before initialize was ignored"
                )
            }
            Message::Response { .. } => {
                tracing::debug!("stdio: an answer before initialize was ignored")
            }
        }
    }

    /// Opens the connection's session for `initialize` request `id`, as a POST would, under an
    /// id that never leaves the process (nothing on the wire names a session), and starts
    /// forwarding its standalone stream once the result is queued, so nothing reaches the
    /// client before the result.
    async fn initialize(&mut self, id: &RawValue, params: Option<&RawValue>) {
        let key = LimitKey::stdio();
        if let Err(refused) = driver::admit_initialize(&self.app, &key).await {
            return self.refuse(Some(id), &refused.error).await;
        }
        let sid = format!("stdio-{}", uuid::Uuid::new_v4());
        match initialize::open(&self.app, Some(&sid), params, None, &key).await {
            Ok((session, result)) => {
                self.out.send(encode_result(id, &result)).await;
                tracing::info!(
                    version = %session.version,
                    client = %session.client_info().get("name").and_then(|n| n.as_str()).unwrap_or("?"),
                    "stdio: session initialized"
                );
                self.standalone = Some(forward_standalone(&self.app, &session, &self.out));
                self.session = Some(session);
            }
            Err(refused) => self.refuse(Some(id), &refused.error).await,
        }
    }

    /// Stops forwarding the standalone stream (what was appended before is sent first).
    pub async fn stop_standalone(&mut self) {
        if let Some((task, stop)) = self.standalone.take() {
            stop.cancel();
            let _ = task.await;
        }
    }
}

/// Forwards what the session's standalone stream carries (a GET stream's messages on HTTP) to
/// the output, until `stop` fires.
fn forward_standalone(
    app: &App,
    session: &Session,
    out: &Out,
) -> (JoinHandle<()>, CancellationToken) {
    let stop = CancellationToken::new();
    // From the start: nothing was appended before the session existed, and nothing appended
    // since is missed.
    let mut events = app
        .events()
        .tail(&session.id, STANDALONE_STREAM, Cursor::Start, stop.clone());
    let out = out.clone();
    let task = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            if !ev.data.is_empty() && !out.send(ev.data).await {
                return;
            }
        }
    });
    (task, stop)
}
