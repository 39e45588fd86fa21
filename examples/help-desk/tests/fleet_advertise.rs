//! Where an instance tells the others to relay its sessions' requests (issue 20, part 1), with
//! real help-desk processes and a real redis-server.
//!
//! Before, an instance bound to every interface with no `FLEETMCP_ADVERTISE_ADDRESS` advertised
//! `<MACHINE_ID>:<PORT>`: on a host where the machine id is no DNS name (`desk-a`) every relayed
//! request was answered `503`, while `/readyz` said ready. Now it advertises the address it
//! reaches Redis from, and checks that it reaches itself at the address it advertises (a signed
//! request to itself): if not, `/readyz` answers `503` and the log says why, naming
//! `FLEETMCP_ADVERTISE_ADDRESS`.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support::Instance;
use support::raw_http::RawResponse;
use support_redis::RedisServer;

/// The warning a failed self-check logs (its start).
const NOT_REACHED: &str =
    "[HA] This instance does not reach itself at the address it advertises to the other instances";

/// A help-desk in distributed mode on `redis`, bound to every interface (the default in
/// distributed mode), with no advertised address unless `extra` sets one. A short heartbeat
/// interval makes the self-check run every second.
fn desk_on_all_interfaces(machine: &str, redis: &str, extra: &[(&str, &str)]) -> Instance {
    let mut env: Vec<(&str, &str)> = vec![
        ("FRONTMCP_BIND_ADDRESS", "all"),
        ("FLEETMCP_ADVERTISE_ADDRESS", ""),
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FLEETMCP_DRAIN_MS", "200"),
    ];
    env.extend_from_slice(extra);
    distributed_desk(machine, redis, &env)
}

fn readyz(port: u16) -> RawResponse {
    http(port, "GET", "/readyz", &[], None, HTTP_LIMIT)
}

/// `/readyz` once it answers `status`, within `limit`; panics with the last answer otherwise.
fn readyz_becomes(instance: &Instance, status: u16, limit: Duration) -> RawResponse {
    let start = Instant::now();
    loop {
        let resp = readyz(instance.port());
        if resp.status == status {
            return resp;
        }
        assert!(
            start.elapsed() < limit,
            "/readyz not {status} within {limit:?}:\n{}\n--- log ---\n{}",
            resp.describe(),
            instance.log()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

fn heartbeat(redis: &RedisServer, machine: &str) -> Value {
    let raw = redis.cli(&["GET", &format!("mcp:ha:heartbeat:{machine}")]);
    serde_json::from_str(raw.trim())
        .unwrap_or_else(|e| panic!("heartbeat of {machine}: {e}: {raw}"))
}

/// Two instances bound to every interface, named by machine ids no DNS resolves, with no
/// address set: each advertises the address it reaches Redis from (loopback here) with its
/// port, is ready, and a request for a session held by one, sent to the other, is relayed to
/// its holder. Before, each advertised `desk-a:<port>`, the relay answered `503` ("served by
/// another instance ... did not answer"), and `/readyz` still said ready.
#[test]
fn instances_with_no_address_set_relay_to_each_other() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = desk_on_all_interfaces("desk-a", &url, &[]);
    let b = desk_on_all_interfaces("desk-b", &url, &[]);
    // A's session, asked on B: relayed to A.
    let sid = open_session(a.port());
    let resp = call_tool(
        a.port(),
        &sid,
        &[],
        "open_ticket",
        json!({"title": "relayed"}),
    );
    assert_served_by(&resp, "desk-a", "open_ticket on the holder");
    let resp = call_tool(
        b.port(),
        &sid,
        &[],
        "find_tickets",
        json!({"query": "relayed"}),
    );
    assert_served_by(&resp, "desk-a", "find_tickets sent to B, relayed to A");
    // And the other way round.
    let sid = open_session(b.port());
    let resp = call_tool(a.port(), &sid, &[], "find_tickets", json!({}));
    assert_served_by(&resp, "desk-b", "find_tickets sent to A, relayed to B");
    // Each advertises the address it reaches Redis from, and is ready.
    for (who, instance) in [("desk-a", &a), ("desk-b", &b)] {
        let ready = readyz_becomes(instance, 200, Duration::from_secs(10));
        let probe = &ready.json()["probes"]["advertised-address"];
        assert_eq!(probe["status"], "healthy", "{who}: {}", ready.describe());
        assert_eq!(
            probe["details"]["address"],
            format!("127.0.0.1:{}", instance.port()),
            "{who}: {}",
            ready.describe()
        );
        assert_eq!(
            probe["details"]["source"],
            "redis-route",
            "{}",
            ready.describe()
        );
        assert_eq!(
            heartbeat(&redis, who)["address"],
            format!("127.0.0.1:{}", instance.port()),
            "{who} advertises the address it reaches Redis from"
        );
        assert!(
            instance.log().contains(&format!(
                "[HA] Advertising 127.0.0.1:{} to the other instances (the address this instance reaches Redis from; FLEETMCP_ADVERTISE_ADDRESS is unset)",
                instance.port()
            )),
            "{who}'s log:\n{}",
            instance.log()
        );
    }

    for (who, instance) in [("desk-a", &a), ("desk-b", &b)] {
        let log = instance.log();
        assert!(
            !log.contains("Relay to session owner failed") && !log.contains(NOT_REACHED),
            "{who}'s log:\n{log}"
        );
    }
}

/// An instance whose advertised address does not reach it is not ready, and says why: a port
/// where nothing listens (the others' relays would be refused), or another instance's address
/// (which refuses a request signed for this one). `/readyz` answers `503` with the
/// `advertised-address` probe naming the problem, the log has one warning naming
/// `FLEETMCP_ADVERTISE_ADDRESS` and what failed (not one per check), and the instance still
/// lives (`/healthz`). Before, `/readyz` said ready and the log said nothing.
#[test]
fn an_address_that_does_not_reach_the_instance_makes_it_unready_and_says_why() {
    let redis = RedisServer::start();
    let url = redis.url();
    let nowhere = format!("127.0.0.1:{}", support::free_port());
    let lost = desk_on_all_interfaces(
        "desk-lost",
        &url,
        &[("FLEETMCP_ADVERTISE_ADDRESS", nowhere.as_str())],
    );
    let resp = readyz_becomes(&lost, 503, Duration::from_secs(10));
    let probe = &resp.json()["probes"]["advertised-address"];
    assert_eq!(probe["status"], "unhealthy", "{}", resp.describe());
    let error = probe["error"].as_str().unwrap_or_default();
    for needle in [
        nowhere.as_str(),
        "set by FLEETMCP_ADVERTISE_ADDRESS",
        "Connection refused",
        "set FLEETMCP_ADVERTISE_ADDRESS to a host:port where the other instances reach this one",
    ] {
        assert!(
            error.contains(needle),
            "`{needle}` in:\n{}",
            resp.describe()
        );
    }
    // The other probes are fine: it is the address that makes it unready.
    assert_eq!(
        resp.json()["probes"]["ha"]["status"],
        "healthy",
        "{}",
        resp.describe()
    );
    assert_eq!(
        http(lost.port(), "GET", "/healthz", &[], None, HTTP_LIMIT).status,
        200
    );
    let warning = format!("{NOT_REACHED}, {nowhere} (set by FLEETMCP_ADVERTISE_ADDRESS): ");
    assert_log_has(&lost, "desk-lost", &warning);
    assert!(
        lost.log().lines().any(|l| l.contains(&warning)
            && l.contains(" WARN ")
            && l.contains("Connection refused")),
        "{}",
        lost.log()
    );
    // Checked every second (the heartbeat interval, at least 1 s), logged once.
    thread::sleep(Duration::from_millis(2500));
    assert_eq!(count(&lost, NOT_REACHED), 1, "{}", lost.log());
    assert_eq!(readyz(lost.port()).status, 503);

    // Another instance's address: it answers, but refuses a request signed for this one.
    let a = desk_on_all_interfaces("desk-a", &url, &[]);
    let a_address = format!("127.0.0.1:{}", a.port());
    let twin = desk_on_all_interfaces(
        "desk-twin",
        &url,
        &[("FLEETMCP_ADVERTISE_ADDRESS", a_address.as_str())],
    );
    let resp = readyz_becomes(&twin, 503, Duration::from_secs(10));
    let error = resp.json()["probes"]["advertised-address"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains(&format!("{a_address} (set by FLEETMCP_ADVERTISE_ADDRESS): another instance answered there (machine id desk-a, HTTP 403)")),
        "{}",
        resp.describe()
    );
    assert_log_has(
        &twin,
        "desk-twin",
        "another instance answered there (machine id desk-a",
    );
    // The instance whose address it is stays ready.
    readyz_becomes(&a, 200, Duration::from_secs(10));
}
