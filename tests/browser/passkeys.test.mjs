// Passkeys in a real browser: Chromium with its virtual authenticator
// (DevTools WebAuthn domain: CTAP2, internal, resident keys, user
// verification). `cheq demo --colocated --passkeys` serves on
// http://localhost:PORT (browsers refuse WebAuthn on an IP address). alice
// signs in with her password, adds a passkey on /account, signs out, signs
// in with the passkey alone (no user name typed), accepts a booking, then
// removes the passkey, which ends the session it signed in. Then, with no
// passkey again, a booking that asks for one: its page's "Add a passkey"
// link leads to the account page, which after the passkey is added leads
// back to the confirmation, where alice accepts with it; a return target
// that is not a confirmation page of this service is not offered.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { continueIfAsked, freePort, launchChromium, pollResult, startDemo, waitFor } from './support.mjs';

const root = resolve(import.meta.dirname, '..', '..');
const cheq = process.env.CHEQ_BIN || join(root, 'target', 'debug', 'cheq');
const password = 'correct horse battery staple';
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** axe-core on the page as it is (through the DevTools protocol: the CSP
 * stays on); fails on a serious or critical violation. */
async function audit(page, name) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.evaluate(axeSource);
  const { violations } = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
  assert.deepEqual(bad, [], `${name}: axe violations`);
}

const port = await freePort();
const browser = await launchChromium();
const demo = startDemo({
  cheq, after, browser, prefix: 'cheq-passkeys-',
  args: ['--colocated', '--passkeys', '--rs-port', String(port)],
  env: { CHEQ_DEMO_PASSWORD: password },
});
const { dataDir } = demo;

// The browser's origin; node reaches the same server on 127.0.0.1.
const origin = `http://localhost:${port}`;
const direct = `http://127.0.0.1:${port}`;

/** Once the demo answers: a new browser context and page with a virtual
 * authenticator (CTAP2, internal, resident keys, user verification), and the
 * list the page's script errors and console errors are collected in. */
async function openWithAuthenticator() {
  await waitFor(`${direct}/healthz`).catch((e) => { throw new Error(`${e.message}\n${demo.log()}`); });
  const context = await browser.newContext();
  const page = await context.newPage();
  const problems = [];
  // The browser's own favicon request is no page's problem.
  page.on('console', (m) => {
    if (m.type() === 'error' && !(m.location().url || '').endsWith('/favicon.ico')) problems.push(`${m.text()} (${m.location().url})`);
  });
  page.on('pageerror', (e) => problems.push(String(e)));
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2', transport: 'internal', hasResidentKey: true,
      hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true,
    },
  });
  return { context, page, problems, cdp, authenticatorId };
}

test('alice adds a passkey, signs in with it alone, confirms, and removing it ends that session', async () => {
  const { context, page, problems, cdp, authenticatorId } = await openWithAuthenticator();

  // Password first; the account page then offers a passkey.
  await page.goto(`${origin}/login?next=%2Faccount`);
  await page.fill('input[name=username]', 'alice');
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForNavigation(), page.click('form[action="/login"] button[type=submit]')]);
  assert.equal(new URL(page.url()).pathname, '/account');
  assert.ok(await page.isVisible('#no-passkeys'));
  await page.fill('#passkey-name', 'Test laptop');
  await Promise.all([page.waitForURL(/\/account\?added=1$/), page.click('#add-passkey')]);
  assert.match(await page.textContent('#passkey-list'), /Test laptop/);
  const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId });
  assert.equal(credentials.length, 1);
  assert.equal(credentials[0].isResidentCredential, true);
  assert.equal(credentials[0].rpId, 'localhost');

  // Signed out, then in with the passkey: no user name typed.
  await Promise.all([page.waitForNavigation(), page.click('nav button.link')]);
  await page.goto(`${origin}/login`);
  assert.ok(await page.isVisible('#passkey-sign-in'));
  await Promise.all([page.waitForURL(/\/history$/), page.click('#passkey-sign-in')]);
  assert.match(await page.textContent('nav'), /Signed in as\s+alice/);

  // A booking, confirmed in this session.
  const out = execFileSync(cheq, ['agent', '--rs', direct, '--tool', 'book_flight',
    '--param', 'flight_number=UA23', '--param', 'flight_date=2026-12-08',
    '--param', 'cabin_class=BUSINESS', '--param', 'price_usd=1200', '--no-wait'], { encoding: 'utf8' });
  const pack = JSON.parse(out.split('\n')[0]);
  assert.equal(pack['confirmation uri'], `${origin}/confirm`);
  await page.goto(`${pack['confirmation uri']}?resource_uri=${encodeURIComponent(pack['resource uri'])}`);
  await continueIfAsked(page);
  assert.ok(new URL(page.url()).pathname.startsWith('/c/'), page.url());
  // §14: the demo's RS asks for the passkey; Accept gets the assertion.
  assert.ok(await page.isVisible('#passkey-asked'));
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);
  const result = await pollResult(pack['result uri'].replace(origin, direct));
  assert.equal(result.status, 'accepted', JSON.stringify(result));

  // The evidence carries the assertion, and checks offline: with cheq verify
  // (rule 6), and with an implementation cheq did not write (py_webauthn).
  const evidenceHref = await page.getAttribute('a[href^="/history/"][download]', 'href');
  const evidence = await (await page.request.get(`${origin}${evidenceHref}`)).text();
  const header = JSON.parse(Buffer.from(JSON.parse(evidence).signatures[1].protected, 'base64url'));
  assert.deepEqual(header.crit, ['cheq_decision', 'cheq_passkey']);
  const file = join(dataDir, 'evidence.json');
  writeFileSync(file, evidence);
  const independent = JSON.parse(execFileSync('python3', [join(root, 'tests', 'passkeys', 'verify_evidence.py'), file], { encoding: 'utf8' }));
  assert.equal(independent.verified, true, JSON.stringify(independent));
  assert.equal(independent.rp_id, 'localhost');
  const jwks = await (await fetch(`${direct}/.well-known/jwks.json`)).json();
  const trust = join(dataDir, 'trust.json');
  writeFileSync(trust, JSON.stringify({
    resource_servers: [{ origin, keys: jwks }],
    confirmation_servers: [{ origin, keys: jwks }],
  }));
  const verified = JSON.parse(execFileSync(cheq, ['verify', '--trust', trust, '--expect', 'accept', file], { encoding: 'utf8' }));
  assert.equal(verified.decision, 'accept', JSON.stringify(verified));
  // One character of the assertion changed: cheq verify refuses the document.
  const bent = JSON.parse(evidence);
  const h = { ...header, cheq_passkey: { ...header.cheq_passkey, client_data: header.cheq_passkey.client_data.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A')) } };
  bent.signatures[1].protected = Buffer.from(JSON.stringify(h)).toString('base64url');
  writeFileSync(file, JSON.stringify(bent));
  assert.throws(() => execFileSync(cheq, ['verify', '--trust', trust, file], { stdio: 'pipe' }));

  // Removing the passkey (a recent sign-in: the passkey's) ends the session
  // it signed in.
  await page.goto(`${origin}/account`);
  await Promise.all([page.waitForNavigation(), page.click('#passkey-list button.link')]);
  assert.match(page.url(), /\/(login|account)/);
  await page.goto(`${origin}/account`);
  assert.equal(new URL(page.url()).pathname, '/login', 'the session signed in with the removed passkey is over');
  assert.deepEqual(problems, [], 'no script error and nothing blocked by the CSP');
  await context.close();
});

// Runs after the test above, which leaves alice without a passkey.
test('from a CHEQ that asks for a passkey, alice adds one and comes back to accept', async () => {
  const { context, page, problems, cdp, authenticatorId } = await openWithAuthenticator();

  await page.goto(`${origin}/login`);
  await page.fill('input[name=username]', 'alice');
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForNavigation(), page.click('form[action="/login"] button[type=submit]')]);

  const out = execFileSync(cheq, ['agent', '--rs', direct, '--tool', 'book_flight',
    '--param', 'flight_number=UA24', '--param', 'flight_date=2026-12-09',
    '--param', 'cabin_class=BUSINESS', '--param', 'price_usd=1300', '--no-wait'], { encoding: 'utf8' });
  const pack = JSON.parse(out.split('\n')[0]);
  await page.goto(`${pack['confirmation uri']}?resource_uri=${encodeURIComponent(pack['resource uri'])}`);
  await continueIfAsked(page);
  const cheqPath = new URL(page.url()).pathname;
  assert.ok(cheqPath.startsWith('/c/'), page.url());
  // No passkey yet: the page says so and links to the account page.
  assert.ok(await page.isVisible('#passkey-needed'));
  await Promise.all([page.waitForNavigation(), page.click('#add-passkey-link')]);
  assert.equal(new URL(page.url()).pathname, '/account');
  assert.equal(await page.getAttribute('#back-to-confirmation', 'href'), cheqPath);
  await audit(page, 'account page with a way back');

  await page.fill('#passkey-name', 'Phone');
  await Promise.all([page.waitForURL(/\/account\?added=1&back=/), page.click('#add-passkey')]);
  assert.match(await page.textContent('#account-notice'), /The passkey was added/);
  assert.match(await page.textContent('#passkey-list'), /Phone/);
  const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId });
  assert.equal(credentials.length, 1);

  // Back to the confirmation, which now asks the passkey on Accept.
  assert.equal(await page.textContent('#back-to-confirmation'), 'Back to the confirmation');
  await audit(page, 'account page after adding, with a way back');
  await Promise.all([page.waitForNavigation(), page.click('#back-to-confirmation')]);
  assert.equal(new URL(page.url()).pathname, cheqPath);
  assert.ok(await page.isVisible('#passkey-asked'));
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);
  const result = await pollResult(pack['result uri'].replace(origin, direct));
  assert.equal(result.status, 'accepted', JSON.stringify(result));

  // Another site, or another page of this one, is no way back.
  for (const target of ['https://evil.example/', '//evil.example/c/x', `${origin}${cheqPath}`, '/history']) {
    await page.goto(`${origin}/account?back=${encodeURIComponent(target)}`);
    assert.equal(new URL(page.url()).pathname, '/account');
    assert.equal(await page.$('#back-to-confirmation'), null, target);
  }
  assert.deepEqual(problems, [], 'no script error and nothing blocked by the CSP');
  await context.close();
});
