//! examples/notes on the official Rust SDK (rmcp 3.11), for the weight comparison of
//! docs/BENCHMARKS.md: the same tools (add with structured output, search with progress, delete
//! after an elicited confirmation), the template `notes://{id}` with completion, a static
//! resource and a prompt; Streamable HTTP on 127.0.0.1:3000/mcp, or stdio with
//! `FLEETMCP_TRANSPORT=stdio`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rmcp::handler::server::router::{prompt::PromptRouter, tool::ToolRouter};
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{
    ErrorData, Peer, RoleServer, ServerHandler, ServiceExt, prompt, prompt_handler, prompt_router,
    tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone)]
struct Notes {
    notes: Arc<Mutex<BTreeMap<u64, String>>>,
    tool_router: ToolRouter<Self>,
    prompt_router: PromptRouter<Self>,
}

#[derive(Deserialize, JsonSchema)]
struct Add {
    /// The note's text.
    text: String,
}

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

#[derive(Serialize, Deserialize, JsonSchema)]
struct Confirm {
    /// Delete the note?
    confirm: bool,
}
rmcp::elicit_safe!(Confirm);

#[derive(Serialize, Deserialize, JsonSchema)]
struct Reason {
    /// Why the note goes.
    reason: String,
}
rmcp::elicit_safe!(Reason);

#[derive(Deserialize, JsonSchema)]
struct Summarize {
    /// What the summary should dwell on.
    focus: Option<String>,
}

impl Notes {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, String>> {
        self.notes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[tool_router]
impl Notes {
    fn new() -> Self {
        Self {
            notes: Arc::default(),
            tool_router: Self::tool_router(),
            prompt_router: Self::prompt_router(),
        }
    }

    #[tool(description = "Adds a note and returns its id")]
    fn add_note(&self, Parameters(args): Parameters<Add>) -> Json<Added> {
        let mut notes = self.lock();
        let id = notes.keys().next_back().map_or(1, |last| last + 1);
        notes.insert(id, args.text);
        Json(Added { id })
    }

    #[tool(description = "Lists the notes that contain the query")]
    async fn search_notes(
        &self,
        Parameters(args): Parameters<Search>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
    ) -> String {
        let notes = self.lock().clone();
        let mut found = Vec::new();
        for (done, (id, text)) in notes.iter().enumerate() {
            if let Some(token) = meta.get_progress_token() {
                let step = ProgressNotificationParam::new(token, done as f64 + 1.0)
                    .with_total(notes.len() as f64);
                let _ = client.notify_progress(step).await;
            }
            if text.contains(&args.query) {
                found.push(format!("{id}: {text}"));
            }
        }
        found.join("\n")
    }

    #[tool(description = "Deletes a note once the user confirmed")]
    async fn delete_note(
        &self,
        Parameters(args): Parameters<Delete>,
        client: Peer<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let asked = client.elicit::<Confirm>(format!("Delete note {}?", args.id));
        let confirmed = asked
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        if !confirmed.is_some_and(|c| c.confirm) {
            return Ok(CallToolResult::success(vec![ContentBlock::text("kept")]));
        }
        let reason = match client.elicit::<Reason>("Why does it go?").await {
            Ok(Some(r)) => r.reason,
            _ => "no reason given".to_string(),
        };
        Ok(match self.lock().remove(&args.id) {
            Some(_) => CallToolResult::success(vec![ContentBlock::text(format!(
                "deleted note {}: {reason}",
                args.id
            ))]),
            None => CallToolResult::error(vec![ContentBlock::text(format!(
                "there is no note {}",
                args.id
            ))]),
        })
    }
}

#[prompt_router]
impl Notes {
    #[prompt(description = "Asks the model to summarize the notes")]
    async fn summarize(&self, Parameters(args): Parameters<Summarize>) -> Vec<PromptMessage> {
        let all = self.lock().values().cloned().collect::<Vec<_>>().join("\n");
        let focus = args
            .focus
            .map(|f| format!(" Dwell on {f}."))
            .unwrap_or_default();
        let text = format!("Summarize these notes.{focus}\n\n{all}");
        vec![PromptMessage::new_text(Role::User, text)]
    }
}

#[tool_handler(router = self.tool_router)]
#[prompt_handler(router = self.prompt_router)]
impl ServerHandler for Notes {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_prompts()
            .enable_resources()
            .enable_completions()
            .build();
        ServerConfig::new(capabilities)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let about = Resource::new("about://notes", "about").with_mime_type("text/markdown");
        Ok(ListResourcesResult::with_all_items(vec![about]))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let note = ResourceTemplate::new("notes://{id}", "note")
            .with_description("One note's text")
            .with_mime_type("text/plain");
        Ok(ListResourceTemplatesResult::with_all_items(vec![note]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let text = if uri == "about://notes" {
            Some("# Notes\nAdd, search and delete notes; read one at `notes://{id}`.".to_string())
        } else {
            let id = uri.strip_prefix("notes://").and_then(|id| id.parse().ok());
            id.and_then(|id: u64| self.lock().get(&id).cloned())
        };
        let text = text.ok_or_else(|| ErrorData::resource_not_found(uri.clone(), None))?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri)]).into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let partial = &request.argument.value;
        let ids: Vec<String> = self.lock().keys().map(u64::to_string).collect();
        let ids = ids
            .into_iter()
            .filter(|id| id.starts_with(partial.as_str()));
        let info =
            CompletionInfo::new(ids.collect()).map_err(|e| ErrorData::invalid_params(e, None))?;
        Ok(CompleteResult::new(info))
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    if std::env::var("FLEETMCP_TRANSPORT").is_ok_and(|t| t == "stdio") {
        let running = Notes::new()
            .serve(rmcp::transport::stdio())
            .await
            .map_err(std::io::Error::other)?;
        running.waiting().await.map_err(std::io::Error::other)?;
        return Ok(());
    }
    let service: StreamableHttpService<Notes, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(Notes::new()), Default::default(), Default::default());
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
