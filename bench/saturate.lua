-- bench/saturate.lua: wrk's script for bench/run.sh's saturation shapes (MODE=saturation).
--
-- `wrk ... -s bench/saturate.lua URL -- SESSION_ID...`: every request is the MCP call
-- `tools/call find_tickets {}` (protocol 2025-11-25) of one of the sessions named after `--`,
-- round robin, as a client holding those sessions sends it (`Mcp-Session-Id`,
-- `MCP-Protocol-Version`, `Accept` of both answer types). The requests are made once, in
-- init(): wrk asks for one per call, and building each in Lua would make the generator, not the
-- server, the limit (what this shape exists to avoid). About REQUESTS requests are made (at
-- least 64 per session), ids 1 to that count, so a session's ids repeat only every 64 of its
-- calls or more, far more than it has in flight at once: calls in flight never share an id.
--
-- done() prints one line `SATURATE requests=N errors=N duration_us=N p50_us=N p90_us=N
-- p99_us=N max_us=N` that run.sh reads (errors: sockets' errors and statuses above 399).

local REQUESTS = 4096
local requests = {}
local n = 0

function init(args)
  local sessions = {}
  for _, s in ipairs(args) do
    sessions[#sessions + 1] = s
  end
  if #sessions == 0 then
    error("saturate.lua: name at least one session id after --")
  end
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json, text/event-stream"
  wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
  -- Request i goes to session i mod #sessions with id i.
  local count = #sessions * math.max(64, math.ceil(REQUESTS / #sessions))
  for i = 1, count do
    wrk.headers["Mcp-Session-Id"] = sessions[(i % #sessions) + 1]
    local body = string.format(
      '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"find_tickets","arguments":{}}}', i)
    requests[i] = wrk.format(nil, nil, nil, body)
  end
  requests.count = count
end

function request()
  n = n + 1
  if n > requests.count then
    n = 1
  end
  return requests[n]
end

function done(summary, latency, _)
  local e = summary.errors
  io.write(string.format(
    "SATURATE requests=%d errors=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout, summary.duration,
    latency:percentile(50.0), latency:percentile(90.0), latency:percentile(99.0), latency.max))
end
