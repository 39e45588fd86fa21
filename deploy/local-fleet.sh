#!/usr/bin/env bash
# A fleet on this machine, on loopback, with the files in deploy/: redis-server, three help-desk
# instances in distributed mode and nginx (deploy/nginx/fleetmcp.conf) or, with --haproxy,
# HAProxy (deploy/haproxy/fleetmcp.cfg) in front. Ctrl-C stops everything: the instances first
# (each drains, still served by the balancer and Redis), then the balancer and Redis. Needs
# redis-server and nginx or haproxy on PATH (see the README).
#
#   deploy/local-fleet.sh             # MCP on http://127.0.0.1:8080/mcp
#   deploy/local-fleet.sh --haproxy
#   LB_PORT=9080 FIRST_PORT=5001 FLEET_REDIS_PORT=6391 deploy/local-fleet.sh
#   FLEET_BIN_DIR=target/release deploy/local-fleet.sh   # binaries already built there: no build
#
# Then, in another shell: target/debug/fleetmcp-ctl status (with the REDIS_URL it prints).
set -euo pipefail
cd "$(dirname "$0")/.."

BALANCER=nginx
[ "${1:-}" = "--haproxy" ] && BALANCER=haproxy
LB_PORT=${LB_PORT:-8080}
FIRST_PORT=${FIRST_PORT:-4001}
# Not REDIS_PORT: fleetmcp reads that one (with REDIS_URL it is refused as ambiguous).
FLEET_REDIS_PORT=${FLEET_REDIS_PORT:-6390}
unset REDIS_HOST REDIS_PORT
SECRET=${MCP_SESSION_SECRET:-local-fleet-secret-$(date +%s)-$RANDOM}
RUN=$(mktemp -d -t fleetmcp-local.XXXXXX)
# The instances, and what serves them (Redis, the balancer): stopped in that order. Every process
# runs in a session of its own (setsid), so Ctrl-C, which the terminal sends to its whole
# foreground process group, reaches only this script, which stops them in order.
INSTANCES=()
SERVICES=()

cleanup() {
  trap - INT TERM HUP EXIT
  # Whatever fails here (a closed terminal), everything is still stopped.
  set +e
  if [ ${#INSTANCES[@]} -gt 0 ]; then
    echo "stopping: the instances drain (3 s), then the balancer and Redis stop..."
    for pid in "${INSTANCES[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${INSTANCES[@]}"; do wait "$pid" 2>/dev/null || true; done
  fi
  for pid in "${SERVICES[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped; logs were in $RUN"
}
# Started in the background of a script (`... &` in a non-interactive shell), this script
# inherits SIGINT ignored, and bash cannot trap a signal ignored at entry: say how to stop it.
if [ -n "$(trap -p INT)" ]; then
  echo "note: Ctrl-C cannot reach this script here (SIGINT was ignored when it started, as in a background job); stop it with: kill $$" >&2
fi
# HUP too: the processes are not in the terminal's session, so closing it stops them only
# through this script.
trap cleanup INT TERM HUP EXIT

BIN_DIR=${FLEET_BIN_DIR:-}
if [ -z "$BIN_DIR" ]; then
  echo "building help-desk and fleetmcp-ctl (debug; the first build on a fresh clone takes a few minutes)..."
  cargo build -p help-desk -p fleetmcp --bin help-desk --bin fleetmcp-ctl
  BIN_DIR=target/debug
fi

setsid redis-server --port "$FLEET_REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  >"$RUN/redis.log" 2>&1 &
SERVICES+=($!)
export REDIS_URL="redis://127.0.0.1:$FLEET_REDIS_PORT/0" MCP_SESSION_SECRET="$SECRET"

# Who a client is for the limits (`limits.max_sessions_per_key`, rates): its own address, which
# both balancers send in X-Forwarded-For (nginx's `$proxy_add_x_forwarded_for`, HAProxy's
# `option forwardfor`: each appends the address it got the request from), not the balancer's,
# which every request reaches the instances from. The header is believed only from the balancer
# (127.0.0.1, where it connects from), and the instances take its rightmost hop that is not the
# balancer: the one the balancer appended, so a client that sends its own X-Forwarded-For does
# not pick its key. Without these, every client would share the balancer's one key, and the
# fleet would take 1,000 sessions in all. (A process on 127.0.0.1 itself, like the balancer,
# is believed: on one machine there is nobody to keep out.)
export FLEETMCP_CLIENT_ADDRESS_HEADER=${FLEETMCP_CLIENT_ADDRESS_HEADER:-x-forwarded-for}
export FLEETMCP_TRUSTED_PROXIES=${FLEETMCP_TRUSTED_PROXIES:-127.0.0.1}

PORTS=()
for i in 1 2 3; do
  port=$((FIRST_PORT + i - 1))
  PORTS+=("$port")
  FRONTMCP_DEPLOYMENT_MODE=distributed FRONTMCP_BIND_ADDRESS=loopback MACHINE_ID="desk-$i" \
    PORT="$port" FLEETMCP_DRAIN_MS=3000 setsid "$BIN_DIR/help-desk" >"$RUN/desk-$i.log" 2>&1 &
  INSTANCES+=($!)
done

if [ "$BALANCER" = nginx ]; then
  # The repository's http-context file, its ports replaced, in a minimal main configuration.
  awk -v lb="$LB_PORT" -v ports="${PORTS[*]}" '
    /^[[:space:]]*server 127\.0\.0\.1:/ {
      if (!done) { n = split(ports, p, " "); for (i = 1; i <= n; i++)
        printf "    server 127.0.0.1:%s max_fails=1 fail_timeout=2s;\n", p[i]
        for (i = 1; i <= n; i++) printf "    server 127.0.0.1:%s backup max_fails=0;\n", p[i]
        done = 1 }
      next }
    /^[[:space:]]*listen / { printf "    listen 127.0.0.1:%s;\n", lb; next }
    { print }' deploy/nginx/fleetmcp.conf >"$RUN/fleet.conf"
  cat >"$RUN/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $RUN/nginx.pid;
error_log $RUN/nginx-error.log info;
events { worker_connections 1024; }
http {
  access_log $RUN/nginx-access.log;
  client_body_temp_path $RUN/body;
  proxy_temp_path $RUN/proxy;
  fastcgi_temp_path $RUN/fastcgi;
  uwsgi_temp_path $RUN/uwsgi;
  scgi_temp_path $RUN/scgi;
  include $RUN/fleet.conf;
}
CONF
  NGINX=$(command -v nginx || echo /usr/sbin/nginx)
  setsid "$NGINX" -c "$RUN/nginx.conf" -p "$RUN" &
  SERVICES+=($!)
else
  awk -v lb="$LB_PORT" -v ports="${PORTS[*]}" '
    /^[[:space:]]*server / {
      if (!done) { n = split(ports, p, " "); for (i = 1; i <= n; i++)
        printf "    server desk-%d 127.0.0.1:%s cookie desk-%d\n", i, p[i], i; done = 1 }
      next }
    /^[[:space:]]*bind / { printf "    bind 127.0.0.1:%s\n", lb; next }
    { print }' deploy/haproxy/fleetmcp.cfg >"$RUN/haproxy.cfg"
  HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
  setsid "$HAPROXY" -db -f "$RUN/haproxy.cfg" >"$RUN/haproxy.log" 2>&1 &
  SERVICES+=($!)
fi

# "Up" means every instance ready, and the balancer: through the balancer alone, the first
# instance up would answer for all three, and a call straight to another could be refused.
for url in "${PORTS[@]/#/http://127.0.0.1:}" "http://127.0.0.1:$LB_PORT"; do
  ready=no
  for _ in $(seq 1 100); do
    if curl -fs "$url/readyz" >/dev/null 2>&1; then ready=yes; break; fi
    sleep 0.1
  done
  if [ "$ready" != yes ]; then
    echo "$url did not answer /readyz within 10 s; logs in $RUN" >&2
    exit 1
  fi
done
cat <<MSG
fleet up ($BALANCER on 127.0.0.1:$LB_PORT, help-desk desk-1..3 on ${PORTS[*]}, redis on $FLEET_REDIS_PORT)
  MCP endpoint:   http://127.0.0.1:$LB_PORT/mcp
  operator view:  REDIS_URL=$REDIS_URL MCP_SESSION_SECRET=$SECRET $BIN_DIR/fleetmcp-ctl status
  drain one:      REDIS_URL=$REDIS_URL MCP_SESSION_SECRET=$SECRET $BIN_DIR/fleetmcp-ctl drain desk-2
  logs:           $RUN
Ctrl-C stops the fleet.
MSG
wait
