#!/usr/bin/env bash
# bench/invalidations.sh: what one session record write costs the fleet in client-side caching
# invalidations (issue 37, docs/CAPACITY.md "Client-side caching's invalidations"). Starts
# INSTANCES distributed help-desks on one redis-server, opens SESSIONS sessions round robin,
# then writes records three ways: WRITES expiry changes from outside (redis-cli PEXPIRE on
# random records), and a DELETE of half the sessions at their holders. For each step it prints
# the invalidation keys the instances were told of (the sum of their
# `fleetmcp_session_invalidations_total`) per record write, and Redis's output bytes per write
# (`INFO stats` `total_net_output_bytes`: pushes plus the writers' own replies). Before issue
# 37's fix every instance was told of every write (I or I - 1 keys a write); after it, the
# holder alone (1 or 0: its own writes are not echoed, NOLOOP).
#
# Environment (all optional):
#   INSTANCES=10 SESSIONS=2000 WRITES=2000
#   PROFILE=debug        or release; SKIP_BUILD=1 uses what is built
#   BEFORE_BIN=          another help-desk build, measured the same way first
# Requirements: redis-server, redis-cli, curl, python3.
set -euo pipefail

USER_BIN="${BIN:-}"
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require invalidations redis-server redis-cli curl python3
PROFILE="${PROFILE:-debug}" bench_start invalidations
BIN="${USER_BIN:-$BIN}"
INSTANCES="${INSTANCES:-10}"
SESSIONS="${SESSIONS:-2000}"
WRITES="${WRITES:-2000}"
SECRET="bench-secret-0123456789abcdef"
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }

# The sum of every instance's invalidation counter.
told() {
  local sum=0 n port
  for port in "${PORTS[@]}"; do
    n="$(curl -fsS -m 5 "http://127.0.0.1:$port/metrics" |
      sed -n 's/^fleetmcp_session_invalidations_total \([0-9.e+]*\)$/\1/p')"
    sum="$(python3 -c "print(int($sum + float('${n:-0}')))")"
  done
  echo "$sum"
}
out_bytes() { rcli INFO stats | sed -n 's/^total_net_output_bytes:\([0-9]*\).*/\1/p'; }

# Prints one line: STEP, writes, keys told a write, Redis output bytes a write.
step() { # NAME WRITES TOLD_BEFORE BYTES_BEFORE
  sleep 1 # let the last pushes land
  local told_now bytes_now
  told_now="$(told)"; bytes_now="$(out_bytes)"
  python3 -c "w=$2; print(f'| $LABEL | $1 | {w} | {($told_now-$3)/w:.2f} | {($bytes_now-$4)/w:.0f} |')"
}

measure() { # BIN LABEL
  local bin="$1" i port
  LABEL="$2"
  rcli FLUSHALL >/dev/null
  PORTS=(); PIDS=()
  for i in $(seq 0 $((INSTANCES - 1))); do
    port="$(free_port)"
    env REDIS_URL="redis://127.0.0.1:$REDIS_PORT" PORT="$port" MACHINE_ID="desk-$i" \
      FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback \
      FLEETMCP_MAX_SESSIONS_PER_KEY=0 MCP_SESSION_SECRET="$SECRET" RUST_LOG=warn \
      TOKIO_WORKER_THREADS=1 "$bin" >"$WORK/desk-$i.log" 2>&1 &
    PIDS+=($!); BENCH_PIDS+=($!); PORTS+=("$port")
  done
  for port in "${PORTS[@]}"; do wait_healthy "$port"; done
  for _ in $(seq 100); do
    [[ "$(rcli INFO clients | sed -n 's/^tracking_clients:\([0-9]*\).*/\1/p')" == "$INSTANCES" ]] && break
    sleep 0.1
  done
  local t0 b0
  t0="$(told)"; b0="$(out_bytes)"
  python3 - "$WORK/ids" "$SESSIONS" "${PORTS[@]}" <<'EOF'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
out, n, ports = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
H = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
def post(port, body, sid=None):
    h = dict(H)
    if sid:
        h.update({"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"})
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", json.dumps(body).encode(), h)
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
        return r.headers.get("mcp-session-id")
def open_one(i):
    port = ports[i % len(ports)]
    sid = post(port, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}})
    post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    return f"{port} {sid}"
with ThreadPoolExecutor(16) as ex:
    lines = list(ex.map(open_one, range(n)))
open(out, "w").write("\n".join(lines) + "\n")
EOF
  step "initialize (record created)" "$SESSIONS" "$t0" "$b0"
  t0="$(told)"; b0="$(out_bytes)"
  shuf -r -n "$WRITES" "$WORK/ids" | awk '{print "PEXPIRE mcp:session:" $2 " 3600000"}' |
    rcli >/dev/null
  step "PEXPIRE from outside" "$WRITES" "$t0" "$b0"
  t0="$(told)"; b0="$(out_bytes)"
  local half=$((SESSIONS / 2))
  head -n "$half" "$WORK/ids" | while read -r port sid; do
    curl -fsS -m 10 -o /dev/null -X DELETE "http://127.0.0.1:$port/mcp" \
      -H "mcp-session-id: $sid" -H "mcp-protocol-version: 2025-11-25"
  done
  step "DELETE at the holder" "$half" "$t0" "$b0"
  for i in "${PIDS[@]}"; do kill "$i" 2>/dev/null || true; done
  for i in "${PIDS[@]}"; do wait "$i" 2>/dev/null || true; done
}

echo "| build | step | writes | invalidation keys told a write | Redis output bytes a write |"
echo "|---|---|--:|--:|--:|"
[[ -n "${BEFORE_BIN:-}" ]] && measure "$BEFORE_BIN" before
measure "$BIN" after
