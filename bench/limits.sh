#!/usr/bin/env bash
# bench/limits.sh: what the rate and concurrency limits cost in Redis round trips. One
# help-desk on a redis-server (loopback), one session, CALLS sequential `tools/call
# find_tickets` on one keep-alive connection; Redis's MONITOR runs from after the session is
# open until after the calls, so the table counts the calls' commands only: those the instance
# sent (each a round trip) and those run inside its scripts (no round trip of their own).
# One row per configuration: no limits, a rate limit, a rate and a per-tool limit, and a rate
# with a limit on requests in flight per key.
#
# Environment (optional): CALLS=2000, SKIP_BUILD=0.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start limits
CALLS="${CALLS:-2000}"

cat >"$WORK/tool.toml" <<'TOML'
[limits.tools.find_tickets]
requests = 1000000
window_ms = 1000
TOML

# One configuration: NAME, then VAR=VALUE settings for the instance.
run_one() {
  local name="$1"; shift
  local port; port="$("$LOADGEN" free-port)"
  env "$@" PORT="$port" REDIS_URL="redis://127.0.0.1:$REDIS_PORT" \
    MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn \
    "$BIN" >"$WORK/$name.log" 2>&1 &
  local pid=$!
  BENCH_PIDS+=("$pid")
  python3 - "$port" "$REDIS_PORT" "$CALLS" "$name" <<'PY'
import http.client, json, subprocess, sys, time
port, redis_port, calls, name = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
def cli(*args):
    return subprocess.run(["redis-cli", "-p", redis_port, *args], capture_output=True, text=True, check=True).stdout
for _ in range(100):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5); c.request("GET", "/readyz")
        if c.getresponse().status == 200: break
    except OSError: pass
    time.sleep(0.1)
else:
    sys.exit(f"{name}: the instance did not become ready")
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
def post(msg, extra=None):
    conn.request("POST", "/mcp", json.dumps(msg), {**headers, **(extra or {})})
    r = conn.getresponse(); body = r.read()
    return r, body
r, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
sid = r.getheader("mcp-session-id")
s = {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
post({"jsonrpc": "2.0", "method": "notifications/initialized"}, s)
# One call first, so the session's record is confirmed and cached (as for any session in use).
post({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "find_tickets", "arguments": {}}}, s)
# Every command Redis runs from now on, as MONITOR reports it: a client's (one round trip
# each) as `[0 127.0.0.1:<port>]`, one run inside a script as `[0 lua]`.
mon = subprocess.Popen(["stdbuf", "-oL", "redis-cli", "-p", redis_port, "monitor"], stdout=subprocess.PIPE, text=True)
assert mon.stdout.readline().strip() == "OK"
for i in range(calls):
    r, body = post({"jsonrpc": "2.0", "id": i + 2, "method": "tools/call", "params": {"name": "find_tickets", "arguments": {}}}, s)
    if r.status != 200 or b'"result"' not in body:
        sys.exit(f"{name}: call {i} failed: {r.status} {body[:200]!r}")
time.sleep(0.3)  # a place in flight is freed in the background
cli("ECHO", "bench-end")
out = []
for line in mon.stdout:
    if '"ECHO" "bench-end"' in line: break
    out.append(line)
mon.terminate()
trips, inside, kinds = 0, 0, {}
for line in out:
    if "] \"" not in line: continue
    who, cmd = line.split("] \"", 1)
    cmd = cmd.split("\"", 1)[0].upper()
    if who.endswith("lua"):
        inside += 1
    else:
        trips += 1
        kinds[cmd] = kinds.get(cmd, 0) + 1
detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "-"
print(f"| {name} | {calls} | {trips} | {trips / calls:.3f} | {detail} | {inside / calls:.1f} |")
PY
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

echo
echo "| limits | calls | Redis round trips | round trips per call | commands sent | commands run inside the script, per call |"
echo "|---|--:|--:|--:|---|--:|"
run_one none
run_one rate FLEETMCP_RATE_LIMIT=1000000/1000
run_one rate+tool FLEETMCP_RATE_LIMIT=1000000/1000 FLEETMCP_CONFIG="$WORK/tool.toml"
run_one rate+inflight-per-key FLEETMCP_RATE_LIMIT=1000000/1000 FLEETMCP_MAX_INFLIGHT_PER_KEY=100
