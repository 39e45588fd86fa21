//! [`run`]: the whole `main` of a server binary, so programs do not each copy it: the
//! operator's `fleet` subcommand, logs, the configuration, serving, and the exit codes.

use std::future::Future;

use super::Server;
use crate::config::Config;
use crate::telemetry::logs::{flush_traces, init_tracing};

/// Runs a server from the environment, as a binary's `main` does, and exits the process when
/// it fails:
///
/// * `<program> fleet status` and `<program> fleet drain <machine-id>` run the operator's
///   command (see the README) instead, and exit with its code;
/// * otherwise it installs the logs ([`init_tracing`]), loads the configuration
///   ([`Config::load`]; an error exits with code 2), hands it to `build`, which returns the
///   server (an error exits with code 2: a bad setting, state that could not be made, a
///   [`BuildError`](crate::BuildError)), and serves it ([`Server::serve`]) until SIGTERM or
///   SIGINT; the spans still batched for export are sent ([`flush_traces`]) and it returns, or
///   exits with code 1 when serving failed (the port is taken, say).
///
/// Every error is printed on stderr after the program's name.
///
/// ```no_run
/// use fleetmcp::{NoArgs, Server, tool};
///
/// #[tokio::main]
/// async fn main() {
///     fleetmcp::run(|config| async move {
///         let hello = tool("hello").handler(|_: NoArgs, _ctx| async { Ok("Hello!") });
///         Ok(Server::builder("hello", "1.0.0").tool(hello).config(config).try_build()?)
///     })
///     .await
/// }
/// ```
pub async fn run<F, Fut>(build: F)
where
    F: FnOnce(Config) -> Fut,
    Fut: Future<Output = Result<Server, Box<dyn std::error::Error>>>,
{
    let args: Vec<String> = std::env::args().collect();
    let operator = is_operator(&args);
    let code = exit_code(&args, build).await;
    // The operator's command always exits with its code, as `fleetmcp-ctl` does; a server
    // that stopped cleanly returns to `main`.
    if code != 0 || operator {
        std::process::exit(code);
    }
}

/// Whether `args` (the program name first) ask for the operator's command.
fn is_operator(args: &[String]) -> bool {
    args.get(1).is_some_and(|a| a == "fleet")
}

/// What [`run`] does, to the exit code it ends with.
async fn exit_code<F, Fut>(args: &[String], build: F) -> i32
where
    F: FnOnce(Config) -> Fut,
    Fut: Future<Output = Result<Server, Box<dyn std::error::Error>>>,
{
    if is_operator(args) {
        return Server::operator_command(&args[2..]).await;
    }
    let program = args
        .first()
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .map_or_else(|| "server".into(), |name| name.to_string_lossy());
    init_tracing();
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{program}: {e}");
            return 2;
        }
    };
    let server = match build(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{program}: {e}");
            return 2;
        }
    };
    let served = server.serve().await;
    // Spans still batched for the OTLP collector (feature `otlp`) go out before the process
    // ends; a no-op otherwise.
    flush_traces();
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{program}: {e}");
            1
        }
    }
}

impl super::Server {
    /// The operator's command, `status` or `drain <machine-id>`, for a binary of your own (a server
    /// built on [`crate::run`] has it as its `fleet` subcommand): runs `args` (without the
    /// program name) against the fleet the environment's configuration names, prints the result,
    /// and returns the exit code (0 done, 1 failed, 2 bad usage or configuration).
    ///
    /// ```no_run
    /// # async fn f() {
    /// let args: Vec<String> = std::env::args().skip(1).collect();
    /// std::process::exit(fleetmcp::Server::operator_command(&args).await);
    /// # }
    /// ```
    ///
    /// A build without the `redis` feature has no fleet to read: the command says so on
    /// stderr and returns 2.
    pub async fn operator_command(args: &[String]) -> i32 {
        super::backing::operator_command(args).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NoArgs, tool};

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[tokio::test]
    async fn a_server_that_cannot_be_built_exits_2_and_one_that_cannot_serve_1() {
        let unbuilt = exit_code(&args(&["desk"]), |_| async {
            let open = tool("open")
                .state::<u8>()
                .handler(|_: NoArgs, _, _| async { Ok("") });
            Ok(Server::builder("desk", "1").tool(open).try_build()?)
        })
        .await;
        assert_eq!(unbuilt, 2);

        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let unserved = exit_code(&args(&["desk"]), |mut config| async move {
            config.port = port;
            config.bind_address = Some(crate::config::BindAddress::Loopback);
            Ok(Server::builder("desk", "1").config(config).try_build()?)
        })
        .await;
        assert_eq!(unserved, 1);
    }

    #[tokio::test]
    async fn fleet_runs_the_operators_command_not_the_server() {
        let built = std::sync::atomic::AtomicBool::new(false);
        let usage = exit_code(&args(&["desk", "fleet", "no-such-command"]), |_| async {
            built.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(Server::builder("desk", "1").try_build()?)
        })
        .await;
        assert_eq!(usage, 2);
        assert!(!built.load(std::sync::atomic::Ordering::SeqCst));
    }
}
