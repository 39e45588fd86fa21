#!/usr/bin/env node
// The MCP SDK team's @modelcontextprotocol/server-everything (npm, over stdio) behind a gateway
// fleet, driven by the TypeScript SDK v1 client through the fleet's load balancer, with the
// holder stopped mid-session (crates/gateway/tests/server_everything.rs runs it); the same
// phases and steps as tools/clients/python/server_everything_failover_client.py.
// Phase one: tools, a long-running operation with progress, sampling and elicitation answered
// here, the server's own roots/list answered here, a subscription and its update. Then it prints
// `READY` and waits for a line on stdin (the test stops the holder meanwhile). Phase two, the
// same session: the same again, answered by a new process of the server on the other instance,
// the subscription made again (the new process never saw the old one's: documented).
// Usage: node server-everything-failover-client.mjs http://127.0.0.1:PORT/mcp
// Prints one JSON line {"ok":true,"steps":[...]} and exits 0, or a reason on stderr and exits 1.
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const url = process.argv[2];
const URI = 'demo://resource/dynamic/text/1';
const steps = [];
function check(cond, why) {
  if (!cond) throw new Error(why);
}
const texts = (result) => (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(cond, why, ms = 5000) {
  for (let waited = 0; !cond() && waited < ms; waited += 20) await sleep(20);
  check(cond(), why);
}
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client(
  { name: 'fleetmcp-gateway-failover-ts', version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
);
let rootsAsked = 0;
client.setRequestHandler(CreateMessageRequestSchema, async () => ({
  role: 'assistant', content: { type: 'text', text: 'sampled by the typescript client' }, model: 'm', stopReason: 'endTurn',
}));
client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: 'Ada' } }));
client.setRequestHandler(ListRootsRequestSchema, async () => {
  rootsAsked += 1;
  return { roots: [{ uri: 'file:///srv/ts-failover', name: 'failover' }] };
});
const updated = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => { updated.push(n.params.uri); });

async function calls(phase) {
  const echo = await client.callTool({ name: 'echo', arguments: { message: `${phase} through the fleet` } });
  check(texts(echo) === `Echo: ${phase} through the fleet`, `echo: ${JSON.stringify(echo)}`);
  const progress = [];
  const long = await client.callTool(
    { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 3 } },
    undefined,
    { onprogress: (p) => progress.push(p.progress) },
  );
  check(texts(long).includes('completed') && progress.length === 3, `progress: ${JSON.stringify(progress)}`);
  const sampled = await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'Say hi', maxTokens: 10 } });
  check(texts(sampled).includes('sampled by the typescript client'), `sampling: ${JSON.stringify(sampled)}`);
  const elicited = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
  check(texts(elicited).includes('- Name: Ada'), `elicitation: ${JSON.stringify(elicited)}`);
  // Asked by the server on its own once initialized (on the session's GET stream); a new
  // process after the failover asks again.
  await until(() => rootsAsked > 0, 'the server never asked for the roots', 10000);
  const roots = await client.callTool({ name: 'get-roots-list', arguments: {} });
  check(texts(roots).includes('file:///srv/ts-failover'), `roots: ${JSON.stringify(roots)}`);
  updated.length = 0;
  await client.subscribeResource({ uri: URI });
  // Switches the process's periodic updates on (a new process starts with them off).
  await client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
  await until(() => updated.includes(URI), `no resources/updated for ${URI}`, 15000);
  steps.push(`${phase}: echo, progress ${progress.join(',')}, sampling, elicitation accepted, roots, subscribe + updated ${URI}`);
}

async function main() {
  await client.connect(transport);
  const server = client.getServerVersion();
  check(/everything/i.test(server?.name ?? ''), `serverInfo: ${JSON.stringify(server)}`);
  steps.push(`connect: server ${server.name}, protocol ${transport.protocolVersion}`);
  const sid = transport.sessionId;
  await calls('before');
  console.log('READY');
  await lines.next();
  rootsAsked = 0;
  await calls('after');
  check(transport.sessionId === sid, 'the session id changed');
  await transport.terminateSession();
  await client.close();
  steps.push('closed: DELETE sent');
  console.log(JSON.stringify({ ok: true, steps }));
  process.exit(0);
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  console.log(JSON.stringify({ ok: false, steps, error: String(e) }));
  process.exit(1);
});
