// A real OpenID provider for the tests and the demo: node's oidc-provider (a
// certified implementation) on loopback, with one confidential client (the
// CS) and a few accounts. Its login page is ours (oidc-provider leaves the
// interaction pages to the host); consent is granted for the one client.
//
// Configuration: the JSON in CHEQ_IDP, e.g.
//   {"port": 9000, "client_id": "cheq", "client_secret": "…",
//    "redirect_uris": ["http://127.0.0.1:8080/oidc/callback"],
//    "post_logout_redirect_uris": ["http://127.0.0.1:8080/login"],
//    "auth_method": "client_secret_basic", "alg": "RS256",
//    "require_auth_time": true,   (false: auth_time only when max_age asks)
//    "accounts": {"carol": {"password": "…", "email": "carol@example.com",
//                           "email_verified": true, "amr": ["pwd", "mfa"]}}}
// Prints one line "ready <issuer>" once it listens on 127.0.0.1:<port>.
import http from 'node:http';
import Provider from 'oidc-provider';
import { generateKeyPair, exportJWK } from 'jose';

const config = JSON.parse(process.env.CHEQ_IDP || '{}');
const port = config.port || 9000;
const issuer = `http://127.0.0.1:${port}`;
const accounts = config.accounts || {};

async function signingKey(alg, kid) {
  const { privateKey } = await generateKeyPair(alg, { extractable: true });
  return { ...(await exportJWK(privateKey)), kid, alg, use: 'sig' };
}

const provider = new Provider(issuer, {
  clients: [{
    client_id: config.client_id || 'cheq',
    client_secret: config.client_secret || 'cheq-demo-idp-secret',
    redirect_uris: config.redirect_uris || ['http://127.0.0.1:8080/oidc/callback'],
    post_logout_redirect_uris: config.post_logout_redirect_uris || ['http://127.0.0.1:8080/login'],
    token_endpoint_auth_method: config.auth_method || 'client_secret_basic',
    id_token_signed_response_alg: config.alg || 'RS256',
    grant_types: ['authorization_code'],
    response_types: ['code'],
    require_auth_time: config.require_auth_time !== false,
  }],
  jwks: { keys: [await signingKey('RS256', 'rsa-1'), await signingKey('ES256', 'ec-1')] },
  // amr and auth_time ride in the ID token; the e-mail comes from UserInfo
  // (oidc-provider keeps scope claims out of a code flow's ID token).
  claims: { openid: ['sub', 'amr'], email: ['email', 'email_verified'] },
  scopes: ['openid', 'email'],
  cookies: { keys: [crypto.randomUUID()] },
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: { enabled: true },
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, id) {
    const a = accounts[id];
    if (!a) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, email: a.email, email_verified: a.email_verified === true };
      },
    };
  },
  // The CS is this provider's one client: no consent screen.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) {
      const grant = await ctx.oidc.provider.Grant.find(grantId);
      if (grant) return grant;
    }
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email');
    await grant.save();
    return grant;
  },
});

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginPage(uid, error) {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Example identity provider: sign in</title></head><body>
<h1>Example identity provider</h1>
${error ? `<p role="alert" id="idp-error">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
<label for="login">User name</label> <input id="login" name="login" autocomplete="username" required>
<label for="password">Password</label> <input id="password" name="password" type="password" required>
<button type="submit" id="idp-submit">Sign in</button>
</form>
<form method="post" action="/interaction/${escape(uid)}/abort"><button type="submit" id="idp-cancel">Cancel</button></form>
</body></html>`;
}

async function body(req) {
  let text = '';
  for await (const chunk of req) {
    text += chunk;
    if (text.length > 16384) throw new Error('body too large');
  }
  return new URLSearchParams(text);
}

async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error('interaction mismatch');
  if (!action) {
    if (details.prompt.name !== 'login') {
      // Consent is granted by loadExistingGrant; nothing to ask.
      return provider.interactionFinished(req, res, {}, { mergeWithLastSubmission: true });
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    return res.end(loginPage(uid));
  }
  if (action === '/abort') {
    return provider.interactionFinished(req, res, {
      error: 'access_denied', error_description: 'the user cancelled the sign-in',
    }, { mergeWithLastSubmission: false });
  }
  const form = await body(req);
  const account = accounts[form.get('login')];
  if (!account || account.password !== form.get('password')) {
    res.writeHead(401, { 'content-type': 'text/html; charset=utf-8' });
    return res.end(loginPage(uid, 'Wrong user name or password.'));
  }
  return provider.interactionFinished(req, res, {
    login: { accountId: form.get('login'), amr: account.amr || ['pwd'] },
  }, { mergeWithLastSubmission: false });
}

const handler = provider.callback();
const server = http.createServer(async (req, res) => {
  try {
    const path = new URL(req.url, issuer).pathname;
    const m = path.match(/^\/interaction\/([A-Za-z0-9_-]+)(\/login|\/abort)?$/);
    if (m && (m[2] ? req.method === 'POST' : req.method === 'GET')) {
      return await interaction(req, res, m[1], m[2]);
    }
    return handler(req, res);
  } catch (e) {
    if (!res.headersSent) res.writeHead(400, { 'content-type': 'text/plain' });
    res.end(`error: ${e.message}`);
  }
});
server.listen(port, '127.0.0.1', () => console.log(`ready ${issuer}`));
for (const s of ['SIGTERM', 'SIGINT']) process.on(s, () => process.exit(0));
// Gone with the process that started it (a test, or `cheq demo --with-idp`).
const parent = process.ppid;
setInterval(() => { if (process.ppid !== parent) process.exit(0); }, 1000).unref();
