//! `fleetmcp-gateway`: a fleet in front of an MCP server that speaks stdio. Each client session
//! gets one upstream process, started by the instance that holds the session with the
//! configured command; the session's messages pass through both ways, and the fleet's relay,
//! takeover, fencing, authorization, limits and metrics apply as to any fleetmcp server. See the
//! README, "Putting an existing stdio server behind a fleet".

mod child;
mod config;
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
    let (config, gateway) = match config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fleetmcp-gateway: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let children = child::Children::new(gateway);
    tokio::spawn(probe::watch(children.clone()));
    let server = fleetmcp::Server::builder("fleetmcp-gateway", env!("CARGO_PKG_VERSION"))
        .config(config)
        .upstream(children.clone())
        .build();
    let served = server.serve().await;
    // Sessions ended with the server; their processes are stopped and reaped before exit.
    children.stop_all().await;
    fleetmcp::flush_traces();
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleetmcp-gateway: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
