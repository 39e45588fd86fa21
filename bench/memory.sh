#!/usr/bin/env bash
# bench/memory.sh: what an idle session costs, in the process that holds it and in Redis.
# For each mode (MODES: `default`, one help-desk on Redis as a plain shared store; `distributed`,
# one distributed help-desk, which also indexes its sessions by holder), a help-desk on a fresh
# redis-server on loopback; N sessions are opened (initialize, notifications/initialized, one
# tools/call each, so that each is confirmed and tracked), then left idle. Prints one markdown
# row per mode: process RSS growth per session, Redis used_memory growth per session
# (everything the sessions made Redis keep: records, index entries, client-side caching's
# tracking entries, the per-key limit set), the MEMORY USAGE and length of one record, the
# MEMORY USAGE of the holder's index (every bucket, and the key that counts them) divided by N, and that of the per-key session counts
# (`limits.max_sessions_per_key`, on by default; every key under `mcp:limits:`, found by SCAN)
# divided by N.
#
# Two shapes of clients (CLIENTS): `one`, every session from one client (its cap raised to N so
# that every session is admitted); `each`, every session from a client of its own, the
# commonest shape behind a balancer (each user's laptop, counted by address: `X-Forwarded-For`
# 10.x.y.z, loopback trusted as the proxy; the cap left at its default).
#
# Environment (optional): SESSIONS=2000, MODES="default distributed", CLIENTS=one (or each),
# LIMITS=on (or off: the per-key session cap off, as before), SKIP_BUILD=0, PROFILE=release
# (or debug).
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start memory
SESSIONS="${SESSIONS:-2000}"
MODES="${MODES:-default distributed}"
LIMITS="${LIMITS:-on}"
CLIENTS="${CLIENTS:-one}"
per_key=0
[[ "$LIMITS" == on ]] && per_key=$((SESSIONS + 10))
clients_env=()
if [[ "$CLIENTS" == each ]]; then
  [[ "$LIMITS" == on ]] && per_key=1000
  clients_env=(FLEETMCP_CLIENT_ADDRESS_HEADER=x-forwarded-for FLEETMCP_TRUSTED_PROXIES=127.0.0.1)
fi

redis_used() { redis-cli -p "$REDIS_PORT" info memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}'; }

open_sessions() { # PORT COUNT FIRST-CLIENT -> prints the last session id
  python3 - "$1" "$2" "$3" "$CLIENTS" <<'PY'
import http.client, json, sys
port, n, first, clients = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
c = http.client.HTTPConnection("127.0.0.1", port)
sid = ""
for i in range(n):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if clients == "each":
        a = first + i
        h["X-Forwarded-For"] = f"10.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}"
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

measure() { # MODE -> one table row
  local mode="$1" port pid rss0 rss1 red0 red1 last record len index limit
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  port="$(free_port)"
  local extra=()
  [[ "$mode" == distributed ]] && extra=(FRONTMCP_DEPLOYMENT_MODE=distributed)
  env PORT="$port" MACHINE_ID=desk-a FLEETMCP_MAX_SESSIONS_PER_KEY="$per_key" \
    REDIS_URL="redis://127.0.0.1:$REDIS_PORT" "${extra[@]}" FRONTMCP_BIND_ADDRESS=loopback \
    "${clients_env[@]}" MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn \
    "$BIN" >"$WORK/desk-$mode.log" 2>&1 &
  pid=$!
  BENCH_PIDS+=("$pid")
  for _ in $(seq 200); do curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break; sleep 0.05; done
  # One warm-up session, so that one-time allocations are not counted per session.
  open_sessions "$port" 1 0 >/dev/null
  sleep 0.5
  rss0="$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")"; red0="$(redis_used)"
  last="$(open_sessions "$port" "$SESSIONS" 1)"
  sleep 0.5
  rss1="$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")"; red1="$(redis_used)"
  record="$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "mcp:session:$last")"
  len="$(redis-cli -p "$REDIS_PORT" STRLEN "mcp:session:$last")"
  # The holder's index: its buckets (session/index.rs) and their count.
  local buckets n used key
  buckets="$(redis-cli -p "$REDIS_PORT" GET mcp:node:desk-a:buckets)"
  index=0
  for key in mcp:node:desk-a:buckets mcp:node:desk-a:sessions \
    $(for n in $(seq 0 $(( ${buckets:-1} - 1 ))); do echo "mcp:node:desk-a:sessions:$n"; done); do
    used="$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "$key" SAMPLES 0)"
    index=$(( index + ${used:-0} ))
  done
  # The clients' session counts, every key under mcp:limits: (a bench may SCAN: nothing else
  # runs on this Redis).
  limit="$(redis-cli -p "$REDIS_PORT" EVAL "local m, cur = 0, '0'
repeat local r = redis.call('SCAN', cur, 'MATCH', 'mcp:limits:*', 'COUNT', 1000); cur = r[1]
for _, k in ipairs(r[2]) do m = m + redis.call('MEMORY', 'USAGE', k, 'SAMPLES', '0') end
until cur == '0' return m" 0)"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  echo "| $mode | $SESSIONS | ${#last} | $(( (rss1 - rss0) * 1024 / SESSIONS )) | $(( (red1 - red0) / SESSIONS )) | $record | $len | $(( ${index:-0} / (SESSIONS + 1) )) | $(( ${limit:-0} / (SESSIONS + 1) )) |"
}

echo
echo "| mode ($CLIENTS client$([[ "$CLIENTS" == each ]] && echo " a session")) | idle sessions | id length | process RSS per session B | Redis used_memory per session B | MEMORY USAGE of one record B | record length B | index per session B | per-key counts per session B |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
for mode in $MODES; do measure "$mode"; done
