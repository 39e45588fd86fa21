#!/usr/bin/env bash
# bench/run.sh: fleetmcp help-desk vs rmcp 3.11 vs the TypeScript SDK v1, side by side.
#
# Builds in release, starts each server in turn on a free loopback port, drives it with
# fleet-loadgen (SESSIONS concurrent sessions, closed loop of tools/call find_tickets), stops it
# and prints one markdown table. See bench/README.md.
#
# Environment (all optional):
#   MODE=            one-session: issue 23's shape, ONE session driven over 32 connections at
#                    once (SESSIONS=1 CONNECTIONS=32 TARGETS="fleetmcp hyper rmcp" PIN=1 unless
#                    set), where fleetmcp's cost per call is compared with bare hyper's
#                    saturation: issue 40's shapes, the server the limit: wrk drives it
#                    (GEN=wrk SHAPES="1x32 64x64" TARGETS="hyper fleetmcp" PIN=1 ROUNDS=3
#                    DURATION=5 unless set), one table with every target's ratios to hyper's
#   GEN=loadgen      the load generator: loadgen (fleet-loadgen, every answer parsed and
#                    checked), or wrk (`wrk -t1` with bench/saturate.lua: the requests made once,
#                    answers not read beyond their status, so it out-runs the servers; sessions
#                    opened with curl first; targets fleetmcp, fleetmcp_before, hyper, rmcp)
#   SHAPES=          sessions x connections to run, each a row per target, e.g. "1x32 64x64"
#                    (default: SESSIONSxCONNECTIONS); with wrk, calls go round robin over the
#                    sessions on every connection
#   SESSIONS=64      concurrent sessions per target
#   CONNECTIONS=1    closed loops (connections) per session: calls in flight at once in one
#                    session
#   DURATION=10      measured seconds per target (after a WARMUP)
#   WARMUP=1         warm-up seconds per target
#   ROUNDS=1         rounds over all targets (interleaved); the table shows each target's median
#   TARGETS="fleetmcp fleetmcp_stateless rmcp ts"   which servers to run, in this order
#                    (fleetmcp_stateless: the same help-desk driven by 2026-07-28 clients;
#                     fleetmcp_pair: two help-desks sharing a Redis, calls round-robin between them)
#                    (fleetmcp_before, fleetmcp_relayed_before: the help-desk binary named by
#                     BEFORE_BIN, run like fleetmcp and fleetmcp_relayed, to compare two builds
#                     in one run)
#                    (fleetmcp_relayed: two help-desks in distributed mode sharing a Redis,
#                     sessions opened on the first, every call sent to the second, which relays
#                     it to the holder; fleetmcp_relayed_cluster: the same on a three-master
#                     Redis Cluster)
#                    (hyper_proxied: hyper-ref behind a second hyper-ref proxying to it, one
#                     bare HTTP hop: the floor of what fleetmcp_relayed adds to fleetmcp)
#   BEFORE_BIN=      a help-desk binary built from another commit (for fleetmcp_before)
#   PIN=0            1 = pin the server to CPU 1 and the load generator to CPU 0 (taskset)
#   OUT=             also write the table to this file
#   SKIP_BUILD=0     1 = use the binaries already in target/release
#   SERVER_RUST_LOG=warn  the servers' RUST_LOG (info: each request's span is enabled)
# help-desk keeps its tickets in memory here even with Redis (HELP_DESK_TICKETS): these
# benchmarks measure the runtime and its own Redis traffic, not the example app's data.
export HELP_DESK_TICKETS=memory
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="$ROOT/bench"
cd "$ROOT"

MODE="${MODE:-}"
case "$MODE" in
  one-session)
    SESSIONS="${SESSIONS:-1}"
    CONNECTIONS="${CONNECTIONS:-32}"
    TARGETS="${TARGETS:-fleetmcp hyper rmcp}"
    PIN="${PIN:-1}"
    ;;
  saturation)
    GEN="${GEN:-wrk}"
    SHAPES="${SHAPES:-1x32 64x64}"
    TARGETS="${TARGETS:-hyper fleetmcp}"
    PIN="${PIN:-1}"
    ROUNDS="${ROUNDS:-3}"
    DURATION="${DURATION:-5}"
    ;;
  "") ;;
  *) printf '[bench] unknown MODE %s (one-session, saturation)\n' "$MODE" >&2; exit 2 ;;
esac
GEN="${GEN:-loadgen}"
SESSIONS="${SESSIONS:-64}"
CONNECTIONS="${CONNECTIONS:-1}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-1}"
ROUNDS="${ROUNDS:-1}"
SHAPES="${SHAPES:-${SESSIONS}x${CONNECTIONS}}"
TARGETS="${TARGETS:-fleetmcp fleetmcp_stateless fleetmcp_pair rmcp ts}"
PIN="${PIN:-0}"
SERVER_RUST_LOG="${SERVER_RUST_LOG:-warn}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
REL="$TARGET_DIR/release"

LABEL_fleetmcp="fleetmcp help-desk"
LABEL_fleetmcp_stateless="fleetmcp help-desk, 2026-07-28 stateless"
LABEL_fleetmcp_pair="fleetmcp help-desk x2 + Redis, round-robin"
LABEL_fleetmcp_before="fleetmcp help-desk, BEFORE_BIN"
LABEL_fleetmcp_relayed="fleetmcp x2 distributed, every call relayed"
LABEL_fleetmcp_relayed_before="fleetmcp x2 distributed, every call relayed, BEFORE_BIN"
LABEL_fleetmcp_relayed_cluster="fleetmcp x2 distributed on a 3-master Redis Cluster, every call relayed"
LABEL_fleet3_rr="fleetmcp x3 distributed behind nginx, round robin (2/3 relayed)"
LABEL_fleet3_sticky="fleetmcp x3 distributed behind nginx, cookie affinity (none relayed)"
LABEL_rmcp="rmcp 3.11.0 (rmcp-ref)"
LABEL_hyper="bare hyper, same bytes (hyper-ref; the limit)"
LABEL_hyper_proxied="bare hyper behind a bare hyper proxy (one hop's floor)"
LABEL_python="Python mcp 2.3.0 MCPServer + uvicorn (py-ref)"
LABEL_ts="TS SDK 1.32.2 (ts-ref)"

log() { printf '[bench] %s\n' "$*" >&2; }

# --- build ---------------------------------------------------------------------------------
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  log "cargo build --release -p help-desk -p rmcp-ref -p hyper-ref -p fleet-loadgen"
  cargo build --release -p help-desk -p rmcp-ref -p hyper-ref -p fleet-loadgen
fi
if [[ " $TARGETS " == *" ts "* ]]; then
  command -v node >/dev/null || { log "node is required for the ts target"; exit 1; }
  # npm ci when node_modules is missing or older than the lock file.
  if [[ ! -f "$BENCH/ts-ref/node_modules/.package-lock.json" \
     || "$BENCH/ts-ref/package-lock.json" -nt "$BENCH/ts-ref/node_modules/.package-lock.json" ]]; then
    log "npm ci in bench/ts-ref"
    (cd "$BENCH/ts-ref" && timeout 300 npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
LOADGEN="$REL/fleet-loadgen"
needed=("$LOADGEN" "$REL/help-desk")
[[ " $TARGETS " == *" rmcp "* ]] && needed+=("$REL/rmcp-ref")
[[ " $TARGETS " == *" hyper"* ]] && needed+=("$REL/hyper-ref")
for b in "${needed[@]}"; do
  [[ -x "$b" ]] || { log "missing $b (build first)"; exit 1; }
done
if [[ $GEN == wrk ]]; then
  command -v wrk >/dev/null || { log "GEN=wrk needs wrk (apt-get install wrk)"; exit 1; }
  for name in $TARGETS; do
    case "$name" in
      fleetmcp|fleetmcp_before|hyper|rmcp) ;;
      *) log "GEN=wrk drives fleetmcp, fleetmcp_before, hyper and rmcp only, not $name"; exit 2 ;;
    esac
  done
elif [[ $GEN != loadgen ]]; then
  log "unknown GEN $GEN (loadgen, wrk)"; exit 2
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/fleetmcp-bench.XXXXXX")"
RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
SERVER_PID=""

FLEET_PIDS=()
REDIS_PORTS=()
stop_server() {
  for p in "${FLEET_PIDS[@]:-}"; do
    [[ -n "$p" ]] && kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${FLEET_PIDS[@]:-}"; do
    [[ -n "$p" ]] && wait "$p" 2>/dev/null || true
  done
  FLEET_PIDS=()
  REDIS_PORT_B=""
  if [[ -n "${SECOND_PID:-}" ]]; then
    kill -TERM "$SECOND_PID" 2>/dev/null || true
    wait "$SECOND_PID" 2>/dev/null || true
    SECOND_PID=""
  fi
  for f in "$WORK"/redis*.pid; do
    [[ -f "$f" ]] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  REDIS_PORTS=()
  [[ -n "$SERVER_PID" ]] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
trap 'stop_server' EXIT
trap 'exit 130' INT TERM

server_pin=()
loadgen_pin=()
if [[ "$PIN" == 1 ]]; then
  server_pin=(taskset -c 1)
  loadgen_pin=(taskset -c 0)
fi

# start_redis_cluster: three redis-server masters in cluster mode on free loopback ports (each
# with its cluster bus port, +10000, free too), joined by `redis-cli --cluster create`; sets
# REDIS_PORTS.
start_redis_cluster() {
  REDIS_PORTS=()
  while [[ ${#REDIS_PORTS[@]} -lt 3 ]]; do
    local p; p="$("$LOADGEN" free-port)"
    (( p + 10000 < 65536 )) || continue
    (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null && continue
    redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
      --cluster-enabled yes --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 1000 \
      --daemonize yes --pidfile "$WORK/redis-$p.pid" >/dev/null
    for _ in $(seq 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
    REDIS_PORTS+=("$p")
  done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${REDIS_PORTS[@]}") --cluster-yes >/dev/null
  for _ in $(seq 100); do
    redis-cli -p "${REDIS_PORTS[0]}" cluster info | grep -q cluster_state:ok && return 0
    sleep 0.1
  done
  log "the Redis Cluster did not come up"; return 1
}

# start_server NAME PORT: starts the server in the background, sets SERVER_PID.
start_server() {
  local name="$1" port="$2" logf="$WORK/$1.log"
  case "$name" in
    fleetmcp_pair|fleetmcp_relayed|fleetmcp_relayed_before|fleetmcp_relayed_cluster)
      # Two instances sharing one Redis (or a three-master cluster); the second listens on
      # PORT2.
      local mode=standalone redis_env bin="$REL/help-desk"
      if [[ $name == fleetmcp_relayed_before ]]; then
        [[ -x "${BEFORE_BIN:-}" ]] || { log "fleetmcp_relayed_before needs BEFORE_BIN=<a help-desk binary>"; exit 1; }
        bin="$BEFORE_BIN"
      fi
      [[ $name == fleetmcp_relayed* ]] && mode=distributed
      if [[ $name == fleetmcp_relayed_cluster ]]; then
        start_redis_cluster
        redis_env="REDIS_CLUSTER_NODES=$(printf '127.0.0.1:%s,' "${REDIS_PORTS[@]}")"
        redis_env="${redis_env%,}"
      else
        REDIS_PORT_B="$("$LOADGEN" free-port)"
        REDIS_PORTS=("$REDIS_PORT_B")
        redis-server --port "$REDIS_PORT_B" --bind 127.0.0.1 --save "" --appendonly no \
          --dir "$WORK" --daemonize yes --pidfile "$WORK/redis.pid" >/dev/null
        for _ in $(seq 50); do redis-cli -p "$REDIS_PORT_B" ping >/dev/null 2>&1 && break; sleep 0.1; done
        redis_env="REDIS_URL=redis://127.0.0.1:$REDIS_PORT_B"
      fi
      PORT2="$("$LOADGEN" free-port)"
      env "$redis_env" PORT="$PORT2" MACHINE_ID=bench-b \
        FRONTMCP_DEPLOYMENT_MODE="$mode" FRONTMCP_BIND_ADDRESS=loopback \
        MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG="$SERVER_RUST_LOG" \
        "${server_pin[@]}" "$bin" >"$WORK/$name-b.log" 2>&1 &
      SECOND_PID=$!
      env "$redis_env" PORT="$port" MACHINE_ID=bench-a \
        FRONTMCP_DEPLOYMENT_MODE="$mode" FRONTMCP_BIND_ADDRESS=loopback \
        MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG="$SERVER_RUST_LOG" \
        "${server_pin[@]}" "$bin" >"$logf" 2>&1 &
      ;;
    fleet3_rr|fleet3_sticky)
      # Three distributed instances sharing one Redis, nginx in front on PORT: round robin
      # (a session's calls land on its holder one time in three, the rest are relayed), or
      # pinned by the affinity cookie `__frontmcp_node` (a map from machine id to upstream).
      REDIS_PORT_B="$("$LOADGEN" free-port)"
      redis-server --port "$REDIS_PORT_B" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$WORK" --daemonize yes --pidfile "$WORK/redis.pid" >/dev/null
      for _ in $(seq 50); do redis-cli -p "$REDIS_PORT_B" ping >/dev/null 2>&1 && break; sleep 0.1; done
      local ports=() upstreams="" pinned="" maps=""
      for node in a b c; do
        local p; p="$("$LOADGEN" free-port)"; ports+=("$p")
        PORT="$p" MACHINE_ID="bench-$node" REDIS_URL="redis://127.0.0.1:$REDIS_PORT_B" \
          FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback \
          MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG="$SERVER_RUST_LOG" \
          "${server_pin[@]}" "$REL/help-desk" >"$WORK/$name-$node.log" 2>&1 &
        FLEET_PIDS+=($!)
        upstreams+="server 127.0.0.1:$p; "
        pinned+="upstream node_$node { server 127.0.0.1:$p; keepalive 32; } "
        maps+="bench-$node node_$node; "
      done
      for p in "${ports[@]}"; do
        for _ in $(seq 100); do curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$p/readyz" 2>/dev/null && break; sleep 0.1; done
      done
      local target=fleet
      [[ $name == fleet3_sticky ]] && target='$holder'
      mkdir -p "$WORK/nginx"
      cat >"$WORK/nginx/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  upstream fleet { $upstreams keepalive 32; }
  $pinned
  map \$cookie___frontmcp_node \$holder { default fleet; $maps }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://$target;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_buffering off;
    }
  }
}
NGINX
      "${server_pin[@]}" "${NGINX:-/usr/sbin/nginx}" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" >"$logf" 2>&1 &
      ;;
    fleetmcp|fleetmcp_stateless)
      PORT="$port" MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG="$SERVER_RUST_LOG" \
        "${server_pin[@]}" "$REL/help-desk" >"$logf" 2>&1 &
      ;;
    fleetmcp_before)
      [[ -x "${BEFORE_BIN:-}" ]] || { log "fleetmcp_before needs BEFORE_BIN=<a help-desk binary>"; exit 1; }
      PORT="$port" MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG="$SERVER_RUST_LOG" \
        "${server_pin[@]}" "$BEFORE_BIN" >"$logf" 2>&1 &
      ;;
    rmcp)
      PORT="$port" RUST_LOG="$SERVER_RUST_LOG" "${server_pin[@]}" "$REL/rmcp-ref" >"$logf" 2>&1 &
      ;;
    hyper)
      PORT="$port" "${server_pin[@]}" "$REL/hyper-ref" >"$logf" 2>&1 &
      ;;
    hyper_proxied)
      # hyper-ref behind a second hyper-ref in proxy mode (UPSTREAM): one bare HTTP hop over
      # loopback, nothing signed or checked, the floor of what a relayed call adds.
      PORT2="$("$LOADGEN" free-port)"
      PORT="$PORT2" "${server_pin[@]}" "$REL/hyper-ref" >"$WORK/$name-upstream.log" 2>&1 &
      SECOND_PID=$!
      for _ in $(seq 50); do curl -fsS -m 1 -o /dev/null -X DELETE "http://127.0.0.1:$PORT2/mcp" 2>/dev/null && break; sleep 0.1; done
      PORT="$port" UPSTREAM="127.0.0.1:$PORT2" "${server_pin[@]}" "$REL/hyper-ref" >"$logf" 2>&1 &
      ;;
    python)
      PORT="$port" "${server_pin[@]}" "$ROOT/tools/clients/python/venv/bin/python" "$BENCH/py-ref/server.py" >"$logf" 2>&1 &
      ;;
    ts)
      PORT="$port" NODE_ENV=production "${server_pin[@]}" node "$BENCH/ts-ref/server.mjs" >"$logf" 2>&1 &
      ;;
    *) log "unknown target $name"; exit 1 ;;
  esac
  SERVER_PID=$!
  # Ready when GET /healthz answers 200 (at most 20 s).
  local i
  for i in $(seq 200); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      log "$name exited during start-up:"; cat "$logf" >&2; SERVER_PID=""; return 1
    fi
    if curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  log "$name did not become ready in 20 s:"; cat "$logf" >&2
  return 1
}

# --- GEN=wrk ---------------------------------------------------------------------------------
MCP_HEADERS=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')

# open_session URL: initialize and notifications/initialized; prints the session id.
open_session() {
  local sid
  sid="$(curl -fsS -m 5 -D - -o /dev/null -X POST "$1" "${MCP_HEADERS[@]}" \
    --data '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"0"}}}' \
    | tr -d '\r' | sed -n 's/^[Mm][Cc][Pp]-[Ss]ession-[Ii][Dd]: *//p')"
  [[ -n "$sid" ]] || { log "initialize at $1 gave no Mcp-Session-Id"; return 1; }
  curl -fsS -m 5 -o /dev/null -X POST "$1" "${MCP_HEADERS[@]}" -H "Mcp-Session-Id: $sid" \
    -H 'MCP-Protocol-Version: 2025-11-25' --data '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  printf '%s\n' "$sid"
}

# The user+system CPU time of process PID so far, in clock ticks (every thread's).
cpu_ticks() { # PID
  # Fields 14 and 15 of /proc/PID/stat, counted after the `)` that ends the command's name.
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

# run_wrk URL SESSIONS CONNECTIONS LABEL TARGET: opens the sessions, checks that one call
# answers a result, drives the server WARMUP s and then DURATION s with `wrk -t1`, and prints
# one JSON line as fleet-loadgen --json does (with the server's CPU over the measured run).
run_wrk() {
  local url="$1" sessions="$2" connections="$3" label="$4" target="$5" sids=() i
  for i in $(seq "$sessions"); do
    sids+=("$(open_session "$url")") || return 1
  done
  # The same call wrk sends, once, read in full: a result, not an error (wrk only sees statuses).
  local answer
  answer="$(curl -fsS -m 5 -X POST "$url" "${MCP_HEADERS[@]}" -H "Mcp-Session-Id: ${sids[0]}" \
    -H 'MCP-Protocol-Version: 2025-11-25' \
    --data '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"find_tickets","arguments":{}}}')"
  if [[ $answer != *'"result"'* || $answer == *'"isError":true'* ]]; then
    log "$label: the call does not answer a result: $answer"; return 1
  fi
  local wrk=("${loadgen_pin[@]}" wrk -t1 -c "$connections" --timeout 10s -s "$BENCH/saturate.lua")
  [[ ${WARMUP%.*} -gt 0 ]] && "${wrk[@]}" -d "${WARMUP%.*}s" "$url" -- "${sids[@]}" >/dev/null
  local before after out
  before="$(cpu_ticks "$SERVER_PID")"
  out="$("${wrk[@]}" -d "${DURATION%.*}s" "$url" -- "${sids[@]}")"
  after="$(cpu_ticks "$SERVER_PID")"
  local rss
  rss="$(awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status")"
  local line
  line="$(grep '^SATURATE ' <<<"$out")" || { log "$label: wrk printed no result: $out"; return 1; }
  # `requests=N errors=N ...` into jq's arguments.
  local kv=() pair
  for pair in ${line#SATURATE }; do kv+=(--argjson "${pair%%=*}" "${pair#*=}"); done
  jq -nc "${kv[@]}" --arg lbl "$label" --arg target "$target" --argjson sessions "$sessions" \
    --argjson connections "$connections" --argjson ticks "$((after - before))" \
    --argjson hz "$(getconf CLK_TCK)" --argjson rss "${rss:-null}" '
    ($duration_us / 1e6) as $d
    | {"label": $lbl, "target": $target, "shape": "\($sessions)x\($connections)",
       "sessions": $sessions, "connections": $connections, "generator": "wrk",
       "duration_s": $d, "requests": $requests, "errors": $errors,
       "rps": (($requests - $errors) / $d * 10 | round / 10),
       "p50_ms": ($p50_us / 1000), "p90_ms": ($p90_us / 1000), "p99_ms": ($p99_us / 1000),
       "max_ms": ($max_us / 1000), "rss_kib": $rss, "server_cpu_s": ($ticks / $hz)}'
  log "  $label: $(tail -n 1 <<<"$out" | tr -s ' ')"
  grep -E 'Requests/sec|Non-2xx|Socket errors' <<<"$out" | sed 's/^/[bench]   /' >&2 || true
}

log "shapes (sessions x connections) $SHAPES, generator $GEN, ${WARMUP}s warm-up + ${DURATION}s per target, $ROUNDS round(s), targets: $TARGETS, PIN=$PIN"
for round in $(seq "$ROUNDS"); do
  for shape in $SHAPES; do
    SESSIONS="${shape%x*}"
    CONNECTIONS="${shape#*x}"
    for name in $TARGETS; do
      label_var="LABEL_$name"
      label="${!label_var:-$name}"
      # Several shapes: a row per target and shape.
      [[ $SHAPES == *" "* ]] && label="$label, $shape"
      port="$("$LOADGEN" free-port)"
      log "round $round: $label on port $port"
      start_server "$name" "$port"
      # The loadgen bounds itself (setup <= 30 s, run = WARMUP + DURATION + at most 12 s); the
      # outer timeout is a last resort.
      limit=$(( ${WARMUP%.*} + ${DURATION%.*} + 60 ))
      extra=()
      if [[ $name == fleetmcp_pair || $name == fleetmcp_relayed* ]]; then
        extra=(--url2 "http://127.0.0.1:$PORT2/mcp")
        [[ $name == fleetmcp_relayed* ]] && extra+=(--only-url2 1)
      fi
      [[ $name == fleet3_sticky ]] && extra+=(--affinity 1)
      [[ -n "${REDIS_PORT_B:-}" && ${#REDIS_PORTS[@]} -eq 0 ]] && REDIS_PORTS=("$REDIS_PORT_B")
      for rp in "${REDIS_PORTS[@]:-}"; do
        [[ -n "$rp" ]] && redis-cli -p "$rp" config resetstat >/dev/null
      done
      if [[ $GEN == wrk ]]; then
        if ! run_wrk "http://127.0.0.1:$port/mcp" "$SESSIONS" "$CONNECTIONS" "$label" "$name" >>"$RESULTS"; then
          log "wrk failed against $label (server log: $WORK/$name.log)"
          tail -n 20 "$WORK/$name.log" >&2 || true
        fi
      elif timeout "$limit" "${loadgen_pin[@]}" "$LOADGEN" --url "http://127.0.0.1:$port/mcp" "${extra[@]}" \
          --sessions "$SESSIONS" --connections "$CONNECTIONS" --duration "$DURATION" --warmup "$WARMUP" \
          --tool find_tickets --args '{}' --label "$label" --pid "$SERVER_PID" --json \
          $([[ $name == *stateless ]] && echo --stateless) >"$WORK/last.json"; then
        # The target and shape, for the table of several shapes.
        jq -c --arg target "$name" --arg shape "$shape" '. + {target: $target, shape: $shape}' \
          "$WORK/last.json" >>"$RESULTS"
      else
        log "load generator failed against $label (server log: $WORK/$name.log)"
        tail -n 20 "$WORK/$name.log" >&2 || true
      fi
      if [[ -n "${REDIS_PORTS[*]:-}" ]]; then
        # Redis commands per tools/call on the hot path (setup included, so an upper bound),
        # summed over the cluster's nodes; CLUSTER and CONFIG commands left out.
        calls=$(tail -n 1 "$RESULTS" | sed -n 's/.*"requests":\([0-9]*\).*/\1/p')
        stats=$(for rp in "${REDIS_PORTS[@]}"; do redis-cli -p "$rp" info commandstats; done | grep -v -e '^cmdstat_cluster' -e '^cmdstat_config')
        cmds=$(sed -n 's/^cmdstat_\([a-z]*\):calls=\([0-9]*\).*/\1=\2/p' <<<"$stats" | tr '\n' ' ')
        total=$(awk -F'[=,]' '/^cmdstat_/ {n += $2} END {print n + 0}' <<<"$stats")
        log "Redis commands during the run: $cmds(total $total for ${calls:-?} measured calls)"
        if [[ -n "$calls" && "$calls" -gt 0 ]]; then
          log "Redis commands per tools/call: $(awk -v t="$total" -v c="$calls" 'BEGIN {printf "%.2f", t / c}')"
        fi
      fi
      stop_server
    done
  done
done

echo
if [[ $GEN == wrk || $SHAPES == *" "* ]]; then
  echo "MCP tools/call find_tickets {}, protocol 2025-11-25 with sessions; shapes (sessions x connections) $SHAPES, generator $GEN, ${DURATION}s measured after ${WARMUP}s warm-up, $ROUNDS round(s) interleaved; $(nproc) CPUs, PIN=$PIN; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  # Ratios to bare hyper's row of the same shape (to the first target's without hyper).
  versus=hyper
  [[ " $TARGETS " == *" hyper "* ]] || versus="${TARGETS%% *}"
  "$LOADGEN" table --versus "$versus" "$RESULTS" | tee "${OUT:-/dev/null}"
else
  echo "MCP tools/call find_tickets {}, protocol 2025-11-25 with sessions; $SESSIONS sessions x $CONNECTIONS connections, ${DURATION}s measured after ${WARMUP}s warm-up; $(nproc) CPUs, PIN=$PIN"
  echo
  "$LOADGEN" table --baseline "$LABEL_rmcp" "$RESULTS" | tee "${OUT:-/dev/null}"
fi
echo
echo "req/s counts successful calls only; latencies are of successful calls; RSS = server VmRSS after the run."
log "raw results: $RESULTS"
