#!/usr/bin/env bash
# bench/limits.sh: what the rate and concurrency limits cost in Redis round trips. One
# help-desk on a redis-server (loopback), one session, CALLS sequential `tools/call
# find_tickets` on one keep-alive connection; Redis's `INFO commandstats` is reset after the
# session is open and read after the calls, so the table counts the calls' commands only.
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
cli("CONFIG", "RESETSTAT")
t = time.perf_counter()
for i in range(calls):
    r, body = post({"jsonrpc": "2.0", "id": i + 2, "method": "tools/call", "params": {"name": "find_tickets", "arguments": {}}}, s)
    if r.status != 200 or b'"result"' not in body:
        sys.exit(f"{name}: call {i} failed: {r.status} {body[:200]!r}")
elapsed = time.perf_counter() - t
time.sleep(0.3)  # a slot's release is sent in the background
total, scripts, detail = 0, 0, []
for line in cli("INFO", "commandstats").splitlines():
    if not line.startswith("cmdstat_"): continue
    cmd, rest = line[len("cmdstat_"):].split(":", 1)
    n = int(rest.split("calls=")[1].split(",")[0])
    if cmd in ("config", "info"): continue
    total += n; detail.append(f"{cmd} {n}")
    if cmd in ("evalsha", "eval"): scripts += n
print(f"| {name} | {calls} | {total} | {total / calls:.3f} | {scripts / calls:.3f} | {', '.join(sorted(detail)) or '-'} | {elapsed / calls * 1e6:.0f} |")
PY
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

echo
echo "| limits | calls | Redis commands | commands per call | scripts per call | commands | µs per call (one client, sequential) |"
echo "|---|--:|--:|--:|--:|---|--:|"
run_one none
run_one rate FLEETMCP_RATE_LIMIT=1000000/1000
run_one rate+tool FLEETMCP_RATE_LIMIT=1000000/1000 FLEETMCP_CONFIG="$WORK/tool.toml"
run_one rate+inflight-per-key FLEETMCP_RATE_LIMIT=1000000/1000 FLEETMCP_MAX_INFLIGHT_PER_KEY=100
