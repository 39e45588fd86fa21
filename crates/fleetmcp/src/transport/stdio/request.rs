//! One request of a stdio session, run through the driver: what a line with a request and each
//! request of a batch do alike (`connection.rs` and `batch.rs` both call it, neither the other).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::out::Out;
use crate::app::App;
use crate::context::{Caller, Outbound};
use crate::dispatch::{self, Reply};
use crate::limits::LimitKey;
use crate::session::Session;
use crate::transport::core::Client;
use crate::transport::core::driver::{self, Started};

/// Runs request `id` (`method` with `params`) in `session`: its messages go to `out` as they
/// come, in order; the answer is returned (`None`: cancelled, which nothing answers).
pub(super) async fn run(
    app: &App,
    out: &Out,
    session: Arc<Session>,
    id: &RawValue,
    method: String,
    params: Option<Box<RawValue>>,
) -> Option<Bytes> {
    let client = Client {
        principal: None,
        key: LimitKey::stdio(),
    };
    let caller = Caller::Session(session);
    let started = driver::start(app, caller, client, id, method, params, true).await;
    let reply: Option<Reply> = match started {
        Ok(Started::Plain(reply)) => reply,
        Ok(Started::Streaming(s)) => {
            let emit = |m: Outbound| async move {
                match m {
                    Outbound::Message(b) => out.send(b).await,
                    // Polling is an SSE affair: a pipe has no connection to end.
                    Outbound::EndConnection => true,
                }
            };
            // A client that stopped reading cancels what it can no longer hear.
            let gone = out.gone_token().cancelled_owned();
            s.pump(emit, gone).await.ok().flatten()
        }
        Err(not_run) => Some(Err(not_run.into_error())),
    };
    reply.map(|r| dispatch::encode_reply(id, r))
}
