//! The Redis session store against real `redis-server` processes: the key layout, fenced
//! writes and batch claims, the holder's index, the sliding TTL, a paused server, a server
//! killed and restarted empty, a store started before Redis, `rediss://` over TLS, and records
//! written without their empty fields. Two in-process instances sharing one Redis are in
//! `redis_instances.rs`.

mod support;
mod support_redis;

use std::time::{Duration, Instant};

use fleetmcp::config::RedisConfig;
use fleetmcp::internals::{
    Claim, Fence, Invalidation, RedisSessionStore, SessionRecord, SessionStore, Standing,
    StoreError,
};
use serde_json::{Value, json};
use support::{LATEST, eventually_async};
use support_redis::{RedisServer, SharedRedis, free_port};

fn record(id: &str, node: &str) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        holder: node.into(),
        protocol_version: LATEST.into(),
        client_info: json!({"name": "t", "version": "1"}),
        client_capabilities: json!({"elicitation": {}}),
        created_at: 1_767_225_600_000,
        epoch: 1,
        principal: None,
    }
}

fn cfg_for(redis: &RedisServer) -> RedisConfig {
    RedisConfig::from_url(redis.url())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_with_the_contract_key_layout() {
    let redis = RedisServer::start();
    let store = RedisSessionStore::connect(cfg_for(&redis)).await.unwrap();
    assert!(store.is_connected());
    assert_eq!(store.kind(), "redis");
    store.ping().await.unwrap();

    let r = record("sid-1", "desk-a");
    assert!(!store.exists("sid-1").await.unwrap());
    assert_eq!(store.get("sid-1").await.unwrap(), None);
    store.put(&r).await.unwrap();
    assert!(store.exists("sid-1").await.unwrap());
    assert_eq!(store.get("sid-1").await.unwrap(), Some(r.clone()));

    // Key layout and stored record, seen from outside.
    assert_eq!(redis.cli(&["KEYS", "*"]), "mcp:session:sid-1");
    let raw: Value = serde_json::from_str(&redis.cli(&["GET", "mcp:session:sid-1"])).unwrap();
    assert_eq!(raw["session"]["id"], "sid-1");
    assert_eq!(raw["session"]["nodeId"], "desk-a");
    assert_eq!(raw["session"]["protocol"], "streamable-http");
    assert_eq!(raw["initialized"], true);
    assert_eq!(raw["clientCapabilities"], json!({"elicitation": {}}));
    let pttl: i64 = redis.cli(&["PTTL", "mcp:session:sid-1"]).parse().unwrap();
    assert!(pttl > 3_590_000 && pttl <= 3_600_000, "pttl {pttl}");

    // Write-back by another instance replaces the holder.
    store.put(&record("sid-1", "desk-b")).await.unwrap();
    assert_eq!(store.get("sid-1").await.unwrap().unwrap().holder, "desk-b");

    store.touch("sid-1").await.unwrap();
    store.touch("no-such-session").await.unwrap();
    store.delete("sid-1").await.unwrap();
    assert!(!store.exists("sid-1").await.unwrap());
    assert_eq!(redis.cli(&["DBSIZE"]), "0");

    // A record that does not parse is deleted and reads as absent.
    redis.cli(&["SET", "mcp:session:bad", "not json"]);
    assert_eq!(store.get("bad").await.unwrap(), None);
    assert_eq!(redis.cli(&["EXISTS", "mcp:session:bad"]), "0");

    // A custom prefix.
    let mut cfg = cfg_for(&redis);
    cfg.key_prefix = "desk:".into();
    let other = RedisSessionStore::connect(cfg).await.unwrap();
    other.put(&record("x", "n")).await.unwrap();
    assert_eq!(redis.cli(&["EXISTS", "desk:session:x"]), "1");
    assert!(!store.exists("x").await.unwrap());
}

fn fence(node: &str, epoch: u64) -> Fence {
    Fence {
        holder: node.into(),
        epoch,
    }
}

/// Index members of `node`'s held sessions, as Redis has them.
fn index(redis: &SharedRedis, node: &str) -> Vec<String> {
    // A handful of sessions: one bucket (`session/index.rs`).
    let key = format!("mcp:node:{node}:sessions:0");
    let out = redis.cli(&["ZRANGE", &key, "0", "-1"]);
    out.lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_compare_holder_and_epoch() {
    fenced_writes_on(SharedRedis::single()).await;
}

/// The same on a three-master Redis Cluster, where a record and the indexes live in different
/// slots (and, for some of these sessions, on different masters).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_compare_holder_and_epoch_on_a_cluster() {
    fenced_writes_on(SharedRedis::cluster()).await;
}

async fn fenced_writes_on(redis: SharedRedis) {
    let store = RedisSessionStore::connect(redis.config()).await.unwrap();
    let r = record("sid-f", "desk-a");
    store.create(&r, true).await.unwrap();
    assert_eq!(index(&redis, "desk-a"), ["sid-f"]);
    assert_eq!(
        store
            .check("sid-f", Some(&fence("desk-a", 1)), true)
            .await
            .unwrap()
            .standing,
        Standing::Mine
    );

    // B claims it from what it read; A's view is now stale.
    assert_eq!(store.claim(&r, "desk-b").await.unwrap(), Claim::Won(2));
    let raw: Value = serde_json::from_str(&redis.cli(&["GET", "mcp:session:sid-f"])).unwrap();
    assert_eq!(raw["session"]["nodeId"], "desk-b");
    assert_eq!(raw["epoch"], 2);
    assert_eq!(raw["reassignedFrom"], "desk-a");
    assert!(raw["reassignedAt"].as_u64().is_some());
    // What the client sent is kept as sent (Lua never re-encodes the record).
    assert_eq!(raw["clientCapabilities"], json!({"elicitation": {}}));
    assert_eq!(index(&redis, "desk-a"), Vec::<String>::new());
    assert_eq!(index(&redis, "desk-b"), ["sid-f"]);

    // A's refresh and a second claim from the stale read both lose, and write nothing.
    let before = redis.cli(&["GET", "mcp:session:sid-f"]);
    redis.cli(&["PEXPIRE", "mcp:session:sid-f", "50000"]);
    assert_eq!(
        store
            .check("sid-f", Some(&fence("desk-a", 1)), true)
            .await
            .unwrap()
            .standing,
        Standing::Lost {
            holder: "desk-b".into(),
            epoch: 2
        }
    );
    let pttl: i64 = redis.cli(&["PTTL", "mcp:session:sid-f"]).parse().unwrap();
    assert!(
        pttl <= 50_000,
        "the lost holder's refresh landed: pttl {pttl}"
    );
    assert_eq!(
        store.claim(&r, "desk-c").await.unwrap(),
        Claim::Lost {
            holder: "desk-b".into(),
            epoch: 2
        }
    );
    assert_eq!(redis.cli(&["GET", "mcp:session:sid-f"]), before);
    // The same node under an older epoch has lost it too.
    assert!(matches!(
        store
            .check("sid-f", Some(&fence("desk-b", 1)), false)
            .await
            .unwrap()
            .standing,
        Standing::Lost { .. }
    ));
    assert_eq!(
        store
            .check("sid-f", Some(&fence("desk-b", 2)), true)
            .await
            .unwrap()
            .standing,
        Standing::Mine
    );
    let pttl: i64 = redis.cli(&["PTTL", "mcp:session:sid-f"]).parse().unwrap();
    assert!(
        pttl > 3_500_000,
        "the holder's refresh did not land: pttl {pttl}"
    );

    // Batches: each claim decided on its own.
    let mut batch = Vec::new();
    for i in 0..5 {
        let r = record(&format!("sid-{i}"), "desk-x");
        store.create(&r, true).await.unwrap();
        batch.push(r);
    }
    store.delete("sid-3").await.unwrap();
    let mut stale = batch[4].clone();
    assert_eq!(store.claim(&stale, "desk-y").await.unwrap(), Claim::Won(2));
    stale.epoch = 1;
    let answers = store.claim_many(&batch, "desk-z").await.unwrap();
    assert_eq!(
        answers,
        [
            Claim::Won(2),
            Claim::Won(2),
            Claim::Won(2),
            Claim::Gone,
            Claim::Lost {
                holder: "desk-y".into(),
                epoch: 2
            }
        ]
    );
    assert_eq!(index(&redis, "desk-z"), ["sid-0", "sid-1", "sid-2"]);
    assert_eq!(
        store
            .claim(&record("none", "desk-a"), "desk-b")
            .await
            .unwrap(),
        Claim::Gone
    );
    // A holder claiming what it already holds (its scanner adopted it, then a request claimed
    // it again) keeps it in its index.
    let mut adopted = record("sid-0", "desk-z");
    adopted.epoch = 2;
    assert_eq!(
        store.claim(&adopted, "desk-z").await.unwrap(),
        Claim::Won(3)
    );
    let mut held = index(&redis, "desk-z");
    held.sort();
    assert_eq!(held, ["sid-0", "sid-1", "sid-2"]);
}

/// `n` sessions `<name>-<i>` created held by desk-x, each with an empty list from its client.
async fn created_by_x(store: &RedisSessionStore, name: &str, n: usize) -> Vec<SessionRecord> {
    let mut batch = Vec::new();
    for i in 0..n {
        let mut r = record(&format!("{name}-{i}"), "desk-x");
        r.client_info = json!({"name": "t", "roots": []});
        store.create(&r, true).await.unwrap();
        batch.push(r);
    }
    batch
}

/// A record desk-z claimed from desk-x, as stored: naming both, with what the client sent as
/// it was (Lua's encoder would turn `[]` into `{}`).
fn assert_claimed_from_x_by_z(claimed: &str) {
    assert!(claimed.contains(r#""nodeId":"desk-z""#), "{claimed}");
    assert!(claimed.contains(r#""roots":[]"#), "{claimed}");
    assert!(
        claimed.contains(r#""reassignedFrom":"desk-x""#),
        "{claimed}"
    );
}

/// The orphan scanner's batch claim on one server costs Redis about one command per record
/// (one script per batch, one `MGET` and one `SET` per record inside it, where `INFO
/// commandstats` counts them, and a few per bucket of the indexes: the 1,200 sessions of
/// desk-x are in 32 buckets, and desk-z's index grows to 32 before they move in), not three (a script per record, with its `GET` and `SET`),
/// and the records it writes are encoded here (Lua's encoder would turn `[]` into `{}`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claim_costs_about_one_command_per_record() {
    let redis = RedisServer::start();
    let store = RedisSessionStore::connect(cfg_for(&redis)).await.unwrap();
    let n = 1_200;
    let batch = created_by_x(&store, "many", n).await;
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let answers = store.claim_many(&batch, "desk-z").await.unwrap();
    assert!(answers.iter().all(|a| *a == Claim::Won(2)), "{answers:?}");
    let stats = redis.cli(&["INFO", "commandstats"]);
    let commands: u64 = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(
        commands <= n as u64 + n as u64 / 10,
        "{commands} commands for {n} claims:\n{stats}"
    );
    assert_claimed_from_x_by_z(&redis.cli(&["GET", "mcp:session:many-777"]));
    assert_eq!(redis.cli(&["GET", "mcp:node:desk-z:buckets"]), "32");
    let indexed: u64 = (0..32)
        .map(|b| {
            let bucket = format!("mcp:node:desk-z:sessions:{b}");
            redis.cli(&["ZCARD", &bucket]).parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(indexed, n as u64, "every claimed session in desk-z's index");
    assert_eq!(redis.cli(&["GET", "mcp:node:desk-x:buckets"]), "32");
    for b in 0..32 {
        let bucket = format!("mcp:node:desk-x:sessions:{b}");
        assert_eq!(redis.cli(&["EXISTS", &bucket]), "0", "{bucket} emptied");
    }
    // A second claim by the same stale view loses every record, and writes nothing.
    let again = store.claim_many(&batch, "desk-y").await.unwrap();
    assert!(
        again.iter().all(|a| *a
            == Claim::Lost {
                holder: "desk-z".into(),
                epoch: 2
            }),
        "{:?}",
        &again[..3]
    );
}

/// On a three-master cluster, where the records of a batch are in as many slots, the batch
/// claim costs about one command per record too (one script per master and batch, one `SET
/// ... GET` per record inside it, the read and the write in one), not three (a script per
/// record, with its `GET` and `SET`); a lost race puts the record back as it was, and a
/// record gone is not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claim_on_a_cluster_costs_about_one_command_per_record() {
    let redis = SharedRedis::cluster();
    let store = RedisSessionStore::connect(redis.config()).await.unwrap();
    let n = 1_200;
    let batch = created_by_x(&store, "spread", n).await;
    redis.reset_stats();
    let answers = store.claim_many(&batch, "desk-z").await.unwrap();
    assert!(answers.iter().all(|a| *a == Claim::Won(2)), "{answers:?}");
    let commands = redis.commands_run();
    assert!(
        commands <= n as u64 + n as u64 / 10,
        "{commands} commands for {n} claims on a cluster"
    );
    assert_claimed_from_x_by_z(&redis.cli(&["GET", "mcp:session:spread-777"]));
    let pttl: i64 = redis
        .cli(&["PTTL", "mcp:session:spread-777"])
        .parse()
        .unwrap();
    assert!(pttl > 3_500_000, "pttl {pttl}");
    // A stale view loses every record and leaves it as it was; a record gone stays gone.
    let before = redis.cli(&["GET", "mcp:session:spread-5"]);
    store.delete("spread-6").await.unwrap();
    let again = store.claim_many(&batch[5..7], "desk-y").await.unwrap();
    assert_eq!(
        again,
        [
            Claim::Lost {
                holder: "desk-z".into(),
                epoch: 2
            },
            Claim::Gone
        ]
    );
    assert_eq!(redis.cli(&["GET", "mcp:session:spread-5"]), before);
    assert_eq!(redis.cli(&["EXISTS", "mcp:session:spread-6"]), "0");
}

/// The holder index grows its buckets as sessions are created, before any heartbeat: 300
/// sessions opened at once end in eight buckets of about 38, each kept compact by Redis
/// (listpack), and not in one sorted set of 300 (a skiplist, twice the bytes an entry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_index_grows_its_buckets_as_sessions_are_created() {
    let redis = RedisServer::start();
    let store = RedisSessionStore::connect(cfg_for(&redis)).await.unwrap();
    for i in 0..300 {
        store
            .create(&record(&format!("grown-{i}"), "desk-g"), true)
            .await
            .unwrap();
    }
    assert_eq!(redis.cli(&["GET", "mcp:node:desk-g:buckets"]), "8");
    let mut indexed = 0;
    for n in 0..8 {
        let key = format!("mcp:node:desk-g:sessions:{n}");
        let size: u64 = redis.cli(&["ZCARD", &key]).parse().unwrap();
        assert!(size <= 128, "{key} holds {size}");
        assert_eq!(
            redis.cli(&["OBJECT", "ENCODING", &key]),
            "listpack",
            "{key}"
        );
        indexed += size;
    }
    assert_eq!(indexed, 300, "every session indexed once");
}

/// A store on `redis` whose records live `ttl_ms`.
async fn store_with_ttl(redis: &RedisServer, ttl_ms: u64) -> RedisSessionStore {
    let mut cfg = cfg_for(redis);
    cfg.default_ttl_ms = ttl_ms;
    RedisSessionStore::connect(cfg).await.unwrap()
}

/// An id as instance `node` mints it: its uuid (tagged) in front, then anything.
fn minted_by(node: &str) -> String {
    use base64::Engine;
    let uuid = fleetmcp::internals::minted_uuid(node);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid.as_bytes()) + "rest"
}

/// `INFO stats` `tracking_total_prefixes`: the prefixes Redis's tracking table holds.
fn prefixes(redis: &RedisServer) -> String {
    let info = redis.cli(&["INFO", "stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("tracking_total_prefixes:"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Issue 37: the tracking connection subscribes to its own tag's records; a session of another
/// tag held here is tracked once its check added that tag's prefix, a session whose id carries
/// no tag (an older version's) is not tracked, and a prefix that goes unused for a session
/// lifetime is dropped: the connection is rebuilt with its own alone and every confirmation
/// voided (`Invalidation::All`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tags_prefix_is_added_for_its_check_and_dropped_once_unused() {
    let redis = RedisServer::start();
    let store = store_with_ttl(&redis, 2_000).await;
    let mut changes = store
        .invalidations("desk-b")
        .expect("Redis reports changes");
    eventually_async("tracking on", Duration::from_secs(5), || async {
        prefixes(&redis) == "1"
    })
    .await;
    let fence = |epoch| Fence {
        holder: "desk-b".into(),
        epoch,
    };
    let own = minted_by("desk-b");
    let claimed = minted_by("desk-a");
    // Its first 9 bytes zero: a version-0 uuid, no tag.
    let older = "AAAAAAAAAAAA-an-older-id".to_string();
    for id in [&own, &claimed, &older] {
        store.put(&record(id, "desk-b")).await.unwrap();
    }
    let tracked = |id: String| {
        let (store, fence) = (&store, fence(1));
        async move {
            let checked = store.check(&id, Some(&fence), false).await.unwrap();
            assert_eq!(checked.standing, Standing::Mine, "{id}");
            checked.tracked
        }
    };
    // Until the tracker published its connection (after the first `All`).
    eventually_async("own tag tracked", Duration::from_secs(5), || {
        tracked(own.clone())
    })
    .await;
    assert_eq!(prefixes(&redis), "1", "its own prefix only");
    assert!(tracked(claimed.clone()).await, "another tag, once added");
    assert_eq!(prefixes(&redis), "2", "desk-a's prefix added");
    assert!(!tracked(older.clone()).await, "an id without a tag");
    assert_eq!(prefixes(&redis), "2", "no prefix for an id without a tag");
    // A write to the claimed record from elsewhere is reported.
    redis.cli(&["PEXPIRE", &format!("mcp:session:{claimed}"), "60000"]);
    let told = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(change) = changes.recv().await {
            if change == Invalidation::Key(claimed.clone()) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        told,
        Ok(true),
        "the write to the claimed record was reported"
    );
    // Unused for the lifetime (2 s): the connection is rebuilt with its own prefix alone.
    let began = Instant::now();
    eventually_async(
        "the unused prefix dropped",
        Duration::from_secs(6),
        || async { prefixes(&redis) == "1" },
    )
    .await;
    assert!(began.elapsed() >= Duration::from_millis(1_000), "too soon");
    let mut voided = false;
    while let Ok(Some(change)) =
        tokio::time::timeout(Duration::from_millis(500), changes.recv()).await
    {
        voided |= change == Invalidation::All;
    }
    assert!(voided, "the rebuild voided every confirmation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttl_slides_with_touch() {
    let redis = RedisServer::start();
    let store = store_with_ttl(&redis, 600).await;
    store.put(&record("used", "a")).await.unwrap();
    store.put(&record("idle", "a")).await.unwrap();
    let started = Instant::now();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        store.touch("used").await.unwrap();
    }
    assert!(started.elapsed() > Duration::from_millis(1000));
    assert!(store.exists("used").await.unwrap(), "touched: still there");
    assert!(!store.exists("idle").await.unwrap(), "not touched: expired");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !store.exists("used").await.unwrap(),
        "expired after touches stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_gives_timeouts_then_works_again() {
    let mut redis = RedisServer::start();
    let store = RedisSessionStore::connect(cfg_for(&redis)).await.unwrap();
    store.put(&record("p", "a")).await.unwrap();

    redis.pause();
    for i in 0..6 {
        let t = Instant::now();
        let r = store.exists("p").await;
        let took = t.elapsed();
        assert!(
            matches!(r, Err(StoreError::Timeout(500))),
            "call {i}: {r:?}"
        );
        assert!(took < Duration::from_millis(1500), "call {i} took {took:?}");
        assert!(took >= Duration::from_millis(400), "call {i} took {took:?}");
    }
    // Concurrent calls all end within the bound too.
    let t = Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let s = store.clone();
            tokio::spawn(async move { s.get("p").await })
        })
        .collect();
    for c in calls {
        assert!(matches!(c.await.unwrap(), Err(StoreError::Timeout(_))));
    }
    assert!(t.elapsed() < Duration::from_millis(1500));
    assert!(!store.is_connected());
    assert!(
        store.rebuild_attempts() >= 1,
        "timeouts in a row start a connection rebuild"
    );

    redis.resume();
    eventually_async(
        "exists answers after SIGCONT",
        Duration::from_secs(5),
        || {
            let s = store.clone();
            async move { matches!(s.exists("p").await, Ok(true)) }
        },
    )
    .await;
    assert!(store.is_connected());
    store.put(&record("q", "a")).await.unwrap();
    assert!(store.exists("q").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_restarted_empty_is_reconnected() {
    let mut redis = RedisServer::start();
    let store = RedisSessionStore::connect(cfg_for(&redis)).await.unwrap();
    store.put(&record("k", "a")).await.unwrap();

    redis.kill();
    let t = Instant::now();
    let r = store.exists("k").await;
    assert!(r.is_err(), "{r:?}");
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );

    redis.start_again();
    eventually_async(
        "the store reconnects to the restarted server",
        Duration::from_secs(10),
        || {
            let s = store.clone();
            async move { matches!(s.exists("k").await, Ok(false)) }
        },
    )
    .await;
    store.put(&record("k2", "a")).await.unwrap();
    assert_eq!(redis.cli(&["EXISTS", "mcp:session:k2"]), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_started_before_redis_connects_when_it_comes_up() {
    let port = free_port();
    let cfg = RedisConfig::from_host("127.0.0.1", port);

    // The strict constructor fails, quickly and clearly.
    let t = Instant::now();
    assert!(RedisSessionStore::connect(cfg.clone()).await.is_err());
    assert!(t.elapsed() < Duration::from_secs(3));

    let store = RedisSessionStore::connect_in_background(cfg).await.unwrap();
    assert!(!store.is_connected());
    let t = Instant::now();
    assert!(matches!(
        store.exists("x").await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(t.elapsed() < Duration::from_millis(100));
    assert!(store.ping().await.is_err());

    let redis = RedisServer::start_on(port);
    eventually_async(
        "connected after Redis starts",
        Duration::from_secs(6),
        || {
            let ok = store.is_connected();
            async move { ok }
        },
    )
    .await;
    store.ping().await.unwrap();
    store.put(&record("late", "a")).await.unwrap();
    assert_eq!(redis.cli(&["EXISTS", "mcp:session:late"]), "1");
}

#[tokio::test]
async fn invalid_configuration_is_refused() {
    let r = RedisSessionStore::connect(RedisConfig::from_url("http://nope")).await;
    assert!(matches!(r, Err(StoreError::Unavailable(m)) if m.contains("redis://")));
    let r = RedisSessionStore::connect_in_background(RedisConfig::from_host("h", 0)).await;
    assert!(r.is_err());
}

/// Issue 23: a record is written without its empty or usual optional fields (no `{}`
/// capabilities, no `null` clientInfo, no epoch 1), and still checked, claimed and taken over
/// through the scripts; a record written with every field (as earlier versions did) still reads
/// and is claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_without_empty_fields_are_checked_and_claimed_and_full_ones_still_read() {
    let redis = RedisServer::start();
    let store = RedisSessionStore::connect(cfg_for(&redis)).await.unwrap();
    let mut r = record("lean", "desk-a");
    r.client_info = Value::Null;
    r.client_capabilities = json!({});
    store.create(&r, true).await.unwrap();
    let raw: Value = serde_json::from_str(&redis.cli(&["GET", "mcp:session:lean"])).unwrap();
    for absent in ["epoch", "clientCapabilities", "clientInfo"] {
        assert!(raw.get(absent).is_none(), "{absent} in {raw}");
    }
    assert_eq!(raw["session"]["nodeId"], "desk-a");
    assert_eq!(store.get("lean").await.unwrap(), Some(r.clone()));
    let held = store.check("lean", Some(&fence("desk-a", 1)), true).await;
    assert_eq!(
        held.unwrap().standing,
        Standing::Mine,
        "the script reads no epoch as 1"
    );
    let stale = store.check("lean", Some(&fence("desk-a", 0)), false).await;
    assert!(matches!(
        stale.unwrap().standing,
        Standing::Lost { epoch: 1, .. }
    ));
    assert_eq!(store.claim(&r, "desk-b").await.unwrap(), Claim::Won(2));
    let raw: Value = serde_json::from_str(&redis.cli(&["GET", "mcp:session:lean"])).unwrap();
    assert_eq!(raw["session"]["nodeId"], "desk-b");
    assert_eq!(raw["epoch"], 2);
    assert_eq!(raw["reassignedFrom"], "desk-a");
    let moved = redis.cli(&["ZRANGE", "mcp:node:desk-b:sessions:0", "0", "-1"]);
    assert_eq!(moved.trim(), "lean");

    // As an earlier version wrote it: every field, epoch 0.
    let old = json!({"session": {"id": "full", "protocol": "streamable-http",
        "createdAt": 1, "nodeId": "desk-a"}, "createdAt": 1, "lastAccessedAt": 2,
        "initialized": true, "protocolVersion": "2025-06-18", "clientInfo": {"name": "c"},
        "clientCapabilities": {}, "epoch": 0});
    redis.cli(&["SET", "mcp:session:full", &old.to_string()]);
    let read = store
        .get("full")
        .await
        .unwrap()
        .expect("an old record reads");
    assert_eq!(
        (read.epoch, read.client_info["name"].as_str()),
        (0, Some("c"))
    );
    assert_eq!(store.claim(&read, "desk-b").await.unwrap(), Claim::Won(1));
    let raw: Value = serde_json::from_str(&redis.cli(&["GET", "mcp:session:full"])).unwrap();
    assert_eq!(
        (raw["epoch"].as_u64(), raw.get("clientCapabilities")),
        (None, None)
    );
    let held = store.check("full", Some(&fence("desk-b", 1)), false).await;
    assert_eq!(held.unwrap().standing, Standing::Mine);
}

/// A TLS-only redis-server with a certificate from a throwaway CA (made with `openssl`).
struct TlsRedis {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn tls_redis() -> TlsRedis {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run_openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=fleetmcp-test-ca",
        ],
    );
    run_openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    run_openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
        ],
    );
    let port = free_port();
    let child = std::process::Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            "server.pem",
            "--tls-key-file",
            "server.key",
            "--tls-ca-cert-file",
            "ca.pem",
        ])
        .args([
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            ".",
        ])
        .current_dir(d)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server starts");
    // Ready when the TLS port accepts connections.
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    TlsRedis { child, port, dir }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_urls_connect_over_tls_and_verify_the_server() {
    let redis = tls_redis();
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let ca = redis
        .dir
        .path()
        .join("ca.pem")
        .to_string_lossy()
        .into_owned();
    let cfg = RedisConfig {
        ca_file: Some(ca),
        ..RedisConfig::from_url(url.clone())
    };
    let store = RedisSessionStore::connect(cfg)
        .await
        .expect("TLS connection with the test CA");
    store.put(&record("tls-1", "desk-a")).await.unwrap();
    assert_eq!(store.get("tls-1").await.unwrap().unwrap().holder, "desk-a");
    assert!(store.exists("tls-1").await.unwrap());

    // Without the CA, the server's certificate is not trusted: no connection.
    let untrusted = RedisSessionStore::connect(RedisConfig::from_url(url)).await;
    assert!(
        untrusted.is_err(),
        "a certificate from an unknown CA must be refused"
    );
    // A plain connection to the TLS port does not get through either.
    let plain = RedisSessionStore::connect(RedisConfig::from_url(format!(
        "redis://127.0.0.1:{}",
        redis.port
    )))
    .await;
    assert!(plain.is_err());
}

/// Issue 37: once the fleet reads compact records (switched by hand here; by the heartbeats in
/// a fleet: `examples/help-desk/tests/fleet_takeover.rs`), a record is written without
/// `session.id` and a typical one takes jemalloc's 256-byte class: `MEMORY USAGE` at most 376
/// (the value's 256, the key's 80, its object and entry 40), where the full form takes 440. It
/// is read, checked, claimed and batch-claimed at its key; a record as main writes it (with
/// `session.id`), written by hand, is read and claimed as before, and a full record naming
/// another session is still refused (and deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_records_take_the_256_byte_class_and_read_and_claim_at_their_key() {
    let redis = RedisServer::start();
    let store = RedisSessionStore::connect(cfg_for(&redis)).await.unwrap();
    let typical = |n: u8| SessionRecord {
        // A minted id's length (`session/id.rs`).
        id: format!("{:A<61}{n}", "minted-"),
        client_info: json!({"name": "bench", "version": "1.0"}),
        client_capabilities: json!({}),
        ..record("", "desk-a")
    };
    let usage = |id: &str| -> u64 {
        let key = format!("mcp:session:{id}");
        redis
            .cli(&["MEMORY", "USAGE", &key])
            .trim()
            .parse()
            .unwrap()
    };
    let (full, compact) = (typical(1), typical(2));
    assert_eq!(full.id.len(), 62);
    store.create(&full, true).await.unwrap();
    let raw: Value =
        serde_json::from_str(&redis.cli(&["GET", &format!("mcp:session:{}", full.id)])).unwrap();
    assert_eq!(
        raw["session"]["id"],
        full.id.as_str(),
        "full until switched"
    );
    assert!(usage(&full.id) > 376, "the full form: {}", usage(&full.id));

    store.write_compact_records();
    store.create(&compact, true).await.unwrap();
    let key = format!("mcp:session:{}", compact.id);
    let text = redis.cli(&["GET", &key]);
    let raw: Value = serde_json::from_str(&text).unwrap();
    assert!(raw["session"].get("id").is_none(), "{text}");
    assert_eq!(raw["session"]["nodeId"], "desk-a");
    assert!(
        usage(&compact.id) <= 376,
        "{} B: {text}",
        usage(&compact.id)
    );
    assert_eq!(store.get(&compact.id).await.unwrap(), Some(compact.clone()));
    let held = store
        .check(&compact.id, Some(&fence("desk-a", 1)), true)
        .await;
    assert_eq!(held.unwrap().standing, Standing::Mine);
    assert_eq!(
        store.claim(&compact, "desk-b").await.unwrap(),
        Claim::Won(2)
    );
    let claimed = store.get(&compact.id).await.unwrap().expect("claimed");
    assert_eq!((claimed.holder.as_str(), claimed.epoch), ("desk-b", 2));
    let raw: Value = serde_json::from_str(&redis.cli(&["GET", &key])).unwrap();
    assert!(raw["session"].get("id").is_none(), "{raw}");
    let both = store
        .get_many(&[full.id.clone(), compact.id.clone()])
        .await
        .unwrap();
    assert_eq!(both, [Some(full.clone()), Some(claimed.clone())]);
    let claims = store.claim_many(&[claimed], "desk-c").await.unwrap();
    assert_eq!(claims, [Claim::Won(3)]);

    // As main writes it: `session.id` there, the rest as here.
    let main = json!({"session": {"id": "main-wrote-this", "protocol": "streamable-http",
        "createdAt": 1, "nodeId": "desk-m"}, "createdAt": 1, "lastAccessedAt": 2,
        "initialized": true, "protocolVersion": "2025-11-25",
        "clientInfo": {"name": "bench", "version": "1.0"}});
    redis.cli(&["SET", "mcp:session:main-wrote-this", &main.to_string()]);
    let read = store
        .get("main-wrote-this")
        .await
        .unwrap()
        .expect("main's record reads");
    assert_eq!((read.holder.as_str(), read.epoch), ("desk-m", 1));
    let held = store
        .check("main-wrote-this", Some(&fence("desk-m", 1)), false)
        .await;
    assert_eq!(held.unwrap().standing, Standing::Mine);
    assert_eq!(store.claim(&read, "desk-b").await.unwrap(), Claim::Won(2));
    assert_eq!(
        store
            .get("main-wrote-this")
            .await
            .unwrap()
            .map(|r| r.holder),
        Some("desk-b".into())
    );
    // A full record at another session's key is not that session's: deleted, as before.
    redis.cli(&["SET", "mcp:session:elsewhere", &main.to_string()]);
    assert_eq!(store.get("elsewhere").await.unwrap(), None);
    assert_eq!(redis.cli(&["EXISTS", "mcp:session:elsewhere"]).trim(), "0");
}
