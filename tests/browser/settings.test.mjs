// Each user's host and rules (PROTOCOL.md §17) in a real browser, on
// `cheq demo --two-hosts`: alice opens the RS's /settings page, asks to
// move to the second host; Chromium is sent on to the host she has now,
// signs in there, reads the change (the new host's origin and name) and
// accepts; her agent's next booking is then confirmed at the second host.
// The page showed nothing about her before the accept.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { continueIfAsked, freePort, launchChromium, pollResult, startDemo, waitFor } from './support.mjs';

const root = resolve(import.meta.dirname, '..', '..');
const cheq = process.env.CHEQ_BIN || join(root, 'target', 'debug', 'cheq');
const password = 'correct horse battery staple';

const [csPort, rsPort, cs2Port] = [await freePort(), await freePort(), await freePort()];
const browser = await launchChromium();
const demo = startDemo({
  cheq, after, browser, prefix: 'cheq-settings-',
  args: ['--two-hosts', '--cs-port', String(csPort), '--rs-port', String(rsPort),
    '--cs2-port', String(cs2Port)],
  env: { CHEQ_DEMO_PASSWORD: password },
});

const cs1 = `http://127.0.0.1:${csPort}`;
const cs2 = `http://127.0.0.1:${cs2Port}`;
const rs = `http://127.0.0.1:${rsPort}`;

/** The agent's booking, not waited for: its URI pack. */
function book() {
  const out = execFileSync(cheq, ['agent', '--rs', rs, '--tool', 'book_flight',
    '--param', 'flight_number=UA23', '--param', 'flight_date=2026-12-08',
    '--param', 'cabin_class=BUSINESS', '--param', 'price_usd=1200', '--no-wait'], { encoding: 'utf8' });
  return JSON.parse(out.split('\n')[0]);
}

test('alice moves to the second host from the settings page, confirmed where she was', async () => {
  for (const url of [cs1, cs2, rs]) {
    await waitFor(`${url}/healthz`).catch((e) => { throw new Error(`${e.message}\n${demo.log()}`); });
  }
  assert.equal(new URL(book()['confirmation uri']).origin, cs1);

  const page = await browser.newPage();
  await page.goto(`${rs}/settings`);
  const before = await page.textContent('body');
  assert.ok(!before.includes(cs1) && !before.includes('alice'), 'the page shows no one’s settings');
  await page.fill('#cs-name', 'alice');
  await page.fill('#cs-origin', cs2);
  await Promise.all([page.waitForNavigation(), page.click('form[action="/settings/server"] button')]);
  // Sent on to the host alice has now: not signed in there, its login.
  assert.equal(new URL(page.url()).origin, cs1, page.url());
  await page.fill('input[name=username]', 'alice');
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForNavigation(), page.click('button[type=submit], input[type=submit]')]);
  await continueIfAsked(page);
  assert.ok(new URL(page.url()).pathname.startsWith('/c/'), page.url());
  const text = await page.textContent('body');
  assert.ok(text.includes('Change your confirmation server'), text);
  assert.ok(text.includes(cs2) && text.includes('Second demo host'), 'the page names the new host');
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);

  // In force: the next booking is confirmed at the second host.
  let pack;
  const end = Date.now() + 30000;
  do {
    pack = book();
    if (new URL(pack['confirmation uri']).origin === cs2) break;
    await new Promise((r) => setTimeout(r, 300));
  } while (Date.now() < end);
  assert.equal(new URL(pack['confirmation uri']).origin, cs2, demo.log());

  // alice confirms it there (her account on the second host).
  await page.goto(`${pack['confirmation uri']}?resource_uri=${encodeURIComponent(pack['resource uri'])}`);
  await page.fill('input[name=username]', 'alice');
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForNavigation(), page.click('button[type=submit], input[type=submit]')]);
  await continueIfAsked(page);
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);
  const result = await pollResult(pack['result uri']);
  assert.equal(result.status, 'accepted', JSON.stringify(result));
});
