use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use fleetmcp::model::{PromptMessage, ResourceContents, Role};
use fleetmcp::{
    BuildError, Config, Elicited, ResourceError, Server, Structured, ToolError, prompt, resource,
    template, tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The notes by id: the server's state, which every declaration that names it with
/// `.state::<Notes>()` gets as an `Arc<Notes>`.
#[derive(Default)]
struct Notes(Mutex<BTreeMap<u64, String>>);

impl Notes {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, String>> {
        // A handler that panicked while holding the lock left the map whole: go on with it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A tool's arguments: its `inputSchema` is this type's schema, a field's doc comment its
/// description; arguments that do not fit are refused before the handler runs.
#[derive(Deserialize, JsonSchema)]
struct Add {
    /// The note's text.
    text: String,
}

/// A structured result: its schema is the tool's `outputSchema`.
#[derive(Serialize, JsonSchema)]
struct Added {
    id: u64,
}

#[derive(Deserialize, JsonSchema)]
struct Search {
    /// Text the notes must contain.
    query: String,
}

#[derive(Deserialize, JsonSchema)]
struct Delete {
    /// The note's id.
    id: u64,
}

/// A template's variables (`notes://{id}`), typed.
#[derive(Deserialize, JsonSchema)]
struct NoteId {
    id: u64,
}

/// A form the user fills in (elicitation): a flat struct of strings, numbers, booleans, enums.
#[derive(Deserialize, JsonSchema)]
struct Reason {
    /// Why the note goes.
    reason: String,
}

/// A prompt's arguments (MCP sends them as strings; an `Option` is optional).
#[derive(Deserialize, JsonSchema)]
struct Summarize {
    /// What the summary should dwell on.
    focus: Option<String>,
}

/// Declares the server: `main` serves it, and a test can call it in process.
fn notes_server(config: Config) -> Result<Server, BuildError> {
    let add = tool("add_note")
        .description("Adds a note and returns its id")
        .state::<Notes>()
        .handler(|args: Add, _ctx, notes| async move {
            let mut notes = notes.lock();
            let id = notes.keys().next_back().map_or(1, |last| last + 1);
            notes.insert(id, args.text);
            Ok(Structured(Added { id }))
        });
    let search = tool("search_notes")
        .description("Lists the notes that contain the query")
        .state::<Notes>()
        .handler(|args: Search, ctx, notes| async move {
            let notes = notes.lock();
            let mut found = Vec::new();
            for (done, (id, text)) in notes.iter().enumerate() {
                // Sent to the client when it asked for progress; never waits.
                ctx.progress(done as f64 + 1.0, Some(notes.len() as f64), None);
                if text.contains(&args.query) {
                    found.push(format!("{id}: {text}"));
                }
            }
            Ok(found.join("\n"))
        });
    let delete = tool("delete_note")
        .description("Deletes a note once the user confirmed")
        .state::<Notes>()
        .handler(|args: Delete, ctx, notes| async move {
            // Asks through the client. A client that did not declare `elicitation` is not
            // asked: the call fails. The session era waits for the answer at most 300 s; in
            // 2026-07-28 the handler runs again from the top with each answer, so the effect
            // comes after the last question.
            if !ctx.confirm(format!("Delete note {}?", args.id)).await? {
                return Ok("kept".to_string());
            }
            let reason = match ctx.elicit_form::<Reason>("Why does it go?").await? {
                Elicited::Accepted(r) => r.reason,
                Elicited::Declined | Elicited::Cancelled => "no reason given".to_string(),
            };
            match notes.lock().remove(&args.id) {
                Some(_) => Ok(format!("deleted note {}: {reason}", args.id)),
                // A result with `isError: true`, for the model to read.
                None => Err(ToolError::failed(format!("there is no note {}", args.id))),
            }
        });
    let note = template("notes://{id}", "note")
        .description("One note's text")
        .mime_type("text/plain")
        .state::<Notes>()
        .complete("id", |partial, _given, _ctx, notes| {
            let ids = notes.lock().keys().map(u64::to_string).collect::<Vec<_>>();
            ids.into_iter()
                .filter(|id| id.starts_with(partial))
                .collect()
        })
        // The variables as a `NoteId` (`read` gives them as strings): `notes://x` is not found.
        .read_as(|uri, note: NoteId, _ctx, notes| async move {
            let text = notes.lock().get(&note.id).cloned();
            // `NotFound` is the protocol's "resource not found".
            let text = text.ok_or_else(|| ResourceError::NotFound(uri.clone()))?;
            Ok(vec![ResourceContents::text(text, uri)])
        });
    let about = resource("about://notes", "about")
        .mime_type("text/markdown")
        .read(|uri, _ctx| async move {
            let text = "# Notes\nAdd, search and delete notes; read one at `notes://{id}`.";
            Ok(vec![ResourceContents::text(text, uri)])
        });
    let summarize = prompt("summarize")
        .description("Asks the model to summarize the notes")
        .state::<Notes>()
        .get(|args: Summarize, _ctx, notes| async move {
            let all = notes
                .lock()
                .values()
                .cloned()
                .collect::<Vec<_>>()
                .join("\n");
            let focus = args
                .focus
                .map(|f| format!(" Dwell on {f}."))
                .unwrap_or_default();
            let text = format!("Summarize these notes.{focus}\n\n{all}");
            Ok(vec![PromptMessage::new_text(Role::User, text)])
        });
    Server::builder("notes", "1.0.0")
        .state(Notes::default())
        .tool(add)
        .tool(search)
        .tool(delete)
        .template(note)
        .resource(about)
        .prompt(summarize)
        .config(config)
        .try_build()
}

#[tokio::main]
async fn main() {
    // Logs, the configuration from the environment, serving until SIGTERM or Ctrl-C.
    fleetmcp::run(|config| async move { Ok(notes_server(config)?) }).await
}
