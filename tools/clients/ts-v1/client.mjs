#!/usr/bin/env node
// Help-desk smoke client on the TypeScript SDK v1 (@modelcontextprotocol/sdk 1.32.2).
// It proves that the server works with the most common real client, not just the conformance suite:
// legacy era (initialize at 2025-11-25, session id, GET stream, DELETE on exit).
// Usage: node client.mjs http://127.0.0.1:PORT/mcp
// Prints one JSON line {"ok":true,"steps":[...]} and exits 0, or a reason on stderr and exits 1.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const url = process.argv[2];
if (!url) {
  console.error('usage: node client.mjs URL');
  process.exit(2);
}

const steps = [];
function check(cond, why) {
  if (!cond) throw new Error(why);
}
const textOf = (contents) => contents.find((c) => typeof c.text === 'string')?.text ?? '';

// The SDK hides the status of the DELETE (a 405 also "succeeds"), so record it through its fetch hook.
let deleteStatus;
const fetchSpy = async (input, init) => {
  const res = await fetch(input, init);
  if (init?.method === 'DELETE') deleteStatus = res.status;
  return res;
};

const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: fetchSpy });
const client = new Client({ name: 'fleetmcp-ts-v1-client', version: '1.0.0' });

async function main() {
  await client.connect(transport);
  // SDK 1.32.2 has no client-side getter for the negotiated version; the transport keeps the
  // value it stamps on MCP-Protocol-Version, which Client.connect sets from the initialize result.
  check(transport.sessionId, 'no Mcp-Session-Id after initialize');
  check(transport.protocolVersion === '2025-11-25', `protocol version ${transport.protocolVersion}`);
  steps.push(`connect: session ${transport.sessionId}, protocol ${transport.protocolVersion}, server ${client.getServerVersion()?.name}`);

  const { tools } = await client.listTools();
  for (const name of ['open_ticket', 'find_tickets', 'close_ticket']) {
    const tool = tools.find((t) => t.name === name);
    check(tool, `tools/list lacks ${name}`);
    check(tool.inputSchema?.type === 'object', `${name} has no object inputSchema`);
  }
  steps.push(`listTools: ${tools.length} tools`);

  const opened = await client.callTool({ name: 'open_ticket', arguments: { title: 'Printer on fire', priority: 'high' } });
  check(!opened.isError, `open_ticket isError: ${textOf(opened.content ?? [])}`);
  const ticket = opened.structuredContent;
  check(Number.isInteger(ticket?.id), `open_ticket structuredContent.id not an integer: ${JSON.stringify(ticket)}`);
  check(ticket.status === 'open' && ticket.priority === 'high', `open_ticket ticket: ${JSON.stringify(ticket)}`);
  check(textOf(opened.content ?? []), 'open_ticket has no text content');
  const id = ticket.id;
  steps.push(`open_ticket: id ${id}`);

  const closed = await client.callTool({ name: 'close_ticket', arguments: { id, resolution: 'Extinguished' } });
  check(!closed.isError && closed.structuredContent?.status === 'closed', `close_ticket: ${JSON.stringify(closed)}`);
  steps.push(`close_ticket: id ${id} closed`);

  const res = await client.readResource({ uri: `helpdesk://tickets/${id}` });
  const json = JSON.parse(textOf(res.contents));
  check(json.id === id && json.status === 'closed', `ticket resource: ${JSON.stringify(json)}`);
  steps.push(`readResource helpdesk://tickets/${id}: status closed`);

  const sla = await client.readResource({ uri: 'helpdesk://policies/sla' });
  check(textOf(sla.contents).length > 0, 'SLA policy is empty');
  steps.push('readResource helpdesk://policies/sla: non-empty');

  const { resourceTemplates } = await client.listResourceTemplates();
  check(resourceTemplates.some((t) => t.uriTemplate === 'helpdesk://tickets/{id}'), 'template helpdesk://tickets/{id} missing');
  steps.push('listResourceTemplates: helpdesk://tickets/{id}');

  const prompt = await client.getPrompt({ name: 'triage_ticket', arguments: { ticket_id: String(id) } });
  const firstText = prompt.messages.map((m) => m.content?.text).find((t) => typeof t === 'string') ?? '';
  check(prompt.messages.length > 0 && firstText.includes(String(id)), `triage_ticket prompt: ${JSON.stringify(prompt.messages)}`);
  steps.push(`getPrompt triage_ticket: ${prompt.messages.length} message(s) mention ${id}`);

  // Servers may report bad arguments either as a JSON-RPC error or as a tool error; both are valid.
  const bad = await client.callTool({ name: 'close_ticket', arguments: { id } }).catch((err) => err);
  if (bad instanceof Error) {
    check(bad instanceof McpError && bad.code === -32602, `close_ticket without resolution: unexpected ${bad}`);
    steps.push('close_ticket without resolution: McpError -32602');
  } else {
    check(bad.isError === true, `close_ticket without resolution succeeded: ${JSON.stringify(bad)}`);
    steps.push('close_ticket without resolution: isError result');
  }

  await transport.terminateSession();
  check(transport.sessionId === undefined, 'session id kept after DELETE');
  steps.push(`terminateSession: DELETE ${deleteStatus}`);
  await client.close();
}

main().then(
  () => {
    console.log(JSON.stringify({ ok: true, steps }));
    process.exit(0);
  },
  (err) => {
    console.error(`ts-v1 client failed: ${err?.message ?? err}`);
    console.error(JSON.stringify({ ok: false, steps }));
    process.exit(1);
  },
);
