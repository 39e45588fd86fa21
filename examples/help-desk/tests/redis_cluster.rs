//! Redis Cluster (issue 12): two distributed `help-desk` processes on a real three-master
//! cluster (`redis-cli --cluster create`, `REDIS_CLUSTER_NODES`). Sessions opened on either
//! instance are served through both (the relay), the tickets are one desk, the fleet's keys
//! are spread over the masters, the operator's `status` reads the fleet, and a holder killed
//! with SIGKILL has its sessions served again by the other within two seconds.
//!
//! The same flows on one server are in `fleet_sessions.rs`, `fleet_takeover.rs` and
//! `fleet_desk.rs`; the library's own tests (`crates/fleetmcp/tests/redis_store.rs`,
//! `redis_instances.rs`, `redis_tasks.rs`, `limits.rs`) run their session, SSE-resumption, task
//! and limit tests on a cluster too.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::process::Command;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support_redis::{RedisCluster, SharedRedis};

const VALIDATED: &str = "[TransportService] Session store connection validated successfully";

/// The text of a tool result's first content block.
fn text_of(resp: &support::raw_http::RawResponse) -> String {
    resp.json()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// desk-a and desk-b in distributed mode on `cluster`, with a fast heartbeat (300 ms, TTL
/// 1.5 s), each having validated the cluster.
fn two_desks(cluster: &RedisCluster) -> (support::Instance, support::Instance) {
    let nodes = cluster.nodes_env();
    let env = [
        ("REDIS_CLUSTER_NODES", nodes.as_str()),
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1500"),
    ];
    let a = distributed_desk("desk-a", "", &env);
    let b = distributed_desk("desk-b", "", &env);
    for (i, who) in [(&a, "desk-a"), (&b, "desk-b")] {
        assert_log_has(i, who, VALIDATED);
    }
    (a, b)
}

#[test]
fn a_fleet_on_a_three_master_cluster_serves_sessions_everywhere_and_survives_a_killed_holder() {
    let cluster = RedisCluster::start(3, 0);
    let (mut a, b) = two_desks(&cluster);

    // Sessions made on both instances, each called through both: the holder answers (a call
    // on the other is relayed to it).
    let mut held_by_a = Vec::new();
    for n in 0..8 {
        let (port, maker) = if n % 2 == 0 {
            (a.port(), "desk-a")
        } else {
            (b.port(), "desk-b")
        };
        let (sid, holder) = open_session_held(port);
        assert_eq!(
            holder.as_deref(),
            Some(maker),
            "initialize answered by its maker"
        );
        for other in [a.port(), b.port()] {
            let resp = call_tool(other, &sid, &[], "find_tickets", json!({}));
            assert_served_by(&resp, maker, "a call through either instance");
        }
        assert_eq!(
            cluster.cli(&["EXISTS", &format!("mcp:session:{sid}")]),
            "1",
            "the record is in the cluster"
        );
        if maker == "desk-a" {
            held_by_a.push(sid);
        }
    }
    // The holders' indexes name their sessions (each index lives in its own slot).
    let index_a = cluster.cli(&["ZRANGE", "mcp:node:desk-a:sessions:0", "0", "-1"]);
    for sid in &held_by_a {
        assert!(
            index_a.contains(sid.as_str()),
            "{sid} in A's index: {index_a}"
        );
    }

    // One desk: a ticket opened through A is found through B.
    let sid = open_session(a.port());
    let sid_b = open_session(b.port());
    let opened = call_tool(
        a.port(),
        &sid,
        &[],
        "open_ticket",
        json!({"title": "cluster printer"}),
    );
    assert_tool_ok(&opened, "open a ticket");
    let found = call_tool(
        b.port(),
        &sid_b,
        &[],
        "find_tickets",
        json!({"query": "cluster printer"}),
    );
    assert_tool_ok(&found, "find it elsewhere");
    assert!(
        text_of(&found).contains("cluster printer"),
        "{}",
        found.describe()
    );

    // The keys are spread over the masters: the cluster is really sharding them.
    let holding: Vec<u16> = cluster
        .nodes
        .iter()
        .filter(|n| n.cli(&["DBSIZE"]).parse::<u64>().unwrap_or(0) > 0)
        .map(|n| n.port)
        .collect();
    assert!(
        holding.len() >= 2,
        "keys on {} of 3 masters only",
        holding.len()
    );

    // The operator's view reads the fleet from the cluster.
    let scratch = support::TempDir::new("cluster-ctl");
    let mut ctl = Command::new(env!("CARGO_BIN_EXE_help-desk"));
    ctl.args(["fleet", "status"])
        .env("REDIS_CLUSTER_NODES", cluster.nodes_env())
        .env("MCP_SESSION_SECRET", support::SESSION_SECRET)
        .env_remove("REDIS_URL")
        .env_remove("REDIS_HOST")
        .env_remove("REDIS_PORT")
        .env_remove("FLEETMCP_CONFIG")
        .env_remove("FRONTMCP_HA_KEY_PREFIX");
    let out = support::run(&mut ctl, Duration::from_secs(15), scratch.path());
    assert!(
        out.success() && out.stdout.contains("desk-a") && out.stdout.contains("desk-b"),
        "`help-desk fleet status` on a cluster:\n{}",
        out.describe()
    );

    // A is killed: its sessions are served by B within two seconds of the first request.
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    let began = Instant::now();
    for sid in &held_by_a {
        let deadline = Instant::now() + Duration::from_secs(5);
        let resp = loop {
            let resp = call_tool(b.port(), sid, &[], "find_tickets", json!({}));
            if resp.status != 503 || Instant::now() > deadline {
                break resp;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_served_by(&resp, "desk-b", "a killed holder's session, on B");
    }
    let served_after = began.elapsed();
    eprintln!(
        "cluster: {} sessions of a SIGKILLed holder served again within {served_after:?}",
        held_by_a.len()
    );
    assert!(
        served_after < Duration::from_secs(2),
        "served again after {served_after:?}"
    );
    for sid in &held_by_a {
        let raw = cluster.cli(&["GET", &format!("mcp:session:{sid}")]);
        let stored: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        assert_eq!(stored["session"]["nodeId"], "desk-b", "{raw}");
    }
    b.assert_no_panic_logged();
}

/// Issue 37: the orphan scanner recovers a dead instance's sessions on a three-master cluster
/// for at most two Redis commands each (`INFO commandstats` on every master, from the dead
/// instance's entry in `nodes` to its index empty, everything desk-b sent meanwhile counted):
/// their records read one `MGET` a slot, claimed one script a master and batch with one `SET`
/// a record inside, the index moved one command a bucket; not four (a `GET`, then a script
/// with its `GET` and `SET`, a record). The 3,000 sessions of the ghost instance are written
/// in the stored format, in 500 slots (hash tags in their ids): six a slot, as 100,000
/// sessions fall over a cluster's 16,384 slots. The claimed records keep what clients sent.
#[test]
fn the_orphan_scanner_recovers_a_dead_instances_sessions_for_two_commands_each_on_a_cluster() {
    let redis = SharedRedis::cluster();
    let nodes = redis.env().remove(0).1;
    let b = distributed_desk(
        "desk-b",
        "",
        &[
            ("REDIS_CLUSTER_NODES", nodes.as_str()),
            ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
            ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1500"),
            ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "500"),
        ],
    );
    assert_log_has(&b, "desk-b", VALIDATED);
    let now = unix_ms();
    let (slots, each) = (500, 6);
    let ids: Vec<String> = (0..slots * each)
        .map(|i| format!("ghost-{{{}}}-{i}", i % slots))
        .collect();
    let mut lines = String::new();
    for id in &ids {
        let record = json!({"session": {"id": id, "protocol": "streamable-http",
            "createdAt": now, "nodeId": "ghost"}, "createdAt": now, "lastAccessedAt": now,
            "initialized": true, "protocolVersion": "2025-11-25",
            "clientInfo": {"name": "t", "roots": []}});
        lines += &format!("SET mcp:session:{id} '{record}' PX 600000\n");
    }
    // In 64 buckets, each session in the one its holder would have written it in (FNV-1a of
    // its id, `session/index.rs`), where the claim's index move looks for it.
    let bucket_of = |id: &str| {
        id.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        }) & 63
    };
    for n in 0..64 {
        lines += &format!("ZADD mcp:node:ghost:sessions:{n}");
        for id in ids.iter().filter(|id| bucket_of(id) == n) {
            lines += &format!(" {now} {id}");
        }
        lines += "\n";
    }
    lines += "SET mcp:node:ghost:buckets 64\n";
    redis.cli_script(&lines);

    redis.reset_stats();
    let listed = (now - 60_000).to_string();
    redis.cli(&["ZADD", "mcp:ha:nodes", &listed, "ghost"]);
    let started = Instant::now();
    while !redis.cli(&["ZSCORE", "mcp:ha:nodes", "ghost"]).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the scanner claims the ghost's sessions:\n{}",
            b.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let commands = redis.commands_run();
    let per_session = commands as f64 / ids.len() as f64;
    eprintln!(
        "cluster recovery: {commands} commands for {} sessions ({per_session:.2} each) within {:?}",
        ids.len(),
        started.elapsed()
    );
    for id in ids.iter().step_by(97) {
        let raw = redis.cli(&["GET", &format!("mcp:session:{id}")]);
        let stored: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        assert_eq!(stored["session"]["nodeId"], "desk-b", "{raw}");
        assert_eq!(stored["clientInfo"]["roots"], json!([]), "{raw}");
    }
    let buckets: u32 = redis
        .cli(&["GET", "mcp:node:desk-b:buckets"])
        .parse()
        .unwrap_or(1);
    let held: u64 = (0..buckets)
        .map(|n| {
            let key = format!("mcp:node:desk-b:sessions:{n}");
            redis.cli(&["ZCARD", &key]).parse::<u64>().unwrap_or(0)
        })
        .sum();
    assert_eq!(
        held,
        ids.len() as u64,
        "desk-b's index names every claimed session"
    );
    assert!(
        per_session <= 2.0,
        "{commands} commands for {} sessions recovered ({per_session:.2} each)",
        ids.len()
    );
    b.assert_no_panic_logged();
}

/// A master of a cluster with replicas is killed (SIGKILL) under a light load: the cluster
/// promotes its replica, both instances follow the new slot map without a restart, no session
/// is lost, and every answer meanwhile is a success or the documented `503` with
/// `Retry-After`.
#[test]
fn a_cluster_master_killed_under_load_is_followed_without_a_restart_and_loses_no_session() {
    let mut cluster = RedisCluster::start(3, 1);
    let (a, b) = two_desks(&cluster);
    let ports = [a.port(), b.port()];
    let sessions: Vec<String> = (0..6).map(|c| open_session(ports[c % 2])).collect();

    let load = LightLoad::start(&ports, &sessions);

    std::thread::sleep(Duration::from_secs(1));
    // The master of the first session's record.
    let killed_at = Instant::now();
    let killed = cluster.kill_master_of(&format!("mcp:session:{}", sessions[0]));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let info = cluster.cli(&["CLUSTER", "INFO"]);
        let slots = cluster.cli(&["CLUSTER", "SLOTS"]);
        if info.contains("cluster_state:ok") && !slots.contains(&killed.to_string()) {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster never failed over");
        std::thread::sleep(Duration::from_millis(50));
    }
    let switched = killed_at.elapsed();
    // Light load on the new topology for a while.
    std::thread::sleep(Duration::from_secs(3));
    let seen = load.stop();
    assert_only_documented_errors("cluster failover", &seen, killed_at, switched);
    for sid in &sessions {
        assert_eq!(
            cluster.cli(&["EXISTS", &format!("mcp:session:{sid}")]),
            "1",
            "no session lost in the failover"
        );
    }
    // A session opened now lands on the new topology.
    let fresh = open_session(a.port());
    assert_tool_ok(
        &call_tool(b.port(), &fresh, &[], "find_tickets", json!({})),
        "a session opened after the failover",
    );
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// Messages between servers caused by publishing, summed over every node of `cluster`:
/// (`cluster_stats_messages_publish_sent`, `cluster_stats_messages_publishshard_sent`), and the
/// `PUBLISH` and `SPUBLISH` commands the nodes ran. Redis prints a message type only once one
/// was sent: a missing line is 0.
fn publish_costs(cluster: &RedisCluster) -> [u64; 4] {
    let field = |text: &str, name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.trim_start_matches(':').trim().parse().ok())
            .unwrap_or(0)
    };
    let mut sum = [0; 4];
    for node in cluster.nodes.iter() {
        let info = node.cli(&["CLUSTER", "INFO"]);
        let stats = node.cli(&["INFO", "commandstats"]);
        sum[0] += field(&info, "cluster_stats_messages_publish_sent");
        sum[1] += field(&info, "cluster_stats_messages_publishshard_sent");
        sum[2] += field(&stats, "cmdstat_publish:calls=");
        sum[3] += field(&stats, "cmdstat_spublish:calls=");
    }
    sum
}

/// The node that replicates the master at `port`.
fn replica_of(cluster: &RedisCluster, port: u16) -> &support_redis::RedisServer {
    let marker = format!("master_port:{port}");
    cluster
        .nodes
        .iter()
        .find(|n| n.cli(&["INFO", "replication"]).contains(&marker))
        .expect("the master has a replica")
}

/// Sharded pub/sub (issue 37): on a cluster of three masters with a replica each (Redis 7), a
/// notification for a session held on another instance costs one `SPUBLISH` and one message
/// between servers (to the replica of the shard that owns the holder's channel), as one Redis
/// with one replica would (one replication message), not a `PUBLISH` copied to the five other
/// nodes. The holder's presence is counted on its channel's shard (`PUBSUB SHARDNUMSUB`); its
/// subscription follows a `CLUSTER FAILOVER` of that shard; once it is SIGKILLed, the other
/// instance finds it gone and serves its session.
#[test]
fn a_notification_for_one_session_stays_in_one_shard_of_the_cluster() {
    let cluster = RedisCluster::start(3, 1);
    let (mut a, b) = two_desks(&cluster);
    let sa = open_session(a.port());
    let mut stream = open_get_stream(a.port(), &sa);
    let sb = open_session(b.port());
    let page = |text: &str| {
        call_tool(
            b.port(),
            &sb,
            &[],
            "page_session",
            json!({"session_id": sa, "message": text}),
        )
    };
    let channel = "mcp:ha:notify:desk-a";

    // Ten pages from B to A's session: what they cost the cluster.
    const PAGES: u64 = 10;
    let before = publish_costs(&cluster);
    let mut delivered = Vec::new();
    for n in 0..PAGES {
        let text = format!("page {n} for A");
        let resp = page(&text);
        assert_tool_ok(&resp, "page A's session from B");
        delivered.push(resp.json()["result"]["structuredContent"]["delivered"].clone());
        read_stream_until(&mut stream, &[&text]);
    }
    let after = publish_costs(&cluster);
    let [bus, bus_shard, publish, spublish] =
        [0, 1, 2, 3].map(|i| after[i].saturating_sub(before[i]));
    eprintln!(
        "{PAGES} notifications on 3 masters x 2: {publish} PUBLISH, {spublish} SPUBLISH, {bus} publish and {bus_shard} publishshard messages between nodes"
    );
    assert_eq!(
        (publish, bus),
        (0, 0),
        "no classic PUBLISH, copied to every node ({bus} bus messages for {PAGES} notifications)"
    );
    assert_eq!(spublish, PAGES, "one SPUBLISH per notification");
    assert_eq!(
        bus_shard, PAGES,
        "one message between servers per notification: to the shard's replica"
    );
    // Reported delivered: the count is the listener's own shard's (a classic `PUBLISH` counts
    // only the subscribers of the node that ran it, which need not be the listener's).
    assert!(
        delivered.iter().all(|d| *d == Value::Bool(true)),
        "{delivered:?}"
    );
    assert_log_has(
        &a,
        "desk-a",
        "Redis pub/sub for one instance's channels: Sharded",
    );

    // A resource updated on B, to a subscriber on A (the fleet's changes channel): one
    // `SPUBLISH` and one message between servers too.
    let opened = call_tool(
        a.port(),
        &sa,
        &[],
        "open_ticket",
        json!({"title": "sharded printer"}),
    );
    assert_tool_ok(&opened, "open a ticket on A");
    let id = opened.json()["result"]["structuredContent"]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no ticket id: {}", opened.describe()));
    let uri = format!("helpdesk://tickets/{id}");
    let subscribe = json!({"jsonrpc": "2.0", "id": next_id(), "method": "resources/subscribe",
                           "params": {"uri": uri}});
    let resp = post_with(a.port(), Some(&sa), &[], &subscribe, HTTP_LIMIT);
    assert_eq!(resp.status, 200, "subscribe:\n{}", resp.describe());
    let before = publish_costs(&cluster);
    let closed = call_tool(
        b.port(),
        &sb,
        &[],
        "close_ticket",
        json!({"id": id, "resolution": "resharded"}),
    );
    assert_tool_ok(&closed, "close it on B");
    read_stream_until(&mut stream, &["notifications/resources/updated", &uri]);
    let after = publish_costs(&cluster);
    let [bus, bus_shard, publish, spublish] =
        [0, 1, 2, 3].map(|i| after[i].saturating_sub(before[i]));
    eprintln!(
        "1 resource update on 3 masters x 2: {publish} PUBLISH, {spublish} SPUBLISH, {bus} publish and {bus_shard} publishshard messages between nodes"
    );
    assert_eq!(
        [publish, spublish, bus, bus_shard],
        [0, 1, 0, 1],
        "one SPUBLISH, one message to the shard's replica"
    );

    // A's presence, on its channel's shard; the classic subscription beside it.
    let master = cluster.master_of(channel);
    let shard_count = |node: &support_redis::RedisServer| {
        node.cli(&["PUBSUB", "SHARDNUMSUB", channel])
            .lines()
            .nth(1)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    assert_eq!(shard_count(master), "1", "A listens on its channel's shard");
    let replica = replica_of(&cluster, master.port);

    // The shard fails over (its replica takes over the slots): A subscribes again on the new
    // master, and a page still reaches it.
    assert_eq!(replica.cli(&["CLUSTER", "FAILOVER"]), "OK");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(replica.cli(&["ROLE"]).starts_with("master") && shard_count(replica) == "1") {
        assert!(
            Instant::now() < deadline,
            "A did not subscribe again on the new master: {}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_log_has(
        &a,
        "desk-a",
        "[HA] lost a channel subscription; subscribing again",
    );
    let resp = page("after the failover");
    assert_eq!(
        resp.json()["result"]["structuredContent"]["delivered"],
        true,
        "{}",
        resp.describe()
    );
    read_stream_until(&mut stream, &["after the failover"]);
    drop(stream);
    // Each page reached A once: none came a second way (which A would drop as a replay).
    assert_eq!(count(&a, "[HA] Dropped a notification"), 0, "{}", a.log());

    // A is killed: B finds its channel's shard empty and serves its session at once.
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    let deadline = Instant::now() + Duration::from_secs(5);
    let resp = loop {
        let resp = call_tool(b.port(), &sa, &[], "find_tickets", json!({}));
        if resp.status != 503 || Instant::now() > deadline {
            break resp;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_served_by(&resp, "desk-b", "a killed holder's session, on B");
    b.assert_no_panic_logged();
}

/// The same notification on one Redis (the baseline of the cluster's figure above): one
/// `PUBLISH` each, classic pub/sub kept (one server: a message touches it alone), and the mode
/// logged once.
#[test]
fn a_notification_for_one_session_on_one_redis_costs_one_publish() {
    let redis = support_redis::RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let sa = open_session(a.port());
    let mut stream = open_get_stream(a.port(), &sa);
    let sb = open_session(b.port());
    let calls = |name: &str| -> u64 {
        let stats = redis.cli(&["INFO", "commandstats"]);
        stats
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("cmdstat_{name}:calls=")))
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    const PAGES: u64 = 10;
    let before = (calls("publish"), calls("spublish"));
    for n in 0..PAGES {
        let text = format!("page {n} for A");
        let resp = call_tool(
            b.port(),
            &sb,
            &[],
            "page_session",
            json!({"session_id": sa, "message": text}),
        );
        assert_eq!(
            resp.json()["result"]["structuredContent"]["delivered"],
            true,
            "{}",
            resp.describe()
        );
        read_stream_until(&mut stream, &[&text]);
    }
    let (publish, spublish) = (calls("publish") - before.0, calls("spublish") - before.1);
    eprintln!("{PAGES} notifications on one Redis: {publish} PUBLISH, {spublish} SPUBLISH");
    assert_eq!((publish, spublish), (PAGES, 0));
    assert_log_has(
        &a,
        "desk-a",
        "Redis pub/sub for one instance's channels: Classic (one server",
    );
}

/// A rolling upgrade on a sharded cluster: an instance of an older release, which only knows
/// classic pub/sub (played by `redis-cli SUBSCRIBE` on the first node, as it subscribes, and
/// `redis-cli PUBLISH`), and a current one. The older listener counts as present (a drain
/// request for it is sent, not refused as "no running instance"), and hears a drain request
/// and the changes once each; what the older one publishes on the current one's channel
/// reaches it (and is refused there, being unsigned). The current one is drained through the
/// cluster by the operator's command.
#[test]
fn an_older_instance_on_classic_pub_sub_is_heard_and_reached_on_a_sharded_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let nodes = cluster.nodes_env();
    let env = [("REDIS_CLUSTER_NODES", nodes.as_str())];
    let a = distributed_desk("desk-a", "", &env);
    assert_log_has(
        &a,
        "desk-a",
        "Redis pub/sub for one instance's channels: Sharded",
    );
    let scratch = support::TempDir::new("cluster-older");
    let heard_path = scratch.path().join("older-heard");
    let heard_file = std::fs::File::create(&heard_path).expect("a capture file");
    let mut older = Command::new(std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into()))
        .args(["-p", &cluster.nodes[0].port.to_string()])
        .args(["SUBSCRIBE", "mcp:ha:notify:desk-old", "mcp:ha:changes"])
        .stdout(heard_file)
        .spawn()
        .expect("redis-cli SUBSCRIBE");
    let heard = || std::fs::read_to_string(&heard_path).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(5);
    while heard().matches("subscribe").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "the older listener never subscribed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A drain request for the older instance: present (its classic subscription is counted),
    // reached once (classically, `SPUBLISH` having reached nobody), unanswered (it is played).
    let mut ctl = Command::new(env!("CARGO_BIN_EXE_help-desk"));
    ctl.args(["fleet", "drain", "desk-old"])
        .env("REDIS_CLUSTER_NODES", cluster.nodes_env())
        .env("MCP_SESSION_SECRET", support::SESSION_SECRET)
        .env_remove("REDIS_URL")
        .env_remove("REDIS_HOST")
        .env_remove("REDIS_PORT")
        .env_remove("FLEETMCP_CONFIG")
        .env_remove("FRONTMCP_HA_KEY_PREFIX");
    let out = support::run(&mut ctl, Duration::from_secs(15), scratch.path());
    assert!(
        out.stderr.contains("did not answer the drain request"),
        "{}",
        out.describe()
    );
    assert_eq!(
        heard().matches("\"kind\":\"drain\"").count(),
        1,
        "the older listener heard the request once:\n{}",
        heard()
    );

    // A change announced by the current instance reaches the older one (classically, since a
    // listener there is classic only).
    let sid = open_session(a.port());
    let opened = call_tool(
        a.port(),
        &sid,
        &[],
        "open_ticket",
        json!({"title": "mixed"}),
    );
    assert_tool_ok(&opened, "open a ticket");
    let id = opened.json()["result"]["structuredContent"]["id"]
        .as_u64()
        .unwrap_or_default();
    let closed = call_tool(
        a.port(),
        &sid,
        &[],
        "close_ticket",
        json!({"id": id, "resolution": "upgraded"}),
    );
    assert_tool_ok(&closed, "close it");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !heard().contains(&format!("helpdesk://tickets/{id}")) {
        assert!(
            Instant::now() < deadline,
            "the older listener never heard the change:\n{}",
            heard()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // What an older instance publishes on the current one's channel reaches it.
    let unsigned = json!({"kind": "notification", "sessionId": sid,
        "notification": {"method": "notifications/message", "params": {}},
        "sourceNodeId": "desk-old", "timestamp": 1, "auth": "v1;1;1;x;x"});
    cluster.cli(&["PUBLISH", "mcp:ha:notify:desk-a", &unsigned.to_string()]);
    assert_log_has(
        &a,
        "desk-a",
        "[HA] Dropped a notification on this instance's channel",
    );
    let _ = older.kill();
    let _ = older.wait();

    // And the current instance is found and drained on the cluster (classic pub/sub counted
    // only the subscribers of the node that ran `PUBLISH`, not the listener's: "no running
    // instance listens as desk-a").
    let mut ctl = Command::new(env!("CARGO_BIN_EXE_help-desk"));
    ctl.args(["fleet", "drain", "desk-a"])
        .env("REDIS_CLUSTER_NODES", cluster.nodes_env())
        .env("MCP_SESSION_SECRET", support::SESSION_SECRET)
        .env_remove("REDIS_URL")
        .env_remove("REDIS_HOST")
        .env_remove("REDIS_PORT")
        .env_remove("FLEETMCP_CONFIG")
        .env_remove("FRONTMCP_HA_KEY_PREFIX");
    let out = support::run(&mut ctl, Duration::from_secs(15), scratch.path());
    assert!(
        out.success() && out.stdout.contains("drain requested and accepted"),
        "{}",
        out.describe()
    );
    a.assert_no_panic_logged();
}
