#!/usr/bin/env bash
# bench/auth.sh: what authorization costs. help-desk answering `tools/call find_tickets {}` with
# sessions, rounds interleaved, three ways: `[auth]` off; on, every request carrying a JWT
# (RS256) found in the token cache after its first full check (the default); and on with
# `auth.token_cache_max = 0`, every request's JWT checked in full (signature against the cached
# JWKS key, iss, aud, exp/nbf). One table with the server's CPU per call. The authorization server is tools/auth/server.mjs
# (oauth2-mock-server, RS256), started here; it is not on the request path once the key is
# cached.
#
# Environment (all optional): SESSIONS=16 DURATION=5 WARMUP=1 ROUNDS=3 SKIP_BUILD=0 PIN=0
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start auth

SESSIONS="${SESSIONS:-16}"
DURATION="${DURATION:-5}"
WARMUP="${WARMUP:-1}"
ROUNDS="${ROUNDS:-3}"
server_pin=(); loadgen_pin=()
if [[ "${PIN:-0}" == 1 ]]; then server_pin=(taskset -c 1); loadgen_pin=(taskset -c 0); fi

[[ -d "$ROOT/tools/auth/node_modules/oauth2-mock-server" ]] || bash "$ROOT/tools/setup.sh" >&2
node "$ROOT/tools/auth/server.mjs" 0 >"$WORK/as.log" 2>&1 &
BENCH_PIDS+=($!)
for _ in $(seq 100); do grep -q '^ready ' "$WORK/as.log" && break; sleep 0.1; done
ISSUER="$(sed -n 's/^ready //p' "$WORK/as.log")"
[[ -n "$ISSUER" ]] || { echo "the authorization server did not start: $(cat "$WORK/as.log")" >&2; exit 1; }

RESULTS="$WORK/results.jsonl"
printf '[auth]\ntoken_cache_max = 0\n' >"$WORK/full.toml"
run_one() { # LABEL AUTH(0|1|full)
  local label=$1 auth=$2 port token=() env=()
  port="$("$LOADGEN" free-port)"
  local resource="http://127.0.0.1:$port/mcp"
  if [[ $auth == full ]]; then env=(FLEETMCP_CONFIG="$WORK/full.toml"); fi
  if [[ $auth != 0 ]]; then
    env+=(FLEETMCP_AUTH_ENABLED=true FLEETMCP_AUTH_ISSUER="$ISSUER" FLEETMCP_AUTH_RESOURCE="$resource"
         FLEETMCP_AUTH_JWKS_URI="$ISSUER/jwks")
    local t
    t="$(curl -sf -XPOST "$ISSUER/control/token" -H 'content-type: application/json' \
      -d "{\"claims\":{\"sub\":\"bench\",\"aud\":\"$resource\",\"scope\":\"tickets:read tickets:write\"},\"expires_in\":3600}" \
      | sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p')"
    token=(--bearer "$t")
  fi
  env PORT="$port" MCP_SESSION_SECRET="bench-secret-0123456789abcdef" RUST_LOG=warn "${env[@]}" \
    "${server_pin[@]}" "$BIN" >"$WORK/$label.log" 2>&1 &
  local pid=$!
  BENCH_PIDS+=("$pid")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  "${loadgen_pin[@]}" "$LOADGEN" --url "$resource" --sessions "$SESSIONS" --duration "$DURATION" \
    --warmup "$WARMUP" --label "$label" --pid "$pid" --json "${token[@]}" >>"$RESULTS"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

for round in $(seq "$ROUNDS"); do
  echo "[bench] round $round/$ROUNDS" >&2
  run_one "auth off" 0
  run_one "auth on (JWT RS256, token cache)" 1
  run_one "auth on (JWT RS256 verified in full per call)" full
done
echo "help-desk tools/call find_tickets {}, protocol 2025-11-25 with sessions; $SESSIONS sessions, ${DURATION}s measured after ${WARMUP}s warm-up, $ROUNDS rounds (median); $(nproc) CPUs, PIN=${PIN:-0}"
echo
"$LOADGEN" table --baseline "auth off" "$RESULTS"
