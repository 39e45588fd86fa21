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
