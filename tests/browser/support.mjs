// What the browser tests share: a free loopback port, waiting for a server,
// polling the agent's result URI, and Debian's headless Chromium.
import net from 'node:net';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export function freePort() {
  return new Promise((ok, fail) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => ok(port)); });
    s.on('error', fail);
  });
}

/** Waits until `url` answers 2xx; `log()` is shown if it never does. */
export async function waitFor(url, ms = 60000, log = () => '') {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { if ((await fetch(url)).ok) return; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} did not come up within ${ms} ms\n${log()}`);
}

/** The agent's result (§7) once it is final. */
export async function pollResult(uri, ms = 30000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const r = await fetch(uri);
    const body = await r.json();
    if (r.status === 200) return body;
    await new Promise((ok) => setTimeout(ok, 250));
  }
  throw new Error('no result in time');
}

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** PROTOCOL.md §11: after sign-in the start link shows one button that
 * names who asks (a GET starts nothing); the user's click on Continue starts
 * it. A sign-in that followed the user's own POST (§2) is already on the
 * confirmation page, and nothing is asked. */
export async function continueIfAsked(page) {
  if (await page.$('form#start input[name=resource_uri][type=hidden]')) {
    const value = await page.getAttribute('form#start input[name=resource_uri]', 'value');
    if (!value) throw new Error('the start form carries no resource URI');
    const asker = await page.textContent('p .origin');
    if (!asker) throw new Error('the start page does not say who asks');
    await Promise.all([page.waitForNavigation(), page.click('form#start button[type=submit]')]);
  }
}

/** Runs `cheq demo ARGS…` in a new data directory and closes `browser`,
 * stops the demo and removes the directory after the tests (node:test's
 * `after`). Returns the directory and the demo's output so far. */
export function startDemo({ cheq, args, env, after, browser, prefix }) {
  const dataDir = mkdtempSync(join(tmpdir(), prefix || 'cheq-browser-'));
  const demo = spawn(cheq, ['demo', '--data-dir', dataDir, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  demo.stdout.on('data', (d) => { log += d; });
  demo.stderr.on('data', (d) => { log += d; });
  after(async () => {
    await browser.close();
    demo.kill('SIGTERM');
    rmSync(dataDir, { recursive: true, force: true });
  });
  return { dataDir, log: () => log };
}
