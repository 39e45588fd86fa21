#!/usr/bin/env node
// Help-desk client on the TypeScript SDK v1 (@modelcontextprotocol/sdk 1.32.2) with OAuth:
// it connects with no token, gets the server's 401, follows its `resource_metadata` to the
// authorization server, obtains a token by client credentials (the SDK's
// ClientCredentialsProvider, sending the resource indicator) and calls a tool.
// Usage: node auth-client.mjs http://127.0.0.1:PORT/mcp CLIENT_ID
// Prints one JSON line {"ok":true,"steps":[...]} and exits 0, or a reason on stderr and exits 1.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';

const [url, clientId] = process.argv.slice(2);
if (!url || !clientId) {
  console.error('usage: node auth-client.mjs URL CLIENT_ID');
  process.exit(2);
}

const steps = [];
function check(cond, why) {
  if (!cond) throw new Error(why);
}

// Every exchange, to show the path the SDK took: a 401 from the server, its metadata, the
// authorization server's token endpoint, then authorized calls.
const seen = [];
const fetchSpy = async (input, init) => {
  const res = await fetch(input, init);
  const target = new URL(typeof input === 'string' ? input : input.url ?? input.href);
  seen.push(`${init?.method ?? 'GET'} ${target.pathname} ${res.status}`);
  return res;
};

const provider = new ClientCredentialsProvider({
  clientId,
  clientSecret: 'not-checked-by-the-mock',
  scope: 'tickets:read tickets:write',
});
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: fetchSpy });
const client = new Client({ name: 'fleetmcp-ts-v1-auth-client', version: '1.0.0' });

async function main() {
  await client.connect(transport);
  check(seen.some((s) => s.startsWith('POST /mcp 401')), `no 401 first: ${seen.join(', ')}`);
  check(seen.some((s) => s === 'GET /.well-known/oauth-protected-resource/mcp 200'), `metadata not fetched: ${seen.join(', ')}`);
  check(seen.some((s) => s === 'POST /token 200'), `no token obtained: ${seen.join(', ')}`);
  check(provider.tokens()?.access_token, 'no access token saved');
  steps.push(`connect: ${seen.join(', ')}`);

  const opened = await client.callTool({ name: 'open_ticket', arguments: { title: 'Badge reader offline', priority: 'normal' } });
  check(!opened.isError, `open_ticket isError: ${JSON.stringify(opened)}`);
  check(opened.structuredContent?.opened_by === clientId, `opened_by: ${JSON.stringify(opened.structuredContent)}`);
  steps.push(`open_ticket: id ${opened.structuredContent.id} opened by ${opened.structuredContent.opened_by}`);
  await client.close();
}

try {
  await main();
  console.log(JSON.stringify({ ok: true, steps }));
  process.exit(0);
} catch (e) {
  console.error(`auth-client failed: ${e?.stack ?? e}\nexchanges: ${seen.join(', ')}`);
  process.exit(1);
}
