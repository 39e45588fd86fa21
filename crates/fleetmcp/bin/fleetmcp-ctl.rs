//! `fleetmcp-ctl`: the operator's command for a fleetmcp fleet (`src/ops.rs`, run through
//! `fleetmcp::Server::operator_command`).
//!
//! ```text
//! fleetmcp-ctl status                 # instances, sessions, orphans, tasks
//! fleetmcp-ctl drain <machine-id>     # that instance stops gracefully, as on SIGTERM
//!                                     # (exit 1 if it refused the request or did not answer)
//! ```

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(fleetmcp::Server::operator_command(&args).await);
}
