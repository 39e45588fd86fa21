// The authorization server of the authorization tests: oauth2-mock-server on a loopback port,
// issuing RS256 JWTs through its JWKS (`/jwks`), discovery document and `/token` endpoint
// (client credentials for the official SDK client), plus test controls:
//   POST /control/token  {"claims": {...}, "expires_in": s, "key": "current" | "foreign"}
//        → {"access_token"}: a token with these claims (over iss/iat/nbf/exp), signed with the
//        newest published key, or with a key the JWKS never published;
//   POST /control/rotate → {"kid"}: a new signing key, published in the JWKS from now on;
//   POST /control/opaque {"claims": {...}} → {"access_token"}: an opaque (non-JWT) token whose
//        introspection answers these claims (plus active, iss, exp in an hour);
//   POST /control/introspect (RFC 7662, form `token=`) → its claims, or {"active": false};
//   GET  /control/introspections → {"count"}: introspection calls so far.
// Usage: node server.mjs <port>. Prints `ready <issuer url>` once it listens.
import { randomBytes } from 'node:crypto';
import { OAuth2Server, OAuth2Issuer } from 'oauth2-mock-server';

const port = Number(process.argv[2] ?? 0);
const server = new OAuth2Server();
let current = (await server.issuer.keys.generate('RS256')).kid;
const foreign = new OAuth2Issuer();
await foreign.keys.generate('RS256');

// RFC 8707: the client names the resource; the token's audience is it. The client id becomes
// the subject, as authorization servers do for client credentials.
server.service.on('beforeTokenSigning', (token, req) => {
  const body = req.body ?? {};
  if (typeof body.resource === 'string') token.payload.aud = body.resource;
  let clientId = body.client_id;
  const basic = req.headers?.authorization;
  if (!clientId && typeof basic === 'string' && basic.startsWith('Basic ')) {
    clientId = decodeURIComponent(Buffer.from(basic.slice(6), 'base64').toString().split(':')[0]);
  }
  if (clientId) {
    token.payload.client_id = clientId;
    token.payload.sub ??= clientId;
  }
});

const send = (res, status, body) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

server.service.addRoute('POST', '/control/token', async (req, res) => {
  const { claims = {}, expires_in = 3600, key = 'current' } = req.body ?? {};
  const issuer = key === 'foreign' ? foreign : server.issuer;
  foreign.url = server.issuer.url;
  const token = await issuer.buildToken({
    kid: key === 'foreign' ? undefined : current,
    expiresIn: expires_in,
    scopesOrTransform: (_header, payload) => Object.assign(payload, claims),
  });
  send(res, 200, { access_token: token });
});

server.service.addRoute('POST', '/control/rotate', async (_req, res) => {
  current = (await server.issuer.keys.generate('RS256')).kid;
  send(res, 200, { kid: current });
});

const opaque = new Map();
let introspections = 0;
server.service.addRoute('POST', '/control/opaque', async (req, res) => {
  const token = randomBytes(24).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  opaque.set(token, { active: true, iss: server.issuer.url, exp: now + 3600, ...(req.body?.claims ?? {}) });
  send(res, 200, { access_token: token });
});
server.service.addRoute('POST', '/control/introspect', async (req, res) => {
  introspections += 1;
  send(res, 200, opaque.get(req.body?.token) ?? { active: false });
});
server.service.addRoute('GET', '/control/introspections', async (_req, res) => {
  send(res, 200, { count: introspections });
});

await server.start(port, '127.0.0.1');
// The loopback address itself, not `localhost` (which may resolve to ::1, where nothing listens).
server.issuer.url = `http://127.0.0.1:${server.address().port}`;
console.log(`ready ${server.issuer.url}`);
const stop = async () => { await server.stop(); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
