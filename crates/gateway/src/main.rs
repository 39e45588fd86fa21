//! `fleetmcp-gateway`: a fleet in front of an MCP server that speaks stdio (or Streamable HTTP). Each client session
//! gets one upstream process, started by the instance that holds the session with the
//! configured command; the session's messages pass through both ways, and the fleet's relay,
//! takeover, fencing, authorization, limits and metrics apply as to any fleetmcp server. See the
//! README, "Putting an existing stdio server behind a fleet".
//!
//! The files: `config.rs` (the servers' `Config` plus `[gateway]` / `FLEETMCP_UPSTREAM_*`),
//! `child.rs` (the `Upstream` of child processes), `descriptors.rs` (processes and connections
//! fitted under `RLIMIT_NOFILE`), `http_upstream.rs` and `http_client.rs` (the `Upstream` for a
//! server speaking Streamable HTTP), `probe.rs` (the startup probe behind `/readyz`'s
//! `upstream` entry), `policy.rs` (tool scopes and SSE polling from the configuration).
//!
//! Invariant: every process it starts is reaped, and none outlives its session on this
//! instance by more than twice the stop grace.

mod child;
mod config;
mod descriptors;
mod http_client;
mod http_upstream;
mod policy;
mod probe;

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fleetmcp-gateway: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    runtime.block_on(run())
}

async fn run() -> std::process::ExitCode {
    fleetmcp::init_tracing();
    let (mut config, mut gateway) = match config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fleetmcp-gateway: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if gateway.url.is_none() {
        // Its processes' pipes count against the open-files limit along with connections.
        descriptors::fit(&mut config, &mut gateway);
    }
    let builder =
        fleetmcp::Server::builder("fleetmcp-gateway", env!("CARGO_PKG_VERSION")).config(config);
    let tool_scopes = gateway.tool_scopes.clone();
    let poll_after = gateway.poll_after;
    let (served, children) = match gateway.url.clone() {
        Some(url) => {
            let upstream = match http_upstream::HttpUpstream::new(
                url,
                gateway.ca_file.as_deref(),
                gateway.max_line_bytes,
            ) {
                Ok(u) => u,
                Err(e) => {
                    eprintln!("fleetmcp-gateway: {e}");
                    return std::process::ExitCode::from(2);
                }
            };
            tokio::spawn(probe::watch(upstream.clone()));
            let upstream = policy::Policy::new(upstream, tool_scopes).poll_after(poll_after);
            (builder.upstream(upstream).build().serve().await, None)
        }
        None => {
            let children = child::Children::new(gateway);
            tokio::spawn(probe::watch(children.clone()));
            let upstream =
                policy::Policy::new(children.clone(), tool_scopes).poll_after(poll_after);
            let served = builder.upstream(upstream).build().serve().await;
            (served, Some(children))
        }
    };
    // Sessions ended with the server; their processes are stopped and reaped before exit.
    if let Some(children) = children {
        children.stop_all().await;
    }
    fleetmcp::flush_traces();
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleetmcp-gateway: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
