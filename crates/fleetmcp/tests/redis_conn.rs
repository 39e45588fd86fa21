//! The shared Redis connection across outages, against a real `redis-server` killed (its port
//! then refuses connections) and started again on the same port: once Redis answers again, no
//! command fails with an error left over from the outage, and no command takes effect twice.

mod support_redis;

use std::time::Duration;

use fleetmcp::config::RedisConfig;
use fleetmcp::redis_conn::RedisConn;
use support_redis::RedisServer;

async fn connect(redis: &RedisServer) -> RedisConn {
    RedisConn::connect(RedisConfig::from_url(redis.url()))
        .await
        .expect("connects")
}

/// Every kind of call an application makes: a command with an effect, a pipeline, a script.
/// Each must succeed on its first try, and `INCR` must count exactly one.
async fn every_kind_succeeds_first_time(conn: &RedisConn, when: &str) {
    let n: i64 = conn
        .run(redis::cmd("INCR").arg("counter").clone())
        .await
        .unwrap_or_else(|e| panic!("INCR {when}: {e}"));
    assert_eq!(n, 1, "INCR counted once on the new, empty server ({when})");
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg("k")
        .arg("v")
        .ignore()
        .cmd("GET")
        .arg("k");
    let (v,): (String,) = conn
        .pipe(pipe)
        .await
        .unwrap_or_else(|e| panic!("pipeline {when}: {e}"));
    assert_eq!(v, "v");
    let script = redis::Script::new("return redis.call('INCRBY', KEYS[1], ARGV[1])");
    let mut invocation = script.prepare_invoke();
    invocation.key("counter").arg(10);
    let n: i64 = conn
        .eval(invocation)
        .await
        .unwrap_or_else(|e| panic!("script {when}: {e}"));
    assert_eq!(n, 11, "the script ran once ({when})");
}

/// Redis is killed, and a command during the outage fails (the connection manager's reconnect
/// attempts fail too, and it keeps that failure). Redis comes back on the same port; seconds
/// later, with nothing sent meanwhile, the first command must succeed: before the fix it got
/// the kept `Connection refused`, and only the command after it worked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_command_after_an_outage_gets_no_error_left_from_it() {
    let mut redis = RedisServer::start();
    let conn = connect(&redis).await;
    let _: () = conn
        .run(redis::cmd("SET").arg("before").arg("1").clone())
        .await
        .expect("a command before the outage");

    redis.kill();
    let during = conn
        .run::<()>(redis::cmd("SET").arg("during").arg("1").clone())
        .await;
    assert!(during.is_err(), "a command while Redis is down fails");
    // The manager's reconnect attempts (a few, within about a second) run out while Redis is
    // still down.
    tokio::time::sleep(Duration::from_secs(4)).await;
    redis.start_again();
    assert!(redis.raw_ping(), "Redis answers again");
    tokio::time::sleep(Duration::from_secs(3)).await;

    every_kind_succeeds_first_time(&conn, "after the outage").await;
    assert!(conn.is_connected());
}

/// Redis restarts behind a connection nobody is using: the connection is dead, and nothing
/// notices until a command is sent on it. The first command must still succeed (before the fix
/// it failed with `broken pipe`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_command_on_an_idle_connection_redis_restarted_behind_succeeds() {
    let mut redis = RedisServer::start();
    let conn = connect(&redis).await;
    let _: () = conn
        .run(redis::cmd("SET").arg("before").arg("1").clone())
        .await
        .expect("a command before the restart");

    redis.restart();
    assert!(redis.raw_ping(), "Redis answers again");
    tokio::time::sleep(Duration::from_secs(1)).await;

    every_kind_succeeds_first_time(&conn, "after a restart behind an idle connection").await;
}

/// A server that answers with an error (here a script's own) leaves the connection as good as
/// it was: the next command is not held up by a check, and while Redis is down, a command still
/// fails at once rather than waiting out its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_answer_is_not_an_outage_and_an_outage_still_fails_fast() {
    let mut redis = RedisServer::start();
    let conn = connect(&redis).await;
    let failing = redis::Script::new("return redis.error_reply('REFUSED by the script')");
    let e = conn
        .eval::<()>(failing.prepare_invoke())
        .await
        .expect_err("the script's error comes back");
    assert!(e.to_string().contains("by the script"), "{e}");
    assert!(conn.is_connected(), "an error answer is an answer");

    redis.kill();
    let e = conn
        .run::<()>(redis::cmd("SET").arg("k").arg("v").clone())
        .await
        .expect_err("Redis is down");
    // The kind says it failed fast: a command that waits out its bound ends `Timeout`, a
    // refused connection `Unavailable`. (A wall-clock bound here failed once on a loaded
    // machine, where the test thread was scheduled late after the answer.)
    assert!(
        matches!(e, fleetmcp::redis_conn::CommandError::Unavailable(_)),
        "refused, not timed out: {e}"
    );
}

/// A stream resumed while Redis does not answer is not refused as unknown (that would make the
/// client give its answer up, where the fault harness saw `400 Last-Event-ID does not name an
/// event of this session` during a Redis pause): the reader starts, and its events come once
/// Redis answers again. An id of another session, or a stream Redis says does not exist, is
/// still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumed_while_redis_is_paused_is_not_refused() {
    use fleetmcp::internals::{EventStore, RedisEventStore, Unresolved};
    use futures_util::StreamExt;
    let mut redis = RedisServer::start();
    let conn = connect(&redis).await;
    let store = RedisEventStore::new(conn, 100, 60_000, Duration::from_secs(10));
    let first = store
        .append("s1", 7, bytes::Bytes::from_static(b"one"))
        .await
        .expect("append");
    assert!(
        store.resolve("s2", &first).await.is_err(),
        "another session"
    );
    let (tag_stream, _) = first.rsplit_once('-').expect("an event id");
    let (tag, _) = tag_stream.rsplit_once('-').expect("an event id");
    let unknown = format!("{tag}-8-1");
    assert_eq!(
        store.resolve("s1", &unknown).await,
        Err(Unresolved::NotAnEvent),
        "no such stream"
    );

    redis.pause();
    let resumed = store.resolve("s1", &first).await;
    redis.resume();
    let (stream, cursor) = resumed.expect("resumed, not refused, while Redis was paused");
    assert_eq!(stream, 7);
    store
        .append("s1", 7, bytes::Bytes::from_static(b"two"))
        .await
        .expect("append once Redis answers");
    let mut events = store.tail("s1", stream, cursor, Default::default());
    let next = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("the next event arrives")
        .expect("an event");
    assert_eq!(&next.data[..], b"two");
}

/// A resume from the start of an answer stream Redis never stored (its first event's store
/// failed, so its events went out with the stream's start id) is answered, not left waiting:
/// on the instance that writes it, accepted at once (it is alive and stores the answer when
/// it can); elsewhere, accepted as soon as the stream is stored, and refused as lost once the
/// writer has had its time (`UNSTORED_WAIT`) and stored nothing. Before, such a resume on
/// another instance was accepted and carried nothing, ever: the fault harness saw resumes
/// hang after a writer was killed in a Sentinel failover's window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_of_a_stream_never_stored_is_answered() {
    use fleetmcp::internals::{Cursor, EventStore, RedisEventStore, UNSTORED_WAIT, Unresolved};
    let redis = RedisServer::start();
    let store = |conn| RedisEventStore::new(conn, 100, 60_000, Duration::from_secs(10));
    let (writer, other) = (store(connect(&redis).await), store(connect(&redis).await));
    // The start id of stream 9 of session s1, as a writer that could store nothing sends it.
    let any = writer
        .append("s1", 3, bytes::Bytes::from_static(b"x"))
        .await
        .expect("append");
    let tag = any.split('-').next().expect("a tag");
    let start = format!("{tag}-9-0");

    // Elsewhere, with nothing stored: refused as lost after the writer's time, not before.
    let began = std::time::Instant::now();
    let got = other.resolve("s1", &start).await;
    let took = began.elapsed();
    assert_eq!(got, Err(Unresolved::Lost));
    assert!(
        took >= UNSTORED_WAIT && took < UNSTORED_WAIT + Duration::from_secs(3),
        "refused after {took:?}"
    );

    // Stored while a resume elsewhere waits: that resume is accepted, from the start.
    let waiting = tokio::spawn(async move { other.resolve("s1", &start).await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!waiting.is_finished(), "waits while nothing is stored");
    writer
        .finish("s1", 9, bytes::Bytes::from_static(b"answer"))
        .await
        .expect("the answer stored");
    let got = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("accepted soon after the store")
        .expect("the task");
    assert_eq!(got, Ok((9, Cursor::After(0))));

    // Where the stream is written (tried and failed here: Redis refused), at once.
    let start = format!("{tag}-11-0");
    let mut paused = RedisServer::start();
    let writer = store(connect(&paused).await);
    paused.pause();
    let failed = writer
        .append_first("s1", 11, "7", bytes::Bytes::from_static(b"progress"))
        .await;
    paused.resume();
    assert!(failed.is_err(), "the first event's store failed");
    let began = std::time::Instant::now();
    assert_eq!(
        writer.resolve("s1", &start).await,
        Ok((11, Cursor::After(0)))
    );
    assert!(began.elapsed() < Duration::from_secs(1), "at once");
}

/// A resume accepted while Redis could not say whether its stream exists (paused), of a stream
/// Redis does not have and that this process does not write, ends its reader rather than
/// waiting forever: the client resumes again and is told the stream is lost. One the reader's
/// place says was stored (past an event of it) is lost, and ends within seconds; one never
/// seen stored (a resume from its start) first gives a writer elsewhere `UNSTORED_WAIT` to
/// store it. Before, the reader looked for the stream every half second, forever: the
/// two-replica Sentinel seed 3 saw such a resume carry keep-alives for 25 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_accepted_during_an_outage_ends_when_its_stream_is_not_there() {
    use fleetmcp::internals::{Cursor, EventStore, RedisEventStore, UNSTORED_WAIT};
    use futures_util::StreamExt;
    let mut redis = RedisServer::start();
    let store = RedisEventStore::new(connect(&redis).await, 100, 60_000, Duration::from_secs(30));
    let any = store
        .append("s1", 3, bytes::Bytes::from_static(b"x"))
        .await
        .expect("append");
    let tag = any.split('-').next().expect("a tag");

    for (seq, within) in [
        (4, Duration::ZERO..Duration::from_secs(5)),
        (0, UNSTORED_WAIT..UNSTORED_WAIT + Duration::from_secs(5)),
    ] {
        redis.pause();
        let resumed = store.resolve("s1", &format!("{tag}-9-{seq}")).await;
        redis.resume();
        assert_eq!(
            resumed,
            Ok((9, Cursor::After(seq))),
            "accepted while Redis could not say (event {seq})"
        );
        let began = std::time::Instant::now();
        let mut events = store.tail("s1", 9, Cursor::After(seq), Default::default());
        let next = tokio::time::timeout(within.end, events.next())
            .await
            .unwrap_or_else(|_| {
                panic!("the reader of a stream that is not there ends (event {seq}), rather than waiting forever")
            });
        assert!(next.is_none(), "nothing to deliver: {next:?}");
        let took = began.elapsed();
        assert!(
            within.contains(&took),
            "after event {seq}: ended after {took:?}, not within {within:?}"
        );
    }
}
