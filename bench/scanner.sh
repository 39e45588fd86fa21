#!/usr/bin/env bash
# bench/scanner.sh: how long the orphan scanner takes to claim a dead instance's sessions.
# A redis-server on loopback is filled with SESSIONS session records held by "ghost", an
# instance that is gone (no heartbeat, nobody on its channel) but still listed in
# mcp:ha:nodes with its index of sessions (in buckets, mcp:node:ghost:sessions:<n>, as this
# version writes it; LAYOUT=single: one sorted set, mcp:node:ghost:sessions, as versions before
# the buckets did, which this one still claims); then one distributed help-desk starts, and its
# scanner's first run claims them. Prints one markdown table: the scanner's own time for the
# claim (from its log line), and the time from the instance's start until every record in
# Redis names it.
#
# Environment (optional): SESSIONS=10000, SKIP_BUILD=0, INTERVAL_MS=1000.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start scanner
SESSIONS="${SESSIONS:-10000}"
INTERVAL_MS="${INTERVAL_MS:-1000}"
LAYOUT="${LAYOUT:-buckets}"

# The dead instance's sessions, index and entry in the fleet's list, as a live one leaves them.
python3 - "$SESSIONS" "$LAYOUT" >"$WORK/fill.txt" <<'PY'
import json, sys, time
n = int(sys.argv[1]); layout = sys.argv[2]; now = int(time.time() * 1000)
def bucket_of(sid, count):  # FNV-1a, as session/index.rs
    h = 0x811c9dc5
    for b in sid.encode():
        h = ((h ^ b) * 0x01000193) & 0xffffffff
    return h & (count - 1)
buckets = 1
while buckets * 64 < n:
    buckets *= 2
def cmd(*args):
    out = [f"*{len(args)}"]
    for a in args:
        b = str(a).encode()
        out += [f"${len(b)}", str(a)]
    sys.stdout.write("\r\n".join(out) + "\r\n")
for i in range(n):
    sid = f"bench-session-{i:08d}"
    rec = {"session": {"id": sid, "protocol": "streamable-http", "createdAt": now, "nodeId": "ghost"},
           "createdAt": now, "lastAccessedAt": now, "initialized": True,
           "protocolVersion": "2025-11-25", "clientInfo": {"name": "bench", "version": "0"},
           "clientCapabilities": {}, "epoch": 1}
    cmd("SET", f"mcp:session:{sid}", json.dumps(rec, separators=(",", ":")), "PX", 3600000)
    if layout == "single":
        cmd("ZADD", "mcp:node:ghost:sessions", now, sid)
    else:
        cmd("ZADD", f"mcp:node:ghost:sessions:{bucket_of(sid, buckets)}", now, sid)
if layout != "single":
    cmd("SET", "mcp:node:ghost:buckets", buckets)
cmd("ZADD", "mcp:ha:nodes", now - 60000, "ghost")
PY
redis-cli -p "$REDIS_PORT" --pipe <"$WORK/fill.txt" >/dev/null
redis-cli -p "$REDIS_PORT" config resetstat >/dev/null

PORT="$(free_port)"
START_MS="$(date +%s%3N)"
PORT="$PORT" MACHINE_ID=desk-b FLEETMCP_MAX_SESSIONS_PER_KEY=0 REDIS_URL="redis://127.0.0.1:$REDIS_PORT" \
  FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback \
  FRONTMCP_HA_HEARTBEAT_INTERVAL_MS="$INTERVAL_MS" FRONTMCP_HA_TAKEOVER_GRACE_MS=1 \
  MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=info \
  "$BIN" >"$WORK/desk-b.log" 2>&1 &
DESK_PID=$!
BENCH_PIDS+=("$DESK_PID")

done_ms=""
for _ in $(seq 4000); do
  # The ghost leaves the fleet's list once its index is empty.
  listed="$(redis-cli -p "$REDIS_PORT" ZSCORE mcp:ha:nodes ghost)"
  if [[ -z "$listed" ]]; then done_ms="$(date +%s%3N)"; break; fi
  sleep 0.05
done
commands="$(redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' | awk -F'[:,=]' '
  /^cmdstat_/ && $1 !~ /^cmdstat_(zscore|info|config)$/ {n += $3} END {print n + 0}')"
[[ -n "$done_ms" ]] || { echo "the scanner did not claim every session; log:" >&2; tail -20 "$WORK/desk-b.log" >&2; exit 1; }
sample="$(redis-cli -p "$REDIS_PORT" GET mcp:session:bench-session-00000042)"
[[ "$sample" == *'"nodeId":"desk-b"'* ]] || { echo "a claimed record does not name the claimer: $sample" >&2; exit 1; }
line="$(grep -a 'claimed the sessions of a dead node' "$WORK/desk-b.log" | tail -1)"
scan_ms="$(sed -n 's/.*elapsed_ms=\([0-9]*\).*/\1/p' <<<"$line")"
claimed="$(sed -n 's/.*claimed=\([0-9]*\).*/\1/p' <<<"$line")"
echo
echo "| dead instance's index | sessions of the dead instance | claimed by one scan | scanner's claim time ms | start of the instance to all claimed ms (first run waits ${INTERVAL_MS} ms) | Redis commands | per session |"
echo "|---|--:|--:|--:|--:|--:|--:|"
echo "| $LAYOUT | $SESSIONS | $claimed | $scan_ms | $((done_ms - START_MS)) | $commands | $(awk -v c="$commands" -v n="$SESSIONS" 'BEGIN {printf "%.2f", c / n}') |"
