// An OpenID provider that misbehaves on purpose, for the negative tests of
// the confirmation server's sign-in: a real HTTP server on loopback that
// speaks the authorization code flow (discovery, JWKS, authorize, token with
// PKCE and client authentication) and, per mode, answers with an ID token
// that breaks one rule of OpenID Connect Core §3.1.3.7. Tokens are signed
// with node's `jose`. A real provider never sends such tokens; an attacker
// in its place, or a broken one, would.
//
// CHEQ_ROGUE (JSON): {"port": 9100, "client_id": "cheq", "client_secret": "…",
//   "sub": "rogue-user", "email": "carol@example.com", "mode": "good"}
// POST /_mode?m=<mode> changes the mode; GET /_stats says how often the JWKS
// and the token endpoint were asked. Prints "ready <issuer>".
//
// Modes: good, good-es256, wrong-iss, wrong-aud, extra-aud, wrong-azp,
// other-key, alg-none, hs256, expired, iat-future, iat-old, replay-nonce,
// rotate (sign with a new key, published at once: a refetch must find it),
// unknown-kid (sign with a key never published), unverified-email,
// no-auth-time, stale-auth-time, no-id-token.
import http from 'node:http';
import { createHash, randomBytes } from 'node:crypto';
import { generateKeyPair, exportJWK, SignJWT, base64url } from 'jose';

const config = JSON.parse(process.env.CHEQ_ROGUE || '{}');
const port = config.port || 9100;
const issuer = `http://127.0.0.1:${port}`;
const clientId = config.client_id || 'cheq';
const clientSecret = config.client_secret || 'rogue-secret';
let mode = config.mode || 'good';
const stats = { jwks: 0, token: 0, authorize: 0 };

async function key(alg, kid) {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
  return { alg, kid, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } };
}
const rsa = await key('RS256', 'k1');
const ec = await key('ES256', 'e1');
const impostor = await key('RS256', 'k1'); // same kid, another key
const rotated = await key('RS256', 'k2');
const hidden = await key('RS256', 'k-unpublished');
let rotatedIn = false;

const codes = new Map(); // code → {nonce, challenge, redirect}
let firstIdToken = null;

function published() {
  const keys = [rsa.publicJwk, ec.publicJwk];
  if (rotatedIn) keys.push(rotated.publicJwk);
  return { keys };
}

async function sign(claims, k, header = {}) {
  return new SignJWT(claims).setProtectedHeader({ alg: k.alg, kid: k.kid, typ: 'JWT', ...header }).sign(k.privateKey);
}

async function idToken(nonce) {
  const now = Math.floor(Date.now() / 1000);
  const claims = {
    iss: issuer, sub: config.sub || 'rogue-user', aud: clientId, nonce,
    iat: now, exp: now + 300, auth_time: now - 5, amr: ['pwd', 'otp'],
    email: config.email || 'carol@example.com', email_verified: true,
  };
  switch (mode) {
    case 'good': return sign(claims, rsa);
    case 'good-es256': return sign(claims, ec);
    case 'wrong-iss': return sign({ ...claims, iss: 'http://127.0.0.1:1' }, rsa);
    case 'wrong-aud': return sign({ ...claims, aud: 'someone-else' }, rsa);
    case 'extra-aud': return sign({ ...claims, aud: [clientId, 'someone-else'] }, rsa);
    case 'wrong-azp': return sign({ ...claims, azp: 'someone-else' }, rsa);
    case 'other-key': return sign(claims, impostor);
    case 'alg-none': {
      const enc = (o) => base64url.encode(JSON.stringify(o));
      return `${enc({ alg: 'none', typ: 'JWT' })}.${enc(claims)}.`;
    }
    case 'hs256': {
      // HMAC keyed with the provider's public key: what a verifier that
      // takes `alg` from the token would accept.
      const secret = new TextEncoder().encode(JSON.stringify(rsa.publicJwk));
      return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid: 'k1' }).sign(secret);
    }
    case 'expired': return sign({ ...claims, iat: now - 400, exp: now - 120 }, rsa);
    case 'iat-future': return sign({ ...claims, iat: now + 3600, exp: now + 7200 }, rsa);
    case 'iat-old': return sign({ ...claims, iat: now - 3600, exp: now + 300 }, rsa);
    case 'replay-nonce': {
      if (!firstIdToken) firstIdToken = await sign(claims, rsa);
      return firstIdToken;
    }
    case 'rotate': rotatedIn = true; return sign(claims, rotated);
    case 'unknown-kid': return sign(claims, hidden);
    case 'unverified-email': return sign({ ...claims, email_verified: false }, rsa);
    case 'no-auth-time': { const { auth_time: _, ...rest } = claims; return sign(rest, rsa); }
    case 'stale-auth-time': return sign({ ...claims, auth_time: now - 7200 }, rsa);
    default: throw new Error(`unknown mode ${mode}`);
  }
}

function json(res, status, value, headers = {}) {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers });
  res.end(JSON.stringify(value));
}

async function body(req) {
  let text = '';
  for await (const chunk of req) {
    text += chunk;
    if (text.length > 16384) throw new Error('body too large');
  }
  return new URLSearchParams(text);
}

const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, issuer);
    const q = url.searchParams;
    switch (`${req.method} ${url.pathname}`) {
      case 'GET /.well-known/openid-configuration':
        return json(res, 200, {
          issuer,
          authorization_endpoint: `${issuer}/authorize`,
          token_endpoint: `${issuer}/token`,
          jwks_uri: `${issuer}/jwks`,
          response_types_supported: ['code'],
          subject_types_supported: ['public'],
          id_token_signing_alg_values_supported: ['RS256', 'ES256'],
          token_endpoint_auth_methods_supported: ['client_secret_post'],
          code_challenge_methods_supported: ['S256'],
        });
      case 'GET /jwks':
        stats.jwks += 1;
        return json(res, 200, published());
      case 'GET /authorize': {
        stats.authorize += 1;
        if (q.get('client_id') !== clientId || q.get('response_type') !== 'code'
          || q.get('code_challenge_method') !== 'S256' || !q.get('nonce') || !q.get('state')) {
          return json(res, 400, { error: 'invalid_request' });
        }
        const code = randomBytes(16).toString('hex');
        codes.set(code, { nonce: q.get('nonce'), challenge: q.get('code_challenge'), redirect: q.get('redirect_uri') });
        const back = new URL(q.get('redirect_uri'));
        back.searchParams.set('code', code);
        back.searchParams.set('state', q.get('state'));
        res.writeHead(303, { location: back.toString() });
        return res.end();
      }
      case 'POST /token': {
        stats.token += 1;
        const form = await body(req);
        // client_secret_post only (discovery says so).
        if (form.get('client_id') !== clientId || form.get('client_secret') !== clientSecret) {
          return json(res, 401, { error: 'invalid_client' });
        }
        const grant = codes.get(form.get('code'));
        codes.delete(form.get('code'));
        const verifier = form.get('code_verifier') || '';
        if (!grant || grant.redirect !== form.get('redirect_uri')
          || createHash('sha256').update(verifier).digest('base64url') !== grant.challenge) {
          return json(res, 400, { error: 'invalid_grant' });
        }
        const answer = { access_token: randomBytes(16).toString('hex'), token_type: 'Bearer', expires_in: 300 };
        if (mode !== 'no-id-token') answer.id_token = await idToken(grant.nonce);
        return json(res, 200, answer);
      }
      case 'POST /_mode':
        mode = q.get('m');
        firstIdToken = mode === 'replay-nonce' ? firstIdToken : null;
        return json(res, 200, { mode });
      case 'GET /_stats':
        return json(res, 200, stats);
      default:
        return json(res, 404, { error: 'not_found' });
    }
  } catch (e) {
    return json(res, 500, { error: 'server_error', error_description: e.message });
  }
});
server.listen(port, '127.0.0.1', () => console.log(`ready ${issuer}`));
for (const s of ['SIGTERM', 'SIGINT']) process.on(s, () => process.exit(0));
// Gone with the process that started it (a test, or `cheq demo --with-idp`).
const parent = process.ppid;
setInterval(() => { if (process.ppid !== parent) process.exit(0); }, 1000).unref();
