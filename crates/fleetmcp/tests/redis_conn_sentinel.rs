//! A read that finds nothing is believed only from the master in charge, on the connection it
//! went to (Sentinel). Its own binary: a Sentinel set's five processes and a failover take
//! seconds, beside `redis_conn.rs`'s tests that time a refused connection.
//!
//! Real `redis-server` processes (`REDIS_SERVER`, `REDIS_CLI` or on `PATH`).

#[path = "support_redis/mod.rs"]
mod support_redis;

use std::time::Duration;

use fleetmcp::config::RedisConfig;
use fleetmcp::redis_conn::RedisConn;

/// A read's "nothing there" is believed only from the master in charge *on the connection the
/// read went to*: once the connection moved to the new master (another caller of the process
/// found it first), a read sent before the move is not confirmed by the new master's
/// confirmation. The help-desk test of an instance woken after a failover saw `tasks/get`
/// answer "unknown task" that way (`redis_sentinel.rs`): the heartbeat moved the connection
/// between the task store's read and its confirmation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_before_the_connection_moved_is_not_confirmed_by_the_new_master() {
    let set = support_redis::SentinelSet::start("moved");
    let cfg = RedisConfig {
        sentinels: set.sentinels.iter().map(|s| s.address()).collect(),
        sentinel_master: Some("moved".into()),
        ..Default::default()
    };
    let conn = RedisConn::connect(cfg).await.expect("connects");
    let before = conn.reading_on();
    conn.confirm_master_of(conn.reading_on())
        .await
        .expect("the master in charge, on the connection in use");

    // The sentinels may not count the replica as promotable yet (`NOGOODSLAVE`): asked again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = set.sentinels[0].cli(&["SENTINEL", "FAILOVER", "moved"]);
        if answer == "OK" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SENTINEL FAILOVER: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let new_master = set.replica.port;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // Another caller finds the new master and moves the connection (`confirm_master` fails
    // while it moves, then confirms the new one; a confirmation is kept 500 ms).
    let port_in_use = || async {
        let info: String = conn
            .run(redis::cmd("INFO").arg("server").clone())
            .await
            .unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix("tcp_port:"))
            .and_then(|p| p.trim().parse::<u16>().ok())
    };
    while conn.confirm_master().await.is_err() || port_in_use().await != Some(new_master) {
        assert!(
            std::time::Instant::now() < deadline,
            "the connection never moved"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let got = conn.confirm_master_of(before).await;
    assert!(
        got.is_err(),
        "a read sent to the deposed master was confirmed by the new one: {got:?}"
    );
    conn.confirm_master_of(conn.reading_on())
        .await
        .expect("a read on the connection in use is confirmed");
}
