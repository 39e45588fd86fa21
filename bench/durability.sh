#!/usr/bin/env bash
# bench/durability.sh: what waiting for a replica costs `initialize` (FLEETMCP_REDIS_WAIT_REPLICAS).
# A master and its replica on loopback, three sentinels watching them, one help-desk in
# distributed mode finding Redis through the sentinels. N sequential `initialize` requests with
# curl, for each setting in turn; prints one markdown table of curl's time_total (p50, p90, p99).
# A held session's calls never wait for replicas, so only `initialize` is measured.
#
# Environment (optional): N=300, SKIP_BUILD=0, SETTINGS="off auto".
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start durability
N="${N:-300}"
MASTER=bench-master

# The replica, and three sentinels (quorum 2) watching the master bench_start started.
REPLICA_PORT="$("$LOADGEN" free-port)"
redis-server --port "$REPLICA_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
  --replicaof 127.0.0.1 "$REDIS_PORT" --daemonize yes --pidfile "$WORK/replica.pid" >/dev/null
for _ in $(seq 100); do
  redis-cli -p "$REPLICA_PORT" info replication 2>/dev/null | grep -q master_link_status:up && break
  sleep 0.1
done
SENTINELS=()
for i in 1 2 3; do
  port="$("$LOADGEN" free-port)"
  printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %s 2\nsentinel down-after-milliseconds %s 1000\n' \
    "$port" "$WORK" "$MASTER" "$REDIS_PORT" "$MASTER" >"$WORK/sentinel-$i.conf"
  redis-server "$WORK/sentinel-$i.conf" --sentinel --daemonize yes --pidfile "$WORK/sentinel-$i.pid" \
    --logfile "$WORK/sentinel-$i.log" >/dev/null
  SENTINELS+=("127.0.0.1:$port")
done
stop_extra() {
  for f in "$WORK"/replica.pid "$WORK"/sentinel-*.pid; do
    [[ -f "$f" ]] && kill "$(cat "$f")" 2>/dev/null || true
  done
}
trap 'stop_extra; bench_cleanup' EXIT
for _ in $(seq 100); do
  redis-cli -p "${SENTINELS[0]##*:}" sentinel replicas "$MASTER" 2>/dev/null | grep -q "$REPLICA_PORT" && break
  sleep 0.1
done

H=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}'

echo "| wait_replicas | initialize p50 | p90 | p99 | non-200 |"
echo "|---|--:|--:|--:|--:|"
for setting in ${SETTINGS:-off auto}; do
  PORT="$("$LOADGEN" free-port)"
  PORT="$PORT" MACHINE_ID="bench-$setting" REDIS_SENTINELS="$(IFS=,; echo "${SENTINELS[*]}")" \
    REDIS_SENTINEL_MASTER="$MASTER" FLEETMCP_REDIS_WAIT_REPLICAS="$setting" \
    FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback \
    MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn \
    "$BIN" >"$WORK/desk-$setting.log" 2>&1 &
  pid=$!
  BENCH_PIDS+=("$pid")
  for _ in $(seq 200); do
    curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$PORT/readyz" 2>/dev/null && break
    sleep 0.05
  done
  # Warm up, then measure.
  for _ in $(seq 20); do curl -s -o /dev/null "http://127.0.0.1:$PORT/mcp" "${H[@]}" -d "$INIT"; done
  for _ in $(seq "$N"); do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "http://127.0.0.1:$PORT/mcp" "${H[@]}" -d "$INIT"
  done >"$WORK/times-$setting.txt"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  bad=$(awk '$1 != 200' "$WORK/times-$setting.txt" | wc -l)
  awk '{ printf "%.3f\n", $2 * 1000 }' "$WORK/times-$setting.txt" | sort -n >"$WORK/sorted-$setting.txt"
  pct() { sed -n "$(( ($(wc -l <"$WORK/sorted-$setting.txt") * $1 + 99) / 100 ))p" "$WORK/sorted-$setting.txt"; }
  echo "| $setting | $(pct 50) ms | $(pct 90) ms | $(pct 99) ms | $bad |"
done
