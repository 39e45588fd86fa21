#!/usr/bin/env node
// A session through a gateway fleet whose holder is stopped mid-session (crates/gateway/tests/
// fleet.rs runs it): the TypeScript SDK v1 client uses `everything` over stdio through the
// fleet, prints `READY <session id>` and waits for a line on stdin (the test stops the holder
// meanwhile), then goes on with the same session: a call with progress, a sampling round trip
// and a subscription made again (the new upstream process does not know the old one's).
// Usage: node gateway-failover-client.mjs http://127.0.0.1:PORT/mcp
// Prints one JSON line {"ok":true,"steps":[...]} and exits 0, or a reason on stderr and exits 1.
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const url = process.argv[2];
const steps = [];
function check(cond, why) {
  if (!cond) throw new Error(why);
}
const textOf = (result) => result.content?.find((c) => c.type === 'text')?.text ?? '';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: 'fleetmcp-gateway-failover', version: '1.0.0' }, { capabilities: { sampling: {} } });
client.setRequestHandler(CreateMessageRequestSchema, async () => ({
  role: 'assistant', content: { type: 'text', text: 'sampled by the client' }, model: 'm', stopReason: 'endTurn',
}));
const updated = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => { updated.push(n.params.uri); });

async function subscribeAndSeeAnUpdate(when) {
  updated.length = 0;
  await client.subscribeResource({ uri: 'test://watched-resource' });
  await client.callTool({ name: 'test_notify_resource_updated', arguments: {} });
  for (let i = 0; i < 200 && !updated.includes('test://watched-resource'); i++) await sleep(50);
  check(updated.includes('test://watched-resource'), `no resources/updated ${when}`);
}

async function main() {
  await client.connect(transport);
  const sid = transport.sessionId;
  const before = await client.callTool({ name: 'greet', arguments: { name: 'before' } });
  check(textOf(before) === 'Hello, before!', `before: ${JSON.stringify(before)}`);
  await subscribeAndSeeAnUpdate('before the stop');
  steps.push('before: greet, subscribe + update');
  console.log(`READY ${sid}`);
  await lines.next();

  const after = await client.callTool({ name: 'greet', arguments: { name: 'after' } });
  check(textOf(after) === 'Hello, after!', `after: ${JSON.stringify(after)}`);
  check(transport.sessionId === sid, 'the session id changed');
  const progress = [];
  const withProgress = await client.callTool({ name: 'test_tool_with_progress', arguments: {} }, undefined, {
    onprogress: (p) => progress.push(p.progress),
  });
  check(textOf(withProgress).includes('completed') && progress.length === 3, `progress: ${JSON.stringify(progress)}`);
  const sampled = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'hi' } });
  check(textOf(sampled).includes('sampled by the client'), `sampling: ${JSON.stringify(sampled)}`);
  // The new upstream process never saw the subscription: made again, it works again.
  await subscribeAndSeeAnUpdate('after subscribing again');
  steps.push('after: same session, greet, progress, sampling, subscribe again + update');
  await transport.terminateSession();
  await client.close();
  console.log(JSON.stringify({ ok: true, steps }));
  process.exit(0);
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  console.log(JSON.stringify({ ok: false, steps, error: String(e) }));
  process.exit(1);
});
