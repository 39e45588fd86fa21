#!/usr/bin/env bash
# bench/memory.sh: what an idle session costs, in the process that holds it and in Redis.
# One distributed help-desk on a redis-server on loopback; N sessions are opened (initialize,
# notifications/initialized, one tools/call each, so that each is confirmed and tracked), then
# left idle. Prints one markdown table: process RSS growth per session, Redis used_memory growth
# per session (record, holder index entry, client-side caching's tracking entry), and the
# MEMORY USAGE of one session record.
#
# Environment (optional): SESSIONS=2000, SKIP_BUILD=0.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start memory
SESSIONS="${SESSIONS:-2000}"

PORT="$("$LOADGEN" free-port)"
PORT="$PORT" MACHINE_ID=desk-a FLEETMCP_MAX_SESSIONS_PER_KEY=0 REDIS_URL="redis://127.0.0.1:$REDIS_PORT" \
  FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback \
  MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn \
  "$BIN" >"$WORK/desk.log" 2>&1 &
DESK_PID=$!
BENCH_PIDS+=("$DESK_PID")
for _ in $(seq 100); do curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$PORT/readyz" 2>/dev/null && break; sleep 0.05; done

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$DESK_PID/status"; }
redis_used() { redis-cli -p "$REDIS_PORT" info memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}'; }

# One warm-up session, so that one-time allocations are not counted per session.
open_sessions() { # COUNT -> prints the last session id
  python3 - "$PORT" "$1" <<'PY'
import http.client, json, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port)
h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
sid = ""
for i in range(n):
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1.0"}}}), h)
    r = c.getresponse(); r.read(); sid = r.getheader("mcp-session-id")
    hs = dict(h, **{"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"})
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), hs)
    c.getresponse().read()
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {}}}), hs)
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
print(sid)
PY
}
open_sessions 1 >/dev/null
sleep 0.5
rss0="$(rss_kib)"; red0="$(redis_used)"
last="$(open_sessions "$SESSIONS")"
sleep 0.5
rss1="$(rss_kib)"; red1="$(redis_used)"
record="$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "mcp:session:$last")"
echo
echo "| idle sessions | id length | process RSS per session B | Redis used_memory per session B | MEMORY USAGE of one record B |"
echo "|--:|--:|--:|--:|--:|"
echo "| $SESSIONS | ${#last} | $(( (rss1 - rss0) * 1024 / SESSIONS )) | $(( (red1 - red0) / SESSIONS )) | $record |"
