// MCP clients the project did not write, against `cheq demo` and `cheq mcp`
// as real processes, with the user's confirmation done in headless Chromium
// (PROTOCOL.md §11):
// - the official Python SDK (`mcp`, tests/mcp/client.py) at 2026-07-28: the
//   elicitation URL is opened in Chromium, alice signs in, continues and
//   accepts; the SDK's retry gets the RS's result;
// - the official TypeScript SDK (`@modelcontextprotocol/sdk`, which speaks
//   2025-11-25): URLElicitationRequiredError, the same in Chromium, then
//   notifications/elicitation/complete and the retried call's result.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { continueIfAsked, freePort, launchChromium, waitFor } from './support.mjs';

const root = resolve(import.meta.dirname, '..', '..');
const sdk = join(root, 'tests', 'mcp', 'node_modules', '@modelcontextprotocol', 'sdk', 'dist', 'esm');
const { Client } = await import(join(sdk, 'client', 'index.js'));
const { StreamableHTTPClientTransport } = await import(join(sdk, 'client', 'streamableHttp.js'));
const { ElicitationCompleteNotificationSchema } = await import(join(sdk, 'types.js'));

const cheq = process.env.CHEQ_BIN || join(root, 'target', 'debug', 'cheq');
const password = 'correct horse battery staple';
const dataDir = mkdtempSync(join(tmpdir(), 'cheq-mcp-browser-'));
const [csPort, rsPort, mcpPort] = [await freePort(), await freePort(), await freePort()];
let log = '';
const keep = (p) => { p.stdout.on('data', (d) => { log += d; }); p.stderr.on('data', (d) => { log += d; }); return p; };
const demo = keep(spawn(cheq, ['demo', '--data-dir', dataDir, '--cs-port', String(csPort), '--rs-port', String(rsPort)], {
  env: { ...process.env, CHEQ_DEMO_PASSWORD: password }, stdio: ['ignore', 'pipe', 'pipe'],
}));
const cs = `http://127.0.0.1:${csPort}`;
const rs = `http://127.0.0.1:${rsPort}`;
await waitFor(`${cs}/healthz`, 60000, () => log);
await waitFor(`${rs}/healthz`, 60000, () => log);
// The demo says how to connect an MCP client to it.
assert.ok(log.includes(`cheq mcp --rs ${rs} --listen 127.0.0.1:8090`), log);
assert.ok(log.includes(`cheq mcp --rs ${rs} --stdio`), log);
const bridge = keep(spawn(cheq, ['mcp', '--rs', rs, '--listen', `127.0.0.1:${mcpPort}`], { stdio: ['ignore', 'pipe', 'pipe'] }));
const mcpUrl = `http://127.0.0.1:${mcpPort}/mcp`;
for (let i = 0; i < 100 && !log.includes('MCP endpoint'); i++) await new Promise((r) => setTimeout(r, 100));
assert.ok(log.includes(`MCP endpoint: ${mcpUrl}`), log);
const browser = await launchChromium();

after(async () => {
  await browser.close();
  bridge.kill('SIGTERM');
  demo.kill('SIGTERM');
  rmSync(dataDir, { recursive: true, force: true });
});

const flight = { flight_number: 'UA23', flight_date: '2026-12-08', cabin_class: 'BUSINESS', price_usd: 1200 };

/** What the user does with the elicitation URL: opens it, signs in as
 * alice, continues, accepts. */
async function acceptInChromium(url) {
  assert.ok(url.startsWith(`${cs}/?resource_uri=`), url);
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(url);
  assert.match(page.url(), /\/login\?/);
  await page.fill('input[name=username]', 'alice');
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForNavigation(), page.click('button[type=submit], input[type=submit]')]);
  await continueIfAsked(page);
  assert.match(page.url(), /\/c\//, await page.textContent('body'));
  assert.match(await page.textContent('body'), /UA23/);
  await Promise.all([page.waitForNavigation(), page.click('button[name=decision][value=accept]')]);
  assert.match(await page.textContent('h1'), /accepted/);
  await context.close();
}

test('the Python SDK at 2026-07-28: elicitation, confirmation in Chromium, result', async () => {
  const py = spawn('python3', [join(root, 'tests', 'mcp', 'client.py'), mcpUrl, '2026-07-28'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: py.stdout })[Symbol.asyncIterator]();
  const next = async () => {
    for (;;) {
      const { value, done } = await lines.next();
      if (done) throw new Error('the client ended');
      const event = JSON.parse(value);
      if (event.event !== 'message') return event;
    }
  };
  try {
    assert.equal((await next()).event, 'ready');
    py.stdin.write(`${JSON.stringify({ op: 'call', tool: 'book_flight', args: flight })}\n`);
    let event = await next();
    assert.equal(event.event, 'elicit', JSON.stringify(event));
    const { url } = event.params;
    await acceptInChromium(url);
    py.stdin.write(`${JSON.stringify({ action: 'accept' })}\n`);
    for (;;) {
      event = await next();
      if (event.event !== 'elicit') break;
      assert.equal(event.params.url, url, 'asked again with the same URL');
      await new Promise((r) => setTimeout(r, 100));
      py.stdin.write(`${JSON.stringify({ action: 'accept' })}\n`);
    }
    assert.equal(event.event, 'result', JSON.stringify(event));
    assert.equal(event.result.structuredContent.status, 'accepted', JSON.stringify(event));
  } finally {
    py.kill();
  }
});

test('the TypeScript SDK at 2025-11-25: -32042, confirmation in Chromium, elicitation/complete, result', async () => {
  const client = new Client({ name: 'cheq-ts-test', version: '1.0.0' }, { capabilities: { elicitation: { url: {} } } });
  const completed = new Set();
  client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => { completed.add(n.params.elicitationId); });
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl)));
  try {
    assert.equal(client.getServerVersion().name, 'cheq-mcp');
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name), ['book_flight', 'choose_confirmation_server',
      'confirmation_status', 'set_confirmation_policy', 'transfer_funds']);

    let error;
    try { await client.callTool({ name: 'book_flight', arguments: flight }); } catch (e) { error = e; }
    assert.equal(error?.code, -32042, String(error));
    const [elicitation] = error.data.elicitations;
    assert.equal(elicitation.mode, 'url');
    assert.equal(elicitation.message, `Confirm 'book_flight' at ${cs}`);
    await acceptInChromium(elicitation.url);
    const end = Date.now() + 30000;
    while (!completed.has(elicitation.elicitationId)) {
      assert.ok(Date.now() < end, 'notifications/elicitation/complete arrives');
      await new Promise((r) => setTimeout(r, 100));
    }
    const result = await client.callTool({ name: 'book_flight', arguments: flight });
    assert.equal(result.isError, false, JSON.stringify(result));
    assert.equal(result.structuredContent.status, 'accepted', JSON.stringify(result));
  } finally {
    await client.close();
  }
});
