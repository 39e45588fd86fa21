//! help-desk: a small ticketing app on fleetmcp. Tickets live in Redis when the configuration
//! names one (every instance of a fleet shows the same desk), else in this process's memory.
//!
//! `cargo run -p help-desk` serves it on http://127.0.0.1:3000/mcp (sessions in memory, no
//! Redis). Settings come from the environment (`PORT`, `MCP_SESSION_SECRET`, ...) and from the
//! TOML file named by `FLEETMCP_CONFIG`.

mod store;
mod ticket;

use std::sync::Arc;

use fleetmcp::model::{PromptMessage, ResourceContents, Role, ToolAnnotations};
use fleetmcp::redis_conn::RedisConn;
use fleetmcp::{
    Config, PromptError, ResourceError, Server, Structured, ToolError, prompt, resource, template,
    tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use store::{Desk, Once, memory::MemoryStore, redis::RedisStore};
use ticket::{NewTicket, Priority, Status, Ticket};

/// Arguments of `open_ticket`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct OpenTicket {
    /// A one-line summary of the problem.
    title: String,
    /// Details, steps to reproduce.
    description: Option<String>,
    #[serde(default)]
    priority: Priority,
}

/// Arguments of `find_tickets`.
#[derive(Deserialize, JsonSchema)]
struct FindTickets {
    /// Words to look for in titles and descriptions (case-insensitive).
    query: Option<String>,
    status: Option<Status>,
}

#[derive(Serialize, JsonSchema)]
struct TicketList {
    tickets: Vec<Ticket>,
}

/// Arguments of `page_session`.
#[derive(Deserialize, JsonSchema)]
struct PageSession {
    /// The `Mcp-Session-Id` of the session to page.
    session_id: String,
    /// What to tell it.
    message: String,
}

/// What became of a page.
#[derive(Serialize, JsonSchema)]
struct Paged {
    /// Whether the session's holder took the message (it reaches the session's stream).
    delivered: bool,
}

/// Arguments of `close_ticket`.
#[derive(Deserialize, JsonSchema)]
struct CloseTicket {
    id: u64,
    /// How the problem was solved.
    resolution: String,
}

/// Arguments of `stamp`.
#[derive(Deserialize, JsonSchema)]
struct Stamp {
    /// What to append to the effects file (one line).
    key: String,
    /// How long to wait after the effect (and the progress step) before answering, at most
    /// 5000: a window in which a fault can break the answer's stream.
    #[serde(default)]
    delay_ms: u64,
}

/// What `stamp` did.
#[derive(Serialize, JsonSchema)]
struct Stamped {
    key: String,
}

/// Arguments of `triage_ticket`.
#[derive(Deserialize, JsonSchema)]
struct TriageTicket {
    /// The id of the ticket to triage
    ticket_id: u64,
}

/// Arguments of `stamp_confirmed`.
#[derive(Deserialize, JsonSchema)]
struct StampConfirmed {
    /// What to append to the effects file (one line), once the client confirms.
    key: String,
}

/// The file `stamp` and `stamp_confirmed` append to, when `HELP_DESK_EFFECTS_FILE` names one: a
/// side effect recorded outside the fleet, so the fault-injection tests (`tests/faults`) can
/// count each call's effects. Without it there is neither tool. `stamp` may run as a 2026-07-28
/// background task (tasks extension); `stamp_confirmed` asks the client first (one
/// elicitation: a multi-round request in 2026-07-28) and takes its effect only after the
/// answer.
fn effects_file() -> Option<std::path::PathBuf> {
    std::env::var_os("HELP_DESK_EFFECTS_FILE")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

/// Appends `key\n` to `path` in one `write` with `O_APPEND`, so lines of concurrent calls (of
/// every instance) never interleave.
fn append_effect(path: &std::path::Path, key: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(format!("{key}\n").as_bytes())
}

/// Appends `key` to the effects file at `path` (off the runtime's threads).
async fn stamp_effect(path: std::path::PathBuf, key: String) -> Result<(), ToolError> {
    tokio::task::spawn_blocking(move || append_effect(&path, &key))
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?
        .map_err(|e| ToolError::failed(format!("effects file: {e}")))
}

/// [`stamp_effect`] once per call `call` (its `RequestContext::call_key`), claimed in the
/// desk's store for `ttl_ms`: a run that finds the call done answers as the first did; one that
/// finds it claimed and not done (running now, or its instance stopped mid-way: whether the
/// effect was taken is not known) fails without taking it; an effect that failed gives the
/// claim back.
async fn stamp_once(
    desk: Desk,
    call: String,
    ttl_ms: u64,
    path: std::path::PathBuf,
    key: String,
) -> Result<(), ToolError> {
    match desk.claim_once(&call, ttl_ms).await? {
        Once::Claimed => {}
        Once::Done => return Ok(()),
        Once::Running => {
            return Err(ToolError::failed(
                "an earlier run of this call is taking its effect (or stopped mid-way): it is \
                 not taken again",
            ));
        }
    }
    let taken = stamp_effect(path, key).await;
    desk.finish_once(&call, taken.is_ok(), ttl_ms).await?;
    taken
}

/// The scope that reads tickets, the service levels and the triage prompt.
const READ: &str = "tickets:read";
/// The scope that opens, closes and pages.
const WRITE: &str = "tickets:write";

/// The desk's store: in Redis when the configuration names one (every instance of a fleet
/// then shows the same desk), else in this process's memory. `HELP_DESK_TICKETS=memory` keeps
/// them in memory even with Redis: the benchmarks measure the runtime's own Redis traffic
/// (none for a call on a held session), not the app's.
async fn desk_for(config: &Config) -> Result<Desk, String> {
    let in_memory = std::env::var("HELP_DESK_TICKETS").is_ok_and(|v| v.trim() == "memory");
    let Some(cfg) = config.redis.clone().filter(|_| !in_memory) else {
        return Ok(Arc::new(MemoryStore::default()));
    };
    let prefix = cfg.key_prefix.clone();
    // A connection of its own; like the server's, it starts even if Redis is down (the desk
    // answers "unavailable" until Redis does) and retries in the background.
    let redis = RedisConn::connect_in_background(cfg)
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(key_prefix = %prefix, "help-desk: tickets in Redis");
    Ok(Arc::new(RedisStore::new(redis, &prefix)))
}

fn build(config: Config, desk: Desk) -> Result<Server, fleetmcp::BuildError> {
    // With authorization on (`[auth]`), reading the desk needs `tickets:read` and changing it
    // `tickets:write`; without it the scopes are ignored.
    let open = tool("open_ticket")
        .scope(WRITE)
        .title("Open a ticket")
        .description("Opens a help-desk ticket and returns it with its id.")
        .state::<Desk>()
        .handler(|a: OpenTicket, ctx, desk| async move {
            if a.title.trim().is_empty() {
                return Err(ToolError::failed("a ticket needs a title"));
            }
            let new = NewTicket {
                title: a.title,
                description: a.description,
                priority: a.priority,
                opened_by: ctx.principal().and_then(|p| p.subject()).map(String::from),
            };
            // The call's key makes a retried call open one ticket, not two.
            Ok(Structured(desk.open(new, ctx.call_key()).await?))
        });

    let find = tool("find_tickets")
        .scope(READ)
        .title("Find tickets")
        .description("Finds tickets by words in their title or description, and by status.")
        .annotations(ToolAnnotations::new().read_only(true))
        .state::<Desk>()
        .handler(|a: FindTickets, ctx, desk| async move {
            let q = a.query.map(|q| q.to_lowercase());
            let tickets = desk.find(q.as_deref(), a.status).await?;
            // A client that asked for progress (a `progressToken`) gets one step: its answer
            // then comes as an SSE stream.
            ctx.progress(1.0, Some(1.0), Some("searched the desk"));
            Ok(Structured(TicketList { tickets }))
        });

    let close = tool("close_ticket")
        .scope(WRITE)
        .title("Close a ticket")
        .description("Closes a ticket with a resolution.")
        .annotations(ToolAnnotations::new().idempotent(true))
        .state::<Desk>()
        .handler(|a: CloseTicket, ctx, desk| async move {
            let t = desk
                .close(a.id, a.resolution)
                .await?
                .ok_or_else(|| ToolError::failed(format!("no ticket {}", a.id)))?;
            // To the ticket's subscribers on every instance of the fleet (fleetmcp fans it
            // out through Redis in distributed mode).
            ctx.server()
                .notify_resource_updated(&format!("helpdesk://tickets/{}", t.id))
                .await;
            Ok(Structured(t))
        });

    // A page reaches the session wherever it is held: here, or on the instance of the fleet
    // that holds it.
    let page = tool("page_session")
        .scope(WRITE)
        .title("Page a session")
        .description("Sends a message to another help-desk session's stream (as a log message).")
        .handler(|a: PageSession, ctx| async move {
            let params =
                serde_json::json!({"level": "notice", "logger": "page", "data": a.message});
            let delivered = ctx
                .server()
                .notify_session(&a.session_id, "notifications/message", &params)
                .await;
            Ok(Structured(Paged { delivered }))
        });

    let sla = resource("helpdesk://policies/sla", "sla")
        .scope(READ)
        .title("Service levels")
        .description("How fast each priority is answered.")
        .mime_type("text/markdown")
        .read(|uri, _ctx| async move {
            Ok(vec![
                ResourceContents::text(
                    "# Service levels\n\n- high: answered within 1 hour\n- normal: within 1 business day\n- low: within 1 week\n",
                    uri,
                )
                .with_mime_type("text/markdown"),
            ])
        });

    let ticket = template("helpdesk://tickets/{id}", "ticket")
        .scope(READ)
        .title("A ticket")
        .description("One ticket, as JSON.")
        .mime_type("application/json")
        .state::<Desk>()
        .complete("id", |partial, _given, _ctx, desk| {
            desk.known_ids()
                .iter()
                .map(|k| k.to_string())
                .filter(|k| k.starts_with(partial))
                .collect()
        })
        .read(|uri, vars, _ctx, desk| async move {
            let id: u64 = vars
                .get("id")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| ResourceError::NotFound(uri.clone()))?;
            let t = desk
                .get(id)
                .await?
                .ok_or_else(|| ResourceError::NotFound(uri.clone()))?;
            let json = serde_json::to_string(&t)?;
            Ok(vec![
                ResourceContents::text(json, uri).with_mime_type("application/json"),
            ])
        });

    let triage = prompt("triage_ticket")
        .scope(READ)
        .title("Triage a ticket")
        .description("Asks the model to assess a ticket's priority and next step.")
        .state::<Desk>()
        .get(|args: TriageTicket, _ctx, desk| {
            async move {
                let id = args.ticket_id;
                let t = desk
                    .get(id)
                    .await?
                    .ok_or_else(|| PromptError::InvalidArguments(format!("no ticket {id}")))?;
                Ok(vec![PromptMessage::new_text(
                    Role::User,
                    format!(
                        "Triage ticket {id}: \"{}\" (priority {:?}).\n{}\nSay whether the priority is right and what to do next.",
                        t.title,
                        t.priority,
                        t.description.as_deref().unwrap_or("No description.")
                    ),
                )])
            }
        });

    let mut builder = Server::builder("help-desk", env!("CARGO_PKG_VERSION"));
    if let Some(path) = effects_file() {
        let confirm_path = path.clone();
        let stamp = tool("stamp")
            .scope(WRITE)
            .title("Stamp")
            .description("Appends a key to the effects file (HELP_DESK_EFFECTS_FILE); for tests.")
            // A 2026-07-28 client of the tasks extension (`extensions` naming
            // `io.modelcontextprotocol/tasks` in its capabilities) gets `stamp` as a background
            // task it polls with `tasks/get`; every other caller, as before, gets the answer.
            .task_support(fleetmcp::TaskSupport::Optional)
            .handler(move |a: Stamp, ctx| {
                let path = path.clone();
                async move {
                    if a.key.is_empty() || a.key.contains('\n') {
                        return Err(ToolError::failed("a key is one non-empty line"));
                    }
                    let key = a.key.clone();
                    tokio::task::spawn_blocking(move || append_effect(&path, &key))
                        .await
                        .map_err(|e| ToolError::failed(e.to_string()))?
                        .map_err(|e| ToolError::failed(format!("effects file: {e}")))?;
                    // A caller that asked for progress gets one step: its answer then comes
                    // as an SSE stream (resumable with `Last-Event-ID`).
                    ctx.progress(1.0, Some(1.0), Some("stamped"));
                    if a.delay_ms > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(a.delay_ms.min(5000)))
                            .await;
                    }
                    Ok(Structured(Stamped { key: a.key }))
                }
            });
        // A multi-round call: the effect is taken only once the client has answered the
        // question (an elicitation: in 2026-07-28 an `InputRequiredResult` round whose answer
        // comes back with its `requestState`, on any instance). The handler runs again each
        // time the client sends its answering round (the protocol's `requestState` is not
        // single-use): the effect is taken once per call key (`ctx.call_key()`: in 2026-07-28
        // the key sealed in the `requestState` by the first round), claimed in the desk's store
        // (Redis: shared by the fleet) for as long as a `requestState` lives.
        let once_ttl_ms = config.stateless.request_state_ttl_ms;
        let confirmed = tool("stamp_confirmed")
            .scope(WRITE)
            .title("Stamp, once confirmed")
            .description(
                "Asks the client to confirm, then appends a key to the effects file \
                 (HELP_DESK_EFFECTS_FILE) once per call; for tests.",
            )
            .state::<Desk>()
            .handler(move |a: StampConfirmed, ctx, desk| {
                let path = confirm_path.clone();
                async move {
                    if a.key.is_empty() || a.key.contains('\n') {
                        return Err(ToolError::failed("a key is one non-empty line"));
                    }
                    let question = serde_json::json!({
                        "message": format!("Stamp {}?", a.key),
                        "requestedSchema": {"type": "object",
                            "properties": {"confirm": {"type": "boolean"}},
                            "required": ["confirm"]}});
                    let answer = ctx.ask("confirm", "elicitation/create", question).await?;
                    if answer["action"] != "accept" || answer["content"]["confirm"] != true {
                        return Err(ToolError::failed("not confirmed: nothing stamped"));
                    }
                    // Past the last question: read the call's key now (see above). Claim,
                    // effect and record run in a task of their own: a handler dropped mid-way
                    // (its client gone, a drain) must leave neither a claim without its
                    // effect nor an effect without its record.
                    let taken = match ctx.call_key() {
                        Some(call) => {
                            let once = stamp_once(
                                Desk::clone(&desk),
                                call.to_string(),
                                once_ttl_ms,
                                path,
                                a.key.clone(),
                            );
                            tokio::spawn(once)
                                .await
                                .map_err(|e| ToolError::failed(e.to_string()))?
                        }
                        None => stamp_effect(path, a.key.clone()).await,
                    };
                    taken.map(|()| Structured(Stamped { key: a.key }))
                }
            });
        builder = builder.tool(stamp).tool(confirmed);
    }
    builder
        .instructions("A help desk: open, find and close tickets; read the service levels.")
        .tool(open)
        .tool(find)
        .tool(close)
        .tool(page)
        .resource(sla)
        .template(ticket)
        .prompt(triage)
        .state(desk)
        .config(config)
        .try_build()
}

#[tokio::main]
async fn main() {
    // `help-desk fleet status|drain <machine-id>` is the operator's command; a configuration
    // or a desk that cannot be made exits 2, a server that cannot serve 1.
    fleetmcp::run(|config| async move {
        let desk = desk_for(&config).await?;
        Ok(build(config, desk)?)
    })
    .await
}
