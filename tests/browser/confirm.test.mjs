// End to end in a real browser: the demo (CS + RS) runs as real processes, the
// agent invokes a tool, headless Chromium logs in as alice, reads the
// confirmation page, clicks Accept, and the test checks the RS outcome through
// the agent's result URI. The last test runs axe-core on the login,
// confirmation, outcome and history pages at 1280, 900 and 390 px and saves a
// screenshot of each under target/browser/ (e.g. history-390.png).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { continueIfAsked, freePort, launchChromium, pollResult, waitFor } from './support.mjs';

const root = resolve(import.meta.dirname, '..', '..');
const cheq = process.env.CHEQ_BIN || join(root, 'target', 'debug', 'cheq');
const password = 'correct horse battery staple';
const shots = join(root, 'target', 'browser');
// axe-core's source, evaluated in the page through the DevTools protocol: the
// pages' CSP (no inline script) stays on, so axe sees them as a person does.
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
mkdirSync(shots, { recursive: true });



const dataDir = mkdtempSync(join(tmpdir(), 'cheq-browser-'));
const [csPort, rsPort] = [await freePort(), await freePort()];
const demo = spawn(cheq, ['demo', '--data-dir', dataDir, '--cs-port', String(csPort), '--rs-port', String(rsPort)], {
  // Uncompressed databases, so that the scan of the CS's files for typed
  // values reads every stored byte in clear.
  env: { ...process.env, CHEQ_DEMO_PASSWORD: password, CHEQ_SLED_COMPRESSION: 'off' },
  stdio: ['ignore', 'pipe', 'pipe'],
});
let demoLog = '';
demo.stdout.on('data', (d) => { demoLog += d; });
demo.stderr.on('data', (d) => { demoLog += d; });
const browser = await launchChromium();

after(async () => {
  writeFileSync(join(shots, 'axe.json'), JSON.stringify(audits, null, 2));
  await browser.close();
  demo.kill('SIGTERM');
  rmSync(dataDir, { recursive: true, force: true });
});

const cs = `http://127.0.0.1:${csPort}`;
const rs = `http://127.0.0.1:${rsPort}`;

function agentTool(tool, ...params) {
  const out = execFileSync(cheq, ['agent', '--rs', rs, '--tool', tool, ...params.flatMap((p) => ['--param', p]), '--no-wait'], { encoding: 'utf8' });
  return JSON.parse(out.split('\n')[0]);
}

function agent(...params) {
  return agentTool('book_flight', ...params);
}

/** Every regular file under `dir`, recursively. */
function filesUnder(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) out.push(...filesUnder(path));
    else if (e.isFile()) out.push(path);
  }
  return out;
}

/** `value` as it is, and as it reads inside base64 or base64url text (a JWS
 * protected header is base64url), at each of the three alignments. */
function encodingsOf(value) {
  const forms = [value];
  const bytes = Buffer.from(value, 'utf8');
  for (let k = 0; k < 3; k++) {
    const padded = Buffer.concat([Buffer.alloc(k), bytes]);
    const from = Math.ceil((8 * k) / 6);
    const to = Math.floor((8 * padded.length) / 6);
    for (const enc of ['base64', 'base64url']) {
      forms.push(padded.toString(enc).slice(from, to));
    }
  }
  return [...new Set(forms)];
}

/** The files under `dir` that hold `value` (in clear or base64-encoded, also
 * inside the documents they keep packed, which `cheq unpack` gives back). */
function filesHolding(dir, value) {
  const forms = encodingsOf(value);
  return filesUnder(dir).filter((f) => {
    const bytes = readFileSync(f);
    const unpacked = execFileSync(cheq, ['unpack', f]);
    return forms.some((form) => bytes.includes(form) || unpacked.includes(form));
  });
}

async function signInIfAsked(page) {
  if (await page.$('input[name=password]')) {
    await page.fill('input[name=username]', 'alice');
    await page.fill('input[name=password]', password);
    await Promise.all([page.waitForNavigation(), page.click('button[type=submit], input[type=submit]')]);
    await continueIfAsked(page);
  }
}


/** What a user app does with a URI pack: POST the resource URI to the CS. */
async function openPack(page, pack) {
  await page.setContent(`<form method="post" action="${pack['confirmation uri']}">
    <input name="resource_uri" value="${pack['resource uri']}"><button id="go">Confirm</button></form>`);
  await Promise.all([page.waitForNavigation(), page.click('#go')]);
}

/** axe-core's violations on the page as it is now (the CSP stays on: the
 * source goes in through the DevTools protocol, not a <script> tag). */
async function axeViolations(page) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) {
    await page.evaluate(axeSource);
  }
  const { violations } = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  return violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    targets: v.nodes.map((n) => n.target.join(' ')),
  }));
}

/** The words (runs of non-space) inside `selector` that the layout broke
 * across two lines. */
function brokenWords(page, selector) {
  return page.evaluate((sel) => {
    const broken = [];
    for (const el of document.querySelectorAll(sel)) {
      const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        for (const m of n.data.matchAll(/\S+/g)) {
          const r = document.createRange();
          r.setStart(n, m.index);
          r.setEnd(n, m.index + m[0].length);
          const lines = new Set([...r.getClientRects()].filter((b) => b.width > 0).map((b) => Math.round(b.top)));
          if (lines.size > 1) broken.push(m[0]);
        }
      }
    }
    return broken;
  }, selector);
}

const audits = {};

/** Runs axe on the page as it is; fails on a serious or critical violation. */
async function audit(page, name) {
  const violations = await axeViolations(page);
  audits[name] = violations;
  for (const v of violations) console.log(`axe ${name}: ${v.impact} ${v.id} (${v.help}) at ${v.targets.join(', ')}`);
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad, [], `${name}: axe violations`);
}

/** At 1280, 900 and 390 px: axe finds nothing serious or critical, nothing is wider
 * than the screen, no word in `unbroken` is split, and a screenshot is saved. */
async function lookAt(page, name, unbroken) {
  for (const width of [1280, 900, 390]) {
    await page.setViewportSize({ width, height: width > 500 ? 900 : 844 });
    await page.screenshot({ path: join(shots, `${name}-${width}.png`), fullPage: true });
    await audit(page, `${name}-${width}`);
    const [scroll, client] = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
    assert.ok(scroll <= client, `${name} at ${width} px is ${scroll} px wide`);
    if (unbroken) assert.deepEqual(await brokenWords(page, unbroken), [], `${name} at ${width} px: words split across lines`);
  }
}

test('alice accepts a booking in Chromium and the RS runs it', async () => {
  await waitFor(`${cs}/healthz`).catch((e) => { throw new Error(`${e.message}\n${demoLog}`); });
  await waitFor(`${rs}/healthz`);
  const pack = agent('flight_number=UA23', 'flight_date=2026-12-08', 'cabin_class=BUSINESS', 'price_usd=1200');
  assert.match(pack['result uri'], /^http:\/\/127\.0\.0\.1/);

  const page = await browser.newPage();
  await openPack(page, pack);
  // Not logged in: the CS sends us through its login form, then back.
  await page.fill('input[name=username]', 'alice');
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForNavigation(), page.click('button[type=submit], input[type=submit]')]);
  // §2: the sign-in that followed the POST goes straight on to the page.
  assert.ok(new URL(page.url()).pathname.startsWith('/c/'), page.url());

  const text = await page.textContent('body');
  for (const fact of ['UA23', '2026-12-08', 'BUSINESS', '1200', rs]) {
    assert.ok(text.includes(fact), `the page shows ${fact}`);
  }
  assert.equal(await page.getAttribute('html', 'lang'), 'en');
  await page.screenshot({ path: join(shots, 'confirmation.png'), fullPage: true });

  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);
  await page.screenshot({ path: join(shots, 'outcome.png'), fullPage: true });
  const outcome = await page.textContent('body');
  assert.match(outcome, /accept/i);

  const result = await pollResult(pack['result uri']);
  assert.equal(result.status, 'accepted');
  await page.close();
});

test('alice rejects in Chromium and the RS reports rejected', async () => {
  const pack = agent('flight_number=UA99', 'flight_date=2026-12-09', 'cabin_class=ECONOMY', 'price_usd=450');
  const page = await browser.newPage();
  await openPack(page, pack);
  await signInIfAsked(page);
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=reject]')]);
  const result = await pollResult(pack['result uri']);
  assert.equal(result.status, 'rejected');
  await page.close();
});

test('alice types private values in Chromium; the CS keeps none of them', async () => {
  await waitFor(`${cs}/healthz`).catch((e) => { throw new Error(`${e.message}\n${demoLog}`); });
  const [from, to, amount] = ['12345678', '87654321', '250.00'];
  const pack = agentTool('transfer_funds', 'payee=ACME');
  const page = await browser.newPage();
  await openPack(page, pack);
  await signInIfAsked(page);

  const text = await page.textContent('body');
  assert.ok(text.includes('ACME'), 'the page shows the payee');
  const fromInput = page.getByLabel('from account');
  const toInput = page.getByLabel('to account');
  const amountInput = page.getByLabel('amount');
  assert.equal(await fromInput.getAttribute('type'), 'password');
  assert.equal(await toInput.getAttribute('type'), 'password');
  await fromInput.fill(from);
  await toInput.fill(to);
  await amountInput.fill(amount);
  await page.screenshot({ path: join(shots, 'private-values.png'), fullPage: true });
  await audit(page, 'private-values');
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);
  const outcome = await page.content();
  assert.match(outcome, /you chose to accept/i);
  for (const v of [from, to]) assert.ok(!outcome.includes(v), `the outcome page shows ${v}`);

  const result = await pollResult(pack['result uri']);
  assert.equal(result.status, 'accepted');
  const said = JSON.stringify(result);
  assert.ok(said.includes('DONE'), `the values reached the RS: ${said}`);
  for (const v of [from, to, amount]) assert.ok(!said.includes(v), `the result holds ${v}: ${said}`);

  // Give the database's periodic flush time, then read every file the CS has.
  await new Promise((ok) => setTimeout(ok, 1500));
  const csData = join(dataDir, 'cs');
  assert.ok(filesUnder(csData).length > 1, 'the CS data directory has files');
  for (const v of [from, to]) {
    assert.deepEqual(filesHolding(csData, v), [], `files under ${csData} hold ${v}`);
  }
  // Control: the scan reaches what the CS stored (the payee, not private, is
  // in the kept CHEQ payload, base64url-encoded).
  assert.notDeepEqual(filesHolding(csData, 'ACME'), [], 'the scan found not even the payee');
  await page.close();
});

test('the login, confirmation, outcome and history pages pass axe and fit a phone', async () => {
  await waitFor(`${cs}/healthz`).catch((e) => { throw new Error(`${e.message}\n${demoLog}`); });
  const pack = agent('flight_number=UA77', 'flight_date=2026-12-10', 'cabin_class=PREMIUM_ECONOMY', 'price_usd=890');
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  try {
    // Control: axe does run in a page under a CSP that forbids all script.
    await page.route('http://cheq.test/', (r) => r.fulfill({
      contentType: 'text/html',
      headers: { 'content-security-policy': "default-src 'none'" },
      body: '<!doctype html><html><title>x</title><body><img src="x.png"></body></html>',
    }));
    await page.goto('http://cheq.test/');
    assert.ok((await axeViolations(page)).some((v) => v.id === 'image-alt' && v.impact === 'critical'), 'axe runs');
    await page.unroute('http://cheq.test/');

    await openPack(page, pack);
    assert.ok(await page.$('input[name=password]'), 'a new context is asked to sign in');
    await lookAt(page, 'login');
    await signInIfAsked(page);

    const confirmation = page.url();
    // Not the confirmation page: say which page it is, and what the demo said.
    if (!(await page.$('.expires-in'))) {
      const body = (await page.textContent('body')).replace(/\s+/g, ' ').trim();
      throw new Error(`after signing in, ${confirmation} is not the confirmation page: ${body.slice(0, 600)}\n${demoLog.slice(-3000)}`);
    }
    assert.match(await page.textContent('.expires-in'), /^in (\d+ minutes?|less than a minute)$/);
    assert.match(await page.textContent('.facts'), /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(UTC\)/);
    await lookAt(page, 'confirmation', '.facts dt, .facts dd time');

    await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);
    assert.equal((await page.textContent('h1')).trim(), 'You accepted “Book a flight”.');
    await lookAt(page, 'outcome', '.facts dt, .facts dd');

    await page.goto(confirmation);
    assert.equal((await page.textContent('h1')).trim(), 'You already decided this request: you accepted “Book a flight”.');
    await lookAt(page, 'outcome-again', '.facts dt, .facts dd');

    await page.goto(`${cs}/history`);
    assert.ok((await page.$$('table.history tbody tr')).length >= 1);
    await lookAt(page, 'history', 'table.history th, table.history td');
  } finally {
    await context.close();
  }
});
