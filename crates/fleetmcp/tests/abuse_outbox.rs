//! What a running request sends to a client that does not take it stays bounded: a handler
//! flooding progress notifications while its answer's stream is held up keeps at most
//! `http.max_outbox_*` of them queued (the oldest go, counted), and a streamed answer written
//! straight to its connection once Redis died (the `direct` line) makes its writer wait past
//! `http.max_unread_bytes`. Both answers still arrive once the client reads, and every
//! notification is either delivered or counted as dropped.

mod support;
mod support_redis;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fleetmcp::{NoArgs, RequestContext, Server, tool};
use serde_json::{Value, json};
use support::{Client, LATEST, SECRET, TestServer, config_from, config_with, serve, within};
use support_redis::RedisServer;
use tokio::sync::Notify;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Notifications the flood sends, each of about [`NOTE_BYTES`]: 200 MiB or so in all.
const NOTES: usize = 200_000;
const NOTE_BYTES: usize = 1024;
/// How much more memory the process may take while a flood is held up: far above the bounds
/// (1 MiB outbox, 4 MiB direct line, the socket buffers), far below the ~200 MiB the flood
/// would hold unbounded.
const RSS_MARGIN_KIB: u64 = 64 * 1024;

/// `VmRSS` of this process (the servers under test run in it), in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The server's count of notifications dropped from outboxes (`/metrics`).
async fn dropped(server: &TestServer) -> u64 {
    let text = within(
        "/metrics",
        support::http()
            .get(format!("{}/metrics", server.base))
            .send(),
    )
    .await
    .expect("/metrics")
    .text()
    .await
    .expect("/metrics body");
    text.lines()
        .find_map(|l| l.strip_prefix("fleetmcp_outbox_notifications_dropped_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no dropped count in /metrics:\n{text}"))
}

/// A POST on a raw socket whose receive buffer is 4 KiB, read only when the test says so: a
/// client that does not read its answer's stream.
async fn unread_post(addr: SocketAddr, headers: &[(&str, &str)], body: &Value) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    // Set before connecting, so the kernel does not grow it (receive-buffer autotuning).
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut s = within("connect", socket.connect(addr))
        .await
        .expect("connect");
    let body = body.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.expect("head");
    s.write_all(body.as_bytes()).await.expect("body");
    s
}

/// Reads the stream until its bytes hold `answer` (the final answer's text): how many
/// progress notifications came before it. Fails if the stream ends or stalls for 10 s first.
async fn read_to_answer(s: &mut TcpStream, answer: &str) -> usize {
    const NAME: &[u8] = b"notifications/progress";
    let needle = format!("\"text\":\"{answer}\"");
    assert!(needle.len() < NAME.len());
    // The bytes read last, after the tail of those before (shorter than either string, so an
    // occurrence is counted once, split between two reads or not).
    let mut window = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut notes = 0;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("the stream stalled before its answer")
            .expect("read");
        assert!(n > 0, "the stream ended before its answer");
        window.extend_from_slice(&buf[..n]);
        notes += window.windows(NAME.len()).filter(|w| *w == NAME).count();
        if memchr::memmem::find(&window, needle.as_bytes()).is_some() {
            return notes;
        }
        window.drain(..window.len().saturating_sub(NAME.len() - 1));
    }
}

/// Waits (at most 60 s) until `done` stops moving for a second or reaches `all`; its value.
async fn settled(done: &AtomicUsize, all: usize) -> usize {
    let mut last = usize::MAX;
    for _ in 0..60 {
        let now = done.load(Ordering::SeqCst);
        if now == all || now == last {
            return now;
        }
        last = now;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("the flood neither finished nor settled within 60 s");
}

/// Sends [`NOTES`] progress notifications from a task of its own (as fast as it can, never
/// waiting on its stream), counting them in `sent`.
async fn flood(ctx: RequestContext, sent: Arc<AtomicUsize>) {
    let pad = "x".repeat(NOTE_BYTES);
    for i in 0..NOTES {
        ctx.progress(i as f64, Some(NOTES as f64), Some(&pad));
        if i % 1000 == 999 {
            sent.store(i + 1, Ordering::SeqCst);
            tokio::task::yield_now().await;
        }
    }
    sent.store(NOTES, Ordering::SeqCst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_progress_is_bounded_while_its_stream_is_not_read() {
    let sent = Arc::new(AtomicUsize::new(0));
    let counted = sent.clone();
    let builder = Server::builder("abuse-outbox", "1.0.0").tool(
        tool("flood")
            .description("Sends 200,000 progress notifications of 1 KiB from a task")
            .handler(move |_: NoArgs, ctx: RequestContext| {
                let sent = counted.clone();
                async move {
                    let task = tokio::spawn(flood(ctx, sent));
                    task.await
                        .map_err(|e| fleetmcp::ToolError::failed(e.to_string()))?;
                    Ok("flooded")
                }
            }),
    );
    let server = serve(
        builder,
        config_with(SECRET, |c| c.http.write_timeout_ms = 120_000),
    )
    .await;
    let before = rss_kib();
    // A 2026-07-28 call whose SSE answer the client does not read: the answer's pump waits on
    // the connection's queue, and the handler's task sends on regardless.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": "p"
    });
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "flood", "arguments": {}, "_meta": meta}});
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "flood"),
    ];
    let mut s = unread_post(server.addr, &headers, &body).await;
    assert_eq!(
        settled(&sent, NOTES).await,
        NOTES,
        "the flood ran to its end"
    );
    let grown = rss_kib().saturating_sub(before);
    let dropped = dropped(&server).await;
    assert!(
        grown < RSS_MARGIN_KIB,
        "the process grew {grown} KiB while the flood was held (dropped {dropped})"
    );
    // The client reads: what was kept, then the answer.
    let delivered = within_long(read_to_answer(&mut s, "flooded")).await;
    eprintln!("flood held: +{grown} KiB, {dropped} dropped, {delivered} delivered");
    assert_eq!(
        delivered as u64 + dropped,
        NOTES as u64,
        "every notification was delivered or counted as dropped ({delivered} delivered)"
    );
    assert!(
        delivered < NOTES / 10,
        "most of the flood was dropped, not held: {delivered} delivered"
    );
}

/// Awaits `f` for at most 60 s (a stream of a few MiB read through a 4 KiB window).
async fn within_long<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("within 60 s")
}

/// Bursts the `burst` tool sends once told to, each of [`BURST`] notes of [`NOTE_BYTES`]:
/// 100 MiB or so in all.
const BURSTS: usize = 100;
const BURST: usize = 1000;

/// A server over `redis_url` whose tool `burst` sends one progress notification, waits for
/// `go`, then sends [`BURSTS`] bursts, yielding after each (counted in `bursts`).
async fn burst_server(
    redis_url: &str,
    write_timeout_ms: u64,
    go: Arc<Notify>,
    bursts: Arc<AtomicUsize>,
) -> TestServer {
    let cfg = config_from(
        &[("MCP_SESSION_SECRET", SECRET), ("REDIS_URL", redis_url)],
        |c| {
            c.redis
                .as_mut()
                .expect("REDIS_URL configures redis")
                .command_timeout_ms = 500;
            c.http.write_timeout_ms = write_timeout_ms;
        },
    );
    let builder = Server::builder("abuse-direct", "1.0.0").tool(
        tool("burst")
            .description("One progress note, then 100 bursts of 1,000 once told to")
            .handler(move |_: NoArgs, ctx: RequestContext| {
                let (go, bursts) = (go.clone(), bursts.clone());
                async move {
                    ctx.progress(0.0, None, Some("started"));
                    go.notified().await;
                    let pad = "x".repeat(NOTE_BYTES);
                    for b in 0..BURSTS {
                        for i in 0..BURST {
                            ctx.progress((b * BURST + i) as f64, None, Some(&pad));
                        }
                        bursts.store(b + 1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                    }
                    Ok("burst done")
                }
            }),
    );
    serve(builder, cfg).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_whose_store_died_waits_for_a_client_that_does_not_read() {
    let mut redis = RedisServer::start();
    let go = Arc::new(Notify::new());
    let bursts = Arc::new(AtomicUsize::new(0));
    let server = burst_server(&redis.url(), 120_000, go.clone(), bursts.clone()).await;
    let before = rss_kib();
    let mut s = burst_unread(&server, &mut redis, &go).await;
    let done = settled(&bursts, BURSTS).await;
    let grown = rss_kib().saturating_sub(before);
    let dropped = dropped(&server).await;
    assert!(
        grown < RSS_MARGIN_KIB,
        "the process grew {grown} KiB while the client did not read ({done} bursts ran)"
    );
    assert!(
        done < BURSTS / 2,
        "the handler was held back while its client did not read: {done} of {BURSTS} bursts ran"
    );
    // The client reads: everything kept, then the answer, straight from the connection.
    let delivered = within_long(read_to_answer(&mut s, "burst done")).await;
    eprintln!(
        "direct line held: +{grown} KiB, {done} bursts ran; {dropped} dropped, {delivered} delivered"
    );
    let sent = 1 + BURSTS * BURST;
    let dropped = self::dropped(&server).await;
    assert_eq!(
        delivered as u64 + dropped,
        sent as u64,
        "every notification was delivered or counted as dropped ({delivered} delivered)"
    );
}

/// Calls `burst` on a new session of `server` from a client that does not read, then kills
/// Redis and sets the flood off: every message goes straight to a connection nobody reads.
async fn burst_unread(server: &TestServer, redis: &mut RedisServer, go: &Notify) -> TcpStream {
    let client = Client::connect_with(&server.mcp, LATEST, json!({})).await;
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "burst", "arguments": {}, "_meta": {"progressToken": "b"}}});
    let headers = [
        ("mcp-session-id", client.session_id()),
        ("mcp-protocol-version", LATEST),
    ];
    let s = unread_post(server.addr, &headers, &body).await;
    // The answer streams through the store first (its first note).
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.kill();
    go.notify_one();
    s
}

/// The writer's wait is bounded by the connection: a client that never reads has it closed at
/// `http.write_timeout_ms`, and the handler then runs to its end (its messages have nowhere
/// to go; the answer is stored for a resume once the store is back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_held_by_a_client_that_never_reads_goes_on_once_its_connection_closes() {
    let mut redis = RedisServer::start();
    let go = Arc::new(Notify::new());
    let bursts = Arc::new(AtomicUsize::new(0));
    let server = burst_server(&redis.url(), 1000, go.clone(), bursts.clone()).await;
    let before = rss_kib();
    let mut s = burst_unread(&server, &mut redis, &go).await;
    let mut all = bursts.load(Ordering::SeqCst);
    for _ in 0..60 {
        all = bursts.load(Ordering::SeqCst);
        if all == BURSTS {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        all, BURSTS,
        "the handler ran to its end once the connection closed"
    );
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < RSS_MARGIN_KIB, "the process grew {grown} KiB");
    // The connection was closed under the stalled stream.
    let mut buf = vec![0u8; 256 * 1024];
    let read = within_long(async {
        let mut n = 0;
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return n,
                Ok(k) => n += k,
            }
        }
    })
    .await;
    assert!(read > 0, "the stream had begun before it was closed");
}
