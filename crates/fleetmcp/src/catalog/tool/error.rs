//! What a tool call's failure is ([`ToolError`]), and what any error raised with `?` in a
//! handler means to the client ([`classify`]), shared by tools, resources and prompts so `?`
//! means the same in all three.

use crate::context::ClientRequestError;
use crate::protocol::ErrorData;

/// Why a tool call failed.
///
/// `?` converts any error into it: a [`ClientRequestError`] keeps its meaning (see
/// [`ToolError::InputRequired`]), an [`ErrorData`] becomes [`ToolError::Protocol`], and every
/// other error becomes [`ToolError::Failed`] with the error's message.
///
/// It deliberately does not implement [`std::error::Error`]: that would make the blanket
/// `From<E: Error>` conversion overlap with `From<ToolError> for ToolError`.
#[derive(Debug)]
pub enum ToolError {
    /// The tool ran and failed: the client gets a result with `isError: true`, which the model
    /// can read and act on.
    Failed(String),
    /// A protocol error (`-32602` for bad arguments, and so on).
    Protocol(ErrorData),
    /// The handler needs answers from the client first (2026-07-28: the result becomes an
    /// `InputRequiredResult`). Produced by `?` on
    /// [`RequestContext`](crate::context::RequestContext)'s client requests.
    InputRequired,
}

impl ToolError {
    /// A [`ToolError::Failed`] with this message.
    pub fn failed(msg: impl Into<String>) -> Self {
        Self::Failed(msg.into())
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Failed(msg) => f.write_str(msg),
            Self::Protocol(e) => f.write_str(&e.message),
            Self::InputRequired => f.write_str("input required from the client"),
        }
    }
}

from_any_error!(ToolError);

/// What an error raised with `?` in a handler means to the client; shared by the conversions
/// into [`ToolError`], [`crate::PromptError`] and [`crate::ResourceError`].
pub(in crate::catalog) enum Classified {
    InputRequired,
    Protocol(ErrorData),
    Failed(String),
}

/// Sorts an arbitrary error. The blanket `From<E>` impls cannot have a second, more specific
/// impl for [`ClientRequestError`] beside them (they would overlap), so the specific errors are
/// recognised here at run time by downcasting.
pub(in crate::catalog) fn classify<E>(e: E) -> Classified
where
    E: std::error::Error + Send + Sync + 'static,
{
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    let boxed = match boxed.downcast::<ClientRequestError>() {
        Ok(e) => {
            return match *e {
                ClientRequestError::InputRequired => Classified::InputRequired,
                ClientRequestError::InvalidInput(e) | ClientRequestError::MissingCapability(e) => {
                    Classified::Protocol(e)
                }
                // The server's mistake, not the tool's outcome for the model to read.
                ClientRequestError::InvalidForm(why) => {
                    Classified::Protocol(crate::protocol::errors::internal(why))
                }
                other => Classified::Failed(other.to_string()),
            };
        }
        Err(other) => other,
    };
    // An `ErrorData` is already a protocol error with its code: keep it rather than flattening
    // it into an `isError` result.
    match boxed.downcast::<ErrorData>() {
        Ok(e) => Classified::Protocol(*e),
        Err(other) => Classified::Failed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn raise<E: std::error::Error + Send + Sync + 'static>(e: E) -> Result<(), ToolError> {
        Err::<(), E>(e)?;
        Ok(())
    }

    #[test]
    fn question_mark_turns_any_error_into_a_failure_the_model_reads() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file: notes.txt");
        assert!(matches!(raise(io), Err(ToolError::Failed(m)) if m == "no such file: notes.txt"));
        let Err(json) = serde_json::from_str::<Value>("{") else {
            panic!("`{{` is not JSON");
        };
        let msg = json.to_string();
        assert!(matches!(raise(json), Err(ToolError::Failed(m)) if m == msg));
    }

    #[test]
    fn question_mark_keeps_the_meaning_of_client_request_errors() {
        assert!(matches!(
            raise(ClientRequestError::InputRequired),
            Err(ToolError::InputRequired)
        ));
        let bad = crate::protocol::errors::invalid_params("no such answer");
        assert!(matches!(
            raise(ClientRequestError::InvalidInput(bad)),
            Err(ToolError::Protocol(e)) if e.code.0 == -32602 && e.message == "no such answer"
        ));
        assert!(matches!(
            raise(ClientRequestError::Cancelled),
            Err(ToolError::Failed(m)) if m == "the request was cancelled"
        ));
        let internal = crate::protocol::errors::internal("store down");
        assert!(matches!(
            raise(internal),
            Err(ToolError::Protocol(e)) if e.code.0 == -32603
        ));
    }
}
