#!/usr/bin/env bash
# bench/idle.sh: what an idle fleet costs Redis, per instance, as the fleet grows.
# For each N in COUNTS, N distributed help-desks (default settings, RUST_LOG=warn, one tokio
# worker each) start on one fresh redis-server on loopback and are left idle: no client, no
# session. Once every one is ready and its orphan scanner has begun (an interval plus the
# takeover grace after its start), Redis's command counters are reset, and WINDOW_S seconds
# later read (`INFO commandstats`, where a command run inside a script counts too). Prints one
# markdown row per N: Redis commands per second per instance, the commands among them that
# cost most, and Redis connections per instance. A fleet whose cost per instance grows with N
# does work that grows with the square of its size.
#
# Environment (optional): COUNTS="2 20 50", WINDOW_S=20, SKIP_BUILD=0, PROFILE=release.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start idle
COUNTS="${COUNTS:-2 20 50}"
WINDOW_S="${WINDOW_S:-20}"
# The defaults' heartbeat interval and takeover grace: the scanners' first runs come after both.
SETTLE_S=16

stats() { redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r'; }

measure() { # N -> one table row
  local n="$1" i port pids=() ports=()
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  for i in $(seq "$n"); do
    port="$(free_port)"
    env PORT="$port" MACHINE_ID="idle-$i" REDIS_URL="redis://127.0.0.1:$REDIS_PORT" \
      FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback \
      MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn TOKIO_WORKER_THREADS=1 \
      "$BIN" >"$WORK/idle-$n-$i.log" 2>&1 &
    pids+=("$!")
    ports+=("$port")
    BENCH_PIDS+=("$!")
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 300); do curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break; sleep 0.1; done
  done
  sleep "$SETTLE_S"
  redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
  sleep "$WINDOW_S"
  local snapshot clients
  snapshot="$(stats)"
  clients="$(redis-cli -p "$REDIS_PORT" info clients | tr -d '\r' | awk -F: '/^connected_clients:/ {print $2}')"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # The bench's own `INFO` and `CONFIG` are left out.
  awk -F'[:,=]' -v n="$n" -v w="$WINDOW_S" -v c="$clients" '
    /^cmdstat_/ {
      name = substr($1, 9)
      if (name == "info" || name == "config") next
      total += $3; calls[name] = $3
    }
    END {
      top = ""
      for (k = 0; k < 4; k++) {
        best = ""; bn = 0
        for (name in calls) if (calls[name] > bn) { best = name; bn = calls[name] }
        if (best == "") break
        top = top sprintf("%s%s %.2f", (top == "" ? "" : ", "), toupper(best), bn / w / n)
        delete calls[best]
      }
      printf "| %d | %.1f | %.2f | %s | %.1f |\n", n, total / w, total / w / n, top, (c - 1) / n
    }' <<<"$snapshot"
}

echo
echo "| idle instances | Redis commands/s | per instance | most per instance /s | Redis connections per instance |"
echo "|--:|--:|--:|---|--:|"
for n in $COUNTS; do measure "$n"; done
