// Verifies a signed CHEQ (JWS General JSON Serialization, PROTOCOL.md §5)
// with node's jose, an implementation independent of cheq's own.
//
//   node tests/jose/verify.mjs --resource-jwks RS.json --confirmation-jwks CS.json SIGNED.json
//
// JOSE level, like tests/interop/verify.py: EVERY entry of `signatures` is
// verified on its own (jose's flattenedVerify, so that one good signature
// cannot stand for a bad one: generalVerify returns at the first that
// verifies), the resource signature with a key of the resource server's JWKS
// and the confirmation signature with a key of the confirmation server's,
// each found by its `kid`; alg EdDSA only; `crit` honoured (jose refuses a
// name it was not told it understands: only `cheq_decision` is); a
// confirmation header must mark `cheq_decision` critical; no unprotected
// `header`, no embedded or remote key (jwk, jku, x5u, x5c). CHEQ semantics
// (trust per origin, expiry, cheq_rs_sig, replay) are cheq's, not checked here.
//
// Exit 0 and {"ok":true,"signatures":[{kid,cheq_role,cheq_decision}]} on
// stdout when every signature verifies; exit 1 and the reason on stderr
// otherwise; exit 2 on a usage error.
import { readFileSync } from 'node:fs';
import { flattenedVerify, importJWK, base64url } from 'jose';

function usage(message) {
  process.stderr.write(`usage error: ${message}\n`);
  process.exit(2);
}

function args(argv) {
  const out = { jwks: {} };
  for (let i = 0; i < argv.length; i += 1) {
    const a = argv[i];
    if (a === '--resource-jwks') out.jwks.resource = argv[++i];
    else if (a === '--confirmation-jwks') out.jwks.confirmation = argv[++i];
    else if (!out.file) out.file = a;
    else usage(`unexpected argument ${a}`);
  }
  if (!out.file || !out.jwks.resource) usage('--resource-jwks FILE [--confirmation-jwks FILE] SIGNED.json');
  return out;
}

class Invalid extends Error {}

function keysOf(file) {
  const set = JSON.parse(readFileSync(file, 'utf8'));
  return set.keys ?? [set];
}

const EMBEDDED = ['jwk', 'jku', 'x5u', 'x5c'];

async function verify(doc, jwks) {
  if (typeof doc !== 'object' || doc === null
    || Object.keys(doc).sort().join() !== 'payload,signatures') {
    throw new Invalid("the document must have exactly 'payload' and 'signatures'");
  }
  if (!Array.isArray(doc.signatures) || doc.signatures.length === 0) {
    throw new Invalid("'signatures' must be a non-empty array");
  }
  const summary = [];
  for (const [i, sig] of doc.signatures.entries()) {
    if (typeof sig !== 'object' || sig === null
      || Object.keys(sig).sort().join() !== 'protected,signature') {
      throw new Invalid(`signature ${i}: must have exactly 'protected' and 'signature' (no 'header')`);
    }
    const header = JSON.parse(new TextDecoder().decode(base64url.decode(sig.protected)));
    const role = header.cheq_role;
    if (role !== (i === 0 ? 'resource' : 'confirmation')) {
      throw new Invalid(`signature ${i}: cheq_role ${JSON.stringify(role)} out of place`);
    }
    for (const m of EMBEDDED) {
      if (m in header) throw new Invalid(`signature ${i}: "${m}" is not allowed`);
    }
    if (role === 'confirmation'
      && !(Array.isArray(header.crit) && header.crit.includes('cheq_decision'))) {
      throw new Invalid(`signature ${i}: cheq_decision is not marked critical`);
    }
    const file = jwks[role];
    if (!file) throw new Invalid(`signature ${i}: no JWKS given for role ${role}`);
    const jwk = keysOf(file).find((k) => k.kid === header.kid);
    if (!jwk) throw new Invalid(`signature ${i}: no key "${header.kid}" for role ${role}`);
    const key = await importJWK(jwk, 'EdDSA');
    try {
      await flattenedVerify(
        { payload: doc.payload, protected: sig.protected, signature: sig.signature },
        key,
        { algorithms: ['EdDSA'], crit: { cheq_decision: true } },
      );
    } catch (e) {
      throw new Invalid(`signature ${i} (kid ${header.kid}): ${e.code ?? e.name}: ${e.message}`);
    }
    summary.push({ kid: header.kid, cheq_role: role, cheq_decision: header.cheq_decision ?? null });
  }
  return summary;
}

const a = args(process.argv.slice(2));
let doc;
try {
  doc = JSON.parse(readFileSync(a.file, 'utf8'));
} catch (e) {
  usage(e.message);
}
try {
  const signatures = await verify(doc, a.jwks);
  process.stdout.write(`${JSON.stringify({ ok: true, signatures })}\n`);
} catch (e) {
  process.stderr.write(`invalid: ${e.message}\n`);
  process.exit(1);
}
