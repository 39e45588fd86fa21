#!/usr/bin/env node
// ts-ref: the reference server of bench/run.sh on the official TypeScript MCP SDK v1
// (@modelcontextprotocol/sdk 1.32.2): McpServer + StreamableHTTPServerTransport with sessions
// (sessionIdGenerator randomUUID, one McpServer and one transport per session, as in the SDK's
// examples), on node:http with TCP_NODELAY, one tool `find_tickets`.
// Usage: PORT=3002 node server.mjs   (MCP on http://127.0.0.1:PORT/mcp, GET /healthz for readiness)
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const PORT = Number(process.env.PORT ?? 3002);
const TICKETS = JSON.stringify({ tickets: [] });

function newServer() {
  const server = new McpServer({ name: 'ts-ref', version: '0.1.0' });
  server.registerTool(
    'find_tickets',
    {
      title: 'Find tickets',
      description: 'Finds tickets by words in their title or description, and by status.',
      annotations: { readOnlyHint: true },
    },
    async () => ({ content: [{ type: 'text', text: TICKETS }] }),
  );
  return server;
}

/** session id -> transport */
const sessions = new Map();

function rpcError(res, status, code, message) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

async function handleMcp(req, res) {
  const sid = req.headers['mcp-session-id'];
  if (req.method === 'POST') {
    let body;
    try {
      body = await readJson(req);
    } catch {
      return rpcError(res, 400, -32700, 'Parse error');
    }
    const known = sid ? sessions.get(sid) : undefined;
    if (known) return known.handleRequest(req, res, body);
    if (sid) return rpcError(res, 404, -32001, 'Session not found');
    if (!isInitializeRequest(body)) {
      return rpcError(res, 400, -32000, 'Bad Request: No valid session ID provided');
    }
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => sessions.set(id, transport),
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await newServer().connect(transport);
    return transport.handleRequest(req, res, body);
  }
  if (req.method === 'GET' || req.method === 'DELETE') {
    const known = sid ? sessions.get(sid) : undefined;
    if (!known) return rpcError(res, sid ? 404 : 400, -32000, 'Invalid or missing session ID');
    return known.handleRequest(req, res);
  }
  res.writeHead(405, { allow: 'GET, POST, DELETE' });
  res.end();
}

const httpServer = http.createServer({ noDelay: true, keepAliveTimeout: 30_000 }, (req, res) => {
  const path = (req.url ?? '').split('?')[0];
  if (path === '/healthz' && req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'text/plain' });
    return res.end('ok');
  }
  if (path !== '/mcp') {
    res.writeHead(404);
    return res.end();
  }
  handleMcp(req, res).catch((e) => {
    console.error('ts-ref:', e);
    if (!res.headersSent) rpcError(res, 500, -32603, 'Internal error');
    else res.end();
  });
});
httpServer.listen(PORT, '127.0.0.1', () => {
  console.error(`ts-ref: listening on http://127.0.0.1:${PORT}/mcp`);
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
