#!/usr/bin/env bash
# bench/call_counts.sh: what one tool call on a held session costs the server, counted in
# quantities that do not depend on what else the machine runs (time per call on a shared machine
# swings by ±20% between rounds; see docs/BENCHMARKS.md, "The CPU per call, second pass").
#
# One help-desk (one instance, memory store, metrics on: the defaults), one session,
# `tools/call find_tickets {}` in closed loops:
# * instructions per call (user space): the server under `valgrind --tool=callgrind`, a warm-up
#   load of WARMUP seconds, the counts zeroed, WINDOW seconds of `--sessions 1 --connections 8`,
#   the counts dumped and divided by the calls the load generator counted; also the share of
#   glibc's `memcpy`/`memmove` (futures moved into boxes, buffers copied);
# * allocations per call: uprobes on glibc's `malloc` and `realloc` (`perf probe`, added if
#   absent and removed again at the end if this script added them), counted with `perf stat` on
#   the server over PERF_WINDOW seconds of `--sessions 1 --connections 32`, divided by its
#   `writev` calls (one per answer); and, in the same window, the system calls per answer
#   (`raw_syscalls:sys_enter`: a read that finds nothing, a wake-up between threads, a timer's
#   re-arming all show there, and callgrind counts none of the kernel's work).
# Prints one line per binary.
#
# Environment (all optional):
#   BIN=target/release/help-desk   the help-desk binary (built first unless SKIP_BUILD=1); the
#                                  bench's hyper-ref answers the same exchanges, for the bare
#                                  server's counts
#   BEFORE_BIN=                    other builds (paths separated by spaces), measured the same
#                                  way first, in that order
#   WARMUP=3 WINDOW=6 PERF_WINDOW=4  seconds
#   SESSIONS=1                     sessions the calls go to (each connection keeps to one; with
#                                  more sessions than connections, the connections are raised
#                                  to one per session: the saturation shape 64x64's footprint)
#   COUNTS="instructions mallocs"  which counts to take
#   CACHE_SIM=1                    callgrind also simulates the caches (`--cache-sim=yes`: its
#                                  model of this machine's L1 and last-level caches, slower):
#                                  per call, first-level instruction and data misses and
#                                  last-level misses; how large the code and data a call touches
#                                  are (this VM exposes no hardware counters)
# Requirements: valgrind (callgrind_control, callgrind_annotate), perf with uprobes (root),
# redis-server (bench/lib.sh starts one; unused here), curl.
set -euo pipefail

USER_BIN="${BIN:-}"
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
COUNTS="${COUNTS:-instructions mallocs}"
needed=(redis-server curl)
[[ $COUNTS == *instructions* ]] && needed+=(valgrind callgrind_control callgrind_annotate)
[[ $COUNTS == *mallocs* ]] && needed+=(perf)
require call_counts "${needed[@]}"
bench_start call-counts
BIN="${USER_BIN:-$BIN}"
WARMUP="${WARMUP:-3}"
WINDOW="${WINDOW:-6}"
PERF_WINDOW="${PERF_WINDOW:-4}"
ADDED_PROBES=()
RUN=0

cleanup_all() {
  local p
  for p in "${ADDED_PROBES[@]:-}"; do [[ -n "$p" ]] && perf probe -q -d "$p" 2>/dev/null || true; done
  bench_cleanup
}
trap cleanup_all EXIT

# Starts BINARY on a free port (under the command given before it, if any), sets SERVER_PID
# and SERVER_PORT, and waits until it answers.
serve() { # [WRAPPER...] BINARY
  SERVER_PORT="$(free_port)"
  PORT="$SERVER_PORT" MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn \
    "$@" >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  BENCH_PIDS+=("$SERVER_PID")
  wait_healthy "$SERVER_PORT"
}

stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  BENCH_PIDS=()
}

# Closed loops of `tools/call find_tickets {}` on SESSIONS sessions: load CONNECTIONS SECONDS [ARGS...]
load() {
  local connections="$1" seconds="$2"
  shift 2
  local sessions="${SESSIONS:-1}"
  # loadgen's --connections counts per session.
  connections=$(( (connections + sessions - 1) / sessions ))
  "$LOADGEN" --url "http://127.0.0.1:$SERVER_PORT/mcp" --sessions "$sessions" --connections "$connections" \
    --duration "$seconds" --tool find_tickets --args '{}' --label calls "$@"
}

# Instructions per call, memcpy's share of them, the calls counted and the dump (kept, for
# `callgrind_annotate --inclusive=yes`): sets IR, MC, CALLS, DUMP.
instructions() { # BINARY
  RUN=$((RUN + 1))
  local sim=()
  [[ -n "${CACHE_SIM:-}" ]] && sim=(--cache-sim=yes)
  serve valgrind --tool=callgrind "${sim[@]}" --callgrind-out-file="$WORK/cg-$RUN.out" "$1"
  load 8 "$WARMUP" --warmup 0 >/dev/null 2>&1
  callgrind_control -z "$SERVER_PID" >/dev/null 2>&1
  IR=- MC=- CALLS=0 DUMP=- MISSES=
  local calls
  calls="$(load 8 "$WINDOW" --warmup 0 --json 2>/dev/null | sed -n 's/.*"requests":\([0-9]*\).*/\1/p')"
  callgrind_control -d "$SERVER_PID" >/dev/null 2>&1
  stop_server
  local dump
  dump="$(ls -t "$WORK"/cg-"$RUN".out.* 2>/dev/null | head -n 1)"
  [[ -n "$dump" && "${calls:-0}" -gt 0 ]] || return 0
  CALLS="$calls" DUMP="$dump"
  read -r IR MC < <(awk -v c="$calls" -v i="$(callgrind_total "$dump")" \
    -v m="$(callgrind_self "$dump" '__mem(cpy|move)_[a-z_]*')" \
    'BEGIN {printf "%.0f %.0f\n", i / c, m / c}')
  [[ -n "${CACHE_SIM:-}" ]] && MISSES="$(cache_misses "$dump" "$calls")"
  return 0
}

# Per call, from a dump of `--cache-sim=yes` (events Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw):
# first-level instruction misses, first-level data misses (reads and writes), last-level misses.
cache_misses() { # DUMP CALLS
  awk -v c="$2" '/^events:/ {for (i = 2; i <= NF; i++) col[$i] = i - 1}
    /^(summary|totals):/ && !done {done = 1
      printf "I1 misses %.0f, D1 misses %.0f, LL misses %.1f", $(col["I1mr"] + 1) / c,
        ($(col["D1mr"] + 1) + $(col["D1mw"] + 1)) / c,
        ($(col["ILmr"] + 1) + $(col["DLmr"] + 1) + $(col["DLmw"] + 1)) / c}' "$1"
}

# Adds the uprobe EVENT (`probe_libc:malloc`) on glibc's FUNCTION unless it is there.
probe() { # FUNCTION
  perf probe -l 2>/dev/null | grep -q "probe_libc:$1 " && return 0
  local libc
  libc="$(ldconfig -p | awk '/libc\.so\.6 .*x86-64/ {print $NF; exit}')"
  perf probe -q -x "${libc:-/lib/x86_64-linux-gnu/libc.so.6}" "$1" >/dev/null 2>&1
  ADDED_PROBES+=("probe_libc:$1")
}

# Allocations and system calls per answer: sets MA, RE, SC.
mallocs() { # BINARY
  serve "$1"
  load 32 $((PERF_WINDOW + 3)) --warmup 1 >/dev/null 2>&1 &
  local loadgen=$!
  sleep 2
  perf stat -x, -e probe_libc:malloc,probe_libc:realloc,syscalls:sys_enter_writev,raw_syscalls:sys_enter \
    -p "$SERVER_PID" -o "$WORK/perf.txt" -- sleep "$PERF_WINDOW" 2>/dev/null
  wait "$loadgen" || true
  stop_server
  read -r MA RE SC < <(awk -F, '$3 ~ /malloc/ {m = $1} $3 ~ /realloc/ {r = $1} $3 ~ /writev/ {w = $1}
    $3 ~ /raw_syscalls/ {s = $1}
    END {if (w > 0) printf "%.1f %.1f %.2f\n", m / w, r / w, s / w; else print "- - -"}' "$WORK/perf.txt")
}

[[ $COUNTS == *mallocs* ]] && { probe malloc; probe realloc; }

report() { # LABEL BINARY
  local line="$1:"
  if [[ $COUNTS == *instructions* ]]; then
    instructions "$2"
    line+=" $IR instructions/call (memcpy $MC; ${MISSES:+$MISSES; }$CALLS calls; $DUMP),"
  fi
  if [[ $COUNTS == *mallocs* ]]; then
    mallocs "$2"
    line+=" $MA mallocs/call, $RE reallocs/call, $SC syscalls/call"
  fi
  echo "$line"
}

# Each earlier build, in the order given (the steps of a change, measured in one run).
for before in ${BEFORE_BIN:-}; do report "before ($before)" "$before"; done
report "$BIN" "$BIN"
