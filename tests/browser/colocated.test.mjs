// The confirmation inside the resource server (PROTOCOL.md §12) in a real
// browser: `cheq demo --colocated` runs one process on one port; the agent
// (`cheq agent`) gets a URI pack whose confirmation URI is the RS's own;
// headless Chromium opens the start link, signs in as alice at the RS, reads
// the page under its strict CSP, clicks Accept; the agent's result URI then
// says accepted. A second booking is rejected in the same session.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { continueIfAsked, freePort, launchChromium, pollResult, startDemo, waitFor } from './support.mjs';

const root = resolve(import.meta.dirname, '..', '..');
const cheq = process.env.CHEQ_BIN || join(root, 'target', 'debug', 'cheq');
const password = 'correct horse battery staple';

const rsPort = await freePort();
const browser = await launchChromium();
const demo = startDemo({
  cheq, after, browser, prefix: 'cheq-colocated-',
  args: ['--colocated', '--rs-port', String(rsPort)],
  env: { CHEQ_DEMO_PASSWORD: password },
});

const rs = `http://127.0.0.1:${rsPort}`;

/** `cheq agent … --no-wait`: its first line is the URI pack; the start link
 * (§11) is made from it as a user app makes it. */
function book(price) {
  const out = execFileSync(cheq, ['agent', '--rs', rs, '--tool', 'book_flight',
    '--param', 'flight_number=UA23', '--param', 'flight_date=2026-12-08',
    '--param', 'cabin_class=BUSINESS', '--param', `price_usd=${price}`, '--no-wait'], { encoding: 'utf8' });
  const pack = JSON.parse(out.split('\n')[0]);
  const link = `${pack['confirmation uri']}?resource_uri=${encodeURIComponent(pack['resource uri'])}`;
  return { pack, link };
}

test('alice confirms at the resource server itself, in Chromium', async () => {
  await waitFor(`${rs}/healthz`).catch((e) => { throw new Error(`${e.message}\n${demo.log()}`); });
  const { pack, link } = book(1200);
  assert.equal(pack['confirmation uri'], `${rs}/confirm`);
  assert.ok(link && link.startsWith(`${rs}/confirm?resource_uri=`), link);

  const page = await browser.newPage();
  const blocked = [];
  page.on('console', (m) => { if (/Content.Security.Policy/i.test(m.text())) blocked.push(m.text()); });
  await page.goto(link);
  // Not signed in: the RS's own login form.
  assert.equal(new URL(page.url()).origin, rs);
  await page.fill('input[name=username]', 'alice');
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForNavigation(), page.click('button[type=submit], input[type=submit]')]);
  await continueIfAsked(page);
  assert.ok(new URL(page.url()).pathname.startsWith('/c/'), page.url());
  const text = await page.textContent('body');
  for (const fact of ['UA23', '2026-12-08', 'BUSINESS', '1200']) {
    assert.ok(text.includes(fact), `the page shows ${fact}`);
  }
  const csp = (await page.request.get(page.url())).headers()['content-security-policy'];
  assert.match(csp, /default-src 'none'/);
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);
  assert.match(await page.textContent('body'), /accept/i);
  const result = await pollResult(pack['result uri']);
  assert.equal(result.status, 'accepted', JSON.stringify(result));

  // A second one, rejected in the same session: no sign-in asked.
  const second = book(1500);
  await page.goto(second.link);
  await continueIfAsked(page);
  assert.ok(new URL(page.url()).pathname.startsWith('/c/'), page.url());
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=reject]')]);
  const rejected = await pollResult(second.pack['result uri']);
  assert.equal(rejected.status, 'rejected', JSON.stringify(rejected));
  assert.deepEqual(blocked, [], 'nothing on the pages was blocked by the CSP');
});
