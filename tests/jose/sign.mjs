// Makes a CHEQ and signs it with node's jose (PROTOCOL.md §4, §5), for cheq
// to verify: the payload (fresh nonce, `date` now, `expires` in an hour), the
// resource signature, and with --cs-key the confirmation signature over the
// same payload (`cheq_rs_sig` = SHA-256 of the resource signature bytes,
// `cheq_view` = SHA-256 of the view text, `cheq_decision` marked critical).
//
//   node tests/jose/sign.mjs --rs-key RS.jwk --resource-uri URI
//       --confirmation-uri URI --subject NAME
//       [--cs-key CS.jwk --decision accept|reject] [--break WHAT]
//
// --break makes a document cheq must refuse, in the resource signature:
//   unknown-crit  `crit` names `cheq_unknown`, a parameter cheq does not know
//   hs256         alg HS256 (HMAC, refused by §5) under the same kid
//   embedded-jwk  the header carries the signing key (`jwk`)
// Prints {"resource": <document>, "decided": <document or null>} on stdout.
import { readFileSync } from 'node:fs';
import { createHash, randomBytes } from 'node:crypto';
import { FlattenedSign, importJWK, base64url } from 'jose';

const opts = {};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) opts[argv[i].replace(/^--/, '')] = argv[i + 1];
for (const need of ['rs-key', 'resource-uri', 'confirmation-uri', 'subject']) {
  if (!opts[need]) {
    process.stderr.write(`usage error: --${need} is required\n`);
    process.exit(2);
  }
}

const sha256 = (bytes) => base64url.encode(createHash('sha256').update(bytes).digest());
const rfc3339 = (d) => d.toISOString().replace(/\.\d{3}Z$/, 'Z');
const now = new Date();

const payload = {
  version: '1.0',
  operation: 'https://api.airline.example/api/v1/book-flight',
  'operation name': 'Book flight',
  inputs: {
    parameters: [
      { 'parameter name': 'flight number', 'parameter description': 'Signed by node jose', 'parameter value': 'UA23' },
      { 'parameter name': 'price', 'parameter value': '1234.00', 'parameter unit': 'USD' },
    ],
  },
  date: rfc3339(now),
  nonce: base64url.encode(randomBytes(16)),
  'resource uri': opts['resource-uri'],
  'confirmation uri': opts['confirmation-uri'],
  subject: opts.subject,
  expires: rfc3339(new Date(now.getTime() + 3600 * 1000)),
  language: 'en',
};
const payloadBytes = new TextEncoder().encode(JSON.stringify(payload));

async function signOne(jwk, header, options) {
  const key = await importJWK(jwk, header.alg === 'HS256' ? 'HS256' : 'EdDSA');
  const jws = await new FlattenedSign(payloadBytes).setProtectedHeader(header).sign(key, options);
  return { jws, entry: { protected: jws.protected, signature: jws.signature } };
}

const rsJwk = JSON.parse(readFileSync(opts['rs-key'], 'utf8'));
let rsHeader = { alg: 'EdDSA', kid: rsJwk.kid, typ: 'cheq+jws', cheq_role: 'resource' };
let rsKey = rsJwk;
let signOptions;
switch (opts.break ?? 'none') {
  case 'none':
    break;
  case 'unknown-crit':
    rsHeader = { ...rsHeader, crit: ['cheq_unknown'], cheq_unknown: true };
    signOptions = { crit: { cheq_unknown: true } };
    break;
  case 'hs256':
    rsHeader = { ...rsHeader, alg: 'HS256' };
    rsKey = { kty: 'oct', k: base64url.encode(randomBytes(32)) };
    break;
  case 'embedded-jwk': {
    const { d, ...pub } = rsJwk;
    rsHeader = { ...rsHeader, jwk: pub };
    break;
  }
  default:
    process.stderr.write(`usage error: unknown --break ${opts.break}\n`);
    process.exit(2);
}
const resource = await signOne(rsKey, rsHeader, signOptions);
const out = {
  resource: JSON.stringify({ payload: resource.jws.payload, signatures: [resource.entry] }),
  decided: null,
};

if (opts['cs-key']) {
  const csJwk = JSON.parse(readFileSync(opts['cs-key'], 'utf8'));
  const iat = Math.floor(now.getTime() / 1000);
  const csHeader = {
    alg: 'EdDSA',
    kid: csJwk.kid,
    typ: 'cheq+jws',
    cheq_role: 'confirmation',
    crit: ['cheq_decision'],
    cheq_decision: opts.decision ?? 'accept',
    sub: opts.subject,
    iat,
    auth_time: iat - 60,
    amr: ['pin'],
    cheq_channel: 'voice',
    cheq_view: sha256('the view read out, signed by node jose'),
    cheq_rs_sig: sha256(base64url.decode(resource.entry.signature)),
  };
  const confirmation = await signOne(csJwk, csHeader, { crit: { cheq_decision: true } });
  out.decided = JSON.stringify({
    payload: resource.jws.payload,
    signatures: [resource.entry, confirmation.entry],
  });
}
process.stdout.write(`${JSON.stringify(out)}\n`);
