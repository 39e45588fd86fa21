//! What a tool call's return value means, whoever waits for it: the client that called it
//! ([`answer`]: `tools.rs`, and a 2026-07-28 call that escalates to a task) or a task's record
//! ([`outcome`]: `tasks/`). Below both, so that `tools.rs` starts tasks and tasks map their
//! tool's outcome without either importing the other.

use serde::Serialize;
use serde_json::value::RawValue;

use super::{Reply, input_required, reply_of, respond};
use crate::app::App;
use crate::catalog::ToolError;
use crate::catalog::tool::{Output, ToolOutput};
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
pub(super) fn outcome(r: Result<ToolOutput, ToolError>) -> Outcome {
    match r {
        Ok(output) => {
            let mut result = output.into_result();
            // `resultType` is set where the answer is shaped for its era, not by the tool.
            result.result_type = None;
            Outcome::Result(result)
        }
        Err(ToolError::Failed(msg)) => {
            // rmcp's constructor marks the result `complete`, which only 2026-07-28 answers say.
            let mut result = CallToolResult::error(vec![ContentBlock::text(msg)]);
            result.result_type = None;
            Outcome::Result(result)
        }
        Err(ToolError::Protocol(e)) => Outcome::Error(e),
        Err(ToolError::InputRequired) => Outcome::InputRequired,
    }
}

/// The answer to the client that waits for a tool call.
pub(super) fn answer(app: &App, ctx: &RequestContext, r: Result<ToolOutput, ToolError>) -> Reply {
    // A session's structured result is written from its JSON text as it is: the same answer
    // `CallToolResult` would give (without `resultType`, which only 2026-07-28 results carry,
    // decorated by `respond`), without reading that text back into a `Value` (issue 23).
    let r = match r {
        Ok(ToolOutput(Output::Structured(raw))) if !ctx.is_stateless() => {
            return structured_answer(&raw);
        }
        r => r,
    };
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

/// A session's answer to a call whose result is structured: `structuredContent` is the value's
/// JSON text as it was written, and the text content the same text, for clients that read no
/// `structuredContent`.
fn structured_answer(raw: &RawValue) -> Reply {
    /// A `CallToolResult` of one text block and structured content, as rmcp writes it.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Written<'a> {
        content: [Text<'a>; 1],
        structured_content: &'a RawValue,
        is_error: bool,
    }
    #[derive(Serialize)]
    struct Text<'a> {
        r#type: &'static str,
        text: &'a str,
    }
    reply_of(&Written {
        content: [Text {
            r#type: "text",
            text: raw.get(),
        }],
        structured_content: raw,
        is_error: false,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn a_failed_tool_is_a_result_without_the_stateless_eras_result_type() {
        let Outcome::Result(result) = outcome(Err(ToolError::failed("on purpose"))) else {
            panic!("a failed tool is a result");
        };
        let v = serde_json::to_value(&result).unwrap();
        assert_eq!(v["isError"], json!(true));
        assert_eq!(v["content"][0]["text"], json!("on purpose"));
        assert!(v.get("resultType").is_none(), "{v}");
    }

    /// The answer written from the JSON text is the one the `CallToolResult` gives, byte for
    /// byte, for the same text.
    #[test]
    fn a_structured_answer_is_the_call_tool_results() {
        let value = json!({"tickets": [{"id": 1, "title": "a \"quoted\" title\nline"}], "n": null});
        let raw = serde_json::value::to_raw_value(&value).expect("JSON");
        let written = structured_answer(&raw).expect("an answer");
        let mut result = ToolOutput(Output::Structured(raw)).into_result();
        result.result_type = None;
        let expected = serde_json::to_string(&result).expect("JSON");
        assert_eq!(written.get(), expected);
        let back: Value = serde_json::from_str(written.get()).expect("JSON");
        assert_eq!(back["structuredContent"], value);
        assert_eq!(back["content"][0]["text"], value.to_string());
    }
}
