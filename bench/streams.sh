#!/usr/bin/env bash
# bench/streams.sh: what an idle SSE stream costs in the process that serves it (issue 37), and
# whether that depends on the sessions the process holds. For each binary (BINS), mode (MODES)
# and session count (SESSIONS), one help-desk is started (`memory`: no Redis, sessions and
# events in the process; `distributed`: FRONTMCP_DEPLOYMENT_MODE=distributed on a fresh
# redis-server), SESSIONS sessions are opened on it (`fleet-loadgen open`, 64 at once), then
# STREAMS idle `GET /mcp` SSE streams on the first of them (`fleet-loadgen streams`), held open.
# Prints one markdown row per run: process RSS growth per stream (VmRSS after the streams
# opened, less before, / STREAMS, as `bench/scale.sh` measures it); glibc's own account before
# and after (malloc_stats(3), called in the process by gdb): how much the arenas grew and how
# much more was handed out, per stream, and how much the arenas held free before the streams
# (what they can reuse without touching new pages); and, with HEAPTRACK=1, what heaptrack says
# of the same window: heaptrack is attached (`heaptrack -p`) once the sessions are open, the
# streams are opened, and the process is killed with them open, so what heaptrack counts as
# leaked is the heap the streams hold, by allocation site (its allocations since the attach
# still live at the kill; one-off growth of a shared table, e.g. a map's resize, shows as such).
# heaptrack_print's lists (leaked, peak) and the bytes per stream by site (`*.sites.txt`: the
# last three frames above the allocator) are kept in OUT.
#
# Environment (all optional):
#   SESSIONS="5000 50000"   session counts, one run each
#   STREAMS=500             idle streams opened per run
#   MODES="memory distributed"
#   BINS=                   "label=path label=path" (e.g. main=/tmp/main/help-desk); default:
#                           this tree's release build, labelled `this`
#   HEAPTRACK=0             1: attach heaptrack for the streams (slower; needs gdb)
#   OUT=                    folder for heaptrack's files and heaptrack_print's reports
#                           (default: a scratch folder, kept and printed when HEAPTRACK=1)
#   WORKERS=1               TOKIO_WORKER_THREADS of the help-desk (as bench/scale.sh)
#   SKIP_BUILD=0, PROFILE=release (or debug)
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start streams
SESSIONS="${SESSIONS:-5000 50000}"
STREAMS="${STREAMS:-500}"
MODES="${MODES:-memory distributed}"
BINS="${BINS:-this=$BIN}"
HEAPTRACK="${HEAPTRACK:-0}"
WORKERS="${WORKERS:-1}"
OUT="${OUT:-$WORK/out}"
mkdir -p "$OUT"
[[ "$HEAPTRACK" == 1 ]] && require streams.sh heaptrack heaptrack_print gdb
require streams.sh redis-cli curl awk

cat >"$WORK/desk.toml" <<'TOML'
[sessions]
max_sessions = 200000
[http]
allowed_hosts = ["*"]
TOML

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# Bytes held per stream by allocation site: each stack of heaptrack's leaked bytes named by its
# last frames above the allocator's own (Rust's alloc, RawVec, Box and the like).
sites() { # STACKS STREAMS
  python3 - "$1" "$2" <<'PY'
import collections, re, sys
path, streams = sys.argv[1], float(sys.argv[2])
inner = re.compile(r'^(_RNv|alloc |alloc_impl|allocate|box_new|new<> \((boxed|sync)\.rs\)|realloc|grow|finish_grow|try_allocate_in|with_capacity|reserve|do_reserve|malloc|aligned_malloc|__rust|from_elem|to_vec|spec_|push<>|new_in)')
sites = collections.Counter()
for line in open(path):
    stack, _, n = line.rstrip('\n').rpartition(' ')
    frames = [f for f in stack.split(';') if f]
    while frames and inner.match(frames[-1]):
        frames.pop()
    sites[' <- '.join(reversed(frames[-3:]))] += int(n or 0)
print(f"{sum(sites.values()) / streams:.0f} B per stream in all")
for site, n in sites.most_common(30):
    print(f"{n / streams:8.0f}  {site[:240]}")
PY
}

run() { # LABEL BIN MODE SESSIONS -> one table row
  local label="$1" bin="$2" mode="$3" n="$4" port pid env=() ht_pid="" name rss0 rss1 opened heap="-" allocs="-"
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  port="$(free_port)"
  [[ "$mode" == distributed ]] && env=(REDIS_URL="redis://127.0.0.1:$REDIS_PORT" FRONTMCP_DEPLOYMENT_MODE=distributed)
  env "${env[@]}" PORT="$port" MACHINE_ID=desk-a FLEETMCP_MAX_SESSIONS_PER_KEY=0 \
    FLEETMCP_CONFIG="$WORK/desk.toml" FRONTMCP_BIND_ADDRESS=loopback TOKIO_WORKER_THREADS="$WORKERS" \
    MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn \
    "$bin" >"$WORK/desk.log" 2>&1 &
  pid=$!
  BENCH_PIDS+=("$pid")
  for _ in $(seq 200); do curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break; sleep 0.05; done
  local url="http://127.0.0.1:$port/mcp"
  "$LOADGEN" open --urls "$url" --sessions "$n" --concurrency 64 --out "$WORK/ids" >"$WORK/open.json"
  opened="$(sed -n 's/.*"opened":\([0-9]*\).*/\1/p' "$WORK/open.json")"
  [[ "$opened" == "$n" ]] || { echo "opened $opened of $n sessions: $(cut -c1-300 "$WORK/open.json")" >&2; exit 1; }
  sleep 2
  name="$label-$mode-$n"
  local ms0 ms1
  ms0="$(malloc_totals "$pid" "$WORK/desk.log")"
  if [[ "$HEAPTRACK" == 1 ]]; then
    heaptrack -o "$OUT/$name" -p "$pid" >"$WORK/heaptrack.log" 2>&1 &
    ht_pid=$!
    # Attached once its library is mapped into the process.
    for _ in $(seq 600); do grep -q libheaptrack_inject "/proc/$pid/maps" 2>/dev/null && break; sleep 0.1; done
    grep -q libheaptrack_inject "/proc/$pid/maps" || { cat "$WORK/heaptrack.log" >&2; exit 1; }
    sleep 1
  fi
  rss0="$(rss_kib "$pid")"
  rm -f "$WORK/ready"
  "$LOADGEN" streams --urls "$url" --ids "$WORK/ids" --streams "$STREAMS" --concurrency 256 \
    --hold 3600 --ready "$WORK/ready" >/dev/null 2>"$WORK/streams.log" &
  local spid=$!
  BENCH_PIDS+=("$spid")
  for _ in $(seq 1200); do [[ -s "$WORK/ready" ]] && break; sleep 0.1; done
  grep -q "\"opened\":$STREAMS," "$WORK/ready" || { echo "streams: $(cat "$WORK/ready" "$WORK/streams.log")" >&2; exit 1; }
  sleep 2
  rss1="$(rss_kib "$pid")"
  ms1="$(malloc_totals "$pid" "$WORK/desk.log")"
  # Killed with the streams open: what they hold is never freed, for heaptrack.
  kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  kill -KILL "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
  if [[ -n "$ht_pid" ]]; then
    wait "$ht_pid" 2>/dev/null || true
    local file
    file="$(ls "$OUT/$name"*.zst "$OUT/$name"*.gz 2>/dev/null | head -1 || true)"
    heaptrack_print -f "$file" -p 0 -a 0 -T 0 -l 1 -n 40 -s 0 >"$OUT/$name.leaks.txt" 2>/dev/null || true
    heaptrack_print -f "$file" -p 1 -a 0 -T 0 -l 0 -n 40 -s 0 >"$OUT/$name.peak.txt" 2>/dev/null || true
    heaptrack_print -f "$file" --flamegraph-cost-type leaked -F "$OUT/$name.stacks.txt" >/dev/null 2>&1 || true
    sites "$OUT/$name.stacks.txt" "$STREAMS" >"$OUT/$name.sites.txt"
    local leaked
    leaked="$(sed -n 's/^total memory leaked: \([0-9.]*\)\([KMG]*\).*/\1 \2/p' "$OUT/$name.leaks.txt")"
    heap="$(awk -v s="$STREAMS" '{m = ($2 == "K") ? 1e3 : ($2 == "M") ? 1e6 : ($2 == "G") ? 1e9 : 1; printf "%.0f", $1 * m / s}' <<<"$leaked")"
    allocs="$(sed -n 's/^calls to allocation functions: \([0-9]*\) .*/\1/p' "$OUT/$name.leaks.txt" | awk -v s="$STREAMS" '{printf "%.1f", $1 / s}')"
  fi
  local sys0 use0 sys1 use1
  read -r sys0 use0 <<<"$ms0"; read -r sys1 use1 <<<"$ms1"
  echo "| $label | $mode | $n | $STREAMS | $(( (rss1 - rss0) * 1024 / STREAMS )) | $(( (sys1 - sys0) / STREAMS )) | $(( (use1 - use0) / STREAMS )) | $heap | $allocs | $(( (sys0 - use0) / 1024 )) |"
}

echo
echo "| binary | mode | sessions held | idle streams | process RSS per stream B | malloc arenas' growth per stream B | malloc in use per stream B | heap held per stream B (heaptrack) | allocations per stream (heaptrack) | free in the arenas before, KiB |"
echo "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"
for n in $SESSIONS; do
  for mode in $MODES; do
    for b in $BINS; do run "${b%%=*}" "${b#*=}" "$mode" "$n"; done
  done
done
[[ "$HEAPTRACK" == 1 ]] && echo "heaptrack files and reports: $OUT" >&2
exit 0
