#!/usr/bin/env node
// Drives our `everything` example served over stdio behind `fleetmcp-gateway`, with the
// TypeScript SDK v1 client (@modelcontextprotocol/sdk 1.32.2): everything the gateway passes
// through both ways (crates/gateway/tests/gateway.rs runs it).
// Usage: node gateway-client.mjs http://127.0.0.1:PORT/mcp
// Prints one JSON line {"ok":true,"steps":[...],"sessionId":...} and exits 0, or a reason on
// stderr and exits 1. With KEEP_SESSION=1 it does not end the session (the test checks its
// upstream process is still running, then ends it itself).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const url = process.argv[2];
if (!url) {
  console.error('usage: node gateway-client.mjs URL');
  process.exit(2);
}

const steps = [];
function check(cond, why) {
  if (!cond) throw new Error(why);
}
const textOf = (result) => result.content?.find((c) => c.type === 'text')?.text ?? '';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client(
  { name: 'fleetmcp-gateway-ts-client', version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
);

const asked = [];
client.setRequestHandler(CreateMessageRequestSchema, async () => {
  asked.push('sampling');
  return {
    role: 'assistant',
    content: { type: 'text', text: 'sampled by the client' },
    model: 'gateway-test-model',
    stopReason: 'endTurn',
  };
});
client.setRequestHandler(ElicitRequestSchema, async () => {
  asked.push('elicitation');
  return { action: 'accept', content: { username: 'ada', email: 'ada@example.com' } };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  asked.push('roots');
  return { roots: [{ uri: 'file:///srv/gateway-test', name: 'gateway-test' }] };
});
const updated = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => {
  updated.push(n.params.uri);
});

async function stats() {
  const r = await client.readResource({ uri: 'test://stats' });
  return JSON.parse(r.contents[0].text);
}

async function main() {
  await client.connect(transport);
  check(transport.sessionId, 'no Mcp-Session-Id after initialize');
  const server = client.getServerVersion();
  check(server?.name === 'everything', `serverInfo is the gateway's, not the upstream's: ${JSON.stringify(server)}`);
  steps.push(`connect: server ${server.name}, protocol ${transport.protocolVersion}`);

  const { tools } = await client.listTools();
  check(tools.some((t) => t.name === 'test_tool_with_progress'), 'the upstream tools are not listed');
  steps.push(`listTools: ${tools.length} tools`);

  const progress = [];
  const withProgress = await client.callTool(
    { name: 'test_tool_with_progress', arguments: {} },
    undefined,
    { onprogress: (p) => progress.push(p.progress) },
  );
  check(textOf(withProgress).includes('completed'), `progress tool: ${JSON.stringify(withProgress)}`);
  check(progress.length >= 3, `progress notifications: ${JSON.stringify(progress)}`);
  steps.push(`progress: ${progress.join(',')}`);

  const sampled = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'Say hi' } });
  check(textOf(sampled).includes('sampled by the client'), `sampling: ${JSON.stringify(sampled)}`);
  steps.push(`sampling: ${textOf(sampled)}`);

  const elicited = await client.callTool({ name: 'test_elicitation', arguments: { message: 'Who?' } });
  check(textOf(elicited).includes('accept') && textOf(elicited).includes('ada'), `elicitation: ${JSON.stringify(elicited)}`);
  steps.push(`elicitation: ${textOf(elicited)}`);

  const roots = await client.callTool({ name: 'test_roots', arguments: {} });
  check(textOf(roots).includes('file:///srv/gateway-test'), `roots: ${JSON.stringify(roots)}`);
  steps.push('roots: answered by the client');

  const failing = await client.callTool({ name: 'test_error_handling', arguments: {} });
  check(failing.isError === true, `a failing tool: ${JSON.stringify(failing)}`);
  let unknown;
  try {
    await client.callTool({ name: 'no_such_tool', arguments: {} });
  } catch (e) {
    unknown = e;
  }
  check(unknown && typeof unknown.code === 'number', 'an unknown tool is not a JSON-RPC error');
  steps.push(`errors: tool error, then JSON-RPC ${unknown.code}`);

  await client.subscribeResource({ uri: 'test://watched-resource' });
  await client.callTool({ name: 'test_notify_resource_updated', arguments: {} });
  for (let i = 0; i < 100 && !updated.includes('test://watched-resource'); i++) await sleep(50);
  check(updated.includes('test://watched-resource'), 'no resources/updated after subscribing');
  steps.push('subscribe: updated test://watched-resource');

  const before = await stats();
  const abort = new AbortController();
  const cancelled = client
    .callTool({ name: 'test_cancellable', arguments: { work_ms: 20000 } }, undefined, { signal: abort.signal })
    .then(() => 'finished', () => 'rejected');
  await sleep(500);
  abort.abort('the test cancels it');
  check((await cancelled) === 'rejected', 'the cancelled call finished');
  let after = await stats();
  for (let i = 0; i < 100 && after.cancelled <= before.cancelled; i++) {
    await sleep(50);
    after = await stats();
  }
  check(after.cancelled === before.cancelled + 1, `the upstream did not see the cancel: ${JSON.stringify({ before, after })}`);
  steps.push(`cancel: upstream counted ${after.cancelled} cancelled`);

  check(asked.join(',') === 'sampling,elicitation,roots', `client was asked ${asked.join(',')}`);
  const sessionId = transport.sessionId;
  if (process.env.KEEP_SESSION !== '1') {
    await transport.terminateSession();
    steps.push('terminateSession');
  }
  await client.close();
  console.log(JSON.stringify({ ok: true, steps, sessionId }));
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  console.log(JSON.stringify({ ok: false, steps, error: String(e) }));
  process.exit(1);
});
