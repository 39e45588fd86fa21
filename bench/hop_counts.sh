#!/usr/bin/env bash
# bench/hop_counts.sh: instructions per call of a relayed call's two processes, counted by
# callgrind, so that a change to the relay hop is seen whatever else the machine runs (latency
# on a shared machine is not; see docs/BENCHMARKS.md, "What a relayed call's hop costs").
#
# Two distributed help-desks and a redis-server, both under `valgrind --tool=callgrind`; one
# session opened on the first (the holder), its calls (`tools/call find_tickets {}`, one at a
# time) sent to the holder itself (`holder`) or to the second, which relays them (`relayed`).
# After WARMUP seconds the counts are zeroed, WINDOW seconds later dumped, and divided by the
# calls each instance counted in `fleetmcp_requests_total` over that window. Prints one line per
# mode and binary, and how much of each count is SHA-256 (valgrind's CPU has no SHA extensions,
# so it runs in software there; on a CPU with them it is a far smaller share).
#
# Environment (all optional):
#   BIN=target/release/help-desk   the help-desk binary (built first unless SKIP_BUILD=1)
#   BEFORE_BIN=                    another build, measured the same way first
#   MODES="holder relayed"         which calls to count
#   WARMUP=6 WINDOW=12             seconds
# Requirements: valgrind (callgrind_control, callgrind_annotate), redis-server, curl.
set -euo pipefail

USER_BIN="${BIN:-}"
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require hop_counts valgrind callgrind_control callgrind_annotate redis-server curl
bench_start hop-counts
BIN="${USER_BIN:-$BIN}"
MODES="${MODES:-holder relayed}"
WARMUP="${WARMUP:-6}"
WINDOW="${WINDOW:-12}"
RUN=0

# Stops one count's two instances (their dumps are written by then).
stop_pair() {
  (( ${#BENCH_PIDS[@]} )) || return 0
  kill -TERM "${BENCH_PIDS[@]}" 2>/dev/null || true
  wait "${BENCH_PIDS[@]}" 2>/dev/null || true
  BENCH_PIDS=()
}

# The requests an instance counted so far.
requests() {
  curl -fsS -m 5 "http://127.0.0.1:$1/metrics" | awk '/^fleetmcp_requests_total/ {n += $NF} END {print n + 0}'
}

# The instructions of SHA-256's block function in a callgrind dump.
sha256() {
  callgrind_self "$1" 'sha2::sha256::(soft::unroll::compress|compress256|x86_sha::compress)'
}

# count LABEL BINARY MODE: one measurement.
count() {
  local label="$1" bin="$2" mode="$3"
  local a b
  a="$(free_port)"; b="$(free_port)"
  # Machine ids of their own: the instances of an earlier count may still have heartbeats.
  RUN=$((RUN + 1))
  rm -f "$WORK"/cg-*.out*
  local node port
  for node in a b; do
    port=$a; [[ $node == b ]] && port=$b
    REDIS_URL="redis://127.0.0.1:$REDIS_PORT" PORT="$port" MACHINE_ID="hop-$RUN-$node" \
      FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback \
      MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn \
      valgrind --tool=callgrind --callgrind-out-file="$WORK/cg-$node.out" "$bin" \
      >"$WORK/$node.log" 2>&1 &
    BENCH_PIDS+=($!)
  done
  wait_healthy "$a" || true
  wait_healthy "$b" || true
  local extra=()
  [[ $mode == relayed ]] && extra=(--url2 "http://127.0.0.1:$b/mcp" --only-url2 1)
  "$LOADGEN" --url "http://127.0.0.1:$a/mcp" "${extra[@]}" --sessions 1 \
    --duration $((WINDOW + 8)) --warmup 2 --tool find_tickets --args '{}' --label hop \
    >"$WORK/loadgen.txt" 2>&1 &
  local loadgen=$!
  sleep "$WARMUP"
  local a0 b0 a1 b1
  a0="$(requests "$a")"; b0="$(requests "$b")"
  callgrind_control -z "${BENCH_PIDS[@]}" >/dev/null 2>&1
  sleep "$WINDOW"
  callgrind_control -d "${BENCH_PIDS[@]}" >/dev/null 2>&1
  a1="$(requests "$a")"; b1="$(requests "$b")"
  wait "$loadgen" || true
  local line="$label, $mode:" dump calls ir sha
  for node in a b; do
    calls=$((a1 - a0)); [[ $node == b ]] && calls=$((b1 - b0))
    (( calls > 0 )) || continue
    dump="$(ls -t "$WORK"/cg-$node.out.* 2>/dev/null | head -n 1)"
    [[ -n "$dump" ]] || continue
    ir="$(callgrind_total "$dump")"; sha="$(sha256 "$dump")"
    local who=holder; [[ $node == b ]] && who="relaying instance"
    line+="$(awk -v w="$who" -v c="$calls" -v i="$ir" -v s="$sha" \
      'BEGIN {printf " %s %d calls, %.0f instructions/call (%.0f without SHA-256);", w, c, i / c, (i - s) / c}')"
  done
  echo "$line"
  stop_pair
}

for mode in $MODES; do
  [[ -n "${BEFORE_BIN:-}" ]] && count "before ($BEFORE_BIN)" "$BEFORE_BIN" "$mode"
  count "$BIN" "$BIN" "$mode"
done
