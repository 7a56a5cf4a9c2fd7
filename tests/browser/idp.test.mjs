// Signing in with an identity provider, in a real browser: `cheq demo
// --with-idp` runs the CS, the RS and node's oidc-provider as real
// processes; headless Chromium clicks "Sign in with demo-idp" on the CS login
// page, signs in on the provider's page, lands on the confirmation page,
// accepts, and the agent's result says accepted.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { freePort, launchChromium, pollResult, waitFor } from './support.mjs';

const root = resolve(import.meta.dirname, '..', '..');
const cheq = process.env.CHEQ_BIN || join(root, 'target', 'debug', 'cheq');
const idpPassword = 'carol at the provider';
const shots = join(root, 'target', 'browser');
mkdirSync(shots, { recursive: true });


const dataDir = mkdtempSync(join(tmpdir(), 'cheq-browser-idp-'));
const [csPort, rsPort, idpPort] = [await freePort(), await freePort(), await freePort()];
const demo = spawn(cheq, ['demo', '--with-idp', '--data-dir', dataDir, '--cs-port', String(csPort),
  '--rs-port', String(rsPort), '--idp-port', String(idpPort)], {
  cwd: root,
  env: { ...process.env, CHEQ_DEMO_PASSWORD: 'not used here 1', CHEQ_DEMO_IDP_PASSWORD: idpPassword },
  stdio: ['ignore', 'pipe', 'pipe'],
});
let demoLog = '';
demo.stdout.on('data', (d) => { demoLog += d; });
demo.stderr.on('data', (d) => { demoLog += d; });
const browser = await launchChromium();
after(async () => {
  await browser.close();
  demo.kill('SIGTERM');
  rmSync(dataDir, { recursive: true, force: true });
});

const cs = `http://127.0.0.1:${csPort}`;
const rs = `http://127.0.0.1:${rsPort}`;



test('sign in with the identity provider, then accept', async () => {
  await waitFor(`${cs}/healthz`, 60000, () => demoLog);
  await waitFor(`${rs}/healthz`);
  await waitFor(`http://127.0.0.1:${idpPort}/.well-known/openid-configuration`);
  assert.match(demoLog, /Sign in with demo-idp/);
  const out = execFileSync(cheq, ['agent', '--rs', rs, '--tool', 'book_flight', '--param', 'flight_number=UA23',
    '--param', 'flight_date=2026-12-08', '--param', 'cabin_class=BUSINESS', '--param', 'price_usd=1200', '--no-wait'],
  { encoding: 'utf8' });
  const pack = JSON.parse(out.split('\n')[0]);
  const page = await browser.newPage();
  await page.setContent(`<form method="post" action="${pack['confirmation uri']}">
    <input name="resource_uri" value="${pack['resource uri']}"><button id="go">Confirm</button></form>`);
  await Promise.all([page.waitForNavigation(), page.click('#go')]);
  // The CS login page offers the provider beside the local form.
  assert.match(page.url(), /\/login\?/);
  await page.screenshot({ path: join(shots, 'login-with-idp.png') });
  await Promise.all([page.waitForNavigation(), page.click('text=Sign in with demo-idp')]);
  // The provider's own page.
  assert.ok(page.url().startsWith(`http://127.0.0.1:${idpPort}/interaction/`), page.url());
  await page.fill('#login', 'carol');
  await page.fill('#password', idpPassword);
  await Promise.all([page.waitForURL((u) => u.href.startsWith(cs) && !u.pathname.startsWith('/oidc/')), page.click('#idp-submit')]);
  // Back at the CS: the confirmation page, signed in through the provider;
  // the sign-in that followed the POST went straight on to it (§2).
  assert.ok(page.url().startsWith(`${cs}/c/`), page.url());
  assert.match(await page.textContent('body'), /UA23/);
  await page.screenshot({ path: join(shots, 'confirm-after-idp.png'), fullPage: true });
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);
  assert.match(await page.textContent('body'), /accept/i);
  const result = await pollResult(pack['result uri']);
  assert.equal(result.status, 'accepted');
  // The evidence names the CS account of the provider's user.
  const link = await page.getAttribute('a[href^="/history/"]', 'href');
  const doc = await (await page.request.get(`${cs}${link}`)).json();
  const header = JSON.parse(Buffer.from(doc.signatures[1].protected, 'base64url').toString());
  assert.match(header.sub, /^oidc-/);
  assert.deepEqual(header.amr, ['pwd']);
  await page.close();
});
