#!/usr/bin/env bash
# bench/scale.sh: what a fleet costs as it grows (issue 37). Starts INSTANCES distributed
# help-desks on one redis-server or a Redis Cluster (3 masters + 3 replicas), opens SESSIONS
# sessions over them (fleet-loadgen open), holds STREAMS idle SSE streams, sends CALLS calls
# to their holders and CALLS relayed through another instance, SIGKILLs one instance and waits
# for the others to claim its sessions; then prints one markdown table of coefficients, each
# measured (INFO commandstats, INFO memory, MEMORY USAGE, INFO clients, /proc) beside what the
# model (bench/capacity.model, docs/CAPACITY.md) predicts for this shape, with the ratio.
# The harness checks its own counts and exits 1 if one is wrong (sessions opened = records in
# Redis = entries of the holders' indexes = entries of the limit sets; calls answered; relayed
# calls answered by their holder; streams open; the dead instance's sessions all claimed; with
# DELAY_US, that a round trip between hosts takes the delay it should).
#
# Network delay (NETNS=1 DELAY_US=N): every hop between hosts (an instance and Redis, an instance
# and the holder it relays to) gets N µs each way, so that relay, takeover and confirmation
# costs include real hops. By `tc netem delay` on each host's veth where the kernel has netem;
# where it has not (this machine's: `Error: Specified qdisc kind is unknown.`), by user-space
# relays (`fleet-loadgen delay`, bench/loadgen/src/delay.rs), each chunk forwarded in order N µs
# after it was read: one on Redis's host in front of Redis (the instances' REDIS_URL names it;
# this script's own redis-cli goes around it) and one on each instance's host in front of its
# listener, which the instance advertises (FLEETMCP_ADVERTISE_ADDRESS), so the others' relayed
# requests go through it; the load generator reaches the instances directly (with netem, its
# packets to an instance are delayed N one way). Round trips through and around them (PING,
# GET /healthz, from an instance's host) are printed with the table and checked (>= 2N).
#
# Environment (all optional):
#   INSTANCES=3         help-desk instances (up to 50): RUST_LOG=warn, TOKIO_WORKER_THREADS=WORKERS
#   WORKERS=1           each instance's tokio worker threads
#   SESSIONS=2000       sessions opened, round robin over the instances (up to 1,000,000)
#   STREAMS=100         idle GET /mcp SSE streams held open on the first sessions, at their holders
#   HEAP=1              0: the heap a stream holds is not measured (1: glibc's bytes in use
#                       before and after the streams, malloc_stats(3) called in each instance
#                       by gdb, a second or so each; skipped without gdb)
#   CALLS=1000          tools/call sent to holders, and as many relayed (0: neither)
#   REDIS=single        single | cluster (3 masters, 3 replicas; commands summed over masters)
#   LIMIT=on            on: limits.max_sessions_per_key at its default (1,000), the sessions
#                       spread over loopback source addresses (at most 900 each) so the limit
#                       sets are counted; off: FLEETMCP_MAX_SESSIONS_PER_KEY=0 (no limit set)
#   WINDOW=20           seconds of each idle window (commands per instance per second, per
#                       stream): a whole number of heartbeat intervals (10 s by default)
#   NOTIFY=100          notify_session (page_session) and notify_resource_updated (close_ticket)
#                       sent, their PUBLISHes counted (0: none)
#   KILL=1              0: no recovery step
#   HEARTBEAT_MS=       the instances' heartbeat interval (unset: the server's default, 10 s;
#                       TTL 3x it). The recovery step waits for the heartbeat to expire.
#   CONCURRENCY=64      requests in flight while opening sessions
#   NETNS=0             1: Redis and every instance on hosts of their own (network namespaces
#                       joined by a bridge, veth pairs), loadgen in the root namespace
#   DELAY_US=0          NETNS=1: one-way delay between hosts, µs (netem, else the relays above;
#                       the relays need REDIS=single: a Cluster's MOVED names the nodes' ports)
#   CALL_CONCURRENCY=16 calls in flight in step 5 (their latency p50/p99 is in the table)
#   BENCHMARK=1         0: skip redis-benchmark's ops/s ceiling
#   PROFILE=release     or debug; SKIP_BUILD=1 uses what is built; HELP_DESK_BIN and
#                       LOADGEN_BIN name the binaries instead (the CI test's)
#   MODEL=bench/capacity.model   the coefficients predicted
#   OUT=                also append the table to this file
#   KEEP=0              1: keep the scratch folder (logs, ids) after the run
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=bench/lib.sh
source bench/lib.sh

INSTANCES="${INSTANCES:-3}"
WORKERS="${WORKERS:-1}"
SESSIONS="${SESSIONS:-2000}"
STREAMS="${STREAMS:-100}"
HEAP="${HEAP:-1}"
CALLS="${CALLS:-1000}"
REDIS="${REDIS:-single}"
LIMIT="${LIMIT:-on}"
WINDOW="${WINDOW:-20}"
KILL="${KILL:-1}"
HEARTBEAT_MS="${HEARTBEAT_MS:-}"
CONCURRENCY="${CONCURRENCY:-64}"
NETNS="${NETNS:-0}"
DELAY_US="${DELAY_US:-0}"
CALL_CONCURRENCY="${CALL_CONCURRENCY:-16}"
BENCHMARK="${BENCHMARK:-1}"
PROFILE="${PROFILE:-release}"
MODEL="${MODEL:-$ROOT/bench/capacity.model}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="${HELP_DESK_BIN:-$TARGET_DIR/$PROFILE/help-desk}"
LOADGEN="${LOADGEN_BIN:-$TARGET_DIR/$PROFILE/fleet-loadgen}"
SECRET="bench-secret-0123456789abcdef"

log() { printf '[scale %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }
(( INSTANCES >= 2 && INSTANCES <= 50 )) || die "INSTANCES must be 2..50"
[[ "$REDIS" == single || "$REDIS" == cluster ]] || die "REDIS must be single or cluster"
require scale.sh redis-server redis-cli curl awk
[[ "$NETNS" == 1 ]] && require scale.sh ip
[[ "$HEAP" == 1 ]] && ! command -v gdb >/dev/null && { log "no gdb: the heap a stream holds is not measured"; HEAP=0; }
[[ "$DELAY_US" =~ ^[0-9]+$ ]] || die "DELAY_US must be a whole number of µs"
(( DELAY_US == 0 || NETNS == 1 )) || die "DELAY_US needs NETNS=1 (hosts to put the delay between)"

# Two builds, not one: built together, the load generator's dependency features (rustix's
# timerfd) would be unified into the server's, a different help-desk than the one deployed.
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  prof=(); [[ "$PROFILE" == release ]] && prof=(--release)
  cargo build "${prof[@]}" -p help-desk >&2
  cargo build "${prof[@]}" -p fleet-loadgen >&2
fi
[[ -x "$BIN" && -x "$LOADGEN" ]] || die "missing $BIN or $LOADGEN (build first)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/fleetmcp-scale.XXXXXX")"
PIDS=()           # the instances, by index ("" once killed)
STREAM_PID=""
DELAY_PIDS=()     # the delaying relays (DELAY_US without netem)
NS=()             # namespaces made (NETNS=1)
REDIS_PIDFILES=()
cleanup() {
  [[ -n "$STREAM_PID" ]] && { kill -KILL "$STREAM_PID"; wait "$STREAM_PID"; } 2>/dev/null || true
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && { kill -KILL "$p"; wait "$p"; } 2>/dev/null || true; done
  for p in "${DELAY_PIDS[@]:-}"; do [[ -n "$p" ]] && { kill -KILL "$p"; wait "$p"; } 2>/dev/null || true; done
  for f in "${REDIS_PIDFILES[@]:-}"; do [[ -f "$f" ]] && kill -KILL "$(cat "$f")" 2>/dev/null || true; done
  if [[ "$NETNS" == 1 ]]; then
    for n in "${NS[@]:-}"; do [[ -n "$n" ]] && ip netns del "$n" 2>/dev/null || true; done
    ip link del scale-br 2>/dev/null || true
    ip route del local 10.78.0.0/16 dev lo 2>/dev/null || true
  fi
  if [[ "${KEEP:-0}" == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- hosts -----------------------------------------------------------------------------------
# Loopback: everything on 127.0.0.1. NETNS=1: a bridge scale-br (10.77.0.1/16) in the root
# namespace; Redis's host 10.77.0.2 (namespace scale-redis), instance i's 10.77.1.(i+1)
# (namespace scale-i<i>), each joined to the bridge by a veth pair; the load generator's
# source addresses 10.78.x.y are local to the root namespace (a `local` route).
# DELAY_US: DELAY_MODE is netem once the first host's qdisc is made, relay if the kernel
# refuses it (then no host gets one).
DELAY_MODE=none; DELAY_NOTE="no added delay"
in_host() { # HOST-NAMESPACE CMD... (runs CMD there, or here on loopback)
  local n="$1"; shift
  if [[ "$NETNS" == 1 ]]; then ip netns exec "$n" "$@"; else "$@"; fi
}
make_host() { # NAME ADDRESS
  local n="$1" addr="$2" v="sv${#NS[@]}"
  ip netns add "$n"; NS+=("$n")
  ip link add "$v" type veth peer name "${v}p"
  ip link set "${v}p" netns "$n"
  ip link set "$v" master scale-br up
  ip -n "$n" link set lo up
  ip -n "$n" link set "${v}p" name eth0
  ip -n "$n" addr add "$addr/16" dev eth0
  ip -n "$n" link set eth0 up
  ip -n "$n" route add default via 10.77.0.1
  if (( DELAY_US > 0 )) && [[ "$DELAY_MODE" != relay ]]; then
    local err
    if err="$(ip netns exec "$n" tc qdisc add dev eth0 root netem delay "${DELAY_US}us" 2>&1)"; then
      DELAY_MODE=netem; DELAY_NOTE="tc netem delay ${DELAY_US}us on every host's veth"
    else
      [[ "$DELAY_MODE" == netem ]] && die "tc netem failed on $n after working: $err"
      DELAY_MODE=relay
      DELAY_NOTE="${DELAY_US} µs each way by user-space relays (fleet-loadgen delay${RT:+, chrt -f 1}) in front of Redis and of each instance's advertised address; tc netem failed: ${err//$'\n'/ }"
    fi
  fi
}
# The relays run at real-time priority where allowed (chrt -f 1): a wire's delay does not wait
# for a CPU, and on a loaded machine a relay woken by its timer behind busy tasks added
# milliseconds (p90 of PINGs through a 250 µs relay: 4-6 ms at load 9; 0.7 ms with chrt). They
# sleep on timers and copy bytes: little CPU, and the kernel's RT throttling bounds it.
RT=(); chrt -f 1 true 2>/dev/null && RT=(chrt -f 1)
start_delay() { # HOST-NAMESPACE LISTEN TO: a delaying relay on that host
  ip netns exec "$1" "${RT[@]}" "$LOADGEN" delay --listen "$2" --to "$3" --one-way-us "$DELAY_US" 2>>"$WORK/delay.log" &
  DELAY_PIDS+=($!)
  local h="${2%:*}" p="${2##*:}"
  for _ in $(seq 50); do ip netns exec "$1" bash -c "exec 3<>/dev/tcp/$h/$p" 2>/dev/null && return; sleep 0.1; done
  die "delaying relay $2 did not start: $(cat "$WORK/delay.log")"
}
REDIS_HOST=127.0.0.1
if [[ "$NETNS" == 1 ]]; then
  ip link add scale-br type bridge
  ip addr add 10.77.0.1/16 dev scale-br
  ip link set scale-br up
  ip route add local 10.78.0.0/16 dev lo
  make_host scale-redis 10.77.0.2
  REDIS_HOST=10.77.0.2
  log "delay: $DELAY_NOTE"
  [[ "$DELAY_MODE" == relay && "$REDIS" != single ]] && die "the delaying relays need REDIS=single (a Cluster's MOVED replies name the nodes' own ports)"
fi
rcli() { redis-cli -h "$REDIS_HOST" "$@"; }

# --- Redis -----------------------------------------------------------------------------------
MASTERS=()      # ports of the masters (commands, memory and clients are summed over them)
REDIS_PIDS=()
start_redis() { # PORT [cluster args...]
  local p="$1"; shift
  in_host scale-redis redis-server --port "$p" --bind "$REDIS_HOST" --save "" --appendonly no \
    --dir "$WORK" --daemonize yes --pidfile "$WORK/redis-$p.pid" --maxclients 20000 --protected-mode no "$@" >/dev/null
  REDIS_PIDFILES+=("$WORK/redis-$p.pid")
  for _ in $(seq 100); do rcli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  rcli -p "$p" ping >/dev/null || die "redis-server did not start on $p"
}
if [[ "$REDIS" == single ]]; then
  p="$([[ "$NETNS" == 1 ]] && echo 6379 || free_port)"
  start_redis "$p"
  MASTERS=("$p")
  REDIS_ENV="REDIS_URL=redis://$REDIS_HOST:$p"
  if [[ "$DELAY_MODE" == relay ]]; then
    start_delay scale-redis "$REDIS_HOST:6380" "$REDIS_HOST:$p"
    REDIS_ENV="REDIS_URL=redis://$REDIS_HOST:6380"
  fi
else
  ports=()
  while [[ ${#ports[@]} -lt 6 ]]; do
    p="$(free_port)"
    (( p + 10000 < 65536 )) || continue
    (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null && continue
    start_redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 2000
    ports+=("$p")
  done
  rcli --cluster create $(printf "$REDIS_HOST:%s " "${ports[@]}") --cluster-replicas 1 --cluster-yes >/dev/null
  for _ in $(seq 100); do rcli -p "${ports[0]}" cluster info | grep -q cluster_state:ok && break; sleep 0.1; done
  sleep 1
  mapfile -t MASTERS < <(rcli -p "${ports[0]}" cluster nodes | awk '/master/ && !/fail/ {split($2, a, "[:@]"); print a[2]}')
  [[ ${#MASTERS[@]} == 3 ]] || die "expected 3 masters, got ${MASTERS[*]}"
  REDIS_ENV="REDIS_CLUSTER_NODES=$(printf "$REDIS_HOST:%s," "${ports[@]}")"
  REDIS_ENV="${REDIS_ENV%,}"
fi
for p in "${MASTERS[@]}"; do REDIS_PIDS+=("$(cat "$WORK/redis-$p.pid")"); done

# Sums of Redis figures over the masters.
cmd_total() { # commands executed so far, but this script's (CLUSTER, CONFIG, INFO, SCAN, MEMORY, ...) and replication's (REPLCONF)
  for p in "${MASTERS[@]}"; do rcli -p "$p" info commandstats; done \
    | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_/ && !/cmdstat_(cluster|config|info|scan|memory|dbsize|slowlog|command|replconf)[:|]/ {n += $3} END {print n + 0}'
}
cmd_by_name() { # the same, by command: "name=calls" lines
  for p in "${MASTERS[@]}"; do rcli -p "$p" info commandstats; done | tr -d '\r' \
    | awk -F'[:=,]' '/^cmdstat_/ {sub("cmdstat_", "", $1); n[$1] += $3} END {for (k in n) printf "%s=%d\n", k, n[k]}'
}
cmd_delta() { # BEFORE AFTER (cmd_by_name outputs) -> "name=delta ..." for those that moved
  awk -F= 'NR == FNR {b[$1] = $2; next} $2 - b[$1] > 0 && $1 !~ /^(cluster|config|info|scan|memory|dbsize|slowlog|command|replconf)($|\|)/ {printf "%s=%d ", $1, $2 - b[$1]}' <(echo "$1") <(echo "$2")
}
redis_mem() { for p in "${MASTERS[@]}"; do rcli -p "$p" info memory; done | tr -d '\r' | awk -F: '/^used_memory:/ {n += $2} END {print n + 0}'; }
redis_clients() { for p in "${MASTERS[@]}"; do rcli -p "$p" info clients; done | tr -d '\r' | awk -F: '/^connected_clients:/ {n += $2} END {print n + 0}'; }
redis_pubsub() { for p in "${MASTERS[@]}"; do rcli -p "$p" info stats; done | tr -d '\r' | awk -F: '/^(pubsub_channels|pubsubshard_channels):/ {n += $2} END {print n + 0}'; }
redis_cpu() { local t=0 p; for p in "${REDIS_PIDS[@]}"; do t=$((t + $(proc_ticks "$p"))); done; echo "$t"; }
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
proc_rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
fleet_ticks() { local t=0 p; for p in "${PIDS[@]}"; do [[ -n "$p" ]] && t=$((t + $(proc_ticks "$p"))); done; echo "$t"; }
# glibc's bytes in use summed over the instances (each stops for a moment under gdb).
fleet_heap_bytes() { local t=0 i; for i in "${!PIDS[@]}"; do [[ -n "${PIDS[$i]}" ]] && t=$((t + $(malloc_totals "${PIDS[$i]}" "$WORK/desk-$i.log" | cut -d' ' -f2))); done; echo "$t"; }
fleet_rss_kib() { local t=0 p; for p in "${PIDS[@]}"; do [[ -n "$p" ]] && t=$((t + $(proc_rss_kib "$p"))); done; echo "$t"; }
load1() { cut -d' ' -f1 /proc/loadavg; }
# A key's master (cluster) or the one Redis.
key_port() { # KEY
  if [[ "$REDIS" == single ]]; then echo "${MASTERS[0]}"; return; fi
  local slot; slot="$(rcli -p "${MASTERS[0]}" cluster keyslot "$1")"
  rcli -p "${MASTERS[0]}" cluster nodes | awk -v s="$slot" '/master/ {split($2, a, "[:@]"); for (i = 9; i <= NF; i++) {split($i, r, "-"); if (r[2] == "") r[2] = r[1]; if (s >= r[1] && s <= r[2]) print a[2]}}' | head -1
}
kcli() { local k="$2" c="$1"; shift 2; rcli -p "$(key_port "$k")" "$c" "$k" "$@"; }

# --- instances -------------------------------------------------------------------------------
cat >"$WORK/fleet.toml" <<TOML
[sessions]
max_sessions = $(( SESSIONS + 10000 ))
[http]
allowed_hosts = ["*"]
TOML
URLS=(); MACHINES=()
ADVERTISED=()     # where the others relay to (the delaying relay's port with DELAY_MODE=relay)
limit_env=()
[[ "$LIMIT" == off ]] && limit_env=(FLEETMCP_MAX_SESSIONS_PER_KEY=0)
hb_env=()
[[ -n "$HEARTBEAT_MS" ]] && hb_env=(FRONTMCP_HA_HEARTBEAT_INTERVAL_MS="$HEARTBEAT_MS" FRONTMCP_HA_HEARTBEAT_TTL_MS=$(( HEARTBEAT_MS * 3 )))
log "starting $INSTANCES instances on $REDIS Redis ($PROFILE build, NETNS=$NETNS)"
for i in $(seq 0 $((INSTANCES - 1))); do
  if [[ "$NETNS" == 1 ]]; then
    host="10.77.1.$((i + 1))"; port=3000
    make_host "scale-i$i" "$host"
    advertise="$host:$port"
    if [[ "$DELAY_MODE" == relay ]]; then
      start_delay "scale-i$i" "$host:$((port + 1))" "127.0.0.1:$port"
      advertise="$host:$((port + 1))"
    fi
  else
    host=127.0.0.1; port="$(free_port)"; advertise="$host:$port"
  fi
  # Small instances (few threads, warn logs); `ip netns exec` and `env` both exec, so $! is
  # the help-desk's own pid (its CPU, RSS, and the SIGKILL of the recovery step).
  ns_exec=(); [[ "$NETNS" == 1 ]] && ns_exec=(ip netns exec "scale-i$i")
  "${ns_exec[@]}" env "$REDIS_ENV" PORT="$port" MACHINE_ID="desk-$i" \
    FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS="$([[ "$NETNS" == 1 ]] && echo all || echo loopback)" \
    FLEETMCP_ADVERTISE_ADDRESS="$advertise" FLEETMCP_CONFIG="$WORK/fleet.toml" \
    MCP_SESSION_SECRET="$SECRET" RUST_LOG="${SERVER_RUST_LOG:-warn}" TOKIO_WORKER_THREADS="$WORKERS" \
    "${limit_env[@]}" "${hb_env[@]}" "$BIN" >"$WORK/desk-$i.log" 2>&1 &
  PIDS+=($!)
  URLS+=("http://$host:$port/mcp"); MACHINES+=("desk-$i"); ADVERTISED+=("$advertise")
done
for i in "${!URLS[@]}"; do
  ok=""
  for _ in $(seq 600); do
    curl -fsS -m 2 -o /dev/null "${URLS[$i]%/mcp}/readyz" 2>/dev/null && { ok=1; break; }
    kill -0 "${PIDS[$i]}" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$ok" ]] || { tail -5 "$WORK/desk-$i.log" >&2; die "instance $i not ready"; }
done
url_list="$(IFS=,; echo "${URLS[*]}")"; machine_list="$(IFS=,; echo "${MACHINES[*]}")"
FAILED=()
check() { # WHAT EXPECTED GOT
  if [[ "$2" == "$3" ]]; then log "check: $1: $3"; else FAILED+=("$1: expected $2, got $3"); log "CHECK FAILED: $1: expected $2, got $3"; fi
}
# Measured figures by model key (printed at the end against the model).
declare -A M
declare -A NOTE
meas() { M[$1]="$2"; [[ -n "${3:-}" ]] && NOTE[$1]="$3"; return 0; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b + 0 == 0) print "-"; else printf "%.2f", a / b}'; }
div() { awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {if (b + 0 == 0) print "-"; else printf "%.*f", d, a / b}'; }
jq_us() { sed -n "s/.*\"$2\":{[^}]*\"$3\":\([0-9]*\).*/\1/p" "$1"; } # FILE OBJECT KEY: a latency of fleet-loadgen's JSON

# --- 0. the hops between hosts (NETNS=1): round trips from an instance's host, around the
# delaying relays and through them (with netem, both are the one delayed path) ----------------
HOPS_NOTE=""
if [[ "$NETNS" == 1 ]]; then
  rtt() { in_host "$1" "$LOADGEN" rtt "${@:2}" --count 200 | sed -n 's/.*"p50_us":\([0-9]*\).*/\1/p'; }
  redis_direct="$(rtt scale-i0 --redis "$REDIS_HOST:${MASTERS[0]}")"
  redis_via="$(rtt scale-i0 --redis "${REDIS_ENV#*redis://}")"
  [[ "$REDIS" == single ]] || redis_via="$redis_direct"
  desk_direct="$(rtt scale-i1 --url "${URLS[0]%/mcp}/healthz")"
  desk_via="$(rtt scale-i1 --url "http://${ADVERTISED[0]}/healthz")"
  HOPS_NOTE="round trips p50 (fleet-loadgen rtt, 200 each): instance to Redis PING ${redis_direct} µs direct, ${redis_via} µs as the instances reach it; instance to instance GET /healthz ${desk_direct} µs direct, ${desk_via} µs at the advertised address"
  log "$HOPS_NOTE"
  # Where the others relay to: the address each heartbeat advertises (the delaying relay's).
  adv_ok=0
  for i in "${!MACHINES[@]}"; do
    kcli GET "mcp:ha:heartbeat:${MACHINES[$i]}" | grep -qF "\"address\":\"${ADVERTISED[$i]}\"" && adv_ok=$((adv_ok + 1))
  done
  check "heartbeats advertising the address the others relay to (${ADVERTISED[0]}, ...)" "$INSTANCES" "$adv_ok"
  if [[ "$DELAY_MODE" != none ]]; then
    check "a round trip to Redis takes the delay (>= 2 x $DELAY_US µs)" yes "$( (( redis_via >= 2 * DELAY_US )) && echo yes || echo "no: $redis_via µs")"
    check "a round trip to the holder takes the delay (>= 2 x $DELAY_US µs)" yes "$( (( desk_via >= 2 * DELAY_US )) && echo yes || echo "no: $desk_via µs")"
  fi
fi

# An idle window: commands per instance per second (the fleet as it stands).
idle_window() { # NAME -> commands in WINDOW seconds (by command in the log)
  local c0 c1 b0 b1
  b0="$(cmd_by_name)"; c0="$(cmd_total)"; sleep "$WINDOW"; c1="$(cmd_total)"; b1="$(cmd_by_name)"
  log "idle window, $1: $(( c1 - c0 )) commands in ${WINDOW} s: $(cmd_delta "$b0" "$b1")"
  echo $(( c1 - c0 ))
}

# --- 1. the empty fleet, idle -----------------------------------------------------------------
# The scanners' first runs wait one heartbeat interval plus the takeover grace (5 s): idle
# figures are taken after them.
hb_s=$(( ${HEARTBEAT_MS:-10000} / 1000 ))
log "waiting $(( hb_s + 6 )) s for the scanners' first runs"
sleep $(( hb_s + 6 ))
LOAD_START="$(cat /proc/loadavg | cut -d' ' -f1-3)"
idle0="$(idle_window "no sessions")"
meas idle_commands_per_instance_per_s "$(div "$idle0" $((INSTANCES * WINDOW)) 2)" "no sessions, ${WINDOW} s, load $(load1)"
[[ "$idle0" -gt 0 ]] && check "idle commands counted (nonzero)" yes yes || check "idle commands counted (nonzero)" yes no
meas redis_connections_per_instance "$(div "$(( $(redis_clients) - 1 ))" "$INSTANCES" 2)" "INFO clients connected_clients (summed over masters, less redis-cli) / I"
meas redis_pubsub_channels_per_instance "$(div "$(redis_pubsub)" "$INSTANCES" 2)" "INFO stats pubsub_channels + pubsubshard_channels / I"

# --- 2. sessions ------------------------------------------------------------------------------
sources=1; src_base=127.1.0.0
[[ "$LIMIT" == on ]] && sources=$(( (SESSIONS + 899) / 900 ))
[[ "$NETNS" == 1 ]] && src_base=10.78.0.0
b0="$(cmd_by_name)"; mem0="$(redis_mem)"; rss0="$(fleet_rss_kib)"; c0="$(cmd_total)"; rt0="$(redis_cpu)"; ft0="$(fleet_ticks)"; t0="$(date +%s%N)"
log "opening $SESSIONS sessions ($CONCURRENCY at once, $sources source address(es))"
"$LOADGEN" open --urls "$url_list" --machines "$machine_list" --sessions "$SESSIONS" \
  --concurrency "$CONCURRENCY" --sources "$sources" --source-base "$src_base" --out "$WORK/ids" >"$WORK/open.json"
t1="$(date +%s%N)"; c1="$(cmd_total)"; rt1="$(redis_cpu)"; ft1="$(fleet_ticks)"
log "commands while opening: $(cmd_delta "$b0" "$(cmd_by_name)")"
open_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print (b - a) / 1e9}')"
opened="$(sed -n 's/.*"opened":\([0-9]*\).*/\1/p' "$WORK/open.json")"
log "open: $(cat "$WORK/open.json" | cut -c1-400)"
check "sessions opened" "$SESSIONS" "$opened"
check "initialize answers naming another instance" 0 "$(sed -n 's/.*"machine_mismatches":\([0-9]*\).*/\1/p' "$WORK/open.json")"
ready=0
for u in "${URLS[@]}"; do curl -fsS -m 5 -o /dev/null "${u%/mcp}/readyz" 2>/dev/null && ready=$((ready + 1)); done
check "instances ready with the sessions held" "$INSTANCES" "$ready"
idle_rate="$(awk -v c="$idle0" -v w="$WINDOW" 'BEGIN {print c / w}')"
open_cmds="$(awk -v d="$((c1 - c0))" -v r="$idle_rate" -v s="$open_s" 'BEGIN {print d - r * s}')"
meas commands_per_initialize "$(div "$open_cmds" "$opened" 2)" "$opened in ${open_s%.*} s ($(div "$opened" "$open_s" 0)/s), load $(load1)"
meas redis_cpu_per_initialize_us "$(div "$(( (rt1 - rt0) * 10000 ))" "$opened" 1)" "redis-server CPU $(div "$(( rt1 - rt0 ))" "$(awk -v s="$open_s" 'BEGIN {print s}')" 0)% while opening"
meas process_cpu_per_initialize_us "$(div "$(( (ft1 - ft0) * 10000 ))" "$opened" 1)" "all instances' CPU / sessions opened"
meas initialize_p50_us "$(jq_us "$WORK/open.json" initialize p50_us)" "an initialize's latency at the load generator, $CONCURRENCY in flight"
meas initialize_p99_us "$(jq_us "$WORK/open.json" initialize p99_us)" "the same, p99"
sleep 2
mem1="$(redis_mem)"; rss1="$(fleet_rss_kib)"
meas redis_bytes_per_idle_session "$(div "$(( mem1 - mem0 ))" "$opened" 0)" "INFO memory used_memory delta / sessions"
meas process_rss_per_idle_session "$(div "$(( (rss1 - rss0) * 1024 ))" "$opened" 0)" "sum of VmRSS delta / sessions"
# Structures, by MEMORY USAGE (SAMPLES 0: every element).
sid="$(sed -n '1s/^[0-9]* //p' "$WORK/ids")"
meas record_bytes "$(rcli -p "$(key_port "mcp:session:$sid")" MEMORY USAGE "mcp:session:$sid")" "MEMORY USAGE mcp:session:<id> (one record)"
# One script per master walks its keyspace (SCAN, 10,000 a step) and returns how many keys match
# PATTERN, with SIZES=1 the sum of their entries (ZCARD, SCARD, HLEN or LLEN by type) and of
# their MEMORY USAGE (SIZES=2: the sessions the per-key counts' values hold, a letter a granule
# then its count unless 1, the mark `~` of a full hash left out), and the first one: a million keys in seconds (redis-cli --scan has no
# --count before Redis 7.2). By pattern and type, so that an index or limit set split into
# buckets, or kept in another type, is still counted whole (issue 37 changes both).
COUNT_KEYS='local n, z, m, first, cur = 0, 0, 0, false, "0"
local size = {zset = "ZCARD", set = "SCARD", hash = "HLEN", list = "LLEN"}
repeat
  local r = redis.call("SCAN", cur, "MATCH", ARGV[1], "COUNT", 10000)
  cur = r[1]
  for _, k in ipairs(r[2]) do
    n = n + 1
    if not first then first = k end
    if ARGV[2] == "2" then
      local kv = redis.call("HGETALL", k)
      for i = 1, #kv, 2 do
        if kv[i] ~= "~" then
          for _, c in string.gmatch(kv[i + 1], "(%a)(%d*)") do z = z + (tonumber(c) or 1) end
        end
      end
      m = m + (redis.call("MEMORY", "USAGE", k, "SAMPLES", "0") or 0)
    elseif ARGV[2] == "1" then
      local c = size[redis.call("TYPE", k).ok]
      if c then z = z + redis.call(c, k) end
      m = m + (redis.call("MEMORY", "USAGE", k, "SAMPLES", "0") or 0)
    end
  end
until cur == "0"
return {n, z, m, first or ""}'
count_keys() { # PATTERN SIZES(0|1|2: entries summed from a hash's values) -> "keys entries bytes first-key"
  local p n=0 z=0 m=0 first="" out
  for p in "${MASTERS[@]}"; do
    mapfile -t out < <(rcli -p "$p" EVAL "$COUNT_KEYS" 0 "$1" "$2")
    n=$(( n + out[0] )); z=$(( z + out[1] )); m=$(( m + out[2] ))
    [[ -z "$first" && -n "${out[3]:-}" ]] && first="${out[3]}"
  done
  echo "$n $z $m $first"
}
# The entries of one instance's index, polled during the recovery: on one Redis, one script
# summing the ZCARD of an old version's single sorted set `mcp:node:<id>:sessions` and of each
# bucket `mcp:node:<id>:sessions:<n>` below the count in `mcp:node:<id>:buckets` (named, never
# a SCAN: a SCAN of a million keys blocks Redis for a second, and the scanner's commands time
# out behind it); on a Cluster (buckets in many slots) every key under that name.
INDEX_SIZE='local total = 0
if redis.call("TYPE", ARGV[1]).ok == "zset" then total = redis.call("ZCARD", ARGV[1]) end
local count = tonumber(redis.call("GET", ARGV[2]) or "0")
for i = 0, count - 1 do total = total + redis.call("ZCARD", ARGV[1] .. ":" .. i) end
return total'
index_entries() { # MACHINE
  local key="mcp:node:$1:sessions" n
  if (( ${#MASTERS[@]} == 1 )); then
    rcli -p "${MASTERS[0]}" EVAL "$INDEX_SIZE" 0 "$key" "mcp:node:$1:buckets"
  else
    read -r _ n _ _ < <(count_keys "$key*" 1)
    echo "$n"
  fi
}
# Every record, index entry and limit-set entry, counted (outside every measured window).
read -r nidx idx_sum idx_mem _ < <(count_keys 'mcp:node:*:sessions*' 1)
check "entries of the holders' indexes" "$opened" "$idx_sum"
meas node_index_bytes_per_entry "$(div "$idx_mem" "$idx_sum" 0)" "MEMORY USAGE SAMPLES 0 of mcp:node:*:sessions* ($nidx keys) / their entries"
read -r records _ _ _ < <(count_keys 'mcp:session:*' 0)
check "session records in Redis" "$opened" "$records"
if [[ "$LIMIT" == on ]]; then
  # Each key's sessions are counted in one field (granules and counts) of hashes many keys
  # share (limits/session_counts.rs), not an entry each.
  read -r nsets limit_sum limit_mem lkey < <(count_keys 'mcp:limits:{s*}:sessions:*' 2)
  check "sessions counted by the per-key counts" "$opened" "$limit_sum"
  meas limit_set_bytes_per_entry "$(div "$limit_mem" "$limit_sum" 2)" "MEMORY USAGE SAMPLES 0 of mcp:limits:{s*}:sessions:* ($nsets keys, e.g. $lkey) / the sessions they count"
fi

# --- 3. the fleet idle with its sessions --------------------------------------------------------
idle1="$(idle_window "$opened sessions")"
meas idle_commands_per_instance_per_s_with_sessions "$(div "$idle1" $((INSTANCES * WINDOW)) 2)" "$opened idle sessions, load $(load1)"

# --- 4. idle streams ---------------------------------------------------------------------------
if (( STREAMS > 0 )); then
  [[ "$HEAP" == 1 ]] && heap0="$(fleet_heap_bytes)"
  b0="$(cmd_by_name)"; rss0="$(fleet_rss_kib)"; c0="$(cmd_total)"
  rm -f "$WORK/streams.ready"
  "$LOADGEN" streams --urls "$url_list" --ids "$WORK/ids" --streams "$STREAMS" --concurrency 256 \
    --hold 3600 --ready "$WORK/streams.ready" >"$WORK/streams.json" 2>"$WORK/streams.log" &
  STREAM_PID=$!
  for _ in $(seq 1800); do [[ -s "$WORK/streams.ready" ]] && break; kill -0 "$STREAM_PID" 2>/dev/null || break; sleep 0.1; done
  [[ -s "$WORK/streams.ready" ]] || die "streams did not open: $(cat "$WORK/streams.log")"
  c1="$(cmd_total)"
  log "commands while opening $STREAMS streams: $(cmd_delta "$b0" "$(cmd_by_name)")"
  check "idle streams open" "$STREAMS" "$(sed -n 's/.*"opened":\([0-9]*\).*/\1/p' "$WORK/streams.ready")"
  meas commands_per_stream_open "$(div "$(( c1 - c0 ))" "$STREAMS" 2)" "GET /mcp, idle ones"
  sleep 1
  meas process_rss_per_idle_stream "$(div "$(( ($(fleet_rss_kib) - rss0) * 1024 ))" "$STREAMS" 0)" "sum of VmRSS delta / streams (less than the heap by the free heap the streams reuse)"
  [[ "$HEAP" == 1 ]] && meas process_heap_per_idle_stream "$(div "$(( $(fleet_heap_bytes) - heap0 ))" "$STREAMS" 0)" "sum of glibc's bytes in use (malloc_stats) delta / streams"
  idle2="$(idle_window "$opened sessions, $STREAMS streams")"
  meas commands_per_idle_stream_per_s "$(awk -v a="$idle2" -v b="$idle1" -v t="$STREAMS" -v w="$WINDOW" 'BEGIN {printf "%.4f", (a - b) / t / w}')" "(idle window with streams - without) / T / s"
  meas redis_connections_per_instance_with_streams "$(div "$(( $(redis_clients) - 1 ))" "$INSTANCES" 2)" "INFO clients, $STREAMS streams open"
  kill -KILL "$STREAM_PID" 2>/dev/null || true; wait "$STREAM_PID" 2>/dev/null || true; STREAM_PID=""
  sleep 1
fi

# --- 5. calls: held, then relayed ----------------------------------------------------------------
if (( CALLS > 0 )); then
  for relay in 0 1; do
    b0="$(cmd_by_name)"; c0="$(cmd_total)"; ft0="$(fleet_ticks)"; t0="$(date +%s%N)"
    "$LOADGEN" calls --urls "$url_list" --machines "$machine_list" --ids "$WORK/ids" --calls "$CALLS" \
      --relay "$relay" --concurrency "$CALL_CONCURRENCY" >"$WORK/calls-$relay.json"
    t1="$(date +%s%N)"; c1="$(cmd_total)"; ft1="$(fleet_ticks)"
    secs="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print (b - a) / 1e9}')"
    okc="$(sed -n 's/.*"ok":\([0-9]*\).*/\1/p' "$WORK/calls-$relay.json")"
    net="$(awk -v d="$((c1 - c0))" -v r="$idle_rate" -v s="$secs" 'BEGIN {print d - r * s}')"
    name=$([[ $relay == 1 ]] && echo relayed || echo held)
    log "commands during $CALLS $name calls: $(cmd_delta "$b0" "$(cmd_by_name)")"
    check "$name calls answered" "$CALLS" "$okc"
    [[ $relay == 1 ]] && check "relayed calls answered by their holder through another instance" "$CALLS" \
      "$(sed -n 's/.*"relayed":\([0-9]*\).*/\1/p' "$WORK/calls-1.json")"
    meas "commands_per_${name}_call" "$(div "$net" "$okc" 3)" "$okc first calls of idle sessions, $(div "$okc" "$secs" 0)/s, load $(load1)"
    meas "process_cpu_per_${name}_call_us" "$(div "$(( (ft1 - ft0) * 10000 ))" "$okc" 0)" "all instances' CPU / calls"
    meas "${name}_call_p50_us" "$(jq_us "$WORK/calls-$relay.json" latency p50_us)" "a call's latency at the load generator, $CALL_CONCURRENCY in flight"
    meas "${name}_call_p99_us" "$(jq_us "$WORK/calls-$relay.json" latency p99_us)" "the same, p99"
  done
  meas relayed_call_added_p50_us "$(( M[relayed_call_p50_us] - M[held_call_p50_us] ))" "relayed p50 - held p50"
  meas relayed_call_added_p99_us "$(( M[relayed_call_p99_us] - M[held_call_p99_us] ))" "relayed p99 - held p99"
fi

# --- 6. notifications fanned out: Redis messages per notify_session and per resource update -------
# Session A (held by desk-0) pages session B (held by desk-1): notify_session; A closes its
# ticket NOTIFY times: notify_resource_updated. PUBLISHes counted by commandstats; the
# deliveries are the channel's subscribers (PUBSUB NUMSUB, summed over masters).
NOTIFY="${NOTIFY:-100}"
tool_call() { # URL SESSION NAME ARGS -> the answer's body
  curl -sS -m 10 -X POST "$1" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -H "mcp-session-id: $2" -H 'mcp-protocol-version: 2025-11-25' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"$3\",\"arguments\":$4}}"
}
numsub() { local p n=0; for p in "${MASTERS[@]}"; do n=$(( n + $(rcli -p "$p" PUBSUB NUMSUB "$1" | sed -n 2p) )); done; echo "$n"; }
if (( NOTIFY > 0 )); then
  sa="$(awk '$1 == 0 {print $2; exit}' "$WORK/ids")"; sb="$(awk '$1 == 1 {print $2; exit}' "$WORK/ids")"
  publishes() { cmd_by_name | awk -F= '$1 ~ /^s?publish$/ {n += $2} END {print n + 0}'; }
  p0="$(publishes)"; paged=0
  for _ in $(seq "$NOTIFY"); do
    answer="$(tool_call "${URLS[0]}" "$sa" page_session "{\"session_id\":\"$sb\",\"message\":\"hi\"}")"
    if [[ "$answer" == *'"delivered":true'* ]]; then paged=$((paged + 1)); elif (( paged == 0 )); then log "page answered: ${answer:0:300}"; fi
  done
  p1="$(publishes)"
  check "pages delivered to a session held by another instance" "$NOTIFY" "$paged"
  meas pubsub_messages_per_notify_session "$(div "$(( p1 - p0 ))" "$NOTIFY" 2)" "PUBLISH per page_session to another instance's session; subscribers of its channel: $(numsub mcp:ha:notify:desk-1)"
  tid="$(tool_call "${URLS[0]}" "$sa" open_ticket '{"title":"scale"}' | sed -n 's/.*"id":\([0-9]*\).*"title".*/\1/p' | head -1)"
  p0="$(publishes)"
  for _ in $(seq "$NOTIFY"); do tool_call "${URLS[0]}" "$sa" close_ticket "{\"id\":${tid:-1},\"resolution\":\"done\"}" >/dev/null; done
  p1="$(publishes)"
  meas pubsub_messages_per_resource_update "$(div "$(( p1 - p0 ))" "$NOTIFY" 2)" "PUBLISH per notify_resource_updated (close_ticket); subscribers of mcp:ha:changes (deliveries each): $(numsub mcp:ha:changes)"
fi

# --- 7. recovery: SIGKILL the holder of instance 0's sessions -------------------------------------
if [[ "$KILL" == 1 ]]; then
  victim=0
  k="$(index_entries "desk-$victim")"
  survivors=0
  for i in "${!MACHINES[@]}"; do (( i == victim )) || survivors=$(( survivors + $(index_entries "${MACHINES[$i]}") )); done
  b0="$(cmd_by_name)"; c0="$(cmd_total)"; polls=0; t0="$(date +%s%N)"
  kill -KILL "${PIDS[$victim]}"; wait "${PIDS[$victim]}" 2>/dev/null || true; PIDS[$victim]=""
  log "SIGKILL desk-$victim holding $k sessions; waiting for the others to claim them"
  detected=""; first_claim=""; done_at=""
  limit_s=$(( ${HEARTBEAT_MS:-10000} * 6 / 1000 + 60 + k / 1000 ))
  while (( ($(date +%s%N) - t0) / 1000000000 < limit_s )); do
    # One EVAL (and its GET) a poll; its TYPE and ZCARDs are taken out below (the scanner
    # sends neither in a claim, but one ZCARD a run).
    left="$(index_entries "desk-$victim")"; polls=$((polls + 2))
    if [[ -z "$detected" ]]; then
      [[ "$(kcli EXISTS "mcp:ha:heartbeat:desk-$victim")" == 0 ]] && detected="$(date +%s%N)"; polls=$((polls + 1))
    fi
    [[ "$left" -lt "$k" && -z "$first_claim" ]] && first_claim="$(date +%s%N)"
    [[ -n "$first_claim" && -z "$detected" ]] && detected="$first_claim"
    [[ "$left" == 0 ]] && { done_at="$(date +%s%N)"; break; }
    sleep 0.1
  done
  c1="$(cmd_total)"; b1="$(cmd_by_name)"
  polled="$(awk -F= 'NR == FNR {b[$1] = $2; next} $1 == "type" || $1 == "zcard" {n += $2 - b[$1]} END {print n + 0}' <(echo "$b0") <(echo "$b1"))"
  polls=$((polls + polled))
  log "commands during the recovery (with $polls commands of this script's polls): $(cmd_delta "$b0" "$b1")"
  if [[ -z "$done_at" ]]; then check "dead instance's sessions claimed" 0 "$left left after ${limit_s}s"
  else
    # The claimer adds a batch's sessions to its own index and drops them from the dead one's
    # by separate commands (on a Cluster, in other slots), and it may be growing its buckets:
    # counted the moment the dead index is empty, the last batch can be in flight. Counted
    # again until right, or the same twice half a second apart (5 s at most).
    now=-1
    for _ in $(seq 10); do
      prev=$now; now=0
      for i in "${!MACHINES[@]}"; do (( i == victim )) || now=$(( now + $(index_entries "${MACHINES[$i]}") )); done
      (( now == survivors + k || now == prev )) && break
      sleep 0.5
    done
    check "dead instance's sessions now in the survivors' indexes" $(( survivors + k )) "$now"
    secs="$(awk -v a="$t0" -v b="$done_at" 'BEGIN {print (b - a) / 1e9}')"
    wait_s="$(awk -v a="${detected:-$t0}" -v b="${first_claim:-$done_at}" 'BEGIN {print (b - a) / 1e9}')"
    claim_s="$(awk -v a="${first_claim:-$t0}" -v b="$done_at" 'BEGIN {print (b - a) / 1e9}')"
    alive=$(( INSTANCES - 1 ))
    net="$(awk -v d="$((c1 - c0 - polls))" -v r="$idle_rate" -v s="$secs" -v a="$alive" -v i="$INSTANCES" 'BEGIN {print d - r * a / i * s}')"
    meas recovery_commands_per_session "$(div "$net" "$k" 2)" "$k sessions; SIGKILL to all claimed $(printf %.1f "$secs") s: heartbeat expired, $(printf %.1f "$wait_s") s to the next scan, $(printf %.1f "$claim_s") s claiming"
    meas recovery_s "$(printf %.2f "$secs")" "SIGKILL to the last of $k sessions claimed (polled every 0.1 s)"
    meas recovery_claim_s_per_100k_sessions "$(awk -v s="$claim_s" -v k="$k" 'BEGIN {printf "%.2f", s * 100000 / k}')" "first claim to all claimed (polled every 0.1 s), scaled to 100k"
  fi
fi

# --- 8. the machine's own limits --------------------------------------------------------------------
BENCH_NOTE="-"
if [[ "$BENCHMARK" == 1 ]] && command -v redis-benchmark >/dev/null; then
  cluster_flag=(); [[ "$REDIS" == cluster ]] && cluster_flag=(--cluster)
  BENCH_NOTE="$(in_host scale-redis redis-benchmark -h "$REDIS_HOST" -p "${MASTERS[0]}" "${cluster_flag[@]}" -t set,get -n 200000 -c 50 -q 2>/dev/null \
    | tr '\r' '\n' | awk '/requests per second/ {printf "%s %s/s; ", $1, $2}')"
fi
MEM_FREE="$(awk '/^MemAvailable:/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)"

# --- the table ----------------------------------------------------------------------------------------
# The model: KEY=EXPRESSION lines (awk arithmetic in I instances, S sessions, T streams, M
# masters, H the heartbeat interval in seconds, L 1 when the per-key limit is on); a key it
# lacks is printed as measured only.
predict() { # KEY -> the model's figure for this shape, or -
  local expr
  expr="$(sed -n "s/^$1=\\([^#]*\\).*/\\1/p" "$MODEL" 2>/dev/null | head -1)"
  [[ -n "$expr" ]] || { echo -; return; }
  awk -v I="$INSTANCES" -v S="$opened" -v T="$STREAMS" -v M="${#MASTERS[@]}" -v H="$(awk -v m="${HEARTBEAT_MS:-10000}" 'BEGIN {print m / 1000}')" \
    -v L="$([[ "$LIMIT" == on ]] && echo 1 || echo 0)" "BEGIN {printf \"%.4g\", $expr}"
}
{
  echo
  echo "Shape: INSTANCES=$INSTANCES SESSIONS=$SESSIONS STREAMS=$STREAMS CALLS=$CALLS REDIS=$REDIS LIMIT=$LIMIT NETNS=$NETNS DELAY_US=$DELAY_US CALL_CONCURRENCY=$CALL_CONCURRENCY WORKERS=$WORKERS HEARTBEAT_MS=${HEARTBEAT_MS:-default} $PROFILE build, commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "Machine: $(nproc) CPUs, ${MEM_FREE} GiB available at the end, load at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg); redis-benchmark: ${BENCH_NOTE}"
  [[ "$NETNS" == 1 ]] && echo "Delay: $DELAY_NOTE; $HOPS_NOTE"
  echo
  echo "| coefficient | measured | predicted | measured/predicted | how measured |"
  echo "|---|--:|--:|--:|---|"
  for key in idle_commands_per_instance_per_s idle_commands_per_instance_per_s_with_sessions \
      redis_connections_per_instance redis_connections_per_instance_with_streams redis_pubsub_channels_per_instance \
      commands_per_initialize redis_cpu_per_initialize_us process_cpu_per_initialize_us initialize_p50_us initialize_p99_us \
      redis_bytes_per_idle_session record_bytes node_index_bytes_per_entry limit_set_bytes_per_entry \
      process_rss_per_idle_session commands_per_stream_open commands_per_idle_stream_per_s process_heap_per_idle_stream process_rss_per_idle_stream \
      commands_per_held_call process_cpu_per_held_call_us commands_per_relayed_call process_cpu_per_relayed_call_us \
      held_call_p50_us held_call_p99_us relayed_call_p50_us relayed_call_p99_us relayed_call_added_p50_us relayed_call_added_p99_us \
      pubsub_messages_per_notify_session pubsub_messages_per_resource_update \
      recovery_commands_per_session recovery_s recovery_claim_s_per_100k_sessions; do
    [[ -n "${M[$key]:-}" ]] || continue
    p="$(predict "$key")"
    r="-"; [[ "$p" != - ]] && r="$(ratio "${M[$key]}" "$p")"
    echo "| $key | ${M[$key]} | $p | $r | ${NOTE[$key]:-} |"
  done
  echo
  if (( ${#FAILED[@]} )); then echo "Checks FAILED: ${FAILED[*]}"; else echo "Checks: all counts agree (sessions, records, index and limit-set entries, calls, relays, streams, recovery)."; fi
} | tee -a "${OUT:-/dev/null}"
(( ${#FAILED[@]} == 0 ))
