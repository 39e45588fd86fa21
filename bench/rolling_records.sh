#!/usr/bin/env bash
# bench/rolling_records.sh: a rolling upgrade of the record form by hand (issue 37). OLD_BIN (a
# help-desk of a version before the compact records, e.g. main's built in another worktree) and
# this tree's help-desk (NEW) run in distributed mode on one redis-server (heartbeats of 300 ms);
# then OLD stops (SIGTERM); then OLD starts again (a downgrade). Prints, step by step, each
# session's record form (`full`: with `session.id`; `compact`: without), holder and length, and
# each call's status and answering machine.
#
# Environment: OLD_BIN (required), SKIP_BUILD=0, PROFILE=release (or debug).
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -x "${OLD_BIN:-}" ]] || { echo "[rolling_records] OLD_BIN must name an older help-desk" >&2; exit 1; }
bench_start rolling_records

start() { # BIN MACHINE PORT
  env PORT="$3" MACHINE_ID="$2" REDIS_URL="redis://127.0.0.1:$REDIS_PORT" \
    FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback \
    FRONTMCP_HA_HEARTBEAT_INTERVAL_MS=300 FRONTMCP_HA_HEARTBEAT_TTL_MS=1000 \
    FRONTMCP_HA_TAKEOVER_GRACE_MS=500 MCP_SESSION_SECRET="bench-secret-0123456789abcdef" \
    RUST_LOG=info "$1" >"$WORK/$2.log" 2>&1 &
  BENCH_PIDS+=("$!")
  echo "$!" >"$WORK/$2.pid"
  for _ in $(seq 200); do curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$3/readyz" 2>/dev/null && return 0; sleep 0.05; done
  echo "$2 not ready" >&2
  exit 1
}

mcp() { # open PORT -> session id | call PORT SID -> status machine
  python3 - "$@" <<'PY'
import http.client, json, sys
op, port = sys.argv[1], int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port)
h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
if op == "open":
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1.0"}}}), h)
    r = c.getresponse(); r.read(); sid = r.getheader("mcp-session-id")
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
              dict(h, **{"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}))
    c.getresponse().read()
    print(sid)
else:
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {}}}),
        dict(h, **{"mcp-session-id": sys.argv[3], "mcp-protocol-version": "2025-11-25"}))
    r = c.getresponse(); r.read()
    print(r.status, r.getheader("x-frontmcp-machine-id"))
PY
}

record() { # SID -> form holder length
  redis-cli -p "$REDIS_PORT" GET "mcp:session:$1" | python3 -c '
import json, sys
v = sys.stdin.read().strip()
r = json.loads(v) if v else None
print("gone" if r is None else ("full" if "id" in r["session"] else "compact"),
      "holder=" + (r["session"]["nodeId"] if r else "-"), "length=" + str(len(v)))'
}

old_port="$(free_port)"; new_port="$(free_port)"
start "$OLD_BIN" desk-old "$old_port"
start "$BIN" desk-new "$new_port"
echo "1. OLD and NEW beat together"
s1="$(mcp open "$new_port")"; echo "  s1 opened on NEW: $(record "$s1")"
echo "  s1 called on OLD: $(mcp call "$old_port" "$s1"); record: $(record "$s1")"
s2="$(mcp open "$old_port")"; echo "  s2 opened on OLD: $(record "$s2")"
echo "  s2 called on NEW: $(mcp call "$new_port" "$s2"); record: $(record "$s2")"
sleep 2.5
s3="$(mcp open "$new_port")"; echo "  s3 opened on NEW 2.5 s later (past a second reading): $(record "$s3")"
echo "  s3 called on OLD: $(mcp call "$old_port" "$s3"); record: $(record "$s3")"
echo "2. OLD stops (SIGTERM)"
kill -TERM "$(cat "$WORK/desk-old.pid")"
for _ in $(seq 100); do grep -q "every running instance reads compact" "$WORK/desk-new.log" && break; sleep 0.1; done
echo "  NEW logged the switch: $(grep -c "every running instance reads compact" "$WORK/desk-new.log")"
s4="$(mcp open "$new_port")"; echo "  s4 opened on NEW: $(record "$s4")"
echo "  s4 called on NEW: $(mcp call "$new_port" "$s4")"
echo "  s2 (OLD's) called on NEW: $(mcp call "$new_port" "$s2"); record: $(record "$s2")"
echo "3. a downgrade: OLD starts again"
old2_port="$(free_port)"
start "$OLD_BIN" desk-old2 "$old2_port"
echo "  s1 (full) called on OLD: $(mcp call "$old2_port" "$s1"); record: $(record "$s1")"
echo "  s4 (compact) called on OLD: $(mcp call "$old2_port" "$s4"); record: $(record "$s4")"
