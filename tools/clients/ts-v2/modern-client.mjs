#!/usr/bin/env node
// Stateless-era smoke client on the TypeScript SDK v2 (@modelcontextprotocol/client 2.4.0) for the
// `everything` fixture. It proves that a real 2026-07-28 client works against the server, not just the
// conformance suite: server/discover, per-request _meta and mirrored headers, InputRequiredResult
// multi-round requests driven by the SDK, and subscriptions/listen.
//
// Usage: node modern-client.mjs URL MODE
//   MODE pin    -> versionNegotiation {pin: '2026-07-28'} (modern only, no fallback)
//   MODE auto   -> versionNegotiation 'auto' (server/discover probe, fallback to initialize)
//   MODE legacy -> versionNegotiation 'legacy' (plain initialize at 2025-11-25)
// Prints one JSON line {"ok":true,"mode":...,"protocolVersion":...,"steps":[...]} and exits 0, or the
// reason on stderr and exits 1 (2 for a usage error).
import { Client, StreamableHTTPClientTransport, SUBSCRIPTION_ID_META_KEY } from '@modelcontextprotocol/client';

const MODERN = '2026-07-28';
const LEGACY = '2025-11-25';
const MODES = {
  pin: { negotiation: { pin: MODERN }, expect: MODERN },
  auto: { negotiation: 'auto', expect: MODERN },
  legacy: { negotiation: 'legacy', expect: LEGACY },
};
const LIST_CHANGED_WAIT_MS = 5000;
// Every request (and the connect probe) gets this deadline, so a hung server fails the run quickly.
const REQUEST_TIMEOUT_MS = 10000;

const [url, mode] = process.argv.slice(2);
if (!url || !Object.hasOwn(MODES, mode ?? '')) {
  console.error('usage: node modern-client.mjs URL pin|auto|legacy');
  process.exit(2);
}
const { negotiation, expect } = MODES[mode];

const steps = [];
function check(cond, why) {
  if (!cond) throw new Error(why);
}
const textOf = (contents) => (contents ?? []).find((c) => typeof c.text === 'string')?.text ?? '';

// The wire as the SDK sent it: every POST's JSON-RPC method, id and the MRTR fields, plus the HTTP
// method and status. This checks what the SDK did (probe, retries, listen id) without a proxy.
const wire = [];
const inflight = new Set();
const fetchSpy = async (input, init) => {
  let body;
  try {
    body = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
  } catch {
    body = undefined;
  }
  const headers = new Headers(init?.headers);
  // Recorded before the answer arrives: a POSTed response's 202 may come after the result it unblocked.
  const entry = {
    http: init?.method ?? 'GET',
    status: undefined,
    method: body?.method,
    id: body?.id,
    isResponse: body !== undefined && body.method === undefined,
    hasInputResponses: body?.params?.inputResponses !== undefined,
    mcpMethodHeader: headers.get('mcp-method'),
    versionHeader: headers.get('mcp-protocol-version'),
  };
  wire.push(entry);
  const pending = fetch(input, init);
  inflight.add(pending);
  try {
    const res = await pending;
    entry.status = res.status;
    return res;
  } catch (err) {
    entry.status = `error: ${err?.cause?.code ?? err?.message ?? err}`;
    throw err;
  } finally {
    inflight.delete(pending);
  }
};
// Waits (bounded) until every request sent so far has its HTTP status.
async function settled(ms = 2000) {
  await Promise.race([Promise.allSettled([...inflight]), new Promise((r) => setTimeout(r, ms))]);
}

const client = new Client(
  { name: 'fleetmcp-ts-v2-client', version: '1.0.0' },
  { capabilities: { elicitation: {} }, versionNegotiation: { mode: negotiation } },
);

// The same handler serves both eras: in 2026-07-28 the SDK calls it for each elicitation/create in an
// InputRequiredResult and retries the tools/call; in 2025-11-25 the server sends a real request.
const elicitations = [];
client.setRequestHandler('elicitation/create', async (request) => {
  elicitations.push(request.params);
  return { action: 'accept', content: { name: 'Ada' } };
});

// List-changed notifications reach the ordinary notification handlers (from the listen stream in 2026).
const toolListChanges = [];
const toolListWaiters = [];
client.setNotificationHandler('notifications/tools/list_changed', (notification) => {
  toolListChanges.push(notification);
  for (const wake of toolListWaiters.splice(0)) wake();
});
function waitForToolListChange(count, ms) {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const poll = () => {
      if (toolListChanges.length >= count) return resolve(toolListChanges[count - 1]);
      const left = ms - (Date.now() - started);
      if (left <= 0) return reject(new Error(`no notifications/tools/list_changed within ${ms} ms`));
      const timer = setTimeout(poll, left);
      toolListWaiters.push(() => {
        clearTimeout(timer);
        poll();
      });
    };
    poll();
  });
}

const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: fetchSpy });
const opts = { timeout: REQUEST_TIMEOUT_MS };

async function main() {
  await client.connect(transport, opts);
  const protocolVersion = client.getNegotiatedProtocolVersion();
  const era = client.getProtocolEra();
  console.error(`negotiated protocol version: ${protocolVersion} (era ${era})`);
  check(protocolVersion === expect, `negotiated protocol version ${protocolVersion}, expected ${expect}`);
  const modern = expect === MODERN;
  check(era === (modern ? 'modern' : 'legacy'), `protocol era ${era}`);
  const first = wire[0];
  if (modern) {
    check(transport.sessionId === undefined, `modern connection has a session id ${transport.sessionId}`);
    check(first?.method === 'server/discover' && first.status === 200, `first exchange was not a 200 server/discover: ${JSON.stringify(first)}`);
    check(!wire.some((w) => w.method === 'initialize'), 'modern connect sent initialize');
  } else {
    check(transport.sessionId, 'legacy connection has no Mcp-Session-Id');
    check(first?.method === 'initialize', `first exchange was not initialize: ${JSON.stringify(first)}`);
  }
  steps.push(
    `connect: ${first?.method} -> protocol ${protocolVersion}, era ${era}, server ${client.getServerVersion()?.name ?? '?'}` +
      (modern ? '' : `, session ${transport.sessionId.slice(0, 12)}...`),
  );

  const { tools } = await client.listTools(undefined, { ...opts, cacheMode: 'refresh' });
  check(tools.some((t) => t.name === 'test_simple_text'), `tools/list lacks test_simple_text: ${tools.map((t) => t.name)}`);
  steps.push(`listTools: ${tools.length} tools incl. test_simple_text`);

  const simple = await client.callTool({ name: 'test_simple_text', arguments: {} }, opts);
  check(!simple.isError, `test_simple_text isError: ${JSON.stringify(simple)}`);
  check(textOf(simple.content).length > 0, `test_simple_text has no text: ${JSON.stringify(simple)}`);
  steps.push(`callTool test_simple_text: ${JSON.stringify(textOf(simple.content))}`);

  const res = await client.readResource({ uri: 'test://static-text' }, { ...opts, cacheMode: 'bypass' });
  const staticText = textOf(res.contents);
  check(
    staticText === 'This is the content of the static text resource.',
    `test://static-text: ${JSON.stringify(res.contents)}`,
  );
  steps.push('readResource test://static-text: expected text');

  const before = wire.length;
  const hello = await client.callTool({ name: 'test_input_required_result_elicitation', arguments: {} }, opts);
  const helloText = textOf(hello.content);
  check(!hello.isError && helloText === 'Hello, Ada!', `elicitation tool answered ${JSON.stringify(hello)}`);
  check(elicitations.length === 1, `elicitation handler ran ${elicitations.length} times`);
  const calls = wire.slice(before).filter((w) => w.method === 'tools/call');
  if (modern) {
    // Round 1 gets an InputRequiredResult; the SDK retries once with inputResponses on a new id.
    check(calls.length === 2 && !calls[0].hasInputResponses && calls[1].hasInputResponses, `MRTR rounds on the wire: ${JSON.stringify(calls)}`);
    check(calls[0].id !== calls[1].id, 'MRTR retry reused the JSON-RPC id');
    check(!wire.slice(before).some((w) => w.isResponse), 'modern client POSTed a JSON-RPC response');
    steps.push(`callTool test_input_required_result_elicitation: input_required -> handler -> retry with inputResponses -> ${JSON.stringify(helloText)}`);
  } else {
    // A real server-to-client elicitation/create request, answered by a POSTed response.
    check(calls.length === 1, `legacy tools/call was sent ${calls.length} times`);
    await settled();
    const answer = wire.slice(before).find((w) => w.isResponse);
    check(answer && answer.status === 202, `elicitation answer POST: ${JSON.stringify(answer)}`);
    steps.push(`callTool test_input_required_result_elicitation: elicitation/create request -> handler -> ${JSON.stringify(helloText)}`);
  }

  if (modern) {
    const listenAt = wire.length;
    const subscription = await client.listen({ toolsListChanged: true }, opts);
    const listen = wire.slice(listenAt).find((w) => w.method === 'subscriptions/listen');
    check(listen && listen.status === 200, `subscriptions/listen POST: ${JSON.stringify(listen)}`);
    check(subscription.honoredFilter?.toolsListChanged === true, `acknowledged filter ${JSON.stringify(subscription.honoredFilter)}`);
    steps.push(`listen: id ${JSON.stringify(listen.id)}, acknowledged ${JSON.stringify(subscription.honoredFilter)}`);

    const trigger = await client.callTool({ name: 'test_trigger_tool_change', arguments: {} }, opts);
    check(!trigger.isError, `test_trigger_tool_change isError: ${JSON.stringify(trigger)}`);
    const changed = await waitForToolListChange(1, LIST_CHANGED_WAIT_MS);
    const tag = changed.params?._meta?.[SUBSCRIPTION_ID_META_KEY];
    check(tag === listen.id, `list_changed tagged with subscription id ${JSON.stringify(tag)}, listen id ${JSON.stringify(listen.id)}`);
    steps.push(`callTool test_trigger_tool_change (${JSON.stringify(textOf(trigger.content))}) -> notifications/tools/list_changed tagged ${JSON.stringify(tag)}`);

    // The notification evicted the tools/list cache; the next list shows the change.
    const after = (await client.listTools(undefined, opts)).tools.map((t) => t.name);
    const had = tools.some((t) => t.name === 'test_dynamic_tool');
    check(after.includes('test_dynamic_tool') !== had, `test_dynamic_tool presence did not flip (before ${had}, after ${after})`);
    steps.push(`listTools after change: test_dynamic_tool ${had ? 'removed' : 'added'}`);

    await subscription.close();
    const cause = await subscription.closed;
    check(cause === 'local', `subscription closed as ${cause}`);
    steps.push('listen close: local');
  }

  await client.close();
  return protocolVersion;
}

main().then(
  (protocolVersion) => {
    // MODERN_CLIENT_WIRE=1 shows what the SDK sent (stderr), e.g. to see the close of the listen stream.
    if (process.env.MODERN_CLIENT_WIRE) console.error(`wire: ${JSON.stringify(wire)}`);
    console.log(JSON.stringify({ ok: true, mode, protocolVersion, steps }));
    process.exit(0);
  },
  (err) => {
    console.error(`ts-v2 client (${mode}) failed: ${err?.stack ?? err}`);
    if (err?.data !== undefined) console.error(`error data: ${JSON.stringify(err.data)}`);
    console.error(`wire: ${JSON.stringify(wire)}`);
    console.error(JSON.stringify({ ok: false, mode, steps }));
    process.exit(1);
  },
);
