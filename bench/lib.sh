# bench/lib.sh: what the one-off bench scripts share (sourced, not run). After `bench_start NAME`:
# ROOT, TARGET_DIR, BIN (help-desk), LOADGEN, WORK (a scratch folder) are set, the
# binaries are built (release, or PROFILE=debug: what a byte count needs, and quicker to build)
# unless SKIP_BUILD=1, a redis-server listens on REDIS_PORT
# (loopback, no persistence), and on exit every pid in BENCH_PIDS and the redis-server are
# killed.

# help-desk keeps its tickets in memory here even with Redis (HELP_DESK_TICKETS): these
# benchmarks measure the runtime and its own Redis traffic, not the example app's data.
export HELP_DESK_TICKETS=memory
bench_start() { # NAME
  ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  cd "$ROOT"
  TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
  local profile="${PROFILE:-release}"
  BIN="$TARGET_DIR/$profile/help-desk"
  if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    if [[ "$profile" == debug ]]; then
      cargo build -p help-desk -p fleet-loadgen >&2
    else
      cargo build --release -p help-desk -p fleet-loadgen >&2
    fi
  fi
  LOADGEN="$TARGET_DIR/$profile/fleet-loadgen"
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/fleetmcp-$1.XXXXXX")"
  BENCH_PIDS=()
  trap bench_cleanup EXIT
  REDIS_PORT="$(free_port)"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
    --daemonize yes --pidfile "$WORK/redis.pid" >/dev/null
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "redis-server did not start on $REDIS_PORT" >&2
  exit 1
}

# A free port on loopback (fleet-loadgen's, or the kernel's pick when it is not built).
free_port() {
  if [[ -x "$LOADGEN" ]]; then
    "$LOADGEN" free-port
  else
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  fi
}

bench_cleanup() {
  for p in "${BENCH_PIDS[@]:-}"; do [[ -n "$p" ]] && kill -KILL "$p" 2>/dev/null || true; done
  [[ -f "$WORK/redis.pid" ]] && kill "$(cat "$WORK/redis.pid")" 2>/dev/null || true
}

# Exits, naming the script, unless every TOOL is on the PATH.
require() { # SCRIPT TOOL...
  local script="$1" tool
  shift
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "[$script] $tool is required" >&2; exit 1; }
  done
}

# Waits until http://127.0.0.1:PORT/healthz answers (at most 2 minutes: a server under valgrind
# starts slowly).
wait_healthy() { # PORT
  for _ in $(seq 600); do
    curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$1/healthz" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "nothing answers on port $1" >&2
  return 1
}

# The instructions a callgrind dump counted in all.
callgrind_total() { # DUMP
  sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$1" | head -n 1
}

# The instructions a callgrind dump counted in the functions whose names match REGEX (awk),
# their own only (a function's share, not what it calls).
callgrind_self() { # DUMP REGEX
  callgrind_annotate --threshold=100 --auto=no "$1" 2>/dev/null \
    | awk -v re="$2" '$0 ~ re && !/x\)$/ {gsub(",", "", $1); n += $1} END {print n + 0}'
}

# glibc's own account (malloc_stats(3), called in the process by gdb, printed on its stderr):
# "SYSTEM INUSE", bytes the arenas took from the system and bytes handed out, mappings included.
malloc_totals() { # PID LOG
  local before
  before="$(wc -l <"$2")"
  gdb -p "$1" -batch -nx -ex 'call (void) malloc_stats()' >/dev/null 2>&1 || true
  tail -n +"$((before + 1))" "$2" | awk '/^Total/ {t = 1} t && /^system bytes/ {s = $4} t && /^in use bytes/ {u = $5} END {print s + 0, u + 0}'
}
