#!/usr/bin/env node
// stdio smoke client on the TypeScript SDK v1 (@modelcontextprotocol/sdk 1.32.2): the SDK starts the
// server binary as its child process (FLEETMCP_TRANSPORT=stdio in its environment, as a Claude
// Desktop entry would set it) and speaks newline-delimited JSON-RPC on its stdin and stdout.
// Usage: node stdio-client.mjs everything|help-desk BINARY
// `everything` drives what a session offers: progress, logging, resources and subscriptions,
// templates and completion, prompts, sampling, elicitation and roots answered here, list changes,
// cancellation, a 2025-11-25 task; `help-desk` the desk's own flow. Both end by closing the
// child's stdin, after which the server must exit 0 by itself (before the SDK's SIGTERM).
// Prints one JSON line {"ok":true,"steps":[...]} and exits 0, or a reason on stderr and exits 1.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const [target, binary] = process.argv.slice(2);
if (!['everything', 'help-desk'].includes(target) || !binary) {
  console.error('usage: node stdio-client.mjs everything|help-desk BINARY');
  process.exit(2);
}

const steps = [];
function check(cond, why) {
  if (!cond) throw new Error(why);
}
const textOf = (contents) => (contents ?? []).find((c) => typeof c.text === 'string')?.text ?? '';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Waits until `pred()` holds, for at most `ms`.
async function until(pred, ms, why) {
  const end = Date.now() + ms;
  while (!pred()) {
    check(Date.now() < end, why);
    await sleep(20);
  }
}

const transport = new StdioClientTransport({
  command: binary,
  env: { FLEETMCP_TRANSPORT: 'stdio', RUST_LOG: 'info' },
  stderr: 'pipe',
});
let stderr = '';
transport.stderr?.on('data', (chunk) => {
  stderr += chunk;
});
const client = new Client(
  { name: 'fleetmcp-ts-v1-stdio-client', version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
);
// A line on stdout that is not a JSON-RPC message (a log line, say) surfaces here.
const errors = [];
client.onerror = (e) => errors.push(String(e?.message ?? e));
// Every message as it came off the pipe. The SDK hands a notification to its handler a tick after
// it reads it, but an answer at once: when both arrive in one chunk, it may drop a progress
// notification that the server sent before the answer ("unknown token"). So progress is checked
// here, on the wire, in order and before its answer.
const wire = [];
function recordWire() {
  const inner = transport.onmessage;
  transport.onmessage = (message, extra) => {
    wire.push(message);
    inner?.(message, extra);
  };
}
// The progress values the server sent for the request it answered last: all must precede the
// answer (the request's id is its progress token, as the SDK makes it).
function wireProgress() {
  const answer = wire.findLastIndex((m) => m.id !== undefined && m.method === undefined);
  const token = wire[answer]?.id;
  return wire
    .slice(0, answer)
    .filter((m) => m.method === 'notifications/progress' && m.params.progressToken === token)
    .map((m) => m.params.progress);
}
const sdkQuirk = (e) => e.includes('progress notification for an unknown token');

const seen = { logs: [], updated: [], toolsChanged: 0 };
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  seen.logs.push(n.params.data);
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  seen.updated.push(n.params.uri);
});
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  seen.toolsChanged += 1;
});
client.setRequestHandler(CreateMessageRequestSchema, async (req) => ({
  role: 'assistant',
  content: { type: 'text', text: `echo: ${req.params.messages[0]?.content?.text}` },
  model: 'stdio-test-model',
  stopReason: 'endTurn',
}));
client.setRequestHandler(ElicitRequestSchema, async () => ({
  action: 'accept',
  content: { username: 'ada', email: 'ada@example.com' },
}));
client.setRequestHandler(ListRootsRequestSchema, async () => ({
  roots: [{ uri: 'file:///work/desk', name: 'desk' }],
}));

async function everything() {
  const { tools } = await client.listTools();
  check(tools.some((t) => t.name === 'test_sampling'), 'tools/list lacks test_sampling');
  steps.push(`listTools: ${tools.length} tools`);

  const progress = [];
  const p = await client.callTool({ name: 'test_tool_with_progress', arguments: {} }, undefined, {
    onprogress: (n) => progress.push(n.progress),
  });
  check(textOf(p.content) === 'Progress test completed', `progress tool: ${JSON.stringify(p)}`);
  const sent = wireProgress();
  check(JSON.stringify(sent) === '[0,50,100]', `progress on the wire ${JSON.stringify(sent)}`);
  check(progress.length > 0, 'the SDK surfaced no progress');
  steps.push(`progress: ${sent.join(',')}`);

  await client.setLoggingLevel('info');
  await client.callTool({ name: 'test_tool_with_logging', arguments: {} });
  await until(() => seen.logs.length >= 3, 5000, `log messages: ${JSON.stringify(seen.logs)}`);
  steps.push(`logging: ${seen.logs.length} messages`);

  const text = await client.readResource({ uri: 'test://static-text' });
  check(textOf(text.contents).includes('static text resource'), 'static text resource');
  await client.subscribeResource({ uri: 'test://watched-resource' });
  await client.callTool({ name: 'test_notify_resource_updated', arguments: {} });
  await until(() => seen.updated.includes('test://watched-resource'), 5000, 'no resources/updated');
  steps.push('subscribe: notifications/resources/updated test://watched-resource');

  const { resourceTemplates } = await client.listResourceTemplates();
  const template = resourceTemplates.find((t) => t.uriTemplate === 'test://template/{id}/data');
  check(template, 'template test://template/{id}/data missing');
  const done = await client.complete({
    ref: { type: 'ref/resource', uri: template.uriTemplate },
    argument: { name: 'id', value: '12' },
  });
  check(JSON.stringify(done.completion.values) === '["123","124"]', `completion ${JSON.stringify(done)}`);
  steps.push(`complete: ${done.completion.values.join(',')}`);

  const prompt = await client.getPrompt({ name: 'test_simple_prompt' });
  check(prompt.messages[0]?.content?.text === 'This is a simple prompt for testing.', 'prompt text');
  steps.push('getPrompt test_simple_prompt');

  const s = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'hi' } });
  check(textOf(s.content) === 'LLM response: echo: hi', `sampling: ${JSON.stringify(s)}`);
  const e = await client.callTool({ name: 'test_elicitation', arguments: { message: 'who?' } });
  check(textOf(e.content).includes('action=accept') && textOf(e.content).includes('ada'), `elicitation: ${JSON.stringify(e)}`);
  const r = await client.callTool({ name: 'test_roots', arguments: {} });
  check(textOf(r.content).includes('file:///work/desk'), `roots: ${JSON.stringify(r)}`);
  steps.push('sampling, elicitation and roots answered by the client');

  await client.callTool({ name: 'test_trigger_tool_change', arguments: {} });
  await until(() => seen.toolsChanged > 0, 5000, 'no tools/list_changed');
  steps.push('notifications/tools/list_changed');

  const abort = new AbortController();
  setTimeout(() => abort.abort('changed my mind'), 300);
  const cancelled = await client
    .callTool({ name: 'test_cancellable', arguments: { work_ms: 10000 } }, undefined, { signal: abort.signal })
    .catch((err) => err);
  check(cancelled instanceof Error, `test_cancellable was not cancelled: ${JSON.stringify(cancelled)}`);
  let stats;
  for (let i = 0; i < 100; i++) {
    stats = JSON.parse(textOf((await client.readResource({ uri: 'test://stats' })).contents));
    if (stats.cancelled >= 1) break;
    await sleep(50);
  }
  check(stats.cancelled >= 1 && stats.completed === 0, `stats after cancel: ${JSON.stringify(stats)}`);
  steps.push(`cancel: handler stopped (${JSON.stringify(stats)})`);

  const kinds = [];
  let result;
  const stream = client.experimental.tasks.callToolStream(
    { name: 'test_cancellable_task', arguments: { work_ms: 200 } },
    undefined,
    { task: { ttl: 60000 } },
  );
  for await (const m of stream) {
    kinds.push(m.type);
    if (m.type === 'result') result = m.result;
    if (m.type === 'error') throw m.error;
  }
  check(kinds[0] === 'taskCreated' && textOf(result?.content) === 'finished', `task: ${kinds} ${JSON.stringify(result)}`);
  steps.push(`task: ${kinds[0]} ... result`);

  await client.ping();
  steps.push('ping');
}
async function helpDesk() {
  const { tools } = await client.listTools();
  check(tools.some((t) => t.name === 'open_ticket'), 'tools/list lacks open_ticket');
  steps.push(`listTools: ${tools.length} tools`);
  const opened = await client.callTool({ name: 'open_ticket', arguments: { title: 'Printer on fire', priority: 'high' } });
  const id = opened.structuredContent?.id;
  check(Number.isInteger(id), `open_ticket: ${JSON.stringify(opened)}`);
  steps.push(`open_ticket: id ${id}`);
  const progress = [];
  const found = await client.callTool({ name: 'find_tickets', arguments: { query: 'printer' } }, undefined, {
    onprogress: (n) => progress.push(n.message),
  });
  check(found.structuredContent?.tickets?.length === 1, `find_tickets: ${JSON.stringify(found)}`);
  check(JSON.stringify(wireProgress()) === '[1]', `find_tickets progress on the wire: ${JSON.stringify(wireProgress())}`);
  steps.push(`find_tickets with progress: ${wireProgress().length} notification`);
  const uri = `helpdesk://tickets/${id}`;
  await client.subscribeResource({ uri });
  await client.callTool({ name: 'close_ticket', arguments: { id, resolution: 'Extinguished' } });
  await until(() => seen.updated.includes(uri), 5000, `no resources/updated for ${uri}`);
  const ticket = JSON.parse(textOf((await client.readResource({ uri })).contents));
  check(ticket.status === 'closed', `ticket: ${JSON.stringify(ticket)}`);
  steps.push(`subscribe + close_ticket: updated ${uri}`);
  const done = await client.complete({ ref: { type: 'ref/resource', uri: 'helpdesk://tickets/{id}' }, argument: { name: 'id', value: '' } });
  check(done.completion.values.includes(String(id)), `completion: ${JSON.stringify(done)}`);
  steps.push(`complete: ${done.completion.values.join(',')}`);
  const prompt = await client.getPrompt({ name: 'triage_ticket', arguments: { ticket_id: String(id) } });
  check(prompt.messages[0]?.content?.text?.includes(String(id)), 'triage prompt');
  steps.push('getPrompt triage_ticket');
}

async function main() {
  await client.connect(transport);
  recordWire();
  check(client.getServerVersion()?.name === target, `server ${JSON.stringify(client.getServerVersion())}`);
  steps.push(`connect: stdio, server ${client.getServerVersion()?.name}`);
  await (target === 'everything' ? everything() : helpDesk());
  // The SDK ends the child by closing its stdin, then SIGTERM after 2 s: a server that exits on
  // EOF by itself has exit code 0 and no signal.
  const child = transport._process;
  await client.close();
  check(child && child.exitCode === 0 && child.signalCode === null, `server exit: code ${child?.exitCode}, signal ${child?.signalCode}`);
  steps.push('close: stdin closed, server exited 0');
  const fatal = errors.filter((e) => !sdkQuirk(e));
  check(fatal.length === 0, `transport errors (a non-JSON line on stdout?): ${fatal.join('; ')}`);
  check(stderr.includes('serving MCP on stdio'), `no log on stderr: ${stderr}`);
  steps.push('logs on stderr only');
}

main().then(
  () => {
    console.log(JSON.stringify({ ok: true, steps }));
    process.exit(0);
  },
  (err) => {
    console.error(`ts-v1 stdio client failed: ${err?.stack ?? err}`);
    console.error(`server stderr:\n${stderr}`);
    console.error(JSON.stringify({ ok: false, steps }));
    process.exit(1);
  },
);
