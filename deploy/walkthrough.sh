#!/usr/bin/env bash
# The fleet walkthrough of the README, as one script to run against `deploy/local-fleet.sh`
# (in another shell, once it printed "fleet up"): one session opened through the balancer, then
# the same session's calls sent to the balancer and straight to each instance. Every answer names
# the instance that served it (`x-frontmcp-machine-id`): the session's holder, wherever the
# request landed (the others relay it there). Ends the session with DELETE at the very end.
#
#   deploy/walkthrough.sh                       # the defaults of deploy/local-fleet.sh
#   LB_PORT=9080 FIRST_PORT=5001 deploy/walkthrough.sh
set -euo pipefail

LB_PORT=${LB_PORT:-8080}
FIRST_PORT=${FIRST_PORT:-4001}
VERSION=2025-11-25
HEADERS=$(mktemp)
trap 'rm -f "$HEADERS"' EXIT

# post PORT BODY [SESSION]: POSTs BODY to PORT's /mcp; prints "<status> <machine id>" and keeps
# the answer's headers in $HEADERS.
post() {
  local port=$1 body=$2 sid=${3:-} args=()
  [ -n "$sid" ] && args=(-H "Mcp-Session-Id: $sid" -H "MCP-Protocol-Version: $VERSION")
  local status
  status=$(curl -s -o /dev/null -D "$HEADERS" -w '%{http_code}' "http://127.0.0.1:$port/mcp" \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    "${args[@]}" -d "$body")
  echo "$status $(header x-frontmcp-machine-id)"
}
header() { tr -d '\r' <"$HEADERS" | sed -n "s/^$1: *//Ip" | head -1; }

read -r status holder < <(post "$LB_PORT" '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"'$VERSION'","capabilities":{},"clientInfo":{"name":"walkthrough","version":"0"}}}')
sid=$(header mcp-session-id)
[ "$status" = 200 ] && [ -n "$sid" ] || { echo "initialize through the balancer answered $status" >&2; exit 1; }
echo "initialize   via :$LB_PORT  -> $status, session held by $holder"
post "$LB_PORT" '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$sid" >/dev/null

call='{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"find_tickets","arguments":{}}}'
for port in "$LB_PORT" "$FIRST_PORT" $((FIRST_PORT + 1)) $((FIRST_PORT + 2)); do
  read -r status served < <(post "$port" "$call" "$sid")
  echo "tools/call   via :$port  -> $status, served by $served"
done

echo "metrics      :$FIRST_PORT/metrics has $(curl -s "http://127.0.0.1:$FIRST_PORT/metrics" | grep -c '^fleetmcp_') fleetmcp_ samples"
status=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "http://127.0.0.1:$LB_PORT/mcp" \
  -H "Mcp-Session-Id: $sid" -H "MCP-Protocol-Version: $VERSION")
echo "DELETE       via :$LB_PORT  -> $status (the session ends)"
