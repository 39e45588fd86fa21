#!/usr/bin/env node
// Drives the MCP SDK team's @modelcontextprotocol/server-everything (npm, over stdio) behind
// `fleetmcp-gateway`, with the TypeScript SDK v1 client: a server nobody here wrote, through
// the gateway (crates/gateway/tests/server_everything.rs runs it).
// Usage: node server-everything-client.mjs http://127.0.0.1:PORT/mcp
// Prints one JSON line {"ok":true,"steps":[...]} and exits 0, or a reason on stderr and exits 1.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const url = process.argv[2];
const steps = [];
function check(cond, why) {
  if (!cond) throw new Error(why);
}
const texts = (result) => (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client(
  { name: 'fleetmcp-gateway-server-everything-client', version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
);
const asked = new Set();
client.setRequestHandler(CreateMessageRequestSchema, async () => {
  asked.add('sampling');
  return { role: 'assistant', content: { type: 'text', text: 'sampled by the client' }, model: 'gateway-test-model', stopReason: 'endTurn' };
});
client.setRequestHandler(ElicitRequestSchema, async () => {
  asked.add('elicitation');
  return { action: 'decline' };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  asked.add('roots');
  return { roots: [{ uri: 'file:///srv/gateway-test', name: 'gateway-test' }] };
});
const updated = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => {
  updated.push(n.params.uri);
});

async function main() {
  await client.connect(transport);
  const server = client.getServerVersion();
  check(/everything/i.test(server?.name ?? ''), `serverInfo: ${JSON.stringify(server)}`);
  steps.push(`connect: server ${server.name} ${server.version}, protocol ${transport.protocolVersion}`);

  const { tools } = await client.listTools();
  check(tools.some((t) => t.name === 'echo'), 'no echo tool');
  steps.push(`listTools: ${tools.length} tools`);

  const echo = await client.callTool({ name: 'echo', arguments: { message: 'through the fleet' } });
  check(texts(echo) === 'Echo: through the fleet', `echo: ${JSON.stringify(echo)}`);
  steps.push(`echo: ${texts(echo)}`);

  const progress = [];
  const long = await client.callTool(
    { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 3 } },
    undefined,
    { onprogress: (p) => progress.push(p.progress) },
  );
  check(texts(long).includes('completed'), `long operation: ${JSON.stringify(long)}`);
  check(progress.length === 3, `progress: ${JSON.stringify(progress)}`);
  steps.push(`progress: ${progress.join(',')}`);

  const sampled = await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'Say hi', maxTokens: 10 } });
  check(texts(sampled).includes('sampled by the client'), `sampling: ${JSON.stringify(sampled)}`);
  steps.push('sampling: answered by the client');

  const elicited = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
  check(texts(elicited).includes('declined'), `elicitation: ${JSON.stringify(elicited)}`);
  steps.push('elicitation: declined by the client');

  // The server asks for the roots on its own 350 ms after initialization (no request of ours
  // running: it comes on the GET stream).
  for (let i = 0; i < 100 && !asked.has('roots'); i++) await sleep(50);
  const roots = await client.callTool({ name: 'get-roots-list', arguments: {} });
  check(texts(roots).includes('file:///srv/gateway-test'), `roots: ${JSON.stringify(roots)}`);
  steps.push('roots: asked on the standalone stream, answered by the client');

  const uri = 'demo://resource/dynamic/text/1';
  await client.subscribeResource({ uri });
  await client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
  for (let i = 0; i < 200 && !updated.includes(uri); i++) await sleep(50);
  check(updated.includes(uri), `no resources/updated for ${uri}`);
  steps.push(`subscribe: updated ${uri}`);

  await transport.terminateSession();
  await client.close();
  steps.push('terminateSession');
  console.log(JSON.stringify({ ok: true, steps }));
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  console.log(JSON.stringify({ ok: false, steps, error: String(e) }));
  process.exit(1);
});
