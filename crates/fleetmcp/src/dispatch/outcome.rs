//! What a tool call's return value means, whoever waits for it: the client that called it
//! ([`answer`]: `tools.rs`, and a 2026-07-28 call that escalates to a task) or a task's record
//! ([`outcome`]: `tasks/`). Below both, so that `tools.rs` starts tasks and tasks map their
//! tool's outcome without either importing the other.

use super::{Reply, input_required, respond};
use crate::app::App;
use crate::catalog::ToolError;
use crate::context::{Caller, RequestContext};
use crate::protocol::ErrorData;
use crate::protocol::errors;
use crate::protocol::model::{CallToolResult, ContentBlock};

/// What a tool call's outcome means, whoever waits for it (the caller, or a task's record).
pub(super) enum Outcome {
    /// A result; an error the tool reported (`ToolError::Failed`) is a result with
    /// `isError: true`, which the model can read and act on.
    Result(CallToolResult),
    /// A protocol error (bad arguments, and so on).
    Error(ErrorData),
    /// The handler needs answers from the client first.
    InputRequired,
}

/// The one mapping from a tool's return value to what it means.
pub(super) fn outcome(r: Result<CallToolResult, ToolError>) -> Outcome {
    match r {
        Ok(mut result) => {
            // `resultType` is set where the answer is shaped for its era, not by the tool.
            result.result_type = None;
            Outcome::Result(result)
        }
        Err(ToolError::Failed(msg)) => {
            Outcome::Result(CallToolResult::error(vec![ContentBlock::text(msg)]))
        }
        Err(ToolError::Protocol(e)) => Outcome::Error(e),
        Err(ToolError::InputRequired) => Outcome::InputRequired,
    }
}

/// The answer to the client that waits for a tool call.
pub(super) fn answer(
    app: &App,
    ctx: &RequestContext,
    r: Result<CallToolResult, ToolError>,
) -> Reply {
    match outcome(r) {
        Outcome::Result(result) => respond(app, ctx, &result, None),
        Outcome::Error(e) => Err(e),
        Outcome::InputRequired => match ctx.caller() {
            Caller::Stateless(round) => input_required(app, round),
            _ => Err(errors::internal(
                "input required outside a multi-round request",
            )),
        },
    }
}
