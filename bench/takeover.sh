#!/usr/bin/env bash
# bench/takeover.sh: how soon a session is served again after its holder stops, in
# distributed mode: two help-desk instances sharing a redis-server on loopback, a session
# opened on A, then A is stopped (SIGTERM, or SIGKILL) and the session's next requests go to B
# every 10 ms until one answers 200. Prints one markdown table (median and worst of ROUNDS).
#
# Environment (optional): ROUNDS=5, SKIP_BUILD=0, TTL_MS=30000, INTERVAL_MS=10000.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start takeover
ROUNDS="${ROUNDS:-5}"

now_ms() { date +%s%3N; }

start_desk() { # NAME PORT -> pid on stdout
  PORT="$2" MACHINE_ID="$1" REDIS_URL="redis://127.0.0.1:$REDIS_PORT" \
    FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback \
    FRONTMCP_HA_HEARTBEAT_INTERVAL_MS="${INTERVAL_MS:-10000}" FRONTMCP_HA_HEARTBEAT_TTL_MS="${TTL_MS:-30000}" \
    MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn \
    "$BIN" >"$WORK/$1.log" 2>&1 &
  echo $!
}

wait_healthy() { # PORT
  for _ in $(seq 200); do
    curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$1/healthz" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "instance on $1 did not start" >&2; exit 1
}

H=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
open_session() { # PORT -> session id
  curl -s -D - -o /dev/null "http://127.0.0.1:$1/mcp" "${H[@]}" \
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}' \
    | tr -d '\r' | sed -n 's/^mcp-session-id: //Ip'
}
call() { # PORT SID -> HTTP status
  curl -s -o /dev/null -w '%{http_code}' -m 10 "http://127.0.0.1:$1/mcp" "${H[@]}" \
    -H "mcp-session-id: $2" -H 'mcp-protocol-version: 2025-11-25' \
    -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"find_tickets","arguments":{}}}'
}

measure() { # SIGNAL -> ms from the signal to the first 200 on B
  local pa pb a b sid t0 code
  pa="$("$LOADGEN" free-port)"; pb="$("$LOADGEN" free-port)"
  a="$(start_desk "desk-a-$RANDOM" "$pa")"; BENCH_PIDS+=("$a")
  b="$(start_desk "desk-b-$RANDOM" "$pb")"; BENCH_PIDS+=("$b")
  wait_healthy "$pa"; wait_healthy "$pb"
  sid="$(open_session "$pa")"
  [[ "$(call "$pb" "$sid")" == 200 ]] || { echo "relay did not answer before the stop" >&2; exit 1; }
  t0="$(now_ms)"
  kill "-$1" "$a"
  wait "$a" 2>/dev/null || true
  while true; do
    code="$(call "$pb" "$sid")"
    [[ "$code" == 200 ]] && break
    (( $(now_ms) - t0 > 60000 )) && { echo "no 200 within 60 s after SIG$1" >&2; exit 1; }
    sleep 0.01
  done
  echo $(( $(now_ms) - t0 ))
  kill -TERM "$b" 2>/dev/null || true; wait "$b" 2>/dev/null || true
}

stats() { sort -n | awk '{v[NR]=$1} END {printf "%d | %d", v[int((NR+1)/2)], v[NR]}'; }

term=(); kill9=()
for _ in $(seq "$ROUNDS"); do
  term+=("$(measure TERM)")
  kill9+=("$(measure KILL)")
done
echo
echo "Session served again by another instance after its holder stopped ($ROUNDS rounds; heartbeat ${INTERVAL_MS:-10000}/${TTL_MS:-30000} ms; curl per request, so each figure includes one process start of curl)"
echo
echo "| holder stopped by | median ms | worst ms |"
echo "|---|--:|--:|"
echo "| SIGTERM | $(printf '%s\n' "${term[@]}" | stats) |"
echo "| SIGKILL | $(printf '%s\n' "${kill9[@]}" | stats) |"
